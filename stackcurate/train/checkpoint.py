"""Sharded checkpoints (`--checkpoint-format sharded`): each rank writes its own shards of the weights and the
optimizer state with `torch.distributed.checkpoint` (DCP), in parallel, never gathering the model on one rank;
`stackcurate export` (or `load`) turns one into an HF folder that `from_pretrained` reads.

A sharded `checkpoint-<step>/` holds `dcp/` (DCP's files: `.metadata` and a `.distcp` per rank), the model's
`config.json`, the tokenizer and `trainer.pt` (the step, data position, scheduler, RNG states and settings:
everything but the optimizer, which is in `dcp/`). DCP reshards on load: a run resumes on another number of
ranks' worth of shards as well (the trainer still refuses another world size: the data position would mean
other samples).
"""

import shutil
from pathlib import Path
from typing import Any

from stackcurate.core.errors import StackcurateError

FOLDER = "dcp"


def is_sharded(checkpoint: str | Path) -> bool:
    return (Path(checkpoint) / FOLDER / ".metadata").is_file()


def save(net: Any, optimizer: Any, folder: Path) -> None:
    """Every rank's shards of the model and optimizer into `folder/dcp` (a collective: every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    weights, optimizer_state = get_state_dict(net, optimizer)
    dcp_save({"model": weights, "optimizer": optimizer_state}, checkpoint_id=str(folder / FOLDER))


def load(net: Any, optimizer: Any, folder: Path) -> None:
    """`folder/dcp` into `net` and `optimizer`, each rank reading the pieces of its own shards."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    weights, optimizer_state = get_state_dict(net, optimizer)
    state = {"model": weights, "optimizer": optimizer_state}
    dcp_load(state, checkpoint_id=str(folder / FOLDER))
    set_state_dict(net, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def model(checkpoint: str | Path) -> Any:
    """The model of a checkpoint, HF or sharded, whole in this process (on CPU)."""
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    path = Path(checkpoint)
    if not is_sharded(path):
        return Starcoder2ForCausalLM.from_pretrained(path)
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    from stackcurate.train import model as models

    net = models.build(Starcoder2Config.from_pretrained(path))
    weights = net.state_dict()
    dcp_load({"model": weights}, checkpoint_id=str(path / FOLDER), no_dist=True)  # one process reads all shards
    net.load_state_dict(weights)
    return net


def export(checkpoint: str | Path, out: str | Path) -> Path:
    """A sharded checkpoint as an HF folder: weights in safetensors, config, tokenizer."""
    source, target = Path(checkpoint), Path(out)
    if not (source / "config.json").is_file():
        raise StackcurateError(f"{source} is not a checkpoint folder (no config.json); pass checkpoint-<step>")
    if target.resolve() == source.resolve():
        raise StackcurateError("export: --out must be another folder than the checkpoint")
    net = model(source)
    target.mkdir(parents=True, exist_ok=True)
    net.save_pretrained(target)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (source / name).exists():
            shutil.copy(source / name, target / name)
    return target

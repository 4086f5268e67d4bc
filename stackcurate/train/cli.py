"""`stackcurate train` and `stackcurate generate` (also `python -m stackcurate.train.cli ...` under torchrun).

Kept apart from `stackcurate/cli.py`, which imports every stage: this one needs torch, numpy and transformers.
"""

import argparse
import dataclasses
import os
import re
import sys
import time
from typing import Any

from stackcurate.core import log
from stackcurate.core.config import add_flags, build_config, flag_values
from stackcurate.core.errors import exit_code
from stackcurate.train import loop

TRAIN = """Train a StarCoder2-style model on the tokenize stage's Megatron shards, on a GPU if there is one.

Rerunning the same command resumes from the last checkpoint in --out; a rerun with settings that change the
result is refused (--overwrite starts anew). Ends with the loss curve: the training loss and the loss on the
held-out tokens.

    stackcurate train --data work/demo/megatron --out work/demo/train --steps 300
    torchrun --nproc-per-node 8 -m stackcurate.train.cli train --data ... --out ... --preset 125m
"""
GENERATE = r"""Complete code with a checkpoint of `stackcurate train`, or fill in the middle with --suffix.

Prints the prompt, what the model wrote, then the suffix if any. In --prompt and --suffix, \n, \t, \r and \\
stand for a newline, a tab, a carriage return and a backslash (the shell passes them literally); everything
else, non-ASCII text included, is taken as it is.

    stackcurate generate work/demo/train/checkpoint-300 --prompt "def main():\n    "
    stackcurate generate work/demo/train/checkpoint-300 --prompt "def f(x):\n    " --suffix "\n    return y\n"
"""
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


EXPORT = """\
Write a checkpoint of `stackcurate train` as an HF folder (model.safetensors, config.json, the tokenizer) that
transformers' from_pretrained, bigcode-evaluation-harness and vLLM read. A sharded checkpoint
(--checkpoint-format sharded: each rank's shards, torch.distributed.checkpoint) is read whole here.

examples:
  stackcurate export work/run/train/checkpoint-20000 --out work/run/hf-20000
"""


def unescape(text: str) -> str:
    """`text` with the escapes of ESCAPES replaced, and nothing else touched (unlike `unicode_escape`, which
    reads the UTF-8 bytes of non-ASCII characters back as Latin-1)."""
    return re.sub(r"\\([ntr\\])", lambda m: ESCAPES[m.group(1)], text)


def parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    top = argparse.ArgumentParser(prog="stackcurate", description=__doc__, allow_abbrev=False)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # "resolve": the required flags below take --data and --out over from add_flags' optional ones
    t = sub.add_parser(
        "train", help="train a StarCoder2-style model on Megatron shards (resumes)", description=TRAIN,
        formatter_class=raw, allow_abbrev=False, conflict_handler="resolve",
    )  # fmt: skip
    add_flags(t, loop.TrainConfig)
    required = t.add_argument_group("required")
    for name in ("data", "out"):
        help_text = next(f.metadata["help"] for f in dataclasses.fields(loop.TrainConfig) if f.name == name)
        required.add_argument(f"--{name}", dest=name, required=True, metavar=name.upper(), help=help_text)
    t.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="no progress bar")
    t.add_argument(
        "--progress", dest="progress", action="store_true", default=None,
        help="a progress bar even where stderr is not a terminal (default: only on a terminal)",
    )  # fmt: skip
    t.add_argument(
        "--ray-workers", type=int, default=0,
        help="run on Ray through Ray Train with this many workers (needs ray[train])",
    )  # fmt: skip
    t.add_argument(
        "--ray-address", default=None,
        help="the Ray cluster to join (host:port, or auto); default RAY_ADDRESS, else a private local Ray",
    )  # fmt: skip
    g = sub.add_parser(
        "generate", help="complete code (or fill in the middle) with a checkpoint", description=GENERATE,
        formatter_class=raw, allow_abbrev=False,
    )  # fmt: skip
    g.add_argument("checkpoint", help="a checkpoint-<step> folder of a train run")
    g.add_argument("--prompt", required=True, help=r"the code before the cursor (\n, \t: newline, tab)")
    g.add_argument("--suffix", default=None, help="the code after the cursor: fill-in-the-middle (default: none)")
    g.add_argument("--max-new-tokens", type=int, default=64, help="most tokens to write (default: 64)")
    g.add_argument(
        "--temperature", type=float, default=0.0, help="0: greedy, the likeliest token each time; above: sampled"
    )
    g.add_argument("--top-k", type=int, default=0, help="sample among the k likeliest tokens only (default: 0, all)")
    g.add_argument("--seed", type=int, default=0, help="seed of the sampling (default: 0)")
    x = sub.add_parser(
        "export", help="a checkpoint (sharded or not) as an HF folder that from_pretrained reads",
        description=EXPORT, formatter_class=raw, allow_abbrev=False,
    )  # fmt: skip
    x.add_argument("checkpoint", help="a checkpoint-<step> folder of a train run")
    x.add_argument("--out", required=True, help="the HF folder to write (weights, config, tokenizer)")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    log.setup()
    return exit_code(lambda: _run(args), "rerun the same command to resume from the last checkpoint")


def _run(args: argparse.Namespace) -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no bar per checkpoint written or loaded: the loop has its own
    if args.command == "train":
        if args.progress is None:  # in a log file a bar's redraws run together into lines of many KB
            args.progress = sys.stderr.isatty()
        cfg = build_config(loop.TrainConfig, flag_values(args, loop.TrainConfig))
        started = time.perf_counter()
        if args.ray_workers:
            rows = loop.train_on_ray(cfg, args.ray_workers, address=args.ray_address, progress=args.progress)
        else:
            rows = loop.train(cfg, progress=args.progress)
        if int(os.environ.get("RANK", 0)) == 0:  # under torchrun, one summary
            _summary(cfg, rows, time.perf_counter() - started)
        return
    if args.command == "export":
        from stackcurate.train import checkpoint

        print(f"export: {checkpoint.export(args.checkpoint, args.out)}")
        return
    from stackcurate.train import generate

    net, tokenizer = generate.load(args.checkpoint)
    prompt = unescape(args.prompt)
    suffix = unescape(args.suffix) if args.suffix is not None else None
    text = generate.complete(
        net, tokenizer, prompt, suffix=suffix, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k, seed=args.seed,
    )  # fmt: skip
    print(prompt + text + (suffix or ""))


def _summary(cfg: loop.TrainConfig, rows: list[dict[str, Any]], seconds: float) -> None:
    """What this call did, then the run's loss curve (a resumed run's from its first step)."""
    run = loop.read_metrics(cfg.out)
    trained = [r for r in rows if r["loss"] is not None]
    if trained:
        speed = len(trained) / sum(1 / r["tokens_per_s"] for r in trained)  # steps of equal tokens: harmonic mean
        mfu = f", MFU {trained[-1]['mfu']:.1%}" if trained[-1]["mfu"] else ""
        print(f"train: steps {trained[0]['step']}-{trained[-1]['step']} in {seconds:.0f} s, {speed:,.0f} tokens/s"
              f"{mfu}; checkpoints in {cfg.out}")  # fmt: skip
    else:
        step = max((r["step"] for r in run), default=0)
        print(f"train: {cfg.out} already holds step {step}; nothing to train")
    for line in loop.curve(run):
        print(line)
    scores: dict[str, list[str]] = {}
    for row in loop.read_evals(cfg.out):  # --eval: pass@1 of each checkpoint
        value = "-" if row["pass@1"] is None else f"{row['pass@1']:.3f}"
        scores.setdefault(row["benchmark"], []).append(f"{row['step']} {value}")
    for benchmark, values in scores.items():
        print(f"{benchmark} pass@1 by step: {', '.join(values)}")


if __name__ == "__main__":
    sys.exit(main())

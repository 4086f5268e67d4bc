"""`stackcurate train` and `stackcurate generate` (also `python -m stackcurate.train.cli ...` under torchrun).

Kept apart from `stackcurate/cli.py`, which imports every stage: this one needs torch, numpy and transformers.
"""

import argparse
import sys

from stackcurate.core.config import add_flags, build_config, flag_values
from stackcurate.core.errors import exit_code


def parser() -> argparse.ArgumentParser:
    from stackcurate.train import loop

    top = argparse.ArgumentParser(prog="stackcurate", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    t = sub.add_parser("train", help="train a StarCoder2-style model on Megatron shards (resumes)")
    add_flags(t, loop.TrainConfig)
    t.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    t.add_argument(
        "--ray-workers", type=int, default=0,
        help="run on Ray through Ray Train with this many workers (needs ray[train])",
    )  # fmt: skip
    t.add_argument(
        "--ray-address", default=None,
        help="the Ray cluster to join (host:port, or auto); default RAY_ADDRESS, else a private local Ray",
    )  # fmt: skip
    g = sub.add_parser("generate", help="complete code (or fill in the middle) with a checkpoint")
    g.add_argument("checkpoint", help="a checkpoint-<step> folder of a train run")
    g.add_argument("--prompt", required=True, help="the code before the cursor")
    g.add_argument("--suffix", default=None, help="the code after the cursor: fill-in-the-middle")
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    g.add_argument("--seed", type=int, default=0)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return exit_code(lambda: _run(args), "rerun the same command to resume from the last checkpoint")


def _run(args: argparse.Namespace) -> None:
    if args.command == "train":
        from stackcurate.train import loop

        cfg = build_config(loop.TrainConfig, flag_values(args, loop.TrainConfig))
        if args.ray_workers:
            rows = loop.train_on_ray(cfg, args.ray_workers, address=args.ray_address, progress=args.progress)
        else:
            rows = loop.train(cfg, progress=args.progress)
        if rows:
            last = rows[-1]
            mfu = f", MFU {last['mfu']:.1%}" if last["mfu"] else ""
            print(f"train: step {last['step']}, loss {last['loss']:.4f}, {last['tokens_per_s']:.0f} tokens/s"
                  f"{mfu}; checkpoints in {cfg.out}")  # fmt: skip
        return
    from stackcurate.train import generate

    net, tokenizer = generate.load(args.checkpoint)
    text = generate.complete(
        net, tokenizer, args.prompt.encode().decode("unicode_escape"),
        suffix=args.suffix.encode().decode("unicode_escape") if args.suffix is not None else None,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
    )  # fmt: skip
    print(text)


if __name__ == "__main__":
    sys.exit(main())

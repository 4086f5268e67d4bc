"""Trainer throughput: tokens/s and MFU of `stackcurate train` for one preset, on the device it finds.

The GPU target (issue 7) is the 125M preset at sequence length 2048 on one H100: at least 400K tokens/s and
40% MFU (llm.c trains GPT-2 124M at ~460K tokens/s per H100; Fast-LLM reports 294K for SmolLM2-135M). On a
machine without a GPU it runs on CPU, where MFU is not defined (no peak to divide by) and tokens/s is given.

It trains on the Megatron shards of a run (the demo's by default), skips the first `--skip` steps (start-up,
compilation, allocator warm-up) and reports the median tokens/s and MFU over the rest, from the loop's own
per-step timing (`metrics.csv`), with the FLOPs formula of `stackcurate/train/model.py`.

    python benchmarks/train_throughput.py --preset 125m --seq-len 2048 --micro-batch 16 --steps 40 --compile
    python benchmarks/train_throughput.py --preset tiny --seq-len 256 --micro-batch 8 --steps 30   # CPU

Writes benchmarks/results/train_throughput_<device>_<preset>.json.
"""

import argparse
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

import numpy as np

from stackcurate.train import loop, model

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(ROOT / "work" / "demo" / "megatron"))
    parser.add_argument("--preset", default="125m")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=10, help="first steps left out of the figures")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    import torch

    out = Path(tempfile.mkdtemp(prefix="train-bench-"))
    cfg = loop.TrainConfig(
        data=args.data, out=str(out), preset=args.preset, seq_len=args.seq_len, micro_batch=args.micro_batch,
        steps=args.steps, warmup=5, eval_every=10**9, save_every=10**9, held_out=0.0, compile=args.compile,
        device=args.device,
    )  # fmt: skip
    try:
        rows = loop.train(cfg, progress=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    measured = rows[args.skip :] or rows
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() and args.device != "cpu" else "cpu"
    net_cfg = model.config(args.preset, 49_152, args.seq_len, {})
    mfu = [r["mfu"] for r in measured if r["mfu"] is not None]
    report = {
        "device": device,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
        "preset": args.preset,
        "seq_len": args.seq_len,
        "micro_batch": args.micro_batch,
        "compile": args.compile,
        "steps_measured": len(measured),
        "tokens_per_s": round(float(np.median([r["tokens_per_s"] for r in measured]))),
        "mfu": round(float(np.median(mfu)), 4) if mfu else None,
        "gflops_per_token": round(model.flops_per_token(net_cfg, args.seq_len) / 1e9, 3),
        "first_loss": rows[0]["loss"],
        "last_loss": rows[-1]["loss"],
    }
    name = "cpu" if device == "cpu" else device.replace(" ", "_")
    path = ROOT / "benchmarks" / "results" / f"train_throughput_{name}_{args.preset}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

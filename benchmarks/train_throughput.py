"""Trainer throughput: tokens/s per device and MFU of `stackcurate train`, as a table over presets, compilation
and packed-document masking, on the device it finds.

Targets (issues 7 and 34): the 125M preset at 2,048 tokens on one H100 at least 400K tokens/s and 40% MFU
(llm.c: ~460K/H100); `starcoder2-3b` at 4,096 tokens at least the seeds' 10,000 tokens/s per A100-80GB scaled
to the device's bf16 peak (H100: 989/312 = 3.2x, so 31,700 tokens/s). On a machine without a GPU it runs the
small presets on CPU, where MFU is not defined (no peak to divide by) and tokens/s is given.

Each configuration trains in a process of its own (its memory returned between rows) on the Megatron shards
of a run (the demo's by default), leaves out the first `--skip` steps (start-up, compilation, allocator
warm-up) and reports the median tokens/s and MFU of the rest from the loop's own per-step timing
(`metrics.csv`), with the FLOPs formula of `stackcurate/train/model.py` (masked attention counted whole), and
the peak GPU memory.

    python benchmarks/train_throughput.py                                  # GPU: 125m, 350m, starcoder2-3b
    python benchmarks/train_throughput.py --presets tiny small --seq-len 256 --micro-batch 8   # CPU

Writes benchmarks/results/train_throughput_<device>.json (a row per configuration).
"""

import argparse
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# per preset on one GPU: micro-batch and activation checkpointing that fit 80 GB at 4,096 tokens (3B: its
# weights, gradients and AdamW state alone take 48 GB in fp32)
GPU_SETTINGS = {"125m": (8, 0), "350m": (8, 0), "starcoder2-3b": (1, 1)}


def one(spec: dict) -> dict:
    """Train one configuration here; its figures."""
    import torch

    from stackcurate.train import loop, model

    out = Path(tempfile.mkdtemp(prefix="train-bench-"))
    cfg = loop.TrainConfig(
        data=spec["data"], out=str(out), preset=spec["preset"], seq_len=spec["seq_len"],
        micro_batch=spec["micro_batch"], steps=spec["steps"], warmup=5, eval_every=10**9, save_every=10**9,
        held_out=0.0, compile=spec["compile"], cross_document_attention=not spec["masking"],
        activation_checkpointing=spec["checkpointing"], device=spec["device"],
    )  # fmt: skip
    try:
        rows = loop.train(cfg, progress=False)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    measured = [r for r in rows if r["tokens_per_s"]][spec["skip"] :] or [r for r in rows if r["tokens_per_s"]]
    gpu = torch.cuda.is_available() and spec["device"] != "cpu"
    mfu = [r["mfu"] for r in measured if r["mfu"] is not None]
    net_cfg = model.config(spec["preset"], 4096, spec["seq_len"], {})
    return {
        **{k: spec[k] for k in ("preset", "seq_len", "micro_batch", "compile", "masking", "checkpointing")},
        "tokens_per_s": round(float(np.median([r["tokens_per_s"] for r in measured]))),
        "mfu": round(float(np.median(mfu)), 4) if mfu else None,
        "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 1) if gpu else None,
        "gflops_per_token": round(model.flops_per_token(net_cfg, spec["seq_len"]) / 1e9, 3),
        "steps_measured": len(measured),
        "last_loss": rows[-1]["loss"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(ROOT / "work" / "demo" / "megatron"))
    parser.add_argument(
        "--presets", nargs="+", default=None, help="default: 125m 350m starcoder2-3b (GPU), tiny small"
    )
    parser.add_argument("--seq-len", type=int, default=None, help="default: 4096 on GPU, 256 on CPU")
    parser.add_argument("--micro-batch", type=int, default=None, help="default: per preset (GPU), 8 (CPU)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=10, help="first steps left out of the figures")
    parser.add_argument("--compile", choices=["on", "off", "both"], default=None, help="default: both on GPU, off")
    parser.add_argument("--masking", choices=["on", "off", "both"], default="both", help="packed-document masking")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a row, in a process of its own
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(json.loads(args.one))), flush=True)
        return
    import torch

    gpu = torch.cuda.is_available() and args.device != "cpu"
    presets = args.presets or (list(GPU_SETTINGS) if gpu else ["tiny", "small"])
    seq_len = args.seq_len or (4096 if gpu else 256)
    compiles = {"on": [True], "off": [False], "both": [False, True]}[args.compile or ("both" if gpu else "off")]
    maskings = {"on": [True], "off": [False], "both": [True, False]}[args.masking]
    rows = []
    for preset, compiled, masking in itertools.product(presets, compiles, maskings):
        micro, checkpointing = GPU_SETTINGS.get(preset, (8, 0)) if gpu else (8, 0)
        spec = {"data": args.data, "preset": preset, "seq_len": seq_len, "micro_batch": args.micro_batch or micro,
                "steps": args.steps, "skip": args.skip, "compile": compiled, "masking": masking,
                "checkpointing": checkpointing, "device": args.device}  # fmt: skip
        done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True, text=True)
        line = next((x for x in done.stdout.splitlines() if x.startswith("ROW ")), None)
        if line is None:
            error = (done.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append({**{k: spec[k] for k in ("preset", "seq_len", "micro_batch", "compile", "masking")},
                         "error": error[:200]})  # fmt: skip
        else:
            rows.append(json.loads(line[4:]))
        print(_row(rows[-1]), flush=True)
    device = torch.cuda.get_device_name(0) if gpu else "cpu"
    report = {"device": device, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
              "rows": rows}  # fmt: skip
    name = "cpu" if device == "cpu" else device.replace(" ", "_")
    path = ROOT / "benchmarks" / "results" / f"train_throughput_{name}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{device}: {path}")


def _row(r: dict) -> str:
    switches = f"compile {'on ' if r['compile'] else 'off'} masking {'on ' if r['masking'] else 'off'}"
    head = f"{r['preset']:>14} seq {r['seq_len']:>5} mb {r['micro_batch']:>2} {switches}"
    if "error" in r:
        return f"{head}  failed: {r['error']}"
    mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "-"
    memory = f"{r['peak_gb']} GB" if r["peak_gb"] is not None else "-"
    return f"{head}  {r['tokens_per_s']:>9,} tokens/s  MFU {mfu:>6}  peak {memory}"


if __name__ == "__main__":
    main()

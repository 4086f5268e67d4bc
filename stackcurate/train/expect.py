"""What a training run should take on the device it got: memory before it starts, speed once it runs.

Both are estimates, meant to tell a run that cannot work (it will not fit, or a step takes minutes) or one
that runs far below what the device gives (other work on the same cores) from one that is merely slow:

- memory: AdamW's state and the weights and gradients (16 bytes a parameter: fp32 weights, gradients, two
  moments), the activations the backward pass keeps (25 values per token and hidden unit per layer, 2 bytes
  each in bf16, 4 in fp32; attention as SDPA keeps no score matrix: measured with the 125m preset on CPU,
  peak RSS 2.39 GB at 1 x 1,024 tokens and 5.33 GB at 4 x 1,024, 0.96 MB a token) and the logits with their
  log-softmax (fp32) and a bf16 copy;
- speed: the training FLOP/s this project measured on quiet machines (the references below), so tokens/s =
  that rate / FLOPs per token (model.flops_per_token).
"""

import math
import os
from typing import Any

# Training FLOP/s per CPU core on a quiet machine, by hidden size: small matrices leave the cores idle, large
# ones keep them busy. Measured on this project's 2-core x86_64 machine (torch 2.13 CPU build): `tiny` (hidden
# 64) at 256 tokens x 8, 20,472 tokens/s (docs/trainer.md); `125m` (hidden 768) at 512 tokens x 2, 287
# tokens/s (benchmarks/results/train_throughput_cpu_125m.json). Between them: a power law; beyond: the end.
CPU_REFERENCE = ((64, 25.7e9), (768, 105.6e9))
# The share of a GPU's peak bf16 FLOP/s a run should reach: the 125m preset on an H100, compiled, measured
# 25% (benchmarks/results/train_throughput_NVIDIA_H100_80GB_HBM3_125m.json).
GPU_MFU = 0.25
FAR_BELOW = 3.0  # measured this many times below the expected rate: say so
CRAWL_S = 30.0  # an expected step longer than this: say so before the first one


def cpu_rate(hidden: int, cores: int) -> float:
    """The training FLOP/s `cores` CPU cores of the reference machine sustain for a model of `hidden` units."""
    (d0, r0), (d1, r1) = CPU_REFERENCE
    d = min(max(hidden, d0), d1)
    return cores * r0 * (d / d0) ** (math.log(r1 / r0) / math.log(d1 / d0))


def cores() -> int:
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def expected_tokens_per_s(net_cfg: Any, flops_per_token: float, device: Any, peak: float | None) -> float | None:
    """Tokens/s a quiet device of this kind gives this model (None: a GPU whose peak is unknown)."""
    if device.type == "cuda":
        return peak * GPU_MFU / flops_per_token if peak else None
    return cpu_rate(net_cfg.hidden_size, cores()) / flops_per_token


def memory_needed(net_cfg: Any, params: int, micro_batch: int, seq_len: int, bf16: bool) -> dict[str, float]:
    """Bytes a training step holds at its peak, by part (see the module docstring)."""
    tokens = micro_batch * seq_len
    width = 2 if bf16 else 4
    return {
        "weights, gradients and AdamW": 16.0 * params,
        "activations": 25.0 * width * tokens * net_cfg.hidden_size * net_cfg.num_hidden_layers,
        "logits": (8.0 + (2 if bf16 else 0)) * tokens * net_cfg.vocab_size,
    }


def memory_available(device: Any, torch: Any) -> float | None:
    """Bytes free for the run: the GPU's free memory, or the machine's available memory (Linux)."""
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
    except OSError:
        return None
    return float(fields["MemAvailable"].split()[0]) * 1024 if "MemAvailable" in fields else None


def before_training(
    *, needed: dict[str, float], available: float | None, expected: float | None, tokens_per_step: int,
    steps: int, device: Any, settings: str,
) -> list[str]:  # fmt: skip
    """The warnings a run gets before its first step: it will not fit, or it will crawl."""
    lines = []
    total = sum(needed.values())
    if available is not None and total > 0.9 * available:
        parts = ", ".join(f"{name} {size / 1e9:.1f} GB" for name, size in needed.items())
        where = "GPU memory" if device.type == "cuda" else "memory"
        lines.append(f"{settings} needs about {total / 1e9:.1f} GB ({parts}) and {available / 1e9:.1f} GB of "
                     f"{where} is free: lower --micro-batch (raising --grad-accum keeps the batch) or --seq-len, "
                     "or take a smaller --preset")  # fmt: skip
    if expected:
        step_s = tokens_per_step / expected
        if step_s > CRAWL_S:
            on = f"{cores()} CPU cores" if device.type == "cpu" else "this GPU"
            lines.append(f"{settings} takes about {step_s:.0f} s a step on {on} ({expected:,.0f} tokens/s): "
                         f"{steps} steps take about {_duration(step_s * steps)}; a GPU or a smaller --preset "
                         "trains faster")  # fmt: skip
    return lines


def far_below(measured: float, expected: float | None, device: Any) -> str | None:
    """A line for a run far slower than its device should be (None when it is not), with the likely cause."""
    if not expected or measured * FAR_BELOW > expected:
        return None
    line = f"{measured:,.0f} tokens/s, {expected / measured:.0f}x below the {expected:,.0f} expected"
    if device.type == "cpu":
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        line += f" of {cores()} quiet CPU cores"
        if load is not None and load > cores() + 0.5:
            line += f": other work shares them (load average {load:.1f})"
    else:
        line += " of this GPU (another process on it, or the input too slow?)"
    return line


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

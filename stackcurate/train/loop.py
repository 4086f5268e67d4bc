"""The training loop: AdamW, warmup + cosine, accumulation, clipping, bf16 on GPU, exact resume.

One process per device. Under `torchrun` (or Ray Train's TorchTrainer, which sets the same variables) each
rank joins the process group and wraps the model in DDP, or with `fsdp` shards it with FSDP2 (`fully_shard`
per decoder layer, then the root); alone it trains on the one device it has (a GPU, else the CPU).

A checkpoint is `checkpoint-<step>/`: the model in HF format (`from_pretrained` loads it) with the tokenizer
beside it, and `trainer.pt` with the optimizer, scheduler, every RNG state and the data
position, so a resumed run continues the same loss curve. Metrics go to `metrics.csv`: step, tokens, loss,
learning rate, tokens/s, MFU and, every `eval_every` steps, the held-out loss.

MFU = tokens/s x FLOPs per token (`model.flops_per_token`: 6 N + 12 L d T) / (devices x peak FLOP/s),
the peak being 989 TFLOP/s for an H100's dense bf16 (or `--peak-tflops`); it is not reported on CPU.
"""

import contextlib
import csv
import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from stackcurate.core.config import option
from stackcurate.core.errors import StackcurateError
from stackcurate.train import data, model

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """What to train on, the model size, and the optimizer and checkpoint settings (flags: `add_flags`)."""

    data: str = option("", "the tokenize stage's megatron folder (manifest.json + shard_*.bin/.idx); required")
    out: str = option("", "run folder: checkpoints and metrics.csv (a rerun resumes from its last one); required")
    preset: str = option("tiny", f"model size: {', '.join(model.PRESETS)}")
    seq_len: int = option(256, "tokens per sample")
    micro_batch: int = option(8, "samples per forward pass, per device")
    grad_accum: int = option(1, "micro-batches per optimizer step")
    steps: int = option(100, "optimizer steps")
    lr: float = option(3e-4, "peak learning rate")
    min_lr: float = option(3e-5, "learning rate at the end of the cosine")
    warmup: int = option(10, "linear warmup steps")
    weight_decay: float = option(0.1, "AdamW weight decay (not on biases, norms and embeddings)")
    clip: float = option(1.0, "gradient norm clip")
    held_out: float = option(0.05, "share of documents kept for the validation loss")
    eval_every: int = option(50, "steps between validation losses (and the last step)")
    eval_batches: int = option(4, "micro-batches per validation loss")
    save_every: int = option(50, "steps between checkpoints (and the last step)")
    seed: int = option(42, "seed of the initial weights, the data split and the document order")
    device: str = option("auto", "auto (a GPU if there is one), cuda, cpu")
    compile: bool = option(False, "torch.compile the model (GPU)")
    fsdp: bool = option(False, "with several processes, shard weights, gradients and optimizer state (FSDP2)")
    peak_tflops: float | None = option(None, "peak FLOP/s of one device for MFU (default: from the GPU's name)")
    stop_after: int | None = option(None, "stop after this step as if interrupted (testing resume)")

    def __post_init__(self) -> None:
        if not self.data or not self.out:
            raise ValueError("--data (the megatron folder) and --out (the run folder) are required")


def _lr(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def _distributed() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def _latest(out: Path) -> Path | None:
    found = sorted(out.glob("checkpoint-*/trainer.pt"), key=lambda p: int(p.parent.name.split("-")[1]))
    return found[-1].parent if found else None


def _peak(cfg: TrainConfig, torch: Any, device: Any) -> float | None:
    if cfg.peak_tflops:
        return cfg.peak_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tf * 1e12 for key, tf in PEAK_TFLOPS.items() if key in name), None)


def train(cfg: TrainConfig, *, progress: bool = True) -> list[dict[str, Any]]:
    """Train (or resume) as `cfg` says; returns the metrics rows written by this call."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from tqdm import tqdm

    rank, world, local_rank = _distributed()
    own_group = world > 1 and not dist.is_initialized()  # Ray Train sets the group up itself
    if own_group:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    if cfg.device == "auto":
        device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device if cfg.device != "cuda" else f"cuda:{local_rank}")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise StackcurateError("--device cuda, but torch sees no GPU; pass --device cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    shards = data.Shards(cfg.data)
    train_set = data.Samples(shards, cfg.seq_len, cfg.seed, "train", cfg.held_out)
    valid_set = data.Samples(shards, cfg.seq_len, cfg.seed, "valid", cfg.held_out) if cfg.held_out > 0 else None
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(cfg.seed)
    net_cfg = model.config(cfg.preset, shards.vocab_size, cfg.seq_len, shards.manifest.get("special_tokens", {}))
    net = model.build(net_cfg).to(device)
    fsdp = cfg.fsdp and world > 1
    if fsdp:  # each decoder layer its own unit, then the rest (embeddings, tied head, final norm) at the root
        from torch.distributed.fsdp import fully_shard

        for layer in net.model.layers:
            fully_shard(layer)
        fully_shard(net)
    decay = [p for n, p in net.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in net.named_parameters() if p.dim() < 2 or "embed" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda" and not fsdp,
    )  # fmt: skip
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr(s, cfg) / cfg.lr)
    step, position = 0, 0
    resume = _latest(out)
    if resume is not None:
        state = torch.load(resume / "trainer.pt", map_location="cpu", weights_only=False)
        if state.get("manifest_sha256") != _digest(cfg.data) or state["config"]["preset"] != cfg.preset:
            raise StackcurateError(f"{out} holds a run of other data or another preset; choose another --out")
        if state.get("world", 1) != world or state["config"].get("fsdp", False) != cfg.fsdp:
            raise StackcurateError(
                f"{out} was trained by {state.get('world', 1)} process(es) (fsdp={state['config'].get('fsdp')}); "
                "resume it the same way, so the data position means the same samples"
            )
        from transformers import Starcoder2ForCausalLM

        weights = Starcoder2ForCausalLM.from_pretrained(resume).state_dict()
        if fsdp:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
                set_optimizer_state_dict,
            )

            full = StateDictOptions(full_state_dict=True)
            set_model_state_dict(net, weights, options=full)
            set_optimizer_state_dict(net, optimizer, state["optimizer"], options=full)
        else:
            net.load_state_dict(weights)
            optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, position = state["step"], state["position"]
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        if device.type == "cuda" and state["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(state["rng"]["cuda"], device)
    wrapped: Any = net
    if world > 1 and not fsdp:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(net, device_ids=[local_rank] if device.type == "cuda" else None)
    if cfg.compile:
        wrapped = torch.compile(wrapped)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    flops = model.flops_per_token(net_cfg, cfg.seq_len)
    peak = _peak(cfg, torch, device)
    tokens_per_step = cfg.micro_batch * cfg.grad_accum * cfg.seq_len * world

    def loss_of(batch: np.ndarray) -> Any:
        tokens = torch.from_numpy(batch).to(device, non_blocking=True)
        with autocast:
            logits = wrapped(input_ids=tokens[:, :-1]).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))

    def validation() -> float | None:
        if valid_set is None:
            return None
        net.eval()
        with torch.no_grad():
            losses = [loss_of(valid_set.batch(i * cfg.micro_batch, cfg.micro_batch, rank, world)).item()
                      for i in range(cfg.eval_batches)]  # fmt: skip
        net.train()
        return _mean_over_ranks(float(np.mean(losses)), world, torch, device)

    metrics_path = out / "metrics.csv"
    rows: list[dict[str, Any]] = []
    last = cfg.steps if cfg.stop_after is None else min(cfg.steps, cfg.stop_after)
    bar = tqdm(total=cfg.steps, initial=step, desc="train", unit="step", disable=not progress or rank != 0)
    net.train()
    while step < last:
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for micro in range(cfg.grad_accum):
            batch = train_set.batch(position, cfg.micro_batch, rank, world)
            position += cfg.micro_batch
            if fsdp:  # gradients are reduced on the last micro-batch only
                net.set_requires_gradient_sync(micro == cfg.grad_accum - 1)
            if world > 1 and not fsdp and micro < cfg.grad_accum - 1:
                with wrapped.no_sync():
                    loss = loss_of(batch) / cfg.grad_accum
                    loss.backward()
            else:
                loss = loss_of(batch) / cfg.grad_accum
                loss.backward()
            total += loss.item()
        total = _mean_over_ranks(total, world, torch, device)
        torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        step += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - started
        row: dict[str, Any] = {
            "step": step,
            "tokens": step * tokens_per_step,
            "loss": round(total, 6),
            "lr": lr,
            "tokens_per_s": round(tokens_per_step / seconds, 1),
            "mfu": round(tokens_per_step / seconds * flops / (peak * world), 4) if peak else None,
            "val_loss": None,
        }
        if step % cfg.eval_every == 0 or step == cfg.steps:
            row["val_loss"] = validation()
        rows.append(row)
        bar.update()
        bar.set_postfix(loss=f"{total:.3f}", tok_s=f"{row['tokens_per_s']:.0f}", refresh=False)
        if rank == 0:
            _append(metrics_path, row)
        if step % cfg.save_every == 0 or step == last:  # every rank: FSDP gathers the full state
            _save(out, net, optimizer, scheduler, step, position, cfg, torch, device, rank, world, fsdp)
    bar.close()
    if own_group:
        dist.destroy_process_group()
    return rows


def train_on_ray(
    cfg: TrainConfig, workers: int, *, address: str | None = None, progress: bool = True
) -> list[dict[str, Any]]:
    """The same loop on a Ray cluster through Ray Train's TorchTrainer: `workers` processes, a GPU each when
    the cluster has them (DDP over NCCL, else Gloo on CPUs). Ray Train sets up the process group and the
    rank variables; the loop is unchanged. Returns rank 0's metrics rows.

    Ray starts or is joined where the pipeline's runner does it (`runners.ray.init`): `address` (or
    RAY_ADDRESS), else a private local Ray, never whatever cluster happens to run on this machine."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from stackcurate.runners.ray import init as init_ray

    init_ray(address)
    use_gpu = ray.cluster_resources().get("GPU", 0) >= workers
    out = Path(cfg.out).resolve()
    cfg = replace(cfg, out=str(out), data=str(Path(cfg.data).resolve()))  # Ray Train moves the workers' cwd

    def per_worker() -> None:
        from ray import train as ray_train

        train(cfg, progress=progress and ray_train.get_context().get_world_rank() == 0)

    before = len(_read_metrics(out / "metrics.csv"))
    TorchTrainer(
        per_worker,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu),
        run_config=RunConfig(storage_path=str(out / "ray"), name="train"),
    ).fit()
    return _read_metrics(out / "metrics.csv")[before:]  # rank 0 wrote them


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [{k: (None if v == "" else int(v) if k in ("step", "tokens") else float(v)) for k, v in r.items()}
            for r in rows]  # fmt: skip


def _mean_over_ranks(value: float, world: int, torch: Any, device: Any) -> float:
    """A logged figure is the mean over ranks (each rank saw other samples), not rank 0's own."""
    if world == 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item()) / world


def _append(path: Path, row: dict[str, Any]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)


def _save(out: Path, net: Any, optimizer: Any, scheduler: Any, step: int, position: int, cfg: TrainConfig,
          torch: Any, device: Any, rank: int, world: int, fsdp: bool) -> None:  # fmt: skip
    """Write `checkpoint-<step>` under a temporary name, then move it into place (never half a checkpoint).
    Called on every rank; with FSDP they all take part in gathering the full state, and rank 0 writes."""
    if fsdp:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(net, options=full)
        optimizer_state = get_optimizer_state_dict(net, optimizer, options=full)
    else:
        weights, optimizer_state = None, optimizer.state_dict()
    if rank != 0:
        return
    final = out / f"checkpoint-{step}"
    tmp = out / f".checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    if weights is None:
        net.save_pretrained(tmp)
    else:  # a plain module of the same config, so config.json names Starcoder2ForCausalLM, not FSDP's subclass
        plain = model.build(net.config)
        plain.load_state_dict(weights)
        plain.save_pretrained(tmp)
    manifest = json.loads((Path(cfg.data) / "manifest.json").read_text())
    tokenizer = Path(manifest["tokenizer"])
    if tokenizer.is_dir():  # the tokenizer travels with the model: AutoTokenizer.from_pretrained(checkpoint)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (tokenizer / name).exists():
                shutil.copy(tokenizer / name, tmp / name)
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
           "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}  # fmt: skip
    torch.save(
        {"optimizer": optimizer_state, "scheduler": scheduler.state_dict(), "step": step, "position": position,
         "rng": rng, "config": asdict(cfg), "manifest_sha256": _digest(cfg.data), "world": world},
        tmp / "trainer.pt",
    )  # fmt: skip
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def _digest(folder: str) -> str:
    """The shards' identity: their manifest lists every shard's SHA-256."""
    return hashlib.sha256((Path(folder) / "manifest.json").read_bytes()).hexdigest()

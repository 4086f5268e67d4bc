"""The training loop: fused AdamW, warmup + cosine, accumulation, clipping, bf16 autocast on GPU, exact resume.

One process per device. Under `torchrun` (or Ray Train's TorchTrainer, which sets the same variables) each
rank joins the process group and wraps the model in DDP, or with `fsdp` shards it with FSDP2 (`fully_shard`
per decoder layer, then the root); alone it trains on the one device it has (a GPU, else the CPU).

A checkpoint is `checkpoint-<step>/`: the model in HF format (`from_pretrained` loads it) with the tokenizer
beside it, and `trainer.pt` with the optimizer, scheduler, every RNG state, the data position and the settings,
so a resumed run continues the same loss curve; a rerun with settings that change the result is refused
(`--overwrite` starts anew). Metrics go to `metrics.csv`: step, tokens, loss, learning rate, tokens/s, MFU
and, before the first step and every `eval_every` steps, the held-out loss.

MFU = tokens/s x FLOPs per token (`model.flops_per_token`: 6 N + 12 L d T) / (devices x peak FLOP/s),
the peak being 989 TFLOP/s for an H100's dense bf16 (or `--peak-tflops`); it is not reported on CPU.
"""

import contextlib
import copy
import csv
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from stackcurate.core.config import option, output_settings
from stackcurate.core.errors import StackcurateError
from stackcurate.train import checkpoint as checkpoints
from stackcurate.train import data, expect, model

log = logging.getLogger(__name__)
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}
ATTENTION = ("auto", "sdpa", "flex_attention", "flash_attention_2")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """What to train on, the model size, and the optimizer and checkpoint settings (flags: `add_flags`).

    The settings marked `output=False` only say how to run (where, how often to evaluate or save); a rerun into
    the same `out` may change them and resume. Any other change is refused, since the resumed run would no
    longer be the one its first steps belong to."""

    data: str = option("", "the tokenize stage's megatron folder (manifest.json + shard_*.bin/.idx)")
    out: str = option("", "run folder: checkpoints and metrics.csv (a rerun resumes from its last one)", output=False)
    preset: str = option("tiny", f"model size: {', '.join(model.PRESETS)}")
    seq_len: int = option(256, "tokens per sample")
    micro_batch: int = option(8, "samples per forward pass, per device")
    grad_accum: int = option(1, "micro-batches per optimizer step")
    steps: int = option(100, "optimizer steps (the cosine ends there)")
    lr: float | None = option(None, "peak learning rate (default: the preset's, " + ", ".join(
        f"{name} {p.lr:g}" for name, p in model.PRESETS.items()) + ")")  # fmt: skip
    min_lr: float | None = option(None, "learning rate at the end of the cosine (default: a tenth of --lr)")
    warmup: int = option(10, "linear warmup steps")
    weight_decay: float = option(0.1, "AdamW weight decay (not on biases, norms and embeddings)")
    clip: float = option(1.0, "gradient norm clip")
    held_out: float = option(
        0.05, "share of the tokens kept for the validation loss (whole documents in a seeded order, the last one "
        "cut to fit; at least one sample)",
    )  # fmt: skip
    eval_every: int = option(50, "steps between held-out losses (also before the first and at the last)", output=False)
    eval_batches: int = option(4, "micro-batches per validation loss (fewer if the held-out split is smaller)")
    save_every: int = option(50, "steps between checkpoints (and the last step)", output=False)
    checkpoint_format: str = option(
        "hf", "hf: each checkpoint an HF folder (rank 0 gathers the model); sharded: each rank writes its own "
        "shards (torch.distributed.checkpoint), for models too large to gather; `stackcurate export` makes an HF "
        "folder of one", output=False,
    )  # fmt: skip
    rope_theta: float | None = option(None, "RoPE base θ (default: the preset's; SC2's 16,384-token stage: 1e6)")
    context: int | None = option(None, "the model's positions (default: the preset's, else --seq-len)")
    sliding_window: int | None = option(
        None, "attend to the last N tokens only (default: the preset's, 4,096 for starcoder2-*; 0: off)"
    )
    cross_document_attention: bool = option(
        False, "let a sample's tokens attend to the documents packed before theirs (Megatron's StarCoder runs did); "
        "default: positions restart and attention stops at each <|endoftext|>",
    )  # fmt: skip
    fim_rate: float = option(
        0.0, "fill-in-the-middle at training time: the share of documents (each piece of a sample between "
        "<|endoftext|> tokens) rewritten as FIM; for shards the format stage did not FIM",
    )  # fmt: skip
    fim_spm_rate: float = option(0.5, "with --fim-rate: the share of FIM documents in SPM order (the rest PSM)")
    fim_max_middle: int | None = option(None, "with --fim-rate: the longest middle, in characters")
    fim_over_fim: bool = option(
        False, "apply --fim-rate to shards that already hold FIM spans (refused otherwise: both would apply)"
    )
    init_from: str | None = option(
        None, "start from this checkpoint's weights (a fresh optimizer and schedule): SC2's second stage"
    )
    seed: int = option(42, "seed of the initial weights, the held-out split and the order of documents and samples")
    device: str = option("auto", "auto (a GPU if there is one), cuda, cpu", output=False)
    compile: bool = option(False, "torch.compile each decoder layer (GPU)", output=False)
    attention: str = option(
        "auto", "attention kernels: sdpa, flex_attention, flash_attention_2; auto: flash_attention_2 on a GPU where "
        "flash-attn is installed, else flex_attention on a GPU, sdpa on CPU", output=False,
    )  # fmt: skip
    bf16: bool | None = option(None, "bf16 autocast (default: on a GPU; a CPU without bf16 units runs it slowly)")
    fsdp: bool = option(False, "with several processes, shard weights, gradients and optimizer state (FSDP2)")
    activation_checkpointing: int = option(
        0, "recompute the activations of every Nth decoder layer in the backward pass (1: all; 0: none)",
        output=False,
    )  # fmt: skip
    peak_tflops: float | None = option(
        None, "peak FLOP/s of one device for MFU (default: from the GPU's name)", output=False
    )
    eval: tuple[str, ...] = option(
        (), "benchmarks scored at every checkpoint as `stackcurate eval` scores them (humaneval, humaneval-infill, "
        "multipl-e:js,java,cpp,rs): greedy pass@1 in OUT/evals.csv, each checkpoint's results in OUT/eval/",
        output=False,
    )  # fmt: skip
    eval_problems: int | None = option(None, "with --eval: only the first N problems of each (quicker)", output=False)
    eval_max_new_tokens: int = option(128, "with --eval: the longest completion", output=False)
    stop_after: int | None = option(None, "stop after this step as if interrupted (testing resume)", output=False)
    overwrite: bool = option(False, "start anew: delete the checkpoints and metrics.csv in --out", output=False)

    def __post_init__(self) -> None:
        if not self.data or not self.out:
            raise ValueError("--data (the megatron folder) and --out (the run folder) are required")
        if self.checkpoint_format not in ("hf", "sharded"):
            raise ValueError(f"--checkpoint-format {self.checkpoint_format}: hf or sharded")
        if self.attention not in ATTENTION:
            raise ValueError(f"--attention {self.attention}: one of {', '.join(ATTENTION)}")


def _rates(cfg: TrainConfig) -> tuple[float, float]:
    """The peak and final learning rates: as given, else the preset's peak and a tenth of the peak."""
    if cfg.preset not in model.PRESETS:
        raise StackcurateError(f"unknown preset '{cfg.preset}'; presets: {', '.join(model.PRESETS)}")
    peak = cfg.lr if cfg.lr is not None else model.PRESETS[cfg.preset].lr
    return peak, cfg.min_lr if cfg.min_lr is not None else peak / 10


def resolved(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with the defaults that depend on other settings filled in (the learning rates)."""
    peak, floor = _rates(cfg)
    return replace(cfg, lr=peak, min_lr=floor)


def _changes(saved: dict[str, Any], cfg: TrainConfig) -> list[str]:
    """The settings that change the result (all but `output=False` ones) where `cfg` differs from the saved
    config of a run; the data is compared by its manifest's digest, not its path."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    before = output_settings(resolved(TrainConfig(**{k: v for k, v in saved.items() if k in names})))
    now = output_settings(cfg)
    return [f"--{k.replace('_', '-')} {before[k]} -> {now[k]}" for k in now if k != "data" and before[k] != now[k]]


def _lr(step: int, cfg: TrainConfig) -> float:
    peak, floor = _rates(cfg)
    if step < cfg.warmup:
        return peak * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def _distributed() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def _fim(cfg: TrainConfig, shards: data.Shards) -> data.Fim | None:
    """Training-time FIM, as asked; refused where the shards are FIM'd already, unless both are wanted."""
    if not 0.0 <= cfg.fim_rate <= 1.0 or not 0.0 <= cfg.fim_spm_rate <= 1.0:
        raise StackcurateError("--fim-rate and --fim-spm-rate are shares, between 0 and 1")
    if cfg.fim_rate == 0:
        return None
    if not cfg.fim_over_fim and (spans := data.fim_spans(shards)):
        raise StackcurateError(
            f"{cfg.data} already holds FIM spans ({spans:,} <fim_prefix> tokens in the shards' first 4M tokens "
            "each): the format stage applied FIM. Pass --fim-rate 0, or --fim-over-fim to apply both"
        )
    special = shards.manifest.get("special_tokens", {})
    return data.Fim(shards.manifest.get("tokenizer", ""), special, cfg.fim_rate, cfg.fim_spm_rate,
                    cfg.fim_max_middle, cfg.seed)  # fmt: skip


def _attention(cfg: TrainConfig, device: Any) -> str:
    """The attention implementation: as asked, else the fastest here that masks packed documents exactly."""
    if cfg.attention != "auto":
        return cfg.attention
    if device.type != "cuda":
        return "sdpa"
    import importlib.util

    return "flash_attention_2" if importlib.util.find_spec("flash_attn") else "flex_attention"


def _load_weights(net: Any, checkpoint: str, fsdp: bool) -> None:
    """`checkpoint`'s weights into `net` (--init-from): the same shapes, whatever its positions or θ."""
    if not (Path(checkpoint) / "config.json").is_file():
        raise StackcurateError(f"--init-from {checkpoint}: not a checkpoint folder (no config.json)")
    weights = checkpoints.model(checkpoint).state_dict()  # an HF or a sharded checkpoint
    ours = net.state_dict()
    wrong = [k for k in ours if k not in weights or tuple(weights[k].shape) != tuple(ours[k].shape)]
    if wrong or len(weights) != len(ours):
        first = (wrong or sorted(set(weights) - set(ours)))[0]
        raise StackcurateError(f"--init-from {checkpoint}: another model's weights (first difference: {first}); "
                               "use the same --preset")  # fmt: skip
    _set_weights(net, weights, fsdp)


def _set_weights(net: Any, weights: dict[str, Any], fsdp: bool) -> None:
    """Whole weights into `net`; under FSDP each rank keeps its shard of them."""
    if fsdp:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(net, weights, options=StateDictOptions(full_state_dict=True))
    else:
        net.load_state_dict(weights)


def step_of(out: Path) -> int | None:
    """The step of `out`'s latest checkpoint, None before the first."""
    latest = _latest(out)
    return None if latest is None else int(latest.name.split("-")[1])


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
    cfg = resolved(cfg)
    shards = data.Shards(cfg.data)
    split = data.hold_out(shards, cfg.held_out, cfg.seq_len, cfg.seed)
    fim = _fim(cfg, shards)
    train_set = data.Samples(shards, split.train, cfg.seq_len, cfg.seed, fim)
    valid_set = data.Samples(shards, split.valid, cfg.seq_len, cfg.seed, fim) if split.valid.tokens else None
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.overwrite and rank == 0:
        _clear(out)
    if cfg.overwrite and dist.is_initialized():
        dist.barrier()  # no rank looks for a checkpoint before rank 0 has deleted them

    torch.manual_seed(cfg.seed)
    special = shards.manifest.get("special_tokens", {})
    eod = int(shards.manifest.get("eod_id", special.get("<|endoftext|>", 0)))
    net_cfg = model.config(cfg.preset, shards.vocab_size, cfg.seq_len, special, rope_theta=cfg.rope_theta,
                           context=cfg.context, sliding_window=cfg.sliding_window)  # fmt: skip
    bf16 = cfg.bf16 if cfg.bf16 is not None else device.type == "cuda"  # matmuls in bf16, weights and loss in fp32
    # on the meta device first: no memory until each rank holds its own shard (a 15B model never whole anywhere)
    net = model.build(net_cfg, "meta", attention=_attention(cfg, device))
    model.checkpoint_activations(net, cfg.activation_checkpointing)
    if cfg.compile:  # each decoder layer on its own (torchtitan's way): small graphs, one compiled for all
        for layer in net.model.layers:
            layer.compile()
    fsdp = cfg.fsdp and world > 1
    if fsdp:  # each decoder layer its own unit, then the rest (embeddings, head, final norm) at the root
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        # bf16: weights gathered and computed in bf16, gradients reduced in fp32, the optimizer's copy fp32
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32)
        for layer in net.model.layers:
            fully_shard(layer, mp_policy=policy)
        fully_shard(net, mp_policy=policy)
    net.to_empty(device=device)
    net.tie_weights()
    model.initialize(net, cfg.seed)
    if cfg.init_from and step_of(out) is None:  # a new run from another's weights; a resumed one has its own
        _load_weights(net, cfg.init_from, fsdp)
    decay = [p for n, p in net.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in net.named_parameters() if p.dim() < 2 or "embed" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=_rates(cfg)[0], betas=(0.9, 0.95), eps=1e-8, fused=True,  # one kernel, on GPU and CPU, sharded or not
    )  # fmt: skip
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr(s, cfg) / _rates(cfg)[0])
    step, position = 0, 0
    resume = _latest(out)
    if resume is not None:
        state = torch.load(resume / "trainer.pt", map_location="cpu", weights_only=False)
        changes = _changes(state["config"], cfg)
        if state.get("manifest_sha256") != _digest(cfg.data):
            changes.insert(0, "--data: other shards (another manifest.json)")
        if state.get("world", 1) != world:  # the data position would mean other samples
            changes.append(f"processes {state.get('world', 1)} -> {world}")
        if changes:
            raise StackcurateError(
                f"{out} holds a run at step {state['step']} with other settings ({'; '.join(changes)}); rerun "
                "with its settings to resume it, or pass --overwrite (or another --out) to start anew"
            )
        if checkpoints.is_sharded(resume):  # each rank reads its own shards, the optimizer's too
            checkpoints.load(net, optimizer, resume)
        else:
            _set_weights(net, checkpoints.model(resume).state_dict(), fsdp)
            if fsdp:
                from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

                full = StateDictOptions(full_state_dict=True)
                set_optimizer_state_dict(net, optimizer, state["optimizer"], options=full)
            else:
                optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, position = state["step"], state["position"]
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        if device.type == "cuda" and state["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(state["rng"]["cuda"], device)
        if rank == 0:
            _truncate(out / "metrics.csv", step)  # rows an interrupted run logged after its last checkpoint
            _truncate(out / EVALS, step)
            log.info("resuming from %s", resume)
    elif rank == 0:  # rows of a run interrupted before its first checkpoint: this one logs them again
        for path in (out / "metrics.csv", out / EVALS):
            path.unlink(missing_ok=True)
    if rank == 0:
        log.info("%s", split.describe())
    wrapped: Any = net
    if world > 1 and not fsdp:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(net, device_ids=[local_rank] if device.type == "cuda" else None)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    flops = model.flops_per_token(net_cfg, cfg.seq_len)
    peak = _peak(cfg, torch, device)
    tokens_per_step = cfg.micro_batch * cfg.grad_accum * cfg.seq_len * world
    expected = expect.expected_tokens_per_s(net_cfg, flops, device, peak)
    expected = expected * world if expected else None
    if rank == 0 and step < cfg.steps:
        params = sum(p.numel() for p in net.parameters()) * (world if fsdp else 1)
        needed = expect.memory_needed(net_cfg, params, cfg.micro_batch, cfg.seq_len, bf16)
        settings = f"--preset {cfg.preset} --seq-len {cfg.seq_len} --micro-batch {cfg.micro_batch}"
        for line in expect.before_training(
            needed=needed, available=expect.memory_available(device, torch), expected=expected,
            tokens_per_step=tokens_per_step, steps=cfg.steps - step, device=device, settings=settings,
        ):  # fmt: skip
            log.warning("%s", line)
    checked = step + 5  # the speed is compared once past the first steps (allocation, compilation), then each eval

    def loss_of(batch: Any) -> Any:
        tokens = torch.as_tensor(batch).to(device, non_blocking=True)
        inputs = tokens[:, :-1]
        positions = None if cfg.cross_document_attention else model.document_positions(inputs, eod)
        with autocast:
            logits = wrapped(input_ids=inputs, position_ids=positions, use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))

    # the same held-out samples every time, each read once (a small split holds fewer than eval_batches)
    eval_batches = min(cfg.eval_batches, max(1, valid_set.per_epoch // (cfg.micro_batch * world))) if valid_set else 0

    def validation() -> float | None:
        if valid_set is None:
            return None
        net.eval()
        with torch.no_grad():
            losses = [loss_of(valid_set.batch(i * cfg.micro_batch, cfg.micro_batch, rank, world)).item()
                      for i in range(eval_batches)]  # fmt: skip
        net.train()
        return _mean_over_ranks(float(np.mean(losses)), world, torch, device)

    metrics_path = out / "metrics.csv"
    rows: list[dict[str, Any]] = []
    if step == 0 and valid_set is not None:  # where the held-out loss starts: about ln(vocab_size)
        rows.append({"step": 0, "tokens": 0, "loss": None, "lr": None, "tokens_per_s": None, "mfu": None,
                     "val_loss": validation()})  # fmt: skip
        if rank == 0:
            _append(metrics_path, rows[-1])
    last = cfg.steps if cfg.stop_after is None else min(cfg.steps, cfg.stop_after)
    bar = tqdm(total=cfg.steps, initial=step, desc="train", unit="step", disable=not progress or rank != 0)
    evaluations = _Evaluations(out, cfg)
    batches = _Batches(train_set, cfg.micro_batch, rank, world, pin=device.type == "cuda")
    net.train()
    while step < last:
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for micro in range(cfg.grad_accum):
            batch = batches.get(position)
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
        if rank == 0 and (step == checked or step % cfg.eval_every == 0) and len(rows) >= 5:
            recent = [r["tokens_per_s"] for r in rows[-5:] if r["tokens_per_s"]]
            if recent and (line := expect.far_below(len(recent) / sum(1 / r for r in recent), expected, device)):
                bar.clear()
                log.warning("%s", line)
        bar.update()
        bar.set_postfix(loss=f"{total:.3f}", tok_s=f"{row['tokens_per_s']:.0f}", refresh=False)
        if rank == 0:
            _append(metrics_path, row)
        if step % cfg.save_every == 0 or step == last:  # every rank: FSDP gathers the full state
            _save(out, net, optimizer, scheduler, step, position, cfg, torch, device, rank, world, fsdp)
            _saved(world)
            if cfg.eval and rank == 0:
                evaluations.start(step)
    bar.close()
    batches.close()
    evaluations.wait()
    if own_group:
        dist.barrier()  # the ranks leave together, none while rank 0 still writes its last checkpoint
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

    from stackcurate.runners.ray_start import init as init_ray

    init_ray(address)
    use_gpu = ray.cluster_resources().get("GPU", 0) >= workers
    out = Path(cfg.out).resolve()
    cfg = replace(cfg, out=str(out), data=str(Path(cfg.data).resolve()))  # Ray Train moves the workers' cwd

    def per_worker() -> None:
        from ray import train as ray_train

        from stackcurate.core import log as logs

        logs.setup()  # what the loop logs (the held-out split) reaches the driver's terminal
        train(cfg, progress=progress and ray_train.get_context().get_world_rank() == 0)

    latest = step_of(out)
    start = -1 if cfg.overwrite or latest is None else latest  # the rows after it are new
    TorchTrainer(
        per_worker,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu),
        run_config=RunConfig(storage_path=str(out / "ray"), name="train"),
    ).fit()
    return [row for row in read_metrics(out) if row["step"] > start]  # rank 0 wrote them


def read_metrics(out: str | Path) -> list[dict[str, Any]]:
    """Every row of a run's `metrics.csv` (none before it starts)."""
    path = Path(out) / "metrics.csv"
    if not path.exists():
        return []
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [{k: (None if v == "" else int(v) if k in ("step", "tokens") else float(v)) for k, v in r.items()}
            for r in rows]  # fmt: skip


def curve(rows: list[dict[str, Any]], lines: int = 8) -> list[str]:
    """The loss curve in a few lines: the held-out loss where it was measured (at most `lines` of them, the
    first and last kept) and the mean training loss of the steps since the line before."""
    if not rows:
        return []
    marks = [i for i, r in enumerate(rows) if r["val_loss"] is not None] or list(range(len(rows)))
    count = min(lines, len(marks))
    shown = sorted({marks[round(k * (len(marks) - 1) / max(1, count - 1))] for k in range(count)})
    text = [f"{'step':>8} {'train':>8} {'held-out':>9}"]
    before = -1
    for i in shown:
        losses = [r["loss"] for r in rows[before + 1 : i + 1] if r["loss"] is not None]
        train_loss = f"{np.mean(losses):.3f}" if losses else "-"
        held = f"{rows[i]['val_loss']:.3f}" if rows[i]["val_loss"] is not None else "-"
        text.append(f"{rows[i]['step']:>8} {train_loss:>8} {held:>9}")
        before = i
    return text


def _clear(out: Path) -> None:
    """What an earlier run left in `out`: its checkpoints and metrics (not the folder: it may hold more)."""
    for old in [*out.glob("checkpoint-*"), *out.glob(".checkpoint-*.tmp")]:
        shutil.rmtree(old)
    (out / "metrics.csv").unlink(missing_ok=True)
    (out / EVALS).unlink(missing_ok=True)
    shutil.rmtree(out / "eval", ignore_errors=True)


def _truncate(path: Path, step: int) -> None:
    """Keep the metrics rows up to `step`."""
    if not path.exists():
        return
    with path.open() as f:
        rows = list(csv.DictReader(f))
    kept = [r for r in rows if int(r["step"]) <= step]
    if len(kept) < len(rows):
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(kept)


EVALS = "evals.csv"  # step, benchmark, pass@1 (and exact match) of each checkpoint, with --eval


class _Batches:
    """Micro-batches made ahead, while the device computes the one before: in a thread (reading the memmaps,
    packing and training-time FIM's tokenizer let go of the GIL for most of their time), and on a GPU in pinned
    memory, so that the copy to the device overlaps the step too. Batch `position` is the same tensor, made
    ahead or not."""

    def __init__(self, samples: data.Samples, micro: int, rank: int, world: int, pin: bool) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.samples, self.micro, self.rank, self.world, self.pin = samples, micro, rank, world, pin
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="batches")  # one thread: Samples is not thread-safe
        self.pending: dict[int, Any] = {}

    def _make(self, position: int) -> Any:
        import torch

        batch = torch.from_numpy(self.samples.batch(position, self.micro, self.rank, self.world))
        return batch.pin_memory() if self.pin else batch

    def get(self, position: int) -> Any:
        made = self.pending.pop(position, None) or self.pool.submit(self._make, position)
        self.pending = {position + self.micro: self.pool.submit(self._make, position + self.micro)}
        return made.result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class _Evaluations:
    """--eval: each checkpoint scored by `stackcurate eval` (greedy pass@1), its results in
    `eval/checkpoint-<step>` and a row per benchmark in evals.csv.

    Each in a process of its own (the pipeline's libraries and the sandbox are not the trainer's), started by
    rank 0 beside the training, which goes on: the other ranks never wait at a collective for an evaluation's
    length (past NCCL's timeout, that kills the job), and a step is not held up by programs running. One at a
    time: the next checkpoint's waits for the last's, and the end of training for both. A failure is a warning,
    and training goes on."""

    def __init__(self, out: Path, cfg: TrainConfig) -> None:
        self.out, self.cfg = out, cfg
        self.running: tuple[int, subprocess.Popen, Path, Path] | None = None

    def start(self, step: int) -> None:
        self.wait()
        cfg, folder = self.cfg, self.out / "eval" / f"checkpoint-{step}"
        folder.parent.mkdir(parents=True, exist_ok=True)
        problems = ["--problems", str(cfg.eval_problems)] if cfg.eval_problems else []
        command = [sys.executable, "-m", "stackcurate.cli", "eval", str(self.out / f"checkpoint-{step}"), "--out",
                   str(folder), "--benchmarks", *cfg.eval, "--n", "1", "--max-new-tokens",
                   str(cfg.eval_max_new_tokens), *problems]  # fmt: skip
        log_path = folder.parent / f"checkpoint-{step}.log"
        with log_path.open("w") as log_file:  # a file, not a pipe: nothing waits on a reader
            process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, text=True)
        self.running = (step, process, folder, log_path)

    def wait(self) -> None:
        if self.running is None:
            return
        step, process, folder, log_path = self.running
        self.running = None
        if process.wait() != 0:
            last = (log_path.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
            log.warning("eval of checkpoint-%d failed: %s (%s)", step, last, log_path)
            return
        for benchmark, result in json.loads((folder / "summary.json").read_text()).items():
            _append(self.out / EVALS, {"step": step, "benchmark": benchmark,
                                       "pass@1": result["pass@k"].get("pass@1"),
                                       "exact_match": result.get("exact_match")})  # fmt: skip
            log.info("checkpoint-%d %s: pass@1 %.4f", step, benchmark, result["pass@k"].get("pass@1", float("nan")))


def read_evals(out: str | Path) -> list[dict[str, Any]]:
    """The rows of a run's evals.csv (none without --eval)."""
    path = Path(out) / EVALS
    if not path.exists():
        return []
    with path.open() as f:
        return [{**r, "step": int(r["step"]), "pass@1": float(r["pass@1"]) if r["pass@1"] else None}
                for r in csv.DictReader(f)]  # fmt: skip


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
    Called on every rank; with FSDP they all take part in gathering the full state, and rank 0 writes; with
    --checkpoint-format sharded each writes its own shards (checkpoint.py)."""
    final = out / f"checkpoint-{step}"
    tmp = out / f".checkpoint-{step}.tmp"
    sharded = cfg.checkpoint_format == "sharded"
    if sharded:
        import torch.distributed as dist

        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        if dist.is_initialized():
            dist.barrier()  # no rank writes into the folder before rank 0 has cleared it
        checkpoints.save(net, optimizer, tmp)
        weights = optimizer_state = None
    elif fsdp:
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
    if sharded:  # the weights are in dcp/, the config beside them
        config = copy.deepcopy(net.config)
        config.architectures = ["Starcoder2ForCausalLM"]
        config.save_pretrained(tmp)
    elif weights is None:
        shutil.rmtree(tmp, ignore_errors=True)
        net.save_pretrained(tmp)
    else:  # a plain module of the same config, so config.json names Starcoder2ForCausalLM, not FSDP's subclass
        shutil.rmtree(tmp, ignore_errors=True)
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


def _saved(world: int) -> None:
    """Every rank goes on once rank 0 has moved the checkpoint into place: none runs ahead into the next steps,
    or out of the run, while it writes."""
    import torch.distributed as dist

    if world > 1 and dist.is_initialized():
        dist.barrier()


def _digest(folder: str) -> str:
    """The shards' identity: their manifest lists every shard's SHA-256."""
    return hashlib.sha256((Path(folder) / "manifest.json").read_bytes()).hexdigest()

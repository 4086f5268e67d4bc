"""StarCoder2-style decoders built from configuration alone, with the FLOPs count that MFU is measured by.

transformers' `Starcoder2ForCausalLM`: LayerNorm with bias, a GELU (tanh) MLP, biased projections, RoPE,
grouped-query attention. Checkpoints are saved with `save_pretrained`, so `from_pretrained`,
bigcode-evaluation-harness and any HF tool load them.

The presets `starcoder2-3b`, `-7b` and `-15b` are the published models' shapes (their HF `config.json`, NeMo's
`starcoder2.py`): layers, widths, heads, KV heads, rope θ, 16,384 positions, the 4,096-token sliding window, the
49,152-id vocabulary and the init std; 3B and 7B tie the output head to the embedding, 15B does not (its card's
16B parameters). The small presets are for tests, the demo and CPUs: tied, rope θ 1e5, no window (their
contexts are shorter than one).
"""

from dataclasses import dataclass
from typing import Any

from stackcurate.core.errors import StackcurateError


@dataclass(frozen=True)
class Preset:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    lr: float  # the peak learning rate `--lr` defaults to: smaller models take larger steps
    rope_theta: float = 100_000.0
    context: int | None = None  # positions (max_position_embeddings); None: the training's --seq-len
    sliding_window: int | None = None
    vocab: int | None = None  # None: the shards' own vocabulary size
    init_std: float = 0.02
    tied: bool = True  # the output head is the embedding


PRESETS = {
    # tests and the CPU demo. lr: on the demo's shards 3e-4 left the held-out loss at 8.56 after 20 steps where
    # 3e-3 reached 7.94; 1e-2 was no better (600 steps on a 4,096-id run: 5.79 against 3e-3's 5.58)
    "tiny": Preset(layers=2, hidden=64, ffn=256, heads=4, kv_heads=2, lr=3e-3),
    "small": Preset(layers=4, hidden=256, ffn=1024, heads=4, kv_heads=2, lr=1e-3),
    "125m": Preset(layers=12, hidden=768, ffn=3072, heads=12, kv_heads=4, lr=6e-4),  # GPT-2 small's shape, GPT-3's lr
    "350m": Preset(layers=24, hidden=1024, ffn=4096, heads=16, kv_heads=4, lr=3e-4),  # GPT-3 medium's lr
    # the published models (REFERENCE (h), (n)); lr: SC2's 3e-4 for the first, 4,096-token stage
    "starcoder2-3b": Preset(layers=30, hidden=3072, ffn=12288, heads=24, kv_heads=2, lr=3e-4,
                            rope_theta=999999.4420358813, context=16_384, sliding_window=4_096, vocab=49_152,
                            init_std=0.018042),
    "starcoder2-7b": Preset(layers=32, hidden=4608, ffn=18432, heads=36, kv_heads=4, lr=3e-4, rope_theta=1e6,
                            context=16_384, sliding_window=4_096, vocab=49_152, init_std=0.018042),
    "starcoder2-15b": Preset(layers=40, hidden=6144, ffn=24576, heads=48, kv_heads=4, lr=3e-4, rope_theta=1e5,
                             context=16_384, sliding_window=4_096, vocab=49_152, init_std=0.01275, tied=False),
}  # fmt: skip


def config(
    preset: str, vocab_size: int, seq_len: int, special: dict[str, int], *, rope_theta: float | None = None,
    context: int | None = None, sliding_window: int | None = None,
) -> Any:  # fmt: skip
    """The model of `preset` for shards of `vocab_size` ids and samples of `seq_len` tokens. `rope_theta`,
    `context` (positions) and `sliding_window` (0: none) override the preset's, as the second stage of SC2's
    recipe does (16,384 tokens, θ 1e6)."""
    from transformers import Starcoder2Config

    if preset not in PRESETS:
        raise StackcurateError(f"unknown preset '{preset}'; presets: {', '.join(PRESETS)}")
    p = PRESETS[preset]
    vocab = p.vocab or vocab_size
    if vocab_size > vocab:
        raise StackcurateError(f"the shards have {vocab_size} token ids, more than {preset}'s {vocab}; tokenize "
                               "with a vocabulary of at most that size")  # fmt: skip
    positions = context or p.context or seq_len
    if seq_len > positions:
        raise StackcurateError(f"--seq-len {seq_len} is longer than the model's {positions} positions; raise "
                               "--context")  # fmt: skip
    window = p.sliding_window if sliding_window is None else sliding_window or None
    eod = special.get("<|endoftext|>", 0)
    # transformers 5 folds it into rope_parameters (its signature no longer names it); 4.x takes it as is
    rope: dict[str, Any] = {"rope_theta": rope_theta or p.rope_theta}
    return Starcoder2Config(
        vocab_size=vocab,
        hidden_size=p.hidden,
        intermediate_size=p.ffn,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.kv_heads,
        max_position_embeddings=positions,
        sliding_window=window,
        tie_word_embeddings=p.tied,
        use_bias=True,
        norm_epsilon=1e-5,
        initializer_range=p.init_std,
        hidden_act="gelu_pytorch_tanh",
        residual_dropout=0.0,
        embedding_dropout=0.0,
        attention_dropout=0.0,
        bos_token_id=eod,
        eos_token_id=eod,
        **rope,
    )


def build(cfg: Any, device: Any = None, attention: str = "sdpa") -> Any:
    """The model of `cfg`, on `device` (`"meta"`: shapes only, no memory: see `initialize`). `attention`:
    transformers' implementation: `sdpa` (PyTorch's fused attention; its flash kernels on GPU), `flex_attention`
    (FlexAttention's block-sparse kernels: packed documents and windows skip the blocks they mask) or
    `flash_attention_2` (varlen kernels, where flash-attn is installed)."""
    import torch
    from transformers import Starcoder2ForCausalLM

    cfg._attn_implementation = attention
    with torch.device(device or "cpu"):
        return Starcoder2ForCausalLM(cfg)


def matmul_params(cfg: Any) -> int:
    """Weights that take part in a matrix multiply per token: every layer's projections plus the output head
    (tied to the embedding or not: the embedding itself is a lookup, not a multiply). Biases and norms are left
    out."""
    d, f, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    kv = d // cfg.num_attention_heads * cfg.num_key_value_heads
    per_layer = d * d + 2 * d * kv + d * d + 2 * d * f  # q, k + v, o, MLP up + down
    return layers * per_layer + d * cfg.vocab_size


def flops_per_token(cfg: Any, seq_len: int) -> float:
    """Training FLOPs per token: 6 N (forward + backward of the matrix multiplies) + 12 L d T (attention's
    QK^T and AV, forward + backward), as in the PaLM paper's appendix B and llm.c; T is at most the sliding
    window. Attention masked within documents is counted whole, as torchtitan and Fast-LLM count it."""
    span = min(seq_len, cfg.sliding_window or seq_len)
    return 6.0 * matmul_params(cfg) + 12.0 * cfg.num_hidden_layers * cfg.hidden_size * span


def document_positions(tokens: Any, eod: int) -> Any:
    """Each token's position in its document, for samples packed from several (B x T token ids): a document
    starts at each `<|endoftext|>` (the end of the one before, read as the start of the next, as a BOS), so
    every token but a sample's first segment's is predicted from its own document alone. transformers reads
    positions that restart as packed sequences and masks attention across them (block-causal, with the
    sliding window where there is one), in every attention implementation."""
    import torch

    index = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    starts = torch.where(tokens == eod, index, torch.zeros_like(index))
    return index - torch.cummax(starts, dim=1).values


def initialize(net: Any, seed: int) -> None:
    """Draw every weight of `net` (built on the meta device, then given memory with `to_empty`) as transformers
    initialises a StarCoder2 (linear and embedding weights normal with the config's std, biases 0, LayerNorms
    1 and 0), each parameter from a generator of its own, seeded by `seed` and its name: the same values on
    every machine, whatever the number of ranks and however FSDP shards them. Each parameter is drawn whole, one
    at a time, and each rank keeps its shard: the most memory taken at once is the largest parameter (15B's
    embedding, 1.2 GB). The rotary frequencies (buffers, not weights) are computed again."""
    import zlib

    import torch
    from torch import nn
    from transformers.models.starcoder2.modeling_starcoder2 import Starcoder2RotaryEmbedding

    std = net.config.initializer_range
    done: set[int] = set()
    for module_name, module in net.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if id(param) in done:  # a tied head is the embedding, drawn once
                continue
            done.add(id(param))
            full = torch.empty(param.shape, dtype=torch.float32)
            if isinstance(module, nn.LayerNorm):
                full.fill_(1.0 if name == "weight" else 0.0)
            elif name == "bias":
                full.zero_()
            else:
                key = zlib.crc32(f"{module_name}.{name}".encode())
                full.normal_(0.0, std, generator=torch.Generator().manual_seed(seed * 1_000_003 + key))
            _assign(param, full)
    for module in net.modules():
        if isinstance(module, Starcoder2RotaryEmbedding):
            fresh = Starcoder2RotaryEmbedding(net.config)
            for buffer in ("inv_freq", "original_inv_freq"):
                getattr(module, buffer).copy_(getattr(fresh, buffer))


def _assign(param: Any, full: Any) -> None:
    """`full` into `param`, or into this rank's shard of it (an FSDP2 DTensor)."""
    import torch

    with torch.no_grad():
        if hasattr(param, "device_mesh"):  # sharded: this rank's piece, cut here (every rank drew the same)
            from torch.distributed.tensor import distribute_tensor

            local = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None).to_local()
            param.to_local().copy_(local)
        else:
            param.copy_(full)


def checkpoint_activations(net: Any, every: int) -> None:
    """Every `every`th decoder layer (0: none) keeps only its input and recomputes its activations in the
    backward pass: memory for compute (transformers' own per-layer checkpointing, outside FSDP's hooks)."""
    if every <= 0:
        return
    kwargs = {"use_reentrant": False}
    if hasattr(net, "activation_checkpointing_enable"):  # transformers 5.2x
        net.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs, every_n_layers=every)
    else:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        for i, layer in enumerate(net.model.layers):
            layer.gradient_checkpointing = i % every == 0

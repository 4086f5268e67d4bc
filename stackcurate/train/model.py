"""StarCoder2-style decoders built from configuration alone, with the FLOPs count that MFU is measured by.

transformers' `Starcoder2ForCausalLM`: LayerNorm with bias, a GELU (tanh) MLP, biased projections, RoPE,
grouped-query attention, tied embeddings. Checkpoints are saved with `save_pretrained`, so `from_pretrained`,
bigcode-evaluation-harness and any HF tool load them. `sliding_window` is off: the presets' contexts are
shorter than StarCoder2's 4,096-token window.
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


PRESETS = {
    # tests and the CPU demo. lr: on the demo's shards 3e-4 left the held-out loss at 8.56 after 20 steps where
    # 3e-3 reached 7.94; 1e-2 was no better (600 steps on a 4,096-id run: 5.79 against 3e-3's 5.58)
    "tiny": Preset(layers=2, hidden=64, ffn=256, heads=4, kv_heads=2, lr=3e-3),
    "small": Preset(layers=4, hidden=256, ffn=1024, heads=4, kv_heads=2, lr=1e-3),
    "125m": Preset(layers=12, hidden=768, ffn=3072, heads=12, kv_heads=4, lr=6e-4),  # GPT-2 small's shape, GPT-3's lr
    "350m": Preset(layers=24, hidden=1024, ffn=4096, heads=16, kv_heads=4, lr=3e-4),  # GPT-3 medium's lr
}


def config(preset: str, vocab_size: int, seq_len: int, special: dict[str, int]) -> Any:
    from transformers import Starcoder2Config

    if preset not in PRESETS:
        raise StackcurateError(f"unknown preset '{preset}'; presets: {', '.join(PRESETS)}")
    p = PRESETS[preset]
    eod = special.get("<|endoftext|>", 0)
    rope: dict[str, Any] = {"rope_theta": 100_000.0}  # transformers 5 folds it into rope_parameters; 4.x takes it
    return Starcoder2Config(
        vocab_size=vocab_size,
        hidden_size=p.hidden,
        intermediate_size=p.ffn,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.kv_heads,
        max_position_embeddings=seq_len,
        sliding_window=None,
        tie_word_embeddings=True,
        use_bias=True,
        norm_epsilon=1e-5,
        initializer_range=0.02,
        hidden_act="gelu_pytorch_tanh",
        residual_dropout=0.0,
        embedding_dropout=0.0,
        attention_dropout=0.0,
        bos_token_id=eod,
        eos_token_id=eod,
        **rope,
    )


def build(cfg: Any) -> Any:
    from transformers import Starcoder2ForCausalLM

    cfg._attn_implementation = "sdpa"  # PyTorch's fused attention (flash kernels on GPU)
    return Starcoder2ForCausalLM(cfg)


def matmul_params(cfg: Any) -> int:
    """Weights that take part in a matrix multiply per token: every layer's projections plus the output head
    (tied to the embedding, which itself is a lookup, not a multiply). Biases and norms are left out."""
    d, f, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    kv = d // cfg.num_attention_heads * cfg.num_key_value_heads
    per_layer = d * d + 2 * d * kv + d * d + 2 * d * f  # q, k + v, o, MLP up + down
    return layers * per_layer + d * cfg.vocab_size


def flops_per_token(cfg: Any, seq_len: int) -> float:
    """Training FLOPs per token: 6 N (forward + backward of the matrix multiplies) + 12 L d T (attention's
    QK^T and AV, forward + backward), as in the PaLM paper's appendix B and llm.c."""
    return 6.0 * matmul_params(cfg) + 12.0 * cfg.num_hidden_layers * cfg.hidden_size * seq_len

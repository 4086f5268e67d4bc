"""The trainer at the published models' scale, on CPU: the presets are StarCoder2's shapes, packed documents do
not see each other, the sliding window is a band, and weights are drawn the same however they are sharded."""

import pytest
import torch
import torch.nn.functional as F

from stackcurate.core.errors import StackcurateError
from stackcurate.train import model

# The published configurations (REFERENCE (h), (n): the HF config.json of each and NeMo's starcoder2.py)
PUBLISHED = {
    "starcoder2-3b": ({"num_hidden_layers": 30, "hidden_size": 3072, "intermediate_size": 12288,
                       "num_attention_heads": 24, "num_key_value_heads": 2, "rope_theta": 999999.4420358813,
                       "initializer_range": 0.018042, "tie_word_embeddings": True}, 3_030_371_328),
    "starcoder2-7b": ({"num_hidden_layers": 32, "hidden_size": 4608, "intermediate_size": 18432,
                       "num_attention_heads": 36, "num_key_value_heads": 4, "rope_theta": 1_000_000.0,
                       "initializer_range": 0.018042, "tie_word_embeddings": True}, 7_173_923_840),
    "starcoder2-15b": ({"num_hidden_layers": 40, "hidden_size": 6144, "intermediate_size": 24576,
                        "num_attention_heads": 48, "num_key_value_heads": 4, "rope_theta": 100_000.0,
                        "initializer_range": 0.01275, "tie_word_embeddings": False}, 15_957_889_024),
}  # fmt: skip
EOD = 0


@pytest.mark.parametrize("preset", list(PUBLISHED))
def test_a_published_preset_is_the_published_model(preset):
    """On the meta device (no memory): the parameter count of the model card, and the same modules and shapes
    as transformers' own model of the published configuration."""
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    values, count = PUBLISHED[preset]
    ours = model.build(model.config(preset, 4096, 4096, {}), "meta")
    with torch.device("meta"):
        theirs = Starcoder2ForCausalLM(Starcoder2Config(
            vocab_size=49_152, max_position_embeddings=16_384, sliding_window=4_096, use_bias=True,
            norm_epsilon=1e-5, hidden_act="gelu_pytorch_tanh", **values))  # fmt: skip
    assert sum(p.numel() for p in ours.parameters()) == count == sum(p.numel() for p in theirs.parameters())
    shapes = [(name, tuple(p.shape)) for name, p in ours.named_parameters()]
    assert shapes == [(name, tuple(p.shape)) for name, p in theirs.named_parameters()]
    assert str(ours) == str(theirs)  # the module tree, printed
    for key in ("max_position_embeddings", "sliding_window", "vocab_size", "initializer_range"):
        assert getattr(ours.config, key) == getattr(theirs.config, key)
    assert ours.config.rope_parameters["rope_theta"] == values["rope_theta"]


def test_the_second_stage_s_context_and_theta_and_a_vocabulary_too_large_for_the_preset():
    cfg = model.config("starcoder2-3b", 4096, 16_384, {}, rope_theta=1e6, context=16_384)
    assert cfg.rope_parameters["rope_theta"] == 1e6 and cfg.max_position_embeddings == 16_384
    assert model.config("tiny", 4096, 64, {}, sliding_window=16).sliding_window == 16
    assert model.config("starcoder2-3b", 4096, 4096, {}, sliding_window=0).sliding_window is None
    with pytest.raises(StackcurateError, match="more than starcoder2-3b's 49152"):
        model.config("starcoder2-3b", 50_000, 4096, {})
    with pytest.raises(StackcurateError, match="raise --context"):
        model.config("tiny", 4096, 512, {}, context=256)


def _tiny(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    net = model.build(model.config("tiny", 300, 128, {"<|endoftext|>": EOD}, **overrides))
    return net.eval()


def test_a_packed_sample_s_loss_is_the_sum_of_its_documents_run_one_by_one():
    """Positions restart at each <|endoftext|> (read as the next document's start): each token is predicted from
    its own document alone, exactly as when the documents run one at a time."""
    net = _tiny()
    generator = torch.Generator().manual_seed(1)
    docs = [torch.randint(1, 300, (n,), generator=generator) for n in (9, 30, 1, 17)]
    eod = torch.tensor([EOD])
    sample = torch.cat([eod, *[torch.cat([d, eod]) for d in docs]])
    inputs, targets = sample[:-1][None], sample[1:][None]
    with torch.no_grad():
        logits = net(input_ids=inputs, position_ids=model.document_positions(inputs, EOD), use_cache=False).logits
        packed = F.cross_entropy(logits[0], targets[0], reduction="sum")
        alone = sum(F.cross_entropy(net(input_ids=torch.cat([eod, d])[None], use_cache=False).logits[0],
                                    torch.cat([d, eod]), reduction="sum") for d in docs)  # fmt: skip
        across = F.cross_entropy(net(input_ids=inputs, use_cache=False).logits[0], targets[0], reduction="sum")
    assert abs(packed.item() - float(alone)) < 1e-5 * abs(float(alone))
    assert abs(across.item() - float(alone)) > 1e-3  # attending across documents is another computation
    assert model.document_positions(torch.tensor([[5, 6, EOD, 7, EOD, EOD, 3]]), EOD).tolist() == [
        [0, 1, 0, 1, 0, 0, 1]]  # fmt: skip


def test_sliding_window_attention_is_a_dense_model_under_a_band_mask():
    """The window of W tokens: each token sees itself and the W - 1 before it; with packed documents, the band
    and the documents' blocks together. (FlexAttention, auto's choice on a GPU, is not tested here: on this
    torch's CPU build its compiled kernel fails to compile for some shapes and returns NaN for others.)"""
    windowed = _tiny(sliding_window=8)
    dense = _tiny()
    tokens = torch.randint(1, 300, (2, 40), generator=torch.Generator().manual_seed(2))
    tokens[1, 25] = EOD
    i = torch.arange(40)
    band = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 8)
    positions = model.document_positions(tokens, EOD)
    same_doc = torch.cumsum(tokens == EOD, 1)
    blocks = band[None] & (same_doc[:, :, None] == same_doc[:, None, :])
    with torch.no_grad():
        got = windowed(input_ids=tokens, position_ids=positions, use_cache=False).logits
        want = dense(input_ids=tokens, attention_mask=blocks[:, None], position_ids=positions, use_cache=False).logits
        full = dense(input_ids=tokens, position_ids=positions, use_cache=False).logits
    assert (got - want).abs().max().item() < 1e-5, (got - want).abs().max().item()
    assert not torch.allclose(got, full, atol=1e-3)  # the window cut something


def test_weights_are_drawn_the_same_whatever_the_device_they_are_built_on():
    """Meta-device models get their weights from `initialize`: per parameter, from the seed and its name."""
    cfg = model.config("tiny", 300, 64, {})
    first, second = (model.build(cfg, "meta") for _ in range(2))
    for net in (first, second):
        net.to_empty(device="cpu")
        net.tie_weights()
        model.initialize(net, 42)
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert first.lm_head.weight is first.model.embed_tokens.weight  # tied, as built
    weight = first.model.layers[0].mlp.c_fc.weight
    assert abs(weight.std().item() - 0.02) < 2e-3 and first.model.norm.weight.eq(1).all()
    tokens = torch.randint(0, 300, (1, 16))
    fresh = model.build(cfg)  # transformers' own draw: another sample of the same distributions
    fresh.load_state_dict(first.state_dict())
    assert torch.equal(fresh(input_ids=tokens).logits, first(input_ids=tokens).logits)  # buffers made again


@pytest.mark.parametrize("every", [1, 2])
def test_checkpointed_layers_keep_fewer_activations_for_the_same_gradients(every):
    """Every Nth layer keeps only its input: fewer tensors saved for the backward pass, the same gradients."""
    tokens = torch.randint(1, 300, (2, 32), generator=torch.Generator().manual_seed(3))

    def run(checkpointed: int) -> tuple[int, list[torch.Tensor]]:
        torch.manual_seed(5)  # the same weights each time
        net = model.build(model.config("small", 300, 64, {})).train()
        model.checkpoint_activations(net, checkpointed)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(1) or t, lambda t: t):
            loss = net(input_ids=tokens, labels=tokens, use_cache=False).loss
        loss.backward()
        return len(saved), [p.grad for p in net.parameters()]

    kept, grads = run(0)
    fewer, same = run(every)
    assert fewer < kept
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, same, strict=True))

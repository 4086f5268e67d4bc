"""The compiled word splitter gives HF `tokenizers`' own ids: on real code, on generated text that mixes every
class of character the pre-tokenizer treats apart, and on code points drawn from all of Unicode."""

import collections
import json
import random
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from stackcurate.core import tokens as tk
from stackcurate.stages.tokenize import tokenizer as bpe
from stackcurate.stages.tokenize.encoder import Encoder, count_words

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """StarCoder's recipe (1,000 ids) trained on stdlib modules."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[:40]]
    return bpe.train(texts, tmp_path_factory.mktemp("tok"), vocab_size=1000, info={})


def _hf(tok, texts):
    return [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]


def _fast(tok, texts):
    encoder = Encoder(tok)
    assert encoder.fast
    return [ids.tolist() for ids in encoder.encode(texts)]


def test_real_code_gives_hf_ids(tok):
    texts = [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[40:120]]
    texts += ["", "x", "<file_sep>", tk.SPECIAL_TOKENS[3] + "\n" + texts[0] + tk.EOD]
    assert _fast(tok, texts) == _hf(tok, texts)


# Pieces the pre-tokenizer treats apart: contractions and their near misses, spaces before each class, runs of
# mixed whitespace (the look-ahead), ASCII and other numerals (Digits isolates them; superscripts and roman
# numerals are numbers too), letters of several scripts, combining marks, symbols, emoji, special tokens whole,
# cut short and back to back.
PIECES = [
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'x", "''", "'r", "'l", "'", "’s",
    " ", "  ", "\t", "\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u0085", "\u1680", "\x0b", "\x0c",
    "a", "Z", "é", "日本", "Ωμέγα", "ñ", "ǅ", "ʰ", "\u0301", "\u200d", "_", "-", "=>", "{", "}", "#", "@",
    "0", "7", "42", "٣", "²", "½", "Ⅻ", "〇", "𝟘", "🚀", "\U0001f469\u200d\U0001f4bb", "\x00", "\ufeff",
    "<", ">", "<|", "<fim_", "<fim_prefix>", "<|endoftext|>", "<file_sep><file_sep>", "<repo_name",
]  # fmt: skip


def test_generated_text_gives_hf_ids(tok):
    rng = random.Random(7)
    texts = ["".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 400))) for _ in range(400)]
    assert _fast(tok, texts) == _hf(tok, texts)


def test_words_are_the_pre_tokenizers_words(tok):
    """Word by word, not only id by id: a split the merges happen to hide still fails here."""
    rng = random.Random(5)
    plain = [p for p in PIECES if "<" not in p]
    encoder = Encoder(tok)
    for _ in range(300):
        text = "".join(rng.choice(plain) for _ in range(rng.randrange(0, 300)))
        assert encoder.words(text) == [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(text)]


def test_code_points_from_all_of_unicode_give_hf_ids(tok):
    rng = random.Random(11)
    points = [*range(0, 0x800), *rng.sample(range(0x800, 0x110000), 6000)]
    chars = [chr(c) for c in points if not 0xD800 <= c < 0xE000]
    # each character alone, after a space, doubled, beside letters, digits and whitespace
    texts = [f"{c}|a{c}b {c}{c}\n{c} 1{c}'s{c}  {c}x\t{c}" for c in chars]
    texts = ["".join(texts[i : i + 50]) for i in range(0, len(texts), 50)]
    assert _fast(tok, texts) == _hf(tok, texts)


def test_another_recipe_is_encoded_by_hf_itself(tok):
    from tokenizers import Tokenizer, pre_tokenizers

    other = Tokenizer.from_str(tok.to_str())
    other.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    encoder = Encoder(other)
    assert not encoder.fast
    texts = ["def f(x):\n    return x + 1\n", " 12 apples"]
    assert [ids.tolist() for ids in encoder.encode(texts)] == _hf(other, texts)


def test_ids_are_int64_arrays_one_per_text(tok):
    out = Encoder(tok).encode(["a b", "", "<|endoftext|>"])
    assert [a.dtype for a in out] == [np.dtype(np.int64)] * 3
    assert [len(a) for a in out] == [len(ids) for ids in _hf(tok, ["a b", "", "<|endoftext|>"])]
    assert out[2].tolist() == [0]


def _hf_trained(texts, vocab_size):
    """StarCoder's recipe trained by HF alone, on the texts themselves (the way `bpe.train` trained before)."""
    tokenizer, trainer = bpe.recipe(vocab_size)
    tokenizer.train_from_iterator([bpe.strip_special(t) for t in texts], trainer)
    return json.loads(tokenizer.to_str())["model"]


@pytest.mark.parametrize("vocab_size", [400, 3000])
def test_training_from_counted_words_gives_hfs_own_vocabulary_and_merges(tmp_path, vocab_size):
    rng = random.Random(vocab_size)
    texts = [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[120:180]]
    texts += ["".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 300))) for _ in range(200)]
    trained = json.loads(bpe.train(texts, tmp_path, vocab_size=vocab_size, info={}).to_str())["model"]
    expected = _hf_trained(texts, vocab_size)
    assert trained["vocab"] == expected["vocab"]
    assert trained["merges"] == expected["merges"]


def test_counted_words_are_the_pre_tokenizers_words(tok):
    rng = random.Random(3)
    texts = ["".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 200))) for _ in range(300)]
    expected = collections.Counter(w for t in texts for w, _ in tok.pre_tokenizer.pre_tokenize_str(t))
    assert count_words(texts, tok.pre_tokenizer, batch_chars=500) == dict(expected)

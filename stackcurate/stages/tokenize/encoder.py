"""Token ids of documents: HF `tokenizers`' own ids, with words found once per batch by a compiled loop.

For StarCoder's recipe (`tokenizer.py`: no normalizer, `Digits(individual_digits=True)` then `ByteLevel`,
BPE without dropout, special tokens matched as written), `Encoder` cuts the special tokens out with a regex,
finds the words with `kernel.split_words`, and asks HF's BPE model for the ids of each distinct word of the
batch once: faster than `Tokenizer.encode_batch_fast` on code (`benchmarks/tokenize_throughput.py`), and the
same ids (tested against it on generated and real text). Any other tokenizer is encoded by `encode_batch_fast`
itself.
"""

import json
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from stackcurate.core.errors import StackcurateError

# the classes `kernel` gives characters (kernel.py imports them from here: numba stays out of a process that
# only checks a pipeline)
LETTER, NUMBER, SPACE, OTHER, DIGIT, UNKNOWN = 1, 2, 3, 4, 5, 0


def _kernel() -> Any:
    """The compiled splitter, imported where texts are tokenized (numba is slow and heavy to import)."""
    from stackcurate.stages.tokenize import kernel

    return kernel


_RECIPE = [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
]


def _byte_level_table() -> dict[int, str]:
    """GPT-2's byte-to-character map as a `str.translate` table over Latin-1 characters (one per byte): printable
    bytes keep their character, the others take 256, 257, ... in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    return {**{b: chr(b) for b in kept}, **{b: chr(256 + i) for i, b in enumerate(moved)}}


_TO_BYTE_LEVEL = _byte_level_table()


def byte_level(word: str) -> str:
    """`word` in GPT-2's byte-level characters (each UTF-8 byte one character)."""
    return word.encode("utf-8").decode("latin-1").translate(_TO_BYTE_LEVEL)


def _recipe_parts(tokenizer: Any) -> tuple[re.Pattern[str] | None, dict[str, int]] | None:
    """The special-token matcher and ids when `tokenizer` follows the recipe `kernel` reproduces, else None."""
    spec = json.loads(tokenizer.to_str())
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    if spec.get("normalizer") is not None or len(steps) != len(_RECIPE):
        return None
    if any(any(step.get(k) != v for k, v in want.items()) for step, want in zip(steps, _RECIPE, strict=True)):
        return None
    if model.get("type") != "BPE" or model.get("dropout") or model.get("byte_fallback"):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    added = spec.get("added_tokens", [])
    if any(t["normalized"] or t["lstrip"] or t["rstrip"] or t["single_word"] for t in added):
        return None
    vocab = model.get("vocab", {})
    if not all(ch in vocab for ch in _TO_BYTE_LEVEL.values()):
        return None
    ids = {t["content"]: t["id"] for t in added}
    # HF matches added tokens leftmost-longest; `re` tries alternatives in order, so the longest go first
    contents = sorted(ids, key=len, reverse=True)
    return (re.compile("|".join(map(re.escape, contents))) if contents else None), ids


def _code_points(text: str) -> np.ndarray:
    try:
        return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    except UnicodeEncodeError as e:  # a lone surrogate, which Arrow's UTF-8 strings never hold
        raise StackcurateError(
            f"text with a lone surrogate ({e.reason}) cannot be tokenized; fix its encoding"
        ) from None


def _distinct_words(
    classes: "CharClasses", joined: str, starts: list[int], ends: list[int], specials: list[int]
) -> tuple[np.ndarray, list[str], np.ndarray, int]:
    """`kernel.split_words` over the items of `joined` (text spans, or special-token ids where `specials` >= 0),
    then its distinct words: each word's number (a special token's is negative), the distinct words in
    byte-level characters, each item's first word, and the count of words."""
    cps = _code_points(joined)
    classes.ensure(cps)
    room = len(cps) + len(starts)
    word_start, word_end = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64)
    item_words = np.empty(len(starts) + 1, dtype=np.int64)
    kernel = _kernel()
    n = kernel.split_words(cps, classes.table, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64),
                           np.array(specials, dtype=np.int64), word_start, word_end, item_words)  # fmt: skip
    number, first = kernel.distinct_words(cps, word_start, word_end, n)
    bounds = zip(word_start[first].tolist(), word_end[first].tolist(), strict=True)
    return number, [byte_level(joined[s:e]) for s, e in bounds], item_words, n


def count_words(texts: Iterable[str], pre_tokenizer: Any, batch_chars: int = 4_000_000) -> dict[str, int]:
    """Each word of `texts` in byte-level characters, as StarCoder's pre-tokenizer (`pre_tokenizer`, checked
    to follow the recipe by the caller) gives them, with its count: what HF's BPE trainer counts before its
    merges, found without a regex and an offset table per word."""
    classes = CharClasses(pre_tokenizer)
    counts: dict[str, int] = {}

    def add(batch: list[str]) -> None:
        ends = np.cumsum([len(t) for t in batch]).tolist()
        number, words, _, n = _distinct_words(classes, "".join(batch), [0, *ends[:-1]], ends, [-1] * len(batch))
        for word, seen in zip(words, np.bincount(number[:n], minlength=len(words)).tolist(), strict=True):
            counts[word] = counts.get(word, 0) + seen

    batch, size = [], 0
    for text in texts:
        batch.append(text)
        size += len(text)
        if size >= batch_chars:
            add(batch)
            batch, size = [], 0
    if batch:
        add(batch)
    return counts


class CharClasses:
    """`kernel`'s class of each code point, asked of the tokenizer's own pre-tokenizer the first time the code
    point is seen: so Unicode tables agree with HF's by construction, whatever Python's version."""

    def __init__(self, pre_tokenizer: Any) -> None:
        self.pre_tokenizer = pre_tokenizer
        self.table = np.full(0x110000, UNKNOWN, dtype=np.uint8)
        self.table[ord(" ")] = SPACE
        self.table[ord("0")] = DIGIT  # the probes' separator

    def ensure(self, cps: np.ndarray) -> None:
        unknown = cps[self.table[cps] == UNKNOWN]
        if len(unknown):
            self._probe(np.unique(unknown))

    def _probe(self, cps: np.ndarray) -> None:
        # four probes per character, each a piece of its own between "0"s (Digits isolates them):
        # "a"+c joins only a letter, "!"+c only an other, c+c+"a" is two words for a number and three for a
        # space, " "+c is two words only when Digits isolates c
        probes = []
        for c in map(chr, cps.tolist()):
            probes += ["a" + c, "!" + c, c + c + "a", " " + c]
        words = [w for w, _ in self.pre_tokenizer.pre_tokenize_str("0".join(probes))]
        counts, run = [], 0
        for word in [*words, "0"]:
            if word == "0":
                counts.append(run)
                run = 0
            else:
                run += 1
        if len(counts) != len(probes):
            raise RuntimeError(f"unexpected pre-tokenizer answer for {len(cps)} characters")
        for k, c in enumerate(cps.tolist()):
            letter, other, three, digit = counts[4 * k : 4 * k + 4]
            if digit == 2:
                kind = DIGIT
            elif letter == 1:
                kind = LETTER
            elif other == 1:
                kind = OTHER
            else:
                kind = SPACE if three == 3 else NUMBER
            self.table[c] = kind


class Encoder:
    """Token ids of texts, the same as `tokenizer.encode_batch_fast(texts, add_special_tokens=False)`."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        parts = _recipe_parts(tokenizer)
        self.fast = parts is not None
        if parts is None:
            return
        from tokenizers import Tokenizer

        self.special, self.special_ids = parts
        self.classes = CharClasses(tokenizer.pre_tokenizer)
        # the same BPE model alone: every input is one word, already in byte-level characters
        self.model = Tokenizer(tokenizer.model)

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """Each text's ids (int64)."""
        if self.fast:
            return self._encode_fast(texts)
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def words(self, text: str) -> list[str]:
        """The pre-tokenizer's words of `text` in byte-level characters, as `pre_tokenize_str` gives them
        (special tokens are not cut out: that is `encode`'s first step)."""
        number, words, _, n = _distinct_words(self.classes, text, [0], [len(text)], [-1])
        return [words[i] for i in number[:n].tolist()]

    def _encode_fast(self, texts: list[str]) -> list[np.ndarray]:
        starts, ends, specials, doc_items = [], [], [], [0]
        base = 0
        for text in texts:
            pos = 0
            for m in self.special.finditer(text) if self.special is not None else ():
                if m.start() > pos:
                    starts.append(base + pos), ends.append(base + m.start()), specials.append(-1)
                starts.append(0), ends.append(0), specials.append(self.special_ids[m.group()])
                pos = m.end()
            if pos < len(text):
                starts.append(base + pos), ends.append(base + len(text)), specials.append(-1)
            base += len(text)
            doc_items.append(len(starts))
        number, words, item_words, n = _distinct_words(self.classes, "".join(texts), starts, ends, specials)
        encoded = [e.ids for e in self.model.encode_batch_fast(words, add_special_tokens=False)]
        word_offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(ids) for ids in encoded], out=word_offsets[1:])
        word_ids = np.fromiter((i for ids in encoded for i in ids), dtype=np.int64, count=int(word_offsets[-1]))
        ids, offsets = _kernel().assemble(number, n, word_offsets, word_ids)
        bounds = offsets[item_words[doc_items]]
        return [ids[bounds[d] : bounds[d + 1]] for d in range(len(texts))]

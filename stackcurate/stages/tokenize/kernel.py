"""Compiled word splitting for byte-level BPE: StarCoder's pre-tokenizer over a batch's code points.

Why hand-written: HF `tokenizers` pre-tokenizes every occurrence of every word with a regex and an offset
table per piece; on code that is slow and most of the tokenize stage, and its Python API cannot hand the
words to the BPE model once per distinct word. This loop splits the words and numbers the distinct ones in a
fraction of that time (`benchmarks/tokenize_throughput.py`; benchmarks/README.md, "Tokenization
throughput"); the ids still come from HF's own BPE model (`encoder.py`), once per distinct word of a batch.

The pre-tokenizer reproduced is `Sequence([Digits(individual_digits=True), ByteLevel(use_regex=True)])`:
1. every numeric character (Rust's `char::is_numeric`) is a piece of its own, and the text between them a
   piece (special tokens were cut out before, so they also end pieces);
2. each piece is split by GPT-2's regex, leftmost alternative first:
   `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`, where the look-ahead
   sees the piece's end, never the next piece.

Character classes come from HF itself (`encoder.CharClasses` asks its pre-tokenizer about each new code
point), so Unicode versions never disagree.
"""

import numpy as np
from numba import njit

# character classes: letter, number (a regex \p{N} that is not numeric for Digits), whitespace, other,
# numeric (Digits isolates it)
from stackcurate.stages.tokenize.encoder import DIGIT, LETTER, NUMBER, OTHER, SPACE


@njit(cache=True, inline="always")
def _regex_piece(cps, cls, i, e, starts, ends, n):  # noqa: ANN001, ANN202
    """GPT-2's regex over cps[i:e]: the words' bounds appended at `n`; returns the new count."""
    while i < e:
        c = cps[i]
        j = -1
        if c == 39 and i + 1 < e:  # 's 't 'm 'd, then 're 've 'll
            a = cps[i + 1]
            if a == 115 or a == 116 or a == 109 or a == 100:
                j = i + 2
            elif i + 2 < e:
                b = cps[i + 2]
                if (a == 114 and b == 101) or (a == 118 and b == 101) or (a == 108 and b == 108):
                    j = i + 3
        if j < 0:
            kind = cls[c]
            first = i
            if c == 32 and i + 1 < e:  # ` ?` before a letter, number or other run
                after = cls[cps[i + 1]]
                if after == LETTER or after == NUMBER or after == OTHER:
                    kind = after
                    first = i + 1
            if kind == SPACE:
                r = i + 1
                while r < e and cls[cps[r]] == SPACE:
                    r += 1
                # \s+(?!\S): the whole run at the piece's end, else all but its last; \s+ for a single one
                j = r if r == e or r - i == 1 else r - 1
            else:
                r = first + 1
                while r < e and cls[cps[r]] == kind:
                    r += 1
                j = r
        starts[n] = i
        ends[n] = j
        n += 1
        i = j
    return n


@njit(cache=True)
def split_words(cps, cls, item_start, item_end, item_special, starts, ends, item_words):  # noqa: ANN001, ANN201
    """The words of every item, in order. An item is a text span [item_start, item_end) of `cps`, or a special
    token (`item_special` >= 0, its id), which becomes one word with start -1 - id. `starts`/`ends` need room
    for one word per code point plus one per item; `item_words[k]` is item k's first word. Returns the count."""
    n = 0
    for k in range(len(item_start)):
        item_words[k] = n
        if item_special[k] >= 0:
            starts[n] = -1 - item_special[k]
            ends[n] = 0
            n += 1
            continue
        i = item_start[k]
        e = item_end[k]
        while i < e:
            p = i
            while p < e and cls[cps[p]] != DIGIT:
                p += 1
            n = _regex_piece(cps, cls, i, p, starts, ends, n)
            if p < e:  # the numeric character, a piece of its own
                starts[n] = p
                ends[n] = p + 1
                n += 1
                p += 1
            i = p
    item_words[len(item_start)] = n
    return n


@njit(cache=True)
def distinct_words(cps, starts, ends, n):  # noqa: ANN001, ANN201
    """Number the distinct words of `starts[:n]`/`ends[:n]` in order of first occurrence: returns each word's
    number (special tokens keep their negative start) and, per number, the index of its first occurrence."""
    size = 16
    while size < 2 * n:
        size <<= 1
    mask = size - 1
    table = np.full(size, -1, dtype=np.int64)  # slot -> word number
    first = np.empty(n, dtype=np.int64)
    number = np.empty(n, dtype=np.int64)
    m = 0
    for t in range(n):
        s = starts[t]
        if s < 0:
            number[t] = s
            continue
        e = ends[t]
        h = np.uint64(14695981039346656037)  # FNV-1a over the code points
        for i in range(s, e):
            h = (h ^ np.uint64(cps[i])) * np.uint64(1099511628211)
        slot = np.int64(h & np.uint64(mask))
        while True:
            w = table[slot]
            if w < 0:
                table[slot] = m
                first[m] = t
                number[t] = m
                m += 1
                break
            f = first[w]
            fs = starts[f]
            if ends[f] - fs == e - s:
                same = True
                for i in range(e - s):
                    if cps[fs + i] != cps[s + i]:
                        same = False
                        break
                if same:
                    number[t] = w
                    break
            slot = (slot + 1) & mask
    return number, first[:m]


@njit(cache=True)
def assemble(number, n, word_offsets, word_ids):  # noqa: ANN001, ANN201
    """The ids of `n` words in order (a special token's id from its negative number) and each word's offset
    into them (n + 1 entries)."""
    offsets = np.empty(n + 1, dtype=np.int64)
    total = 0
    for t in range(n):
        offsets[t] = total
        w = number[t]
        total += 1 if w < 0 else word_offsets[w + 1] - word_offsets[w]
    offsets[n] = total
    ids = np.empty(total, dtype=np.int64)
    for t in range(n):
        w = number[t]
        o = offsets[t]
        if w < 0:
            ids[o] = -1 - w
        else:
            a = word_offsets[w]
            for i in range(word_offsets[w + 1] - a):
                ids[o + i] = word_ids[a + i]
    return ids, offsets

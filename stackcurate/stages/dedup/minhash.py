"""MinHash signatures and LSH band keys for a whole batch in one compiled pass.

Semantics are datasketch's (2.x, default `affine32` scheme), so a signature here equals
`datasketch.MinHash(num_perm, seed, hashfunc=xxh32)` updated with the same shingles:
- shingles follow StarCoder2: the text lower-cased, tokens are the maximal runs of word characters (Python's
  `\\w`: str.isalnum() or `_`, for every code point), a shingle is `ngram` consecutive tokens joined by one
  space, encoded as UTF-8; a text with fewer than `min_tokens` tokens has no shingles (exact dedup only), one
  with fewer than `ngram` (but at least `min_tokens`) has one shingle of all its tokens;
- each shingle is hashed with xxh32 (seed 0), mixed by the MurmurHash3 finalizer, then permuted by
  `a * h + b mod 2^32` with odd `a`; (a, b) come from `numpy.random.RandomState(seed)` as datasketch draws them;
- band `i` covers signature values `[i * rows, (i + 1) * rows)`, as in `datasketch.MinHashLSH`; two texts
  share a band key when those values are equal (keys are 64-bit hashes of the values and the band number).

Why hand-written: datasketch hashes one shingle per Python call; this loop (numba, compiled once per machine
and cached next to this file) does tokenizing, hashing and all permutations without leaving machine code,
which is what makes the signature pass run at about the speed of reading the data.
"""

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from stackcurate.core.text import ALPHA, NUMERIC, as_texts, unicode_classes, utf8_buffers

_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1


@functools.cache
def word_table() -> np.ndarray:
    """True for the code points Python's re module counts as `\\w`: str.isalnum() or `_`."""
    word = (unicode_classes() & (ALPHA | NUMERIC)) != 0
    word[ord("_")] = True
    return word


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters (odd a, any b) for `num_perm` and `seed`."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


@njit(cache=True, inline="always")
def _rotl(x: np.uint64, r: int) -> np.uint64:
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & np.uint64(0xFFFFFFFF)


@njit(cache=True, inline="always")
def _read32(buf: np.ndarray, i: int) -> np.uint64:
    return (
        np.uint64(buf[i])
        | (np.uint64(buf[i + 1]) << np.uint64(8))
        | (np.uint64(buf[i + 2]) << np.uint64(16))
        | (np.uint64(buf[i + 3]) << np.uint64(24))
    )


@njit(cache=True)
def xxh32(buf: np.ndarray, n: int) -> np.uint64:
    """xxHash32 with seed 0 of `buf[:n]` (all arithmetic in uint64, masked to 32 bits)."""
    m = np.uint64(0xFFFFFFFF)
    p1, p2, p3, p4, p5 = np.uint64(_P1), np.uint64(_P2), np.uint64(_P3), np.uint64(_P4), np.uint64(_P5)
    i = 0
    if n >= 16:
        v1 = (p1 + p2) & m
        v2 = p2
        v3 = np.uint64(0)
        v4 = (np.uint64(0x100000000) - p1) & m
        while i + 16 <= n:
            v1 = (_rotl((v1 + _read32(buf, i) * p2) & m, 13) * p1) & m
            v2 = (_rotl((v2 + _read32(buf, i + 4) * p2) & m, 13) * p1) & m
            v3 = (_rotl((v3 + _read32(buf, i + 8) * p2) & m, 13) * p1) & m
            v4 = (_rotl((v4 + _read32(buf, i + 12) * p2) & m, 13) * p1) & m
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & m
    else:
        h = p5
    h = (h + np.uint64(n)) & m
    while i + 4 <= n:
        h = (_rotl((h + _read32(buf, i) * p3) & m, 17) * p4) & m
        i += 4
    while i < n:
        h = (_rotl((h + np.uint64(buf[i]) * p5) & m, 11) * p1) & m
        i += 1
    h ^= h >> np.uint64(15)
    h = (h * p2) & m
    h ^= h >> np.uint64(13)
    h = (h * p3) & m
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True, inline="always")
def _fmix32(h: np.uint64) -> np.uint64:
    m = np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & m
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & m
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True)
def _tokens(data: np.ndarray, lo: int, hi: int, word: np.ndarray, tok_start: np.ndarray, tok_end: np.ndarray) -> int:
    """Byte ranges of the maximal runs of word code points in `data[lo:hi]`; returns how many."""
    ntok = 0
    inside = False
    i = lo
    while i < hi:
        c = data[i]
        if c < 0x80:
            cp, width = np.int64(c), 1
        elif c < 0xE0:
            cp, width = (np.int64(c & 0x1F) << 6) | (data[i + 1] & 0x3F), 2
        elif c < 0xF0:
            cp = (np.int64(c & 0x0F) << 12) | (np.int64(data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F)
            width = 3
        else:
            cp = (
                (np.int64(c & 0x07) << 18)
                | (np.int64(data[i + 1] & 0x3F) << 12)
                | (np.int64(data[i + 2] & 0x3F) << 6)
                | (data[i + 3] & 0x3F)
            )
            width = 4
        if cp < word.shape[0] and word[cp]:
            if not inside:
                tok_start[ntok] = i
                inside = True
            tok_end[ntok] = i + width
        elif inside:
            ntok += 1
            inside = False
        i += width
    if inside:
        ntok += 1
    return ntok


@njit(cache=True)
def _shingle_hash(
    data: np.ndarray, tok_start: np.ndarray, tok_end: np.ndarray, first: int, span: int, scratch: np.ndarray
) -> np.uint64:
    """xxh32 of tokens `[first, first + span)` joined by single spaces."""
    k = 0
    for t in range(first, first + span):
        if t > first:
            scratch[k] = 32
            k += 1
        for j in range(tok_start[t], tok_end[t]):
            scratch[k] = data[j]
            k += 1
    return xxh32(scratch, k)


@njit(cache=True)
def _longest(offsets: np.ndarray) -> int:
    longest = 0
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    return longest


@njit(cache=True)
def _signatures(
    data: np.ndarray,
    offsets: np.ndarray,
    word: np.ndarray,
    ngram: int,
    min_tokens: int,
    a: np.ndarray,
    b: np.ndarray,
    sig: np.ndarray,
    has_shingles: np.ndarray,
) -> None:
    num_perm = a.shape[0]
    longest = _longest(offsets)
    tok_start = np.empty(longest + 1, dtype=np.int64)
    tok_end = np.empty(longest + 1, dtype=np.int64)
    scratch = np.empty(longest + ngram + 1, dtype=np.uint8)
    for d in range(offsets.shape[0] - 1):
        ntok = _tokens(data, offsets[d], offsets[d + 1], word, tok_start, tok_end)
        row = sig[d]
        row[:] = np.uint32(0xFFFFFFFF)
        if ntok < min_tokens or ntok == 0:
            has_shingles[d] = False
            continue
        has_shingles[d] = True
        span = min(ngram, ntok)
        for first in range(ntok - span + 1):
            x = np.uint32(_fmix32(_shingle_hash(data, tok_start, tok_end, first, span, scratch)))
            for p in range(num_perm):  # uint32 arithmetic wraps: mod 2^32, as datasketch
                row[p] = min(row[p], np.uint32(a[p] * x + b[p]))


@njit(cache=True)
def _shingle_hashes(
    data: np.ndarray, offsets: np.ndarray, word: np.ndarray, ngram: int, min_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    longest = _longest(offsets)
    tok_start = np.empty(longest + 1, dtype=np.int64)
    tok_end = np.empty(longest + 1, dtype=np.int64)
    scratch = np.empty(longest + ngram + 1, dtype=np.uint8)
    n_docs = offsets.shape[0] - 1
    out_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    out = np.empty(max(1, (offsets[n_docs] - offsets[0]) // 2 + n_docs), dtype=np.uint32)
    used = 0
    for d in range(n_docs):
        ntok = _tokens(data, offsets[d], offsets[d + 1], word, tok_start, tok_end)
        if ntok >= min_tokens and ntok > 0:
            span = min(ngram, ntok)
            start = used
            for first in range(ntok - span + 1):
                out[used] = _shingle_hash(data, tok_start, tok_end, first, span, scratch)
                used += 1
            out[start:used] = np.sort(out[start:used])
            w = start  # drop repeats
            for r in range(start, used):
                if r == start or out[r] != out[r - 1]:
                    out[w] = out[r]
                    w += 1
            used = w
        out_offsets[d + 1] = used
    return out[:used].copy(), out_offsets


@njit(cache=True)
def jaccard_pairs(hashes: np.ndarray, offsets: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Exact Jaccard of the shingle sets of documents `left[i]` and `right[i]` (sorted unique hashes)."""
    out = np.empty(left.shape[0], dtype=np.float64)
    for i in range(left.shape[0]):
        a0, a1 = offsets[left[i]], offsets[left[i] + 1]
        b0, b1 = offsets[right[i]], offsets[right[i] + 1]
        common = 0
        while a0 < a1 and b0 < b1:
            if hashes[a0] == hashes[b0]:
                common += 1
                a0 += 1
                b0 += 1
            elif hashes[a0] < hashes[b0]:
                a0 += 1
            else:
                b0 += 1
        union = (offsets[left[i] + 1] - offsets[left[i]]) + (offsets[right[i] + 1] - offsets[right[i]]) - common
        out[i] = common / union if union else 0.0
    return out


@njit(cache=True, inline="always")
def _splitmix64(x: np.uint64) -> np.uint64:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def _band_keys(sig: np.ndarray, bands: int, rows: int, keys: np.ndarray) -> None:
    for d in range(sig.shape[0]):
        for band in range(bands):
            h = _splitmix64(np.uint64(band + 1))
            for j in range(band * rows, (band + 1) * rows):
                h = _splitmix64(h ^ np.uint64(sig[d, j]))
            keys[d, band] = h


def signatures(
    texts: pa.Array | pa.ChunkedArray, *, num_perm: int, seed: int, ngram: int, min_tokens: int, lowercase: bool
) -> tuple[np.ndarray, np.ndarray]:
    """MinHash signatures (n x num_perm uint32) and whether each text had shingles."""
    if lowercase:
        texts = pc.utf8_lower(texts)  # pyright: ignore[reportAttributeAccessIssue]
    data, offsets = utf8_buffers(as_texts(texts))
    a, b = permutations(num_perm, seed)
    n = len(offsets) - 1
    sig = np.empty((n, num_perm), dtype=np.uint32)
    has = np.zeros(n, dtype=np.bool_)
    _signatures(data, offsets, word_table(), ngram, min_tokens, a, b, sig, has)
    return sig, has


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One 64-bit key per (text, band): equal keys mean equal signature values in that band."""
    if bands * rows > sig.shape[1]:
        raise ValueError(f"{bands} bands x {rows} rows need {bands * rows} permutations, have {sig.shape[1]}")
    keys = np.empty((sig.shape[0], bands), dtype=np.uint64)
    _band_keys(sig, bands, rows, keys)
    return keys


def shingle_hashes(
    texts: pa.Array | pa.ChunkedArray, *, ngram: int, min_tokens: int, lowercase: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each text's shingles as sorted unique xxh32 values: (values, offsets), text i owning
    `values[offsets[i]:offsets[i + 1]]` (empty for a text without shingles)."""
    if lowercase:
        texts = pc.utf8_lower(texts)  # pyright: ignore[reportAttributeAccessIssue]
    data, offsets = utf8_buffers(as_texts(texts))
    return _shingle_hashes(data, offsets, word_table(), ngram, min_tokens)

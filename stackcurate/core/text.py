"""Texts as the compiled kernels see them: one contiguous UTF-8 buffer with offsets, and per-code-point
character classes taken from Python itself (shared by the filter kernel and the MinHash pass)."""

import functools
import os

import numpy as np
import pyarrow as pa

ALPHA, NUMERIC, SPACE = 1, 2, 4  # unicode_classes() flags


def as_texts(texts: pa.Array | pa.ChunkedArray) -> pa.LargeStringArray:
    """Texts as one contiguous large_string array without nulls (a no-op when they already are)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.chunk(0) if texts.num_chunks == 1 else texts.combine_chunks()
    if texts.type != pa.large_string():
        texts = texts.cast(pa.large_string())
    return texts.fill_null("") if texts.null_count else texts


def utf8_buffers(texts: pa.LargeStringArray) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, int64 offsets) of a large_string array, without copying them."""
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]  # type: ignore[arg-type]
    buffer = texts.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.zeros(0, np.uint8)  # type: ignore[arg-type]
    return data, offsets


def _build_unicode_classes() -> np.ndarray:
    table = np.zeros(0x110000, dtype=np.uint8)
    for code in range(0x110000):
        ch = chr(code)
        table[code] = (ALPHA if ch.isalpha() else NUMERIC if ch.isalnum() else 0) | (SPACE if ch.isspace() else 0)
    return table


@functools.cache
def unicode_classes() -> np.ndarray:
    """uint8 flags per code point, from Python itself: ALPHA = str.isalpha, NUMERIC = str.isalnum but not
    alpha (digits, numerals), SPACE = str.isspace. Cached on disk (building it takes about a second) and
    in the process."""
    path = os.path.join(os.path.dirname(__file__), "__pycache__", "unicode_classes_v2.npy")
    try:
        return np.load(path)
    except (OSError, ValueError):
        pass
    table = _build_unicode_classes()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, table)
    except OSError:
        pass  # read-only install: rebuild next time
    return table

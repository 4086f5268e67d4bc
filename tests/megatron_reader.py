"""An independent reader of Megatron-LM's indexed dataset v1, written from the published byte layout only
(Megatron-LM `megatron/core/datasets/indexed_dataset.py`, as summarised in shared/REFERENCE.md §g).
It shares no code with stackcurate's writer."""

import struct
from pathlib import Path

import numpy as np

CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


def read(prefix: str | Path) -> list[np.ndarray]:
    """Every sequence of `<prefix>.bin` as described by `<prefix>.idx`; asserts the header's invariants."""
    idx = Path(f"{prefix}.idx").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00", "bad magic"
    (version,) = struct.unpack_from("<Q", idx, 9)
    (code,) = struct.unpack_from("<B", idx, 17)
    sequences, documents = struct.unpack_from("<QQ", idx, 18)
    assert version == 1
    dtype = np.dtype(CODES[code])
    offset = 34
    lengths = np.frombuffer(idx, dtype="<i4", count=sequences, offset=offset)
    offset += 4 * sequences
    pointers = np.frombuffer(idx, dtype="<i8", count=sequences, offset=offset)
    offset += 8 * sequences
    doc_index = np.frombuffer(idx, dtype="<i8", count=documents, offset=offset)
    offset += 8 * documents
    assert offset == len(idx), "trailing bytes in .idx"
    assert doc_index[0] == 0 and doc_index[-1] == sequences  # Megatron's own assertion
    data = Path(f"{prefix}.bin").read_bytes()
    expected = np.concatenate([[0], np.cumsum(lengths.astype(np.int64) * dtype.itemsize)[:-1]]) if sequences else []
    assert np.array_equal(pointers, expected), "pointers are not the cumulative byte offsets"
    assert len(data) == int(lengths.astype(np.int64).sum()) * dtype.itemsize, ".bin size does not match .idx"
    little = dtype.newbyteorder("<")
    return [
        np.frombuffer(data, dtype=little, count=int(n), offset=int(p)) for n, p in zip(lengths, pointers, strict=True)
    ]

"""Megatron-LM's indexed dataset, version 1 (`<prefix>.bin` + `<prefix>.idx`), as Megatron-LM and Fast-LLM read it.

`.bin` is the token ids of every document, concatenated, without a header. `.idx` is, little-endian:

    9 bytes  magic b"MMIDIDX\\x00\\x00"
    u64      version = 1
    u8       dtype code (Megatron-Core: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16)
    u64      N, the number of sequences
    u64      D + 1, the number of document indices
    i32 x N  sequence lengths, in tokens
    i64 x N  byte offset of each sequence in `.bin`
    i64 x (D + 1)  document indices: sequence i starts document j when indices[j] == i (here 0..N)

One sequence per document, each ending with the end-of-document token. Tokens are uint16 for vocabularies
below 65,500 (Megatron-LM's own rule), else int32; codes 6 and 7 (float64/float32) are never written, since
forks disagree on them.

Why hand-written: datatrove's `MegatronTokenizedFile` writes the same bytes but picks uint16 up to 65,536 and
writes straight under the final names through fsspec; Megatron-Core's `IndexedDatasetBuilder` takes torch
tensors and local paths. This writer streams to any pyarrow filesystem (local or S3) and commits atomically.
The tests read its output back with an independent reader and with Megatron-Core's `IndexedDataset`.
"""

import hashlib
import struct
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from stackcurate.core.errors import StackcurateError

if TYPE_CHECKING:  # the trainer reads shards without the pipeline's libraries
    import pyarrow.fs as pafs

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES = {
    np.dtype(np.uint8): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.uint16): 8,
}
UINT16_BELOW = 65_500


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 below 65,500 ids, int32 from there (Megatron-LM's `DType.optimal_dtype`)."""
    return np.dtype(np.uint16) if vocab_size < UINT16_BELOW else np.dtype(np.int32)


@dataclass(frozen=True)
class Written:
    documents: int
    tokens: int
    bin_bytes: int
    bin_sha256: str
    idx_sha256: str


def index_bytes(lengths: np.ndarray, dtype: np.dtype) -> bytes:
    """The `.idx` file of sequences with these lengths, one document each."""
    n = len(lengths)
    offsets = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(lengths[:-1].astype(np.int64) * dtype.itemsize, out=offsets[1:])
    header = MAGIC + struct.pack("<Q", VERSION) + struct.pack("<B", DTYPE_CODES[dtype]) + struct.pack("<QQ", n, n + 1)
    return b"".join(
        [
            header,
            lengths.astype("<i4").tobytes(),
            offsets.astype("<i8").tobytes(),
            np.arange(n + 1, dtype="<i8").tobytes(),
        ]
    )


def read_index(idx: bytes, name: str = "index") -> tuple[np.dtype, np.ndarray, np.ndarray]:
    """(token dtype, sequence lengths, byte offsets) of an `.idx` file's bytes; a one-line error for a file of
    another layout or dtype."""
    if idx[: len(MAGIC)] != MAGIC or struct.unpack_from("<Q", idx, len(MAGIC))[0] != VERSION:
        raise StackcurateError(f"{name} is not a Megatron indexed dataset (version {VERSION})")
    code = idx[17]
    dtypes = {code: dtype for dtype, code in DTYPE_CODES.items()}
    if code not in dtypes:
        raise StackcurateError(f"{name} has token dtype code {code}, which this reader does not take")
    n = struct.unpack_from("<Q", idx, 18)[0]
    lengths = np.frombuffer(idx, dtype="<i4", count=n, offset=34).astype(np.int64)
    pointers = np.frombuffer(idx, dtype="<i8", count=n, offset=34 + 4 * n)
    return dtypes[code], lengths, pointers


def write(fs: "pafs.FileSystem", prefix: str, tokens: np.ndarray, lengths: np.ndarray, dtype: np.dtype) -> Written:
    """Write `prefix.bin` (the documents' `tokens`, concatenated) and `prefix.idx` (their `lengths`); each
    file appears under its name only once complete, `.idx` last."""
    if dtype not in DTYPE_CODES:
        raise ValueError(f"Megatron has no token dtype {dtype}")
    if int(lengths.sum()) != len(tokens):
        raise ValueError(f"lengths add up to {int(lengths.sum())} tokens, not {len(tokens)}")
    data = np.ascontiguousarray(tokens, dtype=dtype.newbyteorder("<")).tobytes()
    index = index_bytes(lengths, dtype)
    tmp = {suffix: f"{prefix}{suffix}.tmp-{uuid.uuid4().hex}" for suffix in (".bin", ".idx")}
    for suffix, payload in ((".bin", data), (".idx", index)):
        with fs.open_output_stream(tmp[suffix]) as out:
            out.write(payload)
    for suffix in (".bin", ".idx"):
        fs.move(tmp[suffix], f"{prefix}{suffix}")
    return Written(
        len(lengths), len(tokens), len(data), hashlib.sha256(data).hexdigest(), hashlib.sha256(index).hexdigest()
    )

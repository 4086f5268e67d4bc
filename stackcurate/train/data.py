"""Training samples from the tokenize stage's Megatron shards, as Megatron-LM's GPT dataset builds them.

The shards are read through numpy memmaps (`.idx` parsed here: magic, version 1, dtype code, counts, then
lengths, byte offsets and document indices; the layout is core/megatron.py's). Documents are split into a
training and a held-out set by a seeded hash of their position, then the training documents are shuffled
with `RandomState(seed + epoch)` and laid end to end; sample i is tokens `[i * T, i * T + T + 1)` of that
stream, so samples pack across document boundaries and overlap by one token (input and shifted target).

Sample i is a pure function of (seed, i): the data position is one integer, stored in every checkpoint, and
a resumed run reads exactly the samples an uninterrupted one would. Each rank of a data-parallel run reads
the samples `i` with `i % world == rank`.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stackcurate.core import megatron
from stackcurate.core.errors import StackcurateError


@dataclass(frozen=True)
class Document:
    shard: int
    offset: int  # in tokens, inside the shard's .bin
    length: int


def _read_index(prefix: Path) -> tuple[np.dtype, np.ndarray, np.ndarray]:
    return megatron.read_index((prefix.parent / f"{prefix.name}.idx").read_bytes(), f"{prefix}.idx")


class Shards:
    """Every document of a `tokenize/megatron` folder (its manifest lists the shards)."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        manifest_path = folder / "manifest.json"
        if not manifest_path.is_file():
            raise StackcurateError(f"{folder} has no manifest.json; pass the tokenize stage's megatron folder")
        self.manifest = json.loads(manifest_path.read_text())
        self.tokens: list[np.ndarray] = []
        starts, lengths, shard_of = [], [], []
        for i, shard in enumerate(self.manifest["shards"]):
            prefix = folder / shard["shard"]
            dtype, lens, pointers = _read_index(prefix)
            size = (prefix.parent / f"{prefix.name}.bin").stat().st_size
            self.tokens.append(np.memmap(f"{prefix}.bin", dtype=dtype, mode="r") if size else np.zeros(0, dtype=dtype))
            starts.append(pointers // dtype.itemsize)
            lengths.append(lens)
            shard_of.append(np.full(len(lens), i, dtype=np.int32))
        self.starts = np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)
        self.lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
        self.shard_of = np.concatenate(shard_of) if shard_of else np.zeros(0, dtype=np.int32)

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    def document(self, i: int) -> np.ndarray:
        start = int(self.starts[i])
        return self.tokens[int(self.shard_of[i])][start : start + int(self.lengths[i])]


class Samples:
    """Packed samples of `seq_len + 1` tokens over one split of the documents."""

    def __init__(self, shards: Shards, seq_len: int, seed: int, split: str, held_out: float) -> None:
        if split not in ("train", "valid"):
            raise ValueError(split)
        self.shards, self.seq_len, self.seed = shards, seq_len, seed
        n = len(shards.lengths)
        draw = np.random.RandomState(seed).random_sample(n)  # a document's split depends on the seed only
        chosen = draw < held_out if split == "valid" else draw >= held_out
        self.docs = np.nonzero(chosen)[0]
        self.tokens_per_epoch = int(shards.lengths[self.docs].sum())
        self.per_epoch = max(0, (self.tokens_per_epoch - 1) // seq_len)
        if self.per_epoch == 0:
            raise StackcurateError(
                f"the {split} split holds {self.tokens_per_epoch} tokens, fewer than one sample of "
                f"{seq_len + 1}; tokenize more data or lower --seq-len" + (" / --held-out" if split == "valid" else "")
            )
        self._epoch = -1
        self._order = self._ends = np.zeros(0, dtype=np.int64)

    def _load_epoch(self, epoch: int) -> None:
        if epoch != self._epoch:
            rng = np.random.RandomState((self.seed + 1 + epoch) % 2**32)
            self._order = self.docs[rng.permutation(len(self.docs))]
            self._ends = np.cumsum(self.shards.lengths[self._order])
            self._epoch = epoch

    def __getitem__(self, index: int) -> np.ndarray:
        """Sample `index` (any non-negative integer: epochs follow each other, each reshuffled)."""
        epoch, i = divmod(index, self.per_epoch)
        self._load_epoch(epoch)
        start, stop = i * self.seq_len, i * self.seq_len + self.seq_len + 1
        first = int(np.searchsorted(self._ends, start, side="right"))
        parts, at = [], start
        d = first
        while at < stop:
            doc_start = int(self._ends[d - 1]) if d > 0 else 0
            tokens = self.shards.document(int(self._order[d]))
            take = tokens[at - doc_start : min(stop - doc_start, len(tokens))]
            parts.append(take)
            at += len(take)
            d += 1
        return np.concatenate(parts).astype(np.int64)

    def batch(self, first: int, size: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """Samples `first * world + rank`, ... for one rank: `size` rows of `seq_len + 1` tokens."""
        return np.stack([self[(first + k) * world + rank] for k in range(size)])

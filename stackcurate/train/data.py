"""Training samples from the tokenize stage's Megatron shards, as Megatron-LM's GPT dataset builds them.

The shards are read through numpy memmaps (`.idx` parsed here: magic, version 1, dtype code, counts, then
lengths, byte offsets and document indices; the layout is core/megatron.py's). A share of the tokens is held
out for the validation loss (:func:`hold_out`): whole documents in a seeded order, the last one cut to fit, so
even a corpus of two documents has a held-out split. Each epoch, with `RandomState(seed + 1 + epoch)`, the
pieces are shuffled and laid end to end, and the samples are shuffled too: sample i of the epoch is tokens
`[j * T, j * T + T + 1)` of that stream, j its place in the shuffle. Samples pack across document boundaries
and overlap by one token (input and shifted target); a batch draws from the whole corpus, not from the one
repository the stream is at (Megatron's sample and shuffle indices).

Sample i is a pure function of (seed, i): the data position is one integer, stored in every checkpoint, and
a resumed run reads exactly the samples an uninterrupted one would. Each rank of a data-parallel run reads
the samples `i` with `i % world == rank`.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stackcurate.core import megatron
from stackcurate.core.errors import StackcurateError


def _read_index(prefix: Path) -> tuple[np.dtype, np.ndarray, np.ndarray]:
    return megatron.read_index((prefix.parent / f"{prefix.name}.idx").read_bytes(), f"{prefix}.idx")


class Shards:
    """Every document of a `megatron` folder (the tokenize stage's) (its manifest lists the shards)."""

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
        self._check_vocabulary(manifest_path)

    def _check_vocabulary(self, manifest_path: Path) -> None:
        """The model gets `vocab_size` ids, so it must be the tokenizer's real size: a tokenizer trained on
        little text has fewer ids than asked for (the tokenize stage records what it got)."""
        size = self.vocab_size
        special = self.manifest.get("special_tokens", {})
        beyond = {token: i for token, i in special.items() if not 0 <= i < size}
        if beyond:
            raise StackcurateError(
                f"{manifest_path} gives special token ids {beyond} outside its vocab_size {size}; rerun tokenize"
            )
        tokenizer = Path(self.manifest.get("tokenizer", "")) / "tokenizer.json"
        if tokenizer.is_file():
            from tokenizers import Tokenizer

            found = Tokenizer.from_file(str(tokenizer)).get_vocab_size()
            if found != size:
                raise StackcurateError(
                    f"{manifest_path} says vocab_size {size} but its tokenizer {tokenizer} has {found} ids; "
                    "rerun tokenize so that shards, manifest and tokenizer agree"
                )

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    def document(self, i: int) -> np.ndarray:
        start = int(self.starts[i])
        return self.tokens[int(self.shard_of[i])][start : start + int(self.lengths[i])]


@dataclass(frozen=True)
class Pieces:
    """Token ranges of documents: piece k is tokens `[first[k], first[k] + lengths[k])` of document `docs[k]`."""

    docs: np.ndarray
    first: np.ndarray
    lengths: np.ndarray

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())


@dataclass(frozen=True)
class Split:
    """The training and held-out pieces of a corpus, and how the held-out ones were chosen."""

    train: Pieces
    valid: Pieces
    whole: int  # documents held out whole
    cut: int  # tokens held out from the head of one more document (0: none)

    def describe(self) -> str:
        total = self.train.tokens + self.valid.tokens
        if not self.valid.tokens:
            return f"nothing held out: {total:,} tokens of {self.whole + len(self.train.docs)} documents to train on"
        parts = [f"{self.whole} whole document{'s' if self.whole > 1 else ''}"] if self.whole else []
        if self.cut:
            parts.append(f"the first {self.cut:,} tokens of {'another' if self.whole else 'one'}")
        return (
            f"held out {self.valid.tokens:,} of {total:,} tokens ({self.valid.tokens / total:.1%}) for the "
            f"validation loss: {' and '.join(parts)}"
        )


def hold_out(shards: Shards, share: float, seq_len: int, seed: int) -> Split:
    """Hold out `share` of the tokens, at least one sample of `seq_len + 1`, the rest to train on.

    Documents go to the held-out split whole, in an order drawn from `seed`, until the next one would pass the
    target; that one is cut: its head is held out, its tail trained on. Splitting by documents alone left a
    small corpus (six documents) without any held-out token."""
    n = len(shards.lengths)
    lengths = shards.lengths.astype(np.int64)
    total, sample = int(lengths.sum()), seq_len + 1
    target = max(math.ceil(share * total), sample) if share > 0 else 0
    if total - target < sample:
        held = f"{target:,} held out and " if target else ""
        raise StackcurateError(
            f"the shards hold {total:,} tokens: too few for {held}a training sample of {sample} tokens; "
            "tokenize more data or lower --seq-len" + (" or --held-out" if target else "")
        )
    order = np.random.RandomState(seed).permutation(n)  # a document's split depends on the seed only
    ends = np.cumsum(lengths[order])
    whole = int(np.searchsorted(ends, target, side="right"))  # documents that fit under the target entirely
    cut = target - (int(ends[whole - 1]) if whole else 0)
    valid, train = order[: whole + (cut > 0)], order[whole:]
    valid_lengths, train_first = lengths[valid], np.zeros(len(train), dtype=np.int64)
    train_lengths = lengths[train]
    if cut:  # the document that crosses the target: its first `cut` tokens are held out, the rest trained on
        valid_lengths[-1] = cut
        train_first[0] = cut
        train_lengths[0] -= cut
    return Split(
        train=Pieces(train, train_first, train_lengths),
        valid=Pieces(valid, np.zeros(len(valid), dtype=np.int64), valid_lengths),
        whole=whole,
        cut=cut,
    )


class Samples:
    """Packed samples of `seq_len + 1` tokens over pieces of the documents (one split)."""

    def __init__(self, shards: Shards, pieces: Pieces, seq_len: int, seed: int, fim: "Fim | None" = None) -> None:
        self.shards, self.pieces, self.seq_len, self.seed, self.fim = shards, pieces, seq_len, seed, fim
        self.per_epoch = max(0, (pieces.tokens - 1) // seq_len)
        if self.per_epoch == 0:
            raise ValueError(f"{pieces.tokens} tokens hold no sample of {seq_len + 1}")  # hold_out makes sure
        self._epoch = -1
        self._order = self._ends = self._shuffle = np.zeros(0, dtype=np.int64)

    def _load_epoch(self, epoch: int) -> None:
        if epoch != self._epoch:
            rng = np.random.RandomState((self.seed + 1 + epoch) % 2**32)
            self._order = rng.permutation(len(self.pieces.docs))
            self._ends = np.cumsum(self.pieces.lengths[self._order])
            self._shuffle = rng.permutation(self.per_epoch)
            self._epoch = epoch

    def piece(self, k: int) -> np.ndarray:
        first = int(self.pieces.first[k])
        return self.shards.document(int(self.pieces.docs[k]))[first : first + int(self.pieces.lengths[k])]

    def __getitem__(self, index: int) -> np.ndarray:
        """Sample `index` (any non-negative integer: epochs follow each other, each reshuffled)."""
        epoch, i = divmod(index, self.per_epoch)
        self._load_epoch(epoch)
        j = int(self._shuffle[i])
        start, stop = j * self.seq_len, j * self.seq_len + self.seq_len + 1
        first = int(np.searchsorted(self._ends, start, side="right"))
        parts, at = [], start
        d = first
        while at < stop:
            piece_start = int(self._ends[d - 1]) if d > 0 else 0
            tokens = self.piece(int(self._order[d]))
            take = tokens[at - piece_start : min(stop - piece_start, len(tokens))]
            parts.append(take)
            at += len(take)
            d += 1
        sample = np.concatenate(parts).astype(np.int64)
        return sample if self.fim is None else self.fim(sample, index)

    def batch(self, first: int, size: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """Samples `first * world + rank`, ... for one rank: `size` rows of `seq_len + 1` tokens."""
        return np.stack([self[(first + k) * world + rank] for k in range(size)])


class Fim:
    """Fill-in-the-middle at training time, for shards that the format stage did not FIM (Fast-LLM's `fim`,
    Megatron-LM's `permute`, fragment by fragment): a sample is cut at its `<|endoftext|>` tokens, and each
    fragment, with probability `rate`, is decoded, cut at two points drawn uniformly among its characters,
    and written again as PSM `<fim_prefix>pre<fim_suffix>suf<fim_middle>mid` or (with probability `spm_rate`)
    SPM `<fim_prefix><fim_suffix>suf<fim_middle>pre mid`, each part tokenized on its own. A middle longer than
    `max_middle` characters is cut to it (its tail goes to the suffix). The sample keeps its length: cut at the
    end where FIM lengthened it, padded with `<fim_pad>` where it shortened it.

    The draws of sample i come from a generator seeded by (seed, i): the same FIM on every read, after a resume
    too, whatever the number of ranks."""

    def __init__(self, tokenizer_dir: str | Path, special: dict[str, int], rate: float, spm_rate: float,
                 max_middle: int | None, seed: int) -> None:  # fmt: skip
        from tokenizers import Tokenizer

        from stackcurate.core import tokens as tk

        path = Path(tokenizer_dir) / "tokenizer.json"
        if not path.is_file():
            raise StackcurateError(f"training-time FIM needs the shards' tokenizer: {path} is missing")
        self.tokenizer = Tokenizer.from_file(str(path))
        missing = [t for t in (tk.EOD, tk.FIM_PREFIX, tk.FIM_MIDDLE, tk.FIM_SUFFIX, tk.FIM_PAD) if t not in special]
        if missing:
            raise StackcurateError(f"training-time FIM needs the tokens {', '.join(missing)} in the shards' manifest")
        self.eod, self.pad = special[tk.EOD], special[tk.FIM_PAD]
        self.prefix, self.middle, self.suffix = special[tk.FIM_PREFIX], special[tk.FIM_MIDDLE], special[tk.FIM_SUFFIX]
        self.rate, self.spm_rate, self.max_middle, self.seed = rate, spm_rate, max_middle, seed

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids if text else []

    def permute(self, fragment: np.ndarray, rng: np.random.Generator) -> list[int]:
        """One fragment (no `<|endoftext|>`) in FIM form, or as it was (with probability 1 - rate)."""
        if len(fragment) == 0 or rng.random() >= self.rate:
            return fragment.tolist()
        text = self.tokenizer.decode(fragment.tolist(), skip_special_tokens=False)
        lo, hi = sorted(int(x) for x in rng.integers(0, len(text) + 1, size=2))
        if self.max_middle is not None and hi - lo > self.max_middle:
            hi = lo + self.max_middle
        pre, mid, suf = (self._encode(part) for part in (text[:lo], text[lo:hi], text[hi:]))
        if rng.random() < self.spm_rate:
            return [self.prefix, self.suffix, *suf, self.middle, *pre, *mid]
        return [self.prefix, *pre, self.suffix, *suf, self.middle, *mid]

    def __call__(self, sample: np.ndarray, index: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, index])
        out: list[int] = []
        start = 0
        for end in [*np.flatnonzero(sample == self.eod).tolist(), len(sample)]:
            out += self.permute(sample[start:end], rng)
            if end < len(sample):
                out.append(self.eod)
            start = end + 1
        out = out[: len(sample)] + [self.pad] * max(0, len(sample) - len(out))
        return np.asarray(out, dtype=sample.dtype)


def fim_spans(shards: Shards, tokens: int = 1 << 22) -> int:
    """`<fim_prefix>` tokens in the first `tokens` of each shard: more than none means the format stage FIM'd them."""
    fim = shards.manifest.get("special_tokens", {}).get("<fim_prefix>")
    if fim is None:
        return 0
    return sum(int(np.count_nonzero(part[:tokens] == fim)) for part in shards.tokens)

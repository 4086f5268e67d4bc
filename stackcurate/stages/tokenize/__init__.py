"""Tokenization: formatted documents to token ids (Parquet), then Megatron-LM `.bin/.idx` shards + a manifest.

1. **tokenizer**: `tokenizer: train` (default) trains StarCoder's BPE recipe (`tokenizer.py`) on a seeded
   sample of this input (`train_mb`) into `<out>/tokenizer/`, once; or name any HF tokenizer folder.
2. **tokenize** (one shard per input file, in batches on every worker): each document's ids with the
   end-of-document token appended, as rows `doc_id`, `language`, `n_tokens`, `tokens`, and `order`, a seeded
   64-bit hash of the doc_id that fixes its place in the shards. `encoder.py` finds the words of StarCoder's
   recipe in compiled code and takes each distinct word's ids from HF's BPE model: the ids of
   `encode_batch_fast`, faster (`benchmarks/tokenize_throughput.py`).
3. **shards**: a shuffle sends each row to output shard `order * S / 2^64` (S from `shard_mb`), then each
   shard is written in `order` order: documents shuffled with the seed, identically for any number of
   workers, one sequence per document (`core/megatron.py`). `<out>/megatron/` holds
   `shard_NNNNN.bin/.idx`, `documents/` (shard, position, doc_id, n_tokens: where each document went) and
   `manifest.json` (tokenizer, special-token ids, vocabulary size, dtype, per-shard documents, tokens and
   SHA-256 checksums).

Input columns: `text` (the format stage's output) or, without it, `content`; `doc_id`; `language` if any.

What users read (`stackcurate <stage> --help`, with examples) is the stage class's docstring.
"""

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stackcurate.core import io, megatron, shuffle
from stackcurate.core import tokens as tk
from stackcurate.core.config import option
from stackcurate.core.contract import Shard, Stage, StageContext, StageOutput
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import StageDir
from stackcurate.core.schema import FILE_KIND, KIND, with_reason
from stackcurate.stages.tokenize import tokenizer as bpe
from stackcurate.stages.tokenize.encoder import Encoder

log = logging.getLogger("stackcurate.tokenize")
MEGATRON_DIR = "megatron"
FAST_LLM_DIR = "fast_llm"
ENCODE_CHARS = 4_000_000
DOCUMENTS_SCHEMA = pa.schema(
    [
        pa.field("shard", pa.int32()),
        pa.field("position", pa.int64()),  # the document's sequence number in its shard
        pa.field("doc_id", pa.int64()),
        pa.field("n_tokens", pa.int64()),
    ]
)


@dataclass(frozen=True, kw_only=True)
class TokenizeConfig:
    """Which tokenizer, and how the Megatron shards are cut and ordered."""

    tokenizer: str = option("train", "train (StarCoder's BPE recipe, on this input) or an HF tokenizer folder",
                            path=True, keywords=("train",))  # fmt: skip
    vocab_size: int = option(bpe.VOCAB_SIZE, "tokenizer: train: vocabulary size, special tokens included")
    train_mb: float = option(1000.0, "tokenizer: train: MB of text, a seeded sample of the input")
    seed: int = option(42, "seed of the training sample and of the document order in the shards")
    shard_mb: float = option(512.0, "size of each Megatron .bin shard, about")
    batch_rows: int = option(128, "documents read at a time (each encode call takes ~4M characters of them)")
    fast_llm: bool = option(
        False, "also write each shard in Fast-LLM's own format (OUT/fast_llm: shard_*.fast_llm_dataset and "
        "fast_llm_config.yaml), which Fast-LLM reads natively; it reads the Megatron shards with a warning",
    )  # fmt: skip
    weights: tuple[str, ...] = option(
        (), "KIND=EPOCHS pairs: how many times each kind of document goes into the shards (issue=2, commit=0.5: "
        "each of them twice, half of them, seeded), as StarCoder2 mixed its sources; 1 for a kind not named",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.shard_mb <= 0 or self.train_mb <= 0 or self.batch_rows < 1:
            raise ValueError("shard_mb, train_mb and batch_rows must be positive")
        parse_weights(self.weights)


def parse_weights(pairs: tuple[str, ...]) -> dict[str, float]:
    """{kind: epochs} of `weights` (a one-line error for a pair that is not KIND=EPOCHS, EPOCHS >= 0)."""
    found: dict[str, float] = {}
    for pair in pairs:
        kind, sep, value = pair.partition("=")
        try:
            epochs = float(value)
        except ValueError:
            epochs = -1.0
        if not sep or not kind.strip() or epochs < 0:
            raise StackcurateError(f"tokenize weights: '{pair}' must be KIND=EPOCHS, e.g. issue=2 or commit=0.5")
        found[kind.strip()] = epochs
    return found


def copies(doc_ids: np.ndarray, kinds: list[str], weights: dict[str, float], seed: int) -> np.ndarray:
    """How many times each document goes into the shards: its kind's epochs, the whole part for all of them and
    the fraction for a seeded share (the same documents whatever the workers)."""
    epochs = np.array([weights.get(k, 1.0) for k in kinds], dtype=np.float64)
    whole = np.floor(epochs)
    draw = _order(doc_ids, seed + 2).astype(np.float64) / 2.0**64  # uniform in [0, 1), not the shard order
    return (whole + (draw < epochs - whole)).astype(np.int64)


def _order(doc_ids: np.ndarray, seed: int) -> np.ndarray:
    return shuffle.mix64(doc_ids.astype(np.uint64) ^ shuffle.mix64(np.array([seed], dtype=np.uint64))[0])


def _text_column(names: list[str], where: str) -> str:
    for name in ("text", "content"):
        if name in names:
            return name
    raise StackcurateError(f"tokenize: {where} has neither a text nor a content column; run format first")


# ---- 1. the tokenizer ------------------------------------------------------------------------------------


def _sample(shards: list[Shard], cfg: TokenizeConfig) -> Iterator[str]:
    """A seeded sample of about `train_mb` of the input's text (every document when the input is smaller)."""
    inputs, total = [], 0
    for uri in dict.fromkeys(shard.path for shard in shards):  # a file cut into row ranges is read once
        fs, path = io.filesystem(uri)
        names = pq.read_schema(path, filesystem=fs).names
        column = _text_column(names, uri)
        inputs.append((fs, path, column))
        # the format stage's `length_bytes` is its text's UTF-8 size: no need to read the text twice (a record's
        # `length_bytes` is not: redaction changes `content` and keeps it)
        size = "length_bytes" if column == "text" and "length_bytes" in names else column
        values = pq.read_table(path, filesystem=fs, columns=[size]).column(size)
        lengths = values if size == "length_bytes" else pc.binary_length(values)  # pyright: ignore[reportAttributeAccessIssue]
        total += pc.sum(lengths).as_py() or 0  # pyright: ignore[reportAttributeAccessIssue]
    share = min(1.0, cfg.train_mb * 1e6 / max(total, 1))
    limit = np.uint64(min(int(share * 2.0**64), 2**64 - 1))
    for fs, path, column in inputs:
        for table in io.scan_parquet_slice(fs, path, 0, 2**62, batch_rows=1024, columns=["doc_id", column]):
            keep = _order(table.column("doc_id").to_numpy(), cfg.seed + 1) <= limit  # not the shard order
            yield from (t for t in table.column(column).filter(pa.array(keep)).to_pylist() if t)


def train_tokenizer(cfg: TokenizeConfig, shards: list[Shard], input_uri: str | None, folder: Path) -> Path:
    """Train on a seeded sample of the input into `folder` (kept if it was trained with the same settings)."""
    files = []
    for uri in dict.fromkeys(shard.path for shard in shards):  # size and modification time: a rewritten input
        fs, path = io.filesystem(uri)  # trains a new tokenizer
        info = fs.get_file_info(path)
        files.append([uri, info.size, info.mtime_ns])
    wanted = {"vocab_size": cfg.vocab_size, "train_mb": cfg.train_mb, "seed": cfg.seed, "input": input_uri,
              "input_files": files}  # fmt: skip
    info = folder / "train.json"
    if info.exists() and {k: v for k, v in json.loads(info.read_text()).items() if k in wanted} == wanted:
        return folder
    log.info("training the tokenizer (vocabulary %d) on up to %.0f MB of %s", cfg.vocab_size, cfg.train_mb,
             input_uri)  # fmt: skip
    trained = bpe.train(_sample(shards, cfg), folder, vocab_size=cfg.vocab_size, info=wanted)
    if trained.get_vocab_size() < cfg.vocab_size:
        log.warning("the input is too small for %d tokens: the tokenizer has %d", cfg.vocab_size,
                    trained.get_vocab_size())  # fmt: skip
    return folder


def trained_tokenizer(cfg: TokenizeConfig, ctx: StageContext) -> TokenizeConfig:
    """Train the tokenizer into `<out>/tokenizer` when asked (once: a finished one of the same settings stays)."""
    if cfg.tokenizer != "train":
        bpe.load(cfg.tokenizer)  # a one-line error now rather than on every worker
        return cfg
    if "://" in ctx.out:
        raise StackcurateError("tokenizer: train writes a local folder; pass --tokenizer DIR with an --out on S3")
    folder = train_tokenizer(cfg, ctx.shards, ctx.input_uri, Path(ctx.out) / "tokenizer")
    return replace(cfg, tokenizer=str(folder))


# ---- 2. tokenize -----------------------------------------------------------------------------------------


class TokenizeStage(Stage):
    """tokenize the documents into Megatron-LM .bin/.idx shards with a manifest

    Tokenize the documents and write what a trainer reads: Megatron-LM .bin/.idx shards of about --shard-mb each,
    the documents shuffled by --seed, with a manifest.json (tokenizer, special-token ids, vocabulary size,
    per-shard counts and checksums), under OUT/megatron. --tokenizer train (the default) first trains
    StarCoder's BPE recipe on a sample of this input (--vocab-size, --train-mb); or name a Hugging Face tokenizer
    folder.

    Examples:
      stackcurate tokenize --out work/run --tokenizer train --shard-mb 512
      stackcurate tokenize --out work/run --tokenizer path/to/hf_tokenizer_folder
    """

    name = "tokenize"
    mb_per_s = 5.5  # one core, end to end: `benchmarks/tokenize_throughput.py`
    config = TokenizeConfig
    # Every kind. Its input is format's documents, whose `kind` column says what a document is (`repository`,
    # `notebook`, ...): a stage after format that left `kinds` at files would pass most of them through.
    kinds = None
    needs = ("doc_id",)
    needs_one_of = ("text", "content")
    folders = (MEGATRON_DIR, FAST_LLM_DIR)

    @classmethod
    def before_shards(cls, cfg: TokenizeConfig, ctx: StageContext) -> TokenizeConfig:
        return trained_tokenizer(cfg, ctx)

    @classmethod
    def after_shards(cls, cfg: TokenizeConfig, ctx: StageContext) -> None:
        write_shards(cfg, ctx)

    def __init__(self, cfg: TokenizeConfig) -> None:
        super().__init__(cfg)
        weights = parse_weights(cfg.weights)
        self.weights = weights if any(w != 1.0 for w in weights.values()) else None  # None: each document once
        if cfg.tokenizer == "train":  # checked before `before_shards` trains it; the workers get the folder
            self.tokenizer = None
            return
        self.tokenizer = bpe.load(cfg.tokenizer)
        self.encoder = Encoder(self.tokenizer)
        self.eod = self.tokenizer.token_to_id(tk.EOD)
        self.dtype = megatron.token_dtype(self.tokenizer.get_vocab_size())

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        if self.tokenizer is None:
            raise StackcurateError("tokenize: the tokenizer is not trained yet; run `stackcurate tokenize`")
        fs, path = io.filesystem(shard.path)
        names = pq.read_schema(path, filesystem=fs).names
        text = _text_column(names, shard.path)
        columns = ["doc_id", text] + [c for c in ("language", KIND) if c in names]
        batches = io.scan_parquet_slice(
            fs, path, shard.start, shard.stop, batch_rows=self.cfg.batch_rows, columns=columns
        )  # only the columns it encodes and keeps
        for table in batches:
            yield table.rename_columns([c if c != "content" else "text" for c in columns])

    def output_schema(self, shard: Shard | None) -> pa.Schema:
        return pa.schema(
            [
                pa.field("doc_id", pa.int64(), nullable=False),
                pa.field("language", pa.string()),
                pa.field(KIND, pa.string()),  # file, repository, notebook, issue, commit, ... (format's kinds)
                pa.field("n_tokens", pa.int64()),
                pa.field("order", pa.uint64()),
                pa.field("tokens", pa.large_list(pa.from_numpy_dtype(self.dtype))),
            ]
        )

    def __call__(self, table: pa.Table) -> StageOutput:
        texts = [t or "" for t in table.column("text").to_pylist()]
        assert self.tokenizer is not None
        eod = np.array([self.eod], dtype=self.dtype)
        pieces: list[np.ndarray] = []
        start = 0
        while start < len(texts):  # encode calls of about ENCODE_CHARS: a call's memory grows with its text
            stop, size = start + 1, len(texts[start])
            while stop < len(texts) and size + len(texts[stop]) <= ENCODE_CHARS:
                size += len(texts[stop])
                stop += 1
            for ids in self.encoder.encode(texts[start:stop]):
                pieces += [ids.astype(self.dtype), eod]
            start = stop
        lengths = np.array([len(p) for p in pieces[0::2]], dtype=np.int64) + 1
        flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=self.dtype)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        doc_ids = table.column("doc_id").to_numpy()
        n = table.num_rows
        columns = {
            "doc_id": doc_ids,
            "language": table.column("language") if "language" in table.column_names else pa.nulls(n, pa.string()),
            "n_tokens": lengths,
            "order": _order(doc_ids, self.cfg.seed),
            "tokens": pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(flat)),
        }
        kinds = [
            k or FILE_KIND for k in (table.column(KIND).to_pylist() if KIND in table.column_names else [None] * n)
        ]
        columns[KIND] = pa.array(kinds, pa.string())
        once = pa.table({name: columns[name] for name in self.output_schema(None).names})
        if self.weights is None:  # every document once
            return StageOutput(kept=once, stats={("tokens", None, None): float(lengths.sum())})
        times = copies(doc_ids, kinds, self.weights, self.cfg.seed)
        # the first copy keeps the document's order; the others get orders of their own, spread over the shards
        rows = np.repeat(np.arange(n), times)
        copy = np.concatenate([np.arange(t) for t in times]) if n else np.zeros(0, dtype=np.int64)
        kept = once.take(pa.array(rows))
        others = _order(kept.column("doc_id").to_numpy() ^ (copy.astype(np.int64) << 48), self.cfg.seed)
        orders = np.where(copy == 0, kept.column("order").to_numpy(), others)
        kept = kept.set_column(kept.schema.get_field_index("order"), "order", pa.array(orders, pa.uint64()))
        gone = times == 0
        removed = pa.table(
            {"doc_id": doc_ids[gone], "language": columns["language"].filter(pa.array(gone)),
             KIND: [k for k, g in zip(kinds, gone, strict=True) if g], "reason": ["kind_weight"] * int(gone.sum()),
             "detail": [f"{k} weight {self.weights.get(k, 1.0):g}" for k, g in zip(kinds, gone, strict=True) if g]},
            schema=self.removed_schema(None),
        )  # fmt: skip
        tokens = float(kept.column("n_tokens").to_numpy().sum())
        return StageOutput(kept=kept, removed=removed, stats={("tokens", None, None): tokens})

    def removed_schema(self, output_schema: pa.Schema | None) -> pa.Schema:
        """What a kind's weight left out: the documents (doc_id, language, kind; not their text) and why."""
        fields = [pa.field("doc_id", pa.int64()), pa.field("language", pa.string()), pa.field(KIND, pa.string())]
        return with_reason(pa.schema(fields))


# ---- 3. Megatron shards ----------------------------------------------------------------------------------


def route_task(path: str, index: int, root: str, shards: int) -> dict[str, Any]:
    """Send one tokenized file's rows to their output shard (the order hash's range)."""
    fs, file = io.filesystem(path)
    out_fs, out_root = io.filesystem(root)
    table = pq.read_table(file, filesystem=fs, columns=["doc_id", "order", "n_tokens", "tokens"])
    order = table.column("order").to_numpy()
    parts = ((order >> np.uint64(32)) * np.uint64(shards)) >> np.uint64(32)  # order * S / 2^64, S < 2^32
    shuffle.write_partitioned(out_fs, out_root, index, table, parts.astype(np.int64), shards)
    return {"rows": table.num_rows}


def shard_task(root: str | list[str], megatron_root: str, part: int, dtype_name: str) -> dict[str, Any]:
    """Write Megatron shard `part`: its documents in `order` order. `root` holds the routed rows, or is the list
    of tokenized files themselves when there is a single shard (nothing to route)."""
    out_fs, out = io.filesystem(megatron_root)
    if isinstance(root, list):
        tables = []
        for path in root:
            fs, file = io.filesystem(path)
            tables.append(pq.read_table(file, filesystem=fs, columns=["doc_id", "order", "n_tokens", "tokens"]))
        table = pa.concat_tables(tables) if tables else None
    else:
        fs, work = io.filesystem(root)
        table = shuffle.read_partition(fs, work, part)
    schema_dtype = np.dtype(dtype_name)
    if table is None:
        tokens, lengths = np.zeros(0, dtype=schema_dtype), np.zeros(0, dtype=np.int64)
        doc_ids = np.zeros(0, dtype=np.int64)
    else:
        ranked = np.lexsort((table.column("doc_id").to_numpy(), table.column("order").to_numpy()))
        table = table.take(pa.array(ranked))
        lengths = table.column("n_tokens").to_numpy()
        tokens = table.column("tokens").combine_chunks().flatten().to_numpy()
        doc_ids = table.column("doc_id").to_numpy()
    prefix = io.join(out, f"shard_{part:05d}")
    written = megatron.write(out_fs, prefix, tokens, lengths, schema_dtype)
    documents = pa.table(
        {
            "shard": np.full(len(lengths), part, dtype=np.int32),
            "position": np.arange(len(lengths), dtype=np.int64),
            "doc_id": doc_ids,
            "n_tokens": lengths,
        },
        schema=DOCUMENTS_SCHEMA,
    )
    out_fs.create_dir(io.join(out, "documents"), recursive=True)
    sink = io.AtomicParquetWriter(out_fs, io.join(out, "documents", f"{part:05d}.parquet"), DOCUMENTS_SCHEMA)
    sink.write(documents)
    sink.commit()
    return {"shard": f"shard_{part:05d}", **written.__dict__}


def _write_fast_llm(out: str, megatron_root: str, fs: Any, written: list[dict[str, Any]], dtype: np.dtype) -> None:
    """Each Megatron shard again as a `.fast_llm_dataset`, and the dataset config Fast-LLM reads (core/fast_llm.py)."""
    import yaml

    from stackcurate.core import fast_llm

    _, root = io.filesystem(io.join(out, FAST_LLM_DIR))
    fs.create_dir(root, recursive=True)
    names, configs = [], []
    for shard in written:
        prefix = io.join(megatron_root, shard["shard"])
        with fs.open_input_file(f"{prefix}.idx") as f:
            _, lengths, _ = megatron.read_index(f.read(), f"{prefix}.idx")
        name = shard["shard"] + fast_llm.SUFFIX
        configs.append(fast_llm.write_shard(fs, f"{prefix}.bin", lengths, dtype, io.join(root, name)))
        names.append(name)
    text = yaml.safe_dump(fast_llm.dataset_config(names, configs), sort_keys=False)
    io.write_bytes_atomic(fs, io.join(root, "fast_llm_config.yaml"), text.encode())


def write_shards(cfg: TokenizeConfig, ctx: StageContext) -> None:
    """Route the tokenized rows to S shards and write them, then the manifest (resumes like the shards)."""
    stage = StageDir(ctx.out, "tokenize")
    megatron_uri = io.join(ctx.out, MEGATRON_DIR)
    out_fs, megatron_root = io.filesystem(megatron_uri)
    if io.exists(out_fs, io.join(megatron_root, "manifest.json")):
        return  # written by an earlier run of this same plan (another plan would have needed --overwrite)
    files = [stage.path("data", s) for s in ctx.shards]
    tok = bpe.load(cfg.tokenizer)
    dtype = megatron.token_dtype(tok.get_vocab_size())
    tokens, by_kind = 0, {}
    for path in files:
        fs, file = io.filesystem(path)
        counts = (
            pq.read_table(file, filesystem=fs, columns=["n_tokens", KIND])
            .group_by(KIND)
            .aggregate([("n_tokens", "sum")])
        )
        for kind, n in zip(counts.column(KIND).to_pylist(), counts.column("n_tokens_sum").to_pylist(), strict=True):
            by_kind[kind] = by_kind.get(kind, 0) + int(n)
            tokens += int(n)
    shards = max(1, math.ceil(tokens * dtype.itemsize / (cfg.shard_mb * 1e6)))
    phases = ctx.phases("tokenize", {"shards": shards}, own=True)
    routed = phases.work_uri(f"routed-{shards}")
    out_fs.create_dir(megatron_root, recursive=True)
    if shards == 1:  # every document goes to the one shard: read the tokenized rows, no routed copy
        parts: list[tuple[Any, ...]] = [(files, megatron_uri, 0, dtype.name)]
    else:
        route = [(path, i, routed, shards) for i, path in enumerate(files)]
        phases.run(f"route-{shards}", route_task, route, "tokenize route")
        parts = [(routed, megatron_uri, p, dtype.name) for p in range(shards)]
    written = phases.run(f"shards-{shards}", shard_task, parts, "tokenize shards")
    if cfg.fast_llm:  # before the manifest, which says the stage is done
        _write_fast_llm(ctx.out, megatron_root, out_fs, written, dtype)
    manifest = {
        "format": "megatron-indexed-dataset",
        "version": megatron.VERSION,
        "tokenizer": cfg.tokenizer,
        "vocab_size": tok.get_vocab_size(),
        "dtype": dtype.name,
        "dtype_code": megatron.DTYPE_CODES[dtype],
        "eod_token": tk.EOD,
        "eod_id": tok.token_to_id(tk.EOD),
        "special_tokens": bpe.special_ids(tok),
        "seed": cfg.seed,
        "documents": sum(w["documents"] for w in written),
        "tokens": sum(w["tokens"] for w in written),
        "tokens_by_kind": dict(sorted(by_kind.items())),  # epochs included (`weights`)
        "weights": parse_weights(cfg.weights),
        "shards": written,
    }
    io.write_bytes_atomic(out_fs, io.join(megatron_root, "manifest.json"),
                          (json.dumps(manifest, indent=1) + "\n").encode())  # fmt: skip
    phases.complete()

"""Formatting: curated files to training documents (StarCoder file-level or StarCoder2 repository context).

`mode: starcoder2` (default) first groups the files by repository: a shuffle task per input file sends every
row to partition hash(repo_name) mod (number of input files) under `<out>/format_groups/`, so shard i of this
stage reads partition i and holds whole repositories. Each repository becomes one or more documents (see
`templates.py`); `mode: starcoder` formats each file on its own and needs no grouping. Notebooks (rows with
the filter stage's `notebook_cells`) become documents of their own: structured cells, or `<jupyter_script>`.

Every random draw comes from a generator seeded by (seed, repository) or (seed, doc_id), so a document's bytes
depend on the input and the seed only: not on the number of workers, the order of rows or of shards.

Output columns: `doc_id` (the smallest doc_id of the files in it), `text`, `repo_name`, `language` (the one
with the most bytes), `doc_ids` (its files, in text order), `kind` (`file`, `repository`, `notebook`, or the
kind of a record that is not a file, whose text is taken as its source rendered it), `fim_files` (files in FIM
form), `length_bytes`. The end-of-document token is not in `text`: the tokenizer
appends it. Nothing is removed.

Example:
    stackcurate format --out work/run --mode starcoder2 --seed 42
    stackcurate query work/run "select kind, count(*), sum(fim_files) from format group by 1"
"""

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.core import io, shuffle
from stackcurate.core.config import option, to_dict
from stackcurate.core.contract import Shard, Stage, StageContext, StageOutput
from stackcurate.core.errors import StackcurateError
from stackcurate.core.fingerprint import plan_fingerprint
from stackcurate.core.layout import StageDir
from stackcurate.core.schema import FILE_KIND, KIND
from stackcurate.stages.format import templates

GROUPS_STAGE = "format_groups"
MODES = ("starcoder2", "starcoder")
NOTEBOOKS = ("structured", "script", "raw")
FORMAT_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.int64(), nullable=False),
        pa.field("text", pa.large_string()),
        pa.field("repo_name", pa.string()),
        pa.field("language", pa.string()),
        pa.field("doc_ids", pa.list_(pa.int64())),
        pa.field("kind", pa.string()),
        pa.field("fim_files", pa.int32()),
        pa.field("length_bytes", pa.int64()),
    ]
)
_COLUMNS = ("doc_id", "repo_name", "path", "content", "language", "star_events_count", "notebook_script",
            "notebook_cells", KIND)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class FormatConfig:
    """Which published format, its rates, and the seed."""

    mode: str = option("starcoder2", "starcoder2 (repository context) or starcoder (one file per document)")
    seed: int = option(42, "seed of every random draw (metadata, file order, FIM)")
    metadata_rate: float | None = option(
        None, "probability of metadata: each field (starcoder, default 0.2) or a repository's (starcoder2, 0.5)"
    )
    fim_rate: float = option(0.5, "FIM probability: each file (starcoder) or each repository (starcoder2)")
    fim_file_rate: float = option(0.5, "starcoder2: FIM probability of each file of a FIM repository")
    fim_spm_rate: float = option(0.5, "share of FIM spans in SPM order (the rest PSM)")
    max_chars: int = option(1_000_000, "starcoder2: split a repository into documents of about this many chars")
    notebooks: str = option("structured", "Jupyter notebooks: structured (cells), script, or raw (the JSON)")
    max_output_chars: int = option(1000, "structured notebooks: keep this much of each cell's output")
    batch_rows: int = option(1024, "rows per in-memory batch")
    groups: str | None = option(None, "format_groups output to read (default: made by this run)")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        if self.notebooks not in NOTEBOOKS:
            raise ValueError(f"notebooks must be one of {', '.join(NOTEBOOKS)}")
        for name in ("metadata_rate", "fim_rate", "fim_file_rate", "fim_spm_rate"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        if self.max_chars < 1 or self.max_output_chars < 0:
            raise ValueError("max_chars must be positive and max_output_chars not negative")

    @property
    def rates(self) -> templates.Rates:
        default = 0.2 if self.mode == "starcoder" else 0.5
        metadata = default if self.metadata_rate is None else self.metadata_rate
        return templates.Rates(metadata, self.fim_rate, self.fim_file_rate, self.fim_spm_rate)


def repo_key(name: str | None, doc_id: int) -> int:
    """A repository's 64-bit key (a file without a repository is one of its own)."""
    if not name:
        return doc_id & 0xFFFFFFFFFFFFFFFF
    return int.from_bytes(hashlib.sha1(name.encode()).digest()[:8], "big")


# ---- grouping (starcoder2) -------------------------------------------------------------------------------


def _scan(shard: Shard, batch_rows: int) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """The columns formatting uses, as a schema, and the shard's rows in batches of those columns only."""
    fs, path = io.filesystem(shard.path)
    schema = pq.read_schema(path, filesystem=fs)
    missing = {"doc_id", "content"} - set(schema.names)
    if missing:
        raise StackcurateError(f"format: {shard.path} has no {sorted(missing)[0]} column; run the earlier stages")
    columns = [c for c in _COLUMNS if c in schema.names]
    batches = io.scan_parquet_slice(fs, path, shard.start, shard.stop, batch_rows=batch_rows, columns=columns)
    return pa.schema([schema.field(c) for c in columns]), batches


def group_task(shards: tuple[Shard, ...], root: str, index: int, batch_rows: int) -> dict[str, Any]:
    """Send one input file's rows to the partition of their repository."""
    partitions = len(shards)
    schema, batches = _scan(shards[index], batch_rows)
    out_fs, out_root = io.filesystem(root)
    sink = shuffle.PartitionedWriter(out_fs, out_root, index, schema, partitions)
    rows = 0
    for table in batches:
        names = table.column("repo_name").to_pylist() if "repo_name" in schema.names else [None] * table.num_rows
        ids = table.column("doc_id").to_pylist()
        keys = np.array([repo_key(n, i) for n, i in zip(names, ids, strict=True)], dtype=np.uint64)
        sink.write(table, (keys % np.uint64(partitions)).astype(np.int64))
        rows += table.num_rows
    sink.commit()
    return {"rows": rows}


def group(cfg: FormatConfig, ctx: StageContext) -> FormatConfig:
    """starcoder2: shuffle the input by repository into `<out>/format_groups` (or reuse a finished one)."""
    if cfg.mode != "starcoder2" or cfg.groups is not None:
        return cfg
    shards = tuple(ctx.shards)
    if bad := next((s for s in shards if s.kind == "unreadable"), None):
        raise StackcurateError(f"format cannot read {bad.path}: {bad.detail}")
    result = replace(cfg, groups=StageDir(ctx.out, GROUPS_STAGE).uri)
    formatted = StageDir(ctx.out, "format")  # a finished format of this input needs no groups any more
    if (
        not ctx.overwrite
        and formatted.is_complete()
        and formatted.fingerprint() == plan_fingerprint("format", to_dict(result), list(shards), out=ctx.out)
    ):
        return result
    phases = ctx.phases(GROUPS_STAGE, {"batch_rows": cfg.batch_rows})
    if not phases.done:
        items = [(shards, io.join(phases.uri, "data"), i, cfg.batch_rows) for i in range(len(shards))]
        phases.run("group", group_task, items, "format group")
        phases.complete()
    return result


def drop_groups(cfg: FormatConfig, ctx: StageContext) -> None:
    """Once every shard is formatted, the grouped copy of the input goes (it is as large as the input)."""
    out = StageDir(ctx.out, GROUPS_STAGE)
    if cfg.groups is not None and cfg.groups == out.uri:
        out.delete()


# ---- formatting ------------------------------------------------------------------------------------------


def _documents(rows: list[dict[str, Any]], cfg: FormatConfig) -> list[dict[str, Any]]:
    """The documents of a batch of rows (whole repositories in starcoder2 mode)."""
    rates, docs = cfg.rates, []
    code_rows = []
    for row in rows:
        if (kind := row.get(KIND) or FILE_KIND) != FILE_KIND:
            # A record of another kind (an issue thread, a commit) holds its text as its source rendered it.
            docs.append(_doc(row["content"] or "", [row], kind, 0))
        elif row.get("notebook_cells") is not None and cfg.notebooks != "raw":
            if cfg.notebooks == "structured":
                text = templates.jupyter_structured(row["notebook_cells"], cfg.max_output_chars)
            else:
                text = templates.jupyter_script(row.get("notebook_script") or "")
            docs.append(_doc(text, [row], "notebook", 0))
        else:
            code_rows.append(row)
    if cfg.mode == "starcoder":
        for row in code_rows:
            rng = templates.rng_for(cfg.seed, row["doc_id"])
            text, fimmed = templates.starcoder_file(
                row["content"] or "", row.get("repo_name") or "", row.get("path") or "",
                row.get("star_events_count"), rng, rates,
            )  # fmt: skip
            docs.append(_doc(text, [row], "file", fimmed))
        return docs
    repos: dict[int, list[dict[str, Any]]] = {}
    for row in code_rows:
        repos.setdefault(repo_key(row.get("repo_name"), row["doc_id"]), []).append(row)
    for key, members in repos.items():
        members.sort(key=lambda r: (r.get("path") or "", r["doc_id"]))
        by_id = {r["doc_id"]: r for r in members}
        files = [templates.RepoFile(r["doc_id"], r.get("path") or "", r["content"] or "") for r in members]
        rng = templates.rng_for(cfg.seed, key)
        for text, ids, fimmed in templates.starcoder2_repo(
            members[0].get("repo_name") or "", files, rng, rates, cfg.max_chars
        ):
            docs.append(_doc(text, [by_id[i] for i in ids], "repository", fimmed))
    return docs


def _doc(text: str, rows: list[dict[str, Any]], kind: str, fimmed: int) -> dict[str, Any]:
    sizes: dict[str, int] = {}
    for r in rows:
        if r.get("language"):
            sizes[r["language"]] = sizes.get(r["language"], 0) + len(r.get("content") or "")
    language = min(sizes, key=lambda lang: (-sizes[lang], lang)) if sizes else None
    return {
        "doc_id": min(r["doc_id"] for r in rows),
        "text": text,
        "repo_name": rows[0].get("repo_name"),
        "language": language,
        "doc_ids": [r["doc_id"] for r in rows],
        "kind": kind,
        "fim_files": fimmed,
        "length_bytes": len(text.encode()),
    }


class FormatStage(Stage):
    """turn the files into training documents (repository context, fill-in-the-middle)

    Turn the curated files into training documents. --mode starcoder2 (the default) puts the files of a repository
    together, with repository context; --mode starcoder formats each file on its own. Notebooks become documents of
    their own, and so does each record of another kind than file (an issue thread, a commit), its text as its
    source rendered it. Fill-in-the-middle is applied to a share of the documents (--fim-rate), and every random
    choice is seeded by --seed and the repository, so the documents do not depend on the number of workers or the
    input's order.

    Writes one row per document: doc_id, text, repo_name, language, doc_ids (its files), kind (file, repository,
    notebook, or the record's own kind), fim_files and length_bytes. Nothing is removed.

    Example:
      stackcurate format --out work/run --mode starcoder2 --seed 42
    """

    name = "format"
    mb_per_s = 100  # one core, end to end
    config = FormatConfig
    kinds = None  # every kind: a record of another kind becomes a document of its own
    needs = ("doc_id", "content")

    @classmethod
    def before_shards(cls, cfg: FormatConfig, ctx: StageContext) -> FormatConfig:
        return group(cfg, ctx)

    @classmethod
    def after_shards(cls, cfg: FormatConfig, ctx: StageContext) -> None:
        drop_groups(cfg, ctx)

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        if self.cfg.mode == "starcoder":
            yield from _scan(shard, self.cfg.batch_rows)[1]
            return
        if self.cfg.groups is None:
            raise StackcurateError("format needs its groups: run `stackcurate format`, which makes them first")
        fs, root = io.filesystem(self.cfg.groups)
        table = shuffle.read_partition(fs, io.join(root, "data"), shard.index)
        if table is None:
            return
        names = table.column("repo_name").to_pylist() if "repo_name" in table.column_names else [None] * len(table)
        ids = table.column("doc_id").to_pylist()
        keys = np.array([repo_key(n, i) for n, i in zip(names, ids, strict=True)], dtype=np.uint64)
        order = np.lexsort((table.column("doc_id").to_numpy(), keys))  # by repository, then doc_id
        table, keys = table.take(pa.array(order)), keys[order]
        start = 0
        while start < len(keys):  # batches of whole repositories
            stop = min(start + self.cfg.batch_rows, len(keys))
            stop = int(np.searchsorted(keys, keys[stop - 1], side="right"))
            yield table.slice(start, stop - start)
            start = stop

    def output_schema(self, shard: Shard) -> pa.Schema:
        return FORMAT_SCHEMA

    def schema_after(self, schema: pa.Schema) -> pa.Schema:
        return FORMAT_SCHEMA

    def __call__(self, table: pa.Table) -> StageOutput:
        docs = pa.Table.from_pylist(_documents(table.to_pylist(), self.cfg), schema=FORMAT_SCHEMA)
        fim = sum(docs.column("fim_files").to_pylist())
        return StageOutput(kept=docs, stats={("fim_files", None, None): float(fim)})

"""The source protocol: how ingest plans and reads one kind of input, and the raw rows a source yields.

A source is one class in one file (:class:`Source`). It plans its inputs into shards, reads one shard into
*raw* tables (:data:`RAW_SCHEMA`: one row per file, its original bytes in `data`, or a `reason` why there are
none) and declares which of its reasons are bad input. Ingest then checks and decodes every raw row the same
way, whatever its source: hashes, SWH placeholders, encodings, the decoded size (stages/ingest).

The helpers here are what most sources need: :class:`RawBatch` numbers the rows (`doc_id`) and cuts them into
bounded tables, :class:`Limits` are the extraction rules every source applies, :func:`expand_inputs` turns the
globs of a setting into files.
"""

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import DOC_ID_ORDINAL_BITS, FILE_KIND, FILE_SCHEMA, KIND

if TYPE_CHECKING:
    from stackcurate.core.contract import StageContext
    from stackcurate.stages.ingest import IngestConfig

RAW_SCHEMA = pa.schema(
    [f for f in FILE_SCHEMA if f.name != "content"]
    + [pa.field("data", pa.large_binary()), pa.field("reason", pa.string()), pa.field("detail", pa.string())]
    + [pa.field(KIND, pa.string())]  # null: a file (core/kinds.py)
)
_BATCH_BYTES = 64 << 20


class Source(ABC):
    """One kind of input of the ingest stage.

    Attributes:
        name: The `kind` of the shards it plans (ingest reads a shard with the source of that name). A plan's
            fingerprint holds it: a source renamed makes earlier runs of ingest start over.
        error_reasons: The reasons of its raw rows that are bad input (ingest writes them to `_errors/`); its
            other reasons are removals (`_removed/`).
        option: The ingest setting that names its inputs (`metadata`, `bundles`, `repos`), for a source read
            from ingest's own settings; None for one with settings of its own (`config`). Sources that share an
            option (the two kinds of vault bundle) number its inputs by their place in it (`source_index`), and
            ingest keeps that order.
        config: The frozen dataclass of its own settings, for a source named in ingest's `sources` (its fields
            declared with core.config.option, as a stage's config); None when it has none.
        ingest: The ingest settings every source applies: `limits`, `batch_rows`, `s3`, `only_names`.
        settings: Its own settings (a `config`), or None.
    """

    name: ClassVar[str]
    # The kinds of record it reads (core/kinds.py): a source of another kind than `file` sets `kind` in its rows,
    # and declares the columns of its own that its rows carry besides RAW_SCHEMA's (`raw_schema()`).
    kinds: ClassVar[tuple[str, ...]] = (FILE_KIND,)
    columns: ClassVar[tuple[pa.Field, ...]] = ()
    error_reasons: ClassVar[frozenset[str]] = frozenset()
    # Whether its `read` already leaves out the files `only_names` does not name (The Stack v2's does, before
    # fetching them); ingest filters the rows of the others.
    reads_only_names: ClassVar[bool] = False
    option: ClassVar[str | None] = None
    config: ClassVar[type | None] = None

    def __init__(self, ingest: "IngestConfig", settings: Any = None) -> None:
        self.ingest = ingest
        self.settings = settings

    @classmethod
    def raw_schema(cls) -> pa.Schema:
        """The schema of its raw tables: RAW_SCHEMA and the columns of its own (`columns`)."""
        return pa.schema([*RAW_SCHEMA, *cls.columns])

    @abstractmethod
    def plan(self, upstream: str | None) -> list[Shard]:
        """Its inputs as shards, in a fixed order; none when it is given nothing to read.

        Each shard's `kind` is the source's name and `source_index` the place of its input among the source's
        inputs, from 0 (the shards of one input share it); `index` counts from 0. Ingest numbers the shards of
        every source one after another, so `index` and `source_index` (hence `doc_id`) are the source's own
        order shifted. Raises a one-line StackcurateError for an input that is wrong (a glob matching nothing),
        before any work.

        Args:
            upstream: The output folder of the stage a pipeline ran right before ingest (graph), or None.
        """

    def prepare(self, cfg: "IngestConfig", ctx: "StageContext") -> "IngestConfig":
        """Global work before the shards (GH Archive's split of events by thread); returns the ingest config the
        shards run with (the same, unless it records where that work is). Runs on the driver, with the run's
        phases (core/phases.py) for its tasks."""
        return cfg

    def finish(self, cfg: "IngestConfig", ctx: "StageContext") -> None:
        """Global work once every shard is done (dropping what `prepare` wrote)."""
        return None

    @abstractmethod
    def read(self, shard: Shard) -> Iterator[pa.Table]:
        """The shard's raw rows (RAW_SCHEMA), in bounded tables, always in the same order.

        A bad file is a row with a `reason`, never an exception. An exception means the input as a whole could
        not be read (ingest records one `unreadable_input` error); raise io.StoreUnavailable when the failure
        is the store's and passes (the shard is then redone by the next run, not committed).
        """


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The extraction rules every source applies (see IngestConfig for their meaning)."""

    max_compressed_bytes: int
    max_bytes: int
    max_depth: int
    bomb_ratio: float


def doc_id(source_index: int, ordinal: int) -> int:
    return (source_index << DOC_ID_ORDINAL_BITS) | ordinal


def depth(path: str) -> int:
    return len(PurePosixPath(path.lstrip("/")).parts)


@dataclass
class RawBatch:
    """Collects the raw rows of a shard, numbered in the order they are added, and cuts them into tables.

    Attributes:
        shard: The shard read (its `source_index` and `path` go into every row: `doc_id`, `origin`).
        source: The rows' `source` column (`vault_flat`, `local`, ...).
        batch_rows: Rows per table at most (a table is also cut at 64 MiB of bytes).
        common: Columns every row gets (`repo_name`, `directory_id`, ...).
        schema: The tables' schema (a source with columns of its own: its `raw_schema()`).
    """

    shard: Shard
    source: str
    batch_rows: int
    common: dict[str, Any] = field(default_factory=dict)
    schema: pa.Schema = RAW_SCHEMA
    rows: list[dict[str, Any]] = field(default_factory=list)
    ordinal: int = 0
    size: int = 0

    def add(
        self, path: str, data: bytes | None = None, reason: str | None = None, detail: str | None = None, **extra: Any
    ) -> None:
        # File names are bytes; one that is not UTF-8 is kept readable (\x.. escapes) rather than lost.
        path = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        origin = extra.pop("origin", self.shard.path)  # a record's own (a thread's URL), else its input's
        row = {
            **self.common,
            **extra,
            "doc_id": doc_id(self.shard.source_index, self.ordinal),
            "source": self.source,
            "origin": origin,
            "path": "/" + path.lstrip("/"),
            "data": data,
            "reason": reason,
            "detail": detail,
        }
        if data is not None and "length_bytes" not in extra:
            row["length_bytes"] = len(data)
        self.rows.append(row)
        self.ordinal += 1
        self.size += len(data or b"")

    def full(self) -> bool:
        return len(self.rows) >= self.batch_rows or self.size >= _BATCH_BYTES

    def flush(self) -> pa.Table:
        table = pa.Table.from_pylist(self.rows, schema=self.schema)
        self.rows, self.size = [], 0
        return table


def expand_inputs(patterns: tuple[str, ...], s3: io.S3Options, what: str, *, suffix: str = "") -> list[str]:
    """The files that `patterns` (paths, globs, folders; local or `s3://`) name, in order; a pattern that
    names none is a one-line error (`no <what> file matches ...`)."""
    files: list[str] = []
    for pattern in patterns:
        fs, path = io.filesystem(pattern, s3)
        found = io.expand(fs, path, suffix=suffix)
        if not found:
            raise StackcurateError(f"no {what} file matches {pattern}; check the path or glob")
        prefix = pattern[: pattern.index("://") + 3] if "://" in pattern else ""
        files += [prefix + f if prefix else f for f in found]
    return files


def name_matcher(pattern: str | None) -> Callable[[str | None], bool] | None:
    """Whether a path's file name matches `pattern` (ingest's `only_names`); None when there is no pattern."""
    if pattern is None:
        return None
    regex = re.compile(pattern, re.IGNORECASE)
    return lambda path: bool(regex.match(PurePosixPath(path or "/").name))

"""The contract between a stage and the framework: what a stage declares, what it gets, what it returns.

A stage is one class. Its class attributes declare it (name, config, help, how it fuses, the columns it reads,
the kinds of record it applies to); its class methods are its global steps (plan the shards, work before and
after them, resources); an instance, built once per worker from the config, reads a shard and transforms
tables. The registry (`stackcurate/stages/__init__.py`) lists the built-in stages in pipeline order, and a
pipeline YAML may name any other stage as `module:Class`.

A stage is planned into *shards*: a row range of a Parquet file, or one bundle or repository. Shard `i` of a
stage always covers the same input and always writes the same files (core/layout.py), so a runner (the local
loop or Ray) only decides where a shard runs (core/shards.py).
"""

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from stackcurate.core.schema import FILE_KIND, with_reason

if TYPE_CHECKING:
    from stackcurate.core.phases import Phases

SHARD_DIGITS = 5


@dataclass(frozen=True, kw_only=True)
class Shard:
    """One unit of work.

    Attributes:
        index: Output shard number; fixed by the plan.
        kind: `parquet` (rows `[start, stop)` of a Parquet file), a source's name (`stack_v2`, a vault bundle,
            a local repository: what reads it) or `unreadable` (planning could not open `path`).
        path: The input's URI.
        source_index: Position of the input among all inputs of the stage (used for `doc_id`).
        start: First row (parquet shards).
        stop: One past the last row (parquet shards).
        detail: Why an `unreadable` shard could not be planned.
        weight: About how many bytes of text the shard holds (0: not known); the largest run first, so that
            the last shard to finish is a small one. Not part of the plan's fingerprint.
    """

    index: int
    kind: str
    path: str
    source_index: int
    start: int = 0
    stop: int = 0
    detail: str = ""
    weight: int = 0

    @property
    def name(self) -> str:
        return f"{self.index:0{SHARD_DIGITS}d}"


@dataclass
class StageOutput:
    """What a stage makes of one input table: kept rows, removed rows (with `reason`), bad-input rows."""

    kept: pa.Table
    removed: pa.Table | None = None
    errors: pa.Table | None = None
    # Extra additive counters, keyed by (metric, language, reason): what a stage counts beyond rows and bytes.
    stats: dict[tuple[str, str | None, str | None], float] | None = None


@dataclass(frozen=True)
class StageContext:
    """What a stage's global steps (`before_shards`, `after_shards`: dedup's clustering) get from the run.

    Attributes:
        out: The run's output folder.
        input_uri: The stage's input folder.
        shards: The stage's plan (its shards over the input).
        overwrite: Replace earlier output of a different input or config.
        run_id: Identifies this run in stats rows.
        map: Runs `fn(*item)` for every item on the run's executor and returns the results in order;
            `map(fn, items, description)`, with a progress bar of that description (None: no bar).
        run_pass: Runs a record pass over the stage's input into `<out>/<name>` (license's scan), resumable
            like a stage, and returns that folder; `run_pass(name, factory, settings, names)`, where `settings`
            are what the pass's output depends on and `names` (a regex) the file names it needs: when the stage
            runs fused after a source (ingest), the pass reads those files through it.
        progress: Whether the run shows progress bars (a phase of rounds shows one of its own).
    """

    out: str
    input_uri: str | None
    shards: list[Shard]
    overwrite: bool
    run_id: str
    map: Callable[[Callable[..., Any], list[tuple[Any, ...]], str | None], list[Any]]
    run_pass: Callable[[str, Callable[[], "Stage"], dict[str, Any], str | None], str]
    progress: bool = True

    def phases(self, name: str, settings: dict[str, Any], **kwargs: Any) -> "Phases":
        """The folder of the stage's declared phases (core/phases.py)."""
        from stackcurate.core.phases import Phases

        return Phases(self, name, settings, **kwargs)


class Stage:
    """The base of every stage. A subclass declares, as class attributes:

    - `name`: CLI subcommand, YAML key and output folder;
    - `config`: its frozen config dataclass (each field a flag and a YAML key);
    - its docstring: the first line is its line in `stackcurate --help`, the rest what `stackcurate <name>
      --help` says (for users: what it does, what it removes and why, examples);
    - `reads_records`: its input is an earlier stage's kept rows (all but sources such as ingest);
    - `fuse`: whether it may run fused with its neighbours, in one pass per shard: `any` (a record stage whose
      global work reads nothing, or its input only through the group's head: license's scan), `head` (it may
      only start a group: ingest; dedup, whose clustering reads its input's rows), `no` (never);
    - `follows`: for a source stage, the stage whose output it takes as input when run right after it and
      given none of its own (ingest after graph);
    - `needs` (and `needs_one_of`): input columns it reads, checked when a pipeline is planned;
    - `folders`: folders of the run folder it writes besides its own (tokenize: `megatron`), replaced with it;
    - `mb_per_s`: about how many MB of text a second it takes on one core, end to end (for `--runner auto`'s
      choice of this process or Ray; never changes the output);
    - `kinds`: the kinds of record it applies to (None: every kind); rows of other kinds pass through it
      untouched (core/kinds.py). After format, `kind` is a document's kind (`repository`, `notebook`, ...):
      a stage there takes every kind (None), as tokenize does.

    and overrides the class methods it needs: `plan` (its shards; records stages get one per input Parquet file),
    `before_shards` (global work before the shards; returns the config they run with), `after_shards` (global
    work once every shard is done), `resources` (what each worker needs beyond one CPU). An instance (built on
    each worker from the config) implements `read`, `output_schema` and `__call__`.
    """

    name: ClassVar[str]
    config: ClassVar[type]
    reads_records: ClassVar[bool] = True
    fuse: ClassVar[str] = "no"
    follows: ClassVar[str | None] = None
    needs: ClassVar[tuple[str, ...]] = ()
    needs_one_of: ClassVar[tuple[str, ...]] = ()
    kinds: ClassVar[tuple[str, ...] | None] = (FILE_KIND,)
    folders: ClassVar[tuple[str, ...]] = ()
    mb_per_s: ClassVar[float] = 20.0

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    @classmethod
    def summary(cls) -> str:
        """The stage's line in `stackcurate --help`: the first line of its docstring."""
        return inspect.cleandoc(cls.__doc__ or "").split("\n", 1)[0]

    @classmethod
    def description(cls) -> str:
        """What `stackcurate <name> --help` says: its docstring after the first paragraph."""
        parts = inspect.cleandoc(cls.__doc__ or "").split("\n\n", 1)
        return parts[1] + "\n" if len(parts) > 1 else ""

    @classmethod
    def plan(cls, cfg: Any, input_uri: str | None) -> list[Shard]:
        """The stage's shards: by default one per Parquet file of its input (an earlier stage's kept rows)."""
        from stackcurate.core.planning import plan_records

        return plan_records(input_uri)

    @classmethod
    def before_shards(cls, cfg: Any, ctx: StageContext) -> Any:
        """Global work before the shards (dedup's clustering); returns the config the shards run with."""
        return cfg

    @classmethod
    def after_shards(cls, cfg: Any, ctx: StageContext) -> None:
        """Global work once every shard is done, before the stage is marked complete (tokenize's shards)."""

    @classmethod
    def resources(cls, cfg: Any) -> dict[str, float]:
        """Ray resources each worker of the stage needs beyond one CPU (pii: `{"num_gpus": 1}`)."""
        return {}

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        """Yield the shard's input in bounded tables."""
        raise NotImplementedError

    def output_schema(self, shard: Shard) -> pa.Schema:
        """Schema of the kept rows when the stage reads `shard` itself (it heads its group)."""
        raise NotImplementedError

    def schema_after(self, schema: pa.Schema) -> pa.Schema:
        """Schema of the kept rows given the rows it is handed (when it runs fused after another stage)."""
        return schema

    def removed_schema(self, output_schema: pa.Schema) -> pa.Schema:
        """Schema of the removed rows: the kept rows' with `reason` and `detail` (dedup adds `duplicate_of`)."""
        return with_reason(output_schema)

    def __call__(self, table: pa.Table) -> StageOutput:
        """Transform one input table; must not raise on bad rows (they become removed or error rows)."""
        raise NotImplementedError


def split_by_reason(
    table: pa.Table, reasons: list[str | None], details: list[str | None] | None = None
) -> StageOutput:
    """Kept rows (reason None) and removed rows with their `reason` and `detail` columns."""
    if all(r is None for r in reasons):  # nothing removed: no copy of the batch
        return StageOutput(kept=table, removed=with_reason(table.schema).empty_table())
    drop = pa.array([r is not None for r in reasons], pa.bool_())
    removed = table.filter(drop)
    removed = removed.append_column("reason", pa.array([r for r in reasons if r is not None], pa.string()))
    kept_details = [d for d, r in zip(details or [None] * len(reasons), reasons, strict=True) if r is not None]
    removed = removed.append_column("detail", pa.array(kept_details, pa.string()))
    kept = table.filter(pc.invert(drop))  # pyright: ignore[reportAttributeAccessIssue]
    return StageOutput(kept=kept, removed=removed.cast(with_reason(kept.schema)))

"""The contract between a stage and the runners, and the code that runs one shard.

A stage is planned into *shards*: a row range of a Parquet file, or one bundle or repository. Shard `i`
of a stage always covers the same input and always writes the same files:

    <out>/<stage>/0000i.parquet          kept rows
    <out>/<stage>/removed/0000i.parquet  dropped rows, with `reason` and `detail`
    <out>/<stage>/errors/0000i.parquet   bad input (see schema.ERROR_SCHEMA)
    <out>/<stage>/stats/0000i.parquet    counters (schema.STATS_SCHEMA): additive, except `rss_peak`
    <out>/<stage>/_shards/0000i.json     completion marker, written last

Each file is written under a temporary name and moved into place, and the marker is the commit point: a
rerun skips shards that have one and redoes the others, overwriting whatever they left. So an interrupted
stage, rerun, gives the same files as an uninterrupted one, with nothing lost or duplicated, whatever the
number of workers. A runner (local loop or Ray) only decides where :func:`run_shard` executes.
"""

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from stackcurate.core import io
from stackcurate.core.errors import StackcurateError, is_disk_full
from stackcurate.core.schema import ERROR_SCHEMA, STATS_SCHEMA, conform, with_reason

if TYPE_CHECKING:
    from stackcurate.core.phases import Phases

SHARD_DIGITS = 5
PURGED = "_PURGED"  # in a stage folder whose text `stackcurate purge` deleted (stages/pii/purge.py)
log = logging.getLogger("stackcurate.stage")


@dataclass(frozen=True, kw_only=True)
class Shard:
    """One unit of work.

    Attributes:
        index: Output shard number; fixed by the plan.
        kind: `parquet` (rows `[start, stop)` of a Parquet file), `flat`/`git_bare` (a vault bundle),
            `repo` (a local folder or git repository) or `unreadable` (planning could not open `path`).
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


class Stage(Protocol):
    """A stage as the runners see it. Stage modules never import ray."""

    name: str

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        """Yield the shard's input in bounded tables."""
        ...

    def output_schema(self, shard: Shard) -> pa.Schema:
        """Schema of the kept rows (removed rows add `reason` and `detail`; a stage that gives them more
        columns also defines `removed_schema(output_schema) -> pa.Schema`, as dedup does)."""
        ...

    def __call__(self, table: pa.Table) -> StageOutput:
        """Transform one input table; must not raise on bad rows (they become removed or error rows)."""
        ...

    # A stage that runs fused after another (core/records.RecordStage) also defines
    # `schema_after(input_schema) -> pa.Schema`: the schema of its kept rows given the rows it is handed.


StageFactory = Callable[[], Stage]


@dataclass(frozen=True)
class TaskContext:
    """What a stage's preparation step (e.g. dedup's clustering) gets from the runner.

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
    run_pass: Callable[[str, "StageFactory", dict[str, Any], str | None], str]
    progress: bool = True

    def phases(self, name: str, settings: dict[str, Any], **kwargs: Any) -> "Phases":
        """The folder of the stage's declared phases (core/phases.py)."""
        from stackcurate.core.phases import Phases

        return Phases(self, name, settings, **kwargs)


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


class StageDir:
    """The output folder of one stage: file names, the plan, completion markers."""

    def __init__(self, out: str, stage: str, s3: io.S3Options | None = None) -> None:
        self.uri = io.join(out, stage)
        self.stage = stage
        self.s3 = s3
        self.fs, self.root = io.filesystem(self.uri, s3)

    def path(self, kind: str, shard: Shard | int, suffix: str = ".parquet") -> str:
        name = shard.name if isinstance(shard, Shard) else f"{shard:0{SHARD_DIGITS}d}"
        parts = [name + suffix] if kind == "data" else [kind, name + suffix]
        return io.join(self.root, *parts)

    @property
    def success_path(self) -> str:
        return io.join(self.root, "_SUCCESS")

    def is_complete(self) -> bool:
        return io.exists(self.fs, self.success_path)

    def done_shards(self) -> set[int]:
        markers = io.expand(self.fs, io.join(self.root, "_shards"), suffix=".json")
        return {int(p.rsplit("/", 1)[1].split(".")[0]) for p in markers}

    @property
    def plan_path(self) -> str:
        return io.join(self.root, "_plan.json")

    def _plan(self) -> dict[str, Any] | None:
        if not io.exists(self.fs, self.plan_path):
            return None
        return json.loads(io.read_text(self.fs, self.plan_path))

    def fingerprint(self) -> str | None:
        """The plan fingerprint of the output in this folder, if any."""
        plan = self._plan()
        return None if plan is None else plan["fingerprint"]

    def request(self) -> str | None:
        """The request fingerprint of the output in this folder (see :meth:`prepare`), if one was recorded."""
        plan = self._plan()
        return None if plan is None else plan.get("request")

    def prepare(self, fingerprint: str, *, overwrite: bool, request: str | None = None) -> set[int]:
        """Create the folder for a run with this plan; return the shards already finished by an earlier run.

        `request` fingerprints what the stage was asked for before its preparation filled in what it computes
        (dedup's clusters, the tokenizer it trains): a dry run, which prepares nothing, compares it to tell a
        finished output that a run would reuse."""
        plan_path = self.plan_path
        if io.exists(self.fs, self.root):
            previous = self.fingerprint()
            if overwrite or previous is None:
                self.fs.delete_dir(self.root)
            elif previous != fingerprint:
                raise StackcurateError(
                    f"{self.uri} holds output of a different input or config; pass --overwrite to replace it "
                    "or choose another --out"
                )
        for sub in ("", "removed", "errors", "stats", "_shards"):
            self.fs.create_dir(io.join(self.root, sub) if sub else self.root, recursive=True)
        self._remove_temporaries()
        plan = {"fingerprint": fingerprint, **({"request": request} if request is not None else {})}
        if self._plan() != plan:
            io.write_bytes_atomic(self.fs, plan_path, json.dumps(plan).encode())
        if io.exists(self.fs, self.success_path):
            self.fs.delete_file(self.success_path)
        return self.done_shards()

    def _remove_temporaries(self) -> None:
        for info in self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True)):
            if ".tmp-" in info.base_name and info.type == pafs.FileType.File:
                self.fs.delete_file(info.path)

    def write_run(self, run_id: str, wall_seconds: float, workers: int) -> None:
        """Record how a run ran this stage (its group's wall time, the most workers at once) as stats rows of
        their own, `stats/run-<run_id>.parquet`: a resumed stage has one file per run that worked on it."""
        rows = [{"run_id": run_id, "stage": self.stage, "shard": -1, "metric": metric, "language": None,
                 "reason": None, "value": float(value), "unit": UNITS[metric]}
                for metric, value in (("wall_seconds", wall_seconds), ("workers", workers))]  # fmt: skip
        sink = io.AtomicParquetWriter(self.fs, io.join(self.root, "stats", f"run-{run_id}.parquet"), STATS_SCHEMA)
        sink.write(pa.Table.from_pylist(rows, schema=STATS_SCHEMA))
        sink.commit()

    def finish(self, config_yaml: str) -> None:
        """Mark the stage complete; the temporary files of attempts that died with their worker go."""
        for path in io.expand(self.fs, self.root):
            if ".tmp-" in path.rsplit("/", 1)[-1]:
                self.fs.delete_file(path)
        io.write_bytes_atomic(self.fs, io.join(self.root, "_config.yaml"), config_yaml.encode())
        io.write_bytes_atomic(self.fs, self.success_path, b"")


def plan_fingerprint(stage: str, config: dict[str, Any], shards: list[Shard], *, out: str) -> str:
    """What a stage's output depends on: its config and its plan, with every local path made portable
    (:func:`_portable`), so a run folder moved or copied elsewhere, with or without its inputs, resumes."""
    _, root = io.filesystem(out)
    plan = [{k: v for k, v in asdict(s).items() if k != "weight"} for s in shards]
    payload = {"stage": stage, "config": config, "shards": plan}
    text = json.dumps(_portable(payload, root + "/", {}), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


_HASHED_BYTES = 1 << 20  # of a file's head and of its tail: input Parquet files can be many GB


def _portable(value: Any, root: str, memo: dict[str, str]) -> Any:
    """`value` with local absolute paths replaced by what does not change when folders move: a path inside the
    run folder (`root`) by its relative path, a file elsewhere by its size and a hash of its first and last MiB
    (a rules table, a metadata Parquet file), a folder elsewhere by its name (a repository, a content store),
    a glob from its deepest existing folder's name on.
    URIs (`s3://...`) and other values stay as they are."""
    if isinstance(value, dict):
        return {k: _portable(v, root, memo) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_portable(v, root, memo) for v in value]
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    if value.startswith(root) or value == root.rstrip("/"):
        return "$OUT/" + value[len(root) :]
    if value not in memo:
        path = Path(value)
        if path.is_file():
            digest = hashlib.sha256()
            with path.open("rb") as f:
                size = f.seek(0, 2)
                f.seek(0)
                digest.update(f.read(_HASHED_BYTES))
                if size > 2 * _HASHED_BYTES:
                    f.seek(size - _HASHED_BYTES)
                digest.update(f.read(_HASHED_BYTES))
            memo[value] = f"file:{size}:{digest.hexdigest()}"
        else:  # a folder, or a glob (whose matches the plan's shards name): from the folder's name on
            folder = path
            while not folder.is_dir() and folder != folder.parent:
                folder = folder.parent
            memo[value] = f"dir:{folder.name}/{path.relative_to(folder).as_posix()}"
    return memo[value]


def error_row(shard: Shard, source: str, reason: str, detail: str) -> pa.Table:
    """A single bad-input row that stands for the whole shard (e.g. an unreadable input file)."""
    return pa.Table.from_pylist(
        [{"source": source, "origin": shard.path, "reason": reason, "detail": detail[:2000]}], schema=ERROR_SCHEMA
    )


# Metrics that are not counts of their unit's first word (`docs_in` is docs, `bytes_out` bytes).
UNITS = {"seconds": "seconds", "wall_seconds": "seconds", "rss_peak": "bytes", "workers": "workers"}
LARGEST = ("rss_peak", "workers")  # metrics whose shards and runs combine by their largest value, not their sum


def reset_peak_rss() -> None:
    """Start measuring this process's peak resident memory afresh (Linux: VmHWM back to the current RSS)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # not Linux, or /proc read-only: the peak is then the process's peak so far


def peak_rss() -> int:
    """This process's peak resident memory (bytes) since :func:`reset_peak_rss`; 0 where it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Counters:
    """Per-shard counters keyed by (metric, language, reason): additive, except the peak (`rss_peak`)."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str | None, str | None], float] = {}

    def add(self, metric: str, language: str | None, reason: str | None, value: float) -> None:
        key = (metric, language, reason)
        self.values[key] = self.values.get(key, 0.0) + value

    def count(self, table: pa.Table | None, prefix: str) -> None:
        if table is None or table.num_rows == 0:
            return
        n = table.num_rows
        language = table.column("language") if "language" in table.column_names else pa.nulls(n, pa.string())
        # Input rows are counted by language only; a raw ingest row may carry a reason before it is judged.
        has_reason = prefix != "in" and "reason" in table.column_names
        reason = table.column("reason") if has_reason else pa.nulls(n, pa.string())
        if "length_bytes" in table.column_names:
            size = pc.fill_null(table.column("length_bytes"), 0).cast(pa.int64())
        else:
            size = pa.array([0] * n, pa.int64())
        grouped = (
            pa.table({"language": language, "reason": reason, "size": size})
            .group_by(["language", "reason"], use_threads=False)
            .aggregate([([], "count_all"), ("size", "sum")])
        )
        for row in grouped.to_pylist():
            self.add(f"docs_{prefix}", row["language"], row["reason"], row["count_all"])
            self.add(f"bytes_{prefix}", row["language"], row["reason"], row["size_sum"] or 0)

    def table(self, run_id: str, stage: str, shard: int) -> pa.Table:
        rows = [
            {
                "run_id": run_id,
                "stage": stage,
                "shard": shard,
                "metric": m,
                "language": lang,
                "reason": r,
                "value": v,
                "unit": UNITS.get(m, m.split("_", 1)[0]),
            }
            for (m, lang, r), v in sorted(self.values.items(), key=lambda kv: tuple(str(x) for x in kv[0]))
        ]
        return pa.Table.from_pylist(rows, schema=STATS_SCHEMA)


def _guarded_read(stage: Stage, shard: Shard, errors: io.AtomicParquetWriter) -> Iterator[pa.Table]:
    """The shard's input tables; a failure to read the input becomes one error row (one per unreadable row
    group, the others being read), never a crash. A transient failure (the store, not the input) raises
    io.StoreUnavailable instead: the input is not bad, and the shard must be redone, not committed."""
    if shard.kind == "unreadable":
        errors.write(error_row(shard, stage.name, "unreadable_input", shard.detail))
        return
    tables = iter(stage.read(shard))
    while True:
        try:
            table = next(tables)
        except StopIteration:
            return
        except io.StoreUnavailable:
            raise
        except io.UnreadableRowGroups as exc:
            for detail in exc.details:
                errors.write(error_row(shard, stage.name, "unreadable_input", detail))
            return
        except Exception as exc:  # noqa: BLE001 - whatever the reader raised, the input is bad, not the run
            if (cause := io.transient_cause(exc)) is not None:
                raise io.StoreUnavailable(f"{shard.path} could not be read: {cause} ({io.short_error(exc)})") from exc
            errors.write(error_row(shard, stage.name, "unreadable_input", f"{type(exc).__name__}: {exc}"))
            return
        yield table


@dataclass(frozen=True)
class ShardJob:
    """What a worker needs to run the shards of one stage, or of a fused group of record stages.

    A fused group runs consecutive record stages in one pass per shard: the first stage reads the shard, each
    stage's callable takes the rows the one before it kept, and every stage writes its own removed, errors and
    stats files and its marker, under its own folder, with the same shard number. Kept rows are written only
    by the last stage, and by those in `keep` (`--keep-intermediate`).

    Attributes:
        key: Unique to one stage run: a worker builds the stages once per key and reuses them.
        factories: Build each stage of the group, in order (on the worker).
        dirs: Each stage's output folder.
        run_id: Identifies this run in stats rows.
        keep: Whether each stage writes its kept rows (the pipeline sets it for the last one, always).
        removed_content: Whether removed rows keep their `content` (else it is written as null).
    """

    key: str
    factories: tuple[StageFactory, ...]
    dirs: tuple[StageDir, ...]
    run_id: str
    keep: tuple[bool, ...]
    removed_content: bool = True

    @property
    def name(self) -> str:
        return "+".join(d.stage for d in self.dirs)

    def build(self) -> list[Stage]:
        return [factory() for factory in self.factories]

    def run(self, stages: list[Stage], shard: Shard) -> dict[str, Any]:
        """Run one shard end to end and commit it; return its summary (the last stage's marker)."""
        return run_shard(stages, shard, self)


def run_shard(stages: list[Stage], shard: Shard, job: ShardJob) -> dict[str, Any]:
    """Run one shard of a stage (or of a fused group) and commit it. A full disk is a one-line error naming the
    output (the shard's temporary files are gone, its finished siblings kept)."""
    try:
        return _run_shard(stages, shard, job)
    except OSError as exc:
        if is_disk_full(exc):
            raise StackcurateError(
                f"{job.name}: no space left on the device holding {job.dirs[-1].uri} (writing shard {shard.name}); "
                "free some space or choose another --out, then rerun the same command to resume"
            ) from None
        raise


class _StageWriters:
    """One stage's files for one shard: kept rows (unless fused away), removed rows, errors, counters."""

    def __init__(self, stage: Stage, out: StageDir, shard: Shard, schema: pa.Schema, keep: bool) -> None:
        self.stage, self.out, self.schema = stage, out, schema
        self.removed_schema = getattr(stage, "removed_schema", with_reason)(schema)
        self.data = io.AtomicParquetWriter(out.fs, out.path("data", shard), schema) if keep else None
        self.removed = io.AtomicParquetWriter(out.fs, out.path("removed", shard), self.removed_schema)
        self.errors = io.AtomicParquetWriter(out.fs, out.path("errors", shard), ERROR_SCHEMA)
        self.counters = Counters()
        self.kept_rows = 0
        self.seconds = 0.0

    @property
    def writers(self) -> list[io.AtomicParquetWriter]:
        return [w for w in (self.data, self.removed, self.errors) if w is not None]

    def take(self, table: pa.Table, removed_content: bool) -> pa.Table:
        """Run the stage on `table`, write what it removed and its errors; return the kept rows."""
        started = time.perf_counter()
        self.counters.count(table, "in")
        result = self.stage(table)
        kept = conform(result.kept, self.schema)
        if self.data is not None:
            self.data.write(kept)
        self.kept_rows += kept.num_rows
        self.counters.count(result.kept, "out")
        if result.removed is not None:
            removed = conform(result.removed, self.removed_schema)
            if not removed_content and "content" in removed.column_names and removed.num_rows:
                index = removed.schema.get_field_index("content")
                field = removed.schema.field(index)
                removed = removed.set_column(index, field, pa.nulls(removed.num_rows, field.type))
            self.removed.write(removed)
            self.counters.count(result.removed, "removed")
        if result.errors is not None:
            self.errors.write(conform(result.errors, ERROR_SCHEMA))
            self.counters.count(result.errors, "error")
        for (metric, language, reason), value in (result.stats or {}).items():
            self.counters.add(metric, language, reason, value)
        self.seconds += time.perf_counter() - started
        return kept

    def commit(self, shard: Shard, run_id: str, rss: int) -> dict[str, Any]:
        for writer in self.writers:
            writer.commit()
        self.counters.add("seconds", None, None, self.seconds)
        if rss:  # the worker's peak over the shard: a fused group's stages share it
            self.counters.add("rss_peak", None, None, rss)
        stats = io.AtomicParquetWriter(self.out.fs, self.out.path("stats", shard), STATS_SCHEMA)
        stats.write(self.counters.table(run_id, self.stage.name, shard.index))
        stats.commit()
        values = self.counters.values.items()
        return {
            "shard": shard.index,
            "docs_in": int(sum(v for (m, _, _), v in values if m == "docs_in")),
            "docs_out": self.kept_rows,
            "docs_removed": self.removed.rows,
            "errors": self.errors.rows,
            "bytes_out": int(sum(v for (m, _, _), v in values if m == "bytes_out")),
            "seconds": round(self.seconds, 3),
        }


def _run_shard(stages: list[Stage], shard: Shard, job: ShardJob) -> dict[str, Any]:
    started = time.perf_counter()
    reset_peak_rss()
    schema = stages[0].output_schema(shard)
    steps = []
    for i, (stage, out, keep) in enumerate(zip(stages, job.dirs, job.keep, strict=True)):
        if i:
            schema = stage.schema_after(schema)  # pyright: ignore[reportAttributeAccessIssue] - record stages
        steps.append(_StageWriters(stage, out, shard, schema, keep=keep))
    try:
        tables = _guarded_read(stages[0], shard, steps[0].errors)
        while True:
            reading = time.perf_counter()
            table = next(tables, None)
            steps[0].seconds += time.perf_counter() - reading  # reading the shard is the first stage's time
            if table is None:
                break
            for step in steps:
                table = step.take(table, job.removed_content)
    except io.StoreUnavailable as exc:
        # Not committed: no marker, so the next run redoes the shard once the store is back. The summary says
        # why, for the stage's closing line (pipeline.run_stage), and has the usual counters for the runners.
        _abort(steps)
        log.debug("%s shard %s left for a rerun: %s", job.name, shard.name, exc)
        keys = ("docs_in", "docs_out", "docs_removed", "errors", "bytes_out")
        return {"shard": shard.index, **dict.fromkeys(keys, 0), "unavailable": str(exc)}
    except BaseException:
        _abort(steps)
        raise
    if len(steps) == 1:
        steps[0].seconds = time.perf_counter() - started  # a stage alone: the shard's whole time, as always
    rss = peak_rss()
    summaries = [step.commit(shard, job.run_id, rss) for step in steps]
    # The markers last, in stage order: a shard is done when every stage of its group has one.
    for step, summary in zip(steps, summaries, strict=True):
        io.write_bytes_atomic(step.out.fs, step.out.path("_shards", shard, ".json"), json.dumps(summary).encode())
    pa.default_memory_pool().release_unused()  # a long-lived worker hands back what this shard freed
    return summaries[-1]


def _abort(steps: list[_StageWriters]) -> None:
    for step in steps:
        for writer in step.writers:
            writer.abort()


def records_schema(shard: Shard, s3: io.S3Options | None = None) -> pa.Schema:
    """Schema of a record-Parquet input shard (the output of an earlier stage)."""
    fs, path = io.filesystem(shard.path, s3)
    return pq.read_schema(path, filesystem=fs)


def read_records(shard: Shard, batch_rows: int, s3: io.S3Options | None = None) -> Iterator[pa.Table]:
    fs, path = io.filesystem(shard.path, s3)
    yield from io.scan_parquet_slice(fs, path, shard.start, shard.stop, batch_rows=batch_rows)


def plan_parquet(
    files: list[str],
    rows_per_shard: int,
    s3: io.S3Options | None = None,
    kind: str = "parquet",
    check: Callable[[str, pa.Schema], None] | None = None,
    size_column: str | None = None,
) -> list[Shard]:
    """Split Parquet files into shards of at most `rows_per_shard` rows, in file order. `check(uri, schema)`
    vets each readable file's columns before any work (raising a one-line StackcurateError); a file that
    cannot be read becomes an `unreadable` shard, unless the failure is transient (the store is down), which
    stops the plan in one line. Each shard's weight is the sum of `size_column` over its rows when the file
    has that column (metadata that gives each file's size), else its row groups' uncompressed bytes."""
    shards: list[Shard] = []
    for source_index, uri in enumerate(files):
        fs, path = io.filesystem(uri, s3)
        try:
            footer = pq.read_metadata(path, filesystem=fs)
            n, schema = footer.num_rows, footer.schema.to_arrow_schema()
        except (OSError, pa.ArrowException) as exc:
            if (cause := io.transient_cause(exc)) is not None:
                raise StackcurateError(
                    f"cannot read {uri}: {cause} ({io.short_error(exc)}); rerun when the store is back"
                ) from None
            shards.append(
                Shard(
                    index=len(shards),
                    kind="unreadable",
                    path=uri,
                    source_index=source_index,
                    detail=f"{type(exc).__name__}: {exc}",
                )
            )
            continue
        if check is not None:
            check(uri, schema)
        # An empty file still gets one (empty) shard: its stage then writes an empty output with the schema,
        # which the next stage reads as an empty input.
        sizes = _row_sizes(fs, path, footer, size_column if size_column in schema.names else None)
        for start in range(0, max(n, 1), rows_per_shard):
            stop = min(n, start + rows_per_shard)
            shards.append(
                Shard(
                    index=len(shards),
                    kind=kind,
                    path=uri,
                    source_index=source_index,
                    start=start,
                    stop=stop,
                    weight=int(sizes[start:stop].sum()),
                )
            )
    return shards


def _row_sizes(fs: Any, path: str, footer: pq.FileMetaData, column: str | None) -> np.ndarray:
    """About how many bytes each row of a Parquet file holds: its `column`, or its row group's average."""
    if column is not None:
        try:
            values = pq.read_table(path, filesystem=fs, columns=[column]).column(column)
            return pc.fill_null(values.cast(pa.int64()), 0).to_numpy()  # pyright: ignore[reportAttributeAccessIssue]
        except (OSError, pa.ArrowException):
            pass  # sizes that are not numbers, or an unreadable row group: the reading reports them
    groups = [footer.row_group(i) for i in range(footer.num_row_groups)]
    per_row = [np.full(g.num_rows, g.total_byte_size / max(g.num_rows, 1)) for g in groups]
    return np.concatenate(per_row) if per_row else np.zeros(0)

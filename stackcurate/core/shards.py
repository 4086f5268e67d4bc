"""The shard runner: one shard of a stage, or of a fused group of stages, read, transformed and committed.

A runner (the local loop or Ray, stackcurate/runners/) only decides where :func:`run_shard` executes; what
it writes, and when a shard counts as done, is decided here and in core/layout.py.
"""

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.contract import Shard, Stage, StageOutput
from stackcurate.core.counters import Counters, peak_rss, reset_peak_rss
from stackcurate.core.errors import StackcurateError, is_disk_full
from stackcurate.core.kinds import split_kinds
from stackcurate.core.layout import SHARDS, StageDir
from stackcurate.core.schema import ERROR_SCHEMA, STATS_SCHEMA, conform

log = logging.getLogger("stackcurate.stage")
StageFactory = Callable[[], Stage]


def error_row(shard: Shard, source: str, reason: str, detail: str) -> pa.Table:
    """A single bad-input row that stands for the whole shard (e.g. an unreadable input file)."""
    return pa.Table.from_pylist(
        [{"source": source, "origin": shard.path, "reason": reason, "detail": detail[:2000]}], schema=ERROR_SCHEMA
    )


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
        self.removed_schema = stage.removed_schema(schema)
        self.data = io.AtomicParquetWriter(out.fs, out.path("data", shard), schema) if keep else None
        self.removed = io.AtomicParquetWriter(out.fs, out.path("removed", shard), self.removed_schema)
        self.errors = io.AtomicParquetWriter(out.fs, out.path("errors", shard), ERROR_SCHEMA)
        self.counters = Counters()
        self.kept_rows = 0
        self.seconds = 0.0

    @property
    def writers(self) -> list[io.AtomicParquetWriter]:
        return [w for w in (self.data, self.removed, self.errors) if w is not None]

    def apply(self, table: pa.Table, removed_content: bool) -> pa.Table:
        """Run the stage on the rows of `table` of its kinds, write what it removed and its errors; return the
        kept rows, then the rows of other kinds, passed through (core/kinds.py)."""
        started = time.perf_counter()
        self.counters.count(table, "in")
        mine, passed = split_kinds(table, self.stage.kinds)
        result = self.stage(mine) if mine.num_rows or passed is None else StageOutput(kept=mine)
        kept = conform(result.kept, self.schema)
        if passed is not None:
            self.counters.count(passed, "passed")
            self.counters.count(passed, "out")
            kept = pa.concat_tables([kept, conform(passed, self.schema)])
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
            "docs_in": int(sum(v for (m, *_), v in values if m == "docs_in")),
            "docs_out": self.kept_rows,
            "docs_removed": self.removed.rows,
            "errors": self.errors.rows,
            "bytes_out": int(sum(v for (m, *_), v in values if m == "bytes_out")),
            "seconds": round(self.seconds, 3),
        }


def _run_shard(stages: list[Stage], shard: Shard, job: ShardJob) -> dict[str, Any]:
    started = time.perf_counter()
    reset_peak_rss()
    schema = stages[0].output_schema(shard)
    steps = []
    for i, (stage, out, keep) in enumerate(zip(stages, job.dirs, job.keep, strict=True)):
        if i:
            schema = stage.schema_after(schema)
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
                table = step.apply(table, job.removed_content)
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
    try:  # a write's error may surface here: the files are written on a thread (io.AtomicParquetWriter)
        summaries = [step.commit(shard, job.run_id, rss) for step in steps]
    except BaseException:
        _abort(steps)
        raise
    # The markers last, in stage order: a shard is done when every stage of its group has one.
    for step, summary in zip(steps, summaries, strict=True):
        io.write_bytes_atomic(step.out.fs, step.out.path(SHARDS, shard, ".json"), json.dumps(summary).encode())
    pa.default_memory_pool().release_unused()  # a long-lived worker hands back what this shard freed
    return summaries[-1]


def _abort(steps: list[_StageWriters]) -> None:
    for step in steps:
        for writer in step.writers:
            writer.abort()

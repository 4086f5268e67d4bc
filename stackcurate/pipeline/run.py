"""Run one stage, or a whole pipeline, over an output folder: group by group, on one executor.

Each stage still writes its own removed rows, errors, stats and markers, and only a group's last stage writes
kept rows (all of them with `--keep-intermediate`, a stage's with `keep: true` in its block).
"""

import contextlib
import dataclasses
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from stackcurate.core import io, progress
from stackcurate.core.config import dump_yaml, output_settings, to_dict
from stackcurate.core.contract import Shard, Stage, StageContext
from stackcurate.core.errors import StackcurateError
from stackcurate.core.fingerprint import plan_fingerprint
from stackcurate.core.layout import FUSED, PIPELINE, RUN_CONFIG, SHARDS, StageDir, run_lock
from stackcurate.core.shards import ShardJob
from stackcurate.pipeline.plan import (
    check_input_complete,
    check_pipeline,
    default_input,
    group_input,
    group_plans,
    group_status,
    kept_rows,
    plan_groups,
)
from stackcurate.pipeline.spec import Pipeline, RunOptions, resolved_config
from stackcurate.runners import Executor


@dataclass
class StageResult:
    stage: str
    shards: int
    shards_run: int
    docs_in: int = 0
    docs_out: int = 0
    docs_removed: int = 0
    errors: int = 0
    bytes_out: int = 0
    seconds: float = 0.0  # wall time of the stage, or of its fused group
    plan: list[str] = field(default_factory=list)
    fused_after: str | None = None  # the stage it ran fused after, in one pass per shard
    own_seconds: float = 0.0  # a fused stage's own time, summed over its shards
    node_busy: dict[str, float] = field(default_factory=dict)  # node -> seconds its workers were busy (Ray)

    def line(self) -> str:
        counts = (
            f"{self.stage}: {self.docs_in:,} in, {self.docs_out:,} kept, {self.docs_removed:,} removed, "
            f"{self.errors:,} errors; {self.shards} shards ({self.shards_run} run now)"
        )
        if self.fused_after:
            return f"{counts}, fused after {self.fused_after} ({self.own_seconds:.1f} s of its own)"
        return f"{counts} in {self.seconds:.1f} s{self.nodes_line()}"

    def nodes_line(self) -> str:
        """`; nodes busy ...` when workers on several nodes ran the stage (or its group)."""
        if len(self.node_busy) < 2:
            return ""
        busy = sorted(self.node_busy.items())
        mean = sum(self.node_busy.values()) / len(busy)
        each = ", ".join(f"{node} {seconds:.1f} s" for node, seconds in busy)
        return f"; nodes busy {each} (slowest {max(self.node_busy.values()) / max(mean, 1e-9):.2f}x the mean)"


def run_stage(
    spec: type[Stage],
    cfg: Any,
    out: str,
    opts: RunOptions,
    *,
    input_uri: str | None = None,
    executor: Executor | None = None,
) -> StageResult:
    """Plan one stage, start its output folder (StageDir.start_run), run the pending shards and commit it."""
    spec(cfg)  # check the config and its files here, as one-line errors, before any worker starts
    if spec.reads_records:
        input_uri = input_uri or default_input(out, spec.name)
    own = executor is None
    with contextlib.nullcontext() if opts.dry_run else run_lock(out):
        executor = executor or opts.executor()
        try:
            return _run_group([(spec, cfg)], out, opts, input_uri, executor)[0]
        finally:
            if own:
                executor.close()


def new_run_id() -> str:
    """A run's id: when it started, and a random part (`20261127T101043-3251690b`)."""
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def _run_group(
    members: list[tuple[type[Stage], Any]],
    out: str,
    opts: RunOptions,
    input_uri: str | None,
    executor: Executor,
    keep_stages: frozenset[str] = frozenset(),
    run_id: str | None = None,
) -> list[StageResult]:
    """Run consecutive stages as one pass per shard (one stage alone is a group of one): plan the first stage's
    shards, run every stage's `before_shards` (its global work, e.g. dedup's clustering), run the shards no
    stage has finished, and commit each stage. One progress bar shows it all."""
    with progress.stage_bar(" + ".join(spec.name for spec, _ in members), opts.progress and not opts.dry_run):
        return _run_group_now(members, out, opts, input_uri, executor, keep_stages, run_id)


def _run_group_now(
    members: list[tuple[type[Stage], Any]],
    out: str,
    opts: RunOptions,
    input_uri: str | None,
    executor: Executor,
    keep_stages: frozenset[str],
    run_id: str | None,
) -> list[StageResult]:
    if input_uri is not None:
        check_input_complete(input_uri, members[0][0].name)
    started = time.perf_counter()
    first, first_cfg = members[0]
    shards = first.plan(first_cfg, input_uri)
    dirs = [StageDir(out, spec.name, extra=spec.folders) for spec, _ in members]
    keep = kept_rows(members, opts, keep_stages)
    requests = [fingerprint for fingerprint, _ in group_plans(members, [cfg for _, cfg in members], keep, shards, out)]
    if opts.dry_run:
        kinds: dict[str, int] = {}
        for s in shards:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        plan = [f"{n} {k} shard(s)" for k, n in kinds.items()] + [f"output: {d.uri}" for d in dirs]
        plan.append(group_status(dirs, requests, shards, opts))
        return [StageResult(spec.name, len(shards), 0, plan=plan) for spec, _ in members]
    speed = 1 / sum(1 / spec.mb_per_s for spec, _ in members)  # MB/s of the group's stages one after the other
    label = " + ".join(spec.name for spec, _ in members)
    executor.begin_group(label, shards, speed, _gpus(members, [cfg for _, cfg in members]))
    executor.check_shared({"--out": out, **({"--input": input_uri} if input_uri is not None else {})})
    executor.take_busy()  # from here on, this group's
    executor.take_workers()
    run_id = run_id or new_run_id()
    source = None if first.reads_records else members[0]  # a pass of a fused stage reads through ingest
    ctx = StageContext(out, input_uri, shards, opts.overwrite, run_id, executor.map,
                      partial(_run_pass, out, input_uri, shards, opts, executor, run_id, source),
                      progress=opts.progress)  # fmt: skip
    cfgs = []
    for spec, cfg in members:
        cfgs.append(spec.before_shards(cfg, ctx))
    done: set[int] | None = None
    plans = group_plans(members, cfgs, keep, shards, out)
    # The output the group reads, as it is now (a stage's folder: its completion id); its other stages read
    # what the group's stage before them makes in this run.
    source_dir = _stage_folder(input_uri)
    source_id = source_dir.completion().get("id") if source_dir is not None else None
    for i, (stage_dir, (fingerprint, summary), request) in enumerate(zip(dirs, plans, requests, strict=True)):
        finished = stage_dir.start_run(
            fingerprint, overwrite=opts.overwrite, request=request, summary=summary,
            input_id=source_id if i == 0 else None,
        )  # fmt: skip
        done = finished if done is None else done & finished
    assert done is not None
    pending = [s for s in shards if s.index not in done]
    job = ShardJob(
        key=f"{run_id}-{'+'.join(spec.name for spec, _ in members)}",
        factories=tuple(_Factory(spec, cfg) for (spec, _), cfg in zip(members, cfgs, strict=True)),
        dirs=tuple(dirs),
        run_id=run_id,
        keep=keep,
        removed_content=opts.removed_content,
    )
    _run_pending(executor, job, shards, pending, _gpus(members, cfgs))
    results = []
    input_name, input_id = (source_dir.stage, source_id) if source_dir is not None else (None, None)
    for i, ((spec, _), cfg, stage_dir) in enumerate(zip(members, cfgs, dirs, strict=True)):
        spec.after_shards(cfg, ctx)
        read_from = input_uri if i == 0 else dirs[i - 1].uri
        fused = stage_dir.marker(FUSED)
        if keep[i]:
            if io.exists(stage_dir.fs, fused):
                stage_dir.fs.delete_file(fused)
        else:  # no kept rows: no folder of them either
            io.write_bytes_atomic(stage_dir.fs, fused, members[i + 1][0].name.encode())
            if io.exists(stage_dir.fs, stage_dir.root) and not io.expand(stage_dir.fs, stage_dir.root):
                stage_dir.fs.delete_dir(stage_dir.root)
        completed = stage_dir.mark_complete(
            dump_yaml({"stage": spec.name, "input": read_from, "config": to_dict(cfg)}),
            ran=bool(pending), input_name=input_name, input_id=input_id,
        )  # fmt: skip
        input_name, input_id = stage_dir.stage, completed  # what the group's next stage read
        result = StageResult(spec.name, len(shards), len(pending), seconds=time.perf_counter() - started)
        result.fused_after = members[i - 1][0].name if i else None
        for marker in io.expand(stage_dir.fs, io.join(stage_dir.state, SHARDS), suffix=".json"):
            summary = json.loads(io.read_text(stage_dir.fs, marker))
            for key in ("docs_in", "docs_out", "docs_removed", "errors", "bytes_out"):
                setattr(result, key, getattr(result, key) + summary[key])
            result.own_seconds += summary.get("seconds", 0.0)
        results.append(result)
    results[0].node_busy = executor.take_busy()  # the group's phases, shards and finishing tasks, by node
    if workers := executor.take_workers():  # something ran (not a finished stage reused): how, for the report
        wall = time.perf_counter() - started
        for stage_dir in dirs:
            stage_dir.write_run(run_id, wall, workers)
    return results


def _gpus(members: list[tuple[type[Stage], Any]], cfgs: list[Any]) -> float:
    """The GPUs each worker of a group needs: its most demanding stage's."""
    return max(spec.resources(cfg).get("num_gpus", 0.0) for (spec, _), cfg in zip(members, cfgs, strict=True))


def _run_pending(
    executor: Executor, job: ShardJob, shards: list[Shard], pending: list[Shard], num_gpus: float = 0.0
) -> None:
    """Run the pending shards of `job`; a one-line error unless every stage of it then has all its shards.

    A shard left uncommitted (its store was down) keeps the stage unfinished: no SUCCESS, so the next run
    redoes exactly those shards; the finished ones are kept."""
    summaries = executor.run_shards(job, pending, num_gpus=num_gpus) if pending else []
    for stage_dir in job.dirs:
        committed = stage_dir.done_shards()
        if unfinished := [s for s in shards if s.index not in committed]:
            raise StackcurateError(_unfinished_line(stage_dir.stage, shards, unfinished, summaries))


def _run_pass(
    out: str,
    input_uri: str | None,
    shards: list[Shard],
    opts: RunOptions,
    executor: Executor,
    run_id: str,
    source: tuple[type[Stage], Any] | None,
    name: str,
    factory: Any,
    settings: dict[str, Any],
    names: str | None = None,
) -> str:
    """A record pass over a stage's input into `<out>/<name>` (see StageContext.run_pass); its folder. Fused after
    a source stage (ingest), the pass reads the source's kept rows of the files named `names`."""
    stage_dir = StageDir(out, name)
    if source is not None:
        spec, cfg = source
        cfg = dataclasses.replace(cfg, only_names=names) if names is not None else cfg
        settings = {**settings, "source": [spec.name, output_settings(cfg)]}
        factory = _Through(_Factory(spec, cfg), factory)
    done = stage_dir.start_run(plan_fingerprint(name, settings, shards, out=out), overwrite=opts.overwrite)
    pending = [s for s in shards if s.index not in done]
    job = ShardJob(key=f"{run_id}-{name}", factories=(factory,), dirs=(stage_dir,), run_id=run_id, keep=(True,))
    _run_pending(executor, job, shards, pending)
    stage_dir.mark_complete(dump_yaml({"stage": name, "input": input_uri, "config": settings}))
    return stage_dir.uri


def _stage_folder(uri: str | None) -> StageDir | None:
    """The stage folder at `uri` (an earlier stage's output: it has a plan), or None (`--input` elsewhere)."""
    if uri is None:
        return None
    folder = StageDir.of(uri)
    return folder if io.exists(folder.fs, folder.plan_path) else None


@dataclass(frozen=True)
class _Through:
    """Builds a record stage fed by a source stage's kept rows (license's scan read through ingest)."""

    source: Callable[[], Stage]
    stage: Callable[[], Stage]

    def __call__(self) -> "_SourcePass":
        return _SourcePass(self.source(), self.stage())


class _SourcePass(Stage):
    """A record stage reading its shards through a source stage: the source's kept rows only (what the source
    removed, and its errors, are recorded by the source itself when it runs)."""

    def __init__(self, source: Stage, stage: Stage) -> None:
        super().__init__(stage.cfg)
        self.source, self.stage, self.name = source, stage, stage.name  # pyright: ignore[reportAttributeAccessIssue]

    def read(self, shard: Shard) -> Any:
        for table in self.source.read(shard):
            yield self.source(table).kept

    def output_schema(self, shard: Shard) -> pa.Schema:
        return self.stage.schema_after(self.source.output_schema(shard))

    def __call__(self, table: pa.Table) -> Any:
        return self.stage(table)


@dataclass(frozen=True)
class _Factory:
    """Builds a stage from its config on a worker (a plain callable object, so that it pickles)."""

    build: type[Stage]
    cfg: Any

    def __call__(self) -> Stage:
        return self.build(self.cfg)


def _unfinished_line(stage: str, shards: list[Shard], unfinished: list[Shard], summaries: list[dict[str, Any]]) -> str:
    """One line for a stage whose shards did not all commit: how many, why, and that a rerun finishes them."""
    rows = sum(s.stop - s.start for s in unfinished)
    what = f"{len(unfinished):,} of {len(shards):,} shards" + (f" ({rows:,} input rows)" if rows else "")
    done = len(shards) - len(unfinished)
    kept = f" (the {done:,} finished shard{'s are' if done != 1 else ' is'} kept)" if done else ""
    causes = Counter(s["unavailable"] for s in summaries if s.get("unavailable"))
    if not causes:
        return f"{stage}: {what} did not finish; rerun the same command to do them{kept}"
    cause, _ = causes.most_common(1)[0]
    more = f" (and {len(causes) - 1} other causes)" if len(causes) > 1 else ""
    return f"{stage}: {what} not done: {cause}{more}; rerun the same command when the store is back{kept}"


def run_pipeline(
    pipeline: Pipeline, opts: RunOptions, report: Callable[[StageResult], None] | None = None
) -> list[StageResult]:
    """Run every stage of `pipeline` in fused groups (see the module docstring), on one executor: Ray starts
    once and its workers serve every stage. `report` gets each stage's result as soon as it is committed.
    The run's resolved config is saved as `OUT/_config.yaml` (each stage's, as it ran, in its folder)."""
    check_pipeline(pipeline)
    with contextlib.nullcontext() if opts.dry_run else run_lock(pipeline.out):
        return _run_pipeline(pipeline, opts, report)


def _run_pipeline(
    pipeline: Pipeline, opts: RunOptions, report: Callable[[StageResult], None] | None
) -> list[StageResult]:
    fs, root = io.filesystem(pipeline.out)
    if not opts.dry_run:
        fs.create_dir(root, recursive=True)
        names = [spec.name for spec, _ in pipeline.stages]
        io.write_bytes_atomic(fs, io.join(root, PIPELINE), json.dumps({"stages": names}).encode())
        config = dump_yaml(resolved_config(pipeline, opts)).encode()
        io.write_bytes_atomic(fs, io.join(root, RUN_CONFIG), config)
    results: list[StageResult] = []
    previous: str | None = None  # the last stage run
    executor = opts.executor()
    run_id = new_run_id()  # one for the whole `stackcurate run`: its stats and report name it
    try:
        for group in plan_groups(pipeline.stages):
            input_uri = group_input(pipeline.out, group[0][0], previous)
            for result in _run_group(group, pipeline.out, opts, input_uri, executor, pipeline.keep, run_id):
                results.append(result)
                if report is not None:
                    report(result)
            previous = group[-1][0].name
    finally:
        executor.close()
    return results

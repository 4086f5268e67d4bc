"""Run one stage, or a whole `pipelines/*.yaml`, over an output folder.

A pipeline YAML names the output folder and the stages in order, each block mapping onto that stage's
config dataclass; relative paths resolve against the YAML's folder:

    out: ../work/demo
    run: {runner: ray, workers: 2}      # optional, overridden by CLI flags
    stages:
      ingest: {bundles: [...], repos: [...]}
      language: {languages: ../filters/languages/starcoder2_smol_v1.txt}

Each stage reads the kept rows of the stage before it.
"""

import dataclasses
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from stackcurate.core import io
from stackcurate.core.config import build_config, dump_yaml, output_settings, to_dict
from stackcurate.core.errors import StackcurateError
from stackcurate.core.stage import PURGED, Shard, StageDir, TaskContext, plan_fingerprint
from stackcurate.stages import STAGE_ORDER, StageSpec, get_stage


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to run, as opposed to what to compute: none of this changes the output."""

    runner: str = "ray"  # ray | local
    ray_address: str | None = None
    workers: int | None = None  # how many run at once (default: every CPU of the Ray cluster, or of this machine)
    ray_cpus: int | None = None  # the CPUs of an embedded Ray (default: this machine's); not the number of workers
    overwrite: bool = False
    progress: bool = True
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.runner not in ("ray", "local"):
            raise StackcurateError(f"unknown runner '{self.runner}'; use ray or local")
        if self.workers is not None and self.workers < 1:
            raise StackcurateError("--workers must be at least 1")
        if self.ray_cpus is not None and self.ray_cpus < 1:
            raise StackcurateError("--ray-cpus must be at least 1")


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
    seconds: float = 0.0
    plan: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.stage}: {self.docs_in:,} in, {self.docs_out:,} kept, {self.docs_removed:,} removed, "
            f"{self.errors:,} errors; {self.shards} shards ({self.shards_run} run now) in {self.seconds:.1f} s"
        )


def default_input(out: str, stage: str) -> str:
    """The output of the latest stage before `stage` that exists in `out`."""
    earlier = STAGE_ORDER[: STAGE_ORDER.index(stage)]
    fs, root = io.filesystem(out)
    for name in reversed(earlier):
        if io.exists(fs, io.join(root, name)):
            return io.join(out, name)
    raise StackcurateError(f"no earlier stage output in {out} to read; run `stackcurate ingest --out {out}` first")


def _check_input_complete(input_uri: str) -> None:
    fs, path = io.filesystem(input_uri)
    if io.exists(fs, io.join(path, "_plan.json")) and not io.exists(fs, io.join(path, "_SUCCESS")):
        raise StackcurateError(f"{input_uri} is incomplete (an interrupted run); rerun that stage first")
    if io.exists(fs, io.join(path, PURGED)):
        raise StackcurateError(
            f"{input_uri} was purged (`stackcurate purge` dropped its text); rerun the pipeline with --overwrite"
        )


def run_stage(spec: StageSpec, cfg: Any, out: str, opts: RunOptions, *, input_uri: str | None = None) -> StageResult:
    """Plan, prepare the output folder, run the pending shards and commit the stage."""
    if spec.reads_records:
        input_uri = input_uri or default_input(out, spec.name)
        _check_input_complete(input_uri)
    started = time.perf_counter()
    if spec.scan is not None and getattr(cfg, "detections", None) is None:
        scan = spec.scan()
        run_stage(scan, cfg, out, opts, input_uri=input_uri)
        cfg = dataclasses.replace(cfg, detections=io.join(out, scan.name))
    spec.build(cfg)  # check the config and its files here, as one-line errors, before any worker starts
    shards = spec.plan(cfg, input_uri)
    stage_dir = StageDir(out, spec.name)
    if opts.dry_run:
        kinds: dict[str, int] = {}
        for s in shards:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        return StageResult(
            spec.name,
            len(shards),
            0,
            plan=[f"{n} {k} shard(s)" for k, n in kinds.items()] + [f"output: {stage_dir.uri}"],
        )
    run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    ctx = TaskContext(out, input_uri, shards, opts.overwrite, run_id, partial(_map_tasks, opts))
    if spec.prepare is not None:
        cfg = spec.prepare(cfg, ctx)
    config = to_dict(cfg)
    done = stage_dir.prepare(
        plan_fingerprint(spec.name, output_settings(cfg), shards, out=out), overwrite=opts.overwrite
    )
    pending = [s for s in shards if s.index not in done]
    summaries: list[dict[str, Any]] = []
    if pending:
        factory = partial(spec.build, cfg)
        if opts.runner == "ray":
            from stackcurate.runners import ray as runner

            summaries = runner.run(
                factory,
                pending,
                stage_dir,
                run_id,
                address=opts.ray_address,
                workers=opts.workers,
                ray_cpus=opts.ray_cpus,
                progress=opts.progress,
                resources=spec.resources(cfg) if spec.resources is not None else None,
            )
        else:
            from stackcurate.runners import local

            summaries = local.run(factory, pending, stage_dir, run_id, progress=opts.progress)
    # A shard left uncommitted (its store was down) keeps the stage unfinished: no _SUCCESS, so the next
    # run redoes exactly those shards; the finished ones are kept.
    committed = stage_dir.done_shards()
    if unfinished := [s for s in shards if s.index not in committed]:
        raise StackcurateError(_unfinished_line(spec.name, shards, unfinished, summaries or []))
    if spec.finish is not None:
        spec.finish(cfg, ctx)
    stage_dir.finish(dump_yaml({"stage": spec.name, "input": input_uri, "config": config}))
    result = StageResult(spec.name, len(shards), len(pending), seconds=time.perf_counter() - started)
    for marker in io.expand(stage_dir.fs, io.join(stage_dir.root, "_shards"), suffix=".json"):
        summary = json.loads(io.read_text(stage_dir.fs, marker))
        for key in ("docs_in", "docs_out", "docs_removed", "errors", "bytes_out"):
            setattr(result, key, getattr(result, key) + summary[key])
    return result


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


def _map_tasks(opts: RunOptions, fn: Callable[..., Any], items: list[tuple[Any, ...]], desc: str) -> list[Any]:
    if opts.runner == "ray":
        from stackcurate.runners import ray as runner

        return runner.map_tasks(
            fn, items, desc, address=opts.ray_address, workers=opts.workers, ray_cpus=opts.ray_cpus,
            progress=opts.progress,
        )  # fmt: skip
    from stackcurate.runners import local

    return local.map_tasks(fn, items, desc, progress=opts.progress)


@dataclass(frozen=True)
class Pipeline:
    out: str
    stages: list[tuple[StageSpec, Any]]
    run: dict[str, Any]


def load_pipeline(path: str | Path) -> Pipeline:
    from stackcurate.core.config import read_yaml

    path = Path(path)
    data = read_yaml(path)
    unknown = set(data) - {"out", "stages", "run"}
    if unknown:
        raise StackcurateError(f"{path}: unknown top-level key '{sorted(unknown)[0]}' (expected out, stages, run)")
    if not isinstance(data.get("stages"), dict) or not data["stages"]:
        raise StackcurateError(f"{path}: 'stages' must map stage names to their settings")
    if "out" not in data:
        raise StackcurateError(f"{path}: 'out' (the output folder) is missing")
    base = path.parent.resolve()
    out = data["out"] if "://" in str(data["out"]) else str((base / data["out"]).resolve())
    stages = []
    for name, block in data["stages"].items():
        spec = get_stage(name)
        stages.append((spec, build_config(spec.config_cls, block or {}, base_dir=base)))
    order = [STAGE_ORDER.index(spec.name) for spec, _ in stages]
    if order != sorted(order):
        raise StackcurateError(f"{path}: stages must appear in pipeline order: {', '.join(STAGE_ORDER)}")
    return Pipeline(out=out, stages=stages, run=data.get("run") or {})


def run_pipeline(pipeline: Pipeline, opts: RunOptions) -> list[StageResult]:
    results = []
    previous: str | None = None
    for spec, cfg in pipeline.stages:
        input_uri = previous if spec.reads_records else None
        result = run_stage(spec, cfg, pipeline.out, opts, input_uri=input_uri)
        results.append(result)
        previous = io.join(pipeline.out, spec.name)
    return results


def merge_run_options(base: dict[str, Any], overrides: dict[str, Any]) -> RunOptions:
    names = {f.name for f in dataclasses.fields(RunOptions)}
    merged = {k: v for k, v in {**base, **overrides}.items() if v is not None}
    unknown = set(merged) - names
    if unknown:
        raise StackcurateError(f"unknown run option '{sorted(unknown)[0]}'; options: {', '.join(sorted(names))}")
    return build_config(RunOptions, merged)

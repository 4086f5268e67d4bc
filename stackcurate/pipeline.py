"""Run one stage, or a whole `pipelines/*.yaml`, over an output folder.

A pipeline YAML names the output folder and the stages in order, each block mapping onto that stage's
config dataclass; relative paths resolve against the YAML's folder:

    out: ../work/demo
    run: {runner: ray, workers: 2}      # optional, overridden by CLI flags
    stages:
      ingest: {bundles: [...], repos: [...]}
      language: {languages: ../filters/languages/starcoder2_smol_v1.txt}

Each stage reads the kept rows of the stage before it. A run is planned before any work: every stage is built
(its config and files checked) and fed the columns it needs. It then runs in *groups*: consecutive stages
(ingest, license's classification, language, filter, decontaminate; dedup's removal and pii) run fused, in one
pass per shard, on workers that live for the whole run; each stage still writes its own removed rows, errors,
stats and markers, and only the group's last stage writes kept rows (all of them with `--keep-intermediate`, a
stage's with `keep: true` in its block).
A stage run alone reads the output of the stage before it in the run's pipeline (or in STAGE_ORDER).
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

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.config import build_config, dump_yaml, output_settings, to_dict
from stackcurate.core.errors import StackcurateError
from stackcurate.core.records import check_columns
from stackcurate.core.stage import PURGED, Shard, ShardJob, StageDir, TaskContext, plan_fingerprint
from stackcurate.runners import Executor, make_executor
from stackcurate.stages import STAGE_ORDER, StageSpec, get_stage

PIPELINE_FILE = "_pipeline.json"  # in a run folder: the stages of the last `stackcurate run`, in order
CONFIG_FILE = "_config.yaml"  # in a run folder: the resolved pipeline of the last `stackcurate run`
FUSED_FILE = "_FUSED"  # in a stage folder whose kept rows were not written: it ran fused with the next stage


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to run, as opposed to what to compute: none of this changes the final rows or shards."""

    runner: str = "ray"  # ray | local
    ray_address: str | None = None
    workers: int | None = None  # how many run at once (default: every CPU of the Ray cluster, or of this machine)
    ray_cpus: int | None = None  # the CPUs of an embedded Ray (default: this machine's); not the number of workers
    overwrite: bool = False
    progress: bool = True
    dry_run: bool = False
    keep_intermediate: bool = False  # fused stages also write their kept rows (for debugging)
    # Removed rows keep their `content` (default: null, the row kept: doc_id, blob_id and path trace the text to
    # the content store; measured: half the bytes a run writes, and no unredacted copy of what pii never sees).
    removed_content: bool = False

    def __post_init__(self) -> None:
        if self.runner not in ("ray", "local"):
            raise StackcurateError(f"unknown runner '{self.runner}'; use ray or local")
        if self.workers is not None and self.workers < 1:
            raise StackcurateError("--workers must be at least 1")
        if self.ray_cpus is not None and self.ray_cpus < 1:
            raise StackcurateError("--ray-cpus must be at least 1")

    def executor(self) -> Executor:
        return make_executor(
            self.runner, address=self.ray_address, workers=self.workers, ray_cpus=self.ray_cpus,
            progress=self.progress,
        )  # fmt: skip


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


def predecessor(out: str, stage: str) -> str | None:
    """The stage whose output `stage` reads when run alone: the one before it in the run's pipeline (the last
    `stackcurate run` into `out`), else in STAGE_ORDER."""
    fs, root = io.filesystem(out)
    if io.exists(fs, io.join(root, PIPELINE_FILE)):
        listed = json.loads(io.read_text(fs, io.join(root, PIPELINE_FILE)))["stages"]
        if stage in listed[1:]:
            return listed[listed.index(stage) - 1]
    index = STAGE_ORDER.index(stage) if stage in STAGE_ORDER else 0
    return STAGE_ORDER[index - 1] if index else None


def default_input(out: str, stage: str) -> str:
    """The output of `stage`'s predecessor in `out`; a one-line error that says what to run when it is missing."""
    before = predecessor(out, stage)
    if before is None:
        raise StackcurateError(f"{stage} reads no earlier stage; pass --input")
    fs, root = io.filesystem(out)
    if not io.exists(fs, io.join(root, before)):
        raise StackcurateError(
            f"{stage} reads the output of {before}, which is not in {out}: run `stackcurate {before} --out {out}` "
            f"first, or pass --input"
        )
    return io.join(out, before)


def _check_input_complete(input_uri: str, stage: str) -> None:
    fs, path = io.filesystem(input_uri)
    if io.exists(fs, io.join(path, "_plan.json")) and not io.exists(fs, io.join(path, "_SUCCESS")):
        raise StackcurateError(f"{input_uri} is incomplete (an interrupted run); rerun that stage first")
    if io.exists(fs, io.join(path, PURGED)):
        raise StackcurateError(
            f"{input_uri} was purged (`stackcurate purge` dropped its text); rerun the pipeline with --overwrite"
        )
    if io.exists(fs, io.join(path, FUSED_FILE)):
        raise StackcurateError(
            f"{stage} cannot read {input_uri}: that stage ran fused in `stackcurate run` and did not write its kept "
            "rows; rerun the pipeline with --keep-intermediate, or pass --input"
        )


def run_stage(
    spec: StageSpec,
    cfg: Any,
    out: str,
    opts: RunOptions,
    *,
    input_uri: str | None = None,
    executor: Executor | None = None,
) -> StageResult:
    """Plan, prepare the output folder, run the pending shards and commit one stage."""
    spec.build(cfg)  # check the config and its files here, as one-line errors, before any worker starts
    if spec.reads_records:
        input_uri = input_uri or default_input(out, spec.name)
    own = executor is None
    executor = executor or opts.executor()
    try:
        return _run_group([(spec, cfg)], out, opts, input_uri, executor)[0]
    finally:
        if own:
            executor.close()


def _run_group(
    members: list[tuple[StageSpec, Any]],
    out: str,
    opts: RunOptions,
    input_uri: str | None,
    executor: Executor,
    keep_stages: frozenset[str] = frozenset(),
) -> list[StageResult]:
    """Run consecutive stages as one pass per shard (one stage alone is a group of one): plan the first stage's
    shards, prepare every stage (its global work, e.g. dedup's clustering), run the shards no stage has
    finished, and commit each stage."""
    if input_uri is not None:
        _check_input_complete(input_uri, members[0][0].name)
    started = time.perf_counter()
    first, first_cfg = members[0]
    shards = first.plan(first_cfg, input_uri)
    dirs = [StageDir(out, spec.name) for spec, _ in members]
    keep = _keep(members, opts, keep_stages)
    requests = _fingerprints(members, [cfg for _, cfg in members], keep, shards, out)
    if opts.dry_run:
        kinds: dict[str, int] = {}
        for s in shards:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        plan = [f"{n} {k} shard(s)" for k, n in kinds.items()] + [f"output: {d.uri}" for d in dirs]
        plan.append(_status(dirs, requests, shards, opts))
        return [StageResult(spec.name, len(shards), 0, plan=plan) for spec, _ in members]
    executor.check_shared({"--out": out, **({"--input": input_uri} if input_uri is not None else {})})
    executor.take_busy()  # from here on, this group's
    executor.take_workers()
    run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    source = None if first.reads_records else members[0]  # a pass of a fused stage reads through ingest
    ctx = TaskContext(out, input_uri, shards, opts.overwrite, run_id, executor.map,
                      partial(_run_pass, out, input_uri, shards, opts, executor, run_id, source),
                      progress=opts.progress)  # fmt: skip
    cfgs = []
    for spec, cfg in members:
        cfgs.append(spec.prepare(cfg, ctx) if spec.prepare is not None else cfg)
    done: set[int] | None = None
    fingerprints = _fingerprints(members, cfgs, keep, shards, out)
    for stage_dir, fingerprint, request in zip(dirs, fingerprints, requests, strict=True):
        finished = stage_dir.prepare(fingerprint, overwrite=opts.overwrite, request=request)
        done = finished if done is None else done & finished
    assert done is not None
    pending = [s for s in shards if s.index not in done]
    job = ShardJob(
        key=f"{run_id}-{'+'.join(spec.name for spec, _ in members)}",
        factories=tuple(_Factory(spec.build, cfg) for (spec, _), cfg in zip(members, cfgs, strict=True)),
        dirs=tuple(dirs),
        run_id=run_id,
        keep=keep,
        removed_content=opts.removed_content,
    )
    gpus = max((spec.resources(cfg).get("num_gpus", 0.0) for (spec, _), cfg in zip(members, cfgs, strict=True)
                if spec.resources is not None), default=0.0)  # fmt: skip
    _run_pending(executor, job, shards, pending, gpus)
    results = []
    for i, ((spec, _), cfg, stage_dir) in enumerate(zip(members, cfgs, dirs, strict=True)):
        if spec.finish is not None:
            spec.finish(cfg, ctx)
        read_from = input_uri if i == 0 else dirs[i - 1].uri
        fused = io.join(stage_dir.root, FUSED_FILE)
        if keep[i]:
            if io.exists(stage_dir.fs, fused):
                stage_dir.fs.delete_file(fused)
        else:
            io.write_bytes_atomic(stage_dir.fs, fused, members[i + 1][0].name.encode())
        stage_dir.finish(dump_yaml({"stage": spec.name, "input": read_from, "config": to_dict(cfg)}))
        result = StageResult(spec.name, len(shards), len(pending), seconds=time.perf_counter() - started)
        result.fused_after = members[i - 1][0].name if i else None
        for marker in io.expand(stage_dir.fs, io.join(stage_dir.root, "_shards"), suffix=".json"):
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


def _keep(members: list[tuple[StageSpec, Any]], opts: RunOptions, keep_stages: frozenset[str]) -> tuple[bool, ...]:
    """Which stages of a group write their kept rows: the last, and the others with `keep` or
    --keep-intermediate."""
    last = len(members) - 1
    return tuple(
        opts.keep_intermediate or i == last or spec.name in keep_stages for i, (spec, _) in enumerate(members)
    )


def _fingerprints(
    members: list[tuple[StageSpec, Any]], cfgs: list[Any], keep: tuple[bool, ...], shards: list[Shard], out: str
) -> list[str]:
    """The plan fingerprint of each stage of a group run with `cfgs`: the configs as prepared give what the
    output depends on; as given (before preparation), what was asked for (the request a dry run compares)."""
    fingerprints = []
    for i, ((spec, _), cfg) in enumerate(zip(members, cfgs, strict=True)):
        settings: dict[str, Any] = output_settings(cfg)
        if i:  # a fused stage's output also depends on every stage before it in the group
            before = zip(members[:i], cfgs[:i], strict=True)
            settings = {**settings, "fused_after": [[s.name, output_settings(c)] for (s, _), c in before]}
            settings["kept_rows"] = keep[i]
        fingerprints.append(plan_fingerprint(spec.name, settings, shards, out=out))
    return fingerprints


def _status(dirs: list[StageDir], requests: list[str], shards: list[Shard], opts: RunOptions) -> str:
    """What a run of a group would do with the output already there (the dry run's answer): reuse it, resume
    it, stop on it (another config or input), replace it (--overwrite) or run."""
    present = [d for d in dirs if io.exists(d.fs, d.root)]
    if opts.overwrite:
        return "would run, replacing the output there (--overwrite)" if present else "would run"
    if not present:
        return "would run"
    if any(d.request() is not None and d.request() != r for d, r in zip(dirs, requests, strict=True)):
        return "holds output of a different input or config: a run would stop here; pass --overwrite to replace it"
    if len(present) == len(dirs) and all(d.is_complete() for d in dirs):
        if any(d.request() is None for d in dirs):  # written before requests were recorded
            return "complete, would be reused if its input and config are unchanged (a run checks)"
        return "complete, would be reused"
    done = set.intersection(*(d.done_shards() for d in dirs)) if len(present) == len(dirs) else set()
    finished = len(done & {s.index for s in shards})
    return f"would resume: {finished} of {len(shards)} shards done" if finished else "would run"


def _run_pending(
    executor: Executor, job: ShardJob, shards: list[Shard], pending: list[Shard], num_gpus: float = 0.0
) -> None:
    """Run the pending shards of `job`; a one-line error unless every stage of it then has all its shards.

    A shard left uncommitted (its store was down) keeps the stage unfinished: no _SUCCESS, so the next run
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
    source: tuple[StageSpec, Any] | None,
    name: str,
    factory: Any,
    settings: dict[str, Any],
    names: str | None = None,
) -> str:
    """A record pass over a stage's input into `<out>/<name>` (see TaskContext.run_pass); its folder. Fused after
    a source stage (ingest), the pass reads the source's kept rows of the files named `names`."""
    stage_dir = StageDir(out, name)
    if source is not None:
        spec, cfg = source
        cfg = dataclasses.replace(cfg, only_names=names) if names is not None else cfg
        settings = {**settings, "source": [spec.name, output_settings(cfg)]}
        factory = _Through(_Factory(spec.build, cfg), factory)
    done = stage_dir.prepare(plan_fingerprint(name, settings, shards, out=out), overwrite=opts.overwrite)
    pending = [s for s in shards if s.index not in done]
    job = ShardJob(key=f"{run_id}-{name}", factories=(factory,), dirs=(stage_dir,), run_id=run_id, keep=(True,))
    _run_pending(executor, job, shards, pending)
    stage_dir.finish(dump_yaml({"stage": name, "input": input_uri, "config": settings}))
    return stage_dir.uri


@dataclass(frozen=True)
class _Through:
    """Builds a record stage fed by a source stage's kept rows (license's scan read through ingest)."""

    source: Any
    stage: Any

    def __call__(self) -> "_SourcePass":
        return _SourcePass(self.source(), self.stage())


class _SourcePass:
    """A record stage reading its shards through a source stage: the source's kept rows only (what the source
    removed, and its errors, are recorded by the source itself when it runs)."""

    def __init__(self, source: Any, stage: Any) -> None:
        self.source, self.stage, self.name = source, stage, stage.name

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

    build: Any
    cfg: Any

    def __call__(self) -> Any:
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


@dataclass(frozen=True)
class Pipeline:
    out: str
    stages: list[tuple[StageSpec, Any]]
    run: dict[str, Any]
    keep: frozenset[str] = frozenset()  # stages whose kept rows are written even when they run fused (`keep: true`)


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
    keep = set()
    for name, block in data["stages"].items():
        spec = get_stage(name)
        block = dict(block or {})
        # `keep: true` writes the stage's kept rows; any other value is the config's own `keep` (license's types)
        if isinstance(block.get("keep"), bool) and block.pop("keep"):
            keep.add(name)
        stages.append((spec, build_config(spec.config_cls, block, base_dir=base)))
    order = [STAGE_ORDER.index(spec.name) for spec, _ in stages]
    if order != sorted(order):
        raise StackcurateError(f"{path}: stages must appear in pipeline order: {', '.join(STAGE_ORDER)}")
    return Pipeline(out=out, stages=stages, run=data.get("run") or {}, keep=frozenset(keep))


def plan_groups(stages: list[tuple[StageSpec, Any]]) -> list[list[tuple[StageSpec, Any]]]:
    """The stages in groups that run fused: a stage that may run fused (`fuse="any"`) joins the group before
    it, unless that group ends with a stage that is never fused."""
    groups: list[list[tuple[StageSpec, Any]]] = []
    for spec, cfg in stages:
        if groups and spec.fuse == "any" and groups[-1][-1][0].fuse != "no":
            groups[-1].append((spec, cfg))
        else:
            groups.append([(spec, cfg)])
    return groups


def check_pipeline(pipeline: Pipeline) -> None:
    """Build every stage (its config and files are checked) and check that each gets the columns it needs,
    before any work: one line for the first problem."""
    schema: pa.Schema | None = None
    source = ""
    for spec, cfg in pipeline.stages:
        stage = spec.build(cfg)
        if schema is not None:
            check_columns(stage, schema, source)
        after = getattr(stage, "schema_after", None)
        schema = after(schema) if after is not None and (schema is not None or not spec.reads_records) else None
        source = spec.name


def resolved_config(pipeline: Pipeline, opts: RunOptions) -> dict[str, Any]:
    """The pipeline as it runs, in the pipeline YAML's form (paths resolved, every setting, the run options but
    --overwrite and --dry-run): what `OUT/_config.yaml` holds, and `stackcurate run` takes back."""
    run = {k: v for k, v in dataclasses.asdict(opts).items() if k not in ("overwrite", "dry_run")}
    stages = {}
    for spec, cfg in pipeline.stages:
        stages[spec.name] = to_dict(cfg)
        if spec.name in pipeline.keep:  # (license's own `keep` takes the key: its `keep: true` is not kept here)
            stages[spec.name].setdefault("keep", True)
    return {"out": pipeline.out, "run": run, "stages": stages}


def _group_input(out: str, first: StageSpec, previous: str | None) -> str | None:
    """The input of a group whose first stage is `first`, after the group that ended with `previous`."""
    previous_uri = io.join(out, previous) if previous else None
    if first.reads_records:
        return previous_uri or default_input(out, first.name)
    # a source stage reads the stage before it only if it follows that one (ingest after graph)
    return previous_uri if first.follows is not None and first.follows == previous else None


def _success(uri: str) -> tuple[Any, str]:
    fs, path = io.filesystem(uri)
    return fs, io.join(path, "_SUCCESS")


def dry_run(pipeline: Pipeline, opts: RunOptions) -> list[str]:
    """Check every stage (its settings, files and columns) and say, per group, what a run would do: a line
    `graph: complete, would be reused`, `dedup + pii (one pass per shard): would run`, ... Nothing is written."""
    check_pipeline(pipeline)
    lines = []
    previous: str | None = None
    for group in plan_groups(pipeline.stages):
        names = " + ".join(spec.name for spec, _ in group) + (" (one pass per shard)" if len(group) > 1 else "")
        input_uri = _group_input(pipeline.out, group[0][0], previous)
        dirs = [StageDir(pipeline.out, spec.name) for spec, _ in group]
        if not any(io.exists(d.fs, d.root) for d in dirs):
            status = "would run"
        elif input_uri is not None and not io.exists(*_success(input_uri)):
            status = f"would run, after {previous}" if previous else f"would run, once {input_uri} is complete"
        else:
            first, first_cfg = group[0]
            shards = first.plan(first_cfg, input_uri)
            requests = _fingerprints(
                group, [c for _, c in group], _keep(group, opts, pipeline.keep), shards, pipeline.out
            )
            status = _status(dirs, requests, shards, opts)
        lines.append(f"{names}: {status}")
        previous = group[-1][0].name
    return lines


def run_pipeline(
    pipeline: Pipeline, opts: RunOptions, report: Callable[[StageResult], None] | None = None
) -> list[StageResult]:
    """Run every stage of `pipeline` in fused groups (see the module docstring), on one executor: Ray starts
    once and its workers serve every stage. `report` gets each stage's result as soon as it is committed.
    The run's resolved config is saved as `OUT/_config.yaml` (each stage's, as it ran, in its folder)."""
    check_pipeline(pipeline)
    fs, root = io.filesystem(pipeline.out)
    if not opts.dry_run:
        fs.create_dir(root, recursive=True)
        names = [spec.name for spec, _ in pipeline.stages]
        io.write_bytes_atomic(fs, io.join(root, PIPELINE_FILE), json.dumps({"stages": names}).encode())
        config = dump_yaml(resolved_config(pipeline, opts)).encode()
        io.write_bytes_atomic(fs, io.join(root, CONFIG_FILE), config)
    results: list[StageResult] = []
    previous: str | None = None  # the last stage run
    executor = opts.executor()
    try:
        for group in plan_groups(pipeline.stages):
            input_uri = _group_input(pipeline.out, group[0][0], previous)
            for result in _run_group(group, pipeline.out, opts, input_uri, executor, pipeline.keep):
                results.append(result)
                if report is not None:
                    report(result)
            previous = group[-1][0].name
    finally:
        executor.close()
    return results


def merge_run_options(base: dict[str, Any], overrides: dict[str, Any]) -> RunOptions:
    names = {f.name for f in dataclasses.fields(RunOptions)}
    merged = {k: v for k, v in {**base, **overrides}.items() if v is not None}
    unknown = set(merged) - names
    if unknown:
        raise StackcurateError(f"unknown run option '{sorted(unknown)[0]}'; options: {', '.join(sorted(names))}")
    return build_config(RunOptions, merged)

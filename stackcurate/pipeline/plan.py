"""A pipeline planned before any work: its stages checked, grouped to run fused, and each group's input.

Every stage is built (its config and files checked) and fed the columns it needs. Consecutive stages that may
run fused (ingest, license's classification, language, filter, decontaminate; dedup's removal and pii) form a
group, run in one pass per shard. A stage run alone reads the output of the stage before it in the run's
pipeline (or in STAGE_ORDER).
"""

from typing import Any

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.config import output_settings
from stackcurate.core.contract import Shard, Stage
from stackcurate.core.errors import StackcurateError
from stackcurate.core.fingerprint import described_plan
from stackcurate.core.layout import FUSED, PLAN, PURGED, SUCCESS, StageDir, run_stages
from stackcurate.core.records import check_columns
from stackcurate.pipeline.spec import Pipeline, RunOptions
from stackcurate.stages import STAGE_ORDER


def predecessor(out: str, stage: str) -> str | None:
    """The stage whose output `stage` reads when run alone: the one before it in the run's pipeline (the last
    `stackcurate run` into `out`), else in STAGE_ORDER."""
    listed = run_stages(out) or []
    if stage in listed[1:]:
        return listed[listed.index(stage) - 1]
    index = STAGE_ORDER.index(stage) if stage in STAGE_ORDER else 0
    return STAGE_ORDER[index - 1] if index else None


def default_input(out: str, stage: str) -> str:
    """The output of `stage`'s predecessor in `out`; a one-line error that says what to run when it is missing."""
    before = predecessor(out, stage)
    if before is None:
        raise StackcurateError(f"{stage} reads no earlier stage; pass --input")
    if not StageDir(out, before).exists():
        raise StackcurateError(
            f"{stage} reads the output of {before}, which is not in {out}: run `stackcurate {before} --out {out}` "
            f"first, or pass --input"
        )
    return io.join(out, before)


def check_input_complete(input_uri: str, stage: str) -> None:
    """A one-line error where `input_uri` is a stage's folder that cannot be read (yet): unfinished, purged, or
    never written (the stage ran fused). Any other folder of Parquet files is the user's (`--input`)."""
    source = StageDir.of(input_uri)
    fs = source.fs
    if io.exists(fs, source.marker(PLAN)) and not io.exists(fs, source.marker(SUCCESS)):
        raise StackcurateError(f"{input_uri} is incomplete (an interrupted run); rerun that stage first")
    if io.exists(fs, source.marker(PURGED)):
        raise StackcurateError(
            f"{input_uri} was purged (`stackcurate purge` dropped its text); rerun the pipeline with --overwrite"
        )
    if io.exists(fs, source.marker(FUSED)):
        raise StackcurateError(
            f"{stage} cannot read {input_uri}: that stage ran fused in `stackcurate run` and did not write its kept "
            "rows; rerun the pipeline with --keep-intermediate, or pass --input"
        )


def plan_groups(stages: list[tuple[type[Stage], Any]]) -> list[list[tuple[type[Stage], Any]]]:
    """The stages in groups that run fused: a stage that may run fused (`fuse="any"`) joins the group before
    it, unless that group ends with a stage that is never fused."""
    groups: list[list[tuple[type[Stage], Any]]] = []
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
        stage = spec(cfg)
        if schema is not None:
            check_columns(stage, schema, source)
        schema = stage.schema_after(schema) if schema is not None or not spec.reads_records else None
        source = spec.name


def group_input(out: str, first: type[Stage], previous: str | None) -> str | None:
    """The input of a group whose first stage is `first`, after the group that ended with `previous`."""
    previous_uri = io.join(out, previous) if previous else None
    if first.reads_records:
        return previous_uri or default_input(out, first.name)
    # a source stage reads the stage before it only if it follows that one (ingest after graph)
    return previous_uri if first.follows is not None and first.follows == previous else None


def _success(uri: str) -> tuple[Any, str]:
    source = StageDir.of(uri)
    return source.fs, source.success_path


def kept_rows(
    members: list[tuple[type[Stage], Any]], opts: RunOptions, keep_stages: frozenset[str]
) -> tuple[bool, ...]:
    """Which stages of a group write their kept rows: the last, and the others with `keep` or
    --keep-intermediate."""
    last = len(members) - 1
    return tuple(
        opts.keep_intermediate or i == last or spec.name in keep_stages for i, (spec, _) in enumerate(members)
    )


def group_plans(
    members: list[tuple[type[Stage], Any]], cfgs: list[Any], keep: tuple[bool, ...], shards: list[Shard], out: str
) -> list[tuple[str, dict[str, Any]]]:
    """The plan fingerprint of each stage of a group run with `cfgs`, with its summary (fingerprint.described_plan):
    the configs as prepared give what the output depends on; as given (before preparation), what was asked for
    (the request a dry run compares). A fused stage's output also depends on every stage before it in the group,
    and on whether it writes its kept rows."""
    memo: dict[str, str] = {}  # the stages share their shards: each input file is hashed once
    plans = []
    for i, ((spec, _), cfg) in enumerate(zip(members, cfgs, strict=True)):
        settings: dict[str, Any] = output_settings(cfg)
        if i:
            before = zip(members[:i], cfgs[:i], strict=True)
            settings = {**settings, "fused_after": [[s.name, output_settings(c)] for (s, _), c in before]}
            settings["kept_rows"] = keep[i]
        plans.append(described_plan(spec.name, settings, shards, out=out, memo=memo))
    return plans


def group_status(dirs: list[StageDir], requests: list[str], shards: list[Shard], opts: RunOptions) -> str:
    """What a run of a group would do with the output already there (the dry run's answer): reuse it, resume
    it, stop on it (another config or input), replace it (--overwrite) or run."""
    present = [d for d in dirs if d.exists()]
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


def dry_run(pipeline: Pipeline, opts: RunOptions) -> list[str]:
    """Check every stage (its settings, files and columns) and say, per group, what a run would do: a line
    `graph: complete, would be reused`, `dedup + pii (one pass per shard): would run`, ... Nothing is written."""
    check_pipeline(pipeline)
    lines = []
    previous: str | None = None
    for group in plan_groups(pipeline.stages):
        names = " + ".join(spec.name for spec, _ in group) + (" (one pass per shard)" if len(group) > 1 else "")
        input_uri = group_input(pipeline.out, group[0][0], previous)
        dirs = [StageDir(pipeline.out, spec.name, extra=spec.folders) for spec, _ in group]
        if not any(d.exists() for d in dirs):
            status = "would run"
        elif input_uri is not None and not io.exists(*_success(input_uri)):
            status = f"would run, after {previous}" if previous else f"would run, once {input_uri} is complete"
        else:
            first, first_cfg = group[0]
            shards = first.plan(first_cfg, input_uri)
            plans = group_plans(
                group, [c for _, c in group], kept_rows(group, opts, pipeline.keep), shards, pipeline.out
            )
            requests = [fingerprint for fingerprint, _ in plans]
            status = group_status(dirs, requests, shards, opts)
        lines.append(f"{names}: {status}")
        previous = group[-1][0].name
    return lines

"""The stage registry: each stage's name, config, constructor and planner, in pipeline order."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stackcurate.core import io
from stackcurate.core.errors import StackcurateError
from stackcurate.core.stage import Shard, Stage, TaskContext, plan_parquet


@dataclass(frozen=True)
class StageSpec:
    """How the CLI and the pipeline runner find a stage.

    Attributes:
        name: CLI subcommand, YAML key and output folder name.
        config_cls: The stage's frozen config dataclass.
        build: Makes the stage from its config (runs once per worker).
        plan: Lists the shards; gets the config and, for stages that read records, the input folder.
        reads_records: Whether the input is an earlier stage's output (all stages but ingest).
    """

    name: str
    config_cls: type
    build: Callable[[Any], Stage]
    plan: Callable[[Any, str | None], list[Shard]]
    reads_records: bool = True
    # Whether the stage may run fused with its neighbours, in one pass per shard (pipeline.plan_groups):
    # `any` (a record stage whose preparation reads nothing, or the group's input through the group's head:
    # license's scan), `head` (it may only start a group: ingest, a source; dedup, whose clustering reads
    # its input's rows), `no` (never).
    fuse: str = "no"
    # A stage with global work before its shards (dedup: signatures, buckets, clusters) does it here; it
    # returns the config the shards run with (naming what the preparation wrote).
    prepare: Callable[[Any, TaskContext], Any] | None = None
    # Ray resources each worker of the stage needs beyond one CPU (pii: `{"num_gpus": ...}` for the model).
    resources: Callable[[Any], dict[str, float]] | None = None
    # Global work after every shard is done, before the stage is marked complete (tokenize: the Megatron
    # shards, from the tokenized rows; format: dropping its grouped copy of the input).
    finish: Callable[[Any, TaskContext], None] | None = None
    # A source stage that, right after this stage in a pipeline, takes its output as input when given none of
    # its own (ingest after graph: graph's metadata); `plan` then gets that folder.
    follows: str | None = None


def plan_records(cfg: Any, input_uri: str | None) -> list[Shard]:
    """One shard per Parquet file of the input folder (an earlier stage's kept rows)."""
    assert input_uri is not None
    fs, path = io.filesystem(input_uri)
    files = io.expand(fs, io.join(path, "*.parquet")) if "*" not in path else io.expand(fs, path)
    if not files:
        raise StackcurateError(f"no Parquet files in {input_uri}; run the earlier stage first or pass --input")
    return plan_parquet(files, rows_per_shard=2**62)


def _ingest() -> StageSpec:
    from stackcurate.stages import ingest

    return StageSpec(
        "ingest",
        ingest.IngestConfig,
        ingest.IngestStage,
        ingest.plan,
        reads_records=False,
        fuse="head",
        follows="graph",
    )


def _graph() -> StageSpec:
    from stackcurate.stages import graph

    return StageSpec(
        "graph",
        graph.GraphConfig,
        graph.GraphStage,
        lambda cfg, _: graph.plan(cfg),
        reads_records=False,
        prepare=graph.run_walk,
        finish=graph.drop_walk,
    )


def _language() -> StageSpec:
    from stackcurate.stages import language

    return StageSpec("language", language.LanguageConfig, language.LanguageStage, plan_records, fuse="any")


def _filter() -> StageSpec:
    from stackcurate.stages import filter as filter_stage

    return StageSpec("filter", filter_stage.FilterConfig, filter_stage.FilterStage, plan_records, fuse="any")


def _license() -> StageSpec:
    from stackcurate.stages import license

    return StageSpec(
        "license", license.LicenseConfig, license.LicenseStage, plan_records, prepare=license.scan, fuse="any"
    )


def _decontaminate() -> StageSpec:
    from stackcurate.stages import decontaminate

    return StageSpec(
        "decontaminate",
        decontaminate.DecontaminateConfig,
        decontaminate.DecontaminateStage,
        plan_records,
        fuse="any",
    )


def _dedup() -> StageSpec:
    from stackcurate.stages import dedup

    return StageSpec("dedup", dedup.DedupConfig, dedup.DedupStage, plan_records, prepare=dedup.cluster, fuse="head")


def _pii() -> StageSpec:
    from stackcurate.stages import pii

    return StageSpec(
        "pii", pii.PiiConfig, pii.PiiStage, plan_records, prepare=pii.prepare, resources=pii.resources, fuse="any"
    )


def _format() -> StageSpec:
    from stackcurate.stages import format as format_stage

    return StageSpec(
        "format",
        format_stage.FormatConfig,
        format_stage.FormatStage,
        plan_records,
        prepare=format_stage.group,
        finish=format_stage.drop_groups,
    )


def _tokenize() -> StageSpec:
    from stackcurate.stages import tokenize

    return StageSpec(
        "tokenize",
        tokenize.TokenizeConfig,
        tokenize.TokenizeStage,
        plan_records,
        prepare=tokenize.prepare,
        finish=tokenize.write_shards,
    )


_SPECS = {
    "graph": _graph,
    "ingest": _ingest,
    "license": _license,
    "language": _language,
    "filter": _filter,
    "decontaminate": _decontaminate,
    "dedup": _dedup,
    "pii": _pii,
    "format": _format,
    "tokenize": _tokenize,
}
STAGE_ORDER = tuple(_SPECS)


def get_stage(name: str) -> StageSpec:
    if name not in _SPECS:
        raise StackcurateError(f"unknown stage '{name}'; stages: {', '.join(STAGE_ORDER)}")
    return _SPECS[name]()

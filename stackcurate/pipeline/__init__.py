"""Pipelines: a YAML's stages (spec), planned into fused groups (plan), run on one executor (run)."""

from stackcurate.pipeline.plan import check_pipeline, default_input, dry_run, plan_groups, predecessor
from stackcurate.pipeline.run import StageResult, run_pipeline, run_stage
from stackcurate.pipeline.spec import Pipeline, RunOptions, load_pipeline, merge_run_options, resolved_config

__all__ = [
    "Pipeline",
    "RunOptions",
    "StageResult",
    "check_pipeline",
    "default_input",
    "dry_run",
    "load_pipeline",
    "merge_run_options",
    "plan_groups",
    "predecessor",
    "resolved_config",
    "run_pipeline",
    "run_stage",
]

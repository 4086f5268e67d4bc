"""A pipeline as a YAML file names it, and the options of how to run it (which never change its output).

A pipeline YAML names the output folder and the stages in order, each block mapping onto that stage's config
dataclass; relative paths resolve against the YAML's folder. A stage from outside the package is named
`module:Class`:

    out: ../work/demo
    run: {runner: ray, workers: 2}      # optional, overridden by CLI flags
    stages:
      ingest: {bundles: [...], repos: [...]}
      language: {languages: ../filters/languages/starcoder2_smol_v1.txt}
      mypackage.stages:RepetitionStage: {max_share: 0.5}
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackcurate.core.config import build_config, to_dict
from stackcurate.core.contract import Stage
from stackcurate.core.errors import StackcurateError
from stackcurate.runners import Executor, make_executor
from stackcurate.stages import STAGE_ORDER, get_stage, stage_key


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to run, as opposed to what to compute: none of this changes the final rows or shards."""

    runner: str = "auto"  # auto (this process or Ray, by the work: runners/auto.py) | ray | local
    ray_address: str | None = None
    workers: int | None = None  # how many run at once (default: every CPU of the Ray cluster, or of this machine)
    ray_cpus: int | None = None  # the CPUs of an embedded Ray (default: this machine's); not the number of workers
    overwrite: bool = False
    progress: bool = True
    dry_run: bool = False
    keep_intermediate: bool = False  # fused stages also write their kept rows (for debugging)
    # Removed rows keep their `content` (default: null, the row kept: doc_id, blob_id and path trace the text to
    # the content store; fewer bytes written, as `benchmarks/pipeline_e2e.py --extra-args=--removed-content`
    # measures, and no unredacted copy of what pii never sees).
    removed_content: bool = False

    def __post_init__(self) -> None:
        if self.runner not in ("auto", "ray", "local"):
            raise StackcurateError(f"unknown runner '{self.runner}'; use auto, ray or local")
        if self.workers is not None and self.workers < 1:
            raise StackcurateError("--workers must be at least 1")
        if self.ray_cpus is not None and self.ray_cpus < 1:
            raise StackcurateError("--ray-cpus must be at least 1")

    def executor(self) -> Executor:
        return make_executor(
            self.runner, address=self.ray_address, workers=self.workers, ray_cpus=self.ray_cpus,
            progress=self.progress,
        )  # fmt: skip


@dataclass(frozen=True)
class Pipeline:
    out: str
    stages: list[tuple[type[Stage], Any]]
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
    for key, block in data["stages"].items():
        spec = get_stage(key)  # a built-in stage's name, or `module:Class`
        block = dict(block or {})
        # `keep: true` writes the stage's kept rows; any other value is the config's own `keep` (license's types)
        if isinstance(block.get("keep"), bool) and block.pop("keep"):
            keep.add(spec.name)
        stages.append((spec, build_config(spec.config, block, base_dir=base)))
    names = [spec.name for spec, _ in stages]
    if repeated := sorted({n for n in names if names.count(n) > 1}):
        raise StackcurateError(
            f"{path}: two stages are named '{repeated[0]}'; each stage writes the folder of its name"
        )
    order = [STAGE_ORDER.index(name) for name in names if name in STAGE_ORDER]  # a stage of one's own goes anywhere
    if order != sorted(order):
        raise StackcurateError(f"{path}: stages must appear in pipeline order: {', '.join(STAGE_ORDER)}")
    return Pipeline(out=out, stages=stages, run=data.get("run") or {}, keep=frozenset(keep))


def resolved_config(pipeline: Pipeline, opts: RunOptions) -> dict[str, Any]:
    """The pipeline as it runs, in the pipeline YAML's form (paths resolved, every setting, the run options but
    --overwrite and --dry-run): what `OUT/_config.yaml` holds, and `stackcurate run` takes back."""
    run = {k: v for k, v in dataclasses.asdict(opts).items() if k not in ("overwrite", "dry_run")}
    stages = {}
    for spec, cfg in pipeline.stages:
        key = stage_key(spec)
        stages[key] = to_dict(cfg)
        if spec.name in pipeline.keep:  # (license's own `keep` takes the key: its `keep: true` is not kept here)
            stages[key].setdefault("keep", True)
    return {"out": pipeline.out, "run": run, "stages": stages}


def merge_run_options(base: dict[str, Any], overrides: dict[str, Any]) -> RunOptions:
    names = {f.name for f in dataclasses.fields(RunOptions)}
    merged = {k: v for k, v in {**base, **overrides}.items() if v is not None}
    unknown = set(merged) - names
    if unknown:
        raise StackcurateError(f"unknown run option '{sorted(unknown)[0]}'; options: {', '.join(sorted(names))}")
    return build_config(RunOptions, merged)

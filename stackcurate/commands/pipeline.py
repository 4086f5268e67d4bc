"""The commands that run stages: one per stage, `run` for a whole pipeline, and `sample` for its input."""

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from stackcurate.commands.parsing import run_flags, run_options
from stackcurate.core.config import add_flags, build_config, dump_yaml, flag_values, read_yaml, resolve_paths, to_dict
from stackcurate.stages import STAGE_ORDER, get_stage

# written for users: the modules' docstrings are for developers
RUN = """\
Run every stage of a pipeline YAML (pipelines/*.yaml), consecutive record stages fused in one pass per shard.
A rerun resumes: finished stages are reused, unfinished shards redone. --dry-run says, per group of stages,
whether a run would reuse, resume or run it. The resolved config is saved as OUT/_config.yaml, a pipeline YAML
that `stackcurate run` takes back.

examples:
  stackcurate run pipelines/demo.yaml
  stackcurate run pipelines/demo.yaml --dry-run
  stackcurate run work/demo/_config.yaml --out work/demo2 --runner local
"""


def add_parsers(sub: Any) -> None:
    """A command per stage (its help is its class's docstring), then `run`."""
    for name in STAGE_ORDER:
        spec = get_stage(name)
        p = sub.add_parser(name, help=spec.summary(), description=spec.description())
        p.add_argument("--out", required=True, help="output folder of the run (local or object-store URI)")
        p.add_argument("--config", help="YAML file with this stage's settings (flags override it)")
        if spec.reads_records:
            p.add_argument("--input", help="folder of record Parquet (default: the previous stage in --out)")
        run_flags(p)
        add_flags(p, spec.config, f"{name} settings (also keys of --config, and of its block in a pipeline YAML)")
        p.set_defaults(handler=_cmd_stage, stage=name)

    p = sub.add_parser(
        "run",
        help="run every stage of a pipeline YAML",
        description=RUN,
    )
    p.add_argument("pipeline", help="pipelines/<name>.yaml")
    p.add_argument("--out", help="override the pipeline's output folder")
    run_flags(p)
    p.set_defaults(handler=_cmd_run)


def add_sample_parser(sub: Any) -> None:
    p = sub.add_parser("sample", help="build the embedded default input from code installed on this machine")
    p.add_argument("out", help="folder to write (replaced if it exists)")
    p.add_argument("--max-mb", type=float, default=20.0, help="total size of the sample, MB")
    p.add_argument("--max-files", type=int, default=4000, help="number of files in the sample")
    p.set_defaults(handler=_cmd_sample)


def _cmd_stage(args: argparse.Namespace) -> None:
    from stackcurate.pipeline import run_stage

    spec = get_stage(args.stage)
    # Paths resolve here, on the driver: a --config file's against its folder, flags' against the working
    # folder (a worker on another node runs elsewhere).
    values = resolve_paths(spec.config, read_yaml(args.config), Path(args.config).parent) if args.config else {}
    cfg = build_config(spec.config, {**values, **flag_values(args, spec.config)}, base_dir=Path.cwd())
    opts = run_options(args)
    if args.verbose or opts.dry_run:  # saved as _config.yaml in the stage's folder either way
        print(dump_yaml({spec.name: to_dict(cfg)}), end="", file=sys.stderr)
    result = run_stage(spec, cfg, args.out, opts, input_uri=getattr(args, "input", None))
    print("\n".join(result.plan) if opts.dry_run else result.line())


def _cmd_run(args: argparse.Namespace) -> None:
    from stackcurate.pipeline import dry_run, load_pipeline, resolved_config, run_pipeline

    pipeline = load_pipeline(args.pipeline)
    if args.out:
        pipeline = dataclasses.replace(pipeline, out=args.out)  # its stages, run options and `keep` stay
    opts = run_options(args, pipeline.run)
    if args.verbose or opts.dry_run:  # a run saves it as OUT/_config.yaml either way
        print(dump_yaml(resolved_config(pipeline, opts)), end="", file=sys.stderr)
    if opts.dry_run:  # every stage is checked; each group (one pass per shard) says what a run would do
        print("\n".join(dry_run(pipeline, opts)))
        return
    run_pipeline(pipeline, opts, report=lambda result: print(result.line(), flush=True))
    if "://" in pipeline.out:
        print(f"outputs in {pipeline.out}; try: stackcurate stats {pipeline.out}")
        return
    from stackcurate.report import write_report

    report = write_report(pipeline.out)
    print(
        f"outputs in {pipeline.out}; the run's report: {report / 'index.html'} (dataset card: {report / 'README.md'})"
    )


def _cmd_sample(args: argparse.Namespace) -> None:
    from stackcurate.sample import build_sample

    info = build_sample(args.out, max_bytes=int(args.max_mb * 1e6), max_files=args.max_files)
    print(
        f"sample: {info.files:,} files, {info.bytes / 1e6:.1f} MB in {info.repos} repositories, "
        f"bundles {', '.join(info.bundles)}, a graph export of {info.graph_origins} origins, a GH Archive of "
        f"{info.issues} issues and {info.pulls} pull requests, "
        + ("a git history" if info.history else "no git history (not run from a checkout)")
        + f" under {args.out}"
    )

"""The `stackcurate` command.

    stackcurate sample work/sample                      # build the embedded default input
    stackcurate run pipelines/demo.yaml                 # every stage of a pipeline
    stackcurate ingest --repos ~/src/proj --out work/x  # one stage; --config takes that stage's YAML block
    stackcurate language --out work/x --languages filters/languages/starcoder2_smol_v1.txt
    stackcurate query work/x "select language, count(*) from pii group by 1"
    stackcurate stats work/x
    stackcurate purge work/x                            # drop the unredacted text once pii has finished

Stages run on an embedded local Ray by default; `--ray-address HOST:PORT` (or RAY_ADDRESS) runs them on an
existing cluster, `--runner local` in this process. Errors print as one line; STACKCURATE_DEBUG=1 shows the
traceback.
"""

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from stackcurate.core.config import add_flags, build_config, dump_yaml, flag_values, read_yaml, resolve_paths, to_dict
from stackcurate.core.errors import exit_code
from stackcurate.stages import STAGE_ORDER, get_stage

STATS_SQL = """
select stage, metric, coalesce(reason, '') as reason, sum(value)::bigint as value
from stats where metric in ('docs_in', 'docs_out', 'docs_removed', 'docs_error')
group by all order by stage, metric, value desc
"""


def _run_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("run options (do not change the final rows or shards)")
    group.add_argument(
        "--runner",
        choices=["ray", "local"],
        default=None,
        help="ray (default: embedded local Ray, or --ray-address) or local (this process)",
    )
    group.add_argument("--ray-address", default=None, help="address of an existing Ray cluster (or RAY_ADDRESS)")
    group.add_argument("--workers", type=int, default=None, help="parallel workers (default: all CPUs)")
    group.add_argument(
        "--ray-cpus", type=int, default=None, help="CPUs of the embedded Ray (default: this machine's); not --workers"
    )
    group.add_argument("--overwrite", action="store_true", default=None, help="replace existing output")
    group.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="no progress bar")
    group.add_argument("--dry-run", action="store_true", default=None, help="print config and plan, run nothing")
    group.add_argument(
        "--keep-intermediate",
        action="store_true",
        default=None,
        help="stages that run fused also write their kept rows (for debugging; the final output is the same)",
    )
    group.add_argument(
        "--removed-content",
        action="store_true",
        default=None,
        help="removed rows keep their text (default: content is null; doc_id, blob_id and path trace each row)",
    )


def _run_options(args: argparse.Namespace, base: dict[str, Any] | None = None) -> Any:
    from stackcurate.pipeline import RunOptions, merge_run_options

    # every run option has its flag in _run_flags (the same name)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunOptions)}
    return merge_run_options(base or {}, overrides)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stackcurate",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name in STAGE_ORDER:
        spec = get_stage(name)
        module_doc = sys.modules[spec.build.__module__].__doc__ or ""
        p = sub.add_parser(
            name,
            help=module_doc.split("\n")[0],
            description=module_doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("--out", required=True, help="output folder of the run (local or object-store URI)")
        p.add_argument("--config", help="YAML file with this stage's settings (flags override it)")
        if spec.reads_records:
            p.add_argument("--input", help="folder of record Parquet (default: the previous stage in --out)")
        _run_flags(p)
        add_flags(p, spec.config_cls)
        p.set_defaults(handler=_cmd_stage, stage=name)

    p = sub.add_parser("run", help="run every stage of a pipeline YAML")
    p.add_argument("pipeline", help="pipelines/<name>.yaml")
    p.add_argument("--out", help="override the pipeline's output folder")
    _run_flags(p)
    p.set_defaults(handler=_cmd_run)

    p = sub.add_parser("query", help="SQL over a run's outputs with DuckDB (one view per stage output)")
    p.add_argument("out", help="output folder of a run")
    p.add_argument("sql", nargs="?", help="SQL; without it, list the views")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--max-rows", type=int, default=40, help="rows to print in table format")
    p.set_defaults(handler=_cmd_query)

    p = sub.add_parser(
        "report", help="the run's report: OUT/report/index.html, summary.json, README.md (dataset card)"
    )
    p.add_argument("out", help="output folder of a run")
    p.set_defaults(handler=_cmd_report)

    p = sub.add_parser("stats", help="documents in, kept, removed (by reason) and errors, per stage")
    p.add_argument("out", help="output folder of a run")
    p.set_defaults(handler=_cmd_stats)

    from stackcurate.stages.pii import purge

    p = sub.add_parser(
        "purge", help="drop a finished run's unredacted text (the stages before pii); stats stay",
        description=purge.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("out", help="output folder of a run whose pii stage has finished")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    p.set_defaults(handler=_cmd_purge)

    p = sub.add_parser("pii-model", help="train or evaluate the PII encoder model (see pii_model/)")
    model_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    from pii_model import evaluate, train

    raw = argparse.RawDescriptionHelpFormatter
    t = model_sub.add_parser(
        "train", help="generate training data and train the model", description=train.__doc__, formatter_class=raw
    )
    t.add_argument("--out", required=True, help="model folder to write (use it with `pii --model DIR`)")
    add_flags(t, train.TrainConfig)
    t.set_defaults(handler=_cmd_pii_model_train)
    x = model_sub.add_parser(
        "export",
        help="make a trained model folder the one shipped with stackcurate (`pii: model: auto`)",
        description="Write what training changed in MODEL (trained with frozen embeddings, the default) to "
        "stackcurate/stages/pii/weights/, with its checksums: the model every install then uses.",
    )
    x.add_argument("model", help="a model folder written by `stackcurate pii-model train`")
    x.set_defaults(handler=_cmd_pii_model_export)
    e = model_sub.add_parser(
        "eval", help="per-type precision and recall on the held-out set", description=evaluate.__doc__,
        formatter_class=raw,
    )  # fmt: skip
    evaluate.add_arguments(e)
    e.set_defaults(handler=_cmd_pii_model_eval)

    for name, text in (
        ("train", "train a StarCoder2-style model on the Megatron shards (`stackcurate train --help`)"),
        ("generate", "complete code with a checkpoint, FIM included (`stackcurate generate --help`)"),
    ):  # handled by stackcurate/entry.py before this parser is built; listed here for --help
        sub.add_parser(name, help=text, add_help=False)

    p = sub.add_parser("tokenizer", help="train a tokenizer (StarCoder's BPE recipe) on a run's documents")
    tok_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    from stackcurate.stages import tokenize

    t = tok_sub.add_parser(
        "train", help="train and save in the HF format", description=tokenize.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    t.add_argument("--input", required=True, help="folder of Parquet with a text (or content) column")
    t.add_argument("--out", required=True, help="tokenizer folder to write (AutoTokenizer.from_pretrained reads it)")
    for name in ("vocab_size", "train_mb", "seed"):
        field = tokenize.TokenizeConfig.__dataclass_fields__[name]
        t.add_argument(f"--{name.replace('_', '-')}", type=type(field.default), default=field.default,
                       help=field.metadata["help"])  # fmt: skip
    t.set_defaults(handler=_cmd_tokenizer_train)

    p = sub.add_parser("sample", help="build the embedded default input from code installed on this machine")
    p.add_argument("out", help="folder to write (replaced if it exists)")
    p.add_argument("--max-mb", type=float, default=20.0, help="total size of the sample, MB")
    p.add_argument("--max-files", type=int, default=4000, help="number of files in the sample")
    p.set_defaults(handler=_cmd_sample)
    return parser


def _cmd_stage(args: argparse.Namespace) -> None:
    from stackcurate.pipeline import run_stage

    spec = get_stage(args.stage)
    # Paths resolve here, on the driver: a --config file's against its folder, flags' against the working
    # folder (a worker on another node runs elsewhere).
    values = resolve_paths(spec.config_cls, read_yaml(args.config), Path(args.config).parent) if args.config else {}
    cfg = build_config(spec.config_cls, {**values, **flag_values(args, spec.config_cls)}, base_dir=Path.cwd())
    opts = _run_options(args)
    print(dump_yaml({spec.name: to_dict(cfg)}), end="", file=sys.stderr)
    result = run_stage(spec, cfg, args.out, opts, input_uri=getattr(args, "input", None))
    print("\n".join(result.plan) if opts.dry_run else result.line())


def _cmd_run(args: argparse.Namespace) -> None:
    from stackcurate.pipeline import check_pipeline, load_pipeline, plan_groups, run_pipeline

    pipeline = load_pipeline(args.pipeline)
    if args.out:
        pipeline = dataclasses.replace(pipeline, out=args.out)  # its stages, run options and `keep` stay
    opts = _run_options(args, pipeline.run)
    print(
        dump_yaml({"out": pipeline.out, "stages": {s.name: to_dict(c) for s, c in pipeline.stages}}),
        end="",
        file=sys.stderr,
    )
    if opts.dry_run:  # the settings and columns of every stage are checked; each group runs as one pass
        check_pipeline(pipeline)
        for group in plan_groups(pipeline.stages):
            names = [spec.name for spec, _ in group]
            print(" + ".join(names) + (": one pass per shard" if len(names) > 1 else ""))
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


def _print_relation(rel: Any, fmt: str, max_rows: int) -> None:
    if rel is None:
        return
    if fmt == "table":
        rel.show(max_rows=max_rows, max_width=200)
        return
    table = rel.to_arrow_table()
    if fmt == "csv":
        import pyarrow.csv as pacsv

        sink = sys.stdout.buffer
        pacsv.write_csv(table, sink)
        sink.flush()
    else:
        import json

        for row in table.to_pylist():
            print(json.dumps(row, default=str))


def _cmd_query(args: argparse.Namespace) -> None:
    from stackcurate.query import connect, run_query

    if not args.sql:
        _, views = connect(args.out)
        print("\n".join(views))
        return
    _print_relation(run_query(args.out, args.sql), args.format, args.max_rows)


def _cmd_purge(args: argparse.Namespace) -> None:
    from stackcurate.stages.pii import purge

    result = purge.purge(args.out, dry_run=args.dry_run)
    if args.dry_run:
        print("\n".join(result.files))
    print(result.line(args.dry_run))


def _cmd_report(args: argparse.Namespace) -> None:
    from stackcurate.report import write_report

    folder = write_report(args.out)
    print(f"{folder / 'index.html'}, {folder / 'summary.json'}, {folder / 'README.md'}")


def _cmd_stats(args: argparse.Namespace) -> None:
    from stackcurate.query import run_query

    _print_relation(run_query(args.out, STATS_SQL), "table", 200)


def _cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from pathlib import Path

    from stackcurate.stages import plan_records, tokenize

    cfg = tokenize.TokenizeConfig(vocab_size=args.vocab_size, train_mb=args.train_mb, seed=args.seed)
    folder = tokenize.train_tokenizer(cfg, plan_records(cfg, args.input), args.input, Path(args.out))
    print(folder)


def _cmd_pii_model_train(args: argparse.Namespace) -> None:
    from pii_model import train

    print(train.train(train.config_from(args), args.out))


def _cmd_pii_model_export(args: argparse.Namespace) -> None:
    from stackcurate.stages.pii import shipped

    print(shipped.export(Path(args.model)))


def _cmd_pii_model_eval(args: argparse.Namespace) -> None:
    from pii_model import evaluate

    evaluate.run(args)


def _cmd_sample(args: argparse.Namespace) -> None:
    from stackcurate.sample import build_sample

    info = build_sample(args.out, max_bytes=int(args.max_mb * 1e6), max_files=args.max_files)
    print(
        f"sample: {info.files:,} files, {info.bytes / 1e6:.1f} MB in {info.repos} repositories, "
        f"bundles {', '.join(info.bundles)}, a graph export of {info.graph_origins} origins under {args.out}"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("train", "generate"):  # `python -m stackcurate.cli train ...` too
        from stackcurate.train.cli import main as light

        return light(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    args = build_parser().parse_args(argv)
    from stackcurate.core import log

    log.setup(args.verbose)
    return exit_code(lambda: args.handler(args))


if __name__ == "__main__":
    sys.exit(main())

"""Curate source code into training data: Software Heritage archives or local repositories, filtered,
deduplicated and PII-redacted, to tokenized Megatron shards.

examples:
  stackcurate sample work/sample                      # build the embedded default input
  stackcurate run pipelines/demo.yaml                 # every stage of a pipeline
  stackcurate run pipelines/demo.yaml --dry-run       # what a run would do: which stages are done, which run
  stackcurate ingest --repos ~/src/proj --out work/x  # one stage; --config takes that stage's YAML block
  stackcurate language --out work/x --languages filters/languages/starcoder2_smol_v1.txt
  stackcurate stats work/x                            # documents, bytes and the share kept, per stage
  stackcurate query work/x "select language, count(*) from pii group by 1"
  stackcurate purge work/x                            # drop the unredacted text once pii has finished

Stages run on an embedded local Ray by default; --ray-address HOST:PORT (or RAY_ADDRESS) runs them on an
existing cluster, --runner local in this process. Each run saves its resolved config as _config.yaml in the
output folder (-v also prints it). Errors print as one line; STACKCURATE_DEBUG=1 shows the traceback.
"""

import argparse
import dataclasses
import difflib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from stackcurate import __version__
from stackcurate.core.config import add_flags, build_config, dump_yaml, flag_values, read_yaml, resolve_paths, to_dict
from stackcurate.core.errors import exit_code
from stackcurate.stages import STAGE_ORDER, get_stage

DESCRIPTION, EPILOG = (__doc__ or "").split("\n\n", 1)
VERBOSE = "debug logging, and print the resolved config"

# The descriptions of the commands that are not stages (a stage's is its class's docstring);
# written for users: the modules' docstrings are for developers.
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
STATS = """\
Per stage, in pipeline order: documents in, kept, removed and errors; the share kept (of the input, neither
removed nor an error: format groups files into fewer documents); bytes in and out (the rows' length_bytes, a
dash where the rows carry none); tokens (tokenize) and PII spans (pii). Then the documents removed, and the
errors, by reason.

example:
  stackcurate stats work/demo
"""
PII_EXPORT = """\
Write what training changed in MODEL (trained with frozen embeddings, the default) into the installed
stackcurate package, with its checksums: the model every install then uses (pii: model: auto).
"""
PURGE = """\
Delete the unredacted text of a finished run: the Parquet files with text of the stages before pii (ingest,
license, language, filter, decontaminate, dedup: their kept and removed rows), which pii has not redacted. pii
and the stages after it keep their files; stats, error rows (paths and reasons), markers and configs stay, so
stackcurate stats reports the run as before. A _PURGED file in each emptied folder says what went. It refuses
while pii has not finished, so the only copy of a run's text is never deleted.

examples:
  stackcurate purge work/demo --dry-run      # list what would go
  stackcurate purge work/demo
"""
PII_TRAIN = """\
Train the PII model that the pii stage runs besides its patterns: a token classifier over the six types, cut
from all-MiniLM-L6-v2 (the first --layers layers), trained on generated examples of code and prose with planted
PII. The folder it writes holds the model, its tokenizer and train.json (the training config, data sizes,
losses and time); use it with `stackcurate pii --model DIR`, or make it the shipped one with
`stackcurate pii-model export DIR`.

example:
  stackcurate pii-model train --out work/pii/minilm-l3
"""
PII_EVAL = """\
Per-type precision and recall of the PII detectors on a generated, held-out set: the patterns alone, the model
alone (on the lines the stage sends it, and on every line), and both, as the pii stage runs. A span counts as
found only if its type and exact offsets match a planted one, after the rules that spare what StarCoder did
not redact.

examples:
  stackcurate pii-model eval                                  # the shipped model, 1500 generated examples
  stackcurate pii-model eval --model work/pii/minilm-l3 --json work/pii/eval.json
"""
TOKENIZER_TRAIN = """\
Train a byte-level BPE tokenizer with StarCoder's recipe (its special tokens, FIM included) on a seeded sample
of a folder of documents, and save it in the Hugging Face format (AutoTokenizer.from_pretrained reads it; the
tokenize stage takes it as --tokenizer DIR).

example:
  stackcurate tokenizer train --input work/demo/format --out work/tokenizer --vocab-size 49152
"""


class _Parser(argparse.ArgumentParser):
    """Every parser and subparser of the command: no abbreviated flags (`--repo` is not taken for `--repos`), and
    an error shows the command's usage on one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"usage: {short_usage(self)}\n{self.prog}: error: {message}\n")


def short_usage(parser: argparse.ArgumentParser) -> str:
    """`stackcurate ingest --out OUT [options]`: the required arguments only, and where the rest are listed."""
    required, positionals, optional = [], [], False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            positionals.append(f"{action.metavar or 'COMMAND'} ...")
        elif not action.option_strings:
            name = str(action.metavar or action.dest)
            positionals.append(f"[{name}]" if action.nargs == "?" else name)
        elif action.required:
            required.append(f"{action.option_strings[-1]} {action.metavar or action.dest.upper()}")
        elif action.help != argparse.SUPPRESS:
            optional = True
    words = [parser.prog, *required, *(["[options]"] if optional else []), *positionals]
    return " ".join(words) + (f" ({parser.prog} --help lists the options)" if optional else "")


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return None


def check_flags(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Stop on an unknown command or flag with the (sub)command's usage and the closest name it has (argparse
    alone names neither, and shows the top-level usage for a subcommand's unknown flag)."""
    current = parser
    for token in argv:
        if token == "--":
            return
        commands = _commands(current)
        if not token.startswith("-"):
            if commands is None:
                continue
            if token not in commands:
                close = difflib.get_close_matches(token, list(commands), n=1)
                hint = f"did you mean {close[0]}?" if close else f"commands: {', '.join(commands)}"
                current.error(f"unknown command '{token}'; {hint}")
            current = commands[token]
            continue
        flag = token.split("=", 1)[0]
        if len(flag) < 2 or (not flag.startswith("--") and len(flag) > 2) or _is_number(token):
            continue  # `-`, combined short flags (-vh) and negative numbers: argparse's to judge
        known = [s for action in current._actions for s in action.option_strings]
        if flag not in known:
            names = {s.lstrip("-"): s for s in known if s.startswith("--")}  # `--` alone would make all alike
            close = difflib.get_close_matches(flag.lstrip("-"), list(names), n=1)
            hint = f"; did you mean {names[close[0]]}?" if close else f"; {current.prog} --help lists the options"
            current.error(f"unrecognized argument {flag}{hint}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _run_flags(parser: argparse.ArgumentParser) -> None:
    # -v after the command too (`stackcurate run p.yaml -v`); SUPPRESS leaves the top-level value when absent
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE)
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
    parser = _Parser(prog="stackcurate", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name in STAGE_ORDER:
        spec = get_stage(name)
        p = sub.add_parser(name, help=spec.summary(), description=spec.description())
        p.add_argument("--out", required=True, help="output folder of the run (local or object-store URI)")
        p.add_argument("--config", help="YAML file with this stage's settings (flags override it)")
        if spec.reads_records:
            p.add_argument("--input", help="folder of record Parquet (default: the previous stage in --out)")
        _run_flags(p)
        add_flags(p, spec.config, f"{name} settings (also keys of --config, and of its block in a pipeline YAML)")
        p.set_defaults(handler=_cmd_stage, stage=name)

    p = sub.add_parser(
        "run",
        help="run every stage of a pipeline YAML",
        description=RUN,
    )
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

    p = sub.add_parser(
        "stats",
        help="documents and bytes in and kept, removed (by reason) and errors, per stage",
        description=STATS,
    )
    p.add_argument("out", help="output folder of a run")
    p.set_defaults(handler=_cmd_stats)

    p = sub.add_parser(
        "purge", help="drop a finished run's unredacted text (the stages before pii); stats stay",
        description=PURGE,
    )  # fmt: skip
    p.add_argument("out", help="output folder of a run whose pii stage has finished")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    p.set_defaults(handler=_cmd_purge)

    p = sub.add_parser("pii-model", help="train or evaluate the PII encoder model (see pii_model/)")
    model_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    from pii_model import evaluate, train

    t = model_sub.add_parser("train", help="generate training data and train the model", description=PII_TRAIN)
    t.add_argument("--out", required=True, help="model folder to write (use it with `pii --model DIR`)")
    add_flags(t, train.TrainConfig, "training settings")
    t.set_defaults(handler=_cmd_pii_model_train)
    x = model_sub.add_parser(
        "export",
        help="make a trained model folder the one shipped with stackcurate (`pii: model: auto`)",
        description=PII_EXPORT,
    )
    x.add_argument("model", help="a model folder written by `stackcurate pii-model train`")
    x.set_defaults(handler=_cmd_pii_model_export)
    e = model_sub.add_parser("eval", help="per-type precision and recall on the held-out set", description=PII_EVAL)
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

    t = tok_sub.add_parser("train", help="train and save in the HF format", description=TOKENIZER_TRAIN)
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
    values = resolve_paths(spec.config, read_yaml(args.config), Path(args.config).parent) if args.config else {}
    cfg = build_config(spec.config, {**values, **flag_values(args, spec.config)}, base_dir=Path.cwd())
    opts = _run_options(args)
    if args.verbose or opts.dry_run:  # saved as _config.yaml in the stage's folder either way
        print(dump_yaml({spec.name: to_dict(cfg)}), end="", file=sys.stderr)
    result = run_stage(spec, cfg, args.out, opts, input_uri=getattr(args, "input", None))
    print("\n".join(result.plan) if opts.dry_run else result.line())


def _cmd_run(args: argparse.Namespace) -> None:
    from stackcurate.pipeline import dry_run, load_pipeline, resolved_config, run_pipeline

    pipeline = load_pipeline(args.pipeline)
    if args.out:
        pipeline = dataclasses.replace(pipeline, out=args.out)  # its stages, run options and `keep` stay
    opts = _run_options(args, pipeline.run)
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
    from stackcurate.query import stage_reasons, stage_totals

    rows = [["stage", "docs in", "kept", "removed", "errors", "kept %", "bytes in", "bytes out", ""]]
    for t in stage_totals(args.out):
        notes = []
        if t.tokens:
            notes.append(f"{t.tokens:,} tokens")
        if t.stage == "pii":
            spans = t.pii_redacted + t.pii_detected_only
            notes.append(f"{spans:,} PII spans ({t.pii_redacted:,} redacted, {t.pii_detected_only:,} detected only)")
        share = "-" if t.share_kept is None else f"{100 * t.share_kept:.1f}"
        rows.append([t.stage, f"{t.docs_in:,}", f"{t.docs_out:,}", f"{t.docs_removed:,}", f"{t.docs_error:,}", share,
                     _size(t.bytes_in, t.docs_in), _size(t.bytes_out, t.docs_out), "; ".join(notes)])  # fmt: skip
    print(_aligned(rows, right=range(1, 8)))
    reasons = stage_reasons(args.out)
    if reasons:
        print("\nremoved and errors, by reason:")
        rows = [["stage", "removed/error", "reason", "docs", "bytes"]]
        # error rows carry no size (the file could not be read); removed rows do (an empty file: 0 B)
        rows += [[r.stage, r.kind, r.reason, f"{r.docs:,}", _size(r.bytes, r.docs if r.kind == "error" else 0)]
                 for r in reasons]  # fmt: skip
        print(_aligned(rows, right=(3, 4)))


def _size(n: int, docs: int) -> str:
    """Bytes for people (`1.2 MB`); `-` for none over `docs` documents: rows that carry no size (tokenize's token
    rows, error rows)."""
    if n == 0 and docs:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _aligned(rows: list[list[str]], right: Iterable[int]) -> str:
    """A text table, the columns `right` (numbers) right-aligned, the others left-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = set(right)
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from pathlib import Path

    from stackcurate.core.planning import plan_records
    from stackcurate.stages import tokenize

    cfg = tokenize.TokenizeConfig(vocab_size=args.vocab_size, train_mb=args.train_mb, seed=args.seed)
    folder = tokenize.train_tokenizer(cfg, plan_records(args.input), args.input, Path(args.out))
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
    if callable(getattr(sys.stdout, "reconfigure", None)):  # each line as it is printed, into a pipe or file too
        sys.stdout.reconfigure(line_buffering=True)  # pyright: ignore[reportAttributeAccessIssue]
    parser = build_parser()
    check_flags(parser, argv)
    args = parser.parse_args(argv)
    from stackcurate.core import log

    log.setup(args.verbose)
    return exit_code(lambda: args.handler(args))


if __name__ == "__main__":
    sys.exit(main())

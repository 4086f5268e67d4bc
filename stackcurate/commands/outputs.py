"""The commands that read a run's outputs: `query`, `report`, `stats`, `purge`."""

import argparse
import sys
from collections.abc import Iterable
from typing import Any

STATS = """\
Per stage, in pipeline order: documents in, kept, removed and errors; the share kept (of the input, neither
removed nor an error: format groups files into fewer documents); bytes in and out (the rows' length_bytes, a
dash where the rows carry none); tokens (tokenize) and PII spans (pii). Then the documents removed, and the
errors, by reason.

example:
  stackcurate stats work/demo
"""


PURGE = """\
Delete the unredacted text of a finished run: the Parquet files with text of the stages before pii (ingest,
license, language, filter, decontaminate, dedup: their kept and removed rows), which pii has not redacted. pii
and the stages after it keep their files; stats, error rows (paths and reasons), markers and configs stay, so
stackcurate stats reports the run as before. A PURGED file in the state of each emptied stage
(`<out>/_state/<stage>/`) says what went. It refuses while pii has not finished, so the only copy of a run's
text is never deleted.

examples:
  stackcurate purge work/demo --dry-run      # list what would go
  stackcurate purge work/demo
"""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("query", help="SQL over a run's outputs with DuckDB (one view per stage output)")
    p.add_argument("out", help="output folder of a run")
    p.add_argument("sql", nargs="?", help="SQL; without it, list the views")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--max-rows", type=int, default=40, help="rows to print in table format")
    p.set_defaults(handler=_cmd_query)

    p = sub.add_parser(
        "report", help="the run's report: OUT/report/index.html, summary.json, README.md (dataset card)"
    )
    p.add_argument("out", nargs="+", help="output folder of a run; several: also one page comparing them")
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
    from stackcurate.query import connect, run_query, stale_line

    if stale := stale_line(args.out):
        print(f"stackcurate: warning: {stale}", file=sys.stderr)
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
    from stackcurate.report import compare_runs, write_report

    if len(args.out) > 1:  # curation variants side by side
        print(f"{compare_runs(args.out)} (and each run's own report)")
        return
    folder = write_report(args.out[0])
    print(f"{folder / 'index.html'}, {folder / 'summary.json'}, {folder / 'README.md'}")


def _cmd_stats(args: argparse.Namespace) -> None:
    from stackcurate.query import kind_flow, kind_totals, stage_reasons, stage_totals, stale_line

    rows = [["stage", "docs in", "kept", "removed", "errors", "kept %", "bytes in", "bytes out", ""]]
    for t in stage_totals(args.out):
        notes = []
        if t.tokens:
            notes.append(f"{t.tokens:,} tokens")
        passed = t.docs_in - t.docs_removed - t.docs_error
        if t.docs_out < passed:  # format: a repository's files, one document
            notes.append(f"{passed:,} files grouped into {t.docs_out:,} documents")
        elif t.docs_out > passed:  # tokenize with weights: some kinds go in more than once
            notes.append(f"{passed:,} documents written {t.docs_out:,} times (the kinds' weights)")
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
    if flow := kind_flow(args.out):
        print("\nby kind of record:")
        rows = [["stage", "kind", "docs in", "kept", "removed", "errors"]]
        rows += [[f.stage, f.kind, f"{f.docs_in:,}", f"{f.docs_out:,}", f"{f.docs_removed:,}", f"{f.docs_error:,}"]
                 for f in flow]  # fmt: skip
        print(_aligned(rows, right=range(2, 6)))
    if kinds := kind_totals(args.out):
        each = "; ".join(f"{kind} {docs:,} documents, {tokens:,} tokens" for kind, docs, tokens in kinds)
        print(f"\nin the shards, by kind: {each}")
    if stale := stale_line(args.out):
        print(f"\n{stale}")


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

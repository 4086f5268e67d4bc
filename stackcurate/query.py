"""DuckDB over an output folder: one view per stage output.

Views: `<stage>` (kept rows), `<stage>_removed`, `<stage>_errors`, `tokenize_documents` (where each document
went in the Megatron shards), and `stats` (every stage's counters). :func:`stage_totals` and
:func:`stage_reasons` sum the counters per stage for `stackcurate stats`.

Example:
    stackcurate query work/demo "select language, count(*) n from pii group by 1 order by n desc"
"""

from dataclasses import dataclass
from pathlib import Path

import duckdb

from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import EARLIER_LAYOUT, EARLIER_PLAN, PLAN, STATE, TABLES, StageDir
from stackcurate.stages import stage_order


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def connect(out: str | Path) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    """An in-memory DuckDB connection with a view per stage output under `out`; returns the view names."""
    root = Path(out)
    if "://" in str(out) or not root.is_dir():
        raise StackcurateError(f"{out} is not a local output folder; pass the --out of a run")
    con = duckdb.connect()
    views, stats = [], []
    for stage in sorted(p.parent.name for p in (root / STATE).glob(f"*/{PLAN}")):
        folders = [(stage, root / stage)]
        folders += [(f"{stage}_{kind}", root / TABLES[kind] / stage) for kind in ("removed", "errors")]
        if stage == "tokenize":  # where each document went in the Megatron shards
            folders.append(("tokenize_documents", root / "megatron" / "documents"))  # TokenizeStage.folders
        if stage == "index":  # the files of the attribution index: repository, path, SWHID, licenses
            folders.append(("index_files", root / "attribution" / "files"))  # IndexStage.folders
        for view, sub in folders:
            if any(sub.glob("*.parquet")):
                glob = _sql_str(str(sub / "*.parquet"))
                con.execute(f'create view "{view}" as select * from read_parquet({glob}, union_by_name=true)')
                views.append(view)
        if any((root / TABLES["stats"] / stage).glob("*.parquet")):
            stats.append(_sql_str(str(root / TABLES["stats"] / stage / "*.parquet")))
    if not views and any(root.glob(f"*/{EARLIER_PLAN}")):
        raise StackcurateError(f"{out} {EARLIER_LAYOUT}; rerun it with --overwrite")
    if not views:
        raise StackcurateError(f"{out} holds no stage output; run a stage with --out {out} first")
    if stats:
        con.execute(f"create view stats as select * from read_parquet([{', '.join(stats)}], union_by_name=true)")
        views.append("stats")
    return con, views


def run_query(out: str | Path, sql: str) -> duckdb.DuckDBPyRelation | None:
    con, views = connect(out)
    try:
        return con.sql(sql)
    except duckdb.Error as exc:
        raise StackcurateError(f"query failed: {_what_duckdb_said(exc)}\nviews: {', '.join(views)}") from None


def _what_duckdb_said(exc: Exception) -> str:
    """DuckDB's error on one line: what went wrong and its hint (`Did you mean "pii"?`, the candidate
    bindings), without the echo of the query and its caret."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    kept = [lines[0], *(line for line in lines[1:] if line.startswith(("Did you mean", "Candidate")))]
    return " ".join(kept)


@dataclass(frozen=True)
class StageTotals:
    """One stage's counters summed over its shards (`stackcurate stats`): documents, bytes (`length_bytes` of
    the rows), and the counts only some stages have (tokens: tokenize; PII spans: pii)."""

    stage: str
    docs_in: int = 0
    docs_out: int = 0
    docs_removed: int = 0
    docs_error: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    tokens: int = 0
    pii_redacted: int = 0  # spans replaced in the text
    pii_detected_only: int = 0  # spans recorded, left in the text (types detected but not in `redact`)

    @property
    def share_kept(self) -> float | None:
        """The share of the input neither removed nor an error (format groups files into fewer documents, so
        this is not docs_out / docs_in); None without input."""
        if not self.docs_in:
            return None
        return max(0.0, 1.0 - (self.docs_removed + self.docs_error) / self.docs_in)


_TOTALS_SQL = "select stage, metric, sum(value) as value from stats group by all"
_REASONS_SQL = """select stage, metric, reason, sum(value) as value from stats
where reason is not null and metric in ('docs_removed', 'docs_error', 'bytes_removed', 'bytes_error')
group by all"""
_FIELDS = {
    "docs_in": "docs_in", "docs_out": "docs_out", "docs_removed": "docs_removed", "docs_error": "docs_error",
    "bytes_in": "bytes_in", "bytes_out": "bytes_out", "tokens": "tokens", "spans_redacted": "pii_redacted",
    "spans_detected_only": "pii_detected_only",
}  # fmt: skip


def _stats(out: str | Path, sql: str) -> list[tuple]:
    con, views = connect(out)
    if "stats" not in views:
        raise StackcurateError(f"{out} has no stats yet; run a stage with --out {out} first")
    return con.sql(sql).fetchall()


def stage_totals(out: str | Path) -> list[StageTotals]:
    """Each stage's totals, in pipeline order. Folders of a stage's own passes (license_scan, dedup_clusters,
    graph_walk, ...) are not stages: their counters are not listed."""
    order = stage_order(str(out))
    totals: dict[str, dict[str, int]] = {}
    for stage, metric, value in _stats(out, _TOTALS_SQL):
        if stage in order and metric in _FIELDS:
            totals.setdefault(stage, {})[_FIELDS[metric]] = int(value)
    return [StageTotals(stage, **totals[stage]) for stage in order if stage in totals]


@dataclass(frozen=True)
class Reason:
    """The documents (and their bytes) one stage removed, or failed on, for one reason."""

    stage: str
    kind: str  # removed | error
    reason: str
    docs: int
    bytes: int


def stage_reasons(out: str | Path) -> list[Reason]:
    """Why documents left each stage: removed and error rows by reason; stages in pipeline order, the most
    frequent reason first."""
    order = stage_order(str(out))
    counts: dict[tuple[str, str, str], dict[str, int]] = {}
    for stage, metric, reason, value in _stats(out, _REASONS_SQL):
        if stage in order:
            unit, kind = metric.split("_", 1)
            counts.setdefault((stage, kind, reason), {})[unit] = int(value)
    rows = [Reason(s, k, r, c.get("docs", 0), c.get("bytes", 0)) for (s, k, r), c in counts.items()]
    return sorted(rows, key=lambda r: (order.index(r.stage), r.kind != "removed", -r.docs, r.reason))


def kind_totals(out: str | Path) -> list[tuple[str, int, int]]:
    """(kind, documents, tokens) in the shards, most tokens first, when they hold more than files (issues,
    commits: records of other kinds); [] otherwise."""
    con, views = connect(out)
    if "tokenize" not in views or "kind" not in {r[0] for r in con.sql('describe "tokenize"').fetchall()}:
        return []
    rows = con.sql("select coalesce(kind, 'file'), count(*), sum(n_tokens)::bigint from tokenize group by 1 "
                   "order by 3 desc, 1").fetchall()  # fmt: skip
    return [] if len(rows) == 1 and rows[0][0] in ("file", "repository") else [(k, int(d), int(t)) for k, d, t in rows]


_KINDS_SQL = """select stage, coalesce(kind, 'file') as kind, metric, sum(value) as value from stats
where metric in ('docs_in', 'docs_out', 'docs_removed', 'docs_error') group by all"""


@dataclass(frozen=True)
class KindFlow:
    """One stage's documents of one kind: in, kept, removed, errors (`stackcurate stats`, the report)."""

    stage: str
    kind: str
    docs_in: int = 0
    docs_out: int = 0
    docs_removed: int = 0
    docs_error: int = 0


def kind_flow(out: str | Path) -> list[KindFlow]:
    """Each stage's counts per kind of record, stages in pipeline order, when the run holds more than files
    (stats counted by kind: issues, pull requests, commits); [] otherwise."""
    order = stage_order(str(out))
    con, views = connect(out)
    if "stats" not in views or "kind" not in {r[0] for r in con.sql("describe stats").fetchall()}:
        return []
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for stage, kind, metric, value in con.sql(_KINDS_SQL).fetchall():
        if stage in order:
            counts.setdefault((stage, kind), {})[metric] = int(value)
    if {kind for _, kind in counts} <= {"file"}:
        return []
    rows = [KindFlow(stage, kind, **values) for (stage, kind), values in counts.items()]
    return sorted(rows, key=lambda r: (order.index(r.stage), r.kind))


def stale_stages(out: str | Path) -> list[tuple[str, str]]:
    """The stages of a run made from an output that changed since, with why: the stage whose output they read
    was rerun after them (`stackcurate ingest --overwrite` alone), or is stale itself. In pipeline order."""
    stale: dict[str, str] = {}
    for stage in stage_order(str(out)):
        done = StageDir(str(out), stage).completion()
        source = done.get("input")
        if not source:
            continue
        if source in stale:
            stale[stage] = f"{source} is stale"
        elif done.get("input_id") not in (None, StageDir(str(out), source).completion().get("id", done["input_id"])):
            stale[stage] = f"{source} was rerun after it"
    return list(stale.items())


def stale_line(out: str | Path) -> str | None:
    """One line naming the stale stages of a run (stale_stages), or None."""
    if not (stale := stale_stages(out)):
        return None
    each = ", ".join(f"{stage} ({why})" for stage, why in stale)
    return f"stale: {each}; rerun them (the pipeline, or each with --overwrite) before using their output"

"""DuckDB over an output folder: one view per stage output.

Views: `<stage>` (kept rows), `<stage>_removed`, `<stage>_errors`, `tokenize_documents` (where each document
went in the Megatron shards), and `stats` (every stage's counters).

Example:
    stackcurate query work/demo "select language, count(*) n from pii group by 1 order by n desc"
"""

from pathlib import Path

import duckdb

from stackcurate.core.errors import StackcurateError


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def connect(out: str | Path) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    """An in-memory DuckDB connection with a view per stage output under `out`; returns the view names."""
    root = Path(out)
    if "://" in str(out) or not root.is_dir():
        raise StackcurateError(f"{out} is not a local output folder; pass the --out of a run")
    con = duckdb.connect()
    views, stats = [], []
    for stage_dir in sorted(p for p in root.iterdir() if p.is_dir() and (p / "_plan.json").exists()):
        for view, sub in (
            (stage_dir.name, stage_dir),
            (f"{stage_dir.name}_removed", stage_dir / "removed"),
            (f"{stage_dir.name}_errors", stage_dir / "errors"),
            (f"{stage_dir.name}_documents", stage_dir / "megatron" / "documents"),  # tokenize: shard positions
        ):
            if any(sub.glob("*.parquet")):
                glob = _sql_str(str(sub / "*.parquet"))
                con.execute(f'create view "{view}" as select * from read_parquet({glob}, union_by_name=true)')
                views.append(view)
        if any((stage_dir / "stats").glob("*.parquet")):
            stats.append(_sql_str(str(stage_dir / "stats" / "*.parquet")))
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
        first = str(exc).strip().splitlines()[0]
        raise StackcurateError(f"query failed: {first} (views: {', '.join(views)})") from None

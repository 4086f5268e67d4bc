"""Every number of the report, from the run's own stats and removed rows through DuckDB (the views of
`stackcurate query`), so it always agrees with `stackcurate stats`."""

import csv
import dataclasses
import json
import platform
import re
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from stackcurate.core.counters import LARGEST
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import CONFIG, FUSED, STATE
from stackcurate.query import connect, kind_flow, stale_stages
from stackcurate.stages import stage_order

REPORT_DIR = "report"
EXAMPLES = 3  # removed rows shown per (stage, reason)
EXCERPT = 80  # characters of a removed file's line shown (only where removed rows keep their content)
TOP = 15  # bars per chart
# internal folders whose counters belong to a stage's section
PARTS = {"license_scan": "license", "dedup_clusters": "dedup", "graph_walk": "graph"}
COUNTS = ("docs_in", "docs_out", "docs_removed", "docs_error", "bytes_in", "bytes_out", "bytes_removed")
REASONS_SQL = """select stage, reason, sum(value) filter (metric = 'docs_removed') as docs,
    sum(value) filter (metric = 'bytes_removed') as bytes from stats
    where reason is not null and metric in ('docs_removed', 'bytes_removed') group by all order by stage, docs desc"""
LANGUAGES_SQL = """select stage, language, sum(value) filter (metric = 'docs_out') as docs,
    sum(value) filter (metric = 'bytes_out') as bytes from stats
    where language is not null and metric in ('docs_out', 'bytes_out') group by all order by stage, bytes desc"""
METRICS_SQL = f"""select stage, metric, if(metric in {LARGEST!r}, max(value), sum(value)) as value
    from stats group by stage, metric"""
# Per language: the MB each stage removed (a language is known from the language stage on; ingest's removals
# of files whose language is not known yet count as "(unknown)").
REMOVED_BY_LANGUAGE_SQL = """select coalesce(language, '(unknown)') as language, stage, sum(value) as bytes
    from stats where metric = 'bytes_removed' group by all"""
TOKENS_BY_LANGUAGE_SQL = """select coalesce(language, '(unknown)') as language, sum(n_tokens)::bigint as tokens
    from tokenize group by all order by tokens desc"""
TOKENS_BY_KIND_SQL = """select coalesce(kind, 'file') as kind, count(*) as documents, sum(n_tokens)::bigint as tokens
    from tokenize group by all order by tokens desc"""
KINDS_REMOVED_SQL = """select stage, coalesce(kind, 'file') as kind, reason, sum(value)::bigint as records
    from stats where metric = 'docs_removed' and reason is not null group by all order by kind, stage, records desc"""
RUNS_SQL = "select distinct run_id from stats order by run_id"
DEDUP_SQL = """select reason as size, sum(value)::bigint as clusters from stats
    where stage = 'dedup_clusters' and metric = 'clusters' group by all order by clusters desc"""
DECONTAMINATION_SQL = """select reason, detail, count(*) as files from decontaminate_removed
    group by all order by files desc, detail limit 50"""
PII_DETECTORS_SQL = """select s.entity, s.detector, count(*) as spans, count(distinct doc_id) as files,
    count(*) filter (s.replacement is not null) as replaced from (select doc_id, unnest(pii_spans) as s from pii)
    group by all order by spans desc"""
PII_EXAMPLES_SQL = """select entity, detector, replacement, path from (select *, row_number() over
    (partition by entity order by path, start) n from (select path, s.entity, s.detector, s.replacement, s.start
    from (select path, unnest(pii_spans) as s from pii))) where n <= 3 order by entity, path"""
PII_SQL = """select metric, reason as entity, sum(value)::bigint as spans from stats
    where stage = 'pii' and metric like 'spans_%' group by all order by metric, spans desc"""
SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
         (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))  # fmt: skip
HISTOGRAM_BINS = 30
LIBRARIES = ("stackcurate", "pyarrow", "duckdb", "ray", "obstore", "tokenizers", "presidio-analyzer", "torch")


def runs_line(run_ids: list[str]) -> str:
    """The runs an output was made by, for a header: `run X`, or the last and how many before it (a stage rerun,
    a resumed run)."""
    if len(run_ids) <= 1:
        return f"run {''.join(run_ids) or '?'}"
    return f"run {run_ids[-1]} (and {len(run_ids) - 1} earlier)"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _rows(con: Any, sql: str) -> list[dict[str, Any]]:
    table = con.sql(sql).to_arrow_table()
    return table.to_pylist()


def _stages(out: Path, present: set[str]) -> list[str]:
    """The run's stages in pipeline order (the last `stackcurate run`'s list, else STAGE_ORDER)."""
    order = stage_order(str(out))
    return [s for s in order if s in present] + sorted(present - set(order) - set(PARTS))


def summarize(out: str | Path) -> dict[str, Any]:
    """Every number of the report (see the module docstring)."""
    out = Path(out)
    con, views = connect(out)
    if "stats" not in views:
        raise StackcurateError(f"{out} has no stats yet; run a stage first")
    # every counter summed over shards and runs, but peaks and worker counts: the largest
    metric_rows = _rows(con, METRICS_SQL)
    totals: dict[str, dict[str, float]] = {}
    for r in metric_rows:
        totals.setdefault(r["stage"], {})[r["metric"]] = r["value"]
    stages = _stages(out, set(totals))
    funnel = []
    for stage in stages:
        t = totals[stage]
        seconds = t.get("seconds", 0.0) + totals.get(_part_of(stage), {}).get("seconds", 0.0)
        funnel.append({"stage": stage, **{k: int(t.get(k, 0)) for k in COUNTS}, "seconds": round(seconds, 2)})
    reasons = _rows(con, REASONS_SQL)
    errors = _rows(con, "select stage, reason, sum(value) as docs from stats where metric = 'docs_error' "
                        "group by all order by stage, docs desc")  # fmt: skip
    examples = {}
    for stage in stages:
        if f"{stage}_removed" in views:
            cols = _columns(con, f"{stage}_removed")
            repo = "repo_name" if "repo_name" in cols else "null"
            path = "path" if "path" in cols else "null"
            text = "content" if "content" in cols else "null"
            rows = _per_reason(con, f"{stage}_removed", f"reason, {path} as path, {repo} as repo_name, "
                               f"left(detail, 200) as detail, {text} as content",
                               path if path != "null" else "reason")  # fmt: skip
            for r in rows:
                r["line"] = _excerpt(r.pop("content"), r["detail"])
            examples[stage] = rows
    error_examples = {
        stage: _per_reason(con, f"{stage}_errors", "reason, origin, left(detail, 200) as detail", "origin")
        for stage in stages
        if f"{stage}_errors" in views
    }
    languages = _rows(con, LANGUAGES_SQL)
    spans = "pii" in views and "pii_spans" in _columns(con, "pii")
    summary = {
        "run": {
            "out": str(out),
            "run_ids": [r["run_id"] for r in _rows(con, RUNS_SQL)],
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": _versions(),
            "python": platform.python_version(),
            "stale": [{"stage": stage, "why": why} for stage, why in stale_stages(out)],
        },  # fmt: skip
        "stages": stages,
        "attribution": _attribution(out),
        "evaluation": _evaluation(out),
        "funnel": funnel,
        "tokens": int(totals.get("tokenize", {}).get("tokens", 0)),
        "removed_by_reason": [r | {"docs": int(r["docs"] or 0), "bytes": int(r["bytes"] or 0)} for r in reasons],
        "errors_by_reason": [r | {"docs": int(r["docs"])} for r in errors],
        "error_examples": error_examples,
        "performance": [_performance(stage, totals) for stage in stages],
        "examples": examples,
        "languages": [r | {"docs": int(r["docs"] or 0), "bytes": int(r["bytes"] or 0)} for r in languages],
        "removed_by_language": [r | {"bytes": int(r["bytes"] or 0)} for r in _rows(con, REMOVED_BY_LANGUAGE_SQL)],
        "tokens_by_language": _rows(con, TOKENS_BY_LANGUAGE_SQL) if "tokenize" in views else [],
        # records of other kinds than files (issues, commits): the shards' documents and tokens by kind (epochs
        # included), and what ingest removed of each kind
        "tokens_by_kind": _rows(con, TOKENS_BY_KIND_SQL) if _has(con, views, "tokenize", "kind") else [],
        "removed_by_kind": _removed_by_kind(con, views, stages),
        "kinds_by_stage": [dataclasses.asdict(f) for f in kind_flow(out)],
        "dedup": _rows(con, DEDUP_SQL) if "dedup_clusters" in totals else [],
        "pii": _rows(con, PII_SQL) if "pii" in totals else [],
        "licenses": _licenses(con, views, stages),
        "opt_out": _opt_out(totals, reasons),
        "license_ids": _license_ids(con, views, stages),
        "pii_detectors": _rows(con, PII_DETECTORS_SQL) if spans else [],
        "pii_examples": _rows(con, PII_EXAMPLES_SQL) if spans else [],
        "dedup_largest": _largest_clusters(con, views, stages),
        "decontamination": _rows(con, DECONTAMINATION_SQL) if "decontaminate_removed" in views else [],
        "config": {s: _config(out, s) for s in stages},
        "filter_scores": _filter_scores(con, views, stages, out),
    }
    return summary


def _per_reason(con: Any, view: str, columns: str, order: str) -> list[dict[str, Any]]:
    """The first EXAMPLES rows of `view` for each reason, by `order`."""
    ranked = f'select *, row_number() over (partition by reason order by {order}) n from "{view}"'
    return _rows(con, f"select {columns} from ({ranked}) where n <= {EXAMPLES} order by reason, {order}")


def _excerpt(content: str | None, detail: str | None) -> str | None:
    """The line a removed row's detail names (`... (line 17)`), cut to EXCERPT characters, where the removed
    rows kept their content (`--removed-content`); None otherwise: by default no removed text is written."""
    found = re.search(r"\(line (\d+)\)$", detail or "")
    if content is None or found is None:
        return None
    lines = content.split("\n", int(found.group(1)))
    line = lines[int(found.group(1)) - 1] if int(found.group(1)) <= len(lines) else ""
    return line[:EXCERPT] + ("…" if len(line) > EXCERPT else "")


def _performance(stage: str, totals: dict[str, dict[str, float]]) -> dict[str, Any]:
    """How a stage ran: wall time of its runs (a fused stage: its group's), MB in, MB/s, the workers, MB/s per
    worker (each takes one core), its own time summed over its shards, and the largest peak memory of a worker
    over one shard (a fused group's stages share theirs)."""
    t = totals[stage]
    part = totals.get(_part_of(stage), {})
    wall, workers, size = t.get("wall_seconds", 0.0), int(t.get("workers", 0)), t.get("bytes_in", 0.0)
    rate = size / 1e6 / wall if wall else None
    return {"stage": stage, "wall_seconds": round(wall, 3), "mb_in": round(size / 1e6, 2), "bytes_in": int(size),
            "mb_per_s": _significant(rate), "workers": workers,
            "mb_per_s_per_core": _significant(rate / workers) if rate is not None and workers else None,
            "own_seconds": round(t.get("seconds", 0.0) + part.get("seconds", 0.0), 2),
            "peak_worker_mb": round(t["rss_peak"] / 2**20) if t.get("rss_peak") else None}  # fmt: skip


def _significant(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.3g}")


def _part_of(stage: str) -> str:
    return next((part for part, owner in PARTS.items() if owner == stage), "")


def _attribution(out: Path) -> dict[str, Any] | None:
    """The run's attribution index (the index stage's), if built: where, and what it holds."""
    info_path = out / "attribution" / "index.json"
    if not info_path.is_file():
        return None
    info = json.loads(info_path.read_text())
    return {"folder": str(out / "attribution"), "parts": len(info["parts"]), "tokens": info["tokens"],
            "files": info["files"], "min_tokens": info["min_tokens"]}  # fmt: skip


def _evaluation(out: Path) -> list[dict[str, Any]]:
    """pass@k of the models trained on this run, from the folders under the run folder that `stackcurate eval`
    wrote (a `summary.json` beside a `results.parquet`) and from the trainer's `evals.csv` (--eval): a row per
    folder or checkpoint, and benchmark."""
    rows = []
    # an eval folder, or one of several checkpoints' (`stackcurate eval CKPT... --out F`: F/checkpoint-<step>)
    found: list[tuple[Path, str, int | None]] = [(s, s.parent.name, None) for s in sorted(out.glob("*/summary.json"))]
    for summary in sorted(out.glob("*/checkpoint-*/summary.json")):
        step = summary.parent.name.removeprefix("checkpoint-")
        found.append((summary, summary.parent.parent.name, int(step) if step.isdigit() else None))
    for summary, where, step in found:
        if (summary.parent / "results.parquet").is_file():
            for benchmark, result in json.loads(summary.read_text()).items():
                rows.append({"where": where, "step": step, "benchmark": benchmark, **result["pass@k"],
                             "exact_match": result.get("exact_match"), "samples": result["samples"]})  # fmt: skip
    for evals in sorted(out.glob("*/evals.csv")):
        with evals.open() as f:
            for row in csv.DictReader(f):
                value = {k: float(row[k]) if row.get(k) else None for k in ("pass@1", "exact_match")}
                rows.append({"where": evals.parent.name, "step": int(row["step"]), "benchmark": row["benchmark"],
                             **value})  # fmt: skip
    return rows


def _removed_by_kind(con: Any, views: list[str], stages: list[str]) -> list[dict[str, Any]]:
    """Records removed by each stage, by kind and reason, when the stats count kinds other than files."""
    if (
        not _has(con, views, "stats", "kind")
        or not con.sql("select 1 from stats where kind <> 'file' limit 1").fetchall()
    ):
        return []
    return [r for r in _rows(con, KINDS_REMOVED_SQL) if r["stage"] in stages]


def _has(con: Any, views: list[str], view: str, column: str) -> bool:
    return view in views and column in _columns(con, view)


def _columns(con: Any, view: str) -> set[str]:
    return {r[0] for r in con.sql(f'describe "{view}"').fetchall()}


def _filter_scores(con: Any, views: list[str], stages: list[str], out: Path) -> list[dict[str, Any]]:
    """For each filter rule with a number: its score's histogram over the files filter saw (its removed rows
    and the kept rows of the first later stage that wrote them) and the threshold."""
    config = _config(out, "filter")
    written = [s for s in stages[stages.index("filter") :] if s in views] if "filter" in stages else []
    kept = next((s for s in written if s != "filter" or not (out / STATE / "filter" / FUSED).exists()), None)
    if config is None or kept is None:
        return []
    from stackcurate.stages.filter import parse_overrides
    from stackcurate.stages.filter.rules import load_rule_set

    settings = config["config"]
    rules = load_rule_set(settings["rules"], parse_overrides(tuple(settings.get("overrides") or ())))
    sources = [kept] + (["filter_removed"] if "filter_removed" in views else [])
    found = []
    for rule in rules.rules:
        if not rule.enabled or not isinstance(rule.value, int | float) or rule.op not in ("<", "<=", ">", ">="):
            continue
        if not all(rule.score in _columns(con, v) for v in sources):
            continue
        union = " union all ".join(f'select "{rule.score}"::double as v from "{v}"' for v in sources)
        values = np.array([r[0] for r in con.sql(f"select v from ({union}) where isfinite(v)").fetchall()])
        if not len(values):
            continue
        lo, hi = min(np.quantile(values, 0.01), rule.value), max(np.quantile(values, 0.99), rule.value)
        counts, edges = np.histogram(np.clip(values, lo, hi), bins=HISTOGRAM_BINS, range=(lo, hi or 1.0))
        found.append({"rule": rule.name, "score": rule.score, "op": rule.op, "threshold": float(rule.value),
                      "files": int(len(values)), "counts": counts.tolist(), "edges": edges.tolist()})  # fmt: skip
    return found


def _largest_clusters(con: Any, views: list[str], stages: list[str]) -> list[dict[str, Any]]:
    """The largest dedup clusters with the file kept for each (from the first later stage that wrote rows)."""
    after = stages[stages.index("dedup") + 1 :] if "dedup" in stages else []
    keeper = next((s for s in ["dedup", *after] if s in views and "path" in _columns(con, s)), None)
    if "dedup_clusters" not in views or keeper is None:
        return []
    repo = "k.repo_name" if "repo_name" in _columns(con, keeper) else "null"
    return _rows(
        con,
        f"""select c.cluster_id, any_value(c.cluster_size) as size,
        count(*) filter (reason = 'exact_duplicate') as exact, count(*) filter (reason = 'near_duplicate') as near,
        any_value(k.path) as kept_path, any_value({repo}) as kept_repo
        from dedup_clusters c left join "{keeper}" k on k.doc_id = c.kept_doc_id
        group by c.cluster_id order by size desc, c.cluster_id limit {TOP}""",
    )


def _opt_out(totals: dict[str, dict[str, float]], reasons: list[dict[str, Any]]) -> dict[str, int]:
    """What the opt-out lists removed: graph's origins left out before the walk, license's files."""
    removed = [r for r in reasons if r["stage"] == "license" and r["reason"] == "opt_out"]
    return {"files": sum(int(r["docs"] or 0) for r in removed), "bytes": sum(int(r["bytes"] or 0) for r in removed),
            "origins": int(totals.get("graph", {}).get("origins_opted_out", 0))}  # fmt: skip


def _license_ids(con: Any, views: list[str], stages: list[str]) -> list[dict[str, Any]]:
    """The licenses detected in the final rows' repositories, the most frequent first."""
    final = next((s for s in reversed(stages) if s in views and "detected_licenses" in _columns(con, s)), None)
    if final is None:
        return []
    return _rows(
        con,
        f"""select license, count(*) as files from (select unnest(detected_licenses) as license
        from "{final}") group by all order by files desc, license limit {TOP}""",
    )


def _licenses(con: Any, views: list[str], stages: list[str]) -> list[dict[str, Any]]:
    final = next((s for s in reversed(stages) if s in views and "license_type" in _columns(con, s)), None)
    if final is None:
        return []
    return _rows(con, f'select license_type, count(*) as docs from "{final}" group by all order by docs desc')


def _config(out: Path, stage: str) -> Any:
    path = out / STATE / stage / CONFIG
    return yaml.safe_load(path.read_text()) if path.exists() else None


def _versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found

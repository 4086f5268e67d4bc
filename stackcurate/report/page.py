"""The report's page: one static HTML file that opens offline (inline SVG charts, no script, no request)."""

import html
import re
from typing import Any

import yaml

from stackcurate.report.summary import COUNTS, TOP, runs_line


def _bars(title: str, items: list[tuple[str, float]], unit: str = "") -> str:
    """A horizontal bar chart as inline SVG (one <rect> per bar)."""
    items = [(label, value) for label, value in items if value][:TOP]
    if not items:
        return f"<h3>{html.escape(title)}</h3><p class=none>nothing to show</p>"
    top, row = max(v for _, v in items), 22
    width, label_w = 760, 230
    marks = []
    for i, (label, value) in enumerate(items):
        w = max(1.0, (width - label_w - 120) * value / top)
        y = i * row
        marks.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{html.escape(str(label)[:36])}</text>'
                     f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" fill="#4878a8"/>'
                     f'<text x="{label_w + w + 6:.1f}" y="{y + 15}">{_amount(value)}{unit}</text>')  # fmt: skip
    svg = (f'<svg class=chart width="{width}" height="{len(items) * row}" font-size="12" '
           f'font-family="sans-serif">{"".join(marks)}</svg>')  # fmt: skip
    return f"<h3>{html.escape(title)}</h3>{svg}"


def _amount(value: float) -> str:
    """A bar's number: whole above 100 (`1,234`), else three significant digits, so that a small run's MB do
    not all read `0`."""
    return f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.3g}"


def _stacked(title: str, rows: dict[str, dict[str, float]], order: list[str], unit: str = "") -> str:
    """Horizontal stacked bars as inline SVG: one bar per label, one coloured segment per part, in `order`."""
    labels = sorted(rows, key=lambda label: -sum(rows[label].values()))[:TOP]
    if not labels:
        return f"<h3>{html.escape(title)}</h3><p class=none>nothing to show</p>"
    colours = ["#4878a8", "#e07b39", "#6aa84f", "#c0392b", "#8e63b5", "#b5a642", "#3fa7a7", "#999999", "#d36ba6",
               "#5d4037"]  # fmt: skip
    top, row, width, label_w = max(sum(rows[label].values()) for label in labels), 22, 760, 150
    marks = []
    for i, label in enumerate(labels):
        y, x = i * row, float(label_w)
        marks.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{html.escape(label[:24])}</text>')
        for k, part in enumerate(order):
            w = (width - label_w - 90) * rows[label].get(part, 0.0) / top
            if w > 0:
                colour, name = colours[k % len(colours)], html.escape(part)
                marks.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" fill="{colour}">'
                             f"<title>{name}</title></rect>")  # fmt: skip
                x += w
        marks.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{_amount(sum(rows[label].values()))}{unit}</text>')
    legend = " ".join(f'<span style="color:{colours[k % len(colours)]}">&#9632;</span> {html.escape(part)}'
                      for k, part in enumerate(order))  # fmt: skip
    svg = (f'<svg class=chart width="{width}" height="{len(labels) * row}" font-size="12" '
           f'font-family="sans-serif">{"".join(marks)}</svg>')  # fmt: skip
    return f"<h3>{html.escape(title)}</h3><p>{legend}</p>{svg}"


def _histogram(score: dict[str, Any]) -> str:
    """One score's histogram as inline SVG, with its threshold as a red line (values past the 1st and 99th
    percentiles are drawn in the edge bins)."""
    counts, edges = score["counts"], score["edges"]
    width, height, top = 560, 120, max(max(counts), 1)
    lo, hi = edges[0], edges[-1]
    step = width / len(counts)
    marks = [f'<rect x="{i * step:.1f}" y="{height - height * c / top:.1f}" width="{step - 1:.1f}" '
             f'height="{height * c / top:.1f}" fill="#4878a8"/>' for i, c in enumerate(counts) if c]  # fmt: skip
    x = width * (score["threshold"] - lo) / ((hi - lo) or 1.0)
    marks.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{height}" stroke="#c0392b" stroke-width="2"/>')
    title = (f"{score['rule']}: {score['score']} {score['op']} {score['threshold']:g} removes "
             f"({score['files']:,} files, {lo:.3g} to {hi:.3g})")  # fmt: skip
    svg = f'<svg class=chart width="{width}" height="{height}">{"".join(marks)}</svg>'
    return f"<h3>{html.escape(title)}</h3>{svg}"


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def page(summary: dict[str, Any]) -> str:
    """The report as one HTML page with inline SVG charts and nothing fetched from elsewhere."""
    funnel = summary["funnel"]
    parts = [f"<h1>stackcurate run report</h1><p>{html.escape(summary['run']['out'])} · written "
             f"{summary['run']['written']} · {runs_line(summary['run']['run_ids'])}</p>"]  # fmt: skip
    if stale := summary["run"].get("stale"):
        each = ", ".join(f"{s['stage']} ({s['why']})" for s in stale)
        parts.append(f"<p><strong>Stale</strong>: {html.escape(each)}: made from an output rerun since; the "
                     "numbers below mix runs until they are rerun.</p>")  # fmt: skip
    kept = [(f["stage"], f["docs_out"]) for f in funnel]
    mb = [(f["stage"], f["bytes_out"] / 1e6) for f in funnel]
    table = _table(funnel, ["stage", *COUNTS, "seconds"])
    parts.append("<h2>Funnel</h2>" + _bars("Files kept", kept) + _bars("MB kept", mb, " MB") + table)
    if summary["tokens"]:
        parts.append(f"<p>Tokens in the Megatron shards: <b>{summary['tokens']:,}</b></p>")
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for r in summary["languages"]:
        if r["bytes"]:
            by_stage.setdefault(r["stage"], []).append(r)
    ordered = [stage for stage in summary["stages"] if stage in by_stage]  # pipeline order
    if ordered:
        parts.append("<h2>Languages</h2>")
        for stage in dict.fromkeys([ordered[0], ordered[-1]]):  # the first stage that knows them, and the last
            mb = [(r["language"], r["bytes"] / 1e6) for r in by_stage[stage]]
            parts.append(_bars(f"MB per language after {stage}", mb, " MB"))
    final = ordered[-1] if ordered else None
    if summary["removed_by_language"] and final is not None:
        # each language's MB in: what the last stage kept, and what each stage removed, stacked
        stacks: dict[str, dict[str, float]] = {}
        for r in by_stage[final]:
            stacks.setdefault(r["language"], {})[f"kept after {final}"] = r["bytes"] / 1e6
        removed = [r for r in summary["removed_by_language"] if r["stage"] in summary["stages"] and r["bytes"]]
        for r in removed:
            stacks.setdefault(r["language"], {})[f"removed by {r['stage']}"] = r["bytes"] / 1e6
        order = [f"kept after {final}"] + [f"removed by {s}" for s in summary["stages"]
                                            if any(r["stage"] == s for r in removed)]  # fmt: skip
        parts.append(_stacked("MB per language: kept, and removed by each stage", stacks, order, " MB"))
    if summary["tokens_by_language"]:
        parts.append(_bars("Tokens per language (the Megatron shards)",
                           [(r["language"], r["tokens"]) for r in summary["tokens_by_language"]]))  # fmt: skip
    kinds = summary.get("tokens_by_kind") or []
    if len(kinds) > 1 or summary.get("removed_by_kind"):
        parts.append("<h2>Kinds of record</h2>" + _bars("Tokens per kind (the Megatron shards, epochs included)",
                                                        [(r["kind"], r["tokens"]) for r in kinds])
                     + _table(kinds, ["kind", "documents", "tokens"])
                     + _table(summary.get("kinds_by_stage") or [],
                              ["stage", "kind", "docs_in", "docs_out", "docs_removed", "docs_error"])
                     + _table(summary.get("removed_by_kind") or [],
                              ["kind", "stage", "reason", "records"]))  # fmt: skip
    parts.append("<h2>Removed, by stage and reason</h2>")
    for stage in summary["stages"]:
        rows = [r for r in summary["removed_by_reason"] if r["stage"] == stage]
        if rows:
            parts.append(_bars(f"{stage}: files removed by reason", [(r["reason"], r["docs"]) for r in rows]))
            examples = summary["examples"].get(stage, [])
            shown = ["reason", "path", "repo_name", "detail"] + (["line"] if any(r["line"] for r in examples) else [])
            parts.append(_table(examples, shown))
    if summary["filter_scores"]:
        parts.append("<h2>Filter scores and their thresholds</h2>")
        parts += [_histogram(score) for score in summary["filter_scores"]]
    if summary["dedup"]:
        parts.append(
            "<h2>Dedup</h2>" + _bars("Clusters by size", [(r["size"], r["clusters"]) for r in summary["dedup"]])
        )
    if summary["dedup_largest"]:
        columns = ["cluster_id", "size", "exact", "near", "kept_path", "kept_repo"]
        parts.append(
            "<h3>The largest clusters and the file each kept</h3>" + _table(summary["dedup_largest"], columns)
        )
    if summary["licenses"] or "license" in summary["stages"] or "graph" in summary["stages"]:
        types = [(r["license_type"], r["docs"]) for r in summary["licenses"]]
        ids = [(r["license"], r["files"]) for r in summary["license_ids"]]
        removed = [(r["reason"], r["docs"]) for r in summary["removed_by_reason"] if r["stage"] == "license"]
        opt = summary["opt_out"]
        parts.append("<h2>Licenses and opt-out</h2>"
                     f"<p>Opt-out: <b>{opt['origins']:,}</b> origins left out before the graph walk, "
                     f"<b>{opt['files']:,}</b> files ({opt['bytes'] / 1e6:,.2f} MB) of opted-out repositories or "
                     "owners removed by the license stage.</p>"
                     + (_bars("Files by license type (final rows)", types) if types else "")
                     + (_bars("Files removed by the license stage, opt-out apart", removed) if removed else "")
                     + (_bars("Files by detected license", ids) if ids else ""))  # fmt: skip
    if summary["pii"]:
        redacted = [(r["entity"], r["spans"]) for r in summary["pii"] if r["metric"] == "spans_redacted"]
        parts.append("<h2>PII</h2>" + _bars("Spans redacted by entity", redacted)
                     + _table(summary["pii"], ["metric", "entity", "spans"])
                     + _table(summary["pii_detectors"], ["entity", "detector", "spans", "files", "replaced"])
                     + "<h3>Examples (the replacement written; the text is not shown)</h3>"
                     + _table(summary["pii_examples"], ["entity", "detector", "replacement", "path"]))  # fmt: skip
    if summary["decontamination"]:
        hits = [(r["detail"] or r["reason"], r["files"]) for r in summary["decontamination"]]
        parts.append("<h2>Decontamination</h2>" + _bars("Files removed by benchmark and task", hits)
                     + _table(summary["decontamination"], ["reason", "detail", "files"]))  # fmt: skip
    columns = ["stage", "wall_seconds", "mb_in", "mb_per_s", "workers", "mb_per_s_per_core", "own_seconds",
               "peak_worker_mb"]  # fmt: skip
    parts.append("<h2>How each stage ran</h2><p>Wall time is the stage's runs (a fused stage: its group's); "
                 "MB/s per core is MB/s over the workers, one core each; the peak is a worker's largest resident "
                 "memory over one shard.</p>" + _table(summary["performance"], columns)
                 + _bars("Wall seconds per stage", [(p["stage"], p["wall_seconds"]) for p in summary["performance"]],
                         " s"))  # fmt: skip
    if summary["errors_by_reason"]:
        parts.append("<h3>Errors by reason</h3>" + _table(summary["errors_by_reason"], ["stage", "reason", "docs"]))
        for stage, rows in summary["error_examples"].items():
            if rows:
                parts.append(f"<h3>{html.escape(stage)}: examples of errors</h3>"
                             + _table(rows, ["reason", "origin", "detail"]))  # fmt: skip
    if index := summary.get("attribution"):
        folder = html.escape(index["folder"])
        parts.append(f"<h2>Attribution index</h2><p>{folder}: {index['tokens']:,} tokens of {index['files']:,} files "
                     f"in {index['parts']} parts. Which training files a generation copies: <code>stackcurate "
                     f"attribute {folder} --file generated.txt</code>; over HTTP (llm-vscode's attribution, a page): "
                     f"<code>stackcurate serve {folder}</code>.</p>")  # fmt: skip
    if evaluation := summary.get("evaluation"):
        columns = ["where", "step", "benchmark", *sorted({k for r in evaluation for k in r if k.startswith("pass@")}),
                   "exact_match"]  # fmt: skip
        shown = [{k: f"{v:.4f}" if isinstance(v, float) else v for k, v in r.items()} for r in evaluation]
        parts.append("<h2>Evaluation</h2><p>pass@k of the models trained on this run (<code>stackcurate eval</code>, "
                     "<code>stackcurate train --eval</code>), each program run in a sandbox.</p>"
                     + _table(shown, columns))  # fmt: skip
    parts.append("<h2>Configuration and versions</h2><pre>"
                 + html.escape(yaml.safe_dump({"versions": summary["run"]["versions"], "config": summary["config"]},
                                              sort_keys=False)) + "</pre>")  # fmt: skip
    return _document("stackcurate report", parts)


STYLE = ("body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}table{border-collapse:collapse;"
         "font-size:12px;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
         "pre{background:#f6f6f6;padding:1em;font-size:11px;overflow:auto}.none{color:#888}")  # fmt: skip


def _document(title: str, parts: list[str]) -> str:
    numbers = iter(range(1, 100))  # the sections a run has, numbered in order (a stage that removed nothing has none)
    body = re.sub("<h2>", lambda _: f"<h2>{next(numbers)}. ", "".join(parts))
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title><style>{STYLE}"
            f"</style></head><body>{body}</body></html>\n")  # fmt: skip


def comparison(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """Several runs on one page (curation variants): documents kept by each stage, tokens, and the pass@k of
    the models trained on each, side by side."""
    names = [name for name, _ in runs]
    parts = ["<h1>stackcurate: runs compared</h1><p>" + " · ".join(html.escape(n) for n in names) + "</p>"]
    stages = list(dict.fromkeys(stage for _, s in runs for stage in s["stages"]))
    kept = [{"stage": stage, **{name: next((f["docs_out"] for f in s["funnel"] if f["stage"] == stage), None)
                                for name, s in runs}} for stage in stages]  # fmt: skip
    kept.append({"stage": "tokens", **{name: s["tokens"] or None for name, s in runs}})
    parts.append("<h2>Documents kept by each stage</h2>" + _table(kept, ["stage", *names]))
    scores: dict[tuple[Any, ...], dict[str, Any]] = {}
    for name, s in runs:
        for r in s.get("evaluation") or []:
            for metric in sorted(k for k in r if k.startswith("pass@") or k == "exact_match"):
                if r[metric] is not None:
                    key = (r["benchmark"], r["where"], r["step"], metric)
                    row = scores.setdefault(key, dict(zip(("benchmark", "where", "step", "metric"), key, strict=True)))
                    row[name] = f"{r[metric]:.4f}"
    if scores:
        parts.append("<h2>Evaluation</h2>" + _table(list(scores.values()), ["benchmark", "where", "step", "metric",
                                                                             *names]))  # fmt: skip
    return _document("stackcurate: runs compared", parts)

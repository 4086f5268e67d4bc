"""The run report: what a run did, for the people who must sign off a dataset.

`stackcurate report OUT` (also run at the end of `stackcurate run`) writes `OUT/report/`
(`stackcurate report A B ...` also writes `A/report/compare.html`, the runs side by side):
- `summary.json`: every number of the page, from the run's own `_stats/` and `_removed/` through DuckDB (the
  views of `stackcurate query`), so it always agrees with `stackcurate stats`;
- `index.html`: one static page that opens offline: charts are inline SVG (no script, no font or style sheet
  from elsewhere, no request);
- `README.md`: a Hugging Face dataset card (YAML header: license, languages, size category, task category,
  `configs` naming the final Parquet files) describing the curation steps that ran, with their numbers.

Only the stages a run has are reported, in pipeline order.
"""

import json
from pathlib import Path

from stackcurate.report.card import card
from stackcurate.report.page import comparison, page
from stackcurate.report.summary import REPORT_DIR, summarize

__all__ = ["card", "compare_runs", "page", "summarize", "write_report"]


def write_report(out: str | Path) -> Path:
    """Write `OUT/report/` (summary.json, index.html, README.md); its folder."""
    summary = summarize(out)
    folder = Path(out) / REPORT_DIR
    folder.mkdir(exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (folder / "index.html").write_text(page(summary))
    (folder / "README.md").write_text(card(summary))
    return folder


def compare_runs(outs: list[str | Path]) -> Path:
    """Each run's report, then one page of them all side by side in the first's `report/compare.html`."""
    runs = []
    for out in outs:
        folder = write_report(out)
        runs.append((str(out), json.loads((folder / "summary.json").read_text())))
    target = Path(outs[0]) / REPORT_DIR / "compare.html"
    target.write_text(comparison(runs))
    return target

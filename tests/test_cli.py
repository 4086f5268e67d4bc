"""The CLI as a user meets it: one-line errors, dry runs, queries, config files."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import make_table, stack_v2_layout

from stackcurate.cli import main

FILES = [("/a.py", b"import os\n"), ("/b.md", b"# Title\n"), ("/c.bin", b"\x00\x01")]


def _ingest_argv(tmp_path, *extra: str) -> list[str]:
    stack_v2_layout(tmp_path / "store", FILES)
    return [
        "ingest",
        "--out",
        str(tmp_path / "out"),
        "--metadata",
        str(tmp_path / "store/metadata/*.parquet"),
        "--content",
        str(tmp_path / "store"),
        *extra,
    ]


@pytest.fixture
def ingested(tmp_path):
    assert main(_ingest_argv(tmp_path, "--runner", "local", "--no-progress")) == 0
    return tmp_path / "out"


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("stackcurate: error: ")
    assert not any("Traceback" in line for line in err)
    return err[-1]


def test_ingest_without_input_says_what_to_pass(tmp_path, capsys):
    assert "--repos" in _one_line_error(capsys, ["ingest", "--out", str(tmp_path / "o"), "--runner", "local"])


def test_missing_glob_is_one_line(tmp_path, capsys):
    line = _one_line_error(
        capsys, ["ingest", "--out", str(tmp_path / "o"), "--bundles", str(tmp_path / "no/*.tar.gz")]
    )
    assert "no bundle file matches" in line


def test_a_stage_run_alone_without_its_predecessor_says_what_to_run(tmp_path, capsys):
    out = tmp_path / "o"
    line = _one_line_error(capsys, ["license", "--out", str(out)])
    assert line.endswith(
        f"license reads the output of ingest, which is not in {out}: run `stackcurate ingest --out {out}` first, "
        "or pass --input"
    )
    (out / "ingest").mkdir(parents=True)  # ingest ran, license did not: language does not skip it
    line = _one_line_error(capsys, ["language", "--out", str(out)])
    assert "language reads the output of license" in line and "stackcurate license" in line


def test_typo_in_config_file_gets_a_suggestion(tmp_path, capsys):
    cfg = tmp_path / "ingest.yaml"
    cfg.write_text("max_byte: 10\n")
    line = _one_line_error(capsys, ["ingest", "--out", str(tmp_path / "o"), "--config", str(cfg)])
    assert "did you mean 'max_bytes'" in line


def test_bad_flag_type_is_one_line(tmp_path, capsys):
    line = _one_line_error(
        capsys, ["ingest", "--out", str(tmp_path / "o"), "--repos", str(tmp_path), "--max-bytes", "lots"]
    )
    assert "max_bytes" in line and "int" in line


def test_pipeline_typo_and_order_errors(tmp_path, capsys):
    bad = tmp_path / "p.yaml"
    bad.write_text("out: o\nstages:\n  languag: {}\n")
    assert "unknown stage 'languag'" in _one_line_error(capsys, ["run", str(bad)])
    bad.write_text("out: o\nstages:\n  language: {}\n  ingest: {repos: [.]}\n")
    assert "pipeline order" in _one_line_error(capsys, ["run", str(bad)])
    assert "does not exist" in _one_line_error(capsys, ["run", str(tmp_path / "missing.yaml")])


def test_dry_run_writes_nothing(tmp_path, capsys):
    assert main(_ingest_argv(tmp_path, "--dry-run")) == 0
    captured = capsys.readouterr()
    assert "1 stack_v2 shard(s)" in captured.out and "max_bytes: 1000000" in captured.err
    assert not (tmp_path / "out").exists()


def test_query_views_and_formats(ingested, capsys):
    capsys.readouterr()
    assert main(["query", str(ingested)]) == 0
    assert capsys.readouterr().out.split() == ["ingest", "ingest_removed", "ingest_errors", "stats"]
    assert main(["query", str(ingested), "select path, reason from ingest_removed", "--format", "json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"path": "/c.bin", "reason": "binary"}
    ]
    assert main(["query", str(ingested), "select count(*) as n from ingest", "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ['"n"', "2"]


def test_query_errors_are_one_line(ingested, tmp_path, capsys):
    assert "views: ingest" in _one_line_error(capsys, ["query", str(ingested), "select * from nope"])
    assert "not a local output folder" in _one_line_error(capsys, ["query", str(tmp_path / "nothing"), "select 1"])


def test_stats_counts_add_up(ingested, capsys):
    capsys.readouterr()
    assert main(["stats", str(ingested)]) == 0
    out = capsys.readouterr().out
    assert "docs_in" in out and "binary" in out
    from stackcurate.query import run_query

    rows = dict(run_query(ingested, "select metric, sum(value) from stats where stage='ingest' group by 1").fetchall())
    assert rows["docs_in"] == 3 and rows["docs_out"] == 2 and rows["docs_removed"] == 1
    assert rows["bytes_out"] == len(b"import os\n") + len(b"# Title\n")


def test_resolved_config_is_saved_next_to_output(ingested):
    saved = (Path(ingested) / "ingest" / "_config.yaml").read_text()
    assert "max_bytes: 1000000" in saved and "stage: ingest" in saved


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["filter", "--rules", "filters/nope.yaml"], "filters/nope.yaml does not exist"),
        (["filter", "--rules", "filters/starcoder2_v1.yaml", "--overrides", "bogus=3"], "unknown rule 'bogus'"),
        (["decontaminate", "--benchmarks", "nope.jsonl"], "benchmark file nope.jsonl does not exist"),
        (["license", "--keep", "free"], "unknown license type 'free'"),
    ],
)
def test_stage_config_errors_come_before_any_work(ingested, capsys, argv, message):
    """A bad setting is one line, even with an earlier output in the way and before any worker starts."""
    line = _one_line_error(capsys, [argv[0], "--out", str(ingested), "--runner", "ray", *argv[1:]])
    assert message in line
    assert not (ingested / argv[0]).exists()


def test_relative_paths_resolve_on_the_driver(tmp_path, monkeypatch):
    """Workers on other nodes run in other folders: a flag's relative path resolves against the working folder
    and a --config file's against that file's folder, before any worker sees them."""
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "py.txt").write_text("Python\n")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "language.yaml").write_text("languages: ../lists/py.txt\n")
    records = tmp_path / "in"
    records.mkdir()
    pq.write_table(make_table([("/a.py", "import os\n"), ("/b.c", "int x;\n")]), records / "00000.parquet")
    monkeypatch.chdir(tmp_path)
    for extra in (["--languages", "lists/py.txt"], ["--config", "conf/language.yaml"]):
        out = tmp_path / f"out{len(extra[1])}"
        argv = ["language", "--input", str(records), "--out", str(out), "--runner", "local", "--no-progress"]
        assert main([*argv, *extra]) == 0
        config = (out / "language" / "_config.yaml").read_text()
        assert f"languages: {tmp_path / 'lists' / 'py.txt'}" in config
        assert pq.read_table(out / "language" / "00000.parquet").column("path").to_pylist() == ["/a.py"]


def test_dry_run_checks_every_stage_and_prints_the_fused_groups(tmp_path, capsys):
    root = Path(__file__).resolve().parents[1]
    assert main(["run", str(root / "pipelines" / "demo.yaml"), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "graph",
        "ingest + license + language + filter + decontaminate: one pass per shard",
        "dedup + pii: one pass per shard",
        "format",
        "tokenize",
    ]
    assert not (tmp_path / "o").exists()
    bad = tmp_path / "p.yaml"
    bad.write_text(f"out: o\nstages:\n  ingest: {{repos: [.]}}\n  filter: {{rules: {root}/filters/nope.yaml}}\n")
    assert "nope.yaml does not exist" in _one_line_error(capsys, ["run", str(bad), "--dry-run"])

"""The CLI as a user meets it: one-line errors, dry runs, queries, config files, help texts, stats."""

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import make_table, stack_v2_layout, state, table_dir

import stackcurate
from stackcurate.cli import main
from stackcurate.core.schema import STATS_SCHEMA
from stackcurate.stages import STAGE_ORDER, get_stage

# The top-level --help, as a user sees it in a 100-column terminal. After a deliberate change, rewrite it with
#   STACKCURATE_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/test_cli.py -k snapshot
# and review the diff of this file.
HELP_SNAPSHOT = Path(__file__).parent / "snapshots" / "stackcurate_help.txt"

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
    assert captured.out.splitlines()[-1] == "would run"
    assert not (tmp_path / "out").exists()


def test_a_stage_dry_run_after_its_run_says_it_is_complete(ingested, tmp_path, capsys):
    capsys.readouterr()
    assert main(_ingest_argv(tmp_path, "--dry-run")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "complete, would be reused"
    assert main(_ingest_argv(tmp_path, "--dry-run", "--max-bytes", "5")) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("holds output of a different input or config")


def test_the_config_is_printed_only_with_verbose_and_always_saved(tmp_path, capsys):
    assert main(_ingest_argv(tmp_path, "--runner", "local", "--no-progress")) == 0
    assert "max_bytes" not in capsys.readouterr().err
    assert "max_bytes: 1000000" in (tmp_path / "out" / "_state" / "ingest" / "config.yaml").read_text()
    for verbose in (["-v"], []):  # before the command, or after it
        argv = _ingest_argv(tmp_path, "--runner", "local", "--no-progress")
        argv = [*verbose, *argv] if verbose else [*argv, "--verbose"]
        assert main(argv) == 0
        assert "max_bytes: 1000000" in capsys.readouterr().err


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


def test_query_takes_its_sql_after_the_flags_too(ingested, capsys):
    """As a user typed it: `stackcurate query OUT --format csv "select ..."`."""
    capsys.readouterr()
    assert main(["query", str(ingested), "--format", "csv", "select count(*) as n from ingest"]) == 0
    assert capsys.readouterr().out.split() == ['"n"', "2"]
    for argv, prog, extra in (
        (["stats", str(ingested), "extra"], "stackcurate stats", "extra"),
        (["query", str(ingested), "--format", "csv", "select 1", "more"], "stackcurate query", "more"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1] == f"{prog}: error: unrecognized arguments: {extra}"


def test_query_errors_keep_duckdb_s_hint_and_list_the_views_apart(ingested, tmp_path, capsys):
    assert main(["query", str(ingested), "select * from ingest_remove"]) == 2
    first, second = capsys.readouterr().err.strip().splitlines()
    assert first.startswith("stackcurate: error: query failed: Catalog Error: Table with name ingest_remove")
    assert first.endswith('Did you mean "ingest_removed"?')
    assert second == "views: ingest, ingest_removed, ingest_errors, stats"
    assert main(["query", str(ingested), "select nope from ingest"]) == 2
    first = capsys.readouterr().err.strip().splitlines()[0]
    assert 'Referenced column "nope" not found' in first and "Candidate bindings" in first
    assert "not a local output folder" in _one_line_error(capsys, ["query", str(tmp_path / "nothing"), "select 1"])


def test_stats_counts_add_up(ingested, capsys):
    capsys.readouterr()
    assert main(["stats", str(ingested)]) == 0
    table, reasons = capsys.readouterr().out.split("\n\n")
    # /a.py and /b.md kept (18 bytes), /c.bin removed: 2 of 3 kept
    assert table.splitlines()[1].split() == ["ingest", "3", "2", "1", "0", "66.7", "20", "B", "18", "B"]
    assert reasons.splitlines()[-1].split() == ["ingest", "removed", "binary", "1", "2", "B"]
    assert "removed and errors, by reason:" in reasons
    from stackcurate.query import run_query

    rows = dict(run_query(ingested, "select metric, sum(value) from stats where stage='ingest' group by 1").fetchall())
    assert rows["docs_in"] == 3 and rows["docs_out"] == 2 and rows["docs_removed"] == 1
    assert rows["bytes_out"] == len(b"import os\n") + len(b"# Title\n")


def test_resolved_config_is_saved_next_to_output(ingested):
    saved = (Path(ingested) / "_state" / "ingest" / "config.yaml").read_text()
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
        config = (out / "_state" / "language" / "config.yaml").read_text()
        assert f"languages: {tmp_path / 'lists' / 'py.txt'}" in config
        assert pq.read_table(out / "language" / "00000.parquet").column("path").to_pylist() == ["/a.py"]


def test_dry_run_checks_every_stage_and_prints_the_fused_groups(tmp_path, capsys):
    root = Path(__file__).resolve().parents[1]
    assert main(["run", str(root / "pipelines" / "demo.yaml"), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "graph: would run",
        "ingest + license + language + filter + decontaminate (one pass per shard): would run",
        "dedup + pii (one pass per shard): would run",
        "format: would run",
        "tokenize: would run",
        "index: would run",
    ]
    assert not (tmp_path / "o").exists()
    bad = tmp_path / "p.yaml"
    bad.write_text(f"out: o\nstages:\n  ingest: {{repos: [.]}}\n  filter: {{rules: {root}/filters/nope.yaml}}\n")
    assert "nope.yaml does not exist" in _one_line_error(capsys, ["run", str(bad), "--dry-run"])


def _help(capsys, monkeypatch, argv: list[str]) -> str:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps help to the terminal's width
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_matches_its_snapshot(capsys, monkeypatch):
    text = _help(capsys, monkeypatch, [])
    if os.environ.get("STACKCURATE_UPDATE_SNAPSHOTS"):
        HELP_SNAPSHOT.parent.mkdir(exist_ok=True)
        HELP_SNAPSHOT.write_text(text)
    assert text == HELP_SNAPSHOT.read_text(), (
        f"`stackcurate --help` changed; if on purpose, update {HELP_SNAPSHOT.name} with "
        "STACKCURATE_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/test_cli.py -k snapshot"
    )
    assert text.splitlines()[2].startswith("Curate source code into training data")


COMMANDS = [[name] for name in STAGE_ORDER] + [
    ["run"], ["query"], ["report"], ["stats"], ["purge"], ["sample"], ["pii-model"], ["pii-model", "train"],
    ["pii-model", "export"], ["pii-model", "eval"], ["tokenizer"], ["tokenizer", "train"], ["index"], ["attribute"],
    ["serve"], ["eval"],
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_help_is_written_for_users(capsys, monkeypatch, command):
    """No markdown, no module or schema names, no default printed as None or twice."""
    text = _help(capsys, monkeypatch, command)
    for internal in ("**", "schema.", ".py", "Config options", "(default: None)", "(default: '')"):
        assert internal not in text, internal
    assert max(len(line) for line in text.splitlines()) <= 120  # descriptions are not wrapped by argparse
    joined = " ".join(text.split())  # an option's help may wrap between its two defaults
    assert not re.search(r"\(default[^)]*\) \(default:", joined)  # `(default: system temp) (default: ...)`
    if command[0] in STAGE_ORDER:
        assert " ".join(get_stage(command[0]).description().split()[:8]) in joined


def test_a_default_the_help_explains_is_not_repeated(capsys, monkeypatch):
    text = " ".join(_help(capsys, monkeypatch, ["ingest"]).split())
    assert (
        "--tmp-dir TMP_DIR scratch folder for unpacking git-bare bundles (default: system temp) --only-names" in text
    )
    assert "--max-bytes MAX_BYTES" in text and "(default: 1000000)" in text


def test_version_is_the_package_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    version = capsys.readouterr().out.strip()
    assert (
        version
        == f"stackcurate {stackcurate.__version__}"
        == f"stackcurate {importlib.metadata.version('stackcurate')}"
    )


@pytest.mark.parametrize(
    ("argv", "prog", "message"),
    [
        (["ingest", "--repo", "x"], "stackcurate ingest", "unrecognized argument --repo; did you mean --repos?"),
        (["ingest", "--out", "OUT", "--repos=x", "--max-byte", "3"], "stackcurate ingest",
         "unrecognized argument --max-byte; did you mean --max-bytes?"),
        (["run", "p.yaml", "--dry"], "stackcurate run", "unrecognized argument --dry; did you mean --dry-run?"),
        (["pii-model", "eval", "--detector", "patterns"], "stackcurate pii-model eval",
         "unrecognized argument --detector; did you mean --detectors?"),
        (["ingset", "--out", "OUT"], "stackcurate", "unknown command 'ingset'; did you mean ingest?"),
    ],
)  # fmt: skip
def test_an_unknown_or_abbreviated_flag_names_the_closest_one(tmp_path, capsys, argv, prog, message):
    """Abbreviations are not taken (`--repo` for `--repos`); the error shows the command's own usage."""
    argv = [str(tmp_path / "o") if a == "OUT" else a for a in argv]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    usage, error = capsys.readouterr().err.splitlines()
    assert usage.startswith(f"usage: {prog} ") and usage.endswith(f"({prog} --help lists the options)")
    assert error == f"{prog}: error: {message}"
    assert not (tmp_path / "o").exists()


def _stats_rows(stage_dir: Path, rows: list[tuple[str, str | None, float]]) -> None:
    """A stage folder holding only stats: `(metric, reason, value)` rows."""
    table_dir(stage_dir, "stats").mkdir(parents=True)
    state(stage_dir, "plan.json").parent.mkdir(parents=True)
    state(stage_dir, "plan.json").write_text("{}")
    table = pa.Table.from_pylist(
        [{"run_id": "r", "stage": stage_dir.name, "shard": 0, "metric": m, "language": None, "reason": r,
          "value": v, "unit": m.split("_")[0]} for m, r, v in rows],
        schema=STATS_SCHEMA,
    )  # fmt: skip
    pq.write_table(table, table_dir(stage_dir, "stats") / "00000.parquet")


def test_stats_shows_tokens_pii_spans_and_bytes_in_pipeline_order(tmp_path, capsys):
    out = tmp_path / "run"
    _stats_rows(out / "tokenize", [("docs_in", None, 4), ("docs_out", None, 4), ("bytes_in", None, 2_500_000),
                                   ("tokens", None, 1234)])  # fmt: skip
    _stats_rows(out / "pii", [("docs_in", None, 4), ("docs_out", None, 4), ("bytes_in", None, 3000),
                              ("bytes_out", None, 2900), ("spans_redacted", "EMAIL", 3),
                              ("spans_detected_only", "USERNAME", 2), ("spans_spared", "EMAIL", 7)])  # fmt: skip
    _stats_rows(out / "license_scan", [("docs_in", None, 9), ("docs_out", None, 1)])  # a pass of license's own
    _stats_rows(out / "ingest", [("docs_in", None, 10), ("docs_out", None, 5), ("docs_removed", "binary", 4),
                                 ("docs_error", "missing_blob", 1), ("bytes_in", None, 10_000),
                                 ("bytes_out", None, 3000), ("bytes_removed", "binary", 7000)])  # fmt: skip
    _stats_rows(out / "format", [("docs_in", None, 4), ("docs_out", None, 2), ("bytes_out", None, 2900)])
    (out / "ingest").mkdir()
    pq.write_table(make_table([("/a.py", "x = 1\n")]), out / "ingest" / "00000.parquet")
    assert main(["stats", str(out)]) == 0
    table, reasons = capsys.readouterr().out.split("\n\n")
    lines = table.splitlines()
    assert lines[0].split() == ["stage", "docs", "in", "kept", "removed", "errors", "kept", "%", "bytes", "in",
                                "bytes", "out"]  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == ["ingest", "pii", "format", "tokenize"]  # no license_scan
    assert lines[1].split() == ["ingest", "10", "5", "4", "1", "50.0", "10.0", "kB", "3.0", "kB"]
    assert lines[2].split()[1:10] == ["4", "4", "0", "0", "100.0", "3.0", "kB", "2.9", "kB"]
    assert lines[2].endswith("5 PII spans (3 redacted, 2 detected only)")
    assert lines[3].endswith("4 files grouped into 2 documents")  # not 2 of 4 lost
    assert lines[4].split()[5:] == ["100.0", "2.5", "MB", "-", "1,234", "tokens"]  # token rows carry no bytes
    assert [line.split() for line in reasons.splitlines()[1:]] == [
        ["stage", "removed/error", "reason", "docs", "bytes"],
        ["ingest", "removed", "binary", "4", "7.0", "kB"],
        ["ingest", "error", "missing_blob", "1", "-"],
    ]


def test_stats_says_when_weights_repeat_documents(tmp_path, capsys):
    out = tmp_path / "run"
    _stats_rows(out / "tokenize", [("docs_in", None, 41), ("docs_out", None, 51), ("docs_removed", "kind_weight", 3),
                                   ("tokens", None, 900)])  # fmt: skip
    (out / "tokenize").mkdir()
    pq.write_table(make_table([("/a.py", "x = 1\n")]), out / "tokenize" / "00000.parquet")
    assert main(["stats", str(out)]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.endswith("900 tokens; 38 documents written 51 times (the kinds' weights)")


def test_stats_piped_into_head_ends_quietly(tmp_path):
    out = tmp_path / "run"
    _stats_rows(out / "ingest", [("docs_in", None, 10), ("docs_out", None, 5)])
    _stats_rows(out / "pii", [("docs_in", None, 5), ("docs_out", None, 5)])
    (out / "pii").mkdir()
    pq.write_table(make_table([("/a.py", "x = 1\n")]), out / "pii" / "00000.parquet")
    # `head -c 0` leaves at once: stats writes into a pipe nobody reads
    command = f"{shlex.quote(sys.executable)} -m stackcurate.cli stats {shlex.quote(str(out))} | head -c 0"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_second_run_into_the_same_folder_is_refused_and_a_killed_one_blocks_nothing(tmp_path, capsys):
    """Two terminals, one --out: the second run stops in one line naming the first; once the first is killed
    (its lock goes with its process, its _LOCK file stays), a rerun goes ahead."""
    argv = _ingest_argv(tmp_path, "--runner", "local", "--no-progress")
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from stackcurate.core.layout import run_lock\n"
         "with run_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(120)", str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        error = _one_line_error(capsys, argv)
        assert re.fullmatch(
            rf"stackcurate: error: {re.escape(str(out))} is being written by process {holder.pid} on \S+ since "
            r"\d\d:\d\d:\d\d \(`stackcurate .*`\); wait for it to finish \(or stop it\), then rerun",
            error,
        ), error
    finally:
        holder.kill()
        holder.wait()
    assert (out / "_LOCK").exists()
    assert main(argv) == 0
    assert "ingest: 3 in, 2 kept" in capsys.readouterr().out


def test_progress_bars_only_on_a_terminal(tmp_path):
    """`stackcurate ... 2> log`: no bars in the file (their redraws ran together into lines of several KB)."""
    argv = _ingest_argv(tmp_path, "--runner", "local")
    done = subprocess.run([sys.executable, "-m", "stackcurate.cli", *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "ingest: 3 in, 2 kept" in done.stdout


def test_output_made_from_an_input_rerun_since_is_flagged_and_refused(tmp_path, capsys):
    """A new user reran ingest alone with --overwrite: stats showed the old downstream rows with no warning, and
    rerunning the next stage named an internal folder rather than what changed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("import os\n")
    (repo / "b.py").write_text("x = 1\n")
    out = str(tmp_path / "out")
    run = ["--runner", "local", "--no-progress"]
    language = ["language", "--out", out, "--input", f"{out}/ingest", *run]
    assert main(["ingest", "--out", out, "--repos", str(repo), *run]) == 0
    assert main(language) == 0
    assert main(["stats", out]) == 0
    assert "stale" not in capsys.readouterr().out

    (repo / "b.py").write_text("x = 2\n")  # the same files, another text: the same plan for language
    assert main(["ingest", "--out", out, "--repos", str(repo), "--overwrite", *run]) == 0
    assert main(["stats", out]) == 0
    assert "stale: language (ingest was rerun after it)" in capsys.readouterr().out
    assert main(["query", out, "select count(*) from language"]) == 0
    assert "warning: stale: language (ingest was rerun after it)" in capsys.readouterr().err
    message = _one_line_error(capsys, language)  # not reused as if it were the language of this ingest
    assert "was made from an earlier output of its input, which was rerun since; pass --overwrite" in message
    assert main([*language, "--overwrite"]) == 0
    assert main(["stats", out]) == 0
    assert "stale" not in capsys.readouterr().out

    (repo / "c.py").write_text("y = 3\n")  # another input: one more row
    assert main(["ingest", "--out", out, "--repos", str(repo), "--overwrite", *run]) == 0
    message = _one_line_error(capsys, language)
    assert "holds output of a different input or config (its input: 1 shards of 2 rows, now 1 of 3)" in message
    message = _one_line_error(capsys, [*language, "--drop-vendor"])
    assert "(drop_vendor: false -> true)" in message

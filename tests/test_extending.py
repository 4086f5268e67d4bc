"""A stage from outside the package, named `module:Class` in a pipeline YAML, runs like a built-in one."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import StageWrapper, data_files, doc_block, read_all, state, table_dir, wrapped_stage

from stackcurate.core.errors import StackcurateError
from stackcurate.core.records import check_columns
from stackcurate.pipeline import RunOptions, load_pipeline, plan_groups, run_pipeline
from stackcurate.stages import get_stage

ROOT = Path(__file__).resolve().parents[1]
LOCAL = RunOptions(runner="local", progress=False)


class _Killed(BaseException):
    """Stands for the process being killed (not an Exception: nothing may catch it)."""


class _DiesOnBoom(StageWrapper):
    """Wraps the outside stage: the run dies when its call gets the rows of `boom.py` (the second repository)."""

    def __call__(self, table: pa.Table) -> object:
        if any(path.endswith("boom.py") for path in table.column("path").to_pylist()):
            raise _Killed
        return self.stage(table)


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The docs' example stage, as its own module `repetition` on sys.path; two repositories; a pipeline that runs
    the stage between language and decontaminate."""
    code = doc_block(ROOT / "docs" / "extending.md", "# repetition.py")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "repetition.py").write_text(code)
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(modules), os.environ.get("PYTHONPATH", "")]))
    big, small = tmp_path / "big", tmp_path / "small"  # the larger repository's shard runs first
    big.mkdir()
    (big / "a.py").write_text("x = 1\n" * 9 + "y = 2\n")
    (big / "b.py").write_text("import os\nprint(os.sep)\nz = [1, 2, 3]\n")
    (big / "c.py").write_text("def f():\n    return 'a much longer file than the small repository holds'\n" * 3)
    small.mkdir()
    (small / "boom.py").write_text("def g():\n    pass\n")
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"solution": "return 'a much longer file than the small repository holds'"}) + "\n")
    (tmp_path / "pipeline.yaml").write_text(
        "out: out\n"
        "stages:\n"
        "  ingest: {repos: [big, small]}\n"
        "  language: {}\n"
        "  repetition:RepetitionStage: {max_share: 0.5}\n"
        f"  decontaminate: {{benchmarks: [{bench}]}}\n"
    )
    return tmp_path


def test_an_outside_stage_runs_fused_between_built_in_stages_and_resumes(outside: Path) -> None:
    pipeline = load_pipeline(outside / "pipeline.yaml")
    names = [[spec.name for spec, _ in group] for group in plan_groups(pipeline.stages)]
    assert names == [["ingest", "language", "repetition", "decontaminate"]]  # one pass per shard

    clean = dataclasses.replace(pipeline, out=str(outside / "clean"))
    results = run_pipeline(clean, LOCAL)
    assert [(r.stage, r.docs_in, r.docs_out) for r in results] == [
        ("ingest", 4, 4), ("language", 4, 4), ("repetition", 4, 3), ("decontaminate", 3, 2),
    ]  # fmt: skip
    removed = read_all(table_dir(outside / "clean" / "repetition", "removed")).to_pylist()
    assert [(r["path"], r["reason"]) for r in removed] == [("/a.py", "repeated_line")]
    assert state(outside / "clean" / "repetition", "FUSED").exists()  # kept rows only at the group's end

    # The run dies in the outside stage's call on the second shard; the rerun does only that shard.
    dying = [(wrapped_stage(s, _DiesOnBoom) if s.name == "repetition" else s, c) for s, c in pipeline.stages]
    with pytest.raises(_Killed):
        run_pipeline(dataclasses.replace(pipeline, stages=dying), LOCAL)
    for stage in ("ingest", "language", "repetition", "decontaminate"):
        assert sorted(p.name for p in state(outside / "out" / stage, "shards").iterdir()) == ["00000.json"]
    again = run_pipeline(pipeline, LOCAL)
    assert {r.shards_run for r in again} == {1}
    assert data_files(outside / "out") == data_files(outside / "clean")


def test_the_cli_runs_an_outside_stage_and_reports_it(outside: Path) -> None:
    """As a user runs it: `stackcurate run` with the stage's folder on PYTHONPATH, then `stackcurate stats`."""
    run = subprocess.run(
        [sys.executable, "-m", "stackcurate.cli", "run", "pipeline.yaml", "--runner", "local", "--no-progress"],
        cwd=outside, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "repetition: 4 in, 3 kept, 1 removed" in run.stdout
    saved = (outside / "out" / "_config.yaml").read_text()
    assert "repetition:RepetitionStage:" in saved  # the resolved pipeline names the stage as the YAML did
    stats = subprocess.run(
        [sys.executable, "-m", "stackcurate.cli", "stats", "out"], cwd=outside, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stderr
    assert "repeated_line" in stats.stdout


def test_an_outside_stage_checks_its_columns_and_names(outside: Path) -> None:
    spec = get_stage("repetition:RepetitionStage")
    assert spec.summary() == "drop files made of one line repeated"
    with pytest.raises(StackcurateError, match="repetition needs the column content, which format does not write"):
        check_columns(spec(spec.config()), pa.schema([("text", pa.string())]), "format")
    with pytest.raises(StackcurateError, match="cannot import no_such_module for the stage no_such_module:X"):
        get_stage("no_such_module:X")
    with pytest.raises(StackcurateError, match="repetition:RepetitionConfig is not a stage"):
        get_stage("repetition:RepetitionConfig")
    with pytest.raises(StackcurateError, match="the name of a built-in stage"):
        get_stage("stackcurate.stages.language:LanguageStage")

"""The golden end-to-end run: the checked-in SWH-shaped input through every stage built so far."""

import json
from pathlib import Path

import duckdb
import pytest

from stackcurate.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("runner", ["local", pytest.param("ray", marks=pytest.mark.ray)])
@pytest.mark.parametrize("keep", [False, True], ids=["fused", "keep-intermediate"])
def test_pipeline_matches_golden(tmp_path, runner, keep, request):
    """The fused run (license to decontaminate in one pass per shard) and the run that also writes every
    stage's kept rows give the golden removed rows, errors and final rows, on either runner."""
    if runner == "ray":
        request.getfixturevalue("ray_local")
    import sys

    sys.path.insert(0, str(FIXTURES))
    from make_mini import outcome

    out = tmp_path / "out"
    argv = ["run", str(FIXTURES / "mini" / "pipeline.yaml"), "--out", str(out), "--runner", runner, "--no-progress"]
    assert main(argv + (["--keep-intermediate"] if keep else [])) == 0
    golden = json.loads((FIXTURES / "mini_golden.json").read_text())
    if not keep:  # only the last stage of the fused group writes kept rows
        for stage in ("ingest", "license", "language", "filter"):
            golden[stage]["kept"] = None
    assert outcome(out) == golden
    latin1 = duckdb.sql(f"select content, src_encoding from '{out}/decontaminate/*.parquet' where path = '/latin1.py'")
    assert latin1.fetchall() == [("# caf\u00e9 cr\u00e8me\nprint('ok')\n", "Windows-1252")]
    assert not (tmp_path / "escape.txt").exists() and not (out.parent / "escape.txt").exists()


def test_rerun_of_a_finished_pipeline_redoes_nothing(tmp_path, capsys):
    args = [
        "run",
        str(FIXTURES / "mini" / "pipeline.yaml"),
        "--out",
        str(tmp_path / "out"),
        "--runner",
        "local",
        "--no-progress",
    ]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 0
    assert "(0 run now)" in capsys.readouterr().out


def test_license_sees_files_that_language_selection_drops(tmp_path):
    """StarCoder's language list has no Text: LICENSE is dropped by `language`, yet its license still counts,
    because `license` runs on every file first (as The Stack v2 detected licenses on whole repositories)."""
    pytest.importorskip("licensedcode")
    mini = FIXTURES / "mini"
    pipeline = tmp_path / "starcoder.yaml"
    pipeline.write_text(
        f"out: {tmp_path / 'out'}\n"
        "stages:\n"
        f"  ingest: {{metadata: ['{mini}/metadata/*.parquet'], content: '{mini}'}}\n"
        "  license: {keep: [permissive]}\n"
        f"  language: {{languages: '{FIXTURES.parents[1] / 'filters/languages/starcoder_v1.txt'}'}}\n"
    )
    assert main(["run", str(pipeline), "--runner", "local", "--no-progress"]) == 0
    kept = dict(duckdb.sql(f"select path, license_type from '{tmp_path}/out/language/*.parquet'").fetchall())
    assert kept["/src/widgets/core.py"] == "permissive"
    dropped = dict(duckdb.sql(f"select path, reason from '{tmp_path}/out/_removed/language/*.parquet'").fetchall())
    assert dropped["/LICENSE"] == "language_not_selected"

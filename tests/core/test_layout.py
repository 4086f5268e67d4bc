"""A stage's output folder: file names, the plan fingerprint, resume, completion markers."""

import json

import pyarrow.parquet as pq
import pytest

from stackcurate.core import io
from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import CONFIG, PIPELINE, PLAN, SHARDS, SUCCESS, StageDir, run_stages


def _marker(folder, index: int) -> None:
    (folder / SHARDS / f"{index:05d}.json").write_text("{}")


def test_paths_of_a_shard_follow_the_layout(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    shard = Shard(index=7, kind="parquet", path="/in.parquet", source_index=0)
    root = str(tmp_path / "filter")
    assert stage.path("data", shard) == f"{root}/00007.parquet"
    assert stage.path("removed", 7) == f"{root}/removed/00007.parquet"
    assert stage.path(SHARDS, shard, ".json") == f"{root}/_shards/00007.json"


def test_start_run_creates_the_folders_and_records_the_plan(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    assert stage.start_run("abc", overwrite=False, request="req") == set()
    for sub in ("removed", "errors", "stats", SHARDS):
        assert (tmp_path / "filter" / sub).is_dir()
    assert json.loads((tmp_path / "filter" / PLAN).read_text()) == {"fingerprint": "abc", "request": "req"}
    assert (stage.fingerprint(), stage.request()) == ("abc", "req")


def test_a_folder_without_a_plan_has_no_fingerprint(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    assert (stage.fingerprint(), stage.request(), stage.done_shards(), stage.is_complete()) == (
        None,
        None,
        set(),
        False,
    )


def test_start_run_of_the_same_fingerprint_resumes_its_finished_shards(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    _marker(tmp_path / "filter", 0)
    _marker(tmp_path / "filter", 3)
    (tmp_path / "filter" / "00000.parquet").write_bytes(b"kept")
    assert stage.start_run("abc", overwrite=False) == {0, 3}
    assert (tmp_path / "filter" / "00000.parquet").read_bytes() == b"kept"


def test_start_run_refuses_a_different_fingerprint_without_overwrite(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    _marker(tmp_path / "filter", 0)
    with pytest.raises(StackcurateError, match=r"different input or config \(.*\); pass --overwrite"):
        stage.start_run("other", overwrite=False)
    assert stage.fingerprint() == "abc"
    assert stage.done_shards() == {0}


def test_start_run_with_overwrite_replaces_the_folder(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    _marker(tmp_path / "filter", 0)
    (tmp_path / "filter" / "00000.parquet").write_bytes(b"old")
    assert stage.start_run("other", overwrite=True) == set()
    assert not (tmp_path / "filter" / "00000.parquet").exists()
    assert stage.fingerprint() == "other"


def test_start_run_removes_temporary_files_and_the_success_marker(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    folder = tmp_path / "filter"
    (folder / "00001.parquet.tmp-dead").write_bytes(b"half")
    (folder / "removed" / "00001.parquet.tmp-dead").write_bytes(b"half")
    (folder / SUCCESS).write_bytes(b"")
    stage.start_run("abc", overwrite=False)
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == [PLAN]


def test_done_shards_reads_only_committed_markers(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    _marker(tmp_path / "filter", 2)
    (tmp_path / "filter" / SHARDS / "00004.json.tmp-0123").write_text("{}")  # a marker being written
    assert stage.done_shards() == {2}


def test_mark_complete_writes_config_and_success_and_drops_temporaries(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    folder = tmp_path / "filter"
    (folder / "errors" / "00000.parquet.tmp-dead").write_bytes(b"half")
    stage.mark_complete("stage: filter\n")
    assert stage.is_complete()
    assert (folder / CONFIG).read_text() == "stage: filter\n"
    assert not list(folder.rglob("*.tmp-*"))


def test_write_run_records_wall_time_and_workers_as_stats_rows(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    stage.write_run("r1", 2.5, 3)
    rows = pq.read_table(tmp_path / "filter" / "stats" / "run-r1.parquet").to_pylist()
    assert [(r["run_id"], r["stage"], r["shard"], r["metric"], r["value"], r["unit"]) for r in rows] == [
        ("r1", "filter", -1, "wall_seconds", 2.5, "seconds"),
        ("r1", "filter", -1, "workers", 3.0, "workers"),
    ]


def test_run_stages_lists_the_stages_of_the_last_run(tmp_path):
    assert run_stages(str(tmp_path)) is None
    fs, root = io.filesystem(str(tmp_path))
    io.write_bytes_atomic(fs, io.join(root, PIPELINE), json.dumps({"stages": ["ingest", "filter"]}).encode())
    assert run_stages(str(tmp_path)) == ["ingest", "filter"]

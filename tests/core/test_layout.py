"""A stage's output folder: file names, the plan fingerprint, resume, completion markers."""

import json

import pyarrow.parquet as pq
import pytest

from stackcurate.core import io
from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import CONFIG, PIPELINE, PLAN, SHARDS, STATE, SUCCESS, StageDir, run_stages


def _marker(tmp_path, index: int) -> None:
    (tmp_path / STATE / "filter" / SHARDS / f"{index:05d}.json").write_text("{}")


def test_paths_of_a_shard_follow_the_layout(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    shard = Shard(index=7, kind="parquet", path="/in.parquet", source_index=0)
    assert stage.path("data", shard) == f"{tmp_path}/filter/00007.parquet"
    assert stage.path("removed", 7) == f"{tmp_path}/_removed/filter/00007.parquet"
    assert stage.path("stats", 7) == f"{tmp_path}/_stats/filter/00007.parquet"
    assert stage.path(SHARDS, shard, ".json") == f"{tmp_path}/_state/filter/shards/00007.json"
    assert StageDir.of(f"{tmp_path}/filter").state == stage.state == f"{tmp_path}/_state/filter"


def test_start_run_creates_the_folders_and_records_the_plan(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    assert stage.start_run("abc", overwrite=False, request="req") == set()
    for sub in ("filter", "_removed/filter", "_errors/filter", "_stats/filter", "_state/filter/shards"):
        assert (tmp_path / sub).is_dir()
    assert json.loads((tmp_path / STATE / "filter" / PLAN).read_text()) == {"fingerprint": "abc", "request": "req"}
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
    _marker(tmp_path, 0)
    _marker(tmp_path, 3)
    (tmp_path / "filter" / "00000.parquet").write_bytes(b"kept")
    assert stage.start_run("abc", overwrite=False) == {0, 3}
    assert (tmp_path / "filter" / "00000.parquet").read_bytes() == b"kept"


def test_start_run_refuses_a_different_fingerprint_without_overwrite(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    _marker(tmp_path, 0)
    with pytest.raises(StackcurateError, match=r"different input or config \(.*\); pass --overwrite"):
        stage.start_run("other", overwrite=False)
    assert stage.fingerprint() == "abc"
    assert stage.done_shards() == {0}


def test_start_run_with_overwrite_replaces_every_folder_of_the_stage(tmp_path):
    stage = StageDir(str(tmp_path), "filter", extra=("megatron",))
    stage.start_run("abc", overwrite=False)
    _marker(tmp_path, 0)
    old = [tmp_path / "filter" / "00000.parquet", tmp_path / "_removed/filter/00000.parquet", tmp_path / "megatron/x"]
    for path in old:
        path.write_bytes(b"old")
    (tmp_path / "_removed/other").mkdir()  # another stage's
    assert stage.start_run("other", overwrite=True) == set()
    assert not any(path.exists() for path in old)
    assert (tmp_path / "_removed/other").is_dir()
    assert stage.fingerprint() == "other"


def test_start_run_removes_temporary_files_and_the_success_marker(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    (tmp_path / "filter" / "00001.parquet.tmp-dead").write_bytes(b"half")
    (tmp_path / "_removed/filter/00001.parquet.tmp-dead").write_bytes(b"half")
    (tmp_path / STATE / "filter" / SUCCESS).write_bytes(b"")
    stage.start_run("abc", overwrite=False)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [PLAN]


def test_done_shards_reads_only_committed_markers(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    _marker(tmp_path, 2)
    (tmp_path / STATE / "filter" / SHARDS / "00004.json.tmp-0123").write_text("{}")  # a marker being written
    assert stage.done_shards() == {2}


def test_mark_complete_writes_config_and_success_and_drops_temporaries(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    (tmp_path / "_errors/filter/00000.parquet.tmp-dead").write_bytes(b"half")
    stage.mark_complete("stage: filter\n")
    assert stage.is_complete()
    assert (tmp_path / STATE / "filter" / CONFIG).read_text() == "stage: filter\n"
    assert not list(tmp_path.rglob("*.tmp-*"))


def test_write_run_records_wall_time_and_workers_as_stats_rows(tmp_path):
    stage = StageDir(str(tmp_path), "filter")
    stage.start_run("abc", overwrite=False)
    stage.write_run("r1", 2.5, 3)
    rows = pq.read_table(tmp_path / "_stats/filter/run-r1.parquet").to_pylist()
    assert [(r["run_id"], r["stage"], r["shard"], r["metric"], r["value"], r["unit"]) for r in rows] == [
        ("r1", "filter", -1, "wall_seconds", 2.5, "seconds"),
        ("r1", "filter", -1, "workers", 3.0, "workers"),
    ]


def test_run_stages_lists_the_stages_of_the_last_run(tmp_path):
    assert run_stages(str(tmp_path)) is None
    fs, root = io.filesystem(str(tmp_path))
    io.write_bytes_atomic(fs, io.join(root, PIPELINE), json.dumps({"stages": ["ingest", "filter"]}).encode())
    assert run_stages(str(tmp_path)) == ["ingest", "filter"]


def test_a_stage_folder_of_the_earlier_layout_is_refused_without_overwrite(tmp_path):
    (tmp_path / "filter" / "removed").mkdir(parents=True)
    (tmp_path / "filter" / "_plan.json").write_text('{"fingerprint": "abc"}')
    stage = StageDir(str(tmp_path), "filter")
    with pytest.raises(StackcurateError, match="earlier stackcurate.*; pass --overwrite"):
        stage.start_run("abc", overwrite=False)
    stage.start_run("abc", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "filter").iterdir()) == []

"""The shard runner: a shard of a stage, or of a fused group, read, transformed and committed atomically."""

import errno
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import data_files, make_table, read_all, state, table_dir, write_records

from stackcurate.core import io
from stackcurate.core.contract import Shard, StageOutput, split_by_reason
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import PLAN, SHARDS, StageDir
from stackcurate.core.planning import plan_records
from stackcurate.core.records import RecordStage
from stackcurate.core.schema import ERROR_SCHEMA, FILE_SCHEMA
from stackcurate.core.shards import ShardJob

CONTENTS = ["a", "ax", "ay", "b!", "c?", "axy"]


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    batch_rows: int = 2
    drop: str = "x"  # rows whose content holds it are removed as `has_<drop>`
    bad: str = "!"  # rows whose content holds it are bad input (error rows)
    fail_at: int = -1  # raise when handed this table (0: the first)


class Judge(RecordStage):
    """Remove rows holding a letter; report rows holding another as bad input."""

    name = "judge"
    config = JudgeConfig

    def __init__(self, cfg: JudgeConfig) -> None:
        super().__init__(cfg)
        self.seen: list[pa.Table] = []

    def __call__(self, table: pa.Table) -> StageOutput:
        if len(self.seen) == self.cfg.fail_at:
            raise RuntimeError("died mid-shard")
        self.seen.append(table)
        contents = table.column("content").to_pylist()
        bad = pa.array([self.cfg.bad in c for c in contents])
        good = table.filter(pc.invert(bad))
        reasons = [f"has_{self.cfg.drop}" if self.cfg.drop in c else None for c in good.column("content").to_pylist()]
        out = split_by_reason(good, reasons)
        errors = table.filter(bad).select(["doc_id", "source", "path"])
        out.errors = errors.append_column("reason", pa.array(["bad_input"] * errors.num_rows, pa.string()))
        out.stats = {("letters", None, None): float(sum(len(c) for c in contents))}
        return out


class JudgeB(Judge):
    """The same judge, as a second stage of a fused group."""

    name = "judge_b"


class IssuesOnly(Judge):
    """A judge of issues, which never sees a file."""

    name = "issues_only"
    kinds = ("issue",)


def _shards(tmp_path: Path, table: pa.Table) -> list[Shard]:
    return plan_records(str(write_records(tmp_path / "in", [table])))


def _files(contents: list[str] = CONTENTS) -> pa.Table:
    return make_table([(f"/f{i}.py", c) for i, c in enumerate(contents)], language="python")


def _job(out: Path, stages: list[Judge], keep: tuple[bool, ...] | None = None, **kwargs) -> ShardJob:
    dirs = tuple(StageDir(str(out), s.name) for s in stages)
    for d in dirs:
        d.start_run("fingerprint", overwrite=False)
    return ShardJob(
        key="k",
        factories=tuple(lambda s=s: s for s in stages),
        dirs=dirs,
        run_id="r1",
        keep=keep or (False,) * (len(stages) - 1) + (True,),
        **kwargs,
    )


def _run(out: Path, stages: list[Judge], shard: Shard, **kwargs) -> dict:
    return _job(out, stages, **kwargs).run(stages, shard)


def _stats(folder: Path) -> dict[tuple, float]:
    """The counters of a shard, summed over kinds."""
    found: dict[tuple, float] = {}
    for r in pq.read_table(table_dir(folder, "stats") / "00000.parquet").to_pylist():
        key = (r["stage"], r["metric"], r["language"], r["reason"])
        found[key] = found.get(key, 0.0) + r["value"]
    return found


def _files_under(out: Path) -> list[str]:
    """Every file of a run folder."""
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


# The files of one shard


def test_a_shard_writes_kept_removed_errors_stats_and_its_marker(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    summary = _run(tmp_path / "out", [Judge(JudgeConfig())], shard)
    folder = tmp_path / "out" / "judge"
    assert read_all(folder).column("content").to_pylist() == ["a", "ay", "c?"]
    removed = pq.read_table(table_dir(folder, "removed") / "00000.parquet")
    assert list(zip(removed["content"].to_pylist(), removed["reason"].to_pylist(), strict=True)) == [
        ("ax", "has_x"),
        ("axy", "has_x"),
    ]
    errors = pq.read_table(table_dir(folder, "errors") / "00000.parquet")
    assert errors.schema == ERROR_SCHEMA
    assert errors.select(["path", "reason"]).to_pylist() == [{"path": "/f3.py", "reason": "bad_input"}]
    assert json.loads((state(folder, SHARDS) / "00000.json").read_text()) == summary
    expected = {"shard": 0, "docs_in": 6, "docs_out": 3, "docs_removed": 2, "errors": 1, "bytes_out": 5}
    assert {k: summary[k] for k in expected} == expected


def test_stats_count_rows_and_the_stage_s_own_counters(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    _run(tmp_path / "out", [Judge(JudgeConfig())], shard)
    stats = _stats(tmp_path / "out" / "judge")
    assert stats[("judge", "docs_in", "python", None)] == 6
    assert stats[("judge", "docs_out", "python", None)] == 3
    assert stats[("judge", "docs_removed", "python", "has_x")] == 2
    assert stats[("judge", "letters", None, None)] == 12
    assert stats[("judge", "seconds", None, None)] >= 0


def test_a_shard_is_read_in_tables_of_batch_rows(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    stage = Judge(JudgeConfig(batch_rows=4))
    _run(tmp_path / "out", [stage], shard)
    assert [t.num_rows for t in stage.seen] == [4, 2]


def test_removed_rows_lose_their_content_when_asked(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    _run(tmp_path / "out", [Judge(JudgeConfig())], shard, removed_content=False)
    removed = pq.read_table(table_dir(tmp_path / "out" / "judge", "removed") / "00000.parquet")
    assert removed.column("content").to_pylist() == [None, None]
    assert removed.column("path").to_pylist() == ["/f1.py", "/f5.py"]


# Atomic commit


def test_a_stage_raising_mid_shard_leaves_no_file_and_no_marker(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    with pytest.raises(RuntimeError, match="died mid-shard"):
        _run(tmp_path / "out", [Judge(JudgeConfig(fail_at=1))], shard)
    assert _files_under(tmp_path / "out") == [f"_state/judge/{PLAN}"]  # no temporary file either
    assert StageDir(str(tmp_path / "out"), "judge").done_shards() == set()


def test_a_rerun_after_a_failed_shard_writes_the_bytes_of_an_uninterrupted_run(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    with pytest.raises(RuntimeError):
        _run(tmp_path / "out", [Judge(JudgeConfig(fail_at=1))], shard)
    _run(tmp_path / "out", [Judge(JudgeConfig())], shard)
    _run(tmp_path / "clean", [Judge(JudgeConfig())], shard)
    rerun, clean = data_files(tmp_path / "out"), data_files(tmp_path / "clean")
    assert sorted(rerun) == ["_errors/judge/00000.parquet", "_removed/judge/00000.parquet", "judge/00000.parquet"]
    assert rerun == clean
    assert StageDir(str(tmp_path / "out"), "judge").done_shards() == {0}


def test_the_markers_are_written_last_in_stage_order(tmp_path, monkeypatch):
    (shard,) = _shards(tmp_path, _files())
    job = _job(tmp_path / "out", [Judge(JudgeConfig()), JudgeB(JudgeConfig(drop="y"))])
    events: list[str] = []
    commit, write_bytes = io.AtomicParquetWriter.commit, io.write_bytes_atomic

    def recorded_commit(self):
        commit(self)
        events.append(self.path)

    def recorded_write(fs, path, data):
        write_bytes(fs, path, data)
        events.append(path)

    monkeypatch.setattr(io.AtomicParquetWriter, "commit", recorded_commit)
    monkeypatch.setattr(io, "write_bytes_atomic", recorded_write)
    job.run(job.build(), shard)
    out = (tmp_path / "out").resolve()
    assert events[-2:] == [f"{out}/_state/judge/shards/00000.json", f"{out}/_state/judge_b/shards/00000.json"]
    assert len(events) == 2 + 3 + 4  # stage a: removed, errors, stats; stage b: kept rows too
    assert all(e.endswith(".parquet") for e in events[:-2])


def test_a_store_that_is_down_leaves_the_shard_uncommitted(tmp_path):
    class Unreachable(Judge):
        def read(self, shard):
            yield from super().read(shard)
            raise io.StoreUnavailable("store down")

    (shard,) = _shards(tmp_path, _files())
    summary = _run(tmp_path / "out", [Unreachable(JudgeConfig())], shard)
    assert summary["unavailable"] == "store down"
    assert (summary["docs_in"], summary["docs_out"]) == (0, 0)
    assert _files_under(tmp_path / "out") == [f"_state/judge/{PLAN}"]


def test_a_full_disk_is_a_one_line_error_naming_the_output(tmp_path):
    class DiskFull(Judge):
        def __call__(self, table):
            raise OSError(errno.ENOSPC, "No space left on device")

    (shard,) = _shards(tmp_path, _files())
    with pytest.raises(StackcurateError, match=r"judge: no space left on the device holding .*out/judge \(writing"):
        _run(tmp_path / "out", [DiskFull(JudgeConfig())], shard)
    assert _files_under(tmp_path / "out") == [f"_state/judge/{PLAN}"]


# Bad input


def test_a_reader_failure_is_one_error_row_and_the_shard_is_committed(tmp_path):
    class Broken(Judge):
        def read(self, shard):
            raise ValueError("garbled")
            yield

    (shard,) = _shards(tmp_path, _files())
    summary = _run(tmp_path / "out", [Broken(JudgeConfig())], shard)
    errors = pq.read_table(table_dir(tmp_path / "out" / "judge", "errors") / "00000.parquet").to_pylist()
    assert errors == [
        {
            "doc_id": None,
            "source": "judge",
            "origin": shard.path,
            "repo_name": None,
            "path": None,
            "blob_id": None,
            "reason": "unreadable_input",
            "detail": "ValueError: garbled",
        }
    ]
    assert (summary["errors"], summary["docs_out"]) == (1, 0)


def test_an_unreadable_input_file_is_one_error_row_and_the_shard_is_committed(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "00000.parquet").write_bytes(b"not parquet")
    (shard,) = plan_records(str(tmp_path / "in"))
    assert shard.kind == "unreadable"
    summary = _run(tmp_path / "out", [Judge(JudgeConfig())], shard)
    folder = tmp_path / "out" / "judge"
    errors = pq.read_table(table_dir(folder, "errors") / "00000.parquet").to_pylist()
    assert [(e["reason"], e["origin"], e["detail"]) for e in errors] == [
        ("unreadable_input", shard.path, shard.detail)
    ]
    assert read_all(folder).num_rows == 0
    assert (summary["errors"], summary["docs_out"]) == (1, 0)
    assert StageDir(str(tmp_path / "out"), "judge").done_shards() == {0}


# Fused groups


@pytest.mark.parametrize("keep", [(False, True), (True, True)])
def test_a_fused_group_writes_each_stage_s_files_and_the_kept_rows_of_the_last(tmp_path, keep):
    (shard,) = _shards(tmp_path, _files())
    first, second = Judge(JudgeConfig()), JudgeB(JudgeConfig(drop="y", bad="?"))
    summary = _run(tmp_path / "out", [first, second], shard, keep=keep)
    a, b = tmp_path / "out" / "judge", tmp_path / "out" / "judge_b"
    assert read_all(b).column("content").to_pylist() == ["a"]
    if keep[0]:
        assert read_all(a).column("content").to_pylist() == ["a", "ay", "c?"]
    else:
        assert not list(a.glob("*.parquet"))
    assert pq.read_table(table_dir(a, "removed") / "00000.parquet").column("content").to_pylist() == ["ax", "axy"]
    assert pq.read_table(table_dir(b, "removed") / "00000.parquet").column("reason").to_pylist() == ["has_y"]
    assert pq.read_table(table_dir(a, "errors") / "00000.parquet").column("path").to_pylist() == ["/f3.py"]
    assert pq.read_table(table_dir(b, "errors") / "00000.parquet").column("path").to_pylist() == ["/f4.py"]
    assert _stats(a)[("judge", "docs_in", "python", None)] == 6
    assert _stats(b)[("judge_b", "docs_in", "python", None)] == 3
    assert [t.column("content").to_pylist() for t in second.seen] == [["a"], ["ay"], ["c?"]]  # what the first kept
    assert summary == json.loads((state(b, SHARDS) / "00000.json").read_text())
    assert json.loads((state(a, SHARDS) / "00000.json").read_text())["docs_removed"] == 2


def test_a_failure_in_the_second_stage_of_a_group_commits_neither(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    with pytest.raises(RuntimeError):
        _run(tmp_path / "out", [Judge(JudgeConfig()), JudgeB(JudgeConfig(fail_at=1))], shard, keep=(True, True))
    assert _files_under(tmp_path / "out") == [f"_state/judge/{PLAN}", f"_state/judge_b/{PLAN}"]


# Kinds pass-through


def _mixed() -> pa.Table:
    table = _files(["ax", "issue with x", "b", "another x issue"])
    return table.append_column("kind", pa.array(["file", "issue", "file", "issue"]))


def test_a_stage_of_files_sees_only_the_file_rows(tmp_path):
    (shard,) = _shards(tmp_path, _mixed())
    stage = Judge(JudgeConfig())
    _run(tmp_path / "out", [stage], shard)
    assert [k for t in stage.seen for k in t.column("kind").to_pylist()] == ["file", "file"]


def test_rows_of_other_kinds_come_out_untouched(tmp_path):
    (shard,) = _shards(tmp_path, _mixed())
    _run(tmp_path / "out", [Judge(JudgeConfig())], shard)
    kept = read_all(tmp_path / "out" / "judge")
    issues = kept.filter(pc.equal(kept.column("kind"), "issue"))
    assert issues == _mixed().filter(pc.equal(_mixed().column("kind"), "issue"))
    assert kept.column("content").to_pylist() == [
        "issue with x",
        "b",
        "another x issue",
    ]  # per table: kept, then passed
    removed = pq.read_table(table_dir(tmp_path / "out" / "judge", "removed") / "00000.parquet")
    assert removed.column("kind").to_pylist() == ["file"]


def test_rows_passed_through_are_counted_as_docs_passed(tmp_path):
    (shard,) = _shards(tmp_path, _mixed())
    summary = _run(tmp_path / "out", [Judge(JudgeConfig())], shard)
    stats = _stats(tmp_path / "out" / "judge")
    assert stats[("judge", "docs_passed", "python", None)] == 2
    assert stats[("judge", "docs_out", "python", None)] == 3
    rows = pq.read_table(table_dir(tmp_path / "out" / "judge", "stats") / "00000.parquet").to_pylist()
    by_kind = {(r["metric"], r["kind"]): r["value"] for r in rows if r["metric"] in ("docs_in", "docs_passed")}
    assert by_kind == {("docs_in", "file"): 2, ("docs_in", "issue"): 2, ("docs_passed", "issue"): 2}
    assert (summary["docs_in"], summary["docs_out"], summary["docs_removed"]) == (4, 3, 1)


def test_without_a_kind_column_a_stage_of_files_gets_every_row(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    stage = Judge(JudgeConfig(batch_rows=100))
    _run(tmp_path / "out", [stage], shard)
    assert stage.seen[0] == _files()
    assert not any(metric == "docs_passed" for _, metric, _, _ in _stats(tmp_path / "out" / "judge"))


def test_files_without_a_kind_column_pass_through_a_stage_of_issues(tmp_path):
    (shard,) = _shards(tmp_path, _files())
    stage = IssuesOnly(JudgeConfig())
    _run(tmp_path / "out", [stage], shard)
    assert stage.seen == []
    assert read_all(tmp_path / "out" / "issues_only") == _files()
    assert _stats(tmp_path / "out" / "issues_only")[("issues_only", "docs_passed", "python", None)] == 6


def test_an_empty_input_commits_empty_files_with_the_schema(tmp_path):
    (shard,) = _shards(tmp_path, FILE_SCHEMA.empty_table())
    summary = _run(tmp_path / "out", [Judge(JudgeConfig())], shard)
    kept = pq.read_table(tmp_path / "out" / "judge" / "00000.parquet")
    assert (kept.num_rows, kept.schema) == (0, FILE_SCHEMA)
    assert summary["docs_in"] == 0

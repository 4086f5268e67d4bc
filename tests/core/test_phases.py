"""Declared phases: a multi-phase stage's global work, resumed item by item and reused when finished."""

import pytest

from stackcurate.core.contract import Shard, StageContext
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import SUCCESS


def _ctx(out, *, overwrite: bool = False, shards: int = 2) -> StageContext:
    def run_all(fn, items, desc):
        return [fn(*item) for item in items]

    plan = [Shard(index=i, kind="parquet", path=f"/in/{i}.parquet", source_index=i) for i in range(shards)]
    return StageContext(str(out), "/in", plan, overwrite, "r1", run_all, None, progress=False)  # type: ignore[arg-type]


class Calls:
    def __init__(self) -> None:
        self.items: list[int] = []

    def square(self, i: int) -> int:
        self.items.append(i)
        return i * i


def test_run_returns_every_item_s_result_in_order(tmp_path):
    calls = Calls()
    phases = _ctx(tmp_path).phases("work", {"k": 1})
    assert phases.run("square", calls.square, [(3,), (1,), (2,)]) == [9, 1, 4]


def test_a_rerun_runs_only_the_items_without_a_marker(tmp_path):
    _ctx(tmp_path).phases("work", {"k": 1}).run("square", Calls().square, [(1,), (2,)])
    calls = Calls()
    phases = _ctx(tmp_path).phases("work", {"k": 1})
    assert phases.run("square", calls.square, [(1,), (2,), (3,)]) == [1, 4, 9]
    assert calls.items == [3]


def test_a_completed_folder_of_the_same_settings_is_reused(tmp_path):
    phases = _ctx(tmp_path).phases("work", {"k": 1})
    phases.run("square", Calls().square, [(1,)])
    phases.complete()
    assert (tmp_path / "_state" / "work" / SUCCESS).exists()
    assert not (tmp_path / "_state" / "work" / "work").exists()  # scratch files dropped
    assert _ctx(tmp_path).phases("work", {"k": 1}).done


@pytest.mark.parametrize(("settings", "shards"), [({"k": 2}, 2), ({"k": 1}, 3)])
def test_other_settings_or_input_need_overwrite(tmp_path, settings, shards):
    _ctx(tmp_path).phases("work", {"k": 1}).complete()
    with pytest.raises(StackcurateError, match="pass --overwrite"):
        _ctx(tmp_path, shards=shards).phases("work", settings)
    phases = _ctx(tmp_path, overwrite=True, shards=shards).phases("work", settings)
    assert not phases.done
    assert not (tmp_path / "_state" / "work" / SUCCESS).exists()


def test_drop_removes_scratch_files_of_a_phase(tmp_path):
    phases = _ctx(tmp_path).phases("work", {})
    phases.fs.create_dir(phases.work("buckets"), recursive=True)
    phases.fs.create_dir(phases.work("signatures"), recursive=True)
    phases.drop("buckets")
    assert sorted(p.name for p in (tmp_path / "_state" / "work" / "work").iterdir()) == ["signatures"]
    assert phases.work_uri("x") == f"{tmp_path}/_state/work/work/x"


def test_a_folder_of_the_stage_s_own_is_never_marked_complete(tmp_path):
    phases = _ctx(tmp_path).phases("tokenize", {}, own=True)
    phases.fs.create_dir(phases.work(), recursive=True)
    phases.complete()
    assert not (tmp_path / "_state" / "tokenize" / SUCCESS).exists()
    assert not (tmp_path / "_state" / "tokenize" / "work").exists()


def test_rounds_are_phases_of_their_own(tmp_path):
    phases = _ctx(tmp_path).phases("work", {})
    calls = Calls()
    with phases.rounds("components") as rounds:
        assert rounds.run("round0", calls.square, [(2,)]) == [4]
        assert rounds.run("round1", calls.square, [(2,)]) == [4]
    assert calls.items == [2, 2]
    assert sorted(p.name for p in (tmp_path / "_state" / "work" / "work" / "done").iterdir()) == ["round0", "round1"]

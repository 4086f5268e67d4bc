"""Plan fingerprints: what a stage's output depends on, with local paths made portable."""

import shutil

import pytest

from stackcurate.core.contract import Shard
from stackcurate.core.fingerprint import _HASHED_BYTES, plan_fingerprint


def _shards(folder, weights=(0, 0)) -> list[Shard]:
    return [
        Shard(index=i, kind="parquet", path=f"{folder}/{i:05d}.parquet", source_index=i, stop=10, weight=w)
        for i, w in enumerate(weights)
    ]


def _run(tmp_path):
    """A run folder holding an earlier stage's output, and a rules file outside it."""
    run = tmp_path / "a" / "run"
    (run / "language").mkdir(parents=True)
    rules = tmp_path / "rules.csv"
    rules.write_text("ext,max_line\npy,1000\n")
    return run, rules


def _fingerprint(run, rules, **config) -> str:
    return plan_fingerprint("filter", {"rules": str(rules), **config}, _shards(run / "language"), out=str(run))


def test_a_run_folder_moved_elsewhere_keeps_its_fingerprint(tmp_path):
    run, rules = _run(tmp_path)
    before = _fingerprint(run, rules)
    moved = tmp_path / "b" / "elsewhere"
    moved.parent.mkdir()
    shutil.move(run, moved)
    assert _fingerprint(moved, rules) == before


def test_a_referenced_file_moved_elsewhere_keeps_the_fingerprint(tmp_path):
    run, rules = _run(tmp_path)
    before = _fingerprint(run, rules)
    other = tmp_path / "tables" / "rules_copy.csv"
    other.parent.mkdir()
    shutil.move(rules, other)
    assert _fingerprint(run, other) == before


def test_a_referenced_file_whose_bytes_change_changes_the_fingerprint(tmp_path):
    run, rules = _run(tmp_path)
    before = _fingerprint(run, rules)
    rules.write_text("ext,max_line\npy,1001\n")
    assert _fingerprint(run, rules) != before


def test_a_change_in_the_tail_of_a_large_file_changes_the_fingerprint(tmp_path):
    run, rules = _run(tmp_path)
    rules.write_bytes(b"x" * (3 * _HASHED_BYTES))
    before = _fingerprint(run, rules)
    rules.write_bytes(b"x" * (3 * _HASHED_BYTES - 1) + b"y")
    assert _fingerprint(run, rules) != before


@pytest.mark.parametrize("change", [{"max_line": 2}, {"keep": ["python", "go"]}])
def test_a_config_change_changes_the_fingerprint(tmp_path, change):
    run, rules = _run(tmp_path)
    assert _fingerprint(run, rules, max_line=1, keep=["python"]) != _fingerprint(
        run, rules, **{"max_line": 1, "keep": ["python"], **change}
    )


def test_shard_weights_are_not_part_of_the_fingerprint(tmp_path):
    run, _ = _run(tmp_path)
    assert plan_fingerprint("s", {}, _shards(run, (1, 2)), out=str(run)) == plan_fingerprint(
        "s", {}, _shards(run, (5, 9)), out=str(run)
    )


def test_the_plan_is_part_of_the_fingerprint(tmp_path):
    run, _ = _run(tmp_path)
    one, two = _shards(run)
    assert plan_fingerprint("s", {}, [one, two], out=str(run)) != plan_fingerprint("s", {}, [one], out=str(run))


def test_the_stage_name_is_part_of_the_fingerprint(tmp_path):
    run, _ = _run(tmp_path)
    assert plan_fingerprint("a", {}, _shards(run), out=str(run)) != plan_fingerprint(
        "b", {}, _shards(run), out=str(run)
    )


def test_a_folder_outside_the_run_counts_by_its_name(tmp_path):
    run, _ = _run(tmp_path)
    repos = [tmp_path / r for r in ("x/repos/acme", "y/repos/acme", "y/repos/other")]
    for repo in repos:
        repo.mkdir(parents=True)
    prints = [plan_fingerprint("s", {"repo": str(repo)}, [], out=str(run)) for repo in repos]
    assert prints[0] == prints[1] != prints[2]


def test_uris_are_taken_as_they_are(tmp_path):
    run, _ = _run(tmp_path)
    one = plan_fingerprint("s", {"input": "s3://bucket/a/"}, [], out=str(run))
    assert one != plan_fingerprint("s", {"input": "s3://bucket/b/"}, [], out=str(run))

"""A Ray worker node lost in the middle of a stage: the run finishes on the nodes left, or stops in one line.

Each test starts its own two-node cluster on this machine (`ray.cluster_utils.Cluster`: a head without
CPUs, where the driver runs, and two 1-CPU worker nodes), so the session's embedded Ray is shut down for it
and started again after. The stage is the real `language` stage, wrapped so that every shard, once its
first batch is written, waits for the test's go: the test then knows which node runs which shard when it
removes a node.
"""

import dataclasses
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import helpers
import pyarrow as pa
import pytest
from helpers import StageWrapper, data_files, sharded_records, state, wrapped_stage

from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.pipeline import RunOptions, StageResult, run_stage
from stackcurate.stages import get_stage

ray = pytest.importorskip("ray")

# A killed node's workers are gone within seconds (Ray's health checks, ~30 s, are the fallback); each test
# takes 5-15 s on a quiet machine, cluster start-up included: three times slower stays well inside this.
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

FILES = [
    ("/src/app.py", "import os\nprint(os.getcwd())\n"),
    ("/src/util.c", "#include <stdio.h>\nint main(void) { return 0; }\n"),
    ("/README.md", "# Widgets\n\nA library of widgets.\n"),
    ("/x.unknownext", "zzz\n"),
]
SHARDS = 4
LANGUAGES = "filters/languages/starcoder2_smol_v1.txt"


def _input(tmp_path: Path, shards: int = SHARDS) -> Path:
    return sharded_records(tmp_path / "in", FILES, shards)


def _hold(folder: str, name: str) -> None:
    """Leave `started.<name>.<node id>` in `folder`, then wait for `release`, forever on a `doomed` node."""
    node = ray.get_runtime_context().get_node_id()
    Path(folder, f"started.{name}.{node}").touch()
    while not Path(folder, "release").exists() or Path(folder, f"doomed.{node}").exists():
        time.sleep(0.05)


class _HoldShards(StageWrapper):
    """Wraps a stage: a held shard, once its first batch is written, leaves `started.<shard>.<node id>` in
    `folder` and waits there until the file `release` appears, forever on a node marked `doomed.<node id>`
    (if its worker outlived the node, it must not finish the shard)."""

    def __init__(self, stage: object, folder: str, held: frozenset[int]) -> None:
        self.stage, self.folder, self.held, self.name = stage, folder, held, stage.name

    def read(self, shard: object) -> Iterator[pa.Table]:
        for table in self.stage.read(shard):
            yield table  # written to the shard's temporary files before the worker goes on
            if shard.index in self.held:
                _hold(self.folder, shard.name)

    def output_schema(self, shard: object) -> pa.Schema:
        return self.stage.output_schema(shard)

    def __call__(self, table: pa.Table) -> object:
        return self.stage(table)


def _language(
    tmp_path: Path, out: str, opts: RunOptions, hold: tuple[str, frozenset[int]] | None = None
) -> StageResult:
    spec = get_stage("language")
    if hold is not None:
        folder, held = hold
        spec = wrapped_stage(spec, lambda stage: _HoldShards(stage, folder, held))
    config = build_config(spec.config, {"languages": str(Path(LANGUAGES).resolve())})
    return run_stage(spec, config, str(tmp_path / out), opts, input_uri=str(tmp_path / "in"))


@pytest.fixture
def cluster() -> Iterator[object]:
    """A head with no CPU (the driver's node) and two 1-CPU worker nodes; the embedded Ray comes back after."""
    from ray.cluster_utils import Cluster

    was_up = ray.is_initialized()
    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
        ray.cloudpickle.register_pickle_by_value(helpers)  # its StageWrapper
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if was_up:  # as the session's `ray_local` fixture left it
            ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")


class _Remover(threading.Thread):
    """Waits until `count` held shards are running (and the file `committed` exists, if given), removes the
    nodes that `pick` names, then releases."""

    def __init__(self, cluster: object, folder: Path, count: int, pick: str, committed: Path | None = None) -> None:
        super().__init__(daemon=True)
        self.cluster, self.folder, self.count, self.pick = cluster, folder, count, pick
        self.committed = committed
        self.lost: list[str] = []  # names of the shards that ran on a removed node
        self.removed_at = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 300
            while len(started := sorted(p.name for p in self.folder.glob("started.*"))) < self.count:
                assert time.monotonic() < deadline, f"held shards never all started: {started}"
                time.sleep(0.05)
            while self.committed is not None and not self.committed.exists():  # its result is off the node
                assert time.monotonic() < deadline, f"{self.committed} never written"
                time.sleep(0.05)
            running = dict(name.split(".")[1:] for name in started)  # shard name -> node id
            by_id = {node.node_id: node for node in self.cluster.worker_nodes}
            assert set(running.values()) == set(by_id), running  # one held shard on each worker node
            doomed = [max(running)] if self.pick == "one" else sorted(running)
            for shard in doomed:
                (self.folder / f"doomed.{running[shard]}").touch()
                # Not graceful: its raylet and workers are killed, as when a machine is lost.
                self.cluster.remove_node(by_id[running[shard]], allow_graceful=False)
            self.lost, self.removed_at = doomed, time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - handed to the test, which fails with it
            self.error = exc
        finally:
            (self.folder / "release").touch()


def test_a_lost_node_s_shards_finish_on_the_node_left(tmp_path, cluster, caplog):
    _input(tmp_path)
    clean = _language(tmp_path, "clean", RunOptions(runner="local", progress=False))
    hold = tmp_path / "hold"
    hold.mkdir()
    remover = _Remover(cluster, hold, count=2, pick="one")
    remover.start()
    opts = RunOptions(runner="ray", ray_address=cluster.address, progress=False)
    started = time.monotonic()
    result = _language(tmp_path, "lost", opts, hold=(str(hold), frozenset(range(SHARDS))))
    finished = time.monotonic()
    remover.join(timeout=60)
    assert remover.error is None, remover.error
    print(
        f"node removed {remover.removed_at - started:.1f} s in; run done {finished - remover.removed_at:.1f} s after"
    )
    assert finished - remover.removed_at < 120  # bounded: Ray's notice of the loss, then one shard's work
    assert len(remover.lost) == 1
    died = [r.getMessage() for r in caplog.records if r.name.startswith("stackcurate.runners.ray")]
    assert len(died) == 1, died
    assert re.fullmatch(
        rf"language: the worker running shard {remover.lost[0]} died \(.+\); running it again \(attempt 2 of 4\)",
        died[0],
    )
    stage_dir = tmp_path / "lost/language"
    assert (result.shards, result.shards_run) == (SHARDS, SHARDS)
    assert (result.docs_in, result.docs_out, result.docs_removed) == (
        clean.docs_in,
        clean.docs_out,
        clean.docs_removed,
    )
    assert data_files(stage_dir) == data_files(tmp_path / "clean/language")
    assert state(stage_dir, "SUCCESS").exists()
    assert not [p for p in stage_dir.rglob("*") if ".tmp-" in p.name]  # the lost attempt left nothing

    again = _language(tmp_path, "lost", opts)  # the rerun: nothing left to do, the same files
    assert again.shards_run == 0
    assert data_files(stage_dir) == data_files(tmp_path / "clean/language")
    redone = _language(tmp_path, "lost", dataclasses.replace(opts, overwrite=True))  # all of it, on one node
    assert redone.shards_run == SHARDS
    assert data_files(stage_dir) == data_files(tmp_path / "clean/language")


def test_a_run_that_loses_every_node_stops_in_one_line_and_resumes(tmp_path, cluster, monkeypatch):
    monkeypatch.setenv("STACKCURATE_WORKER_WAIT_S", "5")
    _input(tmp_path)
    clean = _language(tmp_path, "clean", RunOptions(runner="local", progress=False))
    hold = tmp_path / "hold"
    hold.mkdir()
    # Shard 0 runs and commits; shards 1 and 2 are held, one on each node, when both nodes go.
    # (on a loaded machine the driver may not have fetched shard 0's result yet when the held shards start)
    remover = _Remover(
        cluster, hold, count=2, pick="all", committed=tmp_path / "lost/_state/language/shards/00000.json"
    )
    remover.start()
    opts = RunOptions(runner="ray", ray_address=cluster.address, progress=False)
    with pytest.raises(StackcurateError) as caught:
        _language(tmp_path, "lost", opts, hold=(str(hold), frozenset({1, 2})))
    stopped = time.monotonic()
    remover.join(timeout=60)
    assert remover.error is None, remover.error
    print(f"run stopped {stopped - remover.removed_at:.1f} s after the nodes were removed")
    assert str(caught.value) == (
        "language: no Ray worker could run for 5 s (3 shard(s) left, 0 CPU(s) free in the cluster: were its "
        "nodes lost?); finished shards are kept: rerun to resume"
    )
    assert stopped - remover.removed_at < 120  # bounded: Ray's detection of the loss, then the 5 s
    stage_dir = tmp_path / "lost/language"
    assert sorted(p.name for p in state(stage_dir, "shards").iterdir()) == ["00000.json"]
    assert not state(stage_dir, "SUCCESS").exists()

    cluster.add_node(num_cpus=1)  # a node comes back: the rerun does the three other shards
    again = _language(tmp_path, "lost", opts)
    assert (again.shards, again.shards_run) == (SHARDS, SHARDS - 1)
    assert (again.docs_in, again.docs_out) == (clean.docs_in, clean.docs_out)
    assert data_files(stage_dir) == data_files(tmp_path / "clean/language")
    assert not [p for p in stage_dir.rglob("*") if ".tmp-" in p.name]


def _held_task(item: int, folder: str) -> int:
    _hold(folder, f"{item:05d}")
    return item * 10


def test_a_lost_node_s_tasks_finish_on_the_node_left(tmp_path, cluster):
    from stackcurate.runners import ray as runner

    hold = tmp_path / "hold"
    hold.mkdir()
    remover = _Remover(cluster, hold, count=2, pick="one")
    remover.start()
    items = [(i, str(hold)) for i in range(4)]
    results = runner.map_tasks(_held_task, items, "tasks", address=cluster.address, progress=False)
    remover.join(timeout=60)
    assert remover.error is None, remover.error
    assert len(remover.lost) == 1  # Ray retried that task on the node left
    assert results == [0, 10, 20, 30]

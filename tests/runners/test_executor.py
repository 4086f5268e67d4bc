"""The executor of a run: Ray workers that live for the whole run, and the local twin."""

import os
import sys
from pathlib import Path

import pytest
from helpers import data_files, sharded_records

from stackcurate.core.config import build_config
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage

FILES = [("/src/app.py", "import os\nprint(os.getcwd())\n"), ("/README.md", "# Widgets\n")]


def _pid(_: int) -> int:
    return os.getpid()


def _language(tmp_path: Path, out: str, opts: RunOptions, executor: object = None) -> object:
    spec = get_stage("language")
    cfg = build_config(spec.config, {})
    return run_stage(spec, cfg, str(tmp_path / out), opts, input_uri=str(tmp_path / "in"), executor=executor)


@pytest.mark.ray
def test_ray_workers_serve_every_stage_and_phase_of_a_run(tmp_path, ray_local, monkeypatch):
    from stackcurate.runners import ray as ray_runner
    from stackcurate.runners.ray import RayExecutor

    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    sharded_records(tmp_path / "in", FILES, 3)
    executor = RayExecutor(workers=2, progress=False)
    try:
        first = set(executor.map(_pid, [(i,) for i in range(8)], "phase one"))
        assert 1 <= len(first) <= 2 and os.getpid() not in first
        result = _language(tmp_path, "out", RunOptions(progress=False), executor)
        assert result.shards_run == 3
        second = set(executor.map(_pid, [(i,) for i in range(8)], "phase two"))
        assert first <= second and len(second) <= 2  # the same processes (the second may have joined since)

        monkeypatch.setenv("STACKCURATE_WORKER_RECYCLE_MB", "1")  # every worker now holds "too much" after a stage
        waited: set[int] = set()
        running = ray_runner._running
        monkeypatch.setattr(ray_runner, "_running", lambda pid: waited.add(pid) or running(pid))
        _language(tmp_path, "again", RunOptions(progress=False), executor)
        assert waited == second and not any(map(running, second))  # gone before their replacements load
        replaced = set(executor.map(_pid, [(i,) for i in range(8)], "phase three"))
        assert replaced and not replaced & second
    finally:
        executor.close()
    assert data_files(tmp_path / "out/language") == data_files(tmp_path / "again/language")


@pytest.mark.ray
def test_the_autoscaler_monitor_is_ended_before_a_shutdown_and_ray_still_runs(ray_local):
    """The embedded Ray's monitor answers no SIGTERM for a second of every shutdown; ending it first is safe."""
    from stackcurate.runners.ray_start import end_monitor

    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    monitors = ray_local._private.worker._global_node.all_processes.get("monitor", [])
    assert monitors
    end_monitor()
    assert all(info.process.poll() is not None for info in monitors)
    assert ray_local.get(ray_local.remote(_pid).remote(0)) != os.getpid()


def test_the_local_executor_builds_a_stage_once_per_stage_run(tmp_path, monkeypatch):
    from stackcurate.stages import language

    sharded_records(tmp_path / "in", FILES, 3)
    built = []
    original = language.LanguageStage.__init__

    def counting(self, cfg):  # noqa: ANN001
        built.append(cfg)
        original(self, cfg)

    monkeypatch.setattr(language.LanguageStage, "__init__", counting)
    _language(tmp_path, "out", RunOptions(runner="local", progress=False))
    assert len(built) == 2  # once on the driver to check its settings, once for all three shards

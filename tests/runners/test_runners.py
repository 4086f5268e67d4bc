"""The runners: local and Ray give identical files; an interrupted stage reruns to the same result."""

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import helpers
import pytest
from helpers import StageWrapper, data_files, free_port, read_all, sharded_records, state, wrapped_stage

from stackcurate.core.config import build_config
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage

FILES = [
    ("/src/app.py", "import os\nprint(os.getcwd())\n"),
    ("/src/util.c", "#include <stdio.h>\nint main(void) { return 0; }\n"),
    ("/README.md", "# Widgets\n\nA library of widgets.\n"),
    ("/data/config.json", '{"a": 1}\n'),
    ("/lib/main.go", "package main\n\nfunc main() {}\n"),
    ("/x.unknownext", "zzz\n"),
]


def _input(tmp_path: Path, shards: int = 3) -> Path:
    return sharded_records(tmp_path / "in", FILES, shards)


def _language(tmp_path: Path, out: str, opts: RunOptions, **cfg) -> object:
    spec = get_stage("language")
    config = build_config(spec.config, {"languages": "filters/languages/starcoder2_smol_v1.txt", **cfg})
    return run_stage(spec, config, str(tmp_path / out), opts, input_uri=str(tmp_path / "in"))


@pytest.mark.ray
def test_local_and_ray_runners_write_identicaldata_files(tmp_path, ray_local):
    _input(tmp_path)
    local = _language(tmp_path, "local", RunOptions(runner="local", progress=False))
    on_ray = _language(tmp_path, "ray", RunOptions(runner="ray", progress=False))
    assert (local.docs_in, local.docs_out, local.docs_removed) == (
        on_ray.docs_in,
        on_ray.docs_out,
        on_ray.docs_removed,
    )
    assert local.docs_out > 0 and local.docs_removed > 0
    assert data_files(tmp_path / "local/language") == data_files(tmp_path / "ray/language")


@pytest.mark.ray
def test_output_does_not_depend_on_worker_count(tmp_path, ray_local):
    _input(tmp_path, shards=4)
    _language(tmp_path, "one", RunOptions(runner="ray", workers=1, progress=False))
    _language(tmp_path, "two", RunOptions(runner="ray", workers=2, progress=False))
    assert data_files(tmp_path / "one/language") == data_files(tmp_path / "two/language")


class _Crash(BaseException):  # like KeyboardInterrupt or a killed worker: not bad input
    pass


class _CrashOnShard(StageWrapper):
    """Wraps a stage and dies in the middle of one shard, after part of it was written."""

    def __init__(self, stage, crash_path: str) -> None:
        self.stage, self.crash_path, self.name = stage, crash_path, stage.name

    def read(self, shard):
        for i, table in enumerate(self.stage.read(shard)):
            if shard.path.endswith(self.crash_path) and i == 0:
                yield table  # the first batch gets written to the shard's temporary files ...
                raise _Crash  # ... then the worker dies
            yield table

    def output_schema(self, shard):
        return self.stage.output_schema(shard)

    def __call__(self, table):
        return self.stage(table)


class _DieOnce(StageWrapper):
    """Wraps a stage; the worker process exits in the middle of one shard, the first time only."""

    def __init__(self, stage, crash_path: str, flag: str) -> None:
        self.stage, self.crash_path, self.flag, self.name = stage, crash_path, flag, stage.name

    def read(self, shard):
        for table in self.stage.read(shard):
            yield table
            if shard.path.endswith(self.crash_path) and not os.path.exists(self.flag):
                Path(self.flag).touch()
                os._exit(1)  # the worker dies with a half-written shard

    def output_schema(self, shard):
        return self.stage.output_schema(shard)

    def __call__(self, table):
        return self.stage(table)


@pytest.mark.ray
def test_a_dead_ray_worker_is_replaced_and_its_shard_redone(tmp_path, ray_local, monkeypatch):
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    ray_local.cloudpickle.register_pickle_by_value(helpers)  # its StageWrapper
    _input(tmp_path, shards=4)
    clean = _language(tmp_path, "clean", RunOptions(runner="ray", workers=2, progress=False))
    spec = get_stage("language")
    flag = str(tmp_path / "died")
    dying = wrapped_stage(spec, lambda stage: _DieOnce(stage, "00002.parquet", flag))
    config = build_config(spec.config, {"languages": "filters/languages/starcoder2_smol_v1.txt"})
    crashed = run_stage(
        dying, config, str(tmp_path / "crashed"), RunOptions(runner="ray", workers=2, progress=False),
        input_uri=str(tmp_path / "in"),
    )  # fmt: skip
    assert os.path.exists(flag)  # a worker did die
    assert (crashed.docs_in, crashed.docs_out) == (clean.docs_in, clean.docs_out)
    assert data_files(tmp_path / "crashed/language") == data_files(tmp_path / "clean/language")
    assert not list((tmp_path / "crashed/language").rglob("*.tmp-*"))  # the dead attempt left no files


def test_interrupted_stage_reruns_to_the_same_result(tmp_path):
    _input(tmp_path, shards=4)
    opts = RunOptions(runner="local", progress=False)
    clean = _language(tmp_path, "clean", opts, batch_rows=2)

    spec = get_stage("language")
    cfg = build_config(spec.config, {"languages": "filters/languages/starcoder2_smol_v1.txt", "batch_rows": 2})
    crashing = wrapped_stage(spec, lambda stage: _CrashOnShard(stage, "00002.parquet"))
    with pytest.raises(_Crash):
        run_stage(crashing, cfg, str(tmp_path / "rerun"), opts, input_uri=str(tmp_path / "in"))
    stage_dir = tmp_path / "rerun/language"
    assert not state(stage_dir, "SUCCESS").exists()
    assert sorted(p.name for p in state(stage_dir, "shards").iterdir()) == ["00000.json", "00001.json"]
    assert not (stage_dir / "00002.parquet").exists()  # nothing half-written is visible

    again = run_stage(spec, cfg, str(tmp_path / "rerun"), opts, input_uri=str(tmp_path / "in"))
    assert again.shards_run == 2  # shards 0 and 1 were kept from the first run
    assert state(stage_dir, "SUCCESS").exists()
    assert not [p for p in stage_dir.rglob("*") if ".tmp-" in p.name]
    assert data_files(stage_dir) == data_files(tmp_path / "clean/language")
    assert (again.docs_in, again.docs_out) == (clean.docs_in, clean.docs_out)
    kept = read_all(stage_dir).column("doc_id").to_pylist()
    assert len(kept) == len(set(kept))  # no duplicates


def test_rerun_with_other_config_needs_overwrite(tmp_path):
    from stackcurate.core.errors import StackcurateError

    _input(tmp_path, shards=1)
    opts = RunOptions(runner="local", progress=False)
    _language(tmp_path, "out", opts)
    assert _language(tmp_path, "out", opts).shards_run == 0  # finished: nothing to redo
    with pytest.raises(StackcurateError, match="--overwrite"):
        _language(tmp_path, "out", opts, drop_vendor=True)
    result = _language(tmp_path, "out", dataclasses.replace(opts, overwrite=True), drop_vendor=True)
    assert result.shards_run == 1


@pytest.mark.ray
def test_ray_address_runs_on_an_existing_cluster(tmp_path):
    """`ray start --head` on loopback, then the CLI with --ray-address, in a separate process."""
    _input(tmp_path, shards=2)
    port = free_port()
    # A loopback-only throwaway cluster: token auth (on by default since Ray 2.5x) is turned off for it.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [
            "ray",
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--block",
            "--node-ip-address=127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    try:
        out = tmp_path / "cluster"
        cmd = [
            sys.executable,
            "-m",
            "stackcurate.cli",
            "language",
            "--out",
            str(out),
            "--input",
            str(tmp_path / "in"),
            "--languages",
            "filters/languages/starcoder2_smol_v1.txt",
            "--ray-address",
            f"127.0.0.1:{port}",
            "--no-progress",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=100)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "(1 workers)" in done.stderr or "language:" in done.stdout
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
    _language(tmp_path, "local", RunOptions(runner="local", progress=False))
    assert data_files(out / "language") == data_files(tmp_path / "local/language")


def test_ray_pays_off_only_when_spreading_saves_more_than_its_start():
    from stackcurate.runners.auto import ray_pays_off

    assert not ray_pays_off(10.0, 2, 7.0)  # saves 5 s of 10: less than Ray's 7 s
    assert ray_pays_off(20.0, 2, 7.0)  # saves 10 s
    assert ray_pays_off(9.0, 8, 7.0)  # saves 7.9 s on 8 cores
    assert not ray_pays_off(1000.0, 1, 7.0)  # one core: nothing to spread


def test_the_auto_runner_runs_a_small_stage_here_and_says_so(tmp_path, caplog, monkeypatch):
    """A stage whose work is small runs in this process (no Ray started), with one line saying why; the rows are
    those of `--runner local`."""
    import logging

    from stackcurate.runners import make_executor
    from stackcurate.runners.auto import AutoExecutor

    _input(tmp_path)
    executor = make_executor("auto")
    assert isinstance(executor, AutoExecutor)
    started = []
    monkeypatch.setattr("stackcurate.runners.ray.RayExecutor.__init__", lambda *a, **k: started.append(1))
    with caplog.at_level(logging.INFO, logger="stackcurate"):
        _language(tmp_path, "auto", RunOptions(runner="auto", progress=False))
    assert started == []
    said = [r.getMessage() for r in caplog.records]
    assert any("running in this process" in line and "--runner ray" in line for line in said), said
    _language(tmp_path, "local", RunOptions(runner="local", progress=False))
    assert read_all(tmp_path / "auto" / "language") == read_all(tmp_path / "local" / "language")
    # a cluster's address, or a number of workers, asks for Ray
    assert not isinstance(make_executor("auto", workers=2), AutoExecutor)
    assert not isinstance(make_executor("auto", address="127.0.0.1:6379"), AutoExecutor)

"""How Ray runs fail: one line, within seconds, with the cause named; a worker's own exception as itself."""

import errno
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import helpers
import pyarrow as pa
import pytest
from helpers import StageWrapper, data_files, free_port, sharded_records, wrapped_stage

from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.pipeline import RunOptions, StageResult, run_stage
from stackcurate.stages import get_stage

LANGUAGES = str(Path("filters/languages/starcoder2_smol_v1.txt").resolve())
FILES = [("/src/app.py", "import os\nprint(os.getcwd())\n"), ("/README.md", "# Widgets\n")]


def _input(tmp_path: Path, shards: int = 2) -> Path:
    return sharded_records(tmp_path / "in", FILES, shards)


def _cli(tmp_path: Path, address: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    """`stackcurate language --ray-address ADDRESS` in a fresh process (Ray connects once per process)."""
    cmd = [sys.executable, "-m", "stackcurate.cli", "language", "--out", str(tmp_path / "out"), "--input"]
    cmd += [str(tmp_path / "in"), "--languages", LANGUAGES, "--ray-address", address, "--no-progress"]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=100)
    return done, time.monotonic() - started


def _said(done: subprocess.CompletedProcess) -> list[str]:
    """What the command wrote to stderr besides the config it echoes (`language:` and indented lines)."""
    return [line for line in done.stderr.splitlines() if not line.startswith(("language:", "  "))]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment without Ray's auth settings (the session's embedded Ray sets RAY_AUTH_MODE), a HOME
    of its own (no ~/.ray/auth_token), and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    (tmp_path / "home").mkdir(exist_ok=True)
    return {**env, "HOME": str(tmp_path / "home"), "RAY_USAGE_STATS_ENABLED": "0", **extra}


@pytest.mark.ray
def test_an_address_where_nothing_listens_fails_in_one_line_within_seconds(tmp_path):
    pytest.importorskip("ray")
    _input(tmp_path)
    address = f"127.0.0.1:{free_port()}"  # bound and released: nothing listens there
    done, seconds = _cli(tmp_path, address, _env(tmp_path))
    print(f"unreachable address: {seconds:.1f} s")
    assert done.returncode == 2
    assert _said(done) == [
        f"stackcurate: error: nothing answers at {address} (Connection refused); start the cluster "
        "(`ray start --head`) or fix --ray-address / RAY_ADDRESS"
    ]
    assert seconds < 60  # about 4 s, mostly imports; Ray alone retried for minutes


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_cluster_that_wants_a_token_says_so_and_joins_with_it(tmp_path):
    _input(tmp_path)
    port, token = free_port(), secrets.token_hex(32)
    head = subprocess.Popen(
        ["ray", "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false"]
        + ["--disable-usage-stats", "--block", "--node-ip-address=127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token),
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while subprocess.run(["ray", "status", f"--address={address}"], capture_output=True, env=_env(
            tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token
        )).returncode:  # fmt: skip
            assert head.poll() is None and time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(1)

        no_token, seconds = _cli(tmp_path, address, _env(tmp_path))
        print(f"no token: {seconds:.1f} s")
        assert no_token.returncode == 2
        assert _said(no_token) == [
            f"stackcurate: error: the Ray cluster at {address} uses token authentication: set RAY_AUTH_MODE=token "
            "and give this machine the cluster's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
        ]
        assert seconds < 60

        wrong, _ = _cli(tmp_path, address, _env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64))
        assert wrong.returncode == 2
        assert _said(wrong) == [
            f"stackcurate: error: the Ray cluster at {address} uses token authentication and refused this "
            "machine's token; give it the cluster's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
        ]

        joined, _ = _cli(tmp_path, address, _env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token))
        assert joined.returncode == 0, joined.stderr[-2000:]
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
    spec = get_stage("language")
    local = tmp_path / "local"
    config = build_config(spec.config, {"languages": LANGUAGES})
    run_stage(spec, config, str(local), RunOptions(runner="local", progress=False), input_uri=str(tmp_path / "in"))
    assert data_files(tmp_path / "out/language") == data_files(local / "language")


class _Raises(StageWrapper):
    """Wraps a stage; its call on shard 00001's rows raises `error`, as a stage's own code would."""

    def __init__(self, stage: object, error: BaseException) -> None:
        self.stage, self.error, self.name = stage, error, stage.name

    def read(self, shard: object) -> object:
        return self.stage.read(shard)

    def output_schema(self, shard: object) -> pa.Schema:
        return self.stage.output_schema(shard)

    def __call__(self, table: pa.Table) -> object:
        if table.column("doc_id")[0].as_py() >= 100:
            raise self.error
        return self.stage(table)


def _language(tmp_path: Path, out: str, wrap: type, *args: object) -> StageResult:
    spec = wrapped_stage(get_stage("language"), lambda stage: wrap(stage, *args))
    config = build_config(spec.config, {"languages": LANGUAGES})
    opts = RunOptions(runner="ray", workers=2, progress=False)
    return run_stage(spec, config, str(tmp_path / out), opts, input_uri=str(tmp_path / "in"))


@pytest.mark.ray
@pytest.mark.parametrize(
    "error",
    [
        PermissionError(errno.EACCES, "Permission denied", "/data/out/00001.parquet"),
        StackcurateError("language: the rules table is missing on this node"),
    ],
    ids=["oserror", "stackcurate_error"],
)
def test_a_shard_s_own_exception_reaches_the_driver_as_itself(tmp_path, ray_local, error):
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    ray_local.cloudpickle.register_pickle_by_value(helpers)  # its StageWrapper
    _input(tmp_path)
    with pytest.raises(type(error)) as caught:
        _language(tmp_path, "out", _Raises, error)
    assert type(caught.value) is type(error)  # not Ray's wrapper: the CLI maps these to one line
    assert caught.value.args == error.args
    if isinstance(error, OSError):
        assert (caught.value.errno, caught.value.filename) == (errno.EACCES, "/data/out/00001.parquet")
    assert not (tmp_path / "out/_state/language/SUCCESS").exists()


def _task(item: int) -> int:
    if item == 2:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", f"/data/{item}")
    return item * 10


@pytest.mark.ray
def test_a_task_s_own_exception_reaches_the_driver_as_itself(ray_local):
    from stackcurate.runners import ray as runner

    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    ray_local.cloudpickle.register_pickle_by_value(helpers)  # its StageWrapper
    assert runner.map_tasks(_task, [(0,), (1,), (3,)], "tasks", progress=False) == [0, 10, 30]
    with pytest.raises(FileNotFoundError) as caught:
        runner.map_tasks(_task, [(0,), (1,), (2,), (3,)], "tasks", progress=False)
    assert type(caught.value) is FileNotFoundError
    assert (caught.value.errno, caught.value.filename) == (errno.ENOENT, "/data/2")


class _DieAlways(StageWrapper):
    """Wraps a stage; the worker process exits in the middle of shard 00001, every time."""

    def __init__(self, stage: object) -> None:
        self.stage, self.name = stage, stage.name

    def read(self, shard: object) -> object:
        for table in self.stage.read(shard):
            yield table
            if shard.index == 1:
                os._exit(1)

    def output_schema(self, shard: object) -> pa.Schema:
        return self.stage.output_schema(shard)

    def __call__(self, table: pa.Table) -> object:
        return self.stage(table)


@pytest.mark.ray
def test_a_shard_that_kills_every_worker_stops_the_run_after_four_attempts(tmp_path, ray_local):
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray_local.cloudpickle.register_pickle_by_value(helpers)  # its StageWrapper
    _input(tmp_path, shards=3)
    with pytest.raises(StackcurateError) as caught:
        _language(tmp_path, "out", _DieAlways)
    assert re.fullmatch(
        r"language: shard 00001 lost its worker 4 times \(.+\); finished shards are kept: rerun to resume, or "
        r"look for an input that exhausts memory",
        str(caught.value),
    ), caught.value
    assert "\n" not in str(caught.value)
    assert sorted(p.name for p in (tmp_path / "out/_state/language/shards").iterdir()) == ["00000.json", "00002.json"]


def test_workers_do_not_size_the_embedded_ray(monkeypatch, tmp_path):
    """`--workers` is how many run at once; the embedded Ray's size is `--ray-cpus` (issue 16)."""
    from stackcurate.runners import ray as runner

    sizes = []

    def fake_init(address=None, num_cpus=None):
        sizes.append(num_cpus)
        raise StackcurateError("stop here")

    monkeypatch.setattr(runner, "init", fake_init)
    for opts in (RunOptions(workers=1), RunOptions(workers=1, ray_cpus=2)):
        with pytest.raises(StackcurateError, match="stop here"):
            opts.executor().map(print, [("x",)], "test")
    assert sizes == [None, 2]
    with pytest.raises(StackcurateError, match="--ray-cpus must be at least 1"):
        RunOptions(ray_cpus=0)

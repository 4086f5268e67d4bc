"""Three Ray nodes on this machine, joined as a user joins a cluster (`ray start`, a token, `--ray-address`).

The golden pipeline run on them gives the golden outputs, and reports each node's busy time. One worker
node runs in a mount namespace of its own (`unshare -m`) where a tmpfs hides a folder: for that node the
folder is another disk, as a path on the driver's own disk is for a node of a real cluster. An `--out` there
stops the run in one line before any work.
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# Three nodes and a run on two cores: ~60 s on a quiet machine; three times slower stays inside this.
pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


def _env(home: Path, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    return {**env, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": token}  # fmt: skip


def _alive_nodes(address: str, env: dict[str, str]) -> int:
    code = (
        f"import ray; ray.init(address='{address}', logging_level='ERROR'); "
        "print(sum(n['Alive'] for n in ray.nodes()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else 0


@pytest.fixture(scope="module")
def cluster():
    """(address, env, hidden folder): a head and two worker nodes, 1 CPU each; the second cannot see `hidden`."""
    if shutil.which("unshare") is None or subprocess.run(
        ["unshare", "-m", "true"], capture_output=True
    ).returncode:  # fmt: skip
        pytest.skip("needs `unshare -m` (util-linux, and the right to make a mount namespace)")
    base = Path(tempfile.mkdtemp(prefix="scmn", dir="/tmp"))  # short: Ray's socket paths have a length limit
    hidden = base / "hidden"
    hidden.mkdir()
    (base / "home").mkdir()
    token, port = secrets.token_hex(32), free_port()
    address = f"127.0.0.1:{port}"
    env = _env(base / "home", token)
    common = ["--num-cpus=1", "--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    head = ["ray", "start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={base}/h", *common]
    worker = ["ray", "start", f"--address={address}", *common]
    hide = f"mount -t tmpfs tmpfs {hidden} && exec {' '.join(worker)} --temp-dir={base}/w2"
    commands = [head, [*worker, f"--temp-dir={base}/w1"], ["unshare", "-m", "sh", "-c", hide]]
    nodes = []
    try:
        for i, command in enumerate(commands):
            nodes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True, env=env))  # fmt: skip
            deadline = time.monotonic() + 180
            while _alive_nodes(address, env) < i + 1:
                assert all(n.poll() is None for n in nodes), f"Ray node {i} did not start: {command}"
                assert time.monotonic() < deadline, f"Ray node {i} did not join"
                time.sleep(1)
        yield address, env, hidden
    finally:
        for node in nodes:
            with_group = os.getpgid(node.pid) if node.poll() is None else None
            if with_group is not None:
                os.killpg(with_group, signal.SIGKILL)
            node.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def _run(out: Path, address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "stackcurate.cli", "run", str(FIXTURES / "mini" / "pipeline.yaml"), "--out",
            str(out), "--ray-address", address, "--no-progress"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=540)


def test_three_nodes_give_the_golden_outputs_and_report_each_node_busy(tmp_path, cluster):
    address, env, _ = cluster
    sys.path.insert(0, str(FIXTURES))
    from make_mini import outcome

    done = _run(tmp_path / "out", address, env)
    assert done.returncode == 0, done.stderr[-3000:]
    golden = json.loads((FIXTURES / "mini_golden.json").read_text())
    for stage in ("ingest", "license", "language", "filter"):  # fused: only decontaminate writes kept rows
        golden[stage]["kept"] = None
    assert outcome(tmp_path / "out") == golden
    line = next(x for x in done.stdout.splitlines() if x.startswith("ingest:"))
    busy = re.search(r"; nodes busy (.*) \(slowest ([0-9.]+)x the mean\)$", line)
    assert busy, line
    assert len(re.findall(r"\S+ \([0-9a-f]{8}\) [0-9.]+ s", busy.group(1))) >= 2, line


def test_a_local_out_one_node_cannot_see_stops_before_any_work(cluster):
    address, env, hidden = cluster
    out = hidden / "out"
    done = _run(out, address, env)
    assert done.returncode == 2, done.stderr[-3000:]
    said = [x for x in done.stderr.splitlines() if x.startswith("stackcurate: error:")]
    assert len(said) == 1, done.stderr[-3000:]
    assert re.fullmatch(
        rf"stackcurate: error: --out {re.escape(str(out))} is a folder of this machine that 1 of the cluster's 3 "
        r"nodes cannot see \(\S+ \([0-9a-f]{8}\)\); on a cluster, use a folder every node mounts at the "
        r"same path \(NFS, a shared volume\) or an object store \(s3://bucket/run\)",
        said[0],
    ), said[0]
    assert not (out / "ingest").exists() or not any((out / "ingest").rglob("*.parquet")), "no shard ran"

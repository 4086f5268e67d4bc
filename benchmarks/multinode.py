"""Work spread over three Ray nodes when one repository is 20x the others: each node's busy time per stage.

The input is real code: repositories of the e2e benchmark's sample (`work/bench_e2e/sample`, built by
`benchmarks/pipeline_e2e.py`), `--repos` of about `--small-mb` MB each and one of 20x that, with their metadata
grouped by repository as The Stack v2's is (the big repository's rows are consecutive). A cluster of three nodes
starts on this machine as a user would start one (`ray start`: a head and two workers, 1 CPU each, temp dirs
of their own, joined with a token), and the pipeline (ingest to format, PII by patterns) runs on it through
`--ray-address`. Each stage line's `nodes busy` figures give the slowest node's busy time over the mean. The
same pipeline then runs on the embedded Ray, and the final rows and every stage's removed rows must be equal.

    python benchmarks/multinode.py [--repos 20] [--small-mb 2] [--shards-per-node 4]

Writes benchmarks/results/multinode.json and prints a Markdown table.
"""

import argparse
import json
import math
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "work" / "bench_e2e" / "sample"
STAGES = ("ingest", "license", "language", "filter", "decontaminate", "dedup", "pii", "format")
BUSY = re.compile(r"^(\w+): .*; nodes busy (.*) \(slowest ([0-9.]+)x the mean\)$")


def skewed_metadata(folder: Path, repos: int, small_mb: float) -> dict[str, float]:
    """Metadata of `repos` repositories of ~`small_mb` MB and one of ~20x that, rows grouped by repository."""
    meta = f"{SAMPLE}/metadata/*.parquet"
    sizes = duckdb.sql(
        f"select repo_name, sum(length_bytes) / 1e6 mb from '{meta}' where length_bytes <= 1000000 group by 1"
    ).fetchall()
    big = max(sizes, key=lambda r: r[1])[0]
    small = sorted((r for r in sizes if r[0] != big and r[1] >= small_mb), key=lambda r: r[1])[:repos]
    if len(small) < repos:
        sys.exit(f"{SAMPLE} has only {len(small)} repositories of at least {small_mb} MB besides the largest")
    budget = {name: small_mb for name, _ in small} | {big: 20 * small_mb}
    # Each repository's files in path order, cut where its budget is reached.
    rows = duckdb.sql(
        f"select * from (select *, sum(length_bytes) over (partition by repo_name order by path) / 1e6 upto "
        f"from '{meta}' where length_bytes <= 1000000 and repo_name in ({', '.join(repr(n) for n in budget)})) "
        "order by repo_name, path"
    ).to_arrow_table()
    keep = [u - length / 1e6 < budget[r] for r, u, length in zip(
        rows.column("repo_name").to_pylist(), rows.column("upto").to_pylist(),
        rows.column("length_bytes").to_pylist(), strict=True)]  # fmt: skip
    import pyarrow as pa

    table = rows.filter(pa.array(keep)).drop_columns(["upto"])
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "00000.parquet")
    got = duckdb.sql(f"select repo_name, sum(length_bytes) / 1e6 from '{folder}/00000.parquet' group by 1").fetchall()
    return {name: round(mb, 2) for name, mb in got}


def pipeline(path: Path, metadata: Path, rows: int, out: Path) -> Path:
    """Ingest to format, `rows` metadata rows per ingest shard, PII by patterns only."""
    stages = {
        "ingest": {
            "metadata": [str(metadata / "*.parquet")],
            "content": str(SAMPLE),
            "rows_per_shard": rows,
        },
        "license": {},
        "language": {"languages": str(ROOT / "filters" / "languages" / "starcoder2_smol_v1.txt")},
        "filter": {"rules": str(ROOT / "filters" / "starcoder2_v1.yaml")},
        "decontaminate": {"benchmarks": ["humaneval"]},
        "dedup": {"verify": True},
        "pii": {"entities": ["EMAIL", "IP_ADDRESS", "KEY", "PASSWORD"], "model": "none"},
        "format": {},
    }
    path.write_text(yaml.safe_dump({"out": str(out), "stages": stages}, sort_keys=False))  # --out overrides it
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A head and two worker nodes started with `ray start`, 1 CPU each, joined with a token."""

    def __init__(self, nodes: int = 3) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="scmb", dir="/tmp"))  # short: Ray's socket paths are limited
        (self.base / "home").mkdir()
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
        self.env = {**env, "HOME": str(self.base / "home"), "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}  # fmt: skip
        common = ["--num-cpus=1", "--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        self.procs: list[subprocess.Popen] = []
        for i in range(nodes):
            where = (
                ["--head", f"--port={port}", "--include-dashboard=false"] if i == 0 else [f"--address={self.address}"]
            )
            command = ["ray", "start", *where, *common, f"--temp-dir={self.base}/n{i}"]
            self.procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                               start_new_session=True, env=self.env))  # fmt: skip
            self.wait_for(i + 1)

    def wait_for(self, nodes: int) -> None:
        code = (f"import ray; ray.init(address='{self.address}', logging_level='ERROR'); "
                "print(sum(n['Alive'] for n in ray.nodes()))")  # fmt: skip
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=self.env)
            if done.returncode == 0 and int(done.stdout.split()[-1]) >= nodes:
                return
            time.sleep(1)
        raise SystemExit(f"the Ray cluster did not reach {nodes} nodes")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
            proc.wait(timeout=30)
        shutil.rmtree(self.base, ignore_errors=True)


def run(yaml_path: Path, out: Path, extra: list[str], env: dict[str, str]) -> tuple[float, list[str]]:
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "stackcurate.cli", "run", str(yaml_path), "--out", str(out), "--no-progress"]
    started = time.perf_counter()
    done = subprocess.run([*command, *extra], capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return time.perf_counter() - started, done.stdout.splitlines()


def outputs(out: Path) -> dict[str, list[str]]:
    """The final rows and every stage's removed rows, in a stable order (as text: NaN scores compare equal)."""
    con = duckdb.connect()
    found = {"format": f"'{out}/format/*.parquet'"}
    for stage in STAGES:
        if list((out / "_removed" / stage).glob("*.parquet")):
            found[f"{stage}/removed"] = f"'{out}/{stage}/removed/*.parquet'"
    return {name: [repr(r) for r in con.sql(f"select * from {files} order by all").fetchall()]
            for name, files in found.items()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=int, default=20)
    parser.add_argument("--small-mb", type=float, default=2.0)
    parser.add_argument("--shards-per-node", type=int, default=4)
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench_multinode")
    args = parser.parse_args()
    if not (SAMPLE / "metadata").is_dir():
        sys.exit(f"no {SAMPLE}: build it with benchmarks/pipeline_e2e.py first")
    sizes = skewed_metadata(args.work / "metadata", args.repos, args.small_mb)
    rows = pq.read_metadata(args.work / "metadata" / "00000.parquet").num_rows
    rows_per_shard = math.ceil(rows / (3 * args.shards_per_node))
    yaml_path = pipeline(args.work / "pipeline.yaml", args.work / "metadata", rows_per_shard, args.work / "out")
    cluster = Cluster()
    try:
        wall, lines = run(yaml_path, args.work / "out-cluster", ["--ray-address", cluster.address], cluster.env)
    finally:
        cluster.close()
    groups = {}
    for line in lines:
        if match := BUSY.match(line):
            busy = {node: float(s) for node, s in re.findall(r"(\S+ \([0-9a-f]{8}\)) ([0-9.]+) s", match.group(2))}
            groups[match.group(1)] = {"slowest_over_mean": float(match.group(3)), "busy_s": busy}
    embedded_wall, _ = run(yaml_path, args.work / "out-embedded", [], dict(os.environ))
    equal = outputs(args.work / "out-cluster") == outputs(args.work / "out-embedded")
    result = {
        "input": {"repositories_mb": sizes, "rows": rows, "rows_per_shard": rows_per_shard},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cluster": {"nodes": 3, "cpus_per_node": 1, "wall_s": round(wall, 1), "stage_lines": lines},
        "embedded_wall_s": round(embedded_wall, 1),
        "outputs_equal": equal,
        "groups": groups,
    }
    (ROOT / "benchmarks" / "results" / "multinode.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"input: {rows} files; {len(sizes) - 1} repositories of ~{args.small_mb} MB, one of "
          f"{max(sizes.values())} MB; {rows_per_shard} rows per ingest shard")  # fmt: skip
    print(f"cluster wall {wall:.1f} s, embedded {embedded_wall:.1f} s, outputs equal: {equal}\n")
    print("| stage (group) | busy per node (s) | slowest / mean |\n|---|---|---|")
    for name, group in groups.items():
        busy = ", ".join(f"{s:.1f}" for s in group["busy_s"].values())
        print(f"| {name} | {busy} | {group['slowest_over_mean']:.2f} |")


if __name__ == "__main__":
    main()

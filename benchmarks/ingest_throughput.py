"""Ingest throughput on >= 100 MB of real code, with 1 and 2 Ray workers.

The corpus is `stackcurate sample` at the requested size: real files from this machine's Python installation
(stdlib and site-packages: Python, C/C++ headers, Cython, JS, docs, and binaries that ingest drops), laid out
as The Stack v2 metadata + SWH gzip content store. Each run is the CLI a user would type, timed end to end
(Ray start included) and per stage (the shards' own time).

    python benchmarks/ingest_throughput.py [--mb 120] [--workers 1 2] [--runs 1]

Writes benchmarks/results/ingest_throughput.json and prints a Markdown table.
"""

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=120.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--work", default=str(ROOT / "work" / "bench"))
    args = parser.parse_args()

    work = Path(args.work)
    sample = work / "sample"
    cli = [sys.executable, "-m", "stackcurate.cli"]
    if not (sample / "metadata" / "00000.parquet").exists() or "--rebuild" in sys.argv:
        run([*cli, "sample", str(sample), "--max-mb", str(args.mb), "--max-files", "1000000"])
    meta = duckdb.sql(f"select count(*), sum(length_bytes) from '{sample}/metadata/*.parquet'").fetchall()[0]
    files, raw_bytes = int(meta[0]), int(meta[1])
    compressed = sum(p.stat().st_size for p in (sample / "content").iterdir())

    results = []
    for workers in args.workers:
        for attempt in range(args.runs):
            out = work / f"out-{workers}"
            shutil.rmtree(out, ignore_errors=True)
            wall = run([*cli, "ingest", "--out", str(out), "--metadata", str(sample / "metadata" / "*.parquet"),
                        "--content", str(sample), "--rows-per-shard", "2000", "--workers", str(workers),
                        "--no-progress"])
            stats = dict(duckdb.sql(
                f"select metric, sum(value) from '{out}/ingest/stats/*.parquet' group by 1").fetchall())
            shard_seconds = stats["seconds"]
            results.append({
                "workers": workers, "run": attempt, "files": files, "input_mb": raw_bytes / 1e6,
                "compressed_mb": compressed / 1e6, "kept_files": int(stats.get("docs_out", 0)),
                "kept_mb": stats.get("bytes_out", 0) / 1e6, "wall_s": wall, "shard_cpu_s": shard_seconds,
                "mb_per_s": raw_bytes / 1e6 / wall, "files_per_s": files / wall,
                "mb_per_s_per_core": raw_bytes / 1e6 / wall / workers,
                "files_per_s_per_core": files / wall / workers,
                "mb_per_s_per_core_excl_startup": raw_bytes / 1e6 / shard_seconds,
            })
            print(json.dumps(results[-1]), file=sys.stderr)

    machine = {"cpus": __import__("os").cpu_count(), "python": platform.python_version(), "machine": platform.machine()}
    target = ROOT / "benchmarks" / "results" / "ingest_throughput.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps({"machine": machine, "results": results}, indent=1) + "\n")
    print("| workers | files | input MB | wall s | MB/s | files/s | MB/s/core | files/s/core | MB/s/core (shards only) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['workers']} | {r['files']:,} | {r['input_mb']:.1f} | {r['wall_s']:.1f} | {r['mb_per_s']:.2f} "
              f"| {r['files_per_s']:.0f} | {r['mb_per_s_per_core']:.2f} | {r['files_per_s_per_core']:.0f} "
              f"| {r['mb_per_s_per_core_excl_startup']:.2f} |")


if __name__ == "__main__":
    main()

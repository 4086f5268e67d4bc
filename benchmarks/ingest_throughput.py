"""Ingest throughput on >= 100 MB of real code, with 1 and 2 Ray workers.

The corpus is `stackcurate sample` at the requested size: real files from this machine's Python installation
(stdlib and site-packages: Python, C/C++ headers, Cython, JS, docs, and binaries that ingest drops), laid out
as The Stack v2 metadata + SWH gzip content store. Each run is the CLI a user would type, timed end to end
(Ray start included) and per stage (the shards' own time).

    python benchmarks/ingest_throughput.py [--mb 120] [--workers 0 1 2] [--runs 1]   # 0 = local runner

Writes benchmarks/results/ingest_throughput_<mb>mb.json and prints a Markdown table.
"""

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import corpus
import duckdb

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=120.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="0 = the local runner (no Ray)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--rebuild", action="store_true", help="rebuild the sample even if it exists")
    parser.add_argument("--work", default=str(ROOT / "work" / "bench"))
    args = parser.parse_args()

    work = Path(args.work)
    sample = corpus.sample(work, args.mb, rebuild=args.rebuild)
    meta = duckdb.sql(f"select count(*), sum(length_bytes) from '{sample}/metadata/*.parquet'").fetchall()[0]
    files, raw_bytes = int(meta[0]), int(meta[1])
    compressed = sum(p.stat().st_size for p in (sample / "content").iterdir())

    results = []
    for workers in args.workers:
        for attempt in range(args.runs):
            out = work / f"out-{workers}"
            shutil.rmtree(out, ignore_errors=True)
            runner = ["--runner", "local"] if workers == 0 else ["--workers", str(workers)]
            wall = corpus.stackcurate(
                *corpus.ingest_args(out, sample), "--rows-per-shard", "2000", *runner, "--no-progress"
            )
            stats = dict(
                duckdb.sql(f"select metric, sum(value) from '{out}/ingest/stats/*.parquet' group by 1").fetchall()
            )
            cores = max(workers, 1)
            shard_seconds = stats["seconds"]
            results.append(
                {
                    "runner": "local" if workers == 0 else "ray",
                    "cpus": cores,
                    "run": attempt,
                    "files": files,
                    "input_mb": raw_bytes / 1e6,
                    "compressed_mb": compressed / 1e6,
                    "kept_files": int(stats["docs_out"]),
                    "kept_mb": stats["bytes_out"] / 1e6,
                    "wall_s": wall,
                    "shard_s": shard_seconds,
                    "mb_per_s": raw_bytes / 1e6 / wall,
                    "files_per_s": files / wall,
                    "mb_per_s_per_core": raw_bytes / 1e6 / wall / cores,
                    "files_per_s_per_core": files / wall / cores,
                    # Steady state: the shards' own time, without process and Ray start-up (a fixed ~9 s here).
                    "shard_mb_per_s_per_core": raw_bytes / 1e6 / shard_seconds,
                    "shard_files_per_s_per_core": files / shard_seconds,
                }
            )
            print(json.dumps(results[-1]), file=sys.stderr)

    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()}
    target = ROOT / "benchmarks" / "results" / f"ingest_throughput_{int(args.mb)}mb.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps({"machine": machine, "results": results}, indent=1) + "\n")
    print(
        "| runner | CPUs | files | input MB | wall s | MB/s | files/s | MB/s/core | files/s/core "
        "| shard MB/s/core | shard files/s/core |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['runner']} | {r['cpus']} | {r['files']:,} | {r['input_mb']:.1f} | {r['wall_s']:.1f} "
            f"| {r['mb_per_s']:.2f} | {r['files_per_s']:.0f} | {r['mb_per_s_per_core']:.2f} "
            f"| {r['files_per_s_per_core']:.0f} | {r['shard_mb_per_s_per_core']:.2f} "
            f"| {r['shard_files_per_s_per_core']:.0f} |"
        )


if __name__ == "__main__":
    main()

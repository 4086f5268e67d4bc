"""Filter and decontamination throughput against the floor, on >= 100 MB of real code, one core.

The floor is what every stage pays anyway: read each object of the content store, gunzip it and decode it
(no hashing, no checks). In the same run and on the same decoded files, it then times the StarCoder2
filters, the StarCoder filters and decontamination (full HumanEval set loaded). Target (issue 3): all
StarCoder2 filters together cost at most as much again as the floor, i.e. filter time / floor time <= 1.

    python benchmarks/filter_throughput.py [--mb 120] [--work work/bench_filter]

The input is `stackcurate sample` (real code from this machine's Python installation); ingest and language
run first, untimed, so the rules see go-enry languages as in a real pipeline.
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import corpus
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]


def median(repeat: int, fn) -> float:  # noqa: ANN001
    """Median wall time of `repeat` calls (this machine's timings vary by ~20% from one call to the next)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=120.0)
    parser.add_argument("--work", default=str(ROOT / "work" / "bench_filter"))
    parser.add_argument("--batch-rows", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions; medians are reported")
    args = parser.parse_args()
    work = Path(args.work)
    sample, out = corpus.sample(work, args.mb), work / "out"
    if not (out / "_state" / "language" / "SUCCESS").exists():
        corpus.stackcurate(*corpus.ingest_args(out, sample), "--runner", "local", "--no-progress", "--overwrite")
        corpus.stackcurate(
            "language", "--out", str(out), "--input", str(out / "ingest"), "--runner", "local", "--no-progress",
            "--overwrite",
        )  # fmt: skip

    from stackcurate.sources.fetch import gunzip_bounded
    from stackcurate.stages.decontaminate import DecontaminateConfig, DecontaminateStage
    from stackcurate.stages.filter import FilterConfig, FilterStage
    from stackcurate.stages.ingest.content import decode

    # The floor: read + gunzip + decode every kept file's object, in this process.
    table = pa.concat_tables(pq.read_table(p) for p in sorted((out / "language").glob("*.parquet")))
    blob_ids = table.column("blob_id").to_pylist()
    encodings = table.column("src_encoding").to_pylist()

    def floor() -> None:
        for blob, encoding in zip(blob_ids, encodings, strict=True):
            data = gunzip_bounded((sample / "content" / blob).read_bytes(), 1_000_000, 100.0).data
            decode(data or b"", encoding)

    floor()  # warm the page cache: every measurement reads from memory
    floor_s = median(args.repeat, floor)
    mb = sum(table.column("length_bytes").to_pylist()) / 1e6
    batches = [pa.Table.from_batches([b]) for b in table.to_batches(max_chunksize=args.batch_rows)]

    def timed(stage) -> tuple[float, int]:  # noqa: ANN001
        stage(batches[0])  # warm up: one-time loads (numba's compiled kernel, ScanCode, ...) are not per MB
        removed = sum(stage(b).removed.num_rows for b in batches)
        return median(args.repeat, lambda: [stage(b) for b in batches]), removed

    results = {"files": table.num_rows, "input_mb": mb, "floor_s": floor_s, "floor_mb_per_s": mb / floor_s}
    for name in ("starcoder2_v1", "starcoder_v1"):
        stage = FilterStage(FilterConfig(rules=str(ROOT / "filters" / f"{name}.yaml")))
        seconds, removed = timed(stage)
        results[name] = {
            "seconds": seconds,
            "mb_per_s": mb / seconds,
            "removed": removed,
            "cost_vs_floor": seconds / floor_s,
        }
    started = time.perf_counter()
    decontam = DecontaminateStage(DecontaminateConfig(benchmarks=("humaneval",)))
    load_s = time.perf_counter() - started
    seconds, removed = timed(decontam)
    results["decontaminate_humaneval"] = {
        "seconds": seconds,
        "mb_per_s": mb / seconds,
        "removed": removed,
        "strings": decontam.counts["humaneval"],
        "load_s": load_s,
        "cost_vs_floor": seconds / floor_s,
    }
    results["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    target = ROOT / "benchmarks" / "results" / f"filter_throughput_{int(args.mb)}mb.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{results['files']:,} files, {mb:.1f} MB decoded, one core, medians of {args.repeat} runs")
    print("| step | seconds | MB/s/core | cost vs floor | removed |")
    print("|---|---|---|---|---|")
    print(f"| floor: read + gunzip + decode | {floor_s:.2f} | {mb / floor_s:.1f} | 1.00 | |")
    for name in ("starcoder2_v1", "starcoder_v1", "decontaminate_humaneval"):
        r = results[name]
        print(f"| {name} | {r['seconds']:.2f} | {r['mb_per_s']:.1f} | {r['cost_vs_floor']:.2f} | {r['removed']:,} |")


if __name__ == "__main__":
    main()

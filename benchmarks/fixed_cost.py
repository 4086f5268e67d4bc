"""The fixed cost of Ray on one machine: one stage's own CLI command, `--runner local` against the embedded Ray.

Runs `stackcurate <stage> --input DIR --out ...` (a fresh output each time) alternately with `--runner local`
(this process, one core) and on the embedded Ray with `--workers 2`, `--repeat` times each, and reports the
wall time of every run (process start, Ray start and shutdown included) with the input's size. The input is
record Parquet of at least `--mb` MB of raw code: by default the first files of the dedup benchmark's ingested
corpus (`benchmarks/dedup_corpus.py`, 48 real projects' releases; `work/bench_dedup/scale_0.5/ingest`), linked
into `work/bench_fixed/input`.

    python benchmarks/fixed_cost.py --stage dedup --mb 200 --repeat 3
    python benchmarks/fixed_cost.py --stage filter --args "--rules filters/starcoder2_v1.yaml"

`--src DIR` runs another source tree's CLI (PYTHONPATH=DIR, DIR as the working folder), as pipeline_e2e.py.
Writes benchmarks/results/fixed_cost.json (merged by label and stage).
"""

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "work" / "bench_dedup" / "scale_0.5" / "ingest"


def link_input(folder: Path, mb: float) -> tuple[int, float]:
    """Link the first corpus files holding `mb` MB of raw code into `folder`; (rows, raw MB)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rows, raw = 0, 0.0
    for path in sorted(CORPUS.glob("*.parquet")):
        table = pq.read_table(path, columns=["length_bytes"])
        (folder / path.name).symlink_to(path)
        rows += table.num_rows
        raw += sum(v or 0 for v in table.column("length_bytes").to_pylist()) / 1e6
        if raw >= mb:
            break
    if raw < mb:
        sys.exit(f"{CORPUS} holds only {raw:.0f} MB: build it with benchmarks/dedup_corpus.py")
    return rows, round(raw, 1)


def run(stage: str, extra: list[str], input_dir: Path, out: Path, runner: list[str], src: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(src), "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, "-m", "stackcurate.cli", stage, "--input", str(input_dir), "--out", str(out)]
    started = time.perf_counter()
    subprocess.run([*command, *extra, *runner, "--no-progress"], env=env, cwd=src, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", default="dedup")
    parser.add_argument("--args", default="", help="the stage's own flags")
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--src", type=Path, default=ROOT)
    parser.add_argument("--label", default="after")
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench_fixed")
    args = parser.parse_args()
    rows, raw_mb = link_input(args.work / "input", args.mb)
    runners = {"local": ["--runner", "local"], "ray, 2 workers": ["--runner", "ray", "--workers", "2"]}
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.repeat):  # alternately, so that a slow spell of the machine hits both
        for name, flags in runners.items():
            seconds = run(args.stage, shlex.split(args.args), args.work / "input", args.work / "out", flags, args.src)
            times[name].append(round(seconds, 2))
            print(f"{args.stage} {name}: {seconds:.1f} s", flush=True)
    result = {
        "input": {"rows": rows, "raw_mb": raw_mb, "corpus": str(CORPUS)},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "wall_s": times,
        "median_s": {name: statistics.median(values) for name, values in times.items()},
    }
    path = ROOT / "benchmarks" / "results" / "fixed_cost.json"
    merged = json.loads(path.read_text()) if path.exists() else {}
    merged.setdefault(args.label, {})[args.stage] = result
    path.write_text(json.dumps(merged, indent=1) + "\n")
    print(json.dumps(result["median_s"]))


if __name__ == "__main__":
    main()

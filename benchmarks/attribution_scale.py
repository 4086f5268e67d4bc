"""The attribution index at scale: build time, size and query latency at N and 2N MB of real code, and what
The Stack v2's 900B tokens would take, written from those measurements.

For each size, as a user runs it: `stackcurate sample` of this machine's installed code (real files of the
packages installed here, none written for this), then `stackcurate run` of ingest, format (StarCoder2's
repository format, FIM on), tokenize (StarCoder2's 49,152 ids) and the index stage, on the embedded Ray. It
reads the index stage's wall time from the run's output and measures the index on disk (suffix arrays,
segments, the files' table and BM25 index) against the Megatron shards. Then `attribution_eval.py` asks the
index `--queries` queries of each kind in a fresh process (recall, false attributions, p50 and p99 latency,
the memory of the loaded index). The index is built alone after the run (`stackcurate index --out`), from
scratch, so that nothing else runs beside it; `--reuse-runs` keeps runs already tokenized.

Run:
    python benchmarks/attribution_scale.py --work /work/bench_attr --mb 450 \\
        --absent /work/.mirror/pallets+click/repo --results benchmarks/results/attribution_scale.json
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "stackcurate.cli"]
STACK_V2_TOKENS = 900e9  # The Stack v2's training set (StarCoder2 paper, Table 4: ~900B unique tokens)

PIPELINE = """\
out: {out}
stages:
  ingest:
    metadata: [{sample}/metadata/*.parquet]
    content: {sample}
  format: {{}}
  tokenize:
    vocab_size: 49152
    train_mb: 100
    shard_mb: {shard_mb}
  index: {{}}
"""


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def build(work: Path, mb: int, shard_mb: float, reuse: bool) -> dict:
    sample, out = work / f"sample-{mb}", work / f"run-{mb}"
    if not (sample / "metadata").is_dir():
        subprocess.run([*CLI, "sample", str(sample), "--max-mb", str(mb), "--max-files", "10000000"], check=True)
    pipeline = work / f"run-{mb}.yaml"
    pipeline.write_text(PIPELINE.format(out=out, sample=sample, shard_mb=shard_mb))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if not (reuse and (out / "_state" / "tokenize" / "SUCCESS").is_file()):
        subprocess.run([*CLI, "run", str(pipeline), "--overwrite", "--no-progress"], check=True, env=env,
                       stdout=subprocess.PIPE, text=True)  # fmt: skip
    # the index alone, from scratch, as `stackcurate index` builds it (no earlier part to reuse)
    for folder in ("index", "attribution", "_state/index", "_state/index-reuse", "_stats/index", "_removed/index",
                   "_errors/index"):  # fmt: skip
        shutil.rmtree(out / folder, ignore_errors=True)
    started = time.perf_counter()
    done = subprocess.run([*CLI, "index", "--out", str(out), "--no-progress"], check=True, env=env,
                          stdout=subprocess.PIPE, text=True).stdout  # fmt: skip
    command_seconds = time.perf_counter() - started
    # what the index shares (files' table, BM25 of their text), built again alone to time it: one process
    from stackcurate import attribution

    info = json.loads((out / "attribution" / "index.json").read_text())
    started = time.perf_counter()
    attribution.write_catalog(out, out / "attribution", info["parts"], info["min_tokens"], info["min_copied"],
                              info["max_files"])  # fmt: skip
    catalog_seconds = time.perf_counter() - started
    stage_seconds = {name: float(s) for name, s in re.findall(r"^(\w+): [^\n]* in ([\d.]+) s", done, re.M)}
    manifest = json.loads((out / "megatron" / "manifest.json").read_text())
    index = out / "attribution"
    shards = sum(p.stat().st_size for p in (out / "megatron").glob("*.bin"))
    arrays = sum(p.stat().st_size for p in index.glob("part-*/sa.npy"))
    search = du(index / "search")
    peak = _peak_rss(out / "_stats" / "index")
    return {
        "sample_mb": round(du(sample / "content") / 1e6, 1) if (sample / "content").exists() else mb,
        "tokens": manifest["tokens"],
        "parts": len(manifest["shards"]),
        "shards_bytes": shards,
        "index_bytes": du(index),
        "suffix_array_bytes": arrays,
        "bm25_bytes": search,
        "other_bytes": du(index) - arrays - search,
        "index_seconds": stage_seconds.get("index"),
        "index_command_seconds": round(command_seconds, 1),
        "part_seconds": _metric(out / "_stats" / "index", "seconds"),
        "catalog_seconds": round(catalog_seconds, 1),
        "index_worker_peak_rss_mb": peak,
    }


def _metric(stats: Path, metric: str) -> list[float]:
    import pyarrow.parquet as pq

    return [round(r["value"], 1) for p in sorted(stats.glob("0*.parquet")) for r in pq.read_table(p).to_pylist()
            if r["metric"] == metric]  # fmt: skip


def _peak_rss(stats: Path) -> float | None:
    import pyarrow.parquet as pq

    peaks = [r["value"] for p in stats.glob("*.parquet") for r in pq.read_table(p).to_pylist()
             if r["metric"] == "rss_peak"]  # fmt: skip
    return round(max(peaks) / 2**20, 1) if peaks else None


def evaluate(out: Path, absent: list[str], queries: int) -> dict:
    results = out / "attribution_eval.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "attribution_eval.py"), str(out), "--absent", *absent,
                    "--queries", str(queries), "--results", str(results)], check=True)  # fmt: skip
    return json.loads(results.read_text())


def estimate(large: dict, small: dict) -> dict:
    """The Stack v2's 900B tokens, scaled from the larger run (per token), checked against the growth from the
    smaller to the larger (linear when the ratio of ratios is near 1)."""
    per_token = large["index_bytes"] / large["tokens"]
    arrays_per_token = large["suffix_array_bytes"] / large["tokens"]
    part_core_seconds_per_token = sum(large["part_seconds"]) / large["tokens"]
    disk = STACK_V2_TOKENS * per_token
    shard_bytes_per_token = large["shards_bytes"] / large["tokens"]
    parts = STACK_V2_TOKENS * shard_bytes_per_token / 512e6  # at tokenize's default shard_mb
    return {
        "index_bytes_per_token": round(per_token, 2),
        "suffix_array_bytes_per_token": round(arrays_per_token, 2),
        "index_to_shards": round(large["index_bytes"] / large["shards_bytes"], 2),
        "disk_tb": round(disk / 1e12, 1),
        "parts_at_512_mb": round(parts),
        "part_core_hours": round(STACK_V2_TOKENS * part_core_seconds_per_token / 3600),
        "catalog_hours_one_process": round(STACK_V2_TOKENS * large["catalog_seconds"] / large["tokens"] / 3600),
        "part_peak_rss_mb_at_512_mb": round(
            large["index_worker_peak_rss_mb"] * 512e6 / (large["shards_bytes"] / large["parts"])
        ),
        "growth_when_doubled": {
            "tokens": round(large["tokens"] / small["tokens"], 2),
            "index_bytes": round(large["index_bytes"] / small["index_bytes"], 2),
            "index_seconds": round(large["index_seconds"] / small["index_seconds"], 2),
            "part_core_seconds": round(sum(large["part_seconds"]) / sum(small["part_seconds"]), 2),
            "catalog_seconds": round(large["catalog_seconds"] / small["catalog_seconds"], 2),
            "latency_p50": round(large["eval"]["latency_ms"]["p50"] / small["eval"]["latency_ms"]["p50"], 2),
            "latency_p99": round(large["eval"]["latency_ms"]["p99"] / small["eval"]["latency_ms"]["p99"], 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="folder for the samples and runs")
    parser.add_argument("--mb", type=int, default=450, help="the smaller sample, MB; the larger is twice")
    parser.add_argument("--shard-mb", type=float, default=128.0, help="tokenize's shard_mb (a part per shard)")
    parser.add_argument("--absent", nargs="+", required=True, help="folders of code not in the runs")
    parser.add_argument("--queries", type=int, default=100, help="queries of each kind")
    parser.add_argument("--reuse-runs", action="store_true", help="keep runs already tokenized; rebuild the index")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    runs = {}
    for mb in (args.mb, 2 * args.mb):
        runs[mb] = build(args.work, mb, args.shard_mb, args.reuse_runs)
        runs[mb]["eval"] = evaluate(args.work / f"run-{mb}", args.absent, args.queries)
        r = runs[mb]
        print(f"{mb} MB: {r['tokens']:,} tokens in {r['parts']} parts; shards {r['shards_bytes'] / 1e6:,.0f} MB, "
              f"index {r['index_bytes'] / 1e6:,.0f} MB (suffix arrays {r['suffix_array_bytes'] / 1e6:,.0f}, BM25 "
              f"{r['bm25_bytes'] / 1e6:,.0f}); built in {r['index_seconds']:.0f} s; latency p50 "
              f"{r['eval']['latency_ms']['p50']} ms, p99 {r['eval']['latency_ms']['p99']} ms", flush=True)  # fmt: skip
    small, large = runs[args.mb], runs[2 * args.mb]
    summary = {"runs": runs, "cores": os.cpu_count(), "stack_v2": estimate(large, small)}
    print(json.dumps(summary["stack_v2"], indent=1))
    if args.results:
        args.results.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

"""The cost of a Stack v2-sized run, on paper, from the measured per-core rate of every stage.

Rates come from runs already measured, on this machine (2 cores):
- every stage but ingest's fetching: the whole-pipeline benchmark's run folders (`benchmarks/pipeline_e2e.py`,
  420 MB of real code; `--run` patterns-only PII, `--model-run` PII with the model). A stage's core-seconds
  are its shards' own seconds (each shard's marker: one shard runs on one core); the first stage of a
  fused group also gets what is left of the group's wall time x cores (its global phases: dedup's
  clustering, license's scan), and format, which runs alone, its wall time x cores; tokenize's are its
  shards' (the encoding), and the rest of its wall time x cores is the tokenizer's training, a fixed cost at
  scale (a sample of `train_mb`, 1 GB by default). A stage's input is the `length_bytes` of the rows that reached it
  (kept at the end, or removed by it or a later stage; error rows have no text).
- ingest's fetching at S3 latency: `benchmarks/s3_fetch.py`'s objects/s per core at 50 ms (`--s3-label`).

Volumes: The Stack v2 is 3.28 billion files, 67.5 TB (v2 card). Stages up to dedup are charged the whole
67.5 TB (an upper bound: the measured sample lost half its bytes to language selection, The Stack v2's full set
is already language-selected); pii, format and tokenize are charged the 32.1 TB left after near-dedup.
Bytes written and shuffle bytes scale with the measured run's ratios to its input.

    python benchmarks/cost_estimate.py [--run work/bench_e2e/run-after-final-patterns] \\
        [--model-run work/bench_e2e/run-after-model] [--s3-label after]

Writes benchmarks/results/cost_estimate.json and prints a Markdown table.
"""

import argparse
import glob
import json
import re
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ORDER = ("ingest", "license", "language", "filter", "decontaminate", "dedup", "pii", "format", "tokenize")
GROUPS = {"ingest": ("ingest", "license", "language", "filter", "decontaminate"), "dedup": ("dedup", "pii"),
          "format": ("format",), "tokenize": ("tokenize",)}  # fmt: skip
STACK_V2 = {"files": 3.28e9, "tb": 67.5, "tb_after_dedup": 32.1}
CORES = 2


def marker_seconds(folder: Path) -> float:
    return sum(
        json.loads(p.read_text()).get("seconds", 0.0)
        for p in (folder.parent / "_state" / folder.name / "shards").glob("*.json")
    )


def length_bytes(pattern: str) -> float:
    if not glob.glob(pattern):
        return 0.0
    return duckdb.sql(f"select coalesce(sum(length_bytes), 0) from '{pattern}'").fetchall()[0][0] or 0.0


def stage_inputs(run: Path, raw_bytes: float) -> dict[str, float]:
    """Bytes of the rows that reached each stage."""
    inputs: dict[str, float] = {}
    reached = length_bytes(f"{run}/decontaminate/*.parquet")
    for stage in reversed(ORDER[1:5]):  # decontaminate back to license
        reached += length_bytes(f"{run}/{stage}/removed/*.parquet")  # error rows have no text
        inputs[stage] = reached
    inputs["ingest"] = raw_bytes
    inputs["dedup"] = length_bytes(f"{run}/decontaminate/*.parquet")
    inputs["pii"] = length_bytes(f"{run}/pii/*.parquet")
    inputs["format"] = inputs["pii"]
    inputs["tokenize"] = length_bytes(f"{run}/format/*.parquet")
    return inputs


def group_walls(lines: list[str]) -> dict[str, float]:
    walls = {}
    for line in lines:
        if match := re.match(r"^(\w+): .* in ([0-9.]+) s", line):
            walls[match.group(1)] = float(match.group(2))
    return walls


def core_seconds(run: Path, walls: dict[str, float]) -> dict[str, float]:
    """Each stage's core-seconds (see the module docstring); tokenize's are its encoding only, its BPE training
    being a fixed cost at scale (a sample of `train_mb`), reported apart as `tokenizer training`."""
    seconds = {stage: marker_seconds(run / stage) for stage in ORDER}
    seconds["license"] += marker_seconds(run / "license_scan")
    for head, members in GROUPS.items():
        if head == "tokenize":
            seconds["tokenizer training"] = walls[head] * CORES - seconds[head]
        elif len(members) == 1:
            seconds[head] = walls[head] * CORES
        else:
            seconds[head] = max(seconds[head], walls[head] * CORES - sum(seconds[m] for m in members[1:]))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=ROOT / "work" / "bench_e2e" / "run-after-final-patterns")
    parser.add_argument("--model-run", type=Path, default=ROOT / "work" / "bench_e2e" / "run-after-model")
    parser.add_argument("--e2e-label", default="after-final")
    parser.add_argument("--s3-label", default="after")
    args = parser.parse_args()
    e2e = json.loads((RESULTS / "pipeline_e2e.json").read_text())
    measured = e2e["runs"][args.e2e_label]["patterns"]
    raw = e2e["input"]["raw_mb"] * 1e6
    inputs = stage_inputs(args.run, raw)
    seconds = core_seconds(args.run, group_walls(measured["stage_lines"]))
    model = core_seconds(args.model_run, group_walls(e2e["runs"]["after"]["model"]["stage_lines"]))
    s3 = json.loads((RESULTS / "s3_fetch.json").read_text())["runs"][args.s3_label]
    fetch = s3["latency"]["50 ms"]["ingest"]

    rows = []
    for stage in ORDER:
        tb = STACK_V2["tb_after_dedup"] if stage in ("pii", "format", "tokenize") else STACK_V2["tb"]
        rate = inputs[stage] / 1e6 / seconds[stage]  # MB/s per core
        rows.append({"stage": stage, "input_mb": round(inputs[stage] / 1e6, 1), "core_s": round(seconds[stage], 1),
                     "mb_per_s_core": round(rate, 2), "stack_v2_tb": tb,
                     "core_hours": round(tb * 1e6 / rate / 3600)})  # fmt: skip
    pii_model_rate = inputs["pii"] / 1e6 / model["pii"]
    rows.append({"stage": "pii (model)", "input_mb": round(inputs["pii"] / 1e6, 1), "core_s": round(model["pii"], 1),
                 "mb_per_s_core": round(pii_model_rate, 2), "stack_v2_tb": STACK_V2["tb_after_dedup"],
                 "core_hours": round(STACK_V2["tb_after_dedup"] * 1e6 / pii_model_rate / 3600)})  # fmt: skip
    rows.append({"stage": "tokenizer training (fixed)", "core_s": round(seconds["tokenizer training"], 1),
                 "input_mb": round(inputs["tokenize"] / 1e6, 1)})  # fmt: skip
    fetch_hours = STACK_V2["files"] / fetch["objects_per_s_per_core"] / 3600
    rows.append({"stage": "ingest from S3 at 50 ms, by objects", "objects_per_s_core": fetch["objects_per_s_per_core"],
                 "stack_v2_files": STACK_V2["files"], "core_hours": round(fetch_hours)})  # fmt: skip
    # The benchmark's objects average 8 KB raw, The Stack v2's 21 KB: its byte rate bounds too.
    fetch_rate = fetch["raw_mb_per_s_per_core"]
    rows.append({"stage": "ingest from S3 at 50 ms, by bytes", "input_mb": None, "core_s": None,
                 "mb_per_s_core": fetch_rate, "stack_v2_tb": STACK_V2["tb"],
                 "core_hours": round(STACK_V2["tb"] * 1e6 / fetch_rate / 3600)})  # fmt: skip
    by_stage = {r["stage"]: r["core_hours"] for r in rows if "core_hours" in r}
    s3_ingest = max(by_stage["ingest from S3 at 50 ms, by objects"], by_stage["ingest from S3 at 50 ms, by bytes"])
    rest = sum(by_stage[s] for s in ORDER[1:])
    totals = {"patterns": s3_ingest + rest, "model": s3_ingest + rest - by_stage["pii"] + by_stage["pii (model)"]}
    bound = max(ORDER[1:], key=lambda s: by_stage[s])
    written = measured["bytes_written_disk"]["total"] / raw
    scratch = (measured["bytes_written_io"] - measured["bytes_written_disk"]["total"]) / raw
    result = {
        "assumptions": STACK_V2,
        "stages": rows,
        "total_core_hours": totals,
        "bounding_stage": bound,
        "bytes_written_tb": round(written * STACK_V2["tb"], 1),
        "scratch_and_shuffle_tb": round(scratch * STACK_V2["tb"], 1),
        "sources": {
            "run": str(args.run),
            "model_run": str(args.model_run),
            "e2e_label": args.e2e_label,
            "s3_label": args.s3_label,
        },  # fmt: skip
    }
    (RESULTS / "cost_estimate.json").write_text(json.dumps(result, indent=1) + "\n")
    print("| stage | input (MB) | core-s | MB/s per core | Stack v2 volume | core-hours |\n|---|---|---|---|---|---|")
    for row in rows:
        if "stack_v2_tb" not in row and "stack_v2_files" not in row:
            print(f"| {row['stage']} | {row['input_mb']} | {row['core_s']} | | once, on a sample | |")
        elif "mb_per_s_core" in row:
            print(f"| {row['stage']} | {row['input_mb'] or ''} | {row['core_s'] or ''} | {row['mb_per_s_core']} | "
                  f"{row['stack_v2_tb']} TB | {row['core_hours']:,} |")  # fmt: skip
        else:
            print(f"| {row['stage']} | | | {row['objects_per_s_core']:,} objects/s | "
                  f"{row['stack_v2_files']:.3g} files | {row['core_hours']:,} |")  # fmt: skip
    print(f"\ntotal: {totals['patterns']:,} core-hours with PII by patterns, {totals['model']:,} with the model; "
          f"the largest stage: {bound}")  # fmt: skip
    print(f"written: {result['bytes_written_tb']} TB of outputs, {result['scratch_and_shuffle_tb']} TB of scratch "
          "and shuffle files (deleted by the run)")  # fmt: skip


if __name__ == "__main__":
    main()

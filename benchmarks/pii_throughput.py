"""PII stage throughput on one core, on real code the project has not seen.

The input is the dedup benchmark's corpus (`dedup_corpus.py`: source distributions of real PyPI projects,
ingested with `stackcurate ingest --repos`). The stage runs in this process on one core over record batches
as a runner gives them (reading and writing Parquet excluded), and the report gives MB of code per second,
the spans redacted per type and detector, and the spans spared per rule.

    python benchmarks/pii_throughput.py [--mb 50] [--scale 0.5]

Writes benchmarks/results/pii_throughput.json.
"""

import argparse
import json
import os
import platform
import time
from collections import Counter
from pathlib import Path

import dedup
import dedup_corpus
import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.stages.pii import PiiConfig, PiiStage

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=50.0, help="MB of code to redact")
    parser.add_argument("--scale", type=float, default=0.5, help="dedup corpus scale to draw files from")
    parser.add_argument("--batch-rows", type=int, default=256)
    parser.add_argument("--work", default=str(ROOT / "work" / "bench_dedup"))
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    base = Path(args.work) / f"scale_{args.scale}"
    records = dedup.ingest(dedup_corpus.build(args.scale), base)
    batches, size = [], 0
    for path in sorted(records.glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=args.batch_rows):
            batches.append(batch)
            size += sum(len(t.encode()) for t in batch.column("content").to_pylist() if t)
            if size >= args.mb * 1e6:
                break
        if size >= args.mb * 1e6:
            break

    stage = PiiStage(PiiConfig(batch_rows=args.batch_rows))
    stage(pa.Table.from_batches(batches[:1]))  # warm-up: tldextract, the gibberish model
    redacted, spared, by_detector = Counter(), Counter(), Counter()
    started = time.perf_counter()
    for batch in batches:
        out = stage(pa.Table.from_batches([batch]))
        for (metric, _, reason), value in (out.stats or {}).items():
            (redacted if metric == "spans_redacted" else spared)[reason] += int(value)
        for spans in out.kept.column("pii_spans").to_pylist():
            by_detector.update(s["detector"] for s in spans)
    seconds = time.perf_counter() - started
    result = {
        "input": f"dedup corpus scale {args.scale} ({records})",
        "files": sum(b.num_rows for b in batches),
        "mb": round(size / 1e6, 1),
        "seconds": round(seconds, 1),
        "mb_per_s_one_core": round(size / 1e6 / seconds, 2),
        "spans_redacted": dict(redacted.most_common()),
        "spans_spared": dict(spared.most_common()),
        "spans_by_detector": dict(by_detector.most_common()),
        "detectors": "pattern recognizers only (the encoder model is not wired in yet)",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    out_path = ROOT / "benchmarks" / "results" / "pii_throughput.json"
    out_path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""Per-type precision and recall of the PII detectors on a generated, held-out set.

A predicted span counts as found only if its type and its exact offsets equal a label's; every other
prediction is a false positive (including any on the planted hard negatives, which carry no label). The
spans are those the stage would redact: after StarCoder's post-processing.

    python -m pii_model.generate --out work/pii/eval.parquet --split eval --examples 1500 --seed 2
    python -m pii_model.evaluate --data work/pii/eval.parquet

Detectors so far: `patterns` (the presidio pattern recognizers of `stackcurate pii`).
"""

import argparse
import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from stackcurate.stages.pii import Detector, PiiConfig, is_config
from stackcurate.stages.pii.recognizers import ENTITIES


def evaluate(rows: list[dict], detector: Detector) -> dict[str, dict[str, float]]:
    """{entity: {labels, false_positives, precision, recall}} over `rows` (generated examples)."""
    tp, fp, fn = Counter(), Counter(), Counter()
    for row in rows:
        gold = {(s["entity"], s["start"], s["end"]) for s in row["spans"]}
        spans, _ = detector.find(row["text"], is_config(row["path"], None, None))
        predicted = {(s.entity, s.start, s.end) for s in spans}
        tp.update(e for e, _, _ in gold & predicted)
        fn.update(e for e, _, _ in gold - predicted)
        fp.update(e for e, _, _ in predicted - gold)
    return {
        e: {
            "labels": tp[e] + fn[e],
            "false_positives": fp[e],
            "precision": round(tp[e] / (tp[e] + fp[e]), 3) if tp[e] + fp[e] else 0.0,
            "recall": round(tp[e] / (tp[e] + fn[e]), 3) if tp[e] + fn[e] else 0.0,
        }
        for e in ENTITIES
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="Parquet written by pii_model.generate (the eval split)")
    parser.add_argument("--out", help="also write the table as JSON here")
    args = parser.parse_args(argv)
    rows = pq.read_table(args.data).to_pylist()
    table = {"patterns": evaluate(rows, Detector(PiiConfig()))}
    print("| detectors | type | labels | false positives | precision | recall |\n|---|---|---|---|---|---|")
    for name, scores in table.items():
        for entity, s in scores.items():
            print(
                f"| {name} | {entity} | {s['labels']} | {s['false_positives']} | {s['precision']:.3f} "
                f"| {s['recall']:.3f} |"
            )
    if args.out:
        Path(args.out).write_text(json.dumps({"data": args.data, "examples": len(rows), **table}, indent=1))


if __name__ == "__main__":
    main()

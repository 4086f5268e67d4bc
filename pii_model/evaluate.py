"""Per-type precision and recall of the PII detectors on a generated, held-out set.

A predicted span counts as found only if its type and its exact offsets equal a label's; every other
prediction is a false positive (including any on the planted hard negatives, which carry no label). The
spans are those the stage would redact: after StarCoder's post-processing.

    stackcurate pii-model eval                      # the default model, on 1500 generated eval examples
    python -m pii_model.evaluate --data work/pii/eval.parquet --model work/pii/minilm-l3

The detectors compared (`DETECTORS`): the pattern recognizers alone; the model alone, reporting all six
types, on gated lines and on every line (the difference is what the gate costs in recall); and both, as
`stackcurate pii` runs by default (patterns, plus the model for keys, passwords, names and usernames on
gated lines). Each also gets its time over the set.
"""

import argparse
import ipaddress
import json
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from stackcurate.stages.pii import Detector, PiiConfig, default_model_folder, is_config
from stackcurate.stages.pii.entities import ENTITIES

DETECTORS = {  # name -> PiiConfig settings (the model folder is added)
    "patterns": {"model": "none"},
    "model": {"patterns": False, "model_entities": ENTITIES},
    "model, all lines": {"patterns": False, "model_entities": ENTITIES, "model_lines": "all"},
    "both": {},
}
EVAL_EXAMPLES, EVAL_SEED = 1500, 2


def evaluate(rows: list[dict], detector: Detector, batch: int = 256) -> dict:
    """{entity: {labels, false_positives, precision, recall}} over `rows` (generated examples), and the
    counts of example emails and private IPs redacted."""
    tp, fp, fn = Counter(), Counter(), Counter()
    look_alikes = Counter()  # redacted example emails and private IPs: must stay 0
    for at in range(0, len(rows), batch):
        part = rows[at : at + batch]
        found = detector.find_batch([r["text"] for r in part], [is_config(r["path"], None, None) for r in part])
        for row, (spans, _) in zip(part, found, strict=True):
            gold = {(s["entity"], s["start"], s["end"]) for s in row["spans"]}
            predicted = {(s.entity, s.start, s.end) for s in spans}
            tp.update(e for e, _, _ in gold & predicted)
            fn.update(e for e, _, _ in gold - predicted)
            fp.update(e for e, _, _ in predicted - gold)
            look_alikes.update(_look_alike(row["text"][s.start : s.end]) for s in spans)
    scores = {
        e: {
            "labels": tp[e] + fn[e],
            "false_positives": fp[e],
            "precision": round(tp[e] / (tp[e] + fp[e]), 3) if tp[e] + fp[e] else 0.0,
            "recall": round(tp[e] / (tp[e] + fn[e]), 3) if tp[e] + fn[e] else 0.0,
        }
        for e in ENTITIES
    }
    return {**scores, "example_emails_redacted": look_alikes["example_email"],
            "private_ips_redacted": look_alikes["private_ip"]}  # fmt: skip


def _look_alike(value: str) -> str | None:
    """`example_email` or `private_ip` if a redacted value is one of those hard negatives."""
    if value.lower().endswith(("@example.com", "@example.org", "@example.net")):
        return "example_email"
    try:
        return "private_ip" if ipaddress.ip_address(value).is_private else None
    except ValueError:
        return None


def compare(rows: list[dict], model: str, names: list[str] | None = None) -> dict[str, dict]:
    """{detector: {"seconds": ..., entity: scores}} for each of `DETECTORS` (or `names`)."""
    table = {}
    for name in names or list(DETECTORS):
        settings = DETECTORS[name]
        detector = Detector(PiiConfig(**{"model": model, **settings}))
        if detector.model is not None:
            detector.model.spans(["warm up"])  # load outside the timing
        started = time.perf_counter()
        scores = evaluate(rows, detector)
        table[name] = {"seconds": round(time.perf_counter() - started, 2), **scores}
    return table


def markdown(table: dict[str, dict]) -> str:
    lines = ["| detectors | type | labels | false positives | precision | recall |", "|---|---|---|---|---|---|"]
    for name, scores in table.items():
        for entity in ENTITIES:
            s = scores[entity]
            lines.append(
                f"| {name} | {entity} | {s['labels']} | {s['false_positives']} | {s['precision']:.3f} "
                f"| {s['recall']:.3f} |"
            )
    return "\n".join(lines)


def eval_rows(data: str | None, examples: int = EVAL_EXAMPLES, seed: int = EVAL_SEED) -> list[dict]:
    """The held-out examples: a file written by `pii_model.generate`, or generated now (eval split)."""
    if data:
        return pq.read_table(data).to_pylist()
    from pii_model.generate import generate

    return list(generate("eval", examples, seed))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="Parquet of labelled examples (default: generate the eval split)")
    parser.add_argument("--examples", type=int, default=EVAL_EXAMPLES, help="examples to generate without --data")
    parser.add_argument("--seed", type=int, default=EVAL_SEED, help="generator seed without --data")
    parser.add_argument("--model", default="auto", help="model folder (default: the model shipped with stackcurate)")
    names = ", ".join(repr(d) for d in DETECTORS)
    parser.add_argument("--detectors", nargs="+", choices=list(DETECTORS), metavar="NAME",
                        help=f"detectors to compare, of: {names} (default: all)")  # fmt: skip
    parser.add_argument("--json", help="also write the table as JSON here")


def run(args: argparse.Namespace) -> None:
    model = str(default_model_folder()) if args.model == "auto" else args.model  # the JSON names the real folder
    rows = eval_rows(args.data, args.examples, args.seed)
    table = compare(rows, model, args.detectors)
    print(markdown(table))
    for name, scores in table.items():
        print(
            f"{name}: {scores['seconds']} s; example emails redacted: {scores['example_emails_redacted']}, "
            f"private IPs redacted: {scores['private_ips_redacted']}"
        )
    if args.json:
        source = args.data or f"generated: eval split, {args.examples} examples, seed {args.seed}"
        Path(args.json).write_text(json.dumps({"data": source, "model_folder": model, "detectors": table}, indent=1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_arguments(parser)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()

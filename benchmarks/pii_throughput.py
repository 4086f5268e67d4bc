"""PII stage throughput on one core, on real code the project has not seen.

The input (`--corpus heldout`, the default) is what a user's pipeline hands the pii stage from whole released
projects: the newest release of each project held out of the dedup corpus (`dedup_verify.HELD_OUT`: source
distributions from PyPI with their changelogs, READMEs, manifests, AUTHORS files, docs and tests), through
`stackcurate run` of ingest, language (The Stack v2's languages) and filter (StarCoder2's rules). `--corpus dedup`
takes the first `--mb` of the dedup benchmark's corpus instead (`dedup_corpus.py`, mostly generated code).
The stage runs in this process on one core over record batches
as a runner gives them (reading and writing Parquet excluded), and the report gives MB of code per second,
the spans redacted per type and detector, and the spans spared per rule, for each set of detectors:
`patterns` (the pattern recognizers alone), `both` (patterns plus the model on gated lines: the stage's
default), `both, all lines` (the model on every line: slow, so give it a small --mb). `--device cuda` runs
the model on a GPU; `--sample F` writes 100 redactions drawn at random (seed 0) from the default detectors' run,
each with its file and line (for reading the stage's precision by eye); `--dump F` writes each model span with
its line (for reading the model's precision by
eye: F holds real secrets from the corpus, keep it out of the repository).

    python benchmarks/pii_throughput.py [--corpus heldout|dedup] [--mb 50] [--detectors patterns both] [--model DIR]

Writes benchmarks/results/pii_throughput.json.
"""

import argparse
import json
import os
import platform
import random
import subprocess
import time
from collections import Counter
from pathlib import Path

import dedup
import dedup_corpus
import pyarrow as pa
import pyarrow.parquet as pq
from dedup_verify import HELD_OUT

from stackcurate.stages.pii import PiiConfig, PiiStage, default_model_folder

ROOT = Path(__file__).resolve().parents[1]
DETECTORS = {"patterns": {"model": "none"}, "both": {}, "both, all lines": {"model_lines": "all"}}


def measure(name: str, batches: list[pa.RecordBatch], size: int, args: argparse.Namespace, dump) -> dict:  # noqa: ANN001
    """Run one set of detectors over `batches` (only the stage's calls are timed); its speed and what it found."""
    settings = {"model": args.model, "device": args.device, **DETECTORS[name]}
    stage = PiiStage(PiiConfig(batch_rows=args.batch_rows, **settings))
    stage(pa.Table.from_batches(batches[:1]))  # warm-up: tldextract, the gibberish model, the encoder
    redacted, detected_only, spared, by_detector = Counter(), Counter(), Counter(), Counter()
    redactions: list[str] = []  # each redacted span with its line, for --sample
    seconds = 0.0
    for batch in batches:
        started = time.perf_counter()
        out = stage(pa.Table.from_batches([batch]))
        seconds += time.perf_counter() - started
        for (metric, _, reason), value in (out.stats or {}).items():
            counts = {"spans_redacted": redacted, "spans_detected_only": detected_only}.get(metric, spared)
            counts[reason] += int(value)
        texts, paths = batch.column("content").to_pylist(), batch.column("path").to_pylist()
        for text, path, spans in zip(texts, paths, out.kept.column("pii_spans").to_pylist(), strict=True):
            by_detector.update(f"{s['detector']} {s['entity']}" for s in spans)
            redactions += [
                f"{path}\t{s['detector']}\t" + _dump_line(s["entity"], text, s)
                for s in spans
                if s["replacement"] is not None and s["column"] == "content"
            ]
            if dump is not None:
                dump.writelines(_dump_line(name, text, s) for s in spans if s["detector"].startswith("model:"))
    return {
        "mb": round(size / 1e6, 2),
        "seconds": round(seconds, 1),
        "mb_per_s_one_core": round(size / 1e6 / seconds, 3),
        "spans_redacted": dict(redacted.most_common()),
        "redacted_per_mb": {entity: round(n / (size / 1e6), 2) for entity, n in redacted.most_common()},
        "spans_detected_only": dict(detected_only.most_common()),
        "spans_spared": dict(spared.most_common()),
        "spans_by_detector": dict(by_detector.most_common()),
        "redactions": redactions,
    }


def _dump_line(name: str, text: str, span: dict) -> str:
    """`name, entity, score, the span's line with the span in [[ ]]`, tab-separated."""
    start, end = span["start"], span["end"]
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    marked = f"{text[line_start:start]}[[{text[start:end]}]]{text[end:line_end]}"
    return f"{name}\t{span['entity']}\t{span['score']:.2f}\t{marked}\n"


def held_out_records(work: Path) -> Path:
    """The files of the newest release of each held-out project, as the filter stage keeps them."""
    folders = [
        str(dedup_corpus.fetch(work / "corpus", project, versions[-1]).resolve()) for project, versions in HELD_OUT
    ]
    out = work / "run"
    if not (out / "_state" / "filter" / "SUCCESS").is_file():
        pipeline = {
            "out": str(out),
            "stages": {
                "ingest": {"repos": folders},
                "language": {"languages": str(ROOT / "filters" / "languages" / "stackv2_detected_658.txt")},
                "filter": {"rules": str(ROOT / "filters" / "starcoder2_v1.yaml")},
            },
        }
        (work / "pipeline.yaml").write_text(json.dumps(pipeline))  # JSON is YAML
        subprocess.run(["stackcurate", "run", str(work / "pipeline.yaml"), "--overwrite"], check=True)
    return out / "filter"


def dedup_records(args: argparse.Namespace) -> Path:
    """The dedup benchmark's corpus at `--scale`, ingested."""
    return dedup.ingest(dedup_corpus.build(args.scale), Path(args.work) / f"dedup_scale_{args.scale}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--corpus", choices=["heldout", "dedup"], default="heldout")
    parser.add_argument("--mb", type=float, default=1000.0, help="at most this many MB of code to redact")
    parser.add_argument(
        "--scale", type=float, default=0.5, help="dedup corpus scale to draw files from (--corpus dedup)"
    )
    parser.add_argument("--batch-rows", type=int, default=256)
    parser.add_argument("--detectors", nargs="+", choices=list(DETECTORS), default=["patterns", "both"])
    parser.add_argument("--model", default="auto", help="model folder (default: the one shipped with stackcurate)")
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda")
    parser.add_argument("--sample", help="write 100 random redactions with their lines here (not in the repository)")
    parser.add_argument("--seed", type=int, default=0, help="which 100 redactions --sample draws")
    parser.add_argument("--dump", help="write the model's spans with their lines here (not in the repository)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pii_throughput.json"))
    parser.add_argument("--work", default=str(ROOT / "work" / "bench_pii"))
    args = parser.parse_args()
    if args.model == "auto":
        args.model = str(default_model_folder())
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: the model's torch threads too
    if args.device == "cpu":
        import torch

        torch.set_num_threads(1)

    records = held_out_records(Path(args.work)) if args.corpus == "heldout" else dedup_records(args)
    batches, size = [], 0
    for path in sorted(records.glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=args.batch_rows):
            batches.append(batch)
            size += sum(len(t.encode()) for t in batch.column("content").to_pylist() if t)
            if size >= args.mb * 1e6:
                break
        if size >= args.mb * 1e6:
            break

    dump = open(args.dump, "w") if args.dump else None  # noqa: SIM115 - shared by the runs below
    result = {
        "input": f"{args.corpus} corpus ({records})",
        "files": sum(b.num_rows for b in batches),
        "model": args.model,
        "device": args.device,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        **{name: measure(name, batches, size, args, dump) for name in args.detectors},
    }
    redactions = result.get("both", {}).get("redactions", [])
    for name in args.detectors:
        result[name].pop("redactions")
    if args.sample and redactions:
        picked = random.Random(args.seed).sample(redactions, min(100, len(redactions)))
        Path(args.sample).write_text("".join(f"{i + 1}\t{line}" for i, line in enumerate(picked)))
    if dump is not None:
        dump.close()
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

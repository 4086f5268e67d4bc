"""Tokenization throughput on 1 and 2 CPUs: `stackcurate tokenize` against datatrove's tokenizer step.

The documents are real code the project has not seen: the dedup benchmark's corpus (`dedup_corpus.py`,
source distributions of real PyPI projects, ingested with `stackcurate ingest --repos`), formatted by
`stackcurate format` (StarCoder2 repository context, FIM). One tokenizer is trained on them
(`stackcurate tokenizer train`, 49,152 ids) and every run uses it on the same documents:

- stackcurate: `stackcurate tokenize --workers N`, on its embedded Ray: Parquet in, tokenized Parquet and
  shuffled Megatron `.bin/.idx` shards + manifest out;
- datatrove: its `DocumentTokenizer` (default settings: shuffled `.ds` files with an index) and its
  `MegatronDocumentTokenizer`, after a `ParquetReader`, in a `LocalPipelineExecutor` with one task per
  input file and N workers.

Each command runs under `taskset` on N CPUs (the tokenizers library would otherwise use every core
whatever the worker count). Wall time is the command's own, start-up included; tokens/s per core is
tokens / wall / N. Each pair runs back to back in the same invocation, so the machine is the same.

    python benchmarks/tokenize_throughput.py [--scale 0.5] [--files 10] [--cpus 1 2]
    python benchmarks/tokenize_throughput.py --check   # then: ids and tokenizer against HF tokenizers itself

Writes benchmarks/results/tokenize_throughput.json and prints a Markdown table.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dedup
import dedup_corpus
import dedup_peers
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]


def run_datatrove(input_dir: str, out: str, tokenizer_json: str, workers: int, writer: str) -> None:
    """One datatrove pipeline: read the formatted Parquet, tokenize, write (called in a subprocess)."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.tokens.megatron_tokenizer import MegatronDocumentTokenizer

    files = sorted(p.name for p in Path(input_dir).glob("*.parquet"))
    step = (
        DocumentTokenizer(f"{out}/tokens", tokenizer_name_or_path=tokenizer_json, eos_token="<|endoftext|>")
        if writer == "ds"
        else MegatronDocumentTokenizer(f"{out}/tokens", tokenizer_name_or_path=tokenizer_json)
    )
    LocalPipelineExecutor(
        pipeline=[ParquetReader(input_dir, text_key="text", id_key="doc_id", glob_pattern="*.parquet"), step],
        tasks=len(files),
        workers=workers,
        logging_dir=f"{out}/logs",
    ).run()


def _datatrove_tokens(out: Path, writer: str) -> int:
    if writer == "ds":
        return sum(p.stat().st_size // 2 for p in (out / "tokens").glob("*.ds"))
    return sum(p.stat().st_size // 2 for p in (out / "tokens").glob("*.bin"))


def _prepare(scale: float, files: int, base: Path) -> tuple[Path, Path]:
    """The formatted documents (the first `files` files of the format output) and a tokenizer trained on them."""
    records = dedup.ingest(dedup_corpus.build(scale), base)
    run = base / "run"
    if not (run / "_state" / "format" / "SUCCESS").exists():
        subprocess.run(["stackcurate", "format", "--input", str(records), "--out", str(run), "--workers", "2",
                        "--no-progress"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
    documents = base / f"documents_{files}"
    if not documents.exists():
        documents.mkdir()
        for path in sorted((run / "format").glob("*.parquet"))[:files]:
            shutil.copyfile(path, documents / path.name)
    tokenizer = base / f"tokenizer_{files}"
    if not (tokenizer / "tokenizer.json").exists():
        subprocess.run(["stackcurate", "tokenizer", "train", "--input", str(documents), "--out", str(tokenizer)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
    return documents, tokenizer


def check_against_hf(documents: Path, tokenizer: Path, ours: Path) -> dict[str, Any]:
    """stackcurate's ids (a finished `ours` run) and its trained tokenizer against HF `tokenizers` itself:
    `encode_batch_fast` on every document, and HF's BPE trainer on the documents' texts (stackcurate counts the
    words with its own compiled splitter; the vocabulary and merges must come out the same)."""
    import pyarrow as pa
    from tokenizers import Tokenizer

    from stackcurate.core import tokens as tk
    from stackcurate.stages.tokenize import tokenizer as bpe

    docs = pq.ParquetDataset(str(documents)).read(columns=["doc_id", "text"])
    ours_rows = pa.concat_tables(
        [pq.read_table(f, columns=["doc_id", "tokens"]) for f in sorted((ours / "tokenize").glob("*.parquet"))]
    )
    written = dict(zip(ours_rows.column("doc_id").to_pylist(), ours_rows.column("tokens").to_pylist(), strict=True))
    hf = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    eod = hf.token_to_id(tk.EOD)
    texts = [t or "" for t in docs.column("text").to_pylist()]
    encodings = hf.encode_batch_fast(texts, add_special_tokens=False)
    same = sum(written.get(d) == e.ids + [eod]
               for d, e in zip(docs.column("doc_id").to_pylist(), encodings, strict=True))  # fmt: skip
    trained, trainer = bpe.recipe(json.loads((tokenizer / "train.json").read_text())["vocab_size_requested"])
    trained.train_from_iterator((bpe.strip_special(t) for t in texts if t), trainer)
    theirs, mine = json.loads(trained.to_str())["model"], json.loads(hf.to_str())["model"]
    return {
        "documents_with_hf_ids": same,
        "documents": len(texts),
        "vocabulary_equals_hf_training": theirs["vocab"] == mine["vocab"],
        "merges_equal_hf_training": theirs["merges"] == mine["merges"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=0.5, help="dedup corpus scale (0.5: ~170 MB of code)")
    parser.add_argument("--files", type=int, default=10, help="format output files to tokenize (of 50)")
    parser.add_argument("--cpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--work", default=str(ROOT / "work" / "bench_tokenize"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tokenize_throughput.json"))
    parser.add_argument(
        "--check",
        action="store_true",
        help="only compare the finished 1-CPU run and its tokenizer with HF tokenizers itself",
    )
    parser.add_argument("--datatrove", nargs=5, metavar=("INPUT", "OUT", "TOKENIZER", "WORKERS", "WRITER"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.datatrove:
        inp, out, tok, workers, writer = args.datatrove
        run_datatrove(inp, out, tok, int(workers), writer)
        return
    base = Path(args.work)
    documents, tokenizer = _prepare(args.scale, args.files, base)
    if args.check:
        print(json.dumps(check_against_hf(documents, tokenizer, base / f"ours_{min(args.cpus)}")))
        return
    meta = pq.ParquetDataset(str(documents)).read(columns=["length_bytes"])
    report: dict[str, Any] = {
        "input": f"dedup corpus scale {args.scale}, formatted (StarCoder2), first {args.files} files: {documents}",
        "documents": meta.num_rows,
        "mb": round(sum(meta.column("length_bytes").to_pylist()) / 1e6, 1),
        "tokenizer": str(tokenizer),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "runs": [],
    }
    for cpus in args.cpus:
        pin = ["taskset", "-c", ",".join(str(c) for c in range(cpus))]
        ours = base / f"ours_{cpus}"
        datatrove = {writer: base / f"dt_{writer}_{cpus}" for writer in ("ds", "megatron")}
        runs = {  # name: (command, its output folder, how many tokens it wrote)
            "stackcurate tokenize": (
                [*pin, "stackcurate", "tokenize", "--input", str(documents), "--out", str(ours),
                 "--tokenizer", str(tokenizer), "--workers", str(cpus), "--overwrite", "--no-progress"],
                ours,
                lambda out: json.loads((out / "megatron" / "manifest.json").read_text())["tokens"],
            ),
            **{
                f"datatrove {step}": (
                    [*pin, sys.executable, __file__, "--datatrove", str(documents), str(datatrove[writer]),
                     str(tokenizer / "tokenizer.json"), str(cpus), writer],
                    datatrove[writer],
                    lambda out, writer=writer: _datatrove_tokens(out, writer),
                )
                for step, writer in (("DocumentTokenizer", "ds"), ("MegatronDocumentTokenizer", "megatron"))
            },
        }  # fmt: skip
        for name, (cmd, out, tokens) in runs.items():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            print(f"[{cpus} CPU] {name} ...", file=sys.stderr, flush=True)
            measured = dedup_peers.run_measured(cmd, cwd=ROOT, log=out / "run.log")
            dedup_peers.check(measured, name, out / "run.log")
            count = tokens(out)
            report["runs"].append({
                "tool": name, "cpus": cpus, "seconds": round(measured.seconds, 1), "tokens": count,
                "tokens_per_s": round(count / measured.seconds),
                "tokens_per_s_per_cpu": round(count / measured.seconds / cpus),
                "peak_rss_mib": round(measured.peak_rss_mib),
            })  # fmt: skip
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['documents']:,} documents, {report['mb']} MB ({report['input']})\n")
    print("| tool | CPUs | wall s | tokens | tokens/s | tokens/s per CPU | peak RSS MiB (tree) |")
    print("|---|---|---|---|---|---|---|")
    for r in report["runs"]:
        print(f"| {r['tool']} | {r['cpus']} | {r['seconds']} | {r['tokens']:,} | {r['tokens_per_s']:,} | "
              f"{r['tokens_per_s_per_cpu']:,} | {r['peak_rss_mib']:,} |")  # fmt: skip


if __name__ == "__main__":
    main()

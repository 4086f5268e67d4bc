"""Performance at the limit: stackcurate's dedup, tokenize, filter and pii stages beside their peers and floors,
in one run, on real code the project has not seen, as a user runs each command (process and Ray start included).

The input is the first `--mb` MB of the dedup benchmark's corpus (`dedup_corpus.py`: released source
distributions of real PyPI projects, `stackcurate ingest --repos`). Prepared once, untimed: go-enry languages
(what the filter rules read), StarCoder2 documents (`stackcurate format`), a tokenizer trained on them, and a
content store of the files (each file gzipped under its blob id, as Software Heritage's store keeps them).

- near-dedup: `stackcurate dedup` (default runner; and `--runner local`, `--runner ray`) beside text-dedup 0.4.0
  and datatrove 0.10.1 (StarCoder settings, 2 processes); goal >= 3x the best peer;
- tokenize: `stackcurate tokenize` of the documents (default runner) beside datatrove's MegatronDocumentTokenizer
  and HF `encode_batch_fast` alone (the raw library in its own process, only the encoding timed); goal >= 90% of
  the raw library's speed;
- filter: `stackcurate filter --rules filters/starcoder2_v1.yaml` (default runner) beside the floor, read + gunzip
  + decode of every file of the content store; goal <= 2x the floor's time;
- pii: `stackcurate pii --runner local` on the first `--pii-mb` MB; goal >= 1 MB/s on one core.

    pip install datatrove==0.10.1 spacy psutil tokenizers                  # the peers (datatrove in this env)
    python -m venv work/venv-textdedup && work/venv-textdedup/bin/pip install text-dedup==0.4.0
    python benchmarks/dedup_corpus.py --scale 0.5
    python benchmarks/limits.py [--mb 230] [--pii-mb 30] [--label after] [--no-peers]

Writes benchmarks/results/limits_<label>.json and prints the table.
"""

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import corpus
import dedup
import dedup_corpus
import dedup_peers
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
CLI = corpus.CLI
FLOOR = "floor: read + gunzip + decode"

# The raw library alone, in a process of its own: HF tokenizers' batch encoding of every document's text.
HF_ALONE = """\
import json, sys, time
import pyarrow.parquet as pq
from tokenizers import Tokenizer
texts = [t or "" for t in pq.ParquetDataset(sys.argv[1]).read(columns=["text"]).column("text").to_pylist()]
tokenizer = Tokenizer.from_file(sys.argv[2])
started = time.perf_counter()
encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "tokens": sum(len(e.ids) + 1 for e in encodings)}))
"""


def link_first(source: Path, folder: Path, mb: float) -> float:
    """Link the first Parquet files of `source` holding `mb` MB of text into `folder`; the MB linked."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    linked = 0.0
    for path in sorted(source.glob("*.parquet")):
        (folder / path.name).symlink_to(path.resolve())
        linked += sum(v or 0 for v in pq.read_table(path, columns=["length_bytes"]).column("length_bytes").to_pylist())
        if linked / 1e6 >= mb:
            break
    if linked / 1e6 < mb:
        sys.exit(f"{source} holds only {linked / 1e6:.0f} MB: build more with benchmarks/dedup_corpus.py")
    return linked / 1e6


def prepare(work: Path, mb: float, pii_mb: float) -> dict[str, Any]:
    """The input and what the rows read besides it (untimed, reused while `work` holds them)."""
    folders = dedup_corpus.build(0.5, root=str(ROOT / "work" / "dedup_corpus"))
    records = dedup.ingest(folders, ROOT / "work" / "bench_dedup" / "scale_0.5")
    prep = work / "prep"
    marker = prep / f"READY-{mb}-{pii_mb}"
    paths = {
        "records": prep / "input", "pii_input": prep / "pii_input", "languages": prep / "run" / "language",
        "documents": prep / "run" / "format", "tokenizer": prep / "tokenizer", "store": prep / "content",
        "corpus": prep / "corpus.parquet",
    }  # fmt: skip
    if not marker.exists():
        shutil.rmtree(prep, ignore_errors=True)
        linked = link_first(records, paths["records"], mb)
        pii_linked = link_first(records, paths["pii_input"], pii_mb)
        run = prep / "run"
        corpus.stackcurate("language", "--input", str(paths["records"]), "--out", str(run), "--no-progress")
        corpus.stackcurate("format", "--input", str(paths["records"]), "--out", str(run), "--no-progress")
        corpus.stackcurate("tokenizer", "train", "--input", str(paths["documents"]), "--out", str(paths["tokenizer"]))
        table = pa.concat_tables(pq.read_table(p) for p in sorted(paths["languages"].glob("*.parquet")))
        paths["store"].mkdir()
        for blob, text in zip(table.column("blob_id").to_pylist(), table.column("content").to_pylist(), strict=True):
            (paths["store"] / blob).write_bytes(gzip.compress(text.encode(), compresslevel=6))
        ids = pa.concat_tables(pq.read_table(p, columns=["doc_id", "content"]) for p in sorted(
            paths["records"].glob("*.parquet")))  # fmt: skip
        pq.write_table(pa.table({"id": ids.column("doc_id"), "text": ids.column("content")}), paths["corpus"])
        marker.write_text(json.dumps({"mb": linked, "pii_mb": pii_linked}))
    return {**paths, **json.loads(marker.read_text())}


def floor_seconds(store: Path, repeat: int = 3) -> tuple[float, float]:
    """(seconds, MB): read + gunzip + decode every object of the store, page cache warm; the best of `repeat`."""
    from stackcurate.sources.fetch import gunzip_bounded
    from stackcurate.stages.ingest.content import decode

    objects = sorted(store.iterdir())
    times, size = [], 0
    for _ in range(repeat + 1):  # the first warms the page cache
        started, size = time.perf_counter(), 0
        for path in objects:
            data = gunzip_bounded(path.read_bytes(), 1 << 30, 1000.0).data or b""
            decode(data, "UTF-8")
            size += len(data)
        times.append(time.perf_counter() - started)
    return min(times[1:]), size / 1e6


def timed(
    name: str, command: list[str], out: Path, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"{name} ...", file=sys.stderr, flush=True)
    measured = dedup_peers.run_measured(command, cwd=cwd, log=out / "run.log", env=env)
    dedup_peers.check(measured, name, out / "run.log")
    print(f"{name}: {measured.seconds:.1f} s", file=sys.stderr, flush=True)
    return {"seconds": round(measured.seconds, 2), "peak_rss_mib": round(measured.peak_rss_mib)}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=230.0, help="MB of real code (the corpus's first files)")
    parser.add_argument("--pii-mb", type=float, default=30.0, help="MB of it the pii row redacts")
    parser.add_argument("--work", default=str(ROOT / "work" / "bench_limits"))
    parser.add_argument("--label", default="after")
    parser.add_argument("--no-peers", action="store_true", help="stackcurate's rows and the floor only")
    parser.add_argument("--src", default=str(ROOT), help="the source tree whose CLI runs (the code before a change)")
    args = parser.parse_args()
    work = Path(args.work)
    p = prepare(work, args.mb, args.pii_mb)
    src = Path(args.src).resolve()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(src)}
    runs, o = {}, work / "runs"

    def ours(name: str, *cli: str) -> None:
        command = [*CLI, *cli, "--overwrite", "--no-progress"]
        runs[name] = timed(name, command, o / name.replace(" ", "_"), env, cwd=src)  # `-m` imports from cwd first

    # untimed: the first command of a run pays cold caches (Ray's files, compiled kernels), whichever it is
    rules = str(ROOT / "filters" / "starcoder2_v1.yaml")
    for warm in (
        ["dedup", "--runner", "ray", "--input", str(p["pii_input"])],
        ["filter", "--runner", "local", "--rules", rules, "--input", str(p["languages"])],
    ):
        subprocess.run([*CLI, *warm, "--out", str(o / "warm"), "--overwrite", "--no-progress"],
                       check=True, cwd=src, env=env, capture_output=True)  # fmt: skip
    ours("dedup", "dedup", "--input", str(p["records"]), "--out", str(o / "dedup_out"))
    ours("dedup --runner local", "dedup", "--input", str(p["records"]), "--out", str(o / "dedup_out"),
         "--runner", "local")  # fmt: skip
    ours("dedup --runner ray", "dedup", "--input", str(p["records"]), "--out", str(o / "dedup_out"),
         "--runner", "ray")  # fmt: skip
    ours("tokenize", "tokenize", "--input", str(p["documents"]), "--out", str(o / "tokenize_out"),
         "--tokenizer", str(p["tokenizer"]))  # fmt: skip
    ours("filter", "filter", "--input", str(p["languages"]), "--out", str(o / "filter_out"),
         "--rules", rules)  # fmt: skip
    ours("filter --runner ray", "filter", "--input", str(p["languages"]), "--out", str(o / "filter_out"),
         "--rules", rules, "--runner", "ray")  # fmt: skip
    ours("pii --runner local", "pii", "--input", str(p["pii_input"]), "--out", str(o / "pii_out"),
         "--runner", "local")  # fmt: skip
    manifest = json.loads((o / "tokenize_out" / "megatron" / "manifest.json").read_text())
    hf = subprocess.run([sys.executable, "-c", HF_ALONE, str(p["documents"]), str(p["tokenizer"] / "tokenizer.json")],
                        check=True, capture_output=True, text=True)  # fmt: skip
    runs["HF encode_batch_fast"] = {k: round(v, 2) for k, v in json.loads(hf.stdout).items()}
    floor_s, floor_mb = floor_seconds(p["store"])
    runs[FLOOR] = {"seconds": round(floor_s, 2), "mb": round(floor_mb, 1)}
    if not args.no_peers:
        for name, peer in (("text-dedup", dedup_peers.run_textdedup), ("datatrove", dedup_peers.run_datatrove)):
            print(f"{name} ...", file=sys.stderr, flush=True)
            got = peer(p["corpus"], o / name, workers=2)
            runs[name] = {"seconds": round(got["seconds"], 2), "peak_rss_mib": round(got["peak_rss_mib"])}
        out = o / "datatrove_tokenize"
        runs["datatrove MegatronDocumentTokenizer"] = timed(
            "datatrove MegatronDocumentTokenizer",
            [sys.executable, str(ROOT / "benchmarks" / "tokenize_throughput.py"), "--datatrove", str(p["documents"]),
             str(out / "dt"), str(p["tokenizer"] / "tokenizer.json"), "1", "megatron"],
            out,
        )  # fmt: skip
    report = {
        "label": args.label, "input_mb": round(p["mb"], 1), "pii_mb": round(p["pii_mb"], 1),
        "tokens": manifest["tokens"], "documents": manifest.get("documents"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M"), "src": str(src), "runs": runs,
    }  # fmt: skip
    target = ROOT / "benchmarks" / "results" / f"limits_{args.label}.json"
    target.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))


def table(report: dict[str, Any]) -> str:
    r = report["runs"]

    def s(name: str) -> str:
        return f"{r[name]['seconds']:.1f} s" if name in r else "not run"

    peers = [r[n]["seconds"] for n in ("text-dedup", "datatrove") if n in r]
    dedup_x = min(peers) / r["dedup"]["seconds"] if peers else None
    tok_share = r["HF encode_batch_fast"]["seconds"] / r["tokenize"]["seconds"]
    filter_x = r["filter"]["seconds"] / r[FLOOR]["seconds"]
    pii_rate = report["pii_mb"] / r["pii --runner local"]["seconds"]
    rows = [
        f"{report['input_mb']} MB of real code, {report['tokens']:,} tokens; {report['machine']}; {report['date']}",
        "",
        "| work | stackcurate | beside it | goal |",
        "|---|---|---|---|",
        f"| near-dedup, default | {s('dedup')}; `--runner local` {s('dedup --runner local')}; `--runner ray` "
        f"{s('dedup --runner ray')} | text-dedup {s('text-dedup')}, datatrove {s('datatrove')} | >= 3x the best "
        f"peer: {f'{dedup_x:.1f}x' if dedup_x else 'no peer run'} |",
        f"| tokenize stage, same tokenizer | {s('tokenize')} | datatrove MegatronDocumentTokenizer "
        f"{s('datatrove MegatronDocumentTokenizer')}; HF `encode_batch_fast` alone "
        f"{s('HF encode_batch_fast')} "
        f"| >= 90% of the raw library's speed: {tok_share:.0%} |",
        f"| filter stage (read Parquet, score, write kept and removed) | {r[FLOOR]['mb']:.0f} MB in "
        f"{s('filter')}; "
        f"`--runner ray` {s('filter --runner ray')} | read + gunzip + decode: {s(FLOOR)} "
        f"| <= 2x the floor's time: {filter_x:.1f}x |",
        f"| pii stage, one worker | {report['pii_mb']:.0f} MB in {s('pii --runner local')} = {pii_rate:.2f} MB/s | "
        f"| >= 1 MB/s: {'met' if pii_rate >= 1 else 'not met'} |",
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    main()

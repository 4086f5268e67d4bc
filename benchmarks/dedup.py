"""Near-dedup speed, memory and quality: stackcurate against datatrove and text-dedup on real code.

The corpus is two or three released versions of ~40 open-source projects (PyPI source distributions, see
`dedup_corpus.py`), ingested as a user would (`stackcurate ingest --repos`), so it is full of real near
copies. Every tool deduplicates the same documents in the same run, on this machine's 2 cores:
- stackcurate: `stackcurate dedup` (StarCoder2 settings with candidate pairs verified, the default; Ray with 2
  workers), again with `--no-verify` (StarCoder2's unverified recipe), and with `--no-verify --bands 32 --rows 8`
  (the same 256 permutations banded towards recall);
- datatrove: its four MinHash stages with the default `MinhashConfig` (`dedup_peers.run_datatrove`);
- text-dedup: `python -m text_dedup.minhash` with StarCoder settings (`dedup_peers.run_textdedup`).
Wall time is each tool's own command (stackcurate's includes starting Ray); memory is the peak summed over
the process tree (and, for stackcurate, its largest single process: a Ray worker or the driver).

Quality is measured against a ground truth built here (`dedup_truth.py`): exact Jaccard, on StarCoder2's
shingles, of every pair a far more sensitive LSH proposes. Reported: the share of true pairs (>= 0.7) with
both ends kept, and the share of removed files with no neighbour at Jaccard >= 0.5.

    python benchmarks/dedup.py [--scales 0.5 1.0] [--peer-scales 0.5] [--rows-per-partition 40000] [--seeds 1 2 3]
    python benchmarks/dedup.py --double [--scales 0.5 1.0]

`--double` measures only memory per worker as the corpus doubles while its files stay the same: stackcurate
runs on the scale's input and on that input plus a ROT13 copy of it (same files and row groups, the same
duplicates inside each copy, none across), and reports for both, per kind of Ray worker, the polled peak RSS
and USS (its own pages, without the object store's shared memory) and the exact lifetime peak RSS (Linux
VmHWM, which a poll cannot miss: polled peaks grow with a run's length, since a longer run gives more polls a
chance to land on a short spike) (benchmarks/results/dedup_doubling_<scale>.json).

Writes benchmarks/results/dedup_<scale>.json and prints a Markdown table.
"""

import argparse
import codecs
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dedup_corpus
import dedup_peers
import dedup_truth
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stackcurate.stages.ingest.content import sha1_hex

ROOT = Path(__file__).resolve().parents[1]


def ingest(folders: list[str], out: Path) -> Path:
    """`stackcurate ingest --repos` the corpus folders once (reused when finished)."""
    target = out / "ingest"
    if not (target.parent / "_state" / target.name / "SUCCESS").exists():
        cmd = ["stackcurate", "ingest", "--out", str(out), "--repos", *folders, "--workers", "2", "--no-progress"]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return target


def read_kept(folder: Path, columns: list[str]) -> pa.Table:
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in sorted(folder.glob("*.parquet"))])


def run_ours(records: Path, out: Path, extra: list[str], rows_per_partition: int) -> dict[str, Any]:
    records, out = records.resolve(), out.resolve()  # the command runs from the repository root
    cmd = [
        "stackcurate", "dedup", "--out", str(out), "--input", str(records), "--workers", "2", "--overwrite",
        "--no-progress", "--rows-per-partition", str(rows_per_partition), *extra,
    ]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    measured = dedup_peers.run_measured(cmd, cwd=ROOT, log=out / "dedup.log")
    dedup_peers.check(measured, "stackcurate dedup", out / "dedup.log")
    kept = set(read_kept(out / "dedup", ["doc_id"]).column("doc_id").to_pylist())
    version = "stackcurate " + " ".join(extra or ["(defaults)"])
    return {"kept_ids": kept, **dataclasses.asdict(measured), "version": version}


ROT13_ID_OFFSET = 1 << 62  # above any doc_id of the original: (source_index << 40) | row


def rot13(table: pa.Table) -> pa.Table:
    """New doc_ids and blob_ids, content letters rotated: no shingle in common with the original."""
    texts = [codecs.encode(t, "rot13") for t in table.column("content").to_pylist()]
    blobs = [sha1_hex(t.encode()) for t in texts]  # blob_id as ingest computes it
    columns = {
        "doc_id": pc.add(table.column("doc_id"), ROT13_ID_OFFSET),
        "content": pa.array(texts, table.schema.field("content").type),
        "blob_id": pa.array(blobs, table.schema.field("blob_id").type),
    }
    for name, values in columns.items():
        index = table.schema.get_field_index(name)
        table = table.set_column(index, table.schema.field(index), values)
    return table


def with_rot13_copy(records: Path, out: Path) -> Path:
    """`records` plus a ROT13 copy of every file: new doc_ids and blob_ids, content letters rotated."""
    if (out / "_SUCCESS").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(records.glob("*.parquet")):
        shutil.copyfile(path, out / path.name)
        source = pq.ParquetFile(path)
        with pq.ParquetWriter(out / f"{path.stem}-rot13.parquet", source.schema_arrow) as sink:
            for group in range(source.num_row_groups):  # the same row groups: a task's batches stay the same
                sink.write_table(rot13(source.read_row_group(group)))
    (out / "_SUCCESS").touch()
    return out


def bench_doubling(records: Path, base: Path, rows_per_partition: int) -> dict[str, Any]:
    """Peak RSS of each kind of Ray worker on the input, then on the input plus its ROT13 copy."""
    doubled = with_rot13_copy(records, base / "doubled")
    report = {}
    for name, source in (("input", records), ("input + ROT13 copy", doubled)):
        print(f"[doubling] {name} ...", file=sys.stderr, flush=True)
        got = run_ours(source, base / f"ours_{source.name}", [], rows_per_partition)
        report[name] = {
            "seconds": round(got["seconds"], 1),
            "kept": len(got["kept_ids"]),
            "largest_worker_mib": round(got["peak_worker_rss_mib"]),
            "worker_peak_rss_mib": {title: round(mib) for title, mib in got["peak_by_title_mib"].items()},
            "worker_peak_uss_mib": {title: round(mib) for title, mib in got["peak_uss_by_title_mib"].items()},
            "worker_high_water_mib": {title: round(mib) for title, mib in got["peak_hwm_by_title_mib"].items()},
        }
    return report


def bench_scale(scale: float, work: Path, peers: bool, rows_per_partition: int, seeds: list[int]) -> dict[str, Any]:
    folders = dedup_corpus.build(scale)
    base = work / f"scale_{scale}"
    records = ingest(folders, base)
    table = read_kept(records, ["doc_id", "content", "length_bytes"])
    corpus = base / "corpus.parquet"
    if not corpus.exists():
        pq.write_table(pa.table({"id": table.column("doc_id"), "text": table.column("content")}), corpus)
    started = time.perf_counter()
    truth = dedup_truth.build(table.column("doc_id").to_numpy(), table.column("content"))
    truth_seconds = time.perf_counter() - started
    results: dict[str, Any] = {
        "scale": scale,
        "docs": table.num_rows,
        "mb": round(sum(table.column("length_bytes").to_pylist()) / 1e6, 1),
        "projects": len(folders),
        "truth": {
            "candidate_pairs": truth.candidates,
            "seconds": round(truth_seconds, 1),
            "pairs_at_0.7": int((truth.jaccard >= 0.7).sum()),
        },
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "tools": {},
    }
    runs = {
        "stackcurate": lambda: run_ours(records, base / "ours", [], rows_per_partition),
        "stackcurate --no-verify": lambda: run_ours(
            records, base / "ours_noverify", ["--no-verify"], rows_per_partition
        ),
        # the same 256 permutations banded towards recall: LSH threshold ~0.65 instead of ~0.69
        "stackcurate --no-verify --bands 32 --rows 8": lambda: run_ours(
            records, base / "ours_32x8", ["--no-verify", "--bands", "32", "--rows", "8"], rows_per_partition
        ),
    }
    for seed in seeds:  # how much the quality figures move with the permutations alone
        runs[f"stackcurate --seed {seed}"] = lambda seed=seed: run_ours(
            records, base / f"ours_seed{seed}", ["--no-verify", "--seed", str(seed)], rows_per_partition
        )
    if peers:
        runs["datatrove"] = lambda: dedup_peers.run_datatrove(corpus, base / "datatrove", workers=2)
        runs["text-dedup"] = lambda: dedup_peers.run_textdedup(corpus, base / "textdedup", workers=2)
    for name, run in runs.items():
        print(f"[scale {scale}] {name} ...", file=sys.stderr, flush=True)
        got = run()
        kept = got.pop("kept_ids")
        got.pop("removed_ids", None)
        results["tools"][name] = {**got, **truth.score(kept)}
    return results


def table_rows(results: dict[str, Any]) -> list[str]:
    rows = []
    for name, r in results["tools"].items():
        rows.append(
            f"| {results['scale']} | {name} | {r['seconds']:.1f} | {r['peak_rss_mib']:.0f} | "
            f"{r.get('peak_worker_rss_mib', float('nan')):.0f} | {r['removed']:,} | "
            f"{100 * r['pairs_both_kept']:.2f}% | {100 * r['removed_without_neighbour']:.2f}% |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--peer-scales", type=float, nargs="*", default=[0.5], help="scales the peers also run")
    parser.add_argument("--rows-per-partition", type=int, default=40_000)
    parser.add_argument("--seeds", type=int, nargs="*", default=[], help="extra stackcurate runs, other seeds")
    parser.add_argument("--double", action="store_true", help="only measure memory per worker, input doubled")
    parser.add_argument("--work", default=str(ROOT / "work" / "bench_dedup"))
    args = parser.parse_args()
    if not args.double:
        print(
            "| scale | tool | seconds | peak RSS MiB (tree) | largest process MiB | removed | true pairs both kept "
            "| removed w/o neighbour >= 0.5 |"
        )
        print("|---|---|---|---|---|---|---|---|")
    for scale in args.scales:
        if args.double:
            base = Path(args.work) / f"scale_{scale}"
            report = bench_doubling(ingest(dedup_corpus.build(scale), base), base, args.rows_per_partition)
            out = ROOT / "benchmarks" / "results" / f"dedup_doubling_{scale}.json"
            out.write_text(json.dumps({"scale": scale, "runs": report}, indent=1))
            print(json.dumps(report, indent=1), flush=True)
            continue
        results = bench_scale(scale, Path(args.work), scale in args.peer_scales, args.rows_per_partition, args.seeds)
        out = ROOT / "benchmarks" / "results" / f"dedup_{scale}.json"
        out.write_text(json.dumps(results, indent=1, default=str))
        print(f"<!-- {results['docs']:,} docs, {results['mb']} MB, {results['projects']} project versions -->")
        print("\n".join(table_rows(results)), flush=True)


if __name__ == "__main__":
    main()

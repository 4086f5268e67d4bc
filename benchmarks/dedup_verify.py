"""Issue 14, case 5: does verifying LSH candidate pairs stop dedup from emptying groups of near copies?

`stackcurate dedup` runs twice on the same ingested input, as a user runs it: with its defaults (candidate
pairs verified by exact Jaccard) and with `--no-verify` (StarCoder2's unverified recipe); both use the default
256 permutations in 25 x 10 bands and Ray with all CPUs. The corpus is held out: two or three releases of
projects that `dedup_corpus.py` does not use (`HELD_OUT`), downloaded from PyPI as source distributions with
`dedup_corpus.fetch` and ingested with `stackcurate ingest --repos` (`dedup.ingest`).

Each run is scored against exact Jaccard on StarCoder2's shingles (`dedup_truth.py`):
- groups lost: true groups (connected components of files joined by Jaccard >= 0.7, exact copies included,
  each of at least 2 files) with no member kept;
- no neighbour: removed files with no other file at Jaccard >= 0.5 (an exact copy counts as one), as a count
  and as a share of the removed files;
- both kept: the share of true pairs (Jaccard >= 0.7, exact copies included) with both files kept;
- removed files, and wall seconds of each `stackcurate dedup` command (process start, Ray start included),
  over `--repeats` runs of each, alternating which goes first; every repeat must keep the same files. The
  seconds the command's own summary line reports for the stage are recorded too.

    python benchmarks/dedup_verify.py [--root work/dedup_verify] [--repeats 5] [--jobs 4]

Writes benchmarks/results/dedup_verify.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dedup
import dedup_corpus
import dedup_truth
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]

#: (PyPI project, versions oldest first): none of them is in `dedup_corpus.PROJECTS`. nltk was left out: its sdists
#: are .zip files, which `dedup_corpus.fetch` does not take.
HELD_OUT: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pylint", ("2.17.7", "3.0.4", "3.1.0")),  # functional test files
    ("astroid", ("2.15.8", "3.0.3")),
    ("docutils", ("0.19", "0.20.1")),
    ("pillow", ("10.1.0", "10.2.0")),  # C
    ("coverage", ("7.3.4", "7.4.3")),  # C
    ("hypothesis", ("6.92.1", "6.98.0")),
    ("babel", ("2.12.1", "2.14.0")),
    ("urllib3", ("2.0.7", "2.2.1")),
    ("simplejson", ("3.19.1", "3.19.2")),  # C
    ("markdown", ("3.5.1", "3.5.2")),
    ("paramiko", ("3.3.1", "3.4.0")),
    ("sqlparse", ("0.4.4", "0.5.0")),
    ("isort", ("5.12.0", "5.13.2")),
    ("wrapt", ("1.15.0", "1.16.0")),  # C
    ("yarl", ("1.9.2", "1.9.4")),  # Cython
)

#: name of a run -> the flags it adds to `stackcurate dedup`
RUNS: dict[str, list[str]] = {"default (verified)": [], "--no-verify": ["--no-verify"]}


def held_out_folders(corpus: Path, jobs: int) -> list[str]:
    """Download and extract every `HELD_OUT` release under `corpus`; the folders in list order."""
    seen = {dedup_corpus.canonical(project) for project, _ in dedup_corpus.PROJECTS}
    overlap = sorted(project for project, _ in HELD_OUT if dedup_corpus.canonical(project) in seen)
    if overlap:
        raise ValueError(f"not held out, also in dedup_corpus.PROJECTS: {overlap}")
    wanted = [(project, version) for project, versions in HELD_OUT for version in versions]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = [pool.submit(dedup_corpus.fetch, corpus, project, version) for project, version in wanted]
    folders, failures = [], []
    for (project, version), future in zip(wanted, futures, strict=True):
        error = future.exception()
        if error is None:
            folders.append(str(Path(future.result()).resolve()))
        else:
            failures.append(f"{project}=={version}: {error}")
    if failures:
        raise RuntimeError("could not fetch:\n" + "\n".join(failures))
    return folders


def true_groups(truth: dedup_truth.Truth, at: float = 0.7) -> np.ndarray:
    """Per document (in `truth.doc_ids` order), its true group: a component of exact copies and pairs >= `at`."""
    n = len(truth.group_size)
    hit = truth.jaccard >= at
    edges = coo_matrix((np.ones(int(hit.sum())), (truth.left[hit], truth.right[hit])), shape=(n, n))
    _, component = connected_components(edges, directed=False)
    return component[truth.group]


def score(truth: dedup_truth.Truth, component: np.ndarray, kept_ids: set[int]) -> dict[str, Any]:
    """Groups lost, removed files without a neighbour at 0.5, and `Truth.score`'s figures, for one run."""
    kept = np.isin(truth.doc_ids, np.fromiter(kept_ids, dtype=np.int64, count=len(kept_ids)))
    size = np.bincount(component)
    kept_in = np.bincount(component, weights=kept, minlength=len(size))
    lost = (size >= 2) & (kept_in == 0)
    removed = ~kept
    lonely = removed & ~truth.has_neighbour(0.5)
    figures = truth.score(kept_ids)
    return {
        "kept": int(kept.sum()),
        "removed": int(removed.sum()),
        "groups_lost": int(lost.sum()),
        "files_in_groups_lost": int(size[lost].sum()),
        "removed_without_neighbour": int(lonely.sum()),
        "removed_without_neighbour_share": float(lonely.sum() / removed.sum()) if removed.any() else 0.0,
        "true_pairs": figures["true_pairs"],
        "pairs_both_kept": figures["pairs_both_kept"],
    }


def run_dedup(records: Path, out: Path, flags: list[str]) -> tuple[float, float | None, set[int]]:
    """`stackcurate dedup` as a user runs it (defaults, plus `flags`).

    Returns its wall seconds, the seconds its summary line reports for the stage (`... in 8.5 s`: without
    process start-up), and the kept doc_ids.
    """
    out.mkdir(parents=True, exist_ok=True)
    cmd = ["stackcurate", "dedup", "--out", str(out), "--input", str(records), "--overwrite", "--no-progress", *flags]
    with (out / "dedup.log").open("wb") as log:
        started = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = (out / "dedup.log").read_text(errors="replace")[-4000:]
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}:\n{tail}")
    kept = dedup.read_kept(out / "dedup", ["doc_id"]).column("doc_id").to_pylist()
    reported = re.search(r"^dedup: .* in ([0-9.]+) s$", (out / "dedup.log").read_text(errors="replace"), re.M)
    return seconds, float(reported.group(1)) if reported else None, set(kept)


def median_or_none(values: list[float | None]) -> float | None:
    """The median, or None when any value is missing."""
    return statistics.median(values) if all(v is not None for v in values) else None


def git(*args: str) -> str:
    """Output of a read-only git command in the repository (provenance of the numbers)."""
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.rstrip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(ROOT / "work" / "dedup_verify"), help="corpus, ingest and runs")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each dedup command, for the timing")
    parser.add_argument("--jobs", type=int, default=4, help="concurrent downloads")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dedup_verify.json"))
    args = parser.parse_args()
    root = Path(args.root).resolve()

    folders = held_out_folders(root / "corpus", args.jobs)
    files_released, _ = dedup_corpus.tally(folders)
    print(f"{len(folders)} releases, {files_released:,} files; ingesting ...", file=sys.stderr, flush=True)
    records = dedup.ingest(folders, root / "run")
    table = dedup.read_kept(records, ["doc_id", "content", "length_bytes"])

    started = time.perf_counter()
    truth = dedup_truth.build(table.column("doc_id").to_numpy(), table.column("content"))
    truth_seconds = time.perf_counter() - started
    component = true_groups(truth)
    size = np.bincount(component)

    runs: dict[str, dict[str, Any]] = {
        name: {"seconds_each": [], "stage_seconds_each": [], "load_before_each": []} for name in RUNS
    }
    for repeat in range(args.repeats):
        order = list(RUNS) if repeat % 2 == 0 else list(reversed(RUNS))
        for name in order:
            print(f"[{repeat + 1}/{args.repeats}] stackcurate dedup {name} ...", file=sys.stderr, flush=True)
            folder = root / ("noverify" if RUNS[name] else "verify")
            runs[name]["load_before_each"].append(round(os.getloadavg()[0], 2))  # 1-min load: was the machine idle?
            seconds, stage_seconds, kept = run_dedup(records, folder, RUNS[name])
            run = runs[name]
            run["seconds_each"].append(round(seconds, 2))
            run["stage_seconds_each"].append(stage_seconds)
            if "kept_ids" in run and run["kept_ids"] != kept:
                raise RuntimeError(f"{name}: repeat {repeat + 1} kept other files than the first run")
            run["kept_ids"] = kept

    results: dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "commit": git("rev-parse", "HEAD"),
        "uncommitted": git("status", "--porcelain", "--untracked-files=no").splitlines(),
        "projects": [f"{project}=={version}" for project, versions in HELD_OUT for version in versions],
        "files_released": files_released,
        "files": table.num_rows,
        "mb": round(sum(table.column("length_bytes").to_pylist()) / 1e6, 1),
        "truth": {
            "seconds": round(truth_seconds, 1),
            "candidate_pairs": truth.candidates,
            "pairs_at_0.7": int((truth.jaccard >= 0.7).sum()),
            "groups": int((size >= 2).sum()),
            "files_in_groups": int(size[size >= 2].sum()),
            "files_with_neighbour_at_0.5": int(truth.has_neighbour(0.5).sum()),
        },
        "runs": {},
    }
    for name, run in runs.items():
        seconds = run["seconds_each"]
        results["runs"][name] = {
            "command": " ".join(["stackcurate dedup --out OUT --input INGEST --overwrite --no-progress", *RUNS[name]]),
            "seconds_median": round(statistics.median(seconds), 2),
            "stage_seconds_median": median_or_none(run["stage_seconds_each"]),
            "seconds_each": seconds,
            "stage_seconds_each": run["stage_seconds_each"],
            "load_before_each": run["load_before_each"],
            **score(truth, component, run["kept_ids"]),
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")

    t = results["truth"]
    print(f"<!-- {results['files']:,} files, {results['mb']} MB, {t['groups']:,} true groups -->")
    print(
        "| run | groups lost | no neighbour (% of removed) | both kept | removed | wall s, median (each) "
        "| stage s, median (each) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in results["runs"].items():
        each = ", ".join(f"{s:.1f}" for s in r["seconds_each"])
        stage = ", ".join(f"{s}" for s in r["stage_seconds_each"])
        print(
            f"| {name} | {r['groups_lost']:,} | {r['removed_without_neighbour']:,} "
            f"({100 * r['removed_without_neighbour_share']:.3f}%) | {100 * r['pairs_both_kept']:.3f}% | "
            f"{r['removed']:,} | {r['seconds_median']:.1f} ({each}) | {r['stage_seconds_median']} ({stage}) |"
        )


if __name__ == "__main__":
    main()

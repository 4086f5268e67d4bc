"""Peer MinHash near-dedup tools on one corpus, for a speed/quality comparison with stackcurate's dedup.

Two peers, each run as a subprocess so that its time and memory are measured apart from the caller's:

- datatrove (`pip install datatrove spacy tokenizers 'xxhash<4'`, in this environment): its four MinHash stages
  (signatures, buckets, cluster, filter) with the default `MinhashConfig`, run by `LocalPipelineExecutor`
  from a small driver script written to the run's folder.
- text-dedup (`python -m text_dedup.minhash`), from its own virtual environment (`TEXTDEDUP_VENV`), with
  the StarCoder settings: 256 permutations, threshold 0.7, 5-grams, documents of at least 5 tokens.

Input: a Parquet file with columns `id` (int64, unique) and `text` (string). Each runner returns a dict with
`kept_ids`, `removed_ids` (sets of ints), `seconds` (wall time of the tool's process, from start to exit),
`peak_rss_mib` (peak of the RSS summed over the tool's process tree, polled with psutil every
`POLL_SECONDS`), `peak_pss_mib` (the same for PSS, which does not count pages shared by forked workers
twice), `version`, `prep_seconds` (input conversion, not in `seconds`) and the tool's settings.

Self-check (3,000 .py files of this Python, stdlib and site-packages, 5% exact and 5% edited copies planted):

    python benchmarks/dedup_peers.py [--n 3000] [--workers 2] [--work work/dedup_peers]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
TEXTDEDUP_VENV = ROOT / "work" / "venv-textdedup"
POLL_SECONDS = 0.2
MIB = 1 << 20
MAX_FILE_BYTES = 1 << 20  # test corpus: skip larger files (generated tables)

# StarCoder's near-dedup settings (The Stack / bigcode near-deduplication).
STARCODER_MINHASH = {"num_perm": 256, "threshold": 0.7, "ngram": 5, "min_length": 5}

# The datatrove driver, written next to the run's data and started with this Python. The guard is required:
# LocalPipelineExecutor starts its workers with forkserver, which imports the main module again.
DATATROVE_DRIVER = '''\
"""Run datatrove's four MinHash dedup stages with the default MinhashConfig (from benchmarks/dedup_peers.py)."""

import dataclasses
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import (
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.pipeline.readers import ParquetReader
from datatrove.pipeline.writers import JsonlWriter


def id_and_text(self, document):
    """Kept documents: id and text (datatrove's default adapter drops falsy values, such as id 0)."""
    return {"id": document.id, "text": document.text}


def id_only(self, document):
    """Removed documents: the id is enough."""
    return {"id": document.id}


def main(settings_path):
    settings = json.loads(Path(settings_path).read_text())
    work, tasks, workers = Path(settings["work"]), settings["tasks"], settings["workers"]
    config = MinhashConfig()

    def reader():
        return ParquetReader(settings["input"], glob_pattern="*.parquet")

    def executor(name, pipeline, n_tasks, n_workers):
        return LocalPipelineExecutor(
            pipeline=pipeline, tasks=n_tasks, workers=n_workers, logging_dir=str(work / "logs" / name)
        )

    stages = {
        "signatures": executor(
            "signatures",
            [reader(), MinhashDedupSignature(output_folder=str(work / "signatures"), config=config)],
            tasks,
            workers,
        ),
        "buckets": executor(
            "buckets",
            [
                MinhashDedupBuckets(
                    input_folder=str(work / "signatures"), output_folder=str(work / "buckets"), config=config
                )
            ],
            config.num_buckets,
            workers,
        ),
        "cluster": executor(
            "cluster",
            [
                MinhashDedupCluster(
                    input_folder=str(work / "buckets"), output_folder=str(work / "remove_ids"), config=config
                )
            ],
            1,
            1,
        ),
        "filter": executor(
            "filter",
            [
                reader(),
                MinhashDedupFilter(
                    input_folder=str(work / "remove_ids"),
                    exclusion_writer=JsonlWriter(str(work / "removed"), compression=None, adapter=id_only),
                ),
                JsonlWriter(str(work / "kept"), compression=None, adapter=id_and_text),
            ],
            tasks,
            workers,
        ),
    }
    stage_seconds = {}
    for name, stage in stages.items():
        started = time.perf_counter()
        stage.run()
        stage_seconds[name] = round(time.perf_counter() - started, 3)
    config_dict = dataclasses.asdict(config)
    config_dict["total_hashes"] = config.num_buckets * config.hashes_per_bucket
    config_dict["language"] = stages["signatures"].pipeline[1].language
    Path(settings["result"]).write_text(
        json.dumps({"version": version("datatrove"), "config": config_dict, "stage_seconds": stage_seconds})
    )


if __name__ == "__main__":
    main(sys.argv[1])
'''


@dataclass
class Measured:
    """One measured subprocess run."""

    returncode: int
    seconds: float
    peak_rss_mib: float
    peak_pss_mib: float
    peak_process_rss_mib: float = 0.0  # the largest single process
    peak_worker_rss_mib: float = 0.0  # the largest Ray worker process (named `ray::<task>`), if any
    # Ray workers by what they ran: peak RSS, and peak USS (its own pages: not the object store's shared memory)
    peak_by_title_mib: dict[str, float] = field(default_factory=dict)
    peak_uss_by_title_mib: dict[str, float] = field(default_factory=dict)
    # ... and the exact peak RSS of each process over its life (VmHWM), by the title it was last seen with
    peak_hwm_by_title_mib: dict[str, float] = field(default_factory=dict)


def run_measured(cmd: list[str], *, cwd: Path, log: Path, env: dict[str, str] | None = None) -> Measured:
    """Run `cmd`, output to `log`; wall time, and peak RSS and PSS summed over its process tree.

    Memory is polled with psutil every `POLL_SECONDS` over the process and all its descendants (RSS counts
    pages shared between forked workers once per process; PSS splits them). A peak that lasts less than one
    polling interval can be missed.
    """
    import psutil

    peak_rss = peak_pss = peak_process = peak_worker = 0
    by_title: dict[str, int] = {}
    uss_by_title: dict[str, int] = {}
    hwm_by_title: dict[str, int] = {}
    with log.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        root = psutil.Process(proc.pid)
        while True:
            rss = pss = 0
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = []
            for process in tree:
                try:
                    memory = process.memory_full_info()
                except psutil.Error:  # exited between listing and reading, or a zombie
                    continue
                rss += memory.rss
                pss += memory.pss
                peak_process = max(peak_process, memory.rss)
                try:
                    title = (process.cmdline() or [""])[0]  # Ray sets it to `ray::<task or actor method>`
                except psutil.Error:
                    continue
                if title.startswith("ray::"):
                    peak_worker = max(peak_worker, memory.rss)
                    title = title.split()[0].removeprefix("ray::")
                    by_title[title] = max(by_title.get(title, 0), memory.rss)
                    uss_by_title[title] = max(uss_by_title.get(title, 0), memory.uss)
                    hwm_by_title[title] = max(hwm_by_title.get(title, 0), _high_water_mark(process.pid))
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            try:
                proc.wait(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                continue
        seconds = time.perf_counter() - started
    return Measured(
        proc.returncode,
        seconds,
        peak_rss / MIB,
        peak_pss / MIB,
        peak_process / MIB,
        peak_worker / MIB,
        {title: rss / MIB for title, rss in sorted(by_title.items())},
        {title: uss / MIB for title, uss in sorted(uss_by_title.items())},
        {title: hwm / MIB for title, hwm in sorted(hwm_by_title.items())},
    )


def _high_water_mark(pid: int) -> int:
    """The process's peak RSS over its whole life so far (Linux `VmHWM`), in bytes; 0 if unreadable.
    Unlike polled RSS, it cannot miss a short peak, so it does not grow with the length of a run."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def check(measured: Measured, tool: str, log: Path) -> None:
    """Raise with the end of the tool's log if it failed."""
    if measured.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"{tool} exited with {measured.returncode}; end of {log}:\n{tail}")


def _fresh(folder: Path) -> Path:
    """Empty `folder` (created if needed) and return it as an absolute path."""
    folder = folder.resolve()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def _input_ids(parquet: Path) -> set[int]:
    """The `id` column of the input, checked unique."""
    ids = pq.read_table(parquet, columns=["id"]).column("id").to_pylist()
    unique = set(ids)
    if len(unique) != len(ids):
        raise ValueError(f"{parquet}: `id` is not unique ({len(ids) - len(unique)} repeats)")
    return unique


def _jsonl_ids(folder: Path) -> set[int]:
    """Ids in every `*.jsonl` file under `folder` (datatrove's writer output)."""
    ids: set[int] = set()
    for path in folder.rglob("*.jsonl"):
        with path.open() as lines:
            ids.update(int(json.loads(line)["id"]) for line in lines if line.strip())
    return ids


def _check_xxhash(python: str) -> None:
    """datatrove hashes `str` n-grams with xxhash, which xxhash >= 4 refuses (datatrove[processing] pins xxhash<4)."""
    code = "import xxhash; print(xxhash.VERSION)"
    found = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.strip()
    if int(found.split(".")[0]) >= 4:
        raise RuntimeError(f"datatrove's MinHash needs xxhash<4 (found {found}): pip install 'xxhash<4'")


def run_datatrove(
    parquet: Path,
    work_dir: Path,
    *,
    workers: int = 2,
    tasks: int | None = None,
    python: str = sys.executable,
    cleanup: bool = True,
) -> dict[str, Any]:
    """Deduplicate `parquet` with datatrove's MinHash (default `MinhashConfig`, four stages, local executor).

    Stages 1 and 4 (signatures, filter) run `tasks` tasks (default: `workers`), stage 2 (buckets) one task per
    bucket and stage 3 (cluster) one task, each with at most `workers` processes at once. datatrove's readers
    share files, not rows, between tasks, so the input is first split into `tasks` Parquet files: that is
    `prep_seconds`, not part of `seconds`. It keeps one document per cluster (the cluster's first row). Documents
    with empty text are skipped by its reader: in `removed_ids`, counted in `dropped_by_reader`. `work_dir` is
    emptied first; with `cleanup` its large outputs (signatures, kept documents) are deleted afterwards, the logs
    kept. `python` must have datatrove, spaCy, tokenizers and xxhash<4 installed.
    """
    tasks = tasks or workers
    _check_xxhash(python)
    work = _fresh(Path(work_dir))
    all_ids = _input_ids(parquet)

    started = time.perf_counter()
    shards = work / "input"
    shards.mkdir()
    table = pq.read_table(parquet, columns=["id", "text"])
    per_shard = -(-table.num_rows // tasks)
    for rank in range(tasks):
        pq.write_table(table.slice(rank * per_shard, per_shard), shards / f"{rank:05d}.parquet")
    del table
    prep_seconds = time.perf_counter() - started

    driver, settings, result = work / "datatrove_driver.py", work / "settings.json", work / "result.json"
    driver.write_text(DATATROVE_DRIVER)
    settings.write_text(
        json.dumps(
            {
                "input": str(shards),
                "work": str(work / "run"),
                "tasks": tasks,
                "workers": workers,
                "result": str(result),
            }
        )
    )
    log = work / "datatrove.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    measured = run_measured([python, str(driver), str(settings)], cwd=work, log=log, env=env)
    check(measured, "datatrove", log)

    info = json.loads(result.read_text())
    kept, removed = _jsonl_ids(work / "run" / "kept"), _jsonl_ids(work / "run" / "removed")
    # The reader skips documents with empty text: in neither output, so counted as removed.
    dropped_by_reader = all_ids - kept - removed
    if cleanup:
        for name in ("input", "run/signatures", "run/buckets", "run/kept"):
            shutil.rmtree(work / name, ignore_errors=True)
    return {
        "tool": "datatrove",
        "version": info["version"],
        "kept_ids": kept,
        "removed_ids": all_ids - kept,
        "seconds": measured.seconds,
        "prep_seconds": prep_seconds,
        "peak_rss_mib": measured.peak_rss_mib,
        "peak_process_rss_mib": measured.peak_process_rss_mib,
        "peak_pss_mib": measured.peak_pss_mib,
        "memory_method": f"psutil poll of the process tree every {POLL_SECONDS} s (RSS and PSS summed)",
        "stage_seconds": info["stage_seconds"],
        "dropped_by_reader": len(dropped_by_reader),
        "settings": {
            **info["config"],
            "tasks": tasks,
            "workers": workers,
            "bucket_tasks": info["config"]["num_buckets"],
        },
        "log": str(log),
    }


def textdedup_info(
    venv: Path = TEXTDEDUP_VENV,
    threshold: float = STARCODER_MINHASH["threshold"],
    num_perm: int = STARCODER_MINHASH["num_perm"],
) -> tuple[str, int, int]:
    """text-dedup's installed version, and the bands and rows it derives from `threshold` and `num_perm`."""
    code = (
        "import json; from importlib.metadata import version; from text_dedup.utils import optimal_param; "
        f"print(json.dumps([version('text-dedup'), *optimal_param({threshold!r}, {num_perm!r})]))"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True, text=True)
    found, bands, rows = json.loads(out.stdout.strip().splitlines()[-1])
    return found, bands, rows


def run_textdedup(
    parquet: Path,
    work_dir: Path,
    *,
    workers: int = 2,
    venv: Path = TEXTDEDUP_VENV,
    num_perm: int = STARCODER_MINHASH["num_perm"],
    threshold: float = STARCODER_MINHASH["threshold"],
    ngram: int = STARCODER_MINHASH["ngram"],
    min_length: int = STARCODER_MINHASH["min_length"],
    hash_func: str = "sha1",
    hash_bits: int = 64,
    cleanup: bool = True,
) -> dict[str, Any]:
    """Deduplicate `parquet` with `python -m text_dedup.minhash` from `venv` (StarCoder settings by default).

    text-dedup reads the Parquet file itself (`--path parquet --data_files FILE --split train`: the `datasets`
    Parquet builder, offline), so there is no conversion (`prep_seconds` 0). Bands and rows are text-dedup's
    own choice for `threshold` and `num_perm` (its `optimal_param`). It keeps one document per cluster (the
    cluster's last row, as observed) and drops every document with fewer than `min_length` tokens (`\\W` splits)
    outright: those are in `removed_ids` and counted in `dropped_short`. `num_proc` is `workers`. `work_dir` is
    emptied first; with `cleanup` the output dataset and the `datasets` cache are deleted afterwards.
    """
    venv = Path(venv).resolve()
    if not (venv / "bin" / "python").exists():
        raise FileNotFoundError(
            f"no text-dedup venv at {venv}: python -m venv {venv} && {venv}/bin/pip install text-dedup"
        )
    work = _fresh(Path(work_dir))
    all_ids = _input_ids(parquet)
    version, bands, rows = textdedup_info(venv, threshold, num_perm)

    output, cache = work / "output", work / "cache"
    cmd = [
        str(venv / "bin" / "python"),
        "-m",
        "text_dedup.minhash",
        "--path",
        "parquet",
        "--data_files",
        str(Path(parquet).resolve()),
        "--split",
        "train",
        "--cache_dir",
        str(cache),
        "--output",
        str(output),
        "--column",
        "text",
        "--num_perm",
        str(num_perm),
        "--threshold",
        str(threshold),
        "--ngram",
        str(ngram),
        "--min_length",
        str(min_length),
        "--hash_func",
        hash_func,
        "--hash_bits",
        str(hash_bits),
        "--num_proc",
        str(workers),
    ]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(work / "hf-home"),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    log = work / "textdedup.log"
    measured = run_measured(cmd, cwd=work, log=log, env=env)
    check(measured, "text-dedup", log)

    kept: set[int] = set()
    for path in sorted(output.glob("*.arrow")):  # `save_to_disk`: Arrow IPC streams
        with pa.memory_map(str(path)) as source:
            kept.update(pa.ipc.open_stream(source).read_all().column("id").to_pylist())
    removed = all_ids - kept
    non_alpha = re.compile(r"\W", re.UNICODE)
    texts = pq.read_table(parquet, columns=["id", "text"]).to_pydict()
    short = {
        i
        for i, text in zip(texts["id"], texts["text"], strict=True)
        if len(non_alpha.split(text.lower())) < min_length
    }
    if cleanup:
        shutil.rmtree(output, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    return {
        "tool": "text-dedup",
        "version": version,
        "kept_ids": kept,
        "removed_ids": removed,
        "seconds": measured.seconds,
        "prep_seconds": 0.0,
        "peak_rss_mib": measured.peak_rss_mib,
        "peak_process_rss_mib": measured.peak_process_rss_mib,
        "peak_pss_mib": measured.peak_pss_mib,
        "memory_method": f"psutil poll of the process tree every {POLL_SECONDS} s (RSS and PSS summed)",
        "dropped_short": len(short & removed),
        "settings": {
            "num_perm": num_perm,
            "threshold": threshold,
            "ngram": ngram,
            "min_length": min_length,
            "bands": bands,
            "rows": rows,
            "hash_func": hash_func,
            "hash_bits": hash_bits,
            "num_proc": workers,
            "tokens": "lowercased text split on \\W",
        },
        "log": str(log),
    }


# --- self-check -------------------------------------------------------------------------------------------------


@dataclass
class Planted:
    """A planted duplicate: `copy_id` is an exact or lightly edited copy of `source_id`."""

    source_id: int
    copy_id: int
    kind: str  # "exact" or "edited"
    jaccard: float  # 5-gram Jaccard of the two texts (lowercased, split on \W)


def _shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """Word n-grams of `text` (lowercased, split on non-word characters)."""
    tokens = [t for t in re.split(r"\W+", text.lower()) if t]
    return {tuple(tokens[i : i + n]) for i in range(max(len(tokens) - n + 1, 0))}


def _jaccard(a: str, b: str) -> float:
    """5-gram Jaccard similarity of two texts."""
    sa, sb = _shingles(a), _shingles(b)
    return len(sa & sb) / len(sa | sb) if sa or sb else 1.0


def _light_edit(text: str, rng: random.Random) -> str:
    """A lightly edited copy: a new header comment, ~2% of lines dropped, one line changed, one added."""
    lines = text.splitlines()
    kept = [line for line in lines if rng.random() > 0.02]
    i = rng.randrange(len(kept))
    kept[i] = kept[i] + "  # edited"
    kept.insert(rng.randrange(len(kept)), "# NOTE: vendored copy, see upstream for changes")
    return "# Copyright (c) 2024 Example Corp. All rights reserved.\n" + "\n".join(kept) + "\n"


def build_test_corpus(
    path: Path, n: int = 3000, *, exact: int | None = None, edited: int | None = None, seed: int = 0
) -> list[Planted]:
    """Write `n` rows of real Python source to `path` (`id`, `text`), `exact` + `edited` of them planted copies.

    Originals are distinct (by content) `.py` files of this Python's standard library and site-packages, drawn at
    random, none over `MAX_FILE_BYTES`; copies are of originals with at least 100 lines. `exact` and `edited`
    default to 5% of `n` each. Ids are unique, non-contiguous and shuffled against row order.
    """
    exact = n // 20 if exact is None else exact
    edited = n // 20 if edited is None else edited
    rng = random.Random(seed)
    n_originals = n - exact - edited
    paths = sysconfig.get_paths()
    stdlib, site = Path(paths["stdlib"]), Path(paths["purelib"])
    files = [f for f in sorted(stdlib.rglob("*.py")) if "site-packages" not in f.parts]
    files += sorted(site.rglob("*.py")) if site != stdlib else []
    rng.shuffle(files)
    seen: set[str] = set()
    originals: list[str] = []
    for file in files:
        if len(originals) == n_originals:
            break
        try:
            if file.stat().st_size > MAX_FILE_BYTES:
                continue
            text = file.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        digest = hashlib.sha1(text.encode()).hexdigest()
        if text.strip() and digest not in seen:
            seen.add(digest)
            originals.append(text)
    if len(originals) < n_originals:
        raise ValueError(f"only {len(originals)} distinct .py files for {n_originals} originals")

    ids = rng.sample(range(1_000, 1_000 + 50 * n), n)
    texts = list(originals)
    big = [i for i, text in enumerate(originals) if text.count("\n") >= 100]
    sources = rng.sample(big, exact + edited)
    planted = []
    for k, source in enumerate(sources):
        kind = "exact" if k < exact else "edited"
        copy = originals[source] if kind == "exact" else _light_edit(originals[source], rng)
        planted.append(Planted(ids[source], ids[len(texts)], kind, _jaccard(originals[source], copy)))
        texts.append(copy)
    order = list(range(n))
    rng.shuffle(order)
    table = pa.table(
        {"id": pa.array([ids[i] for i in order], pa.int64()), "text": pa.array([texts[i] for i in order], pa.string())}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return planted


def _summary(result: dict[str, Any], planted: list[Planted], n: int) -> dict[str, Any]:
    """Counts, time, memory and planted-duplicate recall for one tool's result."""
    kept, removed = result["kept_ids"], result["removed_ids"]
    assert not kept & removed and len(kept | removed) == n, "kept and removed must partition the input"
    caught = {kind: 0 for kind in ("exact", "edited")}
    total = {kind: 0 for kind in ("exact", "edited")}
    for p in planted:
        total[p.kind] += 1
        caught[p.kind] += not (p.source_id in kept and p.copy_id in kept)
    planted_ids = {p.copy_id for p in planted} | {p.source_id for p in planted}
    extras = {k: result[k] for k in ("dropped_by_reader", "dropped_short", "stage_seconds") if k in result}
    return {
        "tool": result["tool"],
        "version": result["version"],
        "kept": len(kept),
        "removed": len(removed),
        "removed_outside_planted_pairs": len(removed - planted_ids),
        "planted_caught": {kind: f"{caught[kind]}/{total[kind]}" for kind in caught},
        "seconds": round(result["seconds"], 2),
        "prep_seconds": round(result["prep_seconds"], 2),
        "peak_rss_mib": round(result["peak_rss_mib"], 1),
        "peak_pss_mib": round(result["peak_pss_mib"], 1),
        **extras,
        "settings": result["settings"],
    }


def main() -> None:
    """Self-check: build the test corpus, run both peers, print counts, time, memory and planted recall."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="documents in the test corpus")
    parser.add_argument("--workers", type=int, default=2, help="datatrove workers / text-dedup num_proc")
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "dedup_peers")
    parser.add_argument("--json", type=Path, help="also write the summaries here")
    args = parser.parse_args()

    corpus = args.work / "corpus.parquet"
    planted = build_test_corpus(corpus, args.n)
    edited = sorted(p.jaccard for p in planted if p.kind == "edited")
    print(
        f"corpus: {args.n} docs, {sum(p.kind == 'exact' for p in planted)} exact + {len(edited)} edited copies "
        f"planted (edited 5-gram Jaccard min {edited[0]:.3f}, median {edited[len(edited) // 2]:.3f})"
    )
    summaries, removed = [], {}
    for name, runner in (("datatrove", run_datatrove), ("text-dedup", run_textdedup)):
        result = runner(corpus, args.work / name, workers=args.workers)
        removed[name] = result["removed_ids"]
        summary = _summary(result, planted, args.n)
        summaries.append(summary)
        print(json.dumps(summary, indent=2))
    # Each tool keeps one document per cluster but not the same one (datatrove the first row, text-dedup the
    # last), so removed ids overlap little even where the clusters agree: compare counts and planted recall.
    both = removed["datatrove"] & removed["text-dedup"]
    print(
        f"removed ids: by both {len(both)}, only by datatrove {len(removed['datatrove'] - both)}, "
        f"only by text-dedup {len(removed['text-dedup'] - both)} (each keeps a different member of a cluster)"
    )
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=2) + "\n")
    versions = {
        name: importlib.metadata.version(name) for name in ("datatrove", "spacy", "xxhash", "tokenizers", "psutil")
    }
    print("main environment:", versions)


if __name__ == "__main__":
    main()

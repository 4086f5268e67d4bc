"""The graph walk (`stackcurate graph`) on a generated SWH export: rate per core, files/s, memory when doubling.

Issue 18. A synthetic Software Heritage graph export with the tables and column types of
`stackcurate/stages/graph/mini.py` (origin, origin_visit, origin_visit_status, snapshot, snapshot_branch,
release, revision, revision_history, directory, directory_entry, content, skipped_content) is generated with
numpy + pyarrow, seeded and deterministic:
- repositories: each a random tree of directories (depth up to 12: a new directory hangs under the previous one
  half the time, else under a random one, so trees are both deep and bushy) with 5-20 files per directory
  (1% symlinks, 5% executables); the number of directories per repository is log-normal (median 7);
- forks: 30% of repositories have 1-3 forks that share every directory except the path from the root to one
  changed file (new ids for that file's content and its ancestor directories only), as a fork with one commit;
- each origin has one visit (`created`, then `full` with a snapshot); the snapshot's `HEAD` is an alias of
  `refs/heads/main`, a revision whose root directory is the tree; every file's content has a `content` row
  (status visible, random sha1 and length), shared between forks;
- tables are split into ORC files of at most 250,000 rows, as SWH spreads each table over many files.
Ids are random 40-hex strings, not real git hashes (the walk only joins on them), and identical directories of
different repositories are not merged as real ids would merge them. Repositories are added until the
`directory_entry` table holds at least `--entries` rows.

Then `python -m stackcurate.cli graph --export EXPORT --out OUT --no-progress --overwrite --runner ray` runs
with `--workers 1` and `--workers 2` at `--entries` rows, and with `--workers 2` at twice as many. `--partitions`
is set to one per 500,000 directory entries (4 at 2M, 8 at 4M): proportional to the export, as the stage's
default (one per 256 MB of ORC) is, so each task's share stays the same when the export doubles, which is what
"memory flat when the export doubles" asks of the design; but even, where the default would give 3 and 5
partitions here (ORC of 0.55 and 1.1 GB) and leave one of 2 workers idle in each phase's last round.
Per run:
- wall time of the CLI (Ray start and stop included) and the stage's own seconds (its `graph: ... in X s`
  line: planning, the walk's phases, the output shards);
- directory entries per second per core: `directory_entry` rows / stage seconds / workers; files emitted per
  second: kept + removed rows / stage seconds;
- peak RSS: the process tree (the CLI and every descendant) sampled every 0.2 s with psutil; the largest RSS
  of a single Ray worker (a process whose command line starts with `ray::`), and of the CLI (driver);
- bytes written: the sum of `write_bytes` (/proc/<pid>/io) over the tree, the last value seen per process, so
  the walk's work files that are deleted before the end count too; minus the final output folder's size, that
  is the walk's shuffle (its partitioned work files, plus Ray's own logs, which are small).
Before each measured run, it waits (up to 5 minutes) for the 1-minute load average to drop below 1.5, and
records the load it started at.

From these numbers it estimates the 2023-09-06 export (34 billion nodes, 517 billion edges): core-hours at the
measured entries/s/core, taking every edge as a directory entry to walk (directory_entry is the bulk of the
edges; the others, revision history and snapshot branches, are cheaper joins), shuffle bytes at the measured
bytes per entry, and Athena at $5 per TiB scanned over the 15 TiB ORC export.

Run (2 cores, measured 2026-11-24: 35 s to generate, 4 min of runs; all under work/bench_graph, git-ignored):
    python benchmarks/graph_walk.py --entries 2000000 --progress   # --progress: a 4th run with per-phase seconds
Smoke test (results kept out of benchmarks/results):
    python benchmarks/graph_walk.py --entries 100000 --results work/bench_graph/smoke.json
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.orc as orc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline_e2e import process_tree  # noqa: E402  (this folder's whole-pipeline benchmark)

from stackcurate.stages.graph import mini  # noqa: E402  (the export's schemas)

MAX_DEPTH = 12  # deepest directory of a generated tree (the root is depth 0)
FILES_PER_DIR = (5, 20)  # inclusive
FORK_SHARE = 0.3  # of repositories that have forks
FORKS = (1, 3)  # forks of such a repository, inclusive
ROWS_PER_FILE = 250_000  # rows per ORC file of a table
SYMLINK, EXECUTABLE, REGULAR, DIRECTORY = 0o120000, 0o100755, 0o100644, 0o040000
EXTENSIONS = (b".py", b".js", b".c", b".h", b".md", b".json", b".go", b".rs", b".java", b".txt")
EPOCH_US = 1_600_000_000 * 1_000_000
DAY_US = 86_400 * 1_000_000
INTERVAL_S = 0.2
LOAD_LIMIT, LOAD_WAIT_S, LOAD_POLL_S = 1.5, 300, 10
TiB = 2**40
EDGES_2023 = 517e9
NODES_2023 = 34e9
EXPORT_2023_TIB = 15
ATHENA_USD_PER_TIB = 5
# The Athena walk scans: origin_visit_status, snapshot_branch, revision (and release), then directory_entry
# once per depth round joined with the frontier (SC2 walked with a recursive query: about one scan per level;
# ~12 levels cover nearly all files, max_depth 64 bounds it), then content once.
ATHENA_SCANS_ENTRIES = 12


# ---- the export -------------------------------------------------------------------------------------------


def hex_ids(rng: np.random.Generator, n: int, digits: int = 40) -> np.ndarray:
    """`n` random lowercase hex strings of `digits` digits (numpy unicode array)."""
    raw = rng.bytes(n * digits // 2).hex().encode()
    return np.frombuffer(raw, dtype=f"S{digits}").astype(f"U{digits}")


@dataclass
class Graph:
    """The export's rows as integer indexes: directories, contents and origins, ids drawn at the end."""

    # directory_entry: (directory, name, kind 0 file / 1 dir, target: content or directory index, perms)
    entry_dir: list[int] = field(default_factory=list)
    entry_name: list[bytes] = field(default_factory=list)
    entry_kind: list[int] = field(default_factory=list)
    entry_target: list[int] = field(default_factory=list)
    entry_perms: list[int] = field(default_factory=list)
    dirs: int = 0
    contents: int = 0
    origins: list[tuple[str, int]] = field(default_factory=list)  # (url, root directory)
    forks: int = 0


def _tree(rng: np.random.Generator, ndirs: int) -> list[int]:
    """Parents of a random tree of `ndirs` directories (-1 for the root) no deeper than MAX_DEPTH."""
    parent, depth = [-1], [0]
    for k in range(1, ndirs):
        if rng.random() < 0.5 and depth[k - 1] < MAX_DEPTH:
            p = k - 1
        else:
            p = int(rng.integers(k))
            while depth[p] >= MAX_DEPTH:
                p = parent[p]
        parent.append(p)
        depth.append(depth[p] + 1)
    return parent


def _add_entry(g: Graph, directory: int, name: bytes, kind: int, target: int, perms: int) -> None:
    g.entry_dir.append(directory)
    g.entry_name.append(name)
    g.entry_kind.append(kind)
    g.entry_target.append(target)
    g.entry_perms.append(perms)


def _repository(g: Graph, rng: np.random.Generator, number: int) -> None:
    """One repository and its forks."""
    ndirs = int(min(2000, max(1, rng.lognormal(2.0, 1.0))))
    parent = _tree(rng, ndirs)
    base = g.dirs
    g.dirs += ndirs
    children: list[list[int]] = [[] for _ in range(ndirs)]
    for k in range(1, ndirs):
        children[parent[k]].append(k)
    # rows of each directory, kept to copy into a fork's changed directories
    rows: list[list[tuple[bytes, int, int, int]]] = []
    for d in range(ndirs):
        own = [(b"d%d" % c, 1, base + c, DIRECTORY) for c in children[d]]
        nfiles = int(rng.integers(FILES_PER_DIR[0], FILES_PER_DIR[1] + 1))
        kinds = rng.random(nfiles)
        ext = rng.integers(len(EXTENSIONS), size=nfiles)
        for f in range(nfiles):
            perms = SYMLINK if kinds[f] < 0.01 else EXECUTABLE if kinds[f] < 0.06 else REGULAR
            own.append((b"f%d%s" % (f, EXTENSIONS[ext[f]]), 0, g.contents, perms))
            g.contents += 1
        rows.append(own)
        for name, kind, target, perms in own:
            _add_entry(g, base + d, name, kind, target, perms)
    g.origins.append((f"https://github.com/owner{number}/repo{number}", base))
    if rng.random() >= FORK_SHARE:
        return
    for fork in range(int(rng.integers(FORKS[0], FORKS[1] + 1))):
        # one changed file: new content, new ids for its directory and every ancestor, up to the root
        d = int(rng.integers(ndirs))
        files = [i for i, r in enumerate(rows[d]) if r[1] == 0]
        changed, new_target = files[int(rng.integers(len(files)))], g.contents
        g.contents += 1
        while d != -1:
            new_dir = g.dirs
            g.dirs += 1
            for i, (name, kind, target, perms) in enumerate(rows[d]):
                _add_entry(g, new_dir, name, kind, new_target if i == changed else target, perms)
            if parent[d] != -1:
                changed = next(i for i, r in enumerate(rows[parent[d]]) if r[1] == 1 and r[2] == base + d)
            new_target, d = new_dir, parent[d]
        g.origins.append((f"https://github.com/forker{fork}/repo{number}", new_target))
        g.forks += 1


def generate(entries: int, seed: int) -> Graph:
    """Repositories (and forks) until `directory_entry` holds at least `entries` rows."""
    rng = np.random.default_rng(seed)
    g = Graph()
    while len(g.entry_dir) < entries:
        _repository(g, rng, len(g.origins))
    return g


def _ts(values: np.ndarray) -> pa.Array:
    return pa.array(values.astype("datetime64[us]"), pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))


def tables(g: Graph, seed: int) -> dict[str, pa.Table]:
    """The export's tables, with mini.py's schemas."""
    rng = np.random.default_rng(seed + 1)
    n_origins = len(g.origins)
    dir_ids, content_ids = hex_ids(rng, g.dirs), hex_ids(rng, g.contents)
    rev_ids, snap_ids = hex_ids(rng, n_origins), hex_ids(rng, n_origins)
    urls = [u for u, _ in g.origins]
    roots = np.array([r for _, r in g.origins], dtype=np.int64)
    kind = np.array(g.entry_kind, dtype=np.int8)
    target = np.array(g.entry_target, dtype=np.int64)
    targets = np.where(kind == 1, dir_ids[np.where(kind == 1, target, 0)], content_ids[np.where(kind == 0, target, 0)])
    directory_entry = pa.table(
        {
            "directory_id": pa.array(dir_ids[np.array(g.entry_dir, dtype=np.int64)]),
            "name": pa.array(g.entry_name, pa.binary()),
            "type": pa.array(np.where(kind == 1, "dir", "file")),
            "target": pa.array(targets),
            "perms": pa.array(np.array(g.entry_perms, dtype=np.int32)),
        },
        schema=mini.DIRECTORY_ENTRY,
    )
    n = g.contents
    content = pa.table(
        {
            "sha1": pa.array(hex_ids(rng, n)),
            "sha1_git": pa.array(content_ids),
            "sha256": pa.array(hex_ids(rng, n, 64)),
            "blake2s256": pa.array(hex_ids(rng, n, 64)),
            "length": pa.array(np.minimum(rng.lognormal(8.0, 1.5, n), 1e8).astype(np.int64)),
            "status": pa.array(np.full(n, "visible")),
            "data": pa.nulls(n, pa.binary()),
        },
        schema=mini.CONTENT,
    )
    visit = EPOCH_US + rng.integers(0, 3 * 365, n_origins) * DAY_US
    revision_date = visit - rng.integers(1, 365, n_origins) * DAY_US
    offsets = pa.array(rng.choice([-300, 0, 120, 330], n_origins).astype(np.int16))
    revision = pa.table(
        {
            "id": pa.array(rev_ids),
            "date": _ts(revision_date),
            "date_offset": offsets,
            "committer_date": _ts(revision_date + 3_600_000_000),
            "committer_offset": offsets,
            "type": pa.array(np.full(n_origins, "git")),
            "directory": pa.array(dir_ids[roots]),
            "message": pa.array([b"Commit"] * n_origins, pa.binary()),
            "author": pa.array([b"Ada Lovelace <ada@example.org>"] * n_origins, pa.binary()),
            "committer": pa.array([b"Grace Hopper <grace@example.org>"] * n_origins, pa.binary()),
            "raw_manifest": pa.nulls(n_origins, pa.binary()),
        },
        schema=mini.REVISION,
    )
    statuses = 2 * n_origins  # `created` (no snapshot), then `full`
    status_dates = np.repeat(visit, 2) + np.tile([0, 300_000_000], n_origins)
    origin_visit_status = pa.table(
        {
            "origin": pa.array(np.repeat(urls, 2)),
            "visit": pa.array(np.ones(statuses, dtype=np.int64)),
            "date": _ts(status_dates),
            "status": pa.array(np.tile(["created", "full"], n_origins)),
            "snapshot": pa.array([s for snap in snap_ids for s in (None, str(snap))], pa.string()),
            "type": pa.array(np.full(statuses, "git")),
        },
        schema=mini.ORIGIN_VISIT_STATUS,
    )
    main = b"refs/heads/main"
    snapshot_branch = pa.table(
        {
            "snapshot_id": pa.array(np.repeat(snap_ids, 2)),
            "name": pa.array([b"HEAD", main] * n_origins, pa.binary()),
            "target": pa.array([t for rev in rev_ids for t in (main.hex(), str(rev))]),
            "target_type": pa.array(["alias", "revision"] * n_origins),
        },
        schema=mini.SNAPSHOT_BRANCH,
    )
    origin_ids = [mini.swhid.origin_id(u) for u in urls]
    return {
        "origin": pa.table({"id": origin_ids, "url": urls}, schema=mini.ORIGIN),
        "origin_visit": pa.table(
            {
                "origin": urls,
                "visit": np.ones(n_origins, dtype=np.int64),
                "date": _ts(visit),
                "type": np.full(n_origins, "git"),
            },
            schema=mini.ORIGIN_VISIT,
        ),  # fmt: skip
        "origin_visit_status": origin_visit_status,
        "snapshot": pa.table({"id": pa.array(snap_ids)}, schema=mini.SNAPSHOT),
        "snapshot_branch": snapshot_branch,
        "revision": revision,
        "revision_history": mini.REVISION_HISTORY.empty_table(),
        "release": mini.RELEASE.empty_table(),
        "directory": pa.table(
            {"id": pa.array(dir_ids), "raw_manifest": pa.nulls(g.dirs, pa.binary())}, schema=mini.DIRECTORY
        ),  # fmt: skip
        "directory_entry": directory_entry,
        "content": content,
        "skipped_content": mini.SKIPPED_CONTENT.empty_table(),
    }


def write_export(out: Path, entries: int, seed: int) -> dict:
    """Generate and write the export under `out/orc` (reused if `out/export.json` says the same); its summary."""
    summary_path = out / "export.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        if summary["entries_asked"] == entries and summary["seed"] == seed:
            return summary
    if out.exists():
        shutil.rmtree(out)
    started = time.perf_counter()
    g = generate(entries, seed)
    made = tables(g, seed)
    rows, files, size = {}, {}, 0
    for name, table in made.items():
        folder = out / "orc" / name
        folder.mkdir(parents=True)
        chunks = max(1, math.ceil(table.num_rows / ROWS_PER_FILE))
        for i in range(chunks):
            path = folder / f"{name}-{i:05d}.orc"
            orc.write_table(table.slice(i * ROWS_PER_FILE, ROWS_PER_FILE), path)
            size += path.stat().st_size
        rows[name], files[name] = table.num_rows, chunks
    summary = {
        "entries_asked": entries,
        "seed": seed,
        "origins": len(g.origins),
        "forks": g.forks,
        "directories": g.dirs,
        "contents": g.contents,
        "rows": rows,
        "orc_files": files,
        "orc_bytes": size,
        "generate_s": round(time.perf_counter() - started, 1),
    }
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


# ---- measuring a run --------------------------------------------------------------------------------------


def process_name(proc: psutil.Process) -> str:
    """The program's name as its command line shows it now: Ray workers retitle themselves `ray::<task>`."""
    try:
        command = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        command = []
    return Path(command[0]).name if command else proc.name()


@dataclass
class TreeMonitor:
    """Samples the process tree of `root`: peak RSS per process, the last `write_bytes` per process."""

    root: psutil.Process
    procs: dict[tuple[int, float], psutil.Process] = field(default_factory=dict)
    peak_rss: dict[tuple[int, float], int] = field(default_factory=dict)
    names: dict[tuple[int, float], str] = field(default_factory=dict)
    write_bytes: dict[tuple[int, float], int] = field(default_factory=dict)
    peak_rss_total: int = 0
    samples: int = 0

    def sample(self) -> None:
        total = 0
        for proc in process_tree(self.root, self.procs):
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    rss = proc.memory_info().rss
                    written = proc.io_counters().write_bytes
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            name = process_name(proc)
            if name.startswith("ray::") or key not in self.names:  # a worker's title names its task
                self.names[key] = name if name.startswith("ray::") else self.names.get(key, name)
            self.write_bytes[key] = written
            if rss > self.peak_rss.get(key, 0):
                self.peak_rss[key] = rss
            total += rss
        self.samples += 1
        self.peak_rss_total = max(self.peak_rss_total, total)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def wait_for_quiet() -> float:
    """Wait until the 1-minute load average is below LOAD_LIMIT (at most LOAD_WAIT_S); the load then."""
    deadline = time.monotonic() + LOAD_WAIT_S
    while os.getloadavg()[0] >= LOAD_LIMIT and time.monotonic() < deadline:
        print(f"  load {os.getloadavg()[0]:.2f}, waiting", flush=True)
        time.sleep(LOAD_POLL_S)
    return round(os.getloadavg()[0], 2)


STAGE_LINE = re.compile(r"graph: (?P<counts>.*) in (?P<seconds>[\d.]+) s")


def counts_of(line: str) -> dict[str, int]:
    """`1,234 in, 1,200 kept, 34 removed` -> {"in": 1234, "kept": 1200, "removed": 34}."""
    return {m[2]: int(m[1].replace(",", "")) for m in re.finditer(r"([\d,]+) ([a-z_]+)", line)}


def run_graph(
    export: Path, out: Path, workers: int, partitions: int, log: Path, *, progress: bool, wait: bool
) -> dict:
    """One `stackcurate graph` run on Ray with `workers` workers, sampled until it exits."""
    load = wait_for_quiet() if wait else round(os.getloadavg()[0], 2)
    command = [sys.executable, "-m", "stackcurate.cli", "graph", "--export", str(export), "--out", str(out),
               "--overwrite", "--runner", "ray", "--workers", str(workers),
               "--partitions", str(partitions)]  # fmt: skip
    if not progress:
        command.append("--no-progress")
    if out.exists():
        shutil.rmtree(out)
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"  {' '.join(command[1:])} (load {load})", flush=True)
    with log.open("w") as sink:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
        monitor = TreeMonitor(psutil.Process(proc.pid))
        while proc.poll() is None:
            monitor.sample()
            time.sleep(INTERVAL_S)
        wall = time.perf_counter() - started
    text = log.read_text()
    if proc.returncode != 0:
        raise SystemExit(f"graph failed (exit {proc.returncode}); log {log}:\n{text[-3000:]}")
    match = next((m for m in STAGE_LINE.finditer(text)), None)
    if match is None:
        raise SystemExit(f"no `graph: ... in X s` line in {log}")
    workers_rss = {k: v for k, v in monitor.peak_rss.items() if monitor.names.get(k, "").startswith("ray::")}
    driver = (monitor.root.pid, monitor.root.create_time()) if monitor.root.is_running() else None
    driver_rss = monitor.peak_rss.get(driver, 0) if driver else max(
        (v for k, v in monitor.peak_rss.items() if k[0] == proc.pid), default=0)  # fmt: skip
    output = folder_bytes(out / "graph")
    written = sum(monitor.write_bytes.values())
    return {
        "workers": workers,
        "partitions": partitions,
        "load_1min_at_start": load,
        "wall_s": round(wall, 1),
        "stage_s": float(match["seconds"]),
        "counts": counts_of(match["counts"]),
        "peak_rss_worker_mb": round(max(workers_rss.values(), default=0) / 1e6, 1),
        "ray_worker_processes": len(workers_rss),
        "peak_rss_driver_mb": round(driver_rss / 1e6, 1),
        "peak_rss_tree_mb": round(monitor.peak_rss_total / 1e6, 1),
        "write_bytes": written,
        "output_bytes": output,
        "shuffle_bytes": max(0, written - output),
        "samples": monitor.samples,
        "phases": phase_lines(text) if progress else None,
        "log": str(log.relative_to(ROOT)) if log.is_relative_to(ROOT) else str(log),
    }


def phase_lines(text: str) -> dict[str, float | None]:
    """Seconds of each phase from its last progress line (tqdm rewrites them with carriage returns): tasks
    divided by tqdm's rate (`12.5task/s` or `3.2s/task`), finer than its elapsed `[00:01<...`."""
    last: dict[str, str] = {}
    for chunk in re.split(r"[\r\n]", text):
        label = chunk.split(" (", 1)[0].strip()
        if label.startswith("graph") and "|" in chunk:
            last[label] = chunk.strip()
    seconds: dict[str, float | None] = {}
    for label, line in last.items():
        done = re.search(r"\| (\d+)/\d+ \[", line)
        rate = re.search(r"([\d.]+)(s/[a-z]+|[a-z]+/s)\]", line)
        if done is None or rate is None:
            seconds[label] = None
            continue
        value = float(rate[1])
        seconds[label] = round(int(done[1]) * value if rate[2].startswith("s/") else int(done[1]) / value, 2)
    return seconds


def rates(run: dict, export: dict) -> dict:
    entries = export["rows"]["directory_entry"]
    emitted = run["counts"].get("kept", 0) + run["counts"].get("removed", 0)
    run["entries"] = entries
    run["files_emitted"] = emitted
    run["entries_per_s_per_core"] = round(entries / run["stage_s"] / run["workers"])
    run["files_per_s"] = round(emitted / run["stage_s"])
    run["shuffle_bytes_per_entry"] = round(run["shuffle_bytes"] / entries, 1)
    return run


def estimate(one_worker: dict, two_workers: dict) -> dict:
    """The 2023-09-06 export at the measured rates (see the module docstring for the assumptions)."""
    per_core = {"1 worker": one_worker["entries_per_s_per_core"], "2 workers": two_workers["entries_per_s_per_core"]}
    bytes_per_entry = two_workers["shuffle_bytes_per_entry"]
    athena = EXPORT_2023_TIB * ATHENA_USD_PER_TIB
    return {
        "assumption": "every one of the 517e9 edges is a directory entry walked once (directory_entry is the bulk "
        "of the edges); rates and shuffle bytes per entry as measured here, on 2-core local disk. An upper bound "
        "for the depth rounds and the output: here every entry is reachable from a HEAD, in the real export most "
        "directories are older versions that only the read and sort of directory_entry touch",
        "edges": EDGES_2023,
        "nodes": NODES_2023,
        "core_hours": {k: round(EDGES_2023 / v / 3600) for k, v in per_core.items()},
        "shuffle_bytes_per_entry": bytes_per_entry,
        "shuffle_tib": round(EDGES_2023 * bytes_per_entry / TiB, 1),
        "athena_usd_per_full_scan": athena,
        "athena_scans": f"~{ATHENA_SCANS_ENTRIES + 1}: directory_entry once per depth round (~{ATHENA_SCANS_ENTRIES}) "
        "plus one pass over the other tables (they are small next to directory_entry and content)",
        "athena_usd_walk": athena * (ATHENA_SCANS_ENTRIES + 1),
    }


def table_md(runs: list[dict]) -> str:
    head = ("| entries | workers | partitions | stage s | wall s | entries/s/core | files emitted | files/s | "
            "peak worker RSS MB | peak driver RSS MB | shuffle B/entry | load |")  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in runs:
        lines.append(
            f"| {r['entries']:,} | {r['workers']} | {r['partitions']} | {r['stage_s']:.1f} | {r['wall_s']:.1f} | "
            f"{r['entries_per_s_per_core']:,} | {r['files_emitted']:,} | {r['files_per_s']:,} | "
            f"{r['peak_rss_worker_mb']:,.0f} | {r['peak_rss_driver_mb']:,.0f} | {r['shuffle_bytes_per_entry']} | "
            f"{r['load_1min_at_start']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--entries", type=int, default=2_000_000, help="directory_entry rows, at least")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--entries-per-partition", type=int, default=500_000, help="sets the stage's --partitions")
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench_graph")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "graph_walk.json")
    parser.add_argument("--progress", action="store_true", help="one more 2-worker run with per-phase lines")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for a quiet machine")
    parser.add_argument("--generate-only", action="store_true")
    args = parser.parse_args()

    exports = {}
    for entries in (args.entries, 2 * args.entries):
        folder = args.work / f"export-{entries}"
        exports[entries] = write_export(folder, entries, args.seed)
        e = exports[entries]
        print(f"export {folder}: {e['rows']['directory_entry']:,} entries, {e['origins']:,} origins "
              f"({e['forks']:,} forks), {e['orc_bytes'] / 1e6:.0f} MB ORC, {e['generate_s']} s",
              flush=True)  # fmt: skip
    if args.generate_only:
        return

    runs = []
    plan = [(args.entries, 1, False), (args.entries, 2, False), (2 * args.entries, 2, False)]
    plan += [(args.entries, 2, True)] if args.progress else []
    for entries, workers, progress in plan:
        partitions = max(1, math.ceil(entries / args.entries_per_partition))
        name = f"{entries}-w{workers}" + ("-phases" if progress else "")
        run = run_graph(
            args.work / f"export-{entries}",
            args.work / f"run-{name}",
            workers,
            partitions,
            args.work / "logs" / f"{name}.log",
            progress=progress,
            wait=not args.no_wait,
        )
        runs.append(rates(run, exports[entries]) | ({"note": "with progress lines"} if progress else {}))
        print(table_md(runs[-1:]).splitlines()[-1], flush=True)

    small, large = runs[1], runs[2]
    doubling = round(large["peak_rss_worker_mb"] / small["peak_rss_worker_mb"], 2)
    results = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(),
        },  # fmt: skip
        "command": " ".join(["python", *sys.argv]),
        "exports": {str(k): v for k, v in exports.items()},
        "runs": runs,
        "peak_worker_rss_doubling_ratio": doubling,
        "doubling_target": 1.2,
        "estimate_2023_09_06": estimate(runs[0], runs[1]),
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table_md(runs))
    print(f"\npeak worker RSS at {2 * args.entries:,} / {args.entries:,} entries: {doubling}x (target 1.2x)")
    est = results["estimate_2023_09_06"]
    print(f"2023-09-06 ({EDGES_2023:.3g} edges): {est['core_hours']} core-hours; shuffle "
          f"{est['shuffle_bytes_per_entry']} B/entry -> {est['shuffle_tib']} TiB; "
          f"Athena ${est['athena_usd_per_full_scan']} "
          f"per full scan, ~${est['athena_usd_walk']} for the walk ({est['athena_scans']})")  # fmt: skip
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()

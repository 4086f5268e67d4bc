"""The tasks of the graph walk: each reads ORC files of the export, or partitions written by an earlier task,
and writes partitions for the next (`core/shuffle.py`). See the package docstring for the phases.

Every id is the export's lowercase hex string. Rows are partitioned by a hash of the key they are joined on
next, so a join is always "partition p of A with partition p of B", and no task holds a whole table.
"""

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq

from stackcurate.core import io, shuffle

SYMLINK, SUBMODULE = 0o120000, 0o160000
ENTRY_GROUP_ROWS = 4096  # row groups of the sorted directory entries: a round reads only the groups it needs

VISITS = pa.schema([("origin", pa.string()), ("visit", pa.int64()), ("date", pa.timestamp("us", tz="UTC")),
                    ("snapshot", pa.string())])  # fmt: skip
BRANCHES = pa.schema([("snapshot_id", pa.string()), ("name", pa.binary()), ("target", pa.string()),
                      ("target_type", pa.string())])  # fmt: skip
HEADS = pa.schema([("okey", pa.int64()), ("origin", pa.string()), ("visit_date", pa.timestamp("us", tz="UTC")),
                   ("snapshot_id", pa.string())])  # fmt: skip
TARGETS = pa.schema([("okey", pa.int64()), ("branch_name", pa.binary()), ("target", pa.string())])
RELEASES = pa.schema([("id", pa.string()), ("target", pa.string()), ("target_type", pa.string())])
UTC = pa.timestamp("us", tz="UTC")
REVISIONS = pa.schema([("id", pa.string()), ("directory", pa.string()), ("date", UTC), ("committer_date", UTC)])
# An origin's own columns, joined with its files at the end. `directory_id` is the root directory of its revision,
# as in The Stack v2's metadata: it rides here, one row per origin, not on the walk's frontier and file rows.
ORIGINS = pa.schema([("okey", pa.int64()), ("origin", pa.string()), ("visit_date", pa.timestamp("us", tz="UTC")),
                     ("snapshot_id", pa.string()), ("branch_name", pa.binary()), ("revision_id", pa.string()),
                     ("directory_id", pa.string()), ("revision_date", pa.timestamp("us", tz="UTC")),
                     ("committer_date", pa.timestamp("us", tz="UTC"))])  # fmt: skip
# the columns of ORIGINS that roots_task finds (the others are the origin's visit, from latest_task)
REVISION_OF_ORIGIN = ("okey", "branch_name", "revision_id", "directory_id", "revision_date", "committer_date")
FRONTIER = pa.schema([("okey", pa.int64()), ("dir_id", pa.string()), ("prefix", pa.binary())])
ENTRIES = pa.schema([("directory_id", pa.string()), ("name", pa.binary()), ("type", pa.string()),
                     ("target", pa.string()), ("perms", pa.int32())])  # fmt: skip
# A file of an origin, or an entry recorded as removed (reason set): partitioned by content id, then by origin.
# No directory: the origin's root directory joins by `okey` at the end (ORIGINS).
FILES = pa.schema([("okey", pa.int64()), ("path", pa.binary()), ("content_id", pa.string()),
                   ("reason", pa.string()), ("detail", pa.string())])  # fmt: skip
CONTENTS = pa.schema([("sha1_git", pa.string()), ("sha1", pa.string()), ("length", pa.int64()),
                      ("status", pa.string()), ("reason", pa.string())])  # fmt: skip
ANNOTATED = pa.schema([*FILES, ("blob_id", pa.string()), ("length_bytes", pa.int64())])


@dataclass(frozen=True)
class Walk:
    """What every task of one walk needs: where the export and the work files are, and the settings."""

    export: str  # the folder holding `<table>/*.orc`
    work: str  # the work folder's URI
    partitions: int
    origins: str | None  # regex on origin URLs
    opt_out: frozenset[str]
    branches: tuple[str, ...]
    max_depth: int

    def path(self, *parts: str) -> str:
        return io.join(self.work, *parts)


def hex_part(values: list[str | None], partitions: int) -> np.ndarray:
    """Partition of each hex id (its first 15 digits, uniform for SHA-1)."""
    return np.array([int(v[:15], 16) % partitions if v else 0 for v in values], dtype=np.int64)


def origin_key(url: str) -> int:
    """A 63-bit key of an origin URL (its rows carry it instead of the URL)."""
    return int.from_bytes(hashlib.sha1(url.encode()).digest()[:8], "big") >> 1


def key_part(keys: np.ndarray, partitions: int) -> np.ndarray:
    return (keys % partitions).astype(np.int64)


def write_parts(walk: Walk, folder: str, writer: int, table: pa.Table, parts: np.ndarray) -> None:
    fs, root = io.filesystem(walk.path(folder))
    shuffle.write_partitioned(fs, root, writer, table, parts, walk.partitions)


def read_part(walk: Walk, folder: str, part: int, schema: pa.Schema) -> pa.Table:
    fs, root = io.filesystem(walk.path(folder))
    if not io.exists(fs, root):
        return schema.empty_table()
    table = shuffle.read_partition(fs, root, part)
    return schema.empty_table() if table is None else table.select(schema.names).cast(schema)


def orc_batches(uri: str, columns: list[str]) -> Iterator[pa.Table]:
    """The stripes of one ORC file, `columns` only. A file that cannot be read raises OSError or ArrowException
    (the caller records it)."""
    fs, path = io.filesystem(uri)
    with fs.open_input_file(path) as f:
        reader = orc.ORCFile(f)
        for i in range(reader.nstripes):
            yield pa.Table.from_batches([reader.read_stripe(i, columns=columns)])


def _scan(uri: str, columns: list[str]) -> tuple[list[pa.Table], str | None]:
    """All stripes of one ORC file, `columns` in that order, or why it could not be read."""
    try:
        return [t.select(columns) for t in orc_batches(uri, columns)], None
    except (OSError, pa.ArrowException) as exc:
        return [], f"{type(exc).__name__}: {str(exc)[:300]}"


# ---- origins: the latest full visit, its snapshot's branch, the revision --------------------------------


def visits_task(walk: Walk, uri: str, writer: int) -> dict[str, Any]:
    """Full visits with a snapshot of the origins the filters keep, by origin."""
    tables, error = _scan(uri, ["origin", "visit", "date", "status", "snapshot"])
    pattern = re.compile(walk.origins) if walk.origins else None
    kept, opted_out = [], set()
    for t in tables:
        rows = list(zip(*(t.column(c).to_pylist() for c in ("origin", "status", "snapshot")), strict=True))
        opted_out.update(url for url, _, _ in rows if url in walk.opt_out)
        keep = [status == "full" and snapshot is not None and (pattern is None or bool(pattern.search(url)))
                and url not in walk.opt_out for url, status, snapshot in rows]  # fmt: skip
        kept.append(t.filter(pa.array(keep, pa.bool_())).select(VISITS.names).cast(VISITS))
    table = pa.concat_tables(kept) if kept else VISITS.empty_table()
    keys = np.array([origin_key(u) for u in table.column("origin").to_pylist()], dtype=np.int64)
    write_parts(walk, "visits", writer, table, key_part(keys, walk.partitions))
    return {"rows": table.num_rows, "error": error, "file": uri, "opted_out": sorted(opted_out)}


def latest_task(walk: Walk, part: int) -> dict[str, Any]:
    """Each origin's latest full visit (ties: the higher visit number), by snapshot."""
    visits = read_part(walk, "visits", part, VISITS)
    best: dict[str, tuple[Any, int, str]] = {}
    for origin, visit, date, snapshot in zip(*(visits.column(c).to_pylist() for c in VISITS.names), strict=True):
        if origin not in best or (date, visit) > best[origin][:2]:
            best[origin] = (date, visit, snapshot)
    origins = sorted(best)
    table = pa.table({"okey": [origin_key(o) for o in origins], "origin": origins,
                      "visit_date": [best[o][0] for o in origins], "snapshot_id": [best[o][2] for o in origins]},
                     schema=HEADS)  # fmt: skip
    write_parts(walk, "heads", part, table, hex_part(table.column("snapshot_id").to_pylist(), walk.partitions))
    return {"origins": len(origins)}


def branches_task(walk: Walk, uri: str, writer: int) -> dict[str, Any]:
    """The branches a HEAD can lead to (heads and tags, and the names asked for), by snapshot."""
    tables, error = _scan(uri, BRANCHES.names)
    wanted = {b.encode() for b in walk.branches}
    kept = []
    for t in tables:
        names = t.column("name").to_pylist()
        keep = [n in wanted or n.startswith((b"refs/heads/", b"refs/tags/")) for n in names]
        kept.append(t.filter(pa.array(keep, pa.bool_())).cast(BRANCHES))
    table = pa.concat_tables(kept) if kept else BRANCHES.empty_table()
    write_parts(walk, "branches", writer, table, hex_part(table.column("snapshot_id").to_pylist(), walk.partitions))
    return {"rows": table.num_rows, "error": error, "file": uri}


def resolve_task(walk: Walk, part: int) -> dict[str, Any]:
    """Each origin's branch: the first of `branches` present (an alias followed to the branch it names), to a
    release or a revision. Origins whose branch leads elsewhere (or nowhere) are counted, not walked."""
    heads = read_part(walk, "heads", part, HEADS)
    branches = read_part(walk, "branches", part, BRANCHES)
    by_snapshot: dict[str, dict[bytes, tuple[str, str]]] = {}
    for snap, name, target, kind in zip(*(branches.column(c).to_pylist() for c in BRANCHES.names), strict=True):
        by_snapshot.setdefault(snap, {})[name] = (target, kind)
    found: dict[str, list[tuple[int, bytes, str]]] = {"release": [], "revision": []}
    unresolved = 0
    for okey, snap in zip(heads.column("okey").to_pylist(), heads.column("snapshot_id").to_pylist(), strict=True):
        names = by_snapshot.get(snap, {})
        hit = next((b.encode() for b in walk.branches if b.encode() in names), None)
        for _ in range(4):  # HEAD -> refs/heads/main; an alias of an alias at most a few times
            if hit is None or names[hit][1] != "alias":
                break
            target = bytes.fromhex(names[hit][0])
            hit = target if target in names else None
        if hit is None or names[hit][1] not in found:
            unresolved += 1
            continue
        target, kind = names[hit]
        found[kind].append((okey, hit, target))
    for kind, rows in found.items():
        table = pa.table({"okey": [r[0] for r in rows], "branch_name": [r[1] for r in rows],
                          "target": [r[2] for r in rows]}, schema=TARGETS)  # fmt: skip
        write_parts(walk, f"need_{kind}", part, table, hex_part(table.column("target").to_pylist(), walk.partitions))
    # the heads again, by origin: the origins' own columns join the files at the end
    write_parts(walk, "origin_heads", part, heads, key_part(heads.column("okey").to_numpy(), walk.partitions))
    return {"releases": len(found["release"]), "revisions": len(found["revision"]), "unresolved": unresolved}


def by_id_task(walk: Walk, table_name: str, uri: str, writer: int) -> dict[str, Any]:
    """A `release` or `revision` ORC file, the columns the walk needs, by id."""
    schema = RELEASES if table_name == "release" else REVISIONS
    tables, error = _scan(uri, schema.names)
    table = pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
    write_parts(walk, f"{table_name}s", writer, table, hex_part(table.column("id").to_pylist(), walk.partitions))
    return {"rows": table.num_rows, "error": error, "file": uri}


def releases_task(walk: Walk, part: int) -> dict[str, Any]:
    """Releases followed to their revision (a release of something else is counted, not walked)."""
    need = read_part(walk, "need_release", part, TARGETS)
    releases = read_part(walk, "releases", part, RELEASES)
    target = {i: (t, k) for i, t, k in zip(*(releases.column(c).to_pylist() for c in RELEASES.names), strict=True)}
    rows = [(o, b, target[t][0]) for o, b, t in zip(*(need.column(c).to_pylist() for c in TARGETS.names), strict=True)
            if t in target and target[t][1] == "revision"]  # fmt: skip
    table = pa.table({"okey": [r[0] for r in rows], "branch_name": [r[1] for r in rows],
                      "target": [r[2] for r in rows]}, schema=TARGETS)  # fmt: skip
    # writers after resolve_task's, in the same folder
    write_parts(walk, "need_revision", walk.partitions + part, table, hex_part([r[2] for r in rows], walk.partitions))
    return {"followed": len(rows), "unresolved": need.num_rows - len(rows)}


def roots_task(walk: Walk, part: int) -> dict[str, Any]:
    """Each origin's revision: its root directory starts the walk; it and the dates join the origin's columns.

    The root directory is written once per origin here, and reaches the origin's files by the final join on
    `okey` (`read_annotated`), as `revision_id` does: the frontier and the file rows of the depth rounds stay
    (origin, directory, path) and (origin, path, content), with no root id per row to carry through every
    round and shuffle."""
    need = read_part(walk, "need_revision", part, TARGETS)
    revisions = read_part(walk, "revisions", part, REVISIONS)
    rev = {r[0]: r[1:] for r in zip(*(revisions.column(c).to_pylist() for c in REVISIONS.names), strict=True)}
    frontier, origins = [], []
    for okey, branch, target in zip(*(need.column(c).to_pylist() for c in TARGETS.names), strict=True):
        if target not in rev:
            continue
        directory, date, committer_date = rev[target]
        frontier.append((okey, directory, b""))
        origins.append((okey, branch, target, directory, date, committer_date))
    table = pa.table({n: [f[i] for f in frontier] for i, n in enumerate(FRONTIER.names)}, schema=FRONTIER)
    write_parts(walk, "level-0", part, table, hex_part(table.column("dir_id").to_pylist(), walk.partitions))
    names = list(REVISION_OF_ORIGIN)
    found = pa.table({n: [o[i] for o in origins] for i, n in enumerate(names)},
                     schema=pa.schema([ORIGINS.field(n) for n in names]))  # fmt: skip
    write_parts(walk, "origin_revisions", part, found, key_part(found.column("okey").to_numpy(), walk.partitions))
    return {"roots": len(frontier), "missing_revisions": need.num_rows - len(frontier)}


# ---- the directory walk ------------------------------------------------------------------------------------


def entries_task(walk: Walk, uri: str, writer: int) -> dict[str, Any]:
    """A `directory_entry` ORC file, by directory."""
    tables, error = _scan(uri, ENTRIES.names)
    table = pa.concat_tables([t.cast(ENTRIES) for t in tables]) if tables else ENTRIES.empty_table()
    parts = hex_part(table.column("directory_id").to_pylist(), walk.partitions)
    write_parts(walk, "entries_by_dir", writer, table, parts)
    return {"rows": table.num_rows, "error": error, "file": uri}


def sort_entries_task(walk: Walk, part: int) -> dict[str, Any]:
    """One partition of the entries sorted by directory, in small row groups: a round of the walk then reads
    only the row groups whose directory range holds one of its directories."""
    table = read_part(walk, "entries_by_dir", part, ENTRIES)
    table = table.sort_by([("directory_id", "ascending"), ("name", "ascending")])
    fs, root = io.filesystem(walk.path("entries"))
    fs.create_dir(root, recursive=True)
    sink = io.AtomicParquetWriter(fs, io.join(root, f"{part:05d}.parquet"), ENTRIES)
    for start in range(0, table.num_rows, ENTRY_GROUP_ROWS):
        sink.write(table.slice(start, ENTRY_GROUP_ROWS))
    sink.commit()
    return {"rows": table.num_rows}


def entries_of(walk: Walk, part: int, dirs: list[str]) -> pa.Table:
    """The entries of `dirs` (sorted) from partition `part`, reading only the row groups that may hold them."""
    fs, path = io.filesystem(walk.path("entries", f"{part:05d}.parquet"))
    if not io.exists(fs, path):
        return ENTRIES.empty_table()
    wanted = np.array(dirs, dtype=object)
    with fs.open_input_file(path) as f:
        reader = pq.ParquetFile(f)
        meta, groups = reader.metadata, []
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(0).statistics
            if stats is None or not stats.has_min_max:
                groups.append(g)
                continue
            lo = int(np.searchsorted(wanted, stats.min, side="left"))
            if lo < len(wanted) and wanted[lo] <= stats.max:
                groups.append(g)
        table = reader.read_row_groups(groups) if groups else ENTRIES.empty_table()
    wanted_set = set(dirs)
    return table.filter(pa.array([d in wanted_set for d in table.column("directory_id").to_pylist()], pa.bool_()))


def level_task(walk: Walk, depth: int, part: int) -> dict[str, Any]:
    """One round of the walk for one partition: each directory of the frontier is read once, however many
    origins (forks) reach it, and its entries go to every (origin, path) that holds it: files by content id,
    subdirectories to the next round, submodules, symlinks and what lies deeper than `max_depth` as removed."""
    frontier = read_part(walk, f"level-{depth}", part, FRONTIER)
    if frontier.num_rows == 0:
        return {"frontier": 0, "directories": 0, "next": 0, "files": 0, "missing_directories": 0}
    holders: dict[str, list[tuple[int, bytes]]] = {}
    for okey, dir_id, prefix in zip(*(frontier.column(c).to_pylist() for c in FRONTIER.names), strict=True):
        holders.setdefault(dir_id, []).append((okey, prefix))
    entries = entries_of(walk, part, sorted(holders))
    files: list[tuple[int, bytes, str | None, str | None, str | None]] = []
    below: list[tuple[int, str, bytes]] = []
    columns = (entries.column(c).to_pylist() for c in ENTRIES.names)
    for dir_id, name, kind, target, perms in zip(*columns, strict=True):
        for okey, prefix in holders[dir_id]:
            path = prefix + b"/" + name
            if kind == "dir":
                if depth + 2 > walk.max_depth:  # its files would have more than max_depth components
                    files.append((okey, path, None, "path_too_deep", f"a folder at depth {depth + 1}"))
                else:
                    below.append((okey, target, path))
            elif kind == "rev" or perms == SUBMODULE:
                files.append((okey, path, None, "submodule", f"revision {target}"))
            elif perms == SYMLINK:
                files.append((okey, path, target, "symlink", None))
            else:
                files.append((okey, path, target, None, None))
    _write_files(walk, depth, part, files)
    table = pa.table({"okey": [b[0] for b in below], "dir_id": [b[1] for b in below],
                      "prefix": [b[2] for b in below]}, schema=FRONTIER)  # fmt: skip
    write_parts(walk, f"level-{depth + 1}", part, table, hex_part(table.column("dir_id").to_pylist(), walk.partitions))
    missing = len(set(holders) - set(entries.column("directory_id").to_pylist()))
    return {"frontier": frontier.num_rows, "directories": len(holders), "next": len(below), "files": len(files),
            "missing_directories": missing}  # fmt: skip


def _write_files(walk: Walk, depth: int, part: int, rows: list[tuple[Any, ...]]) -> None:
    """A round's files into `files`, one writer per (depth, partition)."""
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(FILES.names)}, schema=FILES)
    content = table.column("content_id").to_pylist()
    # by content id (the next join); removed rows with no content go with the rest of their origin's
    parts = hex_part([c or f"{k:015x}" for c, k in zip(content, table.column("okey").to_pylist(), strict=True)],
                      walk.partitions)  # fmt: skip
    write_parts(walk, "files", depth * walk.partitions + part, table, parts)


# ---- contents, and the files of each origin ----------------------------------------------------------------


def contents_task(walk: Walk, table_name: str, uri: str, writer: int) -> dict[str, Any]:
    """A `content` or `skipped_content` ORC file: sha1, length, and whether the bytes are there, by sha1_git."""
    skipped = table_name == "skipped_content"
    columns = ["sha1", "sha1_git", "length", "reason" if skipped else "status"]
    tables, error = _scan(uri, columns)
    parts = []
    for t in tables:
        n = t.num_rows
        parts.append(pa.table({
            "sha1_git": t["sha1_git"].cast(pa.string()), "sha1": t["sha1"].cast(pa.string()),
            "length": t["length"].cast(pa.int64()),
            "status": pa.nulls(n, pa.string()) if skipped else t["status"].cast(pa.string()),
            "reason": t["reason"].cast(pa.string()) if skipped else pa.nulls(n, pa.string()),
        }, schema=CONTENTS))  # fmt: skip
    table = pa.concat_tables(parts) if parts else CONTENTS.empty_table()
    folder = "skipped" if skipped else "contents"
    write_parts(walk, folder, writer, table, hex_part(table.column("sha1_git").to_pylist(), walk.partitions))
    return {"rows": table.num_rows, "error": error, "file": uri}


def annotate_task(walk: Walk, part: int) -> dict[str, Any]:
    """Each file with its content's sha1 and length, or why it has no bytes (skipped, hidden, not in the
    export's content table), by origin."""
    files = read_part(walk, "files", part, FILES)
    contents = pa.concat_tables(
        [read_part(walk, "contents", part, CONTENTS), read_part(walk, "skipped", part, CONTENTS)]
    )
    known = contents.rename_columns(["content_id", "blob_id", "length_bytes", "status", "skipped"])
    known = known.append_column("known", pa.array(np.ones(known.num_rows, dtype=bool)))
    # An Arrow join, not a dict of the partition: the content table is the export's largest after its entries.
    files = files.join(known, "content_id", join_type="left outer")  # in no set order: the shards sort
    reason, detail = files.column("reason").to_pylist(), files.column("detail").to_pylist()
    found = files.column("known").to_pylist()
    columns = (files.column(c).to_pylist() for c in ("content_id", "status", "skipped"))
    for i, (content_id, status, skipped) in enumerate(zip(*columns, strict=True)):
        if reason[i] is not None:
            continue
        if not found[i]:
            reason[i], detail[i] = "content_missing", f"{content_id} is not in the export's content tables"
        elif skipped is not None:
            reason[i], detail[i] = "skipped_content", skipped
        elif status != "visible":
            reason[i], detail[i] = "hidden_content", f"status {status}"
    table = files.set_column(files.schema.get_field_index("reason"), "reason", pa.array(reason, pa.string()))
    table = table.set_column(table.schema.get_field_index("detail"), "detail", pa.array(detail, pa.string()))
    table = table.select(ANNOTATED.names).cast(ANNOTATED)
    write_parts(walk, "annotated", part, table, key_part(table.column("okey").to_numpy(), walk.partitions))
    return {"files": table.num_rows}


def read_annotated(walk: Walk, part: int) -> tuple[pa.Table, pa.Table]:
    """The files of the origins of partition `part`, and those origins' own columns."""
    files = read_part(walk, "annotated", part, ANNOTATED)
    heads = read_part(walk, "origin_heads", part, HEADS)
    revisions = read_part(walk, "origin_revisions", part, pa.schema([ORIGINS.field(n) for n in REVISION_OF_ORIGIN]))
    origins = heads.join(revisions, "okey", join_type="inner").select(ORIGINS.names).cast(ORIGINS)
    return files, origins

"""The files that change between pairs of revisions, from a Software Heritage graph export: a pull request's code
when no git repository holds it (sources/gharchive: a git commit id is the SWH revision id).

Each pair (a pull request's base and one of its heads) has a key whose high 32 bits are the partition of the
records that need it (`key >> 32`). In phases of tasks on the run's workers, as the walk of the package
docstring (walk.py's tables, partitions and sorted entries; no task holds a whole table):

1. revisions: the export's `revision` rows of the pairs' revisions, joined to their root directories;
2. rounds, one per depth: the two directories of each pair at each path where they differ are read (`expand`,
   by directory), their entries meet by pair (`compare`, by key), and of the names in both, differing
   subdirectories go to the next round and differing files are recorded (added and deleted ones are not: they
   are not base files); the license-like files at the base's root are recorded too (the repository's license);
3. contents: each recorded file's blob (`content` and `skipped_content`: sha1, length, or why it has no
   bytes), then every row to the partition of its key.

`changed_files` then gives a partition's rows; the shards read the blobs from the content store.
"""

import re
from typing import Any

import numpy as np
import pyarrow as pa

from stackcurate.stages.graph import walk as w

PAIRS = pa.schema([("key", pa.int64()), ("base", pa.string()), ("head", pa.string())])
NEED = pa.schema([("key", pa.int64()), ("side", pa.int8()), ("revision", pa.string())])
SIDE = pa.schema([("key", pa.int64()), ("side", pa.int8()), ("dir_id", pa.string()), ("prefix", pa.binary())])
SEEN = pa.schema([("key", pa.int64()), ("prefix", pa.binary()), ("side", pa.int8()), ("name", pa.binary()),
                  ("type", pa.string()), ("target", pa.string()), ("perms", pa.int32())])  # fmt: skip
ROOTS = pa.schema([("key", pa.int64()), ("side", pa.int8())])
CHANGED = pa.schema([("key", pa.int64()), ("path", pa.binary()), ("side", pa.int8()), ("content_id", pa.string())])
FOUND = pa.schema([*CHANGED, ("blob_id", pa.string()), ("length_bytes", pa.int64()), ("reason", pa.string())])
BASE, HEAD, LICENSE = 0, 1, 2  # a changed file's side; LICENSE: a license-like file at the base's root
MAX_DEPTH = 64


def need_task(walk: w.Walk, pairs: pa.Table, writer: int) -> dict[str, Any]:
    """One partition's pairs, as the revisions they need, by revision."""
    keys = pairs.column("key").to_pylist()
    rows = {"key": keys + keys, "side": [BASE] * len(keys) + [HEAD] * len(keys),
            "revision": pairs.column("base").to_pylist() + pairs.column("head").to_pylist()}  # fmt: skip
    table = pa.table(rows, schema=NEED)
    w.write_parts(walk, "need", writer, table, w.hex_part(rows["revision"], walk.partitions))
    return {"pairs": pairs.num_rows}


def roots_task(walk: w.Walk, part: int) -> dict[str, Any]:
    """The root directory of each needed revision: the first round's directories, by directory."""
    need = w.read_part(walk, "need", part, NEED)
    revisions = w.read_part(walk, "revisions", part, w.REVISIONS)
    root = dict(zip(revisions.column("id").to_pylist(), revisions.column("directory").to_pylist(), strict=True))
    rows = [(k, s, root[r], b"") for k, s, r in zip(*(need.column(c).to_pylist() for c in NEED.names), strict=True)
            if r in root]  # fmt: skip
    _write_sides(walk, "side-0", part, rows)
    # which sides were found, for the records that need them: a pair missing one is not in the export
    found = pa.table({"key": [r[0] for r in rows], "side": [r[1] for r in rows]}, schema=ROOTS)
    keys = found.column("key").to_numpy()
    w.write_parts(walk, "roots", part, found, (keys >> 32).astype(np.int64) % walk.partitions)
    return {"roots": len(rows), "missing_revisions": need.num_rows - len(rows)}


def _write_sides(walk: w.Walk, folder: str, writer: int, rows: list[tuple[Any, ...]]) -> None:
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(SIDE.names)}, schema=SIDE)
    w.write_parts(walk, folder, writer, table, w.hex_part(table.column("dir_id").to_pylist(), walk.partitions))


def expand_task(walk: w.Walk, depth: int, part: int) -> dict[str, Any]:
    """The entries of this round's directories (each read once), for each pair side that holds one, by key."""
    sides = w.read_part(walk, f"side-{depth}", part, SIDE)
    holders: dict[str, list[tuple[int, int, bytes]]] = {}
    for key, side, dir_id, prefix in zip(*(sides.column(c).to_pylist() for c in SIDE.names), strict=True):
        holders.setdefault(dir_id, []).append((key, side, prefix))
    entries = w.entries_of(walk, part, sorted(holders)) if holders else w.ENTRIES.empty_table()
    rows: list[tuple[Any, ...]] = []
    for dir_id, name, kind, target, perms in zip(*(entries.column(c).to_pylist() for c in w.ENTRIES.names),
                                                 strict=True):  # fmt: skip
        rows += [(key, prefix, side, name, kind, target, perms) for key, side, prefix in holders[dir_id]]
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(SEEN.names)}, schema=SEEN)
    w.write_parts(walk, f"seen-{depth}", part, table, w.key_part(table.column("key").to_numpy(), walk.partitions))
    return {"directories": len(holders), "entries": len(rows)}


def compare_task(walk: w.Walk, depth: int, part: int, license_files: str) -> dict[str, Any]:
    """Each pair's two directories at each path: differing subdirectories to the next round, differing files
    (and the base root's license files) recorded, by content."""
    seen = w.read_part(walk, f"seen-{depth}", part, SEEN)
    pattern = re.compile(license_files, re.IGNORECASE)
    listed: dict[tuple[int, bytes], list[dict[bytes, tuple[str, str, int]]]] = {}
    for key, prefix, side, name, kind, target, perms in zip(*(seen.column(c).to_pylist() for c in SEEN.names),
                                                            strict=True):  # fmt: skip
        listed.setdefault((key, prefix), [{}, {}])[side][name] = (kind, target, perms)
    below: list[tuple[Any, ...]] = []
    changed: list[tuple[Any, ...]] = []
    for (key, prefix), (base, head) in listed.items():
        for name, (kind, target, perms) in base.items():
            path = prefix + b"/" + name
            if depth == 0 and kind == "file" and _plain(perms) and pattern.match(name.decode("utf-8", "replace")):
                changed.append((key, path, LICENSE, target))
            other = head.get(name)
            if other is None or other[1] == target or other[0] != kind:
                continue
            if kind == "dir" and depth + 1 < MAX_DEPTH:
                below += [(key, BASE, target, path), (key, HEAD, other[1], path)]
            elif kind == "file" and _plain(perms) and _plain(other[2]):
                changed += [(key, path, BASE, target), (key, path, HEAD, other[1])]
    _write_sides(walk, f"side-{depth + 1}", part, below)
    table = pa.table({n: [r[i] for r in changed] for i, n in enumerate(CHANGED.names)}, schema=CHANGED)
    parts = w.hex_part(table.column("content_id").to_pylist(), walk.partitions)
    w.write_parts(walk, "changed", depth * walk.partitions + part, table, parts)
    return {"next": len(below) // 2, "files": len(changed)}


def _plain(perms: int) -> bool:
    """A regular file's mode (not a link, not a submodule)."""
    return perms not in (w.SYMLINK, w.SUBMODULE)


def found_task(walk: w.Walk, part: int) -> dict[str, Any]:
    """Each recorded file with its blob (sha1) and size, or why it has none; to the partition of its key."""
    files = w.read_part(walk, "changed", part, CHANGED)
    contents = pa.concat_tables(
        [w.read_part(walk, "contents", part, w.CONTENTS), w.read_part(walk, "skipped", part, w.CONTENTS)]
    )
    columns = (contents.column(c).to_pylist() for c in ("sha1_git", "sha1", "length", "status", "reason"))
    known = {c: (sha1, n, status, skipped) for c, sha1, n, status, skipped in zip(*columns, strict=True)}
    blob, length, reason = [], [], []
    for content_id in files.column("content_id").to_pylist():
        sha1, size, status, skipped = known.get(content_id, (None, None, None, None))
        blob.append(sha1 if sha1 and status == "visible" and skipped is None else None)
        length.append(size)
        if content_id not in known:
            reason.append("content_missing")
        elif skipped is not None:
            reason.append("skipped_content")
        elif status != "visible":
            reason.append("hidden_content")
        else:
            reason.append(None)
    table = files.append_column("blob_id", pa.array(blob, pa.string()))
    table = table.append_column("length_bytes", pa.array(length, pa.int64()))
    table = table.append_column("reason", pa.array(reason, pa.string()))
    keys = table.column("key").to_numpy()
    w.write_parts(walk, "found", part, table, (keys >> 32).astype(np.int64) % walk.partitions)
    return {"files": table.num_rows}


def changed_files(walk: w.Walk, part: int) -> tuple[pa.Table, set[int]]:
    """The recorded files of the pairs whose key is of partition `part` (FOUND), and the keys of those whose
    two revisions the export holds."""
    roots = w.read_part(walk, "roots", part, ROOTS)
    sides: dict[int, set[int]] = {}
    for key, side in zip(roots.column("key").to_pylist(), roots.column("side").to_pylist(), strict=True):
        sides.setdefault(key, set()).add(side)
    return w.read_part(walk, "found", part, FOUND), {k for k, s in sides.items() if s == {BASE, HEAD}}

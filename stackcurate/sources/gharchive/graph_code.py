"""Pull requests' code from a Software Heritage graph export and its content store (`--gharchive-graph`).

Before the shards, each partition of threads names the revision pairs of its pull requests (its base and each
head; a git commit id is the SWH revision id), and the graph's diff walk (stages/graph/diff.py) finds the files
that differ in each pair and their blobs. Each shard then reads its partition's pairs and files, and the blobs
from the content store (`--content`, `content/<sha1>` gzip objects, as The Stack v2's): a pull request no git
repository holds is looked up here.
"""

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.core import io, shuffle
from stackcurate.core.contract import StageContext
from stackcurate.core.phases import Phases
from stackcurate.sources import fetch
from stackcurate.sources.gharchive.code import Change
from stackcurate.stages.graph import diff, export_tables
from stackcurate.stages.graph import walk as w
from stackcurate.stages.license import read_pattern

if TYPE_CHECKING:
    from stackcurate.stages.ingest import IngestConfig

PAIRS = pa.schema([("key", pa.int64()), ("thread", pa.string()), ("base", pa.string()), ("head", pa.string())])


def _walk(export: str, work: str, partitions: int) -> w.Walk:
    return w.Walk(export=export, work=work, partitions=partitions, origins=None, opt_out=frozenset(), branches=(),
                  max_depth=diff.MAX_DEPTH)  # fmt: skip


def pairs_task(events: str, walk: w.Walk, part: int) -> dict[str, Any]:
    """The revision pairs of one partition's pull requests (their first base, each head in order of appearance,
    as pulls.build reads them), keyed `part << 32 | n`; written for the shard and as the walk's needs."""
    fs, root = io.filesystem(events)
    table = shuffle.read_partition(
        fs, root, part, columns=["key", "is_pr", "created_at", "id", "base_sha", "head_sha"]
    )
    threads: dict[str, tuple[list[str], list[str]]] = {}
    if table is not None:
        table = table.sort_by([("key", "ascending"), ("created_at", "ascending"), ("id", "ascending")])
        values = (table.column(c).to_pylist() for c in ("key", "is_pr", "base_sha", "head_sha"))
        for key, is_pr, base, head in zip(*values, strict=True):
            bases, heads = threads.setdefault(key, ([], []))
            for sha, seen in ((base, bases), (head, heads)):
                if is_pr and sha and sha not in seen:
                    seen.append(sha)
    rows = [(thread, bases[0], head) for thread, (bases, heads) in threads.items() if bases for head in heads]
    pairs = pa.table({"key": [(part << 32) | n for n in range(len(rows))], "thread": [r[0] for r in rows],
                      "base": [r[1] for r in rows], "head": [r[2] for r in rows]}, schema=PAIRS)  # fmt: skip
    out_fs, out = io.filesystem(walk.path("pairs"))
    out_fs.create_dir(out, recursive=True)
    pq.write_table(pairs, io.join(out, f"{part:05d}.parquet"), filesystem=out_fs)
    return diff.need_task(walk, pairs.select(diff.PAIRS.names), part)


def run(cfg: "IngestConfig", ctx: StageContext, phases: Phases, partitions: int) -> str:
    """The diff walk's phases for every partition of threads; returns the walk's folder (its URI)."""
    assert cfg.gharchive_graph is not None and cfg.gharchive_events is not None
    walk = _walk(cfg.gharchive_graph, phases.work_uri("graph"), partitions)
    tables = export_tables(cfg.gharchive_graph)
    parts = [(walk, p) for p in range(partitions)]

    def each_file(table: str, fn: Any, *extra: Any) -> None:
        phases.run(f"graph-{table}", fn, [(walk, *extra, uri, i) for i, uri in enumerate(tables[table])], bar=False)

    phases.run("graph-pairs", pairs_task, [(cfg.gharchive_events, walk, p) for p in range(partitions)], bar=False)
    each_file("revision", w.by_id_task, "revision")
    phases.run("graph-roots", diff.roots_task, parts, bar=False)
    each_file("directory_entry", w.entries_task)
    phases.run("graph-sort", w.sort_entries_task, parts, bar=False)
    pattern = read_pattern().pattern
    with phases.rounds("gharchive pull requests' code, by depth") as rounds:
        for depth in range(diff.MAX_DEPTH):
            rounds.run(f"graph-expand-{depth}", diff.expand_task, [(walk, depth, p) for p in range(partitions)])
            found = rounds.run(f"graph-compare-{depth}", diff.compare_task,
                               [(walk, depth, p, pattern) for p in range(partitions)])  # fmt: skip
            if not sum(r["next"] for r in found):
                break
    each_file("content", w.contents_task, "content")
    each_file("skipped_content", w.contents_task, "skipped_content")
    phases.run("graph-found", diff.found_task, parts, bar=False)
    return walk.work


class GraphCode:
    """One shard's pull requests' files from the diff walk, and their blobs from the content store."""

    def __init__(self, ingest: "IngestConfig", walk_uri: str, part: int, partitions: int) -> None:
        assert ingest.gharchive_graph is not None and ingest.content is not None
        walk = _walk(ingest.gharchive_graph, walk_uri, partitions)
        fs, root = io.filesystem(walk.path("pairs", f"{part:05d}.parquet"))
        pairs = pq.read_table(root, filesystem=fs).to_pylist() if io.exists(fs, root) else []
        self.pairs: dict[str, list[dict[str, Any]]] = {}
        for pair in pairs:
            self.pairs.setdefault(pair["thread"], []).append(pair)
        files, self.complete = diff.changed_files(walk, part)
        self.files_of: dict[int, list[dict[str, Any]]] = {}
        for row in files.to_pylist():
            self.files_of.setdefault(row["key"], []).append(row)
        self.store = fetch.ContentStore(ingest.content, ingest.s3, ingest.fetch_options)
        self.limits = ingest.limits
        self.licensed: dict[str, list[str]] = {}

    def holds(self, thread: str) -> bool:
        return thread in self.pairs

    def files(self, thread: str, heads: list[str]) -> dict[str, list[Change]] | None:
        """For each head, the files it modifies against the base; None when the export lacks a revision."""
        pairs = {p["head"]: p for p in self.pairs.get(thread, [])}
        if not heads or any(h not in pairs or pairs[h]["key"] not in self.complete for h in heads):
            return None
        found: dict[str, list[Change]] = {}
        for head in heads:
            sides: dict[bytes, dict[int, str | None]] = {}
            for row in self.files_of.get(pairs[head]["key"], []):
                if row["side"] in (diff.BASE, diff.HEAD):
                    sides.setdefault(row["path"], {})[row["side"]] = row["blob_id"]
            wanted = [(path, s) for path, s in sorted(sides.items()) if s.get(diff.BASE) and s.get(diff.HEAD)]
            blobs = self._read([b for _, s in wanted for b in (s[diff.BASE], s[diff.HEAD])])  # type: ignore[misc]
            read = zip(blobs[::2], blobs[1::2], strict=True)
            found[head] = [Change(path.decode("utf-8", "surrogateescape").lstrip("/"), old, new)
                           for (path, _), (old, new) in zip(wanted, read, strict=True)
                           if old is not None and new is not None]  # fmt: skip
        return found

    def licenses(self, thread: str) -> list[str]:
        """The ids ScanCode finds in the license-like files at the root of the pull request's base."""
        from stackcurate.stages import license_detect

        pairs = self.pairs.get(thread, [])
        rows = [r for r in self.files_of.get(pairs[0]["key"], []) if r["side"] == diff.LICENSE] if pairs else []
        found: set[str] = set()
        for row, data in zip(rows, self._read([r["blob_id"] for r in rows]), strict=True):
            if data is not None:
                if row["blob_id"] not in self.licensed:
                    self.licensed[row["blob_id"]] = license_detect.detect(data.decode("utf-8", "replace"), "stack_v2")
                found.update(self.licensed[row["blob_id"]])
        return sorted(found)

    def _read(self, blobs: list[str | None]) -> list[bytes | None]:
        """The inflated bytes of each blob (None for a blob without one, missing, or over the limits)."""
        wanted = [b for b in blobs if b]
        requests = [fetch.Request(f"content/{b}", self.limits.max_compressed_bytes, self.limits.max_bytes)
                    for b in wanted]  # fmt: skip
        futures: list[Future[bytes | int]] = self.store.fetch(requests) if requests else []
        read: dict[str, bytes | None] = {}
        for blob, request, future in zip(wanted, requests, futures, strict=True):
            try:
                result = future.result()
            except Exception:  # noqa: BLE001 - a blob that cannot be read leaves its file out, as a missing one
                result = None
            finally:
                self.store.release(request)
            if isinstance(result, bytes):
                inflated = fetch.gunzip_bounded(result, self.limits.max_bytes, self.limits.bomb_ratio)
                read[blob] = inflated.data if inflated.reason is None else None
            else:
                read[blob] = None
        return [read.get(b) if b else None for b in blobs]

    def close(self) -> None:
        self.store.close()

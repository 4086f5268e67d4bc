"""The Software Heritage graph export walked to file-level metadata: what The Stack v2 started from.

Reads an export's ORC tables (`<export>/orc/<table>/*.orc`, or `<export>/<table>/*.orc`; a folder or
`s3://`) and writes, for every origin, the files of its latest full visit's snapshot, as the metadata Parquet
`stackcurate ingest --metadata` takes: blob_id (sha1), content_id (sha1_git), path, directory_id (the root
directory of the revision, the same for every file of an origin, as in The Stack v2), revision_id, snapshot_id,
branch_name, repo_name (github.com/owner/name as `owner/name`, other hosts as `host/path`), visit_date,
revision_date, committer_date, length_bytes, extension. In a pipeline, an `ingest` after `graph` with no
`metadata` of its own reads these.

The walk, as The Stack v2 did it with Athena, in phases of tasks on the run's workers (`walk.py`); every
phase reads ORC files or partitions of an earlier phase and writes partitions by the key of the next join, so
no worker holds a whole table, and a rerun resumes after the last finished task:
1. origins: `origin_visit_status` rows with status `full` and a snapshot, of the origins the URL pattern and
   the opt-out list keep; the latest per origin;
2. branches: `snapshot_branch`; the first of `branches` present (`HEAD` by default, an alias followed to the
   branch it names), to a revision, or to a release followed to its revision (`release`); the revision's
   root directory and dates (`revision`);
3. directories: `directory_entry` partitioned by directory and sorted; then one round per depth joins the
   frontier (origin, directory, path) with the entries: a directory shared by many origins (forks) is read
   once per round, the entries of a round come from the row groups that hold its directories only;
4. contents: each file's `content` (sha1, length, status) or `skipped_content` row.

Removed, with their reason: `symlink` (the blob is the link's text), `submodule` (a `rev` entry),
`path_too_deep` (a folder whose files would be deeper than `max_depth` components), `skipped_content` (SWH
has no bytes), `hidden_content`, `content_missing` (not in the export's content tables). A name that is not
UTF-8 keeps its file, its path decoded with backslash escapes (`name_not_utf8` counts them). An ORC file that
cannot be read is an error row naming it; the other files are still walked. Origins whose branch cannot be
resolved, or whose revision or directories are not in the export, are counted in the stage's stats
(`origins_walked`, `origins_without_branch`, `origins_without_revision`, `directories_missing`), and so are the
origins of the opt-out list that the export holds (`origins_opted_out`).

Example:
    stackcurate graph --export s3://softwareheritage/graph/2023-09-06-popular-1k --out work/run \\
        --origins '^https://github\\.com/'
    stackcurate ingest --out work/run --metadata 'work/run/graph/*.parquet' --content s3://softwareheritage
"""

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from stackcurate.core import io
from stackcurate.core.config import option
from stackcurate.core.contract import Shard, Stage, StageContext, StageOutput
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import StageDir
from stackcurate.core.schema import ERROR_SCHEMA, extension_of
from stackcurate.stages.graph import walk as w

WALK_STAGE = "graph_walk"
SUMMARY = "summary.json"  # the walk's unreadable files and counts, in its work folder
BATCH_ROWS = 65_536  # output rows handed to the writer at a time
TABLES = ("origin_visit_status", "snapshot_branch", "release", "revision", "directory_entry", "content",
          "skipped_content")  # fmt: skip
OUTPUT_SCHEMA = pa.schema(
    [
        ("blob_id", pa.string()),
        ("directory_id", pa.string()),
        ("path", pa.string()),
        ("content_id", pa.string()),
        ("repo_name", pa.string()),
        ("origin_url", pa.string()),
        ("snapshot_id", pa.string()),
        ("revision_id", pa.string()),
        ("branch_name", pa.string()),
        ("visit_date", pa.timestamp("us", tz="UTC")),
        ("revision_date", pa.timestamp("us", tz="UTC")),
        ("committer_date", pa.timestamp("us", tz="UTC")),
        ("length_bytes", pa.int64()),
        ("extension", pa.string()),
    ]
)


@dataclass(frozen=True, kw_only=True)
class GraphConfig:
    """Where the export is, which origins to take, and how deep to walk."""

    export: str | None = option(None, "the export: a folder or s3:// URI holding orc/<table>/*.orc", path=True)
    origins: str | None = option(None, "regex: walk only origins whose URL matches (e.g. '^https://github\\.com/')")
    opt_out: str | None = option(None, "file of origin URLs to leave out, one per line (The Stack's opt-out)",
                                 path=True)  # fmt: skip
    branches: tuple[str, ...] = option(("HEAD",), "the branch to take, the first present: HEAD, refs/heads/main...")
    max_depth: int = option(64, "files deeper than this many path components are removed (SC2: 64)")
    partitions: int = option(0, "partitions of the walk's joins and output files (0: one per 256 MB of ORC)")
    walk: str | None = option(None, "graph_walk folder to read the walk from (default: made by this run)")

    def __post_init__(self) -> None:
        if self.max_depth < 1 or self.partitions < 0:
            raise ValueError("max_depth must be positive and partitions not negative")


def export_tables(export: str) -> dict[str, list[str]]:
    """The ORC files of each table of the export (a table may have none)."""
    fs, root = io.filesystem(export)
    if io.exists(fs, io.join(root, "orc")):
        root = io.join(root, "orc")
    prefix = export[: export.index("://") + 3] if "://" in export else ""
    found = {}
    for table in TABLES:
        files = io.expand(fs, io.join(root, table, "*.orc")) if io.exists(fs, io.join(root, table)) else []
        found[table] = [prefix + f if prefix else f for f in files]
    return found


def plan(cfg: GraphConfig) -> list[Shard]:
    """One shard per output partition (the origins, by a hash of their URL)."""
    if not cfg.export:
        raise StackcurateError("graph needs --export, the folder or s3:// URI of an SWH graph export")
    tables = export_tables(cfg.export)
    for needed in ("origin_visit_status", "snapshot_branch", "revision", "directory_entry", "content"):
        if not tables[needed]:
            raise StackcurateError(f"{cfg.export} has no {needed} table (orc/{needed}/*.orc); is it an SWH export?")
    partitions = cfg.partitions
    if not partitions:
        size = sum(io.file_size(f) for files in tables.values() for f in files)
        partitions = max(1, math.ceil(size / 256e6))
    return [Shard(index=p, kind="graph", path=cfg.export, source_index=0) for p in range(partitions)]


def _opt_out(cfg: GraphConfig) -> frozenset[str]:
    if not cfg.opt_out:
        return frozenset()
    fs, path = io.filesystem(cfg.opt_out)
    lines = io.read_text(fs, path).splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def run_walk(cfg: GraphConfig, ctx: StageContext) -> GraphConfig:
    """The walk's phases into `<out>/graph_walk` (reused when finished, resumed when not)."""
    if cfg.walk is not None:
        return cfg
    assert cfg.export is not None
    tables = export_tables(cfg.export)
    partitions = len(ctx.shards)
    settings = {
        "export": cfg.export,
        "origins": cfg.origins,
        "opt_out": sorted(_opt_out(cfg)),
        "branches": list(cfg.branches),
        "max_depth": cfg.max_depth,
        "partitions": partitions,
        "layout": 2,  # directory_id per origin: a walk of layout 1 (each file's folder) is not resumed
    }
    phases = ctx.phases(WALK_STAGE, settings)
    result = replace(cfg, walk=phases.work_uri())
    walk = w.Walk(export=cfg.export, work=phases.work_uri(), partitions=partitions, origins=cfg.origins,
                  opt_out=_opt_out(cfg), branches=cfg.branches, max_depth=cfg.max_depth)  # fmt: skip
    errors: list[dict[str, Any]] = []
    parts = [(walk, p) for p in range(partitions)]

    def files_of(table: str, fn: Any, *extra: Any) -> list[dict[str, Any]]:
        items = [(walk, *extra, uri, i) for i, uri in enumerate(tables[table])]
        results = phases.run(f"read-{table}", fn, items, f"graph {table}")
        errors.extend(r for r in results if r.get("error"))
        return results

    visits = files_of("origin_visit_status", w.visits_task)
    phases.run("latest", w.latest_task, parts, "graph latest visits")
    files_of("snapshot_branch", w.branches_task)
    resolved = phases.run("resolve", w.resolve_task, parts, "graph branches")
    files_of("release", w.by_id_task, "release")
    followed = phases.run("releases", w.releases_task, parts, "graph releases")
    files_of("revision", w.by_id_task, "revision")
    roots = phases.run("roots", w.roots_task, parts, "graph revisions")
    missing = 0
    files_of("directory_entry", w.entries_task)
    phases.run("sort-entries", w.sort_entries_task, parts, "graph sort entries")
    phases.drop("entries_by_dir")
    depth = 0
    with phases.rounds("graph directories, by depth") as levels:  # one progress bar for every depth
        while depth <= cfg.max_depth:  # a round per depth, while the frontier holds directories
            rounds = levels.run(f"level-{depth}", w.level_task, [(walk, depth, p) for p in range(partitions)])
            phases.drop(f"level-{depth}")
            missing += sum(r["missing_directories"] for r in rounds)
            depth += 1
            if not sum(r["next"] for r in rounds):
                break
    files_of("content", w.contents_task, "content")
    files_of("skipped_content", w.contents_task, "skipped_content")
    phases.run("annotate", w.annotate_task, parts, "graph contents")
    for folder in ("files", "contents", "skipped"):
        phases.drop(folder)
    counts = {  # what the walk could not follow, for the stage's stats
        "origins_opted_out": len(set().union(*(r.get("opted_out", ()) for r in visits))),
        "origins_walked": sum(r["roots"] for r in roots),
        "origins_without_branch": sum(r["unresolved"] for r in resolved) + sum(r["unresolved"] for r in followed),
        "origins_without_revision": sum(r["missing_revisions"] for r in roots),
        "directories_missing": missing,
    }
    io.write_bytes_atomic(phases.fs, phases.work(SUMMARY), json.dumps({"errors": errors, "counts": counts}).encode())
    return result


def drop_walk(cfg: GraphConfig, ctx: StageContext) -> None:
    """Once every shard is written, the walk's work files go."""
    out = StageDir(ctx.out, WALK_STAGE)
    if cfg.walk is not None and cfg.walk.startswith(out.state_uri):
        out.delete()


def repo_name(url: str) -> str:
    """The Stack v2's `repo_name` (`owner/name` on GitHub), else the URL without its scheme."""
    bare = url.split("://", 1)[-1].rstrip("/").removesuffix(".git")
    return bare.removeprefix("github.com/")


def _texts(names: pa.ChunkedArray) -> tuple[pa.Array, list[int]]:
    """Paths from their bytes, and the rows whose bytes were not UTF-8 (decoded with backslash escapes)."""
    try:
        return names.cast(pa.string()).combine_chunks(), []
    except pa.ArrowInvalid:  # some name is not UTF-8: decode one by one
        texts, bad = [], []
        for i, name in enumerate(names.to_pylist()):
            if name is None:
                texts.append(None)
                continue
            try:
                texts.append(name.decode())
            except UnicodeDecodeError:
                texts.append(name.decode("utf-8", "backslashreplace"))
                bad.append(i)
        return pa.array(texts, pa.string()), bad


class GraphStage(Stage):
    """walk a Software Heritage graph export to the file metadata that ingest reads

    Walk a Software Heritage graph export (its ORC tables, in a folder or on S3) to one metadata row per file of
    each origin's latest full visit, as The Stack v2 started: blob_id, content_id, path, repo_name, branch,
    revision and visit dates, length_bytes, extension. In a pipeline, an ingest right after graph reads these rows
    when it is given no metadata of its own.

    Removed, by reason: symlink, submodule, path_too_deep (deeper than --max-depth), skipped_content and
    hidden_content (Software Heritage holds no bytes), content_missing (not in the export's content tables).
    An ORC file that cannot be read is an error row; the rest of the export is still walked.

    Examples:
      stackcurate graph --export s3://softwareheritage/graph/2023-09-06-popular-1k --out work/run \\
          --origins '^https://github\\.com/'
      stackcurate ingest --out work/run --metadata 'work/run/graph/*.parquet' --content s3://softwareheritage
    """

    name = "graph"
    config = GraphConfig
    reads_records = False
    kinds = None

    @classmethod
    def plan(cls, cfg: GraphConfig, input_uri: str | None) -> list[Shard]:
        return plan(cfg)

    @classmethod
    def before_shards(cls, cfg: GraphConfig, ctx: StageContext) -> GraphConfig:
        return run_walk(cfg, ctx)

    @classmethod
    def after_shards(cls, cfg: GraphConfig, ctx: StageContext) -> None:
        drop_walk(cfg, ctx)

    def __init__(self, cfg: GraphConfig) -> None:
        super().__init__(cfg)
        self.counts: dict[str, int] = {}

    def output_schema(self, shard: Shard) -> pa.Schema:
        return OUTPUT_SCHEMA

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        if self.cfg.walk is None:
            raise StackcurateError("graph: the walk has not run; run `stackcurate graph`, which runs it first")
        walk = w.Walk(export=self.cfg.export or "", work=self.cfg.walk, partitions=0, origins=None,
                      opt_out=frozenset(), branches=(), max_depth=self.cfg.max_depth)  # fmt: skip
        files, origins = w.read_annotated(walk, shard.index)
        # sorted, so the files come in the same order whatever the workers
        joined = files.join(origins, "okey", join_type="inner").sort_by(
            [("origin", "ascending"), ("path", "ascending")]
        )
        for start in range(0, joined.num_rows, BATCH_ROWS):
            yield self._table(joined.slice(start, BATCH_ROWS))
        if shard.index == 0:  # the export's unreadable files and the walk's counts, once
            fs, path = io.filesystem(io.join(self.cfg.walk, SUMMARY))
            summary = json.loads(io.read_text(fs, path))
            self.counts = summary["counts"]
            errors = summary["errors"]
            yield pa.table({"unreadable": [e["file"] for e in errors], "detail": [e["error"] for e in errors]},
                           schema=pa.schema([("unreadable", pa.string()), ("detail", pa.string())]))  # fmt: skip

    def _table(self, joined: pa.Table) -> pa.Table:
        """The output rows (and removed ones, with their reason) of files joined with their origin."""
        paths, not_utf8 = _texts(joined["path"])
        branches, _ = _texts(joined["branch_name"])
        urls = joined["origin"].to_pylist()
        names = {url: repo_name(url) for url in set(urls)}
        detail = joined["detail"].to_pylist()
        for i in not_utf8:  # kept, with its path escaped: said in `detail`, counted in the stats
            detail[i] = detail[i] or "name_not_utf8"
        columns = {
            "blob_id": joined["blob_id"], "directory_id": joined["directory_id"], "path": paths,
            "content_id": joined["content_id"], "repo_name": pa.array([names[u] for u in urls], pa.string()),
            "origin_url": joined["origin"], "snapshot_id": joined["snapshot_id"],
            "revision_id": joined["revision_id"], "branch_name": branches, "visit_date": joined["visit_date"],
            "revision_date": joined["revision_date"], "committer_date": joined["committer_date"],
            "length_bytes": joined["length_bytes"],
            "extension": pa.array([extension_of(p or "") for p in paths.to_pylist()], pa.string()),
            "reason": joined["reason"], "detail": pa.array(detail, pa.string()),
        }  # fmt: skip
        return pa.table(columns, schema=pa.schema([*OUTPUT_SCHEMA, ("reason", pa.string()), ("detail", pa.string())]))

    def __call__(self, table: pa.Table) -> StageOutput:
        if "unreadable" in table.column_names:
            n = table.num_rows
            errors = pa.table(
                {"doc_id": pa.nulls(n, pa.int64()), "source": ["graph"] * n, "origin": table["unreadable"],
                 "repo_name": pa.nulls(n, pa.string()), "path": table["unreadable"],
                 "blob_id": pa.nulls(n, pa.string()), "reason": ["unreadable_input"] * n, "detail": table["detail"]},
                schema=ERROR_SCHEMA,
            )  # fmt: skip
            stats: dict[tuple[str, str | None, str | None], float] = {
                (name, None, None): float(n) for name, n in self.counts.items()
            }
            return StageOutput(kept=OUTPUT_SCHEMA.empty_table(), errors=errors, stats=stats)
        removed = pc.is_valid(table["reason"])  # pyright: ignore[reportAttributeAccessIssue]
        kept = table.filter(pc.invert(removed))  # pyright: ignore[reportAttributeAccessIssue]
        not_utf8 = pc.sum(pc.equal(kept["detail"], "name_not_utf8")).as_py() or 0  # pyright: ignore[reportAttributeAccessIssue]
        return StageOutput(
            kept=kept.select(OUTPUT_SCHEMA.names),
            removed=table.filter(removed),
            stats={("name_not_utf8", None, None): float(not_utf8)} if not_utf8 else None,
        )

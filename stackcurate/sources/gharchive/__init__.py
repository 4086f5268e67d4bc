"""GitHub issues and pull requests from GH Archive's hourly event files (`ingest --gharchive`).

Planning splits the input into partitions of threads (one per `gharchive_partition_mb` of compressed input);
before the shards, each hourly file is one task that sends its issue and pull-request events to the partition
of their thread (events.py: a shuffle through files, resumable, no worker holding more than one file or one
partition); each shard then reads one partition, groups its events by thread and yields one record per thread,
cleaned and rendered (threads.py), or removed with the rule that removed it. Records are of kind `issue` or
`pull_request`: an issue on a pull request (its comments) goes with the pull request.

A pull request needs its base files and diff, which GH Archive does not hold: they are read from the
repositories of `--gharchive-code` (code.py; a pull request none of them holds is removed as
`pr_code_not_found`). StarCoder2's per-repository sampling needs each repository's number of pull requests,
which spread over every partition: after the split, one task per partition counts its pull requests by
repository and one more adds them up (`gharchive_pr_counts`, an Arrow file each shard maps).

Example:
    stackcurate ingest --out work/gh --gharchive 'gharchive/2023-03-01-*.json.gz' --gharchive-code repos/
"""

import dataclasses
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stackcurate.core import io, shuffle
from stackcurate.core.contract import Shard, StageContext
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import StageDir
from stackcurate.sources.base import RawBatch, Source, expand_inputs
from stackcurate.sources.gharchive import graph_code, pulls, threads
from stackcurate.sources.gharchive.code import Repositories
from stackcurate.sources.gharchive.events import URL_SCHEMES, split_task, url_size
from stackcurate.stages.license import read_opt_out

if TYPE_CHECKING:
    from stackcurate.stages.ingest import IngestConfig

SPLIT = "ingest_gharchive"  # the run folder's scratch stage of the split (its partitions)
ISSUE, PULL_REQUEST = "issue", "pull_request"
OptOut = tuple[frozenset[str], frozenset[str]]  # repositories and accounts (license.read_opt_out)
_ORDINALS = 1 << 24  # doc_ids per partition: a partition's threads are numbered from partition << 24


class GHArchive(Source):
    name = "gharchive"
    option = "gharchive"
    kinds = (ISSUE, PULL_REQUEST)
    columns = (
        pa.field("number", pa.int64()),  # the issue's or pull request's number in its repository
        pa.field("events", pa.int32()),  # events kept after cleaning (opening and comments)
        pa.field("participants", pa.int32()),  # distinct authors of those
        pa.field("bot_events", pa.int32()),  # events dropped as bots' (or calling a bot)
        pa.field("truncated_events", pa.int32()),  # texts cut to their first and last lines
        pa.field("pr_files", pa.int32()),  # a pull request's base files rendered
    )
    error_reasons = frozenset({"malformed_line", "malformed_event", "truncated_file", "unreadable_input"})
    reads_only_names = True  # threads have no file names: a read of some names (license's scan) reads none

    def files(self) -> list[str]:
        """The hourly files, in the order given: a URL names one file (HTTP lists no folder to glob)."""
        found: list[str] = []
        for pattern in self.ingest.gharchive:
            is_url = pattern.startswith(URL_SCHEMES)
            found += [pattern] if is_url else expand_inputs((pattern,), self.ingest.s3, "GH Archive")
        return found

    def plan(self, upstream: str | None) -> list[Shard]:
        if not self.ingest.gharchive:
            return []
        files = self.files()
        urls = [f for f in files if f.startswith(URL_SCHEMES)]
        with ThreadPoolExecutor(max_workers=16) as pool:  # one HEAD request per URL: a month is 744 of them
            told = list(pool.map(url_size, urls))
        # a URL whose size the server does not tell counts as a whole partition, so that memory stays bounded
        unknown = told.count(0) * self.ingest.gharchive_partition_mb * 1e6
        size = sum(io.file_size(f, self.ingest.s3) for f in files if not f.startswith(URL_SCHEMES)) + sum(told)
        partitions = max(1, math.ceil((size + unknown) / (self.ingest.gharchive_partition_mb * 1e6)))
        return [Shard(index=p, kind=self.name, path=f"gharchive:{p}/{partitions}", source_index=0, start=p,
                      stop=partitions) for p in range(partitions)]  # fmt: skip

    def prepare(self, cfg: "IngestConfig", ctx: StageContext) -> "IngestConfig":
        """Send every thread's events to its partition (events.py), once per input and partition count; then
        count each repository's pull requests (module docstring)."""
        if not cfg.gharchive:
            return cfg
        partitions = next((s.stop for s in ctx.shards if s.kind == self.name), 1)
        files = self.files()
        phases = ctx.phases(SPLIT, {"files": files, "partitions": partitions, "events": cfg.gharchive_events})
        if cfg.gharchive_events is None:
            root = phases.work_uri("events")  # the files a rerun finds split are not split again (their markers)
            phases.run("split", split_task, [(f, i, root, partitions) for i, f in enumerate(files)], "gharchive split")
            cfg = dataclasses.replace(cfg, gharchive_events=root)
        if cfg.gharchive_pr_counts is None:
            counts = phases.work_uri("pr_counts")
            phases.run("count", _count_task, [(cfg.gharchive_events, p, counts) for p in range(partitions)], bar=False)
            phases.run("total", _total_task, [(counts,)], bar=False)
            cfg = dataclasses.replace(cfg, gharchive_pr_counts=io.join(counts, TOTAL))
        if cfg.gharchive_graph is not None and cfg.gharchive_walk is None:
            if cfg.content is None:
                raise StackcurateError("--gharchive-graph reads the blobs from the content store: pass --content")
            cfg = dataclasses.replace(cfg, gharchive_walk=graph_code.run(cfg, ctx, phases, partitions))
        return cfg

    def finish(self, cfg: "IngestConfig", ctx: StageContext) -> None:
        """Once every shard has read its partition, the split goes."""
        split = StageDir(ctx.out, SPLIT)
        if split.exists():
            split.delete()

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        if self.ingest.only_names is not None:
            return
        if self.ingest.gharchive_events is None:
            raise ValueError("the GH Archive events were not split; run ingest, which splits them first")
        fs, root = io.filesystem(self.ingest.gharchive_events)
        table = shuffle.read_partition(fs, root, shard.start)
        batch = RawBatch(shard, "gharchive", self.ingest.batch_rows, schema=self.raw_schema())
        batch.ordinal = shard.start * _ORDINALS
        if table is None:
            return
        rules = threads.load_rules(self.ingest.gharchive_rules or threads.RULES)
        opt_out = read_opt_out(self.ingest.gharchive_opt_out) if self.ingest.gharchive_opt_out else None
        graph = None
        if self.ingest.gharchive_walk is not None:
            graph = graph_code.GraphCode(self.ingest, self.ingest.gharchive_walk, shard.start, shard.stop)
        prs = _PullRequests(self.ingest, rules, _counts(self.ingest.gharchive_pr_counts, table), graph)
        try:
            yield from self._read(batch, table, rules, opt_out, prs)
        finally:
            prs.code.close()
            if graph is not None:
                graph.close()

    def _read(
        self, batch: RawBatch, table: pa.Table, rules: threads.Rules, opt_out: OptOut | None, prs: "_PullRequests"
    ) -> Iterator[pa.Table]:
        for key, events in _threads(table):
            if key.startswith("~"):  # the bad lines of one hourly file (events.py)
                for e in events:
                    reason, _, detail = e["error"].partition(": ")
                    batch.add(e["file"], reason=reason, detail=f"line {e['line']}: {detail}", kind=ISSUE,
                              origin=e["file"])  # fmt: skip
            else:
                _add_thread(batch, events, rules, opt_out, prs)
            if batch.full():
                yield batch.flush()
        if batch.rows:
            yield batch.flush()


TOTAL = "total.arrow"


def _count_task(events: str, part: int, counts: str) -> dict[str, int]:
    """The pull requests of one partition, counted by repository (a pull request lives in one partition)."""
    fs, root = io.filesystem(events)
    table = shuffle.read_partition(fs, root, part, columns=["key", "repo", "is_pr"])
    if table is not None:
        prs = table.filter(pc.fill_null(table.column("is_pr"), False)).group_by(["repo", "key"]).aggregate([])
        table = prs.group_by("repo").aggregate([("key", "count")]).rename_columns(["repo", "count"])
    else:
        table = pa.table({"repo": pa.array([], pa.string()), "count": pa.array([], pa.int64())})
    out_fs, out = io.filesystem(counts)
    out_fs.create_dir(out, recursive=True)
    pq.write_table(table, io.join(out, f"{part:05d}.parquet"), filesystem=out_fs)
    return {"repositories": table.num_rows}


def _total_task(counts: str) -> dict[str, int]:
    """The counts of every partition added up, as an Arrow file each shard memory-maps."""
    fs, root = io.filesystem(counts)
    parts = [pq.read_table(path, filesystem=fs) for path in io.expand(fs, root, suffix=".parquet")]
    total = pa.concat_tables(parts).group_by("repo").aggregate([("count", "sum")]).rename_columns(["repo", "count"])
    with fs.open_output_stream(io.join(root, TOTAL)) as sink, pa.ipc.new_file(sink, total.schema) as writer:
        writer.write_table(total)
    return {"repositories": total.num_rows}


def _counts(uri: str | None, table: pa.Table) -> dict[str, int] | None:
    """The pull requests per repository of the partition's repositories; None when not counted (no sampling)."""
    if uri is None:
        return None
    fs, path = io.filesystem(uri)
    with fs.open_input_file(path) as handle:
        total = pa.ipc.open_file(handle).read_all()
    repos = pc.unique(table.column("repo"))  # pyright: ignore[reportAttributeAccessIssue]
    mine = total.filter(pc.is_in(total.column("repo"), value_set=repos))  # pyright: ignore[reportAttributeAccessIssue]
    return dict(zip(mine.column("repo").to_pylist(), mine.column("count").to_pylist(), strict=True))


@dataclasses.dataclass
class _PullRequests:
    """What a shard needs for its pull requests: their rules, code and repositories' counts."""

    ingest: "IngestConfig"
    bot_rules: threads.Rules
    counts: dict[str, int] | None
    graph: "graph_code.GraphCode | None" = None
    rules: dict[str, Any] = dataclasses.field(init=False)
    code: Repositories = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.rules = pulls.load_rules(self.ingest.gharchive_pr_rules or pulls.RULES)
        self.code = Repositories(self.ingest.gharchive_code, self.ingest.tmp_dir)

    def clean(self, repo: str, number: int, events: list[dict[str, Any]]) -> pulls.Result:
        pr = pulls.build(repo, number, events)
        count = None if self.counts is None else self.counts.get(repo, 1)
        return pulls.clean(pr, self.rules, self.bot_rules, self.code, count, self.ingest.gharchive_seed, self.graph)


def _threads(table: pa.Table) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each thread's events, threads by key, events by time then id, each event id once (GH Archive repeats
    some events across files)."""
    rows = table.sort_by([("key", "ascending"), ("created_at", "ascending"), ("id", "ascending")]).to_pylist()
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i]["key"] != rows[start]["key"]:
            seen: set[str | None] = set()
            events = []
            for e in rows[start:i]:
                if e["id"] is None or e["id"] not in seen:
                    seen.add(e["id"])
                    events.append(e)
            yield rows[start]["key"], events
            start = i


def _opted_out(repo: str, events: list[dict[str, Any]], opt_out: tuple[frozenset[str], frozenset[str]]) -> str | None:
    """Why a thread goes under the opt-out lists (without naming who: removed rows are outputs too), or None."""
    repos, accounts = opt_out
    if repo.lower() in repos:
        return "its repository opted out"
    if repo.split("/", 1)[0].lower() in accounts:
        return "its repository's owner opted out"
    if any((login or "").lower() in accounts for e in events for login in (e["login"], e["opener"])):
        return "a participant opted out"
    return None


def _add_thread(
    batch: RawBatch, events: list[dict[str, Any]], rules: threads.Rules,
    opt_out: OptOut | None = None, prs: _PullRequests | None = None,
) -> None:  # fmt: skip
    first = events[0]
    repo, number = first["repo"], first["number"]
    is_pr = any(e["is_pr"] for e in events)
    kind = PULL_REQUEST if is_pr else ISSUE
    url = f"https://github.com/{repo}/{'pull' if is_pr else 'issues'}/{number}"
    common = {"kind": kind, "origin": url, "repo_name": repo, "number": number}
    path = f"{'pull' if is_pr else 'issues'}/{number}"
    if opt_out is not None and (why := _opted_out(repo, events, opt_out)):
        batch.add(path, reason="opt_out", detail=why, **common)
        return
    if is_pr:
        if prs is None:
            raise ValueError("a pull request needs the shard's code folders and counts")
        result = prs.clean(repo, number, events)
        counts = {"events": result.events, "participants": result.authors, "bot_events": result.bot_events,
                  "truncated_events": result.truncated, "pr_files": result.files}  # fmt: skip
        data = result.text.encode("utf-8") if result.text is not None else None
        batch.add(path, data, reason=result.reason, detail=result.detail, revision_id=result.base,
                  detected_licenses=result.licenses, **common, **counts)  # fmt: skip
        return
    cleaned = threads.clean(threads.build(repo, number, events), rules)
    counts = {"events": cleaned.events, "participants": cleaned.authors, "bot_events": cleaned.bot_events,
              "truncated_events": cleaned.truncated}  # fmt: skip
    data = cleaned.text.encode("utf-8") if cleaned.text is not None else None
    batch.add(path, data, reason=cleaned.reason, detail=cleaned.detail, **common, **counts)

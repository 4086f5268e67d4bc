"""Ingest: Software Heritage archives and local code into file records (schema.FILE_SCHEMA).

The inputs are read by sources (stackcurate/sources/: plan, read one shard, error reasons), any mix of:
- The Stack v2 file-level metadata Parquet (`metadata`) with the content store that holds
  `content/<blob_id>` gzip objects (`content`: a folder or `s3://bucket/prefix`), or the output of a graph stage
  run just before in a pipeline;
- SWH vault bundles (`bundles`): flat `swh:1:dir:<id>.tar.gz`, git-bare `swh_1_rev_<id>.git.tar`;
- local folders or git repositories (`repos`);
- sources from outside the package (`sources`: `module:Class` with its settings; docs/sources.md).

Each source yields raw rows (sources.base.RAW_SCHEMA): a file's bytes, or why there are none. Ingest checks
and decodes them the same way whatever their source.

Output columns: all of schema.FILE_SCHEMA, and `kind` with the columns of their own when sources read records of
other kinds (core/kinds.py). Kept rows have decoded `content`.

Removed (`<out>/_removed/ingest/`), by `reason`: `binary` (a NUL byte), `empty`, `too_large` (over the
compressed or decoded cap), `too_deep` (tree depth), `symlink`, `submodule`, `swh_placeholder`.

Errors (`<out>/_errors/ingest/`), by `reason`: ingest's own `hash_mismatch`, `undecodable`, `unreadable_input`
(an input that cannot be read at all), and those the sources declare (ERROR_REASONS): `missing_blob`,
`fetch_failed`, `corrupt_gzip`, `decompression_bomb`, `bad_metadata` (The Stack v2), `unsafe_member`,
`corrupt_bundle` (vault bundles, local repositories).

A content store that is down (refused, timed out, throttled, 5xx) is not bad input: each read is retried
(`fetch_retries`, `fetch_backoff`), and a shard whose reads still fail is not committed. The stage then ends
with one line counting those shards; rerunning the same command redoes only them.

What users read (`stackcurate <stage> --help`, with examples) is the stage class's docstring.
"""

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from stackcurate import sources
from stackcurate.core import io
from stackcurate.core.config import option
from stackcurate.core.contract import Shard, Stage, StageContext, StageOutput
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import ERROR_SCHEMA, FILE_KIND, FILE_SCHEMA, KIND, extension_of, with_reason
from stackcurate.sources.base import Limits, Source, name_matcher
from stackcurate.sources.fetch import FetchOptions
from stackcurate.stages.ingest.content import decode, git_blob_hex, is_placeholder, sha1_hex

# Bad input found by ingest itself, whatever the source (the sources declare their own: ERROR_REASONS).
OWN_ERROR_REASONS = frozenset({"hash_mismatch", "undecodable", "unreadable_input"})


def _error_reasons(found: Iterable[Source] | Iterable[type[Source]]) -> frozenset[str]:
    """The reasons that are bad input (`_errors/`): ingest's own and those its sources declare."""
    return OWN_ERROR_REASONS.union(*(source.error_reasons for source in found))


ERROR_REASONS = _error_reasons(sources.BUILT_IN)


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    """Where the code comes from and the extraction rules (The Stack v2 defaults, REFERENCE a5)."""

    metadata: tuple[str, ...] = option((), "The Stack v2 file-level metadata Parquet files or globs", path=True)
    content: str | None = option(
        None,
        "content store root: the folder or s3://bucket[/prefix] under which "
        "content/<blob_id> gzip objects lie (s3://softwareheritage for SWH)",
        path=True,
    )
    bundles: tuple[str, ...] = option((), "SWH vault bundles or globs (flat .tar.gz, git-bare .git.tar)", path=True)
    repos: tuple[str, ...] = option((), "local folders or git repositories", path=True)
    history: tuple[str, ...] = option(
        (), "git repositories (working or bare) whose single-file commits to read, as StarCoder's", path=True
    )
    history_rules: str | None = option(
        None, "how commits are kept: sizes, subjects, languages, sampling (default: the shipped "
        "filters/github/commits.yaml)", path=True,
    )  # fmt: skip
    history_seed: int = option(0, "seed of the commits' sampling and windows")
    history_opt_out: tuple[str, ...] = option(
        (), "opt-out lists (files or http(s) URLs), owner/repo or owner per line: the commits of those repositories "
        "(owner/name: a repository's last two folders) are removed",
    )  # fmt: skip
    gharchive: tuple[str, ...] = option(
        (), "GH Archive hourly event files or globs (YYYY-MM-DD-H.json.gz; local, s3:// or https://)", path=True
    )
    gharchive_partition_mb: float = option(64.0, "compressed MB of GH Archive input per partition of threads")
    gharchive_rules: str | None = option(
        None, "how issue threads are cleaned: bots, truncation, users and size (default: the shipped "
        "filters/github/issues.yaml)", path=True,
    )  # fmt: skip
    gharchive_opt_out: tuple[str, ...] = option(
        (), "opt-out lists (files or http(s) URLs), owner/repo or account per line: threads of those repositories "
        "or owners, or with a participant who opted out, are removed",
    )  # fmt: skip
    gharchive_code: tuple[str, ...] = option(
        (), "folders of the pull requests' repositories, laid out owner/name: git repositories (working or bare) "
        "or SWH vault git-bare bundles (owner/name/*.git.tar)", path=True,
    )  # fmt: skip
    gharchive_pr_rules: str | None = option(
        None, "how pull requests are kept and rendered: reviews, titles, files, sampling (default: the shipped "
        "filters/github/pull_requests.yaml)", path=True,
    )  # fmt: skip
    gharchive_seed: int = option(0, "seed of the pull requests' sampling and rendering")
    gharchive_graph: str | None = option(
        None, "an SWH graph export (folder or s3://) whose revisions give the pull requests no --gharchive-code "
        "repository holds; their blobs are read from --content", path=True,
    )  # fmt: skip
    gharchive_walk: str | None = option(
        None, "the graph export's diff walk of the pull requests to read (default: walked by this run)", path=True
    )
    gharchive_pr_counts: str | None = option(
        None, "the pull requests per repository of the input (default: counted by this run)", path=True
    )
    gharchive_events: str | None = option(
        None, "the GH Archive events split by thread to read (default: split by this run)", path=True
    )
    sources: tuple[str | dict[str, Any], ...] = option(
        (),
        "sources of your own, each module:Class (a pipeline YAML gives each its settings: see docs/sources.md)",
        resolve=sources.resolve,
    )
    s3_endpoint: str | None = option(None, "S3 endpoint URL override, e.g. http://127.0.0.1:9000")
    s3_anonymous: bool = option(True, "unsigned S3 requests (the public SWH bucket needs no credentials)")
    s3_region: str = option("us-east-1", "S3 region (the SWH bucket is in us-east-1)")
    max_compressed_bytes: int = option(10_000_000, "skip store objects larger than this, compressed (SC2: 10 MB)")
    max_bytes: int = option(1_000_000, "drop files larger than this, decoded (The Stack: 1 MB)")
    max_depth: int = option(64, "drop files deeper than this many path components (SC2: 64)")
    bomb_ratio: float = option(100.0, "inflated/compressed ratio past the cap that marks a decompression bomb")
    verify_hashes: bool = option(True, "check blob_id = sha1(bytes) and content_id = git blob hash")
    rows_per_shard: int = option(20_000, "metadata rows per shard (the unit of work and of resume)")
    batch_rows: int = option(512, "rows per in-memory batch")
    fetch_concurrency: int = option(256, "content-store reads in flight per worker", output=False)
    fetch_buffer_mb: float = option(
        256.0, "MB of fetched objects a worker holds at most, read ahead or waiting to be decoded", output=False
    )
    fetch_retries: int = option(
        5, "retries of a content-store read that failed transiently (refused, timeout, throttling, 5xx)", output=False
    )
    fetch_backoff: float = option(
        0.5,
        "seconds before the first retry, doubled for each next one, with jitter (5 retries: 8-16 s in all)",
        output=False,
    )
    tmp_dir: str | None = option(
        None, "scratch folder for unpacking git-bare bundles (default: system temp)", path=True, output=False
    )
    only_names: str | None = option(
        None, "regex: read only files whose name (the last part of the path) matches (e.g. license files)"
    )

    @property
    def s3(self) -> io.S3Options:
        return io.S3Options(endpoint=self.s3_endpoint, anonymous=self.s3_anonymous, region=self.s3_region)

    @property
    def fetch_options(self) -> FetchOptions:
        return FetchOptions(
            concurrency=self.fetch_concurrency,
            buffer_bytes=int(self.fetch_buffer_mb * 1e6),
            retries=self.fetch_retries,
            backoff=self.fetch_backoff,
        )

    @property
    def limits(self) -> Limits:
        return Limits(
            max_compressed_bytes=self.max_compressed_bytes,
            max_bytes=self.max_bytes,
            max_depth=self.max_depth,
            bomb_ratio=self.bomb_ratio,
        )


def plan(cfg: IngestConfig, metadata_from: str | None = None) -> list[Shard]:
    """The shards of every source (sources.build), numbered one source after another in their order. Sources
    that share an input setting (flat and git-bare bundles) are numbered together, in the order of its inputs.
    `metadata_from` is the folder of a graph stage run before this one in a pipeline: The Stack v2 source reads
    its files as metadata, unless the config names some."""
    if cfg.fetch_retries < 0 or cfg.fetch_backoff < 0:
        raise StackcurateError("--fetch-retries and --fetch-backoff may not be negative")
    if cfg.fetch_concurrency < 1 or cfg.fetch_buffer_mb <= 0:
        raise StackcurateError("--fetch-concurrency and --fetch-buffer-mb must be positive")
    planned: dict[str, list[Shard]] = {}  # by input setting, in the order the sources come
    built = sources.build(cfg)
    for source in built:
        planned.setdefault(source.option or source.name, []).extend(source.plan(metadata_from))
    if not any(planned.values()):
        listed = [s.name for s in built[len(built) - len(cfg.sources) :]]  # build() puts them last
        found = f"; {', '.join(listed)} found nothing to read: check its settings" if listed else ""
        raise StackcurateError(
            f"ingest needs an input: --metadata with --content, --bundles, --repos, --history, --gharchive, or "
            f"--sources{found}"
        )
    shards: list[Shard] = []
    for group in planned.values():
        first = 1 + max((s.source_index for s in shards), default=-1)
        # sorted is stable: the shards of one input (row ranges of a metadata file) keep their order
        for shard in sorted(group, key=lambda s: s.source_index):
            shards.append(replace(shard, index=len(shards), source_index=first + shard.source_index))
    return shards


def record_schema(built: list[Source]) -> pa.Schema:
    """The schema of ingest's records: FILE_SCHEMA; with `kind` and their own columns when sources read records
    of other kinds (files alone: FILE_SCHEMA itself, so a run over files writes what it always wrote)."""
    if all(set(source.kinds) <= {FILE_KIND} and not source.columns for source in built):
        return FILE_SCHEMA
    fields = [*FILE_SCHEMA, pa.field(KIND, pa.string())]
    for source in built:
        fields += [f for f in source.columns if f.name not in {g.name for g in fields}]
    return pa.schema(fields)


def _only(tables: Iterator[pa.Table], wanted: Callable[[str | None], bool]) -> Iterator[pa.Table]:
    for table in tables:
        mask = [wanted(p) for p in table.column("path").to_pylist()]
        yield table if all(mask) else table.filter(pa.array(mask, pa.bool_()))


class IngestStage(Stage):
    """read Software Heritage archives and local code into file records

    Read source files into file records, one row per file with its decoded text, from any mix of:
      --metadata + --content  The Stack v2 file metadata (Parquet) and the content store holding its
                              content/<blob_id> gzip objects (a folder, or s3://softwareheritage for SWH)
      --bundles               Software Heritage vault bundles (directory .tar.gz, git-bare .git.tar)
      --repos                 local folders or git repositories
      --history               git repositories' single-file commits, as StarCoder's (kind commit)
      --gharchive             GH Archive hourly event files: GitHub issue threads and pull requests, cleaned,
                              anonymised and rendered as StarCoder2's (kinds issue and pull_request)

    Removed, by reason: binary, empty, too_large, too_deep, symlink, submodule, swh_placeholder; for threads
    only_bots, too_short, one_author_too_long (filters/github/issues.yaml), pr_code_not_found.
    Errors (files that could not be read), by reason: missing_blob, fetch_failed, corrupt_gzip,
    decompression_bomb, hash_mismatch, undecodable, bad_metadata, unsafe_member, corrupt_bundle, unreadable_input,
    malformed_line, malformed_event, truncated_file.

    A content store that is down is retried (--fetch-retries, --fetch-backoff); shards whose reads still fail are
    left unfinished, and rerunning the same command redoes only those.

    Examples:
      stackcurate ingest --metadata 'meta/*.parquet' --content s3://softwareheritage --out work/run
      stackcurate ingest --bundles 'vault/*.tar*' --repos ~/src/myproject --out work/run
    """

    name = "ingest"
    mb_per_s = 30  # one core, end to end: read, gunzip, decode, hash
    config = IngestConfig
    reads_records = False
    fuse = "head"
    follows = "graph"
    kinds = None  # a source: its sources say which kinds they read

    @classmethod
    def plan(cls, cfg: IngestConfig, input_uri: str | None) -> list[Shard]:
        """The shards of every source in order (see `plan`); `input_uri` is a graph stage's metadata."""
        return plan(cfg, input_uri)

    @classmethod
    def before_shards(cls, cfg: IngestConfig, ctx: StageContext) -> IngestConfig:
        for source in sources.build(cfg):
            cfg = source.prepare(cfg, ctx)
        return cfg

    @classmethod
    def after_shards(cls, cfg: IngestConfig, ctx: StageContext) -> None:
        for source in sources.build(cfg):
            source.finish(cfg, ctx)

    def __init__(self, cfg: IngestConfig) -> None:
        super().__init__(cfg)
        built = sources.build(cfg)
        self.sources: dict[str, Source] = {source.name: source for source in built}
        self.error_reasons = _error_reasons(built)
        self.schema = record_schema(built)
        self.wanted = name_matcher(cfg.only_names)

    def output_schema(self, shard: Shard) -> pa.Schema:
        return self.schema

    def schema_after(self, schema: pa.Schema | None) -> pa.Schema:
        return self.schema

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        source = self.sources.get(shard.kind)
        if source is None:
            raise ValueError(f"no ingest source reads shards of kind {shard.kind!r}")
        tables = source.read(shard)
        return tables if self.wanted is None or source.reads_only_names else _only(tables, self.wanted)

    def __call__(self, table: pa.Table) -> StageOutput:
        kept, removed, errors = [], [], []
        for row in table.to_pylist():  # raw rows (sources.base.RAW_SCHEMA): bytes in `data`, or a `reason`
            data = row.pop("data")
            reason, detail = row.pop("reason"), row.pop("detail")
            if reason is None:
                reason, detail = self._check(row, data)
            if reason is None:
                kept.append(row)
            elif reason in self.error_reasons:
                errors.append({**row, "reason": reason, "detail": detail})
            else:
                removed.append({**row, "reason": reason, "detail": detail})
        return StageOutput(
            kept=pa.Table.from_pylist(kept, schema=self.schema),
            removed=pa.Table.from_pylist(removed, schema=with_reason(self.schema)),
            errors=pa.Table.from_pylist(errors, schema=ERROR_SCHEMA),
        )

    def _check(self, row: dict, data: bytes) -> tuple[str | None, str | None]:
        """Fill `row` from `data`; return (reason, detail) when the file must not be kept."""
        blob_id, content_id = sha1_hex(data), git_blob_hex(data)
        if self.cfg.verify_hashes:
            if row.get("blob_id") and row["blob_id"] != blob_id:
                return "hash_mismatch", f"sha1 of the bytes is {blob_id}, blob_id says {row['blob_id']}"
            if row.get("content_id") and row["content_id"] != content_id:
                return "hash_mismatch", f"git blob hash is {content_id}, content_id says {row['content_id']}"
        row.update(blob_id=blob_id, content_id=content_id, swhid=f"swh:1:cnt:{content_id}")
        if is_placeholder(data):
            return "swh_placeholder", "SWH placeholder body instead of the content"
        decoded = decode(data, row.get("src_encoding"))
        if decoded.text is None:
            return decoded.reason, decoded.detail
        encoded_len = len(decoded.text.encode("utf-8", errors="surrogatepass"))
        row.update(content=decoded.text, src_encoding=decoded.encoding, length_bytes=encoded_len)
        if encoded_len > self.cfg.max_bytes:
            return "too_large", f"{encoded_len} bytes decoded (cap {self.cfg.max_bytes})"
        if not row.get("extension") and (row.get(KIND) or FILE_KIND) == FILE_KIND:
            row["extension"] = extension_of(row["path"])
        return None, None

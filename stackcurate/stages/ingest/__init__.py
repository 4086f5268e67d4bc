"""Ingest: Software Heritage archives and local code into file records (schema.FILE_SCHEMA).

Inputs, any mix of:
- The Stack v2 file-level metadata Parquet (`metadata`) with the content store that holds
  `content/<blob_id>` gzip objects (`content`: a folder or `s3://bucket/prefix`);
- SWH vault bundles (`bundles`): flat `swh:1:dir:<id>.tar.gz`, git-bare `swh_1_rev_<id>.git.tar`;
- local folders or git repositories (`repos`).

Output columns: all of schema.FILE_SCHEMA. Kept rows have decoded `content`.

Removed (`<out>/ingest/removed/`), by `reason`: `binary` (a NUL byte), `empty`, `too_large` (over the
compressed or decoded cap), `too_deep` (tree depth), `symlink`, `submodule`, `swh_placeholder`.

Errors (`<out>/ingest/errors/`), by `reason`: `missing_blob`, `fetch_failed` (the store refused the read for
good, e.g. access denied), `corrupt_gzip`, `decompression_bomb`, `hash_mismatch`, `undecodable`, `bad_metadata`
(a metadata value that does not convert, e.g. length_bytes `'12 KB'`, or an empty path: that row only),
`unsafe_member` (tar member escaping the bundle, device, fifo), `corrupt_bundle`, `unreadable_input` (an input
file, or one row group of a metadata file, that cannot be read).

The metadata files are checked when the stage is planned: a missing `blob_id` or `path` column, or a column of
the wrong kind (a list where a count is expected), is a one-line error naming the file and the column.

A content store that is down (refused, timed out, throttled, 5xx) is not bad input: each read is retried
(`fetch_retries`, `fetch_backoff`), and a shard whose reads still fail is not committed. The stage then ends
with one line counting those shards; rerunning the same command redoes only them.

Example:
    stackcurate ingest --metadata 'meta/*.parquet' --content s3://softwareheritage --out work/run
    stackcurate ingest --bundles 'vault/*.tar*' --repos ~/src/myproject --out work/run
"""

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.config import option
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import ERROR_SCHEMA, FILE_SCHEMA, extension_of, with_reason
from stackcurate.core.stage import Shard, StageOutput, plan_parquet
from stackcurate.sources import fetch
from stackcurate.sources.fetch import FetchOptions
from stackcurate.stages.ingest import sources
from stackcurate.stages.ingest.content import decode, git_blob_hex, is_placeholder, sha1_hex

ERROR_REASONS = frozenset(
    {
        "missing_blob",
        "fetch_failed",
        "corrupt_gzip",
        "decompression_bomb",
        "hash_mismatch",
        "undecodable",
        "unsafe_member",
        "corrupt_bundle",
        "unreadable_input",
        "bad_metadata",
    }
)


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
    def limits(self) -> sources.Limits:
        return sources.Limits(
            max_compressed_bytes=self.max_compressed_bytes,
            max_bytes=self.max_bytes,
            max_depth=self.max_depth,
            bomb_ratio=self.bomb_ratio,
        )


def _bundle_kind(uri: str) -> str:
    name = uri.rsplit("/", 1)[-1]
    if name.endswith(".git.tar"):
        return "git_bare"
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        return "flat"
    raise StackcurateError(
        f"cannot tell the vault bundle kind of {uri}: expected swh:1:dir:<id>.tar.gz (flat) "
        "or swh_1_rev_<id>.git.tar (git-bare)"
    )


def _expand_all(patterns: tuple[str, ...], s3: io.S3Options, what: str) -> list[str]:
    files: list[str] = []
    for pattern in patterns:
        fs, path = io.filesystem(pattern, s3)
        found = io.expand(fs, path, suffix=".parquet" if what == "metadata" else "")
        if not found:
            raise StackcurateError(f"no {what} file matches {pattern}; check the path or glob")
        prefix = pattern[: pattern.index("://") + 3] if "://" in pattern else ""
        files += [prefix + f if prefix else f for f in found]
    return files


def plan(cfg: IngestConfig, metadata_from: str | None = None) -> list[Shard]:
    """Shards in a fixed order: metadata row ranges, then bundles, then repositories. `metadata_from` is the
    folder of a graph stage run before this one in a pipeline: its files are the metadata, unless the config
    names some."""
    if metadata_from is not None and not cfg.metadata:
        cfg = replace(cfg, metadata=(io.join(metadata_from, "*.parquet"),))
    if not (cfg.metadata or cfg.bundles or cfg.repos):
        raise StackcurateError("ingest needs an input: --metadata with --content, --bundles, or --repos")
    if cfg.metadata and not cfg.content:
        raise StackcurateError("--metadata needs --content, the store holding content/<blob_id> objects")
    if cfg.fetch_retries < 0 or cfg.fetch_backoff < 0:
        raise StackcurateError("--fetch-retries and --fetch-backoff may not be negative")
    if cfg.fetch_concurrency < 1 or cfg.fetch_buffer_mb <= 0:
        raise StackcurateError("--fetch-concurrency and --fetch-buffer-mb must be positive")
    if cfg.content:
        fetch.check_store(cfg.content)
    metadata = _expand_all(cfg.metadata, cfg.s3, "metadata")
    shards = plan_parquet(
        metadata, cfg.rows_per_shard, cfg.s3, kind="stack_v2", check=sources.check_metadata, size_column="length_bytes"
    )
    inputs = [(_bundle_kind(uri), uri) for uri in _expand_all(cfg.bundles, cfg.s3, "bundle")]
    for repo in cfg.repos:
        if not Path(repo).is_dir():
            raise StackcurateError(f"repository {repo} is not a folder")
        inputs.append(("repo", str(Path(repo).resolve())))
    next_source = 1 + max((s.source_index for s in shards), default=-1)
    for i, (kind, uri) in enumerate(inputs):
        weight = _folder_bytes(Path(uri)) if kind == "repo" else io.file_size(uri, cfg.s3)
        shards.append(Shard(index=len(shards), kind=kind, path=uri, source_index=next_source + i, weight=weight))
    return shards


def _folder_bytes(root: Path) -> int:
    """The bytes of the files under `root`, git's own folder left out (the shard's weight: see Shard)."""
    total = 0
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d != ".git"]
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _name_matcher(pattern: str | None) -> Callable[[str | None], bool] | None:
    if pattern is None:
        return None
    regex = re.compile(pattern, re.IGNORECASE)
    return lambda path: bool(regex.match(PurePosixPath(path or "/").name))


def _only(tables: Iterator[pa.Table], wanted: Callable[[str | None], bool]) -> Iterator[pa.Table]:
    for table in tables:
        yield table.filter(pa.array([wanted(p) for p in table.column("path").to_pylist()], pa.bool_()))


class IngestStage:
    """Reads each source into raw rows, then decodes and checks them (see the module docstring)."""

    name = "ingest"

    def __init__(self, cfg: IngestConfig) -> None:
        self.cfg = cfg

    def output_schema(self, shard: Shard) -> pa.Schema:
        return FILE_SCHEMA

    def schema_after(self, schema: pa.Schema | None) -> pa.Schema:
        return FILE_SCHEMA

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        cfg = self.cfg
        wanted = _name_matcher(cfg.only_names)
        if shard.kind == "stack_v2":
            assert cfg.content is not None
            # Filtered before the fetch: a scan of license files reads a few objects of the store, not all.
            return sources.read_stack_v2(
                shard, cfg.content, cfg.s3, cfg.limits, cfg.batch_rows, cfg.fetch_options, wanted
            )
        if shard.kind == "flat":
            tables = sources.read_flat_bundle(shard, cfg.limits, cfg.batch_rows, cfg.s3)
        elif shard.kind == "git_bare":
            tables = sources.read_git_bare_bundle(shard, cfg.limits, cfg.batch_rows, cfg.s3, cfg.tmp_dir)
        elif shard.kind == "repo":
            tables = sources.read_repo(shard, cfg.limits, cfg.batch_rows)
        else:
            raise ValueError(f"unknown shard kind {shard.kind!r}")
        return tables if wanted is None else _only(tables, wanted)

    def __call__(self, table: pa.Table) -> StageOutput:
        kept, removed, errors = [], [], []
        for row in table.to_pylist():  # raw rows (sources.RAW_SCHEMA): bytes in `data`, or a `reason`
            data = row.pop("data")
            reason, detail = row.pop("reason"), row.pop("detail")
            if reason is None:
                reason, detail = self._check(row, data)
            if reason is None:
                kept.append(row)
            elif reason in ERROR_REASONS:
                errors.append({**row, "reason": reason, "detail": detail})
            else:
                removed.append({**row, "reason": reason, "detail": detail})
        return StageOutput(
            kept=pa.Table.from_pylist(kept, schema=FILE_SCHEMA),
            removed=pa.Table.from_pylist(removed, schema=with_reason(FILE_SCHEMA)),
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
        if not row.get("extension"):
            row["extension"] = extension_of(row["path"])
        return None, None

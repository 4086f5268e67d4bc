"""The Stack v2: its file-level metadata Parquet (ingest's `metadata`, or the output of a graph stage run just
before) plus a content store holding `content/<blob_id>` gzip objects (`content`: a folder or S3), many reads
in flight at once (fetch.py: latency, not CPU, bounds a reader that waits for each object).

The metadata files are checked when the source is planned: a missing `blob_id` or `path` column, or a column
of the wrong kind (a list where a count is expected), is a one-line error naming the file and the column.
"""

import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.core.planning import plan_parquet
from stackcurate.core.schema import FILE_SCHEMA
from stackcurate.sources import fetch
from stackcurate.sources.base import RAW_SCHEMA, Limits, Source, doc_id, expand_inputs, name_matcher

_HEX40 = re.compile(r"[0-9a-f]{40}")


class StackV2(Source):
    """Metadata rows `[start, stop)` of one Parquet file per shard (`rows_per_shard`), each row with its bytes
    fetched from the content store (rows: `source` `stack_v2`, the metadata's columns, `origin` the file).
    Only the rows whose file name matches `only_names` are fetched, when it is set. The reads of the next
    batches are in flight while a batch is handed on (at least `2 * fetch_concurrency` objects ahead, within
    the fetch buffer).

    A store that is down (refused, timed out, throttled, 5xx) is retried (`fetch_retries`, `fetch_backoff`);
    a shard whose reads still fail raises io.StoreUnavailable, so that it is not committed and the next run
    redoes it. A row group of the metadata that cannot be read is one `unreadable_input` error (raised after
    the other rows as io.UnreadableRowGroups).

    Errors: `missing_blob` (no such object, or an invalid blob_id), `fetch_failed` (the store refused the read
    for good, e.g. access denied), `corrupt_gzip`, `decompression_bomb`, `bad_metadata` (a metadata value that
    does not convert, e.g. length_bytes `'12 KB'`, or an empty path: that row only).
    """

    name = "stack_v2"
    error_reasons = frozenset({"missing_blob", "fetch_failed", "corrupt_gzip", "decompression_bomb", "bad_metadata"})
    option = "metadata"
    reads_only_names = True

    def plan(self, upstream: str | None) -> list[Shard]:
        cfg = self.ingest
        patterns = cfg.metadata or ((io.join(upstream, "*.parquet"),) if upstream is not None else ())
        if not patterns:
            return []
        if not cfg.content:
            raise StackcurateError("--metadata needs --content, the store holding content/<blob_id> objects")
        fetch.check_store(cfg.content)
        files = expand_inputs(patterns, cfg.s3, "metadata", suffix=".parquet")
        return plan_parquet(
            files, cfg.rows_per_shard, cfg.s3, kind=self.name, check=check_metadata, size_column="length_bytes"
        )

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        cfg, limits, options = self.ingest, self.ingest.limits, self.ingest.fetch_options
        assert cfg.content is not None
        content = cfg.content
        # Filtered before the fetch: a scan of license files reads a few objects of the store, not all.
        wanted = name_matcher(cfg.only_names)
        meta_fs, meta_path = io.filesystem(shard.path, cfg.s3)
        store = fetch.ContentStore(content, cfg.s3, options)
        ahead: deque[_Batch] = deque()
        in_flight = 0
        unreadable: io.UnreadableRowGroups | None = None  # raised by the scan after its last rows: ours go first
        try:
            try:
                scan = io.scan_parquet_rows(meta_fs, meta_path, shard.start, shard.stop, batch_rows=cfg.batch_rows)
                for first, meta in scan:
                    meta, problems = _conform_metadata(meta)
                    rows = meta.to_pylist()
                    numbers = list(range(first, first + len(rows)))
                    if wanted is not None:
                        picked = [i for i, row in enumerate(rows) if wanted(row.get("path"))]
                        rows, problems = [rows[i] for i in picked], [problems[i] for i in picked]
                        numbers = [numbers[i] for i in picked]
                    plans = [_request(row, problem, limits) for row, problem in zip(rows, problems, strict=True)]
                    futures = store.fetch([p for p in plans if isinstance(p, fetch.Request)])
                    ahead.append(_Batch(rows, numbers, plans, futures))
                    in_flight += len(futures)
                    while ahead and in_flight - len(ahead[0].futures) >= 2 * options.concurrency:
                        in_flight -= len(ahead[0].futures)
                        yield _finish(ahead.popleft(), store, content, limits, shard)
            except io.UnreadableRowGroups as exc:
                unreadable = exc
            while ahead:
                yield _finish(ahead.popleft(), store, content, limits, shard)
        finally:
            store.close()
        if unreadable is not None:
            raise unreadable


_REQUIRED_COLUMNS = ("blob_id", "path")
# The columns of a file record that The Stack v2's metadata may give (the others ingest sets itself).
_METADATA_TYPES = {
    f.name: f.type for f in FILE_SCHEMA if f.name not in {"doc_id", "source", "origin", "swhid", "content"}
}


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _type_fits(actual: pa.DataType, target: pa.DataType) -> bool:
    """Whether a metadata column of type `actual` holds `target` values: the same kind of value (any integer
    width, any timestamp unit) or text to parse. A value that then fails to convert is a problem of its row
    only (`bad_metadata`); a column of another kind (a list where a count is expected) is a wrong file."""
    if isinstance(actual, pa.DictionaryType):
        actual = actual.value_type
    if pa.types.is_null(actual):  # an all-null column, as pandas writes one
        return True
    if _is_text(target):
        return _is_text(actual) or pa.types.is_binary(actual) or pa.types.is_large_binary(actual)
    if pa.types.is_integer(target):
        return _is_text(actual) or pa.types.is_integer(actual) or pa.types.is_floating(actual)
    if pa.types.is_boolean(target):
        return _is_text(actual) or pa.types.is_boolean(actual)
    if pa.types.is_timestamp(target):
        return _is_text(actual) or pa.types.is_timestamp(actual) or pa.types.is_date(actual)
    if isinstance(target, pa.ListType):
        return isinstance(actual, pa.ListType | pa.LargeListType) and _type_fits(actual.value_type, target.value_type)
    return actual == target


def check_metadata(uri: str, schema: pa.Schema) -> None:
    """Raise a one-line error naming the file and the column when a metadata file lacks a required column or
    has a column of the wrong kind (see :func:`_type_fits`); other columns are ignored."""
    for name in _REQUIRED_COLUMNS:
        if name not in schema.names:
            raise StackcurateError(
                f"metadata {uri} has no column '{name}'; The Stack v2 file-level metadata needs "
                f"{' and '.join(_REQUIRED_COLUMNS)} (the others are optional)"
            )
    for name, target in _METADATA_TYPES.items():
        if len(found := schema.get_all_field_indices(name)) > 1:
            raise StackcurateError(f"metadata {uri} has {len(found)} columns named '{name}'")
        if found and not _type_fits(actual := schema.field(name).type, target):
            expected = target if _is_text(target) else f"{target} (or text holding one)"
            raise StackcurateError(f"metadata {uri}: column '{name}' is {actual}, expected {expected}")


def _conform_metadata(meta: pa.Table) -> tuple[pa.Table, list[str | None]]:
    """The known metadata columns converted to the record types, and per row what could not be (None: all).

    A column converts as a whole when it can (the usual case, at Arrow speed); otherwise value by value, and a
    value that fails (`'12 KB'` as length_bytes, 3.5 stars) leaves its row a problem and the others intact.
    """
    problems: list[list[str]] = [[] for _ in range(meta.num_rows)]
    columns = {}
    for name, target in _METADATA_TYPES.items():
        if name not in meta.column_names:
            continue
        column = meta.column(name)
        # Nanosecond dates (The Stack v2's) are cut to microseconds: a truncation, not a bad value. Any other
        # lossy conversion (3.5 stars, seconds past the microsecond range) is one.
        from_ns = isinstance(column.type, pa.TimestampType) and column.type.unit == "ns"
        safe = not (from_ns and pa.types.is_timestamp(target))
        try:
            columns[name] = column.cast(target, safe=safe)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            parts = []
            for i in range(len(column)):
                value = column.slice(i, 1)
                try:
                    parts.append(value.cast(target, safe=safe).combine_chunks())
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    problems[i].append(f"{name}: {str(value.to_pylist()[0])[:100]!r} is not {target}")
                    parts.append(pa.nulls(1, target))
            columns[name] = pa.chunked_array(parts, target)
    for i, path in enumerate(columns["path"].to_pylist()):
        if not path:
            problems[i].append("path is empty")
    return pa.table(columns), ["; ".join(p) if p else None for p in problems]


def _request(row: dict[str, Any], problem: str | None, limits: Limits) -> fetch.Request | tuple[None, str, str]:
    """What to read for one metadata row, or why nothing is read (data, reason, detail)."""
    if problem is not None:
        return None, "bad_metadata", problem
    blob_id, length = row.get("blob_id"), row.get("length_bytes")
    if length is not None and length > limits.max_bytes:
        # The Stack v2 metadata already gives the decoded size: no need to download what the cap drops.
        return None, "too_large", f"length_bytes {length} (cap {limits.max_bytes}), not fetched"
    if not blob_id or not _HEX40.fullmatch(blob_id):
        return None, "missing_blob", f"invalid blob_id {blob_id!r}"
    # gzip adds a few bytes to what does not compress; a row with no length_bytes may be anything up to the cap
    reserve = length + 1024 if length is not None else limits.max_bytes
    return fetch.Request(f"content/{blob_id}", limits.max_compressed_bytes, reserve)


def _fetched(
    result: "bytes | int | BaseException", key: str, content: str, limits: Limits
) -> tuple[bytes | None, str | None, str | None]:
    if isinstance(result, fetch.GaveUp):
        return None, None, None  # the shard is not committed: _finish raises once the batch is done
    if isinstance(result, FileNotFoundError):
        return None, "missing_blob", f"no object {key} in {content}"
    if isinstance(result, BaseException):
        return None, "fetch_failed", fetch.short_error(result)
    if isinstance(result, int):
        return None, "too_large", f"{result} compressed bytes (cap {limits.max_compressed_bytes})"
    inflated = fetch.gunzip_bounded(result, limits.max_bytes, limits.bomb_ratio)
    return inflated.data, inflated.reason, inflated.detail


@dataclass
class _Batch:
    """Metadata rows whose objects are being read."""

    rows: list[dict[str, Any]]
    numbers: list[int]
    plans: list["fetch.Request | tuple[None, str, str]"]
    futures: "list[Future[bytes | int]]"


def _finish(batch: _Batch, store: fetch.ContentStore, content: str, limits: Limits, shard: Shard) -> pa.Table:
    """The raw table of a batch whose reads were started: each row with its bytes, or why it has none."""
    futures = iter(batch.futures)
    for number, row, plan in zip(batch.numbers, batch.rows, batch.plans, strict=True):
        if isinstance(plan, fetch.Request):
            future = next(futures)
            try:
                result: bytes | int | BaseException = future.result()
            except BaseException as exc:  # noqa: BLE001 - the read's own failure, sorted by _fetched
                result = exc
            data, reason, detail = _fetched(result, plan.key, content, limits)
            store.release(plan)
        else:
            data, reason, detail = plan
        # doc_id is the row's number in the file, so it holds when a row group before it is unreadable.
        row.update(
            doc_id=doc_id(shard.source_index, number),
            source="stack_v2",
            origin=shard.path,
            data=data,
            reason=reason,
            detail=detail,
        )
        if row.get("content_id"):
            row["swhid"] = f"swh:1:cnt:{row['content_id']}"
    if store.failure is not None:
        raise io.StoreUnavailable(store.failure)
    return pa.Table.from_pylist(batch.rows, schema=RAW_SCHEMA)

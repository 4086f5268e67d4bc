"""Shards over Parquet input: an earlier stage's kept rows, or metadata files of a source."""

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stackcurate.core import io
from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError


def plan_records(input_uri: str | None) -> list[Shard]:
    """One shard per Parquet file of the input folder (an earlier stage's kept rows)."""
    assert input_uri is not None
    fs, path = io.filesystem(input_uri)
    files = io.expand(fs, io.join(path, "*.parquet")) if "*" not in path else io.expand(fs, path)
    if not files:
        raise StackcurateError(f"no Parquet files in {input_uri}; run the earlier stage first or pass --input")
    return plan_parquet(files, rows_per_shard=2**62)


def records_schema(shard: Shard, s3: io.S3Options | None = None) -> pa.Schema:
    """Schema of a record-Parquet input shard (the output of an earlier stage)."""
    fs, path = io.filesystem(shard.path, s3)
    return pq.read_schema(path, filesystem=fs)


def read_records(shard: Shard, batch_rows: int, s3: io.S3Options | None = None) -> Iterator[pa.Table]:
    fs, path = io.filesystem(shard.path, s3)
    yield from io.scan_parquet_slice(fs, path, shard.start, shard.stop, batch_rows=batch_rows)


def plan_parquet(
    files: list[str],
    rows_per_shard: int,
    s3: io.S3Options | None = None,
    kind: str = "parquet",
    check: Callable[[str, pa.Schema], None] | None = None,
    size_column: str | None = None,
) -> list[Shard]:
    """Split Parquet files into shards of at most `rows_per_shard` rows, in file order. `check(uri, schema)`
    vets each readable file's columns before any work (raising a one-line StackcurateError); a file that
    cannot be read becomes an `unreadable` shard, unless the failure is transient (the store is down), which
    stops the plan in one line. Each shard's weight is the sum of `size_column` over its rows when the file
    has that column (metadata that gives each file's size), else its row groups' uncompressed bytes."""
    shards: list[Shard] = []
    for source_index, uri in enumerate(files):
        fs, path = io.filesystem(uri, s3)
        try:
            footer = pq.read_metadata(path, filesystem=fs)
            n, schema = footer.num_rows, footer.schema.to_arrow_schema()
        except (OSError, pa.ArrowException) as exc:
            if (cause := io.transient_cause(exc)) is not None:
                raise StackcurateError(
                    f"cannot read {uri}: {cause} ({io.short_error(exc)}); rerun when the store is back"
                ) from None
            shards.append(
                Shard(
                    index=len(shards),
                    kind="unreadable",
                    path=uri,
                    source_index=source_index,
                    detail=f"{type(exc).__name__}: {exc}",
                )
            )
            continue
        if check is not None:
            check(uri, schema)
        # An empty file still gets one (empty) shard: its stage then writes an empty output with the schema,
        # which the next stage reads as an empty input.
        sizes = _row_sizes(fs, path, footer, size_column if size_column in schema.names else None)
        for start in range(0, max(n, 1), rows_per_shard):
            stop = min(n, start + rows_per_shard)
            shards.append(
                Shard(
                    index=len(shards),
                    kind=kind,
                    path=uri,
                    source_index=source_index,
                    start=start,
                    stop=stop,
                    weight=int(sizes[start:stop].sum()),
                )
            )
    return shards


def _row_sizes(fs: Any, path: str, footer: pq.FileMetaData, column: str | None) -> np.ndarray:
    """About how many bytes each row of a Parquet file holds: its `column`, or its row group's average."""
    if column is not None:
        try:
            values = pq.read_table(path, filesystem=fs, columns=[column]).column(column)
            return pc.fill_null(values.cast(pa.int64()), 0).to_numpy()  # pyright: ignore[reportAttributeAccessIssue]
        except (OSError, pa.ArrowException):
            pass  # sizes that are not numbers, or an unreadable row group: the reading reports them
    groups = [footer.row_group(i) for i in range(footer.num_row_groups)]
    per_row = [np.full(g.num_rows, g.total_byte_size / max(g.num_rows, 1)) for g in groups]
    return np.concatenate(per_row) if per_row else np.zeros(0)

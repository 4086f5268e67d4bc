"""A hash shuffle through files: every task writes one file, every partition is read back from all of them.

A writer buffers its rows (a task's output: bounded by the size of its input, not of the corpus), then on
commit sorts them by partition and writes one Parquet file whose row groups each belong to a single
partition; the file's metadata lists the partition of every row group. A reader of partition P opens each
writer's file and reads only P's row groups.

So a task holds one open file whatever the number of partitions (memory per task stays flat when the corpus,
and with it the number of partitions, doubles), and a shuffle of T tasks into P partitions leaves T files,
not T x P. Why hand-written: Ray Data's shuffles (`groupby`, `repartition`) hold blocks in the object store
and give no per-partition files to resume from; a task here commits its file atomically, so a rerun redoes
only the tasks without one.
"""

import json

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from stackcurate.core import io

_PARTS_KEY = b"stackcurate.row_group_partitions"
MAX_GROUP_ROWS = 65_536


class PartitionedWriter:
    """Collects rows with their partition; `commit` writes `root/<writer>.parquet` (see the module)."""

    def __init__(self, fs: pafs.FileSystem, root: str, writer: int, schema: pa.Schema, partitions: int) -> None:
        self.fs, self.schema, self.partitions = fs, schema, partitions
        self.path = io.join(root, f"{writer:05d}.parquet")
        self.tables: list[pa.Table] = []
        self.parts: list[np.ndarray] = []
        fs.create_dir(root, recursive=True)

    def write(self, table: pa.Table, parts: np.ndarray) -> None:
        if table.num_rows:
            self.tables.append(table)
            self.parts.append(np.asarray(parts, dtype=np.int64))

    def commit(self) -> None:
        table = pa.concat_tables(self.tables) if self.tables else self.schema.empty_table()
        parts = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.int64)
        self.tables, self.parts = [], []
        order = np.argsort(parts, kind="stable")  # stable: rows keep their order inside a partition
        table, parts = table.take(pa.array(order)), parts[order]
        bounds = np.searchsorted(parts, np.arange(self.partitions + 1))
        groups: list[tuple[int, int, int]] = []  # (partition, first row, rows)
        for p in range(self.partitions):
            for start in range(int(bounds[p]), int(bounds[p + 1]), MAX_GROUP_ROWS):
                groups.append((p, start, min(MAX_GROUP_ROWS, int(bounds[p + 1]) - start)))
        schema = self.schema.with_metadata({_PARTS_KEY: json.dumps([p for p, _, _ in groups]).encode()})
        sink = io.AtomicParquetWriter(self.fs, self.path, schema)
        try:
            for _, start, rows in groups:
                sink.write(table.slice(start, rows))
        except BaseException:
            sink.abort()
            raise
        sink.commit()

    def abort(self) -> None:
        self.tables, self.parts = [], []


def write_partitioned(
    fs: pafs.FileSystem, root: str, writer: int, table: pa.Table, parts: np.ndarray, partitions: int
) -> None:
    """Write all rows of `table` at once (see :class:`PartitionedWriter`)."""
    sink = PartitionedWriter(fs, root, writer, table.schema, partitions)
    sink.write(table, parts)
    sink.commit()


def read_partition(fs: pafs.FileSystem, root: str, part: int, columns: list[str] | None = None) -> pa.Table | None:
    """All rows written to partition `part` under `root`, in writer order (None if there are none)."""
    tables = []
    for path in io.expand(fs, root, suffix=".parquet"):  # sorted: writer order
        with fs.open_input_file(path) as handle:
            source = pq.ParquetFile(handle)
            listed = json.loads((source.schema_arrow.metadata or {}).get(_PARTS_KEY, b"[]"))
            groups = [i for i, p in enumerate(listed) if p == part]
            if groups:
                tables.append(source.read_row_groups(groups, columns=columns).replace_schema_metadata(None))
    return pa.concat_tables(tables) if tables else None


def mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64 of every element (uint64 in, uint64 out): spreads ids evenly over partitions and orders."""
    with np.errstate(over="ignore"):
        x = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))

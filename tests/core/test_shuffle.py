"""The file shuffle: each partition reads back exactly its rows, in writer order, from one file per writer."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.core import io, shuffle


def test_partitions_read_back_their_rows_in_writer_order(tmp_path, monkeypatch):
    monkeypatch.setattr(shuffle, "MAX_GROUP_ROWS", 7)  # a partition spans several row groups
    fs, root = io.filesystem(str(tmp_path / "shuffle"))
    rng = np.random.default_rng(0)
    partitions = 5
    expected: dict[int, dict[int, list[int]]] = {w: {p: [] for p in range(partitions)} for w in range(3)}
    for writer in (1, 0, 2):  # committed out of order
        sink = shuffle.PartitionedWriter(fs, root, writer, pa.schema([("v", pa.int64())]), partitions)
        for batch in range(3):
            values = np.arange(40) + 1000 * writer + 100 * batch
            parts = rng.integers(0, partitions - 1, size=40)  # the last partition stays empty
            sink.write(pa.table({"v": values}), parts)
            for v, p in zip(values.tolist(), parts.tolist(), strict=True):
                expected[writer][p].append(v)
        sink.commit()
    for writer in range(3):  # one file per writer, every row once
        assert pq.read_metadata(f"{root}/{writer:05d}.parquet").num_rows == 120
    for p in range(partitions - 1):
        got = shuffle.read_partition(fs, root, p)
        assert got is not None
        assert got.column("v").to_pylist() == expected[0][p] + expected[1][p] + expected[2][p]
    assert shuffle.read_partition(fs, root, partitions - 1) is None


def test_a_writer_with_no_rows_commits_an_empty_file(tmp_path):
    fs, root = io.filesystem(str(tmp_path))
    shuffle.PartitionedWriter(fs, root, 0, pa.schema([("v", pa.int64())]), 3).commit()
    assert pq.read_metadata(f"{root}/00000.parquet").num_rows == 0
    assert all(shuffle.read_partition(fs, root, p) is None for p in range(3))


def _splitmix64(x: int) -> int:
    """Vigna's splitmix64 output for state `x` (the reference in C, with Python's unbounded ints masked)."""
    mask = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_mix64_is_splitmix64():
    values = np.array([0, 1, 2**40 + 7, 2**64 - 1], dtype=np.uint64)
    assert int(shuffle.mix64(values)[0]) == 0xE220A8397B1DCDAF  # splitmix64's first output from seed 0
    assert [int(v) for v in shuffle.mix64(values)] == [_splitmix64(int(v)) for v in values]


def test_write_partitioned_writes_every_row_once(tmp_path):
    fs, root = io.filesystem(str(tmp_path))
    table = pa.table({"v": list(range(6))})
    shuffle.write_partitioned(fs, root, 3, table, np.array([1, 0, 1, 0, 1, 1]), 2)
    got = shuffle.read_partition(fs, root, 0)
    assert got is not None
    assert got.column("v").to_pylist() == [1, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["00003.parquet"]

"""Shards over Parquet input: row ranges, weights, unreadable files, reading a shard back."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stackcurate.core.errors import StackcurateError
from stackcurate.core.planning import plan_parquet, plan_records, read_records, records_schema


def _parquet(path, rows: int, *, row_group_size: int | None = None, sizes: list[int] | None = None) -> str:
    columns = {"v": pa.array(range(rows), pa.int64())}
    if sizes is not None:
        columns["length_bytes"] = pa.array(sizes, pa.int64())
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return str(path)


def test_files_split_into_row_ranges_numbered_across_files(tmp_path):
    a, b = _parquet(tmp_path / "a.parquet", 10), _parquet(tmp_path / "b.parquet", 3)
    shards = plan_parquet([a, b], rows_per_shard=4, kind="meta")
    assert [(s.index, s.path, s.source_index, s.start, s.stop, s.kind) for s in shards] == [
        (0, a, 0, 0, 4, "meta"),
        (1, a, 0, 4, 8, "meta"),
        (2, a, 0, 8, 10, "meta"),
        (3, b, 1, 0, 3, "meta"),
    ]


def test_an_empty_file_gets_one_empty_shard(tmp_path):
    (shard,) = plan_parquet([_parquet(tmp_path / "a.parquet", 0)], rows_per_shard=4)
    assert (shard.start, shard.stop, shard.weight) == (0, 0, 0)


def test_weights_sum_the_size_column_over_each_shard(tmp_path):
    path = _parquet(tmp_path / "a.parquet", 5, sizes=[1, 2, 3, 4, 100])
    shards = plan_parquet([path], rows_per_shard=2, size_column="length_bytes")
    assert [s.weight for s in shards] == [3, 7, 100]


def test_weights_without_a_size_column_spread_row_group_bytes_over_rows(tmp_path):
    path = _parquet(tmp_path / "a.parquet", 8, row_group_size=4)
    meta = pq.read_metadata(path)
    per_row = [meta.row_group(g).total_byte_size / 4 for g in (0, 1)]
    shards = plan_parquet([path], rows_per_shard=2, size_column="length_bytes")
    assert [s.weight for s in shards] == [int(2 * per_row[0])] * 2 + [int(2 * per_row[1])] * 2
    assert all(s.weight > 0 for s in shards)


def test_an_unreadable_file_becomes_an_unreadable_shard(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not a parquet file")
    good = _parquet(tmp_path / "good.parquet", 2)
    shards = plan_parquet([str(bad), good], rows_per_shard=10)
    assert [(s.index, s.kind, s.source_index) for s in shards] == [(0, "unreadable", 0), (1, "parquet", 1)]
    assert shards[0].path == str(bad)
    assert shards[0].detail.startswith("ArrowInvalid: ")


def test_a_missing_file_becomes_an_unreadable_shard(tmp_path):
    (shard,) = plan_parquet([str(tmp_path / "gone.parquet")], rows_per_shard=10)
    assert shard.kind == "unreadable"
    assert "gone.parquet" in shard.detail


def test_check_vets_each_readable_file_before_any_work(tmp_path):
    seen = []
    a = _parquet(tmp_path / "a.parquet", 1)
    plan_parquet([a], rows_per_shard=10, check=lambda uri, schema: seen.append((uri, schema.names)))
    assert seen == [(a, ["v"])]


def test_check_failing_stops_the_plan(tmp_path):
    def refuse(uri, schema):
        raise StackcurateError(f"{uri} lacks blob_id")

    with pytest.raises(StackcurateError, match="lacks blob_id"):
        plan_parquet([_parquet(tmp_path / "a.parquet", 1)], rows_per_shard=10, check=refuse)


def test_plan_records_makes_one_shard_per_file_of_the_folder(tmp_path):
    for name, rows in (("00001.parquet", 3), ("00000.parquet", 70)):
        _parquet(tmp_path / name, rows)
    (tmp_path / "sub").mkdir()
    _parquet(tmp_path / "sub" / "00000.parquet", 1)  # not the folder's records
    shards = plan_records(str(tmp_path))
    assert [(s.path.rsplit("/", 1)[1], s.start, s.stop) for s in shards] == [
        ("00000.parquet", 0, 70),
        ("00001.parquet", 0, 3),
    ]


def test_plan_records_of_an_empty_folder_is_a_one_line_error(tmp_path):
    with pytest.raises(StackcurateError, match="no Parquet files in .*; run the earlier stage first"):
        plan_records(str(tmp_path))


def test_read_records_yields_the_shard_s_rows_in_batches(tmp_path):
    path = _parquet(tmp_path / "a.parquet", 10, row_group_size=4)
    shard = plan_parquet([path], rows_per_shard=3)[1]  # rows 3-5, across two row groups
    tables = list(read_records(shard, batch_rows=2))
    assert [t.column("v").to_pylist() for t in tables] == [[3], [4, 5]]
    assert records_schema(shard).names == ["v"]

"""Planning Parquet input into shards (core/stage.plan_parquet): the row ranges depend on the input alone."""

import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.core.stage import plan_parquet


def _files(folder, rows: list[int]) -> list[str]:
    folder.mkdir(exist_ok=True)
    paths = []
    for i, n in enumerate(rows):
        path = folder / f"{i:05d}.parquet"
        pq.write_table(pa.table({"doc_id": list(range(n)), "length_bytes": [10] * n}), path)
        paths.append(str(path))
    return paths


def _ranges(shards) -> list[tuple[int, int, int]]:
    return [(s.source_index, s.start, s.stop) for s in shards]


def test_a_small_input_is_cut_into_about_min_shards_of_at_least_min_shard_rows(tmp_path):
    files = _files(tmp_path, [30_000, 19_458])  # a laptop sample: 3 shards of 20,000 rows at most otherwise
    shards = plan_parquet(files, 20_000, min_shards=16, size_column="length_bytes")
    step = -(-49_458 // 16)  # 3,092 rows
    assert all(s.stop - s.start <= step for s in shards) and len(shards) == 10 + 7
    assert sum(s.stop - s.start for s in shards) == 49_458 and sum(s.weight for s in shards) == 494_580
    assert _ranges(plan_parquet(files, 20_000)) == [(0, 0, 20_000), (0, 20_000, 30_000), (1, 0, 19_458)]


def test_min_shard_rows_and_rows_per_shard_bound_the_cut(tmp_path):
    small = _files(tmp_path / "s", [2_500])
    assert _ranges(plan_parquet(small, 20_000, min_shards=16)) == [(0, 0, 1_000), (0, 1_000, 2_000), (0, 2_000, 2_500)]
    tiny = _files(tmp_path / "t", [19])
    assert _ranges(plan_parquet(tiny, 20_000, min_shards=16)) == [(0, 0, 19)]  # one shard, as before
    big = _files(tmp_path / "b", [400_000])
    assert len(plan_parquet(big, 20_000, min_shards=16)) == 20  # large inputs keep rows_per_shard

"""Per-shard counters: additive stats rows, by language and reason; the peak memory combines by its largest."""

import sys

import pyarrow as pa
import pytest

from stackcurate.core.counters import Counters, peak_rss, reset_peak_rss
from stackcurate.core.schema import STATS_SCHEMA


def _rows(language, reason=None, length=None) -> pa.Table:
    columns = {"language": pa.array(language, pa.string())}
    if reason is not None:
        columns["reason"] = pa.array(reason, pa.string())
    if length is not None:
        columns["length_bytes"] = pa.array(length, pa.int64())
    return pa.table(columns)


def test_add_sums_values_of_the_same_key():
    counters = Counters()
    counters.add("docs_in", "python", None, 2)
    counters.add("docs_in", "python", None, 3)
    counters.add("docs_in", "go", None, 1)
    assert counters.values == {("docs_in", "python", None, None): 5.0, ("docs_in", "go", None, None): 1.0}


def test_the_peak_memory_combines_by_its_largest_value():
    counters = Counters()
    for rss in (300, 700, 500):
        counters.add("rss_peak", None, None, rss)
    assert counters.values == {("rss_peak", None, None, None): 700}


def test_count_groups_docs_and_bytes_by_language_and_reason():
    counters = Counters()
    counters.count(_rows(["python", "python", "go"], ["long", "long", None], [10, 5, None]), "removed")
    assert counters.values == {
        ("docs_removed", "python", "long", None): 2,
        ("bytes_removed", "python", "long", None): 15,
        ("docs_removed", "go", None, None): 1,
        ("bytes_removed", "go", None, None): 0,
    }


def test_input_rows_are_counted_by_language_only():
    counters = Counters()
    counters.count(_rows(["python", "python"], ["x", "y"], [1, 2]), "in")
    assert counters.values == {("docs_in", "python", None, None): 2, ("bytes_in", "python", None, None): 3}


def test_counting_twice_adds_up():
    counters = Counters()
    counters.count(_rows(["c"], length=[4]), "out")
    counters.count(_rows(["c", "c"], length=[1, 2]), "out")
    assert counters.values == {("docs_out", "c", None, None): 3, ("bytes_out", "c", None, None): 7}


def test_a_table_without_language_or_size_counts_rows_with_zero_bytes():
    counters = Counters()
    counters.count(pa.table({"doc_id": [1, 2]}), "out")
    assert counters.values == {("docs_out", None, None, None): 2, ("bytes_out", None, None, None): 0}


def test_nothing_is_counted_for_no_rows():
    counters = Counters()
    counters.count(None, "out")
    counters.count(_rows([]), "out")
    assert counters.values == {}


def test_table_writes_stats_rows_with_their_unit():
    counters = Counters()
    counters.add("docs_out", "python", None, 2)
    counters.add("bytes_out", "python", None, 20)
    counters.add("seconds", None, None, 0.5)
    counters.add("rss_peak", None, None, 1024)
    table = counters.table("r1", "filter", 3)
    assert table.schema == STATS_SCHEMA
    rows = {r["metric"]: (r["run_id"], r["stage"], r["shard"], r["value"], r["unit"]) for r in table.to_pylist()}
    assert rows == {
        "docs_out": ("r1", "filter", 3, 2.0, "docs"),
        "bytes_out": ("r1", "filter", 3, 20.0, "bytes"),
        "seconds": ("r1", "filter", 3, 0.5, "seconds"),
        "rss_peak": ("r1", "filter", 3, 1024.0, "bytes"),
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak_rss reads /proc/self/status")
def test_peak_rss_is_at_least_the_memory_just_touched():
    reset_peak_rss()
    block = bytearray(64 << 20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    assert peak_rss() >= 64 << 20


def test_records_of_several_kinds_are_counted_by_kind():
    counters = Counters()
    table = _rows(["python", None, None], None, [10, 3, 4]).append_column("kind", pa.array(["file", "issue", "issue"]))
    counters.count(table, "out")
    assert counters.values == {
        ("docs_out", "python", None, "file"): 1, ("bytes_out", "python", None, "file"): 10,
        ("docs_out", None, None, "issue"): 2, ("bytes_out", None, None, "issue"): 7,
    }  # fmt: skip
    assert sorted(counters.table("r", "s", 0).column("kind").to_pylist()) == ["file", "file", "issue", "issue"]

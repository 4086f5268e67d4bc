"""Shared schemas and the helpers that shape tables to them."""

import pyarrow as pa
import pytest

from stackcurate.core.schema import (
    conform,
    extension_of,
    put_column,
    with_reason,
)


def test_with_reason_appends_reason_and_detail_once():
    schema = pa.schema([("doc_id", pa.int64())])
    once = with_reason(schema)
    assert once.names == ["doc_id", "reason", "detail"]
    assert not once.field("reason").nullable
    assert with_reason(once) == once


def test_conform_orders_casts_and_fills_missing_columns_with_nulls():
    schema = pa.schema([("a", pa.int64()), ("b", pa.large_string()), ("c", pa.bool_())])
    table = pa.table({"b": ["x", "y"], "extra": [1, 2], "a": pa.array([1, 2], pa.int32())})
    out = conform(table, schema)
    assert out.schema == schema
    assert out.to_pylist() == [{"a": 1, "b": "x", "c": None}, {"a": 2, "b": "y", "c": None}]


def test_put_column_replaces_in_place_or_appends():
    table = pa.table({"a": [1], "b": [2]})
    assert put_column(table, "a", pa.array([9])).to_pylist() == [{"a": 9, "b": 2}]
    appended = put_column(table, pa.field("c", pa.string()), pa.array(["z"]))
    assert appended.column_names == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("path", "extension"),
    [("/src/a.py", "py"), ("/a.tar.gz", "gz"), ("/Makefile", ""), ("/.bashrc", ""), ("/d.x/file", ""), ("/.a.b", "b")],
)
def test_extension_of_is_what_follows_the_last_dot_of_the_name(path, extension):
    assert extension_of(path) == extension

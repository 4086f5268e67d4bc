"""The stage contract: shard names, a stage's help from its docstring, split_by_reason."""

import pyarrow as pa
import pytest

from stackcurate.core.contract import Shard, Stage, split_by_reason
from stackcurate.core.schema import with_reason


@pytest.mark.parametrize(("index", "name"), [(0, "00000"), (7, "00007"), (12345, "12345"), (123456, "123456")])
def test_shard_name_is_its_index_zero_padded(index, name):
    assert Shard(index=index, kind="parquet", path="/x", source_index=0).name == name


class _Documented(Stage):
    """Upper-case every file.

    Reads `content` and writes it upper-cased.

    Drops nothing."""

    name = "documented"


def test_summary_is_the_first_docstring_line():
    assert _Documented.summary() == "Upper-case every file."


def test_description_is_the_docstring_after_its_first_paragraph():
    assert _Documented.description() == "Reads `content` and writes it upper-cased.\n\nDrops nothing.\n"


def test_a_stage_without_docstring_has_empty_help():
    class Bare(Stage):
        name = "bare"

    assert (Bare.summary(), Bare.description()) == ("", "")


def test_a_stage_applies_to_files_by_default():
    assert Stage.kinds == ("file",)


def test_before_shards_returns_the_config_unchanged_by_default():
    cfg = object()
    assert Stage.before_shards(cfg, None) is cfg  # type: ignore[arg-type]


def _table() -> pa.Table:
    return pa.table({"doc_id": pa.array([1, 2, 3, 4], pa.int64()), "content": ["a", "bb", "ccc", "dddd"]})


def test_split_by_reason_keeps_rows_without_reason_and_removes_the_others():
    out = split_by_reason(_table(), [None, "too_short", None, "too_long"], [None, "2 bytes", None, None])
    assert out.kept.column("doc_id").to_pylist() == [1, 3]
    assert out.removed is not None
    assert out.removed.to_pylist() == [
        {"doc_id": 2, "content": "bb", "reason": "too_short", "detail": "2 bytes"},
        {"doc_id": 4, "content": "dddd", "reason": "too_long", "detail": None},
    ]


def test_split_by_reason_removed_rows_have_the_removed_schema():
    out = split_by_reason(_table(), ["x", None, None, None])
    assert out.removed is not None
    assert out.removed.schema == with_reason(out.kept.schema)
    assert out.removed.column("detail").to_pylist() == [None]


def test_split_by_reason_with_nothing_removed_keeps_the_table_itself():
    table = _table()
    out = split_by_reason(table, [None] * 4)
    assert out.kept is table
    assert out.removed is not None
    assert out.removed.num_rows == 0
    assert out.removed.schema == with_reason(table.schema)


def test_split_by_reason_can_remove_every_row():
    out = split_by_reason(_table(), ["a", "b", "c", "d"])
    assert out.kept.num_rows == 0
    assert out.removed is not None
    assert out.removed.column("reason").to_pylist() == ["a", "b", "c", "d"]


def test_split_by_reason_rejects_details_of_another_length():
    with pytest.raises(ValueError):
        split_by_reason(_table(), [None, "x", None, None], ["only one"])

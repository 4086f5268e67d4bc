"""Kinds of record: the kind of each row, and the rows a stage of some kinds gets or passes through."""

import pyarrow as pa
import pytest

from stackcurate.core.kinds import kinds_of, split_kinds


def _mixed() -> pa.Table:
    return pa.table({"doc_id": [0, 1, 2, 3], "kind": ["file", "issue", None, "commit"]})


def _files() -> pa.Table:
    return pa.table({"doc_id": [0, 1]})


def test_kinds_of_reads_the_kind_column_with_null_as_file():
    assert kinds_of(_mixed()).to_pylist() == ["file", "issue", "file", "commit"]


def test_kinds_of_a_table_without_kind_column_is_all_files():
    assert kinds_of(_files()).to_pylist() == ["file", "file"]


def test_split_kinds_gives_the_rows_of_the_kinds_and_passes_the_others():
    mine, passed = split_kinds(_mixed(), ("file", "commit"))
    assert passed is not None
    assert mine.column("doc_id").to_pylist() == [0, 2, 3]
    assert passed.column("doc_id").to_pylist() == [1]


@pytest.mark.parametrize("kinds", [None, ("file",)])
def test_a_table_without_kind_column_is_given_as_it_is_to_a_stage_of_files(kinds):
    table = _files()
    mine, passed = split_kinds(table, kinds)
    assert mine is table
    assert passed is None


def test_a_table_of_files_only_passes_through_a_stage_of_other_kinds():
    table = _files()
    mine, passed = split_kinds(table, ("issue",))
    assert mine.num_rows == 0
    assert passed is table


def test_every_row_of_the_kinds_gives_the_table_itself():
    table = pa.table({"doc_id": [0, 1], "kind": ["issue", "commit"]})
    mine, passed = split_kinds(table, ("issue", "commit"))
    assert mine is table
    assert passed is None


def test_a_stage_of_every_kind_gets_every_row():
    table = _mixed()
    assert split_kinds(table, None) == (table, None)


def test_no_row_of_the_kinds_passes_every_row():
    mine, passed = split_kinds(_mixed(), ("notebook",))
    assert passed is not None
    assert (mine.num_rows, passed.column("doc_id").to_pylist()) == (0, [0, 1, 2, 3])


def test_an_empty_table_is_given_as_it_is():
    table = _mixed().slice(0, 0)
    mine, passed = split_kinds(table, ("file",))
    assert mine is table
    assert passed is None

"""Record stages: the schema of what they keep, and the one-line check of the columns they need."""

import pyarrow as pa
import pytest

from stackcurate.core.errors import StackcurateError
from stackcurate.core.records import RecordStage, check_columns


class Scorer(RecordStage):
    name = "scorer"
    needs = ("content", "language")

    def adds(self) -> list[pa.Field]:
        return [pa.field("language", pa.large_string()), pa.field("score", pa.float32())]


class Reader(RecordStage):
    name = "reader"
    needs = ("content",)
    needs_one_of = ("notebook_script", "notebook_cells")


def test_schema_after_replaces_columns_it_sets_in_place_and_appends_new_ones():
    schema = pa.schema([("content", pa.string()), ("language", pa.string()), ("path", pa.string())])
    after = Scorer(None).schema_after(schema)
    assert after == pa.schema(
        [("content", pa.string()), ("language", pa.large_string()), ("path", pa.string()), ("score", pa.float32())]
    )


def test_a_record_stage_fuses_with_its_neighbours():
    assert RecordStage.fuse == "any"


def test_check_columns_passes_a_schema_with_every_needed_column():
    check_columns(Scorer(None), pa.schema([("content", pa.string()), ("language", pa.string())]), "ingest")


def test_check_columns_names_the_missing_column_in_one_line():
    with pytest.raises(StackcurateError) as exc:
        check_columns(Scorer(None), pa.schema([("content", pa.string())]), "ingest")
    assert str(exc.value) == (
        "scorer needs the column language, which ingest does not write; put the stage that makes them before it"
    )


def test_check_columns_names_every_missing_column():
    with pytest.raises(StackcurateError, match=r"^scorer needs the columns content, language, which x does not"):
        check_columns(Scorer(None), pa.schema([("path", pa.string())]), "x")


def test_check_columns_needs_one_of_some_columns():
    with_one = pa.schema([("content", pa.string()), ("notebook_cells", pa.string())])
    check_columns(Reader(None), with_one, "filter")
    with pytest.raises(StackcurateError, match="needs the column notebook_script or notebook_cells, which"):
        check_columns(Reader(None), pa.schema([("content", pa.string())]), "filter")

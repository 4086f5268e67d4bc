"""The base of a record stage: a stage that maps file records to file records, one table at a time.

license, language, filter, decontaminate, dedup's removal step and pii are record stages. Each declares the
columns it needs and the columns it sets, so that a pipeline is checked before any work (a stage fed without a
column it needs is a one-line error at plan time) and consecutive record stages can run fused, in one pass
per shard (core/shards.py, `ShardJob`), each knowing the schema of the rows the one before it kept.

A record stage is two things: a frozen config with `batch_rows`, and a subclass with a docstring (its help)
that sets `name`, `config` and `needs`, overrides `adds` when it sets columns, and implements
`__call__(table) -> StageOutput`:

    class UpperStage(RecordStage):
        # (its docstring: "upper-case every file", then what `stackcurate upper --help` says)
        name = "upper"
        config = UpperConfig
        needs = ("content",)

        def __call__(self, table: pa.Table) -> StageOutput:
            upper = pc.utf8_upper(table.column("content"))
            return StageOutput(kept=put_column(table, "content", upper))
"""

from collections.abc import Iterator
from typing import ClassVar

import pyarrow as pa

from stackcurate.core.contract import Shard, Stage, StageOutput
from stackcurate.core.errors import StackcurateError
from stackcurate.core.planning import read_records, records_schema
from stackcurate.core.schema import FILE_SCHEMA


class RecordStage(Stage):
    """A stage over records, one table at a time, that may run fused with its neighbours (module docstring)."""

    fuse: ClassVar[str] = "any"

    def adds(self) -> list[pa.Field]:
        """Columns the stage sets: each replaces the input column of that name, or is appended."""
        return []

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        return read_records(shard, self.cfg.batch_rows)

    def output_schema(self, shard: Shard) -> pa.Schema:
        # A file that planning could not open has no schema to read: its shard is one error row and no records.
        return self.schema_after(FILE_SCHEMA if shard.kind == "unreadable" else records_schema(shard))

    def schema_after(self, schema: pa.Schema) -> pa.Schema:
        """The schema of the kept rows, given the input's."""
        for field in self.adds():
            index = schema.get_field_index(field.name)
            schema = schema.set(index, field) if index >= 0 else schema.append(field)
        return schema

    def __call__(self, table: pa.Table) -> StageOutput:
        raise NotImplementedError


def check_columns(stage: Stage, schema: pa.Schema, source: str) -> None:
    """One line if `schema` (what `source` writes) lacks a column `stage` needs."""
    missing = [name for name in stage.needs if name not in schema.names]
    if (one_of := stage.needs_one_of) and not set(one_of) & set(schema.names):
        missing.append(" or ".join(one_of))
    if missing:
        raise StackcurateError(
            f"{stage.name} needs the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}, which {source} "
            "does not write; put the stage that makes them before it"
        )

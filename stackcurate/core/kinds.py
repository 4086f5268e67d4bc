"""Kinds of record, and how a stage that applies to some kinds passes the others through.

Every record has a kind: `file` (a source file, schema.FILE_SCHEMA), and, from sources that are not files, `issue`,
`pull_request`, `commit`, `notebook`, ... A kind is the value of the `kind` column; a table without that column
holds files only (so a run over files writes what it always wrote). A record of any kind has FILE_SCHEMA's
columns (its id, its text as `content`, its provenance; null where they do not apply, a path for an issue), and
the columns of its own that its source declares (sources/base.py, `Source.columns`).

A stage names the kinds it applies to (`Stage.kinds`; None: every kind). Given a table of several kinds, the
shard runner hands the stage the rows of its kinds and passes the others through untouched: a code filter never
judges an issue thread, while pii and dedup apply to every kind.
"""

import pyarrow as pa
import pyarrow.compute as pc

from stackcurate.core.schema import FILE_KIND, KIND


def kinds_of(table: pa.Table) -> pa.ChunkedArray:
    """The kind of each row (`file` where the table has no `kind` column, or the value is null)."""
    if KIND not in table.column_names:
        return pa.chunked_array([pa.repeat(FILE_KIND, table.num_rows)], pa.string())
    return pc.fill_null(table.column(KIND), FILE_KIND)  # pyright: ignore[reportAttributeAccessIssue]


def split_kinds(table: pa.Table, kinds: tuple[str, ...] | None) -> tuple[pa.Table, pa.Table | None]:
    """The rows of `kinds` (every row when `kinds` is None), and the rows of other kinds (None when there are
    none): when every row is of `kinds` (a table without a `kind` column holds files), the table itself and no
    copy."""
    if kinds is None:
        return table, None
    if KIND not in table.column_names:  # files only: all the stage's, or all passed through
        return (table, None) if FILE_KIND in kinds else (table.slice(0, 0), table)
    mine = pc.is_in(kinds_of(table), value_set=pa.array(kinds, pa.string()))  # pyright: ignore[reportAttributeAccessIssue]
    if pc.all(mine).as_py() is not False:  # pyright: ignore[reportAttributeAccessIssue] - every row, or none at all
        return table, None
    return table.filter(mine), table.filter(pc.invert(mine))  # pyright: ignore[reportAttributeAccessIssue]

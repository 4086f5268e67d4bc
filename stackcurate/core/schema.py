"""Arrow schemas shared by every stage.

A *file record* is one source file with its provenance. Ingest produces it; later stages add columns and
drop rows but never change or remove these columns, so `doc_id` and the provenance survive to the end.

`doc_id` is assigned once, at ingest: ``(source_index << 40) | ordinal``, where `source_index` is the
position of the input (metadata Parquet file, bundle or repository) in the sorted list of inputs and
`ordinal` the row (or file) number inside it. It depends only on the inputs, never on how many workers
ran or how the work was sharded.
"""

import pyarrow as pa

DOC_ID_ORDINAL_BITS = 40

# A record's kind (core/kinds.py): the `kind` column, absent from tables of files only.
KIND = "kind"
FILE_KIND = "file"

FILE_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.int64(), nullable=False),
        pa.field("source", pa.string()),  # stack_v2 | vault_flat | vault_git | local
        pa.field("origin", pa.string()),  # the input file, bundle or repository the row came from
        pa.field("blob_id", pa.string()),  # SHA-1 of the original bytes (SWH `sha1`, the S3 key)
        pa.field("content_id", pa.string()),  # git blob hash (SWH `sha1_git`)
        pa.field("swhid", pa.string()),  # swh:1:cnt:<content_id>
        pa.field("directory_id", pa.string()),  # root directory of the repository snapshot
        pa.field("snapshot_id", pa.string()),
        pa.field("revision_id", pa.string()),
        pa.field("repo_name", pa.string()),
        pa.field("branch_name", pa.string()),
        pa.field("path", pa.string()),  # repository path with a leading "/", as in The Stack v2
        pa.field("content", pa.large_string()),
        pa.field("length_bytes", pa.int64()),  # UTF-8 bytes of `content`
        pa.field("src_encoding", pa.string()),  # encoding the original bytes were decoded from
        pa.field("language", pa.string()),
        pa.field("extension", pa.string()),
        pa.field("is_vendor", pa.bool_()),
        pa.field("is_generated", pa.bool_()),
        pa.field("detected_licenses", pa.list_(pa.string())),
        pa.field("license_type", pa.string()),
        pa.field("gha_license_id", pa.string()),
        pa.field("star_events_count", pa.int64()),
        pa.field("fork_events_count", pa.int64()),
        pa.field("visit_date", pa.timestamp("us")),
        pa.field("revision_date", pa.timestamp("us")),
        pa.field("committer_date", pa.timestamp("us")),
    ]
)

# Columns that hold a file's text or text derived from it. The pii stage redacts every string in each of them
# (nested ones included), so a stage that adds such a column names it here, or its text leaves pii unredacted
# (tests/test_secrets.py fails on a text column missing from this list: text columns are large_string).
NOTEBOOK_SCRIPT, NOTEBOOK_CELLS = "notebook_script", "notebook_cells"  # added by filter
TEXT_COLUMNS = ("content", NOTEBOOK_SCRIPT, NOTEBOOK_CELLS)

# Removed rows keep every column of the stage's output and say why they went.
REASON_FIELDS = [pa.field("reason", pa.string(), nullable=False), pa.field("detail", pa.string())]

# Bad input (a corrupt gzip, a missing blob, an unsafe tar member, an unreadable input file).
ERROR_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.int64()),
        pa.field("source", pa.string()),
        pa.field("origin", pa.string()),
        pa.field("repo_name", pa.string()),
        pa.field("path", pa.string()),
        pa.field("blob_id", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
    ]
)

# Additive counters: merging runs or shards is concatenation, and questions are a GROUP BY.
STATS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("stage", pa.string()),
        pa.field("shard", pa.int32()),
        pa.field("metric", pa.string()),  # docs_in, bytes_in, docs_out, bytes_out, docs_removed, ...
        pa.field("language", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("value", pa.float64()),
        pa.field("unit", pa.string()),  # docs | bytes | seconds
        pa.field("kind", pa.string()),  # the records' kind, where a table has several (null: files, or none)
    ]
)


def with_reason(schema: pa.Schema) -> pa.Schema:
    """The schema of a stage's removed rows: its output schema plus `reason` and `detail`."""
    names = set(schema.names)
    return pa.schema([*schema, *(f for f in REASON_FIELDS if f.name not in names)])


def empty_table(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def put_column(table: pa.Table, field: pa.Field | str, column: pa.Array | pa.ChunkedArray) -> pa.Table:
    """`table` with `column` under `field`'s name: replacing a column of that name, else appended."""
    name = field if isinstance(field, str) else field.name
    index = table.schema.get_field_index(name)
    return table.set_column(index, field, column) if index >= 0 else table.append_column(field, column)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Return `table` with exactly `schema`'s columns, in order; missing columns become nulls."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def extension_of(path: str) -> str:
    """The Stack v2's `extension`: what follows the last dot of the file name, without it ("" for none)."""
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[1] if "." in name.lstrip(".") else ""

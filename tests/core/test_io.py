"""Filesystems, globbing, atomic writes and reading Parquet slices around bad row groups."""

import errno
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stackcurate.core import io


def _local(tmp_path: Path):
    fs, root = io.filesystem(str(tmp_path))
    return fs, root


# Paths and globs


def test_a_local_path_resolves_to_an_absolute_one_without_scheme(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for uri in ("out/", "file://" + str(tmp_path / "out"), str(tmp_path / "x" / ".." / "out")):
        _, path = io.filesystem(uri)
        assert path == str(tmp_path.resolve() / "out")


def test_an_s3_uri_keeps_bucket_and_key_without_slash():
    fs, path = io.filesystem("s3://bucket/prefix/", io.S3Options(endpoint="http://127.0.0.1:1"))
    assert (fs.type_name, path) == ("s3", "bucket/prefix")


def test_join_adds_parts_with_one_slash():
    assert io.join("s3://b/x/", "stage", "00000.parquet") == "s3://b/x/stage/00000.parquet"


@pytest.fixture
def tree(tmp_path):
    for name in ("a/1.parquet", "a/2.parquet", "a/notes.txt", "a/b/3.parquet", "c/4.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize(
    ("pattern", "found"),
    [
        ("a/*.parquet", ["a/1.parquet", "a/2.parquet"]),
        ("a/?.parquet", ["a/1.parquet", "a/2.parquet"]),
        ("a/[2-9].parquet", ["a/2.parquet"]),
        ("*/*.parquet", ["a/1.parquet", "a/2.parquet", "c/4.parquet"]),
        ("**/*.parquet", ["a/1.parquet", "a/2.parquet", "a/b/3.parquet", "c/4.parquet"]),
        ("a/**", ["a/1.parquet", "a/2.parquet", "a/b/3.parquet", "a/notes.txt"]),
        ("a/1.parquet", ["a/1.parquet"]),
        ("nope/*.parquet", []),
        ("nope.parquet", []),
    ],
)
def test_expand_follows_shell_globs(tree, pattern, found):
    fs, root = _local(tree)
    assert io.expand(fs, f"{root}/{pattern}") == [f"{root}/{f}" for f in found]


def test_expand_of_a_folder_lists_its_files_of_a_suffix_recursively(tree):
    fs, root = _local(tree)
    found = io.expand(fs, f"{root}/a", suffix=".parquet")
    assert found == [f"{root}/a/{f}" for f in ("1.parquet", "2.parquet", "b/3.parquet")]


def test_file_size_is_zero_for_a_missing_file(tmp_path):
    (tmp_path / "f").write_bytes(b"12345")
    assert (io.file_size(str(tmp_path / "f")), io.file_size(str(tmp_path / "g"))) == (5, 0)


# Atomic writes


def test_write_bytes_atomic_writes_the_file_and_leaves_no_temporary(tmp_path):
    fs, root = _local(tmp_path)
    io.write_bytes_atomic(fs, f"{root}/m.json", b"old")
    io.write_bytes_atomic(fs, f"{root}/m.json", b"new")
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
    assert io.read_text(fs, f"{root}/m.json") == "new"


def test_a_parquet_file_appears_only_on_commit(tmp_path):
    fs, root = _local(tmp_path)
    writer = io.AtomicParquetWriter(fs, f"{root}/00000.parquet", pa.schema([("v", pa.int64())]))
    writer.write(pa.table({"v": [1, 2]}))
    writer.write(pa.table({"v": pa.array([], pa.int64())}))
    writer.write(pa.table({"v": [3]}))
    assert not (tmp_path / "00000.parquet").exists()
    assert [p.name.split(".tmp-")[0] for p in tmp_path.iterdir()] == ["00000.parquet"]
    writer.commit()
    assert [p.name for p in tmp_path.iterdir()] == ["00000.parquet"]
    assert pq.read_table(tmp_path / "00000.parquet").column("v").to_pylist() == [1, 2, 3]
    assert writer.rows == 3


def test_an_aborted_parquet_file_leaves_nothing(tmp_path):
    fs, root = _local(tmp_path)
    writer = io.AtomicParquetWriter(fs, f"{root}/00000.parquet", pa.schema([("v", pa.int64())]))
    writer.write(pa.table({"v": [1]}))
    writer.abort()
    writer.abort()  # never raises, even twice
    assert list(tmp_path.iterdir()) == []


def test_a_committed_file_with_no_rows_has_the_schema(tmp_path):
    fs, root = _local(tmp_path)
    schema = pa.schema([("v", pa.int64()), ("s", pa.large_string())])
    io.AtomicParquetWriter(fs, f"{root}/e.parquet", schema).commit()
    table = pq.read_table(tmp_path / "e.parquet")
    assert (table.num_rows, table.schema) == (0, schema)


def test_tables_are_cast_to_the_writer_schema(tmp_path):
    fs, root = _local(tmp_path)
    writer = io.AtomicParquetWriter(fs, f"{root}/c.parquet", pa.schema([("v", pa.int64())]))
    writer.write(pa.table({"v": pa.array([1], pa.int32())}))
    writer.commit()
    assert pq.read_schema(tmp_path / "c.parquet").field("v").type == pa.int64()


# Reading slices


def _numbers(path: Path, rows: int = 10, row_group_size: int = 4) -> str:
    pq.write_table(pa.table({"v": list(range(rows))}), path, row_group_size=row_group_size)
    return str(path)


def test_scan_parquet_rows_gives_each_table_s_first_row_number(tmp_path):
    fs, _ = _local(tmp_path)
    path = _numbers(tmp_path / "n.parquet")
    got = [(first, t.column("v").to_pylist()) for first, t in io.scan_parquet_rows(fs, path, 2, 9, batch_rows=3)]
    assert got == [(2, [2, 3]), (4, [4, 5, 6]), (7, [7]), (8, [8])]


def _corrupt_row_group(path: str, row_group: int) -> None:
    """Overwrite the first page header of the row group's only column chunk, as a bad sector would."""
    chunk = pq.read_metadata(path).row_group(row_group).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(Path(path).read_bytes())
    data[start : start + 12] = b"\xff" * 12
    Path(path).write_bytes(bytes(data))


def test_a_bad_row_group_is_named_after_the_rows_around_it_are_read(tmp_path):
    fs, _ = _local(tmp_path)
    path = _numbers(tmp_path / "n.parquet")
    _corrupt_row_group(path, 1)
    tables = io.scan_parquet_slice(fs, path, 0, 10, batch_rows=100)
    read = []
    with pytest.raises(io.UnreadableRowGroups) as exc:
        for table in tables:
            read += table.column("v").to_pylist()
    assert read == [0, 1, 2, 3, 8, 9]
    assert len(exc.value.details) == 1
    assert exc.value.details[0].startswith(f"row group 1 (rows 4 to 7) of {path}: ")


# Transient failures


@pytest.mark.parametrize(
    ("exc", "cause"),
    [
        (OSError(errno.ECONNREFUSED, "refused"), "connection refused"),
        (OSError(errno.ETIMEDOUT, "slow"), "timed out"),
        (OSError("AWS Error SLOW_DOWN during GetObject"), "throttled"),
        (OSError("When reading: HTTP status 503"), "throttled (HTTP 503)"),
        (OSError("When reading: HTTP status 500"), "server error (HTTP 500)"),
        (OSError("curlCode: 7, Couldn't connect to server"), "could not connect"),
        (OSError("curlCode: 28, Timeout was reached"), "timed out"),
        (OSError("HTTP status 404 NoSuchKey"), None),
        (FileNotFoundError(errno.ENOENT, "connection refused"), None),
        (ValueError("timed out"), None),
        (io.UnreadableRowGroups(["row group 0: timed out"]), None),
    ],
)
def test_transient_cause_tells_a_store_failure_from_a_bad_object(exc, cause):
    assert io.transient_cause(exc) == cause


def test_short_error_keeps_the_aws_error_without_its_details():
    exc = OSError("When reading s3://b/k: AWS Error NETWORK_CONNECTION during GetObject; Details: curl 7 ...")
    assert io.short_error(exc) == "AWS Error NETWORK_CONNECTION during GetObject"
    assert io.short_error(ValueError("bad\n  value")) == "ValueError: bad value"


# The machine lock


def test_machine_lock_goes_on_without_the_lock_only_when_optional(tmp_path):
    missing = tmp_path / "no" / "such" / "lock"
    with io.machine_lock(missing, optional=True):
        pass
    with pytest.raises(OSError), io.machine_lock(missing):
        pass
    with io.machine_lock(tmp_path / "lock"):
        assert (tmp_path / "lock").exists()

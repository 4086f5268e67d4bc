"""The Stack v2 source when things go wrong (issue 14, cases 3 and 4): a content store that is down, throttles
or fails, and metadata that is not what The Stack v2 publishes.

The stores are real: a loopback port nobody listens on, moto's S3 server, and a loopback HTTP proxy in front of
moto that answers an error status instead of moto for chosen requests.
"""

import http.client
import re
import threading
import time
import uuid
from collections import Counter
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import free_port, make_table, read_all, stack_v2_layout, state, table_dir, write_records

from stackcurate.cli import main
from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import ERROR_SCHEMA, FILE_SCHEMA
from stackcurate.pipeline import RunOptions, StageResult, run_stage
from stackcurate.stages import get_stage
from stackcurate.stages.ingest import plan
from stackcurate.stages.ingest.content import sha1_hex

FILES = [(f"/pkg/m{i}.py", f"value = {i}\n".encode()) for i in range(5)]
# Retries in tests: 2 of them, 50 ms apart, so a read that keeps failing gives up in a fraction of a second.
FAST = {"fetch_retries": 2, "fetch_backoff": 0.05}


def _run(out: Path, runner: str = "local", **values: object) -> StageResult:
    spec = get_stage("ingest")
    cfg = build_config(spec.config, values)
    return run_stage(spec, cfg, str(out), RunOptions(runner=runner, progress=False, workers=2))


def _outputs(out: Path) -> dict[str, bytes]:
    """The bytes of every kept, removed and error file of the ingest output (stats hold the run id)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet")) if "_stats" not in p.parts}


def _new_store() -> str:
    return f"s3://swh-{uuid.uuid4().hex[:12]}/mirror"


def _upload(endpoint: str, root: Path, store: str) -> None:
    """Copy `root/content/*` into `store` (`s3://<new public bucket>/<prefix>`) on the S3 server at `endpoint`."""
    import boto3

    bucket, _, prefix = store.removeprefix("s3://").partition("/")
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket, ACL="public-read")
    for obj in sorted((root / "content").iterdir()):
        client.put_object(Bucket=bucket, Key=f"{prefix}/content/{obj.name}", Body=obj.read_bytes())


class StoreProxy:
    """A loopback HTTP proxy in front of an S3 server that answers an error status instead, for chosen requests.

    Attributes:
        fail_first: The next this-many requests get `first_statuses` in turn (then forwarding resumes).
        fail_keys: Object keys containing one of these strings get its status, every time.
        cut_first: The next this-many GETs of an object are cut off: the full Content-Length is announced, half
            the body is sent, then the connection is closed.
        answered: How many requests got each error status (and "cut": how many were cut off).
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.first_statuses: list[int] = []
        self.fail_keys: dict[str, int] = {}
        self.cut_first = 0
        self.answered: Counter[int | str] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the S3 client expects

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = proxy._status_for(self.path)
                if status is not None:
                    error = f"<Error><Code>Status{status}</Code><Message>test</Message></Error>".encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(error)
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=30)
                skip = {"host", "connection", "content-length", "transfer-encoding"}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in skip:
                        self.send_header(key, value)
                length = reply.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command == "GET" and "/content/" in self.path and proxy._cut():
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                elif self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = _any

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _status_for(self, path: str) -> int | None:
        with self._lock:
            status = self.first_statuses.pop(0) if self.first_statuses else None
            if status is None:
                status = next((s for key, s in self.fail_keys.items() if key in path), None)
            if status is not None:
                self.answered[status] += 1
            return status

    def _cut(self) -> bool:
        with self._lock:
            if self.cut_first <= 0:
                return False
            self.cut_first -= 1
            self.answered["cut"] += 1
            return True

    def __enter__(self) -> "StoreProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


# --- case 3: a store that is down, throttles or fails ----------------------------------------------------------


@pytest.mark.parametrize("runner", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_store_down_is_not_recorded_as_done_and_a_rerun_finishes(tmp_path, monkeypatch, request, runner):
    pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    if runner == "ray":
        request.getfixturevalue("ray_local")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # for the upload; ingest reads anonymously
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    root = stack_v2_layout(tmp_path / "sv2", FILES)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "local.py").write_bytes(b"local = True\n")
    port = free_port()  # nobody listens here: every connection is refused
    endpoint = f"http://127.0.0.1:{port}"
    content = _new_store()
    values = {
        "metadata": [str(root / "metadata/*.parquet")],
        "content": content,
        "s3_endpoint": endpoint,
        "repos": [str(repo)],
        "rows_per_shard": 2,  # shards 0-2: metadata rows (2, 2, 1); shard 3: the local folder
        **FAST,
    }
    out = tmp_path / "out"
    started = time.monotonic()
    with pytest.raises(StackcurateError) as failure:
        _run(out, runner, **values)
    elapsed = time.monotonic() - started

    line = str(failure.value)
    expected = (
        re.escape(
            f"ingest: 3 of 4 shards (5 input rows) not done: the content store {content} at {endpoint} is "
            "unavailable: could not connect ("
        )
        + re.escape("Generic S3 error: HTTP error: error sending request")
        + re.escape("); rerun the same command when the store is back (the 1 finished shard is kept)")
    )
    assert re.fullmatch(expected, line), line
    assert elapsed < 60, f"a refused port took {elapsed:.1f} s"  # measured: 0.2 s local, 1.5-2.9 s on Ray
    stage = out / "ingest"
    assert not state(stage, "SUCCESS").exists()
    assert sorted(p.name for p in state(stage, "shards").iterdir()) == ["00003.json"]
    assert sorted(p.name for p in stage.glob("*.parquet")) == ["00003.parquet"]
    assert read_all(table_dir(stage, "errors"), ERROR_SCHEMA).num_rows == 0, (
        "no fetch_failed rows: nothing was recorded"
    )
    assert not list(out.rglob("*.tmp-*"))
    repo_shard = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("00003.*"))}
    assert len(repo_shard) == 5  # kept, removed, errors, stats, marker

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()  # the store is back, at the same address
    try:
        _upload(endpoint, root, content)
        result = _run(out, runner, **values)
        reference = tmp_path / "reference"
        _run(reference, "local", **values)
    finally:
        server.stop()
    assert (result.shards, result.shards_run) == (4, 3), "the rerun redoes only the unfinished shards"
    assert (result.docs_in, result.docs_out, result.docs_removed, result.errors) == (6, 6, 0, 0)
    assert state(stage, "SUCCESS").exists()
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("00003.*"))} == repo_shard
    assert _outputs(out) == _outputs(reference), "interrupted by the outage, then rerun = one uninterrupted run"
    kept = read_all(stage, FILE_SCHEMA)
    assert sorted(kept.column("path").to_pylist()) == sorted([p for p, _ in FILES] + ["/local.py"])


def _through_proxy(tmp_path: Path, s3_endpoint: str, **faults: object) -> tuple[StageResult, StoreProxy]:
    """Ingest the files once straight from the store (`direct`), then through a proxy with `faults` set and 4
    retries (`out`): the result of the second run, and the proxy."""
    root = stack_v2_layout(tmp_path / "sv2", FILES)
    store = _new_store()
    _upload(s3_endpoint, root, store)
    values = {"metadata": [str(root / "metadata/*.parquet")], "content": store, "rows_per_shard": 2}
    _run(tmp_path / "direct", s3_endpoint=s3_endpoint, **values)
    with StoreProxy(s3_endpoint) as proxy:
        for name, value in faults.items():
            setattr(proxy, name, value)
        result = _run(tmp_path / "out", s3_endpoint=proxy.endpoint, fetch_retries=4, fetch_backoff=0.05, **values)
    return result, proxy


def test_throttling_and_server_errors_are_retried(tmp_path, s3_endpoint):
    # 4 failed requests in a row: even if all fall on one read, its 4 retries outlast them.
    result, proxy = _through_proxy(tmp_path, s3_endpoint, first_statuses=[503, 429, 500, 502])
    assert proxy.answered == {503: 1, 429: 1, 500: 1, 502: 1}
    assert (result.shards_run, result.docs_out, result.errors) == (3, 5, 0)
    assert (tmp_path / "out/_state/ingest/SUCCESS").exists()
    assert _outputs(tmp_path / "out") == _outputs(tmp_path / "direct")


def test_objects_cut_off_mid_body_are_read_again_and_nothing_is_lost(tmp_path, s3_endpoint):
    result, proxy = _through_proxy(tmp_path, s3_endpoint, cut_first=3)  # fewer than the 4 retries of a read
    assert proxy.answered == {"cut": 3}
    assert (result.shards_run, result.docs_out, result.errors) == (3, 5, 0)
    assert _outputs(tmp_path / "out") == _outputs(tmp_path / "direct"), "no truncated bytes reached the output"


def test_a_shard_whose_reads_keep_failing_is_redone_by_the_next_run(tmp_path, s3_endpoint):
    root = stack_v2_layout(tmp_path / "sv2", FILES)
    store = _new_store()
    _upload(s3_endpoint, root, store)
    failing, denied = sha1_hex(FILES[1][1]), sha1_hex(FILES[3][1])  # in shards 0 and 1
    values = {"metadata": [str(root / "metadata/*.parquet")], "content": store, "rows_per_shard": 2, **FAST}
    with StoreProxy(s3_endpoint) as proxy:
        proxy.fail_keys = {failing: 500, denied: 403}
        values["s3_endpoint"] = proxy.endpoint
        with pytest.raises(StackcurateError) as failure:
            _run(tmp_path / "out", **values)
        line = str(failure.value)
        expected = (
            re.escape(
                f"ingest: 1 of 3 shards (2 input rows) not done: the content store {store} at {proxy.endpoint} is "
                "unavailable: server error (HTTP 500) (Generic S3 error: Server returned non-2xx status code: 500 "
            )
            + r"[^\n]*"
            + re.escape("); rerun the same command when the store is back (the 2 finished shards are kept)")
        )
        assert re.fullmatch(expected, line), line
        assert proxy.answered[500] == 1 + FAST["fetch_retries"]
        stage = tmp_path / "out/ingest"
        assert sorted(p.name for p in state(stage, "shards").iterdir()) == ["00001.json", "00002.json"]
        # Shards 1 and 2 ran after shard 0 gave up: each read had one try, which the store answered.
        assert sorted(read_all(stage, FILE_SCHEMA).column("path").to_pylist()) == ["/pkg/m2.py", "/pkg/m4.py"]
        errors = read_all(table_dir(stage, "errors"), ERROR_SCHEMA).to_pylist()
        assert [(e["path"], e["reason"]) for e in errors] == [("/pkg/m3.py", "fetch_failed")]  # 403 is for good
        assert "403 Forbidden" in errors[0]["detail"]

        del proxy.fail_keys[failing]  # the store is back; the denied object stays denied
        result = _run(tmp_path / "out", **values)
        _run(tmp_path / "reference", **values)
    assert (result.shards, result.shards_run) == (3, 1)
    assert (result.docs_in, result.docs_out, result.errors) == (5, 4, 1)
    assert state(stage, "SUCCESS").exists()
    assert _outputs(tmp_path / "out") == _outputs(tmp_path / "reference")


# --- case 4: metadata that is not what The Stack v2 publishes --------------------------------------------------


def _set_column(table: pa.Table, name: str, values: list, type_: pa.DataType) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, type_))


def _corrupt_row_group(path: Path, row_group: int, column: str) -> None:
    """Overwrite the first page header of one column chunk of `row_group`, as a bad sector or a torn copy would."""
    chunks = pq.read_metadata(path).row_group(row_group)
    chunk = next(chunks.column(i) for i in range(chunks.num_columns) if chunks.column(i).path_in_schema == column)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[start : start + 12] = b"\xff" * 12
    path.write_bytes(bytes(data))


REQUIRED = "The Stack v2 file-level metadata needs blob_id and path (the others are optional)"
BAD_COLUMNS = {
    "no_blob_id": (lambda t: t.drop_columns(["blob_id"]), f" has no column 'blob_id'; {REQUIRED}"),
    "no_path": (lambda t: t.drop_columns(["path"]), f" has no column 'path'; {REQUIRED}"),
    "stars_as_lists": (
        lambda t: _set_column(t, "star_events_count", [[3]] * t.num_rows, pa.list_(pa.int64())),
        ": column 'star_events_count' is list<element: int64>, expected int64 (or text holding one)",
    ),
    "paths_as_numbers": (
        lambda t: _set_column(t, "path", list(range(t.num_rows)), pa.int64()),
        ": column 'path' is int64, expected string",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_COLUMNS))
def test_bad_metadata_column_is_one_line_naming_file_and_column_before_any_work(tmp_path, capsys, case):
    change, tail = BAD_COLUMNS[case]
    root = stack_v2_layout(tmp_path / "sv2", FILES)
    stack_v2_layout(root, FILES[:2], metadata_name="00001.parquet")
    bad = (root / "metadata/00001.parquet").resolve()
    pq.write_table(change(pq.read_table(bad)), bad)
    message = f"metadata {bad}{tail}"
    values = {"metadata": [str(root / "metadata/*.parquet")], "content": str(root)}
    with pytest.raises(StackcurateError) as failure:
        plan(build_config(get_stage("ingest").config, values))
    assert str(failure.value) == message
    out = tmp_path / "out"
    argv = ["ingest", "--out", str(out), "--metadata", *values["metadata"], "--content", str(root)]
    assert main([*argv, "--runner", "local", "--no-progress"]) == 2
    err = capsys.readouterr().err.splitlines()  # the resolved config, then the error
    assert err[-1] == f"stackcurate: error: {message}"
    assert not any("Traceback" in line or "error" in line for line in err[:-1])
    assert not out.exists(), "nothing is written before the metadata is checked"


def test_values_that_do_not_convert_are_error_rows_for_their_rows_only(tmp_path):
    # length_bytes and dates as text, stars as floats: the column converts, except one value each.
    bad = [("/bad_len.py", b"bad_len = 1\n"), ("/bad_stars.py", b"bad_stars = 1\n"), ("/bad_date.py", b"d = 1\n")]
    files = [*FILES, *bad, ("/no_path.py", b"no_path = 1\n")]
    root = stack_v2_layout(tmp_path / "sv2", files, extra={"/no_path.py": {"path": ""}})
    meta = root / "metadata/00000.parquet"
    table = pq.read_table(meta)
    paths = table.column("path").to_pylist()
    lengths = [
        "12 KB" if p == "/bad_len.py" else str(n)
        for p, n in zip(paths, table["length_bytes"].to_pylist(), strict=True)
    ]
    table = _set_column(table, "length_bytes", lengths, pa.string())
    table = _set_column(
        table, "star_events_count", [3.5 if p == "/bad_stars.py" else 3.0 for p in paths], pa.float64()
    )
    dates = ["yesterday" if p == "/bad_date.py" else "2024-01-02T03:04:05" for p in paths]
    pq.write_table(_set_column(table, "visit_date", dates, pa.string()), meta)

    result = _run(tmp_path / "out", metadata=[str(meta)], content=str(root))
    stage = tmp_path / "out/ingest"
    kept = {r["path"]: r for r in read_all(stage, FILE_SCHEMA).to_pylist()}
    assert sorted(kept) == sorted(p for p, _ in FILES)
    for path, data in FILES:
        assert kept[path]["content"] == data.decode() and kept[path]["length_bytes"] == len(data)
        assert kept[path]["star_events_count"] == 3
        assert kept[path]["visit_date"] == datetime(2024, 1, 2, 3, 4, 5)
    errors = read_all(table_dir(stage, "errors"), ERROR_SCHEMA).to_pylist()
    assert {e["path"]: (e["reason"], e["detail"]) for e in errors} == {
        "/bad_len.py": ("bad_metadata", "length_bytes: '12 KB' is not int64"),
        "/bad_stars.py": ("bad_metadata", "star_events_count: '3.5' is not int64"),
        "/bad_date.py": ("bad_metadata", "visit_date: 'yesterday' is not timestamp[us]"),
        "": ("bad_metadata", "path is empty"),
    }
    assert {e["path"]: e["blob_id"] for e in errors} == {
        (p or ""): sha1_hex(d) for p, d in [*bad, ("", b"no_path = 1\n")]
    }
    ids = [r["doc_id"] for r in kept.values()] + [e["doc_id"] for e in errors]
    assert sorted(ids) == list(range(len(files))), "every metadata row is a kept row or an error row"
    assert (result.docs_out, result.docs_removed, result.errors) == (5, 0, 4)
    assert state(stage, "SUCCESS").exists()


@pytest.mark.parametrize(
    ("rows_per_shard", "lost"),
    [(100, ["rows 2 to 3"]), (3, ["rows 2 to 2", "rows 3 to 3"])],
    ids=["1-shard", "3-rows"],
)
def test_corrupt_row_group_is_one_error_row_and_the_rows_around_it_are_read(tmp_path, rows_per_shard, lost):
    files = [*FILES, ("/pkg/m5.py", b"value = 5\n")]
    root = stack_v2_layout(tmp_path / "sv2", files)
    meta = (root / "metadata/00000.parquet").resolve()
    pq.write_table(pq.read_table(meta), meta, row_group_size=2)  # row groups: rows 0-1, 2-3, 4-5
    _corrupt_row_group(meta, 1, "path")

    result = _run(tmp_path / "out", metadata=[str(meta)], content=str(root), rows_per_shard=rows_per_shard)
    stage = tmp_path / "out/ingest"
    kept = read_all(stage, FILE_SCHEMA)
    assert sorted(zip(kept["doc_id"].to_pylist(), kept["path"].to_pylist(), strict=True)) == [
        (i, files[i][0]) for i in (0, 1, 4, 5)
    ]
    assert all(r["content"] == dict(files)[r["path"]].decode() for r in kept.to_pylist())
    errors = read_all(table_dir(stage, "errors"), ERROR_SCHEMA).to_pylist()
    assert [(e["reason"], e["origin"], e["doc_id"]) for e in errors] == [("unreadable_input", str(meta), None)] * len(
        lost
    )
    assert [e["detail"].split(": ")[:2] for e in errors] == [[f"row group 1 ({r}) of {meta}", "OSError"] for r in lost]
    assert (result.docs_in, result.docs_out, result.errors) == (4, 4, len(lost))
    assert state(stage, "SUCCESS").exists()


def test_record_stages_read_around_a_corrupt_row_group_too(tmp_path):
    # The same reader serves every stage's record input: here the language stage's.
    folder = write_records(tmp_path / "out/ingest", [])
    records = folder / "00000.parquet"
    pq.write_table(make_table([(f"/f{i}.py", f"x = {i}\n") for i in range(6)]), records, row_group_size=2)
    _corrupt_row_group(records, 1, "content")
    spec = get_stage("language")
    cfg = build_config(spec.config, {})
    opts = RunOptions(runner="local", progress=False)
    result = run_stage(spec, cfg, str(tmp_path / "out"), opts, input_uri=str(tmp_path / "out/ingest"))
    kept = read_all(tmp_path / "out/language")
    assert kept["doc_id"].to_pylist() == [0, 1, 4, 5]
    errors = read_all(tmp_path / "out/_errors/language", ERROR_SCHEMA).to_pylist()
    assert [(e["reason"], e["detail"].split(": ")[0]) for e in errors] == [
        ("unreadable_input", f"row group 1 (rows 2 to 3) of {records.resolve()}")
    ]
    assert (result.docs_out, result.errors) == (4, 1)

"""The content store reader (sources/fetch.py): results in order, a bound on the bytes it holds, errors
sorted into transient and permanent."""

import time

import pytest

from stackcurate.core import io
from stackcurate.core.errors import StackcurateError
from stackcurate.sources import fetch

OPTIONS = fetch.FetchOptions(concurrency=8, buffer_bytes=3_000, retries=0, backoff=0.01)


def _store(tmp_path, options=OPTIONS, n=10):
    (tmp_path / "content").mkdir()
    for i in range(n):
        (tmp_path / "content" / f"{i:040x}").write_bytes(bytes([i]) * (100 + i))
    return fetch.ContentStore(str(tmp_path), io.S3Options(), options)


def _request(i, cap=10_000):
    return fetch.Request(f"content/{i:040x}", cap, 1_000)


def test_results_come_in_request_order_with_sizes_over_the_cap(tmp_path):
    store = _store(tmp_path, fetch.FetchOptions(concurrency=4, buffer_bytes=10**6, retries=0, backoff=0.01))
    requests = [_request(i, cap=105) for i in (7, 0, 3, 9, 5)] + [fetch.Request("content/" + "f" * 40, 10, 1)]
    futures = store.fetch(requests)
    results = [f.result(timeout=30) for f in futures[:-1]]
    assert results == [107, bytes([0]) * 100, bytes([3]) * 103, 109, bytes([5]) * 105]  # over 105: the size
    with pytest.raises(FileNotFoundError):
        futures[-1].result(timeout=30)
    store.close()


def test_bytes_held_never_pass_the_buffer(tmp_path):
    store = _store(tmp_path)  # 3,000 bytes of buffer, 1,000 reserved by each read: 3 at a time
    requests = [_request(i) for i in range(6)]
    futures = store.fetch(requests)
    assert [f.result(timeout=30) for f in futures[:3]] == [bytes([i]) * (100 + i) for i in range(3)]
    time.sleep(0.3)
    assert not any(f.done() for f in futures[3:]), "a fourth read started before any was released"
    store.release(requests[0])
    assert futures[3].result(timeout=30) == bytes([3]) * 103
    time.sleep(0.3)
    assert not futures[4].done()
    for request in requests[1:4]:
        store.release(request)
    assert [f.result(timeout=30) for f in futures[4:]] == [bytes([i]) * (100 + i) for i in (4, 5)]
    store.close()


def test_a_read_larger_than_the_whole_buffer_is_still_read_alone(tmp_path):
    store = _store(tmp_path)
    big = fetch.Request(f"content/{1:040x}", 10_000, 50_000)
    assert store.fetch([big])[0].result(timeout=30) == bytes([1]) * 101
    store.release(big)
    assert store.fetch([_request(2)])[0].result(timeout=30) == bytes([2]) * 102  # the share came back
    store.close()


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ("Generic S3 error: Error performing GET http://h/b/k in 2ms - Server returned non-2xx status code: 503 "
         "Service Unavailable: <Error><Code>SlowDown</Code></Error>", "throttled (HTTP 503)"),
        ("Generic S3 error: ... status code: 500 Internal Server Error", "server error (HTTP 500)"),
        ("Generic S3 error: ... error sending request\n\nDebug source: kind: Connect", "could not connect"),
        ("Generic S3 error: ... HTTP error: error decoding response body\n kind: Decode", "cut off"),
        ("Generic S3 error: ... operation timed out", "timed out"),
        ("The operation lacked the necessary privileges ... status code: 403 Forbidden", None),
        ("Generic S3 error: ... status code: 400 Bad Request", None),
    ],
)  # fmt: skip
def test_transient_and_permanent_failures(message, cause):
    assert fetch.transient_cause(RuntimeError(message)) == cause


def test_a_missing_object_is_permanent_and_a_short_error_hides_the_url():
    assert fetch.transient_cause(FileNotFoundError("Object at location content/x not found")) is None
    exc = RuntimeError("Generic S3 error: Error performing GET http://127.0.0.1:9/b/content/ab in 146.4µs - HTTP "
                       "error: error sending request\n\nDebug source:\nGeneric {")  # fmt: skip
    assert fetch.short_error(exc) == "Generic S3 error: HTTP error: error sending request"


def test_a_content_store_that_is_not_a_folder_or_s3_is_one_line(tmp_path):
    with pytest.raises(StackcurateError, match="is not a folder; check --content"):
        fetch.ContentStore(str(tmp_path / "nope"), io.S3Options(), OPTIONS)
    with pytest.raises(StackcurateError, match="local folder or s3:// URI, not gs://bucket"):
        fetch.ContentStore("gs://bucket", io.S3Options(), OPTIONS)

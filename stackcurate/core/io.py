"""Filesystems, globbing and atomic Parquet I/O.

Every path goes through a pyarrow filesystem, so a local folder and an object store (`s3://bucket/prefix`)
run the same code. Writers are atomic: a file appears under its final name only once it is complete, so
an interrupted run never leaves a half-written shard where a reader (or DuckDB) can see it.
"""

import contextlib
import errno
import fcntl
import fnmatch
import os
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from stackcurate.core.errors import StackcurateError

_GLOB_CHARS = re.compile(r"[*?\[]")
PARQUET_COMPRESSION = "zstd"


@dataclass(frozen=True, kw_only=True)
class S3Options:
    """How to reach an S3-compatible store.

    Attributes:
        endpoint: Endpoint URL override (e.g. `http://127.0.0.1:9000` for a local S3 server); None for AWS.
        anonymous: Unsigned requests, as the public `softwareheritage` bucket allows.
        region: Bucket region; the SWH bucket is in us-east-1.
    """

    endpoint: str | None = None
    anonymous: bool = True
    region: str = "us-east-1"


def run_store() -> S3Options:
    """How to reach the S3 store of a run's own files (outputs, inputs named by URI): signed requests with the
    standard AWS environment (credential chain, `AWS_ENDPOINT_URL`, `AWS_REGION`). Without credentials the
    chain falls back to unsigned requests, so public buckets still read."""
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return S3Options(endpoint=os.environ.get("AWS_ENDPOINT_URL") or None, anonymous=False, region=region)


def filesystem(uri: str, s3: S3Options | None = None, *, attempts: int | None = None) -> tuple[pafs.FileSystem, str]:
    """Return the filesystem for `uri` and the path inside it (no scheme, no trailing slash). `s3` says how to
    reach an S3 store (the SWH content store's settings); by default, :func:`run_store`. `attempts` caps the
    S3 client's own tries per request (default: the AWS SDK's 3); a caller that retries by itself passes 1,
    or the tries multiply (a refused port then waits out the SDK's backoff on every one of the caller's
    tries)."""
    if uri.startswith("s3://"):
        opts = s3 or run_store()
        kwargs: dict[str, object] = {"anonymous": opts.anonymous, "region": opts.region}
        if opts.endpoint:
            scheme, _, host = opts.endpoint.rpartition("://")
            kwargs["endpoint_override"] = host
            kwargs["scheme"] = scheme or "https"
        if attempts is not None:
            kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=attempts)
        return pafs.S3FileSystem(**kwargs), uri.removeprefix("s3://").rstrip("/")
    if "://" in uri and not uri.startswith("file://"):
        try:
            return pafs.FileSystem.from_uri(uri)
        except (pa.ArrowInvalid, OSError) as exc:
            raise StackcurateError(f"cannot open {uri}: {exc}") from None
    return pafs.LocalFileSystem(), str(Path(uri.removeprefix("file://")).expanduser().resolve())


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def expand(fs: pafs.FileSystem, pattern: str, *, suffix: str = "") -> list[str]:
    """Sorted files matching a glob (`**` crosses folders), a file, or every `suffix` file under a folder."""
    match = _GLOB_CHARS.search(pattern)
    if match is None:
        info = fs.get_file_info(pattern)
        if info.type == pafs.FileType.File:
            return [pattern]
        if info.type == pafs.FileType.Directory:
            found = fs.get_file_info(pafs.FileSelector(pattern, recursive=True))
            return sorted(i.path for i in found if i.type == pafs.FileType.File and i.path.endswith(suffix))
        return []
    base = pattern[: match.start()].rpartition("/")[0] or "/"
    regex = _glob_regex(pattern)
    try:
        found = fs.get_file_info(
            pafs.FileSelector(base, recursive="**" in pattern or "/" in pattern[match.start() :], allow_not_found=True)
        )
    except OSError:
        return []
    return sorted(i.path for i in found if i.type == pafs.FileType.File and regex.fullmatch(i.path))


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Shell glob semantics: `*` and `?` stay within one folder, `**/` spans any number of folders."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape("["))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i : end + 1])[4:-3])  # reuse fnmatch's class translation
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def file_size(uri: str, s3: S3Options | None = None) -> int:
    """The size of the file at `uri` in bytes (0 when it cannot be told)."""
    fs, path = filesystem(uri, s3)
    try:
        return fs.get_file_info(path).size or 0
    except OSError:
        return 0


def write_bytes_atomic(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as f:
        f.write(data)
    fs.move(tmp, path)


def read_text(fs: pafs.FileSystem, path: str) -> str:
    with fs.open_input_stream(path) as f:
        return f.read().decode()


_writes: tuple[int, ThreadPoolExecutor] | None = None


def _write_thread() -> ThreadPoolExecutor:
    """This process's one thread that encodes, compresses and writes Parquet (Arrow releases the GIL there), so a
    stage computes its next batch while its last is written. One thread: each file's batches go in order."""
    global _writes
    if _writes is None or _writes[0] != os.getpid():  # not a pool a forked parent left behind
        _writes = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="stackcurate-write"))
    return _writes[1]


class AtomicParquetWriter:
    """Stream tables into `path`; the file appears under that name only on :meth:`commit`. Each table is written
    on the write thread while the caller goes on; the next write, :meth:`commit` or :meth:`abort` waits for it
    (and raises its error: a full disk stops the shard where it stopped before)."""

    def __init__(self, fs: pafs.FileSystem, path: str, schema: pa.Schema) -> None:
        self.fs, self.path, self.schema = fs, path, schema
        self.tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        self.rows = 0
        self._writer = pq.ParquetWriter(self.tmp, schema, filesystem=fs, compression=PARQUET_COMPRESSION)
        self._pending: Future | None = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            table = table.cast(self.schema) if table.schema != self.schema else table
            self._wait()
            self._pending = _write_thread().submit(self._writer.write_table, table)
            self.rows += table.num_rows

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def commit(self) -> None:
        try:
            self._wait()
            self._writer.close()
        except BaseException:
            self.abort()  # no partial file left behind (a full disk)
            raise
        self.fs.move(self.tmp, self.path)

    def abort(self) -> None:
        """Drop the temporary file; never raises (it runs while another error, e.g. a full disk, unwinds)."""
        try:
            self._wait()
        except BaseException:  # the error being unwound is the one to report
            pass
        try:
            self._writer.close()
        except (OSError, pa.ArrowException):
            pass
        try:
            self.fs.delete_file(self.tmp)
        except OSError:
            pass


def scan_parquet_slice(
    fs: pafs.FileSystem, path: str, start: int, stop: int, *, batch_rows: int, columns: list[str] | None = None
) -> Iterator[pa.Table]:
    """Yield rows `[start, stop)` of a Parquet file in tables of at most `batch_rows`, one row group at a time.

    A row group that cannot be read is skipped and the ones after it are still read; once the slice is done,
    :class:`UnreadableRowGroups` names every skipped one (see :func:`scan_parquet_rows`)."""
    for _, table in scan_parquet_rows(fs, path, start, stop, batch_rows=batch_rows, columns=columns):
        yield table


def scan_parquet_rows(
    fs: pafs.FileSystem, path: str, start: int, stop: int, *, batch_rows: int, columns: list[str] | None = None
) -> Iterator[tuple[int, pa.Table]]:
    """Like :func:`scan_parquet_slice`, with the file row number of each table's first row.

    Raises:
        UnreadableRowGroups: After the last readable row group, when some row group of the slice could not
            be read (a corrupt page): the rows around it are not lost with it.
        OSError: At once, when the read failed transiently (:func:`transient_cause`): the store is down, the
            file is not bad.
    """
    pf = pq.ParquetFile(path, filesystem=fs)
    offset = 0
    bad: list[str] = []
    for rg in range(pf.num_row_groups):
        n = pf.metadata.row_group(rg).num_rows
        lo, hi = max(start, offset), min(stop, offset + n)
        if lo < hi:
            try:
                table = pf.read_row_group(rg, columns=columns).slice(lo - offset, hi - lo)
            except (OSError, pa.ArrowException) as exc:
                if transient_cause(exc) is not None:
                    raise
                bad.append(f"row group {rg} (rows {lo:,} to {hi - 1:,}) of {path}: {type(exc).__name__}: {exc}")
            else:
                first = lo
                for batch in table.to_batches(max_chunksize=batch_rows):
                    yield first, pa.Table.from_batches([batch])
                    first += batch.num_rows
        offset += n
        if offset >= stop:
            break
    if bad:
        raise UnreadableRowGroups(bad)


class UnreadableRowGroups(OSError):
    """Row groups of a Parquet file that could not be read, one description each (`details`); raised by
    :func:`scan_parquet_rows` after the readable ones were yielded. An OSError, as the error it stands
    for was: code that caught the read failure before still catches it."""

    def __init__(self, details: list[str]) -> None:
        super().__init__(f"{len(details)} unreadable row group(s): " + "; ".join(details))
        self.details = details


class StoreUnavailable(Exception):  # noqa: N818 - a state, not a failure of the code; named for what the user reads
    """A store stayed unreachable (refused, timed out, throttled, 5xx) through the retries: the shard reading
    it is left uncommitted for a rerun instead of recording its rows as bad input. Not an OSError, so code that
    turns a bad input file's OSError into an error row cannot take it for one."""


# Transient failure kinds by what pyarrow's S3 client (HTTP status, AWS error names, curl codes) or the OS
# says. Anything else (404, 403, a corrupt object) is permanent: retrying would give the same answer.
_TRANSIENT_STATUS = re.compile(r"HTTP status (429|5\d\d)")
_TRANSIENT_PATTERNS = [
    (re.compile(r"SLOW_?DOWN|THROTTL|TooManyRequests|REQUEST_LIMIT_EXCEEDED", re.I), "throttled"),
    (re.compile(r"curlCode: 7\b|could not connect|connection refused", re.I), "could not connect"),
    (re.compile(r"curlCode: 6\b|could not resolve", re.I), "could not resolve the host"),
    (re.compile(r"curlCode: 28\b|timeout was reached|timed out|RequestTimeout", re.I), "timed out"),
    (re.compile(r"curlCode: (?:52|55|56)\b|connection reset|empty reply|broken pipe", re.I), "connection reset"),
    (re.compile(r"SERVICE_UNAVAILABLE|INTERNAL_FAILURE|InternalError", re.I), "server error"),
    (re.compile(r"NETWORK_CONNECTION"), "network error"),
]
_TRANSIENT_ERRNOS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.ECONNABORTED: "connection reset",
    errno.EPIPE: "connection reset",
    errno.ETIMEDOUT: "timed out",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.ENETDOWN: "network unreachable",
}


def transient_cause(exc: BaseException) -> str | None:
    """What went wrong, in a few words, when `exc` is a failure worth retrying (the store or the network, not
    the object); None for a permanent one."""
    if not isinstance(exc, OSError) or isinstance(exc, FileNotFoundError | PermissionError | UnreadableRowGroups):
        return None
    if exc.errno in _TRANSIENT_ERRNOS:
        return _TRANSIENT_ERRNOS[exc.errno]
    message = str(exc)
    status = _TRANSIENT_STATUS.search(message)
    if status:  # 503 is S3's SlowDown
        return f"{'throttled' if status.group(1) in ('429', '503') else 'server error'} (HTTP {status.group(1)})"
    for pattern, cause in _TRANSIENT_PATTERNS:
        if pattern.search(message):
            return cause
    return None


def short_error(exc: BaseException) -> str:
    """The informative part of an error for a one-line message (the AWS error without the key and the curl
    details, which vary from request to request)."""
    message = str(exc)
    aws = re.search(r"AWS Error .*?(?=; Details:|$)", message, re.S)
    return " ".join((aws.group(0) if aws else f"{type(exc).__name__}: {message}").split())[:300]


@contextlib.contextmanager
def machine_lock(path: Path, *, optional: bool = False) -> Iterator[None]:
    """Held by one process of this machine at a time: an exclusive `flock` on the local file `path`, created if
    missing and opened read-only, so that another user's copy serves too. `optional`: where the file cannot be
    opened, go on without the lock (otherwise the OSError)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        if not optional:
            raise
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock

"""The content store (`content/<sha1>` gzip objects, local or S3), read with many requests in flight.

A GET on the real store costs tens of milliseconds and most objects are a few KB, so a reader that waits for
each object in turn spends its life waiting. Here obstore (the Rust `object_store` client, async) keeps up to
`concurrency` reads in flight on one event loop, in a thread of its own, while the worker's own thread
inflates, hashes and decodes the objects already fetched. Written by hand around obstore because no library
streams a list of keys back in order with a bound on the bytes held:

- `fetch(requests)` returns one future per request, in order; the caller takes each result and then calls
  `release(request)`. The bytes of objects fetched and not yet released never pass `buffer_bytes` (each
  read reserves its metadata size first, in order, so the result the caller waits for always has its share).
- A read that fails transiently (refused, timed out, cut off, throttled, 5xx) is retried `retries` times
  after an exponential backoff with jitter; obstore's own retries are off so that the two do not multiply.
- One that still fails makes the store give up: queued reads are skipped (the shard will be redone, so they
  would be thrown away) and `failure` says why. The process also remembers the store as down, so its next
  shard tries each read once before giving up too, instead of waiting through the backoff again; a store that
  is back answers that one try, and retries are full again.

Inflating an object (`gunzip_bounded`) stops at the size cap, so a decompression bomb costs at most that much
memory.
"""

import asyncio
import os
import random
import re
import threading
import zlib
from collections import deque
from collections.abc import Awaitable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from stackcurate.core import io
from stackcurate.core.errors import StackcurateError

MAX_BACKOFF_S = 30.0  # whatever fetch_backoff and fetch_retries say
CONNECT_TIMEOUT = "10s"
READ_TIMEOUT = "60s"  # a whole GET; objects are at most max_compressed_bytes (10 MB by default)

# What obstore (reqwest / hyper underneath) says of a failure worth retrying; anything else (404, 403, a
# bad key) is permanent: retrying would give the same answer.
_STATUS = re.compile(r"status code: (\d{3})")
_TRANSIENT = [
    (re.compile(r"kind: Connect|error trying to connect|connection refused", re.I), "could not connect"),
    (re.compile(r"kind: Timeout|timed out|deadline has elapsed", re.I), "timed out"),
    (re.compile(r"kind: (?:Request|Body|Decode)|connection (?:closed|reset)|broken pipe|EOF", re.I), "cut off"),
    (re.compile(r"SlowDown|Throttl|TooManyRequests", re.I), "throttled"),
]
_REQUEST = re.compile(r"Error performing \w+ \S+(?: in \S+)? - ")  # names the object and the time it took


@dataclass(frozen=True, kw_only=True)
class FetchOptions:
    """How the content store is read (see IngestConfig: fetch_concurrency, fetch_buffer_mb, fetch_retries,
    fetch_backoff)."""

    concurrency: int
    buffer_bytes: int
    retries: int
    backoff: float


@dataclass(frozen=True)
class Request:
    """One object to read: its key under the store's root, the size past which its bytes are not read (the
    result is then the size), and the bytes it reserves of the buffer until released."""

    key: str
    cap: int
    reserve: int


class GaveUp(Exception):  # noqa: N818 - a state of the store, named for what the reader checks
    """The store gave up (this read, or another, failed through its retries); the read was skipped."""


def transient_cause(exc: BaseException) -> str | None:
    """What went wrong, in a few words, when an obstore error is worth retrying; None for a permanent one."""
    if isinstance(exc, FileNotFoundError | PermissionError):
        return None
    if isinstance(exc, OSError) and (cause := io.transient_cause(exc)) is not None:
        return cause  # the local disk: the OS's own error
    message = str(exc)
    if status := _STATUS.search(message):
        code = status.group(1)
        if code in ("429", "503"):  # 503 is S3's SlowDown
            return f"throttled (HTTP {code})"
        return f"server error (HTTP {code})" if code.startswith("5") else None
    return next((cause for pattern, cause in _TRANSIENT if pattern.search(message)), None)


def short_error(exc: BaseException) -> str:
    """The first line of an obstore error, without the request's URL and timing, so that the same failure of
    many reads reads the same."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return " ".join(_REQUEST.sub("", first).split())[:300]


class _Loop:
    """One asyncio loop per process, in a daemon thread, shared by every store the process reads."""

    _instance: ClassVar["tuple[int, asyncio.AbstractEventLoop] | None"] = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._instance is None or cls._instance[0] != os.getpid():  # a forked child has no loop thread
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="stackcurate-fetch", daemon=True).start()
                cls._instance = (os.getpid(), loop)
            return cls._instance[1]


class _Budget:
    """Bytes that reads may hold, handed out first come, first served (the loop's side only)."""

    def __init__(self, total: int) -> None:
        self.total = self.free = max(1, total)
        self.waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    def share(self, n: int) -> int:
        """What a read of `n` bytes takes: an object larger than the whole buffer is still read, alone."""
        return min(n, self.total)

    async def take(self, n: int) -> None:
        n = self.share(n)
        if self.waiting or self.free < n:
            ready = asyncio.get_running_loop().create_future()
            self.waiting.append((n, ready))
            await ready
        else:
            self.free -= n

    def give(self, n: int) -> None:
        self.free += n
        while self.waiting and self.waiting[0][0] <= self.free:
            need, ready = self.waiting.popleft()
            if not ready.cancelled():
                self.free -= need
                ready.set_result(None)


def _open(uri: str, s3: io.S3Options) -> Any:
    """The obstore store of `uri` (an S3 URI or a local folder) and its settings."""
    from obstore.store import LocalStore, S3Store

    if uri.startswith("s3://"):
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        config: dict[str, Any] = {"region": s3.region}
        if s3.endpoint:
            config["endpoint"] = s3.endpoint
        if s3.anonymous:
            config["skip_signature"] = True
        return S3Store(
            bucket,
            prefix=prefix.strip("/") or None,
            config=config,  # pyright: ignore[reportArgumentType]
            client_options={"allow_http": True, "connect_timeout": CONNECT_TIMEOUT, "timeout": READ_TIMEOUT},
            retry_config={"max_retries": 0},
        )
    check_store(uri)
    return LocalStore(Path(uri.removeprefix("file://")).resolve())


def check_store(uri: str) -> None:
    """A one-line error for a content store that is neither an S3 URI nor a local folder."""
    if uri.startswith("s3://"):
        return
    if "://" in uri and not uri.startswith("file://"):
        raise StackcurateError(f"the content store must be a local folder or s3:// URI, not {uri}")
    if not Path(uri.removeprefix("file://")).is_dir():
        raise StackcurateError(f"the content store {uri} is not a folder; check --content")


class ContentStore:
    """The content store as one shard reads it (see the module docstring)."""

    _down: ClassVar[set[str]] = set()  # stores whose last read in this process failed through its retries

    def __init__(self, uri: str, s3: io.S3Options, options: FetchOptions) -> None:
        self.store = _open(uri, s3)
        where = f" at {s3.endpoint}" if uri.startswith("s3://") and s3.endpoint else ""
        self.name = f"the content store {uri}{where}"
        self.options = options
        self.failure: str | None = None
        self._loop = _Loop.get()
        self._budget = _Budget(options.buffer_bytes)
        self._slots = asyncio.Semaphore(max(1, options.concurrency))
        self._gave_up = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    def fetch(self, requests: list[Request]) -> list["Future[bytes | int]"]:
        """Start reading `requests`; one future each, in order: the object's bytes, or its size when over the
        request's cap. A permanent failure is the future's exception (FileNotFoundError for a missing
        object); a skipped read's is GaveUp."""
        futures: list[Future[bytes | int]] = [Future() for _ in requests]
        self._loop.call_soon_threadsafe(self._start, list(zip(requests, futures, strict=True)))
        return futures

    def release(self, request: Request) -> None:
        """The caller is done with this read's bytes: its share of the buffer goes to the reads waiting."""
        self._loop.call_soon_threadsafe(self._budget.give, self._budget.share(request.reserve))

    def close(self) -> None:
        """Stop the reads still running or queued (a reader that stopped early: their results are not wanted)."""
        self._loop.call_soon_threadsafe(self._cancel_all)

    # -- the loop's side ----------------------------------------------------------------------------------

    def _start(self, work: list[tuple[Request, "Future[bytes | int]"]]) -> None:
        for request, future in work:
            task = self._loop.create_task(self._read(request, future))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def _read(self, request: Request, future: "Future[bytes | int]") -> None:
        reserved = False
        try:
            await self._budget.take(request.reserve)
            reserved = True
            async with self._slots:
                result: bytes | int | BaseException = await self._get_with_retries(request)
        except asyncio.CancelledError:
            if reserved:  # nobody will release it
                self._budget.give(self._budget.share(request.reserve))
            future.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the reader's thread as the future's exception
            result = exc
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)

    async def _get(self, key: str, cap: int) -> bytes | int:
        import obstore

        got = await obstore.get_async(self.store, key)
        size = got.meta["size"]
        if size > cap:
            return size  # the body is not read
        return bytes(await got.bytes_async())

    async def _get_with_retries(self, request: Request) -> bytes | int:
        tries = 1 if self.name in self._down else 1 + self.options.retries
        error = f"{self.name} is unavailable"
        for attempt in range(tries):
            if self._gave_up.is_set():
                raise GaveUp
            try:
                data = await self._get(request.key, request.cap)
                self._down.discard(self.name)
                return data
            except Exception as exc:  # noqa: BLE001 - sorted below: transient or permanent
                cause = transient_cause(exc)
                if cause is None:
                    raise
                error = f"{self.name} is unavailable: {cause} ({short_error(exc)})"
            if attempt + 1 < tries:
                # Equal jitter: at least half the doubled delay, so retries back off, and spread, so the reads
                # that failed together do not come back together.
                delay = min(self.options.backoff * 2**attempt, MAX_BACKOFF_S)
                await _first(asyncio.sleep(delay / 2 + random.uniform(0, delay / 2)), self._gave_up.wait())
        self.failure = self.failure or error
        self._down.add(self.name)
        self._gave_up.set()
        raise GaveUp


async def _first(*waits: Awaitable[Any]) -> None:
    """Wait until the first of `waits` is done; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()


# --- the objects: gzip, inflated within the size cap -----------------------------------------------------

_INFLATE_CHUNK = 1 << 16


@dataclass(frozen=True)
class Inflated:
    """Result of a bounded gunzip: the bytes, or why there are none."""

    data: bytes | None
    reason: str | None = None
    detail: str | None = None


def gunzip_bounded(compressed: bytes, max_bytes: int, bomb_ratio: float) -> Inflated:
    """Inflate a gzip object, never holding more than `max_bytes + 1` inflated bytes.

    Past the cap the file is `too_large`, or a `decompression_bomb` when the bytes inflated so far are more
    than `bomb_ratio` times the compressed bytes read so far (no source file compresses like that).
    """
    out = bytearray()
    pending = compressed
    try:
        while pending:  # gzip allows concatenated members
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pos, tail = 0, b""
            while not inflater.eof:
                if tail:
                    chunk = tail
                elif pos < len(pending):
                    chunk = pending[pos : pos + _INFLATE_CHUNK]
                    pos += len(chunk)
                else:
                    return Inflated(None, "corrupt_gzip", "truncated gzip stream")
                # max_length bounds the output of this call; it is always >= 1 here (0 would mean unbounded).
                out += inflater.decompress(chunk, max_bytes + 1 - len(out))
                tail = inflater.unconsumed_tail
                if len(out) > max_bytes:
                    consumed = len(compressed) - len(pending) + pos - len(tail)
                    if len(out) > bomb_ratio * max(consumed, 1):
                        return Inflated(
                            None, "decompression_bomb", f"passed {max_bytes} bytes after {consumed} compressed bytes"
                        )
                    return Inflated(None, "too_large", f"more than {max_bytes} bytes once inflated")
            pending = inflater.unused_data + pending[pos:]
    except zlib.error as exc:
        return Inflated(None, "corrupt_gzip", str(exc))
    return Inflated(bytes(out))

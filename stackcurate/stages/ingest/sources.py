"""Readers for each ingest source. Each yields *raw* tables: one row per file, with the original bytes in
`data`, or a `reason` saying why there are none (missing blob, unsafe tar member, ...).

Sources:
- `stack_v2`: The Stack v2 file-level metadata Parquet plus a content store holding `content/<blob_id>`
  gzip objects (local folder or S3), many reads in flight at once (`fetch.py`: latency, not CPU, bounds a
  reader that waits for each object).
- `flat`: a SWH vault flat bundle, `swh:1:dir:<id>.tar.gz` whose top folder is `swh:1:dir:<id>/`.
- `git_bare`: a SWH vault git-bare bundle, `swh_1_rev_<id>.git.tar` holding `swh:1:rev:<id>.git/`; the files
  of the revision's tree are taken.
- `repo`: a local folder (walked) or git repository (the files of HEAD).
"""

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import DOC_ID_ORDINAL_BITS, FILE_SCHEMA
from stackcurate.core.stage import Shard
from stackcurate.sources import fetch

RAW_SCHEMA = pa.schema(
    [f for f in FILE_SCHEMA if f.name != "content"]
    + [pa.field("data", pa.large_binary()), pa.field("reason", pa.string()), pa.field("detail", pa.string())]
)
_METADATA_COLUMNS = [
    f.name for f in RAW_SCHEMA if f.name not in {"doc_id", "source", "origin", "data", "reason", "detail", "swhid"}
]
_HEX40 = re.compile(r"[0-9a-f]{40}")
_BATCH_BYTES = 64 << 20


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The extraction rules every source applies (see IngestConfig for their meaning)."""

    max_compressed_bytes: int
    max_bytes: int
    max_depth: int
    bomb_ratio: float


def doc_id(source_index: int, ordinal: int) -> int:
    return (source_index << DOC_ID_ORDINAL_BITS) | ordinal


def depth(path: str) -> int:
    return len(PurePosixPath(path.lstrip("/")).parts)


@dataclass
class _RawBatch:
    """Collects raw rows and cuts them into bounded tables."""

    shard: Shard
    source: str
    batch_rows: int
    common: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    ordinal: int = 0
    size: int = 0

    def add(
        self, path: str, data: bytes | None = None, reason: str | None = None, detail: str | None = None, **extra: Any
    ) -> None:
        # File names are bytes; one that is not UTF-8 is kept readable (\x.. escapes) rather than lost.
        path = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        row = {
            **self.common,
            **extra,
            "doc_id": doc_id(self.shard.source_index, self.ordinal),
            "source": self.source,
            "origin": self.shard.path,
            "path": "/" + path.lstrip("/"),
            "data": data,
            "reason": reason,
            "detail": detail,
        }
        if data is not None and "length_bytes" not in extra:
            row["length_bytes"] = len(data)
        self.rows.append(row)
        self.ordinal += 1
        self.size += len(data or b"")

    def full(self) -> bool:
        return len(self.rows) >= self.batch_rows or self.size >= _BATCH_BYTES

    def flush(self) -> pa.Table:
        table = pa.Table.from_pylist(self.rows, schema=RAW_SCHEMA)
        self.rows, self.size = [], 0
        return table


# --- The Stack v2: metadata Parquet + content store -------------------------------------------------------

_REQUIRED_COLUMNS = ("blob_id", "path")
_METADATA_TYPES = {f.name: f.type for f in RAW_SCHEMA if f.name in _METADATA_COLUMNS}


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _type_fits(actual: pa.DataType, target: pa.DataType) -> bool:
    """Whether a metadata column of type `actual` holds `target` values: the same kind of value (any integer
    width, any timestamp unit) or text to parse. A value that then fails to convert is a problem of its row
    only (`bad_metadata`); a column of another kind (a list where a count is expected) is a wrong file."""
    if isinstance(actual, pa.DictionaryType):
        actual = actual.value_type
    if pa.types.is_null(actual):  # an all-null column, as pandas writes one
        return True
    if _is_text(target):
        return _is_text(actual) or pa.types.is_binary(actual) or pa.types.is_large_binary(actual)
    if pa.types.is_integer(target):
        return _is_text(actual) or pa.types.is_integer(actual) or pa.types.is_floating(actual)
    if pa.types.is_boolean(target):
        return _is_text(actual) or pa.types.is_boolean(actual)
    if pa.types.is_timestamp(target):
        return _is_text(actual) or pa.types.is_timestamp(actual) or pa.types.is_date(actual)
    if isinstance(target, pa.ListType):
        return isinstance(actual, pa.ListType | pa.LargeListType) and _type_fits(actual.value_type, target.value_type)
    return actual == target


def check_metadata(uri: str, schema: pa.Schema) -> None:
    """Raise a one-line error naming the file and the column when a metadata file lacks a required column or
    has a column of the wrong kind (see :func:`_type_fits`); other columns are ignored."""
    for name in _REQUIRED_COLUMNS:
        if name not in schema.names:
            raise StackcurateError(
                f"metadata {uri} has no column '{name}'; The Stack v2 file-level metadata needs "
                f"{' and '.join(_REQUIRED_COLUMNS)} (the others are optional)"
            )
    for name, target in _METADATA_TYPES.items():
        if len(found := schema.get_all_field_indices(name)) > 1:
            raise StackcurateError(f"metadata {uri} has {len(found)} columns named '{name}'")
        if found and not _type_fits(actual := schema.field(name).type, target):
            expected = target if _is_text(target) else f"{target} (or text holding one)"
            raise StackcurateError(f"metadata {uri}: column '{name}' is {actual}, expected {expected}")


def _conform_metadata(meta: pa.Table) -> tuple[pa.Table, list[str | None]]:
    """The known metadata columns converted to the record types, and per row what could not be (None: all).

    A column converts as a whole when it can (the usual case, at Arrow speed); otherwise value by value, and a
    value that fails (`'12 KB'` as length_bytes, 3.5 stars) leaves its row a problem and the others intact.
    """
    problems: list[list[str]] = [[] for _ in range(meta.num_rows)]
    columns = {}
    for name, target in _METADATA_TYPES.items():
        if name not in meta.column_names:
            continue
        column = meta.column(name)
        # Nanosecond dates (The Stack v2's) are cut to microseconds: a truncation, not a bad value. Any other
        # lossy conversion (3.5 stars, seconds past the microsecond range) is one.
        from_ns = isinstance(column.type, pa.TimestampType) and column.type.unit == "ns"
        safe = not (from_ns and pa.types.is_timestamp(target))
        try:
            columns[name] = column.cast(target, safe=safe)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            parts = []
            for i in range(len(column)):
                value = column.slice(i, 1)
                try:
                    parts.append(value.cast(target, safe=safe).combine_chunks())
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    problems[i].append(f"{name}: {str(value.to_pylist()[0])[:100]!r} is not {target}")
                    parts.append(pa.nulls(1, target))
            columns[name] = pa.chunked_array(parts, target)
    for i, path in enumerate(columns["path"].to_pylist()):
        if not path:
            problems[i].append("path is empty")
    return pa.table(columns), ["; ".join(p) if p else None for p in problems]


def _request(row: dict[str, Any], problem: str | None, limits: Limits) -> fetch.Request | tuple[None, str, str]:
    """What to read for one metadata row, or why nothing is read (data, reason, detail)."""
    if problem is not None:
        return None, "bad_metadata", problem
    blob_id, length = row.get("blob_id"), row.get("length_bytes")
    if length is not None and length > limits.max_bytes:
        # The Stack v2 metadata already gives the decoded size: no need to download what the cap drops.
        return None, "too_large", f"length_bytes {length} (cap {limits.max_bytes}), not fetched"
    if not blob_id or not _HEX40.fullmatch(blob_id):
        return None, "missing_blob", f"invalid blob_id {blob_id!r}"
    # gzip adds a few bytes to what does not compress; a row with no length_bytes may be anything up to the cap
    reserve = length + 1024 if length is not None else limits.max_bytes
    return fetch.Request(f"content/{blob_id}", limits.max_compressed_bytes, reserve)


def _fetched(
    result: "bytes | int | BaseException", key: str, content: str, limits: Limits
) -> tuple[bytes | None, str | None, str | None]:
    if isinstance(result, fetch.GaveUp):
        return None, None, None  # the shard is not committed: read_stack_v2 raises once the batch is done
    if isinstance(result, FileNotFoundError):
        return None, "missing_blob", f"no object {key} in {content}"
    if isinstance(result, BaseException):
        return None, "fetch_failed", fetch.short_error(result)
    if isinstance(result, int):
        return None, "too_large", f"{result} compressed bytes (cap {limits.max_compressed_bytes})"
    inflated = fetch.gunzip_bounded(result, limits.max_bytes, limits.bomb_ratio)
    return inflated.data, inflated.reason, inflated.detail


@dataclass
class _Batch:
    """Metadata rows whose objects are being read."""

    rows: list[dict[str, Any]]
    numbers: list[int]
    plans: list["fetch.Request | tuple[None, str, str]"]
    futures: "list[Future[bytes | int]]"


def read_stack_v2(
    shard: Shard,
    content: str,
    s3: io.S3Options,
    limits: Limits,
    batch_rows: int,
    options: fetch.FetchOptions,
    wanted: Callable[[str | None], bool] | None = None,
) -> Iterator[pa.Table]:
    """Metadata rows `[start, stop)` of one Parquet file, each with its bytes fetched from the content store
    (only the rows whose path is `wanted`, when given). The reads of the next batches are in flight while a
    batch is handed on (at least `2 * concurrency` objects ahead, within the fetch buffer).

    Raises:
        io.StoreUnavailable: The content store stayed unavailable through the retries; the shard must not be
            committed (run_shard leaves it for the next run).
        io.UnreadableRowGroups: After the other rows, when some row groups of the metadata could not be read.
    """
    meta_fs, meta_path = io.filesystem(shard.path, s3)
    store = fetch.ContentStore(content, s3, options)
    ahead: deque[_Batch] = deque()
    in_flight = 0
    unreadable: io.UnreadableRowGroups | None = None  # raised by the scan after its last rows: ours go first
    try:
        try:
            scan = io.scan_parquet_rows(meta_fs, meta_path, shard.start, shard.stop, batch_rows=batch_rows)
            for first, meta in scan:
                meta, problems = _conform_metadata(meta)
                rows = meta.to_pylist()
                numbers = list(range(first, first + len(rows)))
                if wanted is not None:
                    picked = [i for i, row in enumerate(rows) if wanted(row.get("path"))]
                    rows, problems = [rows[i] for i in picked], [problems[i] for i in picked]
                    numbers = [numbers[i] for i in picked]
                plans = [_request(row, problem, limits) for row, problem in zip(rows, problems, strict=True)]
                futures = store.fetch([p for p in plans if isinstance(p, fetch.Request)])
                ahead.append(_Batch(rows, numbers, plans, futures))
                in_flight += len(futures)
                while ahead and in_flight - len(ahead[0].futures) >= 2 * options.concurrency:
                    in_flight -= len(ahead[0].futures)
                    yield _finish(ahead.popleft(), store, content, limits, shard)
        except io.UnreadableRowGroups as exc:
            unreadable = exc
        while ahead:
            yield _finish(ahead.popleft(), store, content, limits, shard)
    finally:
        store.close()
    if unreadable is not None:
        raise unreadable


def _finish(batch: _Batch, store: fetch.ContentStore, content: str, limits: Limits, shard: Shard) -> pa.Table:
    """The raw table of a batch whose reads were started: each row with its bytes, or why it has none."""
    futures = iter(batch.futures)
    for number, row, plan in zip(batch.numbers, batch.rows, batch.plans, strict=True):
        if isinstance(plan, fetch.Request):
            future = next(futures)
            try:
                result: bytes | int | BaseException = future.result()
            except BaseException as exc:  # noqa: BLE001 - the read's own failure, sorted by _fetched
                result = exc
            data, reason, detail = _fetched(result, plan.key, content, limits)
            store.release(plan)
        else:
            data, reason, detail = plan
        # doc_id is the row's number in the file, so it holds when a row group before it is unreadable.
        row.update(
            doc_id=doc_id(shard.source_index, number),
            source="stack_v2",
            origin=shard.path,
            data=data,
            reason=reason,
            detail=detail,
        )
        if row.get("content_id"):
            row["swhid"] = f"swh:1:cnt:{row['content_id']}"
    if store.failure is not None:
        raise io.StoreUnavailable(store.failure)
    return pa.Table.from_pylist(batch.rows, schema=RAW_SCHEMA)


# --- Vault bundles ----------------------------------------------------------------------------------------


def _raise_if_transient(exc: BaseException, uri: str) -> None:
    """A bundle whose store failed transiently is not corrupt: leave the shard for a rerun (run_shard)."""
    if (cause := io.transient_cause(exc)) is not None:
        raise io.StoreUnavailable(f"{uri} could not be read: {cause} ({io.short_error(exc)})") from exc


def _escapes(name: str) -> bool:
    p = PurePosixPath(name)
    return name.startswith("/") or ".." in p.parts


def _link_escapes(member: tarfile.TarInfo) -> bool:
    """Whether a symlink or hard link points outside the bundle."""
    target = member.linkname
    if target.startswith("/"):
        return True
    base = PurePosixPath(member.name).parent if member.issym() else PurePosixPath(".")
    depth_ = len(base.parts)
    for part in PurePosixPath(target).parts:
        depth_ += -1 if part == ".." else (0 if part == "." else 1)
        if depth_ < 0:
            return True
    return False


def _member_problem(member: tarfile.TarInfo) -> tuple[str, str] | None:
    """(reason, detail) for a tar member that must not be taken as a file, or None for a regular file."""
    if _escapes(member.name):
        return "unsafe_member", f"path escapes the bundle: {member.name}"
    if member.isdir():
        return None
    if member.issym() or member.islnk():
        kind = "symlink" if member.issym() else "hard link"
        if _link_escapes(member):
            return "unsafe_member", f"{kind} points outside the bundle: {member.name} -> {member.linkname}"
        return "symlink", f"{kind} to {member.linkname}"
    if member.isdev() or member.isfifo():
        return "unsafe_member", f"device or fifo: {member.name}"
    if not member.isfile():
        return "unsafe_member", f"unsupported tar member type {member.type!r}: {member.name}"
    return None


def read_flat_bundle(shard: Shard, limits: Limits, batch_rows: int, s3: io.S3Options) -> Iterator[pa.Table]:
    """Files of a flat bundle, streamed: nothing is extracted to disk, memory is bounded by the size cap."""
    fs, path = io.filesystem(shard.path, s3)
    swhid = _swhid_from_name(shard.path, "dir")
    batch = _RawBatch(
        shard, "vault_flat", batch_rows, common={"directory_id": swhid and swhid[10:], "repo_name": swhid}
    )
    try:
        with fs.open_input_stream(path) as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
            for member in tar:
                name = _strip_top(member.name)
                problem = _member_problem(member)
                if problem:
                    batch.add(name, reason=problem[0], detail=problem[1])
                elif member.isdir():
                    continue
                elif depth(name) > limits.max_depth:
                    batch.add(name, reason="too_deep", detail=f"depth {depth(name)} > {limits.max_depth}")
                elif member.size > limits.max_bytes:
                    batch.add(
                        name,
                        reason="too_large",
                        detail=f"{member.size} bytes (cap {limits.max_bytes})",
                        length_bytes=member.size,
                    )
                else:
                    f = tar.extractfile(member)
                    batch.add(name, data=f.read() if f else b"")
                if batch.full():
                    yield batch.flush()
    except (tarfile.TarError, EOFError, OSError) as exc:  # a broken gzip stream is a tarfile.ReadError
        _raise_if_transient(exc, shard.path)
        batch.add("", reason="corrupt_bundle", detail=f"{type(exc).__name__}: {exc}")
    if batch.rows:
        yield batch.flush()


def _strip_top(name: str) -> str:
    """Drop the bundle's top folder (`swh:1:dir:<id>/` or `swh:1:rev:<id>.git/`)."""
    parts = PurePosixPath(name).parts
    return "/".join(parts[1:]) if len(parts) > 1 and parts[0].startswith("swh:1:") else name


def _swhid_from_name(uri: str, kind: str) -> str | None:
    m = re.search(rf"swh[:_]1[:_]{kind}[:_]([0-9a-f]{{40}})", uri.rsplit("/", 1)[-1])
    return f"swh:1:{kind}:{m.group(1)}" if m else None


def read_git_bare_bundle(
    shard: Shard, limits: Limits, batch_rows: int, s3: io.S3Options, tmp_dir: str | None
) -> Iterator[pa.Table]:
    """Files of the revision's tree in a git-bare bundle.

    The bare repository is extracted (member by member, each checked, to a private temporary folder) because
    git objects can only be read from a repository on disk; git itself then lists and reads the tree.
    """
    fs, path = io.filesystem(shard.path, s3)
    swhid = _swhid_from_name(shard.path, "rev")
    batch = _RawBatch(shard, "vault_git", batch_rows, common={"repo_name": swhid})
    workdir = tempfile.mkdtemp(prefix="stackcurate-git-", dir=tmp_dir)
    try:
        git_dir = None
        try:
            with fs.open_input_stream(path) as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
                for member in tar:
                    problem = _member_problem(member)
                    if problem:
                        if problem[0] == "unsafe_member":
                            batch.add(member.name, reason=problem[0], detail=problem[1])
                        continue
                    try:
                        tar.extract(member, workdir, filter="data")
                    except tarfile.FilterError as exc:
                        batch.add(member.name, reason="unsafe_member", detail=str(exc))
                        continue
                    top = PurePosixPath(member.name).parts[0]
                    if top.endswith(".git") and git_dir is None:
                        git_dir = os.path.join(workdir, top)
        except (tarfile.TarError, EOFError, OSError) as exc:
            _raise_if_transient(exc, shard.path)
            batch.add("", reason="corrupt_bundle", detail=f"{type(exc).__name__}: {exc}")
            git_dir = None
        if git_dir is None:
            if not batch.rows:
                batch.add("", reason="corrupt_bundle", detail="no <name>.git folder in the bundle")
        else:
            rev = swhid[10:] if swhid else "HEAD"
            yield from _read_git_tree(git_dir, rev, batch, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if batch.rows:
        yield batch.flush()


# --- git trees (bundles and local repositories) -----------------------------------------------------------

_GIT_SAFE = ["-c", "safe.directory=*", "-c", "core.fsmonitor=false"]


def _git(git_dir: str, *args: str) -> bytes:
    return subprocess.run(
        ["git", *_GIT_SAFE, "--git-dir", git_dir, *args],
        check=True,
        capture_output=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
    ).stdout


def _read_git_tree(git_dir: str, rev: str, batch: _RawBatch, limits: Limits) -> Iterator[pa.Table]:
    """Yield the blobs of `rev`'s tree, in `git ls-tree` (path) order, through one `git cat-file --batch`."""
    try:
        commit = _git(git_dir, "rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()
        tree = _git(git_dir, "rev-parse", f"{commit}^{{tree}}").decode().strip()
        listing = _git(git_dir, "ls-tree", "-r", "-l", "-z", "--full-tree", commit)
    except subprocess.CalledProcessError as exc:
        batch.add("", reason="corrupt_bundle", detail=f"git: {exc.stderr.decode(errors='replace').strip()[:500]}")
        return
    batch.common.update(revision_id=commit, directory_id=tree)
    wanted: list[tuple[str, str]] = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, oid, size = meta.decode().split()
        path = raw_path.decode("utf-8", errors="surrogateescape")
        if kind == "commit":
            batch.add(path, reason="submodule", detail=f"submodule at {oid}")
        elif mode == "120000":
            batch.add(path, reason="symlink", detail="symlink in the tree")
        elif depth(path) > limits.max_depth:
            batch.add(path, reason="too_deep", detail=f"depth {depth(path)} > {limits.max_depth}")
        elif int(size) > limits.max_bytes:
            batch.add(
                path,
                reason="too_large",
                detail=f"{size} bytes (cap {limits.max_bytes})",
                length_bytes=int(size),
                content_id=oid,
            )
        else:
            wanted.append((path, oid))
            continue
        if batch.full():
            yield batch.flush()
    if not wanted:
        return
    proc = subprocess.Popen(
        ["git", *_GIT_SAFE, "--git-dir", git_dir, "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for path, oid in wanted:
            proc.stdin.write(oid.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) != 3:
                batch.add(path, reason="missing_blob", detail=f"git object {oid} is missing")
            else:
                data = proc.stdout.read(int(header[2]))
                proc.stdout.read(1)  # the newline after each object
                batch.add(path, data=data, content_id=oid)
            if batch.full():
                yield batch.flush()
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


# --- local folders and repositories -----------------------------------------------------------------------


def read_repo(shard: Shard, limits: Limits, batch_rows: int) -> Iterator[pa.Table]:
    """A local git repository (the files of HEAD, as SWH would archive them) or a plain folder (walked)."""
    root = Path(shard.path)
    batch = _RawBatch(shard, "local", batch_rows, common={"repo_name": root.resolve().name})
    git_dir = (
        root / ".git"
        if (root / ".git").exists()
        else (root if (root / "HEAD").is_file() and (root / "objects").is_dir() else None)
    )
    head = _head_commit(str(git_dir)) if git_dir is not None else None
    if git_dir is not None and head is not None:
        yield from _read_git_tree(str(git_dir), head, batch, limits)
    else:
        yield from _walk(root, batch, limits)
    if batch.rows:
        yield batch.flush()


def _head_commit(git_dir: str) -> str | None:
    try:
        return _git(git_dir, "rev-parse", "--verify", "HEAD^{commit}").decode().strip()
    except subprocess.CalledProcessError:
        return None  # a repository with no commit yet: its files are only in the working tree


def _walk(root: Path, batch: _RawBatch, limits: Limits) -> Iterator[pa.Table]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        linked = {d for d in dirnames if (Path(dirpath) / d).is_symlink()}
        dirnames[:] = sorted(d for d in dirnames if d != ".git" and d not in linked)
        for name in sorted([*filenames, *linked]):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                batch.add(rel, reason="symlink", detail=f"symlink to {os.readlink(full)}")
            elif not full.is_file():
                batch.add(rel, reason="unsafe_member", detail="not a regular file")
            elif depth(rel) > limits.max_depth:
                batch.add(rel, reason="too_deep", detail=f"depth {depth(rel)} > {limits.max_depth}")
            elif (size := full.stat().st_size) > limits.max_bytes:
                batch.add(rel, reason="too_large", detail=f"{size} bytes (cap {limits.max_bytes})", length_bytes=size)
            else:
                try:
                    batch.add(rel, data=full.read_bytes())
                except OSError as exc:
                    batch.add(rel, reason="unreadable_input", detail=str(exc))
            if batch.full():
                yield batch.flush()

"""Readers for each ingest source. Each yields *raw* tables: one row per file, with the original bytes in
`data`, or a `reason` saying why there are none (missing blob, unsafe tar member, ...).

Sources:
- `stack_v2`: The Stack v2 file-level metadata Parquet plus a content store holding `content/<blob_id>`
  gzip objects (local folder or S3), fetched by a thread pool (S3 latency, not CPU, bounds a single reader).
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from stackcurate.core import io
from stackcurate.core.schema import DOC_ID_ORDINAL_BITS, FILE_SCHEMA
from stackcurate.core.stage import Shard
from stackcurate.stages.ingest.content import gunzip_bounded

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


def _fetch(
    fs: pafs.FileSystem, root: str, row: dict[str, Any], limits: Limits
) -> tuple[bytes | None, str | None, str | None]:
    blob_id, length = row.get("blob_id"), row.get("length_bytes")
    if length is not None and length > limits.max_bytes:
        # The Stack v2 metadata already gives the decoded size: no need to download what the cap drops.
        return None, "too_large", f"length_bytes {length} (cap {limits.max_bytes}), not fetched"
    if not blob_id or not _HEX40.fullmatch(blob_id):
        return None, "missing_blob", f"invalid blob_id {blob_id!r}"
    path = io.join(root, "content", blob_id)
    try:
        with fs.open_input_file(path) as f:
            size = f.size()
            if size > limits.max_compressed_bytes:
                return None, "too_large", f"{size} compressed bytes (cap {limits.max_compressed_bytes})"
            compressed = f.read()
    except FileNotFoundError:
        return None, "missing_blob", f"no object {path}"
    except OSError as exc:
        if "NoSuchKey" in str(exc) or "does not exist" in str(exc):
            return None, "missing_blob", f"no object {path}"
        return None, "fetch_failed", str(exc)[:500]
    inflated = gunzip_bounded(compressed, limits.max_bytes, limits.bomb_ratio)
    return inflated.data, inflated.reason, inflated.detail


def read_stack_v2(
    shard: Shard, content: str, s3: io.S3Options, limits: Limits, batch_rows: int, fetch_threads: int
) -> Iterator[pa.Table]:
    """Metadata rows `[start, stop)` of one Parquet file, each with its bytes fetched from the content store."""
    meta_fs, meta_path = io.filesystem(shard.path, s3)
    store_fs, store_root = io.filesystem(content, s3)
    ordinal = shard.start
    with ThreadPoolExecutor(max_workers=fetch_threads) as pool:
        for meta in io.scan_parquet_slice(meta_fs, meta_path, shard.start, shard.stop, batch_rows=batch_rows):
            names = [c for c in _METADATA_COLUMNS if c in meta.column_names]
            rows = meta.select(names).to_pylist()
            fetched = pool.map(lambda r: _fetch(store_fs, store_root, r, limits), rows)
            out = []
            for row, (data, reason, detail) in zip(rows, fetched, strict=True):
                row.update(
                    doc_id=doc_id(shard.source_index, ordinal),
                    source="stack_v2",
                    origin=shard.path,
                    data=data,
                    reason=reason,
                    detail=detail,
                )
                if row.get("content_id"):
                    row["swhid"] = f"swh:1:cnt:{row['content_id']}"
                out.append(row)
                ordinal += 1
            yield _raw_table(out)


def _raw_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Raw rows to RAW_SCHEMA; The Stack v2's nanosecond dates are cut to microseconds."""
    columns = {}
    for f in RAW_SCHEMA:
        values = [r.get(f.name) for r in rows]
        if pa.types.is_timestamp(f.type):
            columns[f.name] = pa.array(values, pa.timestamp("ns")).cast(f.type, safe=False)
        else:
            columns[f.name] = pa.array(values, f.type)
    return pa.table(columns, schema=RAW_SCHEMA)


# --- Vault bundles ----------------------------------------------------------------------------------------


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

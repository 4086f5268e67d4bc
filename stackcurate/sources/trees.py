"""What the sources of file trees share: vault bundles planned from `bundles`, tar members checked before they
are taken, git trees read through git (git-bare bundles and local repositories)."""

import os
import re
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.sources.base import Limits, RawBatch, Source, depth, expand_inputs

# Bad input a git tree read can give: git refusing the repository, an object listed in the tree but absent.
GIT_TREE_ERRORS = frozenset({"corrupt_bundle", "missing_blob"})

# --- vault bundles ------------------------------------------------------------------------------------------


def plan_bundles(source: Source, takes: Callable[[str], bool]) -> list[Shard]:
    """The shards of the bundles (ingest's `bundles`) whose file name `takes`; `source_index` is the bundle's
    place among all the bundles, so that the shards of both kinds keep the order the user gave."""
    cfg = source.ingest
    shards: list[Shard] = []
    for i, uri in enumerate(expand_inputs(cfg.bundles, cfg.s3, "bundle")):
        name = uri.rsplit("/", 1)[-1]
        if not name.endswith((".tar.gz", ".tgz", ".tar")):
            raise StackcurateError(
                f"cannot tell the vault bundle kind of {uri}: expected swh:1:dir:<id>.tar.gz (flat) "
                "or swh_1_rev_<id>.git.tar (git-bare)"
            )
        if takes(name):
            weight = io.file_size(uri, cfg.s3)
            shards.append(Shard(index=len(shards), kind=source.name, path=uri, source_index=i, weight=weight))
    return shards


def swhid_from_name(uri: str, kind: str) -> str | None:
    m = re.search(rf"swh[:_]1[:_]{kind}[:_]([0-9a-f]{{40}})", uri.rsplit("/", 1)[-1])
    return f"swh:1:{kind}:{m.group(1)}" if m else None


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


def member_problem(member: tarfile.TarInfo) -> tuple[str, str] | None:
    """(reason, detail) for a tar member that must not be taken as a file, or None for a regular file or a
    folder: `unsafe_member` (a path or link escaping the bundle, a device, a fifo), `symlink` (a link inside)."""
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


# --- git trees ----------------------------------------------------------------------------------------------

_GIT_SAFE = ["-c", "safe.directory=*", "-c", "core.fsmonitor=false"]


def git(git_dir: str, *args: str) -> bytes:
    return subprocess.run(
        ["git", *_GIT_SAFE, "--git-dir", git_dir, *args],
        check=True,
        capture_output=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
    ).stdout


class BlobReader:
    """Reads objects by id through one `git cat-file --batch` process (by id, not `rev:path`: a path may hold any
    character, newlines included, and the protocol is one name a line)."""

    def __init__(self, git_dir: str) -> None:
        self.proc = subprocess.Popen(["git", *_GIT_SAFE, "--git-dir", git_dir, "cat-file", "--batch"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})  # fmt: skip

    def read(self, oid: str) -> bytes | None:
        """The object's bytes; None when the repository does not hold it."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{oid}\n".encode())
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if len(header) != 3:  # `<id> missing`
            return None
        data = self.proc.stdout.read(int(header[2]))
        self.proc.stdout.read(1)  # the newline after the object
        return data

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


def read_git_tree(git_dir: str, rev: str, batch: RawBatch, limits: Limits) -> Iterator[pa.Table]:
    """Yield the blobs of `rev`'s tree, in `git ls-tree` (path) order, through one `git cat-file --batch`."""
    try:
        commit = git(git_dir, "rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()
        tree = git(git_dir, "rev-parse", f"{commit}^{{tree}}").decode().strip()
        listing = git(git_dir, "ls-tree", "-r", "-l", "-z", "--full-tree", commit)
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

"""Local folders and git repositories (ingest's `repos`): the files of HEAD, as SWH would archive them, or of
the folder, walked."""

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.sources.base import Limits, RawBatch, Source, depth
from stackcurate.sources.trees import GIT_TREE_ERRORS, git, read_git_tree


class LocalRepo(Source):
    """A local git repository (the files of HEAD; its working tree when it has no commit yet) or a plain folder
    (walked, in name order, `.git` and linked folders left out). Rows: `source` `local`, `repo_name` the
    folder's name, and for a repository `revision_id` and `directory_id` (its tree).

    Errors: `unsafe_member` (not a regular file: a device, a socket), `unreadable_input` (a file that cannot be
    read), and a git tree's `corrupt_bundle`, `missing_blob`.
    """

    name = "repo"
    error_reasons = frozenset({"unsafe_member", "unreadable_input"}) | GIT_TREE_ERRORS
    option = "repos"

    def plan(self, upstream: str | None) -> list[Shard]:
        shards = []
        for i, repo in enumerate(self.ingest.repos):
            if not Path(repo).is_dir():
                raise StackcurateError(f"repository {repo} is not a folder")
            root = Path(repo).resolve()
            shards.append(Shard(index=i, kind=self.name, path=str(root), source_index=i, weight=_folder_bytes(root)))
        return shards

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        root = Path(shard.path)
        batch = RawBatch(shard, "local", self.ingest.batch_rows, common={"repo_name": root.resolve().name})
        git_dir = (
            root / ".git"
            if (root / ".git").exists()
            else (root if (root / "HEAD").is_file() and (root / "objects").is_dir() else None)
        )
        head = _head_commit(str(git_dir)) if git_dir is not None else None
        if git_dir is not None and head is not None:
            yield from read_git_tree(str(git_dir), head, batch, self.ingest.limits)
        else:
            yield from _walk(root, batch, self.ingest.limits)
        if batch.rows:
            yield batch.flush()


def _folder_bytes(root: Path) -> int:
    """The bytes of the files under `root`, git's own folder left out (the shard's weight: see Shard)."""
    total = 0
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d != ".git"]
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _head_commit(git_dir: str) -> str | None:
    try:
        return git(git_dir, "rev-parse", "--verify", "HEAD^{commit}").decode().strip()
    except subprocess.CalledProcessError:
        return None  # a repository with no commit yet: its files are only in the working tree


def _walk(root: Path, batch: RawBatch, limits: Limits) -> Iterator[pa.Table]:
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

"""SWH vault git-bare bundles: `swh_1_rev_<id>.git.tar`, a bare repository `swh:1:rev:<id>.git/` of which the
files of the revision's tree are taken (ingest's `bundles`; other tars there are flat bundles, see vault_flat)."""

import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import PurePosixPath

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.contract import Shard
from stackcurate.sources.base import RawBatch, Source
from stackcurate.sources.trees import (
    GIT_TREE_ERRORS,
    member_problem,
    plan_bundles,
    read_git_tree,
    swhid_from_name,
)


class VaultGitBare(Source):
    """The files of the revision's tree in a git-bare bundle (rows: `source` `vault_git`, `revision_id`,
    `directory_id` its tree, `repo_name` the revision's SWHID).

    The bare repository is extracted (member by member, each checked, to a private temporary folder under
    `tmp_dir`) because git objects can only be read from a repository on disk; git itself then lists and reads
    the tree.

    Errors: `unsafe_member`, `corrupt_bundle` (not a tar, no `<name>.git` folder, a repository git refuses),
    `missing_blob` (an object of the tree absent from the repository).
    """

    name = "git_bare"
    error_reasons = frozenset({"unsafe_member"}) | GIT_TREE_ERRORS
    option = "bundles"

    def plan(self, upstream: str | None) -> list[Shard]:
        return plan_bundles(self, lambda name: name.endswith(".git.tar"))

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        fs, path = io.filesystem(shard.path, self.ingest.s3)
        swhid = swhid_from_name(shard.path, "rev")
        batch = RawBatch(shard, "vault_git", self.ingest.batch_rows, common={"repo_name": swhid})
        workdir = tempfile.mkdtemp(prefix="stackcurate-git-", dir=self.ingest.tmp_dir)
        try:
            git_dir = None
            try:
                with fs.open_input_stream(path) as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
                    for member in tar:
                        problem = member_problem(member)
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
                if io.transient_cause(exc) is not None:
                    raise  # the store, not the bundle: the shard runner leaves the shard for a rerun
                batch.add("", reason="corrupt_bundle", detail=f"{type(exc).__name__}: {exc}")
                git_dir = None
            if git_dir is None:
                if not batch.rows:
                    batch.add("", reason="corrupt_bundle", detail="no <name>.git folder in the bundle")
            else:
                rev = swhid[10:] if swhid else "HEAD"
                yield from read_git_tree(git_dir, rev, batch, self.ingest.limits)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if batch.rows:
            yield batch.flush()

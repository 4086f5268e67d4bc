"""SWH vault flat bundles: `swh:1:dir:<id>.tar.gz`, the files of one directory under a top folder
`swh:1:dir:<id>/` (ingest's `bundles`; a `.git.tar` there is a git-bare bundle, see vault_git_bare)."""

import tarfile
from collections.abc import Iterator
from pathlib import PurePosixPath

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.contract import Shard
from stackcurate.sources.base import RawBatch, Source, depth
from stackcurate.sources.trees import member_problem, plan_bundles, swhid_from_name


class VaultFlat(Source):
    """The files of a flat vault bundle (rows: `source` `vault_flat`, `directory_id`, `repo_name` the SWHID of
    the directory), streamed: nothing is extracted to disk, memory is bounded by the size cap.

    Errors: `unsafe_member` (a member escaping the bundle, a device, a fifo), `corrupt_bundle` (a bundle cut
    short or not a tar: the members before the cut are kept).
    """

    name = "flat"
    error_reasons = frozenset({"unsafe_member", "corrupt_bundle"})
    option = "bundles"

    def plan(self, upstream: str | None) -> list[Shard]:
        return plan_bundles(self, lambda name: not name.endswith(".git.tar"))

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        limits = self.ingest.limits
        fs, path = io.filesystem(shard.path, self.ingest.s3)
        swhid = swhid_from_name(shard.path, "dir")
        batch = RawBatch(
            shard,
            "vault_flat",
            self.ingest.batch_rows,
            common={"directory_id": swhid and swhid[10:], "repo_name": swhid},
        )
        try:
            with fs.open_input_stream(path) as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
                for member in tar:
                    name = _strip_top(member.name)
                    problem = member_problem(member)
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
            if io.transient_cause(exc) is not None:
                raise  # the store, not the bundle: the shard runner leaves the shard for a rerun
            batch.add("", reason="corrupt_bundle", detail=f"{type(exc).__name__}: {exc}")
        if batch.rows:
            yield batch.flush()


def _strip_top(name: str) -> str:
    """Drop the bundle's top folder (`swh:1:dir:<id>/`)."""
    parts = PurePosixPath(name).parts
    return "/".join(parts[1:]) if len(parts) > 1 and parts[0].startswith("swh:1:") else name

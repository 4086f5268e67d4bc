"""The output folder of a stage, and the name of every marker file the framework writes.

    <out>/<stage>/0000i.parquet          kept rows
    <out>/<stage>/removed/0000i.parquet  dropped rows, with `reason` and `detail`
    <out>/<stage>/errors/0000i.parquet   bad input (see schema.ERROR_SCHEMA)
    <out>/<stage>/stats/0000i.parquet    counters (schema.STATS_SCHEMA): additive, except `rss_peak`
    <out>/<stage>/_shards/0000i.json     completion marker, written last
    <out>/<stage>/_plan.json             the fingerprint of the config and plan the folder holds
    <out>/<stage>/_config.yaml           the stage's resolved config, as it ran
    <out>/<stage>/_SUCCESS               every shard is done and the stage complete
    <out>/_LOCK                          held by the run writing the folder (run_lock)

Each file is written under a temporary name and moved into place, and the marker is the commit point: a
rerun skips shards that have one and redoes the others, overwriting whatever they left. So an interrupted
stage, rerun, gives the same files as an uninterrupted one, with nothing lost or duplicated, whatever the
number of workers.
"""

import contextlib
import fcntl
import json
import os
import shlex
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from stackcurate.core import io
from stackcurate.core.contract import SHARD_DIGITS, Shard
from stackcurate.core.counters import UNITS
from stackcurate.core.errors import StackcurateError
from stackcurate.core.fingerprint import what_changed
from stackcurate.core.schema import STATS_SCHEMA

SUCCESS = "_SUCCESS"  # a stage folder whose every shard is done
PLAN = "_plan.json"  # a stage folder's fingerprint (and request): what its output depends on
SHARDS = "_shards"  # the folder of a stage's per-shard completion markers
CONFIG = "_config.yaml"  # a stage folder's resolved config; in a run folder, the last `stackcurate run`'s pipeline
PIPELINE = "_pipeline.json"  # in a run folder: the stages of the last `stackcurate run`, in order
FUSED = "_FUSED"  # in a stage folder whose kept rows were not written: it ran fused with the next stage
PURGED = "_PURGED"  # in a stage folder whose text `stackcurate purge` deleted (stages/pii/purge.py)
TEMPORARY = ".tmp-"  # in the name of a file being written (io.AtomicParquetWriter, io.write_bytes_atomic)
LOCK = "_LOCK"  # in a run folder: held by the run writing it (run_lock), and who that run is


class StageDir:
    """The output folder of one stage: file names, the plan, completion markers."""

    def __init__(self, out: str, stage: str, s3: io.S3Options | None = None) -> None:
        self.uri = io.join(out, stage)
        self.stage = stage
        self.s3 = s3
        self.fs, self.root = io.filesystem(self.uri, s3)
        self._previous: dict[str, Any] = {}  # the completion of the output start_run found (see mark_complete)

    def path(self, kind: str, shard: Shard | int, suffix: str = ".parquet") -> str:
        name = shard.name if isinstance(shard, Shard) else f"{shard:0{SHARD_DIGITS}d}"
        parts = [name + suffix] if kind == "data" else [kind, name + suffix]
        return io.join(self.root, *parts)

    @property
    def success_path(self) -> str:
        return io.join(self.root, SUCCESS)

    def is_complete(self) -> bool:
        return io.exists(self.fs, self.success_path)

    def done_shards(self) -> set[int]:
        markers = io.expand(self.fs, io.join(self.root, SHARDS), suffix=".json")
        return {int(p.rsplit("/", 1)[1].split(".")[0]) for p in markers}

    @property
    def plan_path(self) -> str:
        return io.join(self.root, PLAN)

    def _plan(self) -> dict[str, Any] | None:
        if not io.exists(self.fs, self.plan_path):
            return None
        return json.loads(io.read_text(self.fs, self.plan_path))

    def fingerprint(self) -> str | None:
        """The plan fingerprint of the output in this folder, if any."""
        plan = self._plan()
        return None if plan is None else plan["fingerprint"]

    def request(self) -> str | None:
        """The request fingerprint of the output in this folder (see :meth:`start_run`), if one was recorded."""
        plan = self._plan()
        return None if plan is None else plan.get("request")

    def completion(self) -> dict[str, Any]:
        """What `_SUCCESS` says of the finished output: its `id` (new each time shards ran), and the `input`
        stage and that input's id it was made from. Empty when the stage is not complete (or was completed by
        a version that wrote an empty marker)."""
        if not io.exists(self.fs, self.success_path):
            return {}
        text = io.read_text(self.fs, self.success_path).strip()
        return json.loads(text) if text else {}

    def start_run(
        self,
        fingerprint: str,
        *,
        overwrite: bool,
        request: str | None = None,
        summary: dict[str, Any] | None = None,
        input_id: str | None = None,
    ) -> set[int]:
        """Create the folder for a run with this plan; return the shards already finished by an earlier run.

        `request` fingerprints what the stage was asked for before its global work filled in what it computes
        (dedup's clusters, the tokenizer it trains): a dry run, which prepares nothing, compares it to tell a
        finished output that a run would reuse. `summary` (fingerprint.described_plan) lets a refusal say what
        changed. `input_id` is the completion id of the stage folder the shards read: output made from an
        earlier output of that stage (rerun since) is refused, even where the plan is the same."""
        plan_path = self.plan_path
        self._previous = self.completion()
        if io.exists(self.fs, self.root):
            before = self._plan()
            if overwrite or before is None:
                self.fs.delete_dir(self.root)
                self._previous = {}
            elif before["fingerprint"] != fingerprint:
                what = what_changed(before.get("summary"), summary or {})
                raise StackcurateError(
                    f"{self.uri} holds output of a different input or config ({what}); pass --overwrite to replace it "
                    "or choose another --out"
                )
            elif input_id is not None and before.get("input_id") not in (None, input_id):
                raise StackcurateError(
                    f"{self.uri} was made from an earlier output of its input, which was rerun since; pass "
                    "--overwrite to replace it or choose another --out"
                )
        for sub in ("", "removed", "errors", "stats", SHARDS):
            self.fs.create_dir(io.join(self.root, sub) if sub else self.root, recursive=True)
        self._remove_temporaries()
        plan = {"fingerprint": fingerprint, **({"request": request} if request is not None else {})}
        plan |= {"summary": summary} if summary is not None else {}
        plan |= {"input_id": input_id} if input_id is not None else {}
        if self._plan() != plan:
            io.write_bytes_atomic(self.fs, plan_path, json.dumps(plan).encode())
        if io.exists(self.fs, self.success_path):
            self.fs.delete_file(self.success_path)
        return self.done_shards()

    def _remove_temporaries(self) -> None:
        for info in self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True)):
            if TEMPORARY in info.base_name and info.type == pafs.FileType.File:
                self.fs.delete_file(info.path)

    def write_run(self, run_id: str, wall_seconds: float, workers: int) -> None:
        """Record how a run ran this stage (its group's wall time, the most workers at once) as stats rows of
        their own, `stats/run-<run_id>.parquet`: a resumed stage has one file per run that worked on it."""
        rows = [{"run_id": run_id, "stage": self.stage, "shard": -1, "metric": metric, "language": None,
                 "reason": None, "value": float(value), "unit": UNITS[metric]}
                for metric, value in (("wall_seconds", wall_seconds), ("workers", workers))]  # fmt: skip
        sink = io.AtomicParquetWriter(self.fs, io.join(self.root, "stats", f"run-{run_id}.parquet"), STATS_SCHEMA)
        sink.write(pa.Table.from_pylist(rows, schema=STATS_SCHEMA))
        sink.commit()

    def mark_complete(
        self, config_yaml: str, *, ran: bool = True, input_name: str | None = None, input_id: str | None = None
    ) -> str:
        """Mark the stage complete; the temporary files of attempts that died with their worker go. `_SUCCESS`
        says which output this is (a new id where shards ran, else the id start_run found) and, when it read
        another stage's output, which one (`input_name`, `input_id`): query.stale_stages compares them. Returns
        the id."""
        done = {"id": self._previous["id"] if not ran and "id" in self._previous else uuid.uuid4().hex[:12]}
        done |= {"input": input_name, "input_id": input_id} if input_name and input_id else {}
        for path in io.expand(self.fs, self.root):
            if TEMPORARY in path.rsplit("/", 1)[-1]:
                self.fs.delete_file(path)
        io.write_bytes_atomic(self.fs, io.join(self.root, CONFIG), config_yaml.encode())
        io.write_bytes_atomic(self.fs, self.success_path, json.dumps(done).encode())
        return done["id"]


def run_stages(out: str) -> list[str] | None:
    """The stages of the last `stackcurate run` into `out`, in order (None where no run listed them)."""
    fs, root = io.filesystem(out)
    listed = io.join(root, PIPELINE)
    return json.loads(io.read_text(fs, listed))["stages"] if io.exists(fs, listed) else None


@contextlib.contextmanager
def run_lock(out: str) -> Iterator[None]:
    """Hold `OUT/_LOCK` while a run writes `out`: a second run into the same folder (another terminal, a retried
    job) stops in one line that names the run holding it. The lock is the kernel's (flock), so it goes with its
    process: a run that was killed leaves a file but no lock, and the rerun takes it. Output on an object store
    is not locked (it has no such lock)."""
    fs, root = io.filesystem(out)
    if "://" in out:
        yield
        return
    created = not os.path.isdir(root)  # a run that stops before it writes leaves no folder behind
    fs.create_dir(root, recursive=True)
    path = os.path.join(root, LOCK)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another run"
            raise StackcurateError(
                f"{out} is being written by {holder}; wait for it to finish (or stop it), then rerun"
            ) from None
        f.seek(0)
        f.truncate()
        command = shlex.join(["stackcurate", *sys.argv[1:]]) if sys.argv else "stackcurate"
        f.write(f"process {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')} (`{command}`)")
        f.flush()
        try:
            yield
        finally:
            if created and os.listdir(root) == [LOCK]:
                os.remove(path)
                os.rmdir(root)
            fcntl.flock(f, fcntl.LOCK_UN)

"""The output folders of a stage, and the name of every marker file the framework writes.

    <out>/<stage>/0000i.parquet                 kept rows, and nothing else
    <out>/_removed/<stage>/0000i.parquet        dropped rows, with `reason` and `detail`
    <out>/_errors/<stage>/0000i.parquet         bad input (see schema.ERROR_SCHEMA)
    <out>/_stats/<stage>/0000i.parquet          counters (schema.STATS_SCHEMA): additive, except `rss_peak`
    <out>/_state/<stage>/shards/0000i.json      completion marker, written last
    <out>/_state/<stage>/plan.json              the fingerprint of the config and plan the folders hold
    <out>/_state/<stage>/config.yaml            the stage's resolved config, as it ran
    <out>/_state/<stage>/SUCCESS                every shard is done and the stage complete
    <out>/_LOCK                                 held by the run writing the folder (run_lock)

A stage's folder holds its kept rows alone because every reader of a Parquet folder takes all it finds there:
pandas and pyarrow skip names that start with `_`, but HF `datasets` reads `_`-named files and Polars every
file below the folder. The rest sits beside it, under `_`-named folders that a reader of `<out>/<stage>` never
sees.

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

TABLES = {"removed": "_removed", "errors": "_errors", "stats": "_stats"}  # a stage's other tables, by kind
STATE = "_state"  # in a run folder: one folder per stage with the files below
SUCCESS = "SUCCESS"  # every shard of the stage is done
PLAN = "plan.json"  # the stage's fingerprint (and request): what its output depends on
SHARDS = "shards"  # the per-shard completion markers
CONFIG = "config.yaml"  # the stage's resolved config
FUSED = "FUSED"  # the stage's kept rows were not written: it ran fused with the next stage
PURGED = "PURGED"  # `stackcurate purge` deleted the stage's text (stages/pii/purge.py)
RUN_CONFIG = "_config.yaml"  # in a run folder: the last `stackcurate run`'s pipeline
PIPELINE = "_pipeline.json"  # in a run folder: the stages of the last `stackcurate run`, in order
TEMPORARY = ".tmp-"  # in the name of a file being written (io.AtomicParquetWriter, io.write_bytes_atomic)
LOCK = "_LOCK"  # in a run folder: held by the run writing it (run_lock), and who that run is
EARLIER_PLAN = "_plan.json"  # in a stage folder written before this layout (its tables and markers inside it)
EARLIER_LAYOUT = "was written by an earlier stackcurate, which kept removed rows and markers inside stage folders"


class StageDir:
    """The output folders of one stage (see the module's docstring): file names, the plan, completion markers."""

    def __init__(self, out: str, stage: str, s3: io.S3Options | None = None, *, extra: tuple[str, ...] = ()) -> None:
        """`extra`: folders of the run folder the stage also writes (Stage.folders), replaced with its own."""
        self.uri = io.join(out, stage)
        self.stage = stage
        self.s3 = s3
        self.fs, self.root = io.filesystem(self.uri, s3)
        base = self.root[: -len(stage)].rstrip("/")
        self.state = io.join(base, STATE, stage)
        self.state_uri = io.join(self.uri[: -len(stage)].rstrip("/"), STATE, stage)
        self.tables = {kind: io.join(base, folder, stage) for kind, folder in TABLES.items()}
        self.extra = [io.join(base, name) for name in extra]
        self._previous: dict[str, Any] = {}  # the completion of the output start_run found (see mark_complete)

    @classmethod
    def of(cls, uri: str) -> "StageDir":
        """The stage whose kept rows are the folder `uri` (a stage's input, `<out>/<stage>`)."""
        out, _, stage = uri.rstrip("/").rpartition("/")
        return cls(out or ".", stage)

    def folders(self) -> list[str]:
        """Every folder of the stage: its kept rows, its other tables, its state."""
        return [self.root, *self.tables.values(), self.state, *self.extra]

    def exists(self) -> bool:
        return any(io.exists(self.fs, folder) for folder in self.folders())

    def delete(self) -> None:
        for folder in self.folders():
            if io.exists(self.fs, folder):
                self.fs.delete_dir(folder)

    def marker(self, name: str) -> str:
        """The path of a file of the stage's state (SUCCESS, FUSED, ...)."""
        return io.join(self.state, name)

    def path(self, kind: str, shard: Shard | int, suffix: str = ".parquet") -> str:
        """Where a shard's file of `kind` goes: "data" (kept rows), "removed", "errors", "stats" or SHARDS."""
        name = (shard.name if isinstance(shard, Shard) else f"{shard:0{SHARD_DIGITS}d}") + suffix
        if kind == "data":
            return io.join(self.root, name)
        return io.join(self.state, SHARDS, name) if kind == SHARDS else io.join(self.tables[kind], name)

    @property
    def success_path(self) -> str:
        return self.marker(SUCCESS)

    def is_complete(self) -> bool:
        return io.exists(self.fs, self.success_path)

    def done_shards(self) -> set[int]:
        markers = io.expand(self.fs, io.join(self.state, SHARDS), suffix=".json")
        return {int(p.rsplit("/", 1)[1].split(".")[0]) for p in markers}

    @property
    def plan_path(self) -> str:
        return self.marker(PLAN)

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
        """What SUCCESS says of the finished output: its `id` (new each time shards ran), and the `input`
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
        if not overwrite and io.exists(self.fs, io.join(self.root, EARLIER_PLAN)):
            raise StackcurateError(
                f"{self.uri} {EARLIER_LAYOUT}; pass --overwrite to replace it or choose another --out"
            )
        if self.exists():
            before = self._plan()
            if overwrite or before is None:
                self.delete()
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
        for folder in (*self.folders(), io.join(self.state, SHARDS)):
            self.fs.create_dir(folder, recursive=True)
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
        for folder in self.folders():
            for info in self.fs.get_file_info(pafs.FileSelector(folder, recursive=True)):
                if TEMPORARY in info.base_name and info.type == pafs.FileType.File:
                    self.fs.delete_file(info.path)

    def write_run(self, run_id: str, wall_seconds: float, workers: int) -> None:
        """Record how a run ran this stage (its group's wall time, the most workers at once) as stats rows of
        their own, `_stats/<stage>/run-<run_id>.parquet`: a resumed stage has one file per run that worked on it."""
        rows = [{"run_id": run_id, "stage": self.stage, "shard": -1, "metric": metric, "language": None,
                 "reason": None, "value": float(value), "unit": UNITS[metric]}
                for metric, value in (("wall_seconds", wall_seconds), ("workers", workers))]  # fmt: skip
        sink = io.AtomicParquetWriter(self.fs, io.join(self.tables["stats"], f"run-{run_id}.parquet"), STATS_SCHEMA)
        sink.write(pa.Table.from_pylist(rows, schema=STATS_SCHEMA))
        sink.commit()

    def mark_complete(
        self, config_yaml: str, *, ran: bool = True, input_name: str | None = None, input_id: str | None = None
    ) -> str:
        """Mark the stage complete; the temporary files of attempts that died with their worker go. SUCCESS
        says which output this is (a new id where shards ran, else the id start_run found) and, when it read
        another stage's output, which one (`input_name`, `input_id`): query.stale_stages compares them. Returns
        the id."""
        done = {"id": self._previous["id"] if not ran and "id" in self._previous else uuid.uuid4().hex[:12]}
        done |= {"input": input_name, "input_id": input_id} if input_name and input_id else {}
        for path in (path for folder in self.folders() for path in io.expand(self.fs, folder)):
            if TEMPORARY in path.rsplit("/", 1)[-1]:
                self.fs.delete_file(path)
        io.write_bytes_atomic(self.fs, self.marker(CONFIG), config_yaml.encode())
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

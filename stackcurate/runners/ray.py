"""Run shards and tasks on Ray: an embedded local Ray by default, an existing cluster with `--ray-address`.

:class:`RayExecutor` starts or joins Ray once, and keeps a set of actors for the whole run. They take the
pending shards of a stage one at a time, building the stage (or fused group) once per stage run, and the
tasks of multi-phase stages, so imports, compiled kernels and indexes load once per worker, not once per
stage or phase. Each shard is written and committed by :func:`stackcurate.core.shards.run_shard` itself, so
output file names and contents depend only on the plan, never on how many workers ran, and a shard lost
with its worker is simply redone, by another worker of this run or by a rerun.

Failures, and what the driver does with them:

- a shard raises an ordinary exception in its worker (bad config on that node, a full disk): the run stops
  with that same exception (an `OSError` stays an `OSError`), for the CLI to print as one line;
- a worker dies (killed for memory, its node lost): its shard goes back to the queue and runs on another
  worker, at most :data:`MAX_ATTEMPTS` times; a replacement worker is asked for, and used once Ray finds it a
  CPU (after a node loss there may be none: the surviving workers then take the queue); a shard that lost
  its worker that many times fails the run in one line, once the other shards are done;
- no worker can run for :func:`worker_wait_s` seconds (every node with CPUs gone): the run stops in one line
  that says to rerun; finished shards stay committed.
"""

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from stackcurate.core import progress
from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.core.shards import ShardJob
from stackcurate.runners.ray_pool import Item, Pool, Scheduler, env_number, last_line
from stackcurate.runners.ray_start import end_monitor, init

log = logging.getLogger(__name__)

# A worker holding more after its stage is replaced: ScanCode's index (~1.5 GB) or the PII model's torch (~600
# MB) would otherwise stay in memory through the stages after theirs. A fresh worker holds ~200 MB.
DEFAULT_RECYCLE_MB = 400.0  # the ingest group's workers (~460 MiB: enry's Go runtime, numba) are replaced too
RECYCLE_WAIT_S = 10.0  # the longest a replaced worker is waited for
SHARED_CHECK_S = 120.0  # each node answers whether it sees the output: a task that needs no CPU


def recycle_mb() -> float:
    """The memory (MiB) above which a worker is replaced after a stage (STACKCURATE_WORKER_RECYCLE_MB)."""
    return env_number("STACKCURATE_WORKER_RECYCLE_MB", DEFAULT_RECYCLE_MB, "MiB")


def _running(pid: int) -> bool:
    """Whether process `pid` of this machine still runs (a zombie holds no memory: it counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class RayExecutor:
    """Runs shards and tasks on Ray actors that live for the whole run (see the module docstring).

    Ray starts (or is joined) once, on first use. The actors are started once and reused by every stage and
    phase, with what they imported and compiled; an actor left holding more than
    :func:`recycle_mb` MiB after a stage (ScanCode's index, torch and a model) is replaced, so that memory does not
    stay taken for the rest of the run. An embedded Ray gets `ray_cpus` CPUs (default: the machine's),
    whatever `workers` is.
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        workers: int | None = None,
        ray_cpus: int | None = None,
        progress: bool = True,
    ) -> None:
        self.address, self.workers, self.ray_cpus, self.progress = address, workers, ray_cpus, progress
        self._pool: Pool | None = None
        self._owns_ray = False  # this executor started an embedded Ray: it shuts it down when the run ends
        self._shared: set[str] = set()  # folders every node was seen to share
        self._busy: dict[str, float] = {}  # see take_busy
        self._workers = 0  # see take_workers

    def _ray(self) -> Any:
        try:
            import ray

            was_up = ray.is_initialized()
        except ImportError:
            was_up = False  # init says what to install
        init(self.address, self.ray_cpus)
        if not was_up:
            self._owns_ray = not (self.address or os.environ.get("RAY_ADDRESS"))
        import ray

        return ray

    def _pool_for(self, num_gpus: float, label: str) -> tuple[Pool, int]:
        """The pool of actors with `num_gpus` GPUs each (another kind's idle actors go: they hold CPUs), and
        how many actors run at once."""
        ray = self._ray()
        cluster = ray.cluster_resources()
        available = int(cluster.get("CPU", 1))
        if num_gpus:
            if cluster.get("GPU", 0) < num_gpus:
                raise StackcurateError(
                    f"{label}: asked for {num_gpus:g} GPU(s) per worker, but the Ray cluster has "
                    f"{cluster.get('GPU', 0):g}; pass --num-gpus 0 to run on CPU"
                )
            available = min(available, int(cluster["GPU"] // num_gpus))
        if self._pool is None or self._pool.num_gpus != num_gpus:
            self._drop_pool()
            self._pool = Pool(ray, num_gpus, self._busy)
        return self._pool, max(1, self.workers or available)

    def _schedule(
        self, items: list[Item], label: str, noun: str, num_gpus: float = 0.0, *, bar: bool = True
    ) -> list[Any]:
        pool, concurrency = self._pool_for(num_gpus, label)
        concurrency = min(concurrency, len(items))
        self._workers = max(self._workers, concurrency)
        desc = f"{label} ({max(concurrency, pool.size)} workers)"
        with progress.bar(desc, len(items), noun, self.progress and bar) as shown:
            try:
                return Scheduler(pool, concurrency, label, noun, shown).run(items)
            except BaseException:
                self._drop_pool()  # a failed run leaves no actor behind to write after it
                raise

    def begin_group(self, label: str, shards: list[Shard], mb_per_s: float, num_gpus: float = 0.0) -> None:
        """Nothing to choose: everything runs on Ray."""

    def check_shared(self, folders: dict[str, str], *, writes: str = "--out") -> None:
        """Stop in one line unless every node of the cluster sees each local folder of `folders` (what it is
        -> path) as this machine does: on several nodes, a path on this machine's own disk would have each node
        write a part of the output to its own disk. Object-store URIs need no check; neither does one node.

        A node sees a folder when it lists the same names in it; the folder `writes` names gets a probe file
        first, so that empty folders of the same path on two disks do not look alike."""
        local = {what: path for what, path in folders.items() if "://" not in path and path not in self._shared}
        if not local:
            return
        ray = self._ray()
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        if len(nodes) < 2:
            return
        from ray.exceptions import RayError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = None
        if writes in local:
            os.makedirs(local[writes], exist_ok=True)
            probe = os.path.join(local[writes], f"_probe-{uuid.uuid4().hex}")
            open(probe, "w").close()
        try:
            paths = list(local.values())
            expected = [_listing(p) for p in paths]
            listing = ray.remote(num_cpus=0, max_retries=0)(_listings)
            calls = [
                listing.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                    paths
                )
                for n in nodes
            ]
            seen = []
            deadline = time.monotonic() + SHARED_CHECK_S
            for call in calls:
                try:
                    seen.append(ray.get(call, timeout=max(1.0, deadline - time.monotonic())))
                except RayError as exc:  # the node went away since it was listed (or hangs): it runs nothing of ours
                    log.debug("a node could not answer the shared-folder check: %s", last_line(exc))
                    seen.append(expected)
        finally:
            if probe is not None:
                with contextlib.suppress(OSError):
                    os.remove(probe)
        for i, (what, path) in enumerate(local.items()):
            blind = [f"{n['NodeManagerAddress']} ({n['NodeID'][:8]})" for n, got in zip(nodes, seen, strict=True)
                     if got[i] != expected[i]]  # fmt: skip
            if blind:
                raise StackcurateError(
                    f"{what} {path} is a folder of this machine that {len(blind)} of the cluster's {len(nodes)} nodes "
                    f"cannot see ({', '.join(blind)}); on a cluster, use a folder every node mounts at the same path "
                    "(NFS, a shared volume) or an object store (s3://bucket/run)"
                )
        self._shared.update(local.values())

    def run_shards(self, job: ShardJob, shards: list[Shard], *, num_gpus: float = 0.0) -> list[dict[str, Any]]:
        """Run `shards` of a stage (or fused group); their summaries."""
        if not shards:
            return []
        # The largest first (by the plan's estimate of their bytes, else rows): the last shard to finish is then a
        # small one, and nodes finish together however the input's sizes are skewed.
        ordered = sorted(shards, key=lambda s: (-s.weight, s.start - s.stop))
        items = [Item(s.index, f"shard {s.name}", "run", (job, s)) for s in ordered]
        summaries = self._schedule(items, job.name, "shard", num_gpus)
        self._recycle()
        return summaries

    def map(self, fn: Callable[..., Any], items: list[tuple[Any, ...]], desc: str | None) -> list[Any]:
        """`fn(*item)` for each item on the run's actors; results in item order. A task whose worker dies runs
        again on another, at most MAX_ATTEMPTS times (tasks write their files atomically, so a retry
        overwrites what the lost attempt left). An exception raised by `fn` stops the run with that same
        exception."""
        if not items:
            return []
        calls = [Item(i, f"task {i}", "call", (fn, args)) for i, args in enumerate(items)]
        return self._schedule(calls, desc or "tasks", "task", bar=desc is not None)

    def take_busy(self) -> dict[str, float]:
        """Seconds each node's workers spent on shards and tasks since the last call (`address (node id)`)."""
        busy = dict(self._busy)
        self._busy.clear()
        return busy

    def take_workers(self) -> int:
        """The most actors that ran at once since the last call."""
        workers, self._workers = self._workers, 0
        return workers

    def _recycle(self) -> None:
        """Replace the idle actors that hold more than recycle_mb() MiB now (each drops its stages first)."""
        if self._pool is None or not self._pool.idle:
            return
        limit = recycle_mb()
        answers = self._pool.ray.get([actor.release.remote() for actor in self._pool.idle])
        ending = []
        for actor, (size, host, pid) in zip(list(self._pool.idle), answers, strict=True):
            if size > limit:
                log.debug("a worker holds %.0f MiB after its stage: replacing it", size)
                self._pool.kill(actor)
                ending += [pid] if host == socket.gethostname() else []
        # `ray.kill` returns before the process has gone: its replacement would load beside it, holding both
        # memories at once. Wait (a few seconds at most) for the ones of this machine to end.
        deadline = time.monotonic() + RECYCLE_WAIT_S
        while any(map(_running, ending)) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _drop_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def close(self) -> None:
        """End the workers; an embedded Ray this executor started goes too (explicitly: on dedup's CLI command, 2 s
        sooner than Ray's own exit handler)."""
        self._drop_pool()
        if self._owns_ray:
            import ray

            end_monitor()
            ray.shutdown()
            self._owns_ray = False


def _listing(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def _listings(paths: list[str]) -> list[list[str] | None]:
    """On one node: the names in each folder (None where there is no such folder)."""
    return [_listing(p) for p in paths]


def map_tasks(
    fn: Callable[..., Any],
    items: list[tuple[Any, ...]],
    desc: str,
    *,
    address: str | None = None,
    workers: int | None = None,
    ray_cpus: int | None = None,
    progress: bool = True,
) -> list[Any]:
    """`fn(*item)` for each item on a RayExecutor of its own (see :meth:`RayExecutor.map`)."""
    executor = RayExecutor(address=address, workers=workers, ray_cpus=ray_cpus, progress=progress)
    try:
        return executor.map(fn, items, desc)
    finally:
        executor.close()

"""The run's Ray workers and how shards and tasks are scheduled on them: actors that live for the whole run,
retried shards when a worker dies, and a one-line stop when no worker can run (see runners/ray.py)."""

import gc
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from tqdm import tqdm

from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.core.shards import ShardJob

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 4  # per shard: a shard that kills its worker every time (an input that exhausts memory) stops the run
POLL_S = 1.0  # how long the driver waits on its workers before it looks at the clock again
DEFAULT_WORKER_WAIT_S = 300.0  # an autoscaler needs minutes to add a node; a lost cluster needs an answer


def env_number(name: str, default: float, unit: str) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        raise StackcurateError(f"{name} must be a number of {unit}, not '{value}'") from None


def worker_wait_s() -> float:
    """How long a run waits while no worker can run (STACKCURATE_WORKER_WAIT_S, default 300 s)."""
    return env_number("STACKCURATE_WORKER_WAIT_S", DEFAULT_WORKER_WAIT_S, "seconds")


def _reraise_task_error(exc: Exception) -> NoReturn:
    """Raise the exception a task raised in its worker, as itself: a StackcurateError stays one line for the
    CLI, an OSError stays an OSError (disk full). Ray's wrapper, with the remote traceback, is its cause."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        raise cause from exc
    raise exc


class Worker:
    """A Ray actor that lives for the whole run: it runs shards of one stage (or fused group) after another,
    building the stages once per stage run (`ShardJob.key`), and the tasks of stages' phases."""

    def __init__(self) -> None:
        # The stages are built on the first shard, not here: `ready` then answers as soon as Ray has placed the
        # actor, so the driver can tell a worker waiting for a CPU from one loading a model.
        self.key: str | None = None
        self.stages: Any = None

    def ready(self) -> str:
        """The id of the node this actor was placed on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def run(self, job: ShardJob, shard: Shard) -> dict[str, Any]:
        if job.key != self.key:
            self._drop()  # the last stage's objects go before the next one's are built
            self.stages, self.key = job.build(), job.key
        return job.run(self.stages, shard)

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        return fn(*args)

    def _drop(self) -> None:
        self.key, self.stages = None, None
        gc.collect()

    def release(self) -> tuple[float, str, int]:
        """Drop the stage's objects (its stage run is over); this process's resident memory then, in MiB, and
        where the process is (host name, process id)."""
        self._drop()
        try:
            pages = int(open("/proc/self/statm").read().split()[1])  # noqa: SIM115 - one read of a proc file
        except (OSError, ValueError, IndexError):
            pages = 0
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20, socket.gethostname(), os.getpid()


@dataclass
class Item:
    """One call for the scheduler: a shard of a stage, or one task of a phase."""

    index: int
    name: str  # "shard 00003" or "task 3", for messages
    method: str  # the worker's method
    args: tuple[Any, ...]


class Pool:
    """The run's live actors, of one kind (CPU only, or with GPUs), kept from one stage and phase to the next."""

    def __init__(self, ray: Any, num_gpus: float, busy: dict[str, float]) -> None:
        self.ray = ray
        self.num_gpus = num_gpus
        # No restarts by Ray: a restarted actor would hold its call while it waits for a CPU that, after a node
        # loss, a surviving idle actor holds. The scheduler replaces dead actors and moves their work instead.
        self.actor_cls = ray.remote(Worker).options(num_cpus=1, num_gpus=num_gpus, max_restarts=0)
        self.starting: dict[Any, Any] = {}  # `ready` call -> actor not placed yet
        self.idle: list[Any] = []
        self.actors: list[Any] = []  # every live actor asked for, to end them all when the run ends
        self.node_of: dict[Any, str] = {}  # placed actor -> its node's name (node_name)
        self.names: dict[str, str] = {}  # node id -> address
        self.busy = busy  # node -> seconds its actors spent on items (the executor's, kept across pools)

    @property
    def size(self) -> int:
        return len(self.actors)

    def start_actor(self) -> None:
        actor = self.actor_cls.remote()
        self.actors.append(actor)
        self.starting[actor.ready.remote()] = actor

    def node_name(self, node_id: str) -> str:
        """`address (first 8 of the node id)`: nodes of one machine share the address."""
        if node_id not in self.names:
            self.names.update({n["NodeID"]: n["NodeManagerAddress"] for n in self.ray.nodes()})
        return f"{self.names.get(node_id, '?')} ({node_id[:8]})"

    def kill(self, actor: Any) -> None:
        self.ray.kill(actor, no_restart=True)
        self.node_of.pop(actor, None)
        if actor in self.actors:
            self.actors.remove(actor)
        if actor in self.idle:
            self.idle.remove(actor)

    def close(self) -> None:
        for actor in self.actors:  # the idle, the busy ones of a failed run, and those still waiting for a CPU
            self.ray.kill(actor, no_restart=True)
        self.starting.clear()
        self.idle.clear()
        self.actors.clear()
        self.node_of.clear()


class Scheduler:
    """Hands items to live actors, one at a time, and survives actors and nodes that die under it."""

    def __init__(self, pool: Pool, concurrency: int, label: str, noun: str, bar: tqdm) -> None:
        self.ray = pool.ray
        self.pool = pool
        self.concurrency = concurrency
        self.label = label
        self.noun = noun  # "shard" or "task"
        self.bar = bar
        self.running: dict[Any, tuple[Any, Item, float]] = {}  # call -> (actor, item, when it was handed out)
        self.failed_starts = 0  # actors that died before they answered, since the last one that did

    def run(self, items: list[Item]) -> list[Any]:
        from ray.exceptions import RayActorError, RayTaskError

        queue = deque(items)
        attempts = dict.fromkeys((item.index for item in items), 0)
        results: dict[int, Any] = {}
        failed: list[str] = []  # one line for each item that lost its worker MAX_ATTEMPTS times
        wait_s = worker_wait_s()
        no_worker_since = time.monotonic()  # while no actor is placed: the clock of worker_wait_s
        while self.pool.size < self.concurrency:
            self.pool.start_actor()
        while queue or self.running:
            while queue and self.pool.idle:
                actor, item = self.pool.idle.pop(), queue.popleft()
                self.running[getattr(actor, item.method).remote(*item.args)] = (actor, item, time.monotonic())
            done, _ = self.ray.wait([*self.running, *self.pool.starting], num_returns=1, timeout=POLL_S)
            for ref in done:
                if ref in self.pool.starting:
                    self.placed(ref)
                    continue
                actor, item, since = self.running.pop(ref)
                node = self.pool.node_of.get(actor, "?")
                self.pool.busy[node] = self.pool.busy.get(node, 0.0) + time.monotonic() - since
                try:
                    results[item.index] = self.ray.get(ref)
                except RayTaskError as exc:
                    _reraise_task_error(exc)
                except RayActorError as exc:
                    attempts[item.index] += 1
                    if self.lost(actor, item, exc, attempts[item.index]):
                        queue.appendleft(item)
                    else:  # the other items still run: nothing they could finish is lost
                        failed.append(
                            f"{self.label}: {item.name} lost its worker {MAX_ATTEMPTS} times ({last_line(exc)}); "
                            f"finished {self.noun}s are kept: rerun to resume, or look for an input that exhausts "
                            "memory"
                        )
                    continue
                self.pool.idle.append(actor)
                self.bar.update()
            if self.pool.idle or self.running:
                no_worker_since = time.monotonic()
            elif queue and time.monotonic() - no_worker_since > wait_s:
                self.stalled(len(queue), wait_s)
        if failed:
            raise StackcurateError(failed[0])
        return [results[item.index] for item in items]

    def placed(self, ref: Any) -> None:
        """An actor answered `ready` (it has its CPU), or died before it could."""
        from ray.exceptions import RayActorError

        actor = self.pool.starting.pop(ref)
        try:
            self.pool.node_of[actor] = self.pool.node_name(self.ray.get(ref))
        except RayActorError as exc:
            self.pool.kill(actor)
            if exc.actor_init_failed:  # it would fail on every node alike: e.g. stackcurate is not installed
                raise StackcurateError(
                    f"{self.label}: a Ray worker could not start ({last_line(exc)}); is stackcurate installed "
                    "on every node?"
                ) from None
            self.failed_starts += 1
            if self.failed_starts >= MAX_ATTEMPTS * self.concurrency:
                raise StackcurateError(
                    f"{self.label}: Ray workers keep dying as they start ({last_line(exc)}); finished "
                    f"{self.noun}s are kept: rerun to resume"
                ) from None
            log.warning("%s: a Ray worker died as it started; asking for another", self.label)
            self.pool.start_actor()
            return
        self.failed_starts = 0
        self.pool.idle.append(actor)

    def lost(self, actor: Any, item: Item, exc: Exception, attempts: int) -> bool:
        """A worker died with `item`: ask for a replacement; whether to run the item again (not after
        MAX_ATTEMPTS: the run then fails once the other items are done)."""
        self.pool.kill(actor)  # if only unreachable, it must not come back holding a CPU
        # The replacement runs only if Ray finds it a CPU; after a node loss the surviving actors take the queue.
        self.pool.start_actor()
        if attempts >= MAX_ATTEMPTS:
            return False
        log.warning(
            "%s: the worker running %s died (%s); running it again (attempt %d of %d)",
            self.label,
            item.name,
            last_line(exc),
            attempts + 1,
            MAX_ATTEMPTS,
        )
        return True

    def stalled(self, left: int, wait_s: float) -> NoReturn:
        free = self.ray.available_resources().get("CPU", 0.0)
        raise StackcurateError(
            f"{self.label}: no Ray worker could run for {wait_s:.0f} s ({left} {self.noun}(s) left, {free:g} CPU(s) "
            "free in the cluster: were its nodes lost?); finished shards are kept: rerun to resume"
        )


def last_line(exc: BaseException) -> str:
    """The most telling line of a Ray error: its last non-empty one, shortened."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:200]

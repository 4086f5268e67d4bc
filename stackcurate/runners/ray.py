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
import gc
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

from tqdm import tqdm

from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.core.shards import ShardJob

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 4  # per shard: a shard that kills its worker every time (an input that exhausts memory) stops the run
POLL_S = 1.0  # how long the driver waits on its workers before it looks at the clock again
CONNECT_TIMEOUT_S = 5.0  # for the TCP probe of --ray-address: a live cluster answers in milliseconds
DEFAULT_WORKER_WAIT_S = 300.0  # an autoscaler needs minutes to add a node; a lost cluster needs an answer
# A worker holding more after its stage is replaced: ScanCode's index (~1.5 GB) or the PII model's torch (~600
# MB) would otherwise stay in memory through the stages after theirs. A fresh worker holds ~200 MB.
DEFAULT_RECYCLE_MB = 400.0  # the ingest group's workers (~460 MiB: enry's Go runtime, numba) are replaced too
RECYCLE_WAIT_S = 10.0  # the longest a replaced worker is waited for
SHARED_CHECK_S = 120.0  # each node answers whether it sees the output: a task that needs no CPU


def _env_number(name: str, default: float, unit: str) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        raise StackcurateError(f"{name} must be a number of {unit}, not '{value}'") from None


def worker_wait_s() -> float:
    """How long a run waits while no worker can run (STACKCURATE_WORKER_WAIT_S, default 300 s)."""
    return _env_number("STACKCURATE_WORKER_WAIT_S", DEFAULT_WORKER_WAIT_S, "seconds")


def recycle_mb() -> float:
    """The memory (MiB) above which a worker is replaced after a stage (STACKCURATE_WORKER_RECYCLE_MB)."""
    return _env_number("STACKCURATE_WORKER_RECYCLE_MB", DEFAULT_RECYCLE_MB, "MiB")


def init(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to `address` (or RAY_ADDRESS), else start an embedded Ray; no-op if Ray is already up.

    An address is probed first, so that an address where nothing listens, or a cluster that wants a token
    this process does not send, is a one-line error within seconds rather than minutes of Ray's retries.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise StackcurateError(
            "the Ray runner needs Ray: install `stackcurate[ray]`, or pass --runner local"
        ) from None
    if ray.is_initialized():
        return
    from ray.exceptions import RayError

    address = address or os.environ.get("RAY_ADDRESS") or None
    if address and address not in ("auto", "local"):
        _probe(address)
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": True}
    # Workers on a cluster do not inherit this process's environment: pass the allocator choice along.
    kwargs["runtime_env"] = {"env_vars": {"ARROW_DEFAULT_MEMORY_POOL": os.environ["ARROW_DEFAULT_MEMORY_POOL"]}}
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            # A private embedded Ray gets a token of its own; Ray's notice about it is noise here.
            logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
            # "local" always starts a private Ray: a bare ray.init() would join any cluster this machine ran.
            ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), **kwargs)
    except (ConnectionError, RuntimeError, ValueError, RayError) as exc:
        if _is_auth_failure(exc):
            raise StackcurateError(_token_line(address or "local")) from None
        where = f"the Ray cluster at {address}" if address else "an embedded Ray"
        raise StackcurateError(f"could not start or reach {where}: {str(exc).splitlines()[0]}") from None


def _probe(address: str) -> None:
    """Fail in one line, within seconds, when nothing listens at `address` or its cluster refuses us.

    Without this, `ray.init` retries an unreachable address for minutes, logging a warning every 40 s, and
    reports a cluster that wants token authentication as an address it "failed to connect to".
    """
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return  # not host:port: ray.init names the format problem
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise StackcurateError(
            f"nothing answers at {address} ({reason}); start the cluster (`ray start --head`) or fix "
            "--ray-address / RAY_ADDRESS"
        ) from None
    if address.startswith("ray://"):
        return  # a Ray Client server, not the GCS: ray.init speaks its protocol
    _probe_gcs(target, address)


def _probe_gcs(target: str, address: str) -> None:
    """Ask the cluster's GCS for its id, once: the only quick way to learn that it wants a token."""
    from ray.exceptions import AuthenticationError, RayError

    try:
        # Ray's own client for the GCS: private, so any surprise in it leaves the diagnosis to ray.init.
        from ray._raylet import GcsClient  # pyright: ignore[reportAttributeAccessIssue]
    except ImportError:
        return
    try:
        with _quiet_stderr():  # the C++ client logs each failed attempt; the one-line error says it all
            GcsClient(address=target)
    except AuthenticationError:
        raise StackcurateError(_token_line(address)) from None
    except RayError as exc:
        raise StackcurateError(
            f"{address} accepts connections but no Ray cluster answers there ({str(exc).splitlines()[0]}); "
            "check the port (the head's GCS port, 6379 by default)"
        ) from None
    except Exception:  # noqa: BLE001 - an API change in Ray's private client: ray.init will report what is wrong
        return


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (C++ logging goes there, past Python's sys.stderr) for a short call."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _is_auth_failure(exc: BaseException) -> bool:
    """Whether Ray's connection error, or any error it chains, is the cluster refusing our token."""
    from ray.exceptions import AuthenticationError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AuthenticationError) or "InvalidAuthToken" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _token_line(address: str) -> str:
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return (
            f"the Ray cluster at {address} uses token authentication and refused this machine's token; give it "
            "the cluster's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
        )
    return (
        f"the Ray cluster at {address} uses token authentication: set RAY_AUTH_MODE=token and give this "
        "machine the cluster's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
    )


def _reraise_task_error(exc: Exception) -> NoReturn:
    """Raise the exception a task raised in its worker, as itself: a StackcurateError stays one line for the
    CLI, an OSError stays an OSError (disk full). Ray's wrapper, with the remote traceback, is its cause."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        raise cause from exc
    raise exc


class _Worker:
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


def _running(pid: int) -> bool:
    """Whether process `pid` of this machine still runs (a zombie holds no memory: it counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@dataclass
class _Item:
    """One call for the scheduler: a shard of a stage, or one task of a phase."""

    index: int
    name: str  # "shard 00003" or "task 3", for messages
    method: str  # the worker's method
    args: tuple[Any, ...]


class _Pool:
    """The run's live actors, of one kind (CPU only, or with GPUs), kept from one stage and phase to the next."""

    def __init__(self, ray: Any, num_gpus: float, busy: dict[str, float]) -> None:
        self.ray = ray
        self.num_gpus = num_gpus
        # No restarts by Ray: a restarted actor would hold its call while it waits for a CPU that, after a node
        # loss, a surviving idle actor holds. The scheduler replaces dead actors and moves their work instead.
        self.actor_cls = ray.remote(_Worker).options(num_cpus=1, num_gpus=num_gpus, max_restarts=0)
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


class _Scheduler:
    """Hands items to live actors, one at a time, and survives actors and nodes that die under it."""

    def __init__(self, pool: _Pool, concurrency: int, label: str, noun: str, bar: tqdm) -> None:
        self.ray = pool.ray
        self.pool = pool
        self.concurrency = concurrency
        self.label = label
        self.noun = noun  # "shard" or "task"
        self.bar = bar
        self.running: dict[Any, tuple[Any, _Item, float]] = {}  # call -> (actor, item, when it was handed out)
        self.failed_starts = 0  # actors that died before they answered, since the last one that did

    def run(self, items: list[_Item]) -> list[Any]:
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
                            f"{self.label}: {item.name} lost its worker {MAX_ATTEMPTS} times ({_last_line(exc)}); "
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
                    f"{self.label}: a Ray worker could not start ({_last_line(exc)}); is stackcurate installed "
                    "on every node?"
                ) from None
            self.failed_starts += 1
            if self.failed_starts >= MAX_ATTEMPTS * self.concurrency:
                raise StackcurateError(
                    f"{self.label}: Ray workers keep dying as they start ({_last_line(exc)}); finished "
                    f"{self.noun}s are kept: rerun to resume"
                ) from None
            log.warning("%s: a Ray worker died as it started; asking for another", self.label)
            self.pool.start_actor()
            return
        self.failed_starts = 0
        self.pool.idle.append(actor)

    def lost(self, actor: Any, item: _Item, exc: Exception, attempts: int) -> bool:
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
            _last_line(exc),
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
        self._pool: _Pool | None = None
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

    def _pool_for(self, num_gpus: float, label: str) -> tuple[_Pool, int]:
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
            self._pool = _Pool(ray, num_gpus, self._busy)
        return self._pool, max(1, self.workers or available)

    def _schedule(
        self, items: list[_Item], label: str, noun: str, num_gpus: float = 0.0, *, bar: bool = True
    ) -> list[Any]:
        pool, concurrency = self._pool_for(num_gpus, label)
        concurrency = min(concurrency, len(items))
        self._workers = max(self._workers, concurrency)
        with tqdm(
            total=len(items), desc=f"{label} ({max(concurrency, pool.size)} workers)", unit=noun,
            disable=not self.progress or not bar,
        ) as shown:  # fmt: skip
            try:
                return _Scheduler(pool, concurrency, label, noun, shown).run(items)
            except BaseException:
                self._drop_pool()  # a failed run leaves no actor behind to write after it
                raise

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
                    log.debug("a node could not answer the shared-folder check: %s", _last_line(exc))
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
        items = [_Item(s.index, f"shard {s.name}", "run", (job, s)) for s in ordered]
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
        calls = [_Item(i, f"task {i}", "call", (fn, args)) for i, args in enumerate(items)]
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

            _end_monitor()
            ray.shutdown()
            self._owns_ray = False


def _end_monitor() -> None:
    """Kill the embedded Ray's autoscaler monitor, which a private one-machine Ray has no use for: `ray.shutdown`
    asks it to stop, waits the second it never answers in, then kills it (1.0 of the 1.4 s a shutdown takes).
    Ray's node object is private API; anything unexpected leaves the shutdown to Ray."""
    with contextlib.suppress(Exception):
        import ray

        node = ray._private.worker._global_node  # pyright: ignore[reportAttributeAccessIssue]
        for info in node.all_processes.get("monitor", []):
            info.process.kill()
            info.process.wait(timeout=5)


def _listing(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def _listings(paths: list[str]) -> list[list[str] | None]:
    """On one node: the names in each folder (None where there is no such folder)."""
    return [_listing(p) for p in paths]


def _last_line(exc: BaseException) -> str:
    """The most telling line of a Ray error: its last non-empty one, shortened."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:200]


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

"""Run shards on Ray: an embedded local Ray by default, an existing cluster with `--ray-address`.

A set of Ray actors takes the pending shards one at a time. Each actor builds the stage once (heavy
resources load once per worker) and runs whole shards with :func:`run_shard`, which writes and commits
the shard's files itself. So output file names and contents depend only on the plan, never on how many
workers ran, and a shard lost with its worker is simply redone, by another worker of this run or by a rerun.

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
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from tqdm import tqdm

from stackcurate.core.errors import StackcurateError
from stackcurate.core.stage import Shard, StageDir, StageFactory, run_shard

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 4  # per shard: a shard that kills its worker every time (an input that exhausts memory) stops the run
POLL_S = 1.0  # how long the driver waits on its workers before it looks at the clock again
CONNECT_TIMEOUT_S = 5.0  # for the TCP probe of --ray-address: a live cluster answers in milliseconds
DEFAULT_WORKER_WAIT_S = 300.0  # an autoscaler needs minutes to add a node; a lost cluster needs an answer


def worker_wait_s() -> float:
    """How long a run waits while no worker can run (STACKCURATE_WORKER_WAIT_S, default 300 s)."""
    value = os.environ.get("STACKCURATE_WORKER_WAIT_S")
    try:
        return float(value) if value else DEFAULT_WORKER_WAIT_S
    except ValueError:
        raise StackcurateError(f"STACKCURATE_WORKER_WAIT_S must be a number of seconds, not '{value}'") from None


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


class _ShardWorker:
    """A Ray actor: builds the stage on its first shard, then runs one shard per call."""

    def __init__(self, factory: StageFactory, out: StageDir, run_id: str) -> None:
        # The stage is built on the first shard, not here: `ready` then answers as soon as Ray has placed the
        # actor, so the driver can tell a worker waiting for a CPU from one loading a model.
        self.factory = factory
        self.stage: Any = None
        self.out = out
        self.run_id = run_id

    def ready(self) -> bool:
        return True

    def run(self, shard: Shard) -> dict[str, Any]:
        if self.stage is None:
            self.stage = self.factory()
        return run_shard(self.stage, shard, self.out, self.run_id)


def run(
    factory: StageFactory,
    shards: list[Shard],
    out: StageDir,
    run_id: str,
    *,
    address: str | None = None,
    workers: int | None = None,
    ray_cpus: int | None = None,
    progress: bool = True,
    resources: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Run `shards` on a set of actors, one CPU each plus `resources` (`{"num_gpus": 1}`: one GPU each).

    Plain actors rather than Ray Data's `map_batches`: the same scheduling without Ray Data's executor in
    every worker (a dedup remove worker peaked at 500-620 MiB under Ray Data, 305 MiB as a plain actor, and
    its peak no longer moved with the number of shards it ran). The driver schedules them itself rather than
    through `ActorPool`, which waits forever on a call whose node died. An embedded Ray gets `ray_cpus` CPUs
    (default: the machine's), whatever `workers` is.
    """
    init(address, ray_cpus)
    import ray

    cluster = ray.cluster_resources()
    available = int(cluster.get("CPU", 1))
    num_gpus = (resources or {}).get("num_gpus", 0.0)
    if num_gpus:
        if cluster.get("GPU", 0) < num_gpus:
            raise StackcurateError(
                f"{out.stage}: asked for {num_gpus:g} GPU(s) per worker, but the Ray cluster has "
                f"{cluster.get('GPU', 0):g}; pass --num-gpus 0 to run on CPU"
            )
        available = min(available, int(cluster["GPU"] // num_gpus))
    concurrency = max(1, min(workers or available, len(shards)))
    # No restarts by Ray: a restarted actor would hold its shard's call while it waits for a CPU that, after a
    # node loss, a surviving idle actor holds. The driver replaces dead actors and moves their shards instead.
    actor_cls = ray.remote(_ShardWorker).options(num_cpus=1, num_gpus=num_gpus, max_restarts=0)
    with tqdm(
        total=len(shards), desc=f"{out.stage} ({concurrency} workers)", unit="shard", disable=not progress
    ) as bar:
        scheduler = _Scheduler(ray, lambda: actor_cls.remote(factory, out, run_id), concurrency, out.stage, bar)
        return scheduler.run(shards)


class _Scheduler:
    """Hands shards to live actors, one at a time, and survives actors and nodes that die under it."""

    def __init__(self, ray: Any, new_actor: Callable[[], Any], concurrency: int, stage: str, bar: tqdm) -> None:
        self.ray = ray
        self.new_actor = new_actor
        self.concurrency = concurrency
        self.stage = stage
        self.bar = bar
        self.starting: dict[Any, Any] = {}  # `ready` call -> actor not placed yet
        self.idle: list[Any] = []
        self.running: dict[Any, tuple[Any, Shard]] = {}  # `run` call -> (actor, shard)
        self.actors: list[Any] = []  # every actor asked for, to end them all when the run ends
        self.failed_starts = 0  # actors that died before they answered, since the last one that did

    def start_actor(self) -> None:
        actor = self.new_actor()
        self.actors.append(actor)
        self.starting[actor.ready.remote()] = actor

    def run(self, shards: list[Shard]) -> list[dict[str, Any]]:
        from ray.exceptions import RayActorError, RayTaskError

        queue = deque(shards)
        attempts = dict.fromkeys((s.index for s in shards), 0)
        summaries: list[dict[str, Any]] = []
        failed: list[str] = []  # one line for each shard that lost its worker MAX_ATTEMPTS times
        wait_s = worker_wait_s()
        no_worker_since = time.monotonic()  # while no actor is placed: the clock of worker_wait_s
        for _ in range(self.concurrency):
            self.start_actor()
        try:
            while queue or self.running:
                while queue and self.idle:
                    actor, shard = self.idle.pop(), queue.popleft()
                    self.running[actor.run.remote(shard)] = (actor, shard)
                done, _ = self.ray.wait([*self.running, *self.starting], num_returns=1, timeout=POLL_S)
                for ref in done:
                    if ref in self.starting:
                        self.placed(ref)
                        continue
                    actor, shard = self.running.pop(ref)
                    try:
                        summary = self.ray.get(ref)
                    except RayTaskError as exc:
                        _reraise_task_error(exc)
                    except RayActorError as exc:
                        attempts[shard.index] += 1
                        if self.lost(actor, shard, exc, attempts[shard.index]):
                            queue.appendleft(shard)
                        else:  # the other shards still run: nothing they could finish is lost
                            failed.append(
                                f"{self.stage}: shard {shard.name} lost its worker {MAX_ATTEMPTS} times "
                                f"({_last_line(exc)}); finished shards are kept: rerun to resume, or look for an "
                                "input that exhausts memory"
                            )
                        continue
                    summaries.append(summary)
                    self.idle.append(actor)
                    self.bar.update()
                    self.bar.set_postfix(docs=sum(s["docs_in"] for s in summaries), refresh=False)
                if self.idle or self.running:
                    no_worker_since = time.monotonic()
                elif queue and time.monotonic() - no_worker_since > wait_s:
                    self.stalled(len(queue), wait_s)
        finally:
            for actor in self.actors:  # the idle, the busy ones of a failed run, and those still waiting for a CPU
                self.ray.kill(actor, no_restart=True)
        if failed:
            raise StackcurateError(failed[0])
        return summaries

    def placed(self, ref: Any) -> None:
        """An actor answered `ready` (it has its CPU), or died before it could."""
        from ray.exceptions import RayActorError

        actor = self.starting.pop(ref)
        try:
            self.ray.get(ref)
        except RayActorError as exc:
            if exc.actor_init_failed:  # it would fail on every node alike: e.g. stackcurate is not installed
                raise StackcurateError(
                    f"{self.stage}: a Ray worker could not start ({_last_line(exc)}); is stackcurate installed "
                    "on every node?"
                ) from None
            self.failed_starts += 1
            if self.failed_starts >= MAX_ATTEMPTS * self.concurrency:
                raise StackcurateError(
                    f"{self.stage}: Ray workers keep dying as they start ({_last_line(exc)}); finished shards "
                    "are kept: rerun to resume"
                ) from None
            log.warning("%s: a Ray worker died as it started; asking for another", self.stage)
            self.start_actor()
            return
        self.failed_starts = 0
        self.idle.append(actor)

    def lost(self, actor: Any, shard: Shard, exc: Exception, attempts: int) -> bool:
        """A worker died with `shard`: ask for a replacement; whether to run the shard again (not after
        MAX_ATTEMPTS: the run then fails once the other shards are done)."""
        self.ray.kill(actor, no_restart=True)  # if only unreachable, it must not come back holding a CPU
        # The replacement runs only if Ray finds it a CPU; after a node loss the surviving actors take the queue.
        self.start_actor()
        if attempts >= MAX_ATTEMPTS:
            return False
        log.warning(
            "%s: the worker running shard %s died (%s); running it again (attempt %d of %d)",
            self.stage,
            shard.name,
            _last_line(exc),
            attempts + 1,
            MAX_ATTEMPTS,
        )
        return True

    def stalled(self, left: int, wait_s: float) -> NoReturn:
        free = self.ray.available_resources().get("CPU", 0.0)
        raise StackcurateError(
            f"{self.stage}: no Ray worker could run for {wait_s:.0f} s ({left} shard(s) left, {free:g} CPU(s) "
            "free in the cluster: were its nodes lost?); finished shards are kept: rerun to resume"
        )


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
    """`fn(*item)` for each item as Ray tasks, at most `workers` at a time; results in item order.

    A task whose worker or node dies is retried by Ray on another (tasks write their files atomically, so a
    retry overwrites what the lost attempt left). An exception raised by `fn` itself stops the run with that
    same exception; a task that lost its worker every time, or a cluster left with no CPU for
    :func:`worker_wait_s` seconds, stops it in one line.
    """
    if not items:
        return []
    init(address, ray_cpus)
    import ray
    from ray.exceptions import RayError, RayTaskError

    remote = ray.remote(num_cpus=1, max_retries=MAX_ATTEMPTS - 1)(fn)
    limit = max(1, workers or int(ray.cluster_resources().get("CPU", 1)))
    results: list[Any] = [None] * len(items)
    pending: dict[Any, int] = {}
    queue = iter(enumerate(items))
    wait_s = worker_wait_s()
    progress_at = time.monotonic()  # when a task last finished, or the cluster last had a CPU
    finished = 0

    def submit() -> None:
        if (nxt := next(queue, None)) is not None:
            pending[remote.remote(*nxt[1])] = nxt[0]

    with tqdm(total=len(items), desc=desc, unit="task", disable=not progress) as bar:
        for _ in range(limit):
            submit()
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                if not done:
                    # Ray requeues the tasks of a lost node and waits for a CPU, forever if none is left.
                    now = time.monotonic()
                    if ray.cluster_resources().get("CPU", 0) >= 1:
                        progress_at = now
                    elif now - progress_at > wait_s:
                        raise StackcurateError(
                            f"{desc}: the Ray cluster has had no CPU for {wait_s:.0f} s ({len(items) - finished} "
                            f"of {len(items)} tasks not done: were its nodes lost?); finished tasks are kept: rerun "
                            "to resume"
                        )
                    continue
                try:
                    results[pending.pop(done[0])] = ray.get(done[0])
                except RayTaskError as exc:
                    _reraise_task_error(exc)
                except RayError as exc:  # the worker died on every attempt (memory, lost nodes)
                    raise StackcurateError(
                        f"{desc}: a task lost its worker {MAX_ATTEMPTS} times ({_last_line(exc)}); finished "
                        "tasks are kept: rerun to resume, or look for an input that exhausts memory"
                    ) from None
                progress_at = time.monotonic()
                finished += 1
                bar.update()
                submit()
        finally:
            for ref in pending:  # a failed run leaves no task behind to write after it
                ray.cancel(ref)  # an interrupt in the task: its writers abort and leave no files
    return results

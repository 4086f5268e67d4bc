"""Starting an embedded Ray, or joining a cluster: one-line errors for an address where nothing listens or a
cluster that wants a token, and a quick shutdown."""

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

from stackcurate.core.errors import StackcurateError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0  # for the TCP probe of --ray-address: a live cluster answers in milliseconds


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
        from ray._raylet import GcsClient  # pyright: ignore[reportAttributeAccessIssue, reportPrivateImportUsage]
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


def end_monitor() -> None:
    """Kill the embedded Ray's autoscaler monitor, which a private one-machine Ray has no use for: `ray.shutdown`
    asks it to stop, waits the second it never answers in, then kills it (1.0 of the 1.4 s a shutdown takes).
    Ray's node object is private API; anything unexpected leaves the shutdown to Ray."""
    with contextlib.suppress(Exception):
        import ray

        node = ray._private.worker._global_node  # pyright: ignore[reportAttributeAccessIssue, reportPrivateImportUsage]
        for info in node.all_processes.get("monitor", []):
            info.process.kill()
            info.process.wait(timeout=5)

"""`--runner auto`, the default: this process for a stage whose work is too small for Ray to pay for itself, an
embedded local Ray from the first stage whose work is large enough (kept for the rest of the run).

Ray costs a fixed time before the first shard runs: its start, its workers' start and their imports and
compiled kernels (~7 s on the project's 2-core machine, `benchmarks/limits.py`). Spreading W seconds of
one core's work over n cores saves W (1 - 1/n); Ray is worth starting when that saving exceeds the fixed time,
i.e. W > fixed * n / (n - 1). W is estimated before each group runs from its shards' bytes of text and the
stages' speed on one core (`Stage.mb_per_s`). A group whose shards' sizes are not known, or whose workers ask
for GPUs, runs on Ray. The choice never changes the output: shards write the same files whoever runs them.
"""

import logging
import os
from collections.abc import Callable
from typing import Any

from stackcurate.core.contract import Shard
from stackcurate.core.shards import ShardJob
from stackcurate.runners.local import LocalExecutor
from stackcurate.runners.ray_pool import env_number

log = logging.getLogger(__name__)

DEFAULT_RAY_FIXED_S = 7.0


def ray_fixed_s() -> float:
    """Seconds Ray costs before the first shard runs (STACKCURATE_RAY_FIXED_S): what the choice weighs."""
    return env_number("STACKCURATE_RAY_FIXED_S", DEFAULT_RAY_FIXED_S, "seconds")


def payoff_s(cpus: int, fixed_s: float) -> float:
    """The seconds of one core's work above which spreading it over `cpus` cores saves more than `fixed_s`."""
    return fixed_s * cpus / (cpus - 1) if cpus > 1 else float("inf")


def ray_pays_off(work_s: float, cpus: int, fixed_s: float) -> bool:
    return work_s > payoff_s(cpus, fixed_s)


class AutoExecutor:
    """A :class:`LocalExecutor` until a group's work pays for Ray, then a :class:`RayExecutor` (see the module
    docstring). `begin_group` makes the choice; the other methods go to the executor chosen."""

    def __init__(self, *, ray_cpus: int | None = None, progress: bool = True) -> None:
        self.ray_cpus, self.progress = ray_cpus, progress
        self._local = LocalExecutor(progress=progress)
        self._ray: Any = None  # the RayExecutor, once a group has started it

    @property
    def _current(self) -> Any:
        return self._local if self._ray is None else self._ray

    def begin_group(self, label: str, shards: list[Shard], mb_per_s: float, num_gpus: float = 0.0) -> None:
        if self._ray is not None:
            return  # started: the workers are warm, and this group uses them
        threshold = payoff_s(self.ray_cpus or os.cpu_count() or 1, ray_fixed_s())
        known = all(shard.weight > 0 or shard.kind == "parquet" for shard in shards)  # a Parquet one's 0: empty
        mb = sum(shard.weight for shard in shards) / 1e6
        work_s = mb / mb_per_s
        if known and not num_gpus and work_s <= threshold:  # Ray places GPU workers
            if shards:
                log.info(
                    "%s: %.0f MB, about %.0f s of work: running in this process (Ray pays off from about %.0f s "
                    "here; --runner ray to use it)", label, mb, work_s, threshold,
                )  # fmt: skip
            return
        from stackcurate.runners.ray import RayExecutor

        why = f"{mb:.0f} MB, about {work_s:.0f} s of work" if known else "sizes unknown"
        log.info("%s: %s: starting Ray", label, f"{num_gpus:g} GPU(s) per worker" if num_gpus else why)
        self._ray = RayExecutor(ray_cpus=self.ray_cpus, progress=self.progress)

    def run_shards(self, job: ShardJob, shards: list[Shard], *, num_gpus: float = 0.0) -> list[dict[str, Any]]:
        return self._current.run_shards(job, shards, num_gpus=num_gpus)

    def map(self, fn: Callable[..., Any], items: list[tuple[Any, ...]], desc: str | None) -> list[Any]:
        return self._current.map(fn, items, desc)

    def take_busy(self) -> dict[str, float]:
        return self._current.take_busy()

    def take_workers(self) -> int:
        return self._current.take_workers()

    def check_shared(self, folders: dict[str, str]) -> None:
        self._current.check_shared(folders)

    def close(self) -> None:
        self._local.close()
        if self._ray is not None:
            self._ray.close()

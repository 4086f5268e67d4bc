"""Executors: where shards and tasks run. `LocalExecutor` (this process) and `RayExecutor` (Ray actors that live
for the whole run) have the same interface; a run builds one from its options and passes it down."""

import os
from collections.abc import Callable
from typing import Any, Protocol

from stackcurate.core.contract import Shard
from stackcurate.core.shards import ShardJob


class Executor(Protocol):
    def run_shards(self, job: ShardJob, shards: list[Shard], *, num_gpus: float = 0.0) -> list[dict[str, Any]]:
        """Run each shard of a stage (or fused group) with `job`; the shards' summaries."""
        ...

    def map(self, fn: Callable[..., Any], items: list[tuple[Any, ...]], desc: str | None) -> list[Any]:
        """`fn(*item)` for each item; results in item order. A progress bar titled `desc` (None: no bar)."""
        ...

    def take_busy(self) -> dict[str, float]:
        """Seconds each node's workers spent on shards and tasks since the last call (empty where not measured)."""
        ...

    def take_workers(self) -> int:
        """The most workers that ran at once since the last call (0: none ran)."""
        ...

    def check_shared(self, folders: dict[str, str]) -> None:
        """Stop in one line unless every worker sees each folder (what it is -> path) as the driver does."""
        ...

    def begin_group(self, label: str, shards: list[Shard], mb_per_s: float, num_gpus: float = 0.0) -> None:
        """A stage (or fused group) named `label` is about to run `shards` at about `mb_per_s` MB of text per
        second on one core, each worker with `num_gpus` GPUs: where it runs, for an executor that chooses
        (`--runner auto`)."""
        ...

    def close(self) -> None:
        """Release the workers (the run is over)."""
        ...


def make_executor(
    runner: str, *, address: str | None = None, workers: int | None = None, ray_cpus: int | None = None,
    progress: bool = True,
) -> Executor:  # fmt: skip
    """The executor for `runner` (`auto`, `ray` or `local`). `auto` is Ray's wherever Ray is asked for: a cluster's
    address (`--ray-address`, RAY_ADDRESS) or a number of workers."""
    if runner == "local":
        from stackcurate.runners.local import LocalExecutor

        return LocalExecutor(progress=progress)
    if runner == "auto" and not (address or os.environ.get("RAY_ADDRESS") or workers):
        from stackcurate.runners.auto import AutoExecutor

        return AutoExecutor(ray_cpus=ray_cpus, progress=progress)
    from stackcurate.runners.ray import RayExecutor

    return RayExecutor(address=address, workers=workers, ray_cpus=ray_cpus, progress=progress)

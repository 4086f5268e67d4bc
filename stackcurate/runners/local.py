"""Run shards and tasks one after another in this process (debugging, tests, tiny inputs)."""

from collections.abc import Callable
from typing import Any

from stackcurate.core import progress
from stackcurate.core.contract import Shard
from stackcurate.core.shards import ShardJob


class LocalExecutor:
    """The in-process twin of :class:`stackcurate.runners.ray.RayExecutor`."""

    def __init__(self, *, progress: bool = True) -> None:
        self.progress = progress
        self._key: str | None = None
        self._stages: Any = None
        self._ran = False  # see take_workers

    def run_shards(self, job: ShardJob, shards: list[Shard], *, num_gpus: float = 0.0) -> list[dict[str, Any]]:
        if self._key != job.key:
            self._stages, self._key = job.build(), job.key
        summaries = []
        with progress.bar(job.name, len(shards), "shard", self.progress and bool(shards)) as bar:
            for shard in shards:
                self._ran = True
                summaries.append(job.run(self._stages, shard))
                bar.update()
        return summaries

    def take_busy(self) -> dict[str, float]:
        """Not measured: one process on one machine."""
        return {}

    def take_workers(self) -> int:
        """1 if this process ran a shard or a task since the last call, else 0."""
        ran, self._ran = self._ran, False
        return int(ran)

    def check_shared(self, folders: dict[str, str]) -> None:
        """Nothing to check: this process is the only one that reads and writes."""

    def begin_group(self, label: str, shards: list[Shard], mb_per_s: float, num_gpus: float = 0.0) -> None:
        """Nothing to choose: everything runs here."""

    def map(self, fn: Callable[..., Any], items: list[tuple[Any, ...]], desc: str | None) -> list[Any]:
        """`fn(*item)` for each item, in order."""
        results = []
        self._ran = self._ran or bool(items)
        with progress.bar(desc or "", len(items), "task", self.progress and bool(items) and desc is not None) as bar:
            for item in items:
                results.append(fn(*item))
                bar.update()
        return results

    def close(self) -> None:
        self._key, self._stages = None, None

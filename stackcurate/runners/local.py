"""Run shards one after another in this process (debugging, tests, tiny inputs)."""

from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from stackcurate.core.stage import Shard, StageDir, StageFactory, run_shard


def run(
    factory: StageFactory, shards: list[Shard], out: StageDir, run_id: str, *, progress: bool = True
) -> list[dict[str, Any]]:
    stage = factory()
    summaries = []
    with tqdm(total=len(shards), desc=stage.name, unit="shard", disable=not progress) as bar:
        for shard in shards:
            summaries.append(run_shard(stage, shard, out, run_id))
            bar.update()
            bar.set_postfix(docs=sum(s["docs_in"] for s in summaries), refresh=False)
    return summaries


def map_tasks(fn: Callable[..., Any], items: list[tuple[Any, ...]], desc: str, *, progress: bool = True) -> list[Any]:
    """`fn(*item)` for each item, in order (the in-process twin of :func:`stackcurate.runners.ray.map_tasks`)."""
    results = []
    for item in tqdm(items, desc=desc, unit="task", disable=not progress or not items):
        results.append(fn(*item))
    return results

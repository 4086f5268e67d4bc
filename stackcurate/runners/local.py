"""Run shards one after another in this process (debugging, tests, tiny inputs)."""

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

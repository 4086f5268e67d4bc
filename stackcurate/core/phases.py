"""Declared phases: the global work of a multi-phase stage, resumable and cleaned up in one place.

dedup (signatures, buckets, components, clusters), format (the shuffle by repository) and tokenize (routing
and the Megatron shards) do global work besides their per-shard pass. Each declares it as phases in a work
folder it gets from its task context (`ctx.phases(name, settings)`); this module owns what every such stage
would otherwise write by hand:

- the folder and its plan fingerprint (the stage's settings that decide the result, and the input shards):
  a finished folder of the same fingerprint is reused (`done`); another one is replaced only with
  `--overwrite`, else it is a one-line error;
- each phase's items run as tasks on the run's executor, each committed by a marker, so a rerun runs only
  the items without one;
- the scratch files of the phases (`work(...)`), dropped when a phase no longer needs them (`drop`) and
  all at the end (`complete`).

    phases = ctx.phases("dedup_clusters", settings)
    if not phases.done:
        phases.run("signature", signature_task, [(plan, i) for i in range(n)])
        ...
        phases.complete()
"""

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from stackcurate.core import io, progress
from stackcurate.core.config import dump_yaml
from stackcurate.core.contract import StageContext
from stackcurate.core.fingerprint import plan_fingerprint
from stackcurate.core.layout import StageDir

WORK = "work"  # scratch files of the phases, in the folder's state (layout.StageDir.state)
DONE = "done"  # the markers of each phase's items, under WORK


def _marked(fs: pafs.FileSystem, marker: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run one task and commit its result as a marker, so a rerun skips it."""
    result = fn(*args)
    io.write_bytes_atomic(fs, marker, json.dumps(result).encode())
    pa.default_memory_pool().release_unused()  # the worker lives on for the next task
    return result


class Phases:
    """A folder of phases (see the module docstring).

    Args:
        ctx: The stage's task context (its output, plan, executor and `--overwrite`).
        name: The folder, under the run's output (`dedup_clusters`), or the stage's own folder when `own` is set
            (tokenize: its phases run after its shards, in `<out>/_state/tokenize/work`).
        settings: What the result depends on besides the input shards (the stage's plan; plain values).
        own: The folder is the stage's own output folder, already started by the pipeline (StageDir.start_run):
            no fingerprint of its own, and never reused as a whole.
    """

    def __init__(self, ctx: StageContext, name: str, settings: dict[str, Any], *, own: bool = False) -> None:
        self.ctx = ctx
        self.dir = StageDir(ctx.out, name)
        self.settings = settings
        self.own = own
        self.fingerprint = plan_fingerprint(name, settings, list(ctx.shards), out=ctx.out)
        self.done = (
            not own and not ctx.overwrite and self.dir.is_complete() and self.dir.fingerprint() == self.fingerprint
        )
        if not self.done and not own:
            self.dir.start_run(self.fingerprint, overwrite=ctx.overwrite)

    @property
    def uri(self) -> str:
        return self.dir.uri

    @property
    def fs(self) -> pafs.FileSystem:
        return self.dir.fs

    def work(self, *parts: str) -> str:
        """A path for scratch files (on the folder's filesystem, without scheme)."""
        return io.join(self.dir.state, WORK, *parts)

    def work_uri(self, *parts: str) -> str:
        """The same path as a URI, for tasks that open it themselves."""
        return io.join(self.dir.state_uri, WORK, *parts)

    def run(
        self,
        phase: str,
        fn: Callable[..., Any],
        items: list[tuple[Any, ...]],
        desc: str | None = None,
        *,
        bar: bool = True,
    ) -> list[Any]:
        """`fn(*item)` for the items of `phase` that have no marker yet (a rerun resumes); every item's result,
        in order. The progress bar reads `desc` (default: the folder and the phase); `bar=False`: none."""
        marker_dir = self.work(DONE, phase)
        self.fs.create_dir(marker_dir, recursive=True)
        markers = [io.join(marker_dir, f"{i:05d}.json") for i in range(len(items))]
        finished = set(io.expand(self.fs, marker_dir, suffix=".json"))  # by an interrupted run
        todo = [i for i, m in enumerate(markers) if m not in finished]
        label = (desc or f"{self.dir.stage} {phase}") if bar else None
        ran = self.ctx.map(_marked, [(self.fs, markers[i], fn, *items[i]) for i in todo], label)
        results = dict(zip(todo, ran, strict=True))
        return [results[i] if i in results else json.loads(io.read_text(self.fs, m)) for i, m in enumerate(markers)]

    def rounds(self, desc: str) -> "Rounds":
        """A phase that runs in rounds until it converges (dedup's connected components, graph's walk by
        depth), under one progress bar `desc` that counts the rounds; use it as a context manager."""
        return Rounds(self, desc)

    def drop(self, *parts: str) -> None:
        """Remove scratch files the next phases no longer need."""
        path = self.work(*parts)
        if io.exists(self.fs, path):
            self.fs.delete_dir(path)

    def complete(self) -> None:
        """Drop every scratch file; a folder of its own is marked complete (reused by a rerun of the same plan)."""
        self.drop()
        if not self.own:
            config = {"stage": self.dir.stage, "input": self.ctx.input_uri, "config": self.settings}
            self.dir.mark_complete(dump_yaml(config))

    def remove(self) -> None:
        """Remove the whole folder (its result was consumed: format's grouped copy of the input)."""
        self.dir.delete()


class Rounds:
    """The rounds of one phase (see :meth:`Phases.rounds`): each round is a phase of its own for markers and
    resume, and their tasks run without a progress bar each."""

    def __init__(self, phases: Phases, desc: str) -> None:
        self.phases = phases
        self.opened = progress.bar(desc, 0, " rounds", phases.ctx.progress)
        self.bar = self.opened.__enter__()

    def run(self, phase: str, fn: Callable[..., Any], items: list[tuple[Any, ...]]) -> list[Any]:
        """Run one round (`Phases.run`, without its own bar)."""
        results = self.phases.run(phase, fn, items, bar=False)
        self.bar.total += 1  # the rounds run until they converge: counted as they go
        self.bar.update()
        return results

    def __enter__(self) -> "Rounds":
        return self

    def __exit__(self, *exc: object) -> None:
        self.opened.__exit__(None, None, None)

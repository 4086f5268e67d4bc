"""One progress bar per stage: its phases and shards take turns on it.

A stage (a fused group of stages: one pass) opens its bar with :func:`stage_bar`; each phase of its work
(graph's table reads, dedup's signature and bucket phases, the shards, tokenize's shards) asks :func:`bar` for
one, and gets the stage's bar reset to that phase's total and named after it, so that a terminal shows one line
per stage, not one per phase. Outside a stage (a command's own work), :func:`bar` gives a bar of its own.
Bars are drawn only where progress is on (`--no-progress`; off by default when stderr is not a terminal).
"""

import contextlib
from collections.abc import Iterator

from tqdm import tqdm

_stage: tqdm | None = None  # the open stage's bar (this process runs one stage at a time)
_name = ""


@contextlib.contextmanager
def stage_bar(name: str, enabled: bool) -> Iterator[None]:
    """Open the bar of the stage `name` while it runs."""
    global _stage, _name
    if not enabled:
        yield
        return
    shown = tqdm(desc=name, total=0, unit=" tasks")
    _stage, _name = shown, name
    try:
        yield
    finally:
        _stage, _name = None, ""
        shown.close()


@contextlib.contextmanager
def bar(desc: str, total: int, unit: str, enabled: bool) -> Iterator[tqdm]:
    """A bar for one phase of `total` items: the open stage's, reset to this phase, else one of its own."""
    if _stage is not None and enabled:
        _stage.reset(total=total)
        _stage.unit = unit
        _stage.set_description(desc if desc.startswith(_name) else f"{_name}: {desc}")
        yield _stage
        _stage.refresh()  # the phase's last count stays on the line until the next phase takes it
        return
    with tqdm(total=total, desc=desc, unit=unit, disable=not enabled) as own:
        yield own

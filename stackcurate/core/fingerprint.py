"""What a stage's output depends on, as one hash: its config and plan, with local paths made portable."""

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stackcurate.core import io
from stackcurate.core.contract import Shard


def plan_fingerprint(stage: str, config: dict[str, Any], shards: list[Shard], *, out: str) -> str:
    """What a stage's output depends on: its config and its plan, with every local path made portable
    (:func:`_portable`), so a run folder moved or copied elsewhere, with or without its inputs, resumes."""
    return described_plan(stage, config, shards, out=out)[0]


def described_plan(
    stage: str, config: dict[str, Any], shards: list[Shard], *, out: str, memo: dict[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    """The plan's fingerprint (:func:`plan_fingerprint`) and what it is made of, in a form that says what changed
    (:func:`what_changed`): the config, and the input's shard and row counts with a hash of its shards. `memo`
    keeps the portable form of each path for the next plans over the same shards (a fused group's stages)."""
    _, root = io.filesystem(out)
    plan = [{k: v for k, v in asdict(s).items() if k != "weight"} for s in shards]
    payload = _portable({"stage": stage, "config": config, "shards": plan}, root + "/", {} if memo is None else memo)
    fingerprint = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    inputs = hashlib.sha256(json.dumps(payload["shards"], sort_keys=True, default=str).encode()).hexdigest()
    rows = sum(s.stop - s.start for s in shards)
    return fingerprint, {"config": payload["config"], "shards": len(shards), "rows": rows, "inputs": inputs[:16]}


def what_changed(before: dict[str, Any] | None, now: dict[str, Any]) -> str:
    """The difference of two plan summaries in a few words: `max_share: 0.5 -> 0.6`, or what the input became."""
    if not before:
        return "its input or config"
    old, new = before.get("config") or {}, now.get("config") or {}
    changed = [f"{key}: {_short(old.get(key))} -> {_short(new.get(key))}" for key in sorted({*old, *new})
               if old.get(key) != new.get(key)]  # fmt: skip
    if changed:
        more = f" and {len(changed) - 3} more settings" if len(changed) > 3 else ""
        return "; ".join(changed[:3]) + more
    if before.get("inputs") != now.get("inputs"):
        return (f"its input: {before.get('shards', 0):,} shards of {before.get('rows', 0):,} rows, now "
                f"{now['shards']:,} of {now['rows']:,}")  # fmt: skip
    return "its plan"


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


_HASHED_BYTES = 1 << 20  # of a file's head and of its tail: input Parquet files can be many GB


def _portable(value: Any, root: str, memo: dict[str, str]) -> Any:
    """`value` with local absolute paths replaced by what does not change when folders move: a path inside the
    run folder (`root`) by its relative path, a file elsewhere by its size and a hash of its first and last MiB
    (a rules table, a metadata Parquet file), a folder elsewhere by its name (a repository, a content store),
    a glob from its deepest existing folder's name on.
    URIs (`s3://...`) and other values stay as they are."""
    if isinstance(value, dict):
        return {k: _portable(v, root, memo) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_portable(v, root, memo) for v in value]
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    if value.startswith(root) or value == root.rstrip("/"):
        return "$OUT/" + value[len(root) :]
    if value not in memo:
        path = Path(value)
        if path.is_file():
            digest = hashlib.sha256()
            with path.open("rb") as f:
                size = f.seek(0, 2)
                f.seek(0)
                digest.update(f.read(_HASHED_BYTES))
                if size > 2 * _HASHED_BYTES:
                    f.seek(size - _HASHED_BYTES)
                digest.update(f.read(_HASHED_BYTES))
            memo[value] = f"file:{size}:{digest.hexdigest()}"
        else:  # a folder, or a glob (whose matches the plan's shards name): from the folder's name on
            folder = path
            while not folder.is_dir() and folder != folder.parent:
                folder = folder.parent
            memo[value] = f"dir:{folder.name}/{path.relative_to(folder).as_posix()}"
    return memo[value]

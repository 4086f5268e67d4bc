"""Drop a finished run's unredacted text: the Parquet files of the stages before pii.

Every stage before pii keeps the files' text as it came in (kept rows and `_removed/`: `ingest`, `license`,
`language`, `filter`, `decontaminate`, `dedup`), so secrets stay in those folders after pii has redacted its
copy. `purge` deletes each Parquet file of those stages' folders that has a text column
(`schema.TEXT_COLUMNS`) but no `pii_spans` column, i.e. that pii has not redacted. The folders of pii and the
stages after it are left alone (their text is redacted; `format_groups` holds pii's rows without the spans).
Stats, error rows (paths and reasons, no text), completion markers and configs stay, so `stackcurate stats`
reports the whole run as before; a `PURGED` file in the state of each stage it emptied says what went. It refuses
while pii has not finished, so it never deletes the only copy of a run's text.

Example:
    stackcurate purge work/demo --dry-run      # list what would go
    stackcurate purge work/demo
"""

import json
from dataclasses import dataclass

import pyarrow.parquet as pq

from stackcurate.core import io
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import PURGED, STATE, TABLES, StageDir
from stackcurate.core.schema import TEXT_COLUMNS
from stackcurate.stages import STAGE_ORDER

REDACTED_MARK = "pii_spans"  # the column pii adds: its output, and what is made from it, is redacted


@dataclass(frozen=True)
class Purged:
    """What a purge deleted (or would delete)."""

    files: list[str]
    bytes: int
    stages: list[str]

    def line(self, dry_run: bool) -> str:
        verb = "would delete" if dry_run else "deleted"
        where = ", ".join(self.stages) or "no stage"
        return f"purge: {verb} {len(self.files):,} files ({self.bytes / 1e6:.1f} MB) of unredacted text from {where}"


def before_pii(folder: str) -> bool:
    """Whether a run's folder (`ingest`, `license_scan`, `format_groups`) is a stage's from before pii."""
    stage = folder if folder in STAGE_ORDER else folder.split("_", 1)[0]
    return stage in STAGE_ORDER and STAGE_ORDER.index(stage) < STAGE_ORDER.index("pii")


def unredacted(out: str) -> list[str]:
    """The Parquet files of the stages before pii in the run folder `out` that hold text."""
    fs, root = io.filesystem(out)
    found = []
    for path in io.expand(fs, root, suffix=".parquet"):
        if not before_pii(_stage_of(path[len(root) :].strip("/"))):
            continue
        names = set(pq.read_schema(path, filesystem=fs).names)
        if names & set(TEXT_COLUMNS) and REDACTED_MARK not in names:
            found.append(path)
    return found


def _stage_of(name: str) -> str:
    """The stage folder of a file of the run (`filter/0.parquet`, `_removed/filter/0.parquet`); "" for the
    run's own files and the stages' state."""
    parts = name.split("/")
    if parts[0] in TABLES.values():
        return parts[1] if len(parts) > 2 else ""
    return parts[0] if len(parts) > 1 and parts[0] != STATE else ""


def purge(out: str, *, dry_run: bool = False) -> Purged:
    """Delete the unredacted Parquet files of the run in `out` (see the module docstring)."""
    fs, root = io.filesystem(out)
    if not StageDir(out, "pii").is_complete():
        raise StackcurateError(
            f"{out} has no finished pii output; purge deletes the unredacted text only once pii has redacted it"
        )
    files = unredacted(out)
    by_stage: dict[str, list[str]] = {}
    for path in files:
        by_stage.setdefault(_stage_of(path[len(root) :].strip("/")), []).append(path)
    size = sum(info.size for info in fs.get_file_info(files)) if files else 0
    if not dry_run:
        for stage, paths in by_stage.items():
            # the marker first: a purge stopped halfway still stops a rerun from reading what is left
            names = [path[len(root) :].strip("/") for path in paths]
            marker = StageDir(out, stage).marker(PURGED)
            io.write_bytes_atomic(fs, marker, (json.dumps({"deleted": names}, indent=1) + "\n").encode())
            for path in paths:
                fs.delete_file(path)
    return Purged(files, size, sorted(by_stage))

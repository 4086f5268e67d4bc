"""Attribution recall and false attributions, and query latency, on a run over real code.

Queries (seeded), each a window of `--chars` characters of real code:
- `verbatim`: a window of a file the run trained on (a file of a repository document in the shards);
- `whitespace`: the same, its indentation changed (4 spaces to 2, tabs to 4 spaces) and blank lines doubled;
- `renamed`: the same, three of its identifiers renamed everywhere in the window;
- `embedded`: the verbatim window between two blocks of code of another file that is not in the set;
- `absent`: a window of a file not in the set (`--absent`: folders of real code the run did not read);
- `near_duplicate`: a window of a file dedup removed (the run needs `--removed-content`), whose kept copies are
  the files of the set that hold the same window verbatim (windows no kept file holds are not asked).
A positive query is found when the files it is attributed to include the one it was taken from (a
near-duplicate: one of its kept copies); it is falsely attributed when they are only other files (positives) or
any file (absent). As `attribute` does by default, a query is attributed to the files it copies at least the
index's `min_copied` tokens of, its spans of at least `min_tokens` tokens together (those held by at most
`max_files` files); the ablation table gives
the same counts under other rules (every span of a length, or of at most 20 files; other `min_copied`), from the
same spans. Latency is the wall time of `Index.attribute` per query (every span), p50 and p99.

Run (after `make demo`):
    python benchmarks/attribution_eval.py work/demo --absent /work/.mirror/pallets+click/repo --queries 100
"""

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stackcurate.attribution import Index, default_folder  # noqa: E402
from stackcurate.core.layout import StageDir  # noqa: E402

IDENT = re.compile(r"\b[a-z_][a-z0-9_]{3,}\b")


def trained_files(out: Path) -> dict[int, str]:
    """The text of each file of the run's repository documents, by doc_id (the rows format read)."""
    members: set[int] = set()
    for path in sorted((out / "format").glob("*.parquet")):
        table = pq.read_table(path, columns=["doc_ids", "kind"])
        for ids, kind in zip(table.column("doc_ids").to_pylist(), table.column("kind").to_pylist(), strict=True):
            if kind == "repository":
                members.update(ids)
    source = StageDir(str(out), "format").completion()["input"]
    files = {}
    for path in sorted((out / source).glob("*.parquet")):
        for row in pq.read_table(path, columns=["doc_id", "content"]).to_pylist():
            if row["doc_id"] in members and row["content"] and len(row["content"]) > 2000:
                files[row["doc_id"]] = row["content"]
    return files


CODE = (".py", ".js", ".ts", ".go", ".rs", ".java", ".c", ".h", ".rb", ".php", ".cpp")


def removed_near_duplicates(out: Path) -> list[str]:
    """The texts of the files dedup removed as near or exact duplicates (kept with --removed-content)."""
    texts = []
    for path in sorted((out / "_removed" / "dedup").glob("*.parquet")):
        for row in pq.read_table(path, columns=["content"]).to_pylist():
            if row["content"] and len(row["content"]) > 2000:
                texts.append(row["content"])
    return texts


def absent_files(folders: list[Path]) -> list[str]:
    texts = []
    for folder in folders:
        if (folder / "HEAD").is_file():  # a bare repository: the code files of its HEAD
            listing = subprocess.run(["git", "--git-dir", str(folder), "ls-tree", "-r", "--name-only", "HEAD"],
                                     capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
            for name in listing:
                if name.endswith(CODE):
                    text = subprocess.run(["git", "--git-dir", str(folder), "show", f"HEAD:{name}"],
                                          capture_output=True, text=True).stdout  # fmt: skip
                    if len(text) > 2000:
                        texts.append(text)
        else:
            texts += [p.read_text(errors="replace") for p in sorted(folder.rglob("*")) if p.suffix in CODE
                      and p.stat().st_size > 2000]  # fmt: skip
    return texts


def window(rng: random.Random, text: str, chars: int) -> str:
    start = rng.randrange(0, max(1, len(text) - chars))
    return text[start : start + chars]


def variants(rng: random.Random, text: str) -> dict[str, str]:
    spaced = text.replace("    ", "  ").replace("\t", "    ").replace("\n\n", "\n\n\n")
    names = sorted(set(IDENT.findall(text)))
    renamed = text
    for name in rng.sample(names, min(3, len(names))):
        renamed = re.sub(rf"\b{name}\b", name + "_x", renamed)
    return {"whitespace": spaced, "renamed": renamed}


def score(queries: list, answers: list, named: Callable[[list], set[int]]) -> dict[str, dict[str, int]]:
    """Found and false per kind of query, given the files `named(spans)` attributes a query to: a positive is
    found when they include its file, false when they name only others; an absent query is false when they name
    any file."""
    results: dict[str, dict[str, int]] = {}
    for (kind, _, expected), spans in zip(queries, answers, strict=True):
        files = named(spans)
        counts = results.setdefault(kind, {"queries": 0, "found": 0, "false": 0})
        counts["queries"] += 1
        if expected is not None and expected & files:
            counts["found"] += 1
        elif files:
            counts["false"] += 1
    return results


def spans_of(least: int, most_files: int | None) -> Callable[[list], set[int]]:
    """The files named by the spans of at least `least` tokens held by at most `most_files` files."""
    return lambda spans: {doc for tokens, files, docs in spans if tokens >= least and (most_files is None or
                                                                                       files <= most_files)
                          for doc in docs}  # fmt: skip


def evidence(least: int, most_files: int | None = None) -> Callable[[list], set[int]]:
    """The files that the query's spans together copy at least `least` tokens of (Index.attribute's rule), its
    spans held by more than `most_files` files not counted."""

    def named(spans: list) -> set[int]:
        tokens: dict[int, int] = {}
        for n, files, docs in spans:
            if most_files is not None and files > most_files:
                continue
            for doc in docs:
                tokens[doc] = tokens.get(doc, 0) + n
        return {doc for doc, n in tokens.items() if n >= least}

    return named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="a run folder with its index (its index stage finished)")
    parser.add_argument("--absent", type=Path, nargs="+", required=True, help="folders of code not in the run")
    parser.add_argument("--queries", type=int, default=100, help="queries of each kind")
    parser.add_argument("--chars", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.perf_counter()
    index = Index(default_folder(args.out))
    load_seconds = time.perf_counter() - started
    load_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MB: the index as loaded (mapped)
    files = trained_files(args.out)
    absent = absent_files(args.absent)
    ids = sorted(files)
    queries: list[tuple[str, str, set[int] | None]] = []
    for _ in range(args.queries):
        doc = rng.choice(ids)
        text = window(rng, files[doc], args.chars)
        queries.append(("verbatim", text, {doc}))
        for kind, changed in variants(rng, text).items():
            queries.append((kind, changed, {doc}))
        other = rng.choice(absent)
        queries.append(("embedded", window(rng, other, 200) + "\n" + text + "\n" + window(rng, other, 200), {doc}))
        queries.append(("absent", window(rng, rng.choice(absent), args.chars), None))
    removed = removed_near_duplicates(args.out)
    asked = 0
    for _ in range(20 * args.queries):  # the windows some kept file holds, up to --queries of them
        if asked == args.queries or not removed:
            break
        text = window(rng, rng.choice(removed), args.chars)
        kept = {doc for doc, content in files.items() if text in content}
        if kept:
            queries.append(("near_duplicate", text, kept))
            asked += 1
    latencies = []
    answers = []  # each query's spans: (tokens, distinct files, the files named)
    for _, text, _ in queries:
        started = time.perf_counter()
        spans = index.attribute(text, min_copied=0)  # every span: the rules below choose among them
        latencies.append(time.perf_counter() - started)
        answers.append([(span.tokens, span.documents, {s.doc_id for s in span.sources}) for span in spans])
    results = score(queries, answers, evidence(index.min_copied, index.max_files))  # `attribute`'s default
    rules = {f"spans of {m}+ tokens" + (f", {k} files at most" if k else ""): spans_of(m, k)
             for m in (16, 24, 32, 48) for k in (None, 20)}  # fmt: skip
    rules |= {f"files copied {m}+ tokens": evidence(m) for m in (24, 32, 40, 48, 64)}
    rules |= {f"files copied {m}+ tokens, {k} files at most": evidence(m, k) for m in (24, 32) for k in (10, 20)}
    ablation = {name: score(queries, answers, rule) for name, rule in rules.items()}
    ms = np.array(latencies) * 1e3
    summary = {"run": str(args.out), "tokens": index.info["tokens"], "files_in_set": len(files),
               "absent_files": len(absent), "removed_files": len(removed), "chars": args.chars,
               "min_tokens": index.min_tokens, "load_seconds": round(load_seconds, 2),
               "rss_after_load_mb": round(load_rss, 1),
               "by_kind": results, "ablation": ablation, "latency_ms": {"p50": round(float(np.percentile(ms, 50)), 2),
                                                  "p99": round(float(np.percentile(ms, 99)), 2)}}  # fmt: skip
    print(f"{'kind':<11} {'queries':>7} {'found':>6} {'false':>6}")
    for kind, c in results.items():
        print(f"{kind:<11} {c['queries']:>7} {c['found']:>6} {c['false']:>6}")
    kinds = list(results)
    print("\nspans kept by each rule: found (false) per kind")
    print(f"{'rule':<44} " + " ".join(f"{k:>15}" for k in kinds))
    for name, counts in ablation.items():
        print(f"{name:<44} " + " ".join(f"{counts[k]['found']:>8} ({counts[k]['false']:>3})" for k in kinds))
    print(f"latency p50 {summary['latency_ms']['p50']} ms, p99 {summary['latency_ms']['p99']} ms "
          f"({index.info['tokens']:,} tokens indexed)")  # fmt: skip
    if args.results:
        args.results.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

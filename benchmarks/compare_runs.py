"""Compare two run folders byte for byte: every Parquet file but the stats (they hold run ids and timings), the
Megatron shards and the tokenizer. Exit status 1 when they differ.

    python benchmarks/compare_runs.py work/bench_e2e/run-before-patterns work/bench_e2e/run-after-patterns
"""

import hashlib
import sys
from pathlib import Path


def digests(root: Path) -> dict[str, str]:
    """SHA-256 of each compared file, by its path relative to `root`."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or "stats" in rel.parts or ".tmp-" in path.name or rel.parts[0] == "report":
            continue
        if path.suffix in (".parquet", ".bin", ".idx") or path.name == "tokenizer.json":
            found[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def main() -> int:
    first, second = (digests(Path(arg)) for arg in sys.argv[1:3])
    only_first, only_second = sorted(set(first) - set(second)), sorted(set(second) - set(first))
    differ = sorted(k for k in set(first) & set(second) if first[k] != second[k])
    print(f"{len(first)} files in {sys.argv[1]}, {len(second)} in {sys.argv[2]}")
    print(f"only in the first: {only_first[:10]}; only in the second: {only_second[:10]}")
    print(f"different: {len(differ)} {differ[:20]}")
    return 1 if only_first or only_second or differ else 0


if __name__ == "__main__":
    sys.exit(main())

"""stackcurate: Software Heritage archives to trainer-ready tokenized shards."""

import os

__version__ = "0.1.0"

# Arrow's default allocator (mimalloc) keeps the pages a long-lived worker freed: the dedup remove pass, run
# over the same shards again and again in one process, grew with every run; with jemalloc it stays flat
# (`benchmarks/dedup.py --double`; benchmarks/README.md, "Near dedup against datatrove and text-dedup", and
# how it was found in benchmarks/results/HISTORY.md). Only the environment variable, read when pyarrow
# loads, reaches Arrow's C++ readers (`pa.set_memory_pool` does not), so it is set here, before any pyarrow
# import; Ray workers get it too (runners/ray.py). An explicit ARROW_DEFAULT_MEMORY_POOL wins.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")

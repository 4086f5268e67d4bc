"""stackcurate: Software Heritage archives to trainer-ready tokenized shards."""

import os

__version__ = "0.1.0"

# Arrow's default allocator (mimalloc) keeps the pages a long-lived worker freed: the dedup remove pass, run
# over the same 100 shards again and again in one process, grew 426 -> 475 -> 492 -> 519 MiB; with jemalloc it
# stays at ~200 MiB. Only the environment variable, read when pyarrow loads, reaches Arrow's C++ readers
# (`pa.set_memory_pool` does not), so it is set here, before any pyarrow import; Ray workers get it too
# (runners/ray.py). An explicit ARROW_DEFAULT_MEMORY_POOL wins.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")

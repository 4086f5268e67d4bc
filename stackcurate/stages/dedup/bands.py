"""The LSH band layout for a similarity threshold, apart from `minhash.py` and its compiled kernels: the
config computes it wherever a pipeline is checked, and numba is slow and heavy to import."""

import functools
import math

import numpy as np


def _integrate(f: "np.ufunc | object", lo: float, hi: float, n: int = 2001) -> float:
    xs = np.linspace(lo, hi, n)
    ys = f(xs)  # type: ignore[operator]
    return float(np.sum((ys[1:] + ys[:-1]) * np.diff(xs)) / 2)


@functools.cache
def optimal_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) minimising the equal-weighted false-positive and false-negative areas (datasketch's
    `_optimal_param`): 0.7 with 256 or 250 permutations gives 25 bands of 10 rows, as StarCoder used."""
    best, best_err = (1, num_perm), math.inf
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = _integrate(lambda s, b=b, r=r: 1 - (1 - s**r) ** b, 0.0, threshold)
            fn = _integrate(lambda s, b=b, r=r: 1 - (1 - (1 - s**r) ** b), threshold, 1.0)
            err = 0.5 * fp + 0.5 * fn
            if err < best_err:
                best, best_err = (b, r), err
    return best

"""Ground truth for the near-dedup benchmark: exact Jaccard of every pair a sensitive LSH proposes.

Shingles are StarCoder2's (lower-cased, `\\w` tokens, 5-grams), the ones `stackcurate dedup` estimates.
Candidate pairs come from a far more sensitive banding than any tool under test (64 bands x 4 rows of 256
permutations: a pair at Jaccard 0.5 is proposed with probability 0.98, at 0.7 with 1 - 1e-6), among one
representative per exact text; every candidate's Jaccard is then computed exactly on its shingle sets.

From that truth, for a tool's set of kept documents:
- `pairs_both_kept`: the share of true pairs (Jaccard >= 0.7, exact copies included) with both ends kept;
- `removed_without_neighbour`: the share of removed documents with no other document at Jaccard >= 0.5.
"""

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stackcurate.stages.dedup import components, minhash


@dataclass
class Truth:
    doc_ids: np.ndarray  # every document, sorted
    group: np.ndarray  # index of each document's exact-text group
    group_size: np.ndarray
    left: np.ndarray  # group pairs (representatives) with their exact Jaccard
    right: np.ndarray
    jaccard: np.ndarray
    candidates: int

    def has_neighbour(self, at: float) -> np.ndarray:
        """Per document: another document (an exact copy, or a near one) at Jaccard >= `at`."""
        near = np.zeros(len(self.group_size), dtype=np.bool_)
        hit = self.jaccard >= at
        near[self.left[hit]] = True
        near[self.right[hit]] = True
        return (self.group_size[self.group] > 1) | near[self.group]

    def score(self, kept_ids: set[int], pair_at: float = 0.7, neighbour_at: float = 0.5) -> dict[str, float]:
        kept = np.isin(self.doc_ids, np.fromiter(kept_ids, dtype=np.int64, count=len(kept_ids)))
        kept_in_group = np.bincount(self.group, weights=kept, minlength=len(self.group_size))
        true = self.jaccard >= pair_at
        # pairs of documents: across two near groups |A|*|B|, inside an exact group |A| choose 2
        a, b = self.left[true], self.right[true]
        total = float(np.sum(self.group_size[a] * self.group_size[b]))
        both = float(np.sum(kept_in_group[a] * kept_in_group[b]))
        total += float(np.sum(self.group_size * (self.group_size - 1) / 2))
        both += float(np.sum(kept_in_group * (kept_in_group - 1) / 2))
        removed = ~kept
        lonely = removed & ~self.has_neighbour(neighbour_at)
        return {
            "docs": int(len(kept)),
            "removed": int(removed.sum()),
            "true_pairs": int(total),
            "pairs_both_kept": both / total if total else 0.0,
            "removed_without_neighbour": float(lonely.sum() / removed.sum()) if removed.any() else 0.0,
        }


def build(doc_ids: np.ndarray, texts: pa.ChunkedArray | pa.Array, *, bands: int = 64, rows: int = 4) -> Truth:
    order = np.argsort(doc_ids, kind="stable")
    doc_ids = doc_ids[order]
    texts = texts.take(pa.array(order))
    digests = [hashlib.sha1((t or "").encode()).digest() for t in texts.to_pylist()]
    unique: dict[bytes, int] = {}
    group = np.array([unique.setdefault(d, len(unique)) for d in digests], dtype=np.int64)
    group_size = np.bincount(group)
    first = np.full(len(group_size), -1, dtype=np.int64)
    first[group[::-1]] = np.arange(len(group))[::-1]  # first document of each group
    reps = texts.take(pa.array(first))
    hashes, offsets = minhash.shingle_hashes(reps, ngram=5, min_tokens=5, lowercase=True)
    left_parts, right_parts = [], []
    for start in range(0, len(first), 4096):
        chunk = reps.slice(start, 4096)
        sig, has = minhash.signatures(chunk, num_perm=bands * rows, seed=7, ngram=5, min_tokens=5, lowercase=True)
        keys = minhash.band_keys(sig, bands, rows)
        ids = np.arange(start, start + len(chunk))
        left_parts.append(keys[has].reshape(-1))
        right_parts.append(np.repeat(ids[has], bands))
    keys = np.concatenate(left_parts)
    members = np.concatenate(right_parts)
    left, right = _all_pairs(keys, members)
    jac = minhash.jaccard_pairs(hashes, offsets, left, right)
    return Truth(doc_ids, group, group_size, left, right, jac, len(left))


def _all_pairs(keys: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every distinct pair (i < j) of members sharing a key."""
    order = np.lexsort((members, keys))
    keys, members = keys[order], members[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sizes = np.diff(np.r_[starts, len(keys)])
    lefts, rights = [], []
    for s, n in zip(starts[sizes > 1], sizes[sizes > 1], strict=True):
        group = members[s : s + n]
        i, j = np.triu_indices(n, 1)
        lefts.append(group[i])
        rights.append(group[j])
    if not lefts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return components.unique_edges(np.concatenate(lefts), np.concatenate(rights))

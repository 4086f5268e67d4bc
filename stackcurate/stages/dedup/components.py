"""Connected components of the duplicate graph, partitioned so that no process holds every edge.

The graph lives on disk as Parquet partitioned by a hash of the source node: an undirected edge {u, v} is
stored as (u, v) in u's partition and (v, u) in v's. One step reads one partition (all its files), works on
it with numpy, and writes the new edges to every partition; a step over all partitions is one round of
tasks that a runner spreads over workers. Memory per task is the size of one partition, so it stays flat
as the corpus grows when the number of partitions grows with it.

The algorithm is Kiveris et al.'s large-star / small-star (SoCC 2014, "Connected Components in
MapReduce and Beyond"), as the BigCode dedup blog describes:
- large-star: each node u links every neighbour v > u to m(u), the smallest of u and its neighbours;
- small-star: each node u links itself and its neighbours v < u to the smallest of them.
Alternating the two converges (in O(log^2 n) rounds; a handful in practice) to one star per component
centred on its smallest node, so the label of a node is the smallest doc_id of its component: a unique
answer, whatever the partitioning or the order edges arrive in.

Why hand-written: Ray has no graph library (text-dedup #81), GraphFrames needs Spark, and a union-find in
one process is the single-node bottleneck the peers complain about (datatrove #106).
"""

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from stackcurate.core.shuffle import mix64, read_partition, write_partitioned

EDGE_SCHEMA = pa.schema([pa.field("u", pa.int64()), pa.field("v", pa.int64())])


def partition_of(ids: np.ndarray, partitions: int) -> np.ndarray:
    """The partition of each id (a hash, so consecutive doc_ids spread evenly)."""
    if partitions == 1:
        return np.zeros(len(ids), dtype=np.int64)
    return (mix64(ids) % np.uint64(partitions)).astype(np.int64)


def unique_edges(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (u, v) pairs, sorted by u then v."""
    if len(u) == 0:
        return u, v
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    keep = np.ones(len(u), dtype=np.bool_)
    keep[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return u[keep], v[keep]


def _group_min(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For edges sorted by (u, v): each row's group start index, the nodes, and min(node, smallest neighbour)."""
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
    counts = np.diff(np.r_[starts, len(u)])
    m = np.minimum(u[starts], v[starts])
    return starts, counts, m


def large_star(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges sorted and unique by (u, v) -> new undirected edges (x, y)."""
    if len(u) == 0:
        return u, v
    _, counts, m = _group_min(u, v)
    m_row = np.repeat(m, counts)
    above = v > u
    return v[above], m_row[above]


def small_star(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges sorted and unique by (u, v) -> new undirected edges (x, y)."""
    below = v < u
    u, v = u[below], v[below]
    if len(u) == 0:
        return u, v
    starts, counts, m = _group_min(u, v)
    m_row = np.repeat(m, counts)
    leaf = v != m_row
    x = np.concatenate([v[leaf], u[starts]])
    y = np.concatenate([m_row[leaf], m])
    return x, y


def checksum(u: np.ndarray, v: np.ndarray) -> tuple[int, int]:
    """(count, order-independent 64-bit sum) of a set of directed edges: equal sets give equal checksums."""
    if len(u) == 0:
        return 0, 0
    with np.errstate(over="ignore"):
        mixed = mix64(mix64(u) ^ v.astype(np.uint64))
        return len(u), int(mixed.sum(dtype=np.uint64))


def both_directions(x: np.ndarray, y: np.ndarray) -> pa.Table:
    return pa.table({"u": np.concatenate([x, y]), "v": np.concatenate([y, x])}, schema=EDGE_SCHEMA)


def write_edges(fs: pafs.FileSystem, root: str, writer: int, x: np.ndarray, y: np.ndarray, partitions: int) -> None:
    """Write undirected edges {x, y} as (x, y) in x's partition and (y, x) in y's."""
    table = both_directions(x, y)
    write_partitioned(fs, root, writer, table, partition_of(table.column("u").to_numpy(), partitions), partitions)


def read_edges(fs: pafs.FileSystem, root: str, part: int) -> tuple[np.ndarray, np.ndarray]:
    table = read_partition(fs, root, part)
    if table is None:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return unique_edges(table.column("u").to_numpy(), table.column("v").to_numpy())


def star_step(fs: pafs.FileSystem, src: str, dst: str, part: int, partitions: int, kind: str) -> tuple[int, int]:
    """One large- or small-star step over partition `part` of `src`, writing to `dst`; returns the checksum
    of the partition's input edges."""
    u, v = read_edges(fs, src, part)
    x, y = large_star(u, v) if kind == "large" else small_star(u, v)
    write_edges(fs, dst, part, x, y, partitions)
    return checksum(u, v)


def labels(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Node and component label (smallest node) for converged, sorted edges."""
    if len(u) == 0:
        return u, v
    starts, _, m = _group_min(u, v)
    return u[starts], m


def bucket_edges(keys: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Star edges (smallest doc of the bucket, other doc) for every key shared by two or more docs."""
    if len(keys) == 0:
        return docs, docs
    order = np.lexsort((docs, keys))
    keys, docs = keys[order], docs[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    counts = np.diff(np.r_[starts, len(keys)])
    first = np.repeat(docs[starts], counts)
    other = docs != first
    return first[other], docs[other]

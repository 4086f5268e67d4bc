"""Exact and near deduplication: signature -> bucket -> cluster -> remove (StarCoder2 settings, verified).

Sub-stages, all under one config; the first three write `<out>/dedup_clusters/`, the last is `<out>/dedup/`:
1. **signature** (tasks of at most 4,096 rows of one input file): per document an exact key (the `blob_id`
   SHA-1 of the original bytes, or a hash of the decoded text) and, when it has at least `min_tokens` tokens, a
   MinHash signature (see `minhash.py`) cut into LSH bands. Band keys and the exact key go to partitions by
   key; the columns that rank a document (license type, stars, forks, dates) go to partitions by doc_id.
2. **bucket** (one task per partition): documents sharing a key become star edges to the smallest doc_id;
   by default (`verify`) a pair that shares only a band key becomes an edge only if the exact Jaccard of its
   shingles reaches the threshold, so LSH never chains a file with no true neighbour into a cluster
   (`--no-verify` is StarCoder2's unverified recipe).
3. **cluster**: connected components with large-star / small-star over the partitioned edges (`components.py`),
   then, per component, the document kept is the first by StarCoder2's order: license_type permissive >
   no_license (or unknown) > non_permissive, more stars, more forks, later revision_date, later visit_date,
   then the smaller doc_id. `dedup_clusters/NNNNN.parquet` lists every document of every component:
   doc_id, cluster_id (its smallest doc_id), cluster_size, kept_doc_id, reason (null for the kept one),
   shard (the input file it came from), language, length_bytes.
4. **remove** (one shard per input file): rows of other documents move to `_removed/dedup/` with reason
   `exact_duplicate` (same exact key as the kept document) or `near_duplicate`, and `duplicate_of`, the
   doc_id kept in their place; the repos and paths that held a file stay queryable through that column.

Every number of partitions, worker count or input order gives the same output: components are labelled by
their smallest doc_id, the kept document is the first of a total order, and partitions depend only on the
input size. Reruns resume: each task commits its files atomically with a marker.

What users read (`stackcurate <stage> --help`, with examples) is the stage class's docstring.
"""

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from stackcurate.core import io, shuffle
from stackcurate.core.config import option, to_dict
from stackcurate.core.contract import Shard, StageContext, StageOutput, split_by_reason
from stackcurate.core.counters import Counters
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import StageDir
from stackcurate.core.phases import WORK
from stackcurate.core.planning import read_records
from stackcurate.core.records import RecordStage
from stackcurate.core.schema import FILE_KIND, KIND, STATS_SCHEMA, with_reason
from stackcurate.stages.dedup import bands as band_layout
from stackcurate.stages.dedup import components


def _minhash() -> Any:
    """The compiled signature kernels, imported where they run (numba is slow and heavy to import)."""
    from stackcurate.stages.dedup import minhash

    return minhash


CLUSTERS_STAGE = "dedup_clusters"
SIGNATURE_ROWS = 4096  # rows of one signature task at most
LICENSE_RANK = {"permissive": 0, "no_license": 1, "non_permissive": 2}
REASONS = ("exact_duplicate", "near_duplicate")
_EXACT_SALT = np.uint64(0xD1B54A32D192ED03)  # keeps exact keys apart from band keys

KEY_SCHEMA = pa.schema([pa.field("key", pa.uint64()), pa.field("doc_id", pa.int64())])
SHINGLE_SCHEMA = pa.schema([pa.field("doc_id", pa.int64()), pa.field("hashes", pa.large_list(pa.uint32()))])
META_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.int64()),
        pa.field("shard", pa.int32()),
        pa.field("license_rank", pa.int8()),
        pa.field("stars", pa.int64()),
        pa.field("forks", pa.int64()),
        pa.field("revision", pa.int64()),
        pa.field("visit", pa.int64()),
        pa.field("exact", pa.uint64()),
        pa.field("language", pa.string()),
        pa.field("length_bytes", pa.int64()),
    ]
)
MEMBER_SCHEMA = pa.schema([pa.field("cluster_id", pa.int64()), *META_SCHEMA])
CLUSTER_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.int64()),
        pa.field("cluster_id", pa.int64()),  # smallest doc_id of the component
        pa.field("cluster_size", pa.int64()),
        pa.field("kept_doc_id", pa.int64()),
        pa.field("reason", pa.string()),  # null for the kept document
        pa.field("shard", pa.int32()),  # input file of the document (remove shard)
        pa.field("language", pa.string()),
        pa.field("length_bytes", pa.int64()),
    ]
)
_INPUT_COLUMNS = [
    "doc_id",
    "content",
    "blob_id",
    "license_type",
    "star_events_count",
    "fork_events_count",
    "revision_date",
    "visit_date",
    "language",
    "length_bytes",
    "kind",  # records of other kinds than file: deduplicated within their kind
]


@dataclass(frozen=True, kw_only=True)
class DedupConfig:
    """Exact and near dedup settings (defaults: StarCoder2 with datasketch's MinHash, plus pair verification)."""

    exact: bool = option(True, "remove exact copies (same exact_key)")
    exact_key: str = option("blob_id", "blob_id (SHA-1 of the original bytes) or text (hash of the decoded text)")
    near: bool = option(True, "remove near copies (MinHash LSH)")
    threshold: float = option(0.7, "Jaccard similarity the LSH bands are tuned for")
    num_perm: int = option(256, "MinHash permutations")
    bands: int | None = option(None, "LSH bands (default: datasketch's optimum for threshold and num_perm)")
    rows: int | None = option(None, "rows per band (default: with bands)")
    ngram: int = option(5, "tokens per shingle")
    min_tokens: int = option(5, "texts with fewer tokens get no signature (exact dedup only)")
    lowercase: bool = option(True, "lower-case before tokenizing (StarCoder2; StarCoder kept case)")
    seed: int = option(42, "seed of the MinHash permutations")
    # On by default, unlike StarCoder2: unverified LSH chains files with no true neighbour into a cluster and
    # removes them, so on held-out real code whole groups of near copies lose every member (`benchmarks/
    # dedup_verify.py`; benchmarks/README.md, "Verified against unverified near dedup on held-out code").
    # --no-verify is the published recipe.
    verify: bool = option(
        True, "candidate pairs join a cluster only if their exact Jaccard reaches threshold (--no-verify: SC2)"
    )
    rows_per_partition: int = option(500_000, "documents per graph partition: bounds each task's memory")
    batch_rows: int = option(2048, "rows per in-memory batch")
    clusters: str | None = option(None, "dedup_clusters output to apply (default: computed by this run)")

    def __post_init__(self) -> None:
        if not (self.exact or self.near):
            raise ValueError("nothing to do: enable exact and/or near")
        if self.exact_key not in ("blob_id", "text"):
            raise ValueError("exact_key must be blob_id or text")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be between 0 and 1")
        if self.num_perm < 2 or self.ngram < 1 or self.min_tokens < 0 or self.rows_per_partition < 1:
            raise ValueError("num_perm must be at least 2, ngram at least 1, rows_per_partition at least 1")
        if (self.bands is None) != (self.rows is None):
            raise ValueError("give both bands and rows, or neither")
        bands, rows = self.band_layout()
        if bands * rows > self.num_perm or bands < 1 or rows < 1:
            raise ValueError(f"{bands} bands x {rows} rows need more than num_perm={self.num_perm} permutations")

    def band_layout(self) -> tuple[int, int]:
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        return band_layout.optimal_bands(self.threshold, self.num_perm)

    def __str__(self) -> str:
        bands, rows = self.band_layout()
        return (
            f"{CLUSTERS_STAGE}: exact={self.exact_key if self.exact else 'off'} "
            f"near={f'{self.ngram}-gram, {self.num_perm} perms, {bands}x{rows} bands' if self.near else 'off'}"
        )


@dataclass(frozen=True)
class _Plan:
    """What every task needs: settings, the input files, where to write."""

    cfg: DedupConfig
    shards: tuple[Shard, ...]
    out: StageDir  # <out>/dedup_clusters, on its filesystem (local or object store)
    partitions: int

    @property
    def fs(self) -> pafs.FileSystem:
        return self.out.fs

    def work(self, *parts: str) -> str:
        return io.join(self.out.state, WORK, *parts)


# ---- 1. signature ---------------------------------------------------------------------------------------


def _exact_keys(table: pa.Table, key: str) -> np.ndarray:
    if key == "blob_id":
        values = table.column("blob_id").to_pylist()
        texts = table.column("content").to_pylist()
        ints = [
            int(v[:16], 16) if v else int.from_bytes(hashlib.sha1((t or "").encode()).digest()[:8], "big")
            for v, t in zip(values, texts, strict=True)
        ]
    else:
        ints = [
            int.from_bytes(hashlib.sha1((t or "").encode()).digest()[:8], "big")
            for t in table.column("content").to_pylist()
        ]
    return shuffle.mix64(np.array(ints, dtype=np.uint64) ^ _EXACT_SALT)


def _kind_salts(table: pa.Table) -> np.ndarray:
    """Per row, what keeps the keys of each kind of record apart, so that records are deduplicated within their
    kind (an issue is never the duplicate of a file): 0 for files, whose keys are as they always were."""
    salts = np.zeros(table.num_rows, dtype=np.uint64)
    if KIND not in table.column_names:
        return salts
    for i, kind in enumerate(table.column(KIND).to_pylist()):
        if kind not in (None, FILE_KIND):
            salts[i] = int.from_bytes(hashlib.sha1(kind.encode()).digest()[:8], "big")
    return salts


def _int_column(table: pa.Table, name: str, null: int) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, null, dtype=np.int64)
    return pc.fill_null(table.column(name).cast(pa.int64()), null).to_numpy()


def _meta(table: pa.Table, shard: int, exact: np.ndarray) -> pa.Table:
    n = table.num_rows
    licenses = table.column("license_type").to_pylist() if "license_type" in table.column_names else [None] * n
    low = np.iinfo(np.int64).min
    return pa.table(
        {
            "doc_id": table.column("doc_id").cast(pa.int64()),
            "shard": np.full(n, shard, dtype=np.int32),
            "license_rank": np.array([LICENSE_RANK.get(x or "no_license", 1) for x in licenses], dtype=np.int8),
            "stars": _int_column(table, "star_events_count", -1),
            "forks": _int_column(table, "fork_events_count", -1),
            "revision": _int_column(table, "revision_date", low),
            "visit": _int_column(table, "visit_date", low),
            "exact": exact,
            "language": table.column("language") if "language" in table.column_names else pa.nulls(n, pa.string()),
            "length_bytes": _int_column(table, "length_bytes", 0),
        },
        schema=META_SCHEMA,
    )


def signature_items(shards: tuple[Shard, ...]) -> list[tuple[int, int, int, int]]:
    """The signature tasks: (task, shard, first row, end row), each shard's rows cut into pieces of at most
    SIGNATURE_ROWS in order, so that two workers share a few unequal files evenly. The pieces depend on the
    input alone, and the tasks' files, read in task order, hold the rows in the input's order."""
    items = []
    for index, shard in enumerate(shards):
        pieces = max(1, math.ceil((shard.stop - shard.start) / SIGNATURE_ROWS))
        bounds = np.linspace(shard.start, shard.stop, pieces + 1).astype(np.int64)
        items += [(len(items) + k, index, int(bounds[k]), int(bounds[k + 1])) for k in range(pieces)]
    return items


def signature_task(plan: _Plan, task: int, index: int, start: int, stop: int) -> dict[str, Any]:
    """Keys (exact and LSH bands) of rows `start:stop` of one input file, partitioned by key; ranking columns
    by doc_id."""
    cfg, shard = plan.cfg, plan.shards[index]
    fs = plan.fs
    keys_out = shuffle.PartitionedWriter(fs, plan.work("keys"), task, KEY_SCHEMA, plan.partitions)
    meta_out = shuffle.PartitionedWriter(fs, plan.work("meta"), task, META_SCHEMA, plan.partitions)
    sinks = [keys_out, meta_out]
    shingles_out = (
        shuffle.PartitionedWriter(fs, plan.work("shingles"), task, SHINGLE_SCHEMA, plan.partitions)
        if cfg.verify
        else None
    )
    if shingles_out is not None:
        sinks.append(shingles_out)
    bands, rows = cfg.band_layout()
    docs = signed = 0
    try:
        src_fs, path = io.filesystem(shard.path)
        columns = [c for c in _INPUT_COLUMNS if c in pq.read_schema(path, filesystem=src_fs).names]
        for table in io.scan_parquet_slice(src_fs, path, start, stop, batch_rows=cfg.batch_rows, columns=columns):
            doc_ids = table.column("doc_id").to_numpy().astype(np.int64)
            salt = _kind_salts(table)
            exact = _exact_keys(table, cfg.exact_key) ^ salt
            parts_keys, parts_docs = [], []
            if cfg.exact:
                parts_keys.append(exact)
                parts_docs.append(doc_ids)
            if cfg.near:
                sig, has = _minhash().signatures(
                    table.column("content"),
                    num_perm=cfg.num_perm,
                    seed=cfg.seed,
                    ngram=cfg.ngram,
                    min_tokens=cfg.min_tokens,
                    lowercase=cfg.lowercase,
                )
                band = _minhash().band_keys(sig[has], bands, rows) ^ salt[has][:, None]
                parts_keys.append(band.reshape(-1))
                parts_docs.append(np.repeat(doc_ids[has], bands))
                signed += int(has.sum())
            key_col = np.concatenate(parts_keys)
            keys_out.write(
                pa.table({"key": key_col, "doc_id": np.concatenate(parts_docs)}, schema=KEY_SCHEMA),
                (key_col % np.uint64(plan.partitions)).astype(np.int64),
            )
            meta_out.write(_meta(table, index, exact), components.partition_of(doc_ids, plan.partitions))
            if shingles_out is not None:
                values, offsets = _minhash().shingle_hashes(
                    table.column("content"), ngram=cfg.ngram, min_tokens=cfg.min_tokens, lowercase=cfg.lowercase
                )
                lists = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, pa.uint32()))
                shingles_out.write(
                    pa.table({"doc_id": doc_ids, "hashes": lists}, schema=SHINGLE_SCHEMA),
                    components.partition_of(doc_ids, plan.partitions),
                )
            docs += table.num_rows
    except BaseException:
        for sink in sinks:
            sink.abort()
        raise
    for sink in sinks:
        sink.commit()
    return {"docs": docs, "signed": signed}


# ---- 2. bucket -------------------------------------------------------------------------------------------


def bucket_task(plan: _Plan, part: int) -> dict[str, Any]:
    """Star edges of every key shared by two or more documents, written by source node."""
    fs = plan.fs
    table = shuffle.read_partition(fs, plan.work("keys"), part)
    if table is None:
        x = y = np.zeros(0, dtype=np.int64)
    else:
        x, y = components.bucket_edges(table.column("key").to_numpy(), table.column("doc_id").to_numpy())
        x, y = components.unique_edges(x, y)
    if plan.cfg.verify:  # exact key pairs are exact copies; the others wait for their Jaccard
        pairs = pa.table({"u": x, "v": y}, schema=components.EDGE_SCHEMA)
        shuffle.write_partitioned(
            fs, plan.work("pairs"), part, pairs, components.partition_of(x, plan.partitions), plan.partitions
        )
        return {"edges": len(x)}
    components.write_edges(fs, plan.work("cc", "000"), part, x, y, plan.partitions)
    return {"edges": len(x)}


def _rows_of(keys: np.ndarray, ids: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Row of each id in `keys` (-1 when absent); `order` is `keys`' argsort when the caller has it."""
    if len(keys) == 0:
        return np.full(len(ids), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable") if order is None else order
    rows = order[np.minimum(np.searchsorted(keys, ids, sorter=order), len(keys) - 1)]
    return np.where(keys[rows] == ids, rows, -1)


def _lookup(table: pa.Table | None, ids: np.ndarray) -> np.ndarray:
    """Row of each id in a partition table's `doc_id` column (-1 when absent)."""
    return _rows_of(table.column("doc_id").to_numpy() if table is not None else np.zeros(0, np.int64), ids)


def attach_task(plan: _Plan, part: int) -> dict[str, Any]:
    """Verification, first hop: send each pair to its second document's partition, with the shingles of its
    first document (once per destination, not once per pair: a bucket's first document is in many pairs)."""
    fs = plan.fs
    pairs = shuffle.read_partition(fs, plan.work("pairs"), part)
    shingles = shuffle.read_partition(fs, plan.work("shingles"), part)
    u = pairs.column("u").to_numpy() if pairs is not None else np.zeros(0, dtype=np.int64)
    v = pairs.column("v").to_numpy() if pairs is not None else np.zeros(0, dtype=np.int64)
    dest = components.partition_of(v, plan.partitions)
    shuffle.write_partitioned(
        fs, plan.work("pairs2"), part, pa.table({"u": u, "v": v}, schema=components.EDGE_SCHEMA), dest, plan.partitions
    )
    shipped_u, shipped_dest = components.unique_edges(u, dest)  # distinct (document, destination)
    rows = _lookup(shingles, shipped_u)
    found = rows >= 0
    table = SHINGLE_SCHEMA.empty_table()
    if shingles is not None and found.any():
        table = pa.table(
            {"doc_id": shipped_u[found], "hashes": shingles.column("hashes").take(pa.array(rows[found]))},
            schema=SHINGLE_SCHEMA,
        )
    shuffle.write_partitioned(fs, plan.work("shipped"), part, table, shipped_dest[found], plan.partitions)
    return {"pairs": len(u)}


def _concat_lists(first: pa.Table, second: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The `hashes` lists of two tables as one (values, offsets): row i of `second` is list len(first) + i."""
    a = first.column("hashes").combine_chunks()
    b = second.column("hashes").combine_chunks()
    values = np.concatenate([a.values.to_numpy(), b.values.to_numpy()])
    offsets = np.concatenate([a.offsets.to_numpy(), b.offsets.to_numpy()[1:] + len(a.values)])
    return values, offsets


def verify_task(plan: _Plan, part: int) -> dict[str, Any]:
    """Verification, second hop: exact Jaccard of each pair; pairs at the threshold become graph edges.

    Exact copies always pass (their Jaccard is 1, or both have no shingles and share the exact key).
    """
    fs = plan.fs
    pairs = shuffle.read_partition(fs, plan.work("pairs2"), part)
    shipped = shuffle.read_partition(fs, plan.work("shipped"), part)
    shingles = shuffle.read_partition(fs, plan.work("shingles"), part)
    x = y = np.zeros(0, dtype=np.int64)
    if pairs is not None and shipped is not None and shingles is not None:
        u, v = pairs.column("u").to_numpy(), pairs.column("v").to_numpy()
        left = _lookup(shipped, u)
        right = _lookup(shingles, v)
        values, offsets = _concat_lists(shipped, shingles)
        right_index = shipped.num_rows + np.maximum(right, 0)
        jac = _minhash().jaccard_pairs(values, offsets, np.maximum(left, 0), right_index)
        empty = offsets[np.maximum(left, 0) + 1] == offsets[np.maximum(left, 0)]
        keep = (left >= 0) & (right >= 0) & ((jac >= plan.cfg.threshold) | empty)
        x, y = u[keep], v[keep]
    components.write_edges(fs, plan.work("cc", "000"), part, x, y, plan.partitions)
    return {"edges": len(x)}


# ---- 3. cluster ------------------------------------------------------------------------------------------


def star_task(plan: _Plan, step: int, part: int) -> tuple[int, int]:
    fs = plan.fs
    src, dst = plan.work("cc", f"{step:03d}"), plan.work("cc", f"{step + 1:03d}")
    return components.star_step(fs, src, dst, part, plan.partitions, "large" if step % 2 == 0 else "small")


def member_task(plan: _Plan, step: int, part: int) -> dict[str, Any]:
    """Label each node of this partition with its component and attach its ranking columns."""
    fs = plan.fs
    nodes, label = components.labels(*components.read_edges(fs, plan.work("cc", f"{step:03d}"), part))
    meta = shuffle.read_partition(fs, plan.work("meta"), part)
    members = MEMBER_SCHEMA.empty_table()
    if meta is not None:
        doc_ids = meta.column("doc_id").to_numpy()
        order = np.argsort(doc_ids, kind="stable")
        ids = doc_ids[order]  # equal doc_ids hash to the same partition, so each is checked here
        repeated = ids[1:][ids[1:] == ids[:-1]]
        if len(repeated):
            raise StackcurateError(
                f"doc_id {repeated[0]} appears more than once in the input; dedup needs the unique doc_ids "
                "that `stackcurate ingest` assigns"
            )
        if len(nodes):
            pos = _rows_of(doc_ids, nodes, order)
            members = meta.take(pa.array(pos)).add_column(0, "cluster_id", pa.array(label, pa.int64()))
    shuffle.write_partitioned(
        fs,
        plan.work("members"),
        part,
        members,
        components.partition_of(members.column("cluster_id").to_numpy(), plan.partitions),
        plan.partitions,
    )
    return {"nodes": len(nodes)}


def rank_order(members: pa.Table) -> np.ndarray:
    """Row order: by cluster, then StarCoder2's keeper order, then doc_id (a total order: no ties left)."""

    def col(name: str) -> np.ndarray:
        return members.column(name).to_numpy()

    # np.lexsort sorts by the last key first; ~x reverses an int64 order without overflow.
    return np.lexsort(
        (
            col("doc_id"),
            ~col("visit"),
            ~col("revision"),
            ~col("forks"),
            ~col("stars"),
            col("license_rank"),
            col("cluster_id"),
        )
    )


_CLUSTER_ROW_GROUP = 8192
_SIZE_BUCKETS = (2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025)


def _size_bucket(size: int) -> str:
    lo = max(b for b in _SIZE_BUCKETS if b <= size)
    nxt = [b for b in _SIZE_BUCKETS if b > size]
    if lo == 2:
        return "size_2"
    return f"size_{lo}-{nxt[0] - 1}" if nxt else f"size_{lo}+"


def cluster_task(plan: _Plan, part: int, run_id: str) -> dict[str, Any]:
    """Pick the kept document of every component in this partition; write its clusters file and stats."""
    fs = plan.fs
    members = shuffle.read_partition(fs, plan.work("members"), part)
    out = plan.out
    if members is None or members.num_rows == 0:
        clusters = CLUSTER_SCHEMA.empty_table()
    else:
        members = members.take(pa.array(rank_order(members)))
        cid = members.column("cluster_id").to_numpy()
        starts = np.flatnonzero(np.r_[True, cid[1:] != cid[:-1]])
        sizes = np.diff(np.r_[starts, len(cid)])
        first = np.repeat(starts, sizes)
        doc = members.column("doc_id").to_numpy()
        exact = members.column("exact").to_numpy()
        is_kept = np.arange(len(cid)) == first
        same = exact == exact[first]
        reason = [None if k else REASONS[0] if e else REASONS[1] for k, e in zip(is_kept, same, strict=True)]
        clusters = pa.table(
            {
                "doc_id": doc,
                "cluster_id": cid,
                "cluster_size": np.repeat(sizes, sizes),
                "kept_doc_id": doc[first],
                "reason": pa.array(reason, pa.string()),
                "shard": members.column("shard"),
                "language": members.column("language"),
                "length_bytes": members.column("length_bytes"),
            },
            schema=CLUSTER_SCHEMA,
        )
        clusters = clusters.sort_by([("shard", "ascending"), ("doc_id", "ascending")])
    sink = io.AtomicParquetWriter(fs, out.path("data", part), CLUSTER_SCHEMA)
    # Small row groups sorted by shard: each remove shard reads only the row groups that hold its rows.
    for batch in clusters.to_batches(max_chunksize=_CLUSTER_ROW_GROUP):
        sink.write(pa.Table.from_batches([batch], schema=CLUSTER_SCHEMA))
    sink.commit()
    stats = io.AtomicParquetWriter(fs, out.path("stats", part), STATS_SCHEMA)
    stats.write(_cluster_stats(clusters, run_id, part))
    stats.commit()
    return {"docs": clusters.num_rows}


def _cluster_stats(clusters: pa.Table, run_id: str, part: int) -> pa.Table:
    """Clusters by size bucket and keeper language; removed docs and bytes by language and reason."""
    counters = Counters()
    is_kept = pc.is_null(clusters.column("reason"))  # pyright: ignore[reportAttributeAccessIssue]
    kept = clusters.filter(is_kept)
    buckets = {size: _size_bucket(size) for size in set(kept.column("cluster_size").to_pylist())}
    kept = kept.append_column("bucket", pa.array([buckets[n] for n in kept.column("cluster_size").to_pylist()]))
    by_size = kept.group_by(["language", "bucket"], use_threads=False).aggregate(
        [([], "count_all"), ("cluster_size", "sum")]
    )
    for row in by_size.to_pylist():
        counters.add("clusters", row["language"], row["bucket"], row["count_all"])
        counters.add("docs_in_clusters", row["language"], None, row["cluster_size_sum"])
    removed = clusters.filter(pc.invert(is_kept))  # pyright: ignore[reportAttributeAccessIssue]
    by_reason = removed.group_by(["language", "reason"], use_threads=False).aggregate(
        [([], "count_all"), ("length_bytes", "sum")]
    )
    for row in by_reason.to_pylist():
        counters.add("docs_duplicate", row["language"], row["reason"], row["count_all"])
        counters.add("bytes_duplicate", row["language"], row["reason"], row["length_bytes_sum"] or 0)
    return counters.table(run_id, CLUSTERS_STAGE, part)


# ---- orchestration ---------------------------------------------------------------------------------------


def cluster(cfg: DedupConfig, ctx: StageContext) -> DedupConfig:
    """Run signature, bucket and cluster into `<out>/dedup_clusters` (or reuse a finished one)."""
    if cfg.clusters is not None:
        return cfg
    shards = tuple(ctx.shards)
    if any(s.kind == "unreadable" for s in shards):
        bad = next(s for s in shards if s.kind == "unreadable")
        raise StackcurateError(f"dedup cannot read {bad.path}: {bad.detail}")
    rows = sum(s.stop - s.start for s in shards)
    partitions = max(1, math.ceil(rows / cfg.rows_per_partition))
    settings = {k: v for k, v in to_dict(cfg).items() if k not in ("batch_rows", "clusters")}
    phases = ctx.phases(CLUSTERS_STAGE, settings)
    result = replace(cfg, clusters=phases.uri)
    if phases.done:
        return result
    plan = _Plan(cfg, shards, phases.dir, partitions)

    def run(name: str, fn: Any, items: list[tuple[Any, ...]], markers: str | None = None) -> list[Any]:
        return phases.run(markers or name, fn, [(plan, *item) for item in items], f"dedup {name}")

    # the piece size names the signature markers: a half-done run cut another way starts the phase anew
    run("signature", signature_task, signature_items(shards), markers=f"signature-{SIGNATURE_ROWS}")
    run("bucket", bucket_task, [(p,) for p in range(partitions)])
    phases.drop("keys")
    if cfg.verify:
        run("attach", attach_task, [(p,) for p in range(partitions)])
        run("verify", verify_task, [(p,) for p in range(partitions)])
        for name in ("pairs", "pairs2", "shipped", "shingles"):
            phases.drop(name)
    step, previous = 0, None
    with phases.rounds("dedup connected components") as rounds:  # one progress bar, however many rounds
        while True:
            items = [(plan, step, p) for p in range(partitions)]
            sums = rounds.run(f"cc{step:03d}", star_task, items)
            if step >= 2:
                phases.drop("cc", f"{step - 1:03d}")
            total = (sum(c for c, _ in sums), sum(s for _, s in sums) % 2**64)
            if step % 2 == 0:
                if total == previous:  # a large-star + small-star round changed nothing: one star per component
                    break
                previous = total
            step += 1
            if step > 200:
                raise StackcurateError("connected components did not converge in 100 rounds; please report this")
    run("member", member_task, [(step, p) for p in range(partitions)])
    run("cluster", cluster_task, [(p, ctx.run_id) for p in range(partitions)])
    phases.complete()
    return result


# ---- 4. remove -------------------------------------------------------------------------------------------


class DedupStage(RecordStage):
    """remove exact and near-duplicate files (MinHash LSH, StarCoder2's settings)

    Remove exact duplicates (the same bytes) and near duplicates (MinHash LSH at Jaccard --threshold, 0.7 by
    default, as StarCoder2), keeping one file of each group: the first by license (permissive, then no license,
    then non-permissive), stars, forks and dates. By default (--verify) two files are near duplicates only if their
    actual Jaccard similarity reaches the threshold; --no-verify is StarCoder2's unverified recipe.

    The groups are written to OUT/dedup_clusters (doc_id, cluster_id, cluster_size, kept_doc_id, reason).
    Removed, by reason: exact_duplicate, near_duplicate; duplicate_of names the file kept in their place.

    Examples:
      stackcurate dedup --out work/run --threshold 0.7 --num-perm 256
      stackcurate query work/run "select cluster_size, count(*) from dedup_clusters group by 1 order by 1"
    """

    name = "dedup"
    mb_per_s = 15  # one core, end to end: MinHash of every file, LSH, clustering
    config = DedupConfig
    fuse = "head"
    kinds = None
    needs = ("doc_id", "blob_id", "content")

    @classmethod
    def before_shards(cls, cfg: DedupConfig, ctx: StageContext) -> DedupConfig:
        return cluster(cfg, ctx)

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        if self.cfg.clusters is None:
            raise StackcurateError("dedup needs its clusters: run `stackcurate dedup`, which computes them first")
        fs, root = io.filesystem(self.cfg.clusters)
        files = io.expand(fs, io.join(root, "*.parquet"))
        decided = (
            pq.ParquetDataset(files, filesystem=fs, filters=[("shard", "=", shard.index)]).read(
                columns=["doc_id", "kept_doc_id", "reason"]
            )
            if files
            else CLUSTER_SCHEMA.empty_table()
        )
        decided = decided.filter(pc.is_valid(decided.column("reason")))  # pyright: ignore[reportAttributeAccessIssue]
        ids = decided.column("doc_id").to_numpy()
        for table in read_records(shard, self.cfg.batch_rows):
            rows = _rows_of(ids, table.column("doc_id").to_numpy())
            if len(ids) == 0:
                reason, keeper = pa.nulls(len(rows), pa.string()), pa.nulls(len(rows), pa.int64())
            else:
                found = decided.take(pa.array(np.maximum(rows, 0)))
                reason = pc.if_else(pa.array(rows >= 0), found.column("reason"), None)  # pyright: ignore[reportAttributeAccessIssue]
                keeper = found.column("kept_doc_id")
            yield table.append_column("_reason", reason).append_column("_duplicate_of", keeper)

    def removed_schema(self, output_schema: pa.Schema) -> pa.Schema:
        return with_reason(output_schema).append(pa.field("duplicate_of", pa.int64()))

    def __call__(self, table: pa.Table) -> StageOutput:
        reason = table.column("_reason")
        out = split_by_reason(table.drop_columns(["_reason", "_duplicate_of"]), reason.to_pylist())
        dropped = table.column("_duplicate_of").filter(pc.is_valid(reason))  # pyright: ignore[reportAttributeAccessIssue]
        assert out.removed is not None
        out.removed = out.removed.append_column("duplicate_of", dropped)
        return out

"""Exact and near dedup: datasketch's MinHash semantics, partitioned components, StarCoder2's keeper order."""

import random
import re
from datetime import datetime
from pathlib import Path

import datasketch
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash
from helpers import make_table, read_all, write_records
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from stackcurate.core import io, shuffle
from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import dedup as dedup_module
from stackcurate.stages import get_stage
from stackcurate.stages.dedup import DedupConfig, bands, components, minhash, rank_order

WORDS = [f"{a}{b}" for a in ("get", "set", "make", "load", "save", "parse", "emit", "read") for b in range(40)]


def code(rng: random.Random, tokens: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(tokens)]


def edited(tokens: list[str], count: int, rng: random.Random) -> list[str]:
    """A copy with `count` tokens (spread over the text) replaced by tokens found nowhere else."""
    out = list(tokens)
    for k, i in enumerate(sorted(rng.sample(range(len(tokens)), count))):
        out[i] = f"edit{rng.randrange(10**9)}x{k}"
    return out


def text(tokens: list[str]) -> str:
    lines = [" = ".join(tokens[i : i + 2]) + "(x)" for i in range(0, len(tokens), 2)]
    return "\n".join(lines) + "\n"


def shingles(content: str, n: int = 5) -> set[str]:
    tokens = [t for t in re.split(r"\W+", content.lower()) if t]
    return {" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


def reference_minhash(content: str | None, num_perm: int = 256, seed: int = 42) -> tuple[np.ndarray, bool]:
    """datasketch itself, fed StarCoder2's shingles hashed with xxh32."""
    tokens = [t for t in re.split(r"\W+", (content or "").lower()) if t]
    m = datasketch.MinHash(num_perm=num_perm, seed=seed, hashfunc=xxhash.xxh32_intdigest)
    if len(tokens) < 5:
        return m.hashvalues, False
    m.update_batch([" ".join(tokens[i : i + 5]).encode() for i in range(len(tokens) - 4)])
    return m.hashvalues, True


# ---- MinHash and LSH agree with datasketch ----------------------------------------------------------------


def test_signatures_equal_datasketch_minhash_for_code_unicode_and_short_texts():
    rng = random.Random(0)
    texts = [
        "def foo(bar):\n    return bar + 1  # Ünïcödé ΑΒΓ straße ok_x",
        "Hello, World! THIS is MiXeD case with snake_case and camelCase tokens",
        "日本語 テキスト です か ね よ — “quotes” and emoji 🙂 between words here",
        "a b c d",  # 4 tokens: no shingles
        "",
        None,
        "x\u00a0y\u2028z w v u t",  # non-breaking space and line separator split tokens as \\W
        *(text(code(rng, rng.randrange(5, 400))) for _ in range(40)),
        *(p.read_text() for p in sorted(Path(minhash.__file__).parent.glob("*.py"))),
    ]
    sig, has = minhash.signatures(pa.array(texts), num_perm=256, seed=42, ngram=5, min_tokens=5, lowercase=True)
    for i, content in enumerate(texts):
        expected, expected_has = reference_minhash(content)
        assert has[i] == expected_has, content
        assert np.array_equal(sig[i], expected), content


def test_band_layout_is_datasketch_optimum():
    for threshold, num_perm in ((0.7, 256), (0.7, 250), (0.85, 256), (0.5, 128), (0.8, 112)):
        assert bands.optimal_bands(threshold, num_perm) == datasketch.lsh._optimal_param(threshold, num_perm, 0.5, 0.5)
    assert DedupConfig().band_layout() == (25, 10)


def test_candidate_pairs_equal_datasketch_lsh():
    rng = random.Random(1)
    bases = [code(rng, 300) for _ in range(6)]
    texts = [text(edited(rng.choice(bases), rng.randrange(0, 16), rng)) for _ in range(60)]
    sig, _ = minhash.signatures(pa.array(texts), num_perm=256, seed=42, ngram=5, min_tokens=5, lowercase=True)
    keys = minhash.band_keys(sig, 25, 10)
    ours = {(i, j) for i in range(len(texts)) for j in range(i) if np.any(keys[i] == keys[j])}
    lsh = datasketch.MinHashLSH(threshold=0.7, num_perm=256)
    hashes = []
    for i, content in enumerate(texts):
        m = datasketch.MinHash(num_perm=256, seed=42, hashvalues=reference_minhash(content)[0], scheme="affine32")
        hashes.append(m)
        lsh.insert(i, m)
    theirs = {(i, j) for i in range(len(texts)) for j in lsh.query(hashes[i]) if j < i}
    assert ours == theirs
    assert len(ours) > 20  # the corpus has near copies, so the comparison is not vacuous


# ---- connected components ---------------------------------------------------------------------------------


def components_by_partitions(tmp_path: Path, x: np.ndarray, y: np.ndarray, partitions: int) -> dict[int, int]:
    """Run the partitioned large-star / small-star steps on disk, as the dedup tasks do; node -> label."""
    fs, root = io.filesystem(str(tmp_path))
    edges = components.both_directions(x, y)
    for writer, chunk in enumerate((edges.slice(0, len(x)), edges.slice(len(x)))):  # two writers
        shuffle.write_partitioned(
            fs,
            f"{root}/000",
            writer,
            chunk,
            components.partition_of(chunk.column("u").to_numpy(), partitions),
            partitions,
        )
    step, previous = 0, None
    while True:
        sums = [
            components.star_step(
                fs,
                f"{root}/{step:03d}",
                f"{root}/{step + 1:03d}",
                p,
                partitions,
                "large" if step % 2 == 0 else "small",
            )
            for p in range(partitions)
        ]
        total = (sum(c for c, _ in sums), sum(s for _, s in sums) % 2**64)
        if step % 2 == 0:
            if total == previous:
                break
            previous = total
        step += 1
    found = {}
    for p in range(partitions):
        nodes, labels = components.labels(*components.read_edges(fs, f"{root}/{step:03d}", p))
        found.update(zip(nodes.tolist(), labels.tolist(), strict=True))
    return found


@pytest.mark.parametrize("partitions", [1, 3, 8])
@pytest.mark.parametrize("shape", ["random", "path", "stars"])
def test_components_equal_scipy_labelled_by_smallest_node(tmp_path, partitions, shape):
    rng = np.random.default_rng(7)
    nodes = rng.choice(10**12, size=400, replace=False).astype(np.int64)
    if shape == "random":
        x, y = rng.integers(0, 400, 300), rng.integers(0, 400, 300)
    elif shape == "path":  # the worst case for label propagation: a long chain in shuffled node order
        order = rng.permutation(400)
        x, y = order[:-1], order[1:]
    else:
        x = rng.integers(0, 8, 390)
        y = rng.integers(8, 400, 390)
    keep = x != y
    x, y = nodes[x[keep]], nodes[y[keep]]
    found = components_by_partitions(tmp_path, x, y, partitions)
    index = {n: i for i, n in enumerate(nodes.tolist())}
    xi, yi = [index[v] for v in x.tolist()], [index[v] for v in y.tolist()]
    _, comp = connected_components(coo_matrix((np.ones(len(xi)), (xi, yi)), shape=(400, 400)), directed=False)
    expected = {}
    for c in set(comp.tolist()):
        members = nodes[comp == c]
        if len(members) > 1:
            expected.update(dict.fromkeys(members.tolist(), int(members.min())))
    assert found == expected


# ---- the stage, end to end --------------------------------------------------------------------------------


def run_dedup(
    tmp_path: Path, tables: list[pa.Table], runner: str = "local", workers: int | None = None, **settings: object
) -> dict[str, pa.Table]:
    records = write_records(tmp_path / "in", tables)
    cfg = build_config(DedupConfig, settings)
    out = str(tmp_path / "out")
    run_stage(
        get_stage("dedup"),
        cfg,
        out,
        RunOptions(runner=runner, workers=workers, progress=False),
        input_uri=str(records),
    )
    return {
        name: read_all(tmp_path / "out" / sub)
        for name, sub in (("kept", "dedup"), ("removed", "_removed/dedup"), ("clusters", "dedup_clusters"))
    }


def files_table(contents: list[str], start: int = 0, **columns: object) -> pa.Table:
    table = make_table([(f"/src/f{start + i}.py", c) for i, c in enumerate(contents)], language="Python", **columns)
    return table.set_column(0, "doc_id", pa.array(range(start, start + len(contents)), pa.int64()))


@pytest.fixture(scope="module")
def family() -> dict[str, str]:
    """Texts with known relations: exact copies, a near copy, a distinct file, and a chain a ~ b ~ c."""
    rng = random.Random(3)
    base = code(rng, 1000)
    chained = random.Random(0)  # a seed for which a and c share no LSH band (checked below)
    chain_a = code(chained, 1000)
    chain_b = edited(chain_a, 37, chained)
    chain_c = edited(chain_b, 37, chained)
    return {
        "base": text(base),
        "near": text(edited(base, 8, rng)),
        "far": text(edited(base, 200, rng)),
        "other": text(code(rng, 800)),
        "chain_a": text(chain_a),
        "chain_b": text(chain_b),
        "chain_c": text(chain_c),
    }


def test_family_fixture_relations_hold(family):
    assert jaccard(family["base"], family["near"]) > 0.8
    assert jaccard(family["base"], family["far"]) < 0.5
    assert jaccard(family["chain_a"], family["chain_b"]) > 0.75
    assert jaccard(family["chain_b"], family["chain_c"]) > 0.75
    assert jaccard(family["chain_a"], family["chain_c"]) < 0.65
    chain = pa.array([family["chain_a"], family["chain_b"], family["chain_c"]])
    sig, _ = minhash.signatures(chain, num_perm=256, seed=42, ngram=5, min_tokens=5, lowercase=True)
    keys = minhash.band_keys(sig, 25, 10)
    assert np.any(keys[0] == keys[1]) and np.any(keys[1] == keys[2])
    assert not np.any(keys[0] == keys[2])  # a and c share no band: only the chain through b links them


def test_exact_near_distinct_and_chain(tmp_path, family):
    names = ["base", "base", "near", "far", "other", "chain_a", "chain_b", "chain_c", "base"]
    contents = [family[n] for n in names]
    got = run_dedup(tmp_path, [files_table(contents[:5]), files_table(contents[5:], start=5)])
    kept = sorted(got["kept"].column("doc_id").to_pylist())
    removed = {r["doc_id"]: (r["reason"], r["duplicate_of"]) for r in got["removed"].to_pylist()}
    assert kept == [0, 3, 4, 5]
    assert removed == {
        1: ("exact_duplicate", 0),
        8: ("exact_duplicate", 0),
        2: ("near_duplicate", 0),
        6: ("near_duplicate", 5),
        7: ("near_duplicate", 5),
    }
    clusters = {
        r["doc_id"]: (r["cluster_id"], r["cluster_size"], r["kept_doc_id"]) for r in got["clusters"].to_pylist()
    }
    assert clusters == {
        0: (0, 4, 0),
        1: (0, 4, 0),
        2: (0, 4, 0),
        8: (0, 4, 0),
        5: (5, 3, 5),
        6: (5, 3, 5),
        7: (5, 3, 5),
    }


def test_threshold_and_switches(tmp_path, family):
    contents = [family["base"], family["near"], family["base"]]
    only_exact = run_dedup(tmp_path / "exact", [files_table(contents)], near=False)
    assert sorted(only_exact["kept"].column("doc_id").to_pylist()) == [0, 1]
    only_near = run_dedup(tmp_path / "near", [files_table(contents)], exact=False)
    # without exact keys the copy is found by its bands, and still named by content
    assert only_near["removed"].column("reason").to_pylist() == ["near_duplicate", "exact_duplicate"]
    pair = [files_table([family["chain_a"], family["chain_b"]])]  # Jaccard ~0.78
    assert run_dedup(tmp_path / "t70", pair)["kept"].num_rows == 1
    assert run_dedup(tmp_path / "t95", pair, threshold=0.95)["kept"].num_rows == 2


KEEPER_ORDER = [  # (license_type, stars, forks, revision, visit): best first; doc_id breaks the last tie
    ("permissive", 1, 5, datetime(2021, 1, 1), datetime(2022, 1, 1)),
    ("permissive", 1, 5, datetime(2021, 1, 1), datetime(2022, 1, 1)),
    ("permissive", 1, 5, datetime(2021, 1, 1), datetime(2020, 1, 1)),
    ("permissive", 1, 5, datetime(2020, 1, 1), datetime(2023, 1, 1)),
    ("permissive", 1, 0, datetime(2024, 1, 1), datetime(2024, 1, 1)),
    ("permissive", 0, 9, None, None),
    ("no_license", 50, 50, datetime(2024, 1, 1), datetime(2024, 1, 1)),
    (None, 40, 50, datetime(2024, 1, 1), datetime(2024, 1, 1)),
    ("non_permissive", 100, 100, datetime(2025, 1, 1), datetime(2025, 1, 1)),
]


def keeper_table(order: list[int], content: str) -> pa.Table:
    rows = []
    for doc_id in order:
        lic, stars, forks, rev, visit = KEEPER_ORDER[doc_id]
        rows.append(
            {
                "doc_id": doc_id,
                "path": f"/f{doc_id}.py",
                "content": content,
                "language": "Python",
                "license_type": lic,
                "star_events_count": stars,
                "fork_events_count": forks,
                "revision_date": rev,
                "visit_date": visit,
                "length_bytes": len(content),
            }
        )
    table = make_table([("/x", "")] * len(rows))
    return pa.Table.from_pylist(rows, schema=table.schema)


def test_keeper_is_starcoder2_order_whatever_the_input_order(tmp_path, family):
    rng = random.Random(5)
    for trial in range(3):
        order = list(range(len(KEEPER_ORDER)))
        rng.shuffle(order)
        got = run_dedup(tmp_path / str(trial), [keeper_table(order, family["base"])])
        assert got["kept"].column("doc_id").to_pylist() == [0]
        assert set(got["removed"].column("duplicate_of").to_pylist()) == {0}
    members = dedup_module._meta(keeper_table(list(range(len(KEEPER_ORDER))), "x"), 0, np.zeros(9, np.uint64))
    members = members.add_column(0, "cluster_id", pa.array([0] * members.num_rows, pa.int64()))
    shuffled = members.take(pa.array(rng.sample(range(members.num_rows), members.num_rows)))
    ranked = shuffled.take(pa.array(rank_order(shuffled))).column("doc_id").to_pylist()
    assert ranked == list(range(len(KEEPER_ORDER)))


def corpus_tables(family: dict[str, str], seed: int) -> list[pa.Table]:
    rng = random.Random(seed)
    contents = [family[k] for k in family] * 3 + [text(code(random.Random(100 + i), 300)) for i in range(30)]
    ids = list(range(len(contents)))
    rng.shuffle(ids)  # the same documents (same doc_ids) in another order and another split into files
    cut = rng.randrange(5, len(ids) - 5)
    return [pa.concat_tables([files_table([contents[i]], start=i) for i in part]) for part in (ids[:cut], ids[cut:])]


def decisions(got: dict[str, pa.Table]) -> tuple[list, list, list]:
    kept = sorted(got["kept"].column("doc_id").to_pylist())
    removed = sorted((r["doc_id"], r["reason"], r["duplicate_of"]) for r in got["removed"].to_pylist())
    clusters = sorted(tuple(r.values()) for r in got["clusters"].drop_columns(["shard"]).to_pylist())
    return kept, removed, clusters


def test_same_result_whatever_partitions_input_order_and_split(tmp_path, family):
    baseline = decisions(run_dedup(tmp_path / "a", corpus_tables(family, 0)))
    assert len(baseline[1]) > 10
    for i, (seed, rows_per_partition) in enumerate(((1, 7), (2, 3), (3, 1000))):
        got = run_dedup(tmp_path / f"b{i}", corpus_tables(family, seed), rows_per_partition=rows_per_partition)
        assert decisions(got) == baseline


def test_ray_with_two_workers_equals_local(tmp_path, family, ray_local):
    local = run_dedup(tmp_path / "local", corpus_tables(family, 0), rows_per_partition=10)
    on_ray = run_dedup(tmp_path / "ray", corpus_tables(family, 0), runner="ray", workers=2, rows_per_partition=10)
    assert decisions(on_ray) == decisions(local)
    for sub in ("dedup/00000.parquet", "dedup/00001.parquet", "_removed/dedup/00000.parquet"):
        assert pq.read_table(tmp_path / "local" / "out" / sub).equals(pq.read_table(tmp_path / "ray" / "out" / sub))


def test_signature_pieces_change_no_decision(tmp_path, family, monkeypatch):
    """Signature tasks cut each input file into pieces of at most SIGNATURE_ROWS rows: any size, same result."""
    baseline = decisions(run_dedup(tmp_path / "a", corpus_tables(family, 0)))
    tables = corpus_tables(family, 0)
    assert dedup_module.signature_items(tuple(_shards(tmp_path / "items", tables))) == [(0, 0, 0, len(tables[0])),
        (1, 1, 0, len(tables[1]))]  # fmt: skip
    monkeypatch.setattr(dedup_module, "SIGNATURE_ROWS", 4)
    items = dedup_module.signature_items(tuple(_shards(tmp_path / "items4", tables)))
    assert len(items) == sum(-(-len(t) // 4) for t in tables)
    assert [i[0] for i in items] == list(range(len(items))) and all(stop - start <= 4 for *_, start, stop in items)
    assert decisions(run_dedup(tmp_path / "b", tables)) == baseline


def _shards(folder: Path, tables: list[pa.Table]) -> list:
    records = write_records(folder, tables)
    return get_stage("dedup").plan(DedupConfig(), str(records))


def test_interrupted_clustering_resumes_to_the_same_result(tmp_path, family, monkeypatch):
    clean = decisions(run_dedup(tmp_path / "clean", corpus_tables(family, 0), rows_per_partition=10))
    real = dedup_module.cluster_task
    calls = []

    def crash_once(plan, part, run_id):
        calls.append(part)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the run dies after the first cluster task committed
        return real(plan, part, run_id)

    monkeypatch.setattr(dedup_module, "cluster_task", crash_once)
    with pytest.raises(KeyboardInterrupt):
        run_dedup(tmp_path / "crash", corpus_tables(family, 0), rows_per_partition=10)
    monkeypatch.setattr(dedup_module, "cluster_task", real)
    done = tmp_path / "crash" / "out" / "_state" / "dedup_clusters" / "work" / "done"
    assert len(list((done / f"signature-{dedup_module.SIGNATURE_ROWS}").iterdir())) == 2  # finished phases are kept
    assert len(list((done / "cluster").iterdir())) == 1  # and so is the finished task of the interrupted one
    calls.clear()
    monkeypatch.setattr(dedup_module, "cluster_task", crash_once)
    calls.append(-1)  # no crash this time (the crash is on the second call overall)
    calls.append(-2)
    assert decisions(run_dedup(tmp_path / "crash", corpus_tables(family, 0), rows_per_partition=10)) == clean
    partitions = len(list((tmp_path / "crash" / "out" / "dedup_clusters").glob("*.parquet")))
    assert len(calls) - 2 == partitions - 1  # only the unfinished cluster tasks ran again


def test_bad_settings_are_one_line_errors():
    with pytest.raises(StackcurateError, match="bands x .* rows"):
        build_config(DedupConfig, {"bands": 30, "rows": 10})
    with pytest.raises(StackcurateError, match="both bands and rows"):
        build_config(DedupConfig, {"bands": 30})
    with pytest.raises(StackcurateError, match="nothing to do"):
        build_config(DedupConfig, {"exact": False, "near": False})


def test_by_default_candidate_pairs_below_the_threshold_are_verified_away(tmp_path, family):
    # chain_a and chain_b share a band (checked above) at Jaccard ~0.78; with the same bands and a 0.8
    # threshold, only the exact check can tell them apart. Exact copies always pass it.
    contents = [family["chain_a"], family["chain_b"], family["chain_a"], "tiny", "tiny"]
    layout = {"bands": 25, "rows": 10, "threshold": 0.8}
    unverified = run_dedup(tmp_path / "off", [files_table(contents)], verify=False, **layout)  # SC2's recipe
    assert sorted(unverified["kept"].column("doc_id").to_pylist()) == [0, 3]
    assert unverified["removed"].column("reason").to_pylist() == [
        "near_duplicate",
        "exact_duplicate",
        "exact_duplicate",
    ]
    verified = run_dedup(tmp_path / "on", [files_table(contents)], rows_per_partition=2, **layout)  # the default
    assert sorted(verified["kept"].column("doc_id").to_pylist()) == [0, 1, 3]
    assert verified["removed"].column("reason").to_pylist() == ["exact_duplicate", "exact_duplicate"]


def test_repeated_doc_ids_are_refused(tmp_path, family):
    table = files_table([family["base"], family["other"]])
    with pytest.raises(StackcurateError, match="doc_id 0 appears more than once"):
        run_dedup(tmp_path, [table, table])


def test_output_to_s3_equals_local(tmp_path, family, s3_endpoint, monkeypatch):
    boto3 = pytest.importorskip("boto3")
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket="runs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)  # how a run reaches its own store (signed, AWS env)
    local = run_dedup(tmp_path / "local", corpus_tables(family, 0), rows_per_partition=10)
    records = write_records(tmp_path / "in", corpus_tables(family, 0))
    cfg = build_config(DedupConfig, {"rows_per_partition": 10})
    run_stage(
        get_stage("dedup"), cfg, "s3://runs/x", RunOptions(runner="local", progress=False), input_uri=str(records)
    )
    fs, _ = io.filesystem("s3://runs/x")
    on_s3 = {
        name: pa.concat_tables([pq.read_table(f, filesystem=fs) for f in io.expand(fs, f"runs/x/{sub}/*.parquet")])
        for name, sub in (("kept", "dedup"), ("removed", "_removed/dedup"), ("clusters", "dedup_clusters"))
    }
    assert decisions(on_s3) == decisions(local)
    assert not io.expand(fs, "runs/x/_state/dedup_clusters/work", suffix=".parquet")  # the work files are gone


def test_records_are_deduplicated_within_their_kind(tmp_path, family):
    """An issue thread that reads like a file is no copy of it; two copies of one thread are."""
    contents = [family["base"], family["base"], family["base"], family["near"]]
    table = files_table(contents)
    table = table.append_column("kind", pa.array(["file", "issue", "issue", "issue"], pa.string()))
    got = run_dedup(tmp_path, [table])
    assert sorted(got["kept"].column("doc_id").to_pylist()) == [0, 1]  # the file and one thread
    removed = sorted((r["doc_id"], r["reason"], r["duplicate_of"]) for r in got["removed"].to_pylist())
    assert removed == [(2, "exact_duplicate", 1), (3, "near_duplicate", 1)]

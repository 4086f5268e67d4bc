"""The Stack v2 source (sources/stack_v2.py): metadata Parquet plus a content store, local or S3; bad objects
and bad metadata values as error rows. Each test builds a tiny layout in `tmp_path` and runs ingest on it."""

import gzip
import random
import uuid
from pathlib import Path

from helpers import GOOD, Ingested, ingest, stack_v2_layout

from stackcurate.stages.ingest.content import git_blob_hex, sha1_hex


def check_stack_v2_kept(got: Ingested, files: list[tuple[str, bytes]], *, n_rows: int) -> None:
    kept = got.kept_by_path()
    assert set(kept) == {p for p, _ in files}
    for path, data in files:
        row = kept[path]
        assert row["content"] == data.decode()
        assert row["blob_id"] == sha1_hex(data)
        assert row["content_id"] == git_blob_hex(data)
        assert row["swhid"] == f"swh:1:cnt:{git_blob_hex(data)}"
        assert row["source"] == "stack_v2"
        assert row["repo_name"] == "acme/widgets"
        assert row["detected_licenses"] == ["MIT"] and row["license_type"] == "permissive"
        assert row["star_events_count"] == 3 and row["fork_events_count"] == 1
        assert row["length_bytes"] == len(data)
        assert row["path"].startswith("/")
    ids = (
        got.kept.column("doc_id").to_pylist()
        + got.removed.column("doc_id").to_pylist()
        + got.errors.column("doc_id").to_pylist()
    )
    assert sorted(ids) == list(range(n_rows)), "one row out per metadata row, doc_id = ordinal in source 0"


def test_stack_v2_local_store(tmp_path):
    root = stack_v2_layout(tmp_path / "sv2", GOOD)
    got = ingest(tmp_path / "out", metadata=[root / "metadata/*.parquet"], content=root)
    check_stack_v2_kept(got, GOOD, n_rows=3)
    assert got.removed.num_rows == 0 and got.errors.num_rows == 0
    assert got.kept_by_path()["/src/app.py"]["extension"] == "py"
    assert got.kept_by_path()["/src/app.py"]["origin"].endswith("metadata/00000.parquet")
    assert (got.result.docs_in, got.result.docs_out) == (3, 3)


def test_only_names_reads_just_those_files_and_keeps_their_doc_ids(tmp_path):
    """What license's scan reads through a fused ingest: only the named files are fetched from the store (the
    others' objects are gone here, yet no error), with the doc_ids of a full ingest."""
    files = [*GOOD, ("/LICENSE", b"MIT License\n"), ("/docs/COPYING.txt", b"GPL\n")]
    root = stack_v2_layout(tmp_path / "sv2", files)
    full = ingest(tmp_path / "full", metadata=[root / "metadata/*.parquet"], content=root)
    for _, data in GOOD:
        (root / "content" / sha1_hex(data)).unlink()
    got = ingest(
        tmp_path / "out", metadata=[root / "metadata/*.parquet"], content=root, only_names="(license|copying)"
    )
    assert sorted(got.kept_by_path()) == ["/LICENSE", "/docs/COPYING.txt"]
    assert got.removed.num_rows == 0 and got.errors.num_rows == 0
    ids = {row["path"]: row["doc_id"] for row in full.kept.to_pylist()}
    assert {p: r["doc_id"] for p, r in got.kept_by_path().items()} == {
        p: ids[p] for p in ("/LICENSE", "/docs/COPYING.txt")
    }


def _upload_store(s3_endpoint: str, root: Path, bucket_acl: str | None) -> str:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    bucket = f"swh-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket, **({"ACL": bucket_acl} if bucket_acl else {}))
    for obj in sorted((root / "content").iterdir()):
        client.put_object(Bucket=bucket, Key=f"mirror/v1/content/{obj.name}", Body=obj.read_bytes())
    return f"s3://{bucket}/mirror/v1"


def test_stack_v2_s3_store_anonymous(tmp_path, s3_endpoint):
    # Anonymous (unsigned) requests, the default, need a public bucket, as the SWH bucket is; moto enforces ACLs.
    files = [*GOOD, ("/gone.py", b"print('gone')\n")]
    root = stack_v2_layout(tmp_path / "sv2", files, objects={"/gone.py": None})
    store = _upload_store(s3_endpoint, root, "public-read")
    got = ingest(tmp_path / "out", metadata=[root / "metadata/*.parquet"], content=store, s3_endpoint=s3_endpoint)
    check_stack_v2_kept(got, GOOD, n_rows=4)
    assert got.reasons("errors") == {"/gone.py": "missing_blob"}
    assert got.errors.to_pylist()[0]["blob_id"] == sha1_hex(b"print('gone')\n")


def test_stack_v2_s3_store_signed(tmp_path, s3_endpoint):
    # A private bucket: signed requests with the credentials the fixture exports.
    files = [*GOOD, ("/gone.py", b"print('gone')\n")]
    root = stack_v2_layout(tmp_path / "sv2", files, objects={"/gone.py": None})
    store = _upload_store(s3_endpoint, root, None)
    got = ingest(
        tmp_path / "out",
        metadata=[root / "metadata/*.parquet"],
        content=store,
        s3_endpoint=s3_endpoint,
        s3_anonymous=False,
    )
    check_stack_v2_kept(got, GOOD, n_rows=4)
    assert got.reasons("errors") == {"/gone.py": "missing_blob"}


# --- bad input in a Stack v2 batch ---------------------------------------------------------------------------

_RND = random.Random(1234)
BOMB = gzip.compress(b"\0" * 50_000_000, mtime=0, compresslevel=9)  # ~49 KB inflating to 50 MB
NOISE_GZ = gzip.compress(_RND.randbytes(70_000), mtime=0)  # incompressible: over a 60 KB compressed cap
BIG_TEXT = "".join(f"value_{i} = {i * 7919 % 1000003}  # row {i}\n" for i in range(5000)).encode()  # > 100 KB
ACCENTED = ("é" * 30 + "\n") * 1800  # 55,800 bytes in cp1252, 109,800 bytes in UTF-8


def test_bad_inputs_become_rows_and_good_files_are_kept(tmp_path):
    good = [("/a.py", b"a = 1\n"), ("/b/b.py", b"b = 2\n"), ("/c.txt", b"just text\n")]
    hello = b"print('hello')\n"
    bad = {
        "/truncated.py": (b"truncated = True\n" * 50, gzip.compress(b"truncated = True\n" * 50, mtime=0)[:40]),
        "/notgz.py": (b"notgz = 1\n", b"this object is not gzip at all\n"),
        "/missing.py": (b"missing = 1\n", None),
        "/mismatch.py": (b"mismatch = 1\n", gzip.compress(b"other bytes\n", mtime=0)),
        "/undecodable.txt": (bytes(range(1, 256)), None),
        "/bomb.txt": (b"bomb\n", BOMB),
        "/nul.c": (b"int x;\0\n", None),
        "/empty.txt": (b"", None),
        "/big.py": (BIG_TEXT, None),
        "/accented.txt": (ACCENTED.encode("cp1252"), None),
        "/noise.bin": (b"noise\n", NOISE_GZ),
        "/hidden.py": (b"This content is hidden.\n", None),
        "/bad_cid.py": (hello, None),
        "/bad_blob_id.py": (b"bad blob id\n", None),
    }
    files = good + [(p, data) for p, (data, _) in bad.items()]
    objects = {p: obj for p, (_, obj) in bad.items() if obj is not None or p == "/missing.py"}
    root = stack_v2_layout(
        tmp_path / "sv2",
        files,
        objects=objects,
        extra={
            "/accented.txt": {"src_encoding": "Windows-1252"},
            "/bad_cid.py": {"content_id": "0" * 40},
            "/bad_blob_id.py": {"blob_id": "not-a-sha1"},
        },
    )
    got = ingest(
        tmp_path / "out",
        metadata=[root / "metadata/*.parquet"],
        content=root,
        max_bytes=100_000,
        max_compressed_bytes=60_000,
    )

    assert got.reasons("errors") == {
        "/truncated.py": "corrupt_gzip",
        "/notgz.py": "corrupt_gzip",
        "/missing.py": "missing_blob",
        "/mismatch.py": "hash_mismatch",
        "/undecodable.txt": "undecodable",
        "/bomb.txt": "decompression_bomb",
        "/bad_cid.py": "hash_mismatch",
        "/bad_blob_id.py": "missing_blob",
    }
    assert got.reasons("removed") == {
        "/nul.c": "binary",
        "/empty.txt": "empty",
        "/big.py": "too_large",
        "/accented.txt": "too_large",
        "/noise.bin": "too_large",
        "/hidden.py": "swh_placeholder",
    }
    details = {r["path"]: r["detail"] for r in got.removed.to_pylist()}
    assert "not fetched" in details["/big.py"]  # metadata length_bytes over the cap: never downloaded
    assert "decoded" in details["/accented.txt"]  # 55.8 KB in cp1252, 109.8 KB once UTF-8
    assert "compressed" in details["/noise.bin"]
    kept = got.kept_by_path()
    assert set(kept) == {p for p, _ in good}
    assert all(kept[p]["content"] == data.decode() for p, data in good)
    assert all(r["detail"] for r in got.errors.to_pylist())
    assert all(r["origin"].endswith("00000.parquet") for r in got.errors.to_pylist())
    ids = got.kept["doc_id"].to_pylist() + got.removed["doc_id"].to_pylist() + got.errors["doc_id"].to_pylist()
    assert sorted(ids) == list(range(len(files)))
    assert (got.result.docs_out, got.result.docs_removed, got.result.errors) == (3, 6, 8)


def test_corrupt_metadata_file_among_good_ones(tmp_path):
    root = stack_v2_layout(tmp_path / "sv2", GOOD)
    (root / "metadata/00001.parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    good_bytes = (root / "metadata/00000.parquet").read_bytes()
    (root / "metadata/00002.parquet").write_bytes(good_bytes[: len(good_bytes) // 2])  # cut: footer gone
    got = ingest(tmp_path / "out", metadata=[root / "metadata/*.parquet"], content=root)
    assert {r["path"] for r in got.kept.to_pylist()} == {p for p, _ in GOOD}
    errors = got.errors.to_pylist()
    assert sorted(Path(e["origin"]).name for e in errors) == ["00001.parquet", "00002.parquet"]
    assert {e["reason"] for e in errors} == {"unreadable_input"}
    assert all(e["detail"] for e in errors)
    assert (tmp_path / "out/_state/ingest/SUCCESS").exists()

"""Ingest stage: The Stack v2 store (local and S3), vault bundles, local folders and git repositories.

Every test builds tiny inputs in `tmp_path` and runs the stage with the local runner.
"""

import gzip
import os
import random
import shutil
import subprocess
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import add_members, file_member, read_all, stack_v2_layout, tar_bytes

from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import DOC_ID_ORDINAL_BITS, ERROR_SCHEMA, FILE_SCHEMA, with_reason
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage
from stackcurate.stages.ingest import plan
from stackcurate.stages.ingest.content import decode, git_blob_hex, sha1_hex

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")

DIR_HEX = sha1_hex(b"a directory")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


# --- helpers ------------------------------------------------------------------------------------------------


@dataclass
class Ingested:
    result: object
    kept: pa.Table
    removed: pa.Table
    errors: pa.Table

    def kept_by_path(self) -> dict[str, dict]:
        return {r["path"]: r for r in self.kept.to_pylist()}

    def reasons(self, which: str) -> dict[str, str]:
        return {r["path"]: r["reason"] for r in getattr(self, which).to_pylist()}


def ingest(out: Path, **values: object) -> Ingested:
    spec = get_stage("ingest")
    values = {
        k: ([str(x) for x in v] if isinstance(v, list | tuple) else (str(v) if isinstance(v, Path) else v))
        for k, v in values.items()
    }
    cfg = build_config(spec.config, values)
    result = run_stage(spec, cfg, str(out), RunOptions(runner="local", progress=False))
    stage = out / "ingest"
    return Ingested(
        result,
        read_all(stage, FILE_SCHEMA),
        read_all(stage / "removed", with_reason(FILE_SCHEMA)),
        read_all(stage / "errors", ERROR_SCHEMA),
    )


def snapshot(root: Path, skip: str = "out") -> set[str]:
    """Every path under `root` (links not followed), except `root/skip` and what it holds."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            rel = (Path(dirpath) / name).relative_to(root)
            if rel.parts[0] != skip:
                found.add(rel.as_posix())
    return found


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
    )
    return out.stdout.decode().strip()


def write_files(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def committed_repo(root: Path, files: dict[str, bytes]) -> str:
    write_files(root, files)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return git(root, "rev-parse", "HEAD")


def flat_bundle(
    folder: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], hex_id: str = DIR_HEX, mode: str = "w:gz"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"swh:1:dir:{hex_id}.tar.gz"
    path.write_bytes(tar_bytes([(file_member(f"swh:1:dir:{hex_id}", tarfile.DIRTYPE), None), *members], mode=mode))
    return path


def in_dir(name: str, hex_id: str = DIR_HEX) -> str:
    return f"swh:1:dir:{hex_id}/{name}"


def git_bare_bundle(
    tmp_path: Path, files: dict[str, bytes], extra: list[tuple[tarfile.TarInfo, bytes | None]] = ()
) -> tuple[Path, str, str]:
    """A real git-bare vault bundle of a one-commit repository; returns (bundle, commit, tree)."""
    src = tmp_path / "gitsrc"
    commit = committed_repo(src, files)
    tree = git(src, "rev-parse", "HEAD^{tree}")
    bare = tmp_path / "bare" / f"swh:1:rev:{commit}.git"
    bare.parent.mkdir()
    git(tmp_path, "clone", "-q", "--bare", "--no-local", str(src), str(bare))
    bundle = tmp_path / "bundles" / f"swh_1_rev_{commit}.git.tar"
    bundle.parent.mkdir(exist_ok=True)
    with tarfile.open(bundle, "w") as tar:
        add_members(tar, extra)
        tar.add(bare, arcname=bare.name)
    shutil.rmtree(tmp_path / "bare")
    return bundle, commit, tree


# --- The Stack v2 layout ------------------------------------------------------------------------------------

GOOD = [
    ("/src/app.py", b"import os\nprint(os.getcwd())\n"),
    ("/README.md", b"# Widgets\n\nHello.\n"),
    ("/lib/util.c", b"int add(int a, int b) { return a + b; }\n"),
]


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


# --- encodings ----------------------------------------------------------------------------------------------


def test_declared_windows_1252(tmp_path):
    text = "# Café – naïve “quotes” € 5\nprint('déjà')\n"
    root = stack_v2_layout(
        tmp_path / "sv2", [("/cafe.py", text.encode("cp1252"))], extra={"/cafe.py": {"src_encoding": "Windows-1252"}}
    )
    got = ingest(tmp_path / "out", metadata=[root / "metadata"], content=root)
    row = got.kept_by_path()["/cafe.py"]
    assert row["content"] == text
    assert row["src_encoding"] == "Windows-1252"
    assert row["length_bytes"] == len(text.encode("utf-8"))
    assert row["blob_id"] == sha1_hex(text.encode("cp1252"))


def test_undeclared_non_utf8_is_detected(tmp_path):
    text = "// Größe der Übergabe prüfen, wenn die Länge größer ist als erwartet\nint größe = 0; // Äpfel und Öl\n" * 4
    data = text.encode("latin-1")
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    root = stack_v2_layout(tmp_path / "sv2", [("/g.c", data)], extra={"/g.c": {"src_encoding": None}})
    got = ingest(tmp_path / "out", metadata=[root / "metadata"], content=root)
    row = got.kept_by_path()["/g.c"]
    assert row["content"] == text
    assert row["src_encoding"] not in (None, "UTF-8")
    assert data.decode(row["src_encoding"]) == text


@pytest.mark.parametrize("declared", ["ascii", "no-such-codec"])
def test_wrong_declared_encoding_falls_back_to_utf8(tmp_path, declared):
    text = "# naïve café ✓ 日本\nx = 1\n"
    root = stack_v2_layout(tmp_path / "sv2", [("/u.py", text.encode())], extra={"/u.py": {"src_encoding": declared}})
    got = ingest(tmp_path / "out", metadata=[root / "metadata"], content=root)
    row = got.kept_by_path()["/u.py"]
    assert row["content"] == text
    assert row["src_encoding"] == "UTF-8"


def test_declared_non_text_codec_falls_back(tmp_path):
    files = [("/ok.py", b"print('ok')\n"), ("/b64.py", b"print('b64')\n")]
    root = stack_v2_layout(tmp_path / "sv2", files, extra={"/b64.py": {"src_encoding": "base64"}})
    got = ingest(tmp_path / "out", metadata=[root / "metadata"], content=root)
    assert got.kept_by_path()["/b64.py"]["content"] == "print('b64')\n"
    assert got.kept_by_path()["/b64.py"]["src_encoding"] == "UTF-8"
    assert "/ok.py" in got.kept_by_path()


def test_decode_undecodable_bytes():
    # No NUL, not UTF-8, and charset detection finds nothing: reachable with byte soup.
    result = decode(bytes(range(1, 256)))
    assert result.text is None and result.reason == "undecodable"


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
    assert (tmp_path / "out/ingest/_SUCCESS").exists()


# --- vault bundles ------------------------------------------------------------------------------------------


def test_flat_bundle_files_and_unsafe_members(tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    readme, main = b"# Project\n", b"def main():\n    return 0\n"
    bundle = flat_bundle(
        tmp_path / "bundles",
        [
            (file_member(in_dir("README.md")), readme),
            (file_member(in_dir("src"), tarfile.DIRTYPE), None),
            (file_member(in_dir("src/main.py")), main),
            (file_member("../escape.txt"), b"escaped\n"),
            (file_member(f"/{tmp_path.name}-abs/path.txt"), b"absolute\n"),
            (file_member(in_dir("evil"), tarfile.SYMTYPE, "../../etc/passwd"), None),
            (file_member(in_dir("hard"), tarfile.LNKTYPE, "/etc/passwd"), None),
            (file_member(in_dir("chardev"), tarfile.CHRTYPE), None),
            (file_member(in_dir("pipe"), tarfile.FIFOTYPE), None),
            (file_member(in_dir("link.py"), tarfile.SYMTYPE, "src/main.py"), None),
        ],
    )
    before = snapshot(tmp_path)
    got = ingest(tmp_path / "out", bundles=[bundle])

    kept = got.kept_by_path()
    assert set(kept) == {"/README.md", "/src/main.py"}
    for path, data in (("/README.md", readme), ("/src/main.py", main)):
        row = kept[path]
        assert row["content"] == data.decode()
        assert row["directory_id"] == DIR_HEX
        assert row["repo_name"] == f"swh:1:dir:{DIR_HEX}"
        assert row["source"] == "vault_flat"
        assert row["content_id"] == git_blob_hex(data) and row["blob_id"] == sha1_hex(data)
        assert row["swhid"] == f"swh:1:cnt:{git_blob_hex(data)}"
    assert got.reasons("errors") == {
        "/../escape.txt": "unsafe_member",
        f"/{tmp_path.name}-abs/path.txt": "unsafe_member",
        "/evil": "unsafe_member",
        "/hard": "unsafe_member",
        "/chardev": "unsafe_member",
        "/pipe": "unsafe_member",
    }
    assert got.reasons("removed") == {"/link.py": "symlink"}

    assert snapshot(tmp_path) == before
    assert not (tmp_path / "escape.txt").exists() and not (work.parent / "escape.txt").exists()
    assert not Path(f"/{tmp_path.name}-abs").exists()
    written = {p.name for p in (tmp_path / "out").rglob("*")}
    assert not written & {"escape.txt", "path.txt", "evil", "hard", "chardev", "pipe", "link.py"}


def test_truncated_flat_bundle_keeps_members_before_the_cut(tmp_path):
    noise = random.Random(7).randbytes(100_000).hex().encode()  # compresses only ~2x: the cut lands in it
    bundle = flat_bundle(
        tmp_path / "bundles",
        [
            (file_member(in_dir("first.py")), b"first = 1\n"),
            (file_member(in_dir("second.txt")), noise),
            (file_member(in_dir("third.py")), b"third = 3\n"),
        ],
    )
    data = bundle.read_bytes()
    bundle.write_bytes(data[: len(data) // 2])
    got = ingest(tmp_path / "out", bundles=[bundle])
    assert set(got.kept_by_path()) == {"/first.py"}
    assert got.kept_by_path()["/first.py"]["content"] == "first = 1\n"
    assert [e["reason"] for e in got.errors.to_pylist()] == ["corrupt_bundle"]
    assert (tmp_path / "out/ingest/_SUCCESS").exists()


@needs_git
def test_git_bare_bundle(tmp_path):
    files = {"a.py": b"print('a')\n", "pkg/b.py": b"B = 2\n", "pkg/deep/c.md": b"# C\n"}
    bundle, commit, tree = git_bare_bundle(tmp_path, files)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    got = ingest(tmp_path / "out", bundles=[bundle], tmp_dir=scratch)
    kept = got.kept_by_path()
    assert set(kept) == {"/" + p for p in files}
    for rel, data in files.items():
        row = kept["/" + rel]
        assert row["content"] == data.decode()
        assert row["revision_id"] == commit
        assert row["directory_id"] == tree
        assert row["source"] == "vault_git"
        assert row["repo_name"] == f"swh:1:rev:{commit}"
        assert row["content_id"] == git_blob_hex(data) == git(tmp_path / "gitsrc", "rev-parse", f"HEAD:{rel}")
        assert row["blob_id"] == sha1_hex(data)
    assert got.errors.num_rows == 0 and got.removed.num_rows == 0
    assert list(scratch.iterdir()) == [], "the unpacked repository is removed"


@needs_git
def test_git_bare_bundle_with_unsafe_members(tmp_path):
    files = {"a.py": b"print('a')\n", "pkg/b.py": b"B = 2\n"}
    scratch = tmp_path / "scratch" / "inner"
    scratch.mkdir(parents=True)
    # Built before the commit is known, so the symlink is named in a folder that exists in every bundle.
    extra = [
        (file_member("../evil"), b"evil\n"),
        (file_member("../../evil2"), b"evil\n"),
        (file_member(f"/{tmp_path.name}-abs-evil"), b"evil\n"),
        (file_member("escape_link", tarfile.SYMTYPE, "../../../etc/passwd"), None),
        (file_member("dev0", tarfile.CHRTYPE), None),
    ]
    bundle, commit, _ = git_bare_bundle(tmp_path, files, extra)
    before = snapshot(tmp_path)
    got = ingest(tmp_path / "out", bundles=[bundle], tmp_dir=scratch)
    assert set(got.kept_by_path()) == {"/a.py", "/pkg/b.py"}
    assert got.kept_by_path()["/a.py"]["revision_id"] == commit
    assert got.reasons("errors") == {
        "/../evil": "unsafe_member",
        "/../../evil2": "unsafe_member",
        f"/{tmp_path.name}-abs-evil": "unsafe_member",
        "/escape_link": "unsafe_member",
        "/dev0": "unsafe_member",
    }
    assert snapshot(tmp_path) == before
    assert not (scratch / "evil").exists() and not (scratch.parent / "evil2").exists()
    assert not (tmp_path / "evil").exists() and not Path(f"/{tmp_path.name}-abs-evil").exists()
    assert list(scratch.iterdir()) == []


# --- local sources ------------------------------------------------------------------------------------------


def test_local_plain_folder(tmp_path):
    root = write_files(tmp_path / "myproj", {"a.py": b"A = 1\n", "sub/dir/b.py": b"B = 2\n", "sub/c.txt": b"c\n"})
    (root / "link.py").symlink_to("a.py")
    (root / "linked_dir").symlink_to("sub")  # not followed: its files would be ingested twice
    got = ingest(tmp_path / "out", repos=[root])
    kept = got.kept_by_path()
    assert set(kept) == {"/a.py", "/sub/dir/b.py", "/sub/c.txt"}
    assert kept["/sub/dir/b.py"]["content"] == "B = 2\n"
    assert {r["source"] for r in kept.values()} == {"local"}
    assert {r["repo_name"] for r in kept.values()} == {"myproj"}
    assert kept["/a.py"]["content_id"] == git_blob_hex(b"A = 1\n")
    assert got.reasons("removed") == {"/link.py": "symlink", "/linked_dir": "symlink"}
    assert got.errors.num_rows == 0


@needs_git
def test_local_git_repository_takes_head_only(tmp_path):
    root = tmp_path / "gitproj"
    commit = committed_repo(root, {"a.py": b"A = 1\n", "pkg/b.py": b"B = 2\n"})
    (root / "a.py").write_bytes(b"A = 'modified, not committed'\n")
    (root / "untracked.py").write_bytes(b"U = 0\n")
    got = ingest(tmp_path / "out", repos=[root])
    kept = got.kept_by_path()
    assert set(kept) == {"/a.py", "/pkg/b.py"}
    assert kept["/a.py"]["content"] == "A = 1\n"
    assert kept["/a.py"]["revision_id"] == commit
    assert kept["/a.py"]["directory_id"] == git(root, "rev-parse", "HEAD^{tree}")
    assert kept["/a.py"]["source"] == "local"
    assert got.removed.num_rows == 0 and got.errors.num_rows == 0


@needs_git
def test_local_git_repository_without_commit_uses_working_tree(tmp_path):
    root = write_files(tmp_path / "fresh", {"a.py": b"A = 1\n", "pkg/b.py": b"B = 2\n"})
    git(root, "init", "-q")
    got = ingest(tmp_path / "out", repos=[root])
    kept = got.kept_by_path()
    assert set(kept) == {"/a.py", "/pkg/b.py"}, "working-tree files, and nothing from .git"
    assert kept["/pkg/b.py"]["content"] == "B = 2\n"
    assert kept["/a.py"]["revision_id"] is None


def test_non_utf8_file_name_does_not_lose_the_folder(tmp_path):
    root = write_files(tmp_path / "proj", {"good.py": b"G = 1\n"})
    (root / os.fsdecode(b"caf\xe9.py")).write_bytes(b"C = 1\n")
    got = ingest(tmp_path / "out", repos=[root])
    assert "/good.py" in got.kept_by_path()


# --- tree depth ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["folder", "flat_bundle", pytest.param("git_repo", marks=needs_git)])
def test_tree_depth_limit(tmp_path, kind):
    ok = "/".join(["d"] * 63) + "/ok.py"  # 64 components: kept
    deep = "/".join(["d"] * 64) + "/deep.py"  # 65 components: too deep
    files = {ok: b"ok = 1\n", deep: b"deep = 1\n"}
    if kind == "flat_bundle":
        bundle = flat_bundle(tmp_path / "bundles", [(file_member(in_dir(p)), data) for p, data in files.items()])
        got = ingest(tmp_path / "out", bundles=[bundle])
    elif kind == "git_repo":
        committed_repo(tmp_path / "proj", files)
        got = ingest(tmp_path / "out", repos=[tmp_path / "proj"])
    else:
        got = ingest(tmp_path / "out", repos=[write_files(tmp_path / "proj", files)])
    assert set(got.kept_by_path()) == {"/" + ok}
    assert got.reasons("removed") == {"/" + deep: "too_deep"}


# --- determinism --------------------------------------------------------------------------------------------


def test_same_inputs_same_output_whatever_the_sharding(tmp_path):
    files = [(f"/f{i}.py", f"x = {i}\n".encode()) for i in range(5)]
    root = stack_v2_layout(tmp_path / "sv2", files, objects={"/f3.py": None})
    bundle = flat_bundle(
        tmp_path / "bundles", [(file_member(in_dir("x.py")), b"X = 1\n"), (file_member(in_dir("y.py")), b"Y = 2\n")]
    )
    repo = write_files(tmp_path / "proj", {"p.py": b"P = 1\n", "q/q.py": b"Q = 1\n"})
    inputs = {"metadata": [root / "metadata/*.parquet"], "content": root, "bundles": [bundle], "repos": [repo]}

    first = ingest(tmp_path / "out1", **inputs)
    second = ingest(tmp_path / "out2", **inputs)
    sharded = ingest(tmp_path / "out3", **inputs, rows_per_shard=2)

    assert first.kept.num_rows == 8
    assert first.kept.equals(second.kept)
    assert first.removed.equals(second.removed) and first.errors.equals(second.errors)
    ids = first.kept["doc_id"].to_pylist()
    assert len(set(ids)) == len(ids)
    # doc_id = (source_index << 40) | ordinal: metadata file 0, then the bundle (1), then the folder (2).
    assert {i >> DOC_ID_ORDINAL_BITS for i in ids} == {0, 1, 2}
    assert len(list((tmp_path / "out3/ingest").glob("*.parquet"))) == 5  # 3 metadata shards + bundle + folder
    assert sharded.kept.sort_by("doc_id").equals(first.kept.sort_by("doc_id"))
    assert sharded.errors.sort_by("doc_id").equals(first.errors.sort_by("doc_id"))
    assert [r["path"] for r in sharded.errors.to_pylist()] == ["/f3.py"]


# --- errors for the user ------------------------------------------------------------------------------------


def _user_error_cases(tmp_path: Path) -> dict[str, tuple[dict, str]]:
    root = stack_v2_layout(tmp_path / "sv2", GOOD)
    odd = tmp_path / "bundles" / "swh:1:dir:abc.zip"
    odd.parent.mkdir()
    odd.write_bytes(b"PK")
    return {
        "no_inputs": ({}, "needs an input"),
        "metadata_without_content": ({"metadata": [str(root / "metadata/*.parquet")]}, "needs --content"),
        "metadata_glob_matches_nothing": (
            {"metadata": [str(tmp_path / "nowhere/*.parquet")], "content": str(root)},
            "no metadata file matches",
        ),
        "bundle_glob_matches_nothing": ({"bundles": [str(tmp_path / "nowhere/*.tar.gz")]}, "no bundle file matches"),
        "unknown_bundle_kind": ({"bundles": [str(odd)]}, "cannot tell the vault bundle kind"),
        "repo_not_a_folder": ({"repos": [str(tmp_path / "no-such-repo")]}, "is not a folder"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "no_inputs",
        "metadata_without_content",
        "metadata_glob_matches_nothing",
        "bundle_glob_matches_nothing",
        "unknown_bundle_kind",
        "repo_not_a_folder",
    ],
)
def test_user_errors(tmp_path, case):
    values, phrase = _user_error_cases(tmp_path)[case]
    spec = get_stage("ingest")
    cfg = build_config(spec.config, values)
    with pytest.raises(StackcurateError, match=phrase):
        plan(cfg)
    with pytest.raises(StackcurateError, match=phrase):
        run_stage(spec, cfg, str(tmp_path / "out"), RunOptions(runner="local", progress=False))
    assert not (tmp_path / "out").exists(), "nothing is written before the inputs are checked"

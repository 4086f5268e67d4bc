"""The flat vault bundle source (sources/vault_flat.py): files streamed out of the tar, unsafe members as errors
without touching the disk, a truncated bundle."""

import random
import tarfile
from pathlib import Path

from helpers import DIR_HEX, file_member, flat_bundle, in_dir, ingest, snapshot

from stackcurate.stages.ingest.content import git_blob_hex, sha1_hex


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
    assert (tmp_path / "out/_state/ingest/SUCCESS").exists()

"""The git-bare vault bundle source (sources/vault_git_bare.py): the revision's tree, unsafe members as errors,
the scratch folder emptied."""

import tarfile
from pathlib import Path

from helpers import file_member, git, git_bare_bundle, ingest, needs_git, snapshot

from stackcurate.stages.ingest.content import git_blob_hex, sha1_hex


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

"""Local folders and git repositories (sources/local_repo.py): walked folders, HEAD of a repository."""

import os

from helpers import committed_repo, git, ingest, needs_git, write_files

from stackcurate.stages.ingest.content import git_blob_hex


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

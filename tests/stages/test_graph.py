"""The graph stage on a miniature SWH export built from real git repositories (stages/graph/mini.py): every
origin's walk equals `git ls-tree -r` of its commit, and each edge case has its test."""

import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import read_all, table_dir

from stackcurate.cli import main
from stackcurate.core.schema import ERROR_SCHEMA, FILE_SCHEMA, STATS_SCHEMA
from stackcurate.stages.graph import OUTPUT_SCHEMA, mini, repo_name
from stackcurate.stages.graph import walk as w

REMOVED_SCHEMA = pa.schema([*OUTPUT_SCHEMA, ("reason", pa.string()), ("detail", pa.string())])


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("export") / "mini"
    return root, mini.build(root, mini.default_sources())


def test_the_miniature_export_builds_under_a_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `stackcurate sample work/sample`, as the README says: git runs elsewhere
    manifest = mini.build(Path("work") / "graph", mini.default_sources())
    assert len(manifest["origins"]) == 6 and (tmp_path / "work" / "graph" / "orc" / "origin").is_dir()


def _walk(export: Path, out: Path, *flags: str) -> tuple[pa.Table, pa.Table, pa.Table]:
    argv = ["graph", "--export", str(export), "--out", str(out), "--runner", "local", "--no-progress", *flags]
    assert main(argv) == 0
    stage = out / "graph"
    return (
        read_all(stage, OUTPUT_SCHEMA),
        read_all(table_dir(stage, "removed"), REMOVED_SCHEMA),
        read_all(table_dir(stage, "errors"), ERROR_SCHEMA),
    )


@pytest.fixture(scope="module")
def walked(export, tmp_path_factory):
    return _walk(export[0], tmp_path_factory.mktemp("walk") / "out")


def _origin(manifest: dict, case: str) -> dict:
    return next(o for o in manifest["origins"] if case in o["cases"])


def _rows(table: pa.Table, url: str) -> list[dict]:
    return [r for r in table.to_pylist() if r["origin_url"] == url]


def _ls_tree(repo: Path, commit: str) -> set[tuple[str, str]]:
    """(path, blob id) of every blob and link of the commit, as git lists them (submodules left out)."""
    out = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", commit], capture_output=True, check=True)
    found = set()
    for entry in out.stdout.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, kind, oid = meta.split()
        if kind == b"blob":
            found.add(("/" + path.decode("utf-8", "backslashreplace"), oid.decode()))
    return found


def test_every_origin_s_walk_is_git_ls_tree_of_its_commit(export, walked):
    root, manifest = export
    kept, removed, errors = walked
    assert errors.num_rows == 0
    walked_origins = 0
    for origin in manifest["origins"]:
        if not origin.get("commit"):
            continue
        walked_origins += 1
        rows = _rows(kept, origin["url"]) + [r for r in _rows(removed, origin["url"])
                                             if r["reason"] not in ("submodule", "path_too_deep")]  # fmt: skip
        expected = {(p, oid) for p, oid in _ls_tree(root / origin["repo"], origin["commit"]) if p.count("/") <= 64}
        assert {(r["path"], r["content_id"]) for r in rows} == expected, origin["url"]
        assert {r["revision_id"] for r in rows} == {origin["commit"]}
        assert {r["snapshot_id"] for r in rows} == {origin["snapshot"]}
        assert {r["repo_name"] for r in rows} == {repo_name(origin["url"])}
    assert walked_origins == 5


def test_directory_id_is_the_root_directory_of_the_revision(export, walked):
    """As in The Stack v2's metadata: every row of an origin, kept or removed, has the root directory of the
    revision its walk reached (git's tree of the commit), not the folder the file is in."""
    root, manifest = export
    kept, removed, _ = walked
    for origin in (o for o in manifest["origins"] if o.get("commit")):
        tree = subprocess.run(["git", "-C", str(root / origin["repo"]), "rev-parse", origin["commit"] + "^{tree}"],
                              capture_output=True, check=True, text=True).stdout.strip()  # fmt: skip
        rows = _rows(kept, origin["url"]) + _rows(removed, origin["url"])
        assert any("/" in r["path"][1:] for r in rows), "files in subfolders too"
        assert {r["directory_id"] for r in rows} == {tree}, origin["url"]


def test_blob_id_is_the_sha1_of_the_bytes(export, walked):
    root, manifest = export
    kept = walked[0].to_pylist()
    repos = {o["url"]: root / o["repo"] for o in manifest["origins"] if o.get("repo")}
    for row in kept:
        data = subprocess.run(["git", "-C", str(repos[row["origin_url"]]), "cat-file", "blob", row["content_id"]],
                              capture_output=True, check=True).stdout  # fmt: skip
        assert row["blob_id"] == hashlib.sha1(data).hexdigest()
        assert row["length_bytes"] == len(data)


def test_the_latest_full_visit_is_taken_and_failed_visits_give_nothing(export, walked):
    _, manifest = export
    origin = _origin(manifest, "latest_full_visit")
    rows = _rows(walked[0], origin["url"])
    assert rows and {r["snapshot_id"] for r in rows} == {origin["snapshot"]}  # the older full visit, not the partial
    failed = [o for o in manifest["origins"] if not o.get("commit")]
    assert failed and not any(_rows(walked[0], o["url"]) + _rows(walked[1], o["url"]) for o in failed)


def test_head_alias_and_release(export, walked):
    _, manifest = export
    assert {r["branch_name"] for r in _rows(walked[0], _origin(manifest, "head_alias_master")["url"])} == {
        "refs/heads/master"
    }
    released = _origin(manifest, "release")
    rows = _rows(walked[0], released["url"])
    assert {r["branch_name"] for r in rows} == {"refs/tags/v1.0"}
    assert {r["revision_id"] for r in rows} == {released["commit"]}  # the tag's commit, not main's newer one


def test_submodules_symlinks_skipped_and_hidden_are_removed_with_their_reason(export, walked):
    _, manifest = export
    removed = walked[1]
    email = _rows(removed, _origin(manifest, "submodule")["url"])
    assert [r["path"] for r in email if r["reason"] == "submodule"] == ["/vendor/lib"]
    assert [r["reason"] for r in email if r["path"] == "/email.py"] == ["symlink"]
    http = {r["path"]: (r["reason"], r["detail"]) for r in _rows(removed, _origin(manifest, "skipped_content")["url"])}
    assert http["/http/cookiejar.py"][0] == "skipped_content"
    assert http["/http/cookies.py"] == ("hidden_content", "status hidden")


def test_a_path_deeper_than_max_depth_is_removed_at_its_folder(export, walked):
    _, manifest = export
    deep = [r for r in _rows(walked[1], _origin(manifest, "deep_path")["url"]) if r["reason"] == "path_too_deep"]
    assert [r["path"].count("/") for r in deep] == [64]  # the folder whose files would have 65 components
    assert not any("deep.txt" in r["path"] for r in _rows(walked[0], _origin(manifest, "deep_path")["url"]))


def test_a_name_that_is_not_utf8_keeps_its_file(export, walked):
    _, manifest = export
    rows = [r for r in _rows(walked[0], _origin(manifest, "non_utf8_name")["url"]) if "caf" in r["path"]]
    assert [r["path"] for r in rows] == ["/caf\\xe9.txt"]


def test_a_fork_has_its_parent_s_files_but_one(export, walked):
    _, manifest = export
    fork = _origin(manifest, "fork")
    upstream = next(o for o in manifest["origins"] if o["url"] == "https://github.com/stdlib/email")
    mine = {(r["path"], r["content_id"]) for r in _rows(walked[0], fork["url"])}
    theirs = {(r["path"], r["content_id"]) for r in _rows(walked[0], upstream["url"])}
    assert len(mine & theirs) == len(mine) - 1 and len(mine) == len(theirs)  # one file changed


def test_a_directory_shared_by_two_origins_is_read_once_in_a_round(tmp_path):
    walk = w.Walk(export="", work=str(tmp_path), partitions=1, origins=None, opt_out=frozenset(), branches=(),
                  max_depth=64)  # fmt: skip
    shared, sub = "a" * 40, "b" * 40
    entries = pa.table({"directory_id": [shared, shared], "name": [b"x.py", b"lib"], "type": ["file", "dir"],
                        "target": ["c" * 40, sub], "perms": [0o100644, 0o40000]}, schema=w.ENTRIES)  # fmt: skip
    w.write_parts(walk, "entries_by_dir", 0, entries, np.zeros(2, dtype=np.int64))
    w.sort_entries_task(walk, 0)
    frontier = pa.table({"okey": [1, 2], "dir_id": [shared, shared], "prefix": [b"", b""]}, schema=w.FRONTIER)
    w.write_parts(walk, "level-0", 0, frontier, np.zeros(2, dtype=np.int64))
    assert w.level_task(walk, 0, 0) == {"frontier": 2, "directories": 1, "next": 2, "files": 2,
                                        "missing_directories": 0}  # fmt: skip
    below = w.read_part(walk, "level-1", 0, w.FRONTIER).to_pylist()
    assert sorted((r["okey"], r["dir_id"], r["prefix"]) for r in below) == [(1, sub, b"/lib"), (2, sub, b"/lib")]


def test_origins_are_filtered_by_url_and_opt_out(export, tmp_path):
    root, manifest = export
    opt_out = tmp_path / "opt_out.txt"
    opt_out.write_text("https://github.com/stdlib/json\n")
    kept, _, _ = _walk(root, tmp_path / "out", "--origins", "^https://github\\.com/", "--opt-out", str(opt_out))
    urls = {r["origin_url"] for r in kept.to_pylist()}
    assert urls == {
        "https://github.com/stdlib/email",
        "https://github.com/forker/email",
        "https://github.com/stdlib/http",
    }
    assert _counts(tmp_path / "out")["origins_opted_out"] == 1.0  # counted for the report, apart from the rest


def _counts(out: Path) -> dict[str, float]:
    stats = read_all(table_dir(out / "graph", "stats"), STATS_SCHEMA).to_pylist()
    return {r["metric"]: r["value"] for r in stats if r["metric"].startswith(("origins_", "directories_"))}


def test_the_walk_counts_what_it_could_not_follow(export, tmp_path):
    root, _ = export
    _walk(root, tmp_path / "whole")
    assert _counts(tmp_path / "whole") == {"origins_opted_out": 0.0, "origins_walked": 5.0,
                                           "origins_without_branch": 0.0, "origins_without_revision": 0.0,
                                           "directories_missing": 0.0}  # fmt: skip
    copy = tmp_path / "export"
    shutil.copytree(root / "orc", copy / "orc")
    for orc_file in (copy / "orc" / "revision").glob("*.orc"):  # no revision can be read
        orc_file.write_bytes(b"not an ORC file")
    _, _, errors = _walk(copy, tmp_path / "out")
    assert errors.num_rows == len(list((copy / "orc" / "revision").glob("*.orc")))
    assert _counts(tmp_path / "out")["origins_without_revision"] == 5.0


def test_a_corrupt_orc_file_is_an_error_row_and_the_rest_is_walked(export, tmp_path):
    root, _ = export
    copy = tmp_path / "export"
    shutil.copytree(root / "orc", copy / "orc")
    broken = sorted((copy / "orc" / "content").glob("*.orc"))[0]
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 2])  # truncated
    kept, removed, errors = _walk(copy, tmp_path / "out")
    assert errors.to_pylist()[0]["path"] == str(broken) and errors.num_rows == 1
    assert errors.to_pylist()[0]["reason"] == "unreadable_input"
    missing = [r for r in removed.to_pylist() if r["reason"] == "content_missing"]
    assert kept.num_rows > 0 and missing, "the other content file's rows are still joined"


def test_graph_then_ingest_keeps_what_ingest_of_the_repositories_keeps(export, tmp_path):
    root, manifest = export
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"out: {tmp_path / 'out'}\nstages:\n  graph: {{export: '{root}'}}\n  ingest: {{content: '{root}'}}\n"
    )
    assert main(["run", str(pipeline), "--runner", "local", "--no-progress"]) == 0
    from_graph = read_all(tmp_path / "out" / "ingest", FILE_SCHEMA).to_pylist()
    # the repositories at the commits the walk reached (a later commit of json and http was never fully visited)
    clones, names = [], {}
    for origin in (o for o in manifest["origins"] if o.get("commit")):
        clone = tmp_path / "clones" / repo_name(origin["url"]).replace("/", "_")
        subprocess.run(["git", "clone", "-q", str(root / origin["repo"]), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", origin["commit"]], check=True)
        clones.append(str(clone))
        names[clone.name] = repo_name(origin["url"])
    argv = ["ingest", "--repos", *clones, "--out", str(tmp_path / "repos"), "--runner", "local", "--no-progress"]
    assert main(argv) == 0
    from_repos = read_all(tmp_path / "repos" / "ingest", FILE_SCHEMA).to_pylist()
    # SWH has no bytes of a skipped or hidden content: graph removed those files, the repositories have them
    removed = read_all(table_dir(tmp_path / "out" / "graph", "removed"), REMOVED_SCHEMA).to_pylist()
    no_bytes = {(r["repo_name"], r["path"]) for r in removed if r["reason"] in ("skipped_content", "hidden_content")}
    graph_files = {(r["repo_name"], r["path"], r["blob_id"]) for r in from_graph}
    repo_files = {(names[r["repo_name"]], r["path"], r["blob_id"]) for r in from_repos}
    assert graph_files == {f for f in repo_files if f[:2] not in no_bytes}
    assert len(graph_files) > 50


def test_a_rerun_redoes_nothing(export, tmp_path, capsys):
    root, _ = export
    argv = ["graph", "--export", str(root), "--out", str(tmp_path / "out"), "--runner", "local", "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 0
    assert "(0 run now)" in capsys.readouterr().out
    assert not list((tmp_path / "out").glob("**/graph_walk")), "the walk's work files go once the stage is done"


def test_the_walk_s_phases_share_one_progress_bar(export, tmp_path, capsys):
    """Its 14 phases (a table read each, the rounds by depth, the shards) redraw one line: on a terminal, one
    bar for the stage; `--progress` draws it where stderr is not one (as here)."""
    root, _ = export
    argv = ["graph", "--export", str(root), "--out", str(tmp_path / "out"), "--runner", "local", "--progress"]
    assert main(argv) == 0
    shown = capsys.readouterr().err
    assert shown.count("\n") == 1 and shown.count("\r") > 14, shown
    assert "graph: 100%" in shown.rsplit("\r", 1)[-1]  # the shards, last

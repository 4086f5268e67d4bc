"""Commits from git history (sources/git_history.py): which commits are records, StarCoder's filters one by one
(filters/github/commits.yaml, REFERENCE (k)), the rendered format, and that authors never reach the text."""

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import GIT_ENV, git, read_all, table_dir

from stackcurate.cli import main
from stackcurate.core.paths import filters_dir
from stackcurate.sources import git_history

SUBJECT = "Square the values of five more steps"
CODE = "".join(f"def step_{i}(value):\n    return value * {i} + {i % 7}\n\n" for i in range(40))  # 120 lines


def commit(repo: Path, files: dict[str, str | bytes | None], subject: str) -> str:
    """One commit writing (or, for None, deleting) `files`."""
    for rel, data in files.items():
        path = repo / rel
        if data is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    git(repo, "add", "-A")
    subprocess.run(["git", "-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty-message", "-m", subject],
                   cwd=repo, check=True, env={**os.environ, **GIT_ENV, **AUTHOR})  # fmt: skip
    return git(repo, "rev-parse", "HEAD")


AUTHOR = {"GIT_AUTHOR_NAME": "Quentin Zyxwright", "GIT_AUTHOR_EMAIL": "qzyxwright@example.org",
          "GIT_COMMITTER_NAME": "Rita Zyxcommitter", "GIT_COMMITTER_EMAIL": "rzyx@example.org"}  # fmt: skip


def edited(text: str, first: int, count: int) -> str:
    lines = text.split("\n")
    for i in range(first, first + count):
        lines[i] = lines[i].replace("value *", "value **")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("hist") / "acme" / "tool"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    ids = {}
    ids["start"] = commit(repo, {"src/a.py": CODE, "src/b.py": CODE, "notes.txt": "notes\n" * 30}, "Initial import")
    ids["kept"] = commit(repo, {"src/a.py": edited(CODE, 10, 4)}, "Square the value in the middle steps")
    ids["two_files"] = commit(repo, {"src/a.py": edited(CODE, 20, 4), "src/b.py": edited(CODE, 1, 4)},
                              "Square the values in two files")  # fmt: skip
    ids["boilerplate"] = commit(repo, {"src/e.py": CODE}, "Update")
    ids["version"] = commit(repo, {"src/f.py": CODE}, "v2.10.1")
    ids["long_words"] = commit(repo, {"src/g.py": CODE}, "Refactorisationofthemultiplicationinthepackage steps")
    ids["not_code"] = commit(repo, {"notes.txt": "notes\n" * 25 + "more\n" * 5}, "Rewrite the last notes lines")
    ids["old_large"] = commit(repo, {"big.py": "x = 1\n" * 20_000}, "Add a big generated table")
    ids["old_too_large"] = commit(repo, {"big.py": "x = 2\n" * 20_000}, "Change every value of the table")
    ids["deleted"] = commit(repo, {"src/c.py": CODE}, "Add a third module to the package")
    ids["empty_after"] = commit(repo, {"src/c.py": None}, "Remove the third module again")
    ids["binary"] = commit(repo, {"logo.png": b"\x89PNG\r\n\x1a\n\0\0" * 50}, "Add the project logo image")
    git(repo, "checkout", "-q", "-b", "side")
    ids["side"] = commit(repo, {"src/d.py": CODE}, "Add a fourth module on a branch")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch side", "side")
    ids["newest"] = commit(repo, {"src/a.py": edited(edited(CODE, 20, 4), 25, 5)}, SUBJECT)
    return repo, ids


def ingest(tmp_path: Path, repo: Path, *flags: str) -> tuple[list[dict], list[dict]]:
    out = tmp_path / "out"
    assert main(["ingest", "--out", str(out), "--history", str(repo), "--runner", "local", "--no-progress",
                 *flags]) == 0  # fmt: skip
    return read_all(out / "ingest").to_pylist(), read_all(table_dir(out / "ingest", "removed")).to_pylist()


def test_single_file_commits_are_records_and_each_filter_names_its_rule(history, tmp_path):
    repo, ids = history
    kept, removed = ingest(tmp_path, repo)
    by_commit = {r["revision_id"]: r.get("reason") for r in kept + removed}
    assert ids["two_files"] not in by_commit and ids["binary"] not in by_commit  # never records
    assert ids["start"] not in by_commit  # three files
    assert {name: by_commit.get(ids[name]) for name in ("boilerplate", "version", "long_words", "not_code",
                                                        "old_too_large", "empty_after")} == {
        "boilerplate": "boilerplate_subject", "version": "version_subject", "long_words": "long_words_subject",
        "not_code": "not_code", "old_too_large": "old_too_large", "empty_after": "empty_after",
    }  # fmt: skip
    assert by_commit[ids["kept"]] == "path_seen"  # the newest commit of src/a.py is the one kept
    assert by_commit[ids["newest"]] is None and by_commit[ids["side"]] is None  # a merged branch's own commit
    record = next(r for r in kept if r["revision_id"] == ids["newest"])
    found = (record["kind"], record["path"], record["repo_name"], record["language"])
    assert found == ("commit", "/src/a.py", "tool", "Python")
    assert record["lines_changed"] == 4  # two return lines of the five edited, each deleted and added


def test_the_format_token_for_token(history, tmp_path):
    repo, ids = history
    rules = yaml.safe_load((filters_dir() / "github" / "commits.yaml").read_text())
    rules["format"]["whole_file_rate"] = 1.0
    whole = tmp_path / "whole.yaml"
    whole.write_text(yaml.safe_dump(rules))
    kept, _ = ingest(tmp_path / "a", repo, "--history-rules", str(whole))
    record = next(r for r in kept if r["revision_id"] == ids["newest"])
    before = edited(CODE, 20, 4)  # as the commit that changed two files left it
    after = edited(before, 25, 5)
    assert record["content"] == f"<commit_before>{before}<commit_msg>{SUBJECT}<commit_after>{after}"
    rules["format"] |= {"whole_file_rate": 0.0, "context_lines": 0}
    whole.write_text(yaml.safe_dump(rules))
    kept, _ = ingest(tmp_path / "b", repo, "--history-rules", str(whole))
    record = next(r for r in kept if r["revision_id"] == ids["newest"])
    # the changed lines are 25 and 28 (every third line returns): from the first to the last, no more
    old_lines, new_lines = before.splitlines(keepends=True)[25:29], after.splitlines(keepends=True)[25:29]
    assert record["content"] == (
        f"<commit_before>{''.join(old_lines)}<commit_msg>{SUBJECT}<commit_after>{''.join(new_lines)}"
    )


@pytest.mark.parametrize(
    ("subject", "lines", "reason"),
    [
        ("Fix the parser loop", 5, None),
        ("auto commit by the release script", 5, "boilerplate_subject"),
        ("Update CONTRIBUTING guide", 5, "boilerplate_subject"),
        ("<?xml version='1.0'?>", 5, "boilerplate_subject"),
        ("readme", 5, "boilerplate_subject"),
        ("Update README", 5, "boilerplate_subject"),
        ("1.4.0", 5, "version_subject"),
        ("v1.4.0 release notes", 5, "version_subject"),
        ("Internationalizationofeverythinginthepackage here", 5, "long_words_subject"),
        (" typo", 5, "one_word_subject"),
        ("", 5, "empty_subject"),
    ],
)
def test_subject_rules(subject, lines, reason):
    change = git_history.Change("c" * 40, "p" * 40, 0, subject, "a.py", lines, 0)
    rules = git_history.load_rules()

    class Always:  # every sampling draw keeps: the rules alone decide
        def random(self) -> float:
            return 0.0

    verdict = git_history.judge(change, "old\n", "new\n", "Python", "programming", rules, Always())  # type: ignore[arg-type]
    assert (verdict or (None,))[0] == reason


def test_sampling_keeps_the_published_shares():
    rules = git_history.load_rules()
    counts: dict[str | None, int] = {}
    for i in range(4000):
        change = git_history.Change(f"{i:040d}", None, 0, "Tidy", "a.py", 1, 0)  # 1 line, 1 word: two samplings
        rng = git_history._chance(0, change.commit, change.path)
        verdict = git_history.judge(change, "", "x\n", "Python", "programming", rules, rng)
        counts[verdict[0] if verdict else None] = counts.get(verdict[0] if verdict else None, 0) + 1
    assert 0.09 < (4000 - counts["sampled_small_change"]) / 4000 < 0.11  # 10% of changes of <= 2 lines
    assert 0.4 < counts[None] / (4000 - counts["sampled_small_change"]) < 0.6  # then 50% of short subjects


def test_no_author_name_or_e_mail_in_any_record(history, tmp_path):
    repo, _ = history
    kept, removed = ingest(tmp_path, repo)
    text = repr(kept + removed)
    assert git(repo, "log", "-1", "--format=%an %ae %cn %ce") == " ".join(AUTHOR.values())  # the history has them
    for value in (*AUTHOR.values(), "Zyx", "zyx"):
        assert value not in text


def test_a_rerun_gives_the_same_records(history, tmp_path):
    repo, _ = history
    first, _ = ingest(tmp_path / "a", repo)
    second, _ = ingest(tmp_path / "b", repo)
    assert [(r["doc_id"], r["content"]) for r in first] == [(r["doc_id"], r["content"]) for r in second]


def test_a_folder_that_is_not_a_repository_is_one_line(tmp_path, capsys):
    assert main(["ingest", "--out", str(tmp_path / "o"), "--history", str(tmp_path), "--runner", "local"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("is not a git repository (no .git, no HEAD) nor a vault git-bare bundle (.git.tar)")
    )


def test_commits_carry_their_repository_s_licenses_and_opted_out_repositories_give_one_row(tmp_path):
    from helpers import MIT

    repo = tmp_path / "acme" / "licensed"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    commit(repo, {"src/a.py": CODE, "LICENSE": MIT}, "Initial import")
    commit(repo, {"src/a.py": edited(CODE, 10, 4)}, "Square the value in the middle steps")
    kept, _ = ingest(tmp_path, repo)
    assert {tuple(r["detected_licenses"]) for r in kept} == {("MIT",)}
    assert main(["license", "--out", str(tmp_path / "out"), "--runner", "local", "--no-progress"]) == 0
    assert {r["license_type"] for r in read_all(tmp_path / "out" / "license").to_pylist()} == {"permissive"}
    for line in ("acme/licensed", "ACME"):
        (tmp_path / "optout.txt").write_text(line + "\n")
        kept, removed = ingest(tmp_path / line, repo, "--history-opt-out", str(tmp_path / "optout.txt"))
        assert kept == [] and [(r["path"], r["reason"]) for r in removed] == [("/", "opt_out")]


def test_odd_paths_and_a_missing_blob_are_read_and_reported_one_commit_at_a_time(tmp_path):
    repo = tmp_path / "acme" / "odd"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    odd = "src/a file\nwith a newline missing.py"  # spaces, a newline, and the word cat-file answers with
    commit(repo, {odd: CODE, "src/b.py": CODE, "src/gone.py": CODE}, "Initial import")
    kept_id = commit(repo, {odd: edited(CODE, 10, 4)}, "Square the value in the middle steps")
    lost_id = commit(repo, {"src/gone.py": edited(CODE, 3, 4)}, "Square the first values of the gone module")
    blob = git(repo, "rev-parse", f"{lost_id}:src/gone.py")
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # a repository that lost one object
    out = tmp_path / "out"
    assert main(["ingest", "--out", str(out), "--history", str(repo), "--runner", "local", "--no-progress"]) == 0
    kept = read_all(out / "ingest").to_pylist()
    errors = read_all(table_dir(out / "ingest", "errors")).to_pylist()
    assert [(r["revision_id"], r["path"]) for r in kept] == [(kept_id, "/" + odd)]
    assert [(r["path"], r["reason"], r["blob_id"]) for r in errors] == [("/src/gone.py", "missing_blob", blob)]
    assert lost_id in errors[0]["detail"]


def test_a_vault_git_bare_bundle_gives_the_commits_of_its_repository(history, tmp_path):
    import tarfile

    repo, ids = history
    head = ids["newest"]
    bare = tmp_path / "bare" / f"swh:1:rev:{head}.git"
    git(tmp_path, "clone", "-q", "--bare", "--no-local", str(repo), str(bare))
    bundle = tmp_path / f"swh_1_rev_{head}.git.tar"
    with tarfile.open(bundle, "w") as tar:
        tar.add(bare, arcname=bare.name)
    from_repo, _ = ingest(tmp_path / "repo", repo)
    from_bundle, removed = ingest(tmp_path / "bundle", bundle)
    assert [(r["revision_id"], r["content"]) for r in from_bundle] == [
        (r["revision_id"], r["content"]) for r in from_repo
    ]
    assert {r["repo_name"] for r in from_bundle + removed} == {f"swh:1:rev:{head}"}
    (tmp_path / "broken.git.tar").write_bytes(b"not a tar")
    out = tmp_path / "broken"
    assert main(["ingest", "--out", str(out), "--history", str(tmp_path / "broken.git.tar"), "--runner", "local",
                 "--no-progress"]) == 0  # fmt: skip
    assert [r["reason"] for r in read_all(table_dir(out / "ingest", "errors")).to_pylist()] == ["corrupt_bundle"]

"""GitHub pull requests from GH Archive with their code from git (sources/gharchive/pulls.py, code.py): StarCoder2's
filters one by one (filters/github/pull_requests.yaml, REFERENCE (k)), the base files and diffs, the rendered
format token for token, vault bundles, sampling and determinism."""

import difflib
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml
from helpers import GPL3_NOTICE, MIT, git, needs_git, read_all, table_dir
from test_gharchive import LONG, comment, event, issue, write_hours

from stackcurate.cli import main
from stackcurate.core import paths
from stackcurate.sources.gharchive import pulls, threads

pytestmark = needs_git
RULES = pulls.load_rules()
BOTS = threads.load_rules()

PARSE = "".join(f"def step_{i}(value):\n    return value + {i}\n\n" for i in range(14))  # 42 lines
README = "# Tool\n\nParses tables.\n"


def repository(root: Path) -> tuple[str, str]:
    """acme/tool with a base commit and a head that modifies two files, adds one and deletes one."""
    repo = root / "code" / "acme" / "tool"
    repo.mkdir(parents=True)
    (repo / "parse.py").write_text(PARSE)
    (repo / "README.md").write_text(README)
    (repo / "old.txt").write_text("gone soon\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    lines = PARSE.split("\n")
    lines[4] = "    return value * 1  # was + 1"
    lines[37] = "    return value - 12"
    (repo / "parse.py").write_text("\n".join(lines))
    (repo / "README.md").write_text(README + "\nNow with nested tables.\n")
    (repo / "new.py").write_text("print('added')\n")
    (repo / "old.txt").unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "head")
    return base, git(repo, "rev-parse", "HEAD")


def pr_event(i: int, action: str, login: str, base: str, head: str, hour: int, *, number: int = 5,
             title: str = "Make step one multiply", body: str | None = LONG, merged: bool = False,
             repo: str = "acme/tool") -> dict:  # fmt: skip
    pr = {"number": number, "title": title, "body": body, "user": {"login": "fay", "type": "User"},
          "state": "closed" if action == "closed" else "open", "merged": merged,
          "base": {"ref": "main", "sha": base}, "head": {"ref": "mul", "sha": head}}  # fmt: skip
    return event(i, "PullRequestEvent", login, {"action": action, "number": number, "pull_request": pr}, hour,
                 repo=repo)  # fmt: skip


def review(i: int, login: str, state: str, body: str | None, base: str, head: str, hour: int, number: int = 5) -> dict:
    pr = {"number": number, "title": "Make step one multiply", "body": LONG, "user": {"login": "fay", "type": "User"},
          "base": {"sha": base}, "head": {"sha": head}}  # fmt: skip
    payload = {
        "action": "created",
        "pull_request": pr,
        "review": {"id": 700 + i, "user": {"login": login, "type": "User"}, "body": body, "state": state},
    }
    return event(i, "PullRequestReviewEvent", login, payload, hour)


def review_comment(i: int, login: str, body: str, base: str, head: str, hour: int) -> dict:
    pr = {"number": 5, "title": "Make step one multiply", "body": LONG, "user": {"login": "fay", "type": "User"},
          "base": {"sha": base}, "head": {"sha": head}}  # fmt: skip
    hunk = "@@ -3,6 +3,6 @@ def step_0(value):\n \n def step_1(value):\n-    return value + 1\n+    return value * 1"
    payload = {"action": "created", "pull_request": pr,
               "comment": {"id": 800 + i, "user": {"login": login, "type": "User"}, "body": body,
                           "path": "parse.py", "diff_hunk": hunk, "original_position": 3,
                           "pull_request_review_id": 701, "in_reply_to_id": None}}  # fmt: skip
    return event(i, "PullRequestReviewCommentEvent", login, payload, hour)


def rules_file(tmp_path: Path, **changes: dict) -> Path:
    """The shipped rules with some values changed (`render={"whole_base_rate": 1.0}`)."""
    rules = yaml.safe_load(Path(paths.rules_file(pulls.RULES, "", pulls.RULES)[0]).read_text())
    for section, values in changes.items():
        rules[section].update(values)
    path = tmp_path / "prs.yaml"
    path.write_text(yaml.safe_dump(rules))
    return path


def run(tmp_path: Path, *flags: str) -> tuple[list[dict], list[dict]]:
    out = tmp_path / "out"
    argv = ["ingest", "--out", str(out), "--gharchive", str(tmp_path / "gha" / "*.json.gz"), "--runner", "local",
            "--no-progress", "--gharchive-code", str(tmp_path / "code"), *flags]  # fmt: skip
    assert main(argv) == 0
    stage = out / "ingest"
    return read_all(stage).to_pylist(), read_all(table_dir(stage, "removed")).to_pylist()


def reviewed(base: str, head: str) -> dict[int, list]:
    """Opened by fay, a comment and an approving review with a review comment by gus, merged by hal."""
    on_issue = issue(5, "fay", "Make step one multiply", LONG, pr=True)
    return {
        1: [pr_event(1, "opened", "fay", base, head, 1)],
        2: [comment(2, 5, on_issue, "gus", "Does this change the results for @fay's tables?", 2),
            review(3, "gus", "approved", "Looks right to me, thanks.", base, head, 2),
            review_comment(4, "gus", "Multiplying by one: is that intended here?", base, head, 2)],
        3: [pr_event(5, "closed", "hal", base, head, 3, merged=True)],
    }  # fmt: skip


def test_a_reviewed_and_merged_pull_request_is_rendered_token_for_token(tmp_path):
    base, head = repository(tmp_path)
    write_hours(tmp_path / "gha", reviewed(base, head))
    rules = rules_file(tmp_path, render={"whole_base_rate": 1.0, "hunk_context": [3, 4]})
    kept, removed = run(tmp_path, "--gharchive-pr-rules", str(rules))
    assert removed == []
    (record,) = kept
    assert (record["kind"], record["path"], record["revision_id"]) == ("pull_request", "/pull/5", base)
    assert record["origin"] == "https://github.com/acme/tool/pull/5" and record["pr_files"] == 2
    description = LONG.strip("\n")
    base_lines = PARSE.split("\n")
    assert (
        record["content"]
        == (
            f"<pr>Title: Make step one multiply\nusername_0: {description}<pr_status>opened<repo_name>acme/tool"
            # the modified files whole (the rules' rate 1), in git's order; new.py (added), old.txt (deleted) are not
            f"<pr_base><pr_file>README.md<pr_base_code>{README}<pr_file>parse.py<pr_base_code>"
            f"{PARSE}"
            "<pr_diff><pr_file>README.md<pr_diff_hunk>@@ -1,3 +1,5 @@\n # Tool\n \n Parses tables.\n+\n"
            "+Now with nested tables."
            "<pr_file>parse.py<pr_diff_hunk>@@ -2,7 +2,7 @@\n"
            + "\n".join(
                [" " + x for x in base_lines[1:4]]
                + ["-    return value + 1", "+    return value * 1  # was + 1"]
                + [" " + x for x in base_lines[5:8]]
            )  # fmt: skip
            + "<pr_diff_hunk>@@ -35,7 +35,7 @@\n"
            + "\n".join(
                [" " + x for x in base_lines[34:37]]
                + ["-    return value + 12", "+    return value - 12"]
                + [" " + x for x in base_lines[38:41]]
            )  # fmt: skip
            + "<pr_comment>username_1: Does this change the results for @username_0's tables?<pr_event_id>502"
            "<pr_status>created"
            "<pr_review>username_1: Looks right to me, thanks.<pr_event_id>703<pr_review_state>approved"
            "<pr_review_comment><pr_event_id>804<pr_in_reply_to_review_id>701<pr_file>parse.py"
            "<pr_diff_hunk_comment_line>3<pr_diff_hunk>@@ -3,6 +3,6 @@ def step_0(value):\n \n def step_1(value):\n"
            "-    return value + 1\n+    return value * 1"
            "<pr_comment>username_1: Multiplying by one: is that intended here?"
            "<pr>username_2<pr_status>closed<pr_is_merged>True"
        )
    )


def test_the_diff_hunks_are_git_s_unified_diff():
    base = [f"line {i}" for i in range(60)]
    head = base[:10] + ["new a"] + base[11:13] + ["inserted"] + base[13:50] + base[52:]
    for context in (3, 5, 9):
        expected = [x.rstrip("\n") for x in difflib.unified_diff(base, head, n=context, lineterm="")][2:]
        rendered = pulls.hunks(base, head, context).split("<pr_diff_hunk>")[1:]
        assert "\n".join(rendered).split("\n") == expected


def test_the_base_file_s_changed_lines_with_some_around_when_not_whole(tmp_path):
    base, head = repository(tmp_path)
    write_hours(tmp_path / "gha", reviewed(base, head))
    rules = rules_file(tmp_path, render={"whole_base_rate": 0.0, "base_context": 1, "hunk_context": [3, 4]})
    (record,) = run(tmp_path, "--gharchive-pr-rules", str(rules))[0]
    code = record["content"].split("<pr_file>parse.py<pr_base_code>")[1].split("<pr_diff>")[0]
    assert code.split("\n") == PARSE.split("\n")[4:38]  # lines 5 to 38: the first and last changed lines
    # the diff is numbered from the window's first line, as StarCoder2's
    assert "<pr_file>parse.py<pr_diff_hunk>@@ -1,4 +1,4 @@\n-    return value + 1" in record["content"]


# The filters, one by one


def _pr(**changes) -> pulls.PullRequest:
    pr = pulls.PullRequest("acme/tool", 5, title="Make step one multiply", opener="fay", opener_type="User",
                           description=LONG, merged=True, bases=["a" * 40], heads=["b" * 40],
                           steps=[pulls.Step("opened", "fay", "User", "b" * 40),
                                  pulls.Step("comment", "gus", "User", None, text="Works for me")])  # fmt: skip
    for key, value in changes.items():
        setattr(pr, key, value)
    return pr


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, None),
        ({"opener": "renovate[bot]"}, "pr_bot_opener"),
        ({"opener": "acme-ci"}, "pr_bot_opener"),
        ({"title": "Fix typo"}, "pr_title_short"),  # 8 characters < 10
        ({"title": "Fix typos!"}, None),  # 10
        ({"title": "Bump dependencies of the docs"}, "pr_title_excluded"),
        ({"title": "Update the dependency on attrs"}, "pr_title_excluded"),
        ({"title": "Prepare the 2.0 release notes"}, "pr_title_excluded"),
        ({"title": "Do not depend on six anymore"}, "pr_title_excluded"),
        ({"description": None}, "pr_no_description"),
        ({"description": "  \n"}, "pr_no_description"),
        ({"steps": [pulls.Step("opened", "fay", "User", "b" * 40),
                    pulls.Step("comment", "codecov-io", None, None, text="Coverage 90%")]}, "pr_no_review"),
        ({"merged": False}, "pr_not_approved_or_merged"),
        ({"merged": False, "approved": True}, None),
        ({"bases": ["a" * 40, "c" * 40]}, None),  # merged: the base moves with the merge
        ({"merged": False, "approved": True, "bases": ["a" * 40, "c" * 40]}, "pr_base_changed"),
        ({"bases": ["a" * 40, "c" * 40, "d" * 40]}, "pr_base_changed"),
    ],
)  # fmt: skip
def test_the_pull_request_filters(changes, reason):
    verdict = pulls.judge(_pr(**changes), RULES, BOTS, None, 0)
    assert (verdict[0] if verdict else None) == reason


def test_per_repository_sampling_is_starcoder2_s_rate_and_seeded():
    sampling = RULES["sampling"]
    assert pulls.keep_rate(1, sampling) == pytest.approx(0.8)
    assert pulls.keep_rate(1000, sampling) == pytest.approx(0.1007)
    assert pulls.keep_rate(2000, sampling) == pytest.approx(0.05)
    kept = [pulls.judge(_pr(number=n), RULES, BOTS, 3000, 0) is None for n in range(3000)]
    assert 60 <= sum(kept) <= 140  # about 100 of a repository of 3,000
    assert kept == [pulls.judge(_pr(number=n), RULES, BOTS, 3000, 0) is None for n in range(3000)]
    assert kept != [pulls.judge(_pr(number=n), RULES, BOTS, 3000, 1) is None for n in range(3000)]


@pytest.mark.parametrize(
    ("text", "language", "problem"),
    [
        ("def f():\n    return 1\n", "Python", None),
        ("%%%% ---- ;;;; ==== ####\n" * 5, "Python", "alphanumeric"),
        ('blob = "' + "\\x00\\xff" * 50 + '"\n', "Python", "escapes"),
        ("x = 1\n" * 100_000, "Python", "lines"),
        ("y" * 1200 + "\n", "Python", "long lines"),
        ("word " * 300 + "\n", "Markdown", None),  # documentation: long lines are prose
        ("a,b\n1,2\n", "CSV", None),
        ('<svg><path d="M0 0"/></svg>\n', "SVG", "SVG (data)"),
    ],
)
def test_base_file_filters(text, language, problem):
    found = pulls._file_problem("f", text, language, RULES["files"])
    assert (found is None) if problem is None else (problem in found)


def test_comment_texts_are_cleaned_cut_and_dropped_when_short():
    text = pulls._Text(RULES)
    assert text("ok") is None  # under 20 characters
    assert text("ok", keep_short=True) == "ok"
    assert text("Looks good <!-- hidden template text --> to me, merging.") == "Looks good  to me, merging."
    assert text("x" * 1500) == "x" * 1000
    long = "\n".join(f"line {i}" for i in range(100))
    cut = text(long).split("\n")
    assert cut[:60] == long.split("\n")[:60] and cut[60] == "[TRUNCATED]" and cut[61:] == long.split("\n")[-20:]
    assert text("Thanks!\n\nOn Tue, Mar 7, 2023 at 9:01 AM Someone <s@example.org> wrote:\n> hi there") is None
    step = pulls.Step("review_comment", "gus", None, None, hunk="@@ -50,2 +50,3 @@\n" + "+x\n" * 6000)
    assert pulls._review_hunk(step, 0, RULES["text"]["max_review_hunk_chars"]) == "<pr_diff_hunk>[OMITTED]"


def test_pull_requests_without_code_files_or_repository_are_removed_with_their_reason(tmp_path):
    base, head = repository(tmp_path)
    repo = tmp_path / "code" / "acme" / "tool"
    git(repo, "checkout", "-q", base)
    (repo / "only_added.py").write_text("print(1)\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "adds a file only")
    added_only = git(repo, "rev-parse", "HEAD")
    hours = {1: [pr_event(1, "opened", "fay", base, added_only, 1, number=6),
                 pr_event(2, "opened", "fay", base, "f" * 40, 1, number=7),
                 pr_event(3, "opened", "fay", base, head, 1, number=8, repo="acme/elsewhere")],
             2: [comment(10 + n, n, issue(n, "fay", "t", LONG, pr=True), "gus", "Thanks, merging this now.", 2)
                 for n in (6, 7)],
             3: [pr_event(20 + n, "closed", "hal", base, h, 3, number=n, merged=True)
                 for n, h in ((6, added_only), (7, "f" * 40))]}  # fmt: skip
    hours[2].append(event(30, "IssueCommentEvent", "gus", {"action": "created", "issue": issue(8, "fay", "t", LONG,
                    pr=True), "comment": {"id": 31, "body": "Thanks, merging this now.",
                    "user": {"login": "gus", "type": "User"}}}, 2, repo="acme/elsewhere"))  # fmt: skip
    hours[3].append(pr_event(40, "closed", "hal", base, head, 3, number=8, merged=True, repo="acme/elsewhere"))
    write_hours(tmp_path / "gha", hours)
    kept, removed = run(tmp_path)
    assert kept == []
    assert {(r["repo_name"], r["path"]): (r["reason"], r["detail"]) for r in removed} == {
        ("acme/tool", "/pull/6"): ("pr_no_files", "no base file modified"),
        ("acme/tool", "/pull/7"): ("pr_code_not_found", "no repository found holds its base and head revisions"),
        ("acme/elsewhere", "/pull/8"): ("pr_code_not_found",
                                        "no repository of --gharchive-code holds its base and head revisions"),
    }  # fmt: skip


def test_revisions_are_found_in_vault_git_bare_bundles(tmp_path):
    base, head = repository(tmp_path)
    repo = tmp_path / "code" / "acme" / "tool"
    bare = tmp_path / "bare" / f"swh:1:rev:{head}.git"
    git(tmp_path, "clone", "-q", "--bare", "--no-local", str(repo), str(bare))
    shutil.rmtree(repo)
    repo.mkdir()
    with tarfile.open(repo / f"swh_1_rev_{head}.git.tar", "w") as tar:
        tar.add(bare, arcname=bare.name)
    write_hours(tmp_path / "gha", reviewed(base, head))
    (record,) = run(tmp_path)[0]
    assert "<pr_file>parse.py<pr_diff_hunk>" in record["content"]
    assert not list((tmp_path / "out").rglob("pr-bundle-*"))  # what was extracted is gone


def test_the_same_pull_requests_for_any_partitions_and_order_of_files(tmp_path):
    base, head = repository(tmp_path)
    hours = reviewed(base, head)
    for n in range(6, 14):  # more pull requests of the repository: sampled, and rendered with their own draws
        on_issue = issue(n, "fay", f"Make step {n} better", LONG, pr=True)
        hours[1].append(pr_event(10 * n, "opened", "fay", base, head, 1, number=n, title=f"Make step {n} better"))
        hours[2].append(comment(10 * n + 1, n, on_issue, "gus", "Checked it on my tables, works.", 2))
        hours[3].append(pr_event(10 * n + 2, "closed", "hal", base, head, 3, number=n, merged=True))
    write_hours(tmp_path / "a" / "gha", hours)
    write_hours(tmp_path / "b" / "gha", dict(reversed(list(hours.items()))))
    (tmp_path / "a" / "code").symlink_to(tmp_path / "code")
    (tmp_path / "b" / "code").symlink_to(tmp_path / "code")
    one = run(tmp_path / "a")
    many = run(tmp_path / "b", "--gharchive-partition-mb", "0.0001")
    assert len(list((tmp_path / "b" / "out" / "_state" / "ingest" / "shards").iterdir())) > 1
    for a, b in zip(one, many, strict=True):
        assert sorted((r["path"], r["content"], r.get("reason")) for r in a) == sorted(
            (r["path"], r["content"], r.get("reason")) for r in b)  # fmt: skip
    reasons = [r["reason"] for r in one[1]]
    assert len(one[0]) + len(one[1]) == 9 and set(reasons) <= {"sampled_repository"}
    assert 2 <= len(one[0]) <= 9  # each kept with p = 0.8007 - 0.0007 * 9


def test_a_pull_request_takes_its_repository_s_license_and_the_license_stage_classifies_it(tmp_path):
    base, head = repository(tmp_path)
    repo = tmp_path / "code" / "acme" / "tool"

    def licensed(text: str) -> tuple[str, str]:
        """A base with this license file, and a head that changes it as `head` changes `base`."""
        git(repo, "checkout", "-q", base)
        (repo / "LICENSE").write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "license")
        git(repo, "checkout", head, "--", "parse.py", "README.md", "new.py")
        git(repo, "rm", "-q", "old.txt")
        git(repo, "commit", "-q", "-m", "change")
        return git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")

    (mit_base, mit_head), (gpl_base, gpl_head) = licensed(MIT), licensed(GPL3_NOTICE)
    hours: dict[int, list] = {}
    for number, (b, h) in {5: (base, head), 6: (mit_base, mit_head), 7: (gpl_base, gpl_head)}.items():
        for hour, events in reviewed(b, h).items():
            hours.setdefault(hour, []).extend(_renumbered(e, number) for e in events)
    write_hours(tmp_path / "gha", hours)
    kept, _ = run(tmp_path, "--gharchive-seed", "3")
    assert {r["path"]: r["detected_licenses"] for r in kept} == {"/pull/5": [], "/pull/6": ["MIT"],
                                                                  "/pull/7": ["GPL-3.0-or-later"]}  # fmt: skip
    assert main(["license", "--out", str(tmp_path / "out"), "--runner", "local", "--no-progress"]) == 0
    licensed = {r["path"]: r["license_type"] for r in read_all(tmp_path / "out" / "license").to_pylist()}
    assert licensed == {"/pull/5": "no_license", "/pull/6": "permissive"}
    (removed,) = read_all(table_dir(tmp_path / "out" / "license", "removed")).to_pylist()
    assert (removed["path"], removed["reason"]) == ("/pull/7", "license_non_permissive")


def _renumbered(e: dict, number: int) -> dict:
    """An event of pull request 5 as one of pull request `number` (its own event id)."""
    import copy

    e = copy.deepcopy(e)
    e["id"] = str(int(e["id"]) + 100 * number)
    payload = e["payload"]
    for key in ("pull_request", "issue"):
        if key in payload:
            payload[key]["number"] = number
    payload.pop("number", None)
    return e


# From a Software Heritage graph export (--gharchive-graph): the same code as git gives


@pytest.fixture(scope="module")
def graph_export(tmp_path_factory) -> tuple[Path, str, str]:
    """The miniature export (stages/graph/mini.py) and its fork case: a clone of stdlib/email plus one commit
    changing one file, as a pull request's base and head."""
    from stackcurate.stages.graph import mini

    root = tmp_path_factory.mktemp("graph_export")
    manifest = mini.build(root, mini.default_sources())
    commits = {o["url"]: o["commit"] for o in manifest["origins"]}
    return root, commits["https://github.com/stdlib/email"], commits["https://github.com/forker/email"]


def _on(repo: str, hours: dict[int, list]) -> dict[int, list]:
    for events in hours.values():
        for e in events:
            e["repo"]["name"] = repo
    return hours


def test_a_pull_request_s_code_from_a_graph_export_is_what_git_gives(tmp_path, graph_export):
    root, base, head = graph_export
    write_hours(tmp_path / "gha", _on("stdlib/email", reviewed(base, head)))
    (tmp_path / "code" / "stdlib").mkdir(parents=True)
    (tmp_path / "code" / "stdlib" / "email").symlink_to(root / "repos" / "forker-email")  # holds both commits
    from_git, _ = run(tmp_path)
    argv = ["ingest", "--out", str(tmp_path / "graph"), "--gharchive", str(tmp_path / "gha" / "*.json.gz"),
            "--gharchive-graph", str(root), "--content", str(root), "--runner", "local", "--no-progress",
            "--gharchive-partition-mb", "0.0001"]  # fmt: skip
    assert main(argv) == 0
    from_graph = read_all(tmp_path / "graph" / "ingest").to_pylist()
    assert [r["content"] for r in from_graph] == [r["content"] for r in from_git] and len(from_graph) == 1
    assert "<pr_diff><pr_file>email/__init__.py<pr_diff_hunk>" in from_graph[0]["content"]
    assert not (tmp_path / "graph" / "_state" / "ingest_gharchive").exists()  # the walk goes with the split


def test_a_pull_request_whose_revisions_the_export_lacks_is_removed_with_that_reason(tmp_path, graph_export):
    root, base, _ = graph_export
    write_hours(tmp_path / "gha", _on("stdlib/email", reviewed(base, "f" * 40)))
    argv = [
        "ingest",
        "--out",
        str(tmp_path / "out"),
        "--gharchive",
        str(tmp_path / "gha" / "*.json.gz"),
        "--gharchive-graph",
        str(root),
        "--content",
        str(root),
        "--runner",
        "local",
        "--no-progress",
    ]
    assert main(argv) == 0
    (removed,) = read_all(table_dir(tmp_path / "out" / "ingest", "removed")).to_pylist()
    assert (removed["reason"], removed["detail"]) == (
        "pr_code_not_found",
        "no repository of --gharchive-code nor the graph export holds its base and head revisions",
    )


def test_a_run_killed_in_the_split_or_the_shards_resumes_to_the_same_records(tmp_path, monkeypatch):
    import stackcurate.sources.gharchive as gharchive

    base, head = repository(tmp_path)
    hours = reviewed(base, head)
    for n in range(6, 10):  # more pull requests, over more hourly files and partitions
        hours.setdefault(10 + n, []).append(pr_event(10 * n, "opened", "fay", base, head, 10 + n, number=n,
                                                     title=f"Make step {n} better"))  # fmt: skip
    write_hours(tmp_path / "gha", hours)
    clean = run(tmp_path, "--gharchive-partition-mb", "0.0001")
    split, calls = gharchive.split_task, []

    def dies_on_the_third_file(*args):
        calls.append(args[0])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return split(*args)

    monkeypatch.setattr(gharchive, "split_task", dies_on_the_third_file)
    flags = ["ingest", "--out", str(tmp_path / "crash"), "--gharchive", str(tmp_path / "gha" / "*.json.gz"),
             "--runner", "local", "--no-progress", "--gharchive-code", str(tmp_path / "code"),
             "--gharchive-partition-mb", "0.0001"]  # fmt: skip
    assert main(flags) == 130  # interrupted, as by Ctrl-C
    calls.clear()
    monkeypatch.setattr(gharchive, "split_task", lambda *args: calls.append(args[0]) or split(*args))
    clean_pr = pulls.clean

    def dies_on_the_second_pull_request(*args, **kwargs):
        calls.append("pr")
        if calls.count("pr") == 2:
            raise KeyboardInterrupt
        return clean_pr(*args, **kwargs)

    monkeypatch.setattr(pulls, "clean", dies_on_the_second_pull_request)
    assert main(flags) == 130
    assert calls.count("pr") == 2 and len([c for c in calls if c != "pr"]) == len(hours) - 2  # split resumed
    monkeypatch.setattr(pulls, "clean", clean_pr)
    assert main(flags) == 0
    stage = tmp_path / "crash" / "ingest"
    resumed = read_all(stage).to_pylist(), read_all(table_dir(stage, "removed")).to_pylist()
    for a, b in zip(clean, resumed, strict=True):
        assert sorted((r["path"], r["content"], r.get("reason")) for r in a) == sorted(
            (r["path"], r["content"], r.get("reason")) for r in b)  # fmt: skip

"""GitHub issue threads from GH Archive (sources/gharchive): grouping across hourly files, the published cleaning
rules one by one (filters/github/issues.yaml, REFERENCE (k)), anonymisation and the rendered format."""

import gzip
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import GIT_ENV, read_all, table_dir

from stackcurate.cli import main
from stackcurate.core import io
from stackcurate.sources.gharchive import threads

RULES = threads.load_rules()


def event(i: int, kind: str, login: str, payload: dict, hour: int, minute: int = 0, repo: str = "acme/tool") -> dict:
    """One event in GH Archive's schema."""
    actor = {"id": 1000 + i, "login": login, "display_login": login, "gravatar_id": "",
             "url": f"https://api.github.com/users/{login}",
             "avatar_url": f"https://avatars.githubusercontent.com/u/{i}"}  # fmt: skip
    return {"id": str(26_000_000_000 + i), "type": kind, "actor": actor,
            "repo": {"id": 42, "name": repo, "url": f"https://api.github.com/repos/{repo}"}, "payload": payload,
            "public": True, "created_at": f"2023-03-01T{hour:02d}:{minute:02d}:00Z"}  # fmt: skip


def issue(number: int, login: str, title: str, body: str, pr: bool = False) -> dict:
    found = {"id": 9000 + number, "number": number, "title": title, "body": body, "state": "open",
             "user": {"login": login, "id": 7, "type": "User"}, "comments": 0,
             "html_url": f"https://github.com/acme/tool/issues/{number}", "author_association": "NONE"}  # fmt: skip
    if pr:
        found["pull_request"] = {"url": "https://api.github.com/repos/acme/tool/pulls/1", "html_url": "x"}
    return found


def comment(i: int, number: int, opener: dict, login: str, body: str, hour: int, kind: str = "User") -> dict:
    return event(i, "IssueCommentEvent", login, {"action": "created", "issue": opener, "comment": {
        "id": 500 + i, "body": body, "user": {"login": login, "id": 8, "type": kind}, "created_at": "x",
        "html_url": "x", "author_association": "NONE"}}, hour)  # fmt: skip


def write_hours(folder: Path, hours: dict[int, list]) -> None:
    """One GH Archive file per hour; a line of an entry that is a str is written as it is."""
    folder.mkdir(parents=True, exist_ok=True)
    for hour, lines in hours.items():
        with gzip.open(folder / f"2023-03-01-{hour}.json.gz", "wt") as f:
            for line in lines:
                f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def ingest(tmp_path: Path, *flags: str) -> tuple[list[dict], list[dict], list[dict]]:
    out = tmp_path / "out"
    argv = ["ingest", "--out", str(out), "--gharchive", str(tmp_path / "gha" / "*.json.gz"), "--runner", "local",
            "--no-progress", *flags]  # fmt: skip
    assert main(argv) == 0
    stage = out / "ingest"
    return (read_all(stage).to_pylist(), read_all(table_dir(stage, "removed")).to_pylist(),
            read_all(table_dir(stage, "errors")).to_pylist())  # fmt: skip


LONG = "The parser fails on nested tables when the file has a BOM. Steps to reproduce below.\n" * 3


def test_a_thread_spread_over_hours_out_of_order_and_repeated_is_one_record(tmp_path):
    opened = issue(7, "alice", "Parser fails on nested tables", LONG)
    first = event(1, "IssuesEvent", "alice", {"action": "opened", "issue": opened}, 1)
    reply = comment(2, 7, opened, "bob", "I see it too on 2.1; bisected to the tokenizer rewrite.", 2)
    fix = comment(3, 7, opened, "alice", "Confirmed fixed on main, thanks!", 3)
    closed = event(4, "IssuesEvent", "alice", {"action": "closed", "issue": opened}, 3, 30)
    # the later events in the earlier file, one event twice, an event of another type
    write_hours(tmp_path / "gha", {1: [first, fix, event(5, "WatchEvent", "carol", {"action": "started"}, 1)],
                                   3: [closed, reply], 2: [reply]})  # fmt: skip
    kept, removed, errors = ingest(tmp_path)
    assert (removed, errors) == ([], [])
    (record,) = kept
    assert record["kind"] == "issue" and record["path"] == "/issues/7" and record["repo_name"] == "acme/tool"
    assert record["origin"] == "https://github.com/acme/tool/issues/7"
    assert record["content"] == (
        "<issue_start>Title: Parser fails on nested tables\nusername_0: " + LONG.strip()
        + "<issue_comment>username_1: I see it too on 2.1; bisected to the tokenizer rewrite."
        + "<issue_comment>username_0: Confirmed fixed on main, thanks!<issue_closed>"
    )  # fmt: skip
    assert (record["events"], record["participants"], record["bot_events"]) == (3, 2, 0)


def test_the_opening_is_taken_from_a_comment_when_gh_archive_missed_it(tmp_path):
    opened = issue(3, "dora", "Docs: typo in install page", LONG)
    write_hours(tmp_path / "gha", {5: [comment(1, 3, opened, "eve", "Good catch, want to send a PR?", 5)]})
    (record,), _, _ = ingest(tmp_path)
    assert record["content"].startswith("<issue_start>Title: Docs: typo in install page\nusername_0: The parser")
    assert record["content"].endswith("<issue_comment>username_1: Good catch, want to send a PR?")


def test_bad_lines_and_a_cut_file_are_error_rows_and_the_rest_is_read(tmp_path):
    opened = issue(1, "alice", "A title", LONG)
    opening = event(1, "IssuesEvent", "alice", {"action": "opened", "issue": opened}, 1)
    write_hours(tmp_path / "gha", {1: ["{not json", opening, '{"type": "IssuesEvent", "payload": {}}', "[1, 2]"]})
    pushes = "".join(json.dumps({"type": "PushEvent", "id": str(i), "sha": hashlib.sha1(b"%d" % i).hexdigest()})
                     + "\n" for i in range(50))  # fmt: skip
    (tmp_path / "gha" / "2023-03-01-2.json.gz").write_bytes(gzip.compress(pushes.encode())[:-30])  # cut short
    kept, _, errors = ingest(tmp_path)
    assert len(kept) == 1
    found = sorted((e["reason"], e["detail"].split(":")[0]) for e in errors)
    assert found[:3] == [("malformed_event", "line 3"), ("malformed_line", "line 1"), ("malformed_line", "line 4")]
    assert found[3][0] == "truncated_file" and 45 <= int(found[3][1].split()[1]) <= 51  # after the whole lines
    assert all("alice" not in (e["detail"] or "") for e in errors)  # an error row does not carry the line


def test_a_pull_request_and_the_issue_comments_on_it_are_one_thread(tmp_path):
    pr = {"number": 9, "title": "Speed up parsing", "body": LONG, "user": {"login": "fay", "type": "User"},
          "state": "open", "merged": False, "base": {"ref": "main", "sha": "a" * 40},
          "head": {"ref": "fast", "sha": "b" * 40}, "html_url": "https://github.com/acme/tool/pull/9"}  # fmt: skip
    write_hours(tmp_path / "gha", {1: [event(1, "PullRequestEvent", "fay", {"action": "opened", "number": 9,
                                                                            "pull_request": pr}, 1)],
                                   2: [comment(2, 9, issue(9, "fay", "Speed up parsing", LONG, pr=True), "gus",
                                               "LGTM", 2)]})  # fmt: skip
    merged = {**pr, "state": "closed", "merged": True}
    write_hours(tmp_path / "gha", {3: [event(3, "PullRequestEvent", "hal", {"action": "closed", "number": 9,
                                                                           "pull_request": merged}, 3)]})  # fmt: skip
    kept, removed, _ = ingest(tmp_path, "--gharchive-seed", "1")  # a seed whose per-repository draw keeps it
    assert kept == []
    assert [(r["kind"], r["path"], r["reason"]) for r in removed] == [("pull_request", "/pull/9", "pr_code_not_found")]
    assert removed[0]["detail"] == "no repository of --gharchive-code holds its base and head revisions"


# The rules, one by one (filters/github/issues.yaml)


@pytest.mark.parametrize(
    ("login", "bot"),
    [
        ("codecov-commenter", True), ("SparkQA", True), ("probot-stale", True),  # the exact list
        ("dependabot[bot]", True), ("my-botmanager", True), ("bors-ng", True), ("jenkins-x", True),
        ("k8s-ci-robot", True), ("run-test-suite", True), ("travis-ci-org", True),  # contains
        ("pr-automaton", True), ("acme-automation", True), ("perf-benchmark", True), ("nightly-build", True),
        ("acme-deployer", True), ("acme-cloud", True), ("mergebot", True), ("acme-ci", True),
        ("style-linter", True), ("acme-teamcity", True), ("unit-test", True), ("acme-testing", True),  # ends with
        ("alice", False), ("robotics-fan", False), ("testing-alice", False), ("cibot2", False), ("Codecov-io2", False),
    ],
)  # fmt: skip
def test_bot_logins(login, bot):
    assert threads.is_bot(login, "User", RULES) is bot


def test_github_s_bot_type_is_a_bot_unless_turned_off():
    assert threads.is_bot("renovate", "Bot", RULES)
    assert not threads.is_bot("renovate", "Bot", threads.Rules(**{**RULES.__dict__, "user_type_bot": False}))


def _thread(*posts: tuple[str, str], title: str = "A title", closed: bool = False) -> threads.Thread:
    thread = threads.Thread("acme/tool", 1, title=title, closed=closed)
    thread.opening = threads.Post(posts[0][0], "User", posts[0][1], "")
    for i, (login, text) in enumerate(posts[1:]):
        thread.comments[str(i)] = threads.Post(login, "User", text, str(i))
    thread.logins = list(dict.fromkeys(login for login, _ in posts))
    return thread


def test_a_bot_comment_goes_and_the_comment_that_called_it():
    thread = _thread(("alice", LONG), ("bob", "/retest"), ("k8s-ci-robot", "All tests passed"),
                     ("carol", "Ping codecov-commenter please"), ("codecov-commenter", "Coverage 91%"),
                     ("dave", "Looks good to me"), ("mergebot", "Merged"))  # fmt: skip
    cleaned = threads.clean(thread, RULES)
    assert (cleaned.events, cleaned.bot_events) == (2, 5)
    assert cleaned.text is not None and "Looks good" in cleaned.text and "retest" not in cleaned.text


def test_an_issue_of_bots_only_is_removed():
    cleaned = threads.clean(_thread(("dependabot[bot]", LONG), ("codecov-io", "Coverage")), RULES)
    assert (cleaned.reason, cleaned.text) == ("only_bots", None)


def test_e_mail_reply_boilerplate_is_stripped():
    text = ("Yes, that fixes it.\nSigned-off-by: Bob <bob@example.com>\n\nOn Mon, Mar 6, 2023 at 10:12 AM Alice "
            "Smith <\nalice@example.com> wrote:\n> Does the patch help?\n> \n")  # fmt: skip
    assert threads.strip_reply(text) == "Yes, that fixes it."
    assert threads.strip_reply("Agreed.\n> quoted\nMore.") == "Agreed.\nMore."
    assert threads.strip_reply("Sent from mail\n" + "_" * 32 + "\nFrom: Alice\nSent: Monday") == "Sent from mail"
    assert threads.strip_reply("On the other hand, I wrote: a test.") == "On the other hand, I wrote: a test."


def test_over_80_lines_keep_the_first_60_and_last_20():
    lines = [f"line {i}" for i in range(1, 101)]
    cut, done = threads.truncate("\n".join(lines), RULES)
    assert done and cut.split("\n") == [*lines[:60], "[Truncated]", *lines[-20:]]
    assert threads.truncate("\n".join(lines[:80]), RULES) == ("\n".join(lines[:80]), False)


def test_users_and_size():
    short = threads.clean(_thread(("alice", "x" * 150), ("bob", "y" * 30)), RULES)
    assert short.reason == "too_short" and short.detail == "187 characters < 200"  # the title counts: 7 + 150 + 30
    two = threads.clean(_thread(("alice", "x" * 8000), ("bob", "ok, thanks")), RULES)
    assert two.reason is None  # two authors: any size
    assert threads.clean(_thread(("alice", "x" * 6993)), RULES).reason is None  # one author, 7,000 characters
    long = threads.clean(_thread(("alice", "x" * 6994)), RULES)
    assert (long.reason, long.detail) == ("one_author_too_long",
                                          "one author, 7001 characters (max 7000), 1 events (max 10)")  # fmt: skip
    many = threads.clean(_thread(*[("alice", "x" * 30)] * 11), RULES)
    assert many.reason == "one_author_too_long" and "11 events" in many.detail
    assert threads.clean(_thread(*[("alice", "x" * 30)] * 10), RULES).reason is None


def test_logins_become_usernames_in_order_of_first_appearance_everywhere():
    thread = _thread(("Alice-Dev", "Seen by @bob-smith in https://github.com/Bob-Smith/tool, cc alice-dev"),
                     ("bob-smith", "@Alice-Dev: see bob-smithy's fork; alice-developer agrees" + "." * 200),
                     title="alice-dev: crash")  # fmt: skip
    cleaned = threads.clean(thread, RULES)
    assert cleaned.text == (
        "<issue_start>Title: username_0: crash\nusername_0: Seen by @username_1 in https://github.com/username_1/tool,"
        " cc username_0<issue_comment>username_1: @username_0: see bob-smithy's fork; alice-developer agrees"
        + "."
        * 200
    )


def test_a_closed_issue_ends_with_its_token_and_a_reopened_one_does_not(tmp_path):
    opened = issue(2, "alice", "A title", LONG)
    hours = {1: [event(1, "IssuesEvent", "alice", {"action": "opened", "issue": opened}, 1),
                 event(2, "IssuesEvent", "alice", {"action": "closed", "issue": opened}, 1, 10),
                 event(3, "IssuesEvent", "alice", {"action": "reopened", "issue": opened}, 1, 20)]}  # fmt: skip
    write_hours(tmp_path / "gha", hours)
    (record,), _, _ = ingest(tmp_path)
    assert not record["content"].endswith("<issue_closed>")


def test_the_same_records_for_any_order_of_the_hourly_files_and_partitions(tmp_path):
    hours = {}
    for n in range(1, 13):
        opened = issue(n, f"user{n}", f"Issue {n}", LONG)
        hours.setdefault(n % 3, []).append(event(n, "IssuesEvent", f"user{n}", {"action": "opened", "issue": opened},
                                                 n % 3))  # fmt: skip
        hours.setdefault((n + 1) % 3, []).append(
            comment(100 + n, n, opened, "helper", "Thanks" + "!" * n, (n + 1) % 3)
        )
    write_hours(tmp_path / "a" / "gha", hours)
    write_hours(tmp_path / "b" / "gha", dict(reversed(list(hours.items()))))
    one, _, _ = ingest(tmp_path / "a")
    many, _, _ = ingest(tmp_path / "b", "--gharchive-partition-mb", "0.0001")
    assert len(one) == 12
    assert sorted((r["content"], r["path"]) for r in one) == sorted((r["content"], r["path"]) for r in many)
    assert len({r["doc_id"] for r in many}) == 12
    assert len(list((tmp_path / "b" / "out" / "_state" / "ingest" / "shards").iterdir())) > 1
    assert not (tmp_path / "b" / "out" / "_state" / "ingest_gharchive").exists()  # the split goes once read
    assert pq.read_schema(next((tmp_path / "a" / "out" / "ingest").glob("*.parquet"))).field("kind")


# No login or author e-mail of the input survives into any output (issue 31)

PLANTED = {  # where each login sits in GH Archive's events
    "qzopener": "the opening's author (actor, payload.issue.user)",
    "qzcommenter": "a comment's author (actor, payload.comment.user)",
    "qzmentioned": "a participant mentioned with @ in a comment",
    "qzprofile": "a participant's profile URL in a comment",
    "qzreplier": "the author of a reply by e-mail, in its `On ... wrote:` line",
    "qztitle": "a participant named in the title",
    "qzprauthor": "a pull request's author (payload.pull_request.user)",
    "qzreviewer": "a review's author (payload.review.user), thanked in the code the pull request changes",
    "qzmerger": "who merged the pull request (the closing event's actor)",
    "qzvoqrec": "a review comment's author (payload.comment.user), named in its diff hunk's code",
    "qz committer": "the name of the author and committer of the pull request's and the history's commits",
}
EMAILS = ("qzreplier@example.org", "qzopener.work@example.com", "qzcommitter@example.org")


@pytest.fixture(scope="module")
def private_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gh_private")
    hours: dict[int, list] = {}
    prose = ("The loader drops the last record when the input has no trailing newline, so the totals are off by "
             "one on every nightly export; reproduced on 3.1 and 3.2 with the sample below.\n") * 4  # fmt: skip
    for n in range(1, 9):
        opened = issue(n, "qzopener", f"Loader drops a record (seen by qztitle, case {n})",
                       prose + f"Contact: {EMAILS[1]}")  # fmt: skip
        hours.setdefault(1, []).append(
            event(10 * n, "IssuesEvent", "qzopener", {"action": "opened", "issue": opened}, 1)
        )
        hours.setdefault(2, []).append(comment(10 * n + 1, n, opened, "qzcommenter",
                                               f"Same here, @qzmentioned saw it too (https://github.com/qzprofile). "
                                               f"{prose}", 2))  # fmt: skip
        hours.setdefault(3, []).append(comment(10 * n + 2, n, opened, "qzreplier",
                                               "Fixed by the patch, thanks qzcommenter.\n\nOn Tue, Mar 7, 2023 at "
                                               f"9:01 AM qzreplier <{EMAILS[0]}> wrote:\n> @qzopener did it help?",
                                               3))  # fmt: skip
        for who in ("qzmentioned", "qzprofile", "qztitle"):  # participants elsewhere in the thread
            hours[3].append(comment(10 * n + 3 + len(who), n, opened, who, f"+1 from me ({who})" + prose, 3))
    repo = root / "code" / "acme" / "tool"  # the pull request's code, committed by a person named in git only
    repo.mkdir(parents=True)
    (repo / "loader.py").write_text("def load(lines):\n    return lines[:-1]\n# the loader, tested in tests/\n")
    env = {"GIT_AUTHOR_NAME": "Qz Committer", "GIT_AUTHOR_EMAIL": EMAILS[2], "GIT_COMMITTER_NAME": "Qz Committer",
           "GIT_COMMITTER_EMAIL": EMAILS[2]}  # fmt: skip
    git_as(repo, env, "init", "-q")
    git_as(repo, env, "add", "-A")
    git_as(repo, env, "commit", "-q", "-m", "loader")
    (repo / "loader.py").write_text(
        "def load(lines):\n    return lines  # thanks to qzreviewer\n# the loader, tested in tests/\n"
    )
    git_as(repo, env, "commit", "-q", "-am", "keep the last record (qzreviewer's report)")
    base, head = git_as(repo, env, "rev-parse", "HEAD~1", "HEAD").split()
    history = root / "hist" / "acme" / "lib"  # commits by the same person: only git's metadata names them
    history.mkdir(parents=True)
    code = "".join(f"def step_{i}(value):\n    return value + {i}\n\n" for i in range(12))
    git_as(history, env, "init", "-q")
    (history / "steps.py").write_text(code)
    git_as(history, env, "add", "-A")
    git_as(history, env, "commit", "-q", "-m", "Add the steps of the nightly export")
    (history / "steps.py").write_text(code.replace("value + 3", "value * 3").replace("value + 5", "value * 5"))
    git_as(history, env, "commit", "-q", "-am", "Multiply in the third and fifth steps of the export")
    pr = {"number": 99, "title": "Fix loader", "body": prose, "user": {"login": "qzprauthor", "type": "User"},
          "state": "open", "merged": False, "base": {"ref": "main", "sha": base},
          "head": {"ref": "fix", "sha": head}}  # fmt: skip
    approve = {"action": "created", "pull_request": pr, "review": {"id": 1, "user": {"login": "qzreviewer"},
               "body": "Approving; @qzprauthor please squash.", "state": "approved"}}  # fmt: skip
    hours[1].append(
        event(999, "PullRequestEvent", "qzprauthor", {"action": "opened", "number": 99, "pull_request": pr}, 1)
    )
    hours[2].append(event(1000, "PullRequestReviewEvent", "qzreviewer", approve, 2))
    line = {
        "action": "created",
        "pull_request": pr,
        "comment": {
            "id": 2,
            "user": {"login": "qzvoqrec"},
            "body": "Should this keep the last line, @qzprauthor?",
            "path": "loader.py",
            "original_position": 2,
            "pull_request_review_id": 1,
            "in_reply_to_id": None,
            "diff_hunk": "@@ -1,2 +1,2 @@\n def load(lines):\n-    return lines[:-1]\n+    return lines  # qzvoqrec",
        },
    }
    hours[2].append(event(1002, "PullRequestReviewCommentEvent", "qzvoqrec", line, 2))  # fmt: skip
    merged = {"action": "closed", "number": 99, "pull_request": {**pr, "merged": True}}
    hours[3].append(event(1001, "PullRequestEvent", "qzmerger", merged, 3))
    write_hours(root / "gha", hours)
    text = "\n".join(gzip.decompress(p.read_bytes()).decode() for p in sorted((root / "gha").iterdir()))
    assert all(login in text for login in list(PLANTED)[:-1]) and all(e in text for e in EMAILS[:2])  # can fail
    assert "Qz Committer" in git_as(history, env, "log") and EMAILS[2] in git_as(history, env, "log")
    pipeline = root / "pipeline.yaml"
    pipeline.write_text(
        f"out: {root / 'out'}\nstages:\n"
        f"  ingest: {{gharchive: ['{root / 'gha'}/*.json.gz'], gharchive_code: ['{root / 'code'}'], "
        f"gharchive_seed: 1, history: ['{history}'], keep: true}}\n"
        "  dedup: {}\n"
        "  pii: {model: none, redact: [EMAIL, IP_ADDRESS, KEY, PASSWORD, NAME, USERNAME]}\n"
        "  format: {fim_rate: 0.0}\n"
        "  tokenize: {vocab_size: 600}\n"
    )
    assert main(["run", str(pipeline), "--runner", "local", "--no-progress"]) == 0
    return root / "out"


def git_as(repo: Path, env: dict[str, str], *args: str) -> str:
    """git in `repo` as the person of `env` (GIT_AUTHOR_NAME, ...)."""
    done = subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args], cwd=repo,
                          check=True, capture_output=True, env={**os.environ, **GIT_ENV, **env})  # fmt: skip
    return done.stdout.decode().strip()


def _strings_under(folder: Path) -> str:
    found = []
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".parquet":
            found += [str(v) for row in pq.read_table(path).to_pylist() for v in row.values()]
        elif path.is_file() and path.suffix in (".json", ".yaml", ".md", ".html", ".txt"):
            found.append(path.read_text(errors="replace"))
    return "\n".join(found)


def test_no_login_or_author_e_mail_in_any_output(private_run):
    from megatron_reader import read as read_megatron
    from tokenizers import Tokenizer

    ingested = read_all(private_run / "ingest").to_pylist()
    assert sorted(r["kind"] for r in ingested) == ["commit"] + ["issue"] * 8 + ["pull_request"]
    assert all("username_0" in r["content"] for r in ingested if r["kind"] != "commit")
    (pr,) = [r["content"] for r in ingested if r["kind"] == "pull_request"]
    assert "+    return lines  # thanks to username_1" in pr and "<pr_review>username_1: Approving" in pr
    assert "<pr_comment>username_2: Should this keep the last line, @username_0?" in pr
    everything = _strings_under(private_run)  # every stage, before and after pii, stats and configs included
    tokenizer = Tokenizer.from_file(str(private_run / "tokenizer" / "tokenizer.json"))
    manifest = json.loads((private_run / "megatron" / "manifest.json").read_text())
    decoded = [tokenizer.decode(seq.tolist(), skip_special_tokens=False) for shard in manifest["shards"]
               for seq in read_megatron(private_run / "megatron" / shard["shard"])]  # fmt: skip
    vocabulary = [tokenizer.decode([i]) for i in range(tokenizer.get_vocab_size())]
    # the threads are alike: dedup keeps one or a few
    assert len(decoded) == read_all(private_run / "pii").num_rows >= 1
    assert all(d.startswith(("<issue_start>", "<pr>", "<commit_before>")) for d in decoded)
    for where, text in (("outputs", everything), ("shards", "\n".join(decoded))):
        leaks = [x for x in [*PLANTED, *EMAILS] if x in text.lower()]
        assert leaks == [], f"{where}: {[(x, PLANTED.get(x, 'an author e-mail')) for x in leaks]}"
    assert [t for t in vocabulary if len(t) >= 5 and any(t.strip() in x for x in PLANTED)] == []


def test_stats_and_report_show_the_kinds(private_run, capsys):
    assert main(["stats", str(private_run)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    line = printed[-1]
    assert line.startswith("in the shards, by kind: issue ") and line.endswith(" tokens")
    by_kind = {tuple(row.split()[:2]): row.split()[2:] for row in printed[printed.index("by kind of record:") + 2 :]
               if row.split()[:1] in (["ingest"], ["pii"])}  # fmt: skip
    assert by_kind[("ingest", "issue")] == ["8", "8", "0", "0"]
    assert by_kind[("ingest", "pull_request")] == ["1", "1", "0", "0"]
    assert by_kind[("pii", "pull_request")][0] == "1"
    summary = json.loads((private_run / "report" / "summary.json").read_text())
    assert sorted(r["kind"] for r in summary["tokens_by_kind"]) == ["commit", "issue", "pull_request"]
    assert {"stage": "ingest", "kind": "issue", "docs_in": 8, "docs_out": 8, "docs_removed": 0,
            "docs_error": 0} in summary["kinds_by_stage"]  # fmt: skip
    assert ". Kinds of record</h2>" in (private_run / "report" / "index.html").read_text()


def test_opted_out_repositories_owners_and_participants_remove_their_threads(tmp_path):
    hours: dict[int, list] = {1: []}
    for n, (repo, commenter) in enumerate([("acme/tool", "bob"), ("acme/private", "bob"), ("optco/lib", "bob"),
                                           ("acme/tool", "Quitter")], start=1):  # fmt: skip
        opened = issue(n, "alice", f"Issue {n}", LONG)
        hours[1] += [event(10 * n, "IssuesEvent", "alice", {"action": "opened", "issue": opened}, 1, repo=repo),
                     comment(10 * n + 1, n, opened, commenter, "Seen it too, thanks.", 1) | {
                         "repo": {"id": 1, "name": repo, "url": "x"}}]  # fmt: skip
    write_hours(tmp_path / "gha", hours)
    (tmp_path / "optout.txt").write_text("# opted out\nacme/private\nOptCo\nquitter\n")
    kept, removed, _ = ingest(tmp_path, "--gharchive-opt-out", str(tmp_path / "optout.txt"))
    assert [r["origin"] for r in kept] == ["https://github.com/acme/tool/issues/1"]
    assert sorted((r["origin"].split("github.com/")[1], r["reason"], r["detail"]) for r in removed) == [
        ("acme/private/issues/2", "opt_out", "its repository opted out"),
        ("acme/tool/issues/4", "opt_out", "a participant opted out"),
        ("optco/lib/issues/3", "opt_out", "its repository's owner opted out"),
    ]


@pytest.fixture
def served(tmp_path):
    """An HTTP server of `tmp_path / "web"` (Content-Length on HEAD, as data.gharchive.org gives it)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    (tmp_path / "web").mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path / "web")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path / "web", f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_hourly_files_over_http_give_the_records_and_partitions_of_local_files(tmp_path, served):
    web, url = served
    hours = {}
    for n in range(1, 9):
        opened = issue(n, f"user{n}", f"Issue {n}", LONG)
        hours.setdefault(n % 2, []).append(event(n, "IssuesEvent", f"user{n}", {"action": "opened", "issue": opened},
                                                 n % 2))  # fmt: skip
        hours.setdefault(2, []).append(comment(100 + n, n, opened, "helper", "Thanks" + "!" * n, 2))
    write_hours(tmp_path / "local" / "gha", hours)
    write_hours(web, hours)
    flags = ("--gharchive-partition-mb", "0.0005")  # a few partitions of these small files
    local, _, _ = ingest(tmp_path / "local", *flags)
    out = tmp_path / "remote"
    urls = [f"{url}/2023-03-01-{h}.json.gz" for h in hours]
    assert main(["ingest", "--out", str(out), "--gharchive", *urls, "--runner", "local", "--no-progress", *flags]) == 0
    remote = read_all(out / "ingest").to_pylist()
    assert len(local) == 8
    assert sorted(r["content"] for r in remote) == sorted(r["content"] for r in local)
    roots = (tmp_path / "local" / "out", out)
    shards = [len(list((root / "_state" / "ingest" / "shards").iterdir())) for root in roots]
    assert shards[0] > 1 and shards[0] == shards[1]  # sized by Content-Length, not one partition for them all


def test_the_split_writes_the_same_partitions_whatever_its_batches(tmp_path, monkeypatch):
    from stackcurate.core import shuffle
    from stackcurate.sources.gharchive import events

    lines = []
    for n in range(1, 8):
        opened = issue(n, f"user{n}", f"Issue {n}", LONG)
        lines += [event(n, "IssuesEvent", f"user{n}", {"action": "opened", "issue": opened}, 1),
                  comment(100 + n, n, opened, "helper", "Thanks", 1),
                  event(200 + n, "WatchEvent", "x", {}, 1)]  # fmt: skip
    lines.insert(5, "not json")
    write_hours(tmp_path / "gha", {1: lines})
    uri = str(tmp_path / "gha" / "2023-03-01-1.json.gz")
    counts = events.split_task(uri, 0, str(tmp_path / "whole"), 3)
    monkeypatch.setattr(events, "BATCH_ROWS", 2)  # rows become Arrow columns every two events
    assert events.split_task(uri, 0, str(tmp_path / "batched"), 3) == counts
    assert counts == {"lines": 22, "thread_events": 14, "other_events": 7, "bad_lines": 1}
    fs, _ = io.filesystem(str(tmp_path))
    for part in range(3):
        whole = shuffle.read_partition(fs, str(tmp_path / "whole"), part)
        batched = shuffle.read_partition(fs, str(tmp_path / "batched"), part)
        assert whole is not None and batched is not None and whole.equals(batched)

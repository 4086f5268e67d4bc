"""A small GH Archive for the embedded default input (`stackcurate sample`), from text every Python install has.

IDLE's NEWS.txt (in the standard library) lists its changes by their CPython issue, `gh-NNNNN: what changed.
Patch by Someone.` (or `bpo-NNNNN`, from before CPython's issues moved to GitHub): real issue numbers and real
prose. Each entry becomes one issue, of `python/cpython` (gh) or `python/bpo` (bpo, a name made here), in GH
Archive's exact event schema: opened with the entry's text, a comment by the patch's
author where the entry names one, and closed, over three hourly files, so that the shuffle by thread has work
to do. The events' ids, times and logins are made here (`idle-news`, and the author's name folded into a
login); the text is IDLE's.

Pull requests come from a git repository's history (`write_pulls`: the sample's clone of the stackcurate
checkout): each commit with a message body is a pull request of `stackcurate/stackcurate` whose base is its
parent and head the commit, titled by its subject and described by its body, approved and merged, so that
`--gharchive-code` finds its code in that clone. The logins are made here; the text and code are the commits'.
One more pull request, of the miniature graph export's fork (`write_graph_pull`), has its code only in that
export, for `--gharchive-graph`; its description is made here.
"""

import gzip
import json
import re
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

ENTRY = re.compile(r"^(gh|bpo)-(\d+):?\s+(.*)")
PATCH_BY = re.compile(r"Patch by ([A-Z][\w.' -]+?)(?: and [A-Z][\w.' -]+?)?\.", re.DOTALL)
REPOS = {"gh": "python/cpython", "bpo": "python/bpo"}


def entries(news: Path) -> list[tuple[str, int, str]]:
    """(repository, issue number, text) of each `gh-N` or `bpo-N` entry of a NEWS file, in its order."""
    found: list[tuple[str, int, list[str]]] = []
    for line in news.read_text(encoding="utf-8", errors="replace").splitlines():
        if match := ENTRY.match(line):
            found.append((REPOS[match.group(1)], int(match.group(2)), [match.group(3)]))
        elif found and line.strip() and not line.startswith(("What's New", "(since", "Released", "===")):
            found[-1][2].append(line.strip())
        elif found and not line.strip():
            found.append(("", 0, []))  # a blank line ends the entry
    return [(repo, n, " ".join(lines)) for repo, n, lines in found if n and lines]


def _login(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())[:39] or "someone"


def _event(i: int, kind: str, login: str, payload: dict[str, Any], hour: int, repo: str) -> dict[str, Any]:
    return {
        "id": str(27_000_000_000 + i), "type": kind,
        "actor": {"id": 100 + len(login), "login": login, "display_login": login, "gravatar_id": "",
                  "url": f"https://api.github.com/users/{login}", "avatar_url": ""},
        "repo": {"id": 81598961, "name": repo, "url": f"https://api.github.com/repos/{repo}"},
        "payload": payload, "public": True, "created_at": f"2023-06-01T{hour:02d}:{i % 60:02d}:00Z",
    }  # fmt: skip


def write_sample(folder: Path, news: Path | None = None) -> int:
    """Write the hourly files under `folder`; returns the number of issues (0 where there is no NEWS.txt)."""
    news = news or Path(sysconfig.get_paths()["stdlib"]) / "idlelib" / "NEWS.txt"
    if not news.is_file():
        return 0
    hours: dict[int, list[dict[str, Any]]] = {}
    found = entries(news)
    for i, (repo, number, text) in enumerate(found):
        title = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0][:120]
        issue = {"id": 1_000_000 + number, "number": number, "title": title, "body": text, "state": "closed",
                 "user": {"login": "idle-news", "id": 1, "type": "User"}, "comments": 1,
                 "html_url": f"https://github.com/{repo}/issues/{number}", "author_association": "NONE"}  # fmt: skip
        hour = i % 6
        events = [_event(3 * i, "IssuesEvent", "idle-news", {"action": "opened", "issue": issue}, hour, repo)]
        if match := PATCH_BY.search(text):
            login = _login(match.group(1))
            comment = {"id": 2_000_000 + number, "body": f"Patch by {match.group(1)}, merged.",
                       "user": {"login": login, "id": 2, "type": "User"}, "created_at": "", "html_url": "",
                       "author_association": "CONTRIBUTOR"}  # fmt: skip
            created = {"action": "created", "issue": issue, "comment": comment}
            events.append(_event(3 * i + 1, "IssueCommentEvent", login, created, hour + 1, repo))
        closed = {"action": "closed", "issue": issue}
        events.append(_event(3 * i + 2, "IssuesEvent", "idle-news", closed, hour + 2, repo))
        for e in events:
            hours.setdefault(int(e["created_at"][11:13]), []).append(e)
    _write_hours(folder, "2023-06-01", hours)
    return len(found)


def _write_hours(folder: Path, day: str, hours: dict[int, list[dict[str, Any]]]) -> None:
    """One GH Archive file per hour of `day`, its events in the order given."""
    folder.mkdir(parents=True, exist_ok=True)
    for hour, events in sorted(hours.items()):
        lines = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events)
        (folder / f"{day}-{hour}.json.gz").write_bytes(gzip.compress(lines.encode(), mtime=0))


PULLS_REPO = "stackcurate/stackcurate"


def _commits(git_dir: Path, limit: int) -> list[tuple[str, str, str, str]]:
    """(parent, commit, subject, body) of the newest commits with a body of two lines or more and one parent."""
    command = ["git", "--git-dir", str(git_dir), "log", "--no-merges", "--format=%x1e%P%x1f%H%x1f%s%x1f%b"]
    listing = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    found = []
    for chunk in listing.split("\x1e")[1:]:
        parents, commit, subject, body = chunk.split("\x1f", 3)
        if len(parents.split()) == 1 and body.strip().count("\n") >= 1:
            found.append((parents.strip(), commit, subject.strip(), body.strip()))
    return found[:limit]


def write_pulls(folder: Path, git_dir: Path, limit: int = 12) -> int:
    """Write the hourly files of pull requests made from `git_dir`'s commits (module docstring); returns their
    number."""
    return _write_pulls(folder, _commits(git_dir, limit), PULLS_REPO, "2023-06-02", 1000)


GRAPH_PULL_TEXT = ("A fork's one commit, as a pull request to its upstream: Software Heritage archived both, and "
                   "its code comes from the graph export.")  # fmt: skip


def write_graph_pull(folder: Path, repo: str, base: str, head: str, subject: str) -> int:
    """Write the hourly files of one pull request of `repo` whose revisions only the graph export holds (the
    miniature export's fork: its upstream's revision and the fork's); returns 1."""
    return _write_pulls(folder, [(base, head, subject, GRAPH_PULL_TEXT)], repo, "2023-06-03", 1)


def _write_pulls(folder: Path, commits: list[tuple[str, str, str, str]], repo: str, day: str, first: int) -> int:
    hours: dict[int, list[dict[str, Any]]] = {}
    for i, (base, head, subject, body) in enumerate(commits):
        number = first + i
        pr = {"id": 3_000_000 + number, "number": number, "title": subject, "body": body, "state": "open",
              "merged": False, "user": {"login": "sc-author", "id": 3, "type": "User"},
              "base": {"ref": "main", "sha": base, "repo": {"full_name": repo}},
              "head": {"ref": f"change-{number}", "sha": head, "repo": {"full_name": repo}},
              "html_url": f"https://github.com/{repo}/pull/{number}"}  # fmt: skip
        review = {"id": 4_000_000 + number, "user": {"login": "sc-reviewer", "id": 4, "type": "User"}, "body": "",
                  "state": "approved", "commit_id": head}  # fmt: skip
        merged = {**pr, "state": "closed", "merged": True}
        hour = i % 4
        events = [
            _event(900 + 3 * number, "PullRequestEvent", "sc-author", {"action": "opened", "number": number,
                                                                       "pull_request": pr}, hour, repo),
            _event(901 + 3 * number, "PullRequestReviewEvent", "sc-reviewer", {"action": "created",
                                                                               "pull_request": pr, "review": review},
                   hour + 1, repo),
            _event(902 + 3 * number, "PullRequestEvent", "sc-reviewer", {"action": "closed", "number": number,
                                                                         "pull_request": merged}, hour + 2, repo),
        ]  # fmt: skip
        for e in events:
            hours.setdefault(int(e["created_at"][11:13]), []).append(e)
    _write_hours(folder, day, hours)
    return len(commits)

"""A GitHub issue thread from its GH Archive events: cleaned, anonymised and rendered as StarCoder2 trained on it.

The steps, in StarCoder's order (../shared/REFERENCE.md (k); rules and thresholds in filters/github/issues.yaml):

1. the thread's events: its opening (an `opened` IssuesEvent, or, when GH Archive holds none, the issue as a
   later event carries it), its edits, its comments (edited and deleted ones as their last state), and whether
   it ended closed;
2. each text without e-mail reply boilerplate (an `On ... wrote:` line and what follows it, a line of 20 or
   more `_` and what follows it, `>`-quoted lines, `Signed-off-by:` lines), then cut to its first 60 and last
   20 lines when over 80;
3. bots' events dropped (the published lists), and the comment just before a dropped one when it calls it
   (names it, or starts with `/`);
4. the thread removed when under 200 characters, or written by one author and over 7,000 characters or 10
   events;
5. every participant's login replaced by `username_<i>`, numbered in order of first appearance, in the authors
   and wherever it occurs in the text (mentions, profile URLs, quoted replies);
6. rendered `<issue_start>Title: t\\nusername_0: text<issue_comment>username_1: text...<issue_closed>`.
"""

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from stackcurate.core import tokens as tk
from stackcurate.core.paths import rules_file

RULES = "filters/github/issues.yaml"  # the shipped rules (core/paths.py finds them)
_REPLY = re.compile(r"^\s*On\b.{0,300}?\bwrote:\s*$", re.DOTALL)
_RULE_LINE = re.compile(r"^\s*_{20,}\s*$")


@dataclass(frozen=True)
class Rules:
    exact: frozenset[str]
    contains: tuple[str, ...]
    endswith: tuple[str, ...]
    user_type_bot: bool
    caller_prefix: str
    truncate_over: int
    keep_head: int
    keep_tail: int
    truncated_mark: str
    min_chars: int
    min_authors: int
    one_author_max_chars: int
    one_author_max_events: int


def load_rules(path: str = RULES) -> Rules:
    """The rules of a YAML file laid out as filters/github/issues.yaml (`filters/...`: the shipped one when no
    such file is here)."""
    return _read(*rules_file(path, "--gharchive-rules", RULES))


@cache
def _read(path: str, mtime: int) -> Rules:  # read once per file and version: each worker reads it once
    data = yaml.safe_load(Path(path).read_text())
    bots, text, threads = data["bots"], data["text"], data["threads"]
    return Rules(
        exact=frozenset(bots["exact"]), contains=tuple(bots["contains"]), endswith=tuple(bots["endswith"]),
        user_type_bot=bool(bots["user_type_bot"]), caller_prefix=bots["caller_prefix"], **text, **threads,
    )  # fmt: skip


def is_bot(login: str, user_type: str | None, rules: Rules) -> bool:
    """Whether a login is a bot's by the published lists (and GitHub's `type: Bot`, unless turned off)."""
    if login in rules.exact or (rules.user_type_bot and user_type == "Bot"):
        return True
    low = login.lower()
    return any(s in low for s in rules.contains) or low.endswith(rules.endswith)


def strip_reply(text: str) -> str:
    """The text without what a reply by e-mail adds (see the module docstring, step 2)."""
    lines = text.split("\n")
    kept: list[str] = []
    for i, line in enumerate(lines):
        # `On <date>, <name> <address> wrote:` may wrap over two lines
        if _RULE_LINE.match(line) or _REPLY.match(line) or _REPLY.match("\n".join(lines[i : i + 2])):
            break
        if line.lstrip().startswith(">") or line.lstrip().startswith("Signed-off-by:"):
            continue
        kept.append(line)
    return "\n".join(kept).strip()


def truncate(text: str, rules: Rules) -> tuple[str, bool]:
    return cut_lines(text, rules.truncate_over, rules.keep_head, rules.keep_tail, rules.truncated_mark)


def cut_lines(text: str, over: int, head: int, tail: int, mark: str) -> tuple[str, bool]:
    """A text of more than `over` lines as its first `head` and last `tail` with `mark` between, and whether it
    was cut (StarCoder's rule for issues, StarCoder2's for pull requests)."""
    lines = text.split("\n")
    if len(lines) <= over:
        return text, False
    return "\n".join([*lines[:head], mark, *lines[-tail:]]), True


def bot_drops(bots: list[bool], callers: list[str | None], logins: list[str], rules: Rules) -> list[bool]:
    """Which events go (step 3): the bots' own, and the event just before a bot's that calls it (`callers[i]`:
    the text of an event that may call a bot, else None), by a command or by the bot's name."""
    drop = list(bots)
    for i in range(1, len(bots)):
        caller = callers[i - 1]
        if bots[i] and not bots[i - 1] and caller is not None:
            if caller.lstrip().startswith(rules.caller_prefix) or logins[i].lower() in caller.lower():
                drop[i - 1] = True
    return drop


@dataclass
class Post:
    """One event of a thread that holds text: its opening or a comment."""

    login: str
    user_type: str | None
    text: str
    key: str  # the comment's id ("" for the opening): an edit or deletion names it


@dataclass
class Thread:
    """The events of one issue, in time order, as GH Archive gives them (see events.py)."""

    repo: str
    number: int
    title: str = ""
    opening: Post | None = None
    comments: dict[str, Post] = field(default_factory=dict)
    closed: bool = False
    logins: list[str] = field(default_factory=list)  # every login seen, in order of first appearance


@dataclass(frozen=True)
class Cleaned:
    """A cleaned thread: its text when kept, else the rule that removed it, and what the steps did."""

    text: str | None
    reason: str | None
    detail: str | None
    events: int
    authors: int
    bot_events: int
    truncated: int


def build(repo: str, number: int, events: list[dict[str, Any]]) -> Thread:
    """The thread of the events of one issue (rows of events.EVENT_SCHEMA, sorted by time then id)."""
    thread = Thread(repo, number)
    for e in events:
        for login in (e["opener"], e["login"]):
            if login and login not in thread.logins:
                thread.logins.append(login)
        if thread.opening is None and e["opener"]:  # GH Archive may start after the issue opened: as carried
            thread.title = e["title"] or ""
            thread.opening = Post(e["opener"], e["opener_type"], e["opener_text"] or "", "")
        kind, action = e["type"], e["action"]
        if kind == "IssuesEvent":
            if action in ("opened", "edited"):
                thread.title = e["title"] or thread.title
                thread.opening = Post(e["opener"] or e["login"], e["opener_type"], e["opener_text"] or "", "")
            elif action == "closed":
                thread.closed = True
            elif action == "reopened":
                thread.closed = False
        elif kind == "IssueCommentEvent":
            key = str(e["comment_id"])
            if action == "deleted":
                thread.comments.pop(key, None)
            else:  # created or edited: the comment as it last read
                thread.comments[key] = Post(e["login"], e["user_type"], e["text"] or "", key)
    return thread


def clean(thread: Thread, rules: Rules) -> Cleaned:
    """Steps 2-6 of the module docstring."""
    posts = ([thread.opening] if thread.opening else []) + list(thread.comments.values())
    texts, truncated = [], 0
    for post in posts:
        text, cut = truncate(strip_reply(post.text), rules)
        texts.append(text)
        truncated += cut
    bots = [is_bot(p.login, p.user_type, rules) for p in posts]
    drop = bot_drops(bots, list(texts), [p.login for p in posts], rules)
    kept = [(p, t) for p, t, d in zip(posts, texts, drop, strict=True) if not d]
    counts = {"bot_events": sum(drop), "truncated": truncated}
    if not kept:
        return Cleaned(None, "only_bots", f"{len(posts)} events, all by bots or calling them", 0, 0, **counts)
    chars = len(thread.title) + sum(len(t) for _, t in kept)
    authors = len({p.login for p, _ in kept})
    shape = {"events": len(kept), "authors": authors, **counts}
    if chars < rules.min_chars:
        return Cleaned(None, "too_short", f"{chars} characters < {rules.min_chars}", **shape)
    if authors < rules.min_authors and (chars > rules.one_author_max_chars or len(kept) > rules.one_author_max_events):
        detail = f"one author, {chars} characters (max {rules.one_author_max_chars}), {len(kept)} events (max " \
                 f"{rules.one_author_max_events})"  # fmt: skip
        return Cleaned(None, "one_author_too_long", detail, **shape)
    names = anonymiser(thread.logins, [p.login for p, _ in kept])
    parts = [f"{tk.ISSUE_START}Title: {names(thread.title)}\n"]
    for i, (post, text) in enumerate(kept):
        parts.append(("" if i == 0 else tk.ISSUE_COMMENT) + f"{names.of(post.login)}: {names(text)}")
    if thread.closed:
        parts.append(tk.ISSUE_CLOSED)
    return Cleaned("".join(parts), None, None, **shape)


class anonymiser:  # noqa: N801 - used as a function that also answers `of`
    """Replaces every login of a thread by `username_<i>`: the authors first, in the order they speak, then the
    other participants (dropped bots, an opener whose event went), in order of first appearance."""

    def __init__(self, logins: list[str], authors: list[str]) -> None:
        order = list(dict.fromkeys([*authors, *logins]))
        self.names = {login: f"username_{i}" for i, login in enumerate(order)}
        # longest first, so that `ann` inside `anna` is not replaced on its own; not inside a longer name
        alternatives = "|".join(re.escape(login) for login in sorted(self.names, key=len, reverse=True))
        self.pattern = re.compile(rf"(?<![\w-])({alternatives})(?![\w-])", re.IGNORECASE) if self.names else None
        self.lower = {login.lower(): name for login, name in self.names.items()}

    def of(self, login: str) -> str:
        return self.names[login]

    def __call__(self, text: str) -> str:
        if self.pattern is None:
            return text
        return self.pattern.sub(lambda m: self.lower[m.group(1).lower()], text)

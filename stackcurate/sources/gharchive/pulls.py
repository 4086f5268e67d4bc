"""A GitHub pull request from its GH Archive events and its code: filtered, anonymised and rendered as StarCoder2.

The steps (../shared/REFERENCE.md (k); rules and thresholds in filters/github/pull_requests.yaml, bots and
e-mail boilerplate in filters/github/issues.yaml):

1. the pull request's events in time order: its opening (an `opened` event, or, when GH Archive starts later,
   the pull request as its first event carries it), its status changes, comments (issue comments on it), reviews
   and review comments (edited ones as they last read, deleted ones gone), every base and head revision named;
2. removed when opened by a bot, with a short or excluded title, no description, no human review or comment,
   neither approved nor merged, its base changed (a rebase onto another base), or not drawn by the
   per-repository sampling (p falls with the repository's number of pull requests);
3. its code read (code.py): the files each head modifies against the base, each filtered (alphanumeric and
   hexadecimal shares, lines, line lengths, language); removed when no repository holds its revisions, or no
   file is left;
4. bots' events dropped with the comment calling them, each text stripped of e-mail boilerplate and HTML
   comments, cut to 60 + 20 lines over 80 and to 1,000 characters, dropped under 20;
5. rendered: `<pr>Title: t\\nusername_0: description<pr_status>opened<repo_name>owner/name`, then `<pr_base>` and
   each base file `<pr_file>path<pr_base_code>code` (whole with p = 0.2, else its changed lines with 0-31 lines
   around), then `<pr_diff>` and each file's hunks `<pr_file>path<pr_diff_hunk>@@ -a,b +c,d @@...` (3-9 context
   lines, nearby hunks joined, numbered from the rendered base's first line), then the events in time order:
   `<pr_comment>user: text<pr_event_id>id<pr_status>created`, `<pr_review>user: text<pr_event_id>id
   <pr_review_state>state`, `<pr_review_comment><pr_event_id>id[<pr_in_reply_to_review_id>id]
   [<pr_in_reply_to_comment_id>id]<pr_file>path<pr_diff_hunk_comment_line>n<pr_diff_hunk>hunk<pr_comment>user:
   text`, `<pr>user<pr_status>closed<pr_is_merged>True`, a new `<pr_diff>` before the first event of a new
   head; removed under 200 characters or over 100,000;
6. every participant's login replaced by `username_<i>` (authors in the order they speak, then the others),
   everywhere in the document, code included.

Every random choice is drawn from a generator seeded by the seed and the pull request alone: the same document
whatever the workers, partitions or order of the hourly files.
"""

import difflib
import hashlib
import random
import re
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from stackcurate.core import tokens as tk
from stackcurate.core.paths import rules_file
from stackcurate.sources.gharchive import threads
from stackcurate.sources.gharchive.code import Change, Repositories

if TYPE_CHECKING:
    from stackcurate.sources.gharchive.graph_code import GraphCode

RULES = "filters/github/pull_requests.yaml"
_HTML_COMMENT = re.compile(r"<!--.*?(-->|$)", re.DOTALL)
_HEX = re.compile(r"\\x[0-9a-fA-F]{2}")
_REPO = "\0repository\0"  # where the repository's name goes, after the logins are replaced
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def load_rules(path: str = RULES) -> dict[str, Any]:
    """The rules of a YAML file laid out as filters/github/pull_requests.yaml (`filters/...`: the shipped one
    when no such file is here)."""
    return _read(*rules_file(path, "--gharchive-pr-rules", RULES))


@cache
def _read(path: str, mtime: int) -> dict[str, Any]:  # read once per file and version: each worker reads it once
    return yaml.safe_load(Path(path).read_text())


@dataclass
class Step:
    """One event of a pull request that is rendered: its opening, a status change, a comment, a review or a
    review comment."""

    kind: str  # opened, status, comment, review, review_comment
    login: str
    user_type: str | None
    head: str | None
    action: str | None = None
    text: str | None = None
    id: str | None = None
    merged: bool = False
    state: str | None = None
    path: str | None = None
    hunk: str | None = None
    position: int | None = None
    reply_to_review: str | None = None
    reply_to_comment: str | None = None


@dataclass
class PullRequest:
    repo: str
    number: int
    title: str = ""
    opener: str | None = None
    opener_type: str | None = None
    description: str | None = None
    merged: bool = False
    approved: bool = False
    bases: list[str] = field(default_factory=list)  # distinct, in order of appearance
    heads: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)


def build(repo: str, number: int, events: list[dict[str, Any]]) -> PullRequest:
    """The pull request of its events (rows of events.EVENT_SCHEMA, sorted by time then id)."""
    pr = PullRequest(repo, number)
    by_id: dict[tuple[str, str], int] = {}  # (kind, id): the step of a comment, edited in place
    gone: set[int] = set()
    for e in events:
        for login in (e["opener"], e["login"]):
            if login and login not in pr.logins:
                pr.logins.append(login)
        for sha, seen in ((e["base_sha"], pr.bases), (e["head_sha"], pr.heads)):
            if sha and sha not in seen:
                seen.append(sha)
        pr.merged |= bool(e["merged"])
        kind, action = e["type"], e["action"]
        if e["opener"] and (pr.opener is None or kind == "PullRequestEvent" and action in ("opened", "edited")):
            pr.opener, pr.opener_type = e["opener"], e["opener_type"]
            pr.title, pr.description = e["title"] or pr.title, e["opener_text"]
        if kind == "PullRequestEvent":
            if action == "opened" or not any(s.kind == "opened" for s in pr.steps):  # as carried: see docstring
                pr.steps.append(Step("opened", pr.opener or e["login"], pr.opener_type, e["head_sha"], "opened"))
            if action in ("closed", "reopened"):
                pr.steps.append(Step("status", e["login"], e["user_type"], e["head_sha"], action,
                                     merged=bool(e["merged"])))  # fmt: skip
            continue
        step_kind = {"IssueCommentEvent": "comment", "PullRequestReviewEvent": "review",
                     "PullRequestReviewCommentEvent": "review_comment"}.get(kind)  # fmt: skip
        if step_kind is None:  # IssuesEvent of the pull request's issue: its title and text, nothing rendered
            continue
        if not any(s.kind == "opened" for s in pr.steps) and pr.opener:
            pr.steps.append(Step("opened", pr.opener, pr.opener_type, e["head_sha"], "opened"))
        if step_kind == "review" and (e["review_state"] or "").lower() == "approved":
            pr.approved = True
        key = (step_kind, e["comment_id"] or "")
        if action == "deleted":
            if key in by_id:
                gone.add(by_id[key])
            continue
        step = Step(step_kind, e["login"], e["user_type"], e["head_sha"], action if step_kind == "comment" else None,
                    e["text"], e["comment_id"], state=e["review_state"], path=e["path"], hunk=e["diff_hunk"],
                    position=e["position"], reply_to_review=e["reply_to_review"],
                    reply_to_comment=e["reply_to_comment"])  # fmt: skip
        if key in by_id and key[1]:  # edited: as it last read, where it was first written
            pr.steps[by_id[key]] = step
        else:
            by_id[key] = len(pr.steps)
            pr.steps.append(step)
    pr.steps = [s for i, s in enumerate(pr.steps) if i not in gone]
    return pr


@dataclass(frozen=True)
class Result:
    """A pull request's document when kept, else the rule that removed it, and what the steps did."""

    text: str | None
    reason: str | None
    detail: str | None
    events: int = 0
    authors: int = 0
    bot_events: int = 0
    truncated: int = 0
    files: int = 0
    base: str | None = None  # the base revision
    licenses: list[str] | None = None  # detected in its repository's license files at the base


def chance(seed: int, repo: str, number: int, what: str) -> random.Random:
    """A generator of its own per pull request and purpose: the same draws whatever the workers."""
    digest = hashlib.sha256(f"{seed}\0{repo}\0{number}\0{what}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def keep_rate(count: int, sampling: dict[str, Any]) -> float:
    """StarCoder2's per-repository rate for a repository of `count` pull requests."""
    if count <= sampling["until"]:
        return sampling["intercept"] + sampling["slope"] * count
    return sampling["top"] / count


def judge(pr: PullRequest, rules: dict[str, Any], bot_rules: threads.Rules, count: int | None,
          seed: int) -> tuple[str, str] | None:  # fmt: skip
    """(reason, detail) when a filter of step 2 removes the pull request; None when it goes on."""
    conf, title = rules["pull_requests"], rules["title"]
    if pr.opener and threads.is_bot(pr.opener, pr.opener_type, bot_rules):
        return "pr_bot_opener", "opened by a bot"
    if len(pr.title.strip()) < title["min_chars"]:
        return "pr_title_short", f"title of {len(pr.title.strip())} characters < {title['min_chars']}"
    low = pr.title.lower()
    if word := next((w for w in title["excluded_words"] if w in low), None):
        return "pr_title_excluded", f"the title mentions {word!r}"
    if conf["require_description"] and not (pr.description or "").strip():
        return "pr_no_description", "no description"
    humans = [s for s in pr.steps if s.kind in ("comment", "review", "review_comment")
              and not threads.is_bot(s.login, s.user_type, bot_rules)]  # fmt: skip
    if conf["require_review"] and not humans:
        return "pr_no_review", "no review or comment by a human"
    if conf["require_approved_or_merged"] and not (pr.approved or pr.merged):
        return "pr_not_approved_or_merged", "neither approved nor merged"
    rebases = len(pr.bases) - 1 - (1 if pr.merged and len(pr.bases) > 1 else 0)
    if rebases > conf["max_rebases"]:
        return "pr_base_changed", f"{len(pr.bases)} base revisions"
    if count is not None:
        rate = keep_rate(count, rules["sampling"])
        if chance(seed, pr.repo, pr.number, "sample").random() >= rate:
            return "sampled_repository", f"{count} pull requests in the repository, kept with p={rate:.3f}"
    return None


@dataclass
class BaseFile:
    path: str
    language: str | None
    text: str
    start: int  # the changed lines, over every head: [start, end) of the base's lines
    end: int


def _ops(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    return [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]


def _file_problem(path: str, text: str, language: str | None, files: dict[str, Any]) -> str | None:
    """Why a base file is left out by step 3's filters, or None."""
    import enry

    kind = enry.get_language_type(language) if language else "unknown"
    if language not in files["languages"] and kind not in files["types"]:
        return f"{language or 'no language'} ({kind})"
    if not text:
        return "empty"
    alnum = sum(c.isalnum() for c in text) / len(text)
    if alnum <= files["min_alnum_fraction"]:
        return f"alphanumeric share {alnum:.2f}"
    hexed = 4 * len(_HEX.findall(text)) / len(text)
    if hexed >= files["max_hex_fraction"]:
        return f"\\x escapes share {hexed:.2f}"
    lines = text.split("\n")
    if len(lines) >= files["max_lines"]:
        return f"{len(lines)} lines"
    if language not in files["documentation"]:
        lengths = [len(line) for line in lines]
        if sum(lengths) / len(lengths) >= files["max_mean_line"] or max(lengths) >= files["max_line"]:
            return "long lines"
    return None


def base_files(changes: dict[str, list[Change]], rules: dict[str, Any]) -> tuple[list[BaseFile], list[str]]:
    """The base files of step 3 with their changed ranges over every head, and why the others were left out."""
    import enry

    found: dict[str, BaseFile] = {}
    left_out: list[str] = []
    for head in changes.values():
        for change in head:
            if change.path in found:
                file = found[change.path]
            else:
                try:
                    text = change.base.decode("utf-8")
                except UnicodeDecodeError:
                    left_out.append(f"{change.path}: not UTF-8")
                    continue
                language = enry.get_language(change.path, change.base) or None
                if problem := _file_problem(change.path, text, language, rules["files"]):
                    left_out.append(f"{change.path}: {problem}")
                    continue
                file = found[change.path] = BaseFile(change.path, language, text, 1 << 62, 0)
            ops = _ops(file.text.splitlines(), change.head.decode("utf-8", "replace").splitlines())
            if ops:
                file.start, file.end = min(file.start, ops[0][1]), max(file.end, ops[-1][2])
    kept = [f for f in found.values() if f.end > 0 or f.start == 0]
    for f in kept:
        f.start = min(f.start, f.end)
    return kept, sorted(set(left_out))


def _window(file: BaseFile, conf: dict[str, Any], rng: random.Random) -> tuple[int, str]:
    """The rendered part of a base file: (its first line, its text)."""
    lines = file.text.splitlines()
    if rng.random() < conf["whole_base_rate"]:
        return 0, file.text
    before, after = rng.randrange(conf["base_context"]), rng.randrange(conf["base_context"])
    start, end = max(0, file.start - before), min(len(lines), file.end + after)
    return start, "\n".join(lines[start:end])


def hunks(base: list[str], head: list[str], context: int) -> str:
    """The unified-diff hunks between two lists of lines, `context` lines around each change, changes closer
    than that joined into one hunk, lines numbered from 1 (the caller's window); no trailing newline."""
    groups: list[list[tuple[str, int, int, int, int]]] = []
    for op in _ops(base, head):
        if groups and op[1] - context <= groups[-1][-1][2]:
            groups[-1].append(op)
        else:
            groups.append([op])
    out = []
    for g, ops in enumerate(groups):
        first, last = ops[0], ops[-1]
        start = max(first[1] - context, groups[g - 1][-1][2] if g else 0)
        stop = min(last[2] + context, groups[g + 1][0][1] if g + 1 < len(groups) else len(base))
        head_start, head_stop = first[3] - (first[1] - start), last[4] + (stop - last[2])
        lines = [" " + line for line in base[start : first[1]]]
        for i, (_, b1, b2, h1, h2) in enumerate(ops):
            lines += ["-" + line for line in base[b1:b2]] + ["+" + line for line in head[h1:h2]]
            if i + 1 < len(ops):
                lines += [" " + line for line in base[b2 : ops[i + 1][1]]]
        lines += [" " + line for line in base[last[2] : stop]]
        header = f"@@ -{start + 1},{stop - start} +{head_start + 1},{head_stop - head_start} @@"
        out.append(tk.PR_DIFF_HUNK + header + "\n" + "\n".join(lines))
    return "".join(out)


class _Text:
    """Step 4's cleaning of one text, counting what it truncated."""

    def __init__(self, rules: dict[str, Any]) -> None:
        self.conf = rules["text"]
        self.truncated = 0

    def __call__(self, text: str | None, *, keep_short: bool = False) -> str | None:
        """The cleaned text; None when it is too short to keep."""
        conf = self.conf
        text = _HTML_COMMENT.sub("", threads.strip_reply(text or ""))
        text, cut = threads.cut_lines(text, conf["truncate_over"], conf["keep_head"], conf["keep_tail"],
                                      conf["truncated_mark"])  # fmt: skip
        self.truncated += cut
        if len(text) < conf["min_chars"] and not keep_short:
            return None
        return text[: conf["max_chars"]]


def _said(login: str, text: str | None) -> str:
    return f"{login}: {text}" if text else login


def _review_hunk(step: Step, skipped: int, limit: int) -> str:
    """A review comment's diff hunk, its header renumbered from the rendered base's first line."""
    hunk = step.hunk or ""
    if len(hunk) > limit:
        return tk.PR_DIFF_HUNK + "[OMITTED]"
    first, _, rest = hunk.partition("\n")
    if m := _HUNK_HEADER.match(first):
        old, new = max(0, int(m.group(1)) - skipped), max(0, int(m.group(3)) - skipped)
        first = f"@@ -{old}{m.group(2) or ''} +{new}{m.group(4) or ''} @@{first[m.end() :]}"
    return tk.PR_DIFF_HUNK + first + ("\n" + rest if rest else "")


def render(pr: PullRequest, changes: dict[str, list[Change]], rules: dict[str, Any], bot_rules: threads.Rules,
           seed: int) -> Result:  # fmt: skip
    """Steps 3-6 of the module docstring, for a pull request whose code was read (`changes`: per head, the files
    it modifies)."""
    conf, text_conf = rules["render"], rules["text"]
    rng = chance(seed, pr.repo, pr.number, "render")
    files, left_out = base_files(changes, rules)
    if not files:
        detail = "no base file modified" if not left_out else f"{len(left_out)} base files left out: {left_out[0]}"
        return Result(None, "pr_no_files", detail[:300])
    if sum(len(f.text) for f in files) > 10 * conf["max_chars"]:  # far past any document kept: not rendered
        return Result(None, "pr_too_large", f"{sum(len(f.text) for f in files)} characters of base code")
    windows = {f.path: _window(f, conf, rng) for f in files}
    total = max(1, sum(len(text) for _, text in windows.values()))
    for f in files:  # lock files, API specs and the like: each kept with a small probability
        sub = rules["sampling"]["files"].get(f.language)
        if sub and (any(k in f.path for k in sub["keys"]) or len(windows[f.path][1]) / total > sub["share"]):
            if rng.random() >= sub["keep"]:
                del windows[f.path]
    if not windows:
        return Result(None, "pr_no_files", "every base file sampled out (lock files, API specifications)")

    text = _Text(rules)
    steps = list(pr.steps)
    talk = ("comment", "review", "review_comment")  # a bot's status change stays: it says the pull request merged
    bots = [s.kind in talk and threads.is_bot(s.login, s.user_type, bot_rules) for s in steps]
    callers = [(s.text or "") if s.kind == "comment" else None for s in steps]  # only a comment calls a bot
    drop = threads.bot_drops(bots, callers, [s.login for s in steps], bot_rules)
    kept = [s for s, d in zip(steps, drop, strict=True) if not d]
    description = text(pr.description)
    if description is None:
        return Result(None, "pr_description_short", f"description under {text_conf['min_chars']} characters "
                      "once cleaned")  # fmt: skip

    by_head = {head: {c.path: c for c in head_changes} for head, head_changes in changes.items()}
    context = rng.randrange(*conf["hunk_context"])

    def diff(head: str) -> str:
        modified = by_head.get(head, {})
        out = tk.PR_DIFF
        parts = []
        for path, (start, _) in windows.items():
            if path in modified:
                base = modified[path].base.decode("utf-8").splitlines()[start:]
                new = modified[path].head.decode("utf-8", "replace").splitlines()[start:]
                if body := hunks(base, new, context):
                    parts.append(tk.PR_FILE + path + body)
        return out + ("".join(parts) if parts else "[DIFFS OMITTED]")

    parts: list[str] = []
    head: str | None = None
    authors: list[str] = []
    opened = False
    for step in kept:
        if step.kind == "opened":
            if opened:
                continue
            opened = True
            title = pr.title.strip()[: rules["title"]["max_chars"]]
            parts.append(f"{tk.PR}Title: {title}\n{_said(step.login, description)}{tk.PR_STATUS}opened"
                         f"{tk.REPO_NAME}{_REPO}{tk.PR_BASE}")  # fmt: skip
            parts += [f"{tk.PR_FILE}{path}{tk.PR_BASE_CODE}{code}" for path, (_, code) in windows.items()]
            head = step.head or (pr.heads[0] if pr.heads else None)
            if head:
                parts.append(diff(head))
            authors.append(step.login)
            continue
        if not opened:  # before the opening (GH Archive began later): nothing to attach it to
            continue
        if step.kind != "comment" and step.head and step.head != head and step.head in by_head:
            head = step.head
            parts.append(diff(head))
        if step.kind == "status":
            merged = f"{tk.PR_IS_MERGED}{step.merged}" if step.action == "closed" else ""
            parts.append(f"{tk.PR}{step.login}{tk.PR_STATUS}{step.action}{merged}")
        elif step.kind == "comment":
            if (body := text(step.text)) is None:
                continue
            parts.append(f"{tk.PR_COMMENT}{_said(step.login, body)}{tk.PR_EVENT_ID}{step.id}{tk.PR_STATUS}"
                         f"{step.action or 'created'}")  # fmt: skip
        elif step.kind == "review":
            body = text(step.text, keep_short=True) if step.text else None
            parts.append(f"{tk.PR_REVIEW}{_said(step.login, body)}{tk.PR_EVENT_ID}{step.id}{tk.PR_REVIEW_STATE}"
                         f"{(step.state or '').lower()}")  # fmt: skip
        else:
            if (body := text(step.text)) is None:
                continue
            replies = (f"{tk.PR_REPLY_TO_REVIEW}{step.reply_to_review}" if step.reply_to_review else "") + (
                f"{tk.PR_REPLY_TO_COMMENT}{step.reply_to_comment}" if step.reply_to_comment else "")  # fmt: skip
            skipped = windows[step.path][0] if step.path in windows else 0
            parts.append(f"{tk.PR_REVIEW_COMMENT}{tk.PR_EVENT_ID}{step.id}{replies}{tk.PR_FILE}{step.path or ''}"
                         f"{tk.PR_HUNK_LINE}{step.position or 0}"
                         f"{_review_hunk(step, skipped, text_conf['max_review_hunk_chars'])}"
                         f"{tk.PR_COMMENT}{_said(step.login, body)}")  # fmt: skip
        authors.append(step.login)
    names = threads.anonymiser(pr.logins, authors)
    document = names("".join(parts)).replace(_REPO, pr.repo, 1)  # the repository's name is not a login's
    shape = {"events": len(authors), "authors": len(set(authors)), "bot_events": sum(drop),
             "truncated": text.truncated, "files": len(windows), "base": pr.bases[0]}  # fmt: skip
    if len(document) < conf["min_chars"]:
        return Result(None, "too_short", f"{len(document)} characters < {conf['min_chars']}", **shape)
    if len(document) > conf["max_chars"]:
        return Result(None, "too_long", f"{len(document)} characters > {conf['max_chars']}", **shape)
    return Result(document, None, None, **shape)


def clean(pr: PullRequest, rules: dict[str, Any], bot_rules: threads.Rules, code: Repositories,
          count: int | None, seed: int, graph: "GraphCode | None" = None) -> Result:  # fmt: skip
    """Every step of the module docstring: the code from the git repositories, else from the graph export."""
    if verdict := judge(pr, rules, bot_rules, count, seed):
        return Result(None, *verdict)
    base = pr.bases[0] if pr.bases else None
    if base is None or not pr.heads:
        return Result(None, "pr_code_not_found", "GH Archive names no base or head revision")
    thread = f"{pr.repo}#{pr.number}"
    changes, licenses = code.files(pr.repo, base, pr.heads), lambda: code.licenses(pr.repo, base)
    if changes is None and graph is not None:
        changes, licenses = graph.files(thread, pr.heads), lambda: graph.licenses(thread)
    if changes is None:
        where = "no repository of --gharchive-code" if code.git_dirs(pr.repo) == [] else "no repository found"
        where += " nor the graph export" if graph is not None else ""
        return Result(None, "pr_code_not_found", f"{where} holds its base and head revisions")
    result = render(pr, changes, rules, bot_rules, seed)
    return result if result.text is None else replace(result, licenses=licenses())

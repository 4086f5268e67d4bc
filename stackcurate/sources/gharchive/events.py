"""GH Archive's hourly files into the events of issues and pull requests, sent to partitions by thread.

GH Archive (gharchive.org) writes one gzipped JSON-lines file per hour, `YYYY-MM-DD-H.json.gz`, one GitHub event
per line. A thread (an issue, or a pull request with the issue comments on it) has events in many hours, so
they meet in one place through a shuffle: each hourly file is one task that keeps the events of
THREAD_TYPES, in a compact row each (EVENT_SCHEMA), and writes them to the partition of their thread
(core/shuffle.py); a shard then reads one partition and holds every event of its threads, and no other.

A line that is not an event (not JSON, cut short, no `type`) is an error row of its own, with the file and the
line's number; the file's other lines are read. A file whose gzip stream ends early keeps the lines before.
"""

import hashlib
import json
import urllib.request
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from stackcurate.core import io, shuffle

URL_SCHEMES = ("http://", "https://")  # read with urllib (pyarrow has no HTTP filesystem)
THREAD_TYPES = frozenset(
    {"IssuesEvent", "IssueCommentEvent", "PullRequestEvent", "PullRequestReviewEvent", "PullRequestReviewCommentEvent"}
)
EVENT_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string()),  # owner/name#number: the thread (an issue on a pull request is the PR)
        pa.field("is_pr", pa.bool_()),
        pa.field("repo", pa.string()),
        pa.field("number", pa.int64()),
        pa.field("id", pa.string()),  # GH Archive's event id: duplicates across files are dropped by it
        pa.field("created_at", pa.string()),
        pa.field("type", pa.string()),
        pa.field("action", pa.string()),
        pa.field("login", pa.string()),  # who did it
        pa.field("user_type", pa.string()),  # `User` or `Bot`, where the payload says
        pa.field("text", pa.large_string()),  # the comment's or review's body
        pa.field("comment_id", pa.string()),
        pa.field("title", pa.large_string()),  # the issue or PR as the event carries it
        pa.field("opener", pa.string()),
        pa.field("opener_type", pa.string()),
        pa.field("opener_text", pa.large_string()),
        pa.field("merged", pa.bool_()),
        pa.field("base_sha", pa.string()),
        pa.field("head_sha", pa.string()),
        pa.field("review_state", pa.string()),
        pa.field("path", pa.string()),  # a review comment's file
        pa.field("diff_hunk", pa.large_string()),
        pa.field("position", pa.int64()),  # a review comment's line in its diff hunk (`original_position`)
        pa.field("reply_to_review", pa.string()),  # a review comment's review
        pa.field("reply_to_comment", pa.string()),  # the review comment it answers
        pa.field("file", pa.string()),  # the hourly file, and for a bad line its number and why
        pa.field("line", pa.int64()),
        pa.field("error", pa.string()),
    ]
)


BATCH_ROWS = 8192  # thread events held as Python dicts at a time, before they become Arrow columns


def partition_of(key: str, partitions: int) -> int:
    """The partition of a thread: a hash of its key, the same on every worker and run."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") % partitions


def split_task(uri: str, writer: int, root: str, partitions: int) -> dict[str, int]:
    """Read one hourly file and write its thread events to their partitions under `root` (one file, see
    core/shuffle.py); returns the counts of what it read."""
    rows: list[dict[str, Any]] = []
    counts = {"lines": 0, "thread_events": 0, "other_events": 0, "bad_lines": 0}
    name = uri.rsplit("/", 1)[-1]
    fs, path = io.filesystem(root)
    sink = shuffle.PartitionedWriter(fs, path, writer, EVENT_SCHEMA, partitions)
    for number, line, error in _lines(uri):
        counts["lines"] += 1
        row = None if error else _event(line, name, number)
        if row is None or isinstance(row, str):
            if error or row is not None:
                counts["bad_lines"] += 1
                rows.append(_bad(uri, number, error or str(row)))
            else:
                counts["other_events"] += 1
        else:
            counts["thread_events"] += 1
            rows.append(row)
        if len(rows) >= BATCH_ROWS:  # as Arrow columns: a row as a Python dict takes several times its bytes
            _send(sink, rows, partitions)
            rows = []
    _send(sink, rows, partitions)
    sink.commit()
    return counts


def _send(sink: shuffle.PartitionedWriter, rows: list[dict[str, Any]], partitions: int) -> None:
    table = pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)
    parts = np.array([partition_of(k, partitions) for k in table.column("key").to_pylist()], dtype=np.int64)
    sink.write(table, parts)


def _bad(uri: str, number: int, error: str) -> dict[str, Any]:
    # An error row goes to the partition of its file, so that one shard reports it. Not the line itself: it may
    # hold logins, and error rows are not redacted.
    return {"key": f"~{uri}", "file": uri, "line": number, "error": error}


def url_size(uri: str) -> int:
    """A URL's size in bytes from a HEAD request's Content-Length; 0 when the server does not tell."""
    try:
        with urllib.request.urlopen(urllib.request.Request(uri, method="HEAD"), timeout=60) as answer:  # noqa: S310
            return int(answer.headers.get("Content-Length") or 0)
    except (OSError, ValueError):
        return 0


def _open(uri: str) -> BinaryIO:
    if uri.startswith(URL_SCHEMES):
        return urllib.request.urlopen(uri, timeout=60)  # noqa: S310 - the user's own URL
    fs, path = io.filesystem(uri)
    return fs.open_input_stream(path, compression=None)  # type: ignore[return-value] - gzip is read below


def _lines(uri: str) -> Iterator[tuple[int, bytes, str | None]]:
    """(line number from 1, the line, an error) for each line; a stream that ends early gives its whole lines,
    then one error. By hand with zlib, not gzip.GzipFile: that one loses the lines of the buffer it was filling
    when the stream breaks."""
    number, rest = 0, b""
    with _open(uri) as raw:
        inflate, fed = zlib.decompressobj(wbits=31), False  # gzip framing; fed: the member has begun
        try:
            while chunk := raw.read(1 << 20):
                while chunk:
                    data, fed = inflate.decompress(chunk), True
                    chunk = b""
                    if inflate.eof:  # a file of several gzip members: the next one starts in `unused_data`
                        chunk, inflate, fed = inflate.unused_data, zlib.decompressobj(wbits=31), False
                    *lines, rest = (rest + data).split(b"\n")
                    for line in lines:
                        number += 1
                        yield number, line, None
            if fed or number == 0 and not rest:
                raise zlib.error("the stream ends before its end marker")
        except zlib.error as exc:
            yield number + 1, b"", f"truncated_file: the gzip stream ends early ({exc})"
            return
    if rest:
        number += 1
        yield number, rest, None


def _event(line: bytes, name: str, number: int) -> dict[str, Any] | str | None:
    """The row of a thread event; None for another event; a string saying why a line is not an event."""
    try:
        event = json.loads(line)
    except ValueError as exc:
        return f"malformed_line: {exc}"
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return "malformed_line: not an event (no `type`)"
    kind = event["type"]
    if kind not in THREAD_TYPES:
        return None
    try:
        return _row(event, kind)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"malformed_event: {kind} without {exc}"


def _user(obj: dict[str, Any] | None) -> tuple[str | None, str | None]:
    user = (obj or {}).get("user") or {}
    return user.get("login"), user.get("type")


def _row(event: dict[str, Any], kind: str) -> dict[str, Any]:
    payload = event["payload"]
    repo = event["repo"]["name"]
    actor = event["actor"]
    row: dict[str, Any] = {"repo": repo, "id": str(event["id"]), "created_at": event["created_at"], "type": kind,
                           "action": payload.get("action"), "login": actor["login"],
                           "user_type": None}  # fmt: skip
    if kind in ("IssuesEvent", "IssueCommentEvent"):
        issue = payload["issue"]
        opener, opener_type = _user(issue)
        row |= {"number": int(issue["number"]), "is_pr": bool(issue.get("pull_request")), "title": issue.get("title"),
                "opener": opener, "opener_type": opener_type, "opener_text": issue.get("body")}  # fmt: skip
        if kind == "IssueCommentEvent":
            comment = payload["comment"]
            login, user_type = _user(comment)
            row |= {"login": login or actor["login"], "user_type": user_type, "text": comment.get("body"),
                    "comment_id": str(comment["id"])}  # fmt: skip
        else:
            row["user_type"] = opener_type if actor["login"] == opener else None
    else:
        pr = payload["pull_request"]
        opener, opener_type = _user(pr)
        base, head = pr.get("base") or {}, pr.get("head") or {}
        row |= {"number": int(pr["number"]), "is_pr": True, "title": pr.get("title"), "opener": opener,
                "opener_type": opener_type, "opener_text": pr.get("body"), "merged": pr.get("merged"),
                "base_sha": base.get("sha"), "head_sha": head.get("sha")}  # fmt: skip
        if kind == "PullRequestReviewEvent":
            review = payload["review"]
            login, user_type = _user(review)
            row |= {"login": login or actor["login"], "user_type": user_type, "text": review.get("body"),
                    "comment_id": str(review["id"]), "review_state": review.get("state")}  # fmt: skip
        elif kind == "PullRequestReviewCommentEvent":
            comment = payload["comment"]
            login, user_type = _user(comment)
            row |= {"login": login or actor["login"], "user_type": user_type, "text": comment.get("body"),
                    "comment_id": str(comment["id"]), "path": comment.get("path"),
                    "diff_hunk": comment.get("diff_hunk"), "position": _int(comment.get("original_position")),
                    "reply_to_review": _id(comment.get("pull_request_review_id")),
                    "reply_to_comment": _id(comment.get("in_reply_to_id"))}  # fmt: skip
    row["key"] = f"{repo}#{row['number']}"
    return row


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _id(value: Any) -> str | None:
    return None if value is None else str(value)

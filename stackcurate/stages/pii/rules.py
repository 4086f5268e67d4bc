"""What is found but not redacted: StarCoder's post-processing rules, applied to pattern and model spans alike.

- spans of 3 characters or fewer;
- IP addresses that do not parse, private/reserved/loopback ones, and popular public DNS servers;
- example emails (reserved example domains and placeholder mailboxes, the annotation scheme's
  EMAIL_EXAMPLE) and emails in a license or copyright line (EMAIL_LICENSE);
- keys that are not gibberish (gibberish-detector, as BigCode used it) or are 8 characters or fewer;
- names of one word (NAME must be a full name);
- usernames that are a repository's path segment (`github.com/owner/<repo>`) or a code identifier
  (`x.<name>`, `<name>(`, `<name>.attr`): what the model takes for handles in code;
- placeholder passwords and keys: `${VAR}`, `{password}`, `<password>`, `****`, `your_password`, `changeme`.

`keep(...)` returns, for each span, None (redact it) or the rule that spared it, so the tests and the
evaluation can say why a span was not redacted.
"""

import functools
import ipaddress
import re
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stackcurate.stages.pii.entities import EMAIL, IP_ADDRESS, KEY, NAME, PASSWORD, USERNAME

if TYPE_CHECKING:
    from gibberish_detector.detector import Detector

POPULAR_DNS = frozenset(
    {
        "8.8.8.8", "8.8.4.4", "1.1.1.1", "1.0.0.1", "76.76.19.19", "76.223.122.150", "9.9.9.9",
        "149.112.112.112", "208.67.222.222", "208.67.220.220", "8.26.56.26", "8.20.247.20", "94.140.14.14",
        "94.140.15.15",
    }
)  # fmt: skip
# RFC 2606 / RFC 6761 reserved names, and domains used as placeholders in documentation.
_EXAMPLE_DOMAIN = re.compile(
    r"(?i)(?:^|\.)(?:example\.(?:com|net|org|edu)|example|test|invalid|localhost|local|domain\.(?:com|org|net)|"
    r"email\.com|mail\.com|company\.com|yourdomain\.\w+|yourcompany\.\w+|acme\.(?:com|org)|foo\.(?:com|org|bar)|"
    r"bar\.(?:com|org)|host\.com|site\.com|somewhere\.com|dummy\.com|sample\.com)$"
)
_EXAMPLE_MAILBOX = re.compile(
    r"(?i)^(?:user(?:name)?|name|email|e-?mail|your[._\-]?(?:email|name|mail|address)?|you|me|someone|somebody|"
    r"foo|bar|baz|test|tester|example|john\.?doe|jane\.?doe|first\.?last|firstname\.?lastname|"
    r"noreply|no-reply|do-?not-?reply|xxx+)$"
)
_LICENSE_LINE = re.compile(r"(?i)copyright|\(c\)|©|licen[cs]e|all rights reserved|spdx")
_PLACEHOLDER = re.compile(
    r"(?i)^(?:\$\{?[\w.:\-]*\}?|\{\{?[^}]*\}?\}|<[^>]*>|%\(?\w*\)?s|\*+|x+|\.+|-+|#+|"
    r"(?:your|my|the|some|enter|insert|put|add)[_\- ]?\w*|\w*(?:placeholder|example|sample|dummy|changeme|"
    r"change[_\-]?me|redacted|replace[_\-]?me|todo|fixme|xxxx)\w*|password|passwd|secret|pass|test|none|null|"
    r"true|false|undefined|empty|admin|root|guest|default)$"
)


@dataclass
class Span:
    """A detected span: character offsets into the original text (code points, not bytes)."""

    entity: str
    start: int
    end: int
    score: float
    detector: str


@functools.cache
def _gibberish() -> "Detector":
    """gibberish-detector's character-bigram model, trained on the English prose CPython ships (`pydoc_data`).

    BigCode trained the same detector on an English corpus; that corpus is not downloadable here, and the
    Python documentation topics (~460 KB of English) are on every machine that runs this.
    """
    from pydoc_data.topics import topics

    from gibberish_detector import detector, trainer

    text = "\n".join(topics[k] for k in sorted(topics))
    return detector.Detector(trainer.train_on_content(text, string.ascii_letters), threshold=4.0)


def is_gibberish(value: str) -> bool:
    letters = "".join(c for c in value if c in string.ascii_letters)
    if len(letters) < 4:  # digits and symbols only: random for our purpose
        return True
    return _gibberish().is_gibberish(value)


def _ip_rule(value: str) -> str | None:
    try:
        ip = ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return "ip_unparseable"
    if value in POPULAR_DNS:
        return "ip_dns_server"
    if not ip.is_global or ip.is_multicast:
        return "ip_private"
    return None


def _line_of(text: str, start: int, end: int) -> str:
    lo = text.rfind("\n", 0, start) + 1
    hi = text.find("\n", end)
    return text[lo : hi if hi >= 0 else len(text)]


def _email_rule(value: str, text: str, start: int, end: int) -> str | None:
    mailbox, _, domain = value.rpartition("@")
    if _EXAMPLE_DOMAIN.search(domain) or _EXAMPLE_MAILBOX.match(mailbox):
        return "email_example"
    if _LICENSE_LINE.search(_line_of(text, start, end)):
        return "email_license"
    return None


def spared_by(span: Span, text: str) -> str | None:
    """The rule that spares `span` from redaction, or None."""
    value = text[span.start : span.end]
    if len(value.strip()) <= 3:
        return "too_short"
    if span.entity == IP_ADDRESS:
        return _ip_rule(value)
    if span.entity == EMAIL:
        return _email_rule(value, text, span.start, span.end)
    if span.entity in (KEY, PASSWORD) and _PLACEHOLDER.match(value.strip()):
        return "placeholder"
    if span.entity == KEY and span.detector != "pattern:private_key_block":
        if len(value) <= 8:
            return "key_too_short"
        if not is_gibberish(value):
            return "key_not_gibberish"
    if span.entity == NAME and len(value.split()) < 2:
        return "name_one_word"
    if span.entity == USERNAME:
        return _username_rule(text, span.start, span.end)
    return None


# A repository, not its owner: the second path segment of a forge URL (`github.com/owner/<repo>`).
_REPO_PATH = re.compile(r"(?i)(?:github\.com|gitlab\.com|bitbucket\.org)/[\w.-]+/$")


def _username_rule(text: str, start: int, end: int) -> str | None:
    """Usernames the model takes from code: a repository path segment, or an identifier (`obj.attr`, `f(`)."""
    if _REPO_PATH.search(text, max(0, start - 100), start):
        return "username_repository"
    if text.startswith((".github.io", ".gitlab.io"), end):  # a user's pages: `<user>.github.io`
        return None
    before, after = text[start - 1 : start], text[end : end + 2]
    if before == "." or after[:1] == "(" or (after[:1] == "." and after[1:2].isalpha()):
        return "username_identifier"
    return None


def resolve_overlaps(spans: list[Span]) -> list[Span]:
    """Non-overlapping spans, in text order: the longer span wins, then the higher score."""
    chosen: list[Span] = []
    for span in sorted(spans, key=lambda s: (-(s.end - s.start), -s.score, s.start, s.entity)):
        if all(span.end <= c.start or span.start >= c.end for c in chosen):
            chosen.append(span)
    return sorted(chosen, key=lambda s: s.start)

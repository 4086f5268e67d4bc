"""Replacement, as StarCoder did it: a tag per type, and IPs mapped into a fixed private pool of the same family.

The stage replaces only the spans of the types in its `redact` setting (StarCoder's default leaves USERNAME
in the text); the others are recorded with no replacement.

The same address always gets the same replacement within a file and the texts derived from it (first seen,
first in the pool; a sixth distinct address of a family wraps around), so code that compares addresses still
reads sensibly. A value found once is found wherever else it occurs in the file's texts (`with_repeats`), and
is redacted there if its type is.
"""

import re

from stackcurate.stages.pii import escapes
from stackcurate.stages.pii.entities import IP_ADDRESS, USERNAME
from stackcurate.stages.pii.rules import Span, resolve_overlaps

REPEAT = "same_value"  # the detector of a span found as another span's value
MIN_REPEAT = 4  # shorter values are spared as too short when detected, so they are not searched for either
# What the model takes for a username in code is often a word that is also an identifier (`admin`, `data`),
# and a value of letters alone may be a word of the code (`"passed": "green"` reads like a password):
# redacting their every occurrence would spread one mistake over the file.
NO_REPEAT = frozenset({USERNAME})
_WORD = re.compile(r"[A-Za-z_]+")

TAGS = {
    "NAME": "<NAME>",
    "EMAIL": "<EMAIL>",
    "KEY": "<KEY>",
    "PASSWORD": "<PASSWORD>",
    "USERNAME": "<USERNAME>",
}
IPV4_POOL = ("172.16.31.10", "172.16.58.3", "172.16.17.32", "192.168.127.12", "192.168.3.11")
IPV6_POOL = (
    "fd00:c2b6:b24b:be67:2827:688d:e6a1:6a3b",
    "fd00:a516:7c1b:17cd:6d81:2137:bd2a:2c5b",
    "fc00:e968:6179::de52:7100",
    "fc00:db20:35b:7399::5",
    "fdf8:f53e:61e4::18",
)


def replacements(text: str, spans: list[Span], seen: dict[str, str] | None = None) -> list[str]:
    """The replacement of each span (spans in text order, not overlapping); `seen` maps the addresses already
    replaced (in the other texts of the file) to their replacements, and is updated."""
    seen = {} if seen is None else seen
    out = []
    for span in spans:
        if span.entity != IP_ADDRESS:
            out.append(TAGS[span.entity])
            continue
        value = text[span.start : span.end]
        if value not in seen:
            pool = IPV6_POOL if ":" in value else IPV4_POOL  # (a span from an unescaped view may not parse)
            same_family = sum(1 for v in seen.values() if v in pool)
            seen[value] = pool[same_family % len(pool)]
        out.append(seen[value])
    return out


def redact(text: str, spans: list[Span], with_: list[str]) -> str:
    """`text` with each span replaced by its replacement."""
    parts, last = [], 0
    for span, replacement in zip(spans, with_, strict=True):
        parts.append(text[last : span.start])
        parts.append(replacement)
        last = span.end
    parts.append(text[last:])
    return "".join(parts)


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _forms(value: str) -> set[str]:
    """How a value may be written in a file's texts: as found, unescaped, and escaped inside a JSON string."""
    view = escapes.unescape(value)
    plain = view.text if view is not None else value
    return {value, plain, plain.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")}


def _occurrences(text: str, value: str) -> list[int]:
    """Where `value` occurs in `text` as a whole: not inside a longer word (`abc1` is not in `xabc1`)."""
    found, start = [], text.find(value)
    while start >= 0:
        end = start + len(value)
        # the `n` of a `\n` escape ends no word: a key's lines in a JSON string read `"...\nMIIE..."`
        after_escape = text[start - 2 : start] in ("\\n", "\\r", "\\t")
        inside_word = (start > 0 and _is_word(value[0]) and _is_word(text[start - 1]) and not after_escape) or (
            end < len(text) and _is_word(value[-1]) and _is_word(text[end])
        )
        if not inside_word:
            found.append(start)
        start = text.find(value, start + 1)
    return found


def with_repeats(texts: list[str], spans: list[list[Span]]) -> list[list[Span]]:
    """Each text's spans plus a `same_value` span wherever a value found in any of `texts` occurs again
    (not usernames, nor values of letters alone), in text order and not overlapping. The texts are one file's:
    its content, a notebook's script and cells."""
    values: dict[str, Span] = {}
    for text, found in zip(texts, spans, strict=True):
        for span in (s for s in found if s.entity not in NO_REPEAT):
            for form in _forms(text[span.start : span.end]):
                if len(form) >= MIN_REPEAT and not _WORD.fullmatch(form):
                    values.setdefault(form, span)
    if not values:
        return spans
    out = []
    for text, found in zip(texts, spans, strict=True):
        extra = [
            Span(span.entity, start, start + len(value), span.score, REPEAT)
            for value, span in values.items()
            for start in _occurrences(text, value)
        ]
        # the detected spans come first, so an identical repeat never replaces them
        out.append(resolve_overlaps(found + extra) if extra else found)
    return out

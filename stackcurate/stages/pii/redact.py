"""Replacement, as StarCoder did it: a tag per type, and IPs mapped into a fixed private pool of the same family.

The same address always gets the same replacement within a file (first seen, first in the pool; a sixth
distinct address of a family wraps around), so code that compares addresses still reads sensibly.
"""

import ipaddress

from stackcurate.stages.pii.entities import IP_ADDRESS
from stackcurate.stages.pii.rules import Span

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


def replacements(text: str, spans: list[Span]) -> list[str]:
    """The replacement of each span (spans in text order, not overlapping)."""
    seen: dict[str, str] = {}
    out = []
    for span in spans:
        if span.entity != IP_ADDRESS:
            out.append(TAGS[span.entity])
            continue
        value = text[span.start : span.end]
        if value not in seen:
            pool = IPV6_POOL if ipaddress.ip_address(value.split("%", 1)[0]).version == 6 else IPV4_POOL
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

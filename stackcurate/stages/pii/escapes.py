"""Unescaped views of a text, so that recognizers see the code inside string literals and JSON.

A secret often sits inside one more level of quoting than the recognizers expect: a raw `.ipynb` file is JSON
whose strings hold each source line (`"aws_secret = \\"...\\"\\n"`), a Python string may hold a config file
(`"password = \\"...\\"\\nkey = ..."`), and a notebook cell's source may itself hold such a string. A view
replaces each two-character escape (`\\"`, `\\'`, `\\\\`, `\\/`, `\\n`, `\\r`, `\\t`) by the character it stands
for, so `password = \\"x\\"` reads `password = "x"` and `\\n` ends a line; its spans map back to the original
text's offsets, the escapes inside them included.

Only the lines that hold an escape are unescaped: elsewhere a view would read what the original text already
gave the recognizers, and most code has a `\\n` on a few lines only. The runs of such lines are joined by
newlines into one text per level, so the recognizers read a file's views in one call each.

Names are written with entities too: POD's `Salvador FandiE<ntilde>o`, HTML's `Ren&eacute; Roe` and `&#233;`.
`entity_views` reads the lines where an entity stands for a letter with the letters in place (an entity is
several characters for one, so these views count each one's width).
"""

import html.entities
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

_ESCAPE = re.compile(r"\\([\"'\\/nrt])")
_UNESCAPED = {'"': '"', "'": "'", "\\": "\\", "/": "/", "n": "\n", "r": "\r", "t": "\t"}
# Two levels cover a code cell's string in a raw notebook (JSON, then the language's own string); each level
# costs one more pass of the recognizers over the text.
MAX_DEPTH = 2


@dataclass(frozen=True)
class View:
    """A text with one level of escapes undone.

    Attributes:
        text: The unescaped text.
        escapes: Sorted offsets into `text` of the characters that were two-character escapes.
        parent: The view this one unescapes, or None when that is (a part of) the original text.
        offset: Where that part starts in the original text (for a view without a parent).
    """

    text: str
    escapes: list[int]
    parent: "View | Joined | None" = None
    offset: int = 0
    wider: tuple[int, ...] = ()  # for entities: how many characters the escapes up to each one took beyond one each

    def to_original(self, start: int, end: int) -> tuple[int, int]:
        """The offsets in the original text of `text[start:end]`: every escape before an offset adds its width
        less one (one, for a two-character escape)."""
        start += self._before(start)
        end += self._before(end)
        if self.parent is None:
            return start + self.offset, end + self.offset
        return self.parent.to_original(start, end)

    def _before(self, at: int) -> int:
        """The characters the escapes before `at` took beyond the one each stands for."""
        count = bisect_left(self.escapes, at)
        return self.wider[count - 1] if self.wider and count else count


@dataclass(frozen=True)
class Joined:
    """The views of several runs of lines, joined by newlines into one text.

    Attributes:
        text: The views' texts joined by `\\n` (each stands for the newline after its run in the original).
        starts: Where each view's text starts in `text`.
        parts: The views, one per run, in text order.
    """

    text: str
    starts: list[int]
    parts: list[View]

    def to_original(self, start: int, end: int) -> tuple[int, int]:
        """The offsets in the original text of `text[start:end]`: the start by the view it falls in, the end by
        the view its last character falls in (a joining newline maps to the one after its run)."""
        first = self.parts[i := bisect_right(self.starts, start) - 1]
        last = self.parts[j := bisect_right(self.starts, max(start, end - 1)) - 1]
        return first.to_original(start - self.starts[i], start - self.starts[i])[0], last.to_original(
            end - self.starts[j], end - self.starts[j]
        )[1]


def unescape(text: str, parent: View | Joined | None = None, offset: int = 0) -> View | None:
    """`text` (which starts at `offset` of the original) with one level of escapes undone, or None when it has
    none."""
    parts: list[str] = []
    escapes: list[int] = []
    last = size = 0
    for match in _ESCAPE.finditer(text):
        parts.append(text[last : match.start()])
        size += match.start() - last
        escapes.append(size)
        parts.append(_UNESCAPED[match.group(1)])
        size += 1
        last = match.end()
    if not escapes:
        return None
    parts.append(text[last:])
    return View("".join(parts), escapes, parent, offset)


def escaped_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive lines of `text` that hold an escape."""
    runs: list[tuple[int, int]] = []
    match = _ESCAPE.search(text)
    while match is not None:
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        if runs and start <= runs[-1][1] + 1:  # the next line: one run
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((start, end))
        match = _ESCAPE.search(text, end)
    return runs


def views(text: str, depth: int = MAX_DEPTH) -> list[Joined | View]:
    """The unescaped views of `text`'s lines with escapes, one per level of escaping (up to `depth`), outermost
    first: the first joins each run's view, the next unescapes that."""
    parts = [view for start, end in escaped_lines(text) if (view := unescape(text[start:end], offset=start))]
    if not parts:
        return []
    starts = [0]
    for part in parts[:-1]:
        starts.append(starts[-1] + len(part.text) + 1)
    out: list[Joined | View] = [Joined("\n".join(part.text for part in parts), starts, parts)]
    while len(out) < depth and (view := unescape(out[-1].text, out[-1])) is not None:
        out.append(view)
    return out


# POD's `E<ntilde>`, `E<233>`, `E<0xe9>`; HTML's `&ntilde;`, `&#233;`, `&#xe9;`.
_ENTITY = re.compile(r"E<(\w+)>|&(#?\w+);")
_MARKUP = frozenset("\"'<>&")  # what HTML escapes in code it shows


def _entity_char(name: str, pod: bool) -> str | None:
    """The character an entity's name stands for (`ntilde`; POD's `233` and `0xe9`, HTML's `#233` and `#xe9`), or
    None (`&624;` is no HTML entity: a password's `&` and digits)."""
    try:
        if pod and name.isdigit():
            return chr(int(name))
        if pod and name[:2] in ("0x", "0X"):
            return chr(int(name[2:], 16))
        if not pod and name.startswith("#"):
            code = name[1:]
            return chr(int(code[1:], 16)) if code[:1] in "xX" else chr(int(code))
    except (ValueError, OverflowError):
        return None
    point = html.entities.name2codepoint.get(name)
    return chr(point) if point is not None else None


def entity_views(text: str) -> list[Joined]:
    """One view of the lines of `text` where an entity stands for a letter (`FandiE<ntilde>o`) or for markup
    (code shown in HTML: `todir=&quot;u:...@host&quot;`, `&lt;password&gt;`), each entity read as its
    character, the lines joined by newlines; none if no line has such an entity."""
    if "E<" not in text and "&" not in text:
        return []
    parts, starts, size, at = [], [], 0, 0
    while (match := _ENTITY.search(text, at)) is not None:
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        at = end + 1
        view = _entities(text[start:end], start)
        if view is not None:
            starts.append(size)
            parts.append(view)
            size += len(view.text) + 1
    return [Joined("\n".join(part.text for part in parts), starts, parts)] if parts else []


def _entities(line: str, offset: int) -> View | None:
    """`line` with its entities read as characters, if one of them stands for a letter or for markup."""
    pieces: list[str] = []
    escapes: list[int] = []
    wider: list[int] = []
    last = size = 0
    letter = False
    for match in _ENTITY.finditer(line):
        char = _entity_char(match.group(1) or match.group(2), pod=match.group(1) is not None)
        if char is None:
            continue
        letter = letter or char.isalpha() or char in _MARKUP
        pieces.append(line[last : match.start()])
        size += match.start() - last
        escapes.append(size)
        wider.append((wider[-1] if wider else 0) + len(match.group()) - 1)
        pieces.append(char)
        size += 1
        last = match.end()
    if not letter:
        return None
    pieces.append(line[last:])
    return View("".join(pieces), escapes, offset=offset, wider=tuple(wider))

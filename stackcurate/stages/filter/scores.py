# pyright: reportAttributeAccessIssue=false
# (pyarrow.compute functions are generated at import time, so type checkers cannot see them.)
"""Quality signals over a batch of texts: each `score_<name>` is a pure function from an Arrow array of
texts (and, for a few, paths or flags) to an array of float scores, one per document.

They work on whole batches, not one string at a time, because the filters must cost no more than reading
and decoding the data: the character-class fractions run on the UTF-8 bytes with numpy, and the
encoded-data regexes run in RE2 (pyarrow.compute) over the batch; Python code runs only where that cannot
give the published semantics (non-ASCII text, the exact length of a long encoded run).
"""

import re
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stackcurate.core.text import as_texts, utf8_buffers


def _kernel() -> Any:
    """The compiled kernels, imported on first use: numba is slow and heavy to import, and a process
    that only checks a pipeline's rules (the driver) never runs them."""
    from stackcurate.stages.filter import kernel

    return kernel


# The published encoded-data patterns the compiled kernel measures itself (others go through RE2).
KERNEL_PATTERNS = {r"[a-zA-Z0-9+/\n=]{64,}": "b64", r"(?:\\u[0-9a-fA-F]{4}){8,}": "escape"}


def text_stats(texts: pa.Array) -> np.ndarray:
    """The compiled per-document pass (kernel.COLUMNS) over a batch's UTF-8 bytes, without copying them."""
    return _kernel().text_stats(*utf8_buffers(as_texts(texts)))


def _column(stats: np.ndarray, name: str) -> np.ndarray:
    return stats[:, _kernel().COLUMNS.index(name)].astype(np.float64)


def score_char_fractions(texts: pa.Array, stats: np.ndarray | None = None) -> tuple[pa.Array, pa.Array]:
    """(alphanum_fraction, alpha_fraction): characters for which str.isalnum / str.isalpha hold, over all
    characters (newlines included), as BigCode computed them; 0 for an empty text."""
    stats = text_stats(texts) if stats is None else stats
    letters, digits, chars = _column(stats, "letters"), _column(stats, "digits"), _column(stats, "n_chars")
    with np.errstate(divide="ignore", invalid="ignore"):
        return (
            pa.array(np.where(chars > 0, (letters + digits) / chars, 0.0)),
            pa.array(np.where(chars > 0, letters / chars, 0.0)),
        )


def score_line_stats(texts: pa.Array, stats: np.ndarray | None = None) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(num_lines, max_line_length, avg_line_length) over str.splitlines(), as BigCode computed them."""
    stats = text_stats(texts) if stats is None else stats
    lines = _column(stats, "num_lines")
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(lines > 0, _column(stats, "sum_line") / lines, 0.0)
    return pa.array(lines), pa.array(_column(stats, "max_line")), pa.array(mean)


def _python_matches(texts: pa.LargeStringArray, pattern: str, docs: np.ndarray) -> np.ndarray:
    """(covered, longest) of `pattern`'s matches in each of `docs`, by Python's `re` (the reference)."""
    compiled = re.compile(pattern)
    out = np.zeros((len(docs), 2), dtype=np.int64)
    for j, i in enumerate(docs):
        lengths = [m.end() - m.start() for m in compiled.finditer(texts[int(i)].as_py())]
        out[j] = (sum(lengths), max(lengths, default=0))
    return out


def score_encoded(
    texts: pa.Array, patterns: Sequence[str], stats: np.ndarray | None = None
) -> tuple[pa.Array, pa.Array]:
    """(encoded_fraction, encoded_max_match): the share of characters inside matches of any of `patterns`
    (base64, hex, unicode-escape runs; SC2 §2.1), and the longest single match of any one pattern, both
    exactly as Python's `re` finds them.

    The published patterns go through compiled code: base64 and unicode-escape runs in the main pass, hex data
    on the files that pass cannot rule out (a matcher using Python's Unicode word and space classes). Any
    other pattern runs in Python's `re`. Where matches of several patterns meet in a
    file, the share is the union of their spans.
    """
    texts = as_texts(texts)
    n = len(texts)
    n_chars = (
        _column(stats, "n_chars")
        if stats is not None
        else pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.float64)
    )
    longest = np.zeros(n)
    covered = np.zeros(n)
    patterns_hit = np.zeros(n, dtype=np.int64)
    for pattern in patterns:
        if pattern in KERNEL_PATTERNS:  # measured by the compiled pass
            stats = text_stats(texts) if stats is None else stats
            name = KERNEL_PATTERNS[pattern]
            own_covered, own_longest = _column(stats, f"{name}_covered"), _column(stats, f"{name}_longest")
            docs = np.nonzero(own_covered)[0]
            found = np.stack([own_covered[docs], own_longest[docs]], axis=1) if len(docs) else np.zeros((0, 2))
        elif pattern == _kernel().HEX_PATTERN:
            stats = text_stats(texts) if stats is None else stats
            docs = np.nonzero(stats[:, _kernel().COLUMNS.index("hex_candidate")])[0]
            found = _kernel().hex_matches(*utf8_buffers(texts), docs)
        else:
            docs = np.arange(n)
            found = _python_matches(texts, pattern, docs)
        matched = found[:, 0] > 0
        docs, found = docs[matched], found[matched]
        covered[docs] += found[:, 0]
        longest[docs] = np.maximum(longest[docs], found[:, 1])
        patterns_hit[docs] += 1
    # Files matched by several patterns: the exact union of the spans replaces the summed coverage.
    several = np.nonzero(patterns_hit > 1)[0]
    if len(several) and set(patterns) <= {*KERNEL_PATTERNS, _kernel().HEX_PATTERN}:
        covered[several] = _kernel().encoded_union(*utf8_buffers(texts), several)
        several = several[:0]
    compiled = [re.compile(p) for p in patterns]
    for i in several:
        text = texts[int(i)].as_py()
        union = reach = 0
        for a, b in sorted(m.span() for rx in compiled for m in rx.finditer(text)):
            if b > reach:
                union += b - max(a, reach)
                reach = b
        covered[i] = union
    with np.errstate(divide="ignore", invalid="ignore"):
        return pa.array(np.where(n_chars > 0, covered / n_chars, 0.0)), pa.array(longest)


def score_autogen_phrase(texts: pa.Array, phrases: Sequence[str], first_lines: int) -> pa.Array:
    """1.0 when any phrase occurs (case-insensitively) in the first `first_lines` lines, else 0.0.

    The compiled pass decides ASCII heads; Python's str.lower decides the rest (it maps a few non-ASCII
    characters, such as the Kelvin sign, to ASCII letters).
    """
    texts = as_texts(texts)
    lowered = [p.lower() for p in phrases]
    if all(p.isascii() for p in lowered):
        decided = _kernel().head_phrases(*utf8_buffers(texts), lowered, first_lines).astype(np.float64)
    else:
        decided = np.full(len(texts), 2.0)
    for i in np.nonzero(decided == 2)[0]:
        text = texts[int(i)].as_py()
        end = -1
        for _ in range(first_lines):  # the first lines only, without splitting the whole file
            end = text.find("\n", end + 1)
            if end < 0:
                break
        head = (text if end < 0 else text[:end]).lower()
        decided[i] = 1.0 if any(p in head for p in lowered) else 0.0
    return pa.array(decided, pa.float64())


def score_xml_header(texts: pa.Array, head_chars: int = 100) -> pa.Array:
    """1.0 when `<?xml version=` occurs in the first `head_chars` characters (StarCoder's XML filter)."""
    return pa.array([1.0 if "<?xml version=" in t[:head_chars] else 0.0 for t in as_texts(texts).to_pylist()])


class _VisibleText(HTMLParser):
    """The length of what BeautifulSoup's `get_text()` returns for `BeautifulSoup(page, "html.parser")` once
    <script> and <style> are decomposed (StarCoder's HTML filter), without building the tree.

    It follows bs4's `html.parser` builder: the same tokenizer, bs4's own entity and character-reference
    decoding, text gathered between tags into one string (bs4's `endData`), a whitespace-only string outside
    <pre>/<textarea> shrunk to one newline (or space), CDATA kept, comments, declarations and processing
    instructions left out. Equal to bs4 (tests compare) and faster, which keeps the filters at the cost of
    reading the data (benchmarks/README.md, "Filters and decontamination against the floor").
    """

    _SPACES = " \n\t\x0c\r"

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)  # references are decoded below, the way bs4 decodes them
        self.length = 0
        self.pending: list[str] = []
        self.hidden = 0  # inside <script> or <style>
        self.preformatted = 0  # inside <pre> or <textarea>

    def _string(self, text: str) -> None:
        if self.hidden or not text:
            return
        if not self.preformatted and not text.strip(self._SPACES):
            text = "\n" if "\n" in text else " "
        self.length += len(text)

    def _flush(self) -> None:
        if self.pending:
            self._string("".join(self.pending))
            self.pending.clear()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._flush()
        self.hidden += tag in ("script", "style")
        self.preformatted += tag in ("pre", "textarea")

    def handle_endtag(self, tag: str) -> None:
        self._flush()
        if tag in ("script", "style") and self.hidden:
            self.hidden -= 1
        if tag in ("pre", "textarea") and self.preformatted:
            self.preformatted -= 1

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self._flush()

    def handle_data(self, data: str) -> None:
        self.pending.append(data)

    def handle_entityref(self, name: str) -> None:
        from bs4.dammit import EntitySubstitution

        character = EntitySubstitution.HTML_ENTITY_TO_CHARACTER.get(name)
        self.pending.append(character if character is not None else f"&{name}")

    def handle_charref(self, name: str) -> None:
        from bs4.builder._htmlparser import BeautifulSoupHTMLParser

        text, _, extra = BeautifulSoupHTMLParser._dereference_numeric_character_reference(name)
        self.pending += [t for t in (text, extra) if t]

    def unknown_decl(self, data: str) -> None:
        self._flush()
        if data.upper().startswith("CDATA["):
            self._string(data[len("CDATA[") :])

    def handle_comment(self, data: str) -> None:
        self._flush()

    def handle_decl(self, decl: str) -> None:
        self._flush()

    def handle_pi(self, data: str) -> None:
        self._flush()

    def close(self) -> None:
        super().close()
        self._flush()


def score_html_visible(texts: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(html_visible_fraction, html_visible_chars): text left once tags, <script> and <style> are removed,
    as StarCoder measured it with BeautifulSoup's html.parser; NaN when the page does not parse."""
    fractions, visible = [], []
    for text in as_texts(texts).to_pylist():
        parser = _VisibleText()
        try:
            parser.feed(text)
            parser.close()
        except Exception:  # noqa: BLE001 - html.parser raises assorted errors on broken pages
            fractions.append(float("nan"))
            visible.append(float("nan"))
            continue
        fractions.append(parser.length / len(text) if text else 0.0)
        visible.append(float(parser.length))
    return pa.array(fractions, pa.float64()), pa.array(visible, pa.float64())


def score_num_chars(texts: pa.Array) -> pa.Array:
    return pc.utf8_length(as_texts(texts)).cast(pa.float64())


def score_name_allowed(paths: pa.Array, contains: Sequence[str], stems: Sequence[str]) -> pa.Array:
    """1.0 when the lower-cased file name contains one of `contains` or its stem is one of `stems`
    (SC2's allow-list for Text files: requirements, README, NOTES, TODO, DESCRIPTION, CMakeLists)."""
    out = []
    for path in as_texts(paths).to_pylist():
        name = PurePosixPath(path).name.lower()
        stem = name.split(".", 1)[0]
        out.append(1.0 if any(c in name for c in contains) or stem in stems else 0.0)
    return pa.array(out, pa.float64())


def line_of(score: str, text: str, params: Mapping[str, Any]) -> int | None:
    """The number (from 1) of the line that decided a line-based score of `text`: the longest line
    (`max_line_length`), the first head line with an auto-generated phrase (`autogenerated`), the line where the
    longest encoded run starts (`encoded_max_match`); None for scores of the whole file. Only for the removed
    rows' details: a few files, in Python."""
    if score == "max_line_length":
        lines = text.split("\n")
        return max(range(len(lines)), key=lambda k: len(lines[k])) + 1 if lines else None
    if score == "autogenerated":
        phrases = [p.lower() for p in params.get("autogen_phrases", ())]
        first = int(params.get("autogen_first_lines", 5))
        for k, line in enumerate(text.split("\n", first)[:first]):
            if any(p in line.lower() for p in phrases):
                return k + 1
        return None
    if score == "encoded_max_match":
        spans = [m.span() for p in dict(params.get("encoded_patterns", {})).values() for m in re.finditer(p, text)]
        if not spans:
            return None
        start = max(spans, key=lambda ab: (ab[1] - ab[0], -ab[0]))[0]
        return text.count("\n", 0, start) + 1
    return None

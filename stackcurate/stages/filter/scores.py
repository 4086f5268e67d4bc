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
from collections.abc import Sequence
from pathlib import PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Each byte mapped to its class: ASCII letter, ASCII digit (alnum, not alpha), other ASCII, or part of a
# non-ASCII character (counted separately, in Python, for the few files that have them). One bytes.translate
# over a whole batch plus bytes.count per document (both C loops) counts classes at about 200 MB/s, several
# times faster than numpy or a per-character Python loop.
_CLASSES = bytes(
    (ord("a") if chr(b).isalpha() else ord("d") if chr(b).isalnum() else ord(".")) if b < 128 else ord("h")
    for b in range(256)
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _texts(texts: pa.Array | pa.ChunkedArray) -> pa.LargeStringArray:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    return texts.cast(pa.large_string()).fill_null("")


def score_char_fractions(texts: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(alphanum_fraction, alpha_fraction): characters for which str.isalnum / str.isalpha hold, over all
    characters (newlines included), as BigCode computed them; 0 for an empty text."""
    texts = _texts(texts)
    data_buffer = texts.buffers()[2]
    mapped = data_buffer.to_pybytes().translate(_CLASSES) if data_buffer is not None else b""
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]
    n_chars = pc.utf8_length(texts).to_pylist()
    non_ascii = (pc.binary_length(texts).to_numpy(zero_copy_only=False) != np.array(n_chars)).tolist()
    alnum, alpha = [], []
    for i, (start, end) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)):
        letters, digits = mapped.count(b"a", start, end), mapped.count(b"d", start, end)
        if non_ascii[i]:  # non-ASCII characters: Unicode semantics, on those characters only
            rare = "".join(_NON_ASCII.findall(texts[i].as_py()))
            rare_alpha = sum(map(str.isalpha, rare))
            letters += rare_alpha
            digits += sum(map(str.isalnum, rare)) - rare_alpha
        total = n_chars[i]
        alnum.append((letters + digits) / total if total else 0.0)
        alpha.append(letters / total if total else 0.0)
    return pa.array(alnum, pa.float64()), pa.array(alpha, pa.float64())


def score_line_stats(texts: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(num_lines, max_line_length, avg_line_length) over str.splitlines(), as BigCode computed them."""
    num, longest, mean = [], [], []
    for text in _texts(texts).to_pylist():
        lengths = list(map(len, text.splitlines()))
        num.append(len(lengths))
        longest.append(max(lengths, default=0))
        mean.append(sum(lengths) / len(lengths) if lengths else 0.0)
    return pa.array(num, pa.float64()), pa.array(longest, pa.float64()), pa.array(mean, pa.float64())


def score_encoded(texts: pa.Array, patterns: Sequence[str], exact_above: float = 1024) -> tuple[pa.Array, pa.Array]:
    """(encoded_fraction, encoded_max_match): the share of characters inside matches of any of `patterns`
    (base64, hex, unicode-escape runs; SC2 §2.1), and the longest single match of any one pattern.

    RE2 measures both on the whole batch. The share is what one alternation of the patterns matches,
    scanned left to right. For the longest match each pattern is measured on its own: with one match, its
    coverage is its length; with several, Python's `re` measures them where they cover more than
    `exact_above` characters, and elsewhere the coverage (at most `exact_above`) stands in as an upper bound,
    so a rule `encoded_max_match > t` with t >= exact_above decides exactly.
    """
    texts = _texts(texts)
    n_chars = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.float64)
    longest = np.zeros(len(texts))
    any_hit = np.zeros(len(texts), dtype=bool)
    for pattern in patterns:
        # Most files hold no match at all: find those that do first (RE2 stops at the first match).
        hits = np.nonzero(pc.match_substring_regex(texts, pattern).to_numpy(zero_copy_only=False))[0]
        if not len(hits):
            continue
        any_hit[hits] = True
        subset = texts.take(pa.array(hits))
        covered = n_chars[hits] - pc.utf8_length(pc.replace_substring_regex(subset, pattern, "")).to_numpy(
            zero_copy_only=False
        )
        several = pc.count_substring_regex(subset, pattern).to_numpy(zero_copy_only=False) > 1
        bound = covered.copy()  # exact for one match; no single match is longer than all of them
        compiled = re.compile(pattern)
        for j in np.nonzero(several & (covered > exact_above))[0]:
            bound[j] = max((m.end() - m.start() for m in compiled.finditer(texts[int(hits[j])].as_py())), default=0)
        longest[hits] = np.maximum(longest[hits], bound)
    covered_all = np.zeros(len(texts))
    hits = np.nonzero(any_hit)[0]
    if len(hits):
        combined = "|".join(f"(?:{p})" for p in patterns)
        subset = texts.take(pa.array(hits))
        covered_all[hits] = n_chars[hits] - pc.utf8_length(pc.replace_substring_regex(subset, combined, "")).to_numpy(
            zero_copy_only=False
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        return pa.array(np.where(n_chars > 0, covered_all / n_chars, 0.0)), pa.array(longest)


def score_autogen_phrase(texts: pa.Array, phrases: Sequence[str], first_lines: int) -> pa.Array:
    """1.0 when any phrase occurs (case-insensitively) in the first `first_lines` lines, else 0.0."""
    lowered = [p.lower() for p in phrases]
    out = []
    for text in _texts(texts).to_pylist():
        end = -1
        for _ in range(first_lines):  # the first lines only, without splitting the whole file
            end = text.find("\n", end + 1)
            if end < 0:
                break
        head = (text if end < 0 else text[:end]).lower()
        out.append(1.0 if any(p in head for p in lowered) else 0.0)
    return pa.array(out, pa.float64())


def score_xml_header(texts: pa.Array, head_chars: int = 100) -> pa.Array:
    """1.0 when `<?xml version=` occurs in the first `head_chars` characters (StarCoder's XML filter)."""
    return pa.array([1.0 if "<?xml version=" in t[:head_chars] else 0.0 for t in _texts(texts).to_pylist()])


def score_html_visible(texts: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(html_visible_fraction, html_visible_chars): text left once tags, <script> and <style> are removed
    (BeautifulSoup's html.parser, as StarCoder); NaN when the page does not parse."""
    from bs4 import BeautifulSoup

    fractions, visible = [], []
    for text in _texts(texts).to_pylist():
        try:
            soup = BeautifulSoup(text, "html.parser")
            for tag in soup(["script", "style"]):
                tag.decompose()
            n = len(soup.get_text())
        except Exception:  # noqa: BLE001 - html.parser raises assorted errors on broken pages
            fractions.append(float("nan"))
            visible.append(float("nan"))
            continue
        fractions.append(n / len(text) if text else 0.0)
        visible.append(float(n))
    return pa.array(fractions, pa.float64()), pa.array(visible, pa.float64())


def score_num_chars(texts: pa.Array) -> pa.Array:
    return pc.utf8_length(_texts(texts)).cast(pa.float64())


def score_name_allowed(paths: pa.Array, contains: Sequence[str], stems: Sequence[str]) -> pa.Array:
    """1.0 when the lower-cased file name contains one of `contains` or its stem is one of `stems`
    (SC2's allow-list for Text files: requirements, README, NOTES, TODO, DESCRIPTION, CMakeLists)."""
    out = []
    for path in _texts(paths).to_pylist():
        name = PurePosixPath(path).name.lower()
        stem = name.split(".", 1)[0]
        out.append(1.0 if any(c in name for c in contains) or stem in stems else 0.0)
    return pa.array(out, pa.float64())

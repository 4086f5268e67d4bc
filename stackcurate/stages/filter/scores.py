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

# Python's str.isalnum / str.isalpha on the 128 ASCII code points, as a byte lookup table.
_ALNUM = np.array([chr(b).isalnum() for b in range(256)], dtype=np.int64)
_ALPHA = np.array([chr(b).isalpha() for b in range(256)], dtype=np.int64)
_ALNUM[128:] = 0
_ALPHA[128:] = 0
_HIGH = np.zeros(256, dtype=np.int64)
_HIGH[128:] = 1
_W_ALNUM = re.compile(r"[^\W_]")  # \w minus "_" is exactly str.isalnum in Python 3
_W_ALPHA = re.compile(r"[^\W\d_]")  # approximately str.isalpha (letters); used for non-ASCII text only


def _texts(texts: pa.Array | pa.ChunkedArray) -> pa.LargeStringArray:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    return texts.cast(pa.large_string()).fill_null("")


def _per_doc_sums(texts: pa.LargeStringArray, tables: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For each lookup table, the per-document sum of table[byte] over the document's UTF-8 bytes."""
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]
    data = np.frombuffer(texts.buffers()[2], dtype=np.uint8) if texts.buffers()[2] else np.zeros(0, np.uint8)
    out = []
    for table in tables:
        cumulative = np.concatenate([[0], np.cumsum(table[data], dtype=np.int64)])
        out.append(cumulative[offsets[1:]] - cumulative[offsets[:-1]])
    return out


def score_char_fractions(texts: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(alphanum_fraction, alpha_fraction): characters for which str.isalnum / str.isalpha hold, over all
    characters (newlines included), as BigCode computed them; 0 for an empty text."""
    texts = _texts(texts)
    alnum, alpha, high = _per_doc_sums(texts, [_ALNUM, _ALPHA, _HIGH])
    n_chars = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.float64)
    alnum = alnum.astype(np.float64)
    alpha = alpha.astype(np.float64)
    for i in np.nonzero(high)[0]:  # documents with non-ASCII characters: Unicode semantics, in Python
        text = texts[i].as_py()
        alnum[i] = len(_W_ALNUM.findall(text))
        alpha[i] = sum(1 for c in _W_ALPHA.findall(text) if c.isalpha())
    with np.errstate(divide="ignore", invalid="ignore"):
        return (
            pa.array(np.where(n_chars > 0, alnum / n_chars, 0.0)),
            pa.array(np.where(n_chars > 0, alpha / n_chars, 0.0)),
        )


def score_line_stats(texts: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(num_lines, max_line_length, avg_line_length) over str.splitlines(), as BigCode computed them."""
    num, longest, mean = [], [], []
    for text in _texts(texts).to_pylist():
        lengths = list(map(len, text.splitlines()))
        num.append(len(lengths))
        longest.append(max(lengths, default=0))
        mean.append(sum(lengths) / len(lengths) if lengths else 0.0)
    return pa.array(num, pa.float64()), pa.array(longest, pa.float64()), pa.array(mean, pa.float64())


def score_encoded(texts: pa.Array, patterns: Sequence[str]) -> tuple[pa.Array, pa.Array]:
    """(encoded_fraction, encoded_max_match): the share of characters inside matches of any of `patterns`
    (base64, hex, unicode-escape runs; SC2 §2.1), and the longest single match, in characters.

    The share is measured with RE2 on the whole batch (one alternation, scanned left to right). The
    longest match needs Python's `re`, so it is computed only where the matches cover more than the
    rule could care about (`_EXACT_ABOVE` characters); elsewhere it is bounded by that coverage.
    """
    texts = _texts(texts)
    combined = "|".join(f"(?:{p})" for p in patterns)
    n_chars = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.float64)
    rest = pc.utf8_length(pc.replace_substring_regex(texts, combined, "")).to_numpy(zero_copy_only=False)
    covered = n_chars - rest
    longest = covered.copy()  # no single match is longer than all matches together
    compiled = [re.compile(p) for p in patterns]
    for i in np.nonzero(covered > _EXACT_ABOVE)[0]:
        text = texts[i].as_py()
        longest[i] = max((m.end() - m.start() for rx in compiled for m in rx.finditer(text)), default=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return pa.array(np.where(n_chars > 0, covered / n_chars, 0.0)), pa.array(longest)


_EXACT_ABOVE = 256


def score_autogen_phrase(texts: pa.Array, phrases: Sequence[str], first_lines: int) -> pa.Array:
    """1.0 when any phrase occurs (case-insensitively) in the first `first_lines` lines, else 0.0."""
    lowered = [p.lower() for p in phrases]
    out = []
    for text in _texts(texts).to_pylist():
        head = "\n".join(text.split("\n", first_lines)[:first_lines]).lower()
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

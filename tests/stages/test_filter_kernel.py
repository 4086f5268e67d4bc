"""The compiled pass against the Python definitions it replaces, on random text with every edge case mixed in."""

import random
import re

import numpy as np
import pyarrow as pa
import pytest

from stackcurate.stages.filter.kernel import COLUMNS, head_phrases, text_stats

B64 = re.compile(r"[a-zA-Z0-9+/\n=]{64,}")
ESCAPES = re.compile(r"(?:\\u[0-9a-fA-F]{4}){8,}")
HEX = re.compile(r"(?:\b(?:0x|\\x)?[0-9a-fA-F]{2}(?:,|\b\s*)){8,}")
PIECES = [
    *"ab=+/\n\r \t\x0b\x0c\x1c\x1d\x1e\x1f\\u0123456789ABCDEFx_,é\u2028\u2029\x85²Ⅻ٣中😀ß\u00a0",
    "\\u00e9",
    "\r\n",
    "A" * 70,
    "B" * 64,
    "C" * 63,
    "\\u0041" * 9,
    "\\\\u0041" * 8,
    "0x1f, ",
    "de ad be ef ",
    "\\x00",
]


def reference(text: str) -> list[int]:
    """What the published Python code computes, column by column."""
    lengths = list(map(len, text.splitlines()))
    b64 = [m.end() - m.start() for m in B64.finditer(text)]
    esc = [m.end() - m.start() for m in ESCAPES.finditer(text)]
    return [
        len(lengths),
        max(lengths, default=0),
        sum(lengths),
        len(text),
        sum(c.isalpha() for c in text),
        sum(c.isalnum() and not c.isalpha() for c in text),
        int(not text.isascii()),
        max(b64, default=0),
        sum(b64),
        max(esc, default=0),
        sum(esc),
    ]


def _stats(texts: list[str]) -> np.ndarray:
    arr = pa.array(texts, pa.large_string())
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] else np.zeros(0, np.uint8)
    return text_stats(data, np.frombuffer(arr.buffers()[1], np.int64))


@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_equals_python_definitions(seed):
    rnd = random.Random(seed)
    texts = ["", "\n", "a\r\nb", "\\u0041" * 8, "é" * 70, "A" * 64 + "é" + "A" * 64]
    texts += ["".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, 300))) for _ in range(2500)]
    got = _stats(texts)
    mismatches = [
        (t, list(got[i][:11]), reference(t)) for i, t in enumerate(texts) if list(got[i][:11]) != reference(t)
    ]
    assert mismatches == []
    # The hex prescreen may flag extra files, never miss one the published regex matches.
    candidate = got[:, COLUMNS.index("hex_candidate")]
    assert not [t for i, t in enumerate(texts) if HEX.search(t) and not candidate[i]]
    assert sum(bool(HEX.search(t)) for t in texts) > 50  # the random texts do exercise the pattern


# Mostly plain ASCII code, so most 8-byte words take the kernel's word-at-a-time path, with runs and hex data
# that cross word boundaries at every alignment.
PLAIN = [
    "foo",
    "bar_baz",
    " ",
    "  ",
    "=",
    "+",
    "/",
    "(",
    ")",
    ":",
    "12",
    "0x1f",
    ", ",
    ",",
    "x",
    "de",
    "ad",
    "AB",
    "A" * 60,
    "QUJD" * 17,
    "a1+/=" * 13,
    "0x00, " * 9,
    "ff " * 9,
    "\n",
    "\r\n",
    "\t",
    "é",
    "\\u0041" * 8,
    "{",
]
PLAIN_WEIGHTS = [20, 10, 25, 5, 5, 3, 3, 5, 5, 3, 5, 4, 4, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 3, 1, 1, 0.2, 0.2, 1]


def test_kernel_word_path_equals_python_definitions():
    rnd = random.Random(7)
    texts = ["".join(rnd.choices(PLAIN, PLAIN_WEIGHTS, k=rnd.randint(0, 300))) for _ in range(3000)]
    got = _stats(texts)
    assert [t for i, t in enumerate(texts) if list(got[i][:11]) != reference(t)] == []
    candidate = got[:, COLUMNS.index("hex_candidate")]
    assert not [t for i, t in enumerate(texts) if HEX.search(t) and not candidate[i]]


def test_head_phrases_match_python_lower():
    phrases = ["auto-generated", "this file is generated"]
    texts = ["# Auto-Generated\nx", "x\n" * 5 + "auto-generated", "THIS FILE IS GENERATED", "é\nauto-generated", ""]
    arr = pa.array(texts, pa.large_string())
    got = head_phrases(
        np.frombuffer(arr.buffers()[2], np.uint8), np.frombuffer(arr.buffers()[1], np.int64), phrases, 5
    )
    assert got.tolist() == [1, 0, 1, 2, 0]  # 2: a non-ASCII head is left to Python's str.lower


@pytest.mark.parametrize(
    "page",
    [
        "<html><head><title>T</title><style>p{}</style></head><body><p>Hello &amp; bye</p></body></html>",
        "<!DOCTYPE html>\n<html>\n  <body>\n    <pre>  keep   \n  this </pre>\n    <p> x </p>\n  </body>\n</html>\n",
        "<div><script>var a = '<p>not text</p>';</script>visible<!-- comment --></div>",
        "<p>unclosed <b>bold <i>both</p> tail &nbsp; &unknown; &#65; &#x42;",
        "<textarea>\n\n</textarea>\n\n<span>\t</span>",
        "<script>never closed <p>hidden",
        "plain text, no tags at all\n",
        "<![CDATA[ data ]]><?php echo 1; ?><br/>after",
    ],
)
def test_html_visible_text_equals_beautifulsoup(page):
    bs4 = pytest.importorskip("bs4")
    from stackcurate.stages.filter.scores import score_html_visible

    soup = bs4.BeautifulSoup(page, "html.parser")
    for tag in soup(["script", "style"]):
        tag.decompose()
    fraction, chars = score_html_visible(pa.array([page]))
    assert chars.to_pylist() == [len(soup.get_text())]
    assert fraction.to_pylist() == [pytest.approx(len(soup.get_text()) / len(page))]


def _encoded_reference(text: str, patterns: list[re.Pattern]) -> tuple[float, int]:
    """The published definition: the union of all matches' spans over the text, and the longest match."""
    spans = sorted(m.span() for rx in patterns for m in rx.finditer(text))
    union = reach = 0
    for a, b in spans:
        if b > reach:
            union += b - max(a, reach)
            reach = b
    return (union / len(text) if text else 0.0), max((b - a for a, b in spans), default=0)


def test_encoded_scores_equal_python_on_every_path():
    from stackcurate.stages.filter.scores import score_encoded

    patterns = [B64.pattern, HEX.pattern, ESCAPES.pattern]
    rnd = random.Random(13)
    units = ["0x1f", "de", "00", "\\x0a", "FF"]
    seps = [",", " ", "\n", "  ", ", "]

    def chain() -> str:
        return "".join(rnd.choice(units) + rnd.choice(seps) for _ in range(rnd.randint(6, 12)))

    pieces = [
        chain,
        lambda: "QUJD" * rnd.randint(10, 30),
        lambda: "\\u0041" * rnd.randint(6, 10),
        lambda: "int x = 1;\n",
        lambda: "é ",
        lambda: rnd.choice(units),
        lambda: "\u00a0",
        lambda: "de\nad\nbe\nef\n" * rnd.randint(3, 8),  # hex data that is also one base64 run
    ]
    texts = ["".join(rnd.choice(pieces)() for _ in range(rnd.randint(0, 12))) for _ in range(3000)]
    fraction, longest = score_encoded(pa.array(texts), patterns)
    expected = [_encoded_reference(t, [B64, HEX, ESCAPES]) for t in texts]
    assert longest.to_pylist() == [e[1] for e in expected]
    assert fraction.to_pylist() == pytest.approx([e[0] for e in expected])
    assert sum(1 for t in texts if HEX.search(t)) > 100  # every path is exercised

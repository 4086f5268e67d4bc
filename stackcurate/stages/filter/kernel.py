"""One compiled pass over a batch's UTF-8 bytes for the scores that need every character.

Why hand-written: no library computes these per document in one pass, and the filters must cost no more
than reading and decoding the data (issue 3); separate C-level passes (str.splitlines, bytes.count, one RE2
scan per pattern) cost several times that (`benchmarks/filter_throughput.py` measures the filters against
that floor). numba compiles this loop once per machine (cached next to this file).

Semantics match the published Python definitions:
- lines are `str.splitlines()`: breaks are \\n, \\r, \\r\\n (one break), \\x0b, \\x0c, \\x1c-\\x1e, U+0085,
  U+2028, U+2029; a trailing break adds no empty line; lengths are in characters;
- letters and digits follow str.isalpha / str.isalnum for every character (tables built from Python itself);
- `hex_candidate` flags files that may match the hex-data pattern (a run of its characters with 16 hex digits;
  any non-ASCII character continues a run, so the test never misses a match): RE2 checks those only;
- base64 runs are the maximal runs of `[a-zA-Z0-9+/\\n=]` of 64 or more characters, which is what
  `re.finditer(r"[a-zA-Z0-9+/\\n=]{64,}")` returns; unicode-escape runs are the maximal sequences of 8 or
  more `\\uXXXX`, as `re.finditer(r"(?:\\\\u[0-9a-fA-F]{4}){8,}")`.
"""

import numpy as np
from numba import njit

from stackcurate.core.text import unicode_classes

# Per-byte flags for the ASCII range, and Python's own str.isalpha / str.isalnum for every code point, so the
# pass reproduces those methods exactly for any text (the tables take a while to build, once per process).
_B64, _LETTER, _DIGIT, _BREAK, _HEXRUN, _HEXDIGIT, _SEP = 1, 2, 4, 8, 16, 32, 64
_FLAGS = np.zeros(256, dtype=np.uint8)
for _c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/\n=":
    _FLAGS[_c] |= _B64
for _c in range(128):
    _FLAGS[_c] |= (_LETTER if chr(_c).isalpha() else 0) | (_DIGIT if chr(_c).isdigit() else 0)
for _c in b"\n\r\x0b\x0c\x1c\x1d\x1e":
    _FLAGS[_c] |= _BREAK
# Characters a hex-data match can contain: hex digits, the 0x / \x prefixes, commas, whitespace.
for _c in b"0123456789abcdefABCDEFx\\, \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f":
    _FLAGS[_c] |= _HEXRUN
# Hex-run tracking as one lookup: +1 for a hex digit, 0 for another character of a run, a large negative
# (clamped to 0) for anything that ends the run.
_HEXSTEP = np.full(256, -(1 << 30), dtype=np.int64)
_HEX = np.zeros(256, dtype=np.bool_)
for _c in b"0123456789abcdefABCDEF":
    _HEX[_c] = True
    _FLAGS[_c] |= _HEXDIGIT
for _c in range(256):
    if _FLAGS[_c] & _HEXRUN:
        _HEXSTEP[_c] = 1 if _HEX[_c] else 0
# What may follow a unit's two hex digits inside a match: a comma, whitespace, or the backslash of \xHH.
for _c in b", \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\\":
    _FLAGS[_c] |= _SEP


# SWAR (8 bytes at a time) for plain ASCII words: per-byte flags are gathered into one byte (byte k -> bit k)
# by a multiplication, and these tables answer questions about such 8-bit patterns.
_PACK = np.uint64(0x0002040810204081)
_POP = np.array([bin(p).count("1") for p in range(256)], dtype=np.int64)
_TRAIL1 = np.array([next(k for k in range(9) if k == 8 or not p >> k & 1) for p in range(256)], dtype=np.int64)
_TRAIL0 = np.array([next(k for k in range(9) if k == 8 or p >> k & 1) for p in range(256)], dtype=np.int64)
_LEAD1 = np.array([next(k for k in range(9) if k == 8 or not p >> (7 - k) & 1) for p in range(256)], dtype=np.int64)
# [run-character pattern, hex-digit pattern] -> hex digits before the first / after the last non-run byte
_HEX_LOW = np.array(
    [[bin(h & ((1 << _TRAIL1[r]) - 1)).count("1") for h in range(256)] for r in range(256)], dtype=np.int64
)
_HEX_HIGH = np.array(
    [[bin(h >> (8 - _LEAD1[r])).count("1") if _LEAD1[r] else 0 for h in range(256)] for r in range(256)],
    dtype=np.int64,
)


_UNICODE = unicode_classes()


_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)


@njit(cache=True, nogil=True, inline="always")
def _range_mask(w, lo, hi):  # noqa: ANN001, ANN202
    """Bit 7 set in each byte of `w` (all bytes < 0x80) that lies in [lo, hi]."""
    above = w + _ONES * np.uint64(0x80 - lo)
    past = w + _ONES * np.uint64(0x80 - hi - 1)
    return above & ~past & _HIGH


@njit(cache=True, nogil=True, inline="always")
def _equal_mask(w, ch):  # noqa: ANN001, ANN202
    """Bit 7 set in each byte of `w` equal to `ch` (exact: no borrow between bytes)."""
    v = w ^ (_ONES * np.uint64(ch))
    return ~(((v & _LOW7) + _LOW7) | v | _LOW7) & _HIGH


@njit(cache=True, nogil=True, inline="always")
def _pack(mask):  # noqa: ANN001, ANN202
    """The 8 per-byte flags of `mask` (bit 7 of each byte) as one int64 pattern, byte k at bit k."""
    return np.int64((mask * _PACK) >> np.uint64(56))


@njit(cache=True, nogil=True, inline="always")
def _end_line(lines, total, longest, length):
    """Line statistics once a line of `length` characters ends."""
    return lines + 1, total + length, max(longest, length)


@njit(cache=True, nogil=True)
def _stats(
    data, words, offsets, flags, hexdigit, hexstep, classes, pop, trail0, trail1, lead1, hex_low, hex_high, out
):
    """Fill `out` (documents x COLUMNS): see COLUMNS."""
    for d in range(len(offsets) - 1):
        start, end = offsets[d], offsets[d + 1]
        lines = longest = total = current = chars = letters = digits = non_ascii = 0
        run = b64_longest = b64_covered = 0
        hex_digits = hex_candidate = hex_ends = previous_hex = 0
        esc_longest = esc_covered = esc_length = 0
        esc_next = -1  # where the next \\uXXXX unit must start to continue the current sequence
        i = start
        while i < end:
            if (i & 7) == 0 and i + 8 <= end:
                w = words[i >> 3]
                # Plain: ASCII, no backslash, and no control byte but \n and \t. Such a word is handled at once.
                v = w ^ (_ONES * np.uint64(92))
                special = (w & _HIGH) | ((v - _ONES) & ~v & _HIGH)  # non-ASCII, or (maybe) a backslash
                newline = _equal_mask(w, 10)
                tab = _equal_mask(w, 9)
                if special == 0:
                    # bytes below 0x20 (exact: every byte is below 0x80 here), other than \n and \t
                    special = ~(w + _ONES * np.uint64(0x60)) & _HIGH & ~(newline | tab)
                if special == 0:
                    folded = w | (_ONES * np.uint64(0x20))
                    letter = _range_mask(folded, 0x61, 0x7A)
                    digit = _range_mask(w, 0x30, 0x39)
                    letters += pop[_pack(letter)]
                    digits += pop[_pack(digit)]
                    b64 = _pack(
                        letter | digit | _equal_mask(w, 43) | _equal_mask(w, 47) | _equal_mask(w, 61) | newline
                    )
                    if b64 == 255:
                        run += 8
                    else:
                        ended = run + trail1[b64]
                        if ended >= 64:
                            b64_covered += ended
                            b64_longest = max(b64_longest, ended)
                        run = lead1[b64]
                    # Hex-data candidates: 16 hex digits and 7 digit-then-separator places in one run.
                    hexd = digit | _range_mask(folded, 0x61, 0x66)
                    separators = _equal_mask(w, 44) | _equal_mask(w, 32) | newline | tab
                    hex_run = _pack(hexd | _equal_mask(w, 120) | separators)
                    hex_pattern = _pack(hexd)
                    sep_pattern = _pack(separators)
                    ends = hex_pattern & (sep_pattern >> 1)  # digit at k, separator at k + 1
                    crossing = previous_hex & (sep_pattern & 1)  # digit ending the last word
                    if hex_run == 255:
                        hex_digits += pop[hex_pattern]
                        hex_ends += pop[ends] + crossing
                    else:
                        hex_candidate |= (hex_digits + hex_low[hex_run, hex_pattern] >= 16) & (
                            hex_ends + crossing + hex_low[hex_run, ends] >= 7
                        )
                        hex_digits = hex_high[hex_run, hex_pattern]
                        hex_ends = hex_high[hex_run, ends]
                    hex_candidate |= (hex_digits >= 16) & (hex_ends >= 7)
                    previous_hex = hex_pattern >> 7
                    breaks = _pack(newline)
                    if breaks == 0:
                        current += 8
                    else:
                        last = 0  # first byte of the current line within this word
                        while breaks:
                            k = trail0[breaks]
                            lines, total, longest = _end_line(lines, total, longest, current + k - last)
                            current = 0
                            last = k + 1
                            breaks &= breaks - 1
                        current = 8 - last
                    chars += 8
                    i += 8
                    continue
            c = data[i]
            if c < 128:
                # Branch-free counting; branches only for rare events (a line break, the end of a run).
                f = flags[c]
                chars += 1
                letters += (f >> 1) & 1
                digits += (f >> 2) & 1
                # A hex-data match needs 8 units: 16 hex digits and 7 digit-then-separator places in one run
                # of the characters a match can contain.
                in_run = (f >> 4) & 1
                hex_digits = max(hex_digits + hexstep[c], 0)
                hex_ends = (hex_ends + previous_hex * ((f >> 6) & 1)) * in_run
                previous_hex = (f >> 5) & 1
                hex_candidate |= (hex_digits >= 16) & (hex_ends >= 7)
                # \\uXXXX sequences (units start with a backslash, so they cannot overlap): a unit at
                # esc_next continues the sequence, any other unit ends it and starts a new one.
                if c == 92 and (
                    i + 5 < end
                    and data[i + 1] == 117
                    and hexdigit[data[i + 2]]
                    and hexdigit[data[i + 3]]
                    and hexdigit[data[i + 4]]
                    and hexdigit[data[i + 5]]
                ):
                    if i != esc_next:
                        if esc_length >= 48:
                            esc_covered += esc_length
                            esc_longest = max(esc_longest, esc_length)
                        esc_length = 0
                    esc_length += 6
                    esc_next = i + 6
                # Base64 runs, branch-free: `ended` is the length of a run this byte ends (0 otherwise).
                in_class = f & 1
                ended = run * (1 - in_class)
                if ended >= 64:  # rare, so well predicted
                    b64_covered += ended
                    b64_longest = max(b64_longest, ended)
                run = (run + 1) * in_class
                if f & 8:
                    if c == 13 and i + 1 < end and data[i + 1] == 10:
                        i += 1  # \r\n is one break (and its \n one more character of a base64 run)
                        chars += 1
                        run += 1
                    lines, total, longest = _end_line(lines, total, longest, current)
                    current = 0
                else:
                    current += 1
                i += 1
                continue
            # A non-ASCII character: decode it (1-3 continuation bytes), then classify it.
            non_ascii = 1
            hex_ends += previous_hex  # it may be Unicode whitespace after a unit (\s is Unicode): count it
            previous_hex = 0
            if run:
                if run >= 64:
                    b64_covered += run
                    b64_longest = max(b64_longest, run)
                run = 0
            if c >= 0xF0:
                n, code = 3, c & 0x07
            elif c >= 0xE0:
                n, code = 2, c & 0x0F
            elif c >= 0xC0:
                n, code = 1, c & 0x1F
            else:  # a stray continuation byte (cannot happen in valid UTF-8)
                i += 1
                continue
            for k in range(1, n + 1):
                if i + k < end:
                    code = (code << 6) | (data[i + k] & 0x3F)
            i += n + 1
            chars += 1
            kind = classes[code] if code < 0x110000 else 0
            letters += kind & 1
            digits += (kind >> 1) & 1
            if code == 0x85 or code == 0x2028 or code == 0x2029:
                lines, total, longest = _end_line(lines, total, longest, current)
                current = 0
            else:
                current += 1
        if run >= 64:
            b64_covered += run
            b64_longest = max(b64_longest, run)
        if current > 0:  # the last line, when the text does not end with a break
            lines, total, longest = _end_line(lines, total, longest, current)
        if esc_length >= 48:
            esc_covered += esc_length
            esc_longest = max(esc_longest, esc_length)
        out[d, 0] = lines
        out[d, 1] = longest
        out[d, 2] = total
        out[d, 3] = chars
        out[d, 4] = letters
        out[d, 5] = digits
        out[d, 6] = non_ascii
        out[d, 7] = b64_longest
        out[d, 8] = b64_covered
        out[d, 9] = esc_longest
        out[d, 10] = esc_covered
        out[d, 11] = hex_candidate


COLUMNS = (
    "num_lines",
    "max_line",
    "sum_line",
    "n_chars",
    "letters",
    "digits",
    "non_ascii",
    "b64_longest",
    "b64_covered",
    "escape_longest",
    "escape_covered",
    "hex_candidate",
)


def text_stats(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-document statistics (rows = documents, columns = COLUMNS) of UTF-8 `data` cut at `offsets`."""
    out = np.zeros((max(len(offsets) - 1, 0), len(COLUMNS)), dtype=np.int64)
    if len(offsets) > 1:
        # 8-byte words over the same memory; `data` must start 8-byte aligned (Arrow buffers are 64-aligned).
        if data.ctypes.data % 8:
            data = data.copy()
        words = data[: len(data) - len(data) % 8].view(np.uint64)
        _stats(
            data,
            words,
            offsets,
            _FLAGS,
            _HEX,
            _HEXSTEP,
            _UNICODE,
            _POP,
            _TRAIL0,
            _TRAIL1,
            _LEAD1,
            _HEX_LOW,
            _HEX_HIGH,
            out,
        )
    return out


@njit(cache=True, nogil=True)
def _head_phrases(data, offsets, phrases, phrase_offsets, first_lines, out):  # noqa: ANN001, ANN202
    """out[d] = 1 if a phrase occurs in document d's first `first_lines` lines (ASCII lower-cased), 0 if none
    does, 2 if those lines hold non-ASCII text (Python decides: str.lower maps a few such characters to ASCII)."""
    for d in range(len(offsets) - 1):
        start, end = offsets[d], offsets[d + 1]
        head_end = start
        seen = 0
        non_ascii = False
        while head_end < end:
            if data[head_end] >= 128:
                non_ascii = True
            if data[head_end] == 10:
                seen += 1
                if seen == first_lines:
                    break
            head_end += 1
        if non_ascii:
            out[d] = 2
            continue
        found = 0
        for p in range(len(phrase_offsets) - 1):
            p_start, p_end = phrase_offsets[p], phrase_offsets[p + 1]
            length = p_end - p_start
            i = start
            while i + length <= head_end and not found:
                k = 0
                while k < length:
                    c = data[i + k]
                    if 65 <= c <= 90:
                        c += 32
                    if c != phrases[p_start + k]:
                        break
                    k += 1
                if k == length:
                    found = 1
                i += 1
            if found:
                break
        out[d] = found


def head_phrases(data: np.ndarray, offsets: np.ndarray, phrases: list[str], first_lines: int) -> np.ndarray:
    """Per document: 1 phrase found in the first lines, 0 not found, 2 undecided (non-ASCII head)."""
    encoded = [p.lower().encode("ascii") for p in phrases]
    flat = np.frombuffer(b"".join(encoded), dtype=np.uint8) if encoded else np.zeros(0, np.uint8)
    phrase_offsets = np.cumsum([0, *map(len, encoded)]).astype(np.int64)
    out = np.zeros(max(len(offsets) - 1, 0), dtype=np.uint8)
    if len(offsets) > 1:
        _head_phrases(data, offsets, flat, phrase_offsets, first_lines, out)
    return out


# The published hex-data pattern, r"(?:\b(?:0x|\\x)?[0-9a-fA-F]{2}(?:,|\b\s*)){8,}", matched exactly as
# Python's `re` matches it. Each unit is deterministic: after \b, "0x" or "\x" forces that prefix (without it
# the two hex digits would have to include the x), the comma beats \b\s*, and giving back whitespace or a
# comma never lets another unit start (it would need a word boundary inside the separators). So a match is
# the longest chain of units from a start position, kept when it has 8 or more. Units are ASCII; the word
# characters (\w) and whitespace (\s) around them are Python's Unicode classes.
HEX_PATTERN = r"(?:\b(?:0x|\\x)?[0-9a-fA-F]{2}(?:,|\b\s*)){8,}"


@njit(cache=True, nogil=True, inline="always")
def _decode(data, i, end):  # noqa: ANN001, ANN202
    """(code point, byte length) of the character starting at byte i."""
    c = data[i]
    if c < 0x80:
        return np.int64(c), 1
    if c >= 0xF0:
        n, code = 3, np.int64(c & 0x07)
    elif c >= 0xE0:
        n, code = 2, np.int64(c & 0x0F)
    else:
        n, code = 1, np.int64(c & 0x1F)
    for k in range(1, n + 1):
        if i + k < end:
            code = (code << 6) | (data[i + k] & 0x3F)
    return code, n + 1


@njit(cache=True, nogil=True, inline="always")
def _is_word(code, classes):  # noqa: ANN001, ANN202
    return code == 95 or (code < 0x110000 and (classes[code] & 3) != 0)


@njit(cache=True, nogil=True, inline="always")
def _word_before(data, q, start, classes):  # noqa: ANN001, ANN202
    if q <= start:
        return False
    k = q - 1
    while k > start and (data[k] & 0xC0) == 0x80:  # back to the first byte of the previous character
        k -= 1
    code, _ = _decode(data, k, q)
    return _is_word(code, classes)


@njit(cache=True, nogil=True, inline="always")
def _hex_unit(data, q, start, end, hexdigit, word, classes):  # noqa: ANN001, ANN202
    """End (byte) of the one unit starting at byte q, or -1."""
    if q >= end:
        return -1
    if data[q] < 128 and (q == start or data[q - 1] < 128):  # ASCII neighbours: byte tables
        if (q > start and word[data[q - 1]]) == word[data[q]]:  # \b
            return -1
    else:
        code, _ = _decode(data, q, end)
        if _word_before(data, q, start, classes) == _is_word(code, classes):  # \b
            return -1
    r = q
    if r + 1 < end and data[r + 1] == 120 and (data[r] == 48 or data[r] == 92):  # 0x or \x
        r += 2
    if r + 1 >= end or not (hexdigit[data[r]] and hexdigit[data[r + 1]]):
        return -1
    r += 2
    if r < end and data[r] == 44:  # ,
        return r + 1
    if r < end:  # \b after the two digits (the one before is a word character)
        if data[r] < 128:
            if word[data[r]]:
                return -1
        else:
            code, _ = _decode(data, r, end)
            if _is_word(code, classes):
                return -1
    while r < end:  # \s*
        code, size = _decode(data, r, end)
        if code >= 0x110000 or (classes[code] & 4) == 0:
            break
        r += size
    return r


@njit(cache=True, nogil=True, inline="always")
def _hex_chain(data, p, start, end, hexdigit, word, classes):
    """End of the match starting at byte p (the longest chain of units, if 8 or more), or p for none."""
    q = p
    units = 0
    while True:
        e = _hex_unit(data, q, start, end, hexdigit, word, classes)
        if e < 0:
            break
        q = e
        units += 1
    return q if units >= 8 else p


@njit(cache=True, nogil=True)
def _hex_matches(data, offsets, docs, hexdigit, word, classes, out):  # noqa: ANN001, ANN202
    """out[j] = (covered, longest), in characters, of the pattern's matches in document docs[j]."""
    for j in range(len(docs)):
        start, end = offsets[docs[j]], offsets[docs[j] + 1]
        covered = longest = 0
        p = start
        while p < end:
            c = data[p]
            # A unit starts at a word start (a hex digit or the 0 of 0x) or at a backslash after a word
            # character (\x); anywhere else there is no \b before it, or no unit.
            if c == 92:
                if not _word_before(data, p, start, classes):
                    p += 1
                    continue
            elif not hexdigit[c] or (p > start and data[p - 1] < 128 and word[data[p - 1]]):
                p += 1
                continue
            q = _hex_chain(data, p, start, end, hexdigit, word, classes)
            if q > p:
                length = 0
                for k in range(p, q):  # characters, not bytes (whitespace may be multi-byte)
                    length += (data[k] & 0xC0) != 0x80
                covered += length
                longest = max(longest, length)
                p = q
            else:
                p += 1
        out[j, 0] = covered
        out[j, 1] = longest


_WORD = np.zeros(256, dtype=np.bool_)
for _c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_":
    _WORD[_c] = True


def hex_matches(data: np.ndarray, offsets: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """(covered, longest), in characters, of HEX_PATTERN's matches in each of `docs`."""
    out = np.zeros((len(docs), 2), dtype=np.int64)
    if len(docs):
        _hex_matches(data, offsets, docs.astype(np.int64), _HEX, _WORD, _UNICODE, out)
    return out


@njit(cache=True, nogil=True)
def _encoded_union(data, offsets, docs, flags, hexdigit, word, classes, out):
    """out[j] = characters covered by the union of the base64, unicode-escape and hex-data matches of docs[j]."""
    for j in range(len(docs)):
        start, end = offsets[docs[j]], offsets[docs[j] + 1]
        marked = np.zeros(end - start, dtype=np.bool_)
        run_start = start  # base64 runs: maximal runs of the class, 64 characters or more (ASCII bytes)
        for i in range(start, end + 1):
            if i < end and data[i] < 128 and flags[data[i]] & 1:
                continue
            if i - run_start >= 64:
                marked[run_start - start : i - start] = True
            run_start = i + 1
        i = start  # \uXXXX sequences of 8 units or more
        while i < end:
            k = i
            while (
                k + 5 < end
                and data[k] == 92
                and data[k + 1] == 117
                and hexdigit[data[k + 2]]
                and hexdigit[data[k + 3]]
                and hexdigit[data[k + 4]]
                and hexdigit[data[k + 5]]
            ):
                k += 6
            if k - i >= 48:
                marked[i - start : k - start] = True
            i = max(k, i + 1)
        p = start  # hex data, as _hex_matches finds it
        while p < end:
            q = _hex_chain(data, p, start, end, hexdigit, word, classes)
            if q > p:
                marked[p - start : q - start] = True
                p = q
            else:
                p += 1
        covered = 0
        for i in range(start, end):
            covered += marked[i - start] and (data[i] & 0xC0) != 0x80
        out[j] = covered


def encoded_union(data: np.ndarray, offsets: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Characters covered by the union of the published encoded-data patterns' matches, for each of `docs`."""
    out = np.zeros(len(docs), dtype=np.int64)
    if len(docs):
        _encoded_union(data, offsets, docs.astype(np.int64), _FLAGS, _HEX, _WORD, _UNICODE, out)
    return out

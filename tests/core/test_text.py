"""Texts as the compiled kernels see them, and the per-code-point character classes."""

import numpy as np
import pyarrow as pa
import pytest

from stackcurate.core.text import ALPHA, NUMERIC, SPACE, as_texts, unicode_classes, utf8_buffers


def test_as_texts_gives_one_large_string_array_without_nulls():
    texts = as_texts(pa.chunked_array([["a", None], ["é"]], pa.string()))
    assert texts.type == pa.large_string()
    assert texts.to_pylist() == ["a", "", "é"]


def test_utf8_buffers_of_a_slice_are_its_bytes_and_offsets():
    texts = as_texts(pa.array(["ab", "é", "xyz"])).slice(1, 2)
    data, offsets = utf8_buffers(texts)
    assert [bytes(data[offsets[i] : offsets[i + 1]]).decode() for i in range(len(texts))] == ["é", "xyz"]


@pytest.mark.parametrize(
    ("char", "flags"),
    [
        ("a", ALPHA),
        ("é", ALPHA),
        ("7", NUMERIC),
        ("٣", NUMERIC),
        ("½", NUMERIC),
        (" ", SPACE),
        ("\u3000", SPACE),
        ("-", 0),
    ],
)
def test_unicode_classes_follow_python_s_string_methods(char, flags):
    classes = unicode_classes()
    assert (classes.shape, classes.dtype) == ((0x110000,), np.uint8)
    assert classes[ord(char)] == flags

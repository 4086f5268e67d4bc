"""The Megatron indexed dataset writer (v1): bytes an independent reader takes back, one-line errors."""

import numpy as np
import pytest
from megatron_reader import read as read_megatron

from stackcurate.core import io, megatron
from stackcurate.core.errors import StackcurateError


@pytest.mark.parametrize(("vocab", "dtype"), [(49_152, np.uint16), (65_499, np.uint16), (65_500, np.int32)])
def test_token_dtype_is_uint16_below_65500(vocab, dtype):
    assert megatron.token_dtype(vocab) == np.dtype(dtype)


def test_written_shards_read_back_document_by_document(tmp_path):
    fs, root = io.filesystem(str(tmp_path))
    lengths = np.array([3, 1, 2])
    tokens = np.array([5, 6, 0, 0, 7, 0])
    written = megatron.write(fs, f"{root}/s", tokens, lengths, np.dtype(np.uint16))
    assert [d.tolist() for d in read_megatron(tmp_path / "s")] == [[5, 6, 0], [0], [7, 0]]
    assert (written.documents, written.tokens, written.bin_bytes) == (3, 6, 12)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.bin", "s.idx"]


def test_read_index_reads_dtype_lengths_and_offsets():
    idx = megatron.index_bytes(np.array([3, 1, 2]), np.dtype(np.int32))
    dtype, lengths, offsets = megatron.read_index(idx)
    assert (dtype, lengths.tolist(), offsets.tolist()) == (np.dtype(np.int32), [3, 1, 2], [0, 12, 16])


def test_read_index_of_another_file_is_a_one_line_error():
    with pytest.raises(StackcurateError, match="^shard.idx is not a Megatron indexed dataset"):
        megatron.read_index(b"\x00" * 40, "shard.idx")


def test_lengths_that_do_not_add_up_are_refused(tmp_path):
    fs, root = io.filesystem(str(tmp_path))
    with pytest.raises(ValueError, match="lengths add up to 2 tokens, not 3"):
        megatron.write(fs, f"{root}/s", np.array([1, 2, 3]), np.array([1, 1]), np.dtype(np.uint16))
    assert list(tmp_path.iterdir()) == []

"""Special tokens sit at fixed ids: StarCoder's first five, then StarCoder2's sentinels."""

from stackcurate.core.tokens import EOD, FIM_MIDDLE, FIM_PAD, FIM_PREFIX, FIM_SUFFIX, SPECIAL_TOKENS


def test_end_of_document_and_fim_tokens_have_starcoder_s_ids():
    assert SPECIAL_TOKENS[:5] == (EOD, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD)


def test_special_tokens_are_distinct():
    assert len(set(SPECIAL_TOKENS)) == len(SPECIAL_TOKENS)

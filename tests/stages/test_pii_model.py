def test_a_lone_lowercase_word_the_model_reads_as_a_name_is_a_handle():
    from stackcurate.stages.pii.model import _retyped

    both = ("NAME", "USERNAME")
    assert _retyped("NAME", "nehaljwani", both) == "USERNAME"
    assert _retyped("NAME", "Jane Roe", both) == "NAME" and _retyped("NAME", "jane roe", both) == "NAME"
    assert _retyped("NAME", "nehaljwani", ("NAME",)) == "NAME"  # handles not asked for: the span keeps its type

"""The real-file PII evaluation (`pii_model/real_eval.py`): how it scores, the committed set, and the stage on it."""

import pytest

from pii_model import real_eval


def _row(text: str, labels: list[tuple[str, str]], **extra) -> dict:
    """A window whose labels are (entity, value) pairs, each value's first occurrence."""
    spans = []
    for entity, value in labels:
        start = text.index(value)
        spans.append({"entity": entity, "start": start, "end": start + len(value), **extra})
    return {"id": "t", "origin": {"registry": "pypi", "package": "t", "version": "1", "path": "a.py"}, "kind": "code",
            "text": text, "labels": spans}  # fmt: skip


def _span(text: str, entity: str, value: str) -> dict:
    start = text.index(value)
    return {"entity": entity, "start": start, "end": start + len(value)}


def test_a_label_counts_as_found_only_when_spans_of_its_type_cover_it():
    text = "# Copyright 2020 Jane Roe\n# thanks @jroe and Tom Li\nmail = 'team@x.org'\nx = 'Foo Bar'\n"
    row = _row(text, [("NAME", "Jane Roe"), ("USERNAME", "@jroe"), ("NAME", "Tom Li"), ("EMAIL", "team@x.org"),
                      ("NAME_EXAMPLE", "Foo Bar")])  # fmt: skip
    row["labels"][0]["place"] = "copyright"
    predicted = [
        _span(text, "NAME", "Jane Roe"),  # found
        _span(text, "USERNAME", "jroe"),  # found: `@jroe` without its `@`, as BigCode's rules strip it
        _span(text, "NAME", "Tom"),  # half a name: right, but the label is not found
        _span(text, "USERNAME", "team"),  # on an EMAIL label, of another type: a false positive
        _span(text, "NAME", "Foo Bar"),  # on an ignored label: neither right nor wrong
        _span(text, "KEY", "mail"),  # on nothing: a false positive
    ]
    table = real_eval.score([row], [predicted])
    assert table["NAME"] == {"labels": 2, "found": 1, "recall": 0.5, "spans": 2, "false_positives": 0,
                             "precision": 1.0}  # fmt: skip
    assert table[real_eval.COPYRIGHT]["labels"] == 1 and table[real_eval.COPYRIGHT]["recall"] == 1.0
    assert table["USERNAME"] == {"labels": 1, "found": 1, "recall": 1.0, "spans": 2, "false_positives": 1,
                                 "precision": 0.5}  # fmt: skip
    assert table["EMAIL"]["recall"] == 0.0 and table["KEY"]["false_positives"] == 1


def test_addresses_spared_by_policy_are_rows_of_their_own():
    text = "Copyright 2020 Jane Roe <jane@roe.org>\nCo-authored-by: Tom Li <1+tomli@users.noreply.github.com>\n"
    row = _row(text, [("EMAIL_LICENSE", "jane@roe.org"), ("EMAIL", "1+tomli@users.noreply.github.com")])
    table = real_eval.score([row], [[_span(text, "EMAIL", "jane@roe.org")]])
    assert table["EMAIL"]["labels"] == 0 and table["EMAIL"]["false_positives"] == 0
    assert table["EMAIL_LICENSE"]["labels"] == 1 and table["EMAIL_LICENSE"]["found"] == 1
    assert table["EMAIL_NOREPLY"]["labels"] == 1 and table["EMAIL_NOREPLY"]["found"] == 0


def test_the_committed_set_is_whole_and_consistent():
    rows = real_eval.load()
    assert len(rows) >= 300 and len({r["id"] for r in rows}) == len(rows)
    known = set(real_eval.STARPII) | set(real_eval.IGNORED) | {"EMAIL_EXAMPLE"}
    for row in rows:
        labels = sorted(row["labels"], key=lambda label: label["start"])
        assert all(label["entity"] in known for label in labels), row["id"]
        assert all(a["end"] <= b["start"] for a, b in zip(labels, labels[1:], strict=False)), row["id"]
        assert row["text"].count("\n") <= 80, row["id"]  # windows of whole lines, 80 at most
    summary = real_eval.summary(rows)
    assert len(summary["packages"]) >= 40 and summary["name_places"]["copyright"] >= 100


@pytest.fixture(scope="module")
def default_stage_scores() -> dict:
    rows = real_eval.load()
    return real_eval.score(rows, real_eval.detect(rows, {}))


def test_the_default_stage_meets_starpii_on_real_files(default_stage_scores):
    """A regression guard: every type at StarPII's published recall and precision or better, and names in
    copyright lines at 0.9 (issue 15). The set was also used to develop the rules (see its README)."""
    for entity, (recall, precision) in real_eval.STARPII.items():
        scores = default_stage_scores[entity]
        assert scores["recall"] >= recall and scores["precision"] >= precision, (entity, scores)
    assert default_stage_scores[real_eval.COPYRIGHT]["recall"] >= 0.9
    assert default_stage_scores["EMAIL_NOREPLY"]["found"] == 0
    assert default_stage_scores[real_eval.DECOYS]["recall"] <= 0.02  # decoys redacted


# The second set (`pii_model/real_files2/`, issue 35): other ecosystems, labelled by annotators who never saw the
# rules or the model. NAME, USERNAME and IP meet StarPII there, EMAIL, KEY and PASSWORD not yet; these floors are
# what the stage reached when it was last measured (`pii_model/MODEL_CARD.md`), so a change can only keep or raise
# them.
SECOND_SET_FLOORS = {"EMAIL": 0.99, "IP_ADDRESS": 1.0, "KEY": 0.91, "PASSWORD": 0.91, "NAME": 0.89, "USERNAME": 0.75}


def test_the_second_set_is_whole_and_reports_per_family():
    rows = real_eval.load(real_eval.ROOT / "real_files2", "part_*.jsonl")
    assert len(rows) >= 240 and len({r["id"] for r in rows}) == len(rows)
    assert all(label.get("family") for row in rows for label in row["labels"])
    text = "Jane Roe <jroe@x.org>\n"
    row = {"id": "t", "origin": {"path": "AUTHORS"}, "text": text, "families": ["authors_file", "forge_url"],
           "labels": [{"entity": "NAME", "start": 0, "end": 8, "family": "authors_file"},
                      {"entity": "EMAIL", "start": 10, "end": 20, "family": "authors_file"}]}  # fmt: skip
    table = real_eval.families(
        [row], [[{"entity": "NAME", "start": 0, "end": 8}, {"entity": "KEY", "start": 15, "end": 18}]]
    )
    assert table["authors_file"]["NAME"] == {"labels": 1, "found": 1, "recall": 1.0}
    assert table["authors_file"]["EMAIL"]["found"] == 0
    assert table["forge_url"]["false_positives"] == 1 and table["authors_file"]["false_positives"] == 1
    # a first-set window: its kind stands for the family its labels do not carry
    first = {"id": "k", "origin": {"path": "AUTHORS"}, "kind": "authors", "text": text,
             "labels": [{"entity": "NAME", "start": 0, "end": 8, "place": "authors_list"}]}  # fmt: skip
    table = real_eval.families([first], [[{"entity": "NAME", "start": 0, "end": 8}]])
    assert table == {"authors": {"false_positives": 0, "NAME": {"labels": 1, "found": 1, "recall": 1.0}}}


def test_the_default_stage_keeps_its_recall_on_the_second_set():
    rows = real_eval.load(real_eval.ROOT / "real_files2", "part_*.jsonl")
    scores = real_eval.score(rows, real_eval.detect(rows, {}))
    for entity, floor in SECOND_SET_FLOORS.items():
        assert scores[entity]["recall"] >= floor, (entity, scores[entity])
    assert scores[real_eval.DECOYS]["recall"] <= 0.02

"""The PII model's training data: real code with planted PII, exact labels, disjoint train and eval code."""

import pytest

pytest.importorskip("faker")

from pii_model import generate  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return list(generate.generate("train", 200, seed=5))


def test_every_label_is_the_planted_value_and_none_overlap(rows):
    entities = set()
    for row in rows:
        spans = sorted(row["spans"], key=lambda s: s["start"])
        for a, b in zip(spans, spans[1:], strict=False):
            assert a["end"] <= b["start"]
        for s in spans:
            value = row["text"][s["start"] : s["end"]]
            assert value and value == value.strip() and "\n" not in value
            entities.add(s["entity"])
    assert entities == set(generate.ENTITIES)


def test_hard_negatives_are_planted_unlabelled(rows):
    kinds = {k for row in rows for k in row["negatives"]}
    assert {"example_email", "private_ip", "version", "hash", "placeholder", "license_name"} <= kinds
    for row in rows:
        for s in row["spans"]:
            value = row["text"][s["start"] : s["end"]]
            assert not value.endswith("@example.com") and value not in ("8.8.8.8", "YOUR_API_KEY")


def test_same_seed_same_examples_other_seed_other_values():
    a = list(generate.generate("train", 20, seed=9))
    assert a == list(generate.generate("train", 20, seed=9))
    assert a != list(generate.generate("train", 20, seed=10))


def test_train_and_eval_share_no_host_code():
    train = {path for path, _ in generate.host_files("train")}
    held_out = {path for path, _ in generate.host_files("eval")}
    assert train and held_out and not train & held_out
    repos = lambda paths: {p.split("/", 1)[0] for p in paths}  # noqa: E731
    assert not repos(train) & repos(held_out)


def test_evaluation_counts_exact_spans_only():
    from pii_model import evaluate
    from stackcurate.stages.pii import Detector, PiiConfig

    text = 'contact = "ana.silva@fastmail.fm"\nhost = "34.120.18.7"\nDEFAULT = "user@example.com"\n'
    rows = [
        {
            "text": text,
            "path": "a/b.py",
            "spans": [
                {"entity": "EMAIL", "start": text.index("ana"), "end": text.index('"\nhost')},
                {"entity": "NAME", "start": 0, "end": 7},  # not found
            ],
        }
    ]
    got = evaluate.evaluate(rows, Detector(PiiConfig()))
    assert got["EMAIL"] == {"labels": 1, "false_positives": 0, "precision": 1.0, "recall": 1.0}
    assert got["NAME"] == {"labels": 1, "false_positives": 0, "precision": 0.0, "recall": 0.0}
    assert got["IP_ADDRESS"] == {"labels": 0, "false_positives": 1, "precision": 0.0, "recall": 0.0}

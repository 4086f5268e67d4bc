"""The PII model's real-file training set: files drawn per kind without the evaluation sets' packages, labels
kept where independent labellers agree and lines dropped where they do not, keys and passwords planted again in
their own line."""

import json
import random

import pytest

pytest.importorskip("faker")
pytest.importorskip("detect_secrets")

from pii_model import realset  # noqa: E402
from stackcurate.stages.pii import is_history_file  # noqa: E402
from stackcurate.stages.pii.entities import EMAIL, NAME, PASSWORD, USERNAME  # noqa: E402


def labelled(text: str, model: list[tuple[str, str]], path: str = "src/app.py"):
    """(agreed labels as (entity, value), dropped lines' text, outcome) of `text`, the model finding `model`."""
    file = realset._first_pass((path, text))
    spans = [(entity, text.index(value), text.index(value) + len(value)) for entity, value in model]
    labels, dropped, outcome = realset.agree(file, spans)
    lines = [text[start : text.find("\n", start)] for start in sorted(dropped)]
    return [(e, text[s:t]) for e, s, t in labels], lines, outcome


def test_a_span_two_labellers_agree_on_is_a_label():
    text = "# Author: Jane Roe <jane.roe@corp-mail.org>\npassword = 'Xk4pQ9zLm2wRt7'\n"
    labels, dropped, _ = labelled(text, [(NAME, "Jane Roe")])
    assert (NAME, "Jane Roe") in labels  # patterns and the model
    assert (EMAIL, "jane.roe@corp-mail.org") in labels  # patterns and presidio
    assert (PASSWORD, "Xk4pQ9zLm2wRt7") in labels  # patterns and detect-secrets
    assert dropped == []


def test_the_model_and_the_gazetteer_agree_on_a_name_no_pattern_finds():
    text = "x = 1\n    Michael Schmidt ported the parser.\n"
    labels, dropped, outcome = labelled(text, [(NAME, "Michael Schmidt")])
    assert labels == [(NAME, "Michael Schmidt")] and dropped == []
    assert outcome["NAME model and gazetteer"] == 1


@pytest.mark.parametrize(
    ("text", "model", "why"),
    [
        ("x = 1\n    Zorblax Quenty ported the parser.\n", [(NAME, "Zorblax Quenty")], "NAME model alone"),
        ("x = 1\n# thanks to @zquenty for the fix\n", [], "USERNAME patterns alone"),
        ("# see Michael Schmidt and others\ny = 2\n", [], "NAME gazetteer alone"),
        ('x = 1\napi_key: "gh7Tq2LmX9pWz"\n', [], "secret detect-secrets alone"),
    ],
)
def test_a_span_one_labeller_alone_finds_drops_its_line(text, model, why):
    labels, dropped, outcome = labelled(text, model)
    assert labels == [] and len(dropped) == 1 and outcome[why] >= 1, (dropped, outcome)


def test_version_quads_are_not_addresses_without_a_network_word():
    labels, dropped, _ = labelled("libfoo (1.0.24.2-5) unstable\nserver = '93.184.216.34'\n", [])
    assert labels == [("IP_ADDRESS", "93.184.216.34")]
    assert dropped == ["libfoo (1.0.24.2-5) unstable"]


def test_a_planted_value_keeps_the_line_and_the_shape():
    text = "x = 1\nconn = connect(user='app', password='Secr3t-Pass')\n"
    at = text.index("Secr3t-Pass")
    line, (entity, start, end) = realset.plant(text, (PASSWORD, at, at + 11), random.Random(0))
    assert entity == PASSWORD and line.startswith("conn = connect(user='app', password='") and line.endswith("')\n")
    value = line[start:end]
    assert value != "Secr3t-Pass" and len(value) == 11 and value[6] == "-"
    assert [c.isupper() for c in value] == [c.isupper() for c in "Secr3t-Pass"]
    assert [c.isdigit() for c in value] == [c.isdigit() for c in "Secr3t-Pass"]


def test_files_are_drawn_per_kind_without_the_evaluation_sets_packages(tmp_path):
    held = tmp_path / "held"
    held.mkdir()
    origin = {"registry": "pypi", "package": "python-jose", "path": "x.py"}
    (held / "part.jsonl").write_text(json.dumps({"origin": origin, "text": "", "labels": []}) + "\n")
    exclude = realset.package_names([held])
    assert {"python-jose", "jose"} <= exclude
    root = tmp_path / "root"
    for rel in ("jose/jwt.py", "pkg/a.py", "pkg/b.py", "pkg/c.py", "pkg/ChangeLog", "pkg/AUTHORS", "pkg/x.bin"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("a\nb\nc\nd\n")
    drawn = realset.collect([root], exclude, files=100, per_kind=2, seed=0)
    names = sorted(p.name for p in drawn)
    assert "jwt.py" not in names and "x.bin" not in names
    assert sum(n.endswith(".py") for n in names) == 2 and {"ChangeLog", "AUTHORS"} <= set(names)
    assert realset.collect([root], exclude, files=100, per_kind=2, seed=0) == drawn


def test_gzipd_changelogs_are_read_uncompressed(tmp_path):
    import gzip

    path = tmp_path / "changelog.Debian.gz"
    path.write_bytes(gzip.compress(b"foo (1.0-1) unstable\n\n  * Initial release.\n\n -- Jane Roe <jr@x.org>\n"))
    assert realset.kind_of(str(path)) == "history"
    assert realset.read(path, 1000).startswith("foo (1.0-1) unstable\n")
    assert realset.read(path, 50) == "foo (1.0-1) unstable\n\n  * Initial release.\n\n"  # cut at a line's end
    (tmp_path / "broken.gz").write_bytes(b"not gzip")
    assert realset.read(tmp_path / "broken.gz", 1000) is None


def test_the_set_is_written_with_its_report(tmp_path):
    root = tmp_path / "root" / "pkg"
    root.mkdir(parents=True)
    (root / "app.py").write_text("import os\n\n# Author: Jane Roe <jane.roe@corp-mail.org>\nx = 1\ny = 2\n")
    (root / "NEWS").write_text("1.0\n\n  * Faster start (Michael Schmidt)\n  * Fewer crashes\n")
    out = tmp_path / "real.parquet"
    realset.main(["--out", str(out), "--root", str(tmp_path / "root"), "--exclude", str(tmp_path / "none")])
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["files_read"] == 2 and report["labels"].get(EMAIL) == 1
    assert report["kinds"] == {"py": 1, "history": 1}


@pytest.mark.parametrize(
    ("name", "history"),
    [
        ("NEWS", True), ("ChangeLog", True), ("CHANGES.md", True), ("HISTORY.rst", True), ("changelog.Debian", True),
        ("wget.changelog", True), ("NEWS-2.x", True), ("news.py", False), ("changes.go", False), ("newsletter", False),
        ("changelog.gz", True), ("RELEASE-NOTES.md", True), ("changes.xml", True), ("changelog.xml", True),
        ("release-notes/VERSION-2.x", True), ("notes/VERSION", False), ("release.py", False),
    ],
)  # fmt: skip
def test_history_files(name, history):
    assert is_history_file(f"pkg/{name}") is history


def test_username_needs_the_model_too():
    labels, _, _ = labelled("x = 1\n# thanks to @zquenty for the fix\n", [(USERNAME, "zquenty")])
    assert labels == [(USERNAME, "zquenty")]


def test_training_takes_every_labelled_line_and_draws_the_others(tmp_path):
    pytest.importorskip("torch")
    from pii_model import train

    root = tmp_path / "root" / "pkg"
    root.mkdir(parents=True)
    body = "".join(f"value_{i} = compute({i})\n" for i in range(30))
    (root / "app.py").write_text(f"# Author: Jane Roe <jane.roe@corp-mail.org>\n{body}")
    out = tmp_path / "real.parquet"
    realset.main(["--out", str(out), "--root", str(tmp_path / "root"), "--exclude", str(tmp_path / "none"),
                  "--other-lines", "1.0"])  # fmt: skip
    cfg = train.TrainConfig(real=str(out), real_windows=5)
    items, labels = train.real_set(out, cfg, random.Random(0))
    marked = [tags for tags in labels if any(t > 0 for t in tags)]
    assert len(marked) == 1 and len(items) == 5  # the author line, and 4 of the 30 others
    with pytest.raises(train.StackcurateError, match="no real-file set"):
        train.real_set(tmp_path / "missing.parquet", cfg, random.Random(0))

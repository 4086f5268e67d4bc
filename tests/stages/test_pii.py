"""PII redaction: the code recognizers, StarCoder's post-processing, replacements, and the stage end to end."""

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from helpers import make_table, read_all, write_records

from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage

pytest.importorskip("presidio_analyzer")

from stackcurate.core.stage import plan_parquet  # noqa: E402
from stackcurate.stages.filter import NOTEBOOK_FIELDS  # noqa: E402
from stackcurate.stages.pii import SPAN_TYPE, Detector, PiiConfig, PiiStage, escapes, redact, rules  # noqa: E402

# Realistic-looking secrets, made up for these tests (none is a live credential).
AWS_KEY = "AKIAQ3EGRVX5HNVLG7OZ"
GITHUB_TOKEN = "ghp_9fK2xL7qWm4RtZ8vNp3YcB6dHs1JgE5uAo0T"
SLACK_TOKEN = "xoxb-2048817726912-4821938201374-Xq9LmB2vRt8KsW3pZn7Yc4Ha"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6Ik1hcmlhIn0.kH3x9Qv2LmZ8RtY4pWn7Bc5Ds1Fg"
RANDOM_SECRET = "q7Vx2LmZ9pRt4WnY8kBa3Cs6"


PATTERNS = PiiConfig(model="none")  # the model's own tests are in tests/test_pii_model.py


@pytest.fixture(scope="module")
def detector() -> Detector:
    return Detector(PATTERNS)


def found(detector: Detector, text: str, config: bool = False) -> list[tuple[str, str]]:
    """(entity, text) of each span to redact."""
    spans, _ = detector.find(text, config)
    return [(s.entity, text[s.start : s.end]) for s in spans]


def spared(detector: Detector, text: str) -> list[str]:
    return detector.find(text)[1]


# ---- emails ---------------------------------------------------------------------------------------------


def test_emails_in_comments_strings_and_headers(detector):
    text = '# maintained by maria.lopez+dev@fastmail.fm\nsend_to("ops-team@bigcorp.co.uk")\n'
    assert found(detector, text) == [("EMAIL", "maria.lopez+dev@fastmail.fm"), ("EMAIL", "ops-team@bigcorp.co.uk")]


def test_decorators_file_names_and_example_emails_are_not_redacted(detector):
    text = (
        "@property\ndef name(self): ...\n"
        'icon = "logo@2x.png"\n'
        'DEFAULT = "user@example.com"  # placeholder\n'
        'doc = "write to someone@test or you@yourdomain.org"\n'  # `.test` is no public suffix: not an email
    )
    assert found(detector, text) == []
    assert spared(detector, text) == ["email_example", "email_example"]


def test_license_emails_are_spared_but_author_emails_are_not(detector):
    text = "# Copyright (c) 2021 Dana Kim <dana@kim-labs.dev>\n# Author: Dana Kim <dana@kim-labs.dev>\n"
    assert found(detector, text) == [("EMAIL", "dana@kim-labs.dev")]
    spans, why = detector.find(text)
    assert spans[0].start > text.index("\n") and why == ["email_license"]


# ---- IP addresses -----------------------------------------------------------------------------------------


def test_public_ipv4_without_its_port(detector):
    assert found(detector, 'connect("34.120.18.7:8443")') == [("IP_ADDRESS", "34.120.18.7")]
    # `ver` inside SERVER is no version marker (the generated evaluation set found this)
    assert found(detector, "SERVER = '54.7.200.237'") == [("IP_ADDRESS", "54.7.200.237")]


def test_private_documentation_and_dns_addresses_are_spared(detector):
    text = (
        'a = "10.0.0.12"\nb = "192.168.1.20"\nc = "127.0.0.1"\ndns = "8.8.8.8"\ne = "203.0.113.9"\nf = "fe80::1:2:3"\n'
    )
    assert found(detector, text) == []
    assert sorted(spared(detector, text)) == ["ip_dns_server"] + ["ip_private"] * 5


def test_version_numbers_and_dotted_numbers_are_not_addresses(detector):
    text = (
        '__version__ = "4.2.1.7"\n'
        "requires = ['lib==1.0.0.1']\n"
        "oid = '1.3.6.1.4.1.311'\n"
        "x = 2.1.0.3  # short and no network word nearby\n"
    )
    assert found(detector, text) == []


def test_ipv6_addresses_but_not_slices_or_cpp_scopes(detector):
    text = 'dns6 = "2a00:1450:4001:82a::200e"\nevery_other = row[1::2]\nstd::vector<Face::Add> v;\n'
    assert found(detector, text) == [("IP_ADDRESS", "2a00:1450:4001:82a::200e")]


# ---- keys and tokens ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "secret", "rule"),
    [
        (f'aws_access_key_id = "{AWS_KEY}"', AWS_KEY, "aws_access_key_id"),
        (f"GH_TOKEN={GITHUB_TOKEN}", GITHUB_TOKEN, "github_token"),
        (f"client = WebClient(token='{SLACK_TOKEN}')", SLACK_TOKEN, "slack_token"),
        (f"headers = {{'Authorization': 'Bearer {JWT}'}}", JWT, "jwt"),
        (f'STRIPE_SECRET_KEY = "{RANDOM_SECRET}"', RANDOM_SECRET, "key_assignment"),
    ],
)
def test_keys_and_tokens(detector, line, secret, rule):
    spans, _ = detector.find(line)
    assert [(s.entity, line[s.start : s.end], s.detector) for s in spans] == [("KEY", secret, f"pattern:{rule}")]


def test_private_key_block_body_is_the_key(detector):
    body = "MIIEowIBAAKCAQEAu3Lx9Qv2LmZ8RtY4pWn7Bc5Ds1FgH6jK0\nq9Wx3Ez7Rt2Yb5Nc8Vm1Lk4Hj6Gf0Ds9Pa2Qw7Er3Ty5Ui8"
    text = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\n"
    assert found(detector, text) == [("KEY", body)]


def test_values_that_read_like_words_or_hashes_are_not_keys(detector):
    text = (
        'API_KEY = "your_api_key_goes_here"\n'  # no digits: not random-looking
        'SECRET_KEY = "development-secret-key-2024"\n'  # words: not gibberish
        'checksum = "d41d8cd98f00b204e9800998ecf8427e"\n'  # random, but no key-like name
        'token = "${GITHUB_TOKEN}"\n'
    )
    assert found(detector, text) == []


# ---- passwords ----------------------------------------------------------------------------------------------


def test_password_assignments_and_connection_strings(detector):
    text = 'DB_PASSWORD = "Tr0ub4dor&3"\nurl = "postgresql://svc_app:pa55w0rd.x@db.prod.net:5432/main"\n'
    assert found(detector, text) == [
        ("PASSWORD", "Tr0ub4dor&3"),
        ("USERNAME", "svc_app"),
        ("PASSWORD", "pa55w0rd.x"),
    ]


def test_placeholder_passwords_are_spared(detector):
    text = 'password = "changeme"\npwd = "<password>"\nPASSWORD = "${DB_PASSWORD}"\npasswd = "********"\n'
    assert found(detector, text) == []
    assert spared(detector, text) == ["placeholder"] * 4


def test_unquoted_values_count_only_in_config_files(detector):
    text = "DB_HOST=db.internal\nDB_PASSWORD=hX8v2QmR7t\nDJANGO_SECRET_KEY=k9Xq2Lm7Vt4Rz8Wp3Bn6Yc1Hd5\n"
    assert found(detector, text, config=True) == [
        ("PASSWORD", "hX8v2QmR7t"),
        ("KEY", "k9Xq2Lm7Vt4Rz8Wp3Bn6Yc1Hd5"),
    ]
    assert found(detector, "password = get_password()\n", config=True) == []
    assert found(detector, text, config=False) == []


# ---- escapes: JSON strings, notebook sources, string literals ------------------------------------------------


def test_views_undo_one_level_of_escapes_each_and_map_back_to_the_original():
    line = r's = "k = \"v\\\"w\"\n"'  # a string holding a string: two levels
    text = f"a = 1\n{line}\nb = 2\n"
    assert escapes.escaped_lines(text) == [(6, 6 + len(line))]
    first, second = escapes.views(text)
    assert first.text == 's = "k = "v\\"w"\n"' and second.text == 's = "k = "v"w"\n"'
    start = second.text.index('v"w')
    assert text[slice(*second.to_original(start, start + 3))] == r"v\\\"w"
    assert text[slice(*first.to_original(0, len(first.text)))] == line
    assert escapes.views("x = 'plain'\n") == [] and escapes.unescape("no escapes") is None


def test_runs_of_escaped_lines_are_read_in_one_joined_view():
    text = 'a = "1\\n"\nb = "2\\t"\nc = 3\nd = "\\"4\\""\n'
    assert escapes.escaped_lines(text) == [(0, 19), (26, 37)]
    (joined,) = escapes.views(text)
    assert joined.text == 'a = "1\n"\nb = "2\t"\nd = ""4""'
    start = joined.text.index('"4"')
    assert text[slice(*joined.to_original(start, start + 3))] == '\\"4\\"'
    separator = joined.starts[1] - 1  # the newline joining the runs stands for the one after the first run
    assert joined.to_original(separator - 3, separator + 1) == (15, 20) and text[15:20] == '2\\t"\n'


@pytest.mark.parametrize(
    ("text", "entity", "value", "rule"),
    [
        # a Python string holding a config file: `\"` around the value, `\n` between lines
        ('SETTINGS = "[db]\\npassword = \\"S3cr3t&Hors3\\"\\n"\n', "PASSWORD", "S3cr3t&Hors3", "password_assignment"),
        # a raw notebook: each source line is a JSON string
        (
            json.dumps({"source": [f'aws_secret_access_key = "{RANDOM_SECRET}"\n']}),
            "KEY", RANDOM_SECRET, "key_assignment",
        ),
        # a raw notebook whose code cell holds a string with escaped quotes: two levels
        (
            json.dumps({"source": [f'cfg = "api_key = \\"{RANDOM_SECRET}\\""\n']}),
            "KEY", RANDOM_SECRET, "key_assignment",
        ),
        # a private key inside a JSON string: its lines are `\n` escapes
        (
            json.dumps({"key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu3Lx9Qv2LmZ8RtY4pWn7\n"
                               "-----END RSA PRIVATE KEY-----\n"}),
            "KEY", "MIIEowIBAAKCAQEAu3Lx9Qv2LmZ8RtY4pWn7", "private_key_block",
        ),
    ],
)  # fmt: skip
def test_patterns_see_through_escapes(detector, text, entity, value, rule):
    spans, _ = detector.find(text)
    assert [(s.entity, text[s.start : s.end], s.detector) for s in spans] == [(entity, value, f"pattern:{rule}")]


def test_a_span_found_in_the_text_and_in_its_view_counts_once(detector):
    text = 's = "host = \\"10.0.0.1\\"\\n"\nkey = "AKIAQ3EGRVX5HNVLG7OZ"\n'
    spans, spared = detector.find(text)
    assert [text[s.start : s.end] for s in spans] == [AWS_KEY] and spared == ["ip_private"]


def test_a_redacted_value_is_redacted_wherever_it_recurs_in_the_file():
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu3Lx\nq9Wx3Ez7Rt2Yb5Nc\n-----END RSA PRIVATE KEY-----\n"
    texts = [
        'pw = "Tr0ub4dor&3x"\nuser = "svc_app"\npass_color = "green"\n' + pem,
        "Tr0ub4dor&3x\nold_Tr0ub4dor&3x Tr0ub4dor&3xy svc_app green\n",  # inside a longer word is another word
        json.dumps({"pem": pem, "out": "Tr0ub4dor&3x"}),  # the key's lines as `\n` escapes
    ]

    def span(entity: str, value: str, detector: str) -> rules.Span:
        start = texts[0].index(value)
        return rules.Span(entity, start, start + len(value), 0.9, detector)

    spans = [
        [
            span("PASSWORD", "Tr0ub4dor&3x", "pattern:password_assignment"),
            span("USERNAME", "svc_app", "model:x"),  # a username may be an identifier elsewhere: not repeated
            span("PASSWORD", "green", "pattern:password_assignment"),  # letters alone may be a word: neither
            span("KEY", pem[pem.index("MIIE") : pem.index("\n-----END")], "pattern:private_key_block"),
        ],
        [],
        [],
    ]
    out = redact.with_repeats(texts, spans)
    assert out[0] == spans[0]
    assert [(s.entity, texts[1][s.start : s.end], s.detector) for s in out[1]] == [
        ("PASSWORD", "Tr0ub4dor&3x", "same_value")
    ]
    assert [(s.entity, texts[2][s.start : s.end]) for s in out[2]] == [
        ("KEY", "MIIEowIBAAKCAQEAu3Lx\\nq9Wx3Ez7Rt2Yb5Nc"), ("PASSWORD", "Tr0ub4dor&3x")
    ]  # fmt: skip


# ---- post-processing, overlaps and replacement ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("entity", "text", "rule"),
    [
        ("PASSWORD", "abc", "too_short"),
        ("NAME", "Madonna", "name_one_word"),
        ("KEY", "x7Qz9Lm2", "key_too_short"),
        ("KEY", "correcthorsebatterystaple", "key_not_gibberish"),
        ("IP_ADDRESS", "999.1.1.1", "ip_unparseable"),
    ],
)
def test_post_processing_rules(entity, text, rule):
    assert rules.spared_by(rules.Span(entity, 0, len(text), 1.0, "model"), text) == rule


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("# https://github.com/giampaolo/psutil/issues/645", "psutil", "username_repository"),
        ("# https://github.com/giampaolo/psutil/issues/645", "giampaolo", None),
        ("# TODO: com.asarray_tuplesafe shouldn't cast", "asarray_tuplesafe", "username_identifier"),
        ("elif val == PhoneNumberType.VOICEMAIL:", "PhoneNumberType", "username_identifier"),
        ("handler = HttpBasicAuthHandler(creds)", "HttpBasicAuthHandler", "username_identifier"),
        ("# TODO(wesm): unclear", "wesm", None),
        ("# Thanks to @mkowalski.", "mkowalski", None),  # a sentence's full stop is not an attribute
        ("# see https://vincentarelbundock.github.io/docs", "vincentarelbundock", None),  # a user's pages
    ],
)
def test_usernames_that_are_repositories_or_identifiers_are_spared(text, value, rule):
    start = text.index(value)
    assert rules.spared_by(rules.Span("USERNAME", start, start + len(value), 1.0, "model"), text) == rule


def test_full_names_and_gibberish_keys_are_kept():
    assert rules.spared_by(rules.Span("NAME", 0, 11, 1.0, "model"), "Ana Pereira") is None
    assert rules.spared_by(rules.Span("KEY", 0, len(RANDOM_SECRET), 1.0, "model"), RANDOM_SECRET) is None


def test_overlapping_spans_keep_the_longer_one():
    spans = [rules.Span("USERNAME", 0, 4, 0.9, "a"), rules.Span("EMAIL", 0, 12, 0.8, "b")]
    assert [s.entity for s in rules.resolve_overlaps(spans)] == ["EMAIL"]


def test_ip_replacement_is_consistent_within_a_file_and_keeps_the_family(detector):
    text = "a = '34.120.18.7'\nb = '52.95.110.1'\nc = '34.120.18.7'\nd = '2a00:1450:4001:82a::200e'\n"
    spans, _ = detector.find(text)
    new = redact.replacements(text, spans)
    assert new[0] == new[2] == redact.IPV4_POOL[0]
    assert new[1] == redact.IPV4_POOL[1]
    assert new[3] == redact.IPV6_POOL[0]


def test_offsets_are_characters_after_multibyte_text(detector):
    text = "# façade 😀 — контакт: ivan.petrov@yandex.ru, ключ = 'x'\n"
    spans, _ = detector.find(text)
    assert [(s.entity, text[s.start : s.end]) for s in spans] == [("EMAIL", "ivan.petrov@yandex.ru")]
    assert spans[0].start == text.index("ivan")
    assert redact.redact(text, spans, redact.replacements(text, spans)) == text.replace(
        "ivan.petrov@yandex.ru", "<EMAIL>"
    )


def test_entities_limit_what_is_redacted():
    only_keys = Detector(PiiConfig(entities=("KEY",), model="none"))
    text = f'email = "maria@fastmail.fm"\nkey = "{AWS_KEY}"\n'
    assert found(only_keys, text) == [("KEY", AWS_KEY)]


def test_bad_settings_are_one_line_errors():
    with pytest.raises(StackcurateError, match="unknown entity 'PHONE'"):
        build_config(PiiConfig, {"entities": ["EMAIL", "PHONE"]})
    with pytest.raises(StackcurateError, match="score_threshold"):
        build_config(PiiConfig, {"score_threshold": 2})
    with pytest.raises(StackcurateError, match="model_lines must be 'gated' or 'all'"):
        build_config(PiiConfig, {"model_lines": "some"})
    yaml_dir = Path("/pipelines")  # `auto` and `none` are choices, not files next to the YAML; a folder is a path
    assert build_config(PiiConfig, {"model": "auto"}, base_dir=yaml_dir).model == "auto"
    assert build_config(PiiConfig, {"model": "none"}, base_dir=yaml_dir).model == "none"
    assert build_config(PiiConfig, {"model": "models/pii"}, base_dir=yaml_dir).model == "/pipelines/models/pii"
    with pytest.raises(StackcurateError, match="no detector left"):
        build_config(PiiConfig, {"patterns": False, "model": "none"})


# ---- the stage, end to end ----------------------------------------------------------------------------------


def test_stage_redacts_records_spans_and_never_stores_secrets(tmp_path: Path):
    contents = [
        f'# Author: Lena Fischer <lena.fischer@posteo.de>\nAWS_KEY = "{AWS_KEY}"\nhost = "34.120.18.7"\n',
        "def add(a, b):\n    return a + b\n",
        "DB_PASSWORD=hX8v2QmR7t\n",
        "",
    ]
    table = make_table(
        [("/src/app.py", contents[0]), ("/src/math.py", contents[1]), ("/.env", contents[2]), ("/e.py", "")],
        language="Python",
    )
    records = write_records(tmp_path / "in", [table])
    run_stage(
        get_stage("pii"), PATTERNS, str(tmp_path / "out"), RunOptions(runner="local", progress=False),
        input_uri=str(records),
    )  # fmt: skip
    out = read_all(tmp_path / "out" / "pii")
    assert out.num_rows == 4
    texts = out.column("content").to_pylist()
    assert texts[0] == '# Author: Lena Fischer <<EMAIL>>\nAWS_KEY = "<KEY>"\nhost = "172.16.31.10"\n'
    assert texts[1] == contents[1] and texts[3] == ""
    assert texts[2] == "DB_PASSWORD=<PASSWORD>\n"
    spans = out.column("pii_spans").to_pylist()
    assert [(s["entity"], s["replacement"]) for s in spans[0]] == [
        ("EMAIL", "<EMAIL>"), ("KEY", "<KEY>"), ("IP_ADDRESS", "172.16.31.10")
    ]  # fmt: skip
    assert contents[0][spans[0][1]["start"] : spans[0][1]["end"]] == AWS_KEY
    assert spans[1] == [] and spans[2][0]["detector"] == "pattern:config_password"
    # nothing secret in any file the stage wrote
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    for secret in (AWS_KEY, "lena.fischer@posteo.de", "34.120.18.7", "hX8v2QmR7t"):
        assert secret.encode() not in written
    stats = read_all(tmp_path / "out" / "pii" / "stats")
    counted = {r["reason"]: r["value"] for r in stats.to_pylist() if r["metric"] == "spans_redacted"}
    assert counted == {"EMAIL": 1, "KEY": 1, "IP_ADDRESS": 1, "PASSWORD": 1}
    rows = duckdb.sql(
        f"select s.entity, count(*) from read_parquet('{tmp_path}/out/pii/*.parquet'), "
        "unnest(pii_spans) as t(s) group by 1 order by 1"
    ).fetchall()
    assert rows == [("EMAIL", 1), ("IP_ADDRESS", 1), ("KEY", 1), ("PASSWORD", 1)]


def _notebook_row(cells: list[dict[str, str]]) -> dict:
    """A notebook's row as filter leaves it: the raw JSON, the script and the cells."""
    notebook = {
        "cells": [
            {"cell_type": c["cell_type"], "source": c["source"].splitlines(keepends=True), "metadata": {},
             "outputs": [{"output_type": "stream", "name": "stdout", "text": [c["output"]]}] if c["output"] else []}
            for c in cells
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 4,
    }  # fmt: skip
    script = "".join(f"# %%\n{c['source']}\n" for c in cells)
    return {"content": json.dumps(notebook, indent=1), "notebook_script": script, "notebook_cells": cells}


def test_stage_redacts_every_text_column_of_a_notebook():
    cells = [
        {"cell_type": "code", "output": "Tr0ub4dor&3x\n",
         "source": f'password = "Tr0ub4dor&3x"\naws_key = "{AWS_KEY}"\nhosts = ["34.120.18.7", "52.95.110.1"]\n'
                   "print(password)\n"},
        {"cell_type": "markdown", "output": "", "source": "Mirror at 52.95.110.1, mail ivan.petrov@yandex.ru\n"},
    ]  # fmt: skip
    row = _notebook_row(cells)
    table = make_table([("/nb.ipynb", row["content"]), ("/a.py", "x = 1\n")], language="Python")
    notebook_columns = [
        pa.array([row["notebook_script"], None], NOTEBOOK_FIELDS[0].type),
        pa.array(["python", None], NOTEBOOK_FIELDS[1].type),
        pa.array([row["notebook_cells"], None], NOTEBOOK_FIELDS[2].type),
    ]
    for field, column in zip(NOTEBOOK_FIELDS, notebook_columns, strict=True):
        table = table.append_column(field, column)
    out = PiiStage(PATTERNS)(table).kept
    assert out.schema == table.schema.append(pa.field("pii_spans", pa.list_(SPAN_TYPE)))  # types unchanged
    first, second = out.to_pylist()
    # one IP mapping per file: 52.95.110.1 is the second address of the file, in the markdown cell too
    code = 'password = "<PASSWORD>"\naws_key = "<KEY>"\nhosts = ["172.16.31.10", "172.16.58.3"]\nprint(password)\n'
    markdown = "Mirror at 172.16.58.3, mail <EMAIL>\n"
    assert first["notebook_cells"] == [
        {"cell_type": "code", "source": code, "output": "<PASSWORD>\n"},  # the printed password too
        {"cell_type": "markdown", "source": markdown, "output": ""},
    ]
    assert first["notebook_script"] == f"# %%\n{code}\n# %%\n{markdown}\n"
    assert first["content"] == _notebook_row(first["notebook_cells"])["content"]
    assert second["content"] == "x = 1\n" and second["pii_spans"] == [] and second["notebook_cells"] is None
    spans = [(s["column"], s["entity"], s["detector"], s["replacement"]) for s in first["pii_spans"]]
    by_column: dict[str, list[tuple[str, str, str]]] = {}
    for column, *rest in spans:
        by_column.setdefault(column, []).append(tuple(rest))
    code_spans = [
        ("PASSWORD", "pattern:password_assignment", "<PASSWORD>"),
        ("KEY", "pattern:aws_access_key_id", "<KEY>"),
        ("IP_ADDRESS", "pattern:ipv4", "172.16.31.10"),
        ("IP_ADDRESS", "pattern:ipv4", "172.16.58.3"),
    ]
    markdown_spans = [("IP_ADDRESS", "pattern:ipv4", "172.16.58.3"), ("EMAIL", "pattern:email", "<EMAIL>")]
    printed = [("PASSWORD", "same_value", "<PASSWORD>")]
    assert by_column == {
        "content": code_spans + printed + markdown_spans,  # in text order: the output comes before the next cell
        "notebook_script": code_spans + markdown_spans,
        "notebook_cells[0].source": code_spans,
        "notebook_cells[0].output": printed,
        "notebook_cells[1].source": markdown_spans,
    }
    text = row["notebook_cells"][0]["source"]
    span = next(s for s in first["pii_spans"] if s["column"] == "notebook_cells[0].source")
    assert text[span["start"] : span["end"]] == "Tr0ub4dor&3x"


def test_stage_output_schema_adds_the_spans_column(tmp_path: Path):
    table = make_table([("/a.py", "x = 1\n")])
    records = write_records(tmp_path / "in", [table])
    shard = plan_parquet([str(records / "00000.parquet")], rows_per_shard=10)[0]
    schema = PiiStage(PATTERNS).output_schema(shard)
    assert schema.names == [*table.schema.names, "pii_spans"]
    assert schema.field("pii_spans").type == pa.list_(SPAN_TYPE)

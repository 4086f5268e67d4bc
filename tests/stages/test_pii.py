"""PII redaction: the code recognizers, StarCoder's post-processing, replacements, and the stage end to end."""

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from helpers import make_table, read_all, table_dir, write_records

from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage

pytest.importorskip("presidio_analyzer")

from stackcurate.core.planning import plan_parquet  # noqa: E402
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
    text = '# maintained by maria.lopez+dev@fastmail.fm\nsend_to("k.tanaka@bigcorp.co.uk")\n'
    assert found(detector, text) == [("EMAIL", "maria.lopez+dev@fastmail.fm"), ("EMAIL", "k.tanaka@bigcorp.co.uk")]


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
    assert found(detector, text) == [("NAME", "Dana Kim"), ("NAME", "Dana Kim"), ("EMAIL", "dana@kim-labs.dev")]
    spans, why = detector.find(text)
    assert spans[2].start > text.index("\n") and why == ["email_license"]


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


def test_unquoted_values_count_in_config_files_and_as_name_equals_value_elsewhere(detector):
    text = "DB_HOST=db.internal\nDB_PASSWORD=hX8v2QmR7t\nDJANGO_SECRET_KEY=k9Xq2Lm7Vt4Rz8Wp3Bn6Yc1Hd5\n"
    expected = [("PASSWORD", "hX8v2QmR7t"), ("KEY", "k9Xq2Lm7Vt4Rz8Wp3Bn6Yc1Hd5")]
    assert found(detector, text, config=True) == expected
    assert found(detector, "password = get_password()\n", config=True) == []
    # Outside config files: an env var in a shell line or a docs' snippet, never code's `name = value` with a
    # name or an expression of names on the right (a random run there is a value: `password = hX8v2QmR7t`).
    assert found(detector, text, config=False) == expected
    shell = "docker run -e 'SA_PASSWORD=x3rT6UWo3HPkC' -e API_TOKEN=q7Vx2LmZ9pRt4WnY8kBa3Cs6 mssql\n"
    assert found(detector, shell) == [("PASSWORD", "x3rT6UWo3HPkC"), ("KEY", "q7Vx2LmZ9pRt4WnY8kBa3Cs6")]
    code = (
        "password=password\npassword=self.password\npassword = new_pass2\npassword = Lq8-Kx2wZm\n"
        "password = userPass\napi_key=settings.API_KEY_VALUE\n"
    )
    assert found(detector, code) == []
    assert found(detector, "password = hX8v2QmR7t\n") == [("PASSWORD", "hX8v2QmR7t")]


# ---- escapes: JSON strings, notebook sources, string literals ------------------------------------------------


def test_entity_views_read_pod_and_html_letters_and_map_back():
    text = "x = 1\nCopyright 2014 by Salvador FandiE<ntilde>o\n<p>by Ren&eacute; Lef&#232;vre &amp; co</p>\nAT&amp;T\n"
    (view,) = escapes.entity_views(text)
    assert view.text == "Copyright 2014 by Salvador Fandiño\n<p>by René Lefèvre & co</p>\nAT&T"  # `x = 1`: none
    start = view.text.index("Salvador Fandiño")
    assert text[slice(*view.to_original(start, start + 16))] == "Salvador FandiE<ntilde>o"
    start = view.text.index("René Lefèvre")
    assert text[slice(*view.to_original(start, start + 12))] == "Ren&eacute; Lef&#232;vre"
    assert escapes.entity_views("plain\n") == [] and escapes.entity_views("a &nbsp; b\n") == []
    (markup,) = escapes.entity_views("<code>&lt;password&gt;Ex98wh&lt;/password&gt;</code>\n")  # code in HTML
    assert markup.text == "<code><password>Ex98wh</password></code>"
    assert escapes.entity_views("Password=%NCDm)(O#Cc+dTlz&624;\n") == []  # `&624;` is no entity: no `#`


def test_a_name_written_with_entities_is_redacted_whole(detector):
    text = "# Copyright (C) 2005, 2014 by Salvador FandiE<ntilde>o\n"
    assert found(detector, text) == [("NAME", "Salvador FandiE<ntilde>o")]


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
        ("# https://github.com/giampaolo/psutil/issues/645", "psutil", "username_forge_url"),
        ("# https://github.com/giampaolo/psutil/issues/645", "giampaolo", "username_forge_url"),
        ("# TODO: com.asarray_tuplesafe shouldn't cast", "asarray_tuplesafe", "username_identifier"),
        ("elif val == PhoneNumberType.VOICEMAIL:", "PhoneNumberType", "username_identifier"),
        ("handler = HttpBasicAuthHandler(creds)", "HttpBasicAuthHandler", "username_identifier"),
        ("# TODO(wesm): unclear", "wesm", None),
        ("# Thanks to @mkowalski.", "mkowalski", None),  # a sentence's full stop is not an attribute
        ("# see https://vincentarelbundock.github.io/docs", "vincentarelbundock", "username_forge_url"),
    ],
)
def test_usernames_that_are_repositories_or_identifiers_are_spared(text, value, rule):
    start = text.index(value)
    assert rules.spared_by(rules.Span("USERNAME", start, start + len(value), 1.0, "model"), text) == rule


@pytest.mark.parametrize("title", ["Only One", "Document Title", "Sample Enum"])
def test_a_title_made_of_english_words_is_no_name(title):
    assert rules.spared_by(rules.Span("NAME", 0, len(title), 1.0, "model"), title) == "name_common_words"


def test_full_names_and_gibberish_keys_are_kept():
    assert rules.spared_by(rules.Span("NAME", 0, 11, 1.0, "model"), "Ana Pereira") is None
    assert rules.spared_by(rules.Span("NAME", 0, 17, 1.0, "model"), "Raymond Hettinger") is None
    assert rules.spared_by(rules.Span("KEY", 0, len(RANDOM_SECRET), 1.0, "model"), RANDOM_SECRET) is None


def test_overlapping_spans_keep_the_longer_one():
    spans = [rules.Span("USERNAME", 0, 4, 0.9, "a"), rules.Span("EMAIL", 0, 12, 0.8, "b")]
    assert [s.entity for s in rules.resolve_overlaps(spans)] == ["EMAIL"]


def test_two_rules_finding_one_span_give_the_same_record_in_any_order():
    a, b = rules.Span("NAME", 0, 8, 0.9, "pattern:people_file"), rules.Span("NAME", 0, 8, 0.9, "pattern:name_list")
    assert rules.resolve_overlaps([a, b]) == rules.resolve_overlaps([b, a]) == [b]


def test_a_patterns_span_wins_over_the_models_of_another_type():
    text = "Jane Roe <jroe@corp-mail.org>"
    email = rules.Span("EMAIL", 10, 28, 1.0, "pattern:email")
    longer_name = rules.Span("NAME", 0, 14, 0.9, f"{rules.MODEL_PREFIX}minilm-l3")  # `Jane Roe <jroe`
    assert rules.resolve_overlaps([longer_name, email]) == [email]
    name = rules.Span("NAME", 0, 8, 0.9, f"{rules.MODEL_PREFIX}minilm-l3")
    assert rules.resolve_overlaps([name, email]) == [name, email]
    assert text[name.start : name.end] == "Jane Roe"


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
    assert texts[0] == '# Author: <NAME> <<EMAIL>>\nAWS_KEY = "<KEY>"\nhost = "172.16.31.10"\n'
    assert texts[1] == contents[1] and texts[3] == ""
    assert texts[2] == "DB_PASSWORD=<PASSWORD>\n"
    spans = out.column("pii_spans").to_pylist()
    assert [(s["entity"], s["replacement"]) for s in spans[0]] == [
        ("NAME", "<NAME>"), ("EMAIL", "<EMAIL>"), ("KEY", "<KEY>"), ("IP_ADDRESS", "172.16.31.10")
    ]  # fmt: skip
    assert contents[0][spans[0][2]["start"] : spans[0][2]["end"]] == AWS_KEY
    assert spans[1] == [] and spans[2][0]["detector"] == "pattern:config_password"
    # nothing secret in any file the stage wrote
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    for secret in (AWS_KEY, "Lena Fischer", "lena.fischer@posteo.de", "34.120.18.7", "hX8v2QmR7t"):
        assert secret.encode() not in written
    stats = read_all(table_dir(tmp_path / "out" / "pii", "stats"))
    counted = {r["reason"]: r["value"] for r in stats.to_pylist() if r["metric"] == "spans_redacted"}
    assert counted == {"NAME": 1, "EMAIL": 1, "KEY": 1, "IP_ADDRESS": 1, "PASSWORD": 1}
    rows = duckdb.sql(
        f"select s.entity, count(*) from read_parquet('{tmp_path}/out/pii/*.parquet'), "
        "unnest(pii_spans) as t(s) group by 1 order by 1"
    ).fetchall()
    assert rows == [("EMAIL", 1), ("IP_ADDRESS", 1), ("KEY", 1), ("NAME", 1), ("PASSWORD", 1)]


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


# ---- keys whatever their alphabet; hashes, private IPs, versions and example emails are not redacted ------------

# Random hex the English bigram model reads as words (asserted below): StarCoder's gibberish rule alone spares them.
HEX32 = "99dcee44e7553d0bb20df47993fd1c19"
HEX40 = "6e564fa684c6edd797e6589c6ef13a3a3c6cba85"
HEX64 = "652911ee8b791474d5dfd59a55b606ff654facf74594ff58811ea80b671777ec"
BASE64_KEY = "R2hxvR5wOXGYPG/O/wv1oPAvHhsDHeJqRJkZz0At"


def test_the_hex_test_values_are_not_gibberish():
    assert [rules.is_gibberish(v) for v in (HEX32, HEX40, HEX64)] == [False, False, False]


@pytest.mark.parametrize(
    ("text", "secret", "rule", "config"),
    [
        (f'api_key = "{HEX32}"\n', HEX32, "key_assignment", False),
        (f'client = Client(token="{HEX40}")\n', HEX40, "key_assignment", False),
        (f'const apiKey = "{HEX32}";\n', HEX32, "key_assignment", False),
        (f'#define WEATHER_API_KEY "{HEX40}"\n', HEX40, "key_assignment", False),
        (f'STRIPE_KEY = "{HEX64}"\n', HEX64, "key_assignment", False),
        (f'params = {{"key": "{HEX32}", "q": query}}\n', HEX32, "key_assignment", False),
        (f'os.environ.setdefault("WEATHER_API_TOKEN", "{HEX40}")\n', HEX40, "key_assignment", False),
        (f'headers = {{"Authorization": "Bearer {HEX40}"}}\n', HEX40, "bearer", False),
        (f'curl -H "Authorization: Token {HEX32}" https://api.service.io/v1/items\n', HEX32, "bearer", False),
        (f"headers = {{'Authorization': 'Basic {BASE64_KEY}'}}\n", BASE64_KEY, "bearer", False),
        (f'self.client_secret = "{BASE64_KEY}"\n', BASE64_KEY, "key_assignment", False),
        (f"SECRET_KEY: {HEX64}\n", HEX64, "config_key", True),
        (f"DJANGO_SECRET_KEY={HEX40}\n", HEX40, "config_key", True),
    ],
)
def test_hex_and_base64_keys_in_key_contexts_are_keys(detector, text, secret, rule, config):
    spans, _ = detector.find(text, config)
    assert [(s.entity, text[s.start : s.end], s.detector) for s in spans] == [("KEY", secret, f"pattern:{rule}")]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (f'sha256 = "{HEX64}"\n', HEX64),
        (f'commit_hash = "{HEX40}"\n', HEX40),
        (f'    "integrity": "sha512-{BASE64_KEY}",\n', f"sha512-{BASE64_KEY}"),
        (f"md5sum: {HEX32}\n", HEX32),
        (f'ETag: "{HEX32}"\n', HEX32),
        (f"checkout(revision='{HEX40}')\n", HEX40),
        (f'api_token_md5 = "{HEX32}"  # only the digest is kept\n', HEX32),
        (f'SECRET_KEY = "{HEX64}"  # SHA-256 of the release tarball\n', HEX64),
        (f'{{"token": "{HEX40}", "etag": "W/1"}}\n', HEX40),
        (f'auth_token = "{HEX40}"  # revision pinned in CI\n', HEX40),
        (f'headers = {{"Authorization": "Bearer {HEX40}", "X-Checksum": crc}}\n', HEX40),
        (f"secret_key_digest: {HEX64}\n", HEX64),
    ],
)
def test_hashes_in_a_hash_context_are_not_keys(detector, text, value):
    """Not redacted by the patterns (a key-named one is found, then spared), nor when the model calls it a KEY."""
    assert found(detector, text, config=True) == []
    key_named = any(word in text.lower() for word in ("key", "token", "authorization"))
    assert detector.find(text, True)[1] == (["key_hash"] if key_named else [])
    start = text.index(value)
    assert rules.spared_by(rules.Span("KEY", start, start + len(value), 0.99, "model"), text) == "key_hash"


def test_hex_ids_outside_key_contexts_are_not_keys(detector):
    text = (
        f'checksum = "{HEX32}"\n'  # no key-like name: never a candidate
        f'cache_key = "{HEX40}"\n'  # a cache key, not a secret
        f'public_key = "{HEX64}"\n'
        f'request_id = "{HEX32}"\n'
        f'#define KEY_TABLE "{HEX64}"\n'  # `key` is not the macro's last word: no key's name
        '    {"key": "48c67f3c-63bb-4f92-a98a-4ee0fbc2bef6", "fileId": 123}\n'  # an S3 object's key
        'api_key = "deadbeefcafebabe"\n'  # hex shorter than 32 digits is an id or a short hash
    )
    assert found(detector, text) == [] and spared(detector, text) == []


def test_vendor_tokens_stay_keys_next_to_hash_words(detector):
    text = f'git commit -m "rotate"  # GH_TOKEN={GITHUB_TOKEN}\n'
    assert found(detector, text) == [("KEY", GITHUB_TOKEN)]


def test_private_loopback_and_documentation_addresses_are_not_redacted(detector):
    text = (
        'DB_HOST = "10.20.30.40"\n'
        'REDIS_URL = "redis://172.18.0.3:6379/0"\n'
        'gateway = "192.168.100.1"\n'
        'server.bind(("127.0.0.1", 8080))\n'
        'listen = "::1"\n'
        'link_local = "fe80::1ff:fe23:4567:890a"\n'
        "# e.g. ping 192.0.2.10 or 198.51.100.23 or 203.0.113.77\n"
        'dns6 = "2001:db8:85a3::8a2e:370:7334"\n'
    )
    assert found(detector, text) == []
    assert spared(detector, text) == ["ip_private"] * 9


@pytest.mark.parametrize(
    "text",
    [
        'version = "1.2.3.4"\n',
        '__version__ = "10.2.3.4"\n',
        "# v2.0.0.1 fixes the proxy server timeout\n",
        "Version: 10.0.19041.1\n",
        "    <version>4.12.0.1</version>\n",
        '  "version": "4.12.1.12",\n',
        "requests==2.31.0.1\nurllib3>=1.26.18.2\nidna~=3.4.0.1\n",
        "pkg==1.2.3.4 ; python_version >= '3.8'\n",
        "Requires: libfoo >= 1.4.22.3\n",
        "  * upgrade to 4.12.0.1 (bugfix)\n",
        "Build 8.0.11.22 (x64)\n",
        "copy h2-2.1.214.0.jar and ant-1.10.13.1.jar\n",
        "tomcat 9.0.43.0 released\n",
        "golang-github-opencontainers-specs (1.0.2.66.g20a2d97-1) unstable; urgency=medium\n",
        "libfoo (1.2.3.4) bookworm; urgency=low\n",
    ],
)
def test_version_strings_shaped_like_addresses_are_not_addresses(detector, text):
    assert found(detector, text, config=True) == [] and spared(detector, text) == []


def test_example_noreply_and_git_remote_addresses_are_not_redacted(detector):
    text = (
        'DEFAULT_FROM = "user@example.com"\n'
        "# Co-authored-by: dependabot[bot] <noreply@github.com>\n"
        "Co-authored-by: Jane Roe <12345+jroe@users.noreply.github.com>\n"
        "git remote add origin git@github.com:octo-org/octo-repo.git\n"
        'url = "git@gitlab.com:group/sub/project.git"\n'
        "pip install git+ssh://git@bitbucket.org/team/tool.git\n"
    )
    assert [value for entity, value in found(detector, text) if entity != "NAME"] == []  # names: their own tests
    # `git@bitbucket.org` after `ssh://` is the URL's user, no address at all
    assert spared(detector, text) == ["email_example"] * 3 + ["email_git_remote"] * 2


def test_protocol_names_templates_and_made_up_names_are_not_redacted(detector):
    text = (
        'assert "ssh-rsa-cert-v01@openssh.com" in algorithms\nx.global_request("keepalive@lag.net")\n'
        '"Language-Team: LANGUAGE <LL@li.org>\\n"\nLast-Translator: John Doe <jd@example.com>\n'
        'url = "http://[FEDC:BA98:7654:3210:FEDC:BA98:7654:3210]:80/index.html"\n'
        'query = "?token=[Filtered]&session=[Filtered]"\nDu bon vin tous les jours\n'
        "Author: Damien Miller <djm@openssh.com>\n"  # a person at the same domain: redacted
        "maintainer_email = team@aiohttp.org\n"  # a project's address is an EMAIL in BigCode's scheme
        "# Maintainer: docutils-develop@lists.sourceforge.net\nassert host == '1:2::2:2'\n"  # a list; reserved
    )
    assert found(detector, text) == [
        ("NAME", "Damien Miller"), ("EMAIL", "djm@openssh.com"), ("EMAIL", "team@aiohttp.org")
    ]  # fmt: skip
    assert sorted(spared(detector, text)) == [
        "email_example", "email_example", "email_list", "email_protocol_name", "email_protocol_name",
        "ip_documentation", "ip_private", "name_placeholder",
    ]  # fmt: skip
    lowercase = rules.Span("NAME", 11, 25, 0.9, "model:x")  # what the model once read as a name
    assert rules.spared_by(lowercase, text[text.index("Du") :]) == "name_lowercase"
    assert rules.spared_by(rules.Span("NAME", 0, 5, 0.9, "model:x"), "王 伟 说") is None  # no capitals in Han
    phrase = "Du bon vin tous les jours"  # capitalised as a sentence starts: not a name
    assert rules.spared_by(rules.Span("NAME", 0, len(phrase), 0.9, "model:x"), phrase) == "name_lowercase_words"
    particles = "Pieter van der Berg"
    assert rules.spared_by(rules.Span("NAME", 0, len(particles), 0.9, "model:x"), particles) is None
    team = "assert catalog.language_team == 'German Lang <de@babel.org>'"
    at = team.index("German")
    assert rules.spared_by(rules.Span("NAME", at, at + 11, 0.85, "pattern:x"), team) == "language_team"


def test_real_personal_data_next_to_what_is_spared_is_still_redacted(tmp_path: Path):
    """One realistic file through the stage: only the key, the public IP and the personal email change."""
    text = (
        "# Bug reports: ana.ruiz@fastmail.fm\n"
        "# https://github.com/octo-org/weather-client/issues/12\n"
        '__version__ = "2.0.0.1"\n'
        f'TARBALL_SHA256 = "{HEX64}"\n'
        f'WEATHER_API_KEY = "{HEX32}"\n'
        'PUBLIC_HOST = "34.120.18.7"\n'
        'LOCAL_HOST = "192.168.1.20"\n'
        'SUPPORT = "noreply@example.com"\n'
        "# clone: git@github.com:octo-org/weather-client.git\n"
    )
    out = PiiStage(PATTERNS)(make_table([("/weather/client.py", text)], language="Python"))
    assert out.kept.column("content").to_pylist() == [
        text.replace("ana.ruiz@fastmail.fm", "<EMAIL>")
        .replace(HEX32, "<KEY>")
        .replace("34.120.18.7", out.kept.column("pii_spans").to_pylist()[0][2]["replacement"])
    ]
    spans = out.kept.column("pii_spans").to_pylist()[0]
    assert [(s["entity"], text[s["start"] : s["end"]]) for s in spans] == [
        ("EMAIL", "ana.ruiz@fastmail.fm"), ("KEY", HEX32), ("IP_ADDRESS", "34.120.18.7")
    ]  # fmt: skip


# ---- usernames: detected and recorded, redacted only when `redact` lists them, forge URLs never ---------------

DB_USER = "svc_k7rq2x"  # the user of a connection string: a USERNAME the patterns find (made up)
DSN = f'DATABASE_URL = "postgresql://{DB_USER}:Gl4ss&Sp00n!@db.prod.net:5432/main"\n'
ALL_REDACTED = ("EMAIL", "IP_ADDRESS", "KEY", "PASSWORD", "NAME", "USERNAME")


def test_default_config_records_a_username_without_changing_the_text():
    assert PATTERNS.redact == ("EMAIL", "IP_ADDRESS", "KEY", "PASSWORD", "NAME")  # StarCoder's: no USERNAME
    out = PiiStage(PATTERNS)(make_table([("/settings.py", DSN)], language="Python"))
    assert out.kept.column("content").to_pylist() == [DSN.replace("Gl4ss&Sp00n!", "<PASSWORD>")]
    spans = out.kept.column("pii_spans").to_pylist()[0]
    assert [(s["entity"], DSN[s["start"] : s["end"]], s["replacement"]) for s in spans] == [
        ("USERNAME", DB_USER, None), ("PASSWORD", "Gl4ss&Sp00n!", "<PASSWORD>")
    ]  # fmt: skip
    assert out.stats == {
        ("spans_detected_only", "Python", "USERNAME"): 1.0,
        ("spans_redacted", "Python", "PASSWORD"): 1.0,
    }


def test_redact_listing_username_replaces_it():
    cfg = build_config(PiiConfig, {"model": "none", "redact": list(ALL_REDACTED)})
    out = PiiStage(cfg)(make_table([("/settings.py", DSN)], language="Python"))
    assert out.kept.column("content").to_pylist() == [
        'DATABASE_URL = "postgresql://<USERNAME>:<PASSWORD>@db.prod.net:5432/main"\n'
    ]
    spans = out.kept.column("pii_spans").to_pylist()[0]
    assert [(s["entity"], s["replacement"]) for s in spans] == [("USERNAME", "<USERNAME>"), ("PASSWORD", "<PASSWORD>")]
    assert out.stats == {("spans_redacted", "Python", "USERNAME"): 1.0, ("spans_redacted", "Python", "PASSWORD"): 1.0}


def test_redact_is_checked_and_only_replaces_what_is_detected():
    with pytest.raises(StackcurateError, match="unknown entity 'HANDLE'"):
        build_config(PiiConfig, {"redact": ["EMAIL", "HANDLE"]})
    # USERNAME is to be redacted but not detected: nothing finds it, so the text keeps it and no span names it
    cfg = PiiConfig(model="none", entities=("PASSWORD",), redact=ALL_REDACTED)
    assert cfg.redacted == {"PASSWORD"}
    out = PiiStage(cfg)(make_table([("/settings.py", DSN)], language="Python"))
    assert out.kept.column("content").to_pylist() == [DSN.replace("Gl4ss&Sp00n!", "<PASSWORD>")]
    assert [s["entity"] for s in out.kept.column("pii_spans").to_pylist()[0]] == ["PASSWORD"]


@pytest.mark.parametrize(
    ("text", "owner", "repo"),
    [
        ("`#1700 <https://github.com/nedbat/coveragepy/pull/1700>`_", "nedbat", "coveragepy"),
        ("# https://github.com/giampaolo/psutil/issues/645#issuecomment-1234", "giampaolo", "psutil"),
        ("url = 'https://www.github.com/pallets/flask'", "pallets", "flask"),
        ("[fmt]: https://github.com/fmtlib/fmt/pull/3024", "fmtlib", "fmt"),
        ('"repository": "git+https://github.com/sindresorhus/got.git",', "sindresorhus", "got"),
        ("origin\tgit@github.com:tkowalczyk/widgets.git (fetch)", "tkowalczyk", "widgets"),
        ("git clone ssh://git@gitlab.com/inkscape/inkscape.git", "inkscape", "inkscape"),
        ("See https://gitlab.com/gitlab-org/gitaly/-/merge_requests/6119.", "gitlab-org", "gitaly"),
        ("Issues: https://bitbucket.org/ruamel/yaml/issues/512", "ruamel", "yaml"),
        ("Mirror: https://codeberg.org/forgejo/forgejo/releases", "forgejo", "forgejo"),
        ("source = https://git.sr.ht/~sircmpwn/aerc/log", "sircmpwn", "aerc"),
        ("docs at https://vincentarelbundock.github.io/marginaleffects/", "vincentarelbundock", "marginaleffects"),
        ("curl -sSL https://raw.githubusercontent.com/python-poetry/install.python-poetry.org/main/x.py",
         "python-poetry", "install.python-poetry.org"),
        ("https://gist.github.com/mkowalski/3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d", "mkowalski", "3f2a9c1e8b7d6a5f4e3d"),
    ],
)  # fmt: skip
def test_no_forge_url_owner_or_repository_segment_is_redacted(text, owner, repo):
    owner_at = text.index(owner)
    for value, start in ((owner, owner_at), (repo, text.index(repo, owner_at + len(owner)))):
        span = rules.Span("USERNAME", start, start + len(value), 1.0, "model:minilm-l3")
        # (`fmt` and `got` are too short to be redacted at all, StarCoder's first rule)
        assert rules.spared_by(span, text) == ("too_short" if len(value) <= 3 else "username_forge_url"), value


@pytest.mark.parametrize(
    ("text", "handle"),
    [
        ("* Fixed a crash, reported by @tkowalczyk in https://github.com/nedbat/coveragepy/pull/1700", "tkowalczyk"),
        ("url = 'git@github.com:pallets/flask.git'  # maintained by @mkowalski", "mkowalski"),
        ("# reviewed by rbarnes, see https://gitlab.com/inkscape/inkscape/-/issues/12", "rbarnes"),
    ],
)  # fmt: skip
def test_a_prose_handle_next_to_a_forge_url_is_not_spared(text, handle):
    start = text.index(handle)
    assert rules.spared_by(rules.Span("USERNAME", start, start + len(handle), 1.0, "model:minilm-l3"), text) is None


def test_a_detected_only_span_stores_no_value(tmp_path: Path):
    text = f"# deploy settings\n{DSN}"
    records = write_records(tmp_path / "in", [make_table([("/deploy/settings.py", text)], language="Python")])
    run_stage(
        get_stage("pii"), PATTERNS, str(tmp_path / "out"), RunOptions(runner="local", progress=False),
        input_uri=str(records),
    )  # fmt: skip
    row = read_all(tmp_path / "out" / "pii").to_pylist()[0]
    assert row["content"] == text.replace("Gl4ss&Sp00n!", "<PASSWORD>")  # the username stays where it was
    (span,) = [s for s in row["pii_spans"] if s["entity"] == "USERNAME"]
    assert span == {
        "column": "content", "entity": "USERNAME", "start": text.index(DB_USER), "end": text.index(DB_USER) + 10,
        "detector": "pattern:connection_string", "score": pytest.approx(span["score"]), "replacement": None,
    }  # fmt: skip
    # the text is the only place the value is: not in the spans, any other column, the stats or the config
    assert DB_USER not in json.dumps({k: v for k, v in row.items() if k != "content"})
    others = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and p.parent != tmp_path / "out" / "pii"]
    assert others and all(DB_USER.encode() not in p.read_bytes() for p in others)
    stats = read_all(table_dir(tmp_path / "out" / "pii", "stats")).to_pylist()
    assert {(r["metric"], r["reason"], r["value"]) for r in stats if r["metric"].startswith("spans_")} == {
        ("spans_detected_only", "USERNAME", 1), ("spans_redacted", "PASSWORD", 1)
    }  # fmt: skip


CHANGELOG = (  # handles the default model finds in prose, and the same people in links
    "Version 7.4.3\n"
    "* Fixed a crash on empty input, reported by @tkowalczyk "
    "(`#1700 <https://github.com/nedbat/coveragepy/pull/1700>`_).\n"
    "- Fix pickling of sessions. Reported by @rbarnes in https://gitlab.com/rbarnes/sessions/-/issues/12\n"
    "- Docs moved to https://tkowalczyk.github.io/sessions/\n"
)


@pytest.mark.parametrize(
    ("redact_", "expected"),
    [
        (None, CHANGELOG),  # the default: the handle is recorded, the text is unchanged
        # the prose handles only: `gitlab.com/rbarnes/sessions` and `tkowalczyk.github.io` stay
        (ALL_REDACTED, CHANGELOG.replace("@tkowalczyk", "@<USERNAME>").replace("@rbarnes", "@<USERNAME>")),
    ],
)
def test_model_handles_in_prose_are_redacted_only_when_asked_and_links_never(redact_, expected):
    cfg = PiiConfig() if redact_ is None else PiiConfig(redact=redact_)  # the default model, `auto`
    out = PiiStage(cfg)(make_table([("/CHANGES.rst", CHANGELOG)], language="reStructuredText"))
    assert out.kept.column("content").to_pylist() == [expected]
    spans = out.kept.column("pii_spans").to_pylist()[0]
    replacement = "<USERNAME>" if redact_ else None
    assert [(s["entity"], CHANGELOG[s["start"] : s["end"]], s["replacement"]) for s in spans] == [
        ("USERNAME", "tkowalczyk", replacement), ("USERNAME", "rbarnes", replacement)
    ]  # fmt: skip
    metric = "spans_redacted" if redact_ else "spans_detected_only"
    assert out.stats == {
        (metric, "reStructuredText", "USERNAME"): 2.0,
        # a changelog: the model reads every line that could hold a handle, and takes the links' owners in the
        # "Reported by" line and in the last line for handles; the forge-URL rule spares both
        ("spans_spared", "reStructuredText", "username_forge_url"): 2.0,
    }


# ---- names where code lists people ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("// Copyright (c) 2019-2021 Priya Mendoza\n", ["Priya Mendoza"]),
        ("/*\n * (C) 2021 Jan Kowalski <jan@kowalski.pl>\n */\n", ["Jan Kowalski"]),
        ("# © 2020 María José García\n", ["María José García"]),
        ("# Copyright 2021 Priya Mendoza and Tom Li\n", ["Priya Mendoza", "Tom Li"]),
        (
            "Copyright (c) 2015-2018, Jane Roe, John O'Brien, Ann-Marie Lee. All Rights Reserved.\n",
            ["Jane Roe", "John O'Brien", "Ann-Marie Lee"],
        ),
        ("# SPDX-FileCopyrightText: 2022 Jane Roe <jane@roe.org>\n# SPDX-License-Identifier: MIT\n", ["Jane Roe"]),
        ("Copyright: 2010-2015 Jean-Luc Picard\nLicense: GPL-2+\n", ["Jean-Luc Picard"]),  # Debian copyright
        ("project = 'shapely'\ncopyright = '2021, Sean Gillies'\n", ["Sean Gillies"]),  # Sphinx conf.py
        ('"""Tile server."""\n\n__author__ = "Guido van Rossum"\n__version__ = "1.0"\n', ["Guido van Rossum"]),
        (
            '{\n  "name": "left-pad",\n  "version": "1.3.0",\n'
            '  "author": "Azer Koçulu <azer@roadbeats.com> (http://azer.bike)",\n  "license": "WTFPL"\n}\n',
            ["Azer Koçulu"],
        ),
        (
            '{\n  "author": {\n    "name": "Sindre Sorhus",\n    "url": "https://sindresorhus.com"\n  }\n}\n',
            ["Sindre Sorhus"],
        ),
        (
            '[project]\nname = "attrs"\nauthors = [\n  {name = "Hynek Schlawack", email = "hs@ox.cx"},\n'
            '  {name = "Tin Tvrtković"},\n]\n',
            ["Hynek Schlawack", "Tin Tvrtković"],
        ),
        (
            '[package]\nname = "serde"\nauthors = ["Erick Tryzelaar <erick@x.net>", "David Tolnay"]\n',
            ["Erick Tryzelaar", "David Tolnay"],
        ),
        (
            'Gem::Specification.new do |spec|\n  spec.name = "rack"\n'
            '  spec.authors = ["Leah Neukirchen", "Aaron Patterson"]\nend\n',
            ["Leah Neukirchen", "Aaron Patterson"],
        ),
        (
            "<project>\n  <name>Commons Lang</name>\n  <developers>\n    <developer>\n      <id>bayard</id>\n"
            "      <name>Henri Yandell</name>\n    </developer>\n  </developers>\n</project>\n",
            ["Henri Yandell"],
        ),
        (
            "Jane Roe <jane@roe.org> <jroe@oldjob.io>\nTom Li <tom@li.dev> Tom <tli@oldjob.io>\n",  # .mailmap
            ["Jane Roe", "Tom Li"],
        ),
        (
            "# This is the list of Foo's significant contributors.\n#\n# Names should be added as: Name <email>\n\n"
            "Jane Roe\nTom Li <tom@li.dev>\nGoogle Inc.\nMaría José García\n",  # AUTHORS
            ["Jane Roe", "Tom Li", "María José García"],
        ),
        (
            "Fix the parser on empty input\n\nSigned-off-by: Jane Roe <jane@roe.org>\n"
            "Co-authored-by: Tom Li <12345+tomli@users.noreply.github.com>\n",
            ["Jane Roe", "Tom Li"],
        ),
        ('def parse(text):\n    """Parse a config.\n\n    Written by Jane Roe, 2019.\n    """\n', ["Jane Roe"]),
    ],
)
def test_names_where_code_lists_people_are_redacted(detector, text, names):
    assert [value for entity, value in found(detector, text) if entity == "NAME"] == names


ORGANISATION = ["organisation"]


@pytest.mark.parametrize(
    ("text", "reasons"),
    [
        ("// Copyright 2021 Google LLC\n", ORGANISATION),  # read like `Adrien CLERC`, spared by its legal form
        ("// Copyright 2009 The Go Authors. All rights reserved.\n", ORGANISATION),
        ("// Copyright 2015 The Chromium Authors\n", ORGANISATION),
        ("# Copyright (c) 2001-2023 Python Software Foundation; All Rights Reserved\n", ORGANISATION * 2),
        ("// Copyright (c) Microsoft Corporation. All rights reserved.\n", ORGANISATION),
        ("# Copyright (c) the contributors\n", []),
        (" * Copyright (c) Facebook, Inc. and its affiliates.\n", []),
        (
            " * Licensed to The Apache Software Foundation (ASF) under one\n"
            " * Copyright 2004 The Apache Software Foundation\n",
            ORGANISATION,
        ),
        ("// Copyright 2019 Mozilla Foundation\n", ORGANISATION),
        ("// Copyright (c) 2010 Red Hat, Inc.\n", ORGANISATION),
        ('[package]\nauthors = ["The Rust Project Developers"]\n', ORGANISATION),
        ('THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"\n', []),
        ("Copyright (C) 1989, 1991 Free Software Foundation, Inc. <https://fsf.org/>\n", ORGANISATION),
    ],
)
def test_organisations_and_projects_in_those_places_are_not_redacted(detector, text, reasons):
    assert found(detector, text) == []
    assert spared(detector, text) == reasons


def test_organisation_rule_reads_the_words_and_the_legal_form_after_a_name():
    assert rules.is_organisation("The Go Authors") and rules.is_organisation("Google LLC")
    assert rules.is_organisation("Red Hat", ", Inc.") and not rules.is_organisation("Priya Mendoza", " and Tom Li")
    assert not rules.is_organisation("Graham Barr", ".\n\n   Incorporated old patches")  # the next paragraph


def test_the_model_reads_credit_lines_and_leaves_copyright_lines_to_the_patterns(detector):
    from stackcurate.stages.pii.model import line_ranges

    text = (
        "// Copyright (c) 2021 Priya Mendoza\n# © 2020 María José García\n# SPDX-FileCopyrightText: 2022 Jane Roe\n"
        'import os\n__author__ = "Jane Roe"\nx = f(y)\n  "authors": ["Tom Li"],\n# email: jane@roe.org\n'
        "Signed-off-by: Jane Roe\nCo-authored-by: Tom Li\n  Thanks to Ann Lee.\nreturn x\n"
    )
    lines = [text[a:b] for a, b in line_ranges(text)]
    assert lines == [
        '__author__ = "Jane Roe"', '  "authors": ["Tom Li"],', "Signed-off-by: Jane Roe", "Co-authored-by: Tom Li",
        "  Thanks to Ann Lee.",
    ]  # fmt: skip
    # Training reads every line with a person's or a secret's context (what the shipped model learnt from).
    assert [text[a:b] for a, b in line_ranges(text, "context")] == [
        line for line in text.splitlines() if line not in ("import os", "x = f(y)", "return x")
    ]
    # The patterns find the names the model no longer reads.
    assert [v for e, v in found(detector, text) if e == "NAME"][:3] == [
        "Priya Mendoza", "María José García", "Jane Roe"
    ]  # fmt: skip


def test_uuids_are_keys_only_under_a_secrets_name(detector):
    text = 'HEROKU_API_KEY = "48c67f3c-63bb-4f92-a98a-4ee0fbc2bef6"\n'
    assert found(detector, text) == [("KEY", "48c67f3c-63bb-4f92-a98a-4ee0fbc2bef6")]


def test_documented_example_keys_are_not_redacted(detector):
    text = (
        '        "AccessKeyId": "AKIAIOSFODNN7EXAMPLE",\n'
        '        "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",\n'
    )
    # the placeholder rule already spares a value that is one word with `example` in it
    assert found(detector, text) == [] and spared(detector, text) == ["placeholder", "key_example"]


def test_base64_images_are_not_keys():
    text = '      "image/png": "iVBORw0KGgoAAAANSUhEUgAAAlIAAAGiCAYAAAAspSj3AAAAOXRFWHRTb2Z0d2FyZQBNYXRwbG90",\n'
    start = text.index("iVBOR")
    span = rules.Span("KEY", start, text.index('",'), 0.95, "model:minilm-l3")
    assert rules.spared_by(span, text) == "key_image_data"


# ---- idioms read off the real-file evaluation set (pii_model/real_files/) --------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # names: initials and capitalised family names, CRLF files, Sphinx's `copyright =`, an email after a name
        (" * Copyright(c) 2009-2013 TJ Holowaychuk\n", [("NAME", "TJ Holowaychuk")]),
        ("# Copyright (c) 2009 Raymond Hettinger\r\n#\r\n", [("NAME", "Raymond Hettinger")]),
        ('copyright = f"{datetime.now().year} Jeff Forcier"\n', [("NAME", "Jeff Forcier")]),
        (":copyright: Copyright 2008 by Armin Ronacher.\n", [("NAME", "Armin Ronacher")]),
        ("Copyright (c) 2019 Darcy Buskermolen  darcy@dbitech.ca\n", [("NAME", "Darcy Buskermolen")]),
        ("Adrien CLERC <adrien@antipoul.fr>\n", [("NAME", "Adrien CLERC"), ("EMAIL", "adrien@antipoul.fr")]),
        # credits in changelogs
        ("  Pull request courtesy Sebastian Cao.\n", [("NAME", "Sebastian Cao")]),
        ("Thanks, Jane Roe and Tom Li.\n", [("NAME", "Jane Roe"), ("NAME", "Tom Li")]),
        ("  and to Kyle Meyer for submitting an early version of the patch.\n", [("NAME", "Kyle Meyer")]),
        ("  Issue reported by Peter Eisentraut.\n", [("NAME", "Peter Eisentraut")]),
        ("* [Kim Christie](https://github.com/lovelydinosaur) - The original\n", [("NAME", "Kim Christie")]),
        (
            "- Riley Gibbs `@rileyjohngibbs <https://github.com/rileyjohngibbs>`_\n",
            [("NAME", "Riley Gibbs"), ("USERNAME", "rileyjohngibbs")],
        ),
        (
            "- Chris McDonough, 2011/12/17\n- Michael Merickel, 2012/01/16\n- Damien Baty, 2012/10/25\n",
            [("NAME", "Chris McDonough"), ("NAME", "Michael Merickel"), ("NAME", "Damien Baty")],
        ),  # fmt: skip
        # handles
        ("* Read all available socket bytes (dpkp #1332)\n", [("USERNAME", "dpkp")]),
        ("  -- by :user:`radez`.\n", [("USERNAME", "radez")]),
        ("- Eliot Horowitz (erhx)\n", [("USERNAME", "erhx")]),  # the name, from an AUTHORS file's context
        ("414nch4n <chanfung032@gmail.com>\n", [("USERNAME", "414nch4n"), ("EMAIL", "chanfung032@gmail.com")]),
        ("        'USER': 'rmeyer93',\n", [("USERNAME", "rmeyer93")]),
        ("$Id: UnixCrypt2.txt,v 1.1.1.1 2005/09/13 22:20:13 christos Exp $\n", [("USERNAME", "christos")]),
        # secrets handed to APIs, in URLs, and as NAME=value
        ('    >>> hash = pwd_context.hash("Lantern-2022")\n', [("PASSWORD", "Lantern-2022")]),
        (
            "var token = jwt.sign({ foo: 'bar' }, '56f0904dc08b702bc6c3e3da0532a877');\n",
            [("KEY", "56f0904dc08b702bc6c3e3da0532a877")],
        ),  # fmt: skip
        (
            'dsn="https://f5c49755d4692876aff5a082ab7d6b47@o1234.ingest.sentry.io/12"\n',
            [("KEY", "f5c49755d4692876aff5a082ab7d6b47")],
        ),  # fmt: skip
        (
            'new Redis("redis://:aAVnt4ureYU3vOhM6nSW@28.222.21.83:6380/4");\n',
            [("PASSWORD", "aAVnt4ureYU3vOhM6nSW"), ("IP_ADDRESS", "28.222.21.83")],
        ),  # fmt: skip
        ('client = StripeClient("sk_test_QwyGFBn0fxCDtfWuEbmgUxJD")\n', [("KEY", "sk_test_QwyGFBn0fxCDtfWuEbmgUxJD")]),
        ('api_key = "SK6c01ce105a0ad3ce633fedba12a7d70d"\n', [("KEY", "SK6c01ce105a0ad3ce633fedba12a7d70d")]),
        ("tc filter add dev eth0 match ip dst 40.121.206.54/32 flowid 1:3\n", [("IP_ADDRESS", "40.121.206.54")]),
        ('    "secret": "hoUTHrlZUw29",\n', [("PASSWORD", "hoUTHrlZUw29")]),
        ("    auth_jira = JIRA(basic_auth=('username', '7VuihQHe6RHS#K'))\n", [("PASSWORD", "7VuihQHe6RHS#K")]),
        ("    g = github3.login('sigmavirus24', 'Sparrow-Meadow-87')\n", [("PASSWORD", "Sparrow-Meadow-87")]),
        (
            "  factory = SignedCookieSessionFactory('tLFzYO19DUOoLAlhxiEYRHgqy/X62JudaRlzzzc5b5Q=')\n",
            [("KEY", "tLFzYO19DUOoLAlhxiEYRHgqy/X62JudaRlzzzc5b5Q=")],
        ),  # fmt: skip
        (
            "DSN = 'http://fbd8ae9c84e3b2cfd40ccec0d91f6daa:fcd2195f79fb2c9653887f44c2855889@sentry.io/1'\n",
            [("KEY", "fbd8ae9c84e3b2cfd40ccec0d91f6daa"), ("KEY", "fcd2195f79fb2c9653887f44c2855889")],
        ),  # fmt: skip
        (
            "        if token != 'e1EogwqvBJ9jUSpdTv8m36XVvWdc7aBVz2o7DROtqGY':\n",
            [("KEY", "e1EogwqvBJ9jUSpdTv8m36XVvWdc7aBVz2o7DROtqGY")],
        ),  # fmt: skip
        ("* Officially support Python 3.15. Thanks @selwin!\n", [("USERNAME", "selwin")]),
        (
            "framework along with John Vrbanac (jmvrbanac), Vytautas Liuolia (vytas7),\n",
            [("USERNAME", "jmvrbanac"), ("USERNAME", "vytas7")],
        ),  # fmt: skip
        ("//! author : forabi https://github.com/forabi\n", [("USERNAME", "forabi")]),
        (
            'db_url = "mysql://appuser:Y*o8yhlwG~SYPjabF0@db.somedata.net:3306/app"\n',
            [("USERNAME", "appuser"), ("PASSWORD", "Y*o8yhlwG~SYPjabF0")],
        ),  # fmt: skip
        (
            'UsmUserData("snmpuser", authKey="Xbl86DbzT0gsz")\nCommunityData("Pch09GovwmQI")\n',
            [("PASSWORD", "Xbl86DbzT0gsz"), ("PASSWORD", "Pch09GovwmQI")],
        ),  # fmt: skip
        ("bindpw = '%A.N7nVxfzpxXQ'\n", [("PASSWORD", "%A.N7nVxfzpxXQ")]),
        ("$ napalm --user napalm --password A6YNIsj6HdBKM --optional_args x\n", [("PASSWORD", "A6YNIsj6HdBKM")]),
        ("/* $OpenBSD: blf.h,v 1.7 2007/03/14 17:59:41 grunk Exp $ */\n", [("USERNAME", "grunk")]),
    ],
)
def test_real_idioms_are_found(detector, text, expected):
    assert found(detector, text) == expected


@pytest.mark.parametrize(
    "text",
    [
        'Sorted by Name\nx = hash("hello world")\nassert user.check_password("password")\n',
        "(see #12) (fixes #3) (PR #758)\nPull request courtesy of the maintainers.\n",
        'username = \'{{ user }}\'\nuser: str = "%s"\nlogin = "root"\n',
        "key=lambda x: x[0]\ntoken = self.next()\npassword=self.password\n",
        "git clone https://jroe@github.com/x/y.git\n",  # a URL's user is no email
        'KEY="-----BEGIN RSA PRIVATE KEY-----\\nKh9NV...\\n-----END RSA PRIVATE KEY-----"\n',
        "pip install --pass-through x\n",
        "See {@link Foo} (@code x), decorated by @property\nJeffrey A. Clark (Alex)\nDevelopment Team (PyContribs)\n",
        "auth=('user', 'password')\nresp.set_cookie(\"session_identifier_value_long\")\n",
        "sender = 'errors@myapp.com'\nuser = {'email': 'john@doe.com'}\n",
        # URL-parsing tests and made-up addresses: escaped passwords, `:` in a password, 1.2.3.4-like IPs
        'u = URL("//user:pas:and:more@host")\nx = "http://u:pass%25word@example.com/"\nkey_password=key_password,\n',
        'assert addr == "16.17.18.19"\nallow = ["192.0.0.9/32"]\n<a href="https://hachyderm.io/@cov">@cov@hachyderm.io</a>\n',
    ],
)
def test_look_alikes_of_those_idioms_are_not_found(detector, text):
    assert found(detector, text) == []


def test_two_runs_starting_together_assemble_the_shipped_model_once(tmp_path):
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    env = {**os.environ, "STACKCURATE_CACHE": str(tmp_path / "cache")}
    code = "from stackcurate.stages.pii import default_model_folder; print(default_model_folder())"
    runs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]  # fmt: skip
    results = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-500:] for _, err in results]
    folder = Path(results[0][0].strip())
    assert results[1][0].strip() == str(folder) and (folder / "model.safetensors").is_file()
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name, folder.name + ".lock"]  # no leftovers


def test_rules_scanning_only_their_anchors_lines_find_what_a_whole_text_scan_finds():
    """A `one_line` rule runs its regex on the lines that hold its anchor: the same matches, found faster."""
    from stackcurate.stages.pii import recognizers

    text = (
        "@decorator\ncontact: jane.roe@example.org, see ::\nserver 10.0.0.1 and fe80::1ff:fe23:4567:890a here\n"
        "url = postgres://admin:s3cretpw@db.local/x\n# a@b @ c\n1.2.3.4\n::1\nno anchors on this line\n"
        'fredt@users dot sourceforge.net\nmy $m = "jroe\\@cpan.org";\nscp x.tgz jroe:Ex98whGc@host.acme.de:/srv\n'
    )
    rules = [rule for r in recognizers.code_recognizers() for rule in getattr(r, "rules", []) if rule.one_line]
    assert {rule.name for rule in rules} >= {"email", "ipv4", "ipv6", "connection_string"}
    for rule in rules:
        assert rule.anchor is not None
        lines = recognizers._anchor_lines(rule.anchor, text)
        found = [m.span() for m in recognizers._matches_on_lines(rule.regex, text, lines)]
        assert found == [m.span() for m in rule.regex.finditer(text)], rule.name
        assert found, rule.name


def test_a_models_key_that_is_part_of_a_token_or_a_constants_name_is_spared():
    model = f"{rules.MODEL_PREFIX}minilm-l3"
    text = "Reported in GHSA-fhv5-28vv-h8m8; GOOGLE_OAUTH2_CLIENT_SECRET = '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'\n"
    fragment = text.index("28vv")
    assert rules.spared_by(rules.Span("KEY", fragment, fragment + 9, 0.9, model), text) == "key_fragment"
    name = text.index("GOOGLE")
    assert rules.spared_by(rules.Span("KEY", name, name + 27, 0.9, model), text) == "key_identifier"
    value = text.index("GOCSPX")
    assert rules.spared_by(rules.Span("KEY", value, value + 35, 0.9, model), text) is None
    xpm = '"$XX$$XXX$%$$$$$$$$ egip3dr %% @p# Oqgffgfgfgo%q999q9999909909990w999000wwww00w00w0",\n'
    start = xpm.index("p#")
    assert rules.spared_by(rules.Span("KEY", start, xpm.index('"', start), 0.6, model), xpm) == "key_fragment"
    start = xpm.index("q999")
    assert rules.spared_by(rules.Span("KEY", start, xpm.index('"', start), 0.6, model), xpm) == "key_not_random"


def test_a_span_two_recognizers_find_is_named_by_the_same_rule_in_any_recognizer_order(monkeypatch):
    """Presidio keeps the first of two equal results, and hands out its recognizers in a set's order (another in
    each process): `Jane Roe` in an AUTHORS file was named by either of two rules from run to run."""
    from presidio_analyzer import RecognizerRegistry

    from stackcurate.stages.pii import idioms, recognizers

    everyone = (
        recognizers.code_recognizers() + recognizers.config_recognizers() + idioms.people_recognizers()
        + idioms.history_recognizers()
    )  # fmt: skip
    names = [r.name for r in everyone]
    assert len(names) == len(set(names))  # so that name order is one order
    text = "Many thanks to our contributors, by date of first contribution:\n\n* Jane Roe (jroe)\n* Tom Li (tli)\n"

    def detectors() -> list[tuple[int, int, str]]:
        spans, _ = Detector(PiiConfig(model="none")).find_batch([text], [False], [True], [False])[0]
        return sorted((s.start, s.end, s.detector) for s in spans)

    before = detectors()
    assert len(before) == 3  # two names, one handle (`tli` is too short)
    handed_out = RecognizerRegistry.get_recognizers
    monkeypatch.setattr(RecognizerRegistry, "get_recognizers", lambda self, *a, **k: handed_out(self, *a, **k)[::-1])
    assert detectors() == before

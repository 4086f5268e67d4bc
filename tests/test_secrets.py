"""Secrets planted in a notebook, a JSON file, a YAML file and Python strings with escapes: after pii, none of
their values is anywhere in the run: not in any Parquet column (nested ones included), the formatted text,
the decoded Megatron shards or the tokenizer's vocabulary. Before pii they are there, so the test can fail."""

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import read_all, state
from megatron_reader import read as read_megatron

from stackcurate.cli import main
from stackcurate.core.schema import TEXT_COLUMNS

pytest.importorskip("presidio_analyzer")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[1]
# Made up for this test, none a live credential. Each file gets its own values, so a failure names the file.
SECRETS = {
    "notebook": {
        "aws_key_id": "AKIAQ3EGRVX5HNVLG7OZ",
        "aws_secret": "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",
        "password": "Tr0ub4dor&3x",
        "github_token": "ghp_9fK2xL7qWm4RtZ8vNp3YcB6dHs1JgE5uAo0T",
        "api_key": "q7Vx2LmZ9pRt4WnY8kBa3Cs6",  # in a string inside a code cell: two levels of escapes
        "email": "maria.lopez@fastmail.fm",
        "ip": "34.120.18.7",
        "db_user": "svc_k7rq2x",
        "db_password": "pa55w0rd.nb",
    },
    "json": {
        "aws_key_id": "AKIAZ7JX2M4KQ9WL3VTR",
        "aws_secret": "k8Hq3Rz7Lm2Vx9Pw4Tn6Yb1Cs5Df0Gj3Ka8Zq2M",
        "password": "Gl4ss&Sp00n!",
        "slack_token": "xoxb-2048817726912-4821938201374-Xq9LmB2vRt8KsW3pZn7Yc4Ha",
        "email": "ops.kowalski@bigcorp.co.uk",
        "ip": "52.95.110.23",
        "private_key": "MIIEowIBAAKCAQEAu3Lx9Qv2LmZ8RtY4pWn7Bc5Ds1FgH6jK0q9Wx3Ez7Rt2Yb5Nc8Vm1Lk4Hj6Gf0",
    },
    "yaml": {
        "aws_key_id": "AKIAR5TN8BW2XK4QH7ZM",
        "aws_secret": "Zp4Kx9Tq2Wm7Rv3Ln8Hb5Cj1Fy6Gd0Sa2Qe7Xu4",
        "password": "hX8v2QmR7t",
        "github_token": "ghp_Lm3Qz8Vx1Rt6Wp9Kn2Yb5Hs7Dj4Fg0Ca3Ue8M",
        "email": "lena.fischer@posteo.de",
        "ip": "18.184.51.90",
    },
    "python": {
        "password": "S3cr3t&Hors3",
        "api_key": "Rz8Km3Vq7Lx2Tw9Pn4Hb6Yc1",
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6Ik1hcmlhIn0.kH3x9Qv2LmZ8RtY4pWn7Bc5Ds1Fg",
        "email": "dana@kim-labs.dev",
        "ip": "54.7.200.237",
        "private_key": "MIICXAIBAAKBgQC7Vx2LmZ9pRt4WnY8kBa3Cs6Dq1Fh5Jg0Kl7Mn2Pz8Qr4St6Uv3Wx9Yz1Ab5Cd7Ef",
    },
}
AFTER_PII = ("pii", "format", "tokenize", "megatron", "tokenizer", "report")  # the folders a run writes from pii on
VALUES = {value: f"{where}:{kind}" for where, kinds in SECRETS.items() for kind, value in kinds.items()}


def _notebook(s: dict[str, str]) -> str:
    code = (
        "import boto3\n"
        f'aws_access_key_id = "{s["aws_key_id"]}"\n'
        f'aws_secret_access_key = "{s["aws_secret"]}"\n'
        f'password = "{s["password"]}"\n'
        f'GITHUB_TOKEN = "{s["github_token"]}"\n'
        f'settings = "api_key = \\"{s["api_key"]}\\"\\n"\n'
        f'dsn = "postgresql://{s["db_user"]}:{s["db_password"]}@db.prod.net:5432/main"\n'
        f'host = "{s["ip"]}"\n'
        "print(password)\n"
    )
    notebook = {
        "cells": [
            {
                "cell_type": "markdown",
                "id": "a1",
                "metadata": {},
                "source": [f"# Upload\nQuestions to {s['email']}\n"],
            },
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "a2",
                "metadata": {},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": [s["password"] + "\n"]}],
                "source": code.splitlines(keepends=True),
            },
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(notebook, indent=1) + "\n"


def _json(s: dict[str, str]) -> str:
    config = {
        "database": {"host": s["ip"], "password": s["password"]},
        "aws": {"access_key_id": s["aws_key_id"], "secret_access_key": s["aws_secret"]},
        "slack": {"token": s["slack_token"]},
        "admin_email": s["email"],
        "tls": {
            "private_key": f"-----BEGIN RSA PRIVATE KEY-----\n{s['private_key']}\n-----END RSA PRIVATE KEY-----\n"
        },
    }
    return json.dumps(config, indent=2) + "\n"


def _yaml(s: dict[str, str]) -> str:
    return (
        "database:\n"
        f"  host: {s['ip']}\n"
        f"  password: {s['password']}\n"
        "aws:\n"
        f"  access_key_id: {s['aws_key_id']}\n"
        f"  secret_access_key: {s['aws_secret']}\n"
        f"github_token: {s['github_token']}\n"
        f"admin_email: {s['email']}\n"
    )


def _python(s: dict[str, str]) -> str:
    return (
        '"""Deployment settings."""\n\n'
        f'SETTINGS = "[db]\\npassword = \\"{s["password"]}\\"\\napi_key = \\"{s["api_key"]}\\"\\n"\n'
        f'PAYLOAD = "{{\\"owner\\": \\"{s["email"]}\\", \\"server\\": \\"{s["ip"]}\\"}}"\n'
        f"HEADERS = {{'Authorization': 'Bearer {s['jwt']}'}}\n"
        f'KEY = "-----BEGIN RSA PRIVATE KEY-----\\n{s["private_key"]}\\n-----END RSA PRIVATE KEY-----\\n"\n'
        "\n\ndef headers() -> dict:\n    return dict(HEADERS)\n"
    )


FILES = {
    "notebooks/upload.ipynb": _notebook(SECRETS["notebook"]),
    "config/settings.json": _json(SECRETS["json"]),
    "config/settings.yaml": _yaml(SECRETS["yaml"]),
    "deploy/settings.py": _python(SECRETS["python"]),
}


def _strings(value: object) -> Iterator[str]:
    """Every string in a value read from Parquet, nested lists and structs included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _found(texts: Iterator[str]) -> set[str]:
    """`where:kind` of each planted value that occurs in `texts`."""
    hits = set()
    for text in texts:
        hits |= {label for value, label in VALUES.items() if value in text}
    return hits


def _parquet_strings(folder: Path) -> Iterator[str]:
    for path in sorted(folder.rglob("*.parquet")):
        yield from _strings(pq.read_table(path).to_pylist())


def _run(repo: Path, out: Path) -> None:
    languages = repo.parent / "languages.txt"
    languages.write_text("Python\nJupyter Notebook\nJSON\nYAML\n")
    pipeline = repo.parent / "pipeline.yaml"
    pipeline.write_text(
        f"out: {out}\n"
        "stages:\n"
        f"  ingest: {{repos: ['{repo}'], keep: true}}\n"  # its rows are written though it runs fused
        f"  language: {{languages: '{languages}'}}\n"
        f"  filter: {{rules: '{ROOT / 'filters/starcoder2_v1.yaml'}'}}\n"
        "  dedup: {}\n"
        # patterns only: no model trains. USERNAME is redacted too (the default records it and leaves it, as
        # StarCoder did): this test is about leaks, and the notebook's connection string plants a DB user.
        "  pii: {model: none, redact: [EMAIL, IP_ADDRESS, KEY, PASSWORD, NAME, USERNAME]}\n"
        "  format: {fim_rate: 0.0}\n"  # no FIM, so a value left in a document could not hide across a cut
        # more ids than this input can fill: every run of text between digits that is left becomes a token
        "  tokenize: {vocab_size: 2000}\n"
    )
    assert main(["run", str(pipeline), "--runner", "local", "--no-progress"]) == 0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("secrets")
    for name, text in FILES.items():
        (root / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "repo" / name).write_text(text)
    _run(root / "repo", root / "out")
    return root / "out"


def test_every_planted_value_is_in_the_input(run: Path):
    """The check below can fail: every value reached the pipeline, and the stages before pii hold them."""
    ingested = read_all(run / "ingest").to_pylist()
    assert sorted(row["path"] for row in ingested) == sorted(f"/{name}" for name in FILES)
    assert _found(_strings(ingested)) == set(VALUES.values())
    filtered = read_all(run / "filter").to_pylist()
    notebook = next(row for row in filtered if row["path"].endswith(".ipynb"))
    in_notebook = {f"notebook:{kind}" for kind in SECRETS["notebook"]}
    assert _found(_strings(notebook["notebook_cells"])) == in_notebook
    assert _found([notebook["notebook_script"]]) == in_notebook


def test_no_value_in_any_column_after_pii(run: Path):
    for stage in AFTER_PII:
        assert _found(_parquet_strings(run / stage)) == set(), stage
    pii = read_all(run / "pii")
    assert pii.num_rows == len(FILES)
    spans = {(s["column"].split("[")[0], s["entity"]) for row in pii.column("pii_spans").to_pylist() for s in row}
    assert {column for column, _ in spans} == {"content", "notebook_script", "notebook_cells"}
    assert {entity for _, entity in spans} == {"EMAIL", "IP_ADDRESS", "KEY", "PASSWORD", "USERNAME"}


def test_no_value_in_any_file_after_pii(run: Path):
    """Every other file the stages from pii on wrote (configs, manifests, the tokenizer) is text."""
    files = [p for stage in AFTER_PII for p in (run / stage).rglob("*")]
    texts = [p.read_bytes().decode("utf-8", "replace") for p in files if p.is_file() and p.suffix != ".parquet"]
    assert len(texts) > 5 and _found(iter(texts)) == set()


def test_no_value_in_the_decoded_shards(run: Path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(run / "tokenizer" / "tokenizer.json"))
    manifest = json.loads((run / "megatron" / "manifest.json").read_text())
    documents = [
        tokenizer.decode(sequence.tolist(), skip_special_tokens=False)
        for shard in manifest["shards"]
        for sequence in read_megatron(run / "megatron" / shard["shard"])
    ]
    assert len(documents) == manifest["documents"] == 2  # the notebook, and the repository's other files
    assert _found(iter(documents)) == set()
    text = "".join(documents)
    for redacted in (  # the documents are the redacted files
        'aws_access_key_id = "<KEY>"',  # the notebook's cells
        "<jupyter_output><PASSWORD>\n",  # the password the notebook printed
        "  password: <PASSWORD>\n",  # YAML
        '"secret_access_key": "<KEY>"',  # JSON
        'password = \\"<PASSWORD>\\"\\napi_key = \\"<KEY>\\"',  # a Python string with escapes
    ):
        assert redacted in text


def test_no_value_in_the_tokenizer_vocabulary(run: Path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(run / "tokenizer" / "tokenizer.json"))
    tokens = [tokenizer.decode([i], skip_special_tokens=False) for i in range(tokenizer.get_vocab_size())]
    assert _found(iter(tokens)) == set()
    # not even a piece of one: no long token of the vocabulary lies inside a planted value
    assert [t for t in tokens if len(t) >= 8 and any(t in value for value in VALUES)] == []
    assert any(len(t) >= 8 for t in tokens)  # (the vocabulary does hold long tokens: whole words of the input)


def test_every_text_column_before_pii_is_declared(run: Path):
    """Text columns are large_string; one a stage adds without naming it in schema.TEXT_COLUMNS would leave
    pii unredacted."""

    def holds_text(t: pa.DataType) -> bool:
        if pa.types.is_large_string(t):
            return True
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return holds_text(t.value_type)
        return pa.types.is_struct(t) and any(holds_text(t.field(i).type) for i in range(t.num_fields))

    columns, before = set(), set()
    for path in run.rglob("*.parquet"):
        parts = path.relative_to(run).parts
        stage = parts[1] if parts[0].startswith("_") else parts[0]  # `_removed/<stage>/`, ... (core/layout.py)
        if stage not in AFTER_PII and parts[0] != "megatron":
            before.add(stage)
            columns |= {f.name for f in pq.read_schema(path) if holds_text(f.type)}
    assert sorted(before) == ["dedup", "dedup_clusters", "filter", "ingest", "language"]
    assert columns == set(TEXT_COLUMNS)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_purge_drops_the_unredacted_text_and_keeps_the_rest(run: Path, tmp_path: Path, capsys):
    out = tmp_path / "out"
    shutil.copytree(run, out)
    # a format stopped while grouping leaves pii's rows without their spans: redacted text, left alone
    (out / "format_groups" / "data").mkdir(parents=True)
    groups = read_all(run / "pii").drop_columns(["pii_spans"])
    pq.write_table(groups, out / "format_groups" / "data" / "00000.parquet")
    before = _files(out)
    capsys.readouterr()
    assert main(["stats", str(out)]) == 0
    stats = capsys.readouterr().out
    unredacted = sorted(  # language and dedup ran fused with the stage after them: their kept rows were not written
        f"{folder}{stage}/00000.parquet"
        for stage in ("dedup", "filter", "ingest", "language")
        for folder in ("", "_removed/")
        if folder or stage not in ("dedup", "language")
    )
    assert main(["purge", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:-1] == [str(out / name) for name in unredacted]
    assert printed[-1].startswith("purge: would delete 6 files (") and printed[-1].endswith(
        " MB) of unredacted text from dedup, filter, ingest, language"
    )
    assert _files(out) == before

    assert main(["purge", str(out)]) == 0
    assert capsys.readouterr().out.startswith("purge: deleted 6 files (")
    after = _files(out)
    markers = {f"_state/{stage}/PURGED" for stage in ("dedup", "filter", "ingest", "language")}
    assert set(before) - set(after) == set(unredacted) and set(after) - set(before) == markers
    assert all(after[name] == before[name] for name in before if name not in unredacted)
    assert json.loads(after["_state/ingest/PURGED"]) == {
        "deleted": ["_removed/ingest/00000.parquet", "ingest/00000.parquet"]
    }
    assert _found(_parquet_strings(out)) == set()
    assert main(["stats", str(out)]) == 0
    assert capsys.readouterr().out == stats
    assert main(["purge", str(out)]) == 0  # nothing left to purge
    assert capsys.readouterr().out == "purge: deleted 0 files (0.0 MB) of unredacted text from no stage\n"

    # a rerun cannot read the purged text: one line saying so, nothing recomputed
    pipeline = run.parent / "pipeline.yaml"
    assert main(["run", str(pipeline), "--out", str(out), "--runner", "local", "--no-progress"]) == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == (
        f"stackcurate: error: {out}/filter was purged (`stackcurate purge` dropped its text); "
        "rerun the pipeline with --overwrite"
    )


def test_purge_refuses_before_pii_has_finished(run: Path, tmp_path: Path, capsys):
    out = tmp_path / "out"
    shutil.copytree(run / "ingest", out / "ingest")
    shutil.copytree(run / "pii", out / "pii")
    shutil.copytree(run / "_state" / "pii", out / "_state" / "pii")
    state(out / "pii", "SUCCESS").unlink()  # an interrupted pii
    assert main(["purge", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"stackcurate: error: {out} has no finished pii output; purge deletes the unredacted text only once pii "
        "has redacted it\n"
    )
    assert (out / "ingest" / "00000.parquet").is_file()

"""Records of a second kind (a minimal `issue` kind, defined here) through ingest, language, filter, dedup, pii
and format: the stages for files pass them through untouched, those for every kind apply to them."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers import read_all, table_dir

from stackcurate.core.kinds import split_kinds
from stackcurate.pipeline import RunOptions, load_pipeline, run_pipeline
from stackcurate.query import connect

ROOT = Path(__file__).resolve().parents[1]

# An outside source of issue threads: one JSON line an issue, its thread rendered as the record's text.
ISSUES_SOURCE = """
import json
from dataclasses import dataclass

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.config import option
from stackcurate.core.contract import Shard
from stackcurate.sources.base import RawBatch, Source, expand_inputs


@dataclass(frozen=True, kw_only=True)
class IssueSettings:
    files: tuple[str, ...] = option((), "JSON-lines files of issues", path=True)


class IssueThreads(Source):
    name = "issues"
    kinds = ("issue",)
    columns = (pa.field("issue_number", pa.int64()),)
    config = IssueSettings

    def plan(self, upstream):
        uris = expand_inputs(self.settings.files, self.ingest.s3, "issues file")
        return [Shard(index=i, kind=self.name, path=uri, source_index=i) for i, uri in enumerate(uris)]

    def read(self, shard):
        batch = RawBatch(shard, "issues", self.ingest.batch_rows, schema=self.raw_schema())
        fs, path = io.filesystem(shard.path)
        for line in io.read_text(fs, path).splitlines():
            issue = json.loads(line)
            thread = "\\n".join(f"{c['author']}: {c['body']}" for c in issue["comments"])
            text = f"<issue_start>Title: {issue['title']}\\n{thread}<issue_closed>"
            batch.add(f"issues/{issue['number']}", data=text.encode(), kind="issue", repo_name=issue["repo"],
                      issue_number=issue["number"])
        if batch.rows:
            yield batch.flush()
"""
LONG_LINE = "x" * 1500  # over StarCoder2's max_line_length: a file with it is removed, an issue is not judged


def _issue(number: int, body: str) -> dict[str, object]:
    return {"number": number, "repo": "octo/demo", "title": f"issue {number}",
            "comments": [{"author": "user1", "body": body}, {"author": "user2", "body": "thanks, fixed"}]}  # fmt: skip


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "issue_source.py").write_text(ISSUES_SOURCE)
    monkeypatch.syspath_prepend(str(modules))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "ok.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "wide.py").write_text(f"x = '{LONG_LINE}'\n")  # removed by filter: a file
    issues = [
        _issue(1, "it crashes, write to me at jane.roe@fastmail.com"),  # pii applies: redacted
        _issue(2, f"the log: {LONG_LINE}"),  # filter passes it through: kept
        _issue(3, "same thread twice"),
        _issue(4, "same thread twice"),  # dedup applies: 3 and 4 are the same text but for the title...
    ]
    issues[3]["title"] = "issue 3"  # ... and now the same bytes: an exact duplicate of issue 3
    (tmp_path / "issues.jsonl").write_text("".join(json.dumps(i) + "\n" for i in issues))
    (tmp_path / "pipeline.yaml").write_text(
        "out: out\n"
        "stages:\n"
        "  ingest:\n"
        "    repos: [repo]\n"
        "    sources:\n"
        "      - issue_source:IssueThreads: {files: [issues.jsonl]}\n"
        "  language: {}\n"
        f"  filter: {{rules: {ROOT / 'filters' / 'starcoder2_v1.yaml'}}}\n"
        "  dedup: {}\n"
        "  pii: {model: none}\n"
        "  format: {fim_rate: 0.0}\n"
    )
    run_pipeline(load_pipeline(tmp_path / "pipeline.yaml"), RunOptions(runner="local", progress=False))
    return tmp_path / "out"


def _stat(out: Path, stage: str, metric: str) -> int:
    con, _ = connect(out)
    rows = con.sql(f"select sum(value) from stats where stage = '{stage}' and metric = '{metric}'").fetchall()
    return int(rows[0][0] or 0)


def test_stages_for_files_pass_issues_through_and_the_others_apply(run: Path) -> None:
    # ingest reads both kinds, with the issue source's own column
    ingested = _stat(run, "ingest", "docs_out")
    assert ingested == 6
    # language and filter judge files only: the four issues pass through each, the wide file is removed
    for stage in ("language", "filter"):
        assert _stat(run, stage, "docs_passed") == 4, stage
    removed = read_all(table_dir(run / "filter", "removed")).to_pylist()
    assert [(r["path"], r["reason"]) for r in removed] == [("/wide.py", "max_line_length")]
    # dedup and pii apply to every kind: nothing passes through them
    for stage in ("dedup", "pii"):
        assert _stat(run, stage, "docs_passed") == 0, stage
    duplicates = read_all(table_dir(run / "dedup", "removed")).to_pylist()
    assert [(r["path"], r["reason"]) for r in duplicates] == [("/issues/4", "exact_duplicate")]

    documents = read_all(run / "format").to_pylist()
    by_kind: dict[str, list[dict[str, object]]] = {}
    for doc in documents:
        by_kind.setdefault(str(doc["kind"]), []).append(doc)
    assert sorted(by_kind) == ["issue", "repository"]
    issues = sorted(by_kind["issue"], key=lambda d: str(d["text"]))
    assert len(issues) == 3  # 1, 2 and 3 (4 was its duplicate)
    texts = "\n".join(str(d["text"]) for d in issues)
    assert "jane.roe@fastmail.com" not in texts and "<EMAIL>" in texts  # pii redacted the thread
    assert LONG_LINE in texts  # the filter for code did not judge the thread
    assert all(str(d["text"]).startswith("<issue_start>Title: issue") for d in issues)
    assert [d["language"] for d in issues] == [None, None, None]  # language detection left them alone
    assert "/ok.py" not in texts and "def add" in str(by_kind["repository"][0]["text"])


def test_issue_rows_keep_their_own_columns_and_files_read_as_files(run: Path) -> None:
    table = read_all(run / "pii")
    kinds = table.column("kind").to_pylist()
    assert sorted(k or "file" for k in kinds) == ["file", "issue", "issue", "issue"]
    issues = table.filter(pc.equal(table.column("kind"), "issue"))
    assert sorted(issues.column("issue_number").to_pylist()) == [1, 2, 3]
    files = table.filter(pc.invert(pc.fill_null(pc.equal(table.column("kind"), "issue"), False)))
    assert files.column("language").to_pylist() == ["Python"]
    assert files.column("issue_number").to_pylist() == [None]


def test_a_table_without_kinds_is_handed_over_whole() -> None:
    """A run over files has no `kind` column: each stage gets its table itself, no copy (what it always got)."""
    table = pa.table({"doc_id": [1, 2], "content": ["a", "b"]})
    mine, passed = split_kinds(table, ("file",))
    assert mine is table and passed is None
    mixed = table.append_column("kind", pa.array([None, "issue"]))
    mine, passed = split_kinds(mixed, ("file",))
    assert mine.column("doc_id").to_pylist() == [1] and passed is not None
    assert passed.column("doc_id").to_pylist() == [2]
    mine, passed = split_kinds(mixed, None)
    assert mine is mixed and passed is None

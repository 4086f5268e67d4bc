"""The source protocol (stackcurate/sources/): a source from outside the package, docs/sources.md's example run as
written, in a pipeline YAML and mixed with a built-in source; resume; and the one-line errors of a source named
wrong."""

import importlib
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from helpers import data_files, doc_block, read_all, state, table_dir, write_files

from stackcurate.cli import main
from stackcurate.core import io
from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import DOC_ID_ORDINAL_BITS, ERROR_SCHEMA, FILE_SCHEMA, with_reason
from stackcurate.sources.base import Source
from stackcurate.stages.ingest import IngestConfig, IngestStage, plan

DOC = Path(__file__).resolve().parents[2] / "docs" / "sources.md"


@pytest.fixture
def zip_source(tmp_path, monkeypatch):
    """docs/sources.md's source, written to tmp_path/zip_source.py, importable as `zip_source`."""
    (tmp_path / "zip_source.py").write_text(doc_block(DOC, "# zip_source.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "zip_source", raising=False)
    yield importlib.import_module("zip_source")
    sys.modules.pop("zip_source", None)


def write_zip(path: Path, files: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def archives(folder: Path) -> list[Path]:
    """Two archives and a file that only looks like one."""
    a = write_zip(folder / "a.zip", {"pkg/": b"", "pkg/x.py": b"X = 1\n", "pkg/lib.so": b"\x7fELF\0\0"})
    b = write_zip(folder / "b.zip", {"y.py": b"Y = 2\n", "docs/z.md": b"# Z\n"})
    (folder / "c.zip").write_bytes(b"PK not really")
    return [a, b, folder / "c.zip"]


def test_the_doc_s_source_runs_in_a_pipeline_and_a_rerun_redoes_only_what_failed(tmp_path, zip_source, monkeypatch):
    archives(tmp_path / "archives")
    (tmp_path / "pipeline.yaml").write_text(doc_block(DOC, "# pipeline.yaml"))
    run = ["run", str(tmp_path / "pipeline.yaml"), "--runner", "local", "--no-progress"]
    read = zip_source.ZipArchives.read

    def down_for_b(self, shard):  # the store holding b.zip is down: that shard is left for the next run
        if shard.path.endswith("b.zip"):
            raise io.StoreUnavailable("the archive store is down")
        return read(self, shard)

    monkeypatch.setattr(zip_source.ZipArchives, "read", down_for_b)
    assert main(run) == 2
    out = tmp_path / "work" / "zips" / "ingest"
    assert sorted(p.name for p in state(out, "shards").iterdir()) == ["00000.json", "00002.json"]

    reads = []

    def counted(self, shard):
        reads.append(Path(shard.path).name)
        return read(self, shard)

    monkeypatch.setattr(zip_source.ZipArchives, "read", counted)
    assert main(run) == 0
    assert reads == ["b.zip"], "the rerun reads only the shard that was not finished"

    kept = {r["path"]: r for r in read_all(out, FILE_SCHEMA).to_pylist()}
    texts = {p: r["content"] for p, r in kept.items()}
    assert texts == {"/pkg/x.py": "X = 1\n", "/y.py": "Y = 2\n", "/docs/z.md": "# Z\n"}
    assert {r["source"] for r in kept.values()} == {"zip"}
    assert kept["/y.py"]["repo_name"] == "b.zip"
    assert kept["/y.py"]["doc_id"] == (1 << DOC_ID_ORDINAL_BITS) | 0  # the second input, its first file
    removed = read_all(table_dir(out, "removed"), with_reason(FILE_SCHEMA)).to_pylist()
    assert [(r["path"], r["reason"]) for r in removed] == [("/pkg/lib.so", "binary")]  # ingest's own check
    errors = read_all(table_dir(out, "errors"), ERROR_SCHEMA).to_pylist()
    assert [(r["origin"], r["reason"]) for r in errors] == [(str(tmp_path / "archives" / "c.zip"), "corrupt_zip")]
    saved = yaml.safe_load((tmp_path / "work" / "zips" / "_config.yaml").read_text())
    entry = {"zip_source:ZipArchives": {"archives": [str(tmp_path / "archives" / "*.zip")]}}
    assert saved["stages"]["ingest"]["sources"] == [entry], "the settings, paths resolved against the YAML"

    uninterrupted = tmp_path / "once.yaml"
    uninterrupted.write_text(doc_block(DOC, "# pipeline.yaml").replace("out: work/zips", "out: work/once"))
    assert main(["run", str(uninterrupted), "--runner", "local", "--no-progress"]) == 0
    assert data_files(out) == data_files(tmp_path / "work" / "once" / "ingest")


def test_a_source_of_one_s_own_is_planned_after_the_built_in_ones(tmp_path, zip_source):
    repo = write_files(tmp_path / "proj", {"p.py": b"P = 1\n"})
    cfg = build_config(
        IngestConfig,
        {"repos": [str(repo)], "sources": [{"zip_source:ZipArchives": {"archives": ["archives/*.zip"]}}]},
        base_dir=tmp_path,
    )
    inputs = archives(tmp_path / "archives")
    shards = plan(cfg)
    assert [(s.index, s.kind, s.source_index, s.path) for s in shards] == [
        (0, "repo", 0, str(repo)),
        *[(i, "zip", i, str(p)) for i, p in enumerate(inputs, 1)],
    ]
    stage = IngestStage(cfg)
    assert "corrupt_zip" in stage.error_reasons and "unsafe_member" in stage.error_reasons
    assert [t.num_rows for t in stage.read(shards[2])] == [2]


def test_a_source_of_stackcurate_with_settings_is_named_by_its_name(tmp_path, zip_source, monkeypatch):
    from stackcurate import sources

    monkeypatch.setattr(sources, "BUILT_IN", (*sources.BUILT_IN, zip_source.ZipArchives))
    inputs = archives(tmp_path / "archives")
    cfg = build_config(IngestConfig, {"sources": [{"zip": {"archives": [str(tmp_path / "archives/*.zip")]}}]})
    assert [(s.kind, s.path) for s in plan(cfg)] == [("zip", str(p)) for p in inputs]
    with pytest.raises(StackcurateError, match="ingest needs an input"):
        plan(build_config(IngestConfig, {}))  # named in `sources` only: not read without being named


class Clash(Source):
    name = "repo"

    def plan(self, upstream):
        return []

    def read(self, shard):
        return iter(())


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("no_such_module:Source", "cannot import no_such_module"),
        ("zip_source", "expected module:Class"),
        ("json:dumps", "json:dumps is not a subclass of stackcurate.sources.base.Source"),
        ({"zip_source:ZipArchives": {"archive": []}}, "unknown ZipSettings key 'archive' .did you mean 'archives'"),
        ({"zip_source:ZipArchives": {}, "other:Source": {}}, "neither module:Class nor a mapping"),
        ({"test_sources:Clash": {"x": 1}}, "source test_sources:Clash takes no settings"),
    ],
)
def test_a_source_named_wrong_is_one_line_when_the_config_is_read(zip_source, entry, message):
    with pytest.raises(StackcurateError, match=message):
        build_config(IngestConfig, {"sources": [entry]})


def test_two_sources_of_one_name_are_refused(zip_source):
    cfg = build_config(IngestConfig, {"sources": ["test_sources:Clash"], "repos": ["."]})
    with pytest.raises(StackcurateError, match="two ingest sources are named 'repo' .LocalRepo and Clash."):
        plan(cfg)

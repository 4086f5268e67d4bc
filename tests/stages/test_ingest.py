"""The ingest stage: what it does whatever the source (decoding, tree depth, doc_ids that do not depend on the
sharding, user errors) and how it plans and dispatches to its sources. Each source's own tests are under
tests/sources/.

Every test builds tiny inputs in `tmp_path` and runs the stage with the local runner.
"""

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import (
    GOOD,
    committed_repo,
    file_member,
    flat_bundle,
    in_dir,
    ingest,
    needs_git,
    stack_v2_layout,
    write_files,
)

from stackcurate import sources
from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import DOC_ID_ORDINAL_BITS
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage
from stackcurate.stages.ingest import ERROR_REASONS, IngestConfig, IngestStage, plan
from stackcurate.stages.ingest.content import decode, sha1_hex

# --- encodings ----------------------------------------------------------------------------------------------


def test_declared_windows_1252(tmp_path):
    text = "# Café – naïve “quotes” € 5\nprint('déjà')\n"
    root = stack_v2_layout(
        tmp_path / "sv2", [("/cafe.py", text.encode("cp1252"))], extra={"/cafe.py": {"src_encoding": "Windows-1252"}}
    )
    got = ingest(tmp_path / "out", metadata=[root / "metadata"], content=root)
    row = got.kept_by_path()["/cafe.py"]
    assert row["content"] == text
    assert row["src_encoding"] == "Windows-1252"
    assert row["length_bytes"] == len(text.encode("utf-8"))
    assert row["blob_id"] == sha1_hex(text.encode("cp1252"))


def test_undeclared_non_utf8_is_detected(tmp_path):
    text = "// Größe der Übergabe prüfen, wenn die Länge größer ist als erwartet\nint größe = 0; // Äpfel und Öl\n" * 4
    data = text.encode("latin-1")
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    root = stack_v2_layout(tmp_path / "sv2", [("/g.c", data)], extra={"/g.c": {"src_encoding": None}})
    got = ingest(tmp_path / "out", metadata=[root / "metadata"], content=root)
    row = got.kept_by_path()["/g.c"]
    assert row["content"] == text
    assert row["src_encoding"] not in (None, "UTF-8")
    assert data.decode(row["src_encoding"]) == text


@pytest.mark.parametrize("declared", ["ascii", "no-such-codec"])
def test_wrong_declared_encoding_falls_back_to_utf8(tmp_path, declared):
    text = "# naïve café ✓ 日本\nx = 1\n"
    root = stack_v2_layout(tmp_path / "sv2", [("/u.py", text.encode())], extra={"/u.py": {"src_encoding": declared}})
    got = ingest(tmp_path / "out", metadata=[root / "metadata"], content=root)
    row = got.kept_by_path()["/u.py"]
    assert row["content"] == text
    assert row["src_encoding"] == "UTF-8"


def test_declared_non_text_codec_falls_back(tmp_path):
    files = [("/ok.py", b"print('ok')\n"), ("/b64.py", b"print('b64')\n")]
    root = stack_v2_layout(tmp_path / "sv2", files, extra={"/b64.py": {"src_encoding": "base64"}})
    got = ingest(tmp_path / "out", metadata=[root / "metadata"], content=root)
    assert got.kept_by_path()["/b64.py"]["content"] == "print('b64')\n"
    assert got.kept_by_path()["/b64.py"]["src_encoding"] == "UTF-8"
    assert "/ok.py" in got.kept_by_path()


def test_decode_undecodable_bytes():
    # No NUL, not UTF-8, and charset detection finds nothing: reachable with byte soup.
    result = decode(bytes(range(1, 256)))
    assert result.text is None and result.reason == "undecodable"


# --- tree depth ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["folder", "flat_bundle", pytest.param("git_repo", marks=needs_git)])
def test_tree_depth_limit(tmp_path, kind):
    ok = "/".join(["d"] * 63) + "/ok.py"  # 64 components: kept
    deep = "/".join(["d"] * 64) + "/deep.py"  # 65 components: too deep
    files = {ok: b"ok = 1\n", deep: b"deep = 1\n"}
    if kind == "flat_bundle":
        bundle = flat_bundle(tmp_path / "bundles", [(file_member(in_dir(p)), data) for p, data in files.items()])
        got = ingest(tmp_path / "out", bundles=[bundle])
    elif kind == "git_repo":
        committed_repo(tmp_path / "proj", files)
        got = ingest(tmp_path / "out", repos=[tmp_path / "proj"])
    else:
        got = ingest(tmp_path / "out", repos=[write_files(tmp_path / "proj", files)])
    assert set(got.kept_by_path()) == {"/" + ok}
    assert got.reasons("removed") == {"/" + deep: "too_deep"}


# --- determinism --------------------------------------------------------------------------------------------


def test_same_inputs_same_output_whatever_the_sharding(tmp_path):
    files = [(f"/f{i}.py", f"x = {i}\n".encode()) for i in range(5)]
    root = stack_v2_layout(tmp_path / "sv2", files, objects={"/f3.py": None})
    bundle = flat_bundle(
        tmp_path / "bundles", [(file_member(in_dir("x.py")), b"X = 1\n"), (file_member(in_dir("y.py")), b"Y = 2\n")]
    )
    repo = write_files(tmp_path / "proj", {"p.py": b"P = 1\n", "q/q.py": b"Q = 1\n"})
    inputs = {"metadata": [root / "metadata/*.parquet"], "content": root, "bundles": [bundle], "repos": [repo]}

    first = ingest(tmp_path / "out1", **inputs)
    second = ingest(tmp_path / "out2", **inputs)
    sharded = ingest(tmp_path / "out3", **inputs, rows_per_shard=2)

    assert first.kept.num_rows == 8
    assert first.kept.equals(second.kept)
    assert first.removed.equals(second.removed) and first.errors.equals(second.errors)
    ids = first.kept["doc_id"].to_pylist()
    assert len(set(ids)) == len(ids)
    # doc_id = (source_index << 40) | ordinal: metadata file 0, then the bundle (1), then the folder (2).
    assert {i >> DOC_ID_ORDINAL_BITS for i in ids} == {0, 1, 2}
    assert len(list((tmp_path / "out3/ingest").glob("*.parquet"))) == 5  # 3 metadata shards + bundle + folder
    assert sharded.kept.sort_by("doc_id").equals(first.kept.sort_by("doc_id"))
    assert sharded.errors.sort_by("doc_id").equals(first.errors.sort_by("doc_id"))
    assert [r["path"] for r in sharded.errors.to_pylist()] == ["/f3.py"]


# --- plan and dispatch to the sources ----------------------------------------------------------------------


def test_the_error_reasons_are_ingest_s_own_and_those_its_sources_declare():
    assert ERROR_REASONS == {
        *("hash_mismatch", "undecodable", "unreadable_input"),  # ingest's own
        *("missing_blob", "fetch_failed", "corrupt_gzip", "decompression_bomb", "bad_metadata"),  # stack_v2
        *("unsafe_member", "corrupt_bundle"),  # vault bundles, local repositories
        *("malformed_line", "malformed_event", "truncated_file"),  # GH Archive
    }
    assert [s.name for s in sources.BUILT_IN] == ["stack_v2", "flat", "git_bare", "repo", "history", "gharchive"]
    for source in sources.BUILT_IN:
        assert source.error_reasons <= ERROR_REASONS, source.name


def test_shards_come_source_by_source_and_bundles_of_both_kinds_in_the_order_given(tmp_path):
    root = stack_v2_layout(tmp_path / "sv2", GOOD)
    folder = tmp_path / "vault"
    folder.mkdir()
    bundles = [folder / "swh_1_rev_b.git.tar", folder / "swh:1:dir:a.tar.gz", folder / "swh_1_rev_c.git.tar"]
    for bundle in bundles:
        bundle.write_bytes(b"not read when planning")
    repo = write_files(tmp_path / "proj", {"p.py": b"P = 1\n"})
    cfg = build_config(
        IngestConfig,
        {
            "metadata": [str(root / "metadata")],
            "content": str(root),
            "bundles": [str(b) for b in bundles],
            "repos": [str(repo)],
            "rows_per_shard": 2,
        },
    )
    shards = plan(cfg)
    assert [(s.index, s.kind, s.source_index) for s in shards] == [
        (0, "stack_v2", 0),
        (1, "stack_v2", 0),  # rows 2-3 of the same metadata file
        (2, "git_bare", 1),
        (3, "flat", 2),
        (4, "git_bare", 3),
        (5, "repo", 4),
    ]
    assert [s.path for s in shards[2:5]] == [str(b) for b in bundles]


def test_a_shard_is_read_by_the_source_of_its_kind(tmp_path):
    repo = write_files(tmp_path / "proj", {"p.py": b"P = 1\n"})
    stage = IngestStage(build_config(IngestConfig, {"repos": [str(repo)]}))
    (shard,) = plan(stage.cfg)
    assert [t.column("source").to_pylist() for t in stage.read(shard)] == [["local"]]
    with pytest.raises(ValueError, match="no ingest source reads shards of kind 'parquet'"):
        stage.read(replace(shard, kind="parquet"))


# --- errors for the user ------------------------------------------------------------------------------------


def _user_error_cases(tmp_path: Path) -> dict[str, tuple[dict, str]]:
    root = stack_v2_layout(tmp_path / "sv2", GOOD)
    odd = tmp_path / "bundles" / "swh:1:dir:abc.zip"
    odd.parent.mkdir()
    odd.write_bytes(b"PK")
    return {
        "no_inputs": ({}, "needs an input"),
        "metadata_without_content": ({"metadata": [str(root / "metadata/*.parquet")]}, "needs --content"),
        "metadata_glob_matches_nothing": (
            {"metadata": [str(tmp_path / "nowhere/*.parquet")], "content": str(root)},
            "no metadata file matches",
        ),
        "bundle_glob_matches_nothing": ({"bundles": [str(tmp_path / "nowhere/*.tar.gz")]}, "no bundle file matches"),
        "unknown_bundle_kind": ({"bundles": [str(odd)]}, "cannot tell the vault bundle kind"),
        "repo_not_a_folder": ({"repos": [str(tmp_path / "no-such-repo")]}, "is not a folder"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "no_inputs",
        "metadata_without_content",
        "metadata_glob_matches_nothing",
        "bundle_glob_matches_nothing",
        "unknown_bundle_kind",
        "repo_not_a_folder",
    ],
)
def test_user_errors(tmp_path, case):
    values, phrase = _user_error_cases(tmp_path)[case]
    spec = get_stage("ingest")
    cfg = build_config(spec.config, values)
    with pytest.raises(StackcurateError, match=phrase):
        plan(cfg)
    with pytest.raises(StackcurateError, match=phrase):
        run_stage(spec, cfg, str(tmp_path / "out"), RunOptions(runner="local", progress=False))
    assert not (tmp_path / "out").exists(), "nothing is written before the inputs are checked"

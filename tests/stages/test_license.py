"""License classification (The Stack v2 rules), propagation by folder, opt-out, and ScanCode detection."""

import pyarrow as pa
import pytest
from helpers import GPL3_NOTICE, MIT, make_table

from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage
from stackcurate.stages.license import LicenseConfig, LicenseStage, read_opt_out


def _stage(tmp_path, found: list[dict], **cfg) -> LicenseStage:
    scan = tmp_path / "scan"
    scan.mkdir()
    import pyarrow.parquet as pq

    from stackcurate.stages.license import SCAN_SCHEMA

    pq.write_table(pa.Table.from_pylist(found, schema=SCAN_SCHEMA), scan / "00000.parquet")
    return LicenseStage(LicenseConfig(detections=str(scan), **cfg))


def _types(out) -> dict[str, str]:
    rows = out.kept.to_pylist() + out.removed.to_pylist()
    return {r["path"]: r["license_type"] for r in rows}


def test_folder_licenses_apply_to_files_below_only(tmp_path):
    stage = _stage(
        tmp_path,
        [
            {"repo_name": "a/b", "folder": "/", "path": "/LICENSE", "licenses": ["MIT"]},
            {"repo_name": "a/b", "folder": "/vendor/gpl", "path": "/vendor/gpl/COPYING", "licenses": ["GPL-3.0-only"]},
        ],
    )
    out = stage(make_table([("/src/x.py", "x"), ("/vendor/gpl/y.c", "y"), ("/vendor/z.c", "z")], repo_name="a/b"))
    assert _types(out) == {"/src/x.py": "permissive", "/vendor/gpl/y.c": "non_permissive", "/vendor/z.c": "permissive"}
    assert [r["reason"] for r in out.removed.to_pylist()] == ["license_non_permissive"]
    assert out.kept.to_pylist()[0]["detected_licenses"] == ["MIT"]


def test_other_repositories_do_not_share_licenses(tmp_path):
    stage = _stage(tmp_path, [{"repo_name": "a/b", "folder": "/", "path": "/LICENSE", "licenses": ["MIT"]}])
    out = stage(make_table([("/x.py", "x")], repo_name="c/d"))
    assert _types(out) == {"/x.py": "no_license"}
    assert out.kept.num_rows == 1  # no_license is kept by default, as The Stack v2


@pytest.mark.parametrize(
    ("gha", "found", "expected"),
    [
        ("MIT", ["GPL-3.0-only"], "permissive"),  # a permissive GitHub license decides first
        ("GPL-3.0", ["MIT"], "non_permissive"),  # any other GitHub license decides next
        ("NOASSERTION", [], "non_permissive"),  # NOASSERTION with nothing detected
        ("NOASSERTION", ["MIT"], "permissive"),  # ... but detections still count
        (None, [], "no_license"),
        (None, ["MIT", "LicenseRef-scancode-dco-1.1"], "permissive"),  # amendments are ignored
        (None, ["LicenseRef-scancode-dco-1.1"], "no_license"),
        (
            None,
            ["MIT", "LicenseRef-scancode-unknown-license-reference"],
            "permissive",
        ),  # ignored beside a permissive id
        (None, ["LicenseRef-scancode-unknown-license-reference"], "non_permissive"),  # not ignored alone
        (None, ["MIT", "GPL-2.0-only"], "non_permissive"),  # every id must be permissive
    ],
)
def test_stack_v2_classification(tmp_path, gha, found, expected):
    stage = _stage(tmp_path, [{"repo_name": "a/b", "folder": "/", "path": "/LICENSE", "licenses": found}])
    out = stage(make_table([("/x.py", "x")], repo_name="a/b", gha_license_id=gha))
    assert _types(out) == {"/x.py": expected}


def test_metadata_license_type_is_trusted_unless_told_otherwise(tmp_path):
    found = [{"repo_name": "a/b", "folder": "/", "path": "/LICENSE", "licenses": ["GPL-3.0-only"]}]
    table = make_table([("/x.py", "x")], repo_name="a/b", license_type="permissive")
    assert _types(_stage(tmp_path, found)(table)) == {"/x.py": "permissive"}
    (tmp_path / "scan").rename(tmp_path / "scan0")
    assert _types(_stage(tmp_path, found, trust_metadata=False)(table)) == {"/x.py": "non_permissive"}


def test_keep_setting(tmp_path):
    stage = _stage(tmp_path, [], keep=("permissive",))
    out = stage(make_table([("/x.py", "x")], repo_name="a/b"))
    assert out.kept.num_rows == 0 and out.removed.column("reason").to_pylist() == ["license_no_license"]
    with pytest.raises(ValueError, match="unknown license type"):
        LicenseConfig(keep=("free",))


def test_opt_out_by_repository_and_owner(tmp_path):
    optout = tmp_path / "optout.txt"
    optout.write_text("# requests received\nAcme/Widgets\nhttps://github.com/someone/thing\nbigcorp   # whole org\n")
    assert read_opt_out((str(optout),)) == (frozenset({"acme/widgets", "someone/thing"}), frozenset({"bigcorp"}))
    stage = _stage(tmp_path, [], opt_out=(str(optout),))
    files = [("/a.py", "a")]
    out = stage(
        pa.concat_tables(
            [make_table(files, repo_name=r) for r in ("acme/widgets", "acme/other", "BigCorp/tool", "someone/thing")]
        )
    )
    assert out.kept.column("repo_name").to_pylist() == ["acme/other"]
    assert out.removed.column("reason").to_pylist() == ["opt_out"] * 3
    with pytest.raises(StackcurateError, match="does not exist"):
        read_opt_out((str(tmp_path / "missing.txt"),))


def test_scancode_detection_through_the_stage(tmp_path):
    """The two passes through the runner: license-like files found by name, detected by ScanCode."""
    pytest.importorskip("licensedcode")
    from helpers import write_records

    table = pa.concat_tables(
        [
            make_table(
                [("/LICENSE", MIT), ("/src/main.py", "print(1)\n"), ("/docs/README.md", "# Docs\n")],
                repo_name="acme/mit",
            ),
            make_table(
                [("/COPYING", GPL3_NOTICE), ("/main.c", "int main(void) { return 0; }\n")], repo_name="acme/gpl"
            ),
        ]
    )
    table = table.set_column(0, "doc_id", pa.array(range(table.num_rows), pa.int64()))
    write_records(tmp_path / "in", [table])
    spec = get_stage("license")
    cfg = build_config(spec.config, {})
    result = run_stage(
        spec, cfg, str(tmp_path / "out"), RunOptions(runner="local", progress=False), input_uri=str(tmp_path / "in")
    )
    from stackcurate.query import run_query

    scanned = dict(run_query(tmp_path / "out", "select path, licenses from license_scan").fetchall())
    assert scanned == {"/LICENSE": ["MIT"], "/docs/README.md": [], "/COPYING": ["GPL-3.0-or-later"]}
    types = dict(
        run_query(
            tmp_path / "out",
            "select path, license_type from license union all select path, license_type from license_removed",
        ).fetchall()
    )
    assert types == {
        "/LICENSE": "permissive",
        "/src/main.py": "permissive",
        "/docs/README.md": "permissive",
        "/COPYING": "non_permissive",
        "/main.c": "non_permissive",
    }
    assert (result.docs_out, result.docs_removed) == (3, 2)


@pytest.mark.parametrize("mode", ["stack_v2", "full"])
def test_detection_gives_the_ids_of_scancodes_detect_licenses(mode):
    """`detect` runs ScanCode's steps without the detections' identifiers: the same ids as `detect_licenses`."""
    pytest.importorskip("licensedcode")
    from licensedcode.cache import get_licenses_db, get_licensing
    from licensedcode.detection import detect_licenses

    from stackcurate.stages import license_detect

    def scancode(text: str) -> list[str]:
        kwargs = {"deadline": 100} if mode == "stack_v2" else {}
        symbols = [
            symbol.key
            for found in detect_licenses(query_string=text, **kwargs)
            for symbol in get_licensing().license_symbols(found.license_expression)
        ]
        return sorted({get_licenses_db()[key].spdx_license_key for key in symbols})

    texts = [
        MIT,
        GPL3_NOTICE,
        f"{MIT}\n\n# vendored/\n\n{GPL3_NOTICE}",  # two detections
        "# SPDX-License-Identifier: Apache-2.0\nimport os\n",
        "Licensed under the MIT license; see LICENSE.\n",
        "print('no license here')\n",
    ]
    found = [license_detect.detect(text, mode) for text in texts]
    assert found == [scancode(text) for text in texts]
    assert found[0] == ["MIT"] and len(found[2]) >= 2


def test_loading_scancode_leaves_the_collector_as_it_was():
    """The index loads with the collector off (twice as fast); the process gets it back on."""
    pytest.importorskip("licensedcode")
    import gc

    from stackcurate.stages import license_detect

    assert gc.isenabled()
    license_detect.detect("print(1)\n")
    assert gc.isenabled()


def test_the_index_load_lock_is_held_by_one_at_a_time_and_never_blocks_loading(tmp_path):
    """`io.machine_lock`, which ScanCode's load takes (optional: a missing folder means no lock)."""
    import threading

    from stackcurate.core import io

    events: list[str] = []
    held = threading.Event()

    def first() -> None:
        with io.machine_lock(tmp_path / "test.lock"):
            held.set()
            threading.Event().wait(0.2)
            events.append("first releases")

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(30)
    with io.machine_lock(tmp_path / "test.lock"):  # a second open file: waits for the first to let go
        events.append("second holds")
    thread.join(30)
    assert events == ["first releases", "second holds"]
    with io.machine_lock(tmp_path / "missing" / "test.lock", optional=True):  # no lock file possible: no lock
        events.append("unlocked")
    assert events[-1] == "unlocked"

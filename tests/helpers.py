"""Builders for tiny test inputs: Stack v2 layouts, vault bundles, git repositories, record tables; and ingest
run on them."""

import gzip
import io
import os
import shutil
import socket
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stackcurate.core.config import build_config
from stackcurate.core.schema import ERROR_SCHEMA, FILE_SCHEMA, extension_of, with_reason
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.sample import STACK_V2_FILE_SCHEMA
from stackcurate.stages import get_stage
from stackcurate.stages.ingest.content import git_blob_hex, sha1_hex


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stack_v2_layout(
    root: Path,
    files: list[tuple[str, bytes]],
    *,
    repo: str = "acme/widgets",
    objects: dict[str, bytes | None] | None = None,
    metadata_name: str = "00000.parquet",
    extra: dict[str, dict] | None = None,
) -> Path:
    """Write `root/content/<sha1>` gzip objects and `root/metadata/<name>` for `(path, bytes)` files.

    `objects` replaces the stored object of a path with other bytes (or None: no object, a missing blob);
    `extra` overrides metadata fields of a path.
    """
    (root / "content").mkdir(parents=True, exist_ok=True)
    (root / "metadata").mkdir(exist_ok=True)
    objects, extra = objects or {}, extra or {}
    rows = []
    for path, data in files:
        blob = sha1_hex(data)
        stored = objects[path] if path in objects else gzip.compress(data, mtime=0)
        if stored is not None:
            (root / "content" / blob).write_bytes(stored)
        rows.append(
            {
                "blob_id": blob,
                "content_id": git_blob_hex(data),
                "path": path,
                "repo_name": repo,
                "detected_licenses": ["MIT"],
                "license_type": "permissive",
                "star_events_count": 3,
                "fork_events_count": 1,
                "src_encoding": "UTF-8",
                "length_bytes": len(data),
                "extension": extension_of(path),
                **extra.get(path, {}),
            }
        )
    pq.write_table(pa.Table.from_pylist(rows, schema=STACK_V2_FILE_SCHEMA), root / "metadata" / metadata_name)
    return root


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> bytes:
    """A tar archive built member by member (for crafting unsafe members)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        add_members(tar, members)
    return buf.getvalue()


def add_members(tar: tarfile.TarFile, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    """Add crafted members (None data: a member without contents, e.g. a link or a device)."""
    for info, data in members:
        if data is not None:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        else:
            tar.addfile(info)


def file_member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o644
    return info


def make_table(files: list[tuple[str, str]], **columns: object) -> pa.Table:
    """File records for `(path, content)` pairs; `columns` sets a column to one value for every row."""
    rows = [
        {
            "doc_id": i,
            "source": "test",
            "path": path,
            "content": content,
            "length_bytes": len(content.encode()),
            **columns,
        }
        for i, (path, content) in enumerate(files)
    ]
    return pa.Table.from_pylist(rows, schema=FILE_SCHEMA)


def read_all(folder: Path, schema: pa.Schema | None = None) -> pa.Table:
    """All Parquet files of a folder (not recursive), in file order; `schema`'s empty table if none."""
    files = sorted(folder.glob("*.parquet"))
    if not files:
        assert schema is not None, f"no Parquet files in {folder}"
        return schema.empty_table()
    return pa.concat_tables([pq.read_table(f) for f in files])


def write_records(folder: Path, tables: list[pa.Table]) -> Path:
    """Lay out record tables as a finished stage output (one Parquet file per table)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, table in enumerate(tables):
        pq.write_table(table, folder / f"{i:05d}.parquet")
    return folder


def sharded_records(folder: Path, files: list[tuple[str, str]], shards: int) -> Path:
    """`shards` input files of the same `(path, content)` files, one repository each, with distinct doc ids."""
    tables = [make_table(files, repo_name=f"acme/r{i}") for i in range(shards)]
    tables = [
        t.set_column(0, "doc_id", pa.array([i * 100 + j for j in range(t.num_rows)], pa.int64()))
        for i, t in enumerate(tables)
    ]
    return write_records(folder, tables)


def table_dir(stage: Path, kind: str) -> Path:
    """The folder of a stage's `removed`, `errors` or `stats` rows, beside its kept rows `<out>/<stage>`
    (core/layout.py)."""
    return stage.parent / f"_{kind}" / stage.name


def state(stage: Path, name: str) -> Path:
    """A file or folder of a stage's state (SUCCESS, FUSED, PURGED, plan.json, config.yaml, shards)."""
    return stage.parent / "_state" / stage.name / name


def data_files(folder: Path) -> dict[str, bytes]:
    """Every committed Parquet file under a folder, by relative path (not stats: they hold run ids and timings,
    nor temporary files)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*.parquet"))
        if "_stats" not in p.relative_to(folder).parts and ".tmp-" not in p.name
    }


class StageWrapper:
    """Wraps a stage instance for a test (a stage that dies or waits mid-shard): what a subclass does not
    override is the wrapped stage's."""

    def __init__(self, stage: object) -> None:
        self.stage = stage

    def __getattr__(self, name: str) -> object:
        return getattr(self.stage, name)


def wrapped_stage(base: type, wrap: Callable[[object], object]) -> type:
    """A stage class like `base` (its name, config and global steps) whose instances are `wrap(base(cfg))`."""

    class Wrapped(base):
        def __new__(cls, cfg: object) -> object:  # not an instance of Wrapped: __init__ is not called again
            return wrap(base(cfg))

    return Wrapped


# --- ingest on tiny inputs ----------------------------------------------------------------------------------

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")

DIR_HEX = sha1_hex(b"a directory")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


@dataclass
class Ingested:
    result: object
    kept: pa.Table
    removed: pa.Table
    errors: pa.Table

    def kept_by_path(self) -> dict[str, dict]:
        return {r["path"]: r for r in self.kept.to_pylist()}

    def reasons(self, which: str) -> dict[str, str]:
        return {r["path"]: r["reason"] for r in getattr(self, which).to_pylist()}


def ingest(out: Path, **values: object) -> Ingested:
    spec = get_stage("ingest")
    values = {
        k: ([str(x) for x in v] if isinstance(v, list | tuple) else (str(v) if isinstance(v, Path) else v))
        for k, v in values.items()
    }
    cfg = build_config(spec.config, values)
    result = run_stage(spec, cfg, str(out), RunOptions(runner="local", progress=False))
    stage = out / "ingest"
    return Ingested(
        result,
        read_all(stage, FILE_SCHEMA),
        read_all(table_dir(stage, "removed"), with_reason(FILE_SCHEMA)),
        read_all(table_dir(stage, "errors"), ERROR_SCHEMA),
    )


def snapshot(root: Path, skip: str = "out") -> set[str]:
    """Every path under `root` (links not followed), except `root/skip` and what it holds."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            rel = (Path(dirpath) / name).relative_to(root)
            if rel.parts[0] != skip:
                found.add(rel.as_posix())
    return found


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
    )
    return out.stdout.decode().strip()


def write_files(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def committed_repo(root: Path, files: dict[str, bytes]) -> str:
    write_files(root, files)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return git(root, "rev-parse", "HEAD")


def flat_bundle(
    folder: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], hex_id: str = DIR_HEX, mode: str = "w:gz"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"swh:1:dir:{hex_id}.tar.gz"
    path.write_bytes(tar_bytes([(file_member(f"swh:1:dir:{hex_id}", tarfile.DIRTYPE), None), *members], mode=mode))
    return path


def in_dir(name: str, hex_id: str = DIR_HEX) -> str:
    return f"swh:1:dir:{hex_id}/{name}"


def git_bare_bundle(
    tmp_path: Path, files: dict[str, bytes], extra: list[tuple[tarfile.TarInfo, bytes | None]] = ()
) -> tuple[Path, str, str]:
    """A real git-bare vault bundle of a one-commit repository; returns (bundle, commit, tree)."""
    src = tmp_path / "gitsrc"
    commit = committed_repo(src, files)
    tree = git(src, "rev-parse", "HEAD^{tree}")
    bare = tmp_path / "bare" / f"swh:1:rev:{commit}.git"
    bare.parent.mkdir()
    git(tmp_path, "clone", "-q", "--bare", "--no-local", str(src), str(bare))
    bundle = tmp_path / "bundles" / f"swh_1_rev_{commit}.git.tar"
    bundle.parent.mkdir(exist_ok=True)
    with tarfile.open(bundle, "w") as tar:
        add_members(tar, extra)
        tar.add(bare, arcname=bare.name)
    shutil.rmtree(tmp_path / "bare")
    return bundle, commit, tree


GOOD = [
    ("/src/app.py", b"import os\nprint(os.getcwd())\n"),
    ("/README.md", b"# Widgets\n\nHello.\n"),
    ("/lib/util.c", b"int add(int a, int b) { return a + b; }\n"),
]


def doc_block(page: Path, first_line: str) -> str:
    """The code block of a docs page that starts with `first_line` (the docs' examples run as written)."""
    return first_line + "\n" + page.read_text().split(first_line + "\n", 1)[1].split("```", 1)[0]


# --- license texts (ScanCode detects them: MIT, GPL-3.0-or-later) ---------------------------------------

MIT = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated "
    'documentation files (the "Software"), to deal in the Software without restriction, including without '
    "limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the "
    "Software, and to permit persons to whom the Software is furnished to do so, subject to the following "
    "conditions:\n\nThe above copyright notice and this permission notice shall be included in all copies or "
    'substantial portions of the Software.\n\nTHE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, '
    "EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR "
    "PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, "
    "DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN "
    "CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.\n"
)
GPL3_NOTICE = (
    "This program is free software: you can redistribute it and/or modify it under the terms of the GNU General "
    "Public License as published by the Free Software Foundation, either version 3 of the License, or (at your "
    "option) any later version.\n\nThis program is distributed in the hope that it will be useful, but WITHOUT ANY "
    "WARRANTY; without even the implied warranty of MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the "
    "GNU General Public License for more details.\n\nYou should have received a copy of the GNU General Public "
    "License along with this program.  If not, see <https://www.gnu.org/licenses/>.\n"
)

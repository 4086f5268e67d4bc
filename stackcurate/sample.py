"""Build the embedded default input from code already on this machine.

`stackcurate sample OUT` lays out real source files (the Python standard library and installed packages:
Python, C, C++, Cython, JavaScript, shell, Markdown, JSON, and some binaries that ingest must drop) the
way Software Heritage serves them, so the whole pipeline runs with no download:

    OUT/metadata/00000.parquet        The Stack v2 file-level metadata (26 columns, no content)
    OUT/content/<sha1>                gzip objects, named by SHA-1 of the raw bytes, like s3://softwareheritage
    OUT/vault/swh:1:dir:<id>.tar.gz   a flat vault bundle (one stdlib package)
    OUT/vault/swh_1_rev_<id>.git.tar  a git-bare vault bundle (the same package, committed)
    OUT/graph/orc/<table>/*.orc       a miniature SWH graph export of git repositories made from a few stdlib
                                      packages, with its content store (`stackcurate graph` walks it;
                                      stages/graph/mini.py), linked into OUT/content too
    OUT/gharchive/*.json.gz           a small GH Archive, in its exact event schema: issues made from the
                                      entries of IDLE's NEWS.txt, pull requests from the commits of the history
                                      below (sources/gharchive/sample.py)
    OUT/history/stackcurate/stackcurate.git
                                      the git history of the stackcurate checkout this runs from, a bare clone
                                      (none from an installed wheel, which has no history), laid out owner/name
                                      for the pull requests' code

The selection is deterministic: files are ordered by the SHA-1 of their path and taken up to the budget.
"""

import gzip
import hashlib
import os
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import extension_of
from stackcurate.stages.ingest.content import git_blob_hex, sha1_hex

MAX_FILE_BYTES = 2_000_000
STACK_V2_FILE_SCHEMA = pa.schema(
    [
        ("blob_id", pa.string()),
        ("directory_id", pa.string()),
        ("path", pa.string()),
        ("content_id", pa.string()),
        ("detected_licenses", pa.list_(pa.string())),
        ("license_type", pa.string()),
        ("repo_name", pa.string()),
        ("snapshot_id", pa.string()),
        ("revision_id", pa.string()),
        ("branch_name", pa.string()),
        ("visit_date", pa.timestamp("ns")),
        ("revision_date", pa.timestamp("ns")),
        ("committer_date", pa.timestamp("ns")),
        ("github_id", pa.int64()),
        ("star_events_count", pa.int64()),
        ("fork_events_count", pa.int64()),
        ("gha_license_id", pa.string()),
        ("gha_event_created_at", pa.timestamp("ns")),
        ("gha_created_at", pa.timestamp("ns")),
        ("gha_language", pa.string()),
        ("src_encoding", pa.string()),
        ("language", pa.string()),
        ("is_vendor", pa.bool_()),
        ("is_generated", pa.bool_()),
        ("length_bytes", pa.int64()),
        ("extension", pa.string()),
    ]
)
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "stackcurate",
    "GIT_AUTHOR_EMAIL": "sample@stackcurate.invalid",
    "GIT_COMMITTER_NAME": "stackcurate",
    "GIT_COMMITTER_EMAIL": "sample@stackcurate.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
}


@dataclass(frozen=True)
class SampleInfo:
    files: int
    bytes: int
    repos: int
    bundles: list[str]
    graph_origins: int
    issues: int = 0
    history: str | None = None
    pulls: int = 0


def _roots() -> list[tuple[str, Path]]:
    paths = sysconfig.get_paths()
    stdlib, site = Path(paths["stdlib"]), Path(paths["purelib"])
    return [("python/cpython-lib", stdlib), ("python/cpython-include", Path(paths["include"])), ("site", site)]


def source_files() -> list[tuple[str, str, Path]]:
    """(repo_name, path in repo, file) for every small regular file under the roots."""
    found = []
    for name, root in _roots():
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames if d != "__pycache__" and not (name != "site" and d == "site-packages")
            )
            rel_dir = Path(dirpath).relative_to(root)
            top = rel_dir.parts[0] if rel_dir.parts else ""
            repo = f"{name}-{top}" if name == "site" and top else name
            for f in filenames:
                full = Path(dirpath) / f
                if full.is_symlink() or not full.is_file() or full.stat().st_size > MAX_FILE_BYTES:
                    continue
                in_repo = (rel_dir.relative_to(top) if name == "site" and top else rel_dir) / f
                found.append((repo, in_repo.as_posix(), full))
    return sorted(found, key=lambda c: hashlib.sha1(f"{c[0]}/{c[1]}".encode()).digest())


def build_sample(out: str | Path, *, max_bytes: int = 20_000_000, max_files: int = 4000) -> SampleInfo:
    """Write the sample under `out` (replacing an earlier one); see the module docstring."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "content").mkdir(parents=True)
    (out / "metadata").mkdir()
    rows, total = [], 0
    for repo, path, full in source_files():
        if len(rows) >= max_files or total >= max_bytes:
            break
        data = full.read_bytes()
        blob = sha1_hex(data)
        target = out / "content" / blob
        if not target.exists():
            target.write_bytes(gzip.compress(data, mtime=0))
        rows.append(
            {
                "blob_id": blob,
                "path": "/" + path,
                "content_id": git_blob_hex(data),
                "detected_licenses": [],
                "license_type": "no_license",
                "repo_name": repo,
                "branch_name": "refs/heads/main",
                "src_encoding": None,
                "length_bytes": len(data),
                "extension": extension_of(path),
            }
        )
        total += len(data)
    pq.write_table(pa.Table.from_pylist(rows, schema=STACK_V2_FILE_SCHEMA), out / "metadata" / "00000.parquet")
    bundles = _write_bundles(out / "vault", Path(sysconfig.get_paths()["stdlib"]) / "json")
    from stackcurate.stages.graph import mini

    graph = mini.build(out / "graph", mini.default_sources())
    from stackcurate.sources.gharchive import sample as gharchive

    issues = gharchive.write_sample(out / "gharchive")
    history = _write_history(out / "history")
    pulls = gharchive.write_pulls(out / "gharchive", Path(history)) if history else 0
    fork = next(o for o in graph["origins"] if "fork" in o["cases"])
    upstream_url = graph["cases"]["fork"]["details"][fork["url"]]["forked_from"]
    upstream = next(o for o in graph["origins"] if o["url"] == upstream_url)
    pulls += gharchive.write_graph_pull(
        out / "gharchive",
        upstream_url.removeprefix("https://github.com/"),
        upstream["commit"],
        fork["commit"],
        "Patch the package's __init__ in the fork",
    )
    for blob in (out / "graph" / "content").iterdir():  # one content store for the metadata and the export
        if not (out / "content" / blob.name).exists():
            os.link(blob, out / "content" / blob.name)
    return SampleInfo(files=len(rows), bytes=total, repos=len({r["repo_name"] for r in rows}), bundles=bundles,
                      graph_origins=len(graph["origins"]), issues=issues, history=history,
                      pulls=pulls)  # fmt: skip


def _write_history(folder: Path) -> str | None:
    """A bare clone of the checkout stackcurate runs from (real history for `ingest --history`), or None."""
    checkout = Path(__file__).resolve().parents[1]
    if not (checkout / ".git").exists():
        return None
    folder.mkdir(parents=True)
    target = folder.resolve() / "stackcurate" / "stackcurate.git"  # laid out owner/name, as --gharchive-code reads
    _git(folder, "clone", "--quiet", "--bare", "--no-hardlinks", str(checkout), str(target))
    return str(target)


def _git(cwd: Path, *args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env={**os.environ, **_GIT_ENV}
        ).stdout.strip()
    except FileNotFoundError:
        raise StackcurateError("building vault bundles needs git on PATH; install git") from None


def _write_bundles(vault: Path, package: Path) -> list[str]:
    """A flat and a git-bare bundle of `package`, named by their real SWHIDs (git tree and commit hashes)."""
    vault.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(package, work, ignore=shutil.ignore_patterns("__pycache__"))
        _git(work, "init", "-q", "-b", "main")
        _git(work, "add", "-A")
        tree = _git(work, "write-tree")
        _git(work, "commit", "-q", "-m", f"{package.name} from the Python standard library")
        commit = _git(work, "rev-parse", "HEAD")
        flat = vault / f"swh:1:dir:{tree}.tar.gz"
        with tarfile.open(flat, "w:gz") as tar:
            for f in sorted(p for p in work.rglob("*") if ".git" not in p.relative_to(work).parts):
                tar.add(f, arcname=f"swh:1:dir:{tree}/{f.relative_to(work).as_posix()}", recursive=False)
        bare = Path(tmp) / f"swh:1:rev:{commit}.git"
        _git(Path(tmp), "clone", "-q", "--bare", str(work), str(bare))
        git_tar = vault / f"swh_1_rev_{commit}.git.tar"
        with tarfile.open(git_tar, "w") as tar:
            tar.add(bare, arcname=bare.name)
    return [flat.name, git_tar.name]

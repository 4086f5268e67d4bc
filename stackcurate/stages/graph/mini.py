"""A miniature Software Heritage graph export, built from real git repositories, for tests of the graph walk.

`build(out, sources)` turns folders of real code (by default a few packages of this Python's standard library,
`default_sources()`) into git repositories made with `git` itself (fixed names, e-mails and dates, so every
hash is the same on every run), then exports what SWH would have archived of them:

    out/
      repos/<name>/                  the git repositories (work trees), one per archived origin
      orc/<table>/<table>-<uuid>.orc the ORC tables of the SWH graph export (pyarrow's ORC writer); the uuids
                                     are fixed (uuid5 of table and part), and larger tables come in two files
      content/<sha1>                 gzip of each visible file's bytes, named by the plain SHA-1 of the bytes
      manifest.json                  per origin: URL, repo folder, the commit a walk must reach, the snapshot,
                                     the edge cases it holds; per case: where it is; per table: rows, files

Every id is the lowercase hex string the export uses; names, messages and persons are binary. Directory,
revision and release ids are what git says (`git ls-tree`, `git cat-file`), and each directory id is checked
against `swhid.directory_id`, each content id against `swhid.content_id`.

Tables (those of the SWH export, with its column types): origin, origin_visit, origin_visit_status, snapshot,
snapshot_branch, release, revision, revision_history, directory, directory_entry, content, skipped_content.

The edge cases (`CASES`; the manifest records which origin holds each):
- `latest_full_visit`: an origin visited twice, an older `full` visit and a newer `partial` one; a walk must
  take the full one. `failed_visit`: an origin whose only visit failed (no snapshot); a walk yields nothing.
- `head_alias`: every snapshot has `HEAD` as an alias branch; `head_alias_master`: one names `refs/heads/master`.
- `release`: `HEAD` is an alias of `refs/tags/v1.0`, a release (annotated tag) of an older revision than
  `refs/heads/main`.
- `submodule`, `symlink`: a gitlink entry (perms 0o160000, type `rev`) and a symlink (0o120000, its blob is the
  link text). `executable`: files with perms 0o100755.
- `skipped_content` (in `skipped_content`, not in `content`) and `hidden_content` (status `hidden`).
- `fork`: a clone of another origin plus one commit changing one file; most directories are shared.
- `deep_path`: a file 66 path components deep. `non_utf8_name`: a file name that is not UTF-8.
- `non_github_origin`: an origin on gitlab.com.

Example:
    from stackcurate.stages.graph import mini
    manifest = mini.build(Path("/tmp/mini_export"), mini.default_sources())
"""

import datetime as dt
import gzip
import hashlib
import json
import os
import subprocess
import sysconfig
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as orc

from stackcurate.stages.graph import swhid

CASES = {
    "latest_full_visit": "an older full visit (snapshot S1) and a newer partial one (S2): the walk takes S1",
    "failed_visit": "the origin's only visit failed (no snapshot): the walk yields nothing for it",
    "head_alias": "HEAD is an alias branch of refs/heads/<branch>, which targets a revision",
    "head_alias_master": "HEAD is an alias of refs/heads/master",
    "release": "HEAD is an alias of refs/tags/v1.0, a release (annotated tag) of an older revision than main",
    "submodule": "a gitlink entry (perms 0o160000, type rev) whose target is a commit of another repository",
    "symlink": "a symlink (perms 0o120000) whose blob is the link text",
    "executable": "files with perms 0o100755",
    "skipped_content": "a file whose content is in skipped_content (not in content)",
    "hidden_content": "a file whose content has status hidden",
    "fork": "a clone of another origin plus one commit changing one file: most directories are shared",
    "deep_path": "a file 66 path components deep",
    "non_utf8_name": "a file whose name bytes are not UTF-8",
    "non_github_origin": "an origin that is not on github.com",
}

# Tables written as two ORC files, as a real export spreads each table over many.
_SPLIT = frozenset({"directory", "directory_entry", "content", "revision", "revision_history"})
_UUID_NAMESPACE = uuid.UUID("6f1b7c9e-3d52-4c0a-9a7e-2b8f4d1e5a60")
_EPOCH = 1_600_000_000  # 2020-09-13, the first commit; each later commit is a day later
_OFFSETS = ("+0200", "-0500", "+0000", "+0530")  # cycled, so date_offset columns are not all zero
_AUTHOR = ("Ada Lovelace", "ada@example.org")
_COMMITTER = ("Grace Hopper", "grace@example.org")
_FORKER = ("Fork Er", "forker@example.org")
_DEEP_DIRS = 65  # d1/.../d65/deep.txt: 66 components
_NON_UTF8_NAME = b"caf\xe9.txt"  # Latin-1 e-acute
_SUBMODULE_PATH = "vendor/lib"
_SKIPPED_REASON = "Content too large"
_TS = pa.timestamp("us", tz="UTC")
Branches = dict[bytes, tuple[str, bytes | None]]  # a snapshot: name -> (target_type, target bytes)


# --- schemas: the SWH graph export's columns ------------------------------------------------------------------

ORIGIN = pa.schema([("id", pa.string()), ("url", pa.string())])
ORIGIN_VISIT = pa.schema([("origin", pa.string()), ("visit", pa.int64()), ("date", _TS), ("type", pa.string())])
ORIGIN_VISIT_STATUS = pa.schema(
    [
        ("origin", pa.string()),
        ("visit", pa.int64()),
        ("date", _TS),
        ("status", pa.string()),
        ("snapshot", pa.string()),
        ("type", pa.string()),
    ]
)
SNAPSHOT = pa.schema([("id", pa.string())])
SNAPSHOT_BRANCH = pa.schema(
    [("snapshot_id", pa.string()), ("name", pa.binary()), ("target", pa.string()), ("target_type", pa.string())]
)
REVISION = pa.schema(
    [
        ("id", pa.string()),
        ("date", _TS),
        ("date_offset", pa.int16()),
        ("committer_date", _TS),
        ("committer_offset", pa.int16()),
        ("type", pa.string()),
        ("directory", pa.string()),
        ("message", pa.binary()),
        ("author", pa.binary()),
        ("committer", pa.binary()),
        ("raw_manifest", pa.binary()),
    ]
)
REVISION_HISTORY = pa.schema([("id", pa.string()), ("parent_id", pa.string()), ("parent_rank", pa.int32())])
RELEASE = pa.schema(
    [
        ("id", pa.string()),
        ("name", pa.binary()),
        ("message", pa.binary()),
        ("target", pa.string()),
        ("target_type", pa.string()),
        ("author", pa.binary()),
        ("date", _TS),
        ("date_offset", pa.int16()),
        ("raw_manifest", pa.binary()),
    ]
)
DIRECTORY = pa.schema([("id", pa.string()), ("raw_manifest", pa.binary())])
DIRECTORY_ENTRY = pa.schema(
    [
        ("directory_id", pa.string()),
        ("name", pa.binary()),
        ("type", pa.string()),
        ("target", pa.string()),
        ("perms", pa.int32()),
    ]
)
_HASHES = [("sha1", pa.string()), ("sha1_git", pa.string()), ("sha256", pa.string()), ("blake2s256", pa.string())]
CONTENT = pa.schema([*_HASHES, ("length", pa.int64()), ("status", pa.string()), ("data", pa.binary())])
SKIPPED_CONTENT = pa.schema([*_HASHES, ("length", pa.int64()), ("status", pa.string()), ("reason", pa.string())])


def default_sources() -> list[Path]:
    """Four small packages of this Python's standard library, the ones of the candidates that exist."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    found = [stdlib / n for n in ("json", "email", "http", "tomllib", "wsgiref", "html", "urllib", "xmlrpc")]
    return [p for p in found if p.is_dir()][:4]


# --- git ------------------------------------------------------------------------------------------------------


class _Clock:
    """Fixed, increasing commit dates, so that the same sources always give the same commit hashes."""

    def __init__(self) -> None:
        self.ticks = 0

    def dates(self) -> tuple[str, str]:
        """(author date, committer date) of the next commit, in git's `@<epoch> <offset>` form."""
        when, offset = _EPOCH + self.ticks * 86_400, _OFFSETS[self.ticks % len(_OFFSETS)]
        self.ticks += 1
        return f"@{when} {offset}", f"@{when + 3600} {offset}"  # committed an hour after it was written


def _git(repo: Path, *args: str | bytes, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """Run git in `repo`, blind to the user's and the system's git configuration; its stdout."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    base.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C", **(env or {}))
    proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, env=base, capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(map(str, args))} in {repo}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def _person_env(clock: _Clock, author: tuple[str, str] = _AUTHOR) -> dict[str, str]:
    author_date, committer_date = clock.dates()
    return {
        "GIT_AUTHOR_NAME": author[0],
        "GIT_AUTHOR_EMAIL": author[1],
        "GIT_AUTHOR_DATE": author_date,
        "GIT_COMMITTER_NAME": _COMMITTER[0],
        "GIT_COMMITTER_EMAIL": _COMMITTER[1],
        "GIT_COMMITTER_DATE": committer_date,
    }


def _commit(repo: Path, message: str, clock: _Clock, author: tuple[str, str] = _AUTHOR) -> str:
    """Commit what is staged; the new commit's id."""
    _git(repo, "commit", "-q", "--no-verify", "-m", message, env=_person_env(clock, author))
    return _git(repo, "rev-parse", "HEAD").decode().strip()


def _init(repo: Path, branch: str) -> None:
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", branch)


def _copy_source(source: Path, dest: Path) -> list[str]:
    """Copy the regular files of `source` (no caches) to `dest`; modes are set, not copied: 0o755 for modules
    that run as scripts, 0o644 otherwise. The paths (relative to the repository) made executable."""
    executable = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if "__pycache__" in rel.parts or path.suffix == ".pyc" or path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        is_script = b"__name__ == '__main__'" in data or b'__name__ == "__main__"' in data
        target.chmod(0o755 if is_script else 0o644)
        if is_script:
            executable.append(f"{dest.name}/{rel.as_posix()}")
    return executable


def _append(path: Path, line: bytes) -> None:
    path.write_bytes(path.read_bytes() + line)


# --- the archived origins -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Visit:
    number: int
    date: dt.datetime
    status: str  # the visit's last status; `created` (and `ongoing`) statuses come before it
    snapshot: Branches | None


@dataclass
class _Origin:
    url: str
    repo: Path | None
    commit: str | None  # the revision a walk must reach, from the latest full visit's HEAD
    visits: list[_Visit]
    cases: list[str]
    details: dict[str, dict[str, Any]] = field(default_factory=dict)  # case -> where it is


def _visit_date(day: int) -> dt.datetime:
    return dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=day)


def _head_snapshot(branch: bytes, commit: str) -> Branches:
    return {b"HEAD": ("alias", branch), branch: ("revision", bytes.fromhex(commit))}


def _plain_origin(url: str, source: Path, repo: Path, clock: _Clock, day: int) -> _Origin:
    """One commit of `source` on main, one full visit."""
    _init(repo, "main")
    executable = _copy_source(source, repo / source.name)
    _git(repo, "add", "-A")
    commit = _commit(repo, f"Import {source.name}\n", clock)
    visit = _Visit(1, _visit_date(day), "full", _head_snapshot(b"refs/heads/main", commit))
    origin = _Origin(url, repo, commit, [visit], ["head_alias"])
    if executable:
        origin.cases.append("executable")
        origin.details["executable"] = {"paths": executable}
    return origin


def _two_visit_origin(url: str, source: Path, repo: Path, clock: _Clock) -> _Origin:
    """Visit 1 (full) saw the first commit; visit 2 (partial) the second: the walk must stay on the first."""
    origin = _plain_origin(url, source, repo, clock, day=0)
    _append(repo / source.name / "__init__.py", b"\n# a second commit, seen only by a partial visit\n")
    _git(repo, "add", "-A")
    newer = _commit(repo, f"Touch {source.name}/__init__.py\n", clock)
    partial = _Visit(2, _visit_date(30), "partial", _head_snapshot(b"refs/heads/main", newer))
    origin.visits.append(partial)
    origin.cases.insert(0, "latest_full_visit")
    full = origin.visits[0].snapshot
    assert full is not None and partial.snapshot is not None
    origin.details["latest_full_visit"] = {
        "full_visit": 1,
        "full_snapshot": swhid.snapshot_id(full),
        "partial_visit": 2,
        "partial_snapshot": swhid.snapshot_id(partial.snapshot),
        "partial_commit": newer,
    }
    return origin


def _odd_tree_origin(url: str, source: Path, repo: Path, clock: _Clock, submodule_target: str) -> _Origin:
    """On master: a symlink, a 66-component path, a non-UTF-8 name and a gitlink next to `source`."""
    _init(repo, "master")
    executable = _copy_source(source, repo / source.name)
    link = f"{source.name}.py"  # sorts before the directory `<name>`: `.` < `/` in git's tree order
    os.symlink(f"{source.name}/__init__.py", repo / link)
    deep = Path(*(f"d{i}" for i in range(1, _DEEP_DIRS + 1)), "deep.txt")
    (repo / deep).parent.mkdir(parents=True)
    (repo / deep).write_bytes(b"a file 66 path components deep\n")
    with open(os.path.join(os.fsencode(repo), _NON_UTF8_NAME), "wb") as f:
        f.write(b"caf\xe9 au lait: this file and its name are Latin-1\n")
    _git(repo, "add", "-A")
    # a gitlink without .gitmodules, as many archived repositories have; staged last, as `add -A` would drop it
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{submodule_target},{_SUBMODULE_PATH}")
    commit = _commit(repo, f"Import {source.name} with a vendored submodule\n", clock)
    visit = _Visit(1, _visit_date(1), "full", _head_snapshot(b"refs/heads/master", commit))
    origin = _Origin(url, repo, commit, [visit], ["head_alias", "head_alias_master"])
    origin.cases += ["submodule", "symlink", "deep_path", "non_utf8_name"]
    origin.details["head_alias_master"] = {"alias": "HEAD", "target": "refs/heads/master"}
    origin.details["submodule"] = {"path": _SUBMODULE_PATH, "target": submodule_target}
    origin.details["symlink"] = {"path": link, "link": f"{source.name}/__init__.py"}
    origin.details["deep_path"] = {"path": deep.as_posix(), "components": len(deep.parts)}
    origin.details["non_utf8_name"] = {"path_hex": _NON_UTF8_NAME.hex(), "path_escaped": repr(_NON_UTF8_NAME)}
    if executable:
        origin.cases.append("executable")
        origin.details["executable"] = {"paths": executable}
    return origin


def _fork_origin(url: str, upstream: _Origin, repo: Path, clock: _Clock) -> _Origin:
    """A clone of `upstream` plus one commit changing one file."""
    assert upstream.repo is not None
    repo.parent.mkdir(parents=True, exist_ok=True)
    _git(repo.parent, "clone", "-q", "--no-hardlinks", str(upstream.repo), str(repo))
    _git(repo, "remote", "remove", "origin")
    branch = _git(repo, "symbolic-ref", "HEAD").strip()
    changed = f"{upstream.repo.name}/__init__.py"
    _append(repo / changed, b"\n# patched in the fork\n")
    _git(repo, "add", "--", changed)  # only this file: the gitlink has no work tree to compare against
    commit = _commit(repo, f"Patch {changed}\n", clock, author=_FORKER)
    visit = _Visit(1, _visit_date(2), "full", _head_snapshot(branch, commit))
    origin = _Origin(url, repo, commit, [visit], ["head_alias", "fork"])
    origin.details["fork"] = {"forked_from": upstream.url, "upstream_commit": upstream.commit, "changed": changed}
    return origin


def _release_origin(url: str, source: Path, repo: Path, clock: _Clock) -> _Origin:
    """v1.0 (annotated) tags the first commit, main has a second; HEAD is an alias of the tag's branch.

    Of the files the second commit leaves alone, the largest is skipped (too large), the smallest non-empty one
    hidden."""
    origin = _plain_origin(url, source, repo, clock, day=3)
    tagged = origin.commit
    assert tagged is not None
    changed = repo / source.name / "__init__.py"
    sizes = sorted((p.stat().st_size, p) for p in (repo / source.name).rglob("*") if p.is_file() and p != changed)
    kept = [p for size, p in sizes if size > 0]
    for case, path in (("skipped_content", kept[-1]), ("hidden_content", kept[0])):
        rel = path.relative_to(repo).as_posix()
        origin.details[case] = {"path": rel, "sha1_git": swhid.content_id(path.read_bytes())}
    origin.details["skipped_content"]["reason"] = _SKIPPED_REASON

    _git(repo, "tag", "-a", "v1.0", "-m", f"{source.name} 1.0\n", env=_person_env(clock))
    tag = _git(repo, "rev-parse", "refs/tags/v1.0").decode().strip()
    _append(changed, b"\n# after the release\n")
    _git(repo, "add", "-A")
    newer = _commit(repo, "Work after v1.0\n", clock)
    snapshot: Branches = {
        b"HEAD": ("alias", b"refs/tags/v1.0"),
        b"refs/heads/main": ("revision", bytes.fromhex(newer)),
        b"refs/tags/v1.0": ("release", bytes.fromhex(tag)),
    }
    origin.visits[0] = _Visit(1, _visit_date(3), "full", snapshot)
    origin.cases = ["release", *origin.cases, "skipped_content", "hidden_content"]
    origin.details["release"] = {"tag": "refs/tags/v1.0", "release": tag, "revision": tagged, "main": newer}
    return origin


def _failed_origin(url: str) -> _Origin:
    return _Origin(url, None, None, [_Visit(1, _visit_date(4), "failed", None)], ["failed_visit"])


def _make_origins(repos: Path, sources: list[Path]) -> list[_Origin]:
    """The archived origins, in the order of `CASES`'s first use; the sources beyond four are plain origins."""
    names = [s.name for s in sources]
    if len(sources) < 4 or len(set(names)) != len(names):
        raise ValueError(f"build needs at least four source folders with distinct names, got {names}")
    base, odd, rel, other, *extra = sources
    clock = _Clock()
    first = _two_visit_origin(f"https://github.com/stdlib/{base.name}", base, repos / base.name, clock)
    assert first.commit is not None
    odd_origin = _odd_tree_origin(f"https://github.com/stdlib/{odd.name}", odd, repos / odd.name, clock, first.commit)
    origins = [
        first,
        odd_origin,
        _fork_origin(f"https://github.com/forker/{odd.name}", odd_origin, repos / f"forker-{odd.name}", clock),
        _release_origin(f"https://github.com/stdlib/{rel.name}", rel, repos / rel.name, clock),
        _plain_origin(f"https://gitlab.com/stdlib/{other.name}", other, repos / other.name, clock, day=5),
        _failed_origin("https://github.com/stdlib/vanished"),
    ]
    origins[4].cases.append("non_github_origin")
    for i, source in enumerate(extra):
        url = f"https://github.com/stdlib/{source.name}"
        origins.append(_plain_origin(url, source, repos / source.name, clock, day=6 + i))
    return origins


# --- reading the objects back from git ------------------------------------------------------------------------


def _cat_batch(repo: Path, oids: list[str]) -> dict[str, tuple[str, bytes]]:
    """oid -> (type, raw body) for each of `oids`, read by one `git cat-file --batch`."""
    out = _git(repo, "cat-file", "--batch", stdin="".join(f"{o}\n" for o in oids).encode())
    found, pos = {}, 0
    for oid in oids:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) != 3:
            raise RuntimeError(f"git cat-file {oid} in {repo}: {out[pos:end]!r}")
        size = int(header[2])
        found[oid] = (header[1].decode(), out[end + 1 : end + 1 + size])
        pos = end + 1 + size + 1  # the body is followed by a newline
    return found


def _ls_tree(repo: Path, tree: str) -> list[tuple[bytes, int, str, str]]:
    """(name, perms, git type, target) of each entry of one tree, from `git ls-tree -z`."""
    entries = []
    for record in _git(repo, "ls-tree", "-z", tree).split(b"\0"):
        if record:
            meta, name = record.split(b"\t", 1)
            mode, kind, oid = meta.decode().split(" ")
            entries.append((name, int(mode, 8), kind, oid))
    return entries


def _headers(raw: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The header lines (key, value) and the message of a commit or tag object (no continuation lines here)."""
    head, _, message = raw.partition(b"\n\n")
    headers = []
    for line in head.split(b"\n"):
        key, _, value = line.partition(b" ")
        if not line.startswith(b" "):
            headers.append((key, value))
    return headers, message


def _person(value: bytes) -> tuple[bytes, dt.datetime, int]:
    """`Name <email> <epoch> <+hhmm>` -> (fullname, UTC time, offset in minutes)."""
    fullname, epoch, offset = value.rsplit(b" ", 2)
    sign = -1 if offset.startswith(b"-") else 1
    minutes = sign * (int(offset[1:3]) * 60 + int(offset[3:5]))
    return fullname, dt.datetime.fromtimestamp(int(epoch), tz=dt.UTC), minutes


@dataclass
class _Graph:
    """The rows of the export, keyed by id so that objects shared by origins (a fork's) appear once."""

    revisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: set[tuple[str, str, int]] = field(default_factory=set)
    releases: dict[str, dict[str, Any]] = field(default_factory=dict)
    entries: dict[str, list[tuple[bytes, int, str, str]]] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)


def _read_release(graph: _Graph, repo: Path, tag: str) -> str:
    """Record the release `tag`; the id of the revision it targets."""
    kind, raw = _cat_batch(repo, [tag])[tag]
    if kind != "tag":
        raise RuntimeError(f"{tag} in {repo} is a {kind}, not an annotated tag")
    headers, message = _headers(raw)
    values = dict(headers)
    if values[b"type"] != b"commit":
        raise RuntimeError(f"release {tag} targets a {values[b'type'].decode()}, not a revision")
    author, date, offset = _person(values[b"tagger"])
    graph.releases[tag] = {
        "id": tag,
        "name": values[b"tag"],
        "message": message,
        "target": values[b"object"].decode(),
        "target_type": "revision",
        "author": author,
        "date": date,
        "date_offset": offset,
    }
    return values[b"object"].decode()


def _read_revisions(graph: _Graph, repo: Path, heads: list[str]) -> None:
    """Record the revisions reachable from `heads`, with their parents, and their trees."""
    ids = _git(repo, "rev-list", "--topo-order", *heads).decode().split()
    for oid, (_, raw) in _cat_batch(repo, ids).items():
        headers, message = _headers(raw)
        values = dict(headers)
        parents = [v.decode() for k, v in headers if k == b"parent"]
        graph.history.update((oid, p, rank) for rank, p in enumerate(parents))
        author, date, date_offset = _person(values[b"author"])
        committer, committer_date, committer_offset = _person(values[b"committer"])
        root = values[b"tree"].decode()
        graph.revisions[oid] = {
            "id": oid,
            "date": date,
            "date_offset": date_offset,
            "committer_date": committer_date,
            "committer_offset": committer_offset,
            "type": "git",
            "directory": root,
            "message": message,
            "author": author,
            "committer": committer,
        }
        _read_trees(graph, repo, root)


def _read_trees(graph: _Graph, repo: Path, root: str) -> None:
    """Record every tree under `root` (checking its id against swhid.directory_id) and every blob."""
    pending, blobs = [root], []
    while pending:
        tree = pending.pop()
        if tree in graph.entries:
            continue
        entries = _ls_tree(repo, tree)
        computed = swhid.directory_id([(name, perms, oid) for name, perms, _, oid in entries])
        if computed != tree:
            raise RuntimeError(f"swhid.directory_id gives {computed} for git tree {tree} of {repo}")
        graph.entries[tree] = entries
        pending += [oid for _, _, kind, oid in entries if kind == "tree"]
        blobs += [oid for _, _, kind, oid in entries if kind == "blob" and oid not in graph.blobs]
    for oid, (_, data) in _cat_batch(repo, sorted(set(blobs))).items():
        if swhid.content_id(data) != oid:
            raise RuntimeError(f"swhid.content_id disagrees with git for blob {oid} of {repo}")
        graph.blobs[oid] = data


def _read_graph(origins: list[_Origin]) -> _Graph:
    graph = _Graph()
    for origin in origins:
        if origin.repo is None:
            continue
        heads = set()
        for visit in origin.visits:
            for target_type, target in (visit.snapshot or {}).values():
                if target_type == "revision" and target is not None:
                    heads.add(target.hex())
                elif target_type == "release" and target is not None:
                    heads.add(_read_release(graph, origin.repo, target.hex()))
        _read_revisions(graph, origin.repo, sorted(heads))
    return graph


# --- the tables -----------------------------------------------------------------------------------------------

_ENTRY_TYPES = {"blob": "file", "tree": "dir", "commit": "rev"}


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def _origin_tables(origins: list[_Origin]) -> dict[str, pa.Table]:
    origin_rows, visit_rows, status_rows, snapshot_ids, branch_rows = [], [], [], set(), []
    for o in origins:
        origin_rows.append({"id": swhid.origin_id(o.url), "url": o.url})
        for v in o.visits:
            visit_rows.append({"origin": o.url, "visit": v.number, "date": v.date, "type": "git"})
            statuses = ["created", *(["ongoing"] if v.status == "partial" else []), v.status]
            for minute, status in enumerate(statuses):
                snap = swhid.snapshot_id(v.snapshot) if v.snapshot is not None and status == v.status else None
                date = v.date + dt.timedelta(minutes=5 * minute)
                status_rows.append(
                    {
                        "origin": o.url,
                        "visit": v.number,
                        "date": date,
                        "status": status,
                        "snapshot": snap,
                        "type": "git",
                    }
                )
            if v.snapshot is None:
                continue
            snap = swhid.snapshot_id(v.snapshot)
            if snap in snapshot_ids:
                continue
            snapshot_ids.add(snap)
            for name, (target_type, target) in v.snapshot.items():
                branch = {"snapshot_id": snap, "name": name, "target_type": target_type}
                branch_rows.append({**branch, "target": None if target is None else target.hex()})
    return {
        "origin": _table(sorted(origin_rows, key=lambda r: r["id"]), ORIGIN),
        "origin_visit": _table(sorted(visit_rows, key=lambda r: (r["origin"], r["visit"])), ORIGIN_VISIT),
        "origin_visit_status": _table(
            sorted(status_rows, key=lambda r: (r["origin"], r["visit"], r["date"])), ORIGIN_VISIT_STATUS
        ),
        "snapshot": _table([{"id": s} for s in sorted(snapshot_ids)], SNAPSHOT),
        "snapshot_branch": _table(sorted(branch_rows, key=lambda r: (r["snapshot_id"], r["name"])), SNAPSHOT_BRANCH),
    }


def _content_rows(graph: _Graph, skipped: set[str], hidden: set[str]) -> tuple[list[dict[str, Any]], ...]:
    content, absent = [], []
    for oid in sorted(graph.blobs):
        data = graph.blobs[oid]
        row = {
            "sha1": hashlib.sha1(data).hexdigest(),
            "sha1_git": oid,
            "sha256": hashlib.sha256(data).hexdigest(),
            "blake2s256": hashlib.blake2s(data).hexdigest(),
            "length": len(data),
        }
        if oid in skipped:
            absent.append({**row, "status": "absent", "reason": _SKIPPED_REASON})
        else:
            content.append({**row, "status": "hidden" if oid in hidden else "visible", "data": None})
    return content, absent


def _graph_tables(graph: _Graph, skipped: set[str], hidden: set[str]) -> dict[str, pa.Table]:
    entry_rows = [
        {"directory_id": d, "name": name, "type": _ENTRY_TYPES[kind], "target": oid, "perms": perms}
        for d in sorted(graph.entries)
        for name, perms, kind, oid in sorted(graph.entries[d])
    ]
    history = [{"id": i, "parent_id": p, "parent_rank": r} for i, p, r in sorted(graph.history)]
    content, absent = _content_rows(graph, skipped, hidden)
    return {
        "revision": _table([graph.revisions[r] for r in sorted(graph.revisions)], REVISION),
        "revision_history": _table(history, REVISION_HISTORY),
        "release": _table([graph.releases[r] for r in sorted(graph.releases)], RELEASE),
        "directory": _table([{"id": d} for d in sorted(graph.entries)], DIRECTORY),
        "directory_entry": _table(entry_rows, DIRECTORY_ENTRY),
        "content": _table(content, CONTENT),
        "skipped_content": _table(absent, SKIPPED_CONTENT),
    }


def _write_orc(folder: Path, name: str, table: pa.Table) -> list[str]:
    """Write `table` as one ORC file, or two for the tables in `_SPLIT`; their paths relative to `folder`."""
    parts = 2 if name in _SPLIT and table.num_rows >= 2 else 1
    cut = (table.num_rows + 1) // 2
    chunks = [table] if parts == 1 else [table.slice(0, cut), table.slice(cut)]
    (folder / name).mkdir(parents=True)
    paths = []
    for i, chunk in enumerate(chunks):
        rel = f"{name}/{name}-{uuid.uuid5(_UUID_NAMESPACE, f'{name}/{i}')}.orc"
        orc.write_table(chunk, folder / rel)
        paths.append(rel)
    return paths


# --- the export -----------------------------------------------------------------------------------------------


def build(out: Path, sources: list[Path]) -> dict[str, Any]:
    """Build the repositories of `sources` and their SWH graph export under `out` (see the module docstring).

    Args:
        out: a folder that does not exist yet, or an empty one.
        sources: at least four folders of code with distinct names; their roles, in order: the origin with a
            full and a later partial visit; the origin with the odd tree (on master: submodule, symlink, deep
            path, non-UTF-8 name), which is also forked; the origin with a release and the skipped and hidden
            contents; the gitlab.com origin. Further ones become plain origins.

    Returns:
        The manifest, also written to `out/manifest.json`: `origins` (url, id, repo folder relative to `out`,
        the commit and snapshot a walk must reach, cases, visits), `cases` (name -> description and the
        origins and paths that hold it) and `tables` (name -> rows, ORC files relative to `out`).
    """
    out = Path(out).resolve()  # git runs in other folders (`git -C`): a relative path would name the wrong one
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; build writes into a new or empty folder")
    origins = _make_origins(out / "repos", [Path(s) for s in sources])
    graph = _read_graph(origins)
    skipped = {o.details["skipped_content"]["sha1_git"] for o in origins if "skipped_content" in o.details}
    hidden = {o.details["hidden_content"]["sha1_git"] for o in origins if "hidden_content" in o.details}
    tables = {**_origin_tables(origins), **_graph_tables(graph, skipped, hidden)}

    files = {name: _write_orc(out / "orc", name, table) for name, table in sorted(tables.items())}
    store = out / "content"
    store.mkdir()
    for oid, data in sorted(graph.blobs.items()):
        if oid not in skipped and oid not in hidden:
            (store / hashlib.sha1(data).hexdigest()).write_bytes(gzip.compress(data, mtime=0))

    _fork_details(origins, graph)
    manifest = _manifest(out, origins, tables, files)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _fork_details(origins: list[_Origin], graph: _Graph) -> None:
    """Count the directories a fork shares with its upstream (by id), for the manifest."""
    by_url = {o.url: o for o in origins}

    def trees(commit: str | None) -> set[str]:
        seen, pending = set(), [graph.revisions[commit]["directory"]] if commit else []
        while pending:
            tree = pending.pop()
            seen.add(tree)
            pending += [oid for _, _, kind, oid in graph.entries[tree] if kind == "tree" and oid not in seen]
        return seen

    for origin in origins:
        if "fork" in origin.details:
            mine, theirs = trees(origin.commit), trees(by_url[origin.details["fork"]["forked_from"]].commit)
            origin.details["fork"].update(directories=len(mine), shared_directories=len(mine & theirs))


def _manifest(
    out: Path, origins: list[_Origin], tables: dict[str, pa.Table], files: dict[str, list[str]]
) -> dict[str, Any]:
    cases: dict[str, dict[str, Any]] = {
        name: {"description": text, "origins": [], "details": {}} for name, text in CASES.items()
    }
    described = []
    for o in origins:
        full = [v for v in o.visits if v.status == "full" and v.snapshot is not None]
        latest = max(full, key=lambda v: v.date) if full else None
        described.append(
            {
                "url": o.url,
                "id": swhid.origin_id(o.url),
                "repo": None if o.repo is None else o.repo.relative_to(out).as_posix(),
                "commit": o.commit,
                "snapshot": None if latest is None or latest.snapshot is None else swhid.snapshot_id(latest.snapshot),
                "visit": None if latest is None else latest.number,
                "cases": o.cases,
                "visits": [{"visit": v.number, "status": v.status} for v in o.visits],
            }
        )
        for case in o.cases:
            cases[case]["origins"].append(o.url)
            if case in o.details:
                cases[case]["details"][o.url] = o.details[case]
    return {
        "format": "stackcurate-mini-swh-export/1",
        "origins": described,
        "cases": cases,
        "tables": {n: {"rows": tables[n].num_rows, "files": [f"orc/{f}" for f in files[n]]} for n in sorted(tables)},
    }

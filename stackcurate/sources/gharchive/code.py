"""The code of a pull request: its base files and their versions at each head, read from git repositories.

GH Archive names a pull request's base and head revisions, not their files. These are read from the folders of
`--gharchive-code`, laid out `<owner>/<name>` as GitHub names repositories: in each folder, for `owner/name`,

- `owner/name` or `owner/name.git`: a git repository, working or bare (a clone, a mirror with its
  `refs/pull/*`);
- `owner/name/*.git.tar`: SWH vault git-bare bundles (`swh_1_rev_<id>.git.tar`), a git commit id being the SWH
  revision id; each is extracted once, member by member and checked, to a private temporary folder.

The first place that holds both revisions gives the files. A pull request's files are those its head modifies
against its base (added and deleted files are not base files: StarCoder2 left them out), each read at the base
and at every head the pull request had. Its repository's licenses are those ScanCode finds in the license-like
files at the root of the base (the license stage's pattern and detection, as The Stack v2's), which the license
stage then classifies as a file's.
"""

import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from stackcurate.sources.trees import BlobReader, git, member_problem
from stackcurate.stages.license import read_pattern


@dataclass(frozen=True)
class Change:
    """One file a pull request modifies: its contents at the base and at a head."""

    path: str
    base: bytes
    head: bytes


class Repositories:
    """Finds repositories under the code folders and reads revisions from them; `close` removes what it
    extracted. One per shard: it keeps the repositories it opened (a partition holds many pull requests of
    the same repositories)."""

    def __init__(self, roots: tuple[str, ...], tmp_dir: str | None = None) -> None:
        self.roots = [Path(r) for r in roots]
        self.tmp_dir = tmp_dir
        self.found: dict[str, list[str]] = {}  # owner/name: its git dirs
        self.extracted: list[str] = []

    def git_dirs(self, repo: str) -> list[str]:
        if repo not in self.found:
            self.found[repo] = [d for root in self.roots for d in self._look(root, repo)]
        return self.found[repo]

    def _look(self, root: Path, repo: str) -> list[str]:
        owner, _, name = repo.partition("/")
        if not owner or not name or ".." in (owner, name):
            return []
        dirs = []
        for place in (root / owner / name, root / owner / f"{name}.git"):
            if (place / ".git").exists():
                dirs.append(str(place / ".git"))
            elif (place / "HEAD").is_file():
                dirs.append(str(place))
        folder = root / owner / name
        if folder.is_dir():
            dirs += [d for bundle in sorted(folder.glob("*.git.tar")) if (d := self._extract(bundle))]
        return dirs

    def _extract(self, bundle: Path) -> str | None:
        target = tempfile.mkdtemp(prefix="pr-bundle-", dir=self.tmp_dir)
        self.extracted.append(target)
        return extract_bundle(bundle, target)

    def files(self, repo: str, base: str, heads: list[str]) -> dict[str, list[Change]] | None:
        """For each head, the files it modifies against the base; None when no repository holds the base and
        every head."""
        for git_dir in self.git_dirs(repo):
            if all(_has(git_dir, rev) for rev in [base, *heads]):
                return {head: _changes(git_dir, base, head) for head in heads}
        return None

    def licenses(self, repo: str, rev: str) -> list[str]:
        """The licenses ScanCode detects in the license-like files at the root of `rev` (module docstring)."""
        git_dir = next((d for d in self.git_dirs(repo) if _has(d, rev)), None)
        return [] if git_dir is None else root_licenses(git_dir, rev)

    def close(self) -> None:
        for folder in self.extracted:
            shutil.rmtree(folder, ignore_errors=True)
        self.extracted.clear()


def extract_bundle(bundle: Path, target: str) -> str | None:
    """The bare repository of a vault git-bare bundle, extracted under `target` (member by member, each checked);
    None when the bundle is not one."""
    try:
        with tarfile.open(bundle) as tar:
            members = [m for m in tar.getmembers() if member_problem(m) is None]
            tar.extractall(target, members=members, filter="data")
    except (OSError, tarfile.TarError):
        return None
    found = [p.parent for p in Path(target).glob("*.git/HEAD")]
    return str(found[0]) if found else None


def _has(git_dir: str, rev: str) -> bool:
    try:
        git(git_dir, "cat-file", "-e", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        return False
    return True


def _changes(git_dir: str, base: str, head: str) -> list[Change]:
    """The files `head` modifies against `base`, read by blob id (`--raw` names them: any path works)."""
    listing = git(git_dir, "diff", "--raw", "-z", "--no-abbrev", "--no-renames", "--no-ext-diff", "--diff-filter=M",
                  base, head).decode("utf-8", "surrogateescape").split("\0")  # fmt: skip
    modified = [(path, meta.split()[2:4]) for meta, path in zip(listing[0::2], listing[1::2], strict=False) if meta]
    if not modified:
        return []
    reader = BlobReader(git_dir)
    try:  # an object the repository lacks (a submodule's commit) reads as empty, as git shows it
        return [Change(path, reader.read(old) or b"", reader.read(new) or b"") for path, (old, new) in modified]
    finally:
        reader.close()


def root_licenses(git_dir: str, rev: str) -> list[str]:
    """The sorted SPDX ids detected in the license-like files at the root of `rev` in a repository."""
    listing = git(git_dir, "ls-tree", "-z", rev)
    found: set[str] = set()
    for entry in listing.split(b"\0"):
        meta, _, name = entry.partition(b"\t")
        if not meta or meta.split()[1] != b"blob":
            continue
        path = name.decode("utf-8", "surrogateescape")
        if read_pattern().match(path):
            found.update(_detect(git_dir, meta.split()[2].decode()))
    return sorted(found)


@cache
def _detect(git_dir: str, blob: str) -> tuple[str, ...]:  # a license file shared by many revisions: read once
    from stackcurate.stages import license_detect

    reader = BlobReader(git_dir)
    try:
        text = (reader.read(blob) or b"").decode("utf-8", "replace")
    finally:
        reader.close()
    return tuple(license_detect.detect(text, "stack_v2"))

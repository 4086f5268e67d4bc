"""Commits from the history of git repositories (`ingest --history REPO...`), as StarCoder's commits.

For each repository (a working tree, a bare one, or an SWH vault git-bare bundle `swh_1_rev_<id>.git.tar`, whose
bare repository holds the revision's whole history), every commit that is not a merge and changes exactly
one file (added or modified) is a record of kind `commit`: the file before and after, and the subject line,
rendered `<commit_before>{old}<commit_msg>{subject}<commit_after>{new}`: the whole files with p = 0.2, else the
changed lines with 0-31 lines around them (seeded). StarCoder's filters, in filters/github/commits.yaml: the file
before under 100,000 characters; no empty file after or subject; changes of <= 2 or >= 200 lines kept with
p = 0.1; boilerplate subjects, version strings, subjects of long words removed, short ones kept with p = 0.5;
programming languages only (go-enry's type; JSON, YAML, XML and HTML with p = 0.5); one commit per path, the
newest of those the filters keep. Authors' names and e-mails are read nowhere: the text is the code and the subject.
A commit carries the licenses ScanCode finds in the license-like files at the root of its repository's HEAD
(`detected_licenses`), which the license stage classifies, as StarCoder took the repository's license.
`--history-opt-out` lists remove a repository, named `owner/name` by its last two folders, or an owner.
"""

import dataclasses
import difflib
import hashlib
import random
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from stackcurate.core import tokens as tk
from stackcurate.core.contract import Shard
from stackcurate.core.errors import StackcurateError
from stackcurate.core.paths import rules_file
from stackcurate.sources.base import RawBatch, Source
from stackcurate.sources.gharchive.code import extract_bundle, root_licenses
from stackcurate.sources.trees import BlobReader, git, swhid_from_name
from stackcurate.stages.license import read_opt_out

COMMIT = "commit"
RULES = "filters/github/commits.yaml"


@dataclass(frozen=True)
class Change:
    """One single-file commit, as `git log` lists it; the lines it adds and deletes once its contents are read."""

    commit: str
    parent: str | None
    time: int
    subject: str
    path: str
    added: int
    deleted: int
    old_blob: str | None = None  # the file's blob before and after (None: added, deleted)
    new_blob: str | None = None


_NO_BLOB = "0" * 40


def load_rules(path: str = RULES) -> dict[str, Any]:
    """The rules of a YAML file laid out as filters/github/commits.yaml (`filters/...`: the shipped one when no
    such file is here)."""
    return _read(*rules_file(path, "--history-rules", RULES))


@cache
def _read(path: str, mtime: int) -> dict[str, Any]:  # read once per file and version: each worker reads it once
    return yaml.safe_load(Path(path).read_text())


def changes(repo: str) -> Iterator[Change]:
    """The repository's single-file commits, newest first (merges, renames, submodules and links left out),
    with git's count of their lines (-1 for both where git cannot count them: see `_log`)."""
    for chunk in _log(repo).split("\x1e")[1:]:
        header, _, files = chunk.partition("\0")
        entries = files.lstrip("\n").split("\0")
        # one file: (meta, path), then with --numstat `added\tdeleted\tpath`, then the chunk's end
        if len(entries) not in (3, 4) or entries[-1] or (len(entries) == 4 and "\t" not in entries[2]):
            continue
        old_mode, new_mode, old_blob, new_blob, status = entries[0].lstrip(":").split()
        if not {old_mode, new_mode} <= {"000000", "100644", "100755"} or status not in ("A", "M", "D"):
            continue
        added, deleted = entries[2].split("\t")[:2] if len(entries) == 4 else ("?", "?")
        if added == "-":  # binary, by git's numstat
            continue
        commit, parents, time, subject = header.split("\x1f", 3)
        parent = parents.split()[0] if parents else None
        old, new = (None if blob == _NO_BLOB else blob for blob in (old_blob, new_blob))
        counted = added.isdigit() and deleted.isdigit()
        yield Change(commit, parent, int(time), subject, entries[1], int(added) if counted else -1,
                     int(deleted) if counted else -1, old, new)  # fmt: skip


def _log(repo: str) -> str:
    """`git log` of the single-file changes: `--raw` (which names blobs) and `--numstat` (git counts the lines);
    where some blob is missing git cannot count, and the log is read again with `--raw` alone, the lines then
    counted here: a repository missing some objects still lists every commit, and only the commits whose blobs
    are missing become errors."""
    command = ["git", "-C", repo, "log", "--no-merges", "--no-renames", "-z", "--raw", "--no-abbrev",
               "--format=%x1e%H%x1f%P%x1f%ct%x1f%s"]  # fmt: skip
    for extra in (["--numstat"], []):
        done = subprocess.run(command + extra, capture_output=True)
        if done.returncode == 0:
            return done.stdout.decode("utf-8", "surrogateescape")
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    raise RuntimeError(f"git log failed: {said[-1] if said else f'exit status {done.returncode}'}")


def _chance(seed: int, *key: str) -> random.Random:
    """A random generator of its own for each commit and path: the same draws whatever the workers."""
    digest = hashlib.sha256("\0".join([str(seed), *key]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def judge(change: Change, old: str, new: str, language: str | None, kind: str, rules: dict[str, Any],
          rng: random.Random) -> tuple[str, str] | None:  # fmt: skip
    """(reason, detail) when StarCoder's filters remove the commit; None when it is kept."""
    subjects = rules["subjects"]
    subject = change.subject.strip()
    low = subject.lower()
    lines = change.added + change.deleted
    if len(old) >= rules["max_old_chars"]:
        return "old_too_large", f"{len(old)} characters before (cap {rules['max_old_chars']})"
    if not new.strip():
        return "empty_after", "the file is empty after the commit"
    if not subject:
        return "empty_subject", "no subject"
    if lines <= rules["small_change_lines"] and rng.random() >= rules["small_change_keep"]:
        return "sampled_small_change", f"{lines} lines changed, kept with p={rules['small_change_keep']}"
    if lines >= rules["large_change_lines"] and rng.random() >= rules["large_change_keep"]:
        return "sampled_large_change", f"{lines} lines changed, kept with p={rules['large_change_keep']}"
    if any(s in low for s in subjects["contains"]) or low in subjects["exact"]:
        return "boilerplate_subject", subject[:100]
    if re.match(subjects["version"], subject):
        return "version_subject", subject[:100]
    words = subject.split()
    if len(subject) / max(1, len(words)) > subjects["max_chars_per_word"]:
        return "long_words_subject", f"{len(subject) / max(1, len(words)):.0f} characters per word"
    if len(words) == 1 and change.subject.startswith(" "):
        return "one_word_subject", subject[:100]
    if len(words) < subjects["short_words"] and rng.random() >= subjects["short_keep"]:
        return "sampled_short_subject", f"{len(words)} words, kept with p={subjects['short_keep']}"
    rate = rules["languages"]["sampled"].get(language)
    if rate is None and kind not in rules["languages"]["types"]:
        return "not_code", f"{language or 'no language'} ({kind})"
    if rate is not None and rng.random() >= rate:
        return "sampled_language", f"{language} kept with p={rate}"
    return None


def render(change: Change, old: str, new: str, rules: dict[str, Any], rng: random.Random) -> str:
    """StarCoder's commit format (module docstring): the whole files, or the changed lines and some around."""
    fmt = rules["format"]
    if rng.random() >= fmt["whole_file_rate"]:
        a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
        blocks = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
        if blocks:
            before, after = rng.randint(0, fmt["context_lines"]), rng.randint(0, fmt["context_lines"])
            old = "".join(a[max(0, blocks[0][1] - before) : blocks[-1][2] + after])
            new = "".join(b[max(0, blocks[0][3] - before) : blocks[-1][4] + after])
    return f"{tk.COMMIT_BEFORE}{old}{tk.COMMIT_MSG}{change.subject.strip()}{tk.COMMIT_AFTER}{new}"


class GitHistory(Source):
    name = "history"
    option = "history"
    kinds = (COMMIT,)
    columns = (
        pa.field("lines_changed", pa.int32()),  # lines added and deleted by the commit
    )
    error_reasons = frozenset({"unreadable_input", "missing_blob", "corrupt_bundle"})
    reads_only_names = True  # a read of some names (license's scan) reads no history

    def plan(self, upstream: str | None) -> list[Shard]:
        # checked when planned, as the other sources' inputs are (a pipeline is checked before its inputs exist)
        for repo in self.ingest.history:
            is_bundle = repo.endswith(".git.tar") and Path(repo).is_file()
            if not (is_bundle or (Path(repo) / ".git").exists() or (Path(repo) / "HEAD").is_file()):
                raise StackcurateError(f"--history {repo} is not a git repository (no .git, no HEAD) nor a vault "
                                       "git-bare bundle (.git.tar)")  # fmt: skip
        return [Shard(index=i, kind=self.name, path=r, source_index=i) for i, r in enumerate(self.ingest.history)]

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        if self.ingest.only_names is not None:
            return
        import enry

        rules = load_rules(self.ingest.history_rules or RULES)
        source = shard.path
        name = swhid_from_name(source, "rev") or _repo_name(source.removesuffix(".tar"))
        batch = RawBatch(shard, "history", self.ingest.batch_rows, schema=self.raw_schema(),
                         common={"repo_name": name, "kind": COMMIT})  # fmt: skip
        if self.ingest.history_opt_out and (why := _opted_out(source, read_opt_out(self.ingest.history_opt_out))):
            batch.add("", reason="opt_out", detail=why)  # one row for the repository: none of its commits is read
            yield batch.flush()
            return
        with tempfile.TemporaryDirectory(prefix="history-bundle-", dir=self.ingest.tmp_dir) as tmp:
            repo = extract_bundle(Path(source), tmp) if source.endswith(".git.tar") else source
            if repo is None:
                batch.add("", reason="corrupt_bundle", detail="not a vault git-bare bundle (no <name>.git/HEAD)")
                yield batch.flush()
                return
            yield from self._commits(batch, repo, rules, enry)

    def _commits(self, batch: RawBatch, repo: str, rules: dict[str, Any], enry: Any) -> Iterator[pa.Table]:
        head = _head(repo)
        batch.common["detected_licenses"] = root_licenses(_git_dir(repo), head) if head else []
        blobs = BlobReader(_git_dir(repo))
        seen: set[str] = set()
        try:
            for change in changes(repo):
                common = {"revision_id": change.commit, "committer_date": change.time * 1_000_000}
                if change.path in seen:
                    batch.add(change.path, reason="path_seen", detail="a newer commit of this path is kept", **common)
                elif self._add(batch, blobs, change, rules, common, enry):
                    seen.add(change.path)
                if batch.full():
                    yield batch.flush()
        finally:
            blobs.close()
        if batch.rows:
            yield batch.flush()

    def _add(self, batch: RawBatch, blobs: BlobReader, change: Change, rules: dict[str, Any], common: dict[str, Any],
             enry: Any) -> bool:  # fmt: skip
        """Add the commit's record, kept or removed; whether it was kept."""
        if change.new_blob is None:  # deleted by the commit
            batch.add(change.path, reason="empty_after", detail="the file is deleted by the commit", **common)
            return False
        new_bytes = blobs.read(change.new_blob)
        old_bytes = b"" if change.old_blob is None else blobs.read(change.old_blob)
        if new_bytes is None or old_bytes is None:
            missing = change.new_blob if new_bytes is None else change.old_blob
            detail = f"commit {change.commit}: the repository does not hold blob {missing}"
            batch.add(change.path, reason="missing_blob", detail=detail, blob_id=missing, **common)
            return False
        if b"\0" in new_bytes or b"\0" in old_bytes:  # binary: not a record, as git's numstat says `-`
            return False
        try:
            old, new = old_bytes.decode("utf-8"), new_bytes.decode("utf-8")
        except UnicodeDecodeError:
            batch.add(change.path, reason="not_utf8", detail="the file before or after is not UTF-8", **common)
            return False
        if change.added < 0:  # not counted by git (see _log)
            change = dataclasses.replace(change, **dict(zip(("added", "deleted"), _counts(old, new), strict=True)))
        common["lines_changed"] = change.added + change.deleted
        language = enry.get_language(change.path, new_bytes) or None
        kind = enry.get_language_type(language) if language else "unknown"
        rng = _chance(self.ingest.history_seed, change.commit, change.path)
        if verdict := judge(change, old, new, language, kind, rules, rng):
            batch.add(change.path, reason=verdict[0], detail=verdict[1], language=language, **common)
            return False
        text = render(change, old, new, rules, rng).encode("utf-8")
        batch.add(change.path, text, language=language, **common)
        return True


def _counts(old: str, new: str) -> tuple[int, int]:
    """Lines added and deleted from `old` to `new`, as git's numstat counts them."""
    a, b = old.splitlines(), new.splitlines()
    added = deleted = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op != "equal":
            deleted += i2 - i1
            added += j2 - j1
    return added, deleted


def _opted_out(repo: str, opt_out: tuple[frozenset[str], frozenset[str]]) -> str | None:
    """Why a repository's commits go under the opt-out lists: it is `owner/name` by its last two folders."""
    path = Path(repo).resolve()
    owner, name = path.parent.name.lower(), path.name.removesuffix(".git").lower()
    repos, accounts = opt_out
    if f"{owner}/{name}" in repos:
        return "its repository opted out"
    if owner in accounts:
        return "its repository's owner opted out"
    return None


def _git_dir(repo: str) -> str:
    return str(Path(repo) / ".git") if (Path(repo) / ".git").exists() else repo


def _head(repo: str) -> str | None:
    """The commit the repository's HEAD names (its licenses are read there), or None in an empty repository."""
    try:
        return git(_git_dir(repo), "rev-parse", "--verify", "-q", "HEAD").decode().strip() or None
    except subprocess.CalledProcessError:
        return None


def _repo_name(repo: str) -> str:
    """The repository's name, as the local source names its files' (its folder's name, without `.git`)."""
    return Path(repo).resolve().name.removesuffix(".git")

"""`stackcurate ingest --gharchive` on generated GH Archive hours: rate per core, and memory when the input doubles.

Input. GH Archive hourly files (`YYYY-MM-DD-H.json.gz`, gzip level 6 as gzip's default; ~125 MB of JSON each)
generated from a seed of real GH Archive-format events (`--seed`, default /work/gha/gharchive: 39 real GitHub
threads, 131 issue and pull-request events; without it, `stackcurate sample`'s GH Archive of IDLE's NEWS.txt),
seeded and deterministic:
- thread events: every seed thread is copied, each copy a new thread (repository `owner/name-<k>`, a new issue
  or PR number, new event, issue, comment and review ids, its repository name and number rewritten in every
  URL and text), its events spread over up to 6 consecutive hours (the seed's hour gaps, scaled), in time order,
  starting anywhere from 6 hours before the first file to the last: as in GH Archive, threads at the edges of
  the input's hours lose their events outside them;
- other events, interleaved in time order: PushEvent, CreateEvent, WatchEvent, ForkEvent, DeleteEvent,
  GollumEvent, ReleaseEvent, MemberEvent, CommitCommentEvent, PublicEvent, in the payload shapes of GitHub's
  "GitHub event types" page (docs.github.com/en/rest/using-the-rest-api/github-event-types; ForkEvent's
  `forkee` a full repository object) and in GH Archive's proportions of one day in 2018
  (gist.github.com/AhmetCanSolak/b79c995593651b9b7f325d614cfa1550, counts in EVENT_COUNTS): 18.6% of the lines
  are thread events, as in that day; commit messages and texts come from the seed.
Each size is built once under `--work` (`input-<gb>gb/`, with `manifest.json`), reused by reruns.

Runs. `python -m stackcurate.cli ingest --out OUT --gharchive '<input>/*.json.gz' --no-progress --overwrite` as a
subprocess, with the embedded Ray (`ray`: all cores) and with `--runner local` (`local`: this process), at each
`--sizes` (GB of JSON). Per run:
- wall seconds of the CLI (process start, Ray start and stop included); MB/s of compressed and of uncompressed
  input over that wall time, and per core (divided by the run's workers: 2 for Ray here, 1 for local);
- peak RSS of the process tree (the CLI and every descendant: Ray's GCS, raylet, workers), sampled every 0.2 s
  with psutil; overall, during the split (until every hourly file's split marker is written) and during the
  shards; and the largest single Ray worker's;
- the per-shard worker peak that stackcurate records (`rss_peak` rows of OUT/_stats/ingest) and the shards'
  own seconds;
- docs in, kept, removed and errors as `stackcurate stats OUT` prints them;
- how quiet the machine was: the 1-minute load at the start and end, and the CPU seconds of every process outside
  the run's tree during it (system busy time less the tree's).
Before each run it waits (at most `--wait-quiet` s) for the 1-minute load to drop below 1.5 and the CPUs to be
under 25% busy over 10 s.

Run (2 cores; all under /work/bench_gharchive):
    python benchmarks/gharchive_ingest.py --sizes 1 2
Smoke test (results kept out of benchmarks/results):
    python benchmarks/gharchive_ingest.py --sizes 0.2 0.4 --results /work/bench_gharchive/smoke.json
"""

import argparse
import datetime
import gzip
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline_e2e import process_name, process_tree  # noqa: E402  (this folder's whole-pipeline benchmark)

from stackcurate.sources.gharchive.events import THREAD_TYPES  # noqa: E402

GENERATOR_VERSION = 2  # bump when the generated input changes: cached inputs of another version are rebuilt
# Events of one day of GH Archive (2018, the first of the gist's days), by type: the mix of the generated lines.
EVENT_COUNTS = {
    "PushEvent": 761_788, "CreateEvent": 183_775, "WatchEvent": 107_234, "IssueCommentEvent": 99_271,
    "PullRequestEvent": 84_235, "IssuesEvent": 50_523, "ForkEvent": 35_664, "DeleteEvent": 33_156,
    "PullRequestReviewCommentEvent": 27_644, "GollumEvent": 7_102, "ReleaseEvent": 5_413, "MemberEvent": 5_369,
    "CommitCommentEvent": 2_770, "PublicEvent": 1_484,
}  # fmt: skip
OTHER_TYPES = [t for t in EVENT_COUNTS if t not in THREAD_TYPES]
THREAD_SHARE = sum(v for t, v in EVENT_COUNTS.items() if t in THREAD_TYPES) / sum(EVENT_COUNTS.values())
FILE_BYTES = 125e6  # JSON per hourly file
MAX_SPAN_H = 6  # a thread's events span at most this many hours
START = datetime.datetime(2023, 3, 1, tzinfo=datetime.UTC)
FIRST_EVENT_ID = 27_700_000_000
ID_STRIDE = 10**10  # issue, comment and review ids of copy k: the seed's + k * ID_STRIDE
GZIP_LEVEL = 6
INTERVAL_S = 0.2
LOAD_LIMIT, LOAD_POLL_S, CPU_LIMIT = 1.5, 10, 25.0
MB = 1e6
NUMBER = "\x00N\x00"  # where a seed event's URLs hold its thread's number


# ---- the seed -------------------------------------------------------------------------------------------


@dataclass
class Seed:
    """The seed's threads (their events as JSON lines, in time order) and the texts for other events."""

    threads: list[list[tuple[str, int]]]  # per thread: (line, hour of the day in the seed)
    repos: list[str]  # the seed thread's repository
    numbers: list[int]
    messages: list[str]  # commit messages and short texts for PushEvent, ReleaseEvent, ...
    logins: list[str]
    source: str

    @property
    def events(self) -> int:
        return sum(len(t) for t in self.threads)


def load_seed(folder: Path | None) -> Seed:
    """The thread events of the seed's hourly files: parsed lines only, each event id once."""
    source = str(folder)
    if folder is None or not any(folder.glob("*.json.gz")):
        from stackcurate.sources.gharchive.sample import write_sample

        folder = Path(tempfile.mkdtemp(prefix="gharchive-seed-"))
        write_sample(folder)
        source = "stackcurate sample (IDLE NEWS.txt)"
    events, seen, messages, logins = {}, set(), [], set()
    for path in sorted(folder.glob("*.json.gz")):
        for line in gzip.decompress(path.read_bytes()).decode().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # the seed's planted defects (a cut line, a 502 page) are not copied
            if not isinstance(event, dict) or event.get("id") in seen:
                continue
            seen.add(event["id"])
            logins.add(event["actor"]["login"])
            payload = event.get("payload", {})
            for commit in payload.get("commits", []):
                messages.append(commit["message"])
            if event["type"] not in THREAD_TYPES:
                continue
            item = payload.get("issue") or payload.get("pull_request")
            key = (event["repo"]["name"], int(item["number"]))
            compact = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
            # the thread's number in its URLs (`owner/name/issues/12`, `/pull/12`, `/pulls/12`) becomes NUMBER
            url = rf"({re.escape(key[0])}/(?:issues|pull|pulls)/){key[1]}(?!\d)"
            compact = re.sub(url, rf"\g<1>{NUMBER}", compact)
            events.setdefault(key, []).append((event["created_at"], event["id"], compact))
            title = item.get("title")
            if title:
                messages.append(title)
    threads, repos, numbers = [], [], []
    for (repo, number), rows in sorted(events.items()):
        rows.sort()
        threads.append([(line, int(created[11:13])) for created, _, line in rows])
        repos.append(repo)
        numbers.append(number)
    return Seed(threads, repos, numbers, sorted(set(messages)), sorted(logins), source)


# ---- thread events ----------------------------------------------------------------------------------------


@dataclass
class Layout:
    """Where every copied thread event goes: its copy, seed thread and event, hour and second."""

    copy: np.ndarray
    thread: np.ndarray
    event: np.ndarray
    hour: np.ndarray
    second: np.ndarray
    files: int


def spans(seed: Seed) -> list[np.ndarray]:
    """Each seed thread's events' hours after its first, the seed's gaps scaled into MAX_SPAN_H."""
    found = []
    for events in seed.threads:
        hours = np.array([h for _, h in events]) - events[0][1]
        if hours[-1] > MAX_SPAN_H:
            hours = np.floor(hours * MAX_SPAN_H / hours[-1]).astype(int)
        found.append(hours)
    return found


def kept_per_pass(seed: Seed, files: int) -> float:
    """Events of one copy of every seed thread expected inside the input's hours (see `layout`)."""
    return sum(len(h) * files / (files + int(h[-1])) for h in spans(seed))


def layout(seed: Seed, copies_per_thread: int, files: int, rng: np.random.Generator) -> Layout:
    """Copy k of seed thread t (k counts over all threads) starts at a random hour from `span` hours before the
    first file to the last one, its events at the seed's (scaled) hour gaps, times sorted within the thread. The
    events outside the input's hours are left out, as GH Archive's window cuts the threads open at its edges."""
    cols: dict[str, list[int]] = {"copy": [], "thread": [], "event": [], "hour": [], "second": []}
    gaps = spans(seed)
    copy = 0
    for _ in range(copies_per_thread):
        for t, hours in enumerate(gaps):
            start = int(rng.integers(-int(hours[-1]), files))
            seconds = np.sort(rng.integers(0, 3600, len(hours)))  # sorted: in order within any one hour
            for e, gap in enumerate(hours):
                if 0 <= start + gap < files:
                    for name, value in zip(cols, (copy, t, e, start + int(gap), int(seconds[e])), strict=True):
                        cols[name].append(value)
            copy += 1
    arrays = {k: np.array(v, dtype=np.int64) for k, v in cols.items()}
    return Layout(**arrays, files=files)


def copy_event(seed: Seed, thread: int, event: int, copy: int) -> dict:
    """The seed event as copy `copy` of its thread: new repository, number and ids (the top-level event id and
    time are set when the hour is written)."""
    line, _ = seed.threads[thread][event]
    repo, number = seed.repos[thread], seed.numbers[thread]
    owner, name = repo.split("/", 1)
    new_repo = f"{owner}/{name}-{copy // 64}"
    new_number = number + 100_000 * (copy % 64 + 1)
    data = json.loads(line.replace(NUMBER, str(new_number)).replace(repo, new_repo))  # in every URL and text
    data["repo"]["id"] += (copy // 64 + 1) * ID_STRIDE
    payload = data["payload"]
    if "number" in payload:
        payload["number"] = new_number
    for key in ("issue", "pull_request", "comment", "review"):
        obj = payload.get(key)
        if obj:
            obj["id"] += copy * ID_STRIDE
            if "number" in obj:
                obj["number"] = new_number
    return data


# ---- other events -----------------------------------------------------------------------------------------


def _user(login: str, uid: int, kind: str = "User") -> dict:
    return {"login": login, "id": uid, "node_id": f"MDQ6VXNlcj{uid}", "avatar_url":
            f"https://avatars.githubusercontent.com/u/{uid}?v=4", "gravatar_id": "",
            "url": f"https://api.github.com/users/{login}", "html_url": f"https://github.com/{login}",
            "type": kind, "site_admin": False}  # fmt: skip


def _repository(full: str, rid: int, owner: dict, description: str, when: str) -> dict:
    """A repository object as the REST API gives it (a ForkEvent's `forkee`)."""
    api = f"https://api.github.com/repos/{full}"
    urls = {f"{k}_url": f"{api}/{v}" for k, v in (
        ("forks", "forks"), ("keys", "keys{/key_id}"), ("collaborators", "collaborators{/collaborator}"),
        ("teams", "teams"), ("hooks", "hooks"), ("issue_events", "issues/events{/number}"), ("events", "events"),
        ("assignees", "assignees{/user}"), ("branches", "branches{/branch}"), ("tags", "tags"),
        ("blobs", "git/blobs{/sha}"), ("git_tags", "git/tags{/sha}"), ("git_refs", "git/refs{/sha}"),
        ("trees", "git/trees{/sha}"), ("statuses", "statuses/{sha}"), ("languages", "languages"),
        ("stargazers", "stargazers"), ("contributors", "contributors"), ("subscribers", "subscribers"),
        ("subscription", "subscription"), ("commits", "commits{/sha}"), ("git_commits", "git/commits{/sha}"),
        ("comments", "comments{/number}"), ("issue_comment", "issues/comments{/number}"),
        ("contents", "contents/{+path}"), ("compare", "compare/{base}...{head}"), ("merges", "merges"),
        ("archive", "{archive_format}{/ref}"), ("downloads", "downloads"), ("issues", "issues{/number}"),
        ("pulls", "pulls{/number}"), ("milestones", "milestones{/number}"),
        ("notifications", "notifications{?since,all,participating}"), ("labels", "labels{/name}"),
        ("releases", "releases{/id}"), ("deployments", "deployments"))}  # fmt: skip
    return {"id": rid, "node_id": f"R_kgDO{rid}", "name": full.split("/")[1], "full_name": full, "private": False,
            "owner": owner, "html_url": f"https://github.com/{full}", "description": description, "fork": True,
            "url": api, **urls, "created_at": when, "updated_at": when, "pushed_at": when,
            "git_url": f"git://github.com/{full}.git", "ssh_url": f"git@github.com:{full}.git",
            "clone_url": f"https://github.com/{full}.git", "svn_url": f"https://github.com/{full}",
            "homepage": None, "size": 0, "stargazers_count": 0, "watchers_count": 0, "language": None,
            "has_issues": False, "has_projects": True, "has_downloads": True, "has_wiki": True, "has_pages": False,
            "has_discussions": False, "forks_count": 0, "mirror_url": None, "archived": False, "disabled": False,
            "open_issues_count": 0, "license": None, "allow_forking": True, "is_template": False,
            "web_commit_signoff_required": False, "topics": [], "visibility": "public", "forks": 0,
            "open_issues": 0, "watchers": 0, "default_branch": "main", "public": True}  # fmt: skip


class OtherEvents:
    """Events of OTHER_TYPES, each with its type's payload shape (see the module docstring)."""

    def __init__(self, seed: Seed, rng: random.Random) -> None:
        self.rng = rng
        self.messages = seed.messages or ["Update README.md"]
        self.logins = seed.logins or ["octocat"]
        self.names = sorted({r.split("/")[1] for r in seed.repos}) or ["hello-world"]
        self.weights = [EVENT_COUNTS[t] for t in OTHER_TYPES]

    def sha(self) -> str:
        return f"{self.rng.getrandbits(160):040x}"

    def text(self) -> str:
        return self.rng.choice(self.messages)

    def actor(self) -> tuple[str, int]:
        uid = self.rng.randrange(1, 150_000_000)
        return f"{self.logins[uid % len(self.logins)]}{uid % 100_000}", uid

    def types(self, n: int) -> list[str]:
        return self.rng.choices(OTHER_TYPES, weights=self.weights, k=n)

    def make(self, kind: str, when: str) -> dict:
        login, uid = self.actor()
        owner, _ = self.actor() if self.rng.random() < 0.5 else (login, uid)
        rid = self.rng.randrange(1, 700_000_000)
        repo = f"{owner}/{self.names[rid % len(self.names)]}{rid % 1000}"
        api = f"https://api.github.com/repos/{repo}"
        payload: dict = {}
        if kind == "PushEvent":
            n = 1
            while n < 20 and self.rng.random() < 0.4:  # geometric: most pushes carry one commit
                n += 1
            head, before = self.sha(), self.sha()
            commits = [{"sha": s, "author": {"email": f"{login}@users.noreply.github.com", "name": login},
                        "message": self.text(), "distinct": True, "url": f"{api}/commits/{s}"}
                       for s in [self.sha() for _ in range(n - 1)] + [head]]  # fmt: skip
            payload = {"repository_id": rid, "push_id": self.rng.randrange(10**10, 2 * 10**10), "size": n,
                       "distinct_size": n, "ref": "refs/heads/main", "head": head, "before": before,
                       "commits": commits}  # fmt: skip
        elif kind == "CreateEvent":
            ref_type = self.rng.choices(["branch", "tag", "repository"], weights=[55, 10, 35])[0]
            ref = None if ref_type == "repository" else f"feature-{rid % 997}" if ref_type == "branch" else "v1.0.0"
            payload = {"ref": ref, "ref_type": ref_type, "master_branch": "main", "description": self.text()[:80],
                       "pusher_type": "user"}  # fmt: skip
        elif kind == "WatchEvent":
            payload = {"action": "started"}
        elif kind == "ForkEvent":
            fork = f"{login}/{repo.split('/')[1]}"
            payload = {"forkee": _repository(fork, rid + 1, _user(login, uid), self.text()[:80], when)}
        elif kind == "DeleteEvent":
            payload = {"ref": f"feature-{rid % 997}", "ref_type": "branch", "pusher_type": "user"}
        elif kind == "GollumEvent":
            page = f"Page-{rid % 50}"
            wiki = f"https://github.com/{repo}/wiki/{page}"
            payload = {"pages": [{"page_name": page, "title": page, "summary": None, "action": "edited",
                                  "sha": self.sha(), "html_url": wiki}]}  # fmt: skip
        elif kind == "ReleaseEvent":
            rel = self.rng.randrange(10**8, 2 * 10**8)
            payload = {"action": "published", "release": {
                "url": f"{api}/releases/{rel}", "assets_url": f"{api}/releases/{rel}/assets",
                "upload_url": f"https://uploads.github.com/repos/{repo}/releases/{rel}/assets{{?name,label}}",
                "html_url": f"https://github.com/{repo}/releases/tag/v{rel % 10}.0", "id": rel,
                "author": _user(login, uid), "node_id": f"RE_kwDO{rel}", "tag_name": f"v{rel % 10}.0",
                "target_commitish": "main", "name": f"v{rel % 10}.0", "draft": False, "prerelease": False,
                "created_at": when, "published_at": when, "assets": [],
                "tarball_url": f"{api}/tarball/v{rel % 10}.0", "zipball_url": f"{api}/zipball/v{rel % 10}.0",
                "body": self.text(), "short_description_html": "",
                "is_short_description_html_truncated": False}}  # fmt: skip
        elif kind == "MemberEvent":
            member, mid = self.actor()
            payload = {"member": _user(member, mid), "action": "added"}
        elif kind == "CommitCommentEvent":
            cid, sha = self.rng.randrange(10**8, 2 * 10**8), self.sha()
            payload = {"comment": {"url": f"{api}/comments/{cid}", "html_url":
                       f"https://github.com/{repo}/commit/{sha}#commitcomment-{cid}", "id": cid,
                       "node_id": f"CC_kwDO{cid}", "user": _user(login, uid), "position": None, "line": None,
                       "path": None, "commit_id": sha, "created_at": when, "updated_at": when,
                       "author_association": "NONE", "body": self.text(), "reactions": {}}}  # fmt: skip
        event = {"id": "", "type": kind,
                 "actor": {"id": uid, "login": login, "display_login": login, "gravatar_id": "",
                           "url": f"https://api.github.com/users/{login}",
                           "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?"},
                 "repo": {"id": rid, "name": repo, "url": api}, "payload": payload, "public": True,
                 "created_at": when}  # fmt: skip
        if self.rng.random() < 0.3:
            oid = self.rng.randrange(1, 150_000_000)
            org = owner.rstrip("0123456789") or owner
            event["org"] = {"id": oid, "login": org, "gravatar_id": "", "url": f"https://api.github.com/orgs/{org}",
                            "avatar_url": f"https://avatars.githubusercontent.com/u/{oid}?"}  # fmt: skip
        return event


# ---- the input --------------------------------------------------------------------------------------------


def _line(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n"


def mean_line_bytes(seed: Seed) -> tuple[float, float]:
    """Average bytes of a copied thread event and of another event (a probe of each)."""
    thread = [len(_line(copy_event(seed, t, e, 0)).encode()) for t, ev in enumerate(seed.threads)
              for e in range(len(ev))]  # fmt: skip
    probe = OtherEvents(seed, random.Random(0))
    other = [len(_line(probe.make(kind, "2023-03-01T00:00:00Z")).encode()) for kind in probe.types(5000)]
    return float(np.mean(thread)), float(np.mean(other))


def hour_name(hour: int) -> str:
    when = START + datetime.timedelta(hours=hour)
    return f"{when:%Y-%m-%d}-{when.hour}.json.gz"


def stamp(hour: int, second: int) -> str:
    return f"{START + datetime.timedelta(hours=hour, seconds=second):%Y-%m-%dT%H:%M:%SZ}"


def build_input(folder: Path, gb: float, seed: Seed, seed_value: int) -> dict:
    """Write the hourly files of `gb` GB of JSON under `folder` (reused when its manifest matches)."""
    manifest_path = folder / "manifest.json"
    want = {"gb": gb, "seed": seed_value, "generator": GENERATOR_VERSION, "gzip_level": GZIP_LEVEL,
            "seed_source": seed.source}  # fmt: skip
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if all(manifest.get(k) == v for k, v in want.items()):
            return manifest
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    started = time.perf_counter()
    thread_bytes, other_bytes = mean_line_bytes(seed)
    lines = gb * 1e9 / (THREAD_SHARE * thread_bytes + (1 - THREAD_SHARE) * other_bytes)
    files = max(1, round(gb * 1e9 / FILE_BYTES))
    copies_per_thread = max(1, round(lines * THREAD_SHARE / kept_per_pass(seed, files)))
    plan = layout(seed, copies_per_thread, files, np.random.default_rng(seed_value))
    others_per_file = round(len(plan.copy) * (1 - THREAD_SHARE) / THREAD_SHARE / files)
    next_id, stats = FIRST_EVENT_ID, {"json_bytes": 0, "gz_bytes": 0, "lines": 0, "thread_events": 0, "types": {}}
    for hour in range(files):
        rng = random.Random(seed_value * 100_003 + hour)
        others = OtherEvents(seed, rng)
        mine = np.flatnonzero(plan.hour == hour)
        kinds = others.types(others_per_file)
        stamps = [stamp(hour, second) for second in range(3600)]
        # (second, 0 = thread event / 1 = other, index): the hour's events in time order, ids in that order
        order = sorted([(int(plan.second[i]), 0, int(i)) for i in mine] +
                       [(rng.randrange(3600), 1, k) for k in range(others_per_file)])  # fmt: skip
        chunks = []
        for second, other, index in order:
            when = stamps[second]
            if other:
                event = others.make(kinds[index], when)
            else:
                event = copy_event(seed, int(plan.thread[index]), int(plan.event[index]), int(plan.copy[index]))
                event["created_at"] = when
            event["id"] = str(next_id)
            next_id += 1
            stats["types"][event["type"]] = stats["types"].get(event["type"], 0) + 1
            chunks.append(_line(event))
        data = "".join(chunks).encode()
        packed = gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
        tmp = folder / f".{hour_name(hour)}.tmp"
        tmp.write_bytes(packed)
        tmp.rename(folder / hour_name(hour))
        stats["json_bytes"] += len(data)
        stats["gz_bytes"] += len(packed)
        stats["lines"] += len(order)
        stats["thread_events"] += len(mine)
        print(f"  {hour_name(hour)}: {len(data) / MB:.0f} MB JSON, {len(packed) / MB:.0f} MB gz", flush=True)
    manifest = {
        **want,
        "files": files,
        "seed_threads": len(seed.threads),
        "seed_thread_events": seed.events,
        "copies_per_seed_thread": copies_per_thread,
        "threads": copies_per_thread * len(seed.threads),
        **stats,
        "thread_share_lines": round(stats["thread_events"] / stats["lines"], 4),
        "compression_ratio": round(stats["json_bytes"] / stats["gz_bytes"], 2),
        "mean_thread_event_bytes": round(thread_bytes),
        "mean_other_event_bytes": round(other_bytes),
        "generate_s": round(time.perf_counter() - started, 1),
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# ---- measuring a run --------------------------------------------------------------------------------------


@dataclass
class Monitor:
    """Samples the run's process tree: total RSS by phase, each process's peak RSS and last CPU seconds."""

    root: psutil.Process
    split_markers: Path
    files: int
    procs: dict[tuple[int, float], psutil.Process] = field(default_factory=dict)
    peak_rss: dict[tuple[int, float], int] = field(default_factory=dict)
    names: dict[tuple[int, float], str] = field(default_factory=dict)
    cpu: dict[tuple[int, float], float] = field(default_factory=dict)
    peak_total: dict[str, int] = field(default_factory=lambda: {"split": 0, "shards": 0})
    split_done_s: float | None = None
    samples: int = 0

    def sample(self, now: float) -> None:
        if self.split_done_s is None and self.split_markers.is_dir():
            if len(list(self.split_markers.glob("*.json"))) >= self.files:
                self.split_done_s = now
        total = 0
        for proc in process_tree(self.root, self.procs):
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    rss = proc.memory_info().rss
                    times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            name = process_name(proc)
            if name.startswith("ray::") or key not in self.names:  # a Ray worker retitles itself `ray::Worker`
                self.names[key] = name if name.startswith("ray::") else self.names.get(key, name)
            self.peak_rss[key] = max(self.peak_rss.get(key, 0), rss)
            self.cpu[key] = times.user + times.system
            total += rss
        phase = "split" if self.split_done_s is None else "shards"
        self.peak_total[phase] = max(self.peak_total[phase], total)
        self.samples += 1


def busy_cpu_s() -> float:
    t = psutil.cpu_times()
    return sum(getattr(t, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq", "steal"))


def wait_for_quiet(limit_s: float) -> tuple[float, float]:
    """Wait (at most `limit_s`) until the 1-minute load is under LOAD_LIMIT and the machine's CPUs were under
    CPU_LIMIT % busy over the last LOAD_POLL_S seconds (the load average lags: a run of another process that
    just started does not show in it yet); the load and that CPU % then."""
    deadline = time.monotonic() + limit_s
    while True:
        busy = psutil.cpu_percent(interval=LOAD_POLL_S)
        load = os.getloadavg()[0]
        if (load < LOAD_LIMIT and busy < CPU_LIMIT) or time.monotonic() >= deadline:
            return round(load, 2), busy
        print(f"  load {load:.2f}, CPUs {busy:.0f}% busy, waiting", flush=True)


def shard_stats(out: Path) -> dict:
    """stackcurate's own counters: each shard's rss_peak and seconds, the run's workers."""
    table = pq.read_table(out / "_stats" / "ingest").to_pylist()
    rss = [r["value"] for r in table if r["metric"] == "rss_peak"]
    seconds = [r["value"] for r in table if r["metric"] == "seconds" and r["shard"] >= 0]
    workers = [r["value"] for r in table if r["metric"] == "workers"]
    return {
        "shards": len(rss),
        "rss_peak_mb_per_shard": [round(v / MB, 1) for v in rss],
        "rss_peak_mb_max": round(max(rss, default=0) / MB, 1),
        "shard_seconds": [round(v, 2) for v in seconds],
        "workers": int(max(workers, default=1)),
    }


STATS_ROW = re.compile(r"^ingest\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s", re.MULTILINE)


def docs_stats(out: Path, env: dict) -> dict:
    """docs in / kept / removed / errors and the removals by reason, from `stackcurate stats OUT`."""
    text = subprocess.run([sys.executable, "-m", "stackcurate.cli", "stats", str(out)], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    match = STATS_ROW.search(text)
    if match is None:
        raise SystemExit(f"no ingest row in `stackcurate stats {out}`:\n{text}")
    docs_in, kept, removed, errors = (int(g.replace(",", "")) for g in match.groups())
    reasons = {m[2]: int(m[3].replace(",", "")) for m in re.finditer(
        r"^ingest\s+(removed|error)\s+(\S+)\s+([\d,]+)", text, re.MULTILINE)}  # fmt: skip
    return {"docs_in": docs_in, "kept": kept, "removed": removed, "errors": errors, "by_reason": reasons,
            "stats_output": text.strip().splitlines()}  # fmt: skip


def run_ingest(input_dir: Path, manifest: dict, out: Path, runner: str, log: Path, wait_s: float) -> dict:
    load, busy_at_start = wait_for_quiet(wait_s)
    command = [sys.executable, "-m", "stackcurate.cli", "ingest", "--out", str(out), "--gharchive",
               str(input_dir / "*.json.gz"), "--no-progress", "--overwrite"]  # fmt: skip
    command += ["--runner", "local"] if runner == "local" else []
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    shutil.rmtree(out, ignore_errors=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"  {runner}: {' '.join(command[3:])} (load {load})", flush=True)
    markers = out / "_state" / "ingest_gharchive" / "work" / "done" / "split"
    busy0 = busy_cpu_s()
    with log.open("w") as sink:
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
        monitor = Monitor(psutil.Process(proc.pid), markers, manifest["files"])
        while proc.poll() is None:
            monitor.sample(time.perf_counter() - started)
            time.sleep(INTERVAL_S)
        wall = time.perf_counter() - started
    busy = busy_cpu_s() - busy0
    if proc.returncode != 0:
        raise SystemExit(f"ingest failed ({proc.returncode}); log {log}:\n{log.read_text()[-3000:]}")
    tree_cpu = sum(monitor.cpu.values())
    workers = {k: v for k, v in monitor.peak_rss.items() if monitor.names.get(k, "").startswith("ray::")}
    own = shard_stats(out)
    cores = own["workers"] if runner == "ray" else 1
    json_mb, gz_mb = manifest["json_bytes"] / MB, manifest["gz_bytes"] / MB
    return {
        "runner": runner,
        "gb": manifest["gb"],
        "command": " ".join(command[1:]),
        "wall_s": round(wall, 1),
        "split_s": round(monitor.split_done_s, 1) if monitor.split_done_s is not None else None,
        "cores_used": cores,
        "mb_s_json": round(json_mb / wall, 2),
        "mb_s_gz": round(gz_mb / wall, 2),
        "mb_s_json_per_core": round(json_mb / wall / cores, 2),
        "mb_s_gz_per_core": round(gz_mb / wall / cores, 2),
        "peak_rss_tree_mb": round(max(monitor.peak_total.values()) / MB, 1),
        "peak_rss_tree_split_mb": round(monitor.peak_total["split"] / MB, 1),
        "peak_rss_tree_shards_mb": round(monitor.peak_total["shards"] / MB, 1),
        "peak_rss_ray_worker_mb": round(max(workers.values(), default=0) / MB, 1) if runner == "ray" else None,
        "ray_worker_processes": len(workers),
        "stackcurate_stats": own,
        **docs_stats(out, env),
        "quiet": {
            "load_1min_start": load,
            "cpu_busy_pct_10s_before": busy_at_start,
            "load_1min_end": round(os.getloadavg()[0], 2),
            "tree_cpu_s": round(tree_cpu, 1),
            "other_cpu_s": round(max(0.0, busy - tree_cpu), 1),
            "machine_busy_cpu_s": round(busy, 1),
        },
        "samples": monitor.samples,
        "log": str(log),
    }


# ---- results ----------------------------------------------------------------------------------------------


def versions() -> dict:
    found = {}
    for name in ("stackcurate", "pyarrow", "ray", "numpy", "psutil"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "stackcurate"],
                                capture_output=True, text=True).stdout.strip())  # fmt: skip
    return {**found, "python": platform.python_version(), "stackcurate_commit": commit, "stackcurate_dirty": dirty}


def table_md(runs: list[dict]) -> str:
    head = ("| GB JSON | runner | wall s | split s | MB/s JSON | MB/s gz | MB/s JSON per core | peak tree RSS MB "
            "(split / shards) | peak worker MB | shard rss_peak MB (max) | docs in / kept / removed / errors | "
            "load start |")  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in runs:
        worker = "-" if r["peak_rss_ray_worker_mb"] is None else f"{r['peak_rss_ray_worker_mb']:,.0f}"
        lines.append(
            f"| {r['gb']:g} | {r['runner']} | {r['wall_s']:.1f} | {r['split_s']} | {r['mb_s_json']:.1f} | "
            f"{r['mb_s_gz']:.1f} | {r['mb_s_json_per_core']:.1f} | {r['peak_rss_tree_mb']:,.0f} "
            f"({r['peak_rss_tree_split_mb']:,.0f} / {r['peak_rss_tree_shards_mb']:,.0f}) | {worker} | "
            f"{r['stackcurate_stats']['rss_peak_mb_max']:,.0f} | {r['docs_in']:,} / {r['kept']:,} / "
            f"{r['removed']:,} / {r['errors']:,} | {r['quiet']['load_1min_start']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1.0, 2.0], help="GB of JSON per input")
    parser.add_argument("--runners", nargs="+", choices=["ray", "local"], default=["ray", "local"])
    parser.add_argument("--seed", type=Path, default=Path("/work/gha/gharchive"), help="seed hourly files")
    parser.add_argument("--seed-value", type=int, default=20230301, help="random seed of the generator")
    parser.add_argument("--work", type=Path, default=Path("/work/bench_gharchive"))
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "gharchive_ingest.json")
    parser.add_argument("--wait-quiet", type=float, default=1200, help="seconds to wait for load < 1.5 per run")
    parser.add_argument("--generate-only", action="store_true")
    args = parser.parse_args()

    seed = load_seed(args.seed if args.seed.is_dir() else None)
    print(f"seed {seed.source}: {len(seed.threads)} threads, {seed.events} events", flush=True)
    inputs = {}
    for gb in args.sizes:
        folder = args.work / f"input-{gb:g}gb"
        inputs[gb] = build_input(folder, gb, seed, args.seed_value)
        m = inputs[gb]
        print(f"input {folder}: {m['files']} files, {m['json_bytes'] / MB:,.0f} MB JSON, {m['gz_bytes'] / MB:,.0f} "
              f"MB gz (x{m['compression_ratio']}), {m['lines']:,} events, {m['threads']:,} threads",
              flush=True)  # fmt: skip
    if args.generate_only:
        return

    runs = []
    for gb in args.sizes:
        for runner in args.runners:
            name = f"{gb:g}gb-{runner}"
            run = run_ingest(args.work / f"input-{gb:g}gb", inputs[gb], args.work / f"out-{name}", runner,
                             args.work / "logs" / f"{name}.log", args.wait_quiet)  # fmt: skip
            runs.append(run)
            print(table_md([run]).splitlines()[-1], flush=True)

    doubling = {}
    if len(args.sizes) >= 2:
        small, large = min(args.sizes), max(args.sizes)
        for runner in args.runners:
            a = next(r for r in runs if r["gb"] == small and r["runner"] == runner)
            b = next(r for r in runs if r["gb"] == large and r["runner"] == runner)
            doubling[runner] = {
                "sizes_gb": [small, large],
                "peak_rss_tree": round(b["peak_rss_tree_mb"] / a["peak_rss_tree_mb"], 2),
                "peak_rss_tree_split": round(b["peak_rss_tree_split_mb"] / a["peak_rss_tree_split_mb"], 2),
                "peak_rss_tree_shards": round(b["peak_rss_tree_shards_mb"] / a["peak_rss_tree_shards_mb"], 2),
                "shard_rss_peak_max": round(
                    b["stackcurate_stats"]["rss_peak_mb_max"] / a["stackcurate_stats"]["rss_peak_mb_max"], 2
                ),
                "wall_s": round(b["wall_s"] / a["wall_s"], 2),
            }
    results = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "machine": {
            "cores": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
        },
        "versions": versions(),
        "generator": {
            "event_counts_source": "gist.github.com/AhmetCanSolak/b79c995593651b9b7f325d614cfa1550 (one day, 2018)",
            "event_counts": EVENT_COUNTS,
            "thread_share_lines": round(THREAD_SHARE, 4),
            "file_json_bytes": FILE_BYTES,
            "gzip_level": GZIP_LEVEL,
            "max_thread_span_hours": MAX_SPAN_H,
            "seed": seed.source,
        },
        "inputs": {f"{k:g}": v for k, v in inputs.items()},
        "runs": runs,
        "doubling_ratios": doubling,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table_md(runs))
    for runner, ratios in doubling.items():
        print(f"{runner}: x{ratios['sizes_gb'][1] / ratios['sizes_gb'][0]:g} input -> peak tree RSS "
              f"x{ratios['peak_rss_tree']}, shard rss_peak x{ratios['shard_rss_peak_max']}, "
              f"wall x{ratios['wall_s']}")  # fmt: skip
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()

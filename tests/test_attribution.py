"""The attribution index (stackcurate/attribution.py): exact matches against a brute-force scan of the shards,
maximal spans, the file and repository of each hit, and the CLI."""

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from megatron_reader import read as read_megatron

from stackcurate import attribution
from stackcurate.cli import main

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "theta", "kappa", "lambda", "zeta", "rho", "tau"]


def _module(rng: random.Random, name: str) -> str:
    """Python-looking code of random identifiers: each file its own, with some lines shared between files."""
    lines = [f"# module {name}"]
    for i in range(rng.randint(8, 20)):
        a, b, c = (rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(3))
        lines.append(f"def {a}_{i}({b}, {c}):\n    return {b} * {rng.randint(2, 9)} + {c}\n")
    lines.append("def shared_helper(value):\n    return value.strip().lower()\n")  # in every file
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A run over two repositories of random modules, to Megatron shards, and its index."""
    root = tmp_path_factory.mktemp("attribution")
    rng = random.Random(7)
    files = {}
    repos = ("acme", "zenith", "orbit", "quartz", "nimbus", "vertex")
    for repo in repos:
        for n in range(4):
            path = root / "repos" / repo / "pkg" / f"mod_{n}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            files[f"{repo}/pkg/mod_{n}.py"] = text = _module(rng, f"{repo}{n}")
            path.write_text(text)
    pipeline = root / "p.yaml"
    pipeline.write_text(
        f"out: {root / 'out'}\nstages:\n"
        f"  ingest: {{repos: {[str(root / 'repos' / r) for r in repos]}}}\n"
        "  format: {fim_rate: 0.0}\n"
        "  tokenize: {vocab_size: 400, shard_mb: 0.004}\n"
        "  index: {}\n"
    )
    assert main(["run", str(pipeline), "--runner", "local", "--no-progress"]) == 0
    return root / "out", files


def _brute(shards: list[np.ndarray], pattern: np.ndarray) -> int:
    n = len(pattern)
    return sum(int((np.lib.stride_tricks.sliding_window_view(s, n) == pattern).all(axis=1).sum())
               for s in shards if len(s) >= n)  # fmt: skip


def test_counts_equal_a_brute_force_scan_of_the_shards(run):
    out, _ = run
    manifest = json.loads((out / "megatron" / "manifest.json").read_text())
    assert sum(s["documents"] > 0 for s in manifest["shards"]) >= 2  # several parts answer
    shards = [out / "megatron" / s["shard"] for s in manifest["shards"] if s["documents"]]
    streams = [np.concatenate(read_megatron(shard)).astype(np.int64) for shard in shards]
    index = attribution.Index(out)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(300):
        stream = streams[rng.integers(len(streams))]
        length = int(rng.integers(1, 40))
        start = int(rng.integers(0, len(stream) - length))
        pattern = stream[start : start + length].copy()
        if rng.random() < 0.3:  # a sequence that may not occur at all
            pattern[rng.integers(length)] = rng.integers(0, 400)
        assert index.count(pattern) == _brute(streams, pattern), pattern
        checked += index.count(pattern) > 1
    assert checked > 20  # repeated sequences were among those checked, not only unique ones


def test_a_copied_file_span_is_found_with_its_file_and_repository(run):
    out, files = run
    index = attribution.Index(out)
    text = files["zenith/pkg/mod_3.py"]
    copied = text[40:700]
    generation = "x = compute()\nprint('not from the training set, just around it')\n" + copied + "\n# end\n"
    spans = index.attribute(generation)
    longest = spans[0]
    # all of the copy but its edges, where a cut identifier tokenizes differently than in the file
    assert longest.tokens >= 100 and copied[20:-20] in longest.text
    assert generation.index(longest.text) == longest.start and generation[longest.start : longest.end] == longest.text
    assert (longest.sources[0].repo_name, longest.sources[0].path) == ("zenith", "/pkg/mod_3.py")
    assert longest.documents == 1


def test_a_span_every_file_holds_counts_them_all_and_new_code_matches_nothing(run):
    out, files = run
    index = attribution.Index(out)
    helper = "\n\ndef shared_helper(value):\n    return value.strip().lower()\n\n"
    (span,) = index.attribute(helper, min_tokens=8, min_copied=0)
    assert span.documents == len(files) == span.occurrences
    novel = "def totally_new(alpha, beta):\n    return sum(range(alpha)) ** beta - 12345\n"
    assert index.attribute(novel) == []


def test_a_file_copied_in_short_pieces_is_reported_and_a_lone_shared_span_is_not(run):
    """min_copied: spans count for a file together; one short span alone (boilerplate, chance) is not reported."""
    out, files = run
    index = attribution.Index(out)
    assert index.min_copied == 32
    helper = "\n\ndef shared_helper(value):\n    return value.strip().lower()\n\n"
    assert index.attribute(helper, min_tokens=8) == [] and index.attribute(helper, min_tokens=8, min_copied=0)
    # max_files: a span every one of the 24 files holds is common text, which counts for none of them
    assert index.max_files == 20 and index.attribute(helper, min_tokens=8, min_copied=8) == []
    assert index.attribute(helper, min_tokens=8, min_copied=8, max_files=len(files))
    text = files["orbit/pkg/mod_2.py"]
    blocks = [b for b in text.split("\n\n") if b.startswith("def ") and "shared_helper" not in b]
    size = {b: len(index.tokenizer.encode(b, add_special_tokens=False).ids) for b in blocks}
    first, second = [b for b in blocks if 18 <= size[b] < 32][:2]  # each under min_copied, together over it
    generation = first + "\n\nprint('glue the model wrote, not in any file')\n\n" + second
    spans = index.attribute(generation)
    assert len(spans) == 2 and all(s.tokens < 32 for s in spans)
    assert {(s.sources[0].repo_name, s.sources[0].path) for s in spans} == {("orbit", "/pkg/mod_2.py")}
    assert spans[0].copied == spans[1].copied == spans[0].tokens + spans[1].tokens >= 32
    assert index.attribute(generation, min_copied=spans[0].copied + 1) == []


def test_spans_are_maximal_and_each_reaches_past_the_last(run):
    out, files = run
    index = attribution.Index(out)
    a, b = files["acme/pkg/mod_1.py"], files["zenith/pkg/mod_0.py"]
    generation = a[100:500] + "\n# glue written by the model\n" + b[200:600]
    spans = sorted(index.attribute(generation, min_copied=0), key=lambda s: s.start)
    assert len(spans) >= 2
    ids = np.array(index.tokenizer.encode(generation, add_special_tokens=False).ids)
    offsets = index.tokenizer.encode(generation, add_special_tokens=False).offsets
    for s in spans:
        first = next(i for i, (c, _) in enumerate(offsets) if c == s.start)
        assert index.count(ids[first : first + s.tokens]) > 0
        if first + s.tokens < len(ids):  # not longer: one more token and it is not in the shards
            assert index.count(ids[first : first + s.tokens + 1]) == 0
    assert {s.sources[0].repo_name for s in spans} >= {"acme", "zenith"}


def test_spans_merged_from_the_parts_equal_a_brute_force_scan(run):
    """Each part finds its own longest matches (in threads); merged, they give the spans a scan of every shard
    gives: at each position the longest run of tokens some shard holds, kept where it reaches past the last."""
    out, files = run
    manifest = json.loads((out / "megatron" / "manifest.json").read_text())
    streams = [np.concatenate(read_megatron(out / "megatron" / s["shard"])).astype(np.int64)
               for s in manifest["shards"] if s["documents"]]  # fmt: skip
    index = attribution.Index(out)
    rng = random.Random(3)
    names = sorted(files)
    for _ in range(4):
        pieces = [files[rng.choice(names)][(k := rng.randrange(600)) : k + rng.randrange(40, 200)] for _ in range(3)]
        text = "\n# not from any file\n".join(pieces)
        ids = np.array(index.tokenizer.encode(text, add_special_tokens=False).ids)
        expected, end = [], 0
        for i in range(len(ids)):
            length = 0
            while i + length < len(ids) and _brute(streams, ids[i : i + length + 1]):
                length += 1
            if length >= 8 and i + length > end:
                expected.append((i, length))
                end = i + length
        spans = index.attribute(text, min_tokens=8, min_copied=0)
        offsets = index.tokenizer.encode(text, add_special_tokens=False).offsets
        starts = {c: i for i, (c, _) in reversed(list(enumerate(offsets)))}
        assert sorted((starts[s.start], s.tokens) for s in spans) == expected


def test_a_rebuild_reuses_its_parts_and_the_cli_prints_and_answers_json(run, capsys, tmp_path, monkeypatch):
    out, files = run
    assert "<code>stackcurate serve " in (out / "report" / "index.html").read_text()  # the report links the index
    before = {p: p.stat().st_mtime_ns for p in (out / "attribution").rglob("sa.npy")}
    assert main(["index", "--out", str(out), "--runner", "local", "--no-progress"]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "attribution").rglob("sa.npy")} == before  # the stage is reused
    arrays = {p: p.read_bytes() for p in before}

    def no_suffix_arrays(data):
        raise AssertionError("a suffix array was built again")

    import pydivsufsort

    monkeypatch.setattr(pydivsufsort, "divsufsort", no_suffix_arrays)  # a rebuild takes the unchanged shards'
    assert main(["index", "--out", str(out), "--runner", "local", "--no-progress", "--overwrite"]) == 0
    assert {p: p.read_bytes() for p in (out / "attribution").rglob("sa.npy")} == arrays
    assert not (out / "_state" / "index-reuse").exists()
    capsys.readouterr()
    sql = "select count(*) n, count(distinct file_id) f from index join index_files on file_id = index_files.doc_id"
    assert main(["query", str(out), sql, "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ['"n","f"', f"{len(files)},{len(files)}"]  # each file, once, named
    query = tmp_path / "gen.py"
    query.write_text(files["acme/pkg/mod_2.py"][50:400])
    assert main(["attribute", str(out), "--file", str(query), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["spans"][0]["sources"][0]["path"] == "/pkg/mod_2.py"
    assert main(["attribute", str(out), "--text", "nothing like this was trained on at all"]) == 0
    assert "no span of the text is in the training set" in capsys.readouterr().out
    assert main(["attribute", str(tmp_path / "nowhere"), "--text", "x"]) == 2
    assert "is not an attribution index" in capsys.readouterr().err


# The HTTP server (stackcurate serve)


@pytest.fixture(scope="module")
def server(run):
    import threading

    from stackcurate.attribution_server import make_server

    out, files = run
    httpd = make_server(attribution.Index(out), port=0, max_bytes=20_000, timeout=5)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], files
    httpd.shutdown()
    httpd.server_close()


def _post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    answer = connection.getresponse()
    status, data = answer.status, json.loads(answer.read())
    connection.close()
    return status, data


def test_overlap_answers_llm_vscode_s_request_with_character_spans(server):
    port, files = server
    document = "# the user's own code\nresult = run()\n" + files["orbit/pkg/mod_1.py"][60:520] + "\nprint(result)\n"
    status, answer = _post(port, "/overlap", json.dumps({"document": document}).encode())
    assert status == 200 and list(answer) == ["spans"]
    (span,) = answer["spans"]
    assert isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span)
    start, end = span
    assert files["orbit/pkg/mod_1.py"][80:500] in document[start:end]  # offsets in characters of the sent text
    status, answer = _post(port, "/overlap", json.dumps({"document": "é" * 40 + document}).encode())
    assert answer["spans"][0] == [start + 40, end + 40]  # characters, not bytes


def test_bad_requests_get_a_4xx_and_the_server_stays_up(server):
    port, files = server
    assert _post(port, "/overlap", b"{not json")[0] == 400
    assert _post(port, "/overlap", b'{"document": "\xff\xfe"}')[0] == 400  # not UTF-8
    assert _post(port, "/overlap", b'["a list"]')[0] == 400
    assert _post(port, "/overlap", b'{"document": 12}')[0] == 400
    assert _post(port, "/attribute", b'{"text": "x", "min_tokens": 0}')[0] == 400
    assert _post(port, "/attribute", b'{"text": "x", "max_files": "all"}')[0] == 400
    assert _post(port, "/nowhere", b"{}")[0] == 404
    status, answer = _post(port, "/overlap", json.dumps({"document": "x" * 30_000}).encode())
    assert status == 413 and "over 20000 bytes" in answer["error"]
    status, answer = _post(port, "/attribute", json.dumps({"text": files["quartz/pkg/mod_0.py"][:300]}).encode())
    assert status == 200 and answer["spans"][0]["sources"][0]["repo_name"] == "quartz"


def test_am_i_in_this_set_lists_an_owner_s_files_and_writes_their_opt_out(tmp_path, capsys):
    from stackcurate.attribution import Source

    index = attribution.Index.__new__(attribution.Index)
    index.sources = {i: Source(i, repo, f"/f{i}.py", None, None, "file", None, None)
                     for i, repo in enumerate(["octo/one", "octo/one", "Octo/two", "other/octo", "octo"])}  # fmt: skip
    assert {repo: [f.path for f in files] for repo, files in index.owned("OCTO").items()} == {
        "Octo/two": ["/f2.py"], "octo/one": ["/f0.py", "/f1.py"]}  # fmt: skip


def test_bm25_search_ranks_the_file_that_holds_the_words_first(run, server):
    out, files = run
    index = attribution.Index(out)
    name, text = "vertex/pkg/mod_2.py", files["vertex/pkg/mod_2.py"]
    words = re.findall(r"def (\w+)\(", text)[:3]  # identifiers only this file defines
    (score, best), *_ = index.search(" ".join(words))
    assert (best.repo_name, best.path) == ("vertex", "/pkg/mod_2.py") and score > 0
    assert index.search('"shared_helper value"')[0][1].path.startswith("/pkg/mod_")  # a phrase every file holds
    assert isinstance(index.search("foo AND ( [ NOT"), list)  # query syntax in the text is not syntax
    assert index.search("!!! ???") == []
    port, _ = server
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/search?q=" + "+".join(words))
    answer = json.loads(connection.getresponse().read())
    assert answer["hits"][0]["path"] == "/pkg/mod_2.py" and name.startswith(answer["hits"][0]["repo_name"])
    connection.request("GET", "/search?q=")
    reply = connection.getresponse()
    assert reply.status == 400 and "q=" in json.loads(reply.read())["error"]


def test_the_page_highlights_copied_spans_in_chromium_and_asks_nothing_outside(server, tmp_path):
    import shutil
    import subprocess
    from urllib.parse import quote

    from test_report import _hosts, _Proxy

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("needs Debian's chromium (make install-dev installs it with apt-get where it can)")
    port, files = server
    copied = files["nimbus/pkg/mod_3.py"][100:600]
    text = "# my own code first\nanswer = 42\n" + copied
    proxy = _Proxy()  # every request that would leave the machine goes to it and is recorded
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--proxy-server=http://127.0.0.1:{proxy.port}",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom",
             # Chromium's own form autofill service is asked about any page with a form: not the page's request
             "--disable-features=AutofillServerCommunication"]  # fmt: skip
    try:
        blank = tmp_path / "blank.html"
        blank.write_text("<p>blank</p>")
        subprocess.run([chromium, *flags, blank.as_uri()], check=True, capture_output=True, timeout=120)
        own = _hosts(proxy.requests)  # what Chromium asks for of its own (time, accounts)
        proxy.requests.clear()
        done = subprocess.run([chromium, *flags, f"http://127.0.0.1:{port}/?text={quote(text)}"], check=True,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert _hosts(proxy.requests) <= own, f"the page asked for {_hosts(proxy.requests) - own}"
    finally:
        proxy.close()
    marks = re.findall(r'<mark id="span-\d+">(.*?)</mark>', done.stdout, re.S)
    assert marks and copied[40:400].replace("<", "&lt;").replace(">", "&gt;") in "".join(marks)
    assert "my own code" not in "".join(marks) and "nimbus /pkg/mod_3.py" in done.stdout


@pytest.mark.ray
def test_parts_built_as_ray_tasks_are_the_same_files(run, tmp_path):
    out, _ = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("index", "attribution"))  # the run without its index
    assert main(["index", "--out", str(copy), "--runner", "ray", "--workers", "2", "--no-progress"]) == 0
    here = sorted(p.relative_to(out) for p in out.rglob("*") if p.suffix in (".npy", ".parquet")
                  and p.relative_to(out).parts[0] in ("index", "attribution"))  # fmt: skip
    there = sorted(p.relative_to(copy) for p in copy.rglob("*") if p.suffix in (".npy", ".parquet")
                   and p.relative_to(copy).parts[0] in ("index", "attribution"))  # fmt: skip
    assert here == there and len(here) > 6
    for rel in here:
        assert (out / rel).read_bytes() == (copy / rel).read_bytes(), rel


def test_a_client_that_stops_sending_is_cut_off_and_the_server_answers_others(server):
    import socket
    import time

    port, files = server
    stalled = socket.create_connection(("127.0.0.1", port), timeout=30)
    stalled.sendall(b'POST /overlap HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{"document": ')  # and no more
    started = time.monotonic()
    status, _ = _post(port, "/overlap", json.dumps({"document": files["acme/pkg/mod_0.py"][:300]}).encode())
    assert status == 200  # another request is answered meanwhile
    assert stalled.recv(1024) == b"" and time.monotonic() - started < 20  # closed after the server's 5 s timeout
    stalled.close()

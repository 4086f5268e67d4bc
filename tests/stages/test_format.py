"""Formatting: each published format on crafted input, FIM that gives the text back, and seeded determinism."""

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import make_table, read_all, write_records

from stackcurate.core import tokens as tk
from stackcurate.core.config import build_config
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage
from stackcurate.stages.format import templates

RATES_OFF = templates.Rates(metadata=0.0, fim=0.0, fim_file=0.0, spm=0.0)
CODE = "def add(a, b):\n    return a + b  # é, 中文\n"


def test_star_buckets_follow_starcoder():
    assert [templates.star_bucket(s) for s in (None, 0, 1, 10, 11, 100, 101, 1000, 1001)] == [
        "0", "0", "1-10", "1-10", "10-100", "10-100", "100-1000", "100-1000", "1000+",
    ]  # fmt: skip


@pytest.mark.parametrize("spm", [0.0, 1.0])
def test_fim_gives_back_the_text(spm):
    for seed in range(50):
        text, mode = templates.fim("path.py\n", CODE, templates.rng_for(seed, 1), spm)
        assert mode == ("spm" if spm else "psm")
        assert text.count(tk.FIM_PREFIX) == text.count(tk.FIM_SUFFIX) == text.count(tk.FIM_MIDDLE) == 1
        prefix, middle, suffix = templates.unfim(text)
        assert prefix + middle + suffix == "path.py\n" + CODE
        if mode == "psm":
            assert prefix.startswith("path.py\n")  # the head is never cut
        else:
            assert text.startswith(tk.FIM_PREFIX + tk.FIM_SUFFIX)
            assert middle.startswith("path.py\n")  # SPM: the prefix (with its head) follows <fim_middle>


def test_fim_cut_points_are_uniform_characters():
    cuts = []
    for seed in range(2000):
        text, _ = templates.fim("", "abcdefghij", templates.rng_for(seed, 7), 0.0)
        prefix, middle, _ = templates.unfim(text)
        cuts += [len(prefix), len(prefix) + len(middle)]
    counts = np.bincount(cuts, minlength=11)
    assert counts.min() > 0 and counts[0] > 0 and counts[10] > 0  # both ends reachable: parts may be empty
    assert 0.35 < np.mean(cuts) / 10 < 0.65


def test_starcoder_file_metadata_and_plain_code():
    rng = templates.rng_for(0, 1)
    on = templates.Rates(metadata=1.0, fim=0.0, fim_file=0.0, spm=0.0)
    text, fimmed = templates.starcoder_file(CODE, "acme/widgets", "/src/add.py", 42, rng, on)
    assert text == "<reponame>acme/widgets<filename>src/add.py<gh_stars>10-100\n" + CODE and fimmed == 0
    assert templates.starcoder_file(CODE, "acme/w", "/a.py", 3, rng, RATES_OFF) == (CODE, 0)


def test_starcoder_metadata_fields_are_drawn_independently_at_their_rate():
    rates = templates.Rates(metadata=0.2, fim=0.0, fim_file=0.0, spm=0.0)
    seen = {"<reponame>": 0, "<filename>": 0, "<gh_stars>": 0}
    for doc_id in range(3000):
        text, _ = templates.starcoder_file("x", "r", "p", 5, templates.rng_for(42, doc_id), rates)
        for token in seen:
            seen[token] += token in text
    assert all(0.17 < n / 3000 < 0.23 for n in seen.values())


FILES = [templates.RepoFile(i, f"/src/f{i}.py", f"print({i})\n") for i in range(6)]


def test_starcoder2_repository_with_and_without_metadata():
    meta = templates.Rates(metadata=1.0, fim=0.0, fim_file=0.0, spm=0.0)
    [(text, ids, fimmed)] = templates.starcoder2_repo("acme/w", FILES, templates.rng_for(1, 2), meta, 10**6)
    assert text.startswith("<repo_name>acme/w<file_sep>") and fimmed == 0
    assert sorted(ids) == list(range(6)) and ids != list(range(6))  # every file once, in a random order
    assert text == "<repo_name>acme/w" + "".join(f"<file_sep>src/f{i}.py\nprint({i})\n" for i in ids)
    [(bare, ids, _)] = templates.starcoder2_repo("acme/w", FILES, templates.rng_for(1, 2), RATES_OFF, 10**6)
    assert bare == "".join(f"<file_sep>print({i})\n" for i in ids)


def test_long_repositories_split_at_file_boundaries():
    meta = templates.Rates(metadata=1.0, fim=0.0, fim_file=0.0, spm=0.0)
    docs = templates.starcoder2_repo("acme/w", FILES, templates.rng_for(1, 2), meta, max_chars=60)
    assert len(docs) > 1
    assert sorted(i for _, ids, _ in docs for i in ids) == list(range(6))
    for text, ids, _ in docs:
        assert text.startswith("<repo_name>acme/w<file_sep>")  # each part keeps the repository's header
        assert len(text) - len("<repo_name>acme/w") <= 60 or len(ids) == 1


def test_repository_fim_never_touches_the_repo_name_and_each_file_comes_back():
    every = templates.Rates(metadata=1.0, fim=1.0, fim_file=1.0, spm=0.5)
    [(text, ids, fimmed)] = templates.starcoder2_repo("acme/w", FILES, templates.rng_for(3, 4), every, 10**6)
    assert fimmed == 6 and text.startswith("<repo_name>acme/w<file_sep><fim_prefix>")
    entries = text.removeprefix("<repo_name>acme/w").split(tk.FILE_SEP)[1:]
    for doc_id, entry in zip(ids, entries, strict=True):
        prefix, middle, suffix = templates.unfim(entry)
        assert prefix + middle + suffix == f"src/f{doc_id}.py\nprint({doc_id})\n"


def test_fim_repositories_and_files_at_their_rates():
    rates = templates.Rates(metadata=0.5, fim=0.5, fim_file=0.5, spm=0.5)
    repos = files = 0
    for key in range(1000):
        [(_, _, fimmed)] = templates.starcoder2_repo("r", FILES, templates.rng_for(9, key), rates, 10**6)
        repos += fimmed > 0
        files += fimmed
    assert 0.45 < repos / 1000 < 0.55 * (1 - 0.5**6) + 0.05  # a FIM repository with no file drawn looks plain
    assert 0.22 < files / 6000 < 0.28  # 0.5 x 0.5


def test_jupyter_structured_cells():
    cells = [
        {"cell_type": "markdown", "source": "# Title", "output": ""},
        {"cell_type": "code", "source": "1 + 1", "output": "2"},
        {"cell_type": "code", "source": "x = 1", "output": ""},
        {"cell_type": "raw", "source": "ignored", "output": ""},
    ]
    assert templates.jupyter_structured(cells, max_output_chars=1000) == (
        "<jupyter_start><jupyter_text># Title<jupyter_code>1 + 1<jupyter_output>2"
        "<jupyter_code>x = 1<jupyter_output><empty_output>"
    )
    long = [{"cell_type": "code", "source": "print('a' * 50)", "output": "a" * 50}]
    assert templates.jupyter_structured(long, max_output_chars=5).endswith("<jupyter_output>aaaaa")


# ---- the stage -------------------------------------------------------------------------------------------


def _records(tmp_path: Path, order_seed: int | None = None, files: int = 3) -> Path:
    """Five repositories whose files are spread over `files` input files (shuffled rows when order_seed)."""
    rows = []
    for r in range(5):
        for f in range(4):
            rows.append((f"/pkg/m{f}.py", f"# repo {r} file {f}\nx = {r * 10 + f}\n", f"acme/r{r}", r * 4 + f))
    rows.append(("/nb.ipynb", "{}", "acme/r0", 100))
    if order_seed is not None:
        random.Random(order_seed).shuffle(rows)
    tables = []
    for part in range(files):
        chunk = rows[part::files]
        table = pa.concat_tables([make_table([(p, c)], repo_name=repo, language="Python") for p, c, repo, _ in chunk])
        table = table.set_column(0, "doc_id", pa.array([d for *_, d in chunk], pa.int64()))
        cells = [[{"cell_type": "code", "source": "1 + 1", "output": "2"}] if d == 100 else None for *_, d in chunk]
        cell_type = pa.list_(pa.struct([(n, pa.large_string()) for n in ("cell_type", "source", "output")]))
        tables.append(table.append_column("notebook_cells", pa.array(cells, cell_type)))
    return write_records(tmp_path / "in", tables)


def _format(tmp_path: Path, out: str, opts: RunOptions | None = None, **cfg) -> dict[int, str]:
    spec = get_stage("format")
    config = build_config(spec.config, cfg)
    run_stage(spec, config, str(tmp_path / out), opts or RunOptions(runner="local", progress=False),
              input_uri=str(tmp_path / "in"))  # fmt: skip
    table = read_all(tmp_path / out / "format")
    return dict(zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist(), strict=True))


def test_stage_builds_one_document_per_repository_across_input_files(tmp_path):
    _records(tmp_path)
    docs = _format(tmp_path, "out", fim_rate=0.0)
    table = read_all(tmp_path / "out" / "format")
    kinds = dict(zip(table.column("doc_id").to_pylist(), table.column("kind").to_pylist(), strict=True))
    assert sorted(kinds.values()) == ["notebook"] + ["repository"] * 5
    assert docs[100] == "<jupyter_start><jupyter_code>1 + 1<jupyter_output>2"
    for r in range(5):
        text = docs[r * 4]
        assert sorted(text.split(tk.FILE_SEP)[1:]) == sorted(
            (f"pkg/m{f}.py\n" if text.startswith(tk.REPO_NAME) else "") + f"# repo {r} file {f}\nx = {r * 10 + f}\n"
            for f in range(4)
        )
    assert not (tmp_path / "out" / "format_groups").exists()  # the grouped copy is gone once formatted


def test_stage_output_depends_on_seed_only_not_on_row_order_or_workers(tmp_path, ray_local):
    _records(tmp_path / "a")
    _records(tmp_path / "b", order_seed=5, files=2)
    ordered = _format(tmp_path / "a", "out")
    shuffled = _format(tmp_path / "b", "out", RunOptions(runner="ray", workers=2, progress=False))
    assert ordered == shuffled
    _records(tmp_path / "c")
    assert _format(tmp_path / "c", "out", seed=7) != ordered


def test_starcoder_mode_keeps_one_document_per_file(tmp_path):
    _records(tmp_path)
    docs = _format(tmp_path, "out", mode="starcoder", metadata_rate=0.0, fim_rate=0.0, notebooks="raw")
    assert len(docs) == 21 and docs[0] == "# repo 0 file 0\nx = 0\n" and docs[100] == "{}"

"""A run off the happy path: an empty stage output, a run folder moved elsewhere, a full disk."""

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import StageWrapper, data_files, state, table_dir, wrapped_stage

from stackcurate.cli import main

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "tests" / "fixtures" / "mini"


def test_a_stage_that_keeps_nothing_is_an_empty_input_for_the_next(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("print('hello')\n")
    (repo / "b.c").write_text("int main(void) { return 0; }\n")
    (tmp_path / "cobol.txt").write_text("COBOL\n")  # no file of the repository is kept by `language`
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "out: out\nstages:\n  ingest: {repos: [repo]}\n  language: {languages: cobol.txt}\n"
        f"  filter: {{rules: {ROOT / 'filters/starcoder2_v1.yaml'}}}\n  dedup: {{}}\n  pii: {{model: none}}\n"
        "  format: {}\n"
    )
    assert main(["run", str(pipeline), "--runner", "local", "--no-progress"]) == 0
    results = _results(capsys.readouterr().out)
    assert results["language"].startswith("2 in, 0 kept, 2 removed, 0 errors; 1 shards (1 run now)")
    for stage in ("filter", "dedup", "pii", "format"):
        assert results[stage].startswith("0 in, 0 kept, 0 removed, 0 errors"), stage
        assert state(tmp_path / "out" / stage, "SUCCESS").exists()
    # The empty outputs still carry their schema, so a query over them works.
    assert "pii_spans" in pq.read_schema(tmp_path / "out" / "pii" / "00000.parquet").names


def _results(stdout: str) -> dict[str, str]:
    """The summary line of each stage a run printed (`language: 9 in, 7 kept, ...`), by stage."""
    return {m[1]: m[2] for m in re.finditer(r"^(\w+): ([\d,]+ in, .*)$", stdout, re.MULTILINE)}


def _mini_run(base: Path) -> list[str]:
    """The golden pipeline, with its inputs, laid out under `base` (relative paths inside the YAML)."""
    shutil.copytree(MINI, base / "mini")
    for name in ("filters/languages/starcoder2_smol_v1.txt", "filters/starcoder2_v1.yaml"):
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, base / name)
    text = (base / "mini" / "pipeline.yaml").read_text().replace("../../../", "../")
    (base / "mini" / "pipeline.yaml").write_text(text.replace("out: ../work/golden", "out: ../out"))
    return ["run", str(base / "mini" / "pipeline.yaml"), "--runner", "local", "--no-progress"]


def test_a_run_folder_moved_with_its_inputs_resumes(tmp_path, capsys):
    assert main(_mini_run(tmp_path / "a")) == 0
    first = data_files(tmp_path / "a" / "out")
    shutil.move(tmp_path / "a", tmp_path / "b")
    # An interrupted fused group: language lost its last shard's marker and files.
    language = tmp_path / "b" / "out" / "language"
    last = sorted(state(language, "shards").glob("*.json"))[-1]
    last.unlink()
    (table_dir(language, "removed") / f"{last.stem}.parquet").unlink()
    state(language, "SUCCESS").unlink()
    capsys.readouterr()
    argv = ["run", str(tmp_path / "b" / "mini" / "pipeline.yaml"), "--runner", "local", "--no-progress"]
    assert main(argv) == 0
    results = _results(capsys.readouterr().out)
    for stage in ("ingest", "license", "language", "filter", "decontaminate"):  # the group's shard, once more
        assert "(1 run now)" in results[stage], stage
    # The redone shard is a vault bundle: its rows name the bundle where it now is, the rest is the same.
    assert _without_origin(data_files(tmp_path / "b" / "out")) == _without_origin(first)


def _without_origin(files: dict[str, bytes]) -> dict[str, str]:
    """Each Parquet file's rows, less the `origin` column (the absolute path of an input), as comparable text."""
    import io

    tables = {name: pq.read_table(io.BytesIO(data)) for name, data in files.items()}
    return {
        n: t.drop_columns([c for c in t.column_names if c == "origin"]).to_pandas().to_json(date_format="iso")
        for n, t in tables.items()
    }


def test_a_run_folder_copied_without_its_inputs_resumes(tmp_path, capsys):
    argv = _mini_run(tmp_path)
    assert main(argv) == 0
    shutil.copytree(tmp_path / "out", tmp_path / "copy")
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "copy")]) == 0
    results = _results(capsys.readouterr().out)
    assert len(results) == 5 and all("(0 run now)" in line for line in results.values()), results


def test_a_changed_rules_table_is_a_different_config(tmp_path, capsys):
    argv = _mini_run(tmp_path)
    assert main(argv) == 0
    rules = tmp_path / "filters" / "starcoder2_v1.yaml"
    rules.write_text(rules.read_text() + "\n# edited\n")
    capsys.readouterr()
    assert main(argv) == 2
    assert "holds output of a different input or config" in capsys.readouterr().err


@pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("unshare") is None, reason="needs Linux mount namespaces (unshare)"
)
@pytest.mark.parametrize("runner", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path, runner):
    """A real full disk: the output folder is a 256 KiB tmpfs, mounted in a private mount namespace."""
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a mount namespace here: {probe.stderr.decode().strip()}")
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(20):  # 1.5 MB of hex digests, ~700 KB compressed: more than the disk holds
        lines = (f"k{j} = '{hashlib.sha256(f'{i}.{j}'.encode()).hexdigest()}'\n" for j in range(1000))
        (repo / f"m{i}.py").write_text("".join(lines))
    out = tmp_path / "out"
    out.mkdir()
    command = (
        f"mount -t tmpfs -o size=256k tmpfs {out} && "
        f"{sys.executable} -m stackcurate.cli ingest --repos {repo} --out {out}/run --runner {runner} "
        f"--workers 1 --no-progress; echo exit=$?; ls -aR {out}/run/ingest"
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, timeout=600)
    errors = done.stderr.strip().splitlines()
    assert "exit=2" in done.stdout, done.stdout + done.stderr
    assert errors[-1].startswith("stackcurate: error: ingest: no space left on the device holding "), errors
    assert f"{out}/run/ingest" in errors[-1] and "rerun the same command to resume" in errors[-1]
    assert not any("Traceback" in line for line in errors)
    listing = done.stdout.split()
    assert "_SUCCESS" not in listing and not any(".tmp-" in name for name in listing), listing


def test_settings_of_how_to_run_may_change_between_a_run_and_its_resume(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("print('hello')\n")
    argv = ["ingest", "--repos", str(repo), "--out", str(tmp_path / "out"), "--runner", "local", "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--fetch-concurrency", "4", "--fetch-retries", "1", "--tmp-dir", str(tmp_path)]) == 0
    assert "(0 run now)" in _results(capsys.readouterr().out)["ingest"]
    assert main([*argv, "--max-bytes", "10"]) == 2  # this one changes what is kept
    assert "holds output of a different input or config" in capsys.readouterr().err


class _Killed(BaseException):
    """Stands for the process dying: not an Exception, so nothing on the way catches it."""


class _DiesOnShard(StageWrapper):
    """Wraps a stage of a fused group: the run dies in its call after `after_calls` calls, with the group's files
    open."""

    def __init__(self, stage: object, after_calls: int) -> None:
        self.stage, self.name, self.calls, self.after = stage, stage.name, 0, after_calls
        self.schema_after = stage.schema_after

    def read(self, shard: object) -> object:
        return self.stage.read(shard)

    def output_schema(self, shard: object) -> object:
        return self.stage.output_schema(shard)

    def __call__(self, table: object) -> object:
        self.calls += 1
        if self.calls > self.after:
            raise _Killed
        return self.stage(table)


def test_a_run_killed_inside_the_fused_group_resumes_to_the_same_files(tmp_path, capsys):
    """Killed in the middle of ingest-to-decontaminate, with some shards committed, one half-committed (its last
    stage's marker missing) and a temporary file left: the rerun redoes just the unfinished shards, and every
    committed file equals an uninterrupted run's."""
    import dataclasses

    from stackcurate.pipeline import RunOptions, load_pipeline, run_pipeline

    argv = _mini_run(tmp_path)
    yaml = tmp_path / "mini/pipeline.yaml"
    yaml.write_text(yaml.read_text().replace("    content: .\n", "    content: .\n    rows_per_shard: 3\n"))
    assert main(argv) == 0
    out = tmp_path / "out"
    clean = data_files(out)
    shards = len(list((out / "_state/license/shards").glob("*.json")))
    shutil.rmtree(out)

    pipeline = load_pipeline(yaml)
    stages = []
    for spec, cfg in pipeline.stages:
        if spec.name == "filter":  # dies on its 4th table: the 4th shard (one table each)
            spec = wrapped_stage(spec, lambda stage: _DiesOnShard(stage, 3))
        stages.append((spec, cfg))
    opts = RunOptions(runner="local", progress=False)
    with pytest.raises(_Killed):
        run_pipeline(dataclasses.replace(pipeline, stages=stages), opts)
    markers = {
        s: sorted(p.stem for p in state(out / s, "shards").glob("*.json")) for s in ("license", "decontaminate")
    }
    assert markers["license"] == markers["decontaminate"] == ["00000", "00001", "00002"], markers
    assert not (out / "_state/decontaminate/SUCCESS").exists()
    (out / "_state/decontaminate/shards/00001.json").unlink()  # killed between the markers of shard 00001
    (out / "_removed/filter/00005.parquet.tmp-dead").write_bytes(b"half a file")
    capsys.readouterr()
    assert main(argv) == 0
    results = _results(capsys.readouterr().out)
    for stage in ("ingest", "license", "language", "filter", "decontaminate"):
        assert f"{shards} shards ({shards - 2} run now)" in results[stage], (stage, results[stage])
    assert data_files(out) == clean
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


@pytest.mark.timeout(600)
def test_the_demo_fused_and_with_every_stage_s_rows_gives_the_same_shards_and_removed_rows(tmp_path):
    """pipelines/demo.yaml, every stage, on a small embedded sample: the fused run writes the same Megatron shards,
    removed rows and errors as the run that also writes each stage's kept rows (`--keep-intermediate`)."""
    import json

    from stackcurate.sample import build_sample

    build_sample(tmp_path / "sample", max_bytes=1_500_000, max_files=300)
    text = (ROOT / "pipelines" / "demo.yaml").read_text().replace("../work/sample", str(tmp_path / "sample"))
    text = text.replace("../filters/", f"{ROOT}/filters/")
    outputs = {}
    for name, extra in (("fused", []), ("kept", ["--keep-intermediate"])):
        pipeline = tmp_path / f"{name}.yaml"
        pipeline.write_text(text.replace("out: ../work/demo", f"out: {tmp_path / name}"))
        assert main(["run", str(pipeline), "--runner", "local", "--no-progress", *extra]) == 0
        outputs[name] = tmp_path / name
    fused, kept = (data_files(outputs[n]) for n in ("fused", "kept"))
    assert set(fused) < set(kept)  # the intermediate stages' kept rows are the difference
    assert {k for k in set(kept) - set(fused) if k.split("/")[0] in ("_removed", "_errors")} == set()
    assert {k: v for k, v in kept.items() if k in fused} == fused
    assert any(k.startswith("_removed/filter/") and pq.read_metadata(outputs["fused"] / k).num_rows for k in fused)
    megatron = {
        name: {p.name: p.read_bytes() for p in (out / "megatron").glob("*.*") if p.suffix in (".bin", ".idx")}
        for name, out in outputs.items()
    }
    assert megatron["fused"] == megatron["kept"] and megatron["fused"]
    manifests = [json.loads((out / "megatron/manifest.json").read_text()) for out in outputs.values()]
    assert [{k: v for k, v in m.items() if k != "tokenizer"} for m in manifests][0] == {
        k: v for k, v in manifests[1].items() if k != "tokenizer"
    }
    # the report of every stage: tokens per language add up to the shards' tokens
    summary = json.loads((outputs["fused"] / "report" / "summary.json").read_text())
    assert sum(r["tokens"] for r in summary["tokens_by_language"]) == manifests[0]["tokens"] == summary["tokens"]
    assert "Tokens per language" in (outputs["fused"] / "report" / "index.html").read_text()
    for name, out in outputs.items():
        folders = sorted(p for p in out.iterdir() if p.is_dir() and any(p.glob("*.parquet")))
        # the stages inside a fused group have no folder: they wrote no kept rows
        written = {"decontaminate", "dedup_clusters", "format", "graph", "license_scan", "pii", "tokenize", "index"}
        if name == "kept":
            written |= {"ingest", "license", "language", "filter", "dedup"}
        assert {f.name for f in folders} == written
        for folder in folders:
            _read_as_users_do(folder, tmp_path / "hf-cache")


def _read_as_users_do(folder: Path, cache: Path) -> None:
    """pandas, pyarrow, Polars and HF datasets, given a stage's folder as it is, read its kept rows and nothing
    else (the removed rows, errors, stats and markers are elsewhere: core/layout.py)."""
    import datasets
    import pandas
    import polars
    import pyarrow.dataset as ds

    files = sorted(folder.glob("*.parquet"))
    expected = sum(pq.read_metadata(f).num_rows for f in files)
    columns = set(pq.read_schema(files[0]).names)
    got = {
        "pandas": pandas.read_parquet(folder),
        "pyarrow": ds.dataset(folder).to_table(),
        "polars": polars.read_parquet(folder),
        "datasets": datasets.load_dataset("parquet", data_dir=str(folder), split="train", cache_dir=str(cache)),
    }
    for reader, table in got.items():
        assert (len(table), set(table.columns if reader in ("pandas", "polars") else table.column_names)) == (
            expected,
            columns,
        ), f"{reader} read {folder.name}"


def test_a_finished_run_reports_as_it_goes_and_its_dry_run_says_what_would_be_reused(tmp_path, capsys):
    """The golden pipeline plus dedup (two groups). Each group's results are reported before the next group starts;
    the run saves its resolved config (not printed without -v); a dry run then says the groups are complete, for
    the pipeline and for the saved config, and what changes when a shard is lost or a rules table is edited;
    `stats` lists the stages in pipeline order, without license's own scan pass."""
    from stackcurate.pipeline import RunOptions, load_pipeline, run_pipeline

    argv = _mini_run(tmp_path)
    yaml = tmp_path / "mini/pipeline.yaml"
    yaml.write_text(yaml.read_text() + "  dedup: {}\n")
    out = tmp_path / "out"
    reported = []  # (stage, whether dedup's folder existed when its result came)
    results = run_pipeline(
        load_pipeline(yaml),
        RunOptions(runner="local", progress=False),
        report=lambda result: reported.append((result.stage, (out / "dedup").exists())),
    )
    assert [r.stage for r in results] == ["ingest", "license", "language", "filter", "decontaminate", "dedup"]
    assert reported == [(s, False) for s in ("ingest", "license", "language", "filter", "decontaminate")] + [
        ("dedup", True)
    ]
    group = "ingest + license + language + filter + decontaminate (one pass per shard)"
    saved = out / "_config.yaml"
    for pipeline in (yaml, saved):
        assert main(["run", str(pipeline), "--dry-run"]) == 0
        assert capsys.readouterr().out.splitlines() == [
            f"{group}: complete, would be reused",
            "dedup: complete, would be reused",
        ]
    assert main(argv) == 0  # a rerun of the finished run reuses every stage; the config is not printed
    captured = capsys.readouterr()
    assert "stages:" not in captured.err and "(0 run now)" in _results(captured.out)["dedup"]

    language = out / "language"
    shards = sorted(state(language, "shards").glob("*.json"))
    shards[-1].unlink()
    state(language, "SUCCESS").unlink()
    assert main([*argv, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{group}: would resume: {len(shards) - 1} of {len(shards)} shards done"
    assert lines[1] == "dedup: complete, would be reused"  # its input, decontaminate, is complete

    rules = tmp_path / "filters" / "starcoder2_v1.yaml"
    rules.write_text(rules.read_text() + "\n# edited\n")
    assert main([*argv, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{group}: holds output of a different input or config")
    assert main([*argv, "--dry-run", "--overwrite"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{group}: would run, replacing the output there (--overwrite)"

    assert main(["stats", str(out)]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in table[1:]] == [
        "ingest",
        "license",
        "language",
        "filter",
        "decontaminate",
        "dedup",
    ]
    assert table_dir(out / "license_scan", "stats").is_dir()  # counted, but not a stage of the pipeline


def test_keep_true_writes_a_stage_s_rows_and_license_s_own_keep_is_its_setting(tmp_path):
    from stackcurate.pipeline import load_pipeline

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("out: o\nstages:\n  ingest: {repos: [.], keep: true}\n  license: {keep: [permissive]}\n")
    loaded = load_pipeline(pipeline)
    assert loaded.keep == {"ingest"}
    assert [cfg.keep for spec, cfg in loaded.stages if spec.name == "license"] == [("permissive",)]


def test_checking_a_pipeline_leaves_the_compiled_kernels_to_the_workers():
    """The driver builds every stage to check a pipeline; numba (~60 MB), which only workers run, stays out."""
    code = (
        "import sys\n"
        "from stackcurate.pipeline import check_pipeline, load_pipeline\n"
        "for name in ('demo', 'stack_v2'):\n"
        "    check_pipeline(load_pipeline(f'pipelines/{name}.yaml'))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numba'))\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

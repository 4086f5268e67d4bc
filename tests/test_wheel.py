"""The wheel: built from this tree and installed in a fresh venv, it runs a pipeline far from the checkout, its
`filters/` tables (defaults and `filters/<name>` paths in the YAML) read from the installed package."""

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import state, table_dir

ROOT = Path(__file__).resolve().parents[1]
# What never goes into a build: the .gitignore entries (build/ above all: setuptools leaves stale modules there).
NOT_SOURCE = shutil.ignore_patterns(
    ".git", "work", "build", "dist", "*.egg-info", "__pycache__", ".venv", ".pytest_cache", ".ruff_cache"
)
PIPELINE = """\
out: out
stages:
  ingest:
    metadata: [sample/metadata/*.parquet]
    content: sample
    bundles: [sample/vault/*]
  license: {}
  language: {languages: filters/languages/starcoder2_smol_v1.txt}
  filter: {rules: filters/starcoder2_v1.yaml}
  decontaminate: {benchmarks: [humaneval]}
"""


def run(args: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def venv_seeing_this_environment(venv: Path, env: dict[str, str]) -> Path:
    """A venv whose Python sees the packages of the Python running the tests, as `--system-site-packages` does
    from a system Python. From a venv's Python that option shows the base Python's packages, not the venv's (where
    `make test` in a virtualenv installed them): the new venv adds this environment's site folders itself."""
    run([sys.executable, "-m", "venv", "--without-pip", venv], venv.parent, env)
    site_packages = next((venv / "lib").glob("python*/site-packages"))
    folders = [f for f in (*site.getsitepackages(), site.getusersitepackages()) if Path(f).is_dir()]
    # `import` lines of a .pth file run at start-up: addsitedir also reads the .pth files of those folders.
    (site_packages / "_tests_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({folder!r})\n" for folder in folders)
    )
    return venv


@pytest.mark.timeout(600)
def test_wheel_runs_a_pipeline_without_the_checkout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_DATA_DISABLE_PROGRESS_BARS="1", TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS="")
    # A copy, so that the in-tree build neither writes into the checkout nor picks up an old build/.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, src], tmp_path, env)
    (wheel,) = dist.glob("stackcurate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for table in ("starcoder2_v1.yaml", "starcoder/visual_inspection_v1.csv", "licenses/permissive_v1.txt"):
        assert f"stackcurate/filters/{table}" in names
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "stackcurate").rglob("*.py")}
    assert not modules - names, "modules missing from the wheel: list their package in pyproject.toml"
    assert not any(n.startswith(("filters/", "tests/")) for n in names)

    # The dependencies come from this environment; the editable stackcurate in it must not shadow the wheel.
    venv = venv_seeing_this_environment(tmp_path / "venv", env)
    python, script = venv / "bin" / "python", venv / "bin" / "stackcurate"
    # --ignore-installed: never uninstall this environment's editable stackcurate, which the venv can see.
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", wheel], tmp_path, env)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    where = run([python, "-c", "import stackcurate; print(stackcurate.__file__)"], cwd, env).strip()
    assert Path(where).is_relative_to(venv), where

    run([script, "sample", cwd / "sample", "--max-mb", "2"], cwd, env)
    (cwd / "p.yaml").write_text(PIPELINE)
    run([script, "run", cwd / "p.yaml", "--runner", "local", "--no-progress"], cwd, env)
    out = cwd / "out"
    assert state(out / "filter", "SUCCESS").exists()
    stats = pq.read_table(table_dir(out / "filter", "stats")).to_pylist()
    assert sum(r["value"] for r in stats if r["metric"] == "docs_out") > 0
    assert sum(pq.read_metadata(p).num_rows for p in (out / "decontaminate").glob("*.parquet")) > 0
    for stage in ("license", "language", "filter"):  # defaults and filters/ paths: the venv's copies
        config = state(out / stage, "config.yaml").read_text()
        assert str(venv) in config and str(ROOT) not in config, config

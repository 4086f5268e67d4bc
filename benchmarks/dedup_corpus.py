"""A real-code corpus for the near-deduplication benchmark: released versions of the same projects.

Each project in `PROJECTS` comes as two (or three) released source distributions a few releases apart, so
most of their files are near-copies of each other across versions (edited, moved, or unchanged), next to
unrelated projects. The sdists hold Python, C/C++, Cython, Rust, JavaScript, docs and test data.

    python benchmarks/dedup_corpus.py [--scale 1.0] [--root work/dedup_corpus] [--jobs 4]

- downloads: `python -m pip download --no-deps --no-binary <project> <project>==<version>` into
  `<root>/sdists/` (kept and re-used; only PyPI is needed);
- extraction: each sdist into `<root>/src/<project>-<version>/` (its single top-level folder stripped),
  refusing absolute and `..` members, skipping links and special files;
- `--scale`: the share of `PROJECTS` to use, in list order (1.0 = all, 0.5 = the first half), so a benchmark can
  build a corpus and one twice its size.

The folders are left as released: a consumer ingests them with `stackcurate ingest --repos <folders...>`, which
drops binaries, empty and over-large files. Prints the folders, then their total files and bytes.

Measured on the project machine (2 cores, Python 3.11, pip 23.2; fresh pip cache, 4 jobs): download and
extraction of the full corpus took 6 min 10 s (431 MB of sdists, 2.1 GB extracted), a re-run with everything
in place well under a second. `stackcurate ingest --runner local` then kept:

| scale | projects | folders | files | MB | ingest kept files | kept MB |
|---|---|---|---|---|---|---|
| 0.5 | 24 | 50 | 66,422 | 801.6 | 60,929 | 621.5 |
| 1.0 | 48 | 99 | 134,163 | 1,747.6 | 121,871 | 1,211.7 |
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

#: (PyPI project, versions oldest first). Order matters: `--scale` takes a prefix of this list, and the two halves
#: hold about as many files each. Left out because pip cannot read their sdists' metadata here: maturin projects
#: that do not vendor their crates (pydantic-core, polars, tokenizers: cargo wants crates.io or a toolchain), and
#: pandas, grpcio, pyarrow, astropy 5.3, statsmodels 0.14.0 (their build requirements fail); scikit-learn works
#: but takes ~7 min per sdist.
PROJECTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # First half (scale 0.5): about half of the files ingest keeps.
    ("plotly", ("5.17.0", "5.18.0")),  # generated validators, JS bundle
    ("botocore", ("1.31.0", "1.31.85")),  # JSON service models
    ("matplotlib", ("3.7.5", "3.8.4")),  # C++ (Agg), JS, SVG
    ("pygments", ("2.16.1", "2.17.2")),  # example files in hundreds of languages
    ("sympy", ("1.11.1", "1.12")),
    ("astropy", ("6.0.0", "6.0.1")),  # C (wcslib, cfitsio), Cython
    ("mypy", ("1.7.1", "1.8.0")),  # typeshed stubs, C runtime
    ("pytest", ("7.3.2", "7.4.4", "8.0.2")),
    ("networkx", ("3.1", "3.2.1")),
    ("pip", ("23.2.1", "23.3.2")),
    ("pycryptodome", ("3.19.1", "3.20.0")),  # C
    ("scrapy", ("2.10.1", "2.11.1")),
    ("dask", ("2023.12.1", "2024.2.1")),
    ("black", ("23.3.0", "23.12.1")),
    ("pydantic", ("2.4.2", "2.6.4")),
    ("werkzeug", ("2.2.3", "2.3.8")),
    ("flask", ("2.2.5", "2.3.3")),
    ("psutil", ("5.9.5", "5.9.8")),  # C
    ("click", ("8.0.4", "8.1.3", "8.1.7")),
    ("attrs", ("22.2.0", "23.2.0")),
    ("jinja2", ("3.0.3", "3.1.3")),
    ("requests", ("2.28.2", "2.31.0")),
    ("httpx", ("0.24.1", "0.26.0")),
    ("bcrypt", ("4.0.1", "4.1.2")),  # Rust
    # Second half.
    ("salt", ("3006.5", "3006.7")),
    ("django", ("4.1.13", "4.2.11")),  # JS, templates, locale
    ("ansible-core", ("2.15.9", "2.16.4")),
    ("cython", ("3.0.8", "3.0.10")),  # Cython, C
    ("orjson", ("3.9.10", "3.10.0")),  # Rust, vendored crates, C (yyjson)
    ("statsmodels", ("0.14.1", "0.14.2")),  # Cython, CSV data
    ("sphinx", ("7.1.2", "7.2.6")),  # JS, templates
    ("twisted", ("23.8.0", "23.10.0")),
    ("sqlalchemy", ("2.0.10", "2.0.25")),
    ("celery", ("5.3.4", "5.3.6")),
    ("pyyaml", ("6.0.1", "6.0.2")),  # Cython, C
    ("setuptools", ("68.2.2", "69.1.1")),
    ("lxml", ("4.9.3", "5.1.0")),  # Cython, C
    ("ipython", ("8.18.1", "8.20.0")),
    ("cryptography", ("41.0.7", "42.0.5")),  # Rust, C
    ("aiohttp", ("3.8.6", "3.9.5")),  # C (llhttp), Cython
    ("notebook", ("6.5.5", "6.5.6")),  # JS, CSS, templates
    ("tornado", ("6.3.3", "6.4")),  # C
    ("cffi", ("1.15.1", "1.16.0")),  # C
    ("rich", ("13.3.5", "13.5.3", "13.7.1")),
    ("greenlet", ("3.0.1", "3.0.3")),  # C++
    ("ujson", ("5.7.0", "5.9.0")),  # C, C++ (double-conversion)
    ("zstandard", ("0.21.0", "0.22.0")),  # C (vendored zstd), Rust
    ("msgpack", ("1.0.5", "1.0.8")),  # Cython, C
)

DOWNLOAD_TIMEOUT_S = 900


def canonical(name: str) -> str:
    """PEP 503 normal form of a project name (`PyYAML` and `pyyaml`, `pydantic_core` and `pydantic-core`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def selected(scale: float) -> list[tuple[str, tuple[str, ...]]]:
    """The first `scale` share of `PROJECTS` (at least one project)."""
    if not 0.0 < scale <= 1.0:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    return list(PROJECTS[: max(1, int(len(PROJECTS) * scale + 0.5))])


def cached_sdist(sdists: Path, project: str, version: str) -> Path | None:
    """The sdist of `project==version` already in `sdists`, whatever case or separators its file name uses."""
    if not sdists.is_dir():
        return None
    for path in sorted(sdists.iterdir()):
        stem = path.name.removesuffix(".tar.gz")
        if path.is_file() and stem != path.name and stem.endswith(f"-{version}"):
            if canonical(stem[: -len(version) - 1]) == canonical(project):
                return path
    return None


def download(sdists: Path, project: str, version: str) -> Path:
    """The sdist of `project==version` in `sdists`, fetched with pip unless already there.

    `--no-binary <project>` (not `:all:`) makes the project an sdist but lets pip take wheels for the build
    backends it installs to read the sdist's metadata (maturin, setuptools-rust, Cython, ...): built from
    source, those fail. pip saves into a private folder first, so an interrupted download leaves no file.
    """
    found = cached_sdist(sdists, project, version)
    if found is not None:
        return found
    sdists.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=sdists, prefix=".download-") as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", project,
            "--disable-pip-version-check", "--no-input", f"{project}=={version}", "-d", tmp,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise RuntimeError(f"pip download {project}=={version} failed:\n{tail}")
        archives = [p for p in Path(tmp).iterdir() if p.name.endswith(".tar.gz")]
        if len(archives) != 1:
            raise RuntimeError(f"pip download {project}=={version} gave {sorted(os.listdir(tmp))}, not one .tar.gz")
        return Path(shutil.move(archives[0], sdists / archives[0].name))


def member_path(name: str) -> PurePosixPath:
    """A tar member's path, refused when it is absolute or climbs out with `..`."""
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in path.parts:
        raise ValueError(f"unsafe member path: {name!r}")
    return path


def extract(archive: Path, dest: Path) -> Path:
    """Extract `archive` into `dest` (skipped when `dest` exists), without its single top-level folder.

    Regular files and folders only: links, devices and fifos are skipped. Extraction goes to a sibling
    temporary folder renamed at the end, so `dest` exists only when complete.
    """
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        every = [(member, member_path(member.name)) for member in tar.getmembers()]  # any unsafe name refuses all
        kept = [(member, path) for member, path in every if member.isfile() or member.isdir()]
        tops = {path.parts[0] for _, path in kept if path.parts}
        strip = len(tops) == 1 and all(len(path.parts) > 1 or member.isdir() for member, path in kept)
        tmp = tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-")
        try:
            for member, path in kept:
                parts = path.parts[1:] if strip else path.parts
                if parts:
                    member.name = str(PurePosixPath(*parts))
                    tar.extract(member, tmp, filter="data")
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest


def fetch(root: Path, project: str, version: str) -> Path:
    """Download and extract `project==version` under `root`; the extracted folder."""
    dest = root / "src" / f"{canonical(project)}-{version}"
    if dest.is_dir():
        return dest
    return extract(download(root / "sdists", project, version), dest)


def build(scale: float, root: str = "work/dedup_corpus", jobs: int = 4) -> list[str]:
    """Download and extract the first `scale` share of `PROJECTS` under `root`; the folders in list order.

    Already downloaded sdists and extracted folders are re-used. Raises RuntimeError naming every project
    version that failed, after trying all of them.
    """
    base = Path(root)
    wanted = [(project, version) for project, versions in selected(scale) for version in versions]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = [pool.submit(fetch, base, project, version) for project, version in wanted]
    folders, failures = [], []
    for (project, version), future in zip(wanted, futures, strict=True):
        error = future.exception()
        if error is None:
            folders.append(str(future.result()))
        else:
            failures.append(f"{project}=={version}: {error}")
    if failures:
        raise RuntimeError("could not fetch:\n" + "\n".join(failures))
    return folders


def tally(folders: list[str]) -> tuple[int, int]:
    """Regular files and their bytes under `folders` (links not followed)."""
    files = size = 0
    for folder in folders:
        for dirpath, _, filenames in os.walk(folder):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if not os.path.islink(path):
                    files += 1
                    size += os.path.getsize(path)
    return files, size


def main() -> None:
    """Build the corpus at `--scale` and print its folders, then their total files and bytes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="share of PROJECTS to use, in list order")
    parser.add_argument("--root", default="work/dedup_corpus", help="holds sdists/ (the cache) and src/")
    parser.add_argument("--jobs", type=int, default=4, help="concurrent downloads")
    args = parser.parse_args()

    started = time.perf_counter()
    folders = build(args.scale, args.root, args.jobs)
    seconds = time.perf_counter() - started
    files, size = tally(folders)
    print("\n".join(folders))
    print(f"{len(folders)} folders, {files} files, {size} bytes ({size / 1e6:.1f} MB); built in {seconds:.1f} s")


if __name__ == "__main__":
    main()

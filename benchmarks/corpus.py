"""The benchmarks' shared corpus: `stackcurate sample` of real code, and the CLI calls that run on it."""

import subprocess
import sys
import time
from pathlib import Path

CLI = [sys.executable, "-m", "stackcurate.cli"]


def stackcurate(*args: str) -> float:
    """Run the CLI quietly, as a user would; return its wall time in seconds."""
    started = time.perf_counter()
    subprocess.run([*CLI, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def sample(work: Path, mb: float, *, rebuild: bool = False) -> Path:
    """`work/sample`: about `mb` MB of this machine's installed code as a Stack v2 layout (built once)."""
    folder = work / "sample"
    if rebuild or not (folder / "metadata" / "00000.parquet").exists():
        stackcurate("sample", str(folder), "--max-mb", str(mb), "--max-files", "1000000")
    return folder


def ingest_args(out: Path, folder: Path) -> list[str]:
    """`stackcurate ingest` arguments for the sample in `folder`."""
    return [
        "ingest",
        "--out",
        str(out),
        "--metadata",
        str(folder / "metadata" / "*.parquet"),
        "--content",
        str(folder),
    ]

"""ScanCode license detection speed on real license files, in both modes of the license stage.

    python benchmarks/license_detection.py [--files 200]

The files are the LICENSE/COPYING/NOTICE files of this machine's installed Python packages (real texts of
many licenses). The index load (once per worker) is reported apart from the per-file detection time.
"""

import argparse
import json
import os
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def license_files(limit: int) -> list[str]:
    site = Path(sysconfig.get_paths()["purelib"])
    found = sorted(
        p
        for p in site.glob("*.dist-info/*")
        if p.is_file() and p.name.upper().startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE"))
    )
    found += sorted(p for p in site.glob("*.dist-info/licenses/**/*") if p.is_file())
    texts = []
    for path in found:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
        if len(texts) >= limit:
            break
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    args = parser.parse_args()
    texts = license_files(args.files)
    from stackcurate.stages import license_detect

    started = time.perf_counter()
    license_detect.detect("MIT License", "stack_v2")
    load_s = time.perf_counter() - started
    results = {"files": len(texts), "chars": sum(map(len, texts)), "index_load_s": load_s}
    for mode in license_detect.MODES:
        started = time.perf_counter()
        found = [license_detect.detect(t, mode) for t in texts]
        seconds = time.perf_counter() - started
        results[mode] = {
            "seconds": seconds,
            "files_per_s": len(texts) / seconds,
            "ms_per_file": 1000 * seconds / len(texts),
            "files_with_a_license": sum(1 for f in found if f),
        }
    results["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    target = ROOT / "benchmarks" / "results" / "license_detection.json"
    target.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{len(texts)} license files, {results['chars'] / 1e6:.2f} MB; index load {load_s:.1f} s (once per worker)")
    print("| mode | seconds | files/s | ms/file | files with a license found |")
    print("|---|---|---|---|---|")
    for mode in license_detect.MODES:
        r = results[mode]
        print(
            f"| {mode} | {r['seconds']:.1f} | {r['files_per_s']:.0f} | {r['ms_per_file']:.1f} "
            f"| {r['files_with_a_license']} |"
        )


if __name__ == "__main__":
    main()

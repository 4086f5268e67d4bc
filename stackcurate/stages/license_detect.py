"""ScanCode license detection, loaded once per process (its index is slow to load and large in memory).

The Stack v2 pinned scancode-toolkit 32.0.8 and called `detect_licenses(query_string=..., deadline=100)`.
ScanCode reads `deadline` as a wall-clock time, so 100 (1970) has always passed: only whole-file and
exact-text matching runs. Mode `stack_v2` reproduces that (fast); mode `full` lifts the limit and also finds
SPDX tags and near-copies of license texts (far slower). `benchmarks/license_detection.py` measures both modes
and the index's load (benchmarks/README.md, "License detection").
"""

import gc
import sys
import tempfile
import warnings
from functools import cache
from pathlib import Path

from stackcurate.core import io
from stackcurate.core.errors import StackcurateError

MODES = ("stack_v2", "full")


@cache
def _scancode() -> tuple:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # typecode's note about the system libmagic
            from licensedcode import detection
            from licensedcode.cache import get_index, get_licenses_db, get_licensing
    except ImportError:
        raise StackcurateError("license detection needs ScanCode: install `stackcurate[license]`") from None
    # Loading unpickles a great many objects, and the collector runs over them as they are made: with it off
    # the load is faster. The unpickler also holds extra memory while it runs: the processes of a machine load
    # one at a time, so two workers starting together never hold that twice. The index lives as long as the
    # process: frozen, the collector's full passes skip it.
    # (Measured: `benchmarks/results/HISTORY.md`, "Second pass on 2026-11-26".)
    with io.machine_lock(Path(tempfile.gettempdir()) / "stackcurate-scancode-load.lock", optional=True):
        collecting = gc.isenabled()
        gc.disable()
        try:
            index = get_index()
        finally:
            if collecting:
                gc.enable()
    gc.freeze()
    return index, detection, get_licensing(), get_licenses_db()


def _expressions(text: str, deadline: int) -> list[str | None]:
    """The license expressions of ScanCode's `detect_licenses(query_string=text, deadline=deadline)`, one per
    detection, computed with ScanCode's own steps but for one: `LicenseDetection.from_matches` also names each
    detection by a hash of its matches' matched text, which re-tokenizes that text and takes most of the time
    (`benchmarks/results/HISTORY.md`, "Second pass on 2026-11-26"), for an identifier only ScanCode's own
    reports use.
    (scancode-toolkit is pinned; a test compares this with `detect_licenses`.)"""
    index, detection, _, _ = _scancode()
    matches = index.match(query_string=text, min_score=0, deadline=deadline, as_expression=False,
                          unknown_licenses=False)  # fmt: skip
    found = []
    for group in detection.group_matches(license_matches=matches) if matches else ():
        analysis = detection.analyze_detection(license_matches=group, package_license=False)
        log, expression = detection.get_detected_license_expression(
            analysis=analysis, license_matches=group, post_scan=False
        )
        found.append(
            detection.LicenseDetection(
                matches=group,
                detection_log=log,
                license_expression=None if expression is None else str(expression),
            )
        )
    return [d.license_expression for d in detection.process_detections(detections=found)]


def detect(text: str, mode: str = "stack_v2") -> list[str]:
    """Sorted SPDX ids (ScanCode `LicenseRef-scancode-*` ids where there is no SPDX id) found in `text`."""
    _, _, licensing, db = _scancode()
    ids = set()
    for expression in _expressions(text, 100 if mode == "stack_v2" else sys.maxsize):
        for symbol in licensing.license_symbols(expression):
            ids.add(db[symbol.key].spdx_license_key)
    return sorted(ids)

"""ScanCode license detection, loaded once per process (its index takes ~4 s and ~1.5 GB to load).

The Stack v2 pinned scancode-toolkit 32.0.8 and called `detect_licenses(query_string=..., deadline=100)`.
ScanCode reads `deadline` as a wall-clock time, so 100 (1970) has always passed: only whole-file and
exact-text matching runs. Mode `stack_v2` reproduces that (about 130 files/s); mode `full` lifts the limit
and also finds SPDX tags and near-copies of license texts (about 5 files/s).
"""

import warnings
from functools import cache

from stackcurate.core.errors import StackcurateError

MODES = ("stack_v2", "full")


@cache
def _scancode() -> tuple:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # typecode's note about the system libmagic
            from licensedcode.cache import get_index, get_licenses_db, get_licensing
            from licensedcode.detection import detect_licenses
    except ImportError:
        raise StackcurateError("license detection needs ScanCode: install `stackcurate[license]`") from None
    get_index()
    return detect_licenses, get_licensing(), get_licenses_db()


def detect(text: str, mode: str = "stack_v2") -> list[str]:
    """Sorted SPDX ids (ScanCode `LicenseRef-scancode-*` ids where there is no SPDX id) found in `text`."""
    detect_licenses, licensing, db = _scancode()
    kwargs = {"deadline": 100} if mode == "stack_v2" else {}
    ids = set()
    for detection in detect_licenses(query_string=text, **kwargs):
        for symbol in licensing.license_symbols(detection.license_expression):
            ids.add(db[symbol.key].spdx_license_key)
    return sorted(ids)

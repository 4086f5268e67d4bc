"""Loaders for the data tables under `filters/`; each validates at load time and names the file and line."""

from collections.abc import Callable
from pathlib import Path

from stackcurate.core.errors import StackcurateError


def read_name_list(
    path: str | Path, *, is_valid: Callable[[str], bool] | None = None, what: str = "name"
) -> tuple[str, ...]:
    """Read a one-name-per-line list (`#` starts a comment line); reject blanks-only files and invalid names."""
    path = Path(path)
    if not path.is_file():
        raise StackcurateError(f"{what} list {path} does not exist")
    names: list[str] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if is_valid is not None and not is_valid(name):
            raise StackcurateError(f"{path}:{lineno}: unknown {what} {name!r}")
        if name in names:
            raise StackcurateError(f"{path}:{lineno}: {what} {name!r} is listed twice")
        names.append(name)
    if not names:
        raise StackcurateError(f"{path} lists no {what}")
    return tuple(names)

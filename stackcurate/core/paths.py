"""Where the `filters/` tables are: inside the installed package, or in the source checkout.

`filters/` sits at the top of the repository (data, not code) and ships in the wheel as `stackcurate/filters`
(pyproject maps it). An editable install imports the package from the checkout, where the folder is still the
top-level one, so both places are looked up here and nowhere else.
"""

from importlib import resources
from pathlib import Path

SHIPPED_PREFIX = "filters/"


def filters_dir() -> Path:
    """The folder of the shipped rule sets and tables (`starcoder2_v1.yaml`, `languages/`, `licenses/`, ...)."""
    shipped = resources.files("stackcurate") / "filters"  # a wheel install
    if shipped.is_dir():
        return Path(str(shipped))
    return Path(__file__).resolve().parents[2] / "filters"  # the checkout of an editable install


def rules_file(value: str, flag: str, default: str) -> tuple[str, int]:
    """The file a rules setting names (`filters/...`: the shipped one when no such file is here) and its
    modification time, so that a cache of what it says is keyed by its version; a one-line error when there is
    none."""
    found = Path(value) if Path(value).exists() else shipped_table(value)
    if found is None:
        from stackcurate.core.errors import StackcurateError

        raise StackcurateError(f"no rules file {value}; pass {flag} with one laid out as {default}")
    return str(found), found.stat().st_mtime_ns


def shipped_table(value: str) -> Path | None:
    """The shipped copy that a config value `filters/<name>` names, or None (another value, or no such file)."""
    if not value.startswith(SHIPPED_PREFIX):
        return None
    path = filters_dir() / value.removeprefix(SHIPPED_PREFIX)
    return path if path.exists() else None

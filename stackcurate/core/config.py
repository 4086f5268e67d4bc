"""Stage configs: frozen dataclasses that YAML blocks and CLI flags both map onto.

A config field is declared with :func:`option`, which carries its one-line help and whether it names a
path. The same dataclass then gives the CLI flags (:func:`add_flags`), loads a YAML block
(:func:`build_config`, which rejects unknown keys with a suggestion) and is saved next to the output
(:func:`to_dict`).
"""

import argparse
import dataclasses
import difflib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from stackcurate.core.errors import StackcurateError
from stackcurate.core.paths import shipped_table

C = TypeVar("C")


def option(
    default: Any,
    help: str,  # noqa: A002
    *,
    path: bool = False,
    keywords: tuple[str, ...] = (),
    output: bool = True,
    resolve: Callable[[Any, Path | None], Any] | None = None,
) -> Any:
    """Declare a config field with its help text; `path=True` resolves it against the YAML's folder (the working
    directory for a flag), except the values in `keywords` (`auto`, `none`: choices, not files); a relative
    `filters/<name>` that does not exist there is the table shipped with stackcurate. `output=False` marks a
    setting of how to run (threads, retries, a scratch folder) that never changes the output: a rerun may change
    it and resume. `resolve(value, base_dir)` checks a value that holds settings of its own and resolves their
    paths (ingest's `sources`: each source's settings), in place of `path`."""
    metadata = {"help": help, "path": path, "keywords": keywords, "output": output, "resolve": resolve}
    return dataclasses.field(default=default, metadata=metadata)


def output_settings(cfg: Any) -> dict[str, Any]:
    """The fields of a config that decide its output (:func:`to_dict` less the `output=False` ones): what a
    plan fingerprint holds."""
    ignored = {f.name for f in dataclasses.fields(cfg) if not f.metadata.get("output", True)}
    return {k: v for k, v in to_dict(cfg).items() if k not in ignored}


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _is_uri(value: str) -> bool:
    return "://" in value


def _resolve_path(value: str, base_dir: Path | None) -> str:
    if _is_uri(value) or Path(value).is_absolute():
        return value
    resolved = value if base_dir is None else str((base_dir / value).resolve())
    # `filters/<name>` that is not there names the table shipped with stackcurate: an installed package's YAML
    # has no filters/ folder beside it.
    shipped = None if Path(resolved).exists() else shipped_table(value)
    return str(shipped) if shipped else resolved


def _coerce(name: str, tp: Any, value: Any) -> Any:
    inner, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise StackcurateError(f"config key '{name}' may not be null")
    origin = typing.get_origin(inner)
    if origin is tuple:
        item_type = typing.get_args(inner)[0]
        if isinstance(value, dict):  # a YAML mapping for KEY=VALUE pairs, e.g. filter overrides
            value = [f"{k}={'null' if v is None else v}" for k, v in value.items()]
        items = [value] if isinstance(value, str | int | float) else list(value)
        return tuple(_coerce(name, item_type, v) for v in items)
    if inner is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "yes", "no", "1", "0"}:
            return value.lower() in {"true", "yes", "1"}
        raise StackcurateError(f"config key '{name}' must be true or false, got {value!r}")
    if inner in (int, float, str):
        try:
            number = value
            if inner is int and isinstance(value, str) and value.replace("_", "").replace(".", "").isdigit():
                number = float(value)  # "1_000", "2000.0" ("1.2.3" is no number: a one-line error)
            if inner is int and isinstance(number, float) and not number.is_integer():
                raise ValueError(number)  # 2.5 is not an int: never cut it down to 2
            return inner(number)
        except (TypeError, ValueError):
            raise StackcurateError(f"config key '{name}' must be {inner.__name__}, got {value!r}") from None
    return value


def _resolve_field(f: dataclasses.Field, value: Any, base_dir: Path | None) -> Any:
    """`value` of field `f` with its path(s) resolved against `base_dir` (unless it is one of the keywords)."""
    if (resolve := f.metadata.get("resolve")) is not None:
        return resolve(value, base_dir)
    if not f.metadata.get("path") or value is None:
        return value
    keywords = f.metadata.get("keywords", ())
    items = value if isinstance(value, list | tuple) else [value]
    resolved = [v if not isinstance(v, str) or v in keywords else _resolve_path(v, base_dir) for v in items]
    return type(value)(resolved) if isinstance(value, list | tuple) else resolved[0]


def resolve_paths(cls: type, values: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """`values` with the path fields of `cls` resolved against `base_dir` (a config file's folder), before
    they are merged with values from elsewhere; checking is :func:`build_config`'s."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return {k: _resolve_field(fields[k], v, base_dir) if k in fields else v for k, v in values.items()}


def build_config(cls: type[C], values: dict[str, Any] | None, *, base_dir: Path | None = None) -> C:
    """Build `cls` from a mapping, checking keys and types; path fields resolve against `base_dir`."""
    values = dict(values or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    unknown = [k for k in values if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, fields, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f"; valid keys: {', '.join(fields)}"
        raise StackcurateError(f"unknown {cls.__name__} key '{key}'{hint}")
    kwargs = {}
    for name, value in values.items():
        kwargs[name] = _resolve_field(fields[name], _coerce(name, hints[name], value), base_dir)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise StackcurateError(f"invalid {cls.__name__}: {exc}") from None


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain mapping of a config, tuples as lists, for YAML and hashing."""
    out = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def dump_yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _default_text(value: Any) -> str | None:
    """A default as `--help` shows it; None when there is nothing to show (unset, empty)."""
    if value is None or value == "" or value == ():
        return None
    if isinstance(value, tuple | list):
        return " ".join(str(v) for v in value)
    return str(value)


def add_flags(parser: argparse.ArgumentParser, cls: type, title: str | None = None) -> None:
    """Add one `--flag` per field of `cls`, under `title` in the help; unset flags stay absent so YAML values are
    kept. The help ends with the default, unless the field's help already says it or there is none (an unset or
    empty value)."""
    group = parser.add_argument_group(title or f"{cls.__name__} options")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        inner, _ = _unwrap_optional(hints[f.name])
        help_text = f.metadata.get("help", "")
        default = _default_text(f.default if f.default is not dataclasses.MISSING else None)
        if default is not None and "default" not in help_text:
            help_text = f"{help_text} (default: {default})"
        if inner is bool:
            group.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text
            )
        elif typing.get_origin(inner) is tuple:
            group.add_argument(flag, dest=f.name, nargs="+", default=argparse.SUPPRESS, help=help_text)
        else:
            group.add_argument(flag, dest=f.name, default=argparse.SUPPRESS, help=help_text)


def flag_values(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of `cls` that were given on the command line."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in vars(args).items() if k in names}


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise StackcurateError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise StackcurateError(f"{path}{where} is not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise StackcurateError(f"{path} must hold a mapping at the top level")
    return data

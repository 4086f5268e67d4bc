"""Ingest's sources: one class per kind of input, each in a file of its own, behind one protocol (base.Source).

BUILT_IN lists the sources of stackcurate in plan order. Those read from ingest's own settings (`metadata`,
`bundles`, `repos`, `history`, `gharchive`) always run, and their shards come in this order: The Stack v2
metadata row ranges, vault bundles, local repositories, their commits, GH Archive's threads. Ingest's `sources`
setting adds sources with settings of their own after them, each named by its `name` (one listed here) or
`module:Class` (one from outside), with its settings (docs/sources.md).
"""

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcurate.core.config import build_config, to_dict
from stackcurate.core.errors import StackcurateError
from stackcurate.sources.base import Source
from stackcurate.sources.gharchive import GHArchive
from stackcurate.sources.git_history import GitHistory
from stackcurate.sources.local_repo import LocalRepo
from stackcurate.sources.stack_v2 import StackV2
from stackcurate.sources.vault_flat import VaultFlat
from stackcurate.sources.vault_git_bare import VaultGitBare

if TYPE_CHECKING:
    from stackcurate.stages.ingest import IngestConfig

BUILT_IN: tuple[type[Source], ...] = (StackV2, VaultFlat, VaultGitBare, LocalRepo, GitHistory, GHArchive)


def load(spec: str) -> type[Source]:
    """The source class that `spec` names: the `name` of a source of BUILT_IN with settings of its own, or
    `module:Class`, whose module must be importable (installed, or on PYTHONPATH, wherever the stage runs: on
    every Ray worker too)."""
    named = {cls.name: cls for cls in BUILT_IN if cls.config is not None}
    if spec in named:
        return named[spec]
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        known = f"{', '.join(named)} or " if named else ""
        raise StackcurateError(f"source {spec!r}: expected {known}module:Class, e.g. zip_source:ZipArchives")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StackcurateError(f"source {spec}: cannot import {module_name} ({exc}); is it on PYTHONPATH?") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Source)):
        raise StackcurateError(f"source {spec} is not a subclass of stackcurate.sources.base.Source")
    return cls


def _entry(entry: Any) -> tuple[str, dict[str, Any]]:
    """(`module:Class`, settings) of one entry of ingest's `sources`: `module:Class`, or a mapping of it to
    its settings."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and len(entry) == 1:
        ((name, values),) = entry.items()
        if isinstance(values, dict | None):
            return str(name), dict(values or {})
    raise StackcurateError(f"ingest sources: {entry!r} is neither module:Class nor a mapping module:Class: {{...}}")


def _settings(cls: type[Source], name: str, values: dict[str, Any], base_dir: Path | None) -> Any:
    if cls.config is None:
        if values:
            raise StackcurateError(f"source {name} takes no settings, got {', '.join(values)}")
        return None
    return build_config(cls.config, values, base_dir=base_dir)


def resolve(entries: tuple[Any, ...], base_dir: Path | None) -> tuple[Any, ...]:
    """Ingest's `sources` as a config holds it: each entry checked (its class loads, its settings build) and
    written out in full, `{module:Class: every setting}` with paths resolved against `base_dir`, or
    `module:Class` alone for a source without settings. What `_config.yaml` and the plan fingerprint record."""
    resolved: list[Any] = []
    for entry in entries:
        name, values = _entry(entry)
        settings = _settings(load(name), name, values, base_dir)
        resolved.append(name if settings is None else {name: to_dict(settings)})
    return tuple(resolved)


def build(cfg: "IngestConfig") -> list[Source]:
    """The sources of an ingest run, in plan order: the built-in ones read from ingest's own settings, then
    those `cfg.sources` names."""
    found: list[Source] = [cls(cfg) for cls in BUILT_IN if cls.config is None]
    for entry in cfg.sources:
        name, values = _entry(entry)
        cls = load(name)
        found.append(cls(cfg, _settings(cls, name, values, None)))
    taken: dict[str, Source] = {}
    for source in found:
        if (other := taken.setdefault(source.name, source)) is not source:
            raise StackcurateError(
                f"two ingest sources are named {source.name!r} ({type(other).__name__} and "
                f"{type(source).__name__}): a source's name is the kind of its shards, and must be its own"
            )
    return found

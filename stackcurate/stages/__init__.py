"""The built-in stages, in pipeline order. Each stage is one class that declares itself (core/contract.py);
a pipeline YAML may also name a stage from outside the package as `module:Class`."""

import importlib

from stackcurate.core.contract import Stage
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import run_stages

# Imported when asked for, not here: `stackcurate --help` and a stage's own command load only what they use.
BUILTIN = {
    "graph": "stackcurate.stages.graph:GraphStage",
    "ingest": "stackcurate.stages.ingest:IngestStage",
    "license": "stackcurate.stages.license:LicenseStage",
    "language": "stackcurate.stages.language:LanguageStage",
    "filter": "stackcurate.stages.filter:FilterStage",
    "decontaminate": "stackcurate.stages.decontaminate:DecontaminateStage",
    "dedup": "stackcurate.stages.dedup:DedupStage",
    "pii": "stackcurate.stages.pii:PiiStage",
    "format": "stackcurate.stages.format:FormatStage",
    "tokenize": "stackcurate.stages.tokenize:TokenizeStage",
    "index": "stackcurate.stages.index:IndexStage",
}
STAGE_ORDER = tuple(BUILTIN)


def get_stage(name: str) -> type[Stage]:
    """A built-in stage by its name, or any stage class named `module:Class`."""
    if ":" in name:
        cls = load_stage_class(name)
        if cls.name in BUILTIN:
            raise StackcurateError(f"{name} is named '{cls.name}', the name of a built-in stage; give it another name")
        return cls
    if name not in BUILTIN:
        raise StackcurateError(f"unknown stage '{name}'; stages: {', '.join(STAGE_ORDER)}, or module:Class")
    return load_stage_class(BUILTIN[name])


def stage_order(out: str) -> tuple[str, ...]:
    """The stages of a run folder in pipeline order: the last `stackcurate run`'s (a stage of one's own among
    them), then the built-in stages it did not list."""
    listed = run_stages(out) or []
    return (*listed, *(name for name in STAGE_ORDER if name not in listed))


def stage_key(cls: type[Stage]) -> str:
    """How a pipeline YAML names the stage: a built-in stage by its name, any other as `module:Class`."""
    ref = f"{cls.__module__}:{cls.__qualname__}"
    return cls.name if BUILTIN.get(cls.name) == ref else ref


def load_stage_class(ref: str) -> type[Stage]:
    """The stage class `module:Class`; a one-line error when it cannot be imported or is not a stage."""
    module_name, _, attribute = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StackcurateError(
            f"cannot import {module_name} for the stage {ref}: {exc}; install it, or put its folder on PYTHONPATH"
        ) from None
    cls = getattr(module, attribute, None)
    if not (isinstance(cls, type) and issubclass(cls, Stage)):
        raise StackcurateError(f"{ref} is not a stage: expected a subclass of stackcurate.core.contract.Stage")
    missing = [a for a in ("name", "config") if not hasattr(cls, a)]
    if missing:
        raise StackcurateError(f"the stage {ref} does not declare its {' and '.join(missing)}")
    return cls

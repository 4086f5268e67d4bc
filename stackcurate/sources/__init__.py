"""Ingest's sources: one class per kind of input, each in a file of its own, behind one protocol (base.Source).

BUILT_IN lists the sources of stackcurate in plan order: their shards come in this order, The Stack v2
metadata row ranges, vault bundles, local repositories.
"""

from typing import TYPE_CHECKING

from stackcurate.sources.base import Source
from stackcurate.sources.local_repo import LocalRepo
from stackcurate.sources.stack_v2 import StackV2
from stackcurate.sources.vault_flat import VaultFlat
from stackcurate.sources.vault_git_bare import VaultGitBare

if TYPE_CHECKING:
    from stackcurate.stages.ingest import IngestConfig

BUILT_IN: tuple[type[Source], ...] = (StackV2, VaultFlat, VaultGitBare, LocalRepo)


def build(cfg: "IngestConfig") -> list[Source]:
    """The sources of an ingest run, in plan order."""
    return [cls(cfg) for cls in BUILT_IN]

"""The backend of each target kind."""
from __future__ import annotations

from types import ModuleType

from openprim.base.target import Target

from .cpu import compiler as cpu
from .nvvm import compiler as nvvm
from .rocdl import compiler as rocdl

BACKENDS: dict[str, ModuleType] = {"cpu": cpu, "nvvm": nvvm, "rocdl": rocdl}


def for_target(target: Target) -> ModuleType:
    return BACKENDS[target.kind]

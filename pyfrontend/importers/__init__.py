"""Importers by file suffix: `load(path, **options)` imports a model file with the importer registered for
its suffix. The `openprim` commands load their models through it.

    from openprim.pyfrontend import importers
    graph = importers.load("examples/resnet.py", depth=50)   # options: build()'s keyword arguments
    graph = importers.load("model.onnx", batch_size=8)       # options: input_shapes, dims, named dims
    graph = importers.load("model.pt2")                      # a program saved with torch.export.save
    module = importers.load("model.mlir")                    # a prim module: an mlir.ir.Module

`load` returns what `openprim.compile` and `openprim.compiler.save` take: a Graph, or, from an importer of
MLIR-level input (pyfrontend/mlir_import/), a prim `ir.Module`, which a Graph (plain data) cannot hold.
This module imports neither MLIR nor an optional package: an importer's module, and the package it needs
(onnx, torch), is imported when a file of its suffix is loaded. `register` adds an importer;
`common.py` holds what the importers decide alike (dtypes, float64, integer data).
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Callable

from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.importers import model_file
from openprim.pyfrontend.importers.common import require


@dataclass(frozen=True)
class Importer:
    suffixes: tuple[str, ...]
    loader: Callable        # loader(path, /, **options) -> Graph | ir.Module
    needs: str | None       # the optional package it needs, also the name of openprim's extra: onnx, torch
    what: str               # the kind of file, for errors: "an ONNX model"


_IMPORTERS: dict[str, Importer] = {}   # suffix -> its importer


def register(suffixes, loader: Callable, needs: str | None = None, what: str = "") -> None:
    """Load files of these suffixes (".onnx") with loader(path, **options). Its keyword parameters are the
    options `load` takes for them (a **kwargs loader takes any); `needs`: an optional package to import
    first (missing: one error saying `pip install 'openprim[needs]'`)."""
    entry = Importer(tuple(suffixes), loader, needs, what)
    taken = sorted(set(entry.suffixes) & set(_IMPORTERS))
    if taken:
        raise ValueError(f"suffixes {taken} already have an importer")
    _IMPORTERS.update(dict.fromkeys(entry.suffixes, entry))


def suffixes() -> list[str]:
    """The registered suffixes, in registration order."""
    return list(_IMPORTERS)


def _kinds() -> str:
    return ", ".join(f"{suffix} ({entry.what})" for suffix, entry in _IMPORTERS.items())


def load(path, /, **options):
    """The Graph (or prim ir.Module) of a model file, by the importer of its suffix; options go to it.
    A missing file, an unknown suffix or an option the importer does not take is one OpenPrimError."""
    path = os.fspath(path)
    if "\0" in path or not os.path.exists(path):
        raise OpenPrimError(f"{path!r}: no such file")
    if os.path.isdir(path):
        raise OpenPrimError(f"{path}: is a directory; expected a model file: {_kinds()}")
    entry = _IMPORTERS.get(os.path.splitext(path)[1])
    if entry is None:
        raise OpenPrimError(f"{path}: unknown kind of file; expected {_kinds()}")
    params = inspect.signature(entry.loader).parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        takes = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = sorted(set(options) - set(takes))
        if unknown:
            raise OpenPrimError(f"{path}: {entry.what} takes no option {', '.join(unknown)}; "
                                + (f"its options: {', '.join(takes)}" if takes else "it has none"))
    if entry.needs:
        require(entry.needs, f"importing {path}")
    return entry.loader(path, **options)


# The loaders below import their importer when called: onnx, torch and MLIR only for their own files.
def _onnx(path, /, input_shapes=None, dims=None, **named):
    """named: sizes of named dimensions as options of their own (`-D batch_size=8`), added to dims."""
    from openprim.pyfrontend.onnx import import_model
    return import_model(path, input_shapes, {**(dims or {}), **named})


def _pt2(path, /):
    from openprim.pyfrontend.torch import import_file
    return import_file(path)


def _prim_mlir(path, /):
    from openprim.pyfrontend.mlir_import import prim
    return prim.load(path)


register((".py",), model_file.load, what="a Python model file defining build()")
register((".onnx",), _onnx, needs="onnx", what="an ONNX model")
register((".pt2",), _pt2, needs="torch", what="a program saved with torch.export.save")
register((".mlir",), _prim_mlir, what="a prim-dialect module")

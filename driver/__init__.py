"""OpenPrim: a compiler for deep-learning primitives on MLIR.

    import openprim as op
    g = op.Graph()
    x = g.input("x", (1, 3, 32, 32))
    y = g.relu(g.conv2d(x, g.param("w", w), padding=1))
    g.output(y)
    run = op.compile(g, target="cpu")
    out = run(x_array)

Attributes are imported lazily so that `openprim.runtime` stays importable without MLIR.
"""
from openprim.base import __version__  # noqa: F401 - the package version

_LAZY = {"Graph": "openprim.pyfrontend", "compile": "openprim.api", "OpenPrimError": "openprim.base.errors"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)

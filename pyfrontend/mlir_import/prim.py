"""`.mlir` files holding a prim-dialect module (what `openprim-opt` reads and `openprim emit` writes, with
its weights in a .weights.npz next to it): parsed and verified, they compile as they are."""
from __future__ import annotations

from mlir import ir

from openprim import dialect
from openprim.base.errors import OpenPrimError


def load(path, /) -> ir.Module:
    """The prim module of a `.mlir` file, verified (prim's shape rules too), with one graph function, its
    out-of-line weights read from the .weights.npz next to it (`openprim emit`). Errors in the text name it
    as `file:line:col: error: ...`."""
    module = dialect.parse(dialect.read_text(path), str(path), dialect.new_context())
    dialect.load_weights(module, path)
    dialect.verify(module)
    found = len(dialect.graph_functions(module.operation))
    if found != 1:
        raise OpenPrimError(f"{path}: holds {found} graph functions (public func.func definitions); a model "
                            "is exactly one")
    return module

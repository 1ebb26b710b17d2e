"""The Python frontend: `Graph` builds a network, `to_module` turns it into a `prim` MLIR module.

Building a Graph is plain Python and numpy: `Graph`/`Tensor` (and the importers, `onnx` and `torch`,
and their registry by file suffix, `importers`) import neither MLIR nor the compiler driver. Only emission
(`emit.py`) and the importers of MLIR-level input (`mlir_import`, a declared room) need MLIR, so
`to_module` imports emit lazily, on first call; keep it that way. What compiles (`openprim.compile`,
`openprim.torch_backend`, `openprim.onnx_backend`) is in the driver layer, `openprim`.
"""
from .graph import Graph, Tensor
from .precision import with_precision

__all__ = ["Graph", "Tensor", "to_module", "with_precision"]


def to_module(graph, ctx=None):
    from .emit import to_module as _to_module
    return _to_module(graph, ctx)

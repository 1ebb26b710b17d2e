"""The Python frontend: `Graph` builds a network, `to_module` turns it into a `prim` MLIR module."""
from .graph import Graph, Tensor

__all__ = ["Graph", "Tensor", "to_module"]


def to_module(graph, ctx=None):
    from .emit import to_module as _to_module
    return _to_module(graph, ctx)

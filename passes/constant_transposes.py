"""Transposes of constants folded at compile time: prim-fuse's first rewrite.

Models re-lay weights out in the graph (a Linear's weight transposed, a Transpose on an ONNX initializer).
transpose(constant) becomes the permuted constant (rewrite.transpose folds it), so the rewrites after it
see constants: the weights that batch norms and channel scales fold into, the per-channel biases.
"""
from __future__ import annotations

from mlir import ir

from openprim import dialect

from .rewrite import producer, transpose


def fold_constant_transposes(fn) -> None:
    """transpose(constant) -> constant (e.g. weights re-laid out in the model), so the later rewrites
    see constants."""
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name == "prim.transpose" and producer(op.operands[0], "prim.constant") is not None:
            with ir.InsertionPoint(op), op.location:
                op.result.replace_all_uses_with(transpose(op.operands[0], dialect.op_attrs(op)["perm"], op.location))
            op.erase()

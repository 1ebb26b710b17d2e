"""A residual add folded into the layer_norm/rms_norm after it: prim-fuse's rewrite of the norms.

layer_norm/rms_norm(add(x, r)) with x and r of the norm's shape becomes the norm with operand
residual = r: one row kernel reads x + r (kernels/gpu/rows.py, kernels/cpu/rows.py) and the sum never goes
through memory. Only while the add has no other use: an op has one result here, so a pre-LN block's sum
that is also the next residual stays an add (there it is usually a GEMM's residual epilogue, which
prim-fuse folds first, in program order).
"""
from __future__ import annotations

from mlir import ir

from openprim import dialect

from .rewrite import producer, rebuild, single_use

NORMS = ("prim.layer_norm", "prim.rms_norm")


def fuse_norm_residual(norm: ir.Operation) -> bool:
    """Fold the add producing a layer_norm/rms_norm's input into the norm as its residual operand."""
    groups = dialect.operand_groups(norm)
    add = producer(groups[0], "prim.add")
    if add is None or groups[-1] is not None or not single_use(groups[0]):
        return False
    shape = tuple(norm.result.type.shape)
    if any(tuple(v.type.shape) != shape for v in add.operands):
        return False
    with ir.InsertionPoint(norm):
        fused = rebuild(norm, [add.operands[0], *groups[1:-1], add.operands[1]], {}, norm.location)
    norm.result.replace_all_uses_with(fused.result)
    norm.erase()
    add.erase()
    return True

"""x + 0, 0 + x, x - 0, x * 1, 1 * x and x / 1 are x: prim-fuse's rewrite of the binary arithmetic ops.

Python sums written from zero leave such ops in an export: timm's MobileOne starts its branch sum from the
integer 0 (`out = scale_out + identity_out` with both absent, then `out += conv(x)` per branch), which
torch.export keeps as add(bn(conv(x)), 0). Each was an elementwise pass over the map, and it hid the branch
sum from conv_branches.py. The constant must be all zeros (ones) and the result x's own type: a constant
that broadcasts x to a larger shape or another dtype stays an op. (x + 0 is x but for a -0.0,
which it makes +0.0.)
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from .rewrite import constant

NEUTRAL = {"prim.add": (0.0, (0, 1)), "prim.sub": (0.0, (1,)), "prim.mul": (1.0, (0, 1)), "prim.div": (1.0, (1,))}


def drop_neutral_operand(op: ir.Operation) -> bool:
    """Replace op by its other operand where one is the op's neutral constant (module docstring); whether
    it did."""
    value, sides = NEUTRAL[op.name]
    for side in sides:
        other = op.operands[1 - side]
        c = constant(op.operands[side])
        if c is not None and other.type == op.result.type and np.all(c == value):
            op.result.replace_all_uses_with(other)
            op.erase()
            return True
    return False

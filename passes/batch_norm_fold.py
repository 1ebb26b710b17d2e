"""A batch norm folded into the convolution before it: prim-fuse's rewrite of prim.batch_norm.

batch_norm(conv2d(x, W, b)) with constant W, b and constant batch-norm parameters, the convolution's
result used only there, without an activation or residual and in the batch norm's layout, becomes

    conv2d(x, W', b'):   s = scale / sqrt(var + eps);   W'[k] = W[k] * s[k];   b' = (b - mean) * s + shift

(a missing bias is 0), so inference pays nothing for the batch norm.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect

from .rewrite import constant, new_constant, producer, rebuild, single_use


def fold_batch_norm(bn: ir.Operation) -> bool:
    """Fold one batch norm (module docstring); whether it did."""
    conv = producer(bn.operands[0], "prim.conv2d")
    if conv is None or not single_use(bn.operands[0]):
        return False
    ca, ba = dialect.op_attrs(conv), dialect.op_attrs(bn)
    x, w, bias, residual = dialect.operand_groups(conv)
    if ca["activation"] != "none" or residual is not None or ca["layout"] != ba["layout"]:
        return False
    scale, shift, mean, var = (constant(v) for v in bn.operands[1:])
    wd = constant(w)
    bd = constant(bias) if bias is not None else np.zeros(bn.operands[1].type.shape[0])
    if any(a is None for a in (scale, shift, mean, var, wd, bd)):
        return False
    s = scale / np.sqrt(var + ba["epsilon"])
    k_axis = 3 if ca["filter_layout"] == "RSCK" else 0  # the filter's output-channel axis
    with ir.InsertionPoint(bn), bn.location:
        new_w = new_constant(wd * np.expand_dims(s, [a for a in range(4) if a != k_axis]), w, bn.location)
        new_b = new_constant((bd - mean) * s + shift, bn.operands[1], bn.location)
        fused = rebuild(conv, [x, new_w, new_b, None], {}, conv.location)
    bn.result.replace_all_uses_with(fused.result)
    bn.erase()
    conv.erase()
    return True

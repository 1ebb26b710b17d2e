"""A constant channel scale after a conv2d/matmul folded into its weights: prim-fuse's rewrite of prim.mul.

mul(c, conv2d/matmul(x, W, b)), with W and b constant, no activation or residual yet, and c a constant
per output channel (ConvNeXt's layer scale, seen through the permute back to NCHW) or a scalar
(attention's scale on q, through the head split), becomes conv2d/matmul(x, W * c, b * c). The scale
costs nothing, and the residual add after it can then become the GEMM's epilogue (epilogues.py, whose
helpers find the GEMM through the views between).
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect

from .epilogues import channel_axis, per_channel, replace_through_views, through_views, view_axis
from .rewrite import constant, new_constant


def fold_channel_scale(mul: ir.Operation) -> bool:
    """mul(c, conv2d/matmul(x, W, b)) with c a per-output-channel constant (ConvNeXt's layer scale, seen
    through the permute back to NCHW) or a scalar (attention's scale on q, through the head split) and
    constant W, b -> conv2d/matmul(x, W * c, b * c): the scale costs nothing, and the residual add after
    it can become the GEMM's epilogue."""
    for i, v in enumerate(mul.operands):
        prod, views = through_views(v)
        c = constant(mul.operands[1 - i])
        if prod is None or c is None or tuple(mul.result.type.shape) != tuple(v.type.shape):
            continue
        attrs = dialect.op_attrs(prod)
        x, w, bias, residual = dialect.operand_groups(prod)
        if c.size == 1:   # a scalar scales every channel alike, whatever views split the channel axis
            vec = np.full(prod.result.type.shape[channel_axis(prod)], float(c.reshape(())))
        else:
            axis = view_axis(views, channel_axis(prod))
            vec = None if axis is None else per_channel(c, v.type.shape, axis)
        wd = constant(w)
        bd = None if bias is None else constant(bias)
        if vec is None or wd is None or (bias is not None and bd is None) or attrs["activation"] != "none" \
                or residual is not None:
            continue
        if prod.name == "prim.conv2d":
            k_axis = 3 if attrs["filter_layout"] == "RSCK" else 0
        else:
            k_axis = wd.ndim - 2 if attrs["transpose_rhs"] else wd.ndim - 1
        shape = [1] * wd.ndim
        shape[k_axis] = vec.size
        with ir.InsertionPoint(mul), mul.location:
            new_w = new_constant(wd * vec.reshape(shape), w, mul.location)
            new_b = None if bias is None else new_constant(bd * vec, bias, mul.location)
        replace_through_views(mul, prod, views, [x, new_w, new_b, None], {})
        return True
    return False

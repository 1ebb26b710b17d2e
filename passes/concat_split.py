"""1x1 convolutions over a channel concat, split into one convolution per concat input.

SqueezeNet's fire modules concatenate two expand convolutions (64 + 64 channels up to 256 + 256) and the
next squeeze convolution reduces the concat to 16-64 channels. Run as written, the concat copies both
inputs into a new tensor (13% of SqueezeNet's CPU time at batch 8) that the squeeze then reads again. A
1x1, stride-1, unpadded, ungrouped convolution is linear in its input channels, so with W split along
them like the concat, W = [W_1 | ... | W_n]:

    conv(concat(a_1, ..., a_n), W, b, z, act)  =  act(conv(a_n, W_n) + ... + conv(a_1, W_1) + b + z)
    y_1 = conv(a_1, W_1, b, z)                   (the original residual z, if any, on the first one)
    y_i = conv(a_i, W_i, residual = y_(i-1))     i = 2 .. n, the activation on the last one only

Each partial sum has the output's K channels instead of the concat's; the rewrite applies only where
K is below the concat's channel count (the squeeze layers, not SqueezeNet's 512 -> 1000 classifier),
the concat (a chain of binary concats along the channel axis) has no other use and W is constant. A max
pool between the concat and the convolution (fire 3 and 5 -> max pool -> fire 4 and 6) acts channel by
channel, so it moves onto each input first. The partial sums are rounded to the element type (f16/bf16
on GPUs) before the next convolution adds them, like any residual.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.ops import FILTER_LAYOUTS, filter_dims

from .rewrite import constant, create, new_constant, producer, single_use


def _concat_leaves(v: ir.Value, axis: int) -> tuple[list[ir.Value], list[ir.Operation]] | None:
    """The inputs of the chain of binary concats along `axis` that produces v (used once), in order, and
    the chain's ops; None when v is not such a concat."""
    op = producer(v, "prim.concat")
    if op is None or not single_use(v) or dialect.op_attrs(op)["axis"] % len(v.type.shape) != axis:
        return None
    leaves, ops = [], [op]
    for operand in op.operands:
        inner = _concat_leaves(operand, axis)
        if inner is None:
            leaves.append(operand)
        else:
            leaves += inner[0]
            ops += inner[1]
    return leaves, ops


def split_over_concat(conv: ir.Operation) -> bool:
    """Rewrite one convolution (module docstring); whether it did."""
    a = dialect.op_attrs(conv)
    x, w, bias, residual = dialect.operand_groups(conv)
    layout = a["filter_layout"]
    if layout not in FILTER_LAYOUTS or a["groups"] != 1 or any(a["padding"]) or list(a["strides"]) != [1, 1]:
        return False
    K, C, R, S = filter_dims(layout, list(w.type.shape))
    wd = constant(w)
    if wd is None or R * S != 1 or K >= C:
        return False
    axis = 1 if a["layout"] == "NCHW" else 3
    pool = producer(x, "prim.max_pool2d") if single_use(x) else None
    found = _concat_leaves(pool.operands[0] if pool is not None else x, axis)
    if found is None:
        return False
    leaves, chain = found
    c_axis = layout.index("C")
    loc = conv.location
    with ir.InsertionPoint(conv), loc:
        y, start = None, 0
        for i, leaf in enumerate(leaves):
            if pool is not None:
                pooled = list(x.type.shape)
                pooled[axis] = leaf.type.shape[axis]
                leaf = create("max_pool2d", [leaf], pooled, leaf, dialect.op_attrs(pool), loc)
            width = leaf.type.shape[axis]
            part = new_constant(np.take(wd, range(start, start + width), axis=c_axis), w, loc)
            start += width
            last = i == len(leaves) - 1
            y = create("conv2d", [leaf, part, bias if i == 0 else None, residual if i == 0 else y],
                       conv.result.type.shape, x,
                       {**a, "activation": a["activation"] if last else "none",
                        "activation_params": a["activation_params"] if last else []}, loc)
    conv.result.replace_all_uses_with(y)
    conv.erase()
    if pool is not None:
        pool.erase()
    for op in chain:
        op.erase()
    return True


def split_convolutions_over_concats(fn) -> bool:
    """split_over_concat over the convolutions of graph function fn; whether any changed."""
    ops = [o.operation for o in fn.regions[0].blocks[0].operations if o.operation.name == "prim.conv2d"]
    return any([split_over_concat(op) for op in ops])

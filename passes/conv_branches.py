"""Parallel convolution branches summed into one convolution: prim-fuse's rewrite of prim.add.

Re-parameterizable networks (RepVGG, MobileOne, FastViT, their timm and torchvision forms in eval mode)
train with several branches over the same input and add them:

    y = conv_kxk(x) + conv_1x1(x) + bn(x)            RepVGG (each conv with its batch norm, folded before)
    y = sum_i conv_kxk_i(x) + conv_1x1(x) + bn(x)    MobileOne (depthwise or dense, several kxk branches)

A convolution is linear in its filter, so the branches are one convolution whose filter is the sum of
theirs, each smaller kernel placed at its offset in the largest window, and whose bias is the sum of
their biases. bn(x) is a convolution too where the output has x's channels: in each output channel k,
s = scale / sqrt(var + eps) at input channel k's place in its group, on the centre tap, with bias
shift - mean s. One convolution instead of two to five, and the adds and the batch norm gone: what
`reparameterize()` does in those models, without the user calling it. (x itself is not taken as a branch:
conv(x) + x stays the convolution's residual, which costs one read of x, where a 1 added to the centre tap
of an f16 filter would round away the tap's own low bits.)

add(a, b) merges when each side is such a branch of the same x, used only by this add: a prim.conv2d with
a constant filter and bias, no residual, no activation; or a prim.batch_norm with constant parameters.
The convolutions must agree in layout, strides, dilations and groups, and their windows must line up: with
T the largest top padding, branch i (kernel R_i, top padding t_i) sits at row offset T - t_i of a window of
R = max(T - t_i + R_i) rows, and needs bottom padding b_i + R - R_i - (T - t_i), the same for every branch
(likewise for the columns). A sum of three or more branches merges pairwise, add by add.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect

from .rewrite import constant, filter_perm, new_constant, producer, rebuild, single_use


def merge_conv_branches(add: ir.Operation) -> bool:
    """Merge add(a, b) into one convolution (module docstring); whether it did. The constants are read only
    once the two sides are a convolution and a convolution or batch norm of one input."""
    if not add.operands[0].type == add.operands[1].type == add.result.type:
        return False
    ops = [producer(v) for v in add.operands]
    if any(op is None or op.name not in BRANCH_OPS or not single_use(op.result) for op in ops) or \
            ops[0].operands[0] != ops[1].operands[0] or "prim.conv2d" not in (ops[0].name, ops[1].name):
        return False
    a, b = (BRANCH_OPS[op.name](op) for op in ops)
    return a is not None and b is not None and _merge(add, a, b)


def _conv_branch(conv: ir.Operation) -> dict | None:
    attrs = dialect.op_attrs(conv)
    x, w, bias, residual = dialect.operand_groups(conv)
    wd = constant(w)
    bd = constant(bias) if bias is not None else 0.0
    if attrs["activation"] != "none" or residual is not None or wd is None or bd is None:
        return None
    return {"kind": "conv", "op": conv, "x": x, "attrs": attrs, "bias": bd,
            "filter": wd.transpose(filter_perm(attrs["filter_layout"], "KCRS"))}


def _norm_branch(bn: ir.Operation) -> dict | None:
    scale, shift, mean, var = (constant(v) for v in bn.operands[1:])
    if any(p is None for p in (scale, shift, mean, var)):
        return None
    attrs = dialect.op_attrs(bn)
    s = scale / np.sqrt(var + attrs["epsilon"])
    return {"kind": "norm", "op": bn, "x": bn.operands[0], "layout": attrs["layout"], "scale": s,
            "bias": shift - mean * s}


def _kcrs(branch: dict, conv: dict, channels: int) -> tuple[np.ndarray, list[int]] | None:
    """The branch's filter [K, C/groups, R, S] and padding in `conv`'s terms (a batch norm: a 1x1 filter of
    the channels' scales), or None where it is not such a convolution."""
    attrs = conv["attrs"]
    if branch["kind"] == "conv":
        other = branch["attrs"]
        same = ("layout", "strides", "dilations", "groups")
        return (branch["filter"], list(other["padding"])) if all(other[k] == attrs[k] for k in same) else None
    if branch["layout"] != attrs["layout"] or list(attrs["strides"]) != [1, 1]:
        return None
    per_group = channels // attrs["groups"]
    w = np.zeros((channels, per_group, 1, 1))
    w[np.arange(channels), np.arange(channels) % per_group, 0, 0] = branch["scale"]
    return w, [0, 0, 0, 0]


def _window(filters: list[np.ndarray], pads: list[list[int]], dilation: int, axis: int) -> tuple | None:
    """Along one spatial axis (0: rows, 1: columns): (each filter's tap offset, taps, before, after), the
    merged window and its padding, or None where the windows do not line up on the dilation's grid."""
    before = max(p[axis] for p in pads)
    if any((before - p[axis]) % dilation for p in pads):
        return None
    offsets = [(before - p[axis]) // dilation for p in pads]
    taps = max(o + f.shape[2 + axis] for o, f in zip(offsets, filters))
    after = {p[2 + axis] + (taps - f.shape[2 + axis] - o) * dilation for o, f, p in zip(offsets, filters, pads)}
    return (offsets, taps, before, after.pop()) if len(after) == 1 else None


BRANCH_OPS = {"prim.conv2d": _conv_branch, "prim.batch_norm": _norm_branch}


def _merge(add: ir.Operation, a: dict, b: dict) -> bool:
    conv = a if a["kind"] == "conv" else b
    attrs = conv["attrs"]
    channels = add.result.type.shape[1 if attrs["layout"] == "NCHW" else 3]
    parts = [_kcrs(br, conv, channels) for br in (a, b)]
    if None in parts:
        return False
    filters, pads = [f for f, _ in parts], [p for _, p in parts]
    rows, cols = (_window(filters, pads, attrs["dilations"][i], i) for i in (0, 1))
    if rows is None or cols is None:
        return False
    merged = np.zeros(filters[0].shape[:2] + (rows[1], cols[1]))
    for f, r0, s0 in zip(filters, rows[0], cols[0]):
        merged[:, :, r0:r0 + f.shape[2], s0:s0 + f.shape[3]] += f
    bias = np.broadcast_to(a["bias"] + b["bias"], (merged.shape[0],))
    op = conv["op"]
    w = dialect.operand_groups(op)[1]
    with ir.InsertionPoint(add), add.location:
        new_w = new_constant(merged.transpose(filter_perm("KCRS", attrs["filter_layout"])), w, add.location)
        new_b = new_constant(np.ascontiguousarray(bias), w, add.location) if bias.any() else None
        fused = rebuild(op, [conv["x"], new_w, new_b, None], {"padding": [rows[2], cols[2], rows[3], cols[3]]},
                        add.location, result_type=add.result.type)
    add.result.replace_all_uses_with(fused.result)
    add.erase()
    a["op"].erase()
    b["op"].erase()
    return True

"""Epilogues: the adds and activations after a conv2d/matmul folded into it, also through views.

cuDNN's ConvBiasActivation with z, y = act(conv(x) + bias + z), as one op. prim-fuse tries fuse_epilogue on
every add and activation; each folds only while the conv2d/matmul result has no other use:

    add(conv, c)   c a constant per output channel     -> bias
    add(conv, z)   z of the output's shape              -> residual
    act(conv)      an elementwise activation            -> activation (with its parameters)

The result may reach the add or activation through a chain of single-use reshapes and transposes
(through_views: the importers' Linear on a rank-4 input is reshape -> matmul -> reshape, ConvNeXt permutes
its result back to NCHW). The fused op is then rebuilt and the views replayed on its result; an
activation commutes with the views, a channel bias is mapped back to the producer's channel axis
(view_axis), and a residual goes back through the inverse views when their transposes are permutes to
NCHW (those inverse transposes cancel in prim-layout against the ones that lay the NCHW network out in
NHWC). The helpers that see a result through its views serve channel_scale.py too.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.kernels.semantics import unary_activation

from .prim_layout import TO_NCHW  # the permute back to NCHW, which prim-layout cancels against NHWC layers
from .rewrite import constant, new_constant, producer, rebuild, reshape, single_use, transpose

ACTIVATION_OPS = ("relu", "leaky_relu", "clamp", "sigmoid", "tanh", "gelu", "silu", "elu", "hardsigmoid", "hardswish")
EPILOGUE_OPS = ("prim.add",) + tuple(f"prim.{a}" for a in ACTIVATION_OPS)   # the ops fuse_epilogue folds


def channel_axis(op) -> int:
    if op.name == "prim.matmul":
        return len(op.result.type.shape) - 1
    return 1 if dialect.op_attrs(op)["layout"] == "NCHW" else 3


def per_channel(c: np.ndarray, out_shape, axis) -> np.ndarray | None:
    """c as a [K] vector if it broadcasts against out_shape along `axis` only, else None."""
    K = out_shape[axis]
    full = [1] * len(out_shape)
    full[axis] = K
    aligned = (1,) * (len(out_shape) - c.ndim) + tuple(c.shape)
    if len(aligned) != len(out_shape) or any(d not in (1, f) for d, f in zip(aligned, full)):
        return None
    return np.broadcast_to(c.reshape(aligned), full).reshape(K)


def through_views(v: ir.Value):
    """(conv2d/matmul, views) when v is that op's result seen through a chain of reshapes and transposes
    (the importer's Linear on a rank-4 input is reshape -> matmul -> reshape; ConvNeXt permutes its
    result back to NCHW), every value on the way used once; views are outermost last. Else (None, [])."""
    views = []
    while single_use(v):
        prod = producer(v)
        if prod is None:
            break
        if prod.name in ("prim.conv2d", "prim.matmul"):
            return prod, views
        if prod.name not in ("prim.reshape", "prim.transpose"):
            break
        views.insert(0, prod)
        v = prod.operands[0]
    return None, []


def view_axis(views, axis: int) -> int | None:
    """The axis of the last view's result that `axis` of the first view's operand becomes, or None when
    a reshape splits or merges it."""
    for view in views:
        if view.name == "prim.transpose":
            axis = list(dialect.op_attrs(view)["perm"]).index(axis)
            continue
        src, dst = list(view.operands[0].type.shape), list(view.result.type.shape)
        inner = int(np.prod(src[axis + 1:]))
        axis = next((b for b in range(len(dst)) if dst[b] == src[axis] and int(np.prod(dst[b + 1:])) == inner), None)
        if axis is None:
            return None
    return axis


def _replay(v: ir.Value, views, loc) -> ir.Value:
    """v through the same reshapes and transposes as `views`."""
    for view in views:
        v = transpose(v, dialect.op_attrs(view)["perm"], loc) if view.name == "prim.transpose" else \
            reshape(v, view.result.type.shape, loc)
    return v


def _unreplay(v: ir.Value, views, loc) -> ir.Value:
    """v (shaped like the last view's result) taken back through the inverse of `views`."""
    for view in reversed(views):
        if view.name == "prim.transpose":
            perm = list(dialect.op_attrs(view)["perm"])
            v = transpose(v, [perm.index(i) for i in range(len(perm))], loc)
        else:
            v = reshape(v, view.operands[0].type.shape, loc)
    return v


def replace_through_views(op: ir.Operation, prod: ir.Operation, views, operands, attrs) -> None:
    """Replace `op` by prod rebuilt with operands/attrs, seen through `views`; erase op, views and prod."""
    with ir.InsertionPoint(op), op.location:
        fused = rebuild(prod, operands, attrs, prod.location)
        op.result.replace_all_uses_with(_replay(fused.result, views, op.location))
    op.erase()
    for view in reversed(views):
        view.erase()
    prod.erase()


def fuse_epilogue(op: ir.Operation) -> bool:
    """Fold `op` (an add or an activation) into the conv2d/matmul producing its operand, also when that
    result reaches op through reshapes and transposes (an activation commutes with them; a channel bias
    is mapped back to the producer's channel axis). A residual goes back through the inverse views only
    when their transposes are permutes to NCHW: the inverse transposes it gets then cancel in prim-layout
    with the ones that lay the NCHW network out in NHWC, where another permute (a transformer's
    [S, B, E] <-> [B, S, E]) would just move a transpose from the GEMM's result to its residual."""
    for i, v in enumerate(op.operands):
        prod, views = through_views(v)
        if prod is None:
            continue
        attrs = dialect.op_attrs(prod)
        x, w, bias, residual = dialect.operand_groups(prod)
        if attrs["activation"] != "none":
            continue
        if op.name == "prim.add":
            if tuple(op.result.type.shape) != tuple(v.type.shape):
                continue
            other = op.operands[1 - i]
            if tuple(other.type.shape) == tuple(v.type.shape) and residual is None and \
                    all(list(dialect.op_attrs(t)["perm"]) == TO_NCHW for t in views if t.name == "prim.transpose"):
                with ir.InsertionPoint(op), op.location:
                    other = _unreplay(other, views, op.location)
                replace_through_views(op, prod, views, [x, w, bias, other], {})
                return True
            c, axis = constant(other), view_axis(views, channel_axis(prod))
            vec = None if c is None or bias is not None or axis is None else per_channel(c, v.type.shape, axis)
            if vec is None:
                continue
            with ir.InsertionPoint(op), op.location:
                new_bias = new_constant(vec, other, op.location)
            replace_through_views(op, prod, views, [x, w, new_bias, residual], {})
            return True
        act, params = unary_activation(op.name[5:], dialect.op_attrs(op))
        replace_through_views(op, prod, views, [x, w, bias, residual], {"activation": act, "activation_params": params})
        return True
    return False

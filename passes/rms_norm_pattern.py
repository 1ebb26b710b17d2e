"""The decomposed RMSNorm of ONNX exports matched into one prim.rms_norm: prim-fuse's rewrite of prim.div.

Exports write RMSNorm as Pow, ReduceMean, Add, Sqrt, Div and an optional Mul by the scale, and Llama's
(Hugging Face) `h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)` reaches the torch importer as a
multiplication by 1 / sqrt:

    h / sqrt(mean(h^2 over the trailing dims, keepdims) + eps) [* scale]      ->  rms_norm(h, scale)
    h * (1 / sqrt(mean(h^2 over the trailing dims, keepdims) + eps)) [* scale]

with a scalar constant eps, a constant scale of the normalized shape, and every intermediate used once.
One row kernel then reads h once, instead of a reduction and an elementwise kernel that reads it again.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect

from .rewrite import constant, new_constant, producer, single_use


def _single_producer(v: ir.Value, name: str):
    """The `name` op defining v when v has no other use, else None."""
    return producer(v, name) if single_use(v) else None


def _square_of(v: ir.Value, h: ir.Value):
    """The prim.pow(h, 2) defining v (used once), else None."""
    pw = _single_producer(v, "prim.pow")
    c = None if pw is None else constant(pw.operands[1])
    return pw if pw is not None and pw.operands[0] == h and c is not None and np.all(c == 2) else None


def _mean_of_square(v: ir.Value, h: ir.Value):
    """(k, the ops) when v is the mean of h^2 over h's trailing k dims, kept as unit dims (a reduce), else None."""
    R = len(h.type.shape)
    red = _single_producer(v, "prim.reduce")
    if red is None:
        return None
    ra, pw = dialect.op_attrs(red), _square_of(red.operands[0], h)
    axes = sorted(a % R for a in ra["axes"])
    ok = pw is not None and ra["kind"] == "mean" and ra["keepdims"] and axes == list(range(R - len(axes), R))
    return (len(axes), [red, pw]) if ok else None


def match_rms_norm(div: ir.Operation) -> bool:
    """div(h, sqrt(add(mean(h^2), eps))) or h * div(1, sqrt(add(mean(h^2), eps))) (Llama's x * rsqrt(...)),
    [* scale] -> rms_norm(h, scale) (module docstring)."""
    one, normed = constant(div.operands[0]), div
    if one is not None and one.size == 1 and float(one.reshape(())) == 1.0:   # the rsqrt form
        uses = list(div.result.uses)
        normed = getattr(uses[0].owner, "operation", uses[0].owner) if len(uses) == 1 else None
        if normed is None or normed.name != "prim.mul":
            return False
        h = normed.operands[1] if normed.operands[0] == div.result else normed.operands[0]
    else:
        h = div.operands[0]
    sqrt = _single_producer(div.operands[1], "prim.sqrt")
    add = sqrt and _single_producer(sqrt.operands[0], "prim.add")
    if add is None:
        return False
    eps = next((constant(v) for v in add.operands if constant(v) is not None and constant(v).size == 1), None)
    mean = next((m for v in add.operands if constant(v) is None for m in [_mean_of_square(v, h)] if m), None)
    if eps is None or mean is None or tuple(normed.result.type.shape) != tuple(h.type.shape):
        return False
    (k, mean_ops), R = mean, len(h.type.shape)
    last, scale = normed, None
    uses = list(normed.result.uses)
    mul = getattr(uses[0].owner, "operation", uses[0].owner) if len(uses) == 1 else None
    if mul is not None and mul.name == "prim.mul":
        other = mul.operands[1] if mul.operands[0] == normed.result else mul.operands[0]
        c, norm_shape = constant(other), tuple(h.type.shape[R - k:])
        if c is not None and c.size == int(np.prod(norm_shape)) and tuple(mul.result.type.shape) == tuple(h.type.shape):
            with ir.InsertionPoint(mul), mul.location:
                scale = new_constant(c.reshape(norm_shape), other, mul.location)
            last = mul
    attrs = {"epsilon": dialect.make_attr(float(eps.reshape(())), "f64"), "normalized_ndim": dialect.make_attr(k, "i64"),
             "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, scale is not None, 0])}
    with ir.InsertionPoint(last), last.location:
        norm = ir.Operation.create("prim.rms_norm", results=[last.result.type],
                                   operands=[h] + ([scale] if scale is not None else []), attributes=attrs)
    last.result.replace_all_uses_with(norm.result)
    for op in dict.fromkeys([last, normed, div, sqrt, add, *mean_ops]):
        op.erase()
    return True

"""The decomposed RMSNorm of ONNX exports matched into one prim.rms_norm: prim-fuse's rewrite of prim.div.

Exports write RMSNorm as Pow, ReduceMean, Add, Sqrt, Div and an optional Mul by the scale:

    h / sqrt(reduce_mean(h^2 over the trailing dims, keepdims) + eps) [* scale]  ->  rms_norm(h, scale)

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


def match_rms_norm(div: ir.Operation) -> bool:
    """div(h, sqrt(add(reduce_mean(pow(h, 2)), eps))) [* scale] -> rms_norm(h, scale) (module docstring)."""
    h = div.operands[0]
    sqrt = _single_producer(div.operands[1], "prim.sqrt")
    add = sqrt and _single_producer(sqrt.operands[0], "prim.add")
    if add is None:
        return False
    eps = next((constant(v) for v in add.operands if constant(v) is not None and constant(v).size == 1), None)
    red = next((_single_producer(v, "prim.reduce") for v in add.operands if producer(v, "prim.reduce")), None)
    pw = red and _single_producer(red.operands[0], "prim.pow")
    if eps is None or pw is None or pw.operands[0] != h or constant(pw.operands[1]) is None or \
            not np.all(constant(pw.operands[1]) == 2):
        return False
    ra, R = dialect.op_attrs(red), len(h.type.shape)
    axes = sorted(a % R for a in ra["axes"])
    k = len(axes)
    if ra["kind"] != "mean" or not ra["keepdims"] or axes != list(range(R - k, R)) or \
            tuple(div.result.type.shape) != tuple(h.type.shape):
        return False
    last, scale = div, None
    uses = list(div.result.uses)
    mul = getattr(uses[0].owner, "operation", uses[0].owner) if len(uses) == 1 else None
    if mul is not None and mul.name == "prim.mul":
        other = mul.operands[1] if mul.operands[0] == div.result else mul.operands[0]
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
    for op in ([last] if last is not div else []) + [div, sqrt, add, red, pw]:
        op.erase()
    return True

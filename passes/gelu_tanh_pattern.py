"""GELU's tanh approximation as models write it out, matched into one gelu(x, approximate="tanh"):
prim-fuse's rewrite of prim.mul.

GPT-2 (Hugging Face's NewGELUActivation, "gelu_new"), BERT's "gelu_fast" and many exports spell it

    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

as six elementwise ops and a pow: one fused elementwise kernel over the MLP's widest tensor, calling pow
and tanh per element. As one activation it becomes the epilogue of the GEMM before it (epilogues.py). Every
product and sum matches in either operand order, x^3 as pow(x, 3) or x * x * x; the constants must be
those of the formula as the model's dtype rounds them (relative 1e-6), and every intermediate used once.
"""
from __future__ import annotations

import math

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.dtypes import from_storage, to_storage

from .rewrite import constant, create, producer, single_use

_ROOT_2_OVER_PI = math.sqrt(2 / math.pi)


def _is(v: ir.Value, value: float) -> bool:
    """v is a one-element constant holding `value` as v's dtype rounds it (an f16 model's 0.044715 is
    0.0447083), within 1e-6 relative."""
    c = constant(v)
    if c is None or c.size != 1:
        return False
    dtype = dialect.dtype_name(v.type.element_type)
    rounded = float(from_storage(to_storage(np.array([value]), dtype), dtype)[0])
    return abs(float(c.reshape(())) - rounded) <= 1e-6 * abs(value)


def _split(op, name: str, test):
    """(op, the operand test(operand) picked, the other operand) when op is prim.<name> and one operand passes
    test, else None."""
    if op is None or op.name != f"prim.{name}":
        return None
    for i in (0, 1):
        if test(op.operands[i]):
            return op, op.operands[i], op.operands[1 - i]
    return None


def _used_once(v: ir.Value, name: str):
    return producer(v, name) if single_use(v) else None


def _cube_of(v: ir.Value, x: ir.Value) -> list | None:
    """The ops that make v = x^3 (pow(x, 3) or x * x * x), each used once, else None."""
    pw = _used_once(v, "prim.pow")
    if pw is not None:
        return [pw] if pw.operands[0] == x and _is(pw.operands[1], 3.0) else None
    outer = _used_once(v, "prim.mul")
    if outer is None:
        return None
    for i in (0, 1):
        inner = _used_once(outer.operands[i], "prim.mul")
        if inner is not None and outer.operands[1 - i] == x and list(inner.operands) == [x, x]:
            return [outer, inner]
    return None


def match_gelu_tanh(mul: ir.Operation) -> bool:
    """mul(mul(0.5, x), add(1, tanh(mul(sqrt(2/pi), add(x, mul(0.044715, x^3)))))) -> gelu(x, tanh) (module
    docstring)."""
    for i in (0, 1):
        half = _split(_used_once(mul.operands[i], "prim.mul"), "mul", lambda v: _is(v, 0.5))
        one = _split(_used_once(mul.operands[1 - i], "prim.add"), "add", lambda v: _is(v, 1.0))
        if half is None or one is None:
            continue
        x = half[2]
        tanh = _used_once(one[2], "prim.tanh")
        scaled = tanh and _split(_used_once(tanh.operands[0], "prim.mul"), "mul", lambda v: _is(v, _ROOT_2_OVER_PI))
        inner = scaled and _split(_used_once(scaled[2], "prim.add"), "add", lambda v: v == x)
        cubic = inner and _split(_used_once(inner[2], "prim.mul"), "mul", lambda v: _is(v, 0.044715))
        cube = cubic and _cube_of(cubic[2], x)
        if not cube or tuple(x.type.shape) != tuple(mul.result.type.shape):
            continue
        with ir.InsertionPoint(mul), mul.location:
            gelu = create("gelu", [x], mul.result.type.shape, mul.result, {"approximate": "tanh"}, mul.location)
        mul.result.replace_all_uses_with(gelu)
        for op in [mul, half[0], one[0], tanh, scaled[0], inner[0], cubic[0], *cube]:
            op.erase()
        return True
    return False


"""prim-cpu-vector-math: tanh, erf and exp on f32 vectors in the CPU kernels as polynomials in vector FMAs.

A vectorized elementwise kernel (prim-tile's schedule) applies math.tanh / math.erf / math.exp to a
vector<N x f32>, and LLVM lowers each to one libm call per lane: a standalone tanh over [512, 3072] took 14-20 ms
where a ReLU takes 0.8 ms, a GELU (erf) 7-19 ms (bench/RESULTS.md). The GEMM and convolution epilogues emit
kernels/cpu/vmath.py's straight-line code instead; this pass gives every other kernel the same:

    for each such op on a 1-d vector<N x f32>:
        the function `f(x) = vmath.<op>(x)` at width N is written and parsed (once per op and width),
        a fresh copy's body is moved in front of the op, its argument replaced by the op's operand,
        and the op's uses by the copy's result

Scalar and n-d vector math is left to LLVM. CPU targets only (GPU math has its own device libraries).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from mlir import ir

from openprim.kernels.cpu import vmath
from openprim.kernels.cpu.implicit_gemm import Body

NAME = "prim-cpu-vector-math"

POLYNOMIALS = {"math.tanh": vmath.tanh, "math.erf": vmath.erf, "math.exp": vmath.exp}


@functools.lru_cache(None)
def function_text(op: str, width: int) -> str:
    """`func.func @f(%x: vector<width x f32>) -> vector<width x f32>` computing `op` with vmath."""
    vt = f"vector<{width}xf32>"
    b = Body()
    y = POLYNOMIALS[op](b, "%x", width)
    return "\n".join([f"func.func @f(%x: {vt}) -> {vt} {{", *b.const_lines, *b.lines, f"  return {y} : {vt}", "}"])


def _width(t: ir.Type) -> int | None:
    """N of a vector<N x f32>, else None."""
    try:
        v = ir.VectorType(t)
    except ValueError:
        return None
    return v.shape[0] if v.rank == 1 and not v.scalable and str(v.element_type) == "f32" else None


def expand(module_op: ir.Operation, _pass=None) -> None:
    """Replace each math op of POLYNOMIALS on a 1-d f32 vector by vmath's code (module docstring)."""
    found = []
    module_op.walk(lambda o: (found.append(o) if o.name in POLYNOMIALS and len(o.results) == 1
                              and _width(o.results[0].type) else None, ir.WalkResult.ADVANCE)[1])
    for op in found:
        with op.context, op.location:
            parsed = ir.Module.parse(function_text(op.name, _width(op.results[0].type)))   # alive until moved
            block = parsed.body.operations[0].regions[0].blocks[0]
            block.arguments[0].replace_all_uses_with(op.operands[0])
            ops = list(block.operations)
            result = ops[-1].operands[0]
            for inner in ops[:-1]:
                inner.move_before(op)
            op.results[0].replace_all_uses_with(result)
            op.erase()


@dataclass
class Options:
    NAME = NAME

    def entries(self):
        return [(NAME, expand)]

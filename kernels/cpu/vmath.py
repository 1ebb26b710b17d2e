"""Vector math for the CPU kernels: exp, erf and tanh as polynomials in vector FMAs.

LLVM lowers math.exp / math.erf / math.tanh on a vector to one scalar libm call per lane (expf, erff, tanhf):
a GELU epilogue (BERT's FFN) spent more time there than in its GEMM, the softmax of BERT's attention 1.2 ms,
EfficientNet's SiLU epilogues (x * sigmoid(x): an exp per output) made its 16 -> 96 expand convolution at
112 x 112 4.5x slower than the same layer with ReLU6, and GPT-2's tanh-approximated GELU made its FFN's first
GEMM 1.7x slower than the second (same FLOPs). Here all three are straight-line vector code:

  exp(x)  Cephes' expf: x = n ln2 + r with n = floor(x log2(e) + 1/2), |r| <= ln2/2, exp(r) a degree-7
          polynomial (EXP_P), 2^n built in the exponent bits; relative error about 2 ulp (3 where n is
          capped at 127, x past 88.38). x is clamped to [EXP_LO, EXP_HI]; values below EXP_LO give exactly
          0 (a masked -inf score contributes nothing; no subnormal results), above EXP_HI +inf.
  erf(x)  x P(x^2) / Q(x^2) on x clamped to [-4, 4] (Eigen's and XLA's float erf): max error 4.2e-7 against
          math.erf.
  tanh(x) x P(x^2) / Q(x^2) on |x| < TANH_CLAMP (Eigen's and XLA's float tanh), exactly +-1 from there (so
          that 1 - tanh^2, GELU's derivative, is 0 where float64's is), x itself below TANH_TINY: max relative
          error 4e-7 against math.tanh.

Each takes the kernel's Body (kernels/cpu/implicit_gemm.py), an SSA vector<width x f32> and the width.
"""
from __future__ import annotations

import math

EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4   # ln 2 = LN2_HI + LN2_LO, LN2_HI exact in 9 bits
EXP_LO, EXP_HI = -87.33654, 88.72283           # 2^n stays a normal float: n in [-126, 127]; above
#                                                 EXP_HI (just under ln of the largest float) exp is +inf

ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
         -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
         -1.42647390514189e-02)

TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
          1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
TANH_CLAMP, TANH_TINY = 7.90531110763549805, 0.0004


def _op(b, op: str, *operands, ty: str) -> str:
    n = b.fresh("m")
    b.emit(f"{n} = {op} {', '.join(operands)} : {ty}")
    return n


def exp(b, x: str, width: int) -> str:
    """exp of a vector<width x f32> (Cephes' expf, module docstring); exactly 0 below EXP_LO, NaN stays NaN."""
    vt, it = f"vector<{width}xf32>", f"vector<{width}xi32>"
    splat = lambda v: b.const(float(v), vt)  # noqa: E731
    under = b.fresh("under")
    b.emit(f"{under} = arith.cmpf olt, {x}, {splat(EXP_LO)} : {vt}")
    c = _op(b, "arith.minimumf", _op(b, "arith.maximumf", x, splat(EXP_LO), ty=vt), splat(EXP_HI), ty=vt)
    n = _op(b, "math.floor", _op(b, "math.fma", c, splat(math.log2(math.e)), splat(0.5), ty=vt), ty=vt)
    n = _op(b, "arith.minimumf", n, splat(127.0), ty=vt)     # 2^n normal; r then up to ln 2 (3 ulp there)
    r = _op(b, "math.fma", n, splat(-LN2_HI), c, ty=vt)
    r = _op(b, "math.fma", n, splat(-LN2_LO), r, ty=vt)
    p = splat(EXP_P[0])
    for coefficient in EXP_P[1:]:
        p = _op(b, "math.fma", p, r, splat(coefficient), ty=vt)
    y = _op(b, "arith.addf", _op(b, "math.fma", p, _op(b, "arith.mulf", r, r, ty=vt), r, ty=vt), splat(1.0), ty=vt)
    ni = b.fresh("n")
    b.emit(f"{ni} = arith.fptosi {n} : {vt} to {it}")
    bits = _op(b, "arith.shli", _op(b, "arith.addi", ni, b.const(127, it), ty=it), b.const(23, it), ty=it)
    scale = b.fresh("pow2")
    b.emit(f"{scale} = arith.bitcast {bits} : {it} to {vt}")
    y = _op(b, "arith.mulf", y, scale, ty=vt)
    over = b.fresh("over")
    b.emit(f"{over} = arith.cmpf ogt, {x}, {splat(EXP_HI)} : {vt}")
    y = _op(b, "arith.select", under, splat(0.0), y, ty=f"vector<{width}xi1>, {vt}")
    out = b.fresh("exp")
    b.emit(f"{out} = arith.select {over}, {splat(math.inf)}, {y} : vector<{width}xi1>, {vt}")
    return out


def _odd_rational(b, x: str, width: int, clamp: float, p: tuple, q: tuple) -> str:
    """x P(x^2) / Q(x^2) on x clamped to [-clamp, clamp] (Horner in vector FMAs), with x the clamped x."""
    vt = f"vector<{width}xf32>"
    x = _op(b, "arith.minimumf", _op(b, "arith.maximumf", x, b.const(-clamp, vt), ty=vt), b.const(clamp, vt), ty=vt)
    x2 = _op(b, "arith.mulf", x, x, ty=vt)

    def poly(coefficients):
        acc = b.const(float(coefficients[0]), vt)
        for c in coefficients[1:]:
            acc = _op(b, "math.fma", acc, x2, b.const(float(c), vt), ty=vt)
        return acc
    return _op(b, "arith.divf", _op(b, "arith.mulf", poly(p), x, ty=vt), poly(q), ty=vt)


def erf(b, x: str, width: int) -> str:
    """erf of a vector<width x f32> (the rational polynomial of the module docstring)."""
    return _odd_rational(b, x, width, 4.0, ERF_P, ERF_Q)


def tanh(b, x: str, width: int) -> str:
    """tanh of a vector<width x f32> (the rational polynomial of the module docstring); NaN stays NaN."""
    vt, mt = f"vector<{width}xf32>", f"vector<{width}xi1>"
    y = _odd_rational(b, x, width, TANH_CLAMP, TANH_P, TANH_Q)
    ax = _op(b, "math.absf", x, ty=vt)
    tiny, one = b.fresh("tiny"), b.fresh("one")
    b.emit(f"{tiny} = arith.cmpf olt, {ax}, {b.const(TANH_TINY, vt)} : {vt}")
    b.emit(f"{one} = arith.cmpf oge, {ax}, {b.const(TANH_CLAMP, vt)} : {vt}")
    y = _op(b, "arith.select", one, _op(b, "math.copysign", b.const(1.0, vt), x, ty=vt), y, ty=f"{mt}, {vt}")
    out = b.fresh("tanh")
    b.emit(f"{out} = arith.select {tiny}, {x}, {y} : {mt}, {vt}")
    return out

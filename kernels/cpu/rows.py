"""Row kernels for the CPU: softmax, log_softmax, layer_norm and rms_norm over the trailing dimension(s).

The reference lowering (kernels/semantics.py) is three linalg reductions whose exp LLVM turns into one
scalar libm `expf` call per value: BERT-base's attention softmax (12 x 128 rows of 128) spent 1.2 ms
there at batch 1. Here a row is swept with vector<16xf32> values (two AVX2 registers, two independent
accumulator chains), exp is a polynomial in vector FMAs, and the rows are split between the threads:

    scf.forall over the rows                         OpenMP's static schedule: contiguous row ranges
      stat  = reduce(x[r, 0:16], x[r, 16:32], ...)   full vectors, then the L % 16 tail as one masked
      ...a second statistic the same way...          load (vector.constant_mask), its lanes outside
      y[r, j:j+16] = f(x[r, j:j+16], statistics)     the row set to the reduction's neutral value

    softmax       max; sum of exp(x - max); y = exp(x - max) / sum    (f32: the exps stored in y by the second
                  sweep and scaled in place by the third; f16/bf16: recomputed, y holds no f32 scratch)
    log_softmax   max; sum of exp(x - max); y = x - (max + log(sum))
    layer_norm    mean; mean of (x - mean)^2 (two passes: no cancellation); y = (x - mean) rsqrt(var + eps)
                  [* scale] [+ shift]
    rms_norm      mean of x^2; y = x rsqrt(ms + eps) [* scale]

A norm with a `residual` operand (an add that prim-fuse folded in) reads x + residual, summed in f32,
wherever it reads x, so the sum is never written to memory.

Statistics and arithmetic are f32 for every dtype (f16/bf16 widened on load, rounded once at the store);
the row is read once per pass and stays in L1/L2 between passes for the row lengths of real networks.
Small outputs (under SERIAL_ELEMENTS) run on one thread: a fork/join costs more than the work.

exp(x) is kernels/cpu/vmath.py's (Cephes' expf, about 2 ulp); values below its EXP_LO give exactly 0 (a masked
-inf score contributes nothing).
"""
from __future__ import annotations

import math

from openprim.kernels.cpu import vmath
from openprim.kernels.cpu.implicit_gemm import Body
from openprim.kernels.gpu.rows import operand_args

LANES = 16
SERIAL_ELEMENTS = 1 << 15
DTYPES = ("f32", "f16", "bf16")



class _Rows:
    """The kernel of one row op: x viewed as [rows, length], the statistics per row in f32."""

    def __init__(self, signature, kind: str, reduced: int, dtype: str, attrs: dict, given: tuple[bool, ...]):
        self.b = Body()
        self.signature, self.kind, self.dtype, self.attrs, self.given = signature, kind, dtype, attrs, given
        dims = [int(d) for d in signature[0][1][len("memref<"):-1].split("x")[:-1]]
        self.rows, self.length = math.prod(dims[:len(dims) - reduced]), math.prod(dims[len(dims) - reduced:])
        self.full, self.rest = divmod(self.length, LANES)
        self.vt, self.it = f"vector<{LANES}xf32>", f"vector<{LANES}xi32>"

    # ------------------------------------------------------------------ values
    def v(self, op: str, *operands, ty: str | None = None) -> str:
        """op on vector operands (of type ty, vector<16xf32> unless given)."""
        n = self.b.fresh("v")
        self.b.emit(f"{n} = {op} {', '.join(operands)} : {ty or self.vt}")
        return n

    def splat(self, value) -> str:
        """A vector<16xf32> of a Python float (a constant) or of an f32 SSA value."""
        if isinstance(value, float):
            return self.b.const(value, self.vt)
        n = self.b.fresh("bc")
        self.b.emit(f"{n} = vector.broadcast {value} : f32 to {self.vt}")
        return n

    def scalar(self, op: str, *operands) -> str:
        n = self.b.fresh("s")
        self.b.emit(f"{n} = {op} {', '.join(operands)} : f32")
        return n

    def exp(self, x: str) -> str:
        return vmath.exp(self.b, x, LANES)

    # ------------------------------------------------------------------ memory
    def load(self, buf, at, masked: bool, dtype: str | None = None) -> str:
        """The vector buf[at : at + 16] as f32; masked: only the row's L % 16 tail lanes (others 0)."""
        return self.b.load_f32(buf, at, LANES, dtype or self.dtype, self.mask if masked else None)

    def row_values(self, at, masked: bool) -> str:
        """x[at : at + 16] (+ residual[at : at + 16]) as f32."""
        x = self.load(self.x, at, masked)
        return self.v("arith.addf", x, self.load(self.residual, at, masked)) if self.residual else x

    def store(self, y: str, at, masked: bool) -> None:
        b, et = self.b, f"vector<{LANES}x{self.dtype}>"
        y = b.narrow(y, LANES, self.dtype)
        if masked:
            b.emit(f"vector.maskedstore {self.out[0]}[{b.idx(at)}], {self.mask}, {y} "
                   f": {self.out[1]}, vector<{LANES}xi1>, {et}")
        else:
            b.emit(f"vector.store {y}, {self.out[0]}[{b.idx(at)}] : {self.out[1]}, {et}")

    # ------------------------------------------------------------------ sweeps over a row
    def reduce(self, row_at, term, combine: str, neutral: float, kind: str) -> str:
        """The f32 reduction (vector.reduction `kind`) over the row of term(x[j:j+16], j, masked) combined by
        `combine`; the tail's lanes outside the row count as `neutral`."""
        b = self.b
        acc = self.splat(neutral)
        if self.full:
            j, (a,), (acc,) = b.loop(0, self.full, [acc], self.vt)
            at = b.mul(j, LANES)
            b.end_loop([self.v(combine, a, term(self.row_values(b.add(row_at, at), False), at, False))], self.vt)
        if self.rest:
            at = self.full * LANES
            t = b.fresh("tail")
            b.emit(f"{t} = arith.select {self.mask}, {term(self.row_values(b.add(row_at, at), True), at, True)}, "
                   f"{self.splat(neutral)} : vector<{LANES}xi1>, {self.vt}")
            acc = self.v(combine, acc, t)
        n = b.fresh("red")
        b.emit(f"{n} = vector.reduction <{kind}>, {acc} : {self.vt} into f32")
        return n

    def write(self, row_at, f, source=None) -> None:
        """y[row, j:j+16] = f(v, j, masked) over the row (the tail masked), v = x[row, j:j+16] (+ residual), or
        the `source` buffer's values there."""
        b = self.b

        def values(at, masked):
            return self.row_values(at, masked) if source is None else self.load(source, at, masked)
        if self.full:
            at = b.mul(b.open_for(0, self.full), LANES)
            self.store(f(values(b.add(row_at, at), False), at, False), b.add(row_at, at), False)
            b.close()
        if self.rest:
            at = self.full * LANES
            self.store(f(values(b.add(row_at, at), True), at, True), b.add(row_at, at), True)

    # ------------------------------------------------------------------ one row
    def row(self, r) -> None:
        b = self.b
        at = b.mul(r, self.length)
        if self.kind in ("softmax", "log_softmax"):
            mx = self.splat(self.reduce(at, lambda x, *_: x, "arith.maximumf", -math.inf, "maximumf"))
            in_place = self.kind == "softmax" and self.dtype == "f32"

            def exp_term(x, j, masked):
                e = self.exp(self.v("arith.subf", x, mx))
                if in_place:
                    self.store(e, b.add(at, j), masked)
                return e
            total = self.reduce(at, exp_term, "arith.addf", 0.0, "add")
            if self.kind == "softmax":
                inv = self.splat(self.scalar("arith.divf", b.const(1.0, "f32"), total))
                if in_place:
                    self.write(at, lambda e, *_: self.v("arith.mulf", e, inv), source=self.out)
                else:
                    self.write(at, lambda x, *_: self.v("arith.mulf", self.exp(self.v("arith.subf", x, mx)), inv))
            else:
                log = b.fresh("log")
                b.emit(f"{log} = math.log {total} : f32")
                shift = self.v("arith.addf", mx, self.splat(log))
                self.write(at, lambda x, *_: self.v("arith.subf", x, shift))
            return
        inv_n = b.const(1.0 / self.length, "f32")
        if self.kind == "rms_norm":
            ms = self.scalar("arith.mulf", inv_n, self.reduce(at, lambda x, *_: self.v("arith.mulf", x, x),
                                                              "arith.addf", 0.0, "add"))
            inv = self.splat(self.rsqrt_eps(ms))
            self.write(at, lambda x, j, masked: self.affine(self.v("arith.mulf", x, inv), j, masked,
                                                            [("scale", "arith.mulf")]))
            return
        mean = self.splat(self.scalar("arith.mulf", inv_n, self.reduce(at, lambda x, *_: x, "arith.addf", 0.0, "add")))

        def square(x, *_):
            d = self.v("arith.subf", x, mean)
            return self.v("arith.mulf", d, d)
        var = self.scalar("arith.mulf", inv_n, self.reduce(at, square, "arith.addf", 0.0, "add"))
        rstd = self.splat(self.rsqrt_eps(var))
        self.write(at, lambda x, j, masked: self.affine(self.v("arith.mulf", self.v("arith.subf", x, mean), rstd),
                                                        j, masked, [("scale", "arith.mulf"), ("shift", "arith.addf")]))

    def rsqrt_eps(self, moment: str) -> str:
        """1 / sqrt(moment + epsilon), an f32 scalar."""
        n = self.b.fresh("rstd")
        self.b.emit(f"{n} = math.rsqrt {self.scalar('arith.addf', moment, self.b.const(float(self.attrs['epsilon']), 'f32'))}"
                    f" : f32")
        return n

    def affine(self, y: str, j, masked: bool, ops) -> str:
        """y [op param[j:j+16]] for each (operand, op) of `ops` that is present."""
        for name, op in ops:
            if name in self.params:
                param = self.params[name]
                y = self.v(op, y, self.load(param, j, masked, param[1].rsplit("x", 1)[1][:-1]))
        return y

    def kernel(self, name: str) -> str:
        b = self.b
        args = [b.flat(a) for a in self.signature]
        self.x, self.out = args[0], args[-1]
        present = operand_args(self.kind, [name for name, _ in self.signature], self.given)
        by_name = dict(zip((name for name, _ in self.signature), args))
        self.params = {p: by_name[a] for p, a in present.items() if p != "residual"}
        self.residual = by_name[present["residual"]] if "residual" in present else None
        if self.rest:
            self.mask = b.fresh("mask")
            b.const_lines.append(f"  {self.mask} = vector.constant_mask [{self.rest}] : vector<{LANES}xi1>")
        if self.rows > 1 and self.rows * self.length >= SERIAL_ELEMENTS:
            r = b.fresh("r")
            b.emit(f"scf.forall ({r}) in ({self.rows}) {{")
            b.depth += 1
        else:
            r = b.open_for(0, self.rows)
        self.row(r)
        b.close()
        return b.function(name, self.signature)


def row_kernel(name: str, signature: list[tuple[str, str]], kind: str, reduced: int, dtype: str,
               attrs: dict, given: tuple[bool, ...] = (True,)) -> str | None:
    """The kernel function (outline's signature: x, the optional operands present, out) of a row op over
    the last `reduced` dimensions; given = presence of each operand group of the op. None for other
    dtypes."""
    if dtype not in DTYPES:
        return None
    return _Rows(signature, kind, reduced, dtype, attrs, given).kernel(name)

"""Pooling kernels for the CPU: max_pool2d, avg_pool2d and global_avg_pool on NHWC, in the vector dialect.

The reference lowering (kernels/semantics.py) pads the input into a copy (a fill and an insert: two
extra passes over memory), then reduces kh*kw strided views of the copy in one linalg.generic that the
generic schedule vectorizes badly (gathers along the strided W). ResNet-18's first max_pool2d
(112x112x64 -> 56x56x64, 3x3 s2 p1) took 0.83 ms for 3.2 MB of input. Here the input is read in place,
with the vector lanes along the channels (contiguous in NHWC):

    scf.forall over the (n, oh) output rows          OpenMP's static schedule: contiguous row ranges
      [r_lo, r_hi): the window rows inside the image (cut from the r loop's bounds: no checks)
      border columns (static ow, the taps inside the image only), then a loop over the interior columns:
        for each block of UNROLL x 16 channels (a loop when C holds several), then the C % 64 rest:
          acc[j] = neutral                                           vector<16xf32>, in registers
          for r in [r_lo, r_hi):  for s in taps:  acc[j] = combine(acc[j], x[n, ih, iw, c0 + 16j : +16])
          y[n, oh, ow, c0 + 16j : +16] = acc[j] (* 1 / divisor)

The C % 16 channel tail is one vector of the exact smaller width. max combines with maximumf (-inf
neutral: a window never holds only padding, base/ops.py's padding rule); avg sums and multiplies by
1/divisor with PyTorch's divisor (kernels/semantics.avg_pool_divisors): the window clipped to the padded
extent [-p0, size + p1) (count_include_pad, ceil_mode windows end there) or the number of taps inside
the image. The row factor of the divisor is computed per row, the column factor is static (kw for the
interior columns). dilation (max_pool2d) spaces the taps: the row bounds divide by dh, the static
column taps step by dw.

global_avg_pool: x viewed as [N, H*W, C]; the threads share the (n, 64-channel block)s, each summing
H*W vectors per lane group, then the C % 64 rest of every image on one thread; times 1/(H*W).

Arithmetic is f32 for every dtype (f16/bf16 widened on load, rounded once at the store). Pools moving
fewer than SERIAL_ELEMENTS elements (input + output: 1 MB of f32, ~40 us on one core) run on one thread:
a fork/join saves at most ~20 us there on an idle machine and costs ~100 us when the other core is busy
(kernels/schedules.SERIAL_POINTS; bench/cpu_pool.py measured both on the shared 2-core machine). NCHW
pools (prim-select's layout=keep; by default every pool runs NHWC on the CPU) keep the reference lowering.
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body

LANES = 16
UNROLL = 4                       # channel vectors reduced together (independent accumulator chains)
BLOCK = UNROLL * LANES
SERIAL_ELEMENTS = 1 << 18         # input + output elements: below, one thread (see the docstring)
DTYPES = ("f32", "f16", "bf16")


def _dims(mtype: str) -> list[int]:
    return [int(d) for d in mtype[len("memref<"):-1].split("x")[:-1]]


class _Pool:
    """The kernel of one NHWC pool: input x [N, H, W, C], output y [N, OH, OW, C], both viewed 1-d."""

    def __init__(self, signature, kind: str, attrs: dict, dtype: str):
        self.b = Body()
        self.signature, self.kind, self.attrs, self.dtype = signature, kind, attrs, dtype
        self.N, self.H, self.W, self.C = _dims(signature[0][1])
        _, self.OH, self.OW, _ = _dims(signature[-1][1])
        self.combine = "arith.maximumf" if kind == "max" else "arith.addf"
        self.neutral = -math.inf if kind == "max" else 0.0
        self.dilations = attrs.get("dilations", (1, 1))         # avg_pool2d has none

    # ------------------------------------------------------------------ values and memory
    def load(self, at, width: int) -> str:
        """x[at : at + width] as vector<width x f32>."""
        b, et = self.b, f"vector<{width}x{self.dtype}>"
        n = b.fresh("ld")
        b.emit(f"{n} = vector.load {self.x[0]}[{b.idx(at)}] : {self.x[1]}, {et}")
        if self.dtype == "f32":
            return n
        w = b.fresh("x")
        b.emit(f"{w} = arith.extf {n} : {et} to vector<{width}xf32>")
        return w

    def store(self, y: str, at, width: int) -> None:
        b, et = self.b, f"vector<{width}x{self.dtype}>"
        y = b.narrow(y, width, self.dtype)
        b.emit(f"vector.store {y}, {self.y[0]}[{b.idx(at)}] : {self.y[1]}, {et}")

    def vop(self, op: str, a: str, c: str, width: int) -> str:
        n = self.b.fresh("v")
        self.b.emit(f"{n} = {op} {a}, {c} : vector<{width}xf32>")
        return n

    def splat(self, scalar: str, width: int) -> str:
        n = self.b.fresh("bc")
        self.b.emit(f"{n} = vector.broadcast {scalar} : f32 to vector<{width}xf32>")
        return n

    def as_f32(self, index) -> str:
        """An index value as f32."""
        b = self.b
        i, f = b.fresh("ci"), b.fresh("cf")
        b.emit(f"{i} = arith.index_cast {b.idx(index)} : index to i32")
        b.emit(f"{f} = arith.sitofp {i} : i32 to f32")
        return f

    def reciprocal(self, count: str, factor: int) -> str:
        """1 / (count * factor) in f32 (count an f32 value)."""
        b = self.b
        d, n = b.fresh("div"), b.fresh("inv")
        b.emit(f"{d} = arith.mulf {count}, {b.const(float(factor), 'f32')} : f32")
        b.emit(f"{n} = arith.divf {b.const(1.0, 'f32')}, {d} : f32")
        return n

    # ------------------------------------------------------------------ channel blocks
    def channel_blocks(self):
        """(c0, widths) of the channel blocks: UNROLL full vectors each (a loop when there are several),
        then the leftover full vectors and the C % 16 tail together."""
        b = self.b
        blocks, rest = divmod(self.C, BLOCK)
        if blocks == 1:
            yield 0, [LANES] * UNROLL
        elif blocks > 1:
            yield b.mul(b.open_for(0, blocks), BLOCK), [LANES] * UNROLL
            b.close()
        widths = [LANES] * (rest // LANES) + ([rest % LANES] if rest % LANES else [])
        if widths:
            yield blocks * BLOCK, widths

    def reduce(self, widths, lo, hi, reads) -> list[str]:
        """The accumulators (one vector per width, from the neutral value) after the loop lo..hi whose
        body is reads(iv, accs) -> the new accumulators."""
        b = self.b
        types = [f"vector<{w}xf32>" for w in widths]
        inits = [b.const(self.neutral, t) for t in types]
        iv, args, res = b.loop(lo, hi, inits, None, types)
        b.end_loop(reads(iv, args), None, types)
        return res

    # ------------------------------------------------------------------ window pools
    def pixel(self, ow, taps: list[int], scale: str | None) -> None:
        """Output pixel (n, oh, ow) of the current row: the window's taps (filter columns) inside the
        image, every channel; scale: 1/divisor (avg)."""
        b, sw, dw = self.b, self.attrs["strides"][1], self.dilations[1]
        col = b.add(b.mul(ow, sw), -self.attrs["padding"][1])
        xpix = b.mul(col, self.C)
        ypix = b.add(self.yrow, b.mul(ow, self.C))
        for c0, widths in self.channel_blocks():
            def reads(r, accs, c0=c0, widths=widths):
                at = b.add(b.add(self.xrow, b.mul(r, self.row_step)), b.add(xpix, c0))
                out = list(accs)
                for s in taps:
                    for j, w in enumerate(widths):
                        out[j] = self.vop(self.combine, out[j], self.load(b.add(at, s * dw * self.C + j * LANES), w), w)
                return out
            accs = self.reduce(widths, self.r_lo, self.r_hi, reads)
            for j, (acc, w) in enumerate(zip(accs, widths)):
                y = self.vop("arith.mulf", acc, self.splat(scale, w), w) if scale else acc
                self.store(y, b.add(ypix, b.add(c0, j * LANES)), w)

    def column_taps(self, ow: int) -> list[int]:
        sw, dw = self.attrs["strides"][1], self.dilations[1]
        kw, pl = self.attrs["kernel"][1], self.attrs["padding"][1]
        return [s for s in range(kw) if 0 <= ow * sw - pl + s * dw < self.W]

    def column_count(self, ow: int, taps: list[int]) -> int:
        """The column factor of avg_pool's divisor at output column ow."""
        if not self.attrs["count_include_pad"]:
            return len(taps)
        kw, sw = self.attrs["kernel"][1], self.attrs["strides"][1]
        pl, pr = self.attrs["padding"][1], self.attrs["padding"][3]
        start = ow * sw - pl
        return min(start + kw, self.W + pr) - start

    def row(self, it) -> None:
        """Output row it = n*OH + oh: its window rows inside the image, then every column."""
        b = self.b
        (kh, kw), (sh, sw), (dh, dw) = self.attrs["kernel"], self.attrs["strides"], self.dilations
        pt, pl, pb, _ = self.attrs["padding"]
        n, oh = (0, it) if self.N == 1 else (b.op("arith.divui", it, self.OH), b.op("arith.remui", it, self.OH))
        ih0 = b.add(b.mul(oh, sh), -pt)                          # 0 <= ih0 + r*dh < H
        neg = b.mul(ih0, -1)
        low = neg if dh == 1 else b.op("arith.ceildivsi", neg, dh)
        high = b.add(neg, self.H) if dh == 1 else b.op("arith.ceildivsi", b.add(neg, self.H), dh)
        self.r_lo, self.r_hi = b.op("arith.maxsi", low, 0), b.op("arith.minsi", high, kh)
        self.row_step = dh * self.W * self.C
        self.xrow = b.add(b.mul(n, self.H * self.W * self.C), b.mul(ih0, self.W * self.C))   # x[n, ih0, 0, 0]
        self.yrow = b.mul(it, self.OW * self.C)
        first = min(-(-pl // sw), self.OW)                          # interior: every tap inside the image
        end = max(min((self.W - 1 - (kw - 1) * dw + pl) // sw + 1, self.OW), first)
        border = [(ow, self.column_taps(ow)) for ow in list(range(first)) + list(range(end, self.OW))]
        scales = {}
        if self.kind == "avg":
            rows = b.op("arith.subi", b.op("arith.minsi", b.add(ih0, kh), self.H + pb), ih0) \
                if self.attrs["count_include_pad"] else b.op("arith.subi", self.r_hi, self.r_lo)
            rows = self.as_f32(rows)
            for count in sorted({self.column_count(ow, taps) for ow, taps in border} | ({kw} if end > first else set())):
                scales[count] = self.reciprocal(rows, count)
        for ow, taps in border:
            self.pixel(ow, taps, scales[self.column_count(ow, taps)] if scales else None)
        if end > first:
            ow = b.open_for(first, end)
            self.pixel(ow, list(range(kw)), scales.get(kw))
            b.close()

    # ------------------------------------------------------------------ global average
    def global_sum(self, n, c0, widths) -> None:
        """y[n, c0 : c0 + sum(widths)] = mean over H*W of x[n, :, c0 : ...]."""
        b, hw = self.b, self.H * self.W

        def reads(p, accs):
            at = b.add(b.add(b.mul(n, hw * self.C), b.mul(p, self.C)), c0)
            return [self.vop("arith.addf", a, self.load(b.add(at, j * LANES), w), w)
                    for j, (a, w) in enumerate(zip(accs, widths))]
        accs = self.reduce(widths, 0, hw, reads)
        for j, (acc, w) in enumerate(zip(accs, widths)):
            y = self.vop("arith.mulf", acc, b.const(1.0 / hw, f"vector<{w}xf32>"), w)
            self.store(y, b.add(b.add(b.mul(n, self.C), c0), j * LANES), w)

    def global_kernel(self) -> None:
        b = self.b
        blocks, rest = divmod(self.C, BLOCK)
        if blocks:
            it = self.parallel(self.N * blocks)
            n, blk = (0, it) if self.N == 1 else (b.op("arith.divui", it, blocks), b.op("arith.remui", it, blocks))
            self.global_sum(n, b.mul(blk, BLOCK), [LANES] * UNROLL)
            b.close()
        if rest:
            n = b.open_for(0, self.N)
            self.global_sum(n, blocks * BLOCK, [LANES] * (rest // LANES) + ([rest % LANES] if rest % LANES else []))
            b.close()

    # ------------------------------------------------------------------ the kernel
    def parallel(self, count: int) -> str:
        """Open the loop over `count` independent items: scf.forall (the threads) when the pool is big
        enough, else scf.for; returns its induction variable (closed by close())."""
        b = self.b
        moved = self.N * (self.H * self.W + self.OH * self.OW) * self.C
        if count > 1 and moved >= SERIAL_ELEMENTS:
            it = b.fresh("it")
            b.emit(f"scf.forall ({it}) in ({count}) {{")
            b.depth += 1
            return it
        return b.open_for(0, count)

    def kernel(self, name: str) -> str:
        b = self.b
        self.x, self.y = b.flat(self.signature[0]), b.flat(self.signature[-1])
        if self.kind == "global":
            self.global_kernel()
        else:
            self.row(self.parallel(self.N * self.OH))
            b.close()
        return b.function(name, self.signature)


def pool_kernel(name: str, signature: list[tuple[str, str]], op: str, attrs: dict, dtype: str) -> str | None:
    """The kernel function (outline's signature: x, out) of a max_pool2d / avg_pool2d / global_avg_pool;
    None where it does not apply (NCHW, other dtypes)."""
    if dtype not in DTYPES or attrs["layout"] != "NHWC":
        return None
    kind = {"max_pool2d": "max", "avg_pool2d": "avg", "global_avg_pool": "global"}[op]
    return _Pool(signature, kind, attrs, dtype).kernel(name)

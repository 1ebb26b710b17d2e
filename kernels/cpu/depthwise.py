"""conv_depthwise (CPU): a hand-structured depthwise convolution kernel on memrefs, vector dialect.

    out[n, oh, ow, c] = act( sum over (r, s) of x[n, oh*sh - pt + r*dh, ow*sw - pl + s*dw, c] * w[r, s, c]
                             + bias[c] + residual[n, oh, ow, c] )        groups = C = K, NHWC x RSCK

A depthwise convolution does R*S multiply-adds per output value: it is bound by memory, not by
arithmetic, so the kernel reads the input once per output row and does nothing else. The vector lanes
run along the channels (NHWC's contiguous dimension); the register tile is WT output columns x one
channel vector of CT lanes, and the R*S filter taps of that channel vector are loaded once per output
row and channel block and kept (in registers where they fit) across every column tile of the row:

    scf.forall over (channel part, n, oh)            the threads (OpenMP); the rows, or, when they do not
      row r of the window: input row ih = oh*sh -    share evenly (batch 1, 7x7 images), each row's channel
        pt + r*dh, clamped into the image            blocks split between them (the part slowest: the
      for each channel block of CT lanes:            static schedule gives each thread one part)
        taps[r][s] = w[r, s, c:c+CT], zeroed (one select) for a window row outside the image
        for each tile of WT columns:
          acc[j] = bias                               f32 accumulators (the bias is their start)
          per r: each input column the tile reads, loaded once (stride 1, 3x3, WT = 4: 6 loads, 12 FMAs)
                 acc[j] = vector.fma(x[.., ow0*sw - pl + j*sw + s*dw, c:c+CT], taps[r][s], acc[j])
          epilogue: + residual, activation, round to the output type, one vector store per column

With params order=1 the two inner loops swap: column tiles outer, channel blocks inner (the taps reloaded
per tile, from L1), so that a tile sweeps its pixels' channels contiguously; it pays for few channels at
stride 1 (solvers.ConvDepthwise.default_params).

Padding costs no branch. A window row outside the image is read at a row clamped into it and multiplied
by taps set to zero for the whole row (the condition depends on the output row only, so it is one
select per tap and row, hoisted out of the column loop); window rows that are inside for every output row
have neither clamp nor select. Along the row, the column tiles are split at compile time into interior
tiles (a loop, no checks) and border tiles (emitted one by one, with the taps that fall outside the image
left out: every shape is static), as kernels/cpu/implicit_gemm.py does. The channel tail (C % CT) is a
block of the exact smaller width. Every memref is viewed 1-d, so each access is one add of a constant to
an offset computed once per row or tile. f16/bf16 are widened to f32 on load (the taps once per row)
and the result is rounded once, at the store; erf (GELU) is gemm.py's vector polynomial.
"""
from __future__ import annotations

from openprim.kernels.cpu.implicit_gemm import Body, VectorOps, kernel_arguments
from openprim.kernels.semantics import activation


class _Depthwise:
    """The kernel of one depthwise ConvProblem (NHWC, RSCK filter R x S x 1 x C) with params wt, ct, order."""

    def __init__(self, p, params, attrs, signature, threads):
        self.p, self.attrs, self.threads = p, attrs, threads
        self.wt, self.ct = params["wt"], params["ct"]
        self.columns_outer = bool(params["order"])
        (self.sh, self.sw), (self.dh, self.dw) = p.strides, p.dilations
        self.pt, self.pl = p.padding[0], p.padding[1]
        self.dtype = p.dtype
        self.x, self.w, self.bias, self.residual, self.out = kernel_arguments(signature, p.epilogue)
        self.signature = signature
        self.b = Body()

    # ------------------------------------------------------------------ memory
    def load(self, buf, offset, width: int) -> str:
        """buf[offset : offset + width] as vector<width x f32>."""
        b, (name, mtype) = self.b, buf
        n = b.fresh("ld")
        b.emit(f"{n} = vector.load {name}[{b.idx(offset)}] : {mtype}, vector<{width}x{self.dtype}>")
        if self.dtype == "f32":
            return n
        wide = b.fresh("x")
        b.emit(f"{wide} = arith.extf {n} : vector<{width}x{self.dtype}> to vector<{width}xf32>")
        return wide

    def fma(self, x: str, tap: str, acc: str, width: int) -> str:
        n = self.b.fresh("fma")
        self.b.emit(f"{n} = vector.fma {x}, {tap}, {acc} : vector<{width}xf32>")
        return n

    # ------------------------------------------------------------------ one output row
    def row_inside(self, r: int) -> bool:
        """Window row r lands inside the image for every output row."""
        p = self.p
        return r * self.dh - self.pt >= 0 and (p.oh - 1) * self.sh - self.pt + r * self.dh < p.h

    def window_rows(self, n, oh):
        """Per window row r: (offset of x[n, ih, 0, 0] with ih clamped into the image, the i1 condition
        that ih is inside it, or None where it always is)."""
        b, p = self.b, self.p
        ih0 = b.add(b.mul(oh, self.sh), -self.pt)
        rows = []
        for r in range(p.r):
            ih = b.add(ih0, r * self.dh)
            inside = None
            if not self.row_inside(r):
                lo, hi = b.op("arith.cmpi sge,", ih, 0), b.op("arith.cmpi slt,", ih, p.h)
                inside = b.fresh("in")
                b.emit(f"{inside} = arith.andi {lo}, {hi} : i1")
                ih = b.op("arith.maxsi", b.op("arith.minsi", ih, p.h - 1), 0)
            rows.append((b.mul(b.add(b.mul(n, p.h), ih), p.w * p.c), inside))
        return rows

    def taps(self, rows, c0, width: int) -> list[list[str]]:
        """taps[r][s] = w[r, s, c0 : c0 + width] (f32), zero where window row r is outside the image."""
        b, p = self.b, self.p
        zero = b.const(0.0, f"vector<{width}xf32>")
        out = []
        for r, (_, inside) in enumerate(rows):
            row = []
            for s in range(p.s):
                t = self.load(self.wf, b.add(c0, (r * p.s + s) * p.c), width)
                if inside is not None:
                    sel = b.fresh("tap")
                    b.emit(f"{sel} = arith.select {inside}, {t}, {zero} : vector<{width}xf32>")
                    t = sel
                row.append(t)
            out.append(row)
        return out

    def column_tiles(self):
        """(ow0, width, taps) of the static tiles (taps[j] = the filter columns s inside the image for tile
        column j) and (first, end) of the interior tiles' loop, whose every tap is inside the image."""
        p, wt = self.p, self.wt
        full = p.ow // wt
        inside = [t for t in range(full) if t * wt * self.sw >= self.pl and
                  (t * wt + wt - 1) * self.sw - self.pl + (p.s - 1) * self.dw < p.w]
        first, end = (inside[0], inside[-1] + 1) if inside else (full, full)
        static = [(t * wt, wt) for t in list(range(first)) + list(range(end, full))]
        if p.ow % wt:
            static.append((full * wt, p.ow % wt))
        return [(ow0, width, [[s for s in range(p.s) if 0 <= (ow0 + j) * self.sw - self.pl + s * self.dw < p.w]
                              for j in range(width)]) for ow0, width in static], (first, end)

    def tile(self, rows, taps, bias, yrow, ow0, c0, width: int, wt: int, cols):
        """wt output columns from ow0 (an index value for interior tiles, cols None; else static, cols[j]
        the filter columns inside the image) of the channel vector c0 : c0 + width."""
        b, p = self.b, self.p
        vt = f"vector<{width}xf32>"
        accs = [bias or b.const(0.0, vt)] * wt
        x0 = b.add(b.add(b.mul(ow0, self.sw * p.c), c0), -self.pl * p.c)   # column ow0*sw - pl, channel c0
        for r, (xrow, _) in enumerate(rows):
            base = b.add(xrow, x0)
            loaded = {}
            for j in range(wt):
                for s in (range(p.s) if cols is None else cols[j]):
                    col = j * self.sw + s * self.dw
                    if col not in loaded:
                        loaded[col] = self.load(self.xf, b.add(base, col * p.c), width)
                    accs[j] = self.fma(loaded[col], taps[r][s], accs[j], width)
        ops = VectorOps(b, width)
        for j, acc in enumerate(accs):
            at = b.add(yrow, b.add(b.add(b.mul(ow0, p.c), c0), j * p.c))
            y = acc
            if self.residual is not None:
                y = ops.scalar("arith.addf", y, self.load(self.resf, at, width))
            y = activation(ops, self.attrs["activation"], self.attrs["activation_params"], y)
            y = b.narrow(y, width, self.dtype)
            b.emit(f"vector.store {y}, {self.outf[0]}[{b.idx(at)}] : {self.outf[1]}, vector<{width}x{self.dtype}>")

    def columns(self, body):
        """body(ow0, wt, cols) for every column tile of a row: the border and tail tiles (ow0 static, cols
        their taps inside the image), then the loop of interior tiles (ow0 an index, cols None)."""
        static, (first, end) = self.column_tiles()
        for ow0, wt, cols in static:
            body(ow0, wt, cols)
        if end > first:
            t = self.b.open_for(first, end)
            body(self.b.mul(t, self.wt), self.wt, None)
            self.b.close()

    def channels(self, part, parts: int, body):
        """body(c0, width) for every channel block of the thread's part of a row: a loop of full blocks
        of CT lanes, then the tail (in the last part)."""
        b, blocks, tail = self.b, self.p.c // self.ct, self.p.c % self.ct
        if blocks == 1 and parts == 1:
            body(0, self.ct)
        elif blocks:
            lo = 0 if parts == 1 else b.op("arith.divui", b.mul(part, blocks), parts)
            hi = blocks if parts == 1 else b.op("arith.divui", b.add(b.mul(part, blocks), blocks), parts)
            cb = b.open_for(lo, hi)
            body(b.mul(cb, self.ct), self.ct)
            b.close()
        if tail:
            self.when_last(part, parts, lambda: body(blocks * self.ct, tail))

    # ------------------------------------------------------------------ the whole kernel
    def parts(self) -> int:
        """Channel parts per row: 1 where the rows share evenly between the threads (or are many), else
        one per thread (batch 1 at 7x7: 7 rows, each split in two halves of its channel blocks)."""
        rows, blocks = self.p.n * self.p.oh, self.p.c // self.ct
        if rows % self.threads == 0 or rows >= 16 * self.threads or blocks < self.threads:
            return 1
        return self.threads

    def when_last(self, part, parts: int, then):
        """then() in the last channel part only (scf.if, unless there is one part)."""
        b = self.b
        if parts == 1:
            then()
            return
        cond = b.op("arith.cmpi eq,", part, parts - 1)
        b.emit(f"scf.if {cond} {{")
        b.depth += 1
        then()
        b.close()

    def kernel(self, name: str) -> str:
        b, p = self.b, self.p
        self.xf, self.wf, self.outf = b.flat(self.x), b.flat(self.w), b.flat(self.out)
        self.biasf = b.flat(self.bias) if self.bias else None
        self.resf = b.flat(self.residual) if self.residual else None
        rows, parts = p.n * p.oh, self.parts()
        it = b.fresh("it")
        b.emit(f"scf.forall ({it}) in ({rows * parts}) {{")
        b.depth += 1
        part, row = (b.op("arith.divui", it, rows), b.op("arith.remui", it, rows)) if parts > 1 else (0, it)
        n, oh = (b.op("arith.divui", row, p.oh), b.op("arith.remui", row, p.oh)) if p.n > 1 else (0, row)
        window = self.window_rows(n, oh)
        yrow = b.mul(row, p.ow * p.c)                              # out[n, oh, 0, 0]

        def block(c0, width, tiles):
            """The taps (and bias) of channels c0 : c0 + width, then `tiles` of them."""
            taps = self.taps(window, c0, width)
            bias = self.load(self.biasf, c0, width) if self.bias else None
            tiles(lambda ow0, wt, cols: self.tile(window, taps, bias, yrow, ow0, c0, width, wt, cols))
        if self.columns_outer:
            self.columns(lambda ow0, wt, cols: self.channels(
                part, parts, lambda c0, width: block(c0, width, lambda tile: tile(ow0, wt, cols))))
        else:
            self.channels(part, parts, lambda c0, width: block(c0, width, self.columns))
        b.depth -= 1
        b.emit("}")
        return b.function(name, self.signature, self.residual)


def depthwise_kernel(name: str, signature: list[tuple[str, str]], problem, params: dict, attrs: dict,
                     threads: int) -> str:
    """The kernel function text: signature = [(argument, memref type)] in kernel order (input, filter,
    [bias], [residual], output); problem a depthwise NHWC solvers.ConvProblem, params {wt, ct, order}."""
    return _Depthwise(problem, params, attrs, signature, threads).kernel(name)

"""conv_winograd_packed (CPU): Winograd F(m x m, 3 x 3) convolution as one hand-structured vector kernel.

    Y = A^T [ U * (B^T d B) ] A      per m x m output tile, d its (m+2) x (m+2) input tile, U = G g G^T

(Lavin & Gray; B^T, G, A^T are solvers/winograd.py's WINOGRAD). The elementwise product summed over the
input channels is (m+2)^2 independent GEMMs [tiles, C] x [C, K], one per position of the transformed
tile: F(4x4) does 36 multiplies per 16 outputs where the direct convolution does 144. NHWC, f32, 3x3,
stride 1, undilated, any padding; the filter arrives transformed ("W<m>KC16k": U as [(m+2)^2, K/16, C, 16],
computed by prim-select at compile time in float64), so no call transforms it again.

    V = alloc [(m+2)^2, T, C]        T tiles per chunk (V within CHUNK_BYTES); P = N ceil(OH/m) ceil(OW/m)
    for each chunk of T tiles:
      scf.forall over the chunk's tiles:                        the input transform
        for each 8 channels:  the (m+2)^2 input vectors (zeros outside the image: the address clamped
                              and the vector selected), B^T d B in vector adds and FMAs by the constant
                              coefficients, stored to V
      scf.forall over (16 output channels, MT tiles):          the GEMMs, then the output transform
        for each position:   MT x 16 accumulators (MT x 2 vector<8xf32>), loop over C: two vector loads
                             of U (one contiguous stream), MT broadcast loads of V, 2 MT FMAs; stored to
                             a stack buffer M [(m+2)^2, MT, 16]
        for each of the MT tiles:  A^T M A on vector<16xf32>, + bias + residual, activation, one store
                             per output pixel inside the image
    (V is freed by bufferization's deallocation pass)

The chunks keep V in cache: the second loop reads it once per block of 16 output channels (the block is
its slowest index, so a thread's consecutive items share one block's U, (m+2)^2 * C * 64 bytes, in L2).
The tiles' tail (P % MT) is a smaller register tile; the last chunk's missing tiles are skipped.
"""
from __future__ import annotations

import numpy as np

from openprim.kernels.cpu.implicit_gemm import Body, VectorOps, kernel_arguments
from openprim.kernels.semantics import activation

LANES = 8    # f32 lanes of an AVX2 register: the input transform's and the accumulators' width
NB = 16      # output channels per block of U, and of a register tile
KU = 4       # the channel loop's unrolling
# The most of V one chunk of tiles holds: the GEMMs read a chunk's V once per block of 16 output channels, so it
# must stay in cache (measured: batch 8 at 56x56x64, a 14 MB V made F(4x4) no faster than the implicit GEMM).
CHUNK_BYTES = 1 << 20


class _Winograd:
    def __init__(self, p, params, attrs, signature, threads, transforms):
        self.p, self.attrs, self.threads = p, attrs, threads
        self.bt, _, self.at = (np.asarray(t, float) for t in transforms)
        self.m, self.a = self.at.shape[0], self.bt.shape[0]
        self.a2 = self.a * self.a
        self.mt = params["mt"]
        self.th, self.tw = -(-p.oh // self.m), -(-p.ow // self.m)
        self.tiles = p.n * self.th * self.tw
        per_tile = self.a2 * p.c * 4
        self.chunk = min(-(-self.tiles // self.mt) * self.mt, max(1, CHUNK_BYTES // per_tile // self.mt) * self.mt)
        self.chunks = -(-self.tiles // self.chunk)
        self.x, self.u, self.bias, self.residual, self.out = kernel_arguments(signature, p.epilogue)
        self.signature = signature
        self.b = Body()

    # ------------------------------------------------------------------ helpers
    def vload(self, buf, offset, width: int) -> str:
        n = self.b.fresh("ld")
        self.b.emit(f"{n} = vector.load {buf[0]}[{self.b.idx(offset)}] : {buf[1]}, vector<{width}xf32>")
        return n

    def vstore(self, v: str, buf, offset, width: int) -> None:
        self.b.emit(f"vector.store {v}, {buf[0]}[{self.b.idx(offset)}] : {buf[1]}, vector<{width}xf32>")

    def vop(self, op: str, *args, width: int) -> str:
        n = self.b.fresh("w")
        self.b.emit(f"{n} = {op} {', '.join(args)} : vector<{width}xf32>")
        return n

    def combine(self, coefficients, vectors, width: int) -> str:
        """sum of c * v over the nonzero coefficients: adds and subtracts for +-1, else FMAs."""
        acc = None
        for c, v in zip(coefficients, vectors):
            if c == 0:
                continue
            if acc is None:
                acc = v if c == 1 else self.vop("arith.mulf", self.b.const(float(c), f"vector<{width}xf32>"), v,
                                                 width=width)
            elif c in (1, -1):
                acc = self.vop("arith.addf" if c == 1 else "arith.subf", acc, v, width=width)
            else:
                acc = self.vop("math.fma", self.b.const(float(c), f"vector<{width}xf32>"), v, acc, width=width)
        return acc if acc is not None else self.b.const(0.0, f"vector<{width}xf32>")

    def transform(self, left, right, tile, width: int):
        """left @ tile @ right^T for a square grid `tile` of vectors (lists of rows)."""
        rows = [[self.combine(left[i], [tile[u][v] for u in range(len(tile))], width) for v in range(len(tile[0]))]
                for i in range(left.shape[0])]
        return [[self.combine(right[j], row, width) for j in range(right.shape[0])] for row in rows]

    def index_in(self, value, bound: int) -> tuple[str, str]:
        """(value clamped to [0, bound), whether value was inside) of an index value."""
        b = self.b
        clamped = b.op("arith.minsi", b.op("arith.maxsi", value, 0), bound - 1)
        ge = b.fresh("ge")
        b.emit(f"{ge} = arith.cmpi sge, {b.idx(value)}, {b.const(0)} : index")
        lt = b.fresh("lt")
        b.emit(f"{lt} = arith.cmpi slt, {b.idx(value)}, {b.const(bound)} : index")
        inside = b.fresh("in")
        b.emit(f"{inside} = arith.andi {ge}, {lt} : i1")
        return clamped, inside

    # ------------------------------------------------------------------ the input transform
    def when(self, lhs, pred: str, rhs: int) -> None:
        """Open scf.if (lhs pred rhs) on index values (closed by Body.close)."""
        b = self.b
        cond = b.fresh("if")
        b.emit(f"{cond} = arith.cmpi {pred}, {b.idx(lhs)}, {b.const(rhs)} : index")
        b.emit(f"scf.if {cond} {{")
        b.depth += 1

    def decode(self, tile):
        """(n, tile row, tile column) of a tile index."""
        b = self.b
        per_image = self.th * self.tw
        rest = b.op("arith.remui", tile, per_image)
        return b.op("arith.divui", tile, per_image), b.op("arith.divui", rest, self.tw), b.op("arith.remui", rest, self.tw)

    def input_transform(self, chunk) -> None:
        """V[pos, t, :] of the chunk's tiles t, threads over the tiles."""
        b, p, m, a = self.b, self.p, self.m, self.a
        pt, pl = p.padding[0], p.padding[1]
        lt = b.fresh("it")
        b.emit(f"scf.forall ({lt}) in ({self.chunk}) {{")
        b.depth += 1
        tile = b.add(b.mul(chunk, self.chunk), lt)
        ragged = self.chunks * self.chunk > self.tiles
        if ragged:
            self.when(tile, "ult", self.tiles)
        n, ti, tj = self.decode(tile)
        rows = [self.index_in(b.add(b.mul(ti, m), u - pt), p.h) for u in range(a)]
        row_base = [b.mul(b.add(b.mul(n, p.h), ih), p.w * p.c) for ih, _ in rows]
        cols = [self.index_in(b.add(b.mul(tj, m), v - pl), p.w) for v in range(a)]
        valid = [[b.fresh("ok") for _ in range(a)] for _ in range(a)]
        for u in range(a):
            for v in range(a):
                b.emit(f"{valid[u][v]} = arith.andi {rows[u][1]}, {cols[v][1]} : i1")
        cb = b.open_for(0, p.c // LANES)
        c0 = b.mul(cb, LANES)
        zero = b.const(0.0, f"vector<{LANES}xf32>")
        d = []
        for u in range(a):
            d.append([])
            for v in range(a):
                raw = self.vload(self.xf, b.add(b.add(row_base[u], b.mul(cols[v][0], p.c)), c0), LANES)
                sel = b.fresh("d")
                b.emit(f"{sel} = arith.select {valid[u][v]}, {raw}, {zero} : vector<{LANES}xf32>")
                d[u].append(sel)
        out = self.transform(self.bt, self.bt, d, LANES)
        at = b.add(b.mul(lt, p.c), c0)
        for al in range(a):
            for be in range(a):
                self.vstore(out[al][be], self.vbuf, b.add(at, (al * a + be) * self.chunk * p.c), LANES)
        b.close()
        if ragged:
            b.close()
        b.depth -= 1
        b.emit("}")

    # ------------------------------------------------------------------ the GEMMs and the output transform
    def gemm(self, pos, p0, k_block, rows: int) -> None:
        """M[pos, t, :] = sum over c of V[pos, p0 + t, c] * U[pos, k_block, c, :] for t < rows (p0: the
        block's first tile in the chunk)."""
        b, p = self.b, self.p
        vt = f"vector<{LANES}xf32>"
        zeros = [b.const(0.0, vt)] * (2 * rows)
        u_row = b.mul(b.add(b.mul(pos, p.k // NB), k_block), p.c * NB)      # U[pos, k_block, 0, 0]
        v_row = b.add(b.mul(pos, self.chunk * p.c), b.mul(p0, p.c))         # V[pos, p0, 0]

        def step(c, accs):
            uv = [self.vload(self.uf, b.add(u_row, b.add(b.mul(c, NB), h * LANES)), LANES) for h in range(2)]
            out = []
            for t in range(rows):
                s = b.fresh("v")
                b.emit(f"{s} = memref.load {self.vbuf[0]}[{b.idx(b.add(v_row, b.add(t * p.c, c)))}] : {self.vbuf[1]}")
                bc = b.fresh("bc")
                b.emit(f"{bc} = vector.broadcast {s} : f32 to {vt}")
                for h in range(2):
                    f = b.fresh("fma")
                    b.emit(f"{f} = vector.fma {bc}, {uv[h]}, {accs[len(out)]} : {vt}")
                    out.append(f)
            return out

        cc, args, accs = b.loop(0, p.c // KU, zeros, vt)
        out = list(args)
        for k in range(KU):
            out = step(b.add(b.mul(cc, KU), k), out)
        b.end_loop(out, vt)
        for t in range(rows):
            for h in range(2):
                self.vstore(accs[2 * t + h], self.mbuf, b.add(b.mul(pos, self.mt * NB), (t * NB + h * LANES)), LANES)

    def output_tile(self, tile, t, k0) -> None:
        """A^T M A of tile `tile` (M's row t) for NB channels from k0, the epilogue, the stores."""
        b, p, m, a = self.b, self.p, self.m, self.a
        mm = [[self.vload(self.mbuf, b.add(b.mul(t, NB), (al * a + be) * self.mt * NB), NB) for be in range(a)]
              for al in range(a)]
        y = self.transform(self.at, self.at, mm, NB)
        n, ti, tj = self.decode(tile)
        oh0, ow0 = b.mul(ti, m), b.mul(tj, m)
        ops = VectorOps(b, NB)
        bias = self.vload(self.biasf, k0, NB) if self.bias else None
        for i in range(m):
            for j in range(m):
                # only the last tile row / column can reach past the image
                guards = []
                if p.oh % m and i >= p.oh % m:
                    guards.append((ti, self.th - 1))
                if p.ow % m and j >= p.ow % m:
                    guards.append((tj, self.tw - 1))
                for value, last in guards:
                    self.when(value, "ult", last)
                at = b.add(b.mul(b.add(b.mul(b.add(b.mul(n, p.oh), b.add(oh0, i)), p.ow), b.add(ow0, j)), p.k), k0)
                v = y[i][j]
                if bias:
                    v = ops.scalar("arith.addf", v, bias)
                if self.residual:
                    v = ops.scalar("arith.addf", v, self.vload(self.resf, at, NB))
                v = activation(ops, self.attrs["activation"], self.attrs["activation_params"], v)
                self.vstore(v, self.outf, at, NB)
                for _ in guards:
                    b.close()

    def block(self, first, p0, k_block, rows: int) -> None:
        """The GEMMs and output transforms of `rows` tiles from tile `first` (p0 in the chunk)."""
        b = self.b
        pos = b.open_for(0, self.a2)
        self.gemm(pos, p0, k_block, rows)
        b.close()
        t = b.open_for(0, rows)
        self.output_tile(b.add(first, t), t, b.mul(k_block, NB))
        b.close()

    def products(self, chunk) -> None:
        """Threads over (16 output channels, MT tiles) of the chunk, the channel block slowest."""
        b, p = self.b, self.p
        full, tail = divmod(self.tiles, self.mt)
        per_chunk = self.chunk // self.mt
        it = b.fresh("it")
        b.emit(f"scf.forall ({it}) in ({p.k // NB * per_chunk}) {{")
        b.depth += 1
        k_block, local = b.op("arith.divui", it, per_chunk), b.op("arith.remui", it, per_chunk)
        block = b.add(b.mul(chunk, per_chunk), local)
        p0 = b.mul(local, self.mt)
        self.mbuf = (b.fresh("mbuf"), f"memref<{self.a2 * self.mt * NB}xf32>")
        b.emit("memref.alloca_scope {")
        b.depth += 1
        b.emit(f"{self.mbuf[0]} = memref.alloca() {{alignment = 64 : i64}} : {self.mbuf[1]}")
        first = b.mul(block, self.mt)
        if self.chunks * per_chunk == full and not tail:   # every block whole
            self.block(first, p0, k_block, self.mt)
        else:
            if full:
                self.when(block, "ult", full)
                self.block(first, p0, k_block, self.mt)
                b.close()
            if tail:
                self.when(block, "eq", full)
                self.block(first, p0, k_block, tail)
                b.close()
        b.close()
        b.depth -= 1
        b.emit("}")

    def kernel(self, name: str) -> str:
        b, p = self.b, self.p
        self.xf, self.uf, self.outf = b.flat(self.x), b.flat(self.u), b.flat(self.out)
        self.biasf = b.flat(self.bias) if self.bias else None
        self.resf = b.flat(self.residual) if self.residual else None
        self.vbuf = (b.fresh("vbuf"), f"memref<{self.a2 * self.chunk * p.c}xf32>")
        b.emit(f"{self.vbuf[0]} = memref.alloc() {{alignment = 64 : i64}} : {self.vbuf[1]}")
        chunk = b.open_for(0, self.chunks) if self.chunks > 1 else 0
        self.input_transform(chunk)
        self.products(chunk)
        if self.chunks > 1:
            b.close()
        return b.function(name, self.signature, self.residual)


def winograd_kernel(name: str, signature: list[tuple[str, str]], problem, params: dict, attrs: dict,
                    threads: int, transforms) -> str:
    """The kernel function text: signature = [(argument, memref type)] in kernel order (input, the
    transformed filter, [bias], [residual], output); transforms = (B^T, G, A^T) of F(m x m, 3 x 3)."""
    return _Winograd(problem, params, attrs, signature, threads, transforms).kernel(name)

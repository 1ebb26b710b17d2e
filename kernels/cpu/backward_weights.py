"""conv_bwd_weights_gemm (CPU): the filter gradient as a hand-structured kernel on memrefs, vector dialect.

    dw[r, s, c, k] = sum over (n, oh, ow) of x[n, oh*sh - pt + r*dh, ow*sw - pl + s*dw, c] * dy[n, oh, ow, k]

(NHWC x and dy, the RSCK gradient, one group). Per filter tap it is a GEMM [C, P] x [P, K] whose reduction P
runs over every output pixel: for ResNet's first stage 25,088 pixels at batch 8, 6.4 MB of x and of dy.
A register tile that reduced over all of P before moving on (the linalg schedule this kernel replaced) read
both streams from memory once per tile and tap, 576 times for a 64 -> 64 layer: at 1.6 FLOP per byte it ran
at the cache's bandwidth, 36-90 GFLOP/s on a 2-core AVX2 machine. Here the reduction is cut into chunks of
output rows small enough for L2 (CHUNK_BYTES of x and dy), and every tap and tile passes over a chunk
before the next one is read; the gradient's tiles are what moves instead, a block of KB filters at a time
(DW_BLOCK_BYTES of dw, L2-resident):

    scf.forall over the threads' shares of the K tiles     (each thread its own filters: no reduction between them)
      for each block of KB filters of the share:
        dw[:, :, :, block] = 0
        for each chunk of ROWS output rows (n, oh):        x's and dy's rows of the chunk stay in L2
          for r, s (unrolled), each C tile of MT channels, each K tile of NT filters of the block:
            acc = dw tile                                   MT x NT/L f32 accumulators (loop-carried)
            for each row of the chunk whose input row ih = oh*sh - pt + r*dh is inside the image:
              for ow where iw is inside the image:         (static bounds per tap s)
                acc[i] += broadcast(x[n, ih, iw, c0 + i]) * dy[n, oh, ow, k0 : k0 + NT]
            dw tile = acc
        [f16/bf16: the block, accumulated in an f32 scratch, rounded into dw]

The register tile is the outer product of MT input channels (scalars broadcast) and NT filters (vectors of
the target's lanes, the last one narrower where NT is not a multiple): 6 x 16 on AVX2 fills 12 of its 16
registers; 8 x 32 on AVX-512 16 of its 32. C % MT channels are a last tile of their own. Every memref is
viewed 1-d.
"""
from __future__ import annotations

from openprim.kernels.cpu.implicit_gemm import Body

CHUNK_BYTES = 128 << 10      # x's and dy's bytes of a chunk of output rows (half of Zen's 512 KB L2)
DW_BLOCK_BYTES = 192 << 10   # the gradient's bytes of a block of filters, for all taps and channels


class _BackwardWeights:
    def __init__(self, p, params, signature, threads, lanes):
        self.p, self.b = p, Body()
        self.mt, self.nt = params["mt"], params["nt"]
        self.dtype = p.dtype
        (self.sh, self.sw), (self.dh, self.dw) = p.strides, p.dilations
        self.pt, self.pl = p.padding[0], p.padding[1]
        # (offset in the tile, width) of an NT tile's vectors: full vectors of the target's lanes, then the rest
        widths = [lanes] * (self.nt // lanes) + ([self.nt % lanes] if self.nt % lanes else [])
        self.vecs = [(sum(widths[:j]), w) for j, w in enumerate(widths)]
        self.tiles_k = p.k // self.nt
        self.parts = max(1, min(threads, self.tiles_k))
        per_filter = 4 * p.r * p.s * p.c
        share = -(-self.tiles_k // self.parts)
        self.block = max(1, min(share, DW_BLOCK_BYTES // (per_filter * self.nt)))      # K tiles a block
        row_bytes = (4 if p.dtype == "f32" else 2) * (p.ow * min(p.k, self.block * self.nt) + self.sh * p.w * p.c)
        self.rows = max(1, min(p.n * p.oh, CHUNK_BYTES // row_bytes))
        self.x, self.dy, self.out = signature
        self.signature = signature

    # ------------------------------------------------------------------ memory
    def load(self, buf, at, width: int = 0) -> str:
        """buf[at] (width 0) or buf[at : at + width], as f32."""
        b = self.b
        if width:
            return b.load_f32(buf, at, width, self.dtype)
        n = b.fresh("ld")
        b.emit(f"{n} = memref.load {buf[0]}[{b.idx(at)}] : {buf[1]}")
        if self.dtype == "f32":
            return n
        w = b.fresh("x")
        b.emit(f"{w} = arith.extf {n} : {self.dtype} to f32")
        return w

    # ------------------------------------------------------------------ the register tile
    def tile(self, r: int, s: int, c0, k0, mt: int, q0, q1):
        """dw[r, s, c0 : c0 + mt, k0 : k0 + NT] += the chunk's rows [q0, q1) of tap (r, s)."""
        b, p = self.b, self.p
        K = p.k
        # the rows whose input row of tap r is inside the image (oh in [lo, hi)), and the columns of tap s
        lo = max(0, -(-(self.pt - r * self.dh) // self.sh))
        hi = min(p.oh, (p.h - 1 + self.pt - r * self.dh) // self.sh + 1)
        ow_lo = max(0, -(-(self.pl - s * self.dw) // self.sw))
        ow_hi = min(p.ow, (p.w - 1 + self.pl - s * self.dw) // self.sw + 1)
        if hi <= lo or ow_hi <= ow_lo:
            return                                  # a tap that never meets the image: its gradient stays 0
        vecs = self.vecs
        types = [f"vector<{w}xf32>" for _, w in vecs] * mt
        base = [b.add(b.mul(b.add(b.mul(r * p.s + s, p.c), b.add(c0, i)), K), k0) for i in range(mt)]
        accs = [b.load_f32(self.accf, b.add(row, at), w, "f32") for row in base for at, w in vecs]
        q, args, results = b.loop(q0, q1, accs, None, types)
        oh = b.op("arith.remui", q, p.oh)
        ih = b.add(b.mul(oh, self.sh), r * self.dh - self.pt)
        inside = lo == 0 and hi == p.oh
        if not inside:
            lo_ok = b.op("arith.cmpi uge,", oh, lo, "index") if lo > 0 else None
            hi_ok = b.op("arith.cmpi ult,", oh, hi, "index") if hi < p.oh else None
            ok = lo_ok if hi_ok is None else hi_ok if lo_ok is None else b.op("arith.andi", lo_ok, hi_ok, "i1")
            res = b.fresh("if")
            b.emit(f"{res}:{len(types)} = scf.if {ok} -> ({', '.join(types)}) {{")
            b.depth += 1
        n = b.op("arith.divui", q, p.oh)
        x_row = b.mul(b.add(b.mul(n, p.h), ih), p.w * p.c)
        dy_row = b.mul(q, p.ow * K)
        ow, inner_args, inner_res = b.loop(ow_lo, ow_hi, args, None, types)
        xo = b.add(b.add(x_row, b.mul(ow, self.sw * p.c)), s * self.dw * p.c - self.pl * p.c)
        xo = b.add(xo, c0)
        dyo = b.add(b.add(dy_row, b.mul(ow, K)), k0)
        dys = [self.load(self.dyf, b.add(dyo, at), w) for at, w in vecs]
        new = []
        for i in range(mt):
            xi = self.load(self.xf, b.add(xo, i))
            for j, (_, w) in enumerate(vecs):
                bc, f = b.fresh("bc"), b.fresh("fma")
                b.emit(f"{bc} = vector.broadcast {xi} : f32 to vector<{w}xf32>")
                b.emit(f"{f} = vector.fma {bc}, {dys[j]}, {inner_args[i * len(vecs) + j]} : vector<{w}xf32>")
                new.append(f)
        b.end_loop(new, None, types)
        inner = inner_res
        if not inside:
            b.emit(f"scf.yield {', '.join(inner)} : {', '.join(types)}")
            b.depth -= 1
            b.emit("} else {")
            b.depth += 1
            b.emit(f"scf.yield {', '.join(args)} : {', '.join(types)}")
            b.depth -= 1
            b.emit("}")
            inner = [f"{res}#{i}" for i in range(len(types))]
        b.end_loop(inner, None, types)
        self.store(base, vecs, results)

    def store(self, base, vecs, values):
        b = self.b
        for i, row in enumerate(base):
            for j, (at, w) in enumerate(vecs):
                b.emit(f"vector.store {values[i * len(vecs) + j]}, {self.accf[0]}[{b.idx(b.add(row, at))}] "
                       f": {self.accf[1]}, vector<{w}xf32>")

    # ------------------------------------------------------------------ the loops
    def each_tile_of_block(self, k_first, k_end, f):
        """f(r, s, c0, k0, mt) for every tap, C tile and K tile (tiles [k_first, k_end) of NT filters)."""
        b, p = self.b, self.p
        full, rest = divmod(p.c, self.mt)
        for r in range(p.r):
            for s in range(p.s):
                kt = b.open_for(k_first, k_end)
                k0 = b.mul(kt, self.nt)
                if full:
                    ct = b.open_for(0, full)
                    f(r, s, b.mul(ct, self.mt), k0, self.mt)
                    b.close()
                if rest:
                    f(r, s, full * self.mt, k0, rest)
                b.close()

    def each_row_of_block(self, k_first, k_end, f):
        """f(offset) at the first element of every (r, s, c) row of the block's filters, then close."""
        b, p = self.b, self.p
        row = b.open_for(0, p.r * p.s * p.c)
        kt = b.open_for(k_first, k_end)
        f(b.add(b.mul(row, p.k), b.mul(kt, self.nt)))
        b.close()
        b.close()

    def zero(self, at):
        for off, w in self.vecs:
            self.b.emit(f"vector.store {self.b.const(0.0, f'vector<{w}xf32>')}, {self.accf[0]}"
                        f"[{self.b.idx(self.b.add(at, off))}] : {self.accf[1]}, vector<{w}xf32>")

    def round_out(self, at):
        b = self.b
        for off, w in self.vecs:
            i = b.add(at, off)
            t = b.narrow(b.load_f32(self.accf, i, w, "f32"), w, self.dtype)
            b.emit(f"vector.store {t}, {self.outf[0]}[{b.idx(i)}] : {self.outf[1]}, vector<{w}x{self.dtype}>")

    def kernel(self, name: str) -> str:
        b, p = self.b, self.p
        self.xf, self.dyf, self.outf = b.flat(self.x), b.flat(self.dy), b.flat(self.out)
        size = p.r * p.s * p.c * p.k
        if self.dtype == "f32":
            self.accf = self.outf
        else:                     # f16/bf16: accumulated in f32, rounded once per block
            self.accf = (b.fresh("scratch"), f"memref<{size}xf32>")
            b.emit(f"{self.accf[0]} = memref.alloc() {{alignment = 64 : i64}} : {self.accf[1]}")
        part = b.fresh("part")
        b.emit(f"scf.forall ({part}) in ({self.parts}) {{")
        b.depth += 1
        first = b.op("arith.divui", b.mul(part, self.tiles_k), self.parts)
        end = b.op("arith.divui", b.add(b.mul(part, self.tiles_k), self.tiles_k), self.parts)
        blk = b.fresh("blk")
        b.emit(f"scf.for {blk} = {first} to {end} step {b.const(self.block)} {{")
        b.depth += 1
        blk_end = b.op("arith.minui", b.add(blk, self.block), end)
        self.each_row_of_block(blk, blk_end, self.zero)
        rows = p.n * p.oh
        chunk = b.open_for(0, -(-rows // self.rows))
        q0 = b.mul(chunk, self.rows)
        q1 = b.op("arith.minui", b.add(q0, self.rows), rows)
        self.each_tile_of_block(blk, blk_end, lambda r, s, c0, k0, mt: self.tile(r, s, c0, k0, mt, q0, q1))
        b.close()
        if self.dtype != "f32":
            self.each_row_of_block(blk, blk_end, self.round_out)
        b.close()
        b.close()
        return b.function(name, self.signature)   # prim-lower's buffer deallocation frees the scratch


def backward_weights_kernel(name: str, signature: list[tuple[str, str]], problem, params: dict, threads: int,
                            lanes: int) -> str:
    """The kernel function text: signature = [(x, dy, dw) memref types], the problem's filter gradient."""
    return _BackwardWeights(problem, params, signature, threads, lanes).kernel(name)

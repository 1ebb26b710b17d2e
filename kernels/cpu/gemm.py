"""gemm (CPU): a hand-structured (batched) GEMM kernel on memrefs, vector dialect.

    out[b, m, n] = epilogue( sum over k of A[b, m, k] * B[b?, k, n] )      (B[b?, n, k] with transpose_rhs)

for every prim.matmul the frontends emit: a 2-d rhs (the weights of a linear layer, shared by every
row of a batched lhs) or a batched rhs (attention's Q K^T and P V), transposed or not. The register
tile is the classic one of BLAS micro-kernels: MT rows x NT columns in MT x NT/L accumulators
vector<Lxf32>, L the target's vector lanes (Target.vector_lanes: 8 on AVX2, where 6 x 16 fills 12 of the
16 registers; 16 on AVX-512, where 8 x 32 fills 16 of the 32); per k, NT/L vector loads of B's row k, MT
scalar loads of A broadcast, MT x NT/L FMAs; the k loop unrolled KU times.

    scf.forall over (column part, batch, row chunk)    the threads (OpenMP; the part slowest, so that
      for each panel of NT columns of the part:        the static schedule gives each thread one part)
        [pack the panel: B[k, n0:n0+NT] -> buf[k]]
        for each MT-row tile of the chunk:             (the last chunk then the M % MT tail rows)
          acc = 0                                      f32 accumulators in registers (loop-carried)
          for k:  acc[i] += A[m0+i, k] * buf[k]
          epilogue: + bias[n], + residual, activation, round to the output type, one store per vector

A row chunk is a run of whole MT-row tiles (at most CHUNK_BYTES of A) that every panel passes over;
chunks are as many as make the items share evenly between the threads. Where they cannot (one
chunk of few rows: a linear layer at batch 1, a GEMV), the column panels are split between the threads
instead (parts): each thread then reads all of A, from L2, and half of B.

Packing copies a panel (K x NT) into a contiguous stack buffer (memref.alloca in an alloca_scope, one per
item): it makes a transposed rhs (B[n, k], NT values of a k strided by K) a plain vector load, and turns
the strided rows of a wide B into one stream (measured: 120-160 GFLOP/s packed against 50-90 unpacked on
BERT's GEMMs, 2-core AVX2). f16/bf16 operands are widened to f32 on load (the packed panel is f32) and the
result rounded once, at the store. B can also come packed already (problem.panels = NT: [N/NT, K, NT], a
constant rhs packed by prim-select, or a pointwise convolution's "KRSC<NT>k" filter). Tails (N % NT columns, M % MT rows) are tiles of the exact
smaller size; every shape is static, every memref viewed 1-d. erf (GELU) and exp (sigmoid, SiLU) are vector
polynomials (kernels/cpu/vmath.py).
A thin tile (a GEMV's one row: two accumulators) spreads its unrolled k steps over several accumulator sets,
added after the loop, so that CHAINS independent FMAs are in flight.
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body, VectorOps, kernel_arguments
from openprim.kernels.semantics import activation

# The most of A (MT-row tiles x K, f32) a row chunk holds. Every chunk packs all of B again, so chunks are
# few: measured on the idle 2-core machine, BERT's FFN2 ([128, 3072] x [3072, 768]) ran in 12.0 ms with
# 384 KB chunks (6 of them), 8.9 ms with 1 MB, 5.1 ms with 4 MB (one chunk, the columns split).
CHUNK_BYTES = 4 << 20
KU = 4      # the k loop's unrolling
CHAINS = 8  # independent FMA chains that hide the FMA latency (4 cycles, 2 per cycle)
# Deep reductions are split into blocks of about KC, each done for every panel before the next, so that the
# block of A stays in L2 while the panels pass (whole, BERT's FFN2 A of [128, 3072] is 1.5 MB, read again
# for each of its 48 panels). The partial sums go to an f32 scratch [M, N]; the last block adds them back and
# applies the epilogue.
KC = 768
K_BLOCKED = 2 * KC   # deeper reductions (of one batch, packed, an A larger than L2) are blocked
L2_BYTES = 512 << 10


def blocks_k(p, packed: bool) -> bool:
    """Whether the reduction is done in blocks of about KC (module constants): B packed (each block's panel
    then fits the stack whatever K), one batch, deep, and an A larger than L2."""
    return packed and p.batch == 1 and p.k >= K_BLOCKED and p.m * p.k * 4 > L2_BYTES


class _Gemm:
    """The kernel of one GemmProblem with its register tile (params mt, nt, pack)."""

    def __init__(self, p, params, attrs, signature, threads, lanes):
        self.p, self.attrs, self.threads, self.lanes = p, attrs, threads, lanes
        self.prepacked = bool(p.panels)   # B stored as its panels, [N/NT, K, NT]
        self.mt, self.nt = params["mt"], params["nt"]
        self.pack = (bool(params["pack"]) or p.transpose_rhs) and not self.prepacked
        assert p.panels in (0, self.nt) and not (p.panels and (p.batched_rhs or p.n % self.nt)), \
            "panels: whole NT-column panels of one B"
        self.dtype = p.dtype
        self.a, self.bm, self.bias, self.residual, self.out = kernel_arguments(signature, p.epilogue)
        self.signature = signature
        self.b = Body()
        blocks = math.ceil(p.k / KC) if blocks_k(p, self.pack or self.prepacked) else 1
        depth = -(-p.k // blocks)                   # every K block's but the last
        last = depth * (blocks - 1)
        assert last < p.k, "K blocks: the last one is not empty"
        # (first k, depth, count) of each run of K blocks: the first, the middle ones as one loop, the last
        self.k_runs = [(0, depth if blocks > 1 else p.k, 1)] + \
            ([(depth, depth, blocks - 2)] if blocks > 2 else []) + \
            ([(last, p.k - last, 1)] if blocks > 1 else [])

    # ------------------------------------------------------------------ memory
    def load(self, buf, offset, width: int = 0, dtype: str | None = None) -> str:
        """buf[offset] (width 0) or the vector buf[offset : offset + width], as f32."""
        dtype = dtype or self.dtype
        name, mtype = buf
        n = self.b.fresh("ld")
        vt = f"vector<{width}x{dtype}>" if width else dtype
        if width:
            self.b.emit(f"{n} = vector.load {name}[{self.b.idx(offset)}] : {mtype}, {vt}")
        else:
            self.b.emit(f"{n} = memref.load {name}[{self.b.idx(offset)}] : {mtype}")
        if dtype == "f32":
            return n
        w = self.b.fresh("x")
        self.b.emit(f"{w} = arith.extf {n} : {vt} to {vt.replace(dtype, 'f32')}")
        return w

    # ------------------------------------------------------------------ one panel
    def pack_panel(self, b_off, n0, width: int, k0, depth: int) -> None:
        """buf[(k - k0)*NT + j] = B[k, n0 + j] for k0 <= k < k0 + depth, j < width (f32): a vector copy of each
        row k, or, with a transposed rhs, `width` scalar loads along B's rows gathered into one vector per k."""
        b, p = self.b, self.p
        kb = b.open_for(0, depth)
        k = b.add(kb, k0)
        if p.transpose_rhs:
            lanes = [self.load(self.bf, b.add(b_off, b.add(b.mul(b.add(n0, j), p.k), k))) for j in range(width)]
            v = b.fresh("row")
            b.emit(f"{v} = vector.from_elements {', '.join(lanes)} : vector<{width}xf32>")
        else:
            v = self.load(self.bf, b.add(b_off, b.add(b.mul(k, p.n), n0)), width)
        b.emit(f"vector.store {v}, {self.buf}[{b.idx(b.mul(kb, self.nt))}] : {self.buf_t}, vector<{width}xf32>")
        b.close()

    def tile(self, a_off, out_off, m0, n0, rows: int, width: int, b_off, k0=0, depth: int | None = None) -> None:
        """One register tile: rows x width outputs at (m0, n0) of one batch, as rows x (width / L)
        accumulators vector<L x f32> (a narrower last one for width % L), over k0 <= k < k0 + depth (the k loop unrolled
        KU times). A K block after the first starts from the partial sums in the scratch; one before the
        last leaves them there; the last applies the epilogue."""
        b, p = self.b, self.p
        depth = p.k if depth is None else depth
        first, last = isinstance(k0, int) and k0 == 0, isinstance(k0, int) and k0 + depth == p.k
        lanes = self.lanes
        widths = [lanes] * (width // lanes) + [width % lanes] * (width % lanes > 0)
        types = [f"vector<{w}xf32>" for w in widths]
        partial = lambda i, j: b.add(b.mul(b.add(m0, i), p.n), b.add(n0, j * lanes))  # noqa: E731
        if first:
            zeros = [b.const(0.0, t) for _ in range(rows) for t in types]
        else:
            zeros = [self.load(self.partials, partial(i, j), w, "f32") for i in range(rows) for j, w in enumerate(widths)]
        a_rows = [b.add(a_off, b.mul(b.add(m0, i), p.k)) for i in range(rows)]

        def step(kr, accs):
            """k = k0 + kr, kr within the block."""
            k = b.add(kr, k0)
            if self.pack:
                bk, buf = b.mul(kr, self.nt), (self.buf, self.buf_t)
                bvs = [self.load(buf, b.add(bk, j * lanes), w, "f32") for j, w in enumerate(widths)]
            elif self.prepacked:
                bk = b.add(b.mul(n0, p.k), b.mul(k, self.nt))
                bvs = [self.load(self.bf, b.add(bk, j * lanes), w) for j, w in enumerate(widths)]
            else:
                bk = b.add(b_off, b.add(b.mul(k, p.n), n0))
                bvs = [self.load(self.bf, b.add(bk, j * lanes), w) for j, w in enumerate(widths)]
            out = []
            for i in range(rows):
                av = self.load(self.af, b.add(a_rows[i], k))
                for j, (w, t) in enumerate(zip(widths, types)):
                    s, f = b.fresh("bc"), b.fresh("fma")
                    b.emit(f"{s} = vector.broadcast {av} : f32 to {t}")
                    b.emit(f"{f} = vector.fma {s}, {bvs[j]}, {accs[len(out)]} : {t}")
                    out.append(f)
            return out

        ku = KU if depth >= KU else 1
        # A thin tile (a GEMV's one row) has too few accumulators to hide the FMA latency: the unrolled
        # k steps then go to `sets` separate sets of them, added together after the loop.
        sets = max(1, min(ku, CHAINS // len(zeros)))
        accs = zeros
        if depth // ku:
            fresh = [b.const(0.0, t) for _ in range(rows) for t in types] * (sets - 1)
            kk, args, loop_accs = b.loop(0, depth // ku, zeros + fresh, None, types * rows * sets)
            out = [list(args[i * len(zeros):(i + 1) * len(zeros)]) for i in range(sets)]
            for u in range(ku):
                out[u % sets] = step(b.add(b.mul(kk, ku), u), out[u % sets])
            b.end_loop([v for o in out for v in o], None, types * rows * sets)
            accs = loop_accs[:len(zeros)]
            for i in range(1, sets):
                accs = [b.op("arith.addf", x, y, t) for x, y, t in zip(accs, loop_accs[i * len(zeros):], types * rows)]
        for kr in range(depth // ku * ku, depth):
            accs = step(kr, accs)
        if not last:
            for i in range(rows):
                for j, w in enumerate(widths):
                    b.emit(f"vector.store {accs[i * len(widths) + j]}, {self.partials[0]}[{b.idx(partial(i, j))}] : "
                           f"{self.partials[1]}, vector<{w}xf32>")
            return
        self.store(out_off, m0, n0, widths, accs)

    def store(self, out_off, m0, n0, widths: list[int], accs) -> None:
        """The epilogue of a tile: + bias + residual, activation, rounding, one store per vector."""
        b, lanes = self.b, self.lanes
        for j, w in enumerate(widths):
            ops = VectorOps(b, w)
            n = b.add(n0, j * lanes)
            bias = self.load(self.biasf, n, w) if self.bias else None
            for i in range(len(accs) // len(widths)):
                at = b.add(out_off, b.add(b.mul(b.add(m0, i), self.p.n), n))
                y = accs[i * len(widths) + j]
                if bias:
                    y = ops.scalar("arith.addf", y, bias)
                if self.residual:
                    y = ops.scalar("arith.addf", y, self.load(self.resf, at, w))
                y = activation(ops, self.attrs["activation"], self.attrs["activation_params"], y)
                y = b.narrow(y, w, self.dtype)
                b.emit(f"vector.store {y}, {self.outf[0]}[{b.idx(at)}] : {self.outf[1]}, vector<{w}x{self.dtype}>")

    def rows(self, a_off, out_off, b_off, m_lo, m_hi, tail: int, part) -> None:
        """This part's column panels of rows [m_lo, m_hi) (whole MT-row tiles) or, tail > 0, of the
        tail rows; the last part also takes the N % NT tail panel. With K blocks, block by block (every
        panel of one block before the next: the block of A stays in L2 while the panels pass)."""
        b, p = self.b, self.p
        full, rest = divmod(p.n, self.nt)

        def panel(n0, width, k0, depth):
            if self.pack:
                self.pack_panel(b_off, n0, width, k0, depth)
            if tail:
                self.tile(a_off, out_off, p.m - tail, n0, tail, width, b_off, k0, depth)
            else:
                t = b.open_for(m_lo, m_hi)
                self.tile(a_off, out_off, b.mul(t, self.mt), n0, self.mt, width, b_off, k0, depth)
                b.close()

        for first_k, depth, count in self.k_runs:
            k0 = first_k if count == 1 else b.add(b.mul(b.open_for(0, count), depth), first_k)
            if full:
                lo, hi = (0, full) if self.parts == 1 else \
                    (b.op("arith.divui", b.mul(part, full), self.parts),
                     b.op("arith.divui", b.add(b.mul(part, full), full), self.parts))
                panel(b.mul(b.open_for(lo, hi), self.nt), self.nt, k0, depth)
                b.close()
            if rest:
                self.when(part, self.parts - 1, lambda: panel(full * self.nt, rest, k0, depth))
            if count > 1:
                b.close()

    def when(self, value, equals: int, then, otherwise=None) -> None:
        """scf.if value == equals (both branches statically decided when value is a Python int)."""
        b = self.b
        if isinstance(value, int):
            (then if value == equals else (otherwise or (lambda: None)))()
            return
        cond = b.fresh("is")
        b.emit(f"{cond} = arith.cmpi eq, {value}, {b.const(equals)} : index")
        b.emit(f"scf.if {cond} {{")
        b.depth += 1
        then()
        if otherwise:
            b.depth -= 1
            b.emit("} else {")
            b.depth += 1
            otherwise()
        b.close()

    # ------------------------------------------------------------------ the whole kernel
    def split(self) -> tuple[int, int]:
        """(row chunks per batch, column parts): a chunk's rows of A (of one K block) within CHUNK_BYTES
        (they stay in L2 while its panels pass; BERT's FFN2 at batch 8, [1024, 3072] x [3072, 768], ran at
        149 GFLOP/s as one chunk of K blocks against 112 in four chunks of the whole K), rounded up so that the (batch, chunk) items share evenly between the
        threads; where they cannot (a single chunk of few rows), the columns are split between the
        threads instead (a batch's A then stays in L2 for every thread, and B is read once)."""
        p, tiles, full = self.p, self.p.m // self.mt, self.p.n // self.nt
        depth = self.k_runs[0][1]   # of A a chunk holds at a time
        chunks = math.ceil(tiles / max(1, CHUNK_BYTES // (self.mt * depth * 4))) if tiles else 0
        if chunks == 1 and p.batch == 1 and tiles >= self.threads and p.m > p.n:
            chunks = self.threads   # A outweighs B (a pointwise convolution's pixels): the rows are split
        if chunks > 1 and (p.batch * chunks) % self.threads:
            chunks = min(tiles, math.ceil(chunks / self.threads) * self.threads)
        if (p.batch * max(chunks, 1)) % self.threads == 0 or full < self.threads:
            return chunks, 1
        return chunks, self.threads

    def kernel(self, name: str) -> str:
        b, p = self.b, self.p
        self.af, self.bf, self.outf = self.b.flat(self.a), self.b.flat(self.bm), self.b.flat(self.out)
        self.biasf = self.b.flat(self.bias) if self.bias else None
        self.resf = self.b.flat(self.residual) if self.residual else None
        if len(self.k_runs) > 1:
            self.partials = (b.fresh("partials"), f"memref<{p.m * p.n}xf32>")
            b.emit(f"{self.partials[0]} = memref.alloc() {{alignment = 64 : i64}} : {self.partials[1]}")
        chunks, self.parts = self.split()
        tiles, tail = p.m // self.mt, p.m % self.mt
        per_batch = max(chunks, 1)   # the M % MT tail rows go with the last chunk
        span = math.ceil(tiles / chunks) if chunks else 0
        items = p.batch * per_batch
        it = b.fresh("it")
        # the part is the slowest index: OpenMP's static schedule gives each thread one part
        b.emit(f"scf.forall ({it}) in ({items * self.parts}) {{")
        b.depth += 1
        part, row = (b.op("arith.divui", it, items), b.op("arith.remui", it, items)) if self.parts > 1 else (0, it)
        bt, c = (b.op("arith.divui", row, per_batch), b.op("arith.remui", row, per_batch)) if per_batch > 1 \
            else (row, 0)
        a_off, out_off = b.mul(bt, p.m * p.k), b.mul(bt, p.m * p.n)
        b_off = b.mul(bt, p.k * p.n) if p.batched_rhs else 0
        if self.pack:
            self.buf, self.buf_t = b.fresh("buf"), f"memref<{self.k_runs[0][1] * self.nt}xf32>"
            b.emit("memref.alloca_scope {")
            b.depth += 1
            b.emit(f"{self.buf} = memref.alloca() {{alignment = 64 : i64}} : {self.buf_t}")

        def chunk():
            lo = b.mul(c, span)
            hi = b.op("arith.minsi", b.add(lo, span), tiles) if tiles % span else b.add(lo, span)
            self.rows(a_off, out_off, b_off, lo, hi, 0, part)

        def tail_rows():
            self.rows(a_off, out_off, b_off, 0, 0, tail, part)

        if chunks:
            chunk()
        if tail:
            self.when(c, per_batch - 1, tail_rows)
        if self.pack:
            b.close()
        b.depth -= 1
        b.emit("}")
        return b.function(name, self.signature, self.residual)


def gemm_kernel(name: str, signature: list[tuple[str, str]], problem, params: dict, attrs: dict,
                threads: int, lanes: int) -> str:
    """The kernel function text: signature = [(argument, memref type)] in kernel order (lhs, rhs,
    [bias], [residual], output); problem a solvers.GemmProblem, params {mt, nt, pack}; lanes the
    accumulators' width (Target.vector_lanes)."""
    return _Gemm(problem, params, attrs, signature, threads, lanes).kernel(name)

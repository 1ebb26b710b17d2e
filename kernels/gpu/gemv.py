"""Matmuls of a few rows on GPUs (a decode step's projections: one token per sequence), at memory speed.

    out[M, N] = act(A[M, K] . B[K, N] + bias[n] + residual[m, n]),   M <= MAX_ROWS

The tiled GEMMs (gemm.py, the matrix-core kernels) compute a 64- or 128-row tile per block: with one row
of A, 127 of 128 rows are computed in vain, and B, the weights that are the whole traffic, is read by a
few blocks (GPT-2's 768 x 768 projection on sm_90: 6 blocks of 128 columns, split 3 ways over k, then a
second launch to add the parts). Here each block reads a slab of B's columns once, for every row of A:

    grid (column chunks), block (CT column lanes, KT = THREADS / CT k lanes):
        n = V columns of lane tx (one 16-byte vector of B where N allows: 8 x f16/bf16, 4 x f32)
        for each group of U consecutive k of lane ty (groups ty, ty + KT, ...; U loads of B in flight):
            b_u = B[k + u, n:n+V]                 vector loads; a warp reads CT vectors of 32 / CT rows
            a_m = A[m, k:k+U]                     one U-vector per row (L1 hits: the CT lanes share it)
            acc_m += a_m[u] * b_u                 M vector<V x f32> accumulators (f32 for every dtype)
        the KT partial sums of each (m, n): xor shuffles over the lanes of a 32-lane group that share tx,
        then the THREADS / 32 groups' sums through shared memory (one barrier)
        thread (m, tx) of the first M * CT: sum of the groups' values + bias + residual, activation, cast,
        one vector store

No split of k across blocks, so one launch and no scratch: CT shrinks (down to a 32-byte sector a row per
warp) until the chunks give every multiprocessor a block. A group of U past K (K / U not a multiple of
KT) reads a clamped group, and both its A and B values are zeroed by a select, so no load waits on a
branch. Lanes past N (a ragged last chunk) read the last vector and do not store.
"""
from __future__ import annotations

from dataclasses import dataclass

from .gemm import WG, Emitter, GemmSpec, collapse_at, operands, store_vector
from .pool import ITEM, THREADS
from .rows import SLOTS, norm_statistics

MAX_ROWS = 8          # rows of A (accumulators per thread: MAX_ROWS x V f32)
GROUP = 32            # lanes that shuffle with each other (a warp; half a wave64 on AMD)
SECTOR = 32           # bytes: the least a warp should read of each row of B
SHARED_FLOATS = 8192  # the groups' sums: THREADS / GROUP x M x CT x V floats at most (32 KB)


def vector_width(n: int, dtype: str) -> int:
    """V: the columns a lane reads at once, the widest of at most 16 bytes that divides N."""
    return next(v for v in (8, 4, 2, 1) if v * ITEM[dtype] <= 16 and n % v == 0)


def unroll(k: int) -> int:
    """U: consecutive k of a lane's group (U loads of B in flight; A read as a U-vector)."""
    return next(u for u in (4, 2, 1) if k % u == 0)


def lanes_options(m: int, n: int, dtype: str) -> list[int]:
    """The column lanes CT that fit: powers of two up to a warp whose groups' sums fit shared memory, from
    the fewest that read a whole 32-byte sector of a row of B."""
    v = vector_width(n, dtype)
    least = max(1, SECTOR // (v * ITEM[dtype]))
    return [ct for ct in (1, 2, 4, 8, 16, 32)
            if ct >= min(least, 32) and THREADS // GROUP * m * ct * v <= SHARED_FLOATS and m * ct <= THREADS]


def default_lanes(m: int, n: int, dtype: str, units: int) -> int:
    """The most column lanes whose chunks still give every multiprocessor a block (wider chunks: fewer
    blocks, but fewer rows of B per warp and fewer partial sums to add); the fewest where none does."""
    v, options = vector_width(n, dtype), lanes_options(m, n, dtype)
    return max((ct for ct in options if -(-n // (ct * v)) >= units), default=options[0])


@dataclass(frozen=True)
class RowNorm:
    """A norm_matmul's prologue: A's rows normalized (layer_norm or rms_norm over K) as the GEMV reads them.
    scale / shift: the kernel arguments of the norm's parameters, or None."""
    kind: str
    epsilon: float
    scale: str | None
    shift: str | None

    @staticmethod
    def split(signature: list[tuple[str, str]], given: tuple, attrs: dict):
        """(the GEMM's signature: A, B, bias?, residual?, out; the RowNorm) of a norm_matmul kernel's
        signature (input, scale?, shift?, rhs, bias?, residual?, out)."""
        rest = list(signature)
        a = rest.pop(0)
        scale = rest.pop(0)[0] if given[1] else None
        shift = rest.pop(0)[0] if given[2] else None
        return [a] + rest, RowNorm(attrs["norm"], attrs["epsilon"], scale, shift)

    def normalized(self, e: Emitter, v: str, width: int, mean: str, factor: str, scale_shift: list[str | None],
                   dtype: str) -> str:
        """((v - mean) * factor * scale + shift) of vector<width x f32> v, rounded to dtype and back (the
        unfused norm's output is stored in dtype); scale_shift: those parameters' loaded f32 vectors."""
        ft = f"vector<{width}xf32>"

        def splat(s_: str) -> str:
            b = e.fresh("b")
            e.emit(f"{b} = vector.broadcast {s_} : f32 to {ft}")
            return b

        if self.kind == "layer_norm":
            v = e.op("arith.subf", v, splat(mean), ft)
        v = e.op("arith.mulf", v, splat(factor), ft)
        for p, op in zip(scale_shift, ("arith.mulf", "arith.addf")):
            if p is not None:
                v = e.op(op, v, p, ft)
        if dtype == "f32":
            return v
        narrow, wide = e.fresh("t"), e.fresh("t")
        e.emit(f"{narrow} = arith.truncf {v} : {ft} to vector<{width}x{dtype}>")
        e.emit(f"{wide} = arith.extf {narrow} : vector<{width}x{dtype}> to {ft}")
        return wide


def norm_applicable(k: int, dtype: str) -> str | None:
    """Whether a norm_matmul's prologue can normalize rows of K (norm_statistics keeps a row in a warp's
    registers, as the unfused norm's warp kernel does)."""
    vec = 16 // ITEM[dtype]
    if k % vec or k // vec > 32 * SLOTS:
        return f"normalized rows of {k}: the prologue takes multiples of {vec} up to {32 * SLOTS * vec}"
    return None


def applicable(m: int, n: int, k: int, dtype: str) -> str | None:
    if dtype not in ITEM:
        return f"{dtype}: takes f32, f16 or bf16"
    if m > MAX_ROWS:
        return f"{m} rows (takes at most {MAX_ROWS}: more are a GEMM's)"
    return None


def gemv_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, lanes: int,
                norm: RowNorm | None = None, signature: list[tuple[str, str]] | None = None) -> str:
    """The kernel function (outline's signature: A [..., K] with M rows, B [K, N], bias?, residual?, out);
    with `norm`, A's rows normalized as they are read (a norm_matmul: its kernel's whole `signature`)."""
    M, N, K, dt = spec.m, spec.n, spec.k, spec.dtype
    V, U, CT = vector_width(N, dt), unroll(K), lanes
    KT, G = THREADS // CT, THREADS // GROUP
    KG = K // U                                   # groups of U k
    steps = -(-KG // KT)
    ragged = steps * KT > KG
    chunks = -(-N // (CT * V))
    types, rank, (a, b, bias, residual, out) = operands(params_sig, spec)
    vb, fb = f"vector<{V}x{dt}>", f"vector<{V}xf32>"
    fa = f"vector<{U}xf32>"
    a_t, b_t, o_t = f"memref<{M}x{K}x{dt}>", f"memref<{K}x{N}x{dt}>", f"memref<{M}x{N}x{dt}>"
    red_t = f"memref<{G}x{M}x{CT * V}xf32, {WG}>"
    stats_t = f"memref<{M}x2xf32, {WG}>"
    e = Emitter()
    a2 = collapse_at(e, a, types[a], [rank(a) - 1])[0]
    out2 = collapse_at(e, out, types[out], [rank(out) - 1])[0]
    res2 = collapse_at(e, residual, types[residual], [rank(residual) - 1])[0] if residual else None

    def widen(raw: str, narrow: str, wide: str) -> str:
        if dt == "f32":
            return raw
        w = e.fresh("w")
        e.emit(f"{w} = arith.extf {raw} : {narrow} to {wide}")
        return w

    def zeros(ty: str) -> str:
        z = e.fresh("z")
        e.emit(f"{z} = arith.constant dense<0.0> : {ty}")
        return z

    one = e.c(1)
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(chunks)}, %gy = {one}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(CT)}, %sy = {e.c(KT)}, %sz = {one}) workgroup(%red : {red_t}"
           f"{f', %stats : {stats_t}' if norm else ''}) {{")
    types = dict(signature or params_sig)
    if norm:   # the rows' statistics first (every block computes them: M rows of A, read from L2)
        norm_statistics(e, norm.kind, norm.epsilon, a2, a_t, M, K, dt, THREADS // 32, "%stats", stats_t,
                        e.add("%tx", e.mul("%ty", e.c(CT))))
        e.emit("gpu.barrier")
        stats = []
        for m in range(M):
            pair = []
            for j in range(2):
                v = e.fresh("st")
                e.emit(f"{v} = memref.load %stats[{e.c(m)}, {e.c(j)}] : {stats_t}")
                pair.append(v)
            stats.append(pair)
    col = e.add(e.mul("%bx", e.c(CT)), "%tx")                       # this lane's column vector
    n = e.mul(e.op("arith.minui", col, e.c(N // V - 1)), e.c(V))    # lanes past N read the last
    zb, za = zeros(fb), zeros(fa)
    accs = [e.fresh("acc") for _ in range(M)]
    results = [e.fresh("sum") for _ in range(M)]
    step = e.fresh("j")
    e.open(f"{', '.join(results)} = scf.for {step} = {e.c(0)} to {e.c(steps)} step {one} "
           f"iter_args({', '.join(f'{x} = {zb}' for x in accs)}) -> ({', '.join([fb] * M)}) {{"
           if M > 1 else
           f"{results[0]} = scf.for {step} = {e.c(0)} to {e.c(steps)} step {one} iter_args({accs[0]} = {zb}) "
           f"-> ({fb}) {{")
    group = e.add("%ty", e.mul(step, e.c(KT)))
    inside = e.cmp("ult", group, e.c(KG)) if ragged else None
    k0 = e.mul(e.op("arith.minui", group, e.c(KG - 1)) if ragged else group, e.c(U))

    def vec_load(param: str, k: str) -> str:
        """U consecutive values of a norm parameter [K] at k."""
        raw = e.fresh("l")
        e.emit(f"{raw} = vector.load {param}[{k}] : {types[param]}, vector<{U}x{dt}>")
        return raw

    def load(memref: str, idx: list[str], mtype: str, width: int) -> str:
        """vector<width x f32> of memref[idx], zeros for a group past K."""
        narrow, wide = f"vector<{width}x{dt}>", f"vector<{width}xf32>"
        raw = e.fresh("l")
        e.emit(f"{raw} = vector.load {memref}[{', '.join(idx)}] {{alignment = {width * ITEM[dt]}}} : {mtype}, {narrow}")
        v = widen(raw, narrow, wide)
        if not ragged:
            return v
        kept = e.fresh("l")
        e.emit(f"{kept} = arith.select {inside}, {v}, {zb if width == V else za} : {wide}")
        return kept

    bs = [load(b, [e.add(k0, e.c(u)), n], b_t, V) for u in range(U)]
    if norm:
        params = [None if p is None else widen(vec_load(p, k0), f"vector<{U}x{dt}>", fa) for p in (norm.scale, norm.shift)]
    new = []
    for m, acc in enumerate(accs):
        av = load(a2, [e.c(m), k0], a_t, U)
        if norm:
            av = norm.normalized(e, av, U, *stats[m], params, dt)
        for u, bv in enumerate(bs):
            x, splat = e.fresh("x"), e.fresh("s")
            e.emit(f"{x} = vector.extract {av}[{u}] : f32 from {fa}")
            e.emit(f"{splat} = vector.broadcast {x} : f32 to {fb}")
            nxt = e.fresh("acc")
            e.emit(f"{nxt} = vector.fma {splat}, {bv}, {acc} : {fb}")
            acc = nxt
        new.append(acc)
    e.emit(f"scf.yield {', '.join(new)} : {', '.join([fb] * M)}")
    e.close()

    # the KT partial sums: shuffles within a 32-lane group (its lanes of equal tx), then shared memory
    lin = e.add("%tx", e.mul("%ty", e.c(CT)))
    width = e.fresh("w")
    e.emit(f"{width} = arith.constant {GROUP} : i32")
    offsets = []
    d = CT
    while d < GROUP:
        o = e.fresh("o")
        e.emit(f"{o} = arith.constant {d} : i32")
        offsets.append(o)
        d *= 2
    lead = e.cmp("ult", e.rem(lin, e.c(GROUP)), e.c(CT))
    g = e.div(lin, e.c(GROUP))
    for m, total in enumerate(results):
        lanes = []
        for j in range(V):
            s_ = e.fresh("s")
            e.emit(f"{s_} = vector.extract {total}[{j}] : f32 from {fb}")
            for o in offsets:
                other, ok = e.fresh("sh"), e.fresh("ok")
                e.emit(f"{other}, {ok} = gpu.shuffle xor {s_}, {o}, {width} : f32")
                s_ = e.scalar("arith.addf", s_, other)
            lanes.append(s_)
        summed = e.fresh("v")
        e.emit(f"{summed} = vector.from_elements {', '.join(lanes)} : {fb}")
        e.open(f"scf.if {lead} {{")
        e.emit(f"vector.store {summed}, %red[{g}, {e.c(m)}, {e.mul('%tx', e.c(V))}] : {red_t}, {fb}")
        e.close()
    e.emit("gpu.barrier")
    # thread (m, c) of the first M * CT: the groups' sums of row m's column vector c, the epilogue, the store
    e.open(f"scf.if {e.cmp('ult', lin, e.c(M * CT))} {{")
    m, c = e.div(lin, e.c(CT)), e.rem(lin, e.c(CT))
    cn = e.add(e.mul("%bx", e.c(CT)), c)
    e.open(f"scf.if {e.cmp('ult', cn, e.c(N // V))} {{")
    total = None
    for gi in range(G):
        v = e.fresh("r")
        e.emit(f"{v} = vector.load %red[{e.c(gi)}, {m}, {e.mul(c, e.c(V))}] : {red_t}, {fb}")
        total = v if total is None else e.op("arith.addf", total, v, fb)
    at = [m, e.mul(cn, e.c(V))]
    bias_f = None
    if bias:
        raw = e.fresh("bias")
        e.emit(f"{raw} = vector.load {bias}[{at[1]}] {{alignment = {V * ITEM[dt]}}} : {types[bias]}, {vb}")
        bias_f = widen(raw, vb, fb)
    store_vector(e, spec, total, bias_f, (out2, at, o_t), residual=(res2, at, o_t) if res2 else None, width=V)
    e.close()
    e.close()
    e.emit("gpu.terminator")
    e.close()
    sig = ", ".join(f"{p}: {ty}" for p, ty in signature or params_sig)
    return f"func.func @{name}({sig}) {{\n" + "\n".join(e.lines) + "\n    return\n}"

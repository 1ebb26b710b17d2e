"""Matmuls of up to 16 rows on NVIDIA tensor cores (sm_80+): a batch of decode steps' projections at memory speed.

    out[M, N] = act(A[M, K] . B[K, N] + bias[n] + residual[m, n]),   M <= 16, f16/bf16, f32 accumulation

At 16 rows (16 sequences decoding one token each) the SIMT GEMV (kernels/gpu/gemv.py) needs 16 FMAs per weight
it reads, ~48 TFLOP/s of fp32 at the H100's bandwidth, and the tiled GEMMs compute 64- or 128-row tiles for
16 rows and leave most multiprocessors idle unless k is split over blocks (a second launch to add the parts).
Here the 16 rows are the A operand of mma.sync m16n8k16, so the multiplies cost nothing next to the loads,
and each block streams a slab of B's columns over all of k, its warps splitting k among themselves:

    grid (N / BN column slabs), block (WARPS warps); warp w takes the k tiles of 16 in its run
    [w * RUN, (w + 1) * RUN), RUN = ceil(K / 16 / WARPS), through a ring of STAGES slots of its own:
        slot = (A tile 16 x 16, B tile 16 x BN), copied by cp.async (16 bytes a copy, zero-filled past
        M rows, past K and past N: the zero rows and columns multiply into nothing that is stored)
        prologue: tiles 0 .. STAGES-2, one commit group each
        for t in run: wait until tile t landed (cp.async.wait_group STAGES-2), warp barrier (the lanes'
                  copies visible to each other), copy tile t+STAGES-1 into the slot tile t-1 used,
                  a = ldmatrix.x4 A slot; for each 8 columns j: b = ldmatrix.x2.trans B slot[:, 8j],
                  acc[j] = mma.sync(a, b, acc[j])
    the warps' partial tiles (16 x BN f32) into shared memory over their own rings, one block barrier,
    then a thread per 8 output columns of a row adds the WARPS partials, the bias and residual, applies
    the activation and stores 16 bytes.

No block-wide barrier inside the loop: a warp only waits on its own copies. BN is the widest of 32, 16 and
8 that divides N and still gives every multiprocessor a block. Constant weights come packed in panels of BN
columns ([N/BN, K, BN], prim-select's RHS_PANELS: GemvMma.packed_rhs), so that a block's slab is one
contiguous run of K x BN; read in place from [K, N], a warp's copies are 16 pieces of BN x 2 bytes, N x 2
bytes apart (GPT-2's decode step at batch 16 on the H100: its norm_matmul GEMVs 652 -> 497 us launched
alone, 48 of them). A head of more than MAX_COLUMNS stays on the tiled GEMM.
"""
from __future__ import annotations

from openprim.kernels.gpu.gemm import WG, Emitter, GemmSpec, collapse_at, operands, store_vector
from openprim.kernels.gpu.gemv import RowNorm
from openprim.kernels.gpu.rows import norm_statistics
from openprim.kernels.nvidia.mma import fragment_types, mma_sync

MAX_ROWS = 16                       # the m of one mma.sync tile
KS = 16                             # k per mma.sync (f16/bf16)
VEC = 8                             # elements per 16-byte copy
PAD = 8                             # elements appended to each shared row: conflict-free ldmatrix
# The most columns it takes: a vocabulary head streams faster on the tiled GEMM. On the H100 (bench/RESULTS.md,
# 2026-12-07 afternoon) GPT-2's 16 x 768 x 50264 head took 82 us in 1571 slabs of 32 (240 us in 6283 of 8)
# against 38 us for gemm_wgmma, while the 768-3072-column projections were as fast or faster here.
MAX_COLUMNS = 8192
# (BN columns, warps, stages), indexed by the solver's "tile" parameter.
CONFIGS = [(8, 8, 4), (16, 8, 4), (32, 8, 4), (16, 4, 6), (8, 8, 6)]


def applicable(m: int, n: int, k: int, dtype: str) -> str | None:
    if dtype not in ("f16", "bf16"):
        return f"{dtype}: the mma.sync GEMV takes f16 or bf16"
    if m > MAX_ROWS:
        return f"{m} rows (takes at most {MAX_ROWS}: more are a GEMM's)"
    if n % VEC or k % VEC:
        return f"needs K and N that are multiples of {VEC} (16-byte rows)"
    if n > MAX_COLUMNS:
        return f"{n} columns (takes at most {MAX_COLUMNS}: a head that wide streams faster on the tiled GEMM)"
    return None


def ring_bytes(config) -> int:
    """Shared memory of one warp's ring: STAGES slots of A (16 x (16 + PAD)) and B (16 x (BN + PAD))."""
    bn, _, stages = config
    return stages * KS * (KS + PAD + bn + PAD) * 2


def default_config(n: int, units: int, panels: int = 0) -> int:
    """Weights already in panels: the slab of their width. Else slabs that divide N (so that constant weights
    can be packed in their panels): 32 columns while that leaves every other multiprocessor a block, else
    16 columns with 4 warps and 6 stages, else 8. Measured on the H100 (bench/RESULTS.md, 2026-12-07
    afternoon, 16 rows): a block's fixed cost outweighs the idle multiprocessors of a smaller grid, so
    768 x 2304 and 768 x 3072 ran 1.5-1.7x faster in 72-96 slabs of 32 than in 144-192 of 16, and the
    768-column projections fastest in 48 slabs of 16 with 4 warps (3.3 and 7.6 us, cuBLAS 3.3 and 6.3)."""
    if panels:
        return next(i for i, (bn, _, _) in enumerate(CONFIGS) if bn == panels)
    if n % 32 == 0 and 2 * (n // 32) >= units:
        return 2
    return 3 if n % 16 == 0 else 0


def gemv_mma_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, config: int,
                    norm: RowNorm | None = None, signature: list[tuple[str, str]] | None = None,
                    panels: int = 0) -> str:
    """The kernel function (outline's signature: A [..., K] with M rows, B [K, N] or its [N/BN, K, BN] panels
    (panels = BN), bias?, residual?, out); with `norm`, A's rows normalized in each warp's ring before they
    are multiplied (a norm_matmul: its kernel's whole `signature`): every block first computes the M rows'
    statistics into shared memory."""
    M, N, K, dt = spec.m, spec.n, spec.k, spec.dtype
    BN, WARPS, STAGES = CONFIGS[config]
    RING = ring_bytes(CONFIGS[config])
    A_SLOT, B_SLOT = KS * (KS + PAD) * 2, KS * (BN + PAD) * 2
    RUN = -(-(-(-K // KS)) // WARPS)                        # k tiles per warp
    per_row = BN // VEC
    types, rank, (a, b, bias, residual, out) = operands(params_sig, spec)
    assert panels in (0, BN), f"panels of {panels} columns for slabs of {BN}"
    a_t, o_t = f"memref<{M}x{K}x{dt}>", f"memref<{M}x{N}x{dt}>"
    b_t = f"memref<{N // BN}x{K}x{BN}x{dt}>" if panels else f"memref<{K}x{N}x{dt}>"
    e = Emitter()
    a2 = collapse_at(e, a, types[a], [rank(a) - 1])[0]
    out2 = collapse_at(e, out, types[out], [rank(out) - 1])[0]
    res2 = collapse_at(e, residual, types[residual], [rank(residual) - 1])[0] if residual else None
    one, zero = e.c(1), e.c(0)
    smem = e.fresh("smem")
    e.emit(f"{smem} = arith.constant {WARPS * RING + (M * 8 if norm else 0)} : i32")
    types = dict(signature or params_sig)
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-N // BN))}, %gy = {one}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(32 * WARPS)}, %sy = {one}, %sz = {one}) "
           f"dynamic_shared_memory_size {smem} {{")
    dyn, dyn_t = e.fresh("dyn"), f"memref<?xi8, {WG}>"
    e.emit(f"{dyn} = gpu.dynamic_shared_memory : {dyn_t}")
    warp, lane = e.div("%tx", e.c(32)), e.rem("%tx", e.c(32))
    ring = e.mul(warp, e.c(RING))

    def view(offset: str, shape: str, elem: str = dt) -> tuple[str, str]:
        v, t = e.fresh("sv"), f"memref<{shape}x{elem}, {WG}>"
        e.emit(f"{v} = memref.view {dyn}[{offset}][] : {dyn_t} to {t}")
        return v, t

    a_s, a_s_t = view(ring, f"{STAGES}x{KS}x{KS + PAD}")
    b_s, b_s_t = view(e.add(ring, e.c(STAGES * A_SLOT)), f"{STAGES}x{KS}x{BN + PAD}")
    n0 = e.mul("%bx", e.c(BN))
    mask = e.fresh("mask")
    e.emit(f"{mask} = arith.constant -1 : i32")

    def select(ok: str, x: str, y: str) -> str:
        v = e.fresh("i")
        e.emit(f"{v} = arith.select {ok}, {x}, {y} : index")
        return v

    # This lane's copies of a tile: A row lane % 16, half lane / 16; B chunks lane + 32 j of 16 x BN / 8
    # (with BN = 8, lanes 16-31 repeat lanes 0-15's copies: same bytes to the same place).
    a_row, a_half = e.rem(lane, e.c(KS)), e.mul(e.div(lane, e.c(KS)), e.c(VEC))
    b_chunks = []
    for j in range(max(1, KS * per_row // 32)):
        c = e.rem(e.add(lane, e.c(32 * j)), e.c(KS * per_row))
        b_chunks.append((e.div(c, e.c(per_row)), e.mul(e.rem(c, e.c(per_row)), e.c(VEC))))
    a_row_ok = e.cmp("ult", a_row, e.c(M))

    def copies(t: str, slot: str) -> str:
        """cp.async of k tile t of this warp's run into `slot`; returns the commit group's token."""
        k0 = e.mul(e.add(e.mul(warp, e.c(RUN)), t), e.c(KS))
        tokens = []
        for ok, src, src_t, idx, dst, dst_t, dst_idx in (
                [(e.both(a_row_ok, e.cmp("ult", e.add(k0, a_half), e.c(K))), a2, a_t, [a_row, e.add(k0, a_half)],
                  a_s, a_s_t, [slot, a_row, a_half])] +
                [(e.both(e.cmp("ult", e.add(k0, r), e.c(K)), e.cmp("ult", e.add(n0, col), e.c(N))), b, b_t,
                  ["%bx", e.add(k0, r), col] if panels else [e.add(k0, r), e.add(n0, col)], b_s, b_s_t,
                  [slot, r, col]) for r, col in b_chunks]):
            idx = [select(ok, i, zero) for i in idx]            # never an address outside the tensor
            tok = e.fresh("cp")
            e.emit(f"{tok} = nvgpu.device_async_copy {src}[{', '.join(idx)}], {dst}[{', '.join(dst_idx)}], {VEC}, "
                   f"{select(ok, e.c(VEC), zero)} {{bypassL1}} : {src_t} to {dst_t}")
            tokens.append(tok)
        group = e.fresh("grp")
        e.emit(f"{group} = nvgpu.device_async_create_group {', '.join(tokens)}")
        return group

    group = None
    for s in range(STAGES - 1):
        group = copies(e.c(s), e.c(s))
    if norm:   # the rows' statistics while the first copies are in flight
        stats, stats_t = view(e.c(WARPS * RING), f"{M}x2", "f32")
        norm_statistics(e, norm.kind, norm.epsilon, a2, a_t, M, K, dt, WARPS, stats, stats_t)
        e.emit("gpu.barrier")
        row_stats = []
        for j in range(2):
            v = e.fresh("st")
            e.emit(f"{v} = memref.load {stats}[{e.op('arith.minui', a_row, e.c(M - 1))}, {e.c(j)}] : {stats_t}")
            row_stats.append(v)

    def normalize(t: str, slot: str) -> None:
        """This lane's copied A chunk of tile t, normalized in place (rows past M and k past K included:
        their products meet zero rows of B or are not stored)."""
        k = e.op("arith.minui", e.add(e.mul(e.add(e.mul(warp, e.c(RUN)), t), e.c(KS)), a_half), e.c(K - VEC))
        vt, ft = f"vector<{VEC}x{dt}>", f"vector<{VEC}xf32>"
        raw, x = e.fresh("x"), e.fresh("x")
        e.emit(f"{raw} = vector.load {a_s}[{slot}, {a_row}, {a_half}] : {a_s_t}, {vt}")
        e.emit(f"{x} = arith.extf {raw} : {vt} to {ft}")
        params = []
        for p in (norm.scale, norm.shift):
            if p is None:
                params.append(None)
                continue
            pr, pf = e.fresh("g"), e.fresh("g")
            e.emit(f"{pr} = vector.load {p}[{k}] : {types[p]}, {vt}")
            e.emit(f"{pf} = arith.extf {pr} : {vt} to {ft}")
            params.append(pf)
        y = norm.normalized(e, x, VEC, *row_stats, params, "f32")
        out_v = e.fresh("x")
        e.emit(f"{out_v} = arith.truncf {y} : {ft} to {vt}")
        e.emit(f"vector.store {out_v}, {a_s}[{slot}, {a_row}, {a_half}] : {a_s_t}, {vt}")
    a_frag, b_frag, acc_t = fragment_types(dt)
    z = e.fresh("z")
    e.emit(f"{z} = arith.constant dense<0.0> : {acc_t}")
    tiles_n = BN // 8
    accs, res = [e.fresh("acc") for _ in range(tiles_n)], e.fresh("res")
    e.open(f"{res}:{tiles_n} = scf.for %t = {zero} to {e.c(RUN)} step {one} "
           f"iter_args({', '.join(f'{x} = {z}' for x in accs)}) -> ({', '.join([acc_t] * tiles_n)}) {{")
    # (every wait names the prologue's group: cp.async.wait_group counts this thread's pending groups)
    e.emit(f"nvgpu.device_async_wait {group} {{numGroups = {STAGES - 2} : i32}}")
    slot = e.rem("%t", e.c(STAGES))
    if norm:
        normalize("%t", slot)
    e.emit(f"nvvm.bar.warp.sync {mask} : i32")
    ahead = e.add("%t", e.c(STAGES - 1))
    copies(ahead, e.rem(ahead, e.c(STAGES)))
    fa = e.fresh("fa")
    e.emit(f"{fa} = nvgpu.ldmatrix {a_s}[{slot}, {e.rem(lane, e.c(16))}, {e.mul(e.div(lane, e.c(16)), e.c(8))}] "
           f"{{numTiles = 4 : i32, transpose = false}} : {a_s_t} -> {a_frag}")
    new = []
    for j, acc in enumerate(accs):
        fb = e.fresh("fb")
        e.emit(f"{fb} = nvgpu.ldmatrix {b_s}[{slot}, {e.rem(lane, e.c(16))}, {e.c(8 * j)}] "
               f"{{numTiles = 2 : i32, transpose = true}} : {b_s_t} -> {b_frag}")
        new.append(mma_sync(e, dt, fa, fb, acc))
    e.emit(f"scf.yield {', '.join(new)} : {', '.join([acc_t] * tiles_n)}")
    e.close()
    e.emit(f"nvgpu.device_async_wait {group} {{numGroups = 0 : i32}}")
    # The warp's partial tile over its own ring (no other warp reads it): acc[j][r][c] is row
    # lane / 4 + 8 r, column 8 j + 2 (lane % 4) + c.
    part, part_t = view(ring, f"{KS}x{BN}", "f32")
    quad = e.mul(e.rem(lane, e.c(4)), e.c(2))
    for j in range(tiles_n):
        for r in range(2):
            pair = e.fresh("p")
            e.emit(f"{pair} = vector.extract {res}#{j}[{r}] : vector<2xf32> from {acc_t}")
            e.emit(f"vector.store {pair}, {part}[{e.add(e.div(lane, e.c(4)), e.c(8 * r))}, {e.add(quad, e.c(8 * j))}] "
                   f": {part_t}, vector<2xf32>")
    e.emit("gpu.barrier")
    # thread (row, 8 columns) of the first M x BN / 8: the warps' partials, the epilogue, one store
    e.open(f"scf.if {e.cmp('ult', '%tx', e.c(M * per_row))} {{")
    row, col = e.div("%tx", e.c(per_row)), e.mul(e.rem("%tx", e.c(per_row)), e.c(VEC))
    n = e.add(n0, col)
    e.open(f"scf.if {e.cmp('ult', n, e.c(N))} {{")
    total = None
    for w in range(WARPS):
        pw, pw_t = view(e.c(w * RING), f"{KS}x{BN}", "f32")
        v = e.fresh("s")
        e.emit(f"{v} = vector.load {pw}[{row}, {col}] : {pw_t}, vector<{VEC}xf32>")
        total = v if total is None else e.op("arith.addf", total, v, f"vector<{VEC}xf32>")
    bias_f = None
    if bias:
        raw, bias_f = e.fresh("bias"), e.fresh("bias")
        e.emit(f"{raw} = vector.load {bias}[{n}] {{alignment = 16}} : {types[bias]}, vector<{VEC}x{dt}>")
        e.emit(f"{bias_f} = arith.extf {raw} : vector<{VEC}x{dt}> to vector<{VEC}xf32>")
    at = [row, n]
    store_vector(e, spec, total, bias_f, (out2, at, o_t), residual=(res2, at, o_t) if res2 else None)
    e.close()
    e.close()
    e.emit("gpu.terminator")
    e.close()
    sig = ", ".join(f"{p}: {ty}" for p, ty in signature or params_sig)
    return f"func.func @{name}({sig}) {{\n" + "\n".join(e.lines) + "\n    return\n}"

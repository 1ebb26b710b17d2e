"""The filter gradient of a convolution on sm_90 warpgroup MMA: an implicit GEMM reducing over the batch and
the map, both operands read in place by TMA, split over the reduction for small filters.

With the forward convolution x [N, H, W, C] * w [K, R, S, C] -> dy [N, OH, OW, K] (NHWC, one group), stride
(sh, sw), padding (pt, pl), dilation (dh, dw), the gradient in KRSC is one GEMM of K rows and R S C columns whose
reduction runs over the output pixels m = (n, oh, ow):

    dw[k, (r, s, c)] = sum over m of dy[m, k] x[n, oh sh - pt + r dh, ow sw - pl + s dw, c]

A k tile is a box of bi x bh x bw output pixels (reduction_box: a multiple of 16 pixels, a wgmma k step, up to
MAX_PIXELS; the fewest computed in vain: 2 x 7 x 8 on a 7 x 7 map, 7 x 16 on 14 x 14, 4 x 28 on 28 x 28, 8 x 8
on 56 x 56). Both
operands of the tile are TMA boxes of those pixels, 64 channels wide:

    A (rows k)       dy box [bi, bh, bw, 64 k] at [i0, oh0, ow0, k0]: one box per warpgroup (64 rows each)
    B (columns rsc)  x box [bi, bh, bw, 64 c] at [i0, oh0 sh - pt + r dh, ow0 sw - pl + s dw, c0], read every
                     sh-th row and sw-th column (TMA element strides); column block j of the tile is tap
                     (r, s) and channel block c0 = 64 cb, (r S + s) CB + cb = its index (CB = ceil(C / 64)).
    Out of the tensors TMA reads zeros: the padding, and the box's pixels past the map (dy's zeros there
    cancel whatever x holds).

Both land in shared memory as pixel rows of 128 bytes (64 channels, 128-byte swizzled): the reduction
is the slow dimension of both, so wgmma reads both transposed (MN-major). The nvgpu lowering steps a
transposed A by 32 bytes per k16 instead of the 2,048 (16 rows) it takes, so each k16 slice is its own
warpgroup.mma on descriptors made at that slice (k = 0: no step taken), issued as one group (the nvvm
backend's chain_wgmma drops the per-op commit, wait and fence between them).

The grid is (column blocks of BN, row blocks of BM, splits); run z of the split reduces k tiles
[z KT, (z + 1) KT) into its own f32 slice of a scratch [splits K, R S C], and a second launch adds the
slices in order and casts them (deterministic). One run writes the cast result directly. The pipeline is
wgmma.py's: STAGES slots on mbarriers, thread 0 issuing the TMA loads one tile ahead of the slot being
multiplied, the accumulators through shared memory to 16-byte stores.

Few channels (C < IM2COL_CHANNELS): a tap's channels past C would be multiplied as zeros (an RGB stem padded
to 8 channels: 8x the work). There a first launch copies the windows into patches [N OH OW, R S C] (the
im2col of wgmma_im2col.py, 16 bytes a thread) and the kernel above computes the 1x1 filter gradient of the
patches, R S C columns side by side, which is the KRSC gradient itself (kernel_problem).

Applies to f16/bf16 NHWC problems of one group whose C and K are multiples of 8 (TMA's 16-byte strides),
strides up to 8; passes/backward_weights_gemms.py pads other channel counts to 8 first.
"""
from __future__ import annotations

import dataclasses
import functools
import math

from openprim.kernels.gpu.gemm import WG, Emitter, GemmSpec, store_vector

from .wgmma import (ALIGN, accumulators_to_shared, close_k_loop, close_launch, descriptor_map, host_function,
                    open_k_loop, shared_views, stage_barriers, tensor_map, tile_row8, tma_load, vec_launch,
                    wgmma_types)
from .wgmma_im2col import im2col_launch

BK = 64                    # channels per box: 128 bytes of f16, one swizzle row
ROW_BYTES = BK * 2
IM2COL_CHANNELS = 32       # fewer input channels: patches first (module docstring)
MAX_PIXELS = 128           # pixels per k tile at most (a stage of 128 x 256 tiles: 96 KB)
K16 = 16 * ROW_BYTES       # bytes of 16 pixel rows: one wgmma k step
# (BM, BN, stages): BM / 64 warpgroups (64 rows each), BN / 64 column blocks; indexed by the "tile" parameter
CONFIGS = [(128, 128, 4), (128, 256, 3), (64, 128, 4), (64, 256, 3), (128, 192, 3), (64, 192, 4), (64, 64, 6)]


def applicable(p) -> str | None:
    if p.dtype not in ("f16", "bf16"):
        return "wgmma kernel takes f16/bf16 inputs"
    if p.layout != "NHWC":
        return "needs NHWC"
    if p.groups != 1:
        return f"grouped convolution (groups={p.groups})"
    if p.c % 8 or p.k % 8:
        return "needs input and output channels in multiples of 8 (TMA strides)"
    if max(p.strides) > 8:
        return "stride above 8 (TMA element strides)"
    return None


def kernel_problem(p):
    """The problem the GEMM launch computes: p, or with few channels the 1x1 filter gradient of p's patches
    (geometry, columns, stages and smem_bytes all take the original problem and answer for this one)."""
    if p.c >= IM2COL_CHANNELS or p.r * p.s == 1:
        return p
    return dataclasses.replace(p, c=p.r * p.s * p.c, h=p.oh, w=p.ow, r=1, s=1, strides=(1, 1), padding=(0, 0, 0, 0),
                               dilations=(1, 1))


@functools.lru_cache(maxsize=None)       # (a search of ~3,000 boxes, asked for every tile and run a solver weighs)
def reduction_box(n: int, oh: int, ow: int, sh: int = 1, sw: int = 1) -> tuple[int, int, int]:
    """(bi, bh, bw): the k tile's box of output pixels, a multiple of 16 pixels and at most MAX_PIXELS (the x
    box it reads spans bh sh x bw sw pixels: at most 256 each, TMA's limit), covering N x OH x OW with the
    fewest pixels computed in vain, then 64 pixels or the fewest above (a shorter tile pays its barrier and
    mbarrier wait every k16 step or two; a longer one leaves fewer stages)."""
    best = None
    for bh in range(1, min(MAX_PIXELS, 256 // sh) + 1):
        for bw in range(1, min(MAX_PIXELS // bh, 256 // sw) + 1):
            for bi in range(1, MAX_PIXELS // (bh * bw) + 1):
                rows = bi * bh * bw
                if rows % 16 or (bi > 1 and (bh < oh or bw < ow)):
                    continue
                waste = -(-n // bi) * -(-oh // bh) * -(-ow // bw) * rows
                key = (waste, rows < 64, abs(rows - 64), -bw)
                if best is None or key < best[0]:
                    best = (key, (bi, bh, bw))
    return best[1]


def geometry(p) -> tuple:
    """((bi, bh, bw), k tiles along (images, rows, columns), the k tiles: pixel boxes over N x OH x OW)."""
    p = kernel_problem(p)
    bi, bh, bw = reduction_box(p.n, p.oh, p.ow, *p.strides)
    tiles = (-(-p.n // bi), -(-p.oh // bh), -(-p.ow // bw))
    return (bi, bh, bw), tiles, tiles[0] * tiles[1] * tiles[2]


def columns(p) -> int:
    """The GEMM's columns as the kernel computes them: R S taps of C rounded up to 64."""
    p = kernel_problem(p)
    return p.r * p.s * -(-p.c // BK) * BK


def stages(config, p, smem_limit: int) -> int:
    """Stage slots: the config's, or as many as fit beside ALIGN (0: none fit)."""
    bm, bn, most = config
    pixels = math.prod(geometry(p)[0])
    return min(most, (smem_limit - ALIGN) // ((bm + bn) * pixels * 2))


def smem_bytes(config, p, stage_count: int) -> int:
    bm, bn, _ = config
    return ALIGN + max(stage_count * (bm + bn) * math.prod(geometry(p)[0]) * 2, bm * (bn + 4) * 4)


def backward_weights_kernel(name: str, params_sig: list[tuple[str, str]], p, config: int, splits: int = 1, *,
                            smem_limit: int) -> str:
    """The host function: tensor maps, the GEMM launch and, split, the launch adding its runs (module
    docstring). params_sig: x [N, H, W, C], dy [N, OH, OW, K], out [K, R, S, C]."""
    e = Emitter()
    (x, x_t), (dy, dy_t), (out, out_t) = params_sig
    if kernel_problem(p) is not p:
        conv = (p.n, p.h, p.w, p.c, p.oh, p.ow, p.r, p.s, *p.strides, *p.padding[:2], *p.dilations)
        col_t = im2col_launch(e, (x, x_t), conv, p.dtype, "%col")
        p = kernel_problem(p)
        x, x_t = e.fresh("v"), f"memref<{p.n}x{p.h}x{p.w}x{p.c}x{p.dtype}>"
        e.emit(f"{x} = memref.reinterpret_cast %col to offset: [0], sizes: [{p.n}, {p.h}, {p.w}, {p.c}], strides: "
               f"[{p.h * p.w * p.c}, {p.w * p.c}, {p.c}, 1] : {col_t} to {x_t}")
    BM, BN, _ = CONFIGS[config]
    WGS, NB = BM // 64, BN // BK
    dt, K, C, RS = p.dtype, p.k, p.c, p.r * p.s
    CB = -(-C // BK)
    (sh, sw), (dh, dw), (pt, pl) = p.strides, p.dilations, p.padding[:2]
    (bi, bh, bw), (_, tiles_h, tiles_w), tiles = geometry(p)
    assert tiles % splits == 0, "split into equal runs of k tiles"
    KT, PIXELS = tiles // splits, bi * bh * bw
    STAGES = min(stages(CONFIGS[config], p, smem_limit), KT)
    BOX_BYTES = PIXELS * ROW_BYTES
    A_BYTES, B_BYTES = WGS * BOX_BYTES, NB * BOX_BYTES
    smem = smem_bytes(CONFIGS[config], p, STAGES)
    if STAGES < 2 and KT > 1 or smem > smem_limit:
        raise ValueError(f"wgmma filter-gradient config {CONFIGS[config]} with {PIXELS}-pixel k tiles needs "
                         f"{smem} bytes of shared memory (limit {smem_limit})")
    tma_x, tma_x_t = tensor_map(e, x, x_t, dt, [bi, bh, bw, BK], (1, sh, sw, 1))
    tma_dy, tma_dy_t = tensor_map(e, dy, dy_t, dt, [bi, bh, bw, BK])
    out2, out2_t = e.fresh("v"), f"memref<{K}x{RS * C}x{dt}>"
    e.emit(f"{out2} = memref.reinterpret_cast {out} to offset: [0], sizes: [{K}, {RS * C}], strides: [{RS * C}, 1] "
           f": {out_t} to {out2_t}")
    dest = (out2, out2_t)
    if splits > 1:
        dest = ("%wk", f"memref<{splits * K}x{RS * C}xf32>")
        e.emit(f"%wk = memref.alloc() {{alignment = 64 : i64}} : {dest[1]}")
    sm, one, zero = e.fresh("smem"), e.c(1), e.c(0)
    e.emit(f"{sm} = arith.constant {smem} : i32")
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-columns(p) // BN))}, %gy = {e.c(-(-K // BM))}, "
           f"%gz = {e.c(splits)}) threads(%tx, %ty, %tz) in (%sx = {e.c(128 * WGS)}, %sy = {one}, %sz = {one}) "
           f"dynamic_shared_memory_size {sm} {{")
    desc_dy, desc_x = (descriptor_map(e, tm, tm_t, PIXELS, BK, dt)
                       for tm, tm_t in ((tma_dy, tma_dy_t), (tma_x, tma_x_t)))
    tid = "%tx"
    leader = e.cmp("eq", tid, zero)
    bars, mbar_t = stage_barriers(e, STAGES, leader)
    view = shared_views(e, dt)
    n0, k0 = e.mul("%bx", e.c(BN)), e.mul("%by", e.c(BM))
    box_t = f"{bi}x{bh}x{bw}x{BK}"

    def load_tile(kt: str, slot: str, pred: str) -> None:
        """Thread `pred`: the dy and x boxes of k tile kt (of this block's run) into `slot`, on its barrier."""
        e.emit(f"nvgpu.mbarrier.arrive.expect_tx {bars}[{slot}], {e.c(A_BYTES + B_BYTES)}, predicate = {pred} "
               f": {mbar_t}")
        t = e.add(kt, e.mul("%bz", e.c(KT))) if splits > 1 else kt
        ow0 = e.mul(e.rem(t, e.c(tiles_w)), e.c(bw))
        oh0 = e.mul(e.rem(e.div(t, e.c(tiles_w)), e.c(tiles_h)), e.c(bh))
        i0 = e.mul(e.div(t, e.c(tiles_w * tiles_h)), e.c(bi))
        for g in range(WGS):
            dst = view(e.add(e.mul(slot, e.c(A_BYTES)), e.c(g * BOX_BYTES)), box_t)
            tma_load(e, (tma_dy, tma_dy_t), [e.add(k0, e.c(64 * g)), ow0, oh0, i0], (bars, mbar_t, slot), dst,
                     f"{box_t}x{dt}", pred)
        for j in range(NB):
            # column block -> (tap, channel block); blocks past the last tap load its last one (not stored)
            block = e.op("arith.minui", e.add(e.div(n0, e.c(BK)), e.c(j)), e.c(RS * CB - 1))
            rs, c0 = e.div(block, e.c(CB)), e.mul(e.rem(block, e.c(CB)), e.c(BK))
            h = e.op("arith.subi", e.add(e.mul(oh0, e.c(sh)), e.mul(e.div(rs, e.c(p.s)), e.c(dh))), e.c(pt))
            w = e.op("arith.subi", e.add(e.mul(ow0, e.c(sw)), e.mul(e.rem(rs, e.c(p.s)), e.c(dw))), e.c(pl))
            dst = view(e.add(e.c(STAGES * A_BYTES + j * BOX_BYTES), e.mul(slot, e.c(B_BYTES))), box_t)
            tma_load(e, (tma_x, tma_x_t), [c0, w, h, i0], (bars, mbar_t, slot), dst, f"{box_t}x{dt}", pred)

    wg = e.div(tid, e.c(128))
    acc_t, da_t, db_t = wgmma_types(64, 16, BN, dt)
    res, acc, slot = open_k_loop(e, load_tile, leader, KT, STAGES, bars, mbar_t, acc_t)
    a_base = e.add(e.mul(slot, e.c(A_BYTES)), e.mul(wg, e.c(BOX_BYTES)))
    b_base = e.add(e.c(STAGES * A_BYTES), e.mul(slot, e.c(B_BYTES)))
    for step in range(PIXELS // 16):
        a_view = view(e.add(a_base, e.c(step * K16)), "64x16")
        b_view = view(e.add(b_base, e.c(step * K16)), f"16x{BN}")
        da, db, nxt = e.fresh("da"), e.fresh("db"), e.fresh("acc")
        e.emit(f"{da} = nvgpu.warpgroup.generate.descriptor {a_view}, {desc_dy[0]} : memref<64x16x{dt}, {WG}>, "
               f"{desc_dy[1]} -> {da_t}")
        e.emit(f"{db} = nvgpu.warpgroup.generate.descriptor {b_view}, {desc_x[0]} : memref<16x{BN}x{dt}, {WG}>, "
               f"{desc_x[1]} -> {db_t}")
        e.emit(f"{nxt} = nvgpu.warpgroup.mma {da}, {db}, {acc} {{transposeA, transposeB}} "
               f": {da_t}, {db_t}, {acc_t} -> {acc_t}")
        acc = nxt
    close_k_loop(e, load_tile, leader, KT, STAGES, acc, acc_t)
    tile, tile_t = accumulators_to_shared(e, view, res, acc_t, wg, BM, 64, BN)
    # Thread: 8 columns of a row, BN / 8 threads a row. Column n of the GEMM is tap n / (64 CB), channel
    # n % (64 CB): stored at rs C + c where c < C.
    per_row = BN // 8
    rows_per_pass = 128 * WGS // per_row
    col = e.mul(e.rem(tid, e.c(per_row)), e.c(8))
    n = e.add(n0, col)
    rs, c = e.div(n, e.c(CB * BK)), e.rem(n, e.c(CB * BK))
    e.open(f"scf.if {e.both(e.cmp('ult', rs, e.c(RS)), e.cmp('ult', c, e.c(C)))} {{")
    oc = e.add(e.mul(rs, e.c(C)), c)
    spec = GemmSpec(K, RS * C, p.n * p.oh * p.ow, dt)
    for first in range(0, BM, rows_per_pass):
        i = e.add(e.c(first), e.div(tid, e.c(per_row)))
        k = e.add(k0, i)
        ok = e.cmp("ult", k, e.c(K))
        if BM % rows_per_pass:
            ok = e.both(ok, e.cmp("ult", i, e.c(BM)))
        if (128 * WGS) % per_row:                   # (BN = 192: 5 rows of 24 threads a pass, 8 idle)
            ok = e.both(ok, e.cmp("ult", tid, e.c(rows_per_pass * per_row)))
        e.open(f"scf.if {ok} {{")
        v = tile_row8(e, tile, tile_t, i, col)
        row = e.add(k, e.mul("%bz", e.c(K))) if splits > 1 else k
        store_vector(e, spec, v, None, (dest[0], [row, oc], dest[1]))
        e.close()
    e.close()
    e.emit("gpu.terminator")
    e.close("}")
    if splits > 1:
        k, oc = vec_launch(e, K, RS * C)
        total = None
        for z in range(splits):
            v = e.fresh("p")
            e.emit(f"{v} = vector.load %wk[{e.add(k, e.c(z * K))}, {oc}] : {dest[1]}, vector<8xf32>")
            total = v if total is None else e.op("arith.addf", total, v, "vector<8xf32>")
        store_vector(e, spec, total, None, (out2, [k, oc], out2_t))
        close_launch(e)
    return host_function(e, name, params_sig)

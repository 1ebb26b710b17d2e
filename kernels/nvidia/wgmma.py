"""The sm_90 (Hopper: H100/H200) tensor-core GEMM: TMA loads, an mbarrier pipeline, warpgroup MMA (wgmma).

The same problems as kernels/nvidia/mma.py (implicit-GEMM convolution NHWC x RSCK, matmul [M, K] x [K, N]) in
f16/bf16 with f32 accumulation, built from the sm_90 pieces that mma.sync kernels lack:

    TMA       nvgpu.tma.async.load: one thread asks the copy engine for a whole box of a tensor; the
              box lands in shared memory in the 128-byte swizzled layout wgmma reads, and coordinates
              outside the tensor (negative ones included) read zeros. The tensor map (shape, strides,
              box, swizzle) is made on the host: the runtime encodes it with cuTensorMapEncodeTiled
              into device memory and passes its address (backends/nvvm: ["tensormap", ...]).
    mbarrier  stage s's barrier completes when the TMA bytes it expects have landed (expect_tx), so
              the consumers wait on a phase bit instead of a block-wide barrier per copy.
    wgmma     nvgpu.warpgroup.mma: a warpgroup (128 threads) multiplies a BMW x 64 A tile by a 64 x BN
              B tile, both read from shared memory through descriptors, into registers
              (m64nBNk16 instructions, asynchronous: wgmma.wait_group bounds those in flight).

A convolution's A is read in place, the implicit GEMM done by TMA: a k tile is one filter tap (r, s)
and 64 channels, and the M tile a box of bi x bh x bw output pixels (bi images, bh rows, bw columns;
bi*bh*bw = BM), so the A tile is the input box at
    [n0, oh0*sh - pt + r*dh, ow0*sw - pl + s*dw, c0]   (NHWC; out of the image: zeros = the padding),
read every sh-th row and sw-th column (the tensor map's element strides: a strided convolution).
The box is chosen per problem to waste the fewest pixels past the image (7x7: 2 images of 8x8).
A 1x1, stride-1, unpadded convolution and a matmul read A as the 2-d [M, K] matrix (box BM x 64).
B is the filter as RSCK [R, S, C, K] (box 1 x 1 x 64 x 64; channels past C read zeros, so C need not
be a multiple of 64) or the matmul's [K, N]; its smem tile is BN/64 boxes of 64 k x 64 n, the layout
wgmma reads as a transposed (n-contiguous) B.

One block: WGS consumer warpgroups, each BM/WGS rows of the BM x BN tile; STAGES smem slots of
(A tile, B tile). Thread 0 issues the copies; k tile kt = (tap, channel block):

    prologue: thread 0 inits the STAGES mbarriers (STAGES <= the number of k tiles), barrier; loads
              tiles 0 .. STAGES-2 (all of them when they fit)
    for kt:   wait on barrier kt % STAGES (parity (kt / STAGES) % 2)
              acc = wgmma(A slot, B slot, acc)          (issued asynchronously)
              wgmma.wait_group 1: tile kt-1's multiply is done; barrier: in every warpgroup
              thread 0: expect_tx + TMA loads of tile kt + STAGES-1 into slot (kt-1) % STAGES
    epilogue: wait_group 0, barrier; the accumulators go to shared memory (rows padded by 4 floats
              against bank conflicts, over the now idle slots), barrier; each thread then reads 8
              consecutive columns of a row, adds bias and residual, applies the activation, casts, and
              stores 16 bytes (coalesced: a row's columns are consecutive threads).

Shared memory is dynamic (the host raises the 48 KB default: cuFuncSetAttribute) and aligned by hand to
1024 bytes, the period of the 128-byte swizzle that TMA writes and the wgmma descriptors assume.
Applies on sm_90 to f16/bf16, strides up to 8, channels (K) and output channels multiples of 8 (TMA's
16-byte strides); other problems keep the mma.sync kernel.

A grouped convolution of 64 input and 64 output channels per group (prim-select merges the small groups of
ResNeXt's 32x4d into such blocks of 64, block-diagonal inside) runs with BN = 64: block column bx is group
bx, its k tiles are the R*S taps of that group's 64 input channels (A at channel 64 bx, the grouped RSCK
filter [R, S, 64, K] at channel 0), so a group is a GEMM of k = 64 R S that no other group's zeros pad.
"""
from __future__ import annotations


import dataclasses

from openprim.dialect import contract
from openprim.kernels.gpu.gemm import WG, Emitter, GemmSpec, collapse, operands, store_vector

BK = 64                               # k per tile: 128 bytes of f16/bf16, one swizzle row
ALIGN = 1024                          # the 128-byte swizzle's period
# (BM, BN, warpgroups, stages), indexed by the solver's "tile" parameter. (128 x 64 with one warpgroup,
# two m64 fragments of n64, computed wrong rows on the H200: the 128 x 64 tile takes two warpgroups.)
CONFIGS = [(128, 128, 1, 4), (128, 256, 2, 4), (256, 128, 2, 4), (128, 64, 2, 6), (64, 64, 1, 8),
           (128, 64, 2, 3), (64, 64, 1, 4), (128, 128, 1, 2), (128, 128, 1, 3), (128, 128, 2, 3),
           (128, 192, 2, 4), (128, 192, 2, 3)]
PREFETCH = 8                          # epilogue passes whose residual rows are loaded ahead of use
SWZ = "swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none"


def smem_bytes(config, k_tiles: int) -> int:
    """Dynamic shared memory of a block: the stage slots (no more than there are k tiles, so short
    reductions leave room for more blocks per multiprocessor), reused by the f32 epilogue tile."""
    bm, bn, _, stages = config
    loads = min(stages, k_tiles) * (bm + bn) * BK * 2
    return ALIGN + max(loads, bm * (bn + 4) * 4)


def geometry(spec: GemmSpec) -> tuple:
    """(N, H, W, C, OH, OW, R, S, sh, sw, pt, pl, dh, dw, flat): the problem as a convolution (a matmul:
    one image of 1 x M pixels); flat when A is read as the 2-d [M, K] matrix (matmul, or a 1x1
    stride-1 unpadded convolution)."""
    if not spec.conv:
        return 1, 1, spec.m, spec.k, 1, spec.m, 1, 1, 1, 1, 0, 0, 1, 1, True
    n, h, w, c, oh, ow, r, s, sh, sw, pt, pl, dh, dw = spec.conv
    return n, h, w, c, oh, ow, r, s, sh, sw, pt, pl, dh, dw, (r, s, sh, sw, pt, pl) == (1, 1, 1, 1, 0, 0)


def applicable(spec: GemmSpec) -> str | None:
    c = spec.conv[3] if spec.conv else spec.k
    if spec.dtype not in ("f16", "bf16"):
        return "wgmma kernel takes f16/bf16 inputs"
    if c % 8 or spec.n % 8:
        return "needs input and output channels (or K and N) that are multiples of 8 (TMA strides)"
    if spec.groups != 1 and (c // spec.groups != BK or spec.n != BK):
        return f"grouped convolution of {c // spec.groups} -> {spec.n} channels per group (takes {BK} -> {BK})"
    if spec.nchw:
        return "needs NHWC"
    if spec.conv and max(spec.conv[8:10]) > 8:
        return "stride above 8 (TMA element strides)"
    return None


def pixel_box(bm: int, n: int, oh: int, ow: int, sh: int = 1, sw: int = 1) -> tuple[int, int, int]:
    """(bi, bh, bw), bi*bh*bw = bm, covering N x OH x OW with the fewest pixels computed in vain (the
    input box it reads spans bh*sh x bw*sw pixels: at most 256 each, TMA's limit)."""
    pows = [1 << i for i in range(9) if 1 << i <= bm]
    best = None
    for bw in pows:
        for bh in pows:
            if bm % (bw * bh) or bm // (bw * bh) > 256 or bh * sh > 256 or bw * sw > 256:
                continue
            bi = bm // (bw * bh)
            if bi > 1 and (bh < oh or bw < ow):
                continue                      # several images per box only when each fits whole
            waste = -(-n // bi) * -(-oh // bh) * -(-ow // bw) * bm
            key = (waste, -bw)
            if best is None or key < best[0]:
                best = (key, (bi, bh, bw))
    return best[1]


def wgmma_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, config: int, splits: int = 1, *,
                 smem_limit: int) -> str:
    e = Emitter()
    if splits == 1:
        emit_wgmma(e, params_sig, spec, config, smem_limit=smem_limit)
    else:
        emit_split_k(e, params_sig, spec, config, splits, smem_limit=smem_limit)
    return host_function(e, name, params_sig)


def emit_split_k(e: Emitter, params_sig: list[tuple[str, str]], spec: GemmSpec, config: int, splits: int, *,
                 smem_limit: int) -> None:
    """Split-K: the k tiles in `splits` equal runs, one per grid z, each block's partial sums (f32) into its
    own [M, N] slice of a scratch [splits * M, N]; then a launch of a thread per 8 output channels adds
    the slices in order and applies bias, residual, activation and the cast. For grids far smaller than
    the machine (a batch-1 network's 7x7 layers: 4 blocks of 128 x 128 on 132 multiprocessors)."""
    M, NO, dt = spec.m, spec.n, spec.dtype
    types, rank, (x, w, bias, residual, out) = operands(params_sig, spec)
    part_t = f"memref<{splits * M}x{NO}xf32>"
    e.emit(f"%wk = memref.alloc() {{alignment = 64 : i64}} : {part_t}")
    plain = dataclasses.replace(spec, bias=False, residual=False, activation="none", activation_params=())
    emit_wgmma(e, [(x, types[x]), (w, types[w]), ("%wk", part_t)], plain, config, out_f32=True, splits=splits,
               smem_limit=smem_limit)
    m, n = vec_launch(e, M, NO)
    v8, o8 = "vector<8xf32>", f"vector<8x{dt}>"
    total = None
    for z in range(splits):
        v = e.fresh("p")
        e.emit(f"{v} = vector.load %wk[{e.add(m, e.c(z * M))}, {n}] : {part_t}, {v8}")
        total = v if total is None else e.op("arith.addf", total, v, v8)
    bias_f = None
    if bias:
        raw, bias_f = e.fresh("b"), e.fresh("b")
        e.emit(f"{raw} = vector.load {bias}[{n}] : {types[bias]}, {o8}")
        e.emit(f"{bias_f} = arith.extf {raw} : {o8} to {v8}")
    out2 = collapse(e, out, types[out], rank(out), M, NO, dt)
    res2 = collapse(e, residual, types[residual], rank(residual), M, NO, dt) if residual else None
    store_vector(e, spec, total, bias_f, (out2, [m, n], f"memref<{M}x{NO}x{dt}>"),
           residual=(res2, [m, n], f"memref<{M}x{NO}x{dt}>") if res2 else None)
    close_launch(e)


def emit_wgmma(e: Emitter, params_sig: list[tuple[str, str]], spec: GemmSpec, config: int, batch: int = 1,
               out_f32: bool = False, splits: int = 1, *, smem_limit: int) -> None:
    """The tensor maps and the launch of the kernel, emitted into `e` (host lines, then the launch).
    batch > 1: `batch` matmuls on grid z, A [batch, M, K] x B [batch, K, N] -> out [batch, M, N] (f32
    with out_f32; a Winograd transform's GEMMs). splits > 1 (batch 1): grid z takes the k tiles in that
    many equal runs, run z's sums into rows z*M.. of out [splits * M, N] (emit_split_k)."""
    BM, BN, WGS, STAGES = CONFIGS[config]
    BMW = BM // WGS                                         # rows per warpgroup
    dt = spec.dtype
    N, H, W, C, OH, OW, R, S, sh, sw, pt, pl, dh, dw, flat = geometry(spec)
    M, NO = spec.m, spec.n * spec.groups
    grouped = spec.groups > 1                               # block column = group, BN = BK (module docstring)
    assert not grouped or (BN == BK and splits == 1 and batch == 1), "a grouped problem takes BN = 64, one run"
    CB = 1 if grouped else -(-C // BK)                      # channel blocks per tap
    assert batch == 1 or splits == 1, "split-K of one GEMM only"
    assert (R * S * CB) % splits == 0, "split-K into equal runs of k tiles"
    KT = R * S * CB // splits                               # this block's k tiles
    STAGES = min(STAGES, KT)
    bi, bh, bw = (1, 1, BM) if flat else pixel_box(BM, N, OH, OW, sh, sw)
    tiles_w, tiles_h, tiles_i = -(-OW // bw), -(-OH // bh), -(-N // bi)
    blocks_m = -(-M // BM) if flat else tiles_i * tiles_h * tiles_w
    T = 128 * WGS
    A_BYTES, B_BYTES = BM * BK * 2, BK * BN * 2
    types, rank, (a, b, bias, residual, out) = operands(params_sig, spec)

    od = "f32" if out_f32 else dt
    if batch > 1:
        tma_a, tma_a_t = tensor_map(e, a, types[a], dt, [1, BM, BK])
    elif flat:
        a2 = collapse(e, a, types[a], rank(a), M, C, dt)
        tma_a, tma_a_t = tensor_map(e, a2, f"memref<{M}x{C}x{dt}>", dt, [BM, BK])
    else:
        tma_a, tma_a_t = tensor_map(e, a, types[a], dt, [bi, bh, bw, BK], (1, sh, sw, 1))
    if spec.conv:
        tma_b, tma_b_t = tensor_map(e, b, types[b], dt, [1, 1, BK, 64])
    elif batch > 1:
        tma_b, tma_b_t = tensor_map(e, b, types[b], dt, [1, BK, 64])
    else:                                   # [K, N] (an RSCK filter of an im2col GEMM: [R*S*C, K])
        b2 = collapse(e, b, types[b], rank(b), C, NO, dt)
        tma_b, tma_b_t = tensor_map(e, b2, f"memref<{C}x{NO}x{dt}>", dt, [BK, 64])
    smem = smem_bytes(CONFIGS[config], KT)
    if smem > smem_limit:
        raise ValueError(f"wgmma config {CONFIGS[config]} needs {smem} bytes of shared memory (limit {smem_limit})")
    sm = e.fresh("smem")
    e.emit(f"{sm} = arith.constant {smem} : i32")
    one = e.c(1)
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-NO // BN))}, %gy = {e.c(blocks_m)}, "
           f"%gz = {e.c(batch * splits)}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(T)}, %sy = {one}, %sz = {one}) dynamic_shared_memory_size {sm} {{")
    out2 = collapse(e, out, types[out], rank(out), M * batch * splits, NO, od)
    res2 = collapse(e, residual, types[residual], rank(residual), M, NO, dt) if residual else None
    desc_tm = {tm: descriptor_map(e, tm, tm_t, rows, cols, dt)
               for tm, tm_t, rows, cols in ((tma_a, tma_a_t, BMW, BK), (tma_b, tma_b_t, BK, 64))}
    zero = e.c(0)
    tid = "%tx"
    leader = e.cmp("eq", tid, zero)
    bars, mbar_t = stage_barriers(e, STAGES, leader)
    view = shared_views(e, dt)

    # Block -> output tile: columns n0; rows m0 (flat) or the pixel box (i0, oh0, ow0).
    n0 = e.mul("%bx", e.c(BN))
    if flat:
        m0 = e.mul("%by", e.c(BM))
    else:
        tw = e.rem("%by", e.c(tiles_w))
        th = e.rem(e.div("%by", e.c(tiles_w)), e.c(tiles_h))
        ti = e.div("%by", e.c(tiles_w * tiles_h))
        i0, oh0, ow0 = e.mul(ti, e.c(bi)), e.mul(th, e.c(bh)), e.mul(tw, e.c(bw))

    a_box_t = f"1x{BM}x{BK}" if batch > 1 else f"{BM}x{BK}" if flat else f"{bi}x{bh}x{bw}x{BK}"
    b_box_t = f"1x1x{BK}x64" if spec.conv else f"1x{BK}x64" if batch > 1 else f"{BK}x64"

    def load_tile(kt: str, slot: str, pred: str) -> None:
        """Thread `pred`: the A and B boxes of k tile kt (of this block's run) into `slot`, on that slot's
        barrier."""
        e.emit(f"nvgpu.mbarrier.arrive.expect_tx {bars}[{slot}], {e.c(A_BYTES + B_BYTES)}, predicate = {pred} : {mbar_t}")
        if splits > 1:
            kt = e.add(kt, e.mul("%bz", e.c(KT)))
        cb, rs = e.rem(kt, e.c(CB)), e.div(kt, e.c(CB))
        c0 = e.mul("%bx", e.c(BK)) if grouped else e.mul(cb, e.c(BK))     # the input's channels
        a_dst = view(e.mul(slot, e.c(A_BYTES)), a_box_t)
        if flat:
            coords = [c0, m0] + (["%bz"] if batch > 1 else [])
        else:
            r, s = e.div(rs, e.c(S)), e.rem(rs, e.c(S))
            h = e.op("arith.subi", e.add(e.mul(oh0, e.c(sh)), e.mul(r, e.c(dh))), e.c(pt))
            w = e.op("arith.subi", e.add(e.mul(ow0, e.c(sw)), e.mul(s, e.c(dw))), e.c(pl))
            coords = [c0, w, h, i0]
        tma_load(e, (tma_a, tma_a_t), coords, (bars, mbar_t, slot), a_dst, f"{a_box_t}x{dt}", pred)
        for j in range(BN // 64):
            b_dst = view(e.add(e.c(STAGES * A_BYTES + j * BK * 64 * 2), e.mul(slot, e.c(B_BYTES))), b_box_t)
            n = e.add(n0, e.c(64 * j))
            bc = [n, zero if grouped else c0, e.rem(rs, e.c(S)), e.div(rs, e.c(S))] if spec.conv else \
                [n, e.mul(kt, e.c(BK))] + (["%bz"] if batch > 1 else [])
            tma_load(e, (tma_b, tma_b_t), bc, (bars, mbar_t, slot), b_dst, f"{b_box_t}x{dt}", pred)

    wg = e.div(tid, e.c(128))
    acc_t, da_t, db_t = wgmma_types(BMW, BK, BN, dt)
    res, acc, slot = open_k_loop(e, load_tile, leader, KT, STAGES, bars, mbar_t, acc_t)
    a_view = view(e.add(e.mul(slot, e.c(A_BYTES)), e.mul(wg, e.c(BMW * BK * 2))), f"{BMW}x{BK}")
    b_view = view(e.add(e.c(STAGES * A_BYTES), e.mul(slot, e.c(B_BYTES))), f"{BK}x{BN}")
    da, db, nxt = e.fresh("da"), e.fresh("db"), e.fresh("acc")
    (ta2, ta2_t), (tb2, tb2_t) = desc_tm[tma_a], desc_tm[tma_b]
    e.emit(f"{da} = nvgpu.warpgroup.generate.descriptor {a_view}, {ta2} : memref<{BMW}x{BK}x{dt}, {WG}>, {ta2_t} -> {da_t}")
    e.emit(f"{db} = nvgpu.warpgroup.generate.descriptor {b_view}, {tb2} : memref<{BK}x{BN}x{dt}, {WG}>, {tb2_t} -> {db_t}")
    e.emit(f"{nxt} = nvgpu.warpgroup.mma {da}, {db}, {acc} {{transposeB}} : {da_t}, {db_t}, {acc_t} -> {acc_t}")
    close_k_loop(e, load_tile, leader, KT, STAGES, nxt, acc_t)
    # Epilogue: accumulators -> shared (f32) -> act(acc + bias + residual) -> global.
    tile, tile_t = accumulators_to_shared(e, view, res, acc_t, wg, BM, BMW, BN)
    per_row = BN // 8
    col = e.mul(e.rem(tid, e.c(per_row)), e.c(8))
    n = e.add(n0, col)
    e.open(f"scf.if {e.cmp('ult', n, e.c(NO))} {{")
    o8 = f"vector<8x{dt}>"
    if bias:
        bv = e.fresh("bias")
        e.emit(f"{bv} = vector.load {bias}[{n}] : {types[bias]}, {o8}")
        bias_f = e.fresh("bias")
        e.emit(f"{bias_f} = arith.extf {bv} : {o8} to vector<8xf32>")
    rows_per_pass = T // per_row
    # a pass covers rows_per_pass whole rows: the threads past them idle, a last partial pass is clamped
    active = e.cmp("ult", tid, e.c(rows_per_pass * per_row)) if T % per_row else None

    def pass_rows(p: int) -> tuple[str, str, str, str]:
        """(tile row, output row, that row clamped into range, whether it is in range) of pass p."""
        i = e.add(e.c(p * rows_per_pass), e.div(tid, e.c(per_row)))
        if BM % rows_per_pass:                  # (BN = 192: 10 rows of 24 threads a pass, the last 16 idle)
            i = e.op("arith.minui", i, e.c(BM - 1))
        if flat:
            m = e.add(m0, i)
            ok = e.cmp("ult", m, e.c(M))
            return i, m, e.op("arith.minui", m, e.c(M - 1)), e.both(ok, active) if active else ok
        img = e.add(i0, e.div(i, e.c(bh * bw)))
        oh = e.add(oh0, e.rem(e.div(i, e.c(bw)), e.c(bh)))
        ow = e.add(ow0, e.rem(i, e.c(bw)))
        ok = e.both(e.cmp("ult", img, e.c(N)), e.both(e.cmp("ult", oh, e.c(OH)), e.cmp("ult", ow, e.c(OW))))
        ok = e.both(ok, active) if active else ok
        pixel = lambda a, b, c: e.add(e.mul(e.add(e.mul(a, e.c(OH)), b), e.c(OW)), c)  # noqa: E731
        clamped = pixel(*(e.op("arith.minui", x, e.c(size - 1)) for x, size in ((img, N), (oh, OH), (ow, OW))))
        return i, pixel(img, oh, ow), clamped, ok

    def residual_row(row: str) -> str:
        r8 = e.fresh("r")
        e.emit(f"{r8} = vector.load {res2}[{row}, {n}] : memref<{M}x{NO}x{dt}>, {o8}")
        return r8

    # The residual rows of PREFETCH passes are loaded before any of them is used (at clamped rows, so
    # without a branch): a load per pass, each waited for before the next, left the epilogue bound by
    # memory latency (ResNet-50's 1x1 layers with a residual ran at a third of the memory bandwidth).
    passes = list(range(-(-BM // rows_per_pass)))
    for chunk in range(0, len(passes), PREFETCH):
        rows = [pass_rows(p) for p in passes[chunk:chunk + PREFETCH]]
        fetched = [residual_row(clamped) if res2 else None for _, _, clamped, _ in rows]
        for (i, m, _, ok), r8 in zip(rows, fetched):
            e.open(f"scf.if {ok} {{")
            v = tile_row8(e, tile, tile_t, i, col)
            if batch > 1 or splits > 1:                     # rows of GEMM (k run) %bz follow those of %bz - 1
                m = e.add(m, e.mul("%bz", e.c(M)))
            store_vector(e, spec, v, bias_f if bias else None, (out2, [m, n], f"memref<{M * batch * splits}x{NO}x{od}>"),
                   residual_v=r8)
            e.close()
    e.close()
    e.emit("gpu.terminator")
    e.close("}")


# ---- pieces of the sm_90 kernels (this GEMM, the filter gradient of wgmma_backward_weights.py)
def tensor_map(e: Emitter, value: str, mtype: str, dt: str, box: list[int], strides: tuple = ()) -> tuple[str, str]:
    """A tensor map (host) whose loads land as `box` in shared memory, 128-byte swizzled; with element
    strides, TMA steps over the tensor (a strided convolution: box[i] * strides[i] elements read every
    strides[i]-th)."""
    cast = e.fresh("u")
    e.emit(f"{cast} = memref.cast {value} : {mtype} to memref<*x{dt}>")
    tm_t = f"!nvgpu.tensormap.descriptor<tensor = memref<{'x'.join(map(str, box))}x{dt}, 3>, {SWZ}>"
    tm = e.fresh("tm")
    attr = f" {{{contract.element_strides_text(strides)}}}" if any(x > 1 for x in strides) else ""
    e.emit(f"{tm} = nvgpu.tma.create.descriptor {cast} box[{', '.join(e.c(x) for x in box)}]{attr} "
           f": memref<*x{dt}> -> {tm_t}")
    return tm, tm_t


def descriptor_map(e: Emitter, tm: str, tm_t: str, rows: int, cols: int, dt: str) -> tuple[str, str]:
    """The 2-d view of a tensor map that wgmma descriptors want: only its swizzle and its rows are read
    (the descriptor's leading byte offset, rows x 128 bytes: the stride between 64-column boxes of an
    operand read transposed)."""
    p, t2 = e.fresh("p"), e.fresh("tm")
    e.emit(f"{p} = builtin.unrealized_conversion_cast {tm} : {tm_t} to !llvm.ptr")
    t2_t = f"!nvgpu.tensormap.descriptor<tensor = memref<{rows}x{cols}x{dt}, 3>, {SWZ}>"
    e.emit(f"{t2} = builtin.unrealized_conversion_cast {p} : !llvm.ptr to {t2_t}")
    return t2, t2_t


def stage_barriers(e: Emitter, stages: int, leader: str) -> tuple[str, str]:
    """One mbarrier per stage slot, initialized by thread `leader`, then a block barrier; (group, type)."""
    mbar_t = f"!nvgpu.mbarrier.group<memorySpace = {WG}, num_barriers = {stages}>"
    bars = e.fresh("bar")
    e.emit(f"{bars} = nvgpu.mbarrier.create -> {mbar_t}")
    e.open(f"scf.if {leader} {{")
    for s in range(stages):
        e.emit(f"nvgpu.mbarrier.init {bars}[{e.c(s)}], {e.c(1)} : {mbar_t}")
    e.emit("nvvm.fence.mbarrier.init")      # the inits visible to TMA's completions (async proxy)
    e.close()
    e.emit("gpu.barrier")
    return bars, mbar_t


def tma_load(e: Emitter, tm: tuple[str, str], coords: list[str], barrier: tuple[str, str, str], dst: str, box: str,
             pred: str) -> None:
    """Thread `pred` asks for the box of tensor map tm = (value, type) at coords (innermost first) into shared
    view dst (of memref<box, workgroup>), completing on barrier = (group, type, slot)."""
    bars, mbar_t, slot = barrier
    e.emit(f"nvgpu.tma.async.load {tm[0]}[{', '.join(coords)}], {bars}[{slot}] to {dst}, predicate = {pred} "
           f": {tm[1]}, {mbar_t} -> memref<{box}, {WG}>")


def wgmma_types(m: int, k: int, n: int, dt: str) -> tuple[str, str, str]:
    """The accumulator type of a warpgroup's m x n tile and the descriptor types of its m x k and k x n operands."""
    return (f"!nvgpu.warpgroup.accumulator<fragmented = vector<{m}x{n}xf32>>",
            f"!nvgpu.warpgroup.descriptor<tensor = memref<{m}x{k}x{dt}, {WG}>>",
            f"!nvgpu.warpgroup.descriptor<tensor = memref<{k}x{n}x{dt}, {WG}>>")


def tile_row8(e: Emitter, tile: str, tile_t: str, row: str, col: str) -> str:
    """vector<8xf32> of the f32 epilogue tile at [row, col..col+8) (two 16-byte loads: rows are padded by 4
    floats, so 32-byte alignment is not given)."""
    halves = []
    for h in range(2):
        x = e.fresh("x")
        e.emit(f"{x} = vector.load {tile}[{row}, {e.add(col, e.c(4 * h))}] : {tile_t}, vector<4xf32>")
        halves.append(x)
    v = e.fresh("x")
    e.emit(f"{v} = vector.shuffle {halves[0]}, {halves[1]} [0, 1, 2, 3, 4, 5, 6, 7] : vector<4xf32>, vector<4xf32>")
    return v


def open_k_loop(e: Emitter, load_tile, leader: str, k_tiles: int, stages: int, bars: str, mbar_t: str,
                acc_t: str) -> tuple[str, str, str]:
    """The mbarrier pipeline's head: thread `leader` loads all the k tiles when they fit in the slots, else
    stages - 1 (the loop refills one ahead; load_tile(k tile, slot, predicate)); the accumulator is zeroed and
    the loop over the k tiles opened, waiting on its slot's barrier. Returns (the loop's result, the
    accumulator inside it, the slot)."""
    for s in range(k_tiles if k_tiles == stages else stages - 1):
        load_tile(e.c(s), e.c(s), leader)
    acc0, res, acc = e.fresh("acc"), e.fresh("res"), e.fresh("acc")
    e.emit(f"{acc0} = nvgpu.warpgroup.mma.init.accumulator -> {acc_t}")
    e.open(f"{res} = scf.for %kt = {e.c(0)} to {e.c(k_tiles)} step {e.c(1)} iter_args({acc} = {acc0}) "
           f"-> ({acc_t}) {{")
    slot = e.rem("%kt", e.c(stages))
    parity = e.fresh("ph")
    e.emit(f"{parity} = arith.index_cast {e.rem(e.div('%kt', e.c(stages)), e.c(2))} : index to i1")
    e.emit(f"nvgpu.mbarrier.try_wait.parity {bars}[{slot}], {parity}, {e.c(10000000)} : {mbar_t}")
    return res, acc, slot


def close_k_loop(e: Emitter, load_tile, leader: str, k_tiles: int, stages: int, acc: str, acc_t: str) -> None:
    """The loop's tail, after this tile's wgmmas (whose lowering ends with wgmma.wait_group 1: tile kt-1's
    products are done): a block barrier and the refill of kt-1's slot with tile kt + stages - 1; then, past
    the loop, the last products waited for and a barrier (the slots become the epilogue's)."""
    if k_tiles > stages:     # else the head loaded every tile (and a constant predicate is bad PTX)
        e.emit("gpu.barrier")
        ahead = e.add("%kt", e.c(stages - 1))
        load_tile(ahead, e.rem(ahead, e.c(stages)), e.both(leader, e.cmp("ult", ahead, e.c(k_tiles))))
    e.emit(f"scf.yield {acc} : {acc_t}")
    e.close()
    e.emit("nvvm.wgmma.wait.group.sync.aligned 0")
    e.emit("gpu.barrier")


def accumulators_to_shared(e: Emitter, view, res: str, acc_t: str, wg: str, bm: int, bmw: int, bn: int):
    """The block's accumulators (warpgroup wg: bmw rows of bn) into a [bm, bn + 4] f32 tile at the start of
    shared memory (rows padded against bank conflicts), then a block barrier; (tile, its type). The store's
    lowering puts warp w's rows at 16 w (w = tid / 32, over all warpgroups) plus 64 per m64 fragment, so
    warpgroup g is offset by its rows past the first 64 only."""
    rs = bn + 4
    # (the view has the accumulator's shape, as the op wants; its rows past bmw are not bounds-checked)
    stage = view(e.mul(wg, e.c((bmw - 64) * rs * 4)), f"{bmw}x{rs}", "f32")
    sub = e.fresh("sv")
    sub_t = f"memref<{bmw}x{bn}xf32, strided<[{rs}, 1]>, {WG}>"
    e.emit(f"{sub} = memref.subview {stage}[0, 0] [{bmw}, {bn}] [1, 1] : memref<{bmw}x{rs}xf32, {WG}> to {sub_t}")
    e.emit(f"nvgpu.warpgroup.mma.store {res}, {sub} : {acc_t} to {sub_t}")
    e.emit("gpu.barrier")
    return view(e.c(0), f"{bm}x{rs}", "f32"), f"memref<{bm}x{rs}xf32, {WG}>"


def shared_views(e: Emitter, dt: str):
    """view(byte offset, shape, element type = dt): typed views of the dynamic shared memory, its base
    rounded up to ALIGN (the swizzle's period)."""
    dyn = e.fresh("dyn")
    smem_t = f"memref<?xi8, {WG}>"
    e.emit(f"{dyn} = gpu.dynamic_shared_memory : {smem_t}")
    addr = e.fresh("i")
    e.emit(f"{addr} = memref.extract_aligned_pointer_as_index {dyn} : {smem_t} -> index")
    base = e.rem(e.op("arith.subi", e.c(ALIGN), e.rem(addr, e.c(ALIGN))), e.c(ALIGN))

    def view(offset: str, shape: str, elem: str = dt) -> str:
        v = e.fresh("sv")
        e.emit(f"{v} = memref.view {dyn}[{e.add(base, offset)}][] : {smem_t} to memref<{shape}x{elem}, {WG}>")
        return v
    return view


# Helpers of the kernels that add launches around the GEMM (im2col, space-to-depth, Winograd).
def in_image(e: Emitter, ih: str, iw: str, h: int, w: int) -> str:
    """0 <= ih < h and 0 <= iw < w (signed: a padded window starts before the image)."""
    return e.both(e.both(e.cmp("sge", ih, e.c(0)), e.cmp("slt", ih, e.c(h))),
                  e.both(e.cmp("sge", iw, e.c(0)), e.cmp("slt", iw, e.c(w))))


def host_function(e: Emitter, name: str, signature) -> str:
    """The function: host lines (tensor maps), then the launch (already closed)."""
    sig = ", ".join(f"{p}: {ty}" for p, ty in signature)
    return f"func.func @{name}({sig}) {{\n" + "\n".join(e.lines) + "\n    return\n}"


def vec_launch(e: Emitter, rows: int, cols: int) -> tuple[str, str]:
    """Open a 1-d launch with a thread per 8 consecutive columns of a rows x cols matrix (256 threads a
    block, columns fastest) and an scf.if on the bounds; returns (row, first column)."""
    one, total = e.c(1), rows * (cols // 8)
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-total // 256))}, %gy = {one}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(256)}, %sy = {one}, %sz = {one}) {{")
    idx = e.add(e.mul("%bx", e.c(256)), "%tx")
    e.open(f"scf.if {e.cmp('ult', idx, e.c(total))} {{")
    return e.div(idx, e.c(cols // 8)), e.mul(e.rem(idx, e.c(cols // 8)), e.c(8))


def close_launch(e: Emitter) -> None:
    e.close()
    e.emit("gpu.terminator")
    e.close("}")

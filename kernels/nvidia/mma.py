"""A tensor-core GEMM kernel for NVIDIA (sm_80+): f16, bf16 or (opt-in) TF32 inputs, f32 accumulation.

The same problem as kernels/gpu/gemm.py (implicit-GEMM convolution NHWC x RSCK, or matmul), the same
staging and epilogue, with the inner product on the matrix units (mma.sync):

    f16   nvgpu.mma.sync m16n8k16                  (A: 4 x vector<2xf16>, B: 2 x vector<2xf16>)
    bf16  nvvm.mma.sync m16n8k16, bf16 PTX types   (MLIR 22's nvgpu.mma.sync has no bf16 PTX type, so
                                                    the ldmatrix registers go in as i32, as the nvgpu
                                                    lowering does for f16)
    f32   nvgpu.mma.sync m16n8k8 tf32Enabled       (the hardware reads 10 mantissa bits: opt-in only)

    block 128 x 128 (8 warps as 2 (m) x 4 (n), warp tile 64 x 32 = 4 x 4 mma tiles), or 64 x 64 with
    4 warps of 32 x 32 when the problem has too few 128 x 128 blocks; a k tile is 64 bytes of every
    row (BK = 32 f16/bf16 or 16 f32), moved 16 bytes (VEC elements) per thread and copy.
    Shared tiles As[BM][BK + PAD_A], Bs[BK][BN + PAD_B]: the padding keeps ldmatrix (and the TF32
    scalar B reads) free of bank conflicts.

    Fragments of one k step (KS = 16, or 8 for TF32), per warp:
        a[i] = ldmatrix.x4 As[warp_m + 16 i + lane % 16][ks + (KS / 2) (lane / 16)]
        b[j] = ldmatrix.x2.trans Bs[ks + lane % 16][warp_n + 8 j]               (16-bit types)
             = Bs[ks + lane % 4 (+ 4)][warp_n + 8 j + lane / 4]                  (TF32: 32-bit, no trans)
        acc[i][j] = mma.sync(a[i], b[j], acc[i][j])

Global -> shared staging, `stages` S:
    S = 1  through registers: the next k tile is loaded (vector loads, zeros outside) while this one
           is multiplied, then stored to the one shared buffer (two barriers per k tile);
    S >= 2 cp.async into S shared buffers (nvgpu.device_async_copy, 16 bytes, L1 bypassed): out of
           the image or past K the copy reads 0 source bytes, which zero-fills (the padding
           predicates of the implicit GEMM), and its address is clamped to 0:
        prologue: copy tiles 0 .. S-2 into buffers 0 .. S-2, one commit group each
        for kt: wait until at most S-2 groups are pending (tile kt landed), barrier,
                copy tile kt+S-1 into buffer (kt+S-1) % S (the one multiplied at kt-1), commit,
                multiply buffer kt % S
    Shared buffers are static (48 KB per block at most), which bounds S: 2 for 128 x 128, 4 for 64 x 64.

Epilogue: acc[i][j][r][c] is row 16 i + lane / 4 + 8 r, column 8 j + 2 (lane % 4) + c, then bias,
residual, activation and the output type, stored two columns at a time.

Applies when the rows of A and B can be read 16 bytes at a time: channels (or K) and output channels
multiples of 8 (f16, bf16) or 4 (f32), per group. A grouped convolution is one GEMM per group on grid z
(as kernels/gpu/gemm.py's): its k runs over the group's channels (OperandA) and its columns are the
group's slice of the filter and the output (group_col); prim-select merges ResNeXt's groups of 4 or 8
channels into groups of 64 (block-diagonal filters) where that pays, which fill the 64 x 64 tile.
"""
from __future__ import annotations

from openprim.kernels.gpu.gemm import WG, Emitter, GemmSpec, load_vec, epilogue_scalar, group_col, tile_launch

BYTES = {"f16": 2, "bf16": 2, "f32": 4}
ROW_BYTES = 64                      # bytes of k per shared row: BK = 32 (f16, bf16) or 16 (f32)
# (BM, BN, warps along m, warps along n): 8 warps with 64x32 warp tiles, or 4 warps with 32x32 ones
# for problems too small to give every multiprocessor a 128x128 block.
TILES = {"large": (128, 128, 2, 4), "small": (64, 64, 2, 2)}
# The tunable configurations (tile, stages), indexed by the solver's "tile" parameter; the first two
# are the register-prefetch kernels that tuning records made before cp.async existed refer to.
CONFIGS = [("large", 1), ("small", 1), ("large", 2), ("small", 2), ("small", 3), ("small", 4)]
STATIC_SHARED_LIMIT = 48 * 1024


def shape(dtype: str, tile: str):
    """(BM, BN, BK, PAD_A, PAD_B, KS, VEC) of a tile for an input type."""
    bm, bn, _, _ = TILES[tile]
    b = BYTES[dtype]
    # f32: As rows of 16 + 4 floats (80 bytes, conflict-free ldmatrix rows); Bs rows of BN + 8 floats,
    # 8 banks apart, so the TF32 B reads (4 k rows x 8 columns per warp) hit 32 different banks.
    return bm, bn, ROW_BYTES // b, 16 // b, 8, 16 if b == 2 else 8, 16 // b


def shared_bytes(dtype: str, tile: str, stages: int) -> int:
    bm, bn, bk, pa, pb, _, _ = shape(dtype, tile)
    return stages * (bm * (bk + pa) + bk * (bn + pb)) * BYTES[dtype]


def applicable(spec: GemmSpec) -> str | None:
    c = spec.conv[3] // spec.groups if spec.conv else spec.k
    vec = 16 // BYTES[spec.dtype]
    if c % vec or spec.n % vec:
        return f"needs input and output channels (or K and N) per group that are multiples of {vec}"
    return None


def fragment_types(dt: str) -> tuple[str, str, str]:
    """(A, B, accumulator) fragment types of one m16n8k16 (m16n8k8 TF32 for f32) mma.sync."""
    if dt == "f32":
        return "vector<4x1xf32>", "vector<2x1xf32>", "vector<2x2xf32>"
    return f"vector<4x2x{dt}>", f"vector<2x2x{dt}>", "vector<2x2xf32>"


def mma_sync(e: Emitter, dt: str, fa: str, fb: str, acc: str) -> str:
    """acc + fa . fb on one m16n8k16 tile (m16n8k8 TF32 for f32), accumulators f32; returns the sum."""
    a_frag, b_frag, acc_t = fragment_types(dt)
    n = e.fresh("acc")
    if dt in ("f16", "f32"):
        shape_ = "[16, 8, 16]" if dt == "f16" else "[16, 8, 8], tf32Enabled"
        e.emit(f"{n} = nvgpu.mma.sync({fa}, {fb}, {acc}) {{mmaShape = {shape_}}} : ({a_frag}, {b_frag}, {acc_t}) -> {acc_t}")
        return n
    # bf16: the registers as i32 (two bf16 each), as convert-nvgpu-to-nvvm passes f16 ones.
    regs = []
    for frag, ty in ((fa, a_frag), (fb, b_frag)):
        for i in range(int(ty[7])):
            pair, cast, r = e.fresh("r"), e.fresh("r"), e.fresh("r")
            e.emit(f"{pair} = vector.extract {frag}[{i}] : vector<2x{dt}> from {ty}")
            e.emit(f"{cast} = vector.bitcast {pair} : vector<2x{dt}> to vector<1xi32>")
            e.emit(f"{r} = vector.extract {cast}[0] : i32 from vector<1xi32>")
            regs.append(r)
    c = []
    for i in range(4):
        s = e.fresh("c")
        e.emit(f"{s} = vector.extract {acc}[{i // 2}, {i % 2}] : f32 from {acc_t}")
        c.append(s)
    d, st = e.fresh("d"), "!llvm.struct<(f32, f32, f32, f32)>"
    e.emit(f"{d} = nvvm.mma.sync A[{', '.join(regs[:4])}] B[{', '.join(regs[4:])}] C[{', '.join(c)}] "
           f"{{layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, "
           f"multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, "
           f"shape = #nvvm.shape<m = 16, n = 8, k = 16>}} : (i32, i32, f32) -> {st}")
    v = e.fresh("z")
    e.emit(f"{v} = arith.constant dense<0.0> : {acc_t}")
    for i in range(4):
        s, nv = e.fresh("c"), e.fresh("acc")
        e.emit(f"{s} = llvm.extractvalue {d}[{i}] : {st}")
        e.emit(f"{nv} = vector.insert {s}, {v} [{i // 2}, {i % 2}] : f32 into {acc_t}")
        v = nv
    return v


def _select(e: Emitter, ok: str, a: str, b: str) -> str:
    n = e.fresh("i")
    e.emit(f"{n} = arith.select {ok}, {a}, {b} : index")
    return n


def mma_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, tile: str = "large",
               stages: int = 1, operand_a=None, signature: list[tuple[str, str]] | None = None) -> str:
    """params_sig: A (or x), B, bias?, residual?, out; operand_a(e): A computed in registers instead of
    read (register prefetch only; kernels/nvidia/depthwise_pointwise.py), whose kernel's parameters,
    `signature`, are more than params_sig."""
    assert operand_a is None or stages == 1, "a computed A is staged through registers"
    dt = spec.dtype
    BM, BN, BK, PAD_A, PAD_B, KS, VEC = shape(dt, tile)
    _, _, WARPS_M, WARPS_N = TILES[tile]
    if shared_bytes(dt, tile, stages) > STATIC_SHARED_LIMIT:
        raise ValueError(f"{stages} stages of the {tile} tile need {shared_bytes(dt, tile, stages)} bytes "
                         f"of shared memory (static limit {STATIC_SHARED_LIMIT})")
    THREADS = 32 * WARPS_M * WARPS_N
    TILES_M, TILES_N = BM // WARPS_M // 16, BN // WARPS_N // 8     # mma tiles per warp
    tf32 = dt == "f32"
    e = Emitter()
    M, N, K = spec.m, spec.n, spec.k
    lead = f"{stages}x" if stages > 1 else ""          # one shared buffer per stage
    as_t, bs_t = f"memref<{lead}{BM}x{BK + PAD_A}x{dt}, {WG}>", f"memref<{lead}{BK}x{BN + PAD_B}x{dt}, {WG}>"
    at = lambda buf, stage, *idx: f"{buf}[{', '.join(([stage] if stages > 1 else []) + list(idx))}]"  # noqa: E731
    m0, n0, A, b2, out2, res2, bias, bias_t = tile_launch(e, spec, params_sig, BM, BN, THREADS,
                                                          [("%As", as_t), ("%Bs", bs_t)], operand_a)
    b_t = f"memref<{K}x{N * spec.groups}x{dt}>"
    # Global reads, VEC elements (16 bytes) each: A rows along k, B rows along n.
    a_col = e.mul(e.rem("%tx", e.c(BK // VEC)), e.c(VEC))
    rows = [A.row(m0, e.add(e.c(p * THREADS * VEC // BK), e.div("%tx", e.c(BK // VEC))))
            for p in range(BM * BK // (THREADS * VEC))]
    b_col = e.mul(e.rem("%tx", e.c(BN // VEC)), e.c(VEC))
    b_n = e.add(n0, b_col)
    b_nok = e.cmp("ult", b_n, e.c(N))
    b_n = group_col(e, spec, b_n)
    b_rows = [e.add(e.c(p * THREADS * VEC // BN), e.div("%tx", e.c(BN // VEC))) for p in range(BK * BN // (THREADS * VEC))]
    vt = f"vector<{VEC}x{dt}>"

    def global_loads(k0: str) -> list[str]:
        vecs = A.loads(rows, e.add(k0, a_col), VEC, widen=False)
        for kk in b_rows:
            kb = e.add(k0, kk)
            vecs.append(load_vec(e, e.both(b_nok, e.cmp("ult", kb, e.c(K))), b2, b_t, [kb, b_n], VEC, dt, widen=False))
        return vecs

    def async_copies(k0: str, stage: str) -> str:
        """cp.async of the A and B tiles at k0 into buffer `stage`; returns the commit group's token."""
        zero_i, vec_i = e.c(0), e.c(VEC)
        copies = [(ok, idx, A.memref, A.mtype, "%As", [stage, info["row"], a_col], as_t)
                  for (ok, idx), info in zip(A.addresses(rows, e.add(k0, a_col)), rows)]
        for kk in b_rows:
            kb = e.add(k0, kk)
            copies.append((e.both(b_nok, e.cmp("ult", kb, e.c(K))), [kb, b_n], b2, b_t, "%Bs", [stage, kk, b_col], bs_t))
        tokens = []
        for ok, idx, src, src_t, dst, dst_idx, dst_t in copies:
            idx = [_select(e, ok, i, zero_i) for i in idx]        # never an address outside the tensor
            t = e.fresh("cp")
            e.emit(f"{t} = nvgpu.device_async_copy {src}[{', '.join(idx)}], {dst}[{', '.join(dst_idx)}], {VEC}, "
                   f"{_select(e, ok, vec_i, zero_i)} {{bypassL1}} : {src_t} to {dst_t}")
            tokens.append(t)
        group = e.fresh("grp")
        e.emit(f"{group} = nvgpu.device_async_create_group {', '.join(tokens)}")
        return group

    warp, lane = e.div("%tx", e.c(32)), e.rem("%tx", e.c(32))
    wm = e.mul(e.div(warp, e.c(WARPS_N)), e.c(BM // WARPS_M))
    wn = e.mul(e.rem(warp, e.c(WARPS_N)), e.c(BN // WARPS_N))
    lrow, lhalf = e.rem(lane, e.c(16)), e.mul(e.div(lane, e.c(16)), e.c(KS // 2))
    lgroup, lquad = e.div(lane, e.c(4)), e.rem(lane, e.c(4))
    a_frag, b_frag, acc_t = fragment_types(dt)
    zero, zero_b = e.fresh("z"), e.fresh("z")
    e.emit(f"{zero} = arith.constant dense<0.0> : {acc_t}")
    if tf32:
        e.emit(f"{zero_b} = arith.constant dense<0.0> : {b_frag}")

    def multiply(cur: list[str], stage: str | None) -> list[str]:
        """The mma's of one shared k tile (buffer `stage`) into the accumulators `cur`."""
        cur = list(cur)
        for ks in range(0, BK, KS):
            afr, bfr = [], []
            for i in range(TILES_M):
                f = e.fresh("fa")
                e.emit(f"{f} = nvgpu.ldmatrix {at('%As', stage, e.add(wm, e.add(e.c(16 * i), lrow)), e.add(e.c(ks), lhalf))} "
                       f"{{numTiles = 4 : i32, transpose = false}} : {as_t} -> {a_frag}")
                afr.append(f)
            for j in range(TILES_N):
                if tf32:
                    n = e.add(wn, e.add(e.c(8 * j), lgroup))
                    frag = zero_b
                    for half in range(2):
                        v, frag_next = e.fresh("b"), e.fresh("fb")
                        e.emit(f"{v} = memref.load {at('%Bs', stage, e.add(e.c(ks + 4 * half), lquad), n)} : {bs_t}")
                        e.emit(f"{frag_next} = vector.insert {v}, {frag} [{half}, 0] : f32 into {b_frag}")
                        frag = frag_next
                    f = frag
                else:
                    f = e.fresh("fb")
                    e.emit(f"{f} = nvgpu.ldmatrix {at('%Bs', stage, e.add(e.c(ks), lrow), e.add(wn, e.c(8 * j)))} "
                           f"{{numTiles = 2 : i32, transpose = true}} : {bs_t} -> {b_frag}")
                bfr.append(f)
            for i in range(TILES_M):
                for j in range(TILES_N):
                    cur[i * TILES_N + j] = mma_sync(e, dt, afr[i], bfr[j], cur[i * TILES_N + j])
        return cur

    accs = [e.fresh("acc") for _ in range(TILES_M * TILES_N)]
    res = e.fresh("res")
    k_end = e.c(-(-K // BK) * BK)
    if stages == 1:
        first = global_loads(e.c(0))
        staged = [e.fresh("g") for _ in first]
        carried = [f"{x} = {zero}" for x in accs] + [f"{g} = {v}" for g, v in zip(staged, first)]
        types_out = [acc_t] * len(accs) + [vt] * len(staged)
        e.open(f"{res}:{len(carried)} = scf.for %k0 = {e.c(0)} to {k_end} step {e.c(BK)} "
               f"iter_args({', '.join(carried)}) -> ({', '.join(types_out)}) {{")
        for vec, info in zip(staged, rows):
            e.emit(f"vector.store {vec}, %As[{info['row']}, {a_col}] {{alignment = 16}} : {as_t}, {vt}")
        for vec, kk in zip(staged[len(rows):], b_rows):
            e.emit(f"vector.store {vec}, %Bs[{kk}, {b_col}] {{alignment = 16}} : {bs_t}, {vt}")
        e.emit("gpu.barrier")
        following = global_loads(e.add("%k0", e.c(BK)))
        cur = multiply(accs, None)
        e.emit("gpu.barrier")
        e.emit(f"scf.yield {', '.join(cur + following)} : {', '.join(types_out)}")
        e.close()
    else:
        group = None
        for s in range(stages - 1):
            group = async_copies(e.c(s * BK), e.c(s))
        # cp.async.wait_group counts this thread's pending groups whatever token it is given, so every
        # wait names the prologue's group (a token carried through the loop would not lower to NVVM).
        carried = [f"{x} = {zero}" for x in accs]
        types_out = [acc_t] * len(accs)
        e.open(f"{res}:{len(carried)} = scf.for %k0 = {e.c(0)} to {k_end} step {e.c(BK)} "
               f"iter_args({', '.join(carried)}) -> ({', '.join(types_out)}) {{")
        e.emit(f"nvgpu.device_async_wait {group} {{numGroups = {stages - 2} : i32}}")
        e.emit("gpu.barrier")
        kt = e.div("%k0", e.c(BK))
        async_copies(e.add("%k0", e.c((stages - 1) * BK)), e.rem(e.add(kt, e.c(stages - 1)), e.c(stages)))
        cur = multiply(accs, e.rem(kt, e.c(stages)))
        e.emit(f"scf.yield {', '.join(cur)} : {', '.join(types_out)}")
        e.close()
        e.emit(f"nvgpu.device_async_wait {group} {{numGroups = 0 : i32}}")  # none left in flight
    # Epilogue from the accumulator fragments: each thread owns column pairs (N is even), so the two
    # values of a pair are stored together.
    qcol = e.mul(lquad, e.c(2))
    ot = f"memref<{M}x{N * spec.groups}x{dt}>"
    for i in range(TILES_M):
        for r in range(2):
            m = e.add(m0, e.add(wm, e.add(e.c(16 * i + 8 * r), lgroup)))
            e.open(f"scf.if {e.cmp('ult', m, e.c(M))} {{")
            for j in range(TILES_N):
                n = e.add(n0, e.add(wn, e.add(e.c(8 * j), qcol)))
                e.open(f"scf.if {e.cmp('ult', n, e.c(N))} {{")
                pair = []
                n = group_col(e, spec, n)
                for c in range(2):
                    v = e.fresh("s")
                    e.emit(f"{v} = vector.extract {res}#{i * TILES_N + j}[{r}, {c}] : f32 from {acc_t}")
                    col = e.add(n, e.c(c)) if c else n
                    pair.append(epilogue_scalar(e, spec, v, [(bias, [col], bias_t), (res2, [m, col], ot)]))
                vec = e.fresh("p")
                e.emit(f"{vec} = vector.from_elements {pair[0]}, {pair[1]} : vector<2x{dt}>")
                e.emit(f"vector.store {vec}, {out2}[{m}, {n}] {{alignment = {2 * BYTES[dt]}}} : {ot}, vector<2x{dt}>")
                e.close()
            e.close()
    return e.function(name, signature or params_sig)

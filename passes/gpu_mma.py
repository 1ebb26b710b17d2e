"""A tensor-core GEMM kernel for NVIDIA (sm_80+): f16 inputs, f32 accumulation, `nvgpu.mma.sync`.

The same problem as gpu_gemm.py (implicit-GEMM convolution NHWC x RSCK, or matmul), the same
staging and epilogue, with the inner product on the matrix units:

    block 128 x 128, BK = 32, 8 warps as 2 (m) x 4 (n), each warp a 64 x 32 tile = 4 x 4 mma tiles
    (or 64 x 64 with 4 warps of 32 x 32 when the problem has too few 128 x 128 blocks)
    regs = global tiles at k0 = 0              (16-byte loads: 8 channels / 8 columns per thread)
    for k0 in 0..K step 32:
        regs -> As[128][32+8], Bs[32][128+8]     (rows padded by 16 bytes: ldmatrix without bank conflicts)
        barrier; regs = global tiles at k0 + 32
        for ks in (0, 16):
            a[i] = ldmatrix.x4 As[warp_m + 16 i + lane % 16][ks + 8 (lane / 16)]
            b[j] = ldmatrix.x2.trans Bs[ks + lane % 16][warp_n + 8 j]
            acc[i][j] = mma.sync.m16n8k16(a[i], b[j], acc[i][j])
        barrier
    epilogue: acc[i][j][r][c] is row 16 i + lane / 4 + 8 r, column 8 j + 2 (lane % 4) + c

Applies when the rows of A and B can be read 8 elements (16 bytes) at a time: channels (or K) and
output channels multiples of 8.
"""
from __future__ import annotations

from .gpu_gemm import WG, Emitter, GemmSpec, OperandA, _collapse, _load_vec
from .semantics import activation

BK, PAD = 32, 8
# (BM, BN, warps along m, warps along n): 8 warps with 64x32 warp tiles, or 4 warps with 32x32 ones
# for problems too small to give every multiprocessor a 128x128 block.
TILES = {"large": (128, 128, 2, 4), "small": (64, 64, 2, 2)}


def applicable(spec: GemmSpec) -> str | None:
    c = spec.conv[3] if spec.conv else spec.k
    if spec.dtype != "f16":  # MLIR 22's nvgpu.mma.sync deduces no PTX type for bf16
        return "tensor cores here take f16 inputs (bf16: not in MLIR 22's nvgpu.mma.sync)"
    if c % 8 or spec.n % 8:
        return "needs input and output channels (or K and N) that are multiples of 8"
    if spec.groups != 1:
        return "grouped convolution"
    return None


def mma_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, tile: str = "large") -> str:
    BM, BN, WARPS_M, WARPS_N = TILES[tile]
    THREADS = 32 * WARPS_M * WARPS_N
    TILES_M, TILES_N = BM // WARPS_M // 16, BN // WARPS_N // 8     # mma tiles per warp
    e = Emitter()
    dt = spec.dtype
    M, N, K = spec.m, spec.n, spec.k
    names = [p for p, _ in params_sig]
    types = dict(params_sig)
    rank = lambda p: len(types[p][7:].split("x")) - 1  # noqa: E731
    a, b, out = names[0], names[1], names[-1]
    bias = names[2] if spec.bias else None
    residual = names[2 + spec.bias] if spec.residual else None
    one = e.c(1)
    as_t, bs_t = f"memref<{BM}x{BK + PAD}x{dt}, {WG}>", f"memref<{BK}x{BN + PAD}x{dt}, {WG}>"
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-N // BN))}, %gy = {e.c(-(-M // BM))}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(THREADS)}, %sy = {one}, %sz = {one}) "
           f"workgroup(%As : {as_t}, %Bs : {bs_t}) {{")
    m0, n0 = e.mul("%by", e.c(BM)), e.mul("%bx", e.c(BN))
    b2 = _collapse(e, b, types[b], rank(b), K, N, dt)
    out2 = _collapse(e, out, types[out], rank(out), M, N, dt)
    res2 = _collapse(e, residual, types[residual], rank(residual), M, N, dt) if residual else None
    A = OperandA(e, spec, a, types[a])
    # Global loads: A rows of 8 k-contiguous elements, B rows of 8 n-contiguous ones.
    a_col = e.mul(e.rem("%tx", e.c(BK // 8)), e.c(8))
    rows = [A.row(m0, e.add(e.c(p * THREADS * 8 // BK), e.div("%tx", e.c(BK // 8))))
            for p in range(BM * BK // (THREADS * 8))]
    b_col = e.mul(e.rem("%tx", e.c(BN // 8)), e.c(8))
    b_n = e.add(n0, b_col)
    b_nok = e.cmp("ult", b_n, e.c(N))
    b_rows = [e.add(e.c(p * THREADS * 8 // BN), e.div("%tx", e.c(BN // 8))) for p in range(BK * BN // (THREADS * 8))]

    def global_loads(k0: str) -> list[str]:
        vecs = A.loads(rows, e.add(k0, a_col), 8, widen=False)
        for kk in b_rows:
            kb = e.add(k0, kk)
            vecs.append(_load_vec(e, e.both(b_nok, e.cmp("ult", kb, e.c(K))), b2, f"memref<{K}x{N}x{dt}>",
                                  [kb, b_n], 8, dt, widen=False))
        return vecs

    warp, lane = e.div("%tx", e.c(32)), e.rem("%tx", e.c(32))
    wm = e.mul(e.div(warp, e.c(WARPS_N)), e.c(BM // WARPS_M))
    wn = e.mul(e.rem(warp, e.c(WARPS_N)), e.c(BN // WARPS_N))
    lrow, lhalf = e.rem(lane, e.c(16)), e.mul(e.div(lane, e.c(16)), e.c(8))
    acc_t, v8 = "vector<2x2xf32>", f"vector<8x{dt}>"
    zero = e.fresh("z")
    e.emit(f"{zero} = arith.constant dense<0.0> : {acc_t}")
    first = global_loads(e.c(0))
    accs = [e.fresh("acc") for _ in range(TILES_M * TILES_N)]
    staged = [e.fresh("g") for _ in first]
    res = e.fresh("res")
    carried = [f"{x} = {zero}" for x in accs] + [f"{g} = {v}" for g, v in zip(staged, first)]
    types_out = [acc_t] * len(accs) + [v8] * len(staged)
    e.open(f"{res}:{len(carried)} = scf.for %k0 = {e.c(0)} to {e.c(-(-K // BK) * BK)} step {e.c(BK)} "
           f"iter_args({', '.join(carried)}) -> ({', '.join(types_out)}) {{")
    for vec, info in zip(staged, rows):
        e.emit(f"vector.store {vec}, %As[{info['row']}, {a_col}] {{alignment = 16}} : {as_t}, {v8}")
    for vec, kk in zip(staged[len(rows):], b_rows):
        e.emit(f"vector.store {vec}, %Bs[{kk}, {b_col}] {{alignment = 16}} : {bs_t}, {v8}")
    e.emit("gpu.barrier")
    following = global_loads(e.add("%k0", e.c(BK)))
    cur = list(accs)
    for ks in range(0, BK, 16):
        afr, bfr = [], []
        for i in range(TILES_M):
            f = e.fresh("fa")
            e.emit(f"{f} = nvgpu.ldmatrix %As[{e.add(wm, e.add(e.c(16 * i), lrow))}, {e.add(e.c(ks), lhalf)}] "
                   f"{{numTiles = 4 : i32, transpose = false}} : {as_t} -> vector<4x2x{dt}>")
            afr.append(f)
        for j in range(TILES_N):
            f = e.fresh("fb")
            e.emit(f"{f} = nvgpu.ldmatrix %Bs[{e.add(e.c(ks), lrow)}, {e.add(wn, e.c(8 * j))}] "
                   f"{{numTiles = 2 : i32, transpose = true}} : {bs_t} -> vector<2x2x{dt}>")
            bfr.append(f)
        for i in range(TILES_M):
            for j in range(TILES_N):
                n = e.fresh("acc")
                e.emit(f"{n} = nvgpu.mma.sync({afr[i]}, {bfr[j]}, {cur[i * TILES_N + j]}) {{mmaShape = [16, 8, 16]}} "
                       f": (vector<4x2x{dt}>, vector<2x2x{dt}>, {acc_t}) -> {acc_t}")
                cur[i * TILES_N + j] = n
    e.emit("gpu.barrier")
    e.emit(f"scf.yield {', '.join(cur + following)} : {', '.join(types_out)}")
    e.close()
    # Epilogue from the accumulator fragments: each thread owns column pairs (N is a multiple of 8), so
    # the two values of a pair are stored together.
    qrow, qcol = e.div(lane, e.c(4)), e.mul(e.rem(lane, e.c(4)), e.c(2))
    ot = f"memref<{M}x{N}x{dt}>"
    for i in range(TILES_M):
        for r in range(2):
            m = e.add(m0, e.add(wm, e.add(e.c(16 * i + 8 * r), qrow)))
            e.open(f"scf.if {e.cmp('ult', m, e.c(M))} {{")
            for j in range(TILES_N):
                n = e.add(n0, e.add(wn, e.add(e.c(8 * j), qcol)))
                e.open(f"scf.if {e.cmp('ult', n, e.c(N))} {{")
                pair = []
                for c in range(2):
                    v = e.fresh("s")
                    e.emit(f"{v} = vector.extract {res}#{i * TILES_N + j}[{r}, {c}] : f32 from {acc_t}")
                    col = e.add(n, e.c(c)) if c else n
                    for src, idx, mt in ((bias, [col], types[bias] if bias else ""), (res2, [m, col], ot)):
                        if src:
                            x = e.fresh("e")
                            e.emit(f"{x} = memref.load {src}[{', '.join(idx)}] : {mt}")
                            v = e.scalar("arith.addf", v, e.to_f32(x, dt))
                    pair.append(e.from_f32(activation(e, spec.activation, spec.activation_params, v), dt))
                vec = e.fresh("p")
                e.emit(f"{vec} = vector.from_elements {pair[0]}, {pair[1]} : vector<2x{dt}>")
                e.emit(f"vector.store {vec}, {out2}[{m}, {n}] {{alignment = 4}} : {ot}, vector<2x{dt}>")
                e.close()
            e.close()
    return e.function(name, params_sig)

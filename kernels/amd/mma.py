"""A matrix-core GEMM kernel for AMD GPUs: `amdgpu.mfma` on CDNA (gfx90a/gfx942/gfx950, 64-lane waves)
and `amdgpu.wmma` on RDNA3 (gfx1100/gfx1101, 32-lane waves); f16 or bf16 inputs, f32 accumulation.

The same problem as kernels/gpu/gemm.py (implicit-GEMM convolution NHWC x RSCK, or matmul), the same guarded
global loads and fused epilogue, with the inner product on the matrix units:

    block BM x BN, BK = 32, waves as WAVES_M x WAVES_N, each wave a (BM/WAVES_M) x (BN/WAVES_N) tile
    of TM x TN instruction tiles (m x n each)
    regs = global tiles at k0 = 0               (8 elements = 16 bytes per load: channels / columns)
    for k0 in 0..K step 32:
        regs -> As[BM][32+8] (k contiguous), Bt[BN][32+8] (B transposed: k contiguous as well)
        barrier; regs = global tiles at k0 + 32  (register prefetch: latency hidden behind the math)
        for ks in 0..32 step k:
            a[i] = As[wave_m + m i + A-row(lane)][ks + A-k(lane) ...]   one vector load per lane
            b[j] = Bt[wave_n + n j + B-col(lane)][ks + B-k(lane) ...]
            acc[i][j] = mfma/wmma(a[i], b[j], acc[i][j])
        barrier
    epilogue: acc[i][j][r] is row m i + C-row(lane, r), column n j + C-col(lane): guarded scalar stores
    (consecutive lanes hold consecutive columns, so a wave's stores coalesce).

Lane layouts (the AMD matrix instruction calculator's, as IREE's MMA intrinsic layouts state them in
IREEGPUAttrs.cpp: the test checks every entry against that description), for lane l, operand element
e, accumulator register r:

    v_mfma_f32_32x32x8{f16,bf16_1k}  A: vector<4>, row l%32, k 4(l/32)+e      B: column l%32, k 4(l/32)+e
                                     C: vector<16xf32>, row 8(r/4) + 4(l/32) + r%4, column l%32
    v_mfma_f32_16x16x16{f16,bf16_1k} A: vector<4>, row l%16, k 4(l/16)+e      B: column l%16, k 4(l/16)+e
                                     C: vector<4xf32>, row 4(l/16) + r, column l%16
    v_wmma_f32_16x16x16_{f16,bf16}   A: vector<16>, row l%16, k e (lanes 16-31 repeat lanes 0-15)
    (gfx11, wave32)                  B: column l%16, k e;  C: vector<8xf32>, row 2r + l/16, column l%16

These tables (MatrixInstr.a/b/c) and the staging and fragment addresses built on them are plain
integer functions that the emitter evaluates on the thread's SSA values (through Lane);
test_amdgpu_mma.py evaluates the very same functions on integers and assembles a whole tiled GEMM
from them, with the instruction modelled from IREE's description, against numpy's matmul.
bf16 on gfx90a+ lowers to the *_bf16_1k instructions (convert-gpu-to-rocdl picks them by chipset).

Applies when rows of A and B are read 8 elements at a time (input channels or K, and output channels,
multiples of 8, per group); everything else stays on the SIMT kernel. A grouped convolution is one GEMM
per group on grid z (tile_launch / group_col, as the mma.sync and SIMT kernels); prim-select merges
ResNeXt's groups of 4 or 8 channels into groups of 64 where that pays.
"""
from __future__ import annotations

from dataclasses import dataclass

from openprim.kernels.gpu.gemm import WG, Emitter, GemmSpec, load_vec, epilogue_scalar, group_col, tile_launch

BK, PAD = 32, 8          # k per staged tile; LDS rows padded by 16 bytes against bank conflicts


@dataclass(frozen=True)
class MatrixInstr:
    """One matrix instruction and its lane layouts (see the banner)."""
    op: str          # "mfma" or "wmma"
    m: int
    n: int
    k: int
    wave: int        # lanes
    operand: int     # A (and B) elements per lane, consecutive along k
    acc: int         # f32 accumulator registers per lane

    def a(self, lane, e):
        """(row, k) of A held by `lane` in operand element e."""
        return lane % self.m, (self.operand * (lane // self.m) if self.op == "mfma" else 0) + e

    def b(self, lane, e):
        """(k, column) of B held by `lane` in operand element e."""
        return (self.operand * (lane // self.n) if self.op == "mfma" else 0) + e, lane % self.n

    def c(self, lane, r):
        """(row, column) of C/D held by `lane` in accumulator register r."""
        if self.op == "mfma":
            groups = self.wave // self.n                 # lane groups along the rows: 2 (32x32), 4 (16x16)
            return 4 * groups * (r // 4) + 4 * (lane // self.n) + r % 4, lane % self.n
        return 2 * r + lane // 16, lane % 16


MFMA_32x32x8 = MatrixInstr("mfma", 32, 32, 8, 64, 4, 16)
MFMA_16x16x16 = MatrixInstr("mfma", 16, 16, 16, 64, 4, 4)
WMMA_16x16x16 = MatrixInstr("wmma", 16, 16, 16, 32, 16, 8)


@dataclass(frozen=True)
class Tile:
    """A block of BM x BN outputs: waves_m x waves_n waves, each tm x tn instruction tiles."""
    instr: MatrixInstr
    waves_m: int
    waves_n: int
    tm: int
    tn: int

    @property
    def bm(self) -> int:
        return self.waves_m * self.tm * self.instr.m

    @property
    def bn(self) -> int:
        return self.waves_n * self.tn * self.instr.n

    @property
    def threads(self) -> int:
        return self.waves_m * self.waves_n * self.instr.wave


# Per family, largest first: 128x128 blocks where the problem fills the chip, else 64x64.
TILES = {
    "mfma": {"128x128_32x32x8": Tile(MFMA_32x32x8, 2, 2, 2, 2), "64x64_32x32x8": Tile(MFMA_32x32x8, 2, 2, 1, 1),
             "64x64_16x16x16": Tile(MFMA_16x16x16, 2, 2, 2, 2)},
    "wmma": {"128x128_16x16x16": Tile(WMMA_16x16x16, 2, 4, 4, 2), "64x64_16x16x16": Tile(WMMA_16x16x16, 2, 2, 2, 2)},
}


def arch_reason(target, want: str, solver: str) -> str | None:
    """Why `solver`, whose kernel uses `want` ("mfma"/"wmma"), does not run on `target`, or None."""
    have = {"mfma": "mfma", "wmma-gfx11": "wmma"}.get(target.matrix_core)
    if have == want:
        return None
    if have:
        return f"{target.arch} has {have.upper()}, not {want.upper()}: {solver.replace(want, have)}"
    if target.matrix_core == "wmma-gfx12":
        return f"{target.arch}'s WMMA (gfx12 operand layout) is not implemented: SIMT kernel"
    return f"{target.arch} has no matrix cores: SIMT kernel"


def applicable(spec: GemmSpec) -> str | None:
    c = spec.conv[3] // spec.groups if spec.conv else spec.k
    if spec.dtype not in ("f16", "bf16"):
        return f"matrix cores here take f16/bf16 inputs ({spec.dtype}: SIMT kernel)"
    if c % 8 or spec.n % 8:
        return "needs input and output channels (or K and N) per group that are multiples of 8"
    return None


# Addresses, shared by the emitter (lane, tid: Lane) and the numpy model in the test (integers).
def a_staging(t: Tile, tid, p: int):
    """As[row][k]: where thread tid's 8 k-contiguous A elements of load pass p go (its column is the same
    in every pass)."""
    return p * (t.threads * 8 // BK) + tid // (BK // 8), tid % (BK // 8) * 8


def b_staging(t: Tile, tid, p: int):
    """(k, n) of thread tid's 8 n-contiguous B elements of load pass p (stored transposed: Bt[n + j][k])."""
    return p * (t.threads * 8 // t.bn) + tid // (t.bn // 8), tid % (t.bn // 8) * 8


def a_fragment(t: Tile, lane, wave_m, i: int, ks: int):
    """As[row][col]: first of the lane's `operand` consecutive k of instruction tile row i."""
    row, k = t.instr.a(lane, 0)
    return wave_m * (t.bm // t.waves_m) + t.instr.m * i + row, ks + k


def b_fragment(t: Tile, lane, wave_n, j: int, ks: int):
    """Bt[col][k]: first of the lane's `operand` consecutive k of instruction tile column j."""
    k, col = t.instr.b(lane, 0)
    return wave_n * (t.bn // t.waves_n) + t.instr.n * j + col, ks + k


def acc_element(t: Tile, lane, wave_m, wave_n, i: int, j: int, r: int):
    """(row, column) in the block of register r of accumulator tile (i, j)."""
    row, col = t.instr.c(lane, r)
    return (wave_m * (t.bm // t.waves_m) + t.instr.m * i + row,
            wave_n * (t.bn // t.waves_n) + t.instr.n * j + col)


class Lane:
    """An index SSA value with the integer operators the layout tables use (constants folded), so the
    tables above emit the arithmetic they describe."""

    def __init__(self, e: Emitter, name: str):
        self.e, self.name = e, name

    def _wrap(self, name):
        return Lane(self.e, name)

    def __add__(self, o):
        if isinstance(o, int):
            return self if o == 0 else self._wrap(self.e.add(self.name, self.e.c(o)))
        return self._wrap(self.e.add(self.name, o.name))

    __radd__ = __add__

    def __mul__(self, o: int):
        return 0 if o == 0 else self if o == 1 else self._wrap(self.e.mul(self.name, self.e.c(o)))

    __rmul__ = __mul__

    def __floordiv__(self, o: int):
        return self if o == 1 else self._wrap(self.e.div(self.name, self.e.c(o)))

    def __mod__(self, o: int):
        return self._wrap(self.e.rem(self.name, self.e.c(o)))


def matrix_product(e: Emitter, ins: MatrixInstr, a: str, b: str, c: str, dtype: str) -> str:
    """c + a b on one instruction tile (amdgpu.mfma / amdgpu.wmma); a, b: the lane's operand vectors."""
    n = e.fresh("acc")
    frag_t, blgp = f"vector<{ins.operand}x{dtype}>", " blgp = none" if ins.op == "mfma" else ""
    e.emit(f"{n} = amdgpu.{ins.op} {ins.m}x{ins.n}x{ins.k} {a} * {b} + {c}{blgp} "
           f": {frag_t}, {frag_t}, vector<{ins.acc}xf32>")
    return n


def _ssa(e: Emitter, v) -> str:
    return e.c(v) if isinstance(v, int) else v.name


def mma_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, tile: Tile) -> str:
    t, ins = tile, tile.instr
    BM, BN, T = t.bm, t.bn, t.threads
    e = Emitter()
    dt = spec.dtype
    M, N, K = spec.m, spec.n, spec.k
    as_t, bt_t = f"memref<{BM}x{BK + PAD}x{dt}, {WG}>", f"memref<{BN}x{BK + PAD}x{dt}, {WG}>"
    m0, n0, A, b2, out2, res2, bias, bias_t = tile_launch(e, spec, params_sig, BM, BN, T, [("%As", as_t), ("%Bt", bt_t)])
    # Global loads: A rows of 8 k-contiguous elements, B rows of 8 n-contiguous ones.
    tid = Lane(e, "%tx")
    a_at = [a_staging(t, tid, p) for p in range(BM * BK // (T * 8))]
    a_col = _ssa(e, a_at[0][1])
    rows = [A.row(m0, _ssa(e, row)) for row, _ in a_at]
    b_at = [b_staging(t, tid, p) for p in range(BK * BN // (T * 8))]
    b_col = _ssa(e, b_at[0][1])
    b_n = e.add(n0, b_col)
    b_nok = e.cmp("ult", b_n, e.c(N))
    b_n = group_col(e, spec, b_n)
    b_rows = [_ssa(e, k) for k, _ in b_at]

    def global_loads(k0: str) -> list[str]:
        vecs = A.loads(rows, e.add(k0, a_col), 8, widen=False)
        for kk in b_rows:
            kb = e.add(k0, kk)
            vecs.append(load_vec(e, e.both(b_nok, e.cmp("ult", kb, e.c(K))), b2, f"memref<{K}x{N * spec.groups}x{dt}>",
                                  [kb, b_n], 8, dt, widen=False))
        return vecs

    wave = e.div("%tx", e.c(ins.wave))
    lane = Lane(e, e.rem("%tx", e.c(ins.wave)))
    wave_m, wave_n = Lane(e, e.div(wave, e.c(t.waves_n))), Lane(e, e.rem(wave, e.c(t.waves_n)))
    acc_t, frag_t, v8 = f"vector<{ins.acc}xf32>", f"vector<{ins.operand}x{dt}>", f"vector<8x{dt}>"
    zero = e.fresh("z")
    e.emit(f"{zero} = arith.constant dense<0.0> : {acc_t}")
    first = global_loads(e.c(0))
    accs = [e.fresh("acc") for _ in range(t.tm * t.tn)]
    staged = [e.fresh("g") for _ in first]
    res = e.fresh("res")
    carried = [f"{x} = {zero}" for x in accs] + [f"{g} = {v}" for g, v in zip(staged, first)]
    types_out = [acc_t] * len(accs) + [v8] * len(staged)
    e.open(f"{res}:{len(carried)} = scf.for %k0 = {e.c(0)} to {e.c(-(-K // BK) * BK)} step {e.c(BK)} "
           f"iter_args({', '.join(carried)}) -> ({', '.join(types_out)}) {{")
    for vec, info in zip(staged, rows):
        e.emit(f"vector.store {vec}, %As[{info['row']}, {a_col}] {{alignment = 16}} : {as_t}, {v8}")
    for vec, kk in zip(staged[len(rows):], b_rows):  # B transposed into Bt[n][k]: fragments are k-contiguous
        for j in range(8):
            s = e.fresh("s")
            e.emit(f"{s} = vector.extract {vec}[{j}] : {dt} from {v8}")
            e.emit(f"memref.store {s}, %Bt[{e.add(b_col, e.c(j))}, {kk}] : {bt_t}")
    e.emit("gpu.barrier")
    following = global_loads(e.add("%k0", e.c(BK)))
    cur = list(accs)
    align = 2 * ins.operand
    for ks in range(0, BK, ins.k):
        afr, bfr = [], []
        for i in range(t.tm):
            r, c = a_fragment(t, lane, wave_m, i, ks)
            f = e.fresh("fa")
            e.emit(f"{f} = vector.load %As[{_ssa(e, r)}, {_ssa(e, c)}] {{alignment = {align}}} : {as_t}, {frag_t}")
            afr.append(f)
        for j in range(t.tn):
            r, c = b_fragment(t, lane, wave_n, j, ks)
            f = e.fresh("fb")
            e.emit(f"{f} = vector.load %Bt[{_ssa(e, r)}, {_ssa(e, c)}] {{alignment = {align}}} : {bt_t}, {frag_t}")
            bfr.append(f)
        for i in range(t.tm):
            for j in range(t.tn):
                cur[i * t.tn + j] = matrix_product(e, ins, afr[i], bfr[j], cur[i * t.tn + j], dt)
    e.emit("gpu.barrier")
    e.emit(f"scf.yield {', '.join(cur + following)} : {', '.join(types_out)}")
    e.close()
    # Epilogue: each accumulator register is one (row, column) of the lane; rows guarded per register,
    # columns per instruction tile.
    ot = f"memref<{M}x{N * spec.groups}x{dt}>"
    cols = []
    for j in range(t.tn):
        n = e.add(n0, _ssa(e, acc_element(t, lane, wave_m, wave_n, 0, j, 0)[1]))
        cols.append((group_col(e, spec, n), e.cmp("ult", n, e.c(N))))
    for i in range(t.tm):
        for r in range(ins.acc):
            m = e.add(m0, _ssa(e, acc_element(t, lane, wave_m, wave_n, i, 0, r)[0]))
            e.open(f"scf.if {e.cmp('ult', m, e.c(M))} {{")
            for j, (n, ok) in enumerate(cols):
                e.open(f"scf.if {ok} {{")
                v = e.fresh("s")
                e.emit(f"{v} = vector.extract {res}#{i * t.tn + j}[{r}] : f32 from {acc_t}")
                v = epilogue_scalar(e, spec, v, [(bias, [n], bias_t), (res2, [m, n], ot)])
                e.emit(f"memref.store {v}, {out2}[{m}, {n}] : {ot}")
                e.close()
            e.close()
    return e.function(name, params_sig)

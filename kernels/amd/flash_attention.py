"""Flash attention on AMD matrix cores (MFMA on CDNA, WMMA on RDNA3): prim.attention in one kernel.

The algorithm is kernels/nvidia/flash_attention.py's: online softmax (FlashAttention-2), a running
maximum m, sum l and unnormalized output per query, the S x S scores never in memory. What changes is
the orientation. An AMD accumulator lays a lane's registers down one column (MFMA 32x32x8: column
l % 32, rows 8(r/4) + 4(l/32) + r%4; kernels/amd/mma.py has the tables), and so does the B operand
(column l % 32, k 4(l/32) + e). So the kernel multiplies transposed, queries as columns:

    S^T [keys x queries] = K Q^T        A = K (LDS, rows), B = Q^T (registers, loaded once)
    O^T [D x queries]   += V^T P^T      A = V^T (LDS, V stored transposed), B = P^T (registers)

A lane then holds the scores of one query (its column) for several keys. On MFMA these are exactly the
keys of its P^T operand for P V's k steps (32x32x8: registers 4 kk' .. + 3 of score tile kk / 4 are
k step kk), so P never leaves the registers. On WMMA a lane holds the even or the odd keys of 16
(rows 2r + l/16) and the B operand wants all 16: the partner lane (l xor 16) holds the others, one
shuffle per register. p_source finds, from the tables, where each operand element is.
A query's statistics (max, sum) are over its column: the lane's registers, then the lanes that hold
the same column (xor n, 2n, ... below the wave: 32 on MFMA 32x32, 16 and 32 on 16x16, 16 on WMMA).

    block (x: BQ queries, y: one of B*H heads), WAVES waves; wave w owns queries q0 + QW w .. + QW - 1,
    TQ column tiles of n
    Q^T fragments once (D / k steps per column tile; zeros past Sq)
    regs = K[0], V[0]                   16-byte global loads, zeros past Sk
    for each key tile t of BK = 64 keys (causal: tiles that start at or before the block's last query)
        regs -> Ks[BK][D + 8], Vt[D][BK + 8] (V transposed); barrier; regs = K[t + 1], V[t + 1]
        S^T = K Q^T                     BK/m x TQ tiles, D/k steps
        s = S^T scale log2(e) (+ mask log2(e)); -inf past Sk and (causal) for keys after the query
        m' = max(m, column max s), p = exp2(s - m'), alpha = exp2(m - m'), l = alpha l + sum p
        O^T = alpha O^T + V^T P^T       D/m x TQ tiles, BK/k steps
        barrier
    out[query][d] = O^T / l             l summed over the column's lanes; 0 for a fully masked query

LDS: Ks and Vt, rows 16 bytes longer than the data: 34 KB at D = 128. Numerics are checked on a model
(test_amdgpu_attention.py) that runs this kernel's tables and addresses on integer lanes with the
matrix instructions modelled from IREE's layouts; code objects are built for gfx90a/gfx942/gfx1100.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from openprim.kernels.amd.mma import (MFMA_16x16x16, MFMA_32x32x8, WMMA_16x16x16, Lane, MatrixInstr, _ssa,
                                      matrix_product)
from openprim.kernels.gpu import attention
from openprim.kernels.gpu.attention import LOG2E, AttentionEmitter, FlashSignature, HeadRows, mask_reader
from openprim.kernels.gpu.gemm import WG, load_vec

BK = 64                  # keys per tile
PAD = 8                  # elements after each LDS row (16 bytes)


@dataclass(frozen=True)
class FlashTile:
    """A block of `waves` waves, each owning `tq` column tiles of instr.n queries."""
    instr: MatrixInstr
    waves: int
    tq: int

    @property
    def per_wave(self) -> int:
        return self.tq * self.instr.n

    @property
    def bq(self) -> int:
        return self.waves * self.per_wave

    @property
    def threads(self) -> int:
        return self.waves * self.instr.wave


# Per family, the default first: 128 queries per block; on WMMA 16 per wave (with 32, Q^T's operands of
# two column tiles took 128 of wave32's 256 VGPRs at D = 128, and the kernel spilled).
TILES = {
    "mfma": {"128q_32x32x8": FlashTile(MFMA_32x32x8, 4, 1), "128q_16x16x16": FlashTile(MFMA_16x16x16, 4, 2)},
    "wmma": {"128q_16x16x16": FlashTile(WMMA_16x16x16, 8, 1)},
}


def applicable(dtype: str, d: int) -> str | None:
    """None, or why the kernel does not apply."""
    return attention.applicable(dtype, d, "matrix-core")


def shared_bytes(d: int) -> int:
    return 2 * (BK * (d + PAD) + d * (BK + PAD))


# Tables and addresses, shared by the emitter (lane: Lane) and the model in the test (integers).
def column_lanes(ins: MatrixInstr) -> tuple[int, ...]:
    """The xor offsets from a lane to the other lanes that hold the same accumulator column."""
    return tuple(x for x in (ins.n, 2 * ins.n, 4 * ins.n) if x < ins.wave)


def staging(t: FlashTile, tid, p: int, d: int):
    """(key in the tile, first of 8 head-dim columns) of thread tid's 16-byte chunk in load pass p."""
    per_row = d // 8
    return p * (t.threads // per_row) + tid // per_row, tid % per_row * 8


def q_fragment(t: FlashTile, lane, wave, j: int, ks: int):
    """(query in the block, first head-dim column) of the lane's Q^T operand, column tile j, k step ks."""
    k, col = t.instr.b(lane, 0)
    return wave * t.per_wave + t.instr.n * j + col, ks + k


def a_fragment(t: FlashTile, lane, i: int, ks: int):
    """(row, column) of the lane's A operand of row tile i at k step ks, in Ks or Vt."""
    row, k = t.instr.a(lane, 0)
    return t.instr.m * i + row, ks + k


def acc_position(t: FlashTile, lane, wave, i: int, j: int, r: int):
    """(row: key in the tile or head-dim column, query in the block) of register r of tile (i, j)."""
    row, col = t.instr.c(lane, r)
    return t.instr.m * i + row, wave * t.per_wave + t.instr.n * j + col


@lru_cache(maxsize=None)
def p_source(ins: MatrixInstr, kk: int, e: int) -> tuple[int, int, int]:
    """(i, r, x): element e of the P^T operand of P V's k step kk is score register r of row tile i, the
    lane's own where it holds that key (MFMA: always, x = 0), else lane xor x's (WMMA: x = 16)."""
    def holds(lane, i, r):
        (k, col), (row, ccol) = ins.b(lane, e), ins.c(lane, r)
        return ins.m * i + row == ins.k * kk + k and ccol == col
    for i in range(BK // ins.m):
        for r in range(ins.acc):
            for x in (0,) + column_lanes(ins):
                if all(holds(lane, i, r) or (x and holds(lane ^ x, i, r)) for lane in range(ins.wave)):
                    return i, r, x
    raise AssertionError(f"{ins}: no register holds P^T element {e} of k step {kk}")


@lru_cache(maxsize=None)
def store_run(ins: MatrixInstr) -> int:
    """Accumulator registers that hold consecutive rows of one column (stored as one vector)."""
    run = 1
    while ins.acc % (2 * run) == 0 and all(
            ins.c(lane, r + s) == (ins.c(lane, r)[0] + s, ins.c(lane, r)[1])
            for lane in range(ins.wave) for r in range(0, ins.acc, 2 * run) for s in range(2 * run)):
        run *= 2
    return run


def attention_kernel(name: str, signature: list[tuple[str, str]], scale: float, causal: bool,
                     layout: str, tile: FlashTile) -> str:
    """The kernel function: signature = [(ssa name, memref type)] of q, k, v, the mask when there is one,
    then the output, as outlining gives them; layout: base.ops.ATTENTION_LAYOUTS."""
    sig = FlashSignature.of(signature, layout, applicable)
    dt, B, H, Sq, Sk, D = sig.dtype, sig.B, sig.H, sig.Sq, sig.Sk, sig.D
    t, ins = tile, tile.instr
    BH, T = B * H, tile.threads
    e = AttentionEmitter(dt, column_lanes(ins), ins.wave)
    ks_t, vt_t = f"memref<{BK}x{D + PAD}x{dt}, {WG}>", f"memref<{D}x{BK + PAD}x{dt}, {WG}>"
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-Sq // t.bq))}, %gy = {e.c(BH)}, %gz = {e.c(1)}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(T)}, %sy = {e.c(1)}, %sz = {e.c(1)}) "
           f"workgroup(%Ks : {ks_t}, %Vt : {vt_t}) {{")
    q2, k2, v2, out2 = sig.rows(e)
    qm_t, km_t = f"memref<{BH * Sq}x{D}x{dt}>", f"memref<{BH * Sk}x{D}x{dt}>"
    # Every f32/i32 constant the loop uses is made here, outside it (they are cached, not scoped).
    neg_inf, zero_f, qk_scale = e.f(-math.inf), e.f(0.0), e.f(scale * LOG2E)
    for x in (1,) + column_lanes(ins) + (ins.wave,):
        e.i32(x)
    heads = HeadRows(e, layout, H, Sq, Sk, "%by")
    mask_value = mask_reader(e, sig.mask, H, Sq, Sk, "%by") if sig.mask else None
    wave = Lane(e, e.div("%tx", e.c(ins.wave)))
    lane = Lane(e, e.rem("%tx", e.c(ins.wave)))
    q0 = e.mul("%bx", e.c(t.bq))

    # Q^T operands, once: [j][ks], zeros past Sq.
    frag_t, acc_t = f"vector<{ins.operand}x{dt}>", f"vector<{ins.acc}xf32>"
    q_frags = []
    for j in range(t.tq):
        row = []
        for ks in range(0, D, ins.k):
            query, col = q_fragment(t, lane, wave, j, ks)
            query = e.add(q0, _ssa(e, query))
            row.append(load_vec(e, e.cmp("ult", query, e.c(Sq)), q2, qm_t, [heads.q(query), _ssa(e, col)],
                                ins.operand, dt, widen=False))
        q_frags.append(row)

    # Global loads of one key tile of K and V: 16-byte chunks, zeros past Sk.
    tid = Lane(e, "%tx")
    passes = [staging(t, tid, p, D) for p in range(BK * D // 8 // T)]
    chunk_col = _ssa(e, passes[0][1])
    chunk_keys = [_ssa(e, key) for key, _ in passes]
    v8 = f"vector<8x{dt}>"

    def global_loads(key0: str) -> list[str]:
        vecs = []
        for src in (k2, v2):
            for r in chunk_keys:
                key = e.add(key0, r)
                vecs.append(load_vec(e, e.cmp("ult", key, e.c(Sk)), src, km_t, [heads.k(key), chunk_col], 8, dt,
                                     widen=False))
        return vecs

    tiles = e.c(-(-Sk // BK))
    if causal:   # tile u holds keys 64 u ..: needed while 64 u <= the block's last query
        tiles = e.op("arith.minui", tiles, e.add(e.div(e.add(q0, e.c(t.bq - 1)), e.c(BK)), e.c(1)))
    first = global_loads(e.c(0))
    zero_acc = e.fresh("z")
    e.emit(f"{zero_acc} = arith.constant dense<0.0> : {acc_t}")
    o_tiles = D // ins.m
    state = ([("m", neg_inf, "f32")] * t.tq + [("l", zero_f, "f32")] * t.tq
             + [("o", zero_acc, acc_t)] * (o_tiles * t.tq) + [("g", g, v8) for g in first])
    names = [e.fresh(h) for h, _, _ in state]
    types = [ty for _, _, ty in state]
    res = e.fresh("res")
    e.open(f"{res}:{len(state)} = scf.for %t = {e.c(0)} to {tiles} step {e.c(1)} "
           f"iter_args({', '.join(f'{n} = {init}' for n, (_, init, _) in zip(names, state))}) -> "
           f"({', '.join(types)}) {{")
    m_old, l_old = names[:t.tq], names[t.tq:2 * t.tq]
    o = [names[2 * t.tq + n * t.tq: 2 * t.tq + (n + 1) * t.tq] for n in range(o_tiles)]   # o[i][j]
    staged = names[2 * t.tq + o_tiles * t.tq:]
    key0 = e.mul("%t", e.c(BK))
    for vec, r in zip(staged, chunk_keys):
        e.emit(f"vector.store {vec}, %Ks[{r}, {chunk_col}] {{alignment = 16}} : {ks_t}, {v8}")
    for vec, r in zip(staged[len(chunk_keys):], chunk_keys):      # V transposed: Vt[d][key]
        for c in range(8):
            x = e.fresh("x")
            e.emit(f"{x} = vector.extract {vec}[{c}] : {dt} from {v8}")
            e.emit(f"memref.store {x}, %Vt[{e.add(chunk_col, e.c(c))}, {r}] : {vt_t}")
    e.emit("gpu.barrier")
    following = global_loads(e.add(key0, e.c(BK)))
    align = min(16, 2 * ins.operand)          # LDS rows are 16-byte aligned

    def operand(buf: str, buf_t: str, i: int, ks: int) -> str:
        r, c = a_fragment(t, lane, i, ks)
        f = e.fresh("fa")
        e.emit(f"{f} = vector.load {buf}[{_ssa(e, r)}, {_ssa(e, c)}] {{alignment = {align}}} : {buf_t}, {frag_t}")
        return f

    # S^T = K Q^T, then logits in the log2 domain: s[i][j][r].
    s = [[zero_acc] * t.tq for _ in range(BK // ins.m)]
    for ks in range(0, D, ins.k):
        for i in range(BK // ins.m):
            a = operand("%Ks", ks_t, i, ks)
            for j in range(t.tq):
                s[i][j] = matrix_product(e, ins, a, q_frags[j][ks // ins.k], s[i][j], dt)
    ragged = Sk % BK != 0
    for i in range(BK // ins.m):
        for j in range(t.tq):
            acc, s[i][j] = s[i][j], []
            for r in range(ins.acc):
                key, query = acc_position(t, lane, wave, i, j, r)
                key, query = e.add(key0, _ssa(e, key)), e.add(q0, _ssa(e, query))
                x = e.fresh("x")
                e.emit(f"{x} = vector.extract {acc}[{r}] : f32 from {acc_t}")
                x = e.fop("arith.mulf", x, qk_scale)
                if mask_value:
                    x = e.fop("arith.addf", x, mask_value(query, key))
                cut = [e.cmp("uge", key, e.c(Sk))] if ragged else []
                if causal:
                    cut.append(e.cmp("ugt", key, query))
                if cut:
                    x = e.select(cut[0] if len(cut) == 1 else e.op("arith.ori", *cut, "i1"), neg_inf, x)
                s[i][j].append(x)

    # Online softmax per column tile j (the lane's query there); l stays the lane's partial sum.
    m_new, l_new = [], []
    for j in range(t.tq):
        vals = [x for i in range(BK // ins.m) for x in s[i][j]]
        mx = vals[0]
        for x in vals[1:]:
            mx = e.fop("arith.maximumf", mx, x)
        mn = e.fop("arith.maximumf", m_old[j], e.row_reduce("arith.maximumf", mx))
        base = e.softmax_base(mn)
        for i in range(BK // ins.m):
            s[i][j] = [e.fop("math.exp2", e.fop("arith.subf", x, base)) for x in s[i][j]]
        alpha = e.fop("math.exp2", e.fop("arith.subf", m_old[j], base))
        total = e.fop("arith.mulf", l_old[j], alpha)
        for i in range(BK // ins.m):
            for x in s[i][j]:
                total = e.fop("arith.addf", total, x)
        m_new.append(mn)
        l_new.append(total)
        scale_v = e.fresh("al")
        e.emit(f"{scale_v} = vector.broadcast {alpha} : f32 to {acc_t}")
        for i in range(o_tiles):
            n = e.fresh("o")
            e.emit(f"{n} = arith.mulf {o[i][j]}, {scale_v} : {acc_t}")
            o[i][j] = n

    # O^T += V^T P^T: P^T's operand of k step kk, element by element where p_source puts it.
    def narrow(x: str) -> str:
        n = e.fresh("h")
        e.emit(f"{n} = arith.truncf {x} : f32 to {dt}")
        return n

    partners = {}
    for kk in range(BK // ins.k):
        p_frags = []
        for j in range(t.tq):
            elems = []
            for el in range(ins.operand):
                i, r, x = p_source(ins, kk, el)
                value = s[i][j][r]
                if x:
                    if (i, j, r) not in partners:
                        partners[i, j, r] = e.shuffle_xor(value, x)
                    row = _ssa(e, ins.c(lane, r)[0] + ins.m * i)
                    own = e.cmp("eq", row, _ssa(e, ins.b(lane, el)[0] + ins.k * kk))
                    value = e.select(own, value, partners[i, j, r])
                elems.append(narrow(value))
            f = e.fresh("fp")
            e.emit(f"{f} = vector.from_elements {', '.join(elems)} : {frag_t}")
            p_frags.append(f)
        for i in range(o_tiles):
            a = operand("%Vt", vt_t, i, ins.k * kk)
            for j in range(t.tq):
                o[i][j] = matrix_product(e, ins, a, p_frags[j], o[i][j], dt)
    e.emit("gpu.barrier")
    flat = m_new + l_new + [o[i][j] for i in range(o_tiles) for j in range(t.tq)] + following
    e.emit(f"scf.yield {', '.join(flat)} : {', '.join(types)}")
    e.close()

    # out = O / l: the lane's column is one query; runs of registers are consecutive head-dim columns.
    ot = f"memref<{BH * Sq}x{D}x{dt}>"
    run = store_run(ins)
    for j in range(t.tq):
        inv = e.inverse_row_sum(f"{res}#{t.tq + j}")
        query = e.add(q0, _ssa(e, acc_position(t, lane, wave, 0, j, 0)[1]))
        e.open(f"scf.if {e.cmp('ult', query, e.c(Sq))} {{")
        row = heads.q(query)
        for i in range(o_tiles):
            acc = f"{res}#{2 * t.tq + i * t.tq + j}"
            for r0 in range(0, ins.acc, run):
                vals = []
                for r in range(r0, r0 + run):
                    x = e.fresh("x")
                    e.emit(f"{x} = vector.extract {acc}[{r}] : f32 from {acc_t}")
                    vals.append(narrow(e.fop("arith.mulf", x, inv)))
                col = _ssa(e, acc_position(t, lane, wave, i, j, r0)[0])
                vec = e.fresh("st")
                e.emit(f"{vec} = vector.from_elements {', '.join(vals)} : vector<{run}x{dt}>")
                e.emit(f"vector.store {vec}, {out2}[{row}, {col}] {{alignment = {2 * run}}} : {ot}, vector<{run}x{dt}>")
        e.close()
    return e.function(name, signature)

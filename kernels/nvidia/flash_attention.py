"""Flash attention for NVIDIA tensor cores (sm_80+, mma.sync m16n8k16): prim.attention in one kernel.

    out = softmax(scale * q k^T + mask, causal: -inf where key j > query i) v      q, out: [B, H, Sq, D]
                                                                                    k, v:   [B, H, Sk, D]
or, in layout BSHD, q and out [B, Sq, H, D] and k, v [B, Sk, H, D]: a row of head h at position s is then
row (b Sq + s) H + h of the [B Sq H, D] matrix instead of (b H + h) Sq + s, so the heads of a projection
are read and written where they are, with no transposes around the kernel.
The S x S scores never reach memory: each block walks the key tiles of its query rows once, keeping a
running row maximum m, row sum l and unnormalized output O in registers (online softmax, FlashAttention-2):

    block (x: 64 query rows, y: one of B*H heads), 4 warps; warp w owns rows q0 + 16 w .. + 15
    Q fragments loaded once into registers (the A operand of S = Q K^T, D / 16 k steps)
    for each key tile t of 64 keys (causal: only tiles that start at or before the block's last row)
        Ks <- K[t]   (cp.async, issued while the previous tile's P V ran; see below)
        S[16 x 64] = Q K^T                8 n tiles x D/16 mma.sync, K fragments by ldmatrix from Ks
        s = S * scale * log2(e) (+ mask * log2(e)); -inf past Sk and (causal) above the diagonal
        m' = max(m, rowmax s)             rowmax over the thread's 16 values, then over the quad (shuffles)
        p = exp2(s - m'), alpha = exp2(m - m'), l = alpha l + sum p, O = alpha O
        O += P V                          P from S's accumulators, V fragments by ldmatrix.trans from Vs
    out = O / quad-sum(l), 0 for a row with no unmasked key (m' stays -inf: subtracting 0 instead keeps
    exp2 at 0, never NaN)

Fragment layouts (lane = 4 g + c): an m16n8k16 accumulator holds rows g, g + 8 and columns 2c, 2c + 1;
the A operand holds the same (row, column pair) for columns k and k + 8. So the accumulators of score n
tiles 2 kk and 2 kk + 1, rounded to f16/bf16 in pairs, are exactly the A fragment of keys 16 kk .. + 15
of P V: P never leaves registers. The row statistics of a thread are those of rows g and g + 8.

Shared memory: one K and one V tile, [64][D + 8] each (rows an odd number of 16-byte chunks: ldmatrix's
8 rows of a phase hit 32 different banks), 10 KB at D = 32, 18 KB at D = 64 and 34 KB at D = 128. The
copies overlap the other product: V[t] is copied while S = Q K[t]^T runs, K[t + 1] while O += P V[t] runs:

    wait K[t], barrier (everyone is also done with Vs)   -> copy V[t]    -> S, softmax
    wait V[t], barrier (everyone is also done with Ks)   -> copy K[t+1]  -> P V

Keys past Sk are copied as zeros (cp.async with 0 source bytes, address clamped), and masked to -inf.
Rows past Sq compute on zero Q rows and are not stored. The additive mask (in the data's type; any numpy
broadcast of [B, H, Sq, Sk]) is read one element per score, widened to f32, its indices clamped into
range (the scores they would be wrong for are masked or not stored).
"""
from __future__ import annotations

import math

from openprim.kernels.gpu import attention
from openprim.kernels.gpu.attention import LOG2E, AttentionEmitter, FlashSignature, HeadRows, mask_reader
from openprim.kernels.gpu.gemm import WG, load_vec

BLOCK_Q = 64            # query rows per block: 4 warps x 16 rows
BLOCK_K = 64            # keys per tile
WARPS = BLOCK_Q // 16
PAD = 8                 # elements after each shared row (16 bytes)
ACC_T = "!llvm.struct<(f32, f32, f32, f32)>"
# Head dims: whole k steps of 16, and a row's D / 8 16-byte chunks dividing the block's 128 threads (the K/V
# tile copy gives each thread the same column in every round: head dim 80 read wrong rows on the H100); each
# shared row is then 16 bytes times an odd number, so ldmatrix's 8 rows of a phase hit 8 different 16-byte
# bank groups. Up to 128: two tiles of 64 x 136 elements are 34 KB of the 48 KB static shared memory.
HEAD_DIMS = (16, 32, 64, 128)


def applicable(dtype: str, d: int) -> str | None:
    """None, or why the kernel does not apply."""
    return attention.applicable(dtype, d, "mma.sync", HEAD_DIMS)


def shared_bytes(d: int) -> int:
    return 2 * BLOCK_K * (d + PAD) * 2


class _Kernel(AttentionEmitter):
    """AttentionEmitter with the mma.sync helpers of the kernel; a row's values are on the 4 lanes of a
    quad (lanes 4g .. 4g + 3)."""

    def __init__(self, dtype: str):
        super().__init__(dtype, (1, 2), 32)

    def opaque(self, value: str) -> str:
        """An index that LLVM cannot see through (a volatile move), for a value it must not specialize on."""
        wide, moved, n = self.fresh("op"), self.fresh("op"), self.fresh("op")
        self.emit(f"{wide} = arith.index_cast {value} : index to i64")
        self.emit(f'{moved} = llvm.inline_asm has_side_effects asm_dialect = att "mov.b64 $0, $1;", "=l,l" {wide} '
                  f": (i64) -> i64")
        self.emit(f"{n} = arith.index_cast {moved} : i64 to index")
        return n

    def reg(self, pair: str) -> str:
        """A vector<2 x dt> as an mma.sync operand register: as it is (f16), as i32 (bf16)."""
        if self.dt == "f16":
            return pair
        cast, r = self.fresh("r"), self.fresh("r")
        self.emit(f"{cast} = vector.bitcast {pair} : vector<2xbf16> to vector<1xi32>")
        self.emit(f"{r} = vector.extract {cast}[0] : i32 from vector<1xi32>")
        return r

    def frag_regs(self, frag: str, count: int) -> list[str]:
        """The operand registers of an ldmatrix result vector<count x 2 x dt>."""
        regs = []
        for i in range(count):
            pair = self.fresh("r")
            self.emit(f"{pair} = vector.extract {frag}[{i}] : vector<2x{self.dt}> from vector<{count}x2x{self.dt}>")
            regs.append(self.reg(pair))
        return regs

    def mma(self, a: list[str], b: list[str], c: list[str]) -> list[str]:
        """d = a b + c on one m16n8k16 tile; c and d are its 4 f32 accumulators."""
        reg_t = "vector<2xf16>" if self.dt == "f16" else "i32"
        d = self.fresh("d")
        self.emit(f"{d} = nvvm.mma.sync A[{', '.join(a)}] B[{', '.join(b)}] C[{', '.join(c)}] "
                  f"{{layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, "
                  f"multiplicandAPtxType = #nvvm.mma_type<{self.dt}>, multiplicandBPtxType = #nvvm.mma_type<{self.dt}>, "
                  f"shape = #nvvm.shape<m = 16, n = 8, k = 16>}} : ({reg_t}, {reg_t}, f32) -> {ACC_T}")
        out = []
        for i in range(4):
            s = self.fresh("acc")
            self.emit(f"{s} = llvm.extractvalue {d}[{i}] : {ACC_T}")
            out.append(s)
        return out


def attention_kernel(name: str, signature: list[tuple[str, str]], scale: float, causal: bool,
                     layout: str = "BHSD") -> str:
    """The kernel function: signature = [(ssa name, memref type)] of q, k, v, the mask when there is one,
    then the output, as outlining gives them; layout: base.ops.ATTENTION_LAYOUTS."""
    sig = FlashSignature.of(signature, layout, applicable)
    dt, B, H, Sq, Sk, D = sig.dtype, sig.B, sig.H, sig.Sq, sig.Sk, sig.D
    BH = B * H
    e = _Kernel(dt)
    row_t = f"memref<{BLOCK_K}x{D + PAD}x{dt}, {WG}>"
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-Sq // BLOCK_Q))}, %gy = {e.c(BH)}, %gz = {e.c(1)}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(32 * WARPS)}, %sy = {e.c(1)}, %sz = {e.c(1)}) "
           f"workgroup(%Ks : {row_t}, %Vs : {row_t}) {{")
    q2, k2, v2, out2 = sig.rows(e)
    qm_t, km_t = f"memref<{BH * Sq}x{D}x{dt}>", f"memref<{BH * Sk}x{D}x{dt}>"
    # Every f32/i32 constant the loop uses is made here, outside it (they are cached, not scoped).
    neg_inf, zero_f, qk_scale = e.f(-math.inf), e.f(0.0), e.f(scale * LOG2E)
    for lanes in (1, 2, 32):
        e.i32(lanes)
    warp, lane = e.div("%tx", e.c(32)), e.rem("%tx", e.c(32))
    g, c2 = e.div(lane, e.c(4)), e.mul(e.rem(lane, e.c(4)), e.c(2))
    rows = [e.add(e.add(e.mul("%bx", e.c(BLOCK_Q)), e.mul(warp, e.c(16))), g)]
    rows.append(e.add(rows[0], e.c(8)))                       # this thread's query rows: g and g + 8
    row_ok = [e.cmp("ult", r, e.c(Sq)) for r in rows]
    heads = HeadRows(e, layout, H, Sq, Sk, "%by")

    # Q as A fragments, once: [kk][0..3] = (row g, d 16kk + c2), (g + 8, same), (g, + 8), (g + 8, + 8).
    qa = [[e.reg(load_vec(e, row_ok[h], q2, qm_t, [heads.q(rows[h]), e.add(e.c(16 * kk + 8 * half), c2)],
                          2, dt, widen=False))
           for half in (0, 1) for h in (0, 1)] for kk in range(D // 16)]

    mask_value = mask_reader(e, sig.mask, H, Sq, Sk, "%by") if sig.mask else None

    # cp.async of one 64-key tile of K or V: 16-byte chunks, D / 16 per thread, zeros past Sk.
    per_row = D // 8
    chunk_row = e.div("%tx", e.c(per_row))
    chunk_col = e.mul(e.rem("%tx", e.c(per_row)), e.c(8))

    def copy_tile(src: str, dst: str, key0: str) -> str:
        tokens = []
        for p in range(BLOCK_K * D // 8 // (32 * WARPS)):
            r = e.add(chunk_row, e.c(p * (32 * WARPS) // per_row))
            key = e.add(key0, r)
            ok = e.cmp("ult", key, e.c(Sk))
            src_row = e.select(ok, heads.k(key), e.c(0), "index")
            col = e.select(ok, chunk_col, e.c(0), "index")
            t = e.fresh("cp")
            e.emit(f"{t} = nvgpu.device_async_copy {src}[{src_row}, {col}], {dst}[{r}, {chunk_col}], 8, "
                   f"{e.select(ok, e.c(8), e.c(0), 'index')} {{bypassL1}} : {km_t} to {row_t}")
            tokens.append(t)
        group = e.fresh("grp")
        e.emit(f"{group} = nvgpu.device_async_create_group {', '.join(tokens)}")
        return group

    tiles = e.c(-(-Sk // BLOCK_K))
    if causal:   # tile t holds keys 64 t ..: needed while 64 t <= the block's last row, i.e. t <= bx
        tiles = e.op("arith.minui", tiles, e.add("%bx", e.c(1)))
    first = copy_tile(k2, "%Ks", e.c(0))
    # cp.async.wait_group counts the thread's pending groups whatever token it is given: every wait names
    # the prologue's group (a token carried through the loop would not lower to NVVM).
    n_o = D // 8
    state = [("m", neg_inf), ("m", neg_inf), ("l", zero_f), ("l", zero_f)] + [("o", zero_f)] * (4 * n_o)
    names = [e.fresh(h) for h, _ in state]
    res = e.fresh("res")
    e.open(f"{res}:{len(state)} = scf.for %t = {e.c(0)} to {tiles} step {e.c(1)} "
           f"iter_args({', '.join(f'{n} = {init}' for n, (_, init) in zip(names, state))}) -> "
           f"({', '.join(['f32'] * len(state))}) {{")
    m_old, l_old, o = names[0:2], names[2:4], [names[4 + 4 * n: 8 + 4 * n] for n in range(n_o)]
    key0 = e.mul("%t", e.c(BLOCK_K))
    e.emit(f"nvgpu.device_async_wait {first} {{numGroups = 0 : i32}}")
    e.emit("gpu.barrier")
    copy_tile(v2, "%Vs", key0)

    # S = Q K^T: n tile j is keys 8j .. 8j + 7; a K fragment is ldmatrix.x2 of rows 8j + lane % 8 at
    # d 16kk (lanes 0-7) and 16kk + 8 (lanes 8-15).
    k_row = e.rem(lane, e.c(8))
    k_col = e.mul(e.rem(e.div(lane, e.c(8)), e.c(2)), e.c(8))
    s = []
    for j in range(BLOCK_K // 8):
        acc = [zero_f] * 4
        for kk in range(D // 16):
            f = e.fresh("fk")
            e.emit(f"{f} = nvgpu.ldmatrix %Ks[{e.add(e.c(8 * j), k_row)}, {e.add(e.c(16 * kk), k_col)}] "
                   f"{{numTiles = 2 : i32, transpose = false}} : {row_t} -> vector<2x2x{dt}>")
            acc = e.mma(qa[kk], e.frag_regs(f, 2), acc)
        s.append(acc)

    # Logits in the log2 domain; accumulator i of n tile j is row g + 8 (i // 2), key 8j + c2 + i % 2.
    for j in range(BLOCK_K // 8):
        for i in range(4):
            key = e.add(key0, e.add(e.c(8 * j + i % 2), c2))
            x = e.fop("arith.mulf", s[j][i], qk_scale)
            if mask_value:
                x = e.fop("arith.addf", x, mask_value(rows[i // 2], key))
            out_of_range = e.cmp("uge", key, e.c(Sk))
            if causal:
                out_of_range = e.op("arith.ori", out_of_range, e.cmp("ugt", key, rows[i // 2]), "i1")
            s[j][i] = e.select(out_of_range, neg_inf, x)

    # Online softmax, per row h (0: g, 1: g + 8); l stays the thread's partial sum until the end.
    m_new, alpha, l_new = [], [], []
    for h in (0, 1):
        vals = [s[j][2 * h + c] for j in range(BLOCK_K // 8) for c in (0, 1)]
        mx = vals[0]
        for x in vals[1:]:
            mx = e.fop("arith.maximumf", mx, x)
        mn = e.fop("arith.maximumf", m_old[h], e.row_reduce("arith.maximumf", mx))
        base = e.softmax_base(mn)
        for j in range(BLOCK_K // 8):
            for c in (0, 1):
                s[j][2 * h + c] = e.fop("math.exp2", e.fop("arith.subf", s[j][2 * h + c], base))
        a = e.fop("math.exp2", e.fop("arith.subf", m_old[h], base))
        total = e.fop("arith.mulf", l_old[h], a)
        for j in range(BLOCK_K // 8):
            for c in (0, 1):
                total = e.fop("arith.addf", total, s[j][2 * h + c])
        m_new.append(mn)
        alpha.append(a)
        l_new.append(total)
    o = [[e.fop("arith.mulf", o[n][i], alpha[i // 2]) for i in range(4)] for n in range(n_o)]

    e.emit(f"nvgpu.device_async_wait {first} {{numGroups = 0 : i32}}")
    e.emit("gpu.barrier")
    copy_tile(k2, "%Ks", e.add(key0, e.c(BLOCK_K)))

    # O += P V: keys 16kk .. + 15 are score n tiles 2kk, 2kk + 1; V fragments by ldmatrix.x2.trans of
    # rows 16kk + lane % 16 at d 8n.
    def pack(x0: str, x1: str) -> str:
        t0, t1, pair = e.fresh("h"), e.fresh("h"), e.fresh("pp")
        e.emit(f"{t0} = arith.truncf {x0} : f32 to {dt}")
        e.emit(f"{t1} = arith.truncf {x1} : f32 to {dt}")
        e.emit(f"{pair} = vector.from_elements {t0}, {t1} : vector<2x{dt}>")
        return e.reg(pair)

    v_row = e.rem(lane, e.c(16))
    for kk in range(BLOCK_K // 16):
        lo, hi = s[2 * kk], s[2 * kk + 1]
        pa = [pack(lo[0], lo[1]), pack(lo[2], lo[3]), pack(hi[0], hi[1]), pack(hi[2], hi[3])]
        for n in range(n_o):
            f = e.fresh("fv")
            e.emit(f"{f} = nvgpu.ldmatrix %Vs[{e.add(e.c(16 * kk), v_row)}, {e.c(8 * n)}] "
                   f"{{numTiles = 2 : i32, transpose = true}} : {row_t} -> vector<2x2x{dt}>")
            o[n] = e.mma(pa, e.frag_regs(f, 2), o[n])
    flat = m_new + l_new + [x for acc in o for x in acc]
    e.emit(f"scf.yield {', '.join(flat)} : {', '.join(['f32'] * len(flat))}")
    e.close()
    e.emit(f"nvgpu.device_async_wait {first} {{numGroups = 0 : i32}}")   # the last (unused) K copy

    # out = O / l; a row whose every key was masked has l = 0 and gets 0.
    ot = f"memref<{BH * Sq}x{D}x{dt}>"
    for h in (0, 1):
        inv = e.inverse_row_sum(f"{res}#{2 + h}")
        e.open(f"scf.if {row_ok[h]} {{")
        for n in range(n_o):
            vals = [e.fop("arith.mulf", f"{res}#{4 + 4 * n + 2 * h + c}", inv) for c in (0, 1)]
            pair = e.fresh("st")
            e.emit(f"{pair} = vector.from_elements {', '.join(vals)} : vector<2xf32>")
            narrow = e.fresh("st")
            e.emit(f"{narrow} = arith.truncf {pair} : vector<2xf32> to vector<2x{dt}>")
            e.emit(f"vector.store {narrow}, {out2}[{heads.q(rows[h])}, {e.add(e.c(8 * n), c2)}] "
                   f"{{alignment = 4}} : {ot}, vector<2x{dt}>")
        e.close()
    return e.function(name, signature)

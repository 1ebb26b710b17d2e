"""Attention of one query row per head over a long key cache on GPUs (a decode step): flash-decoding.

    out[b, h] = softmax(scale * q[b, h] k[b, h]^T + mask[.., 0, :]) v[b, h]      q, out: one row; k, v: Sk rows

The flash kernels (kernels/nvidia/flash_attention*.py, kernels/amd/flash_attention.py) give a block 64 or
128 query rows of one head: with one query row, a block per head (GPT-2 at batch 1: 12 blocks on 132 SMs)
walks every key of the cache alone and multiplies 63 or 127 zero rows on the matrix cores. Here the keys
of a head are split across blocks too, and a key's dot product is spread over the lanes that read its row:

    grid (S key splits, B*H heads), 128 threads: KG = 128 / LK key groups of LK = D / 8 lanes,
    lane li of a group holding dims 8 li .. 8 li + 7 (16-byte vectors of q, k and v)
        q8 = q[head, 8 li: +8] * scale * log2(e)                    (once)
        for each step, U keys j of group g (j = start + g + (step U + u) KG, loads first, U in flight):
            s = sum over the group's lanes of q8 . k[j, 8 li: +8]   (xor shuffles within the group)
                + mask[.., 0, j] * log2(e); -inf past the split's end or Sk
            m' = max(m, s); a = exp2(m - m'); p = exp2(s - m'); l = a l + p; o8 = a o8 + p v[j, 8 li: +8]
        the KG groups' (m, l, o) combined through shared memory (one barrier): M = max m, weights exp2(m - M)
        S = 1: out[head, d] = O[d] / L (0 where every key was masked), a thread per dim
        S > 1: part[head, split] = (M, L, O[0 .. D)) in f32 scratch; a second launch, a thread per
               (head, dim), combines the splits the same way and writes out

A row with no unmasked key so far (m' = -inf) subtracts 0 instead of m', so exp2 gives 0, never NaN, as
in the flash kernels. The splits give the grid about two blocks per multiprocessor, each split at least
one step (U KG keys). f32 arithmetic for f16 and bf16 data; head dims 64 and 128; layouts BHSD and BSHD.
"""
from __future__ import annotations

import math

from openprim.kernels.gpu.attention import LOG2E, AttentionEmitter, FlashSignature, HeadRows, mask_reader
from openprim.kernels.gpu.gemm import WG, collapse_at

THREADS = 128
UNROLL = 4                 # keys each group loads per step (2 U loads of 16 bytes in flight per lane)
VEC = 8                    # dims a lane holds: 16 bytes of f16/bf16
HEAD_DIMS = (64, 128)
DTYPES = ("f16", "bf16")


def applicable(dtype: str, sq: int, d: int, causal: bool) -> str | None:
    if dtype not in DTYPES:
        return f"{dtype}: the decode attention kernel takes f16 or bf16"
    if d not in HEAD_DIMS:
        return f"head dim {d}: the decode attention kernel takes {', '.join(map(str, HEAD_DIMS))}"
    if sq != 1:
        return f"{sq} query rows (takes one: a decode step's)"
    if causal:
        return "causal with one query row sees only the first key (a decode step masks the cache instead)"
    return None


def key_groups(d: int) -> int:
    return THREADS // (d // VEC)


def splits(heads: int, sk: int, d: int, units: int) -> int:
    """Key splits: about two blocks per multiprocessor, no split shorter than one step of U KG keys."""
    most = max(1, -(-sk // (UNROLL * key_groups(d))))
    return max(1, min(most, -(-2 * units // heads)))


def decode_attention_kernel(name: str, signature: list[tuple[str, str]], scale: float, layout: str,
                            units: int) -> str:
    sig = FlashSignature.of(signature, layout, lambda dt, d: None)
    B, H, Sk, D, dt = sig.B, sig.H, sig.Sk, sig.D, sig.dtype
    why = applicable(dt, sig.Sq, D, False)
    if why:
        raise ValueError(why)
    BH, LK = B * H, D // VEC
    KG, S = key_groups(D), splits(B * H, Sk, D, units)
    span = -(-Sk // S)
    steps = -(-span // (UNROLL * KG))
    vt, ft = f"vector<{VEC}x{dt}>", f"vector<{VEC}xf32>"
    red_t = f"memref<{KG * (D + 2)}xf32, {WG}>"
    rows_t = {r: f"memref<{BH * n}x{D}x{dt}>" for r, n in (("q", 1), ("k", Sk))}
    part_t = f"memref<{BH * S}x{D + 2}xf32>"
    # lanes of a key group are LK consecutive lanes: xor offsets below LK stay inside it
    e = AttentionEmitter(dt, tuple(1 << i for i in range(int(math.log2(LK)))), 32)
    q, k, v, out = (collapse_at(e, name_, ty, [3])[0] for name_, ty in (sig.q, sig.k, sig.v, sig.out))
    if S > 1:
        e.emit(f"%part = memref.alloc() {{alignment = 64 : i64}} : {part_t}")
    one = e.c(1)
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(S)}, %gy = {e.c(BH)}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(THREADS)}, %sy = {one}, %sz = {one}) "
           f"workgroup(%red : {red_t}) {{")
    neg_inf, zero_f = e.f(-math.inf), e.f(0.0)
    rows = HeadRows(e, layout, H, 1, Sk, "%by")
    li, g = e.rem("%tx", e.c(LK)), e.div("%tx", e.c(LK))
    dim = e.mul(li, e.c(VEC))

    def load(memref: str, mtype: str, row: str) -> str:
        raw = e.fresh("l")
        e.emit(f"{raw} = vector.load {memref}[{row}, {dim}] {{alignment = 16}} : {mtype}, {vt}")
        wide = e.fresh("w")
        e.emit(f"{wide} = arith.extf {raw} : {vt} to {ft}")
        return wide

    def splat(x: str) -> str:
        n = e.fresh("b")
        e.emit(f"{n} = vector.broadcast {x} : f32 to {ft}")
        return n

    q8 = e.fresh("q")
    e.emit(f"{q8} = arith.mulf {load(q, rows_t['q'], rows.q(e.c(0)))}, {splat(e.f(scale * LOG2E))} : {ft}")
    mask = mask_reader(e, sig.mask, H, 1, Sk, "%by") if sig.mask else None
    start = e.mul("%bx", e.c(span))
    end = e.op("arith.minui", e.add(start, e.c(span)), e.c(Sk))
    zero_v = e.fresh("z")
    e.emit(f"{zero_v} = arith.constant dense<0.0> : {ft}")
    m, l, o, step = e.fresh("m"), e.fresh("l"), e.fresh("o"), e.fresh("j")
    res = e.fresh("st")
    e.open(f"{res}:3 = scf.for {step} = {e.c(0)} to {e.c(steps)} step {one} iter_args({m} = {neg_inf}, "
           f"{l} = {zero_f}, {o} = {zero_v}) -> (f32, f32, {ft}) {{")
    first = e.add(start, e.add(g, e.mul(step, e.c(UNROLL * KG))))
    keys, loaded = [], []
    for u in range(UNROLL):
        j = e.add(first, e.c(u * KG))
        row = rows.k(e.op("arith.minui", j, e.c(Sk - 1)))
        keys.append(j)
        loaded.append((load(k, rows_t["k"], row), load(v, rows_t["k"], row)))
    for j, (kv, vv) in zip(keys, loaded):
        prod = e.fresh("p")
        e.emit(f"{prod} = arith.mulf {q8}, {kv} : {ft}")
        part = e.fresh("d")
        e.emit(f"{part} = vector.reduction <add>, {prod} : {ft} into f32")
        s = e.row_reduce("arith.addf", part)
        if mask:
            s = e.fop("arith.addf", s, mask(e.c(0), e.op("arith.minui", j, e.c(Sk - 1))))
        s = e.select(e.cmp("ult", j, end), s, neg_inf)
        m_new = e.fop("arith.maximumf", m, s)
        base = e.softmax_base(m_new)
        alpha = e.fop("math.exp2", e.fop("arith.subf", m, base))
        p = e.fop("math.exp2", e.fop("arith.subf", s, base))
        l = e.fop("arith.addf", e.fop("arith.mulf", l, alpha), p)
        o_new = e.fresh("o")
        e.emit(f"{o_new} = arith.mulf {o}, {splat(alpha)} : {ft}")
        o = e.fresh("o")
        e.emit(f"{o} = vector.fma {splat(p)}, {vv}, {o_new} : {ft}")
        m = m_new
    e.emit(f"scf.yield {m}, {l}, {o} : f32, f32, {ft}")
    e.close()
    m, l, o = f"{res}#0", f"{res}#1", f"{res}#2"

    # the groups' states in shared memory: [g][D] partial outputs, then KG maxima, then KG sums
    at = e.add(e.mul(g, e.c(D)), dim)
    e.emit(f"vector.store {o}, %red[{at}] : {red_t}, {ft}")
    e.open(f"scf.if {e.cmp('eq', li, e.c(0))} {{")
    e.emit(f"memref.store {m}, %red[{e.add(g, e.c(KG * D))}] : {red_t}")
    e.emit(f"memref.store {l}, %red[{e.add(g, e.c(KG * D + KG))}] : {red_t}")
    e.close()
    e.emit("gpu.barrier")

    def combine(read_m, read_l, read_o, count: int) -> tuple[str, str, str]:
        """(M, L, O) of `count` states read by read_*(i): M the largest max, L and O their sums weighted
        by exp2(m_i - M) (a state with no key, m_i = -inf, weighs 0)."""
        ms = [read_m(i) for i in range(count)]
        top = ms[0]
        for x in ms[1:]:
            top = e.fop("arith.maximumf", top, x)
        base = e.softmax_base(top)
        total_l, total_o = zero_f, zero_f
        for i, mi in enumerate(ms):
            w = e.fop("math.exp2", e.fop("arith.subf", mi, base))
            total_l = e.fop("arith.addf", total_l, e.fop("arith.mulf", read_l(i), w))
            total_o = e.fop("arith.addf", total_o, e.fop("arith.mulf", read_o(i), w))
        return top, total_l, total_o

    def shared(index: str) -> str:
        x = e.fresh("r")
        e.emit(f"{x} = memref.load %red[{index}] : {red_t}")
        return x

    def store_out(head: str, d: str, total_l: str, total_o: str) -> None:
        positive = e.fresh("pos")
        e.emit(f"{positive} = arith.cmpf ogt, {total_l}, {zero_f} : f32")
        y = e.select(positive, e.fop("arith.divf", total_o, total_l), zero_f)
        e.emit(f"memref.store {e.from_f32(y, dt)}, {out}[{HeadRows(e, layout, H, 1, Sk, head).q(e.c(0))}, {d}] "
               f": {rows_t['q']}")

    e.open(f"scf.if {e.cmp('ult', '%tx', e.c(D))} {{")
    top, total_l, total_o = combine(lambda i: shared(e.c(KG * D + i)), lambda i: shared(e.c(KG * D + KG + i)),
                                    lambda i: shared(e.add(e.c(i * D), "%tx")), KG)
    if S == 1:
        store_out("%by", "%tx", total_l, total_o)
    else:
        slot = e.add(e.mul("%by", e.c(S)), "%bx")
        e.emit(f"memref.store {total_o}, %part[{slot}, %tx] : {part_t}")
        e.open(f"scf.if {e.cmp('eq', '%tx', e.c(0))} {{")
        e.emit(f"memref.store {top}, %part[{slot}, {e.c(D)}] : {part_t}")
        e.emit(f"memref.store {total_l}, %part[{slot}, {e.c(D + 1)}] : {part_t}")
        e.close()
    e.close()
    e.emit("gpu.terminator")
    e.close()
    if S > 1:   # launch 2: a thread per (head, dim) combines the S splits
        e.f32.clear()
        lin = e.open_elementwise_launch(BH * D, THREADS)
        neg_inf, zero_f = e.f(-math.inf), e.f(0.0)
        head, d = e.div(lin, e.c(D)), e.rem(lin, e.c(D))

        def part(i: int, col: str) -> str:
            x = e.fresh("r")
            e.emit(f"{x} = memref.load %part[{e.add(e.mul(head, e.c(S)), e.c(i))}, {col}] : {part_t}")
            return x
        _, total_l, total_o = combine(lambda i: part(i, e.c(D)), lambda i: part(i, e.c(D + 1)),
                                      lambda i: part(i, d), S)
        store_out(head, d, total_l, total_o)
        e.close()
        e.emit("gpu.terminator")
        e.emit("}")
    names = ", ".join(f"{p}: {ty}" for p, ty in signature)
    return f"func.func @{name}({names}) {{\n" + "\n".join(e.lines) + "\n    return\n}"

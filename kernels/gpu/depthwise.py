"""Depthwise convolution for GPUs (groups = C = K, NHWC x RSCK), one pass over memory.

A depthwise convolution does R*S multiply-adds per output element: it is bound by memory, not by
arithmetic, so the kernel is built around loads. Each thread owns V consecutive channels (one 16-byte
vector where the channel count allows: 8 x f16/bf16, 4 x f32; `vbytes` narrows it) of an HT x WT tile
of output pixels (HT rows, WT consecutive pixels of each); neighbouring threads take neighbouring
channel vectors, so a warp's loads are contiguous:

    gpu.launch blocks(ceil(N*ceil(OH/HT)*ceil(OW/WT)*C/V / T)) threads(T):
        (n, oh0, ow0, c) of this thread                                channels fastest
        for each distinct input row the tile reads (oh0*sh + i*sh + r*dh; unrolled up to 5x5):
            taps[r]  = w[r, :, c:c+V]              each filter row once, kept in registers
            cols[j]  = x[n, ih, iw0 + j, c:c+V]    each distinct input column the WT outputs read
                                                    (stride 1, 3 taps, WT = 4: 6 loads for 12 vector FMAs)
            acc[i][o] += cols[o*sw + s*dw] * taps[r][s]   for every output row i that reads this row as r
        y[n, oh0 + i, ow0 + o, c:c+V] = act(acc[i][o] + bias[c:c+V] + residual[...])   (vector stores)

An input row feeds up to R output rows: HT > 1 loads it once for all the tile's rows (3x3, stride 1,
HT = 2: 4 rows for 2 output rows instead of 6), at the cost of all R*S taps in registers.

Padding costs no branch: every input load is at an index clamped into the image, and a select zeroes
the taps that fall outside, so all of a row's loads can be in flight at once (measured on the H200:
the MobileNetV2 layers in f16 up to 1.4x faster than with loads under scf.if); the column indices and
predicates do not depend on r and are computed once. f16/bf16 are widened to f32 on load and the
accumulation is f32. 7x7 windows loop over their filter rows (HT = 1), which keeps the live registers
near (WT + S) * V floats.
"""
from __future__ import annotations

from dataclasses import dataclass

from .gemm import Emitter, collapse
from openprim.kernels.semantics import activation

THREADS = 128
ITEM = {"f32": 4, "f16": 2, "bf16": 2}


@dataclass(frozen=True)
class DepthwiseSpec:
    """What the kernel computes: shapes (NHWC), window, the thread's work and the fused epilogue."""
    n: int
    h: int
    w: int
    c: int
    oh: int
    ow: int
    r: int
    s: int
    strides: tuple
    padding: tuple          # (top, left, bottom, right)
    dilations: tuple
    dtype: str
    wt: int = 4             # output pixels along W per thread
    ht: int = 1             # output rows per thread (unrolled windows only)
    vbytes: int = 16        # bytes of the thread's channel vector at most
    unrolled: bool = True   # filter rows unrolled (else an scf.for over them, for large windows)
    bias: bool = False
    residual: bool = False
    activation: str = "none"
    activation_params: tuple = ()

    @property
    def vec(self) -> int:
        """Channels per thread: a `vbytes` vector where C allows, else the widest that divides C."""
        return next(v for v in (8, 4, 2, 1) if v * ITEM[self.dtype] <= self.vbytes and self.c % v == 0)

    def __post_init__(self):
        if self.ht > 1 and not self.unrolled:
            raise ValueError("depthwise: HT > 1 needs the filter rows unrolled")

    def columns(self) -> list[int]:
        """The distinct input-column offsets (from the first output's window start) the WT outputs read."""
        sw, dw = self.strides[1], self.dilations[1]
        return sorted({o * sw + s * dw for o in range(self.wt) for s in range(self.s)})


def _vec_op(e: Emitter, op: str, vt: str, *args: str) -> str:
    n = e.fresh("v")
    e.emit(f"{n} = {op} {', '.join(args)} : {vt}")
    return n


def _clamped(e: Emitter, i: str, size: int) -> tuple[str, str]:
    """(i clamped into [0, size), whether i was inside): loads at clamped indices are always legal, so
    they need no branch and can all be in flight at once; the predicate then selects zeros."""
    ok = e.both(e.cmp("sge", i, e.c(0)), e.cmp("slt", i, e.c(size)))
    return e.op("arith.maxsi", e.op("arith.minsi", i, e.c(size - 1)), e.c(0)), ok


def _select(e: Emitter, ok: str, v: str, zero: str, ft: str) -> str:
    n = e.fresh("m")
    e.emit(f"{n} = arith.select {ok}, {v}, {zero} : {ft}")
    return n


def _load_f32(e: Emitter, memref: str, mtype: str, idx: list[str], spec: DepthwiseSpec) -> str:
    """V channels at memref[idx] (in bounds), as f32."""
    vt = f"vector<{spec.vec}x{spec.dtype}>"
    raw = e.fresh("l")
    e.emit(f"{raw} = vector.load {memref}[{', '.join(idx)}] {{alignment = {spec.vec * ITEM[spec.dtype]}}} : "
           f"{mtype}, {vt}")
    return raw if spec.dtype == "f32" else _vec_op(e, "arith.extf", f"{vt} to vector<{spec.vec}xf32>", raw)


def _epilogue(e: Emitter, spec: DepthwiseSpec, acc: str, addends: list[str]) -> str:
    """act(acc + each addend) on a vector<Vxf32>, returned in the output dtype."""
    V = spec.vec
    ft = f"vector<{V}xf32>"
    for a in addends:
        acc = _vec_op(e, "arith.addf", ft, acc, a)
    if spec.activation != "none":  # scalar activations (semantics.activation), element by element
        out = acc
        for i in range(V):
            s = e.fresh("s")
            e.emit(f"{s} = vector.extract {acc}[{i}] : f32 from {ft}")
            y = activation(e, spec.activation, spec.activation_params, s)
            n = e.fresh("v")
            e.emit(f"{n} = vector.insert {y}, {out} [{i}] : f32 into {ft}")
            out = n
        acc = out
    if spec.dtype == "f32":
        return acc
    n = e.fresh("t")
    e.emit(f"{n} = arith.truncf {acc} : {ft} to vector<{V}x{spec.dtype}>")
    return n


def depthwise_kernel(name: str, signature: list[tuple[str, str]], spec: DepthwiseSpec) -> str:
    """The kernel function; signature = x, filter (RSCK, [R, S, 1, C]), bias?, residual?, out."""
    names = [p for p, _ in signature]
    types = dict(signature)
    x, w, out = names[0], names[1], names[-1]
    bias = names[2] if spec.bias else None
    residual = names[2 + spec.bias] if spec.residual else None
    N, H, W, C, OH, OW, R, S, dt = (spec.n, spec.h, spec.w, spec.c, spec.oh, spec.ow, spec.r, spec.s, spec.dtype)
    (sh, sw), (dh, dw), (pt, pl) = spec.strides, spec.dilations, spec.padding[:2]
    V, WT, HT = spec.vec, spec.wt, spec.ht
    vt, ft = f"vector<{V}x{dt}>", f"vector<{V}xf32>"
    groups, row_groups = -(-OW // WT), -(-OH // HT)
    total = N * row_groups * groups * (C // V)
    e = Emitter()
    lin = e.open_elementwise_launch(total, THREADS)
    c = e.mul(e.rem(lin, e.c(C // V)), e.c(V))
    rest = e.div(lin, e.c(C // V))
    ow0, rest = e.mul(e.rem(rest, e.c(groups)), e.c(WT)), e.div(rest, e.c(groups))
    oh0, n = e.mul(e.rem(rest, e.c(row_groups)), e.c(HT)), e.div(rest, e.c(row_groups))
    ih0 = e.op("arith.subi", e.mul(oh0, e.c(sh)), e.c(pt))
    iw0 = e.op("arith.subi", e.mul(ow0, e.c(sw)), e.c(pl))
    taps = collapse(e, w, types[w], 4, R * S, C, dt)
    taps_t = f"memref<{R * S}x{C}x{dt}>"
    # Columns: clamped indices and predicates, independent of the filter row, computed once.
    cols = {off: _clamped(e, e.add(iw0, e.c(off)), W) for off in spec.columns()}
    zero = e.fresh("z")
    e.emit(f"{zero} = arith.constant dense<0.0> : {ft}")

    def input_row(off: str, uses: list[tuple[int, list[str]]], accs: list[list[str]]) -> list[list[str]]:
        """accs after input row ih0 + off (an index value): its columns, then for each (output row i, the
        taps of the filter row it reads this input row with), the FMAs."""
        ih, hok = _clamped(e, e.add(ih0, off), H)
        loaded = {o: _select(e, e.both(hok, ok), _load_f32(e, x, types[x], [n, ih, iw, c], spec), zero, ft)
                  for o, (iw, ok) in cols.items()}
        cur = [list(a) for a in accs]
        for i, tap in uses:
            for o in range(WT):
                for s in range(S):
                    nxt = e.fresh("acc")
                    e.emit(f"{nxt} = vector.fma {loaded[o * sw + s * dw]}, {tap[s]}, {cur[i][o]} : {ft}")
                    cur[i][o] = nxt
        return cur

    def tap_row(r: str) -> list[str]:
        row = e.mul(r, e.c(S))
        return [_load_f32(e, taps, taps_t, [e.add(row, e.c(s)), c], spec) for s in range(S)]

    if spec.unrolled:
        res = [[zero] * WT for _ in range(HT)]
        tap_rows: dict[int, list[str]] = {}
        for off in sorted({i * sh + r * dh for i in range(HT) for r in range(R)}):
            pairs = [(i, r) for i in range(HT) for r in range(R) if i * sh + r * dh == off]
            for _, r in pairs:
                if r not in tap_rows:
                    tap_rows[r] = tap_row(e.c(r))
            res = input_row(e.c(off), [(i, tap_rows[r]) for i, r in pairs], res)
    else:
        accs = [e.fresh("acc") for _ in range(WT)]
        loop = e.fresh("res")
        e.open(f"{loop}:{WT} = scf.for %r = {e.c(0)} to {e.c(R)} step {e.c(1)} "
               f"iter_args({', '.join(f'{a} = {zero}' for a in accs)}) -> ({', '.join([ft] * WT)}) {{")
        tap = tap_row("%r")   # before the row's loads, as in the unrolled form
        nxt, = input_row(e.mul("%r", e.c(dh)), [(0, tap)], [accs])
        e.emit(f"scf.yield {', '.join(nxt)} : {', '.join([ft] * WT)}")
        e.close()
        res = [[f"{loop}#{o}" for o in range(WT)]]
    # Epilogue: bias once, then per output pixel (guarded at a ragged bottom or right edge) residual, act, store.
    addends = [_load_f32(e, bias, types[bias], [c], spec)] if bias else []
    for i in range(HT):
        oh = e.add(oh0, e.c(i))
        if OH % HT != 0 and i > 0:
            e.open(f"scf.if {e.cmp('ult', oh, e.c(OH))} {{")
        for o in range(WT):
            ow = e.add(ow0, e.c(o))
            ragged = OW % WT != 0 and o > 0
            if ragged:
                e.open(f"scf.if {e.cmp('ult', ow, e.c(OW))} {{")
            adds = addends + ([_load_f32(e, residual, types[residual], [n, oh, ow, c], spec)] if residual else [])
            y = _epilogue(e, spec, res[i][o], adds)
            e.emit(f"vector.store {y}, {out}[{n}, {oh}, {ow}, {c}] {{alignment = {V * ITEM[dt]}}} : "
                   f"{types[out]}, {vt}")
            if ragged:
                e.close()
        if OH % HT != 0 and i > 0:
            e.close()
    e.close()
    return e.function(name, signature)

"""A tiled SIMT GEMM kernel in the gpu dialect: implicit-GEMM convolution (NHWC or NCHW x RSCK) and matmul.

    C[M, N] = A[M, K] . B[K, N], then act(C + bias[n] + residual[m, n]) in the output dtype.

For a convolution, M = batch*OH*OW (output pixels), N = output channels, K = R*S*C, and A is never
built: A[m, k], m = (n, oh, ow), k = (r, s, c), is read straight from the input at
ih = oh*sh - pt + r*dh, iw = ow*sw - pl + s*dw, zero outside the image (implicit GEMM, no im2col
buffer). For a matmul A is the left operand. The input layout decides how A is loaded:
    NHWC  x[n, ih, iw, c]: consecutive k are consecutive channels, so each thread loads VA of them
          at once (16-byte vectors along k) and the output C[m, n] is stored row-major ([M, N]);
    NCHW  x[n, c, ih, iw]: consecutive m are consecutive ow, so the threads of a block take
          consecutive m (each thread one tile row, scalar loads, coalesced across the threads) and
          the output is stored as out[n, k, oh, ow] (so is the residual read).
The filter is read as [K = R*S*C, N] (RSCK) in both.

One block computes a BM x BN tile of C with THREADS threads, each a TM x TN register tile:

    regs = global tiles at k0 = 0             (each thread's share, VA/VB elements wide along k / n)
    for k0 in 0..K step BK:                   (scf.for; accumulators and regs carried in registers)
        regs -> As[BK][BM], Bs[BK][BN]        (A transposed, so a thread's TM rows are contiguous)
        barrier
        regs = global tiles at k0 + BK        (issued now, consumed next iteration: latency hidden)
        for kk < BK (unrolled): acc[i][:] += As[kk][ty*TM + i] * Bs[kk][tx*TN : tx*TN+TN]
        barrier
    epilogue on the registers, guarded stores

Loads and arithmetic are f32 (f16/bf16 inputs are extended once, when staged into shared memory), so
the accumulation is f32 for every dtype. This is the structure matrix cores will reuse: the same tiles
and staging, with the inner product replaced by MMA instructions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from openprim.kernels.irtext import KernelText
from openprim.kernels.semantics import activation

WG = "#gpu.address_space<workgroup>"


@dataclass(frozen=True)
class Tile:
    bm: int = 128
    bn: int = 128
    bk: int = 8
    tm: int = 8
    tn: int = 8

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


TILES = {"large": Tile(128, 128, 8, 8, 8), "medium": Tile(64, 64, 16, 4, 4), "small": Tile(32, 32, 16, 2, 2)}


class Emitter(KernelText):
    """KernelText plus index arithmetic with constants folded in Python."""

    def __init__(self):
        super().__init__()
        self.consts = {}

    def c(self, v: int) -> str:
        if v not in self.consts:
            n = self.fresh("c")
            self.consts[v] = n
            self.emit(f"{n} = arith.constant {v} : index")
        return self.consts[v]

    def open_elementwise_launch(self, total: int, threads: int) -> str:
        """gpu.launch of ceil(total / threads) one-dimensional blocks and `scf.if lin < total` inside it;
        returns lin, this thread's linear index (the caller closes the if, then the launch)."""
        one = self.c(1)
        self.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {self.c(-(-total // threads))}, %gy = {one}, "
                  f"%gz = {one}) threads(%tx, %ty, %tz) in (%sx = {self.c(threads)}, %sy = {one}, %sz = {one}) {{")
        lin = self.add(self.mul("%bx", self.c(threads)), "%tx")
        self.open(f"scf.if {self.cmp('ult', lin, self.c(total))} {{")
        return lin

    def open(self, line: str):
        """Emit a region-opening line; constants made inside stay inside (see close)."""
        self.emit(line)
        self.scopes = getattr(self, "scopes", []) + [dict(self.consts)]

    def close(self, line: str = "}"):
        self.emit(line)
        self.consts = self.scopes.pop()

    def op(self, name: str, a: str, b: str, ty="index") -> str:
        n = self.fresh("i")
        self.emit(f"{n} = {name} {a}, {b} : {ty}")
        return n

    def add(self, a, b): return self.op("arith.addi", a, b)
    def mul(self, a, b): return self.op("arith.muli", a, b)
    def div(self, a, b): return self.op("arith.divui", a, b)
    def rem(self, a, b): return self.op("arith.remui", a, b)

    def cmp(self, pred: str, a: str, b: str) -> str:
        n = self.fresh("p")
        self.emit(f"{n} = arith.cmpi {pred}, {a}, {b} : index")
        return n

    def both(self, a: str, b: str) -> str:
        return self.op("arith.andi", a, b, "i1")

    def function(self, name: str, signature: list[tuple[str, str]]) -> str:
        """The kernel function around the emitted launch (closed here)."""
        self.emit("gpu.terminator")
        self.emit("}")
        sig = ", ".join(f"{p}: {ty}" for p, ty in signature)
        return f"func.func @{name}({sig}) {{\n" + "\n".join(self.lines) + "\n    return\n}"


@dataclass(frozen=True)
class GemmSpec:
    """What the kernel computes. conv=None: a matmul, A = lhs[M, K] (row-major, batch dims folded)."""
    m: int
    n: int
    k: int
    dtype: str
    conv: tuple | None = None     # (N, H, W, C, OH, OW, R, S, sh, sw, pt, pl, dh, dw)
    groups: int = 1               # grouped convolution: n and k are per group; grid z = group
    bias: bool = False
    residual: bool = False
    activation: str = "none"
    activation_params: tuple = ()
    layout: str = "NHWC"          # a convolution's input, output and residual: "NHWC" or "NCHW"

    @property
    def nchw(self) -> bool:
        return bool(self.conv) and self.layout == "NCHW"


def operands(params_sig: list[tuple[str, str]], spec: GemmSpec):
    """A GEMM kernel's parameters by role: (types by name, rank of a parameter, (A, B, bias or None,
    residual or None, out)); params_sig is A (or x), B, bias?, residual?, out, as outline() passes them."""
    names = [p for p, _ in params_sig]
    types = dict(params_sig)
    bias = names[2] if spec.bias else None
    residual = names[2 + spec.bias] if spec.residual else None
    return types, (lambda p: len(types[p][7:].split("x")) - 1), (names[0], names[1], bias, residual, names[-1])


def epilogue_scalar(e: Emitter, spec: GemmSpec, v: str, adds: list[tuple[str | None, list[str], str]]) -> str:
    """act(v + each loaded addend) in the output type: adds = (memref or None, indices, memref type)
    (the bias at the column, the residual at the output element)."""
    for src, idx, mt in adds:
        if src:
            x = e.fresh("e")
            e.emit(f"{x} = memref.load {src}[{', '.join(idx)}] : {mt}")
            v = e.scalar("arith.addf", v, e.to_f32(x, spec.dtype))
    return e.from_f32(activation(e, spec.activation, spec.activation_params, v), spec.dtype)


def _shape(mtype: str) -> list[int]:
    return [int(d) for d in mtype[len("memref<"):].split("x")[:-1]]


def collapse_at(e: Emitter, value: str, mtype: str, cuts: list[int]) -> tuple[str, str]:
    """value with its dims grouped between the cut points (an empty group is dropped); (view, its type).

    The view of a buffer without a layout (contiguous, offset 0) is a memref.reinterpret_cast, not a
    collapse_shape: fold-memref-alias-ops folds a collapse_shape into the vector.load/store that use it
    and drops their alignment attribute, so a 16-byte access became eight 2-byte ones on NVPTX."""
    dims, dtype = _shape(mtype), mtype.rsplit("x", 1)[1][:-1]
    bounds = [0] + cuts + [len(dims)]
    groups = [list(range(a, b)) for a, b in zip(bounds, bounds[1:]) if b > a]
    sizes = [math.prod(dims[g[0]:g[-1] + 1]) for g in groups]
    vt = f"memref<{'x'.join(map(str, sizes))}x{dtype}>"
    if len(groups) == len(dims):
        return value, vt
    n = e.fresh("v")
    if "," in mtype:     # a layout (strided, offset): its view as before
        e.emit(f"{n} = memref.collapse_shape {value} {groups} : {mtype} into {vt}")
        return n, vt
    strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    e.emit(f"{n} = memref.reinterpret_cast {value} to offset: [0], sizes: {sizes}, strides: {strides} "
           f": {mtype} to {vt}")
    return n, vt


def collapse(e: Emitter, value: str, mtype: str, rank: int, rows: int, cols: int, dtype: str) -> str:
    """A [rows, cols] view of a row-major memref whose last dimension is cols (a collapse_shape: the TMA
    descriptors' sources are traced through it)."""
    if rank == 2:
        return value
    n = e.fresh("v")
    e.emit(f"{n} = memref.collapse_shape {value} [[{', '.join(str(i) for i in range(rank - 1))}], [{rank - 1}]] "
           f": {mtype} into memref<{rows}x{cols}x{dtype}>")
    return n


def _nchw_view(e: Emitter, value: str, mtype: str, view_t: str) -> str:
    """An NCHW memref [N, K, OH, OW] as [N, K, OH*OW]."""
    n = e.fresh("v")
    e.emit(f"{n} = memref.collapse_shape {value} [[0], [1], [2, 3]] : {mtype} into {view_t}")
    return n


def load_vec(e: Emitter, ok: str, memref: str, mtype: str, idx: list, width: int, dtype: str,
              widen: bool = True) -> str:
    """`width` elements at memref[idx] when ok, else zeros: as f32 (widen) or in the input type."""
    vt = f"vector<{width}x{dtype}>"
    ft = f"vector<{width}xf32>" if widen else vt
    n = e.fresh("l")
    align = width * {"f32": 4, "f16": 2, "bf16": 2}[dtype]
    e.emit(f"{n} = scf.if {ok} -> ({ft}) {{")
    raw = e.fresh("r")
    e.emit(f"  {raw} = vector.load {memref}[{', '.join(idx)}] {{alignment = {align}}} : {mtype}, {vt}")
    val = raw
    if widen and dtype != "f32":
        val = e.fresh("x")
        e.emit(f"  {val} = arith.extf {raw} : {vt} to {ft}")
    e.emit(f"  scf.yield {val} : {ft}")
    e.emit("} else {")
    z = e.fresh("z")
    e.emit(f"  {z} = arith.constant dense<0.0> : {ft}")
    e.emit(f"  scf.yield {z} : {ft}")
    e.emit("}")
    return n


class OperandA:
    """Reads of A[m, k]: a matmul's lhs, or a convolution's input at the window tap of k (implicit
    GEMM: k = (r, s, c) with c fastest, so in NHWC `width` consecutive k are consecutive channels;
    an NCHW input is read one element at a time, width 1)."""

    def __init__(self, e: Emitter, spec: GemmSpec, value: str, mtype: str):
        self.e, self.spec = e, spec
        M, K, dt = spec.m, spec.k, spec.dtype
        if spec.conv:
            self.memref, self.mtype = value, mtype
        else:
            self.memref = collapse(e, value, mtype, len(mtype[7:].split("x")) - 1, M, K, dt)
            self.mtype = f"memref<{M}x{K}x{dt}>"

    def row(self, m0: str, row: str) -> dict:
        """What one tile row needs along the whole k loop: its m, bounds, and image position."""
        e, spec = self.e, self.spec
        m = e.add(m0, row)
        info = {"row": row, "m": m, "ok": e.cmp("ult", m, e.c(spec.m))}
        if spec.conv:
            _, _, _, _, OH, OW, _, _, sh, sw, pt, pl, _, _ = spec.conv
            rem = e.rem(m, e.c(OH * OW))
            info["img"] = e.div(m, e.c(OH * OW))
            info["ih0"] = e.op("arith.subi", e.mul(e.div(rem, e.c(OW)), e.c(sh)), e.c(pt))
            info["iw0"] = e.op("arith.subi", e.mul(e.rem(rem, e.c(OW)), e.c(sw)), e.c(pl))
        return info

    def addresses(self, rows: list[dict], k: str) -> list[tuple[str, list[str]]]:
        """(in bounds, indices) of element k of every row: inside the image and below K."""
        e, spec = self.e, self.spec
        ok_k = e.cmp("ult", k, e.c(spec.k))
        if spec.conv:
            _, H, W, C, _, _, _, S, _, _, _, _, dh, dw = spec.conv
            C //= spec.groups
            c, rs = e.rem(k, e.c(C)), e.div(k, e.c(C))
            if spec.groups > 1:
                c = e.add(e.mul("%bz", e.c(C)), c)
            dr, ds = e.mul(e.div(rs, e.c(S)), e.c(dh)), e.mul(e.rem(rs, e.c(S)), e.c(dw))
        out = []
        for info in rows:
            ok = e.both(info["ok"], ok_k)
            if spec.conv:
                ih, iw = e.add(info["ih0"], dr), e.add(info["iw0"], ds)
                for v, hi in ((ih, H), (iw, W)):
                    ok = e.both(ok, e.both(e.cmp("sge", v, e.c(0)), e.cmp("slt", v, e.c(hi))))
                idx = [info["img"], c, ih, iw] if spec.nchw else [info["img"], ih, iw, c]
            else:
                idx = [info["m"], k]
            out.append((ok, idx))
        return out

    def loads(self, rows: list[dict], k: str, width: int, widen: bool) -> list[str]:
        """`width` elements at k of every row (zeros outside the image and past K)."""
        assert width == 1 or not self.spec.nchw, "an NCHW input is read one element at a time"
        return [load_vec(self.e, ok, self.memref, self.mtype, idx, width, self.spec.dtype, widen)
                for ok, idx in self.addresses(rows, k)]


def group_col(e: Emitter, spec: GemmSpec, n: str) -> str:
    """Column n of grid z's group in the [., N * groups] B, bias, residual and output (grouped GEMMs)."""
    return e.add(e.mul("%bz", e.c(spec.n)), n) if spec.groups > 1 else n


def tile_launch(e: Emitter, spec: GemmSpec, params_sig: list[tuple[str, str]], bm: int, bn: int, threads: int,
                shared: list[tuple[str, str]], operand_a=None) -> tuple:
    """Open the launch of one block per bm x bn output tile (grid x over N, y over M, z over the groups),
    with the workgroup buffers `shared` [(name, memref type)], for the matrix-core kernels (NHWC or
    matmul). Returns (m0, n0, OperandA (or operand_a(e): A computed another way, with OperandA's row and
    loads), B as [K, N * groups], out and residual (or None) as [M, N * groups], bias, bias type);
    group_col gives a group's columns in them."""
    types, rank, (a, b, bias, residual, out) = operands(params_sig, spec)
    M, N, K, dt = spec.m, spec.n, spec.k, spec.dtype
    NT = N * spec.groups
    one = e.c(1)
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-N // bn))}, %gy = {e.c(-(-M // bm))}, "
           f"%gz = {e.c(spec.groups)}) threads(%tx, %ty, %tz) in (%sx = {e.c(threads)}, %sy = {one}, %sz = {one}) "
           f"workgroup({', '.join(f'{n} : {t}' for n, t in shared)}) {{")
    m0, n0 = e.mul("%by", e.c(bm)), e.mul("%bx", e.c(bn))
    b2 = collapse(e, b, types[b], rank(b), K, NT, dt)
    out2 = collapse(e, out, types[out], rank(out), M, NT, dt)
    res2 = collapse(e, residual, types[residual], rank(residual), M, NT, dt) if residual else None
    A = operand_a(e) if operand_a else OperandA(e, spec, a, types[a])
    return m0, n0, A, b2, out2, res2, bias, types[bias] if bias else ""


def gemm_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, tile: Tile) -> str:
    """The kernel function: params_sig = [(ssa name, memref type)] of the inputs then the output
    (A or x, B as RSCK or [K, N], bias?, residual?, out), as outline() calls it."""
    e = Emitter()
    t = tile
    T, dt = t.threads, spec.dtype
    M, N, K, G = spec.m, spec.n, spec.k, spec.groups
    NT = N * G                                                       # columns of B and of the output
    # Global load widths: A contiguous along k (NHWC channels; NCHW: one element), B along n; whole
    # passes of all the threads.
    va = 1 if spec.nchw else \
        next(v for v in (4, 2, 1) if (spec.conv[3] // G if spec.conv else K) % v == 0 and (t.bm * t.bk) % (T * v) == 0)
    vb = next(v for v in (4, 2, 1) if N % v == 0 and (t.bk * t.bn) % (T * v) == 0)
    gx, gy = -(-N // t.bn), -(-M // t.bm)
    types, _, (a, b, bias, residual, out) = operands(params_sig, spec)
    one, nt = e.c(1), e.c(T)
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(gx)}, %gy = {e.c(gy)}, %gz = {e.c(G)}) "
           f"threads(%tx, %ty, %tz) in (%sx = {nt}, %sy = {one}, %sz = {one}) "
           f"workgroup(%As : memref<{t.bk}x{t.bm}xf32, {WG}>, %Bs : memref<{t.bk}x{t.bn}xf32, {WG}>) {{")
    as_t, bs_t = f"memref<{t.bk}x{t.bm}xf32, {WG}>", f"memref<{t.bk}x{t.bn}xf32, {WG}>"
    tid = "%tx"
    m0, n0 = e.mul("%by", e.c(t.bm)), e.mul("%bx", e.c(t.bn))
    b2 = collapse(e, b, types[b], len(types[b][7:].split("x")) - 1, K, NT, dt)
    if spec.nchw:  # out[n, k, oh, ow] as [N, K, OH*OW]
        out_t = f"memref<{spec.conv[0]}x{NT}x{M // spec.conv[0]}x{dt}>"
        out2, res2 = (_nchw_view(e, v, types[v], out_t) if v else None for v in (out, residual))
    else:
        out_t = f"memref<{M}x{NT}x{dt}>"
        out2 = collapse(e, out, types[out], len(types[out][7:].split("x")) - 1, M, NT, dt)
        res2 = collapse(e, residual, types[residual], len(types[residual][7:].split("x")) - 1, M, NT, dt) \
            if residual else None
    A = OperandA(e, spec, a, types[a])
    # This thread's loads of the A tile, as (its row's info, first k within the tile): NHWC threads take
    # VA consecutive k of a row; NCHW threads take consecutive rows, one row and BK*BM/T k each (every
    # tile has T % BM == 0).
    if spec.nchw:
        row = A.row(m0, e.rem(tid, e.c(t.bm)))
        a_loads = [(row, e.add(e.c(p * (T // t.bm)), e.div(tid, e.c(t.bm)))) for p in range(t.bm * t.bk // T)]
    else:
        per_row = t.bk // va         # threads per tile row of A
        a_rows = [A.row(m0, e.add(e.c(p * (T // per_row)), e.div(tid, e.c(per_row))))
                  for p in range(t.bm * t.bk // (T * va))]
        a_col = e.mul(e.rem(tid, e.c(per_row)), e.c(va))
        a_loads = [(info, a_col) for info in a_rows]
    per_brow = t.bn // vb
    b_col = e.mul(e.rem(tid, e.c(per_brow)), e.c(vb))
    b_n = e.add(n0, b_col)
    b_nok = e.cmp("ult", b_n, e.c(N))
    tx = e.rem(tid, e.c(t.bn // t.tn))
    ty = e.div(tid, e.c(t.bn // t.tn))
    a_off, b_off = e.mul(ty, e.c(t.tm)), e.mul(tx, e.c(t.tn))
    acc_t = f"vector<{t.tn}xf32>"
    b_rows = [e.add(e.c(p * (T // per_brow)), e.div(tid, e.c(per_brow)))
              for p in range(t.bk * t.bn // (T * vb))]

    def global_loads(k0: str) -> list[str]:
        """This thread's share of the A and B tiles at k0, as f32 vectors (zeros outside)."""
        if spec.nchw:
            vecs = [A.loads([info], e.add(k0, kk), 1, widen=True)[0] for info, kk in a_loads]
        else:
            vecs = A.loads([info for info, _ in a_loads], e.add(k0, a_col), va, widen=True)
        for kk in b_rows:
            kb = e.add(k0, kk)
            vecs.append(load_vec(e, e.both(b_nok, e.cmp("ult", kb, e.c(K))), b2, f"memref<{K}x{NT}x{dt}>",
                                  [kb, group_col(e, spec, b_n)], vb, dt))
        return vecs

    # Software pipelining through registers: the next tiles' global loads are issued before this
    # tile's inner products, so their latency hides behind the FMAs.
    first = global_loads(e.c(0))
    vec_types = [f"vector<{va}xf32>"] * len(a_loads) + [f"vector<{vb}xf32>"] * len(b_rows)
    zero = e.fresh("z")
    e.emit(f"{zero} = arith.constant dense<0.0> : {acc_t}")
    accs = [e.fresh("acc") for _ in range(t.tm)]
    staged = [e.fresh("g") for _ in first]
    res = e.fresh("res")
    carried = [f"{x} = {zero}" for x in accs] + [f"{g} = {v}" for g, v in zip(staged, first)]
    e.open(f"{res}:{t.tm + len(first)} = scf.for %k0 = {e.c(0)} to {e.c(-(-K // t.bk) * t.bk)} step {e.c(t.bk)} "
           f"iter_args({', '.join(carried)}) -> ({', '.join([acc_t] * t.tm + vec_types)}) {{")
    for vec, (info, kk) in zip(staged, a_loads):
        for j in range(va):
            s = e.fresh("s")
            e.emit(f"{s} = vector.extract {vec}[{j}] : f32 from vector<{va}xf32>")
            e.emit(f"memref.store {s}, %As[{e.add(kk, e.c(j))}, {info['row']}] : {as_t}")
    for vec, kk in zip(staged[len(a_loads):], b_rows):
        e.emit(f"vector.store {vec}, %Bs[{kk}, {b_col}] {{alignment = {4 * vb}}} : {bs_t}, vector<{vb}xf32>")
    e.emit("gpu.barrier")
    following = global_loads(e.add("%k0", e.c(t.bk)))
    cur = list(accs)
    for kk in range(t.bk):
        av, bv = e.fresh("av"), e.fresh("bv")
        e.emit(f"{av} = vector.load %As[{e.c(kk)}, {a_off}] {{alignment = {4 * t.tm}}} : {as_t}, vector<{t.tm}xf32>")
        e.emit(f"{bv} = vector.load %Bs[{e.c(kk)}, {b_off}] {{alignment = {4 * t.tn}}} : {bs_t}, {acc_t}")
        for i in range(t.tm):
            s, bc, nxt = e.fresh("s"), e.fresh("bc"), e.fresh("acc")
            e.emit(f"{s} = vector.extract {av}[{i}] : f32 from vector<{t.tm}xf32>")
            e.emit(f"{bc} = vector.broadcast {s} : f32 to {acc_t}")
            e.emit(f"{nxt} = vector.fma {bc}, {bv}, {cur[i]} : {acc_t}")
            cur[i] = nxt
    e.emit("gpu.barrier")
    e.emit(f"scf.yield {', '.join(cur + following)} : {', '.join([acc_t] * t.tm + vec_types)}")
    e.close()
    # Epilogue: act(acc + bias + residual) -> out, guarded per row (and per element at a ragged N edge).
    ragged = N % t.bn != 0 or N % t.tn != 0
    ns = [e.add(n0, e.add(b_off, e.c(j))) for j in range(t.tn)]
    col_ok = [e.cmp("ult", n, e.c(N)) for n in ns]
    for i in range(t.tm):
        m = e.add(m0, e.add(a_off, e.c(i)))
        e.open(f"scf.if {e.both(e.cmp('ult', m, e.c(M)), col_ok[0])} {{")
        if spec.nchw:
            img, pix = e.div(m, e.c(M // spec.conv[0])), e.rem(m, e.c(M // spec.conv[0]))
        for j, n in enumerate(ns):
            if ragged and j:
                e.open(f"scf.if {col_ok[j]} {{")
            v = e.fresh("s")
            e.emit(f"{v} = vector.extract {res}#{i}[{j}] : f32 from {acc_t}")
            col = group_col(e, spec, n)
            at = [img, col, pix] if spec.nchw else [m, col]
            v = epilogue_scalar(e, spec, v, [(bias, [col], types[bias] if bias else ""), (res2, at, out_t)])
            e.emit(f"memref.store {v}, {out2}[{', '.join(at)}] : {out_t}")
            if ragged and j:
                e.close()
        e.close()
    return e.function(name, params_sig)


def vector_activation(e: Emitter, name: str, params, v: str, width: int) -> str:
    """The activation of each lane of v (vector<width x f32>), as a vector again (v itself for "none")."""
    if name == "none":
        return v
    lanes = []
    for j in range(width):
        s_ = e.fresh("s")
        e.emit(f"{s_} = vector.extract {v}[{j}] : f32 from vector<{width}xf32>")
        lanes.append(activation(e, name, params, s_))
    out = e.fresh("x")
    e.emit(f"{out} = vector.from_elements {', '.join(lanes)} : vector<{width}xf32>")
    return out


def store_vector(e: Emitter, spec: GemmSpec, v: str, bias_f: str | None, out, residual=None, residual_v=None,
                 width: int = 8) -> None:
    """`width` consecutive output columns: v (vector<width x f32>) + bias + residual, activation, cast, one
    vector store (16 bytes for 8 f16). out / residual: (memref, indices, memref type), out may be f32 (no
    cast); or residual_v, the residual's values already loaded (vector<width x dtype>)."""
    vf, vo = f"vector<{width}xf32>", f"vector<{width}x{spec.dtype}>"
    if bias_f:
        v = e.op("arith.addf", v, bias_f, vf)
    if residual:
        residual_v = e.fresh("r")
        e.emit(f"{residual_v} = vector.load {residual[0]}[{', '.join(residual[1])}] : {residual[2]}, {vo}")
    if residual_v:
        rf = residual_v
        if spec.dtype != "f32":
            rf = e.fresh("r")
            e.emit(f"{rf} = arith.extf {residual_v} : {vo} to {vf}")
        v = e.op("arith.addf", v, rf, vf)
    v = vector_activation(e, spec.activation, spec.activation_params, v, width)
    f32_out = out[2].endswith("xf32>")
    if not f32_out and spec.dtype != "f32":
        o = e.fresh("o")
        e.emit(f"{o} = arith.truncf {v} : {vf} to {vo}")
        v = o
    item = 4 if f32_out or spec.dtype == "f32" else 2
    e.emit(f"vector.store {v}, {out[0]}[{', '.join(out[1])}] {{alignment = {min(16, width * item)}}} : {out[2]}, "
           f"{vf if f32_out else vo}")

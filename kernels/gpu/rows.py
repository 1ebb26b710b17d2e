"""Row kernels for GPUs: softmax, log_softmax, layer_norm and rms_norm over the trailing dimension(s).

The generic grid mapping (prim-gpu-map) gives each thread a whole row to reduce, which reads rows
with a stride between threads (uncoalesced) and serializes long rows. Here one block owns a row:

    gpu.launch blocks(rows) threads(T):
        partial = reduce(x[row, t], x[row, t + T], ...)        coalesced strided loop per thread
        total   = gpu.all_reduce(partial)                      shuffles + shared memory
        ... a second statistic the same way (sum of exp, or of squared deviations) ...
        y[row, t + k*T] = f(x[row, t + k*T], statistics)       same loop, writing

    layer_norm    mean; mean of (x - mean)^2 (two passes: no cancellation); (x - mean) rsqrt(var + eps)
                  [* scale] [+ shift]
    rms_norm      mean of x^2; x rsqrt(ms + eps) [* scale]

A reduction (prim.reduce: sum, mean, max, min) over the trailing dimensions is a block per row too
(reduce_rows), each thread keeping UNROLL loads in flight: a greedy decode step's max and min over a
vocabulary of 50,257 logits had one thread walk each row (the generic grid mapping; 0.9 ms each on an
H100).

A norm whose input was an add (prim-fuse folds it in as the `residual` operand) reads x + residual,
summed in f32, wherever it reads x: one launch instead of an elementwise add plus the norm, and the
sum never goes through memory.

Statistics are f32 for every dtype; the row is read from global memory once per pass (it stays in
L1/L2 between passes for the row lengths of real networks).

The norms of rows that fit a warp's registers (a multiple of 16 bytes, at most 32 lanes x SLOTS vectors:
2048 f16 or 1024 f32 values) take a warp per row instead (_warp_norm): each lane loads its 16-byte
vectors once, the statistics are lane sums then xor-shuffle butterflies (no shared memory, no block
barrier), and the row is written from the registers. A transformer's [tokens, 768] norm is then one read
and one write of the tensor; the block per row read it three times and synchronized 128 threads twice
per row (ViT-B/16's norms on the H200: 19 us each, about a quarter of the copy bandwidth).
"""
from __future__ import annotations

import math

from openprim.kernels.semantics import REDUCE_COMBINE, REDUCE_INIT

from .gemm import Emitter, _shape, collapse_at, load_vec


def _view(e: Emitter, value: str, mtype: str, split: int) -> tuple[str, str]:
    """value as [prod(dims[:split]), prod(dims[split:])] (split=0: as [prod(dims)]); (view, its type)."""
    return collapse_at(e, value, mtype, [split])


def _threads(length: int) -> int:
    return 32 if length <= 64 else 128 if length <= 1024 else 256


def _row_loop(e: Emitter, length: int, T: int, acc: str | None, step) -> str | None:
    """scf.for i = t to length step T (iter_args acc when given); step(e, i, acc) -> new acc."""
    if acc is None:
        i = e.fresh("i")
        e.open(f"scf.for {i} = %tx to {e.c(length)} step {e.c(T)} {{")
        step(e, i, None)
        e.close()
        return None
    res, i, a = e.fresh("red"), e.fresh("i"), e.fresh("a")
    e.open(f"{res} = scf.for {i} = %tx to {e.c(length)} step {e.c(T)} iter_args({a} = {acc}) -> (f32) {{")
    e.emit(f"scf.yield {step(e, i, a)} : f32")
    e.close()
    return res


def _all_reduce(e: Emitter, op: str, v: str) -> str:
    n = e.fresh("all")
    e.emit(f"{n} = gpu.all_reduce {op} {v} uniform {{}} : (f32) -> f32")
    return n


# the operands after the input of each row op, in the op table's order (base/ops.py)
NORM_OPERANDS = {"layer_norm": ("scale", "shift", "residual"), "rms_norm": ("scale", "residual")}


def operand_args(kind: str, names: list[str], given: tuple[bool, ...]) -> dict[str, str]:
    """{operand: kernel argument} of the optional operands present (outline passes the present operand
    groups in order, then the output)."""
    present = [op for op, g in zip(NORM_OPERANDS.get(kind, ()), given[1:]) if g]
    return dict(zip(present, names[1:-1]))


WARP_ROWS = 8     # rows (one warp each) per block of _warp_norm
SLOTS = 8         # 16-byte vectors per lane that _warp_norm keeps in registers


def warp_sum(e: Emitter, v: str) -> str:
    """v summed over the 32 lanes of the warp (every lane gets the total)."""
    width = e.fresh("w")
    e.emit(f"{width} = arith.constant 32 : i32")
    for offset in (16, 8, 4, 2, 1):
        off, other, ok = e.fresh("o"), e.fresh("sh"), e.fresh("ok")
        e.emit(f"{off} = arith.constant {offset} : i32")
        e.emit(f"{other}, {ok} = gpu.shuffle xor {v}, {off}, {width} : f32")
        v = e.scalar("arith.addf", v, other)
    return v


def load_row(e: Emitter, x: str, mt: str, residual: str | None, row: str, row_ok: str, length: int, vec: int,
             dtype: str, tid: str = "%tx") -> tuple[list[str], list[str], list[str]]:
    """A warp's row of x (+ residual) as f32 `vec`-wide vectors, lane l (of the linear thread id tid) holding
    vectors l, l + 32, ...: (whether each is inside the row, its first column, its values: zeros past the
    row and past the rows)."""
    nvec, ft = length // vec, f"vector<{vec}xf32>"
    lane = e.rem(tid, e.c(32))
    oks, cols, vals = [], [], []
    for j in range(-(-nvec // 32)):
        v = e.add(lane, e.c(32 * j))
        ok = row_ok if 32 * (j + 1) <= nvec else e.both(row_ok, e.cmp("ult", v, e.c(nvec)))
        col = e.mul(v, e.c(vec))
        xv = load_vec(e, ok, x, mt, [row, col], vec, dtype)
        if residual:
            xv = e.op("arith.addf", xv, load_vec(e, ok, residual, mt, [row, col], vec, dtype), ft)
        oks.append(ok)
        cols.append(col)
        vals.append(xv)
    return oks, cols, vals


def _row_sum(e: Emitter, vectors: list[str], ft: str) -> str:
    """The sum over a warp's row of its lanes' vectors (a scalar in every lane)."""
    acc = vectors[0]
    for v in vectors[1:]:
        acc = e.op("arith.addf", acc, v, ft)
    lane_sum = e.fresh("r")
    e.emit(f"{lane_sum} = vector.reduction <add>, {acc} : {ft} into f32")
    return warp_sum(e, lane_sum)


def row_moments(e: Emitter, kind: str, vals: list[str], oks: list[str], length: int, epsilon: float,
                ft: str) -> tuple[str | None, str, list[str]]:
    """A layer_norm's or rms_norm's statistics of a warp's row held as f32 vectors `vals` of type ft (oks:
    which are inside the row): (the mean or None for rms_norm, the factor rsqrt(var + eps), the vectors to
    scale: deviations zeroed past the row, or the values)."""
    inv_n = e.const(1.0 / length)

    def splat(s_: str) -> str:
        n = e.fresh("b")
        e.emit(f"{n} = vector.broadcast {s_} : f32 to {ft}")
        return n

    if kind == "layer_norm":   # mean, then the variance of the deviations (zeroed past the row)
        mean = e.scalar("arith.mulf", inv_n, _row_sum(e, vals, ft))
        zero = e.fresh("z")
        e.emit(f"{zero} = arith.constant dense<0.0> : {ft}")
        devs = []
        for ok, xv in zip(oks, vals):
            d, m = e.op("arith.subf", xv, splat(mean), ft), e.fresh("d")
            e.emit(f"{m} = arith.select {ok}, {d}, {zero} : {ft}")
            devs.append(m)
        var = e.scalar("arith.mulf", inv_n, _row_sum(e, [e.op("arith.mulf", d, d, ft) for d in devs], ft))
        return mean, e.scalar("math.rsqrt", e.scalar("arith.addf", var, e.const(epsilon))), devs
    ms = e.scalar("arith.mulf", inv_n, _row_sum(e, [e.op("arith.mulf", v, v, ft) for v in vals], ft))   # rms_norm
    return None, e.scalar("math.rsqrt", e.scalar("arith.addf", ms, e.const(epsilon))), vals


def norm_statistics(e: Emitter, kind: str, epsilon: float, x: str, mt: str, rows: int, length: int, dtype: str,
                    warps: int, stats: str, stats_t: str, tid: str = "%tx") -> None:
    """A GEMV prologue (norm_matmul): the layer_norm/rms_norm statistics of the `rows` rows of x [rows, length]
    into stats [rows, 2] (shared: mean, or 0 for rms_norm, and rsqrt(var + eps)), warp w taking rows w,
    w + warps, ...; the caller puts a block barrier after. Computed as layer_norm's row kernel computes them,
    so the normalized rows round to the same values. tid: the block's linear thread id."""
    vec = 16 // (4 if dtype == "f32" else 2)
    warp, lane = e.div(tid, e.c(32)), e.rem(tid, e.c(32))
    for r in range(0, rows, warps):
        row = e.add(warp, e.c(r))
        row_ok = e.cmp("ult", row, e.c(rows))
        oks, _, vals = load_row(e, x, mt, None, e.op("arith.minui", row, e.c(rows - 1)), row_ok, length, vec, dtype,
                                tid)
        mean, factor, _ = row_moments(e, kind, vals, oks, length, epsilon, f"vector<{vec}xf32>")
        e.open(f"scf.if {e.both(row_ok, e.cmp('eq', lane, e.c(0)))} {{")
        e.emit(f"memref.store {mean or e.const(0.0)}, {stats}[{row}, {e.c(0)}] : {stats_t}")
        e.emit(f"memref.store {factor}, {stats}[{row}, {e.c(1)}] : {stats_t}")
        e.close()

def _warp_norm(e: Emitter, names, types, args, kind: str, rows: int, length: int, split: int, dtype: str,
               attrs: dict, vec: int) -> None:
    """layer_norm / rms_norm with a warp per row, the row in registers as `vec`-wide (16-byte) vectors
    (module docstring)."""
    one = e.c(1)
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-rows // WARP_ROWS))}, %gy = {one}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(32 * WARP_ROWS)}, %sy = {one}, %sz = {one}) {{")
    x, mt = _view(e, names[0], types[names[0]], split)
    out, _ = _view(e, names[-1], types[names[-1]], split)
    residual = _view(e, args["residual"], types[args["residual"]], split)[0] if "residual" in args else None
    params = {p: _view(e, args[p], types[args[p]], 0) for p in ("scale", "shift") if p in args}
    row = e.add(e.mul("%bx", e.c(WARP_ROWS)), e.div("%tx", e.c(32)))
    row_ok = e.cmp("ult", row, e.c(rows))
    ft = f"vector<{vec}xf32>"
    oks, cols, vals = load_row(e, x, mt, residual, row, row_ok, length, vec, dtype)

    def splat(s_: str) -> str:
        n = e.fresh("b")
        e.emit(f"{n} = vector.broadcast {s_} : f32 to {ft}")
        return n

    _, factor, centered = row_moments(e, kind, vals, oks, length, attrs["epsilon"], ft)
    factor = splat(factor)
    for ok, col, c in zip(oks, cols, centered):
        y = e.op("arith.mulf", c, factor, ft)
        for p, op in (("scale", "arith.mulf"), ("shift", "arith.addf")):
            if p in params:
                pv, pt = params[p]
                y = e.op(op, y, load_vec(e, ok, pv, pt, [col], vec, dtype), ft)
        e.open(f"scf.if {ok} {{")
        if dtype != "f32":
            narrow = e.fresh("t")
            e.emit(f"{narrow} = arith.truncf {y} : {ft} to vector<{vec}x{dtype}>")
            y = narrow
        e.emit(f"vector.store {y}, {out}[{row}, {col}] {{alignment = 16}} : {mt}, vector<{vec}x{dtype}>")
        e.close()


def row_kernel(name: str, signature: list[tuple[str, str]], kind: str, reduced: int, dtype: str,
               attrs: dict, given: tuple[bool, ...] = (True,)) -> str:
    """The kernel function (outline's signature: x, the optional operands present, out) of a row op over
    the last `reduced` dimensions; given = presence of each operand group of the op."""
    e = Emitter()
    names = [p for p, _ in signature]
    types = dict(signature)
    args = operand_args(kind, names, given)
    dims = _shape(types[names[0]])
    split = len(dims) - reduced
    rows, length = math.prod(dims[:split]), math.prod(dims[split:])
    vec = 16 // (4 if dtype == "f32" else 2)
    if kind in NORM_OPERANDS and length % vec == 0 and length // vec <= 32 * SLOTS:
        _warp_norm(e, names, types, args, kind, rows, length, split, dtype, attrs, vec)
        return e.function(name, signature)
    T = _threads(length)
    one = e.c(1)
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(rows)}, %gy = {one}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(T)}, %sy = {one}, %sz = {one}) {{")
    x, mt = _view(e, names[0], types[names[0]], split)
    out, _ = _view(e, names[-1], types[names[-1]], split)
    rows_in = [x] + ([_view(e, args["residual"], types[args["residual"]], split)[0]] if "residual" in args else [])

    def load(e, i):
        """x[row, i] (+ residual[row, i]) in f32."""
        vals = []
        for buf in rows_in:
            v = e.fresh("x")
            e.emit(f"{v} = memref.load {buf}[%bx, {i}] : {mt}")
            vals.append(e.to_f32(v, dtype))
        return vals[0] if len(vals) == 1 else e.scalar("arith.addf", *vals)

    params = {p: _view(e, args[p], types[args[p]], 0) for p in ("scale", "shift") if p in args}

    def affine(e, i, y, ops):
        """y [op param[i]] for each (operand, op) of `ops` that is present."""
        for p, op in ops:
            if p in params:
                pv, pt = params[p]
                v = e.fresh("p")
                e.emit(f"{v} = memref.load {pv}[{i}] : {pt}")
                y = e.scalar(op, y, e.to_f32(v, dtype))
        return y

    def store(e, i, v):
        e.emit(f"memref.store {e.from_f32(v, dtype)}, {out}[%bx, {i}] : {mt}")

    if kind in ("softmax", "log_softmax"):
        mx = _all_reduce(e, "maximumf", _row_loop(e, length, T, e.const(-math.inf),
                                                 lambda e, i, a: e.scalar("arith.maximumf", a, load(e, i))))
        def sum_exp(e, i, a):  # noqa: E306
            return e.scalar("arith.addf", a, e.scalar("math.exp", e.scalar("arith.subf", load(e, i), mx)))
        total = _all_reduce(e, "add", _row_loop(e, length, T, e.const(0.0), sum_exp))
        if kind == "softmax":
            inv = e.scalar("arith.divf", e.const(1.0), total)
            _row_loop(e, length, T, None, lambda e, i, _: store(
                e, i, e.scalar("arith.mulf", e.scalar("math.exp", e.scalar("arith.subf", load(e, i), mx)), inv)))
        else:
            shift = e.scalar("arith.addf", mx, e.scalar("math.log", total))
            _row_loop(e, length, T, None, lambda e, i, _: store(e, i, e.scalar("arith.subf", load(e, i), shift)))
    elif kind == "rms_norm":  # mean of squares; y = x rsqrt(ms + eps) [* scale]
        def square(e, i, a):
            v = load(e, i)
            return e.scalar("math.fma", v, v, a)
        ms = e.scalar("arith.mulf", e.const(1.0 / length), _all_reduce(e, "add", _row_loop(
            e, length, T, e.const(0.0), square)))
        rms_inv = e.scalar("math.rsqrt", e.scalar("arith.addf", ms, e.const(attrs["epsilon"])))
        _row_loop(e, length, T, None, lambda e, i, _: store(
            e, i, affine(e, i, e.scalar("arith.mulf", load(e, i), rms_inv), [("scale", "arith.mulf")])))
    else:  # layer_norm: mean, then variance from the deviations (two passes: no cancellation)
        inv_n = e.const(1.0 / length)
        mean = e.scalar("arith.mulf", inv_n, _all_reduce(e, "add", _row_loop(
            e, length, T, e.const(0.0), lambda e, i, a: e.scalar("arith.addf", a, load(e, i)))))

        def sq(e, i, a):
            d = e.scalar("arith.subf", load(e, i), mean)
            return e.scalar("math.fma", d, d, a)
        var = e.scalar("arith.mulf", inv_n, _all_reduce(e, "add", _row_loop(e, length, T, e.const(0.0), sq)))
        rstd = e.scalar("math.rsqrt", e.scalar("arith.addf", var, e.const(attrs["epsilon"])))
        _row_loop(e, length, T, None, lambda e, i, _: store(e, i, affine(
            e, i, e.scalar("arith.mulf", e.scalar("arith.subf", load(e, i), mean), rstd),
            [("scale", "arith.mulf"), ("shift", "arith.addf")])))
    return e.function(name, signature)


UNROLL = 8        # independent loads in flight per thread in reduce_rows' main loop
ALL_REDUCE = {"arith.addf": "add", "arith.maximumf": "maximumf", "arith.minimumf": "minimumf"}


def reduce_rows(name: str, signature: list[tuple[str, str]], kind: str, reduced: int, dtype: str) -> str:
    """prim.reduce over the last `reduced` dims of x (signature: x, out with the kept dims, unit dims
    allowed): a block per row, each thread combining x[row, tx + k T] in f32, UNROLL independent loads an
    iteration and then the ragged end, then gpu.all_reduce; thread 0 stores (mean: the sum / length)."""
    (x_name, x_t), (out_name, out_t) = signature
    dims = _shape(x_t)
    split = len(dims) - reduced
    rows, length = math.prod(dims[:split]), math.prod(dims[split:])
    scalar_op, identity = REDUCE_COMBINE[kind], REDUCE_INIT[kind]
    T = 32 if length <= 64 else 128 if length <= 1024 else 256 if length <= 8192 else 1024
    e = Emitter()
    one = e.c(1)
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(rows)}, %gy = {one}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(T)}, %sy = {one}, %sz = {one}) {{")
    x, mt = _view(e, x_name, x_t, split)
    out, ot = collapse_at(e, out_name, out_t, []) if _shape(out_t) else (out_name, out_t)   # 0-d: a total
    at = "%bx" if _shape(out_t) else ""

    def load(i: str) -> str:
        v = e.fresh("x")
        e.emit(f"{v} = memref.load {x}[{f'%bx, {i}' if split else i}] : {mt}")   # split 0: one row, [length]
        return e.to_f32(v, dtype)

    acc, full = e.const(identity), length - length % (T * UNROLL)
    if full:
        res, base, a = e.fresh("red"), e.fresh("i"), e.fresh("a")
        e.open(f"{res} = scf.for {base} = {e.c(0)} to {e.c(full)} step {e.c(T * UNROLL)} "
               f"iter_args({a} = {acc}) -> (f32) {{")
        start = e.add(base, "%tx")
        values = [load(e.add(start, e.c(k * T)) if k else start) for k in range(UNROLL)]
        while len(values) > 1:    # a tree: the loads stay independent of one another
            values = [e.scalar(scalar_op, *values[j:j + 2]) if j + 1 < len(values) else values[j]
                      for j in range(0, len(values), 2)]
        e.emit(f"scf.yield {e.scalar(scalar_op, a, values[0])} : f32")
        e.close()
        acc = res
    if full < length:
        res, i, a = e.fresh("red"), e.fresh("i"), e.fresh("a")
        e.open(f"{res} = scf.for {i} = {e.add(e.c(full), '%tx')} to {e.c(length)} step {e.c(T)} "
               f"iter_args({a} = {acc}) -> (f32) {{")
        e.emit(f"scf.yield {e.scalar(scalar_op, a, load(i))} : f32")
        e.close()
        acc = res
    total = _all_reduce(e, ALL_REDUCE[scalar_op], acc)
    if kind == "mean":
        total = e.scalar("arith.mulf", total, e.const(1.0 / length))
    e.open(f"scf.if {e.cmp('eq', '%tx', e.c(0))} {{")
    e.emit(f"memref.store {e.from_f32(total, dtype)}, {out}[{at}] : {ot}")
    e.close()
    return e.function(name, signature)

"""Sums per channel over every row of a channels-last map on GPUs: batch norm's training statistics and its
backward.

Both reduce a map viewed as [M = N H W, C] to a few numbers per channel. The reference lowering gives one
thread per channel that walks all M rows (ResNet-50's first batch norm at batch 32: 64 threads, one block,
401,408 rows each; its training step took 0.3 s on the H100 against eager's 15 ms). Here the rows are split
across blocks and the channels across lanes, as global_avg_pool does (pool.py), in two launches:

    launch 1  grid (channel chunks, S row splits), block (CT channel lanes, PT row lanes):
        c = V channels of lane tx (16-byte vectors where C allows)
        for each group of UNROLL rows of lane ty in the split (UNROLL loads in flight, the last split's
        ragged end read at a clamped row and zeroed):  acc_t += term_t(row, c)       T f32 sums
        tree over ty in shared memory; row 0 writes part[split, t, c:c+V]           (scratch, f32)
    launch 2  the same kernel over part [S, T, C]: one split, FINAL_LANES vectors a block, then `finish` per
              channel vector

    batch_norm_statistics  terms d = x - x[0, c] and d^2 (shifted sums: no cancellation where |mean| >>
                           std); mean = x[0, c] + sum(d) / M, inv_std = rsqrt(sum(d^2) / M - (sum(d) / M)^2
                           + eps); out [2, C] = (mean, inv_std)
    batch_norm_backward    terms dy and dy (x - mean); finish: k1 = scale inv_std, k2 = k1 sum(dy) / M,
                           k3 = k1 inv_std^2 sum(dy (x - mean)) / M into coef [3, C] (scratch); launch 3,
                           elementwise over the map: dx = k1 dy - k2 - k3 (x - mean). Given its sums
                           operand (batch_norm_backward_sums'), launch 3 alone, the k from the sums
    batch_norm_backward_sums  the same terms; finish: the two totals into out [2, C] (the shift's and the
                           scale's gradients, the latter before its inv_std factor)
    reduce                 sum or mean over every dim but the last (the scale, shift and bias gradients)

The partial sums go through scratch and a second launch rather than atomics: no zeroing launch, and the
result does not depend on the order in which blocks finish. Arithmetic is f32 for every dtype.
"""
from __future__ import annotations

import math

from ..irtext import flit
from .gemm import WG, Emitter, _shape, collapse_at
from .pool import ITEM, THREADS, UNROLL, GlobalPoolPlan, halvings
from .rows import warp_sum

DTYPES = tuple(ITEM)
# The first launch's splits aim at SUM_BLOCKS blocks (2-4 a multiprocessor), the second launch's blocks take
# FINAL_LANES channel vectors each: the second reads every split's partials, and with global_avg_pool's
# 1024 splits and 128 lanes a block it was one block reading megabytes (ResNet-50's training step on the
# H100: 2.0 ms of batch_norm_backward_sums and 2.8 of batch_norm_backward, 15-27% of the bandwidth).
SUM_BLOCKS = 512
FINAL_LANES = 8


def _dtype(mtype: str) -> str:
    return mtype.rsplit("x", 1)[1][:-1]


class _Sums:
    """Emits column-sum launches over [rows, C] views into one Emitter (module docstring)."""

    def __init__(self, e: Emitter):
        self.e = e

    def const(self, value: float, width: int) -> str:
        n = self.e.fresh("k")
        self.e.emit(f"{n} = arith.constant dense<{flit(value)}> : vector<{width}xf32>")
        return n

    def load(self, memref: str, mtype: str, idx: list[str], width: int) -> str:
        """vector<width x f32> of memref[idx...] (widened from its dtype)."""
        e, dtype = self.e, _dtype(mtype)
        raw = e.fresh("l")
        e.emit(f"{raw} = vector.load {memref}[{', '.join(idx)}] {{alignment = {width * ITEM[dtype]}}} : {mtype}, "
               f"vector<{width}x{dtype}>")
        if dtype == "f32":
            return raw
        wide = e.fresh("w")
        e.emit(f"{wide} = arith.extf {raw} : vector<{width}x{dtype}> to vector<{width}xf32>")
        return wide

    def store(self, value: str, memref: str, mtype: str, idx: list[str], width: int) -> None:
        e, dtype = self.e, _dtype(mtype)
        if dtype != "f32":
            narrow = e.fresh("n")
            e.emit(f"{narrow} = arith.truncf {value} : vector<{width}xf32> to vector<{width}x{dtype}>")
            value = narrow
        e.emit(f"vector.store {value}, {memref}[{', '.join(idx)}] {{alignment = {width * ITEM[dtype]}}} : {mtype}, "
               f"vector<{width}x{dtype}>")

    def vop(self, name: str, width: int, *xs: str) -> str:
        n = self.e.fresh("f")
        self.e.emit(f"{n} = {name} {', '.join(xs)} : vector<{width}xf32>")
        return n

    def launch(self, plan: GlobalPoolPlan, terms: int, load_terms, done) -> None:
        """One launch summing `terms` f32 terms per channel over the plan's p rows of c channels (as
        global_avg_pool splits one image, pool.GlobalPoolPlan): load_terms(row, c) -> [T vectors of plan.vec
        lanes]; done(totals, c, split index) stores them."""
        e = self.e
        rows, width, splits = plan.p, plan.vec, plan.splits
        cv_count, chunks, ct, pt = plan.c // width, plan.chunks, plan.lanes, plan.rows
        span = plan.groups * UNROLL * pt
        ft = f"vector<{width}xf32>"
        red_t = f"memref<{terms}x{pt}x{ct * width}xf32, {WG}>"
        one = e.c(1)
        e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(chunks)}, %gy = {e.c(splits)}, %gz = {one}) "
               f"threads(%tx, %ty, %tz) in (%sx = {e.c(ct)}, %sy = {e.c(pt)}, %sz = {one}) "
               f"workgroup(%red : {red_t}) {{")
        cv = e.add(e.mul("%bx", e.c(ct)), "%tx")
        c = e.mul(e.op("arith.minui", cv, e.c(cv_count - 1)), e.c(width))   # lanes past C read the last vector
        start = e.add(e.mul("%by", e.c(span)), "%ty")
        zero = self.const(0.0, width)
        accs = [e.fresh("acc") for _ in range(terms)]
        step, loop = e.fresh("s"), e.fresh("sum")
        e.open(f"{loop}:{terms} = scf.for {step} = {e.c(0)} to {e.c(plan.groups)} step {one} iter_args("
               + ", ".join(f"{a} = {zero}" for a in accs) + f") -> ({', '.join([ft] * terms)}) {{")
        base = e.add(start, e.mul(step, e.c(UNROLL * pt)))
        ragged = splits * span > rows
        per_term = [[] for _ in range(terms)]
        for u in range(UNROLL):
            r = e.add(base, e.c(u * pt))
            at = e.op("arith.minui", r, e.c(rows - 1)) if ragged else r
            inside = e.cmp("ult", r, e.c(rows)) if ragged else None
            for t, v in enumerate(load_terms(at, c)):
                if inside:
                    m = e.fresh("m")
                    e.emit(f"{m} = arith.select {inside}, {v}, {zero} : {ft}")
                    v = m
                per_term[t].append(v)
        sums = []
        for t, loads in enumerate(per_term):
            while len(loads) > 1:             # a tree: the adds do not wait on each other
                loads = [self.vop("arith.addf", width, loads[i], loads[i + 1]) if i + 1 < len(loads) else loads[i]
                         for i in range(0, len(loads), 2)]
            sums.append(self.vop("arith.addf", width, accs[t], loads[0]))
        e.emit(f"scf.yield {', '.join(sums)} : {', '.join([ft] * terms)}")
        e.close()
        col = e.mul("%tx", e.c(width))
        for t in range(terms):
            e.emit(f"vector.store {loop}#{t}, %red[{e.c(t)}, %ty, {col}] : {red_t}, {ft}")
        e.emit("gpu.barrier")
        for dist, below in halvings(pt):
            e.open(f"scf.if {e.cmp('ult', '%ty', e.c(below))} {{")
            other = e.add("%ty", e.c(dist))
            for t in range(terms):
                a, b = e.fresh("r"), e.fresh("r")
                e.emit(f"{a} = vector.load %red[{e.c(t)}, %ty, {col}] : {red_t}, {ft}")
                e.emit(f"{b} = vector.load %red[{e.c(t)}, {other}, {col}] : {red_t}, {ft}")
                e.emit(f"vector.store {self.vop('arith.addf', width, a, b)}, %red[{e.c(t)}, %ty, {col}] : {red_t}, {ft}")
            e.close()
            e.emit("gpu.barrier")
        e.open(f"scf.if {e.both(e.cmp('eq', '%ty', e.c(0)), e.cmp('ult', cv, e.c(cv_count)))} {{")
        totals = []
        for t in range(terms):
            total = e.fresh("t")
            e.emit(f"{total} = vector.load %red[{e.c(t)}, %ty, {col}] : {red_t}, {ft}")
            totals.append(total)
        done(totals, c, "%by")
        e.close()
        e.emit("gpu.terminator")
        e.close()

    def reduce(self, plan: GlobalPoolPlan, terms: int, load_terms, finish) -> None:
        """Both launches: the partial sums of plan's splits into scratch, then their totals (over the splits
        as rows of f32, one split) to finish(totals, c, width)."""
        e = self.e
        part, part_t = e.fresh("part"), f"memref<{plan.splits}x{terms}x{plan.c}xf32>"
        e.emit(f"{part} = memref.alloc() {{alignment = 64 : i64}} : {part_t}")

        def partial(totals, c, split):
            for t, total in enumerate(totals):
                e.emit(f"vector.store {total}, {part}[{split}, {e.c(t)}, {c}] : {part_t}, vector<{plan.vec}xf32>")
        self.launch(plan, terms, load_terms, partial)
        final = GlobalPoolPlan(1, plan.splits, plan.c, "f32", split=False, most_lanes=FINAL_LANES)

        def load_partials(row, c):
            return [self.load(part, part_t, [row, e.c(t), c], final.vec) for t in range(terms)]
        self.launch(final, terms, load_partials, lambda totals, c, _: finish(totals, c, final.vec))


def statistics_kernel(name: str, signature: list[tuple[str, str]], epsilon: float) -> str | None:
    """batch_norm_statistics of an NHWC map (signature: x [N, H, W, C], out [2, C])."""
    (x, x_t), (out, out_t) = signature
    if _dtype(x_t) not in DTYPES or _dtype(out_t) not in DTYPES:
        return None
    dims = _shape(x_t)
    C, M = dims[-1], math.prod(dims[:-1])
    e = Emitter()
    s = _Sums(e)
    flat, flat_t = collapse_at(e, x, x_t, [len(dims) - 1])
    plan = GlobalPoolPlan(1, M, C, _dtype(x_t), blocks=SUM_BLOCKS)
    V = plan.vec

    def terms(row, c):
        shift = s.load(flat, flat_t, [e.c(0), c], V)
        d = s.vop("arith.subf", V, s.load(flat, flat_t, [row, c], V), shift)
        return [d, s.vop("arith.mulf", V, d, d)]

    def finish(totals, c, w):
        inv_m = s.const(1.0 / M, w)
        mean_d = s.vop("arith.mulf", w, totals[0], inv_m)
        var = s.vop("arith.subf", w, s.vop("arith.mulf", w, totals[1], inv_m), s.vop("arith.mulf", w, mean_d, mean_d))
        var = s.vop("arith.maximumf", w, var, s.const(0.0, w))
        inv_std = e.fresh("f")
        e.emit(f"{inv_std} = math.rsqrt {s.vop('arith.addf', w, var, s.const(float(epsilon), w))} : vector<{w}xf32>")
        mean = s.vop("arith.addf", w, s.load(flat, flat_t, [e.c(0), c], w), mean_d)
        s.store(mean, out, out_t, [e.c(0), c], w)
        s.store(inv_std, out, out_t, [e.c(1), c], w)

    s.reduce(plan, 2, terms, finish)
    return _function(name, signature, e)


def reduce_kernel(name: str, signature: list[tuple[str, str]], kind: str, axes) -> str | None:
    """A sum or mean over every dim but one contiguous run of them (signature: x, out [C] or with kept unit
    dims): a batch norm's scale and shift gradients, a bias gradient. Kept dims last (channels-last maps):
    the row sums of [rows, C]. Kept dims before others (an NCHW map's [N, C, H, W] over 0, 2 and 3: x viewed
    as [A, C, B]): first a warp per row of [A C, B] sums its B contiguous values into f32 scratch [A, C],
    then the same row sums over that."""
    (x, x_t), (out, out_t) = signature
    dims = _shape(x_t)
    kept = [d for d in range(len(dims)) if d not in {a % len(dims) for a in axes}]
    if kind not in ("sum", "mean") or not kept or kept != list(range(kept[0], kept[-1] + 1)) \
            or _dtype(x_t) not in DTYPES or _dtype(out_t) not in DTYPES:
        return None
    A, C, B = (math.prod(dims[:kept[0]]), math.prod(dims[kept[0]:kept[-1] + 1]), math.prod(dims[kept[-1] + 1:]))
    if A * B == 1:
        return None                       # nothing reduced: a copy
    e = Emitter()
    s = _Sums(e)
    y, y_t = collapse_at(e, out, out_t, [])
    if B == 1:
        rows, rows_t = collapse_at(e, x, x_t, [kept[0]])
    else:
        rows, rows_t = "%rowsum", f"memref<{A}x{C}xf32>"
        e.emit(f"{rows} = memref.alloc() {{alignment = 64 : i64}} : {rows_t}")
        _warp_row_sums(e, *collapse_at(e, x, x_t, [kept[-1] + 1]), A * C, B, rows, rows_t)

    def finish(totals, c, w):
        total = s.vop("arith.mulf", w, totals[0], s.const(1.0 / (A * B), w)) if kind == "mean" else totals[0]
        s.store(total, y, y_t, [c], w)

    plan = GlobalPoolPlan(1, A, C, _dtype(rows_t), blocks=SUM_BLOCKS)
    s.reduce(plan, 1, lambda row, c: [s.load(rows, rows_t, [row, c], plan.vec)], finish)
    return _function(name, signature, e)


WARP_ROWS = 8     # rows (a warp each) per block of _warp_row_sums


def _warp_row_sums(e: Emitter, x: str, x_t: str, rows: int, length: int, out: str, out_t: str) -> None:
    """out (f32 [A, C], rows = A C of them) = the sums of x's rows ([rows, length]): a warp per row, its lanes
    reading consecutive values (every lane runs the loop: rows past the end read the last row, unstored)."""
    dtype = _dtype(x_t)
    one = e.c(1)
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-rows // WARP_ROWS))}, %gy = {one}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(32)}, %sy = {e.c(WARP_ROWS)}, %sz = {one}) {{")
    row = e.add(e.mul("%bx", e.c(WARP_ROWS)), "%ty")
    at = e.op("arith.minui", row, e.c(rows - 1))
    acc, i, total = e.fresh("a"), e.fresh("i"), e.fresh("t")
    zero = e.const(0.0)
    e.open(f"{total} = scf.for {i} = %tx to {e.c(length)} step {e.c(32)} iter_args({acc} = {zero}) -> (f32) {{")
    v = e.fresh("x")
    e.emit(f"{v} = memref.load {x}[{at}, {i}] : {x_t}")
    e.emit(f"scf.yield {e.scalar('arith.addf', acc, e.to_f32(v, dtype))} : f32")
    e.close()
    total = warp_sum(e, total)
    e.open(f"scf.if {e.both(e.cmp('eq', '%tx', e.c(0)), e.cmp('ult', row, e.c(rows)))} {{")
    e.emit(f"memref.store {total}, {out}[{e.div(row, e.c(_shape(out_t)[1]))}, {e.rem(row, e.c(_shape(out_t)[1]))}] "
           f": {out_t}")
    e.close()
    e.emit("gpu.terminator")
    e.close()


def _function(name: str, signature: list[tuple[str, str]], e: Emitter) -> str:
    sig = ", ".join(f"{p}: {ty}" for p, ty in signature)
    return f"func.func @{name}({sig}) {{\n" + "\n".join(e.lines) + "\n    return\n}"


def _backward_terms(s: _Sums, dy, x, mean, vec: int):
    """The two terms of batch norm's backward sums at (row, c): dy and dy (x - mean)."""
    def terms(row, c):
        g = s.load(*dy, [row, c], vec)
        centred = s.vop("arith.subf", vec, s.load(*x, [row, c], vec), s.load(*mean, [c], vec))
        return [g, s.vop("arith.mulf", vec, g, centred)]
    return terms


def backward_sums_kernel(name: str, signature: list[tuple[str, str]]) -> str | None:
    """batch_norm_backward_sums of NHWC maps (signature: dy, x [N, H, W, C], saved_mean [C], out [2, C]):
    the backward kernel's two launches of sums, their totals stored as they are."""
    (dy, dy_t), (x, x_t), mean, (out, out_t) = signature
    if any(_dtype(t) not in DTYPES for _, t in signature):
        return None
    dims = _shape(x_t)
    e = Emitter()
    s = _Sums(e)
    cut = [len(dims) - 1]
    plan = GlobalPoolPlan(1, math.prod(dims[:-1]), dims[-1], _dtype(x_t), blocks=SUM_BLOCKS)

    def finish(totals, c, w):
        for t, total in enumerate(totals):
            s.store(total, out, out_t, [e.c(t), c], w)

    s.reduce(plan, 2, _backward_terms(s, collapse_at(e, dy, dy_t, cut), collapse_at(e, x, x_t, cut), mean,
                                      plan.vec), finish)
    return _function(name, signature, e)


def backward_kernel(name: str, signature: list[tuple[str, str]]) -> str | None:
    """batch_norm_backward of NHWC maps (signature: dy, x [N, H, W, C], scale, saved_mean, saved_inv_std [C],
    optionally sums [2, C], dx [N, H, W, C]). With the sums given (batch_norm_backward_sums made them for
    the scale and shift gradients) only the elementwise launch runs, its coefficients computed per thread
    from them: one pass over dy and x, not two."""
    (dy, dy_t), (x, x_t), (scale, scale_t), (mean, mean_t), (inv, inv_t), *given, (dx, dx_t) = signature
    if any(_dtype(t) not in DTYPES for _, t in signature):
        return None
    dims = _shape(x_t)
    C, M = dims[-1], math.prod(dims[:-1])
    e = Emitter()
    s = _Sums(e)
    cut = [len(dims) - 1]
    (dyf, dyf_t), (xf, xf_t), (dxf, dxf_t) = (collapse_at(e, a, t, cut) for a, t in ((dy, dy_t), (x, x_t), (dx, dx_t)))
    plan = GlobalPoolPlan(1, M, C, _dtype(x_t), blocks=SUM_BLOCKS)
    V = plan.vec

    def coefficients(totals, c, w):
        """k1 = scale inv_std, k2 = k1 sum(dy) / M, k3 = k1 inv_std^2 sum(dy (x - mean)) / M."""
        inv_m = s.const(1.0 / M, w)
        istd = s.load(inv, inv_t, [c], w)
        k1 = s.vop("arith.mulf", w, s.load(scale, scale_t, [c], w), istd)
        k2 = s.vop("arith.mulf", w, k1, s.vop("arith.mulf", w, totals[0], inv_m))
        k3 = s.vop("arith.mulf", w, s.vop("arith.mulf", w, k1, s.vop("arith.mulf", w, istd, istd)),
                   s.vop("arith.mulf", w, totals[1], inv_m))
        return k1, k2, k3

    if not given:
        coef_t = f"memref<3x{C}xf32>"
        e.emit(f"%coef = memref.alloc() {{alignment = 64 : i64}} : {coef_t}")

        def finish(totals, c, w):
            for t, k in enumerate(coefficients(totals, c, w)):
                s.store(k, "%coef", coef_t, [e.c(t), c], w)
        s.reduce(plan, 2, _backward_terms(s, (dyf, dyf_t), (xf, xf_t), (mean, mean_t), V), finish)
    # the elementwise launch: dx = k1 dy - k2 - k3 (x - mean), a thread per V channels of a row
    cv_count = C // V
    lin = e.open_elementwise_launch(M * cv_count, THREADS)
    row, c = e.div(lin, e.c(cv_count)), e.mul(e.rem(lin, e.c(cv_count)), e.c(V))
    if given:
        sums, sums_t = given[0]
        k1, k2, k3 = coefficients([s.load(sums, sums_t, [e.c(t), c], V) for t in range(2)], c, V)
    else:
        k1, k2, k3 = (s.load("%coef", coef_t, [e.c(t), c], V) for t in range(3))
    centred = s.vop("arith.subf", V, s.load(xf, xf_t, [row, c], V), s.load(mean, mean_t, [c], V))
    g = s.vop("arith.mulf", V, k1, s.load(dyf, dyf_t, [row, c], V))
    s.store(s.vop("arith.subf", V, s.vop("arith.subf", V, g, k2), s.vop("arith.mulf", V, k3, centred)),
            dxf, dxf_t, [row, c], V)
    e.close()
    e.emit("gpu.terminator")
    e.emit("}")
    return _function(name, signature, e)

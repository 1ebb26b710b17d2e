"""Pooling for GPUs (NHWC): max_pool2d / avg_pool2d in one pass, and global_avg_pool at memory speed.

max_pool2d / avg_pool2d. The reference semantics pool over strided views of a padded copy of the input:
on a GPU that is three launches (fill, copy, window) and two extra passes over memory. Here one thread
computes one output element (channels fastest, so neighbouring threads read neighbouring addresses): the
kh x kw window is unrolled, each tap loaded only when it lies inside the image, and avg_pool's divisor
is computed from the clipped window (PyTorch's count_include_pad and ceil_mode rules).

global_avg_pool [N, H, W, C] -> [N, 1, 1, C]. The generic grid mapping gives a thread per (n, c) that
sums H*W values serially: N*C threads (1024 for a squeeze-and-excitation pool at batch 32 over 32
channels) each reading with a stride of C elements. Measured on the H200, [32, 112, 112, 32] f16 took
2.07 ms for 25.7 MB (EfficientNet-B0's first SE pool). Here the pixels are split across blocks too, and
each block reads whole channel rows (x viewed as [N, H*W, C], channels contiguous):

    launch 1  grid (channel chunks, pixel splits S, N), block (CT channel lanes, PT pixel lanes):
        c = V channels of lane tx (one 16-byte vector where C allows: 8 x f16/bf16, 4 x f32)
        for each group of UNROLL pixels of lane ty in the block's pixel range (UNROLL loads in flight):
            acc += x[n, p, c:c+V]        a warp reads consecutive vectors of consecutive pixels
        red[ty][c] = acc; barrier; tree over ty in shared memory (a barrier per halving)
        S = 1: y[n, c:c+V] = red[0][c] / (H*W)        else: part[n, split, c:c+V] = red[0][c]  (f32)
    launch 2  (S > 1 only) a thread per V channels of an image: y[n, c:c+V] = sum over S of part / (H*W)

The splits are chosen to give about BLOCKS blocks (8 resident 256-thread blocks on each of an H200's 132
SMs), each pixel range a whole number of UNROLL * PT groups, so only the last split has a ragged end;
there, loads go to a clamped (legal) pixel and a select zeroes them, so no load waits on a branch. The
partial sums go through a scratch buffer (the plan's scratch area, see backends/gpu_common.launches) and a
second launch rather than atomics: no zeroing launch, and the result does not depend on the order in
which blocks finish. Accumulation is f32 for every dtype, rounded once at the store. NCHW pools
(prim-select's layout=keep; by default every pool runs NHWC) keep the generic lowering.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .gemm import WG, Emitter, collapse_at

THREADS = 256
ITEM = {"f32": 4, "f16": 2, "bf16": 2}
LANES = 128            # global_avg_pool: most channel vectors one block covers
UNROLL = 4             # pixels each thread loads per loop step (independent loads in flight)
BLOCKS = 1024          # blocks the pixel splits aim for


def pool_kernel(name: str, signature: list[tuple[str, str]], kind: str, attrs: dict, shape, dtype: str) -> str:
    (src, src_t), (dst, dst_t) = signature
    N, OH, OW, C = shape
    H, W = (int(d) for d in src_t[len("memref<"):].split("x")[1:3])
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["strides"]
    dh, dw = attrs.get("dilations", (1, 1))
    pt, pl, pb, pr = attrs["padding"]
    total = N * OH * OW * C
    e = Emitter()
    lin = e.open_elementwise_launch(total, THREADS)
    c = e.rem(lin, e.c(C))
    pix = e.div(lin, e.c(C))
    ow, rest = e.rem(pix, e.c(OW)), e.div(pix, e.c(OW))
    oh, n = e.rem(rest, e.c(OH)), e.div(rest, e.c(OH))
    hs = e.op("arith.subi", e.mul(oh, e.c(sh)), e.c(pt))
    ws = e.op("arith.subi", e.mul(ow, e.c(sw)), e.c(pl))
    acc = e.const(-math.inf if kind == "max" else 0.0)
    for r in range(kh):
        ih = e.add(hs, e.c(r * dh))
        hok = e.both(e.cmp("sge", ih, e.c(0)), e.cmp("slt", ih, e.c(H)))
        for s in range(kw):
            iw = e.add(ws, e.c(s * dw))
            ok = e.both(hok, e.both(e.cmp("sge", iw, e.c(0)), e.cmp("slt", iw, e.c(W))))
            v = e.fresh("t")
            e.emit(f"{v} = scf.if {ok} -> (f32) {{")
            raw = e.fresh("x")
            e.emit(f"  {raw} = memref.load {src}[{n}, {ih}, {iw}, {c}] : {src_t}")
            e.emit(f"  scf.yield {e.to_f32(raw, dtype)} : f32")
            e.emit("} else {")
            e.emit(f"  scf.yield {acc if kind == 'max' else e.const(0.0)} : f32")
            e.emit("}")
            acc = e.scalar("arith.maximumf" if kind == "max" else "arith.addf", acc, v)
    if kind == "avg":  # divisor: the window clipped to the padded extent (or to the image without the pads)
        def count(start, k, size, p1):
            end = e.op("arith.minsi", e.add(start, e.c(k)), e.c(size + p1))
            if not attrs["count_include_pad"]:
                start, end = e.op("arith.maxsi", start, e.c(0)), e.op("arith.minsi", end, e.c(size))
            return e.op("arith.subi", end, start)
        cnt = e.mul(count(hs, kh, H, pb), count(ws, kw, W, pr))
        as_int = e.fresh("ci")
        e.emit(f"{as_int} = arith.index_cast {cnt} : index to i32")
        f = e.fresh("cf")
        e.emit(f"{f} = arith.sitofp {as_int} : i32 to f32")
        acc = e.scalar("arith.divf", acc, f)
    e.emit(f"memref.store {e.from_f32(acc, dtype)}, {dst}[{n}, {oh}, {ow}, {c}] : {dst_t}")
    e.close()
    return e.function(name, signature)


def _dims(mtype: str) -> list[int]:
    return [int(d) for d in mtype[len("memref<"):].split("x")[:-1]]


@dataclass(frozen=True)
class GlobalPoolPlan:
    """How global_avg_pool over [N, P = H*W, C] is split: V channels a thread, CT channel lanes and PT
    pixel lanes a block, `chunks` blocks across the channels, `splits` across the pixels, each split
    `groups` loop steps of UNROLL * PT pixels; split=False: one split (channel_sums.py's final launch)."""
    n: int
    p: int
    c: int
    dtype: str
    split: bool = True
    blocks: int = BLOCKS       # the blocks the pixel splits aim for
    most_lanes: int = LANES    # the most channel vectors one block covers

    @property
    def vec(self) -> int:
        return next(v for v in (8, 4, 2, 1) if v * ITEM[self.dtype] <= 16 and self.c % v == 0)

    @property
    def chunks(self) -> int:
        return -(-(self.c // self.vec) // self.most_lanes)

    @property
    def lanes(self) -> int:
        """CT: the channel vectors of one chunk (the chunks as even as they can be)."""
        return -(-(self.c // self.vec) // self.chunks)

    @property
    def rows(self) -> int:
        """PT: pixel lanes, filling THREADS threads a block."""
        return max(1, THREADS // self.lanes)

    @property
    def groups(self) -> int:
        """Loop steps per split: the splits aim at BLOCKS blocks in all."""
        steps = -(-self.p // (UNROLL * self.rows))
        if not self.split:
            return steps
        want = -(-self.blocks // (self.n * self.chunks))
        return -(-steps // want)

    @property
    def splits(self) -> int:
        return -(-self.p // (self.groups * UNROLL * self.rows))


def halvings(rows: int) -> list[tuple[int, int]]:
    """The steps of a tree sum over `rows` rows of shared memory down to row 0: (distance, rows below it that
    add the row `distance` further), a barrier after each; a first uneven step where rows is no power of 2."""
    half = 1 << (rows.bit_length() - 1)
    return ([(half, rows - half)] if half < rows else []) + [(s, s) for s in (half >> k for k in range(1, 16)) if s]


def global_pool_kernel(name: str, signature: list[tuple[str, str]], dtype: str) -> str | None:
    """The kernel function (outline's signature: x [N, H, W, C], out [N, 1, 1, C]) of an NHWC
    global_avg_pool; None for other dtypes."""
    if dtype not in ITEM:
        return None
    (src, src_t), (dst, dst_t) = signature
    N, H, W, C = _dims(src_t)
    plan = GlobalPoolPlan(N, H * W, C, dtype)
    P, V, CT, PT, S = plan.p, plan.vec, plan.lanes, plan.rows, plan.splits
    span = plan.groups * UNROLL * PT           # pixels of one split
    CV = C // V
    vt, ft = f"vector<{V}x{dtype}>", f"vector<{V}xf32>"
    align = f"{{alignment = {V * ITEM[dtype]}}}"
    red_t = f"memref<{PT}x{CT * V}xf32, {WG}>"
    x_t, y_t, part_t = f"memref<{N}x{P}x{C}x{dtype}>", f"memref<{N}x{C}x{dtype}>", f"memref<{N}x{S}x{C}xf32>"
    e = Emitter()
    x, y = collapse_at(e, src, src_t, [1, 3])[0], collapse_at(e, dst, dst_t, [3])[0]
    if S > 1:
        e.emit(f"%part = memref.alloc() {{alignment = 64 : i64}} : {part_t}")

    def vec_const(v: float) -> str:
        n = e.fresh("k")
        e.emit(f"{n} = arith.constant dense<{v!r}> : {ft}")
        return n

    def vadd(a: str, b: str) -> str:
        return e.op("arith.addf", a, b, ft)

    def store_mean(total: str, n: str, c: str) -> None:
        """y[n, c:c+V] = total / P in the output dtype."""
        mean = e.op("arith.mulf", total, vec_const(1.0 / P), ft)
        if dtype != "f32":
            t = e.fresh("t")
            e.emit(f"{t} = arith.truncf {mean} : {ft} to {vt}")
            mean = t
        e.emit(f"vector.store {mean}, {y}[{n}, {c}] {align} : {y_t}, {vt}")

    # launch 1: a block sums `span` pixels of CT * V channels of one image
    one = e.c(1)
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(plan.chunks)}, %gy = {e.c(S)}, %gz = {e.c(N)}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(CT)}, %sy = {e.c(PT)}, %sz = {one}) workgroup(%red : {red_t}) {{")
    cv = e.add(e.mul("%bx", e.c(CT)), "%tx")
    c = e.mul(e.op("arith.minui", cv, e.c(CV - 1)), e.c(V))     # lanes past C (a ragged chunk) read the last
    start = e.add(e.mul("%by", e.c(span)), "%ty")
    zero = vec_const(0.0)
    acc, step = e.fresh("acc"), e.fresh("s")
    loop = e.fresh("sum")
    e.open(f"{loop} = scf.for {step} = {e.c(0)} to {e.c(plan.groups)} step {one} iter_args({acc} = {zero}) "
           f"-> ({ft}) {{")
    base = e.add(start, e.mul(step, e.c(UNROLL * PT)))
    ragged = S * span > P
    loads = []
    for u in range(UNROLL):
        p = e.add(base, e.c(u * PT))
        at = e.op("arith.minui", p, e.c(P - 1)) if ragged else p
        raw = e.fresh("l")
        e.emit(f"{raw} = vector.load {x}[%bz, {at}, {c}] {align} : {x_t}, {vt}")
        v = raw
        if dtype != "f32":
            v = e.fresh("w")
            e.emit(f"{v} = arith.extf {raw} : {vt} to {ft}")
        if ragged:
            m = e.fresh("m")
            e.emit(f"{m} = arith.select {e.cmp('ult', p, e.c(P))}, {v}, {zero} : {ft}")
            v = m
        loads.append(v)
    while len(loads) > 1:                     # a tree: the adds do not wait on each other
        loads = [vadd(loads[i], loads[i + 1]) if i + 1 < len(loads) else loads[i] for i in range(0, len(loads), 2)]
    e.emit(f"scf.yield {vadd(acc, loads[0])} : {ft}")
    e.close()
    # the PT partial sums of each channel vector, halved in shared memory down to row 0
    col = e.mul("%tx", e.c(V))
    e.emit(f"vector.store {loop}, %red[%ty, {col}] : {red_t}, {ft}")
    e.emit("gpu.barrier")
    for dist, below in halvings(PT):
        e.open(f"scf.if {e.cmp('ult', '%ty', e.c(below))} {{")
        a, b = e.fresh("r"), e.fresh("r")
        e.emit(f"{a} = vector.load %red[%ty, {col}] : {red_t}, {ft}")
        e.emit(f"{b} = vector.load %red[{e.add('%ty', e.c(dist))}, {col}] : {red_t}, {ft}")
        e.emit(f"vector.store {vadd(a, b)}, %red[%ty, {col}] : {red_t}, {ft}")
        e.close()
        e.emit("gpu.barrier")
    e.open(f"scf.if {e.both(e.cmp('eq', '%ty', e.c(0)), e.cmp('ult', cv, e.c(CV)))} {{")
    total = e.fresh("t")
    e.emit(f"{total} = vector.load %red[%ty, {col}] : {red_t}, {ft}")
    if S == 1:
        store_mean(total, "%bz", c)
    else:
        e.emit(f"vector.store {total}, %part[%bz, %by, {c}] : {part_t}, {ft}")
    e.close()
    e.emit("gpu.terminator")
    e.close()
    if S > 1:  # launch 2: the S partial sums of each channel vector
        lin = e.open_elementwise_launch(N * CV, THREADS)
        n, c = e.div(lin, e.c(CV)), e.mul(e.rem(lin, e.c(CV)), e.c(V))
        total, split, acc = e.fresh("sum"), e.fresh("s"), e.fresh("acc")
        e.open(f"{total} = scf.for {split} = {e.c(0)} to {e.c(S)} step {one} iter_args({acc} = {vec_const(0.0)}) "
               f"-> ({ft}) {{")
        v = e.fresh("q")
        e.emit(f"{v} = vector.load %part[{n}, {split}, {c}] : {part_t}, {ft}")
        e.emit(f"scf.yield {vadd(acc, v)} : {ft}")
        e.close()
        store_mean(total, n, c)
        e.close()
        e.emit("gpu.terminator")
        e.emit("}")
    sig = ", ".join(f"{p}: {ty}" for p, ty in signature)
    return f"func.func @{name}({sig}) {{\n" + "\n".join(e.lines) + "\n    return\n}"

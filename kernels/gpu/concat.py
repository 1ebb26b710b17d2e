"""concat (GPU): a chain of binary concats along one axis, with the batch norm and ReLU after it, as ONE launch.

prim.concat is binary, so the frontends build an n-input concat as a left-nested chain
concat(concat(concat(x0, x1), x2), x3). Lowered op by op, every link is a launch that copies the growing
prefix again: a DenseNet layer's concat of its i earlier feature maps was i launches moving O(i^2) bytes,
and the batch norm + ReLU after it one more pass over the whole concatenation (DenseNet-121 on the H200:
535 copy launches, 6x the time of torch.compile). prim-tile groups such a chain (and a batch_norm on the
concat axis and a relu that are its only uses) into one kernel, concat_chains.outline_concat_chains, and
this builds its GPU kernel. With the axis splitting the output into `outer` rows of `row` elements,
input k fills columns [off_k, off_k + inner_k) of every row:

    gpu.launch blocks(ceil(max_k vectors_k / (THREADS * U)), inputs) threads(THREADS)
        k = block y                                              one input per grid row
        for u < U: v_u = block x * THREADS * U + u * THREADS + thread x
            x_u = in_k[v_u * V : +V] if v_u < vectors_k          V lanes (16 bytes); all U loads first
        for u < U: if v_u < vectors_k:
            e = v_u * V;  r = e / inner_k;  col = e % inner_k
            out[r * row + off_k + col : +V] = f(x_u)

Each input is read once and the output written once, with coalesced 16-byte accesses, U = 4 of them in
flight per thread (one per thread ran DenseNet-121's copies at a third of the H100's bandwidth); blocks
past the end of a short input exit at once. f is the identity, or batch norm y = x * s[c] + t[c] with
s = scale / sqrt(var + eps), t = shift - mean * s (computed in f32 per element from the four parameter
vectors, which stay in L1), then max(y, 0) when a relu follows; c = (off_k + col) / (row / channels):
with the channels last (NHWC) the lanes are consecutive channels, along NCHW's spatial columns every
lane has the same channel. V is the widest of 16, 8, 4, 2, 1 bytes' worth of elements that divides every
input's row (so no vector crosses a row) and, with a batch norm over NCHW, the plane (so no vector
crosses a channel).
"""
from __future__ import annotations

import math

from ..irtext import flit
from .gemm import Emitter, _shape, collapse_at

THREADS = 256
UNROLL = 4           # vectors per thread, THREADS apart (coalesced): four 16-byte loads in flight each
BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def _lanes(inner: list[int], spatial: int, dtype: str, batch_norm: bool) -> int:
    """The vector width in elements (module docstring)."""
    lanes = 16 // BYTES[dtype]
    while lanes > 1 and (any(n % lanes for n in inner) or (batch_norm and spatial > 1 and spatial % lanes)):
        lanes //= 2
    return lanes


def concat_kernel(name: str, signature: list[tuple[str, str]], args: list[tuple[str, str]], axis: int,
                  epsilon: float | None = None, relu: bool = False) -> str:
    """The kernel function text: signature = [(argument, memref type)] of the function; args = those of
    the chain's inputs in order (an argument may repeat: concat([x, y, x])), [the batch_norm's scale,
    shift, mean, variance], then the output; axis the concat axis; epsilon the batch_norm's (None: no
    batch_norm); relu: a relu last."""
    out_shape, dtype = _shape(args[-1][1]), args[-1][1].rsplit("x", 1)[1][:-1]
    leaves = args[:-5] if epsilon is not None else args[:-1]
    axis %= len(out_shape)
    row, channels = math.prod(out_shape[axis:]), out_shape[axis]
    spatial = row // channels
    inner = [math.prod(_shape(t)[axis:]) for _, t in leaves]
    outer = math.prod(out_shape[:axis])
    lanes = _lanes(inner, spatial, dtype, epsilon is not None)
    vectors = [outer * n // lanes for n in inner]
    vt, ft = f"vector<{lanes}x{dtype}>", f"vector<{lanes}xf32>"
    # every vector starts at a multiple of its width: said, so that NVPTX emits one wide access, not
    # `lanes` scalar ones (a vector.load is otherwise only element-aligned)
    align = f"{{alignment = {lanes * BYTES[dtype]}}}"

    e = Emitter()
    one = e.c(1)
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-max(vectors) // (THREADS * UNROLL)))}, "
           f"%gy = {e.c(len(leaves))}, %gz = {one}) threads(%tx, %ty, %tz) in (%sx = {e.c(THREADS)}, "
           f"%sy = {one}, %sz = {one}) {{")
    flat = {a: collapse_at(e, a, t, []) for a, t in dict.fromkeys(args)}
    dst, dst_t = flat[args[-1][0]]
    v = e.add(e.mul("%bx", e.c(THREADS * UNROLL)), "%tx")

    def vector_op(op: str, *xs: str) -> str:
        n = e.fresh("f")
        e.emit(f"{n} = {op} {', '.join(xs)} : {ft}")
        return n

    def splat(c: float) -> str:
        n = e.fresh("k")
        e.emit(f"{n} = arith.constant dense<{flit(c)}> : {ft}")
        return n

    def value(x: str, column: str) -> str:
        """f(x) of the vector x whose first lane is `column` of its output row."""
        if epsilon is None and not relu:
            return x
        y = x
        if dtype != "f32":
            y = e.fresh("y")
            e.emit(f"{y} = arith.extf {x} : {vt} to {ft}")
        if epsilon is not None:
            channel = column if spatial == 1 else e.div(column, e.c(spatial))
            scale, shift, mean, var = (param(a, channel) for a, _ in args[-5:-1])
            s = vector_op("arith.mulf", vector_op("math.rsqrt", vector_op("arith.addf", var, splat(epsilon))), scale)
            t = vector_op("arith.subf", shift, vector_op("arith.mulf", mean, s))
            y = vector_op("math.fma", y, s, t)
        if relu:
            y = vector_op("arith.maximumf", y, splat(0.0))
        if dtype == "f32":
            return y
        z = e.fresh("y")
        e.emit(f"{z} = arith.truncf {y} : {ft} to {vt}")
        return z

    def param(arg: str, channel: str) -> str:
        """The batch norm parameter at `channel` for every lane, in f32: the lanes' own channels (NHWC)
        or one channel broadcast (NCHW)."""
        view, view_t = flat[arg]
        n = e.fresh("p")
        if spatial == 1:
            e.emit(f"{n} = vector.load {view}[{channel}] {align} : {view_t}, {vt}")
        else:
            e.emit(f"{n}s = memref.load {view}[{channel}] : {view_t}")
            e.emit(f"{n} = vector.broadcast {n}s : {dtype} to {vt}")
        if dtype == "f32":
            return n
        e.emit(f"{n}f = arith.extf {n} : {vt} to {ft}")
        return n + "f"

    off = 0
    for k, ((arg, _), n) in enumerate(zip(leaves, inner)):
        e.open(f"scf.if {e.cmp('eq', '%by', e.c(k))} {{")
        src, src_t = flat[arg]
        loaded = []
        for u in range(UNROLL):          # every load issued before the first store
            w = e.add(v, e.c(u * THREADS))
            ok = e.cmp("ult", w, e.c(vectors[k]))
            first = e.mul(w, e.c(lanes))
            x = e.fresh("x")
            e.emit(f"{x} = scf.if {ok} -> ({vt}) {{")
            e.emit(f"  {x}l = vector.load {src}[{first}] {align} : {src_t}, {vt}")
            e.emit(f"  scf.yield {x}l : {vt}")
            e.emit("} else {")
            e.emit(f"  {x}z = arith.constant dense<0.0> : {vt}")
            e.emit(f"  scf.yield {x}z : {vt}")
            e.emit("}")
            loaded.append((ok, first, x))
        for ok, first, x in loaded:
            e.open(f"scf.if {ok} {{")
            column = e.add(e.rem(first, e.c(n)), e.c(off))
            at = e.add(e.mul(e.div(first, e.c(n)), e.c(row)), column)
            e.emit(f"vector.store {value(x, column)}, {dst}[{at}] {align} : {dst_t}, {vt}")
            e.close()
        e.close()
        off += n
    return e.function(name, signature)

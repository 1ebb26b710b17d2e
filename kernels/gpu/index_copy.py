"""index_copy (GPU): write the update rows into the output, copying the input first only when it is elsewhere.

A KV cache step writes S rows (S = 1 when decoding) of `inner` elements into each of `outer` blocks of T
rows; the reference form (semantics.emit_index_copy) rewrites the whole cache per step. This kernel names
its input in `prim.in_place`: where the memory plan gives the output the input's buffer (a cache carried
as state, driver/plan.py), both launches see equal pointers and only the rows move:

    launch 1  blocks(min(ceil(vectors / THREADS), COPY_BLOCKS)) threads(THREADS)
        if out != x: grid-stride copy of x to out, V lanes (16 bytes) a thread per pass
    launch 2  blocks(ceil(outer * S * inner / V / THREADS)) threads(THREADS)
        (o, j, c) = the thread's vector: block o, update row j, columns [c, c + V)
        i = indices[j] (negative: from the end); in [0, T): out[o, i, c:c+V] = updates[o, j, c:c+V]

The launches run in order on one stream, so the copy is complete before any row lands. Launch 1 is named in
`prim.copy_launch`: a runtime that sees the plan give x and out one buffer leaves it out (its blocks would
only compare two pointers). V is the widest of 16, 8, 4, 2, 1 bytes' worth of elements that divides `inner`
(no vector crosses a row).
"""
from __future__ import annotations

import math

from .gemm import Emitter, _shape, collapse_at
from openprim.dialect import contract

THREADS = 256
COPY_BLOCKS = 1024   # the copy's grid: a grid-stride loop beyond it; when aliased its threads exit at once
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i8": 1}


def index_copy_kernel(name: str, signature: list[tuple[str, str]], axis: int) -> str:
    """The kernel function text; signature = [(argument, memref type)] of x, indices, updates, output."""
    (x, xt), (idx, it), (upd, ut), (out, ot) = signature
    shape, dtype = _shape(xt), xt.rsplit("x", 1)[1][:-1]
    axis %= len(shape)
    rows, count = shape[axis], _shape(it)[0]
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    ielem = it.rsplit("x", 1)[1][:-1]
    lanes = max(16 // BYTES.get(dtype, 4), 1)
    while lanes > 1 and inner % lanes:
        lanes //= 2
    vt, align = f"vector<{lanes}x{dtype}>", f"{{alignment = {lanes * BYTES.get(dtype, 4)}}}"
    e = Emitter()
    one = e.c(1)
    views = {a: collapse_at(e, a, t, []) for a, t in ((x, xt), (upd, ut), (out, ot))}
    (src, src_t), (rows_in, rows_t), (dst, dst_t) = views[x], views[upd], views[out]

    vectors = math.prod(shape) // lanes
    blocks = min(-(-vectors // THREADS), COPY_BLOCKS)
    e.open(f"gpu.launch blocks(%cx, %cy, %cz) in (%gcx = {e.c(blocks)}, %gcy = {one}, %gcz = {one}) "
           f"threads(%ux, %uy, %uz) in (%scx = {e.c(THREADS)}, %scy = {one}, %scz = {one}) {{")
    p0, p1 = e.fresh("p"), e.fresh("p")
    e.emit(f"{p0} = memref.extract_aligned_pointer_as_index {x} : {xt} -> index")
    e.emit(f"{p1} = memref.extract_aligned_pointer_as_index {out} : {ot} -> index")
    e.open(f"scf.if {e.cmp('ne', p0, p1)} {{")
    first = e.add(e.mul("%cx", e.c(THREADS)), "%ux")
    v = e.fresh("v")
    e.open(f"scf.for {v} = {first} to {e.c(vectors)} step {e.c(blocks * THREADS)} {{")
    at, val = e.mul(v, e.c(lanes)), e.fresh("x")
    e.emit(f"{val} = vector.load {src}[{at}] {align} : {src_t}, {vt}")
    e.emit(f"vector.store {val}, {dst}[{at}] {align} : {dst_t}, {vt}")
    e.close()
    e.close()
    e.emit("gpu.terminator")
    e.close()   # the copy's launch: constants made inside stay there

    per_row = inner // lanes
    lin = e.open_elementwise_launch(outer * count * per_row, THREADS)
    c = e.mul(e.rem(lin, e.c(per_row)), e.c(lanes))
    pair = e.div(lin, e.c(per_row))
    o, j = e.div(pair, e.c(count)), e.rem(pair, e.c(count))
    raw, i, w = e.fresh("ix"), e.fresh("ix"), e.fresh("ix")
    e.emit(f"{raw} = memref.load {idx}[{j}] : {it}")
    e.emit(f"{i} = arith.index_cast {raw} : {ielem} to index")
    neg = e.fresh("p")
    e.emit(f"{neg} = arith.cmpi slt, {i}, {e.c(0)} : index")
    e.emit(f"{w} = arith.select {neg}, {e.add(i, e.c(rows))}, {i} : index")
    ok = e.both(e.cmp("sge", w, e.c(0)), e.cmp("slt", w, e.c(rows)))
    e.open(f"scf.if {ok} {{")
    val = e.fresh("x")
    e.emit(f"{val} = vector.load {rows_in}[{e.add(e.mul(pair, e.c(inner)), c)}] {align} : {rows_t}, {vt}")
    e.emit(f"vector.store {val}, {dst}[{e.add(e.mul(e.add(e.mul(o, e.c(rows)), w), e.c(inner)), c)}] {align} "
           f": {dst_t}, {vt}")
    e.close()
    e.close()   # the launch's bounds check
    text = e.function(name, signature)
    header, rest = text.split(" {\n", 1)
    return f"{header} attributes {{{contract.in_place_text(0)}, {contract.copy_launch_text(0)}}} {{\n{rest}"

"""index_copy (CPU): write the update rows into the output, copying the input first only when it is elsewhere.

A KV cache step writes S new rows (S = 1 when decoding) into a cache of T rows along the axis; the
reference form (semantics.emit_index_copy) produces the whole output, so every step would move the whole
cache. This kernel takes `prim.in_place` on the input: where the memory plan gives the output the input's
buffer (a cache carried as state, driver/plan.py, or any input that dies here), the two pointers are equal
and only the rows are written; otherwise the input is copied first (one memcpy).

With the axis splitting the input into `outer` blocks of T rows of `inner` elements:

    if out != x: copy x to out
    for (o, j) in outer x S (scf.forall, OpenMP's static schedule, when there are many elements):
        i = indices[j] (negative: from the end); out of [0, T): skipped (the plan's bounds_check reports it)
        out[o, i, :] = updates[o, j, :]         vector<8> loads and stores, then a scalar tail
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body

LANES = 8
SERIAL_ELEMENTS = 1 << 16   # fewer elements written are copied by one thread (a fork costs more)


def _shape(mtype: str) -> tuple[list[int], str]:
    *dims, elem = mtype[len("memref<"):-1].split("x")
    return [int(d) for d in dims], elem


def index_copy_kernel(name: str, signature: list[tuple[str, str]], axis: int) -> str:
    """The kernel function text; signature = [(argument, memref type)] of x, indices, updates, output."""
    b = Body()
    (x, xt), (idx, it), (upd, ut), (out, ot) = signature
    shape, elem = _shape(xt)
    axis %= len(shape)
    rows, count = shape[axis], _shape(it)[0][0]
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    ielem = _shape(it)[1]
    p0, p1, same = b.fresh("p"), b.fresh("p"), b.fresh("same")
    b.emit(f"{p0} = memref.extract_aligned_pointer_as_index {x} : {xt} -> index")
    b.emit(f"{p1} = memref.extract_aligned_pointer_as_index {out} : {ot} -> index")
    b.emit(f"{same} = arith.cmpi eq, {p0}, {p1} : index")
    b.emit(f"scf.if {same} {{")
    b.emit("} else {")
    b.emit(f"  memref.copy {x}, {out} : {xt} to {ot}")
    b.emit("}")
    src, dst = b.flat((upd, ut)), b.flat((out, ot))
    _, o, j = open_pairs(b, outer, count, inner)
    wrapped = wrapped_index(b, (idx, it), j, ielem, rows)
    ok_lo, ok_hi, ok = b.fresh("ok"), b.fresh("ok"), b.fresh("ok")
    b.emit(f"{ok_lo} = arith.cmpi sge, {wrapped}, {b.const(0)} : index")
    b.emit(f"{ok_hi} = arith.cmpi slt, {wrapped}, {b.const(rows)} : index")
    b.emit(f"{ok} = arith.andi {ok_lo}, {ok_hi} : i1")
    b.emit(f"scf.if {ok} {{")
    b.depth += 1
    src_at = b.mul(b.add(b.mul(o, count), j), inner)
    dst_at = b.mul(b.add(b.mul(o, rows), wrapped), inner)
    _copy(b, src, src_at, dst, dst_at, inner, elem)
    b.close()
    b.close()
    return b.function(name, signature, residual=(x, xt))


def open_pairs(b: Body, outer: int, count: int, inner: int) -> tuple:
    """Open the loop over the (block, index) pairs: scf.forall where they move many elements, else scf.for
    (closed by one b.close()); returns (pair, block, index)."""
    pairs = outer * count
    if pairs * inner >= SERIAL_ELEMENTS and pairs > 1:
        p = b.fresh("p")
        b.emit(f"scf.forall ({p}) in ({pairs}) {{")
        b.depth += 1
    else:
        p = b.open_for(0, pairs)
    o, j = (0, p) if outer == 1 else (p, 0) if count == 1 else \
        (b.op("arith.divui", p, count), b.op("arith.remui", p, count))
    return p, o, j


def wrapped_index(b: Body, ids: tuple[str, str], j, ielem: str, rows: int) -> str:
    """indices[j] as an index, a negative one counted from the end of `rows`."""
    raw, i, neg, wrapped = b.fresh("ix"), b.fresh("i"), b.fresh("neg"), b.fresh("w")
    b.emit(f"{raw} = memref.load {ids[0]}[{b.idx(j)}] : {ids[1]}")
    b.emit(f"{i} = arith.index_cast {raw} : {ielem} to index")
    b.emit(f"{neg} = arith.cmpi slt, {i}, {b.const(0)} : index")
    b.emit(f"{wrapped} = arith.select {neg}, {b.add(i, rows)}, {i} : index")
    return wrapped


def _copy(b: Body, src, src_at, dst, dst_at, count: int, elem: str) -> None:
    """dst[dst_at + k] = src[src_at + k] for k < count: vectors of LANES, then scalars."""
    vt = f"vector<{LANES}x{elem}>"
    if count >= LANES:
        k = b.mul(b.open_for(0, count // LANES), LANES)
        v = b.fresh("v")
        b.emit(f"{v} = vector.load {src[0]}[{b.idx(b.add(src_at, k))}] : {src[1]}, {vt}")
        b.emit(f"vector.store {v}, {dst[0]}[{b.idx(b.add(dst_at, k))}] : {dst[1]}, {vt}")
        b.close()
    if count % LANES:
        k = b.open_for(count - count % LANES, count)
        s = b.fresh("s")
        b.emit(f"{s} = memref.load {src[0]}[{b.idx(b.add(src_at, k))}] : {src[1]}")
        b.emit(f"memref.store {s}, {dst[0]}[{b.idx(b.add(dst_at, k))}] : {dst[1]}")
        b.close()

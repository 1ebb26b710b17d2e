"""gather (CPU): whole rows copied, where the reference form reads every element through its index.

semantics.emit_gather is one generic over the output that loads the index and extracts one element per
output element (a filter's taps reversed for an input gradient: 2.4 M elements in 5.8 ms on 2 cores, a
scalar load chain each). Along an axis that splits the input into `outer` blocks of T rows of `inner`
contiguous elements, each (block, index) pair moves one contiguous row:

    for (o, j) in outer x J (scf.forall, OpenMP's static schedule, when there are many elements):
        i = indices[j] (negative: from the end), clamped into [0, T)  (the plan's bounds_check reports it)
        out[o, j, :] = x[o, i, :]                vector<8> loads and stores, then a scalar tail

Along the innermost axis (rows of one element: the per-axis reads of a linear resize, DPT's and a
segmentation head's bilinear upsampling) the indices are taken GATHER_LANES at a time:

    for (o, v) in outer x J / GATHER_LANES (scf.forall when there are many elements):
        i = indices[v*16 : v*16 + 16] wrapped and clamped (vector ops)
        out[o, v*16 : v*16 + 16] = vector.gather x[o, i]     (AVX2/AVX-512 gathers)
    the last J % 16 of each block by one masked gather (masked index load and store)

Rows shorter than a vector are copied by scalars, and fewer than 16 indices are one masked gather: a
2x bilinear upsampling of a 7 x 7 map (EfficientFormerV2's attention) reads rows of 7 and 14 indices,
which the reference form took 100-150 us each for [1, 1024, 7, 7]. Types without a vector.gather (i8,
bool) along the innermost axis, and a 0-d index, keep the reference form.
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body

from .index_copy import LANES, _copy, _shape, open_pairs, wrapped_index

GATHER_LANES = 16
GATHER_ELEMENTS = ("f32", "f16", "bf16", "i32", "i64")


def gather_kernel(name: str, signature: list[tuple[str, str]], axis: int) -> str | None:
    """The kernel function text (signature = [(argument, memref type)] of x, indices, output), or None
    where the rows are shorter than a vector (or the index is a 0-d scalar)."""
    (x, xt), (idx, it), (out, ot) = signature
    shape, elem = _shape(xt)
    ishape, ielem = _shape(it)
    axis %= len(shape)
    rows, count = shape[axis], math.prod(ishape)
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    if not ishape or (inner == 1 and elem not in GATHER_ELEMENTS):
        return None
    if inner == 1:
        return _gather_elements(name, signature, rows, count, outer, elem, ielem)
    b = Body()
    src, dst, ids = b.flat((x, xt)), b.flat((out, ot)), b.flat((idx, it))
    p, o, j = open_pairs(b, outer, count, inner)
    at = _clamped_index(b, ids, j, ielem, rows)
    _copy(b, src, b.mul(b.add(b.mul(o, rows), at), inner), dst, b.mul(p, inner), inner, elem)
    b.close()
    return b.function(name, signature)


def _gather_elements(name, signature, rows: int, count: int, outer: int, elem: str, ielem: str) -> str:
    """out[o, j] = x[o, indices[j]]: GATHER_LANES indices at a time, wrapped and clamped as vectors, one
    vector.gather each; the J % GATHER_LANES left of each block by one masked gather."""
    (x, xt), (idx, it), (out, ot) = signature
    b = Body()
    src, dst, ids = b.flat((x, xt)), b.flat((out, ot)), b.flat((idx, it))
    if count >= GATHER_LANES:
        _, o, v = open_pairs(b, outer, count // GATHER_LANES, GATHER_LANES)
        _vector_gather(b, src, dst, ids, o, b.mul(v, GATHER_LANES), GATHER_LANES, rows, count, elem, ielem)
        b.close()
    if count % GATHER_LANES:
        _, o, _ = open_pairs(b, outer, 1, count % GATHER_LANES)
        _vector_gather(b, src, dst, ids, o, count - count % GATHER_LANES, count % GATHER_LANES, rows, count, elem,
                       ielem)
        b.close()
    return b.function(name, signature)


def _vector_gather(b: Body, src, dst, ids, o, at, lanes: int, rows: int, count: int, elem: str, ielem: str) -> None:
    """out[o, at : at + lanes] = x[o, indices[at : at + lanes]], lanes <= GATHER_LANES (fewer: masked)."""
    n, vt, it16 = GATHER_LANES, f"vector<{GATHER_LANES}x{elem}>", f"vector<{GATHER_LANES}x{ielem}>"
    mt = f"vector<{n}xi1>"
    raw, neg, wrapped, low, clamped, got, mask = (b.fresh(h) for h in ("ix", "neg", "w", "lo", "at", "g", "m"))
    b.emit(f"{mask} = vector.constant_mask [{lanes}] : {mt}")
    if lanes == n:
        b.emit(f"{raw} = vector.load {ids[0]}[{b.idx(at)}] : {ids[1]}, {it16}")
    else:
        b.emit(f"{raw} = vector.maskedload {ids[0]}[{b.idx(at)}], {mask}, {b.const(0, it16)} "
               f": {ids[1]}, {mt}, {it16} into {it16}")
    b.emit(f"{neg} = arith.cmpi slt, {raw}, {b.const(0, it16)} : {it16}")
    b.emit(f"{wrapped} = arith.select {neg}, {b.op('arith.addi', raw, b.const(rows, it16), it16)}, {raw} "
           f": {mt}, {it16}")
    b.emit(f"{low} = arith.maxsi {wrapped}, {b.const(0, it16)} : {it16}")
    b.emit(f"{clamped} = arith.minsi {low}, {b.const(rows - 1, it16)} : {it16}")
    b.emit(f"{got} = vector.gather {src[0]}[{b.idx(b.mul(o, rows))}] [{clamped}], {mask}, "
           f"{b.const(0.0 if elem[0] in 'fb' else 0, vt)} : {src[1]}, {it16}, {mt}, {vt} into {vt}")
    out_at = b.idx(b.add(b.mul(o, count), at))
    if lanes == n:
        b.emit(f"vector.store {got}, {dst[0]}[{out_at}] : {dst[1]}, {vt}")
    else:
        b.emit(f"vector.maskedstore {dst[0]}[{out_at}], {mask}, {got} : {dst[1]}, {mt}, {vt}")


def _clamped_index(b: Body, ids, j, ielem: str, rows: int) -> str:
    """indices[j] wrapped (negative: from the end) and clamped into [0, rows): the read stays within x (the
    plan's bounds_check reports an index out of range)."""
    wrapped, low, at = wrapped_index(b, ids, j, ielem, rows), b.fresh("lo"), b.fresh("at")
    b.emit(f"{low} = arith.maxsi {wrapped}, {b.const(0)} : index")
    b.emit(f"{at} = arith.minsi {low}, {b.const(rows - 1)} : index")
    return at

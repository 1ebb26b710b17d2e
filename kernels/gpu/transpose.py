"""Tiled transpose for GPUs: layout changes (NCHW <-> NHWC, matrix transposes) through shared memory.

A transpose read by output index reads with a stride between neighbouring threads (or writes with
one, read by input index): half its traffic is uncoalesced. Any permutation that keeps leading
dimensions and swaps two trailing groups is a batched 2-d transpose [B, R, Q] -> [B, Q, R]
(NCHW -> NHWC: R = C, Q = H*W). Each block moves a 32x32 tile:

    tile[r][q] = in[b, r0 + r, q0 + q]     (threads along q: coalesced reads)
    barrier
    out[b, q0 + q, r0 + r] = tile[r][q]    (threads along r: coalesced writes)

The tile row is padded to 33 elements so that the column reads hit 32 different banks.

When one side has at most NARROW elements (an image's 3 channels: NCHW -> NHWC of a network's input),
a 32x32 tile would hold 3 useful rows. Then a thread owns one position of the long side and moves the
narrow side's few elements itself: the loads (or stores) along the long side are coalesced across
threads, the stores (or loads) of a thread's few elements are consecutive, and so are the threads'.
"""
from __future__ import annotations

import math

from .gemm import WG, Emitter, _shape, collapse_at

TILE, ROWS = 32, 8     # a 32x32 tile moved by 32x8 threads, 4 elements each
NARROW = 8             # a side this short is moved by a thread per position of the other (module docstring)
THREADS = 256


def split(perm: list[int]) -> tuple[int, int] | None:
    """(k, r) when perm = identity on the first k dims, then dims k+r.., then dims k..k+r-1; else None."""
    n = len(perm)
    k = next((i for i in range(n) if perm[i] != i), n)
    for r in range(1, n - k):
        if perm[k:] == list(range(k + r, n)) + list(range(k, k + r)):
            return k, r
    return None


def transpose_kernel(name: str, signature: list[tuple[str, str]], perm: list[int], dtype: str) -> str:
    (src, src_t), (dst, dst_t) = signature
    k, r = split(perm)
    dims = _shape(src_t)
    B, R, Q = math.prod(dims[:k]), math.prod(dims[k:k + r]), math.prod(dims[k + r:])
    e = Emitter()
    if min(R, Q) <= NARROW:
        return _narrow(e, name, signature, (k, r), (B, R, Q))
    one, lead = e.c(1), ["%bz"] if k else []
    tt = f"memref<{TILE}x{TILE + 1}x{dtype}, {WG}>"
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-Q // TILE))}, %gy = {e.c(-(-R // TILE))}, "
           f"%gz = {e.c(B)}) threads(%tx, %ty, %tz) in (%sx = {e.c(TILE)}, %sy = {e.c(ROWS)}, %sz = {one}) "
           f"workgroup(%tile : {tt}) {{")
    x, xt = collapse_at(e, src, src_t, [k, k + r])         # [B, R, Q] (no B when k == 0)
    y, yt = collapse_at(e, dst, dst_t, [k, len(dims) - r])  # [B, Q, R]
    q0, r0 = e.mul("%bx", e.c(TILE)), e.mul("%by", e.c(TILE))

    def move(load, store, r_of, q_of):
        """Each thread moves TILE / ROWS elements of the tile: row ty + i*ROWS, column tx."""
        for i in range(TILE // ROWS):
            row = e.add("%ty", e.c(i * ROWS))
            rr, qq = r_of(row), q_of(row)
            e.open(f"scf.if {e.both(e.cmp('ult', rr, e.c(R)), e.cmp('ult', qq, e.c(Q)))} {{")
            v = e.fresh("t")
            e.emit(f"{v} = memref.load {load(row, rr, qq)}")
            e.emit(f"memref.store {v}, {store(row, rr, qq)}")
            e.close()

    move(lambda row, rr, qq: f"{x}[{', '.join(lead + [rr, qq])}] : {xt}",   # coalesced along q
         lambda row, rr, qq: f"%tile[{row}, %tx] : {tt}",
         lambda row: e.add(r0, row), lambda row: e.add(q0, "%tx"))
    e.emit("gpu.barrier")
    move(lambda row, rr, qq: f"%tile[%tx, {row}] : {tt}",
         lambda row, rr, qq: f"{y}[{', '.join(lead + [qq, rr])}] : {yt}",   # coalesced along r
         lambda row: e.add(r0, "%tx"), lambda row: e.add(q0, row))
    return e.function(name, signature)


def _narrow(e: Emitter, name: str, signature, split_at: tuple[int, int], sizes: tuple[int, int, int]) -> str:
    """[B, R, Q] -> [B, Q, R] with R or Q at most NARROW: a thread per position of the long side moves
    the narrow side's elements (module docstring)."""
    (src, src_t), (dst, dst_t) = signature
    (k, r), (B, R, Q) = split_at, sizes
    long_side, narrow = (Q, R) if R <= NARROW else (R, Q)
    one = e.c(1)
    e.emit(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(-(-long_side // THREADS))}, %gy = {one}, "
           f"%gz = {e.c(B)}) threads(%tx, %ty, %tz) in (%sx = {e.c(THREADS)}, %sy = {one}, %sz = {one}) {{")
    x, xt = collapse_at(e, src, src_t, [k, k + r])
    y, yt = collapse_at(e, dst, dst_t, [k, len(_shape(dst_t)) - r])
    lead = ["%bz"] if k else []
    pos = e.add(e.mul("%bx", e.c(THREADS)), "%tx")
    e.open(f"scf.if {e.cmp('ult', pos, e.c(long_side))} {{")
    for i in range(narrow):
        rr, qq = (e.c(i), pos) if R <= NARROW else (pos, e.c(i))
        v = e.fresh("t")
        e.emit(f"{v} = memref.load {x}[{', '.join(lead + [rr, qq])}] : {xt}")
        e.emit(f"memref.store {v}, {y}[{', '.join(lead + [qq, rr])}] : {yt}")
    e.close()
    return e.function(name, signature)

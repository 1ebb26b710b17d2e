"""slice (CPU) with a step along the innermost dim: contiguous reads, lanes picked by a shuffle.

semantics.emit_slice copies a tensor.extract_slice view with one generic; with a step > 1 on the innermost
dim the vectorized copy reads that view element by element (a strided vector read of scalars) and
allocates a temporary copy of it: EVA02's rotary embedding takes x[..., 0::2] and x[..., 1::2] of
[1, 3, 256, 64] maps, 24 of each, ~125 us apiece (1 GB/s) on 2 cores, 6 ms of a 37 ms model. Here each
output row of n elements is made from the contiguous source run that covers it:

    for each output row (the outer dims' multi-index r, scf.forall when there are many elements):
        src = x's row at starts + r * steps, from the innermost start s0
        for each group of LANES outputs (then the n % LANES left, one shorter group):
            v = vector.load x[src + g * LANES * step : ... + (L - 1) * step + 1]   one contiguous read
            out[row, g * LANES : + L] = vector.shuffle v [0, step, 2 step, ...]    the lanes kept

The read covers exactly the elements between the first and last lane kept, so it never passes the row.
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body

from .index_copy import _shape

LANES = 16
SERIAL_ELEMENTS = 1 << 16     # fewer output elements are copied by one thread (a fork costs more)
MAX_STEP = 8                  # a wider step reads too much that it drops: the generic form keeps it


def strided_slice_kernel(name: str, signature: list[tuple[str, str]], starts, steps) -> str | None:
    """The kernel function text (signature: x, output), or None where the innermost step is 1 (the
    generic copy reads whole vectors already) or above MAX_STEP."""
    (x, xt), (out, ot) = signature
    shape, elem = _shape(xt)
    oshape, _ = _shape(ot)
    step = steps[-1]
    if not shape or step <= 1 or step > MAX_STEP or 0 in oshape:
        return None
    b = Body()
    src, dst = b.flat((x, xt)), b.flat((out, ot))
    rows, n = math.prod(oshape[:-1]), oshape[-1]
    if rows > 1 and rows * n >= SERIAL_ELEMENTS:
        r = b.fresh("r")
        b.emit(f"scf.forall ({r}) in ({rows}) {{")
        b.depth += 1
    else:
        r = b.open_for(0, rows)
    src_at = _source_row(b, r, shape, oshape, starts, steps)
    for g in range(0, n, LANES):
        lanes = min(LANES, n - g)
        span = (lanes - 1) * step + 1
        v, picked = b.fresh("v"), b.fresh("p")
        b.emit(f"{v} = vector.load {src[0]}[{b.idx(b.add(src_at, g * step))}] : {src[1]}, vector<{span}x{elem}>")
        keep = ", ".join(str(k * step) for k in range(lanes))
        b.emit(f"{picked} = vector.shuffle {v}, {v} [{keep}] : vector<{span}x{elem}>, vector<{span}x{elem}>")
        b.emit(f"vector.store {picked}, {dst[0]}[{b.idx(b.add(b.mul(r, n), g))}] : {dst[1]}, vector<{lanes}x{elem}>")
    b.close()
    return b.function(name, signature)


def _source_row(b: Body, r, shape, oshape, starts, steps):
    """The flat offset in x of output row r's first element: each outer output index i_d (r split over
    oshape[:-1]) at starts[d] + i_d steps[d] in x, and the innermost start."""
    at, rest = starts[-1], r
    stride = shape[-1]
    for d in range(len(shape) - 2, -1, -1):
        if oshape[d] == 1:
            i = 0
        elif d == 0 or math.prod(oshape[:d]) == 1:
            i, rest = rest, 0
        else:
            i, rest = b.op("arith.remui", rest, oshape[d]), b.op("arith.divui", rest, oshape[d])
        at = b.add(at, b.mul(b.add(starts[d], b.mul(i, steps[d])), stride))
        stride *= shape[d]
    return at

"""A filter gradient as GEMMs for targets whose only backward-weights solver is the reference loop nest (the
GPUs): one per filter tap, or one for all taps where the input has few channels: prim-select's. (The CPU has
its filter-gradient kernel, kernels/cpu/backward_weights.py, for every channel count.)

With the forward convolution x [N, H, W, C] * w [K, R, S, C] -> dy [N, OH, OW, K] (NHWC, one group), stride
(sh, sw), padding (pt, pl, pb, pr), dilation (dh, dw), the gradient of tap (r, s) is a GEMM whose reduction
is the batch and the map, M = N OH OW:

    dw[k, r, s, c] = sum over m of dy[m, k] xs_rs[m, c],    xs_rs = x padded, from (r dh, s dw) with steps (sh, sw)
                   = (dy^T [K, M] @ xs_rs [M, C])[k, c]

dy^T is one transpose shared by every tap; xs_rs is the padded input's strided slice, or x itself for a 1x1,
stride-1, unpadded filter. On GPUs, channels and rows that are not multiples of 8 (a stem's 3 channels, batch
1 on a 7 x 7 map) are padded with zeros, so that the matrix cores take them (the SIMT GEMM, with one block
over a reduction of 400 k rows, ran past a minute on the H100); the input is padded before its taps are
cut, so each tap's rows are 16 bytes and the stacked taps' concat moves vectors (three-channel taps, two
bytes at a time, took 1.1 ms of ResNet-50's backward on the H200). The R S products [K, C] are stacked to KRSC,
cut back to C channels and transposed to the filter layout the op has. The GEMMs are forward matmuls with a run-time, 2-d, non-transposed rhs: the matrix-core GEMM
solvers serve them, split-K where their grid is small (the reduction is long: 100 k rows at batch 32 on a
56 x 56 map, the output 64 x 64). The copies (dy^T, the R S slices) are memory passes that an implicit-GEMM
filter-gradient kernel would not make; the reference loop nest this replaces takes seconds per layer.

With fewer than FEW_CHANNELS input channels (an RGB stem: 3), a GEMM per tap has a 3-wide output: there the
taps' slices are stacked side by side along the channels, [M, R S C] (an im2col: 49 taps of 8 padded
channels, 392 columns, for a 7x7 stem), and one GEMM dy^T [K, M] @ patches gives [K, R S C], which is KRSC.
On the CPU this was the stem's path too, until its filter-gradient kernel read x in place: ResNet-18's stem
at batch 8 on 2 AVX2 cores, 41 ms stacked (transpose, pad, 49 slices, concat, GEMM) against 16 ms.
"""
from __future__ import annotations

import dataclasses

from mlir import ir

from openprim import dialect
from openprim.solvers.problem import problem_of

from .rewrite import create, filter_perm, rebuild, reshape, transpose

MATMUL = {"transpose_rhs": 0, "activation": "none", "activation_params": []}
ALIGN = 8     # the matrix-core GEMMs' K and N granule (16-byte rows of f16: TMA strides, ldmatrix)
FEW_CHANNELS = 8   # fewer input channels than this: every tap in one GEMM (an RGB stem)


def backward_weights_as_gemms(op: ir.Operation, target, reference_only) -> bool:
    """Rewrite an NHWC, one-group prim.conv2d_backward_weights into GEMMs where reference_only(problem) says
    `target` has no other solver for it (the GPUs), all taps stacked into one GEMM where it has fewer than
    FEW_CHANNELS input channels, the GEMMs' sizes padded to multiples of ALIGN; whether it did."""
    if op.name != "prim.conv2d_backward_weights" or dialect.op_attrs(op)["layout"] != "NHWC":
        return False
    p = problem_of(op)
    if p.groups != 1 or not reference_only(p):
        return False
    x, dy = dialect.operand_groups(op)
    padded = -(-p.c // ALIGN) * ALIGN
    if target.kind != "cpu" and padded != p.c and not reference_only(dataclasses.replace(p, c=padded)):
        _padded_channels(op, x, dy, p, padded)
        return True
    m, loc = p.n * p.oh * p.ow, op.location
    stacked, align = p.c < FEW_CHANNELS, 1 if target.kind == "cpu" else ALIGN
    c, mp = -(-p.c // align) * align, -(-m // align) * align
    with ir.InsertionPoint(op), loc:
        dyt = transpose(reshape(dy, [m, p.k], loc), [1, 0], loc)                               # [K, M]
        if mp != m:
            dyt = create("pad", [dyt], [p.k, mp], dy, {"pads": [0, 0, 0, mp - m], "value": 0.0}, loc)
        taps = _tap_slices(x, p, c, loc)
        grad = _stacked_gemm(x, dyt, taps, p, c, m, mp, loc) if stacked else \
            _tap_gemms(x, dyt, taps, p, c, m, mp, loc)
        if p.filter_layout != "KRSC":
            grad = transpose(grad, filter_perm("KRSC", p.filter_layout), loc)
    op.result.replace_all_uses_with(grad)
    op.erase()
    return True


def _padded_channels(op: ir.Operation, x, dy, p, c: int) -> None:
    """The filter gradient of x padded with zero channels to c, which the target's own kernel takes, cut back
    to the op's C channels."""
    loc, layout = op.location, p.filter_layout
    axis = layout.index("C")
    shape = [{"K": p.k, "C": c, "R": p.r, "S": p.s}[d] for d in layout]
    with ir.InsertionPoint(op), loc:
        xp = create("pad", [x], [p.n, p.h, p.w, c], x, {"pads": [0, 0, 0, 0, 0, 0, 0, c - p.c], "value": 0.0}, loc)
        grad = rebuild(op, [xp, dy], {}, loc, ir.RankedTensorType.get(shape, op.result.type.element_type))
        ends = list(shape)
        ends[axis] = p.c
        cut = create("slice", [grad.result], ends, x, {"starts": [0] * 4, "ends": ends, "steps": [1] * 4}, loc)
    op.result.replace_all_uses_with(cut)
    op.erase()


def _tap_slices(x, p, c: int, loc) -> list:
    """Per filter tap (r, s), row-major: the padded input's strided slice [N, OH, OW, c] it multiplies (x
    itself for a 1x1, stride-1, unpadded filter), c >= C channels (zeros past C)."""
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = p.strides, p.dilations, p.padding
    xp = x
    if (pt, pl, pb, pr, c) != (0, 0, 0, 0, p.c):
        xp = create("pad", [x], [p.n, p.h + pt + pb, p.w + pl + pr, c], x,
                    {"pads": [0, pt, pl, 0, 0, pb, pr, c - p.c], "value": 0.0}, loc)
    taps = []
    for r in range(p.r):
        for s in range(p.s):
            xs = xp
            if list(xp.type.shape) != [p.n, p.oh, p.ow, c] or (sh, sw) != (1, 1):
                starts = [0, r * dh, s * dw, 0]
                ends = [p.n, r * dh + (p.oh - 1) * sh + 1, s * dw + (p.ow - 1) * sw + 1, c]
                xs = create("slice", [xp], [p.n, p.oh, p.ow, c], x,
                            {"starts": starts, "ends": ends, "steps": [1, sh, sw, 1]}, loc)
            taps.append(xs)
    return taps


def _rows(x, v, m: int, mp: int, cols: int, loc):
    """[N, OH, OW, cols] as [mp, cols]: the M rows, zeros past them."""
    rows = reshape(v, [m, cols], loc)
    if mp != m:
        rows = create("pad", [rows], [mp, cols], x, {"pads": [0, 0, mp - m, 0], "value": 0.0}, loc)
    return rows


def _tap_gemms(x, dyt, taps, p, c: int, m: int, mp: int, loc):
    """One GEMM per tap, dy^T [K, M] @ xs_rs [M, c], stacked to KRSC and cut back to C channels."""
    grads = [reshape(create("matmul", [dyt, _rows(x, xs, m, mp, c, loc), None, None], [p.k, c], x, MATMUL, loc),
                     [p.k, 1, c], loc) for xs in taps]
    krsc = grads[0]
    for t in grads[1:]:
        krsc = create("concat", [krsc, t], [p.k, krsc.type.shape[1] + 1, c], x, {"axis": 1}, loc)
    grad = reshape(krsc, [p.k, p.r, p.s, c], loc)
    if c != p.c:
        grad = create("slice", [grad], [p.k, p.r, p.s, p.c], x, {"starts": [0, 0, 0, 0],
                      "ends": [p.k, p.r, p.s, p.c], "steps": [1, 1, 1, 1]}, loc)
    return grad


def _stacked_gemm(x, dyt, taps, p, c: int, m: int, mp: int, loc):
    """Few channels: the taps' slices (c >= C channels each) side by side, [M, R S c] (an im2col), and one
    GEMM dy^T @ patches [K, R S c], read as KRSc and cut back to C channels."""
    patches = taps[0]
    for t in taps[1:]:
        patches = create("concat", [patches, t], [p.n, p.oh, p.ow, patches.type.shape[3] + c], x, {"axis": 3}, loc)
    cols = p.r * p.s * c
    grad = create("matmul", [dyt, _rows(x, patches, m, mp, cols, loc), None, None], [p.k, cols], x, MATMUL, loc)
    grad = reshape(grad, [p.k, p.r, p.s, c], loc)
    if c != p.c:
        grad = create("slice", [grad], [p.k, p.r, p.s, p.c], x, {"starts": [0, 0, 0, 0],
                      "ends": [p.k, p.r, p.s, p.c], "steps": [1, 1, 1, 1]}, loc)
    return grad

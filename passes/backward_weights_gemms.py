"""A filter gradient as one GEMM per filter tap, for targets whose only backward-weights solver is the
reference loop nest (the GPUs): prim-select's.

With the forward convolution x [N, H, W, C] * w [K, R, S, C] -> dy [N, OH, OW, K] (NHWC, one group), stride
(sh, sw), padding (pt, pl, pb, pr), dilation (dh, dw), the gradient of tap (r, s) is a GEMM whose reduction
is the batch and the map, M = N OH OW:

    dw[k, r, s, c] = sum over m of dy[m, k] xs_rs[m, c],    xs_rs = x padded, from (r dh, s dw) with steps (sh, sw)
                   = (dy^T [K, M] @ xs_rs [M, C])[k, c]

dy^T is one transpose shared by every tap; xs_rs is the padded input's strided slice, or x itself for a 1x1,
stride-1, unpadded filter. Channels and rows that are not multiples of 8 (a stem's 3 channels, batch 1 on
a 7 x 7 map) are padded with zeros, so that the matrix cores take them (the SIMT GEMM, with one block over
a reduction of 400 k rows, ran past a minute on the H100). The R S products [K, C] are stacked to KRSC,
cut back to C channels and transposed to the filter layout the op has. The GEMMs are forward matmuls with a run-time, 2-d, non-transposed rhs: the matrix-core GEMM
solvers serve them, split-K where their grid is small (the reduction is long: 100 k rows at batch 32 on a
56 x 56 map, the output 64 x 64). The copies (dy^T, the R S slices) are memory passes that an implicit-GEMM
filter-gradient kernel would not make; the reference loop nest this replaces takes seconds per layer.
"""
from __future__ import annotations

from mlir import ir

from openprim import dialect
from openprim.solvers.problem import problem_of

from .rewrite import create, filter_perm, reshape, transpose

MATMUL = {"transpose_rhs": 0, "activation": "none", "activation_params": []}
ALIGN = 8     # the matrix-core GEMMs' K and N granule (16-byte rows of f16: TMA strides, ldmatrix)


def backward_weights_as_gemms(op: ir.Operation, reference_only) -> bool:
    """Rewrite an NHWC, one-group prim.conv2d_backward_weights into per-tap GEMMs where reference_only(problem)
    says its target has no other solver for it; whether it did."""
    if op.name != "prim.conv2d_backward_weights" or dialect.op_attrs(op)["layout"] != "NHWC":
        return False
    p = problem_of(op)
    if p.groups != 1 or not reference_only(p):
        return False
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = p.strides, p.dilations, p.padding
    x, dy = dialect.operand_groups(op)
    m, loc = p.n * p.oh * p.ow, op.location
    c, mp = -(-p.c // ALIGN) * ALIGN, -(-m // ALIGN) * ALIGN       # zero channels and rows for the matrix cores
    with ir.InsertionPoint(op), loc:
        dyt = transpose(reshape(dy, [m, p.k], loc), [1, 0], loc)                               # [K, M]
        if mp != m:
            dyt = create("pad", [dyt], [p.k, mp], dy, {"pads": [0, 0, 0, mp - m], "value": 0.0}, loc)
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
                rows = reshape(xs, [m, c], loc)
                if mp != m:
                    rows = create("pad", [rows], [mp, c], x, {"pads": [0, 0, mp - m, 0], "value": 0.0}, loc)
                g = create("matmul", [dyt, rows, None, None], [p.k, c], x, MATMUL, loc)
                taps.append(reshape(g, [p.k, 1, c], loc))
        krsc = taps[0]
        for t in taps[1:]:
            krsc = create("concat", [krsc, t], [p.k, krsc.type.shape[1] + 1, c], x, {"axis": 1}, loc)
        grad = reshape(krsc, [p.k, p.r, p.s, c], loc)
        if c != p.c:
            grad = create("slice", [grad], [p.k, p.r, p.s, p.c], x, {"starts": [0, 0, 0, 0],
                          "ends": [p.k, p.r, p.s, p.c], "steps": [1, 1, 1, 1]}, loc)
        if p.filter_layout != "KRSC":
            grad = transpose(grad, filter_perm("KRSC", p.filter_layout), loc)
    op.result.replace_all_uses_with(grad)
    op.erase()
    return True

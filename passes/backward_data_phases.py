"""A strided backward-data convolution as sh x sw stride-1 forward convolutions, one per phase: prim-select's.

With the forward convolution x [N, H, W, C] * w [K, R, S, C] -> dy [N, OH, OW, K], stride (sh, sw), padding
(pt, pl, ...), dilation 1, the input gradient at row ih gets dy's rows oh with ih + pt = oh sh + r: only the
taps r = r0, r0 + sh, ... with r0 = (ih + pt) mod sh. So the rows of one phase ih = ph + sh i (and likewise
the columns) are a stride-1 correlation of dy with the sub-filter of those taps, reversed:

    dx[n, ph + sh i, pw + sw j, c] = sum over t, u, k of dy[n, i + qh - t, j + qw - u, k] w[k, r0 + sh t, s0 + sw u, c]
                                   = conv2d(dy padded by (Tr - 1 - qh, ...), wf)[n, i, j, c],
    qh = (ph + pt - r0) / sh,  wf[Tr-1-t, Ts-1-u, k, c] = w[k, r0 + sh t, s0 + sw u, c]   (RSCK, per group)

Every phase is computed on the same grid [ceil(H / sh), ceil(W / sw)] (a phase with fewer rows computes one
more, cut at the end; a negative padding becomes a slice of dy); a phase without taps is zeros, written as
padding of its neighbours. They are then interleaved by concatenations, which are reshapes of the row-major
layout: the sw phases of a row phase
concatenated along the channels are [N, Hm, Wm, sw C] = [N, Hm, Wm sw, C]; the sh row phases concatenated
along the columns are [N, Hm, sh Wm sw, C] = [N, Hm sh, Wm sw, C]; then a slice to [N, H, W, C].

The convolutions are forward ones, so every forward solver serves them (the CPU's implicit GEMM, Winograd,
the GPUs' matrix cores), where conv_bwd_data_gemm computes R S times the input gradient into a patch buffer
and gathers it back (col2im). Chosen where the predicted time of the phases and the interleaving is less.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.target import Target
from openprim.solvers.problem import ConvProblem, problem_of

from .rewrite import create, filter_perm, index_constant, new_constant, reshape, transpose


def _phase_taps(phase: int, pad: int, stride: int, size: int) -> tuple[list[int], int]:
    """The filter taps of one phase along a dim, and its dy offset q."""
    taps = list(range((phase + pad) % stride, size, stride))
    return taps, (phase + pad - taps[0]) // stride if taps else 0


def phases(p: ConvProblem) -> list[dict] | None:
    """Per phase (row-major over (ph, pw)): its taps, dy's padding (top, left, bottom, right, possibly
    negative: a slice) and the forward problem, or None where a dy slice would leave nothing."""
    (sh, sw), (pt, pl, _, _) = p.strides, p.padding
    hm, wm = -(-p.h // sh), -(-p.w // sw)
    out = []
    for ph in range(sh):
        for pw in range(sw):
            rt, qh = _phase_taps(ph, pt, sh, p.r)
            st, qw = _phase_taps(pw, pl, sw, p.s)
            if not rt or not st:
                out.append({"taps": None})
                continue
            top, left = len(rt) - 1 - qh, len(st) - 1 - qw
            pads = (top, left, hm - p.oh - top + len(rt) - 1, wm - p.ow - left + len(st) - 1)
            rows, cols = p.oh + min(pads[0], 0) + min(pads[2], 0), p.ow + min(pads[1], 0) + min(pads[3], 0)
            if rows <= 0 or cols <= 0:
                return None
            fwd = ConvProblem(p.n, p.k, rows, cols, p.c, len(rt), len(st), hm, wm, (1, 1),
                              tuple(max(v, 0) for v in pads), (1, 1), p.groups, "NHWC", "RSCK", p.dtype, "none")
            out.append({"taps": (rt, st), "pads": pads, "problem": fwd})
    return out


def backward_data_by_phases(op: ir.Operation, target: Target, cost) -> bool:
    """Rewrite a strided NHWC prim.conv2d_backward_data (dilation 1) into its phases where cost(problem, kind)
    predicts less time; whether it did."""
    if op.name != "prim.conv2d_backward_data" or dialect.op_attrs(op)["layout"] != "NHWC":
        return False
    p = problem_of(op)
    if tuple(p.strides) == (1, 1) or tuple(p.dilations) != (1, 1):
        return False
    plan = phases(p)
    if plan is None:
        return False
    moved = 3 * 4 * p.n * p.h * p.w * p.c / (target.rates[1] * 1e9)      # the interleaving: ~3 passes over dx
    if sum(cost(ph["problem"]) for ph in plan if ph["taps"]) + moved >= cost(p):
        return False
    (sh, sw), loc = p.strides, op.location
    g, kg, cg = p.groups, p.k // p.groups, p.c // p.groups
    hm, wm = -(-p.h // sh), -(-p.w // sw)
    dy, w = dialect.operand_groups(op)
    with ir.InsertionPoint(op), loc:
        krsc = w if p.filter_layout == "KRSC" else transpose(w, filter_perm(p.filter_layout, "KRSC"), loc)
        taps5 = reshape(krsc, [g, kg, p.r, p.s, cg], loc)
        by_rows, results = {}, []
        for ph in plan:
            if ph["taps"] is None:
                results.append(None)     # zeros: padding of its neighbours (_concat)
                continue
            (rt, st), (top, left, bottom, right) = ph["taps"], ph["pads"]
            if tuple(rt) not in by_rows:                           # a row phase's taps, shared by its sw phases
                by_rows[tuple(rt)] = _gathered(taps5, 2, rt[::-1], p.r, loc)
            sub = _gathered(by_rows[tuple(rt)], 3, st[::-1], p.s, loc)                  # [g, kg, Tr, Ts, cg]
            wf = reshape(transpose(sub, [2, 3, 1, 0, 4], loc), [len(rt), len(st), kg, p.c], loc)
            src = dy
            if min(top, left, bottom, right) < 0:
                starts = [0, max(-top, 0), max(-left, 0), 0]
                ends = [p.n, p.oh - max(-bottom, 0), p.ow - max(-right, 0), p.k]
                src = create("slice", [dy], [e - s for s, e in zip(starts, ends)], dy,
                             {"starts": starts, "ends": ends, "steps": [1, 1, 1, 1]}, loc)
            results.append(create("conv2d", [src, wf, None, None], [p.n, hm, wm, p.c], dy,
                                  {"strides": [1, 1], "padding": [max(v, 0) for v in (top, left, bottom, right)],
                                   "dilations": [1, 1], "groups": g, "layout": "NHWC", "filter_layout": "RSCK",
                                   "activation": "none", "activation_params": []}, loc))
        rows = []
        for i in range(sh):
            row = _concat(results[i * sw:(i + 1) * sw], [p.n, hm, wm, p.c], 3, dy, loc)   # [N, Hm, Wm, sw C]
            rows.append(None if row is None else reshape(row, [p.n, hm, wm * sw, p.c], loc))
        dx = _concat(rows, [p.n, hm, wm * sw, p.c], 2, dy, loc)
        if dx is None:
            dx = create("broadcast", [new_constant(np.zeros(()), dy, loc)], [p.n, hm, wm * sw * sh, p.c], dy, {}, loc)
        dx = reshape(dx, [p.n, hm * sh, wm * sw, p.c], loc)
        if (hm * sh, wm * sw) != (p.h, p.w):
            dx = create("slice", [dx], [p.n, p.h, p.w, p.c], dx,
                        {"starts": [0, 0, 0, 0], "ends": [p.n, p.h, p.w, p.c], "steps": [1, 1, 1, 1]}, loc)
    op.result.replace_all_uses_with(dx)
    op.erase()
    return True


def _gathered(v: ir.Value, axis: int, taps: list[int], size: int, loc) -> ir.Value:
    """v's entries `taps` along `axis` (v itself where they are all of them in order)."""
    if list(taps) == list(range(size)):
        return v
    shape = list(v.type.shape)
    shape[axis] = len(taps)
    return create("gather", [v, index_constant(np.asarray(taps), loc)], shape, v, {"axis": axis}, loc)


def _concat(values: list, part: list[int], axis: int, like: ir.Value, loc) -> ir.Value | None:
    """The concatenation of values (each of shape `part`) along `axis`, where None is zeros: runs of zeros
    are padding of the value before or after them (one pass, where a materialized zero tensor and the
    concat's copy of it were two); None when every value is zeros."""
    out, zeros = None, 0
    for v in values:
        if v is None:
            zeros += part[axis]
            continue
        if zeros and out is None:
            v = _padded(v, axis, zeros, 0, like, loc)
        elif zeros:
            out = _padded(out, axis, 0, zeros, like, loc)
        zeros = 0
        out = v if out is None else create("concat", [out, v], _grown(out, axis, v.type.shape[axis]), like,
                                           {"axis": axis}, loc)
    return _padded(out, axis, 0, zeros, like, loc) if zeros and out is not None else out


def _padded(v: ir.Value, axis: int, before: int, after: int, like: ir.Value, loc) -> ir.Value:
    pads = [0] * (2 * len(v.type.shape))
    pads[axis], pads[len(v.type.shape) + axis] = before, after
    return create("pad", [v], _grown(v, axis, before + after), like, {"pads": pads, "value": 0.0}, loc)


def _grown(v: ir.Value, axis: int, by: int) -> list[int]:
    shape = list(v.type.shape)
    shape[axis] += by
    return shape

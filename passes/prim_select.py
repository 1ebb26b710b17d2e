"""prim-select: choose a layout, then a solver and its parameters for every conv2d and matmul.

1. Layout. The fast CPU solvers want NHWC: an NCHW conv2d (and pooling, batch/group norm) becomes
   transpose -> NHWC op -> transpose back; back-to-back inverse transposes then cancel, so an NCHW
   network pays one transpose at each end instead of two per layer. The transposes first move down
   past the ops between layers that have an NHWC form (concat, elementwise ops, channel slices and
   ShuffleNet's channel shuffle), so that they meet the next layer's.
2. Solver, MIOpen-style. A forced solver (`solver=` option or $OPENPRIM_SOLVER) wins; otherwise the mode
   (`mode=` option, else $OPENPRIM_FIND_MODE, else hybrid) decides where the choice comes from:
     immediate  the tuning database (tuning/db.py), else the heuristic: the applicable solver of the
                registry (solvers/) with the least predicted time, with its default parameters;
     find       compile and time the applicable solvers and a budget of their parameters (tuning/find.py,
                `find-budget=` seconds per problem), keep the fastest correct one, store it in the database;
     hybrid     the database; on a miss, find when $OPENPRIM_FIND_ENFORCE (or `enforce=`) allows it,
                else the heuristic.
   $OPENPRIM_FIND_ENFORCE, after MIOPEN_FIND_ENFORCE (name or number), applies to hybrid mode:
     NONE (1, default)     never search;          DB_UPDATE (2)          search problems that have a record;
     SEARCH (3)            search problems that have none;  SEARCH_DB_UPDATE (4)  search every problem.
   $OPENPRIM_FIND_MODE: find (1, normal), immediate (2, fast), hybrid (3, the default).
   The choice is written on the op: prim.solver, prim.params, prim.problem (the descriptor the database
   keys on: the problem as selection sees it, before the solver's filter relayout), prim.choice
   ("forced", "db", "find" or "heuristic") and, when a time was measured, prim.measured_us.
   The database and Find are the tuning package's (openprim.tuning), which sits above the passes: the
   driver hands the pass a `Tuner` (the `tuner` option, not settable from a pipeline string); without
   one every mode gives the heuristic.
3. Constant weights are re-laid out once, at compile time, into the layout the solver reads
   (RSCK filters, [K, N] GEMM operands; a non-constant operand gets a transpose kernel), then packed
   where the solver asks (filters in channel blocks, a GEMM's rhs in column panels).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.ops import ELEMENTWISE, RHS_PANELS

from openprim.base.target import Target, parse_target
from openprim.dialect import graph_functions
from openprim.solvers import SOLVERS, applicable
from openprim.solvers.problem import DepthwisePointwiseProblem, problem_of

from .rewrite import (constant, create, new_constant, pad_zeros, producer, rebuild, reshape, single_use, swap,
                      transformed_constant, transpose)

NAME = "prim-select"
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
LAYOUT_OPS = ("prim.conv2d", "prim.max_pool2d", "prim.avg_pool2d", "prim.global_avg_pool",
              "prim.batch_norm", "prim.group_norm")
FILTER_PERM = {("KCRS", "RSCK"): [2, 3, 1, 0], ("KRSC", "RSCK"): [1, 2, 3, 0], ("KCRS", "KRSC"): [0, 2, 3, 1]}



def _to_nhwc(op: ir.Operation) -> None:
    """Rewrite an NCHW layout op as transpose -> NHWC op -> transpose."""
    spec_attrs = {k: op.attributes[k] for k in op.attributes}
    operands = dialect.operand_groups(op)
    with ir.InsertionPoint(op), op.location:
        new_operands = list(operands)
        new_operands[0] = transpose(operands[0], TO_NHWC, op.location)
        if op.name == "prim.conv2d":
            if operands[3] is not None:
                new_operands[3] = transpose(operands[3], TO_NHWC, op.location)
            if dialect.op_attrs(op)["filter_layout"] == "KCRS":
                new_operands[1] = transpose(operands[1], FILTER_PERM[("KCRS", "KRSC")], op.location)
                spec_attrs["filter_layout"] = dialect.make_attr("KRSC", "str")
        spec_attrs["layout"] = dialect.make_attr("NHWC", "str")
        out_t = op.result.type
        nhwc_t = ir.RankedTensorType.get([out_t.shape[p] for p in TO_NHWC], out_t.element_type)
        new = ir.Operation.create(op.name, results=[nhwc_t], operands=[v for v in new_operands if v is not None],
                                  attributes=spec_attrs, loc=op.location)
        back = transpose(new.result, TO_NCHW, op.location)
    op.result.replace_all_uses_with(back)
    op.erase()


def _sink_past_layout_free(op: ir.Operation) -> None:
    """op(transpose(a, p), transpose(b, p), ...) -> transpose(op(a, b, ...), p) for the ops that do not
    care about layout: concat (its axis permuted) and elementwise ops whose operands all have the result's
    shape. NCHW networks put such ops between layers (Inception/SqueezeNet concats, DenseNet's BN-ReLU)."""
    kind = op.name[5:]
    inner = [producer(v, "prim.transpose") for v in op.operands]
    out_t = op.result.type
    # The operands as large as the result must all be transposes by one perm; an elementwise op's
    # broadcast operands of the same rank (an SE block's [N, C, 1, 1] scale) are transposed back
    # instead: small, and that transpose cancels with the one that made them.
    full = [kind == "concat" or list(v.type.shape) == list(out_t.shape) for v in op.operands]
    movers = [t for t, f in zip(inner, full) if f]
    if not movers or any(t is None for t in movers) or len({tuple(dialect.op_attrs(t)["perm"]) for t in movers}) != 1:
        return
    if any(not f and len(v.type.shape) != len(out_t.shape) for v, f in zip(op.operands, full)):
        return  # broadcasting from a lower rank: the dims do not line up
    perm = list(dialect.op_attrs(movers[0])["perm"])
    inverse = [perm.index(i) for i in range(len(perm))]
    attrs = {k: op.attributes[k] for k in op.attributes}
    if kind == "concat":
        attrs["axis"] = dialect.make_attr(perm[dialect.op_attrs(op)["axis"] % len(perm)], "i64")
    with ir.InsertionPoint(op), op.location:
        operands = [t.operands[0] if t is not None and list(dialect.op_attrs(t)["perm"]) == perm
                    else transpose(v, inverse, op.location) for v, t in zip(op.operands, inner)]
        _replace_transposed(op, operands, attrs, perm)


def _replace_transposed(op: ir.Operation, operands: list, attrs: dict, perm: list) -> None:
    """Replace op by a copy on `operands` (its operands un-transposed by perm) followed by transpose(perm)."""
    out_t = op.result.type
    shape = [0] * len(perm)
    for i, p in enumerate(perm):   # transpose(x, perm)[i] is x's dim perm[i]
        shape[p] = out_t.shape[i]
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create(op.name, results=[ir.RankedTensorType.get(shape, out_t.element_type)],
                                  operands=operands, attributes=attrs, loc=op.location)
        back = transpose(new.result, perm, op.location)
    op.result.replace_all_uses_with(back)
    op.erase()


def _sink_past_slice(op: ir.Operation) -> None:
    """slice(transpose(x, NHWC -> NCHW)) -> transpose(slice'(x)), the bounds permuted: ShuffleNetV2's channel
    split (a slice on C of NCHW) becomes a slice on the last axis of NHWC. Only layout transposes move:
    another transpose read by several slices (a transformer's heads) would become one per slice."""
    inner = producer(op.operands[0], "prim.transpose")
    if inner is None or list(dialect.op_attrs(inner)["perm"]) != TO_NCHW:
        return
    perm = TO_NCHW
    attrs = {k: op.attributes[k] for k in op.attributes}
    for key in ("starts", "ends", "steps"):
        values = dialect.op_attrs(op)[key]
        moved = [0] * len(perm)
        for i, p in enumerate(perm):
            moved[p] = values[i]
        attrs[key] = dialect.make_attr(moved, "i64s")
    _replace_transposed(op, [inner.operands[0]], attrs, perm)


def _sink_past_reduce(op: ir.Operation) -> None:
    """reduce(transpose(x, p), axes) -> reduce(x, p[axes]) [-> a transpose of the kept axes]: a mean over
    H and W of an NCHW map seen through NHWC (ShuffleNet's head, `x.mean([2, 3])`) reads the NHWC map
    in place instead of a transpose kernel first (that mean: a global average pool, whose NHWC kernel reads
    channel vectors). The transpose left moves only what the reduction kept;
    kept in order (keepdims = 0) or as unit dims (keepdims = 1), it is none or a view."""
    inner = producer(op.operands[0], "prim.transpose")
    if inner is None or list(dialect.op_attrs(inner)["perm"]) != TO_NCHW:
        return  # only layout transposes: a reduction over a transformer's permuted axes stays as written
    attrs = dialect.op_attrs(op)
    perm = TO_NCHW
    rank = len(perm)
    axes = sorted(a % rank for a in attrs["axes"])
    moved = sorted(perm[a] for a in axes)
    if attrs["kind"] == "mean" and rank == 4 and moved == [1, 2]:   # a global average pool: its NHWC kernel
        with ir.InsertionPoint(op), op.location:
            n, h, w, c = inner.operands[0].type.shape
            pool = ir.Operation.create(
                "prim.global_avg_pool", results=[ir.RankedTensorType.get([n, 1, 1, c], op.result.type.element_type)],
                operands=[inner.operands[0]], attributes={"layout": dialect.make_attr("NHWC", "str")},
                loc=op.location)
            op.result.replace_all_uses_with(reshape(pool.result, op.result.type.shape, op.location))
        op.erase()
        return
    new_attrs = {k: op.attributes[k] for k in op.attributes}
    new_attrs["axes"] = dialect.make_attr(moved, "i64s")
    if attrs["keepdims"]:
        _replace_transposed(op, [inner.operands[0]], new_attrs, perm)
        return
    kept = [perm[i] for i in range(rank) if i not in axes]   # source axes of the result, in result order
    order = sorted(kept)
    with ir.InsertionPoint(op), op.location:
        shape = [inner.operands[0].type.shape[a] for a in order]
        new = ir.Operation.create(op.name, results=[ir.RankedTensorType.get(shape, op.result.type.element_type)],
                                  operands=[inner.operands[0]], attributes=new_attrs, loc=op.location)
        out = new.result if kept == order else transpose(new.result, [order.index(a) for a in kept], op.location)
    op.result.replace_all_uses_with(out)
    op.erase()


def _sink_past_channel_shuffle(op: ir.Operation) -> None:
    """The channel shuffle of an NHWC map seen through NCHW, found at its last reshape:
        reshape(transpose(reshape(transpose(x, [0, 3, 1, 2]), [N, g1, .., gk, H, W]), q), [N, C, H, W])
    with q permuting only the channel factors g1..gk (ShuffleNet: [N, g, C/g, H, W], q = (0, 2, 1, 3, 4))
    -> transpose(reshape(transpose(reshape(x, [N, H, W, g1, .., gk]), q'), [N, H, W, C]), [0, 3, 1, 2]),
    q' the same permutation of the factors on the last axes: the shuffle stays in NHWC, and the
    transposes on either side of it cancel with those of the layers around."""
    shuffle = producer(op.operands[0], "prim.transpose")
    split = None if shuffle is None else producer(shuffle.operands[0], "prim.reshape")
    to_nchw = None if split is None else producer(split.operands[0], "prim.transpose")
    if to_nchw is None or list(dialect.op_attrs(to_nchw)["perm"]) != TO_NCHW:
        return
    if not single_use(shuffle.result) or not single_use(split.result):
        return
    n, c, h, w = to_nchw.result.type.shape
    parts = list(split.result.type.shape)
    q = list(dialect.op_attrs(shuffle)["perm"])
    k = len(parts) - 3
    if (k < 2 or parts[0] != n or parts[-2:] != [h, w] or list(op.result.type.shape) != [n, c, h, w]
            or q[0] != 0 or q[-2:] != [k + 1, k + 2]):
        return  # not a split of C alone, or a permutation that moves N, H or W
    loc = op.location
    with ir.InsertionPoint(op), loc:
        x = reshape(to_nchw.operands[0], [n, h, w, *parts[1:-2]], loc)
        x = transpose(x, [0, 1, 2, *[2 + d for d in q[1:-2]]], loc)
        back = transpose(reshape(x, [n, h, w, c], loc), TO_NCHW, loc)
    op.result.replace_all_uses_with(back)
    op.erase()
    shuffle.erase()
    split.erase()


def _sink_transposes(fn) -> None:
    """Move the layout transposes down past the ops that have an NHWC form: concat, elementwise ops,
    slices, reductions and channel shuffles. NCHW networks put such ops between layers; moved past them,
    the transposes of the layers on either side meet and cancel. One pass in program order: a transpose
    moved past one op reaches the next."""
    sinks = {"concat": _sink_past_layout_free, "slice": _sink_past_slice, "reshape": _sink_past_channel_shuffle,
             "reduce": _sink_past_reduce,
             **{k: _sink_past_layout_free for k in ELEMENTWISE}}
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        sink = sinks.get(op.name[5:])
        if sink is not None:
            sink(op)


def _cancel_transposes(fn) -> None:
    """transpose(transpose(x, p), q) with p then q the identity -> x, one transpose per (value, perm)
    (a value read by several NCHW layers gets one transpose each); then drop unused transposes."""
    first = {}
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name != "prim.transpose":
            continue
        inner = producer(op.operands[0], "prim.transpose")
        q = dialect.op_attrs(op)["perm"]
        if inner is not None and [dialect.op_attrs(inner)["perm"][i] for i in q] == list(range(len(q))):
            op.result.replace_all_uses_with(inner.operands[0])
        elif (op.operands[0], tuple(q)) in first:
            op.result.replace_all_uses_with(first[(op.operands[0], tuple(q))])
        else:
            first[(op.operands[0], tuple(q))] = op.result
    changed = True
    while changed:
        changed = False
        for op in reversed([o.operation for o in fn.regions[0].blocks[0].operations]):
            if op.name in ("prim.transpose", "prim.constant") and not list(op.result.uses):
                op.erase()
                changed = True


def _unit_transposes_to_views(fn) -> None:
    """A transpose left that moves only size-1 dims (ConvNeXt's head: [N, 1, 1, C] -> [N, C, 1, 1]) keeps
    the element order: a reshape (a view), not a kernel. Last, so the sinking above still sees transposes."""
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name != "prim.transpose":
            continue
        shape, perm = op.operands[0].type.shape, dialect.op_attrs(op)["perm"]
        moved = [p for p in perm if shape[p] != 1]
        if moved == sorted(moved):
            with ir.InsertionPoint(op), op.location:
                op.result.replace_all_uses_with(reshape(op.operands[0], op.result.type.shape, op.location))
            op.erase()


FIND_MODES = {"1": "find", "normal": "find", "find": "find", "2": "immediate", "fast": "immediate",
              "immediate": "immediate", "3": "hybrid", "hybrid": "hybrid"}
ENFORCE = {"1": "NONE", "2": "DB_UPDATE", "3": "SEARCH", "4": "SEARCH_DB_UPDATE",
           **{n.lower(): n for n in ("NONE", "DB_UPDATE", "SEARCH", "SEARCH_DB_UPDATE")}}


def find_mode(option: str = "") -> str:
    """immediate | find | hybrid, from the pass option, else $OPENPRIM_FIND_MODE, else hybrid."""
    text = option or os.environ.get("OPENPRIM_FIND_MODE", "") or "hybrid"
    if text.lower() not in FIND_MODES:
        raise OpenPrimError(f"unknown find mode '{text}'; modes: immediate (2, fast), find (1, normal), hybrid (3)")
    return FIND_MODES[text.lower()]


def find_enforce(option: str = "") -> str:
    """NONE | DB_UPDATE | SEARCH | SEARCH_DB_UPDATE, from the option, else $OPENPRIM_FIND_ENFORCE."""
    text = option or os.environ.get("OPENPRIM_FIND_ENFORCE", "") or "NONE"
    if text.lower() not in ENFORCE:
        raise OpenPrimError(f"unknown find enforce '{text}'; values: NONE (1), DB_UPDATE (2), SEARCH (3), "
                            "SEARCH_DB_UPDATE (4)")
    return ENFORCE[text.lower()]


def _forced_solver(option: str, op_kind: str):
    name = option or os.environ.get("OPENPRIM_SOLVER", "")
    if not name:
        return None
    if name not in SOLVERS:
        raise OpenPrimError(f"unknown solver '{name}'; solvers: {', '.join(SOLVERS)}")
    return SOLVERS[name] if SOLVERS[name].op == op_kind else None


@dataclass
class Choice:
    solver: object
    params: dict
    source: str                   # "forced", "db", "find" or "heuristic"
    seconds: float | None = None  # measured time, when known


class Tuner(Protocol):
    """Where measured choices come from: given the heuristic's choice, return the database's or Find's."""

    def choose(self, op: ir.Operation, target: Target, fallback: Choice, mode: str, enforce: str,
               budget: float) -> Choice: ...


def heuristic(problem, kind: str, target: Target):
    """The applicable solver with the least predicted time."""
    ok = [s for s, reason in applicable(problem, kind, target) if reason is None]
    return min(ok, key=lambda s: s.cost(problem, target))


def decide(op: ir.Operation, target: Target, forced: str = "", mode: str = "hybrid", enforce: str = "NONE",
           budget: float = 5.0, tuner: Tuner | None = None) -> Choice:
    """The solver and parameters of a conv2d/matmul (before its weights are re-laid out), and their source."""
    problem = problem_of(op)
    kind = op.name[5:]
    solver = _forced_solver(forced, kind)
    if solver is not None:
        reason = dict((s.name, r) for s, r in applicable(problem, kind, target))[solver.name]
        if reason:
            raise OpenPrimError(f"{dialect.where(op.location)}: error: solver '{solver.name}' is not applicable "
                                f"to {problem.descriptor()}: {reason}")
        return Choice(solver, solver.default_params(problem, target), "forced")
    fallback = heuristic(problem, kind, target)
    fallback = Choice(fallback, fallback.default_params(problem, target), "heuristic")
    return fallback if tuner is None else tuner.choose(op, target, fallback, mode, enforce, budget)


def _relayout_weights(op: ir.Operation, choice: Choice) -> ir.Operation:
    """Give the solver its weight layout (constants are permuted now; others through a transpose), then
    pack a constant filter as the solver asks (solvers.base.Solver.packed_filter)."""
    attrs = dialect.op_attrs(op)
    operands = dialect.operand_groups(op)
    if op.name == "prim.matmul":
        packing = choice.solver.packed_rhs(problem_of(op), choice.params)
        with ir.InsertionPoint(op), op.location:
            packed = None if packing is None else transformed_constant(operands[1], packing, op.location)
            if packed is not None:
                operands[1] = packed
                op = swap(op, rebuild(op, operands, {"transpose_rhs": RHS_PANELS}, op.location))
        return op
    if op.name != "prim.conv2d":
        return op
    want = choice.solver.filter_layout()
    have = attrs["filter_layout"]
    if want is not None and want != have:
        with ir.InsertionPoint(op), op.location:
            operands[1] = transpose(operands[1], FILTER_PERM[(have, want)], op.location)
            op = swap(op, rebuild(op, operands, {"filter_layout": want}, op.location))
    packing = choice.solver.packed_filter(problem_of(op), choice.params)
    if packing and dialect.op_attrs(op)["filter_layout"] == want:
        layout, transform = packing
        with ir.InsertionPoint(op), op.location:
            packed = transformed_constant(operands[1], transform, op.location)
            if packed is not None:
                operands[1] = packed
                op = swap(op, rebuild(op, operands, {"filter_layout": layout}, op.location))
    return op


def _untranspose_rhs(op: ir.Operation) -> ir.Operation:
    """matmul with a transposed 2-d rhs ([N, K], like linear's weight) -> the rhs as [K, N], which the
    GEMM solver reads row by row; a constant is transposed now, anything else by a transpose kernel."""
    operands = dialect.operand_groups(op)
    if op.name != "prim.matmul" or not dialect.op_attrs(op)["transpose_rhs"] or len(operands[1].type.shape) != 2:
        return op
    with ir.InsertionPoint(op), op.location:
        operands[1] = transpose(operands[1], [1, 0], op.location)
        return swap(op, rebuild(op, operands, {"transpose_rhs": 0}, op.location))



def apply(op: ir.Operation, choice: Choice, problem) -> ir.Operation:
    """Write the choice on the op (weights re-laid out for its solver); `problem` is the descriptor's."""
    op = _relayout_weights(op, choice)
    i64 = ir.IntegerType.get_signless(64)
    op.attributes["prim.solver"] = ir.StringAttr.get(choice.solver.name)
    op.attributes["prim.params"] = ir.DictAttr.get({k: ir.IntegerAttr.get(i64, v) for k, v in choice.params.items()})
    op.attributes["prim.problem"] = ir.StringAttr.get(problem.descriptor())
    op.attributes["prim.choice"] = ir.StringAttr.get(choice.source)
    if choice.seconds is not None:
        op.attributes["prim.measured_us"] = ir.FloatAttr.get_f64(choice.seconds * 1e6)
    return op


LAYOUTS = ("NHWC", "keep")


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise OpenPrimError(f"unknown layout '{layout}'; layouts: NHWC (run NCHW ops in NHWC), keep (leave layouts)")
    return layout


FILTER_CHANNEL_DIM = {"KRSC": 3, "RSCK": 2, "KCRS": 1}


def _pad_channels(op: ir.Operation, target: Target) -> ir.Operation:
    """An NHWC convolution whose input channels are not a multiple of 8 (a network's 3-channel stem)
    gets zero channels appended to its input and filter where the predicted time says it pays: the
    matrix-core kernels read 8 channels (16 bytes) at a time, and on them even 8/3 of the flops beat
    the SIMT kernel (cuDNN pads the stem the same way). The padded filter is folded when constant."""
    if op.name != "prim.conv2d" or not target.is_gpu:
        return op
    p = problem_of(op)
    if p.layout != "NHWC" or p.groups != 1 or p.c % 8 == 0:
        return op
    padded = dataclasses.replace(p, c=-(-p.c // 8) * 8)
    item = 4 if p.dtype == "f32" else 2
    pad_time = item * p.n * p.h * p.w * (p.c + padded.c) / (target.rates[1] * 1e9)
    best = lambda q: heuristic(q, "conv2d", target).cost(q, target)  # noqa: E731
    if best(padded) + pad_time >= best(p):
        return op
    operands = dialect.operand_groups(op)
    extra = padded.c - p.c
    with ir.InsertionPoint(op), op.location:
        operands[0] = pad_zeros(operands[0], 3, extra, op.location)
        operands[1] = pad_zeros(operands[1], FILTER_CHANNEL_DIM[dialect.op_attrs(op)["filter_layout"]], extra,
                                op.location)
        return swap(op, rebuild(op, operands, {}, op.location))


def _densify_groups(op: ir.Operation, target: Target) -> ir.Operation:
    """A grouped convolution with a constant filter on a GPU, with its groups merged into fewer, bigger
    ones whose filters are block-diagonal (zeros between the merged groups), where the predicted time says
    it pays: into groups of 64 input and 64 output channels (the matrix-core implicit GEMMs' grouped tile:
    64 / (C/groups) times the multiplies, ResNeXt's 32x4d: 16x at 4 per group, 2x at 32), or into one
    dense convolution (`groups` times the multiplies), on the matrix cores either way, where the SIMT
    kernel's tile is mostly empty with few channels per group."""
    if op.name != "prim.conv2d" or not target.is_gpu:
        return op
    p = problem_of(op)
    if p.groups == 1 or producer(dialect.operand_groups(op)[1], "prim.constant") is None:
        return op
    kg, cg = p.k // p.groups, p.c // p.groups
    merged = [1]
    if p.c % 64 == 0 and p.k % 64 == 0 and 64 % cg == 0 and 64 % kg == 0 and p.c // 64 == p.k // 64:
        merged.append(p.c // 64)
    best = lambda q: heuristic(q, "conv2d", target).cost(q, target)  # noqa: E731
    cost, groups = min((best(dataclasses.replace(p, groups=g)), g) for g in merged)
    if cost >= best(p):
        return op
    w = constant(dialect.operand_groups(op)[1])
    k_axis, c_axis = FILTER_K_C_AXES[p.filter_layout]
    canonical = np.moveaxis(w, (k_axis, c_axis), (0, 1))          # [K, C/groups, ...]
    per = p.groups // groups                                         # old groups in a new one
    full = np.zeros((p.k, p.c // groups) + canonical.shape[2:])
    for g in range(p.groups):
        c0 = (g % per) * cg                                          # its channels within the new group
        full[g * kg:(g + 1) * kg, c0:c0 + cg] = canonical[g * kg:(g + 1) * kg]
    operands = dialect.operand_groups(op)
    with ir.InsertionPoint(op), op.location:
        operands[1] = new_constant(np.moveaxis(full, (0, 1), (k_axis, c_axis)), operands[1], op.location)
        return swap(op, rebuild(op, operands, {"groups": groups}, op.location))


FILTER_K_C_AXES = {"KCRS": (0, 1), "KRSC": (0, 3), "RSCK": (3, 2)}


def _subsample_pointwise(op: ir.Operation, target: Target) -> ir.Operation:
    """A strided, unpadded 1x1 NHWC convolution on the CPU (ResNet's downsampling shortcuts) as a strided
    slice of its input and a stride-1 1x1 convolution: the slice copies the few pixels the convolution
    reads (a quarter of the map, at stride 2), and the convolution then runs as the GEMM kernel over all
    pixels (solvers/cpu.py's pointwise path), which takes only stride-1 convolutions. ResNet-50 at batch 1:
    the 14x14x1024 -> 7x7x2048 shortcut ran at 98 GFLOP/s as an implicit GEMM, the stride-1 1x1 layers of
    the same size at 180."""
    if op.name != "prim.conv2d" or target.is_gpu:
        return op
    p = problem_of(op)
    if p.layout != "NHWC" or (p.r, p.s) != (1, 1) or tuple(p.strides) == (1, 1) or any(p.padding) \
            or tuple(p.dilations) != (1, 1) or p.groups != 1:
        return op
    (sh, sw), operands = p.strides, dialect.operand_groups(op)
    ends = [p.n, (p.oh - 1) * sh + 1, (p.ow - 1) * sw + 1, p.c]
    with ir.InsertionPoint(op), op.location:
        operands[0] = create("slice", [operands[0]], [p.n, p.oh, p.ow, p.c], operands[0],
                             {"starts": [0, 0, 0, 0], "ends": ends, "steps": [1, sh, sw, 1]}, op.location)
        return swap(op, rebuild(op, operands, {"strides": [1, 1]}, op.location))


DEPTHWISE_POINTWISE = "conv_depthwise_pointwise_mma"
SELECTED_OPS = ("prim.conv2d", "prim.matmul", "prim.attention", "prim.depthwise_pointwise")


def _fuse_depthwise_pointwise(fn, target: Target, forced: str) -> None:
    """MobileNet's depthwise convolution and the 1x1 convolution that alone reads it, as one
    prim.depthwise_pointwise (kernels/nvidia/depthwise_pointwise.py: the depthwise result stays on chip),
    where its solver applies, pays (its grid hides the depthwise's latency: solver.pays) and predicts
    less time than the two layers' chosen solvers; every pair it applies to when it is the forced solver,
    none when another one is. The filters become constants in the op's layouts: [R, S, C] and [C, K]."""
    solver = SOLVERS[DEPTHWISE_POINTWISE]
    if target.kind not in solver.targets or forced not in ("", DEPTHWISE_POINTWISE):
        return
    for pw in [o.operation for o in fn.regions[0].blocks[0].operations if o.operation.name == "prim.conv2d"]:
        p = problem_of(pw)
        x, w, bias, residual = dialect.operand_groups(pw)
        dw = producer(x, "prim.conv2d")
        if p.layout != "NHWC" or (p.r, p.s, p.groups) != (1, 1, 1) or tuple(p.strides) != (1, 1) or any(p.padding) \
                or dw is None or not single_use(x):
            continue
        q = problem_of(dw)
        dx, dwf, dw_bias, dw_residual = dialect.operand_groups(dw)
        taps, weights = constant(dwf), constant(w)
        if not q.depthwise or q.layout != "NHWC" or dw_residual is not None or taps is None or weights is None:
            continue
        fused = DepthwisePointwiseProblem(q.n, q.c, q.h, q.w, p.k, q.r, q.s, q.oh, q.ow, q.strides, q.padding,
                                          q.dilations, p.dtype, q.epilogue, p.epilogue)
        if solver.is_applicable(fused, target) or not forced and (not solver.pays(fused, target) or solver.cost(
                fused, target) >= heuristic(q, "conv2d", target).cost(q, target) + heuristic(p, "conv2d", target).cost(p, target)):
            continue
        a, pa = dialect.op_attrs(dw), dialect.op_attrs(pw)
        with ir.InsertionPoint(pw), pw.location:
            kd, cd = FILTER_K_C_AXES[q.filter_layout]
            dw_rsc = np.moveaxis(taps, (kd, cd), (0, 1))[:, 0].transpose(1, 2, 0)        # [R, S, C]
            kp, cp = FILTER_K_C_AXES[p.filter_layout]
            pw_ck = np.moveaxis(weights, (kp, cp), (0, 1))[:, :, 0, 0].T                  # [C, K]
            attrs = {"strides": a["strides"], "padding": a["padding"], "dilations": a["dilations"], "layout": "NHWC",
                     "dw_activation": a["activation"], "dw_activation_params": a["activation_params"],
                     "activation": pa["activation"], "activation_params": pa["activation_params"]}
            y = create("depthwise_pointwise", [dx, new_constant(dw_rsc, dwf, pw.location), dw_bias,
                                               new_constant(pw_ck, w, pw.location), bias, residual],
                       pw.result.type.shape, pw.result, attrs, pw.location)
        pw.result.replace_all_uses_with(y)
        pw.erase()
        dw.erase()
        for old in (dwf, w):
            if not list(old.uses):
                old.owner.erase()


def prepare(fn, layout: str, target: Target, forced: str = "") -> list[ir.Operation]:
    """Stage 1 on a graph function (layouts, transposed GEMM operands; unless a solver is forced, dense
    grouped convolutions on GPUs and subsampled strided 1x1 convolutions on the CPU; channel padding for
    matrix cores); returns the conv2d/matmul ops still to choose a solver for, as selection sees them."""
    ops = lambda: [o.operation for o in fn.regions[0].blocks[0].operations]  # noqa: E731
    if layout == "NHWC":
        for op in ops():
            if op.name in LAYOUT_OPS and dialect.op_attrs(op)["layout"] == "NCHW":
                _to_nhwc(op)
        _sink_transposes(fn)
        _cancel_transposes(fn)
    else:
        check_layout(layout)
    _fuse_depthwise_pointwise(fn, target, forced)
    reshape_problem = (lambda op: op) if forced else \
        (lambda op: _subsample_pointwise(_densify_groups(op, target), target))
    return [_pad_channels(reshape_problem(_untranspose_rhs(op)), target) for op in ops()
            if op.name in SELECTED_OPS and "prim.solver" not in op.attributes]


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    solver: str = ""          # force a solver (else $OPENPRIM_SOLVER, else the heuristic)
    layout: str = "NHWC"      # "NHWC": run NCHW ops in NHWC through transposes; "keep": leave layouts

    mode: str = ""            # immediate | find | hybrid (else $OPENPRIM_FIND_MODE, else hybrid)
    find_budget: float = 5.0  # seconds of find per problem
    enforce: str = ""         # hybrid's searches: NONE | DB_UPDATE | SEARCH | SEARCH_DB_UPDATE ($OPENPRIM_FIND_ENFORCE)
    tuner: Tuner | None = None  # the database and Find (given by the driver, not by pipeline text)

    def __post_init__(self):
        self.parsed_target = parse_target(self.target)
        check_layout(self.layout)
        for name in (self.solver, os.environ.get("OPENPRIM_SOLVER", "")):
            if name and name not in SOLVERS:
                raise OpenPrimError(f"unknown solver '{name}'; solvers: {', '.join(SOLVERS)}")
        self.mode, self.enforce = find_mode(self.mode), find_enforce(self.enforce)

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        with module_op.context:
            for fn in graph_functions(module_op):
                choices = {}  # problem descriptor -> Choice: repeated layers are decided (and found) once
                forced = self.solver or os.environ.get("OPENPRIM_SOLVER", "")
                for op in prepare(fn, self.layout, self.parsed_target, forced):
                    problem = problem_of(op)
                    key = problem.descriptor()
                    if key not in choices:
                        choices[key] = decide(op, self.parsed_target, self.solver, self.mode, self.enforce,
                                              self.find_budget, self.tuner)
                    apply(op, choices[key], problem)
                _cancel_transposes(fn)
                _unit_transposes_to_views(fn)

"""prim-select: a solver and its parameters for every conv2d, matmul and attention, and their weights laid out for it.

0. Layout. On a graph function that prim-layout has not laid out (no prim.layout mark), prim-layout's stage
   runs first (passes/prim_layout.py: NCHW layers in NHWC through transposes that cancel), with this
   pass's `layout` option; on one it has, its choice stands and the mark is dropped.
1. Problems. Each problem is put in the form its solvers read before one is chosen (prepare): a 2-d
   transposed GEMM rhs ([N, K], a linear layer's weight) becomes [K, N]; on NVIDIA a depthwise convolution
   that only a 1x1 convolution reads becomes one prim.depthwise_pointwise where that pays; unless a solver
   is forced, a grouped convolution with a constant filter on a GPU becomes a denser one with a
   block-diagonal filter, and a strided 1x1 convolution on the CPU reads a strided slice of its input,
   where the predicted time says so; a GPU convolution with few input channels gets zero channels for the
   matrix cores where that pays. A backward-data convolution becomes forward ones where that pays: a
   stride-1 one the forward convolution it is (_backward_data_as_forward), a strided one a stride-1
   convolution per phase of its rows and columns, interleaved (passes/backward_data_phases.py). A filter
   gradient whose only solver is the reference loop nest (the GPUs) becomes one GEMM per filter tap
   (passes/backward_weights_gemms.py).
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
   where the solver asks (filters in channel blocks, a GEMM's rhs in column panels). Inverse transposes
   left back to back cancel, and a transpose that moves only size-1 dims becomes a reshape (a view).
   Parameters (weights="values") that only transposes read are stored permuted instead
   (passes/param_layouts.py); a solver that needs a constant filter (a Winograd-transformed one) is not
   applicable to a filter that is not a constant (needs_constant_filter).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.settings import FIND_ENFORCE, FIND_MODE, SOLVER, setting
from openprim.base.ops import RHS_PANELS, filter_block, winograd_filter
from openprim.base.target import Target
from openprim.dialect import contract, graph_functions
from openprim.kernels.gpu import transpose as gpu_transpose
from openprim.solvers import SOLVERS, applicable
from openprim.solvers.cpu_backward import flip_pads, forward_problem
from openprim.solvers.problem import SOLVER_OP, DepthwisePointwiseProblem, problem_of

from . import slow_fallbacks
from .param_layouts import store_params_permuted
from .prim_layout import MARK, cancel_transposes, check_layout, lay_out
from .matmul_views import erase_dead
from .view_chains import collapse_moves, reshape_or_transpose
from .backward_data_phases import backward_data_by_phases
from .backward_weights_gemms import backward_weights_as_gemms
from .norm_matmul import fuse_norm_matmul
from .rewrite import (constant, create, filter_perm, index_constant, new_constant, pad_zeros, producer, rebuild,
                      reshape, single_use, swap, transformed_constant, transpose)

NAME = "prim-select"


def _unit_transposes_to_views(fn) -> None:
    """A transpose left that moves only size-1 dims (ConvNeXt's head: [N, 1, 1, C] -> [N, C, 1, 1]) keeps
    the element order: a reshape (a view), not a kernel. Last, so the layout stage's sinking sees transposes."""
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
    text = option or setting(FIND_MODE) or "hybrid"
    if text.lower() not in FIND_MODES:
        raise OpenPrimError(f"unknown find mode '{text}'; modes: immediate (2, fast), find (1, normal), hybrid (3)")
    return FIND_MODES[text.lower()]


def find_enforce(option: str = "") -> str:
    """NONE | DB_UPDATE | SEARCH | SEARCH_DB_UPDATE, from the option, else $OPENPRIM_FIND_ENFORCE."""
    text = option or setting(FIND_ENFORCE) or "NONE"
    if text.lower() not in ENFORCE:
        raise OpenPrimError(f"unknown find enforce '{text}'; values: NONE (1), DB_UPDATE (2), SEARCH (3), "
                            "SEARCH_DB_UPDATE (4)")
    return ENFORCE[text.lower()]


def forced_solver(option: str = "") -> str:
    """The solver forced on every conv2d/matmul: the pass option, else $OPENPRIM_SOLVER, else none ("")."""
    name = option or setting(SOLVER)
    if name and name not in SOLVERS:
        raise OpenPrimError(f"unknown solver '{name}'; solvers: {', '.join(SOLVERS)}")
    return name


def _forced_solver(name: str, op_kind: str):
    return SOLVERS[name] if name and SOLVERS[name].op == SOLVER_OP.get(op_kind, op_kind) else None


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


def needs_constant_filter(solver, problem, target: Target) -> bool:
    """Whether a convolution solver reads its filter only as transformed at compile time: its packed filter
    (Solver.packed_filter) is a Winograd layout (solvers/winograd.py's packed kernels). Given a filter that is
    not a constant (computed, or a parameter under weights="values") it has no kernel of its own, only the
    untiled linalg form; the other packings (filter blocks, GEMM panels) are layouts their kernels also read
    unpacked."""
    if solver.op != "conv2d":
        return False
    packing = solver.packed_filter(problem, solver.default_params(problem, target))
    return bool(packing) and winograd_filter(packing[0])[0] > 0


NOT_CONSTANT = "needs a constant filter (transformed at compile time); this filter is computed or a parameter"


def _constant_filter(op: ir.Operation) -> bool:
    """Whether a conv2d's filter (a matmul's rhs) is a prim.constant (after the layout stage's folding)."""
    groups = dialect.operand_groups(op)
    return producer(groups[3 if op.name == "prim.norm_matmul" else 1], "prim.constant") is not None


def heuristic(problem, kind: str, target: Target, constant_filter: bool = True):
    """The applicable solver with the least predicted time; constant_filter False: of those that do not
    need a constant filter (needs_constant_filter)."""
    ok = [s for s, reason in applicable(problem, kind, target) if reason is None
          and (constant_filter or not needs_constant_filter(s, problem, target))]
    return min(ok, key=lambda s: s.cost(problem, target))


def _reference_only(problem, target: Target) -> bool:
    """Whether a reference loop nest is the only solver of a convolution problem on `target`."""
    return all(s.name.endswith("_reference") for s, why in applicable(problem, "conv2d", target) if why is None)


def predicted_time(problem, target: Target) -> float:
    """The heuristic's predicted seconds of a convolution problem (any direction), with a filter that may
    not be a constant: what rewriting a problem into others compares."""
    return heuristic(problem, "conv2d", target, False).cost(problem, target)


def decide(op: ir.Operation, target: Target, forced: str = "", mode: str = "hybrid", enforce: str = "NONE",
           budget: float = 5.0, tuner: Tuner | None = None) -> Choice:
    """The solver and parameters of a conv2d/matmul (before its weights are re-laid out), and their source.
    A solver that needs a constant filter is not applicable to one that is not (forced, it is an error; from
    the database or Find, the heuristic's choice stands instead)."""
    problem = problem_of(op)
    kind = op.name[5:]
    constant_filter = _constant_filter(op)
    solver = _forced_solver(forced, kind)
    if solver is not None and getattr(problem, "direction", "fwd") not in solver.directions:
        solver = None     # a solver forced on the convolutions of its direction only, as on its op kind only
    if solver is not None:
        reason = dict((s.name, r) for s, r in applicable(problem, kind, target))[solver.name]
        if reason is None and not constant_filter and needs_constant_filter(solver, problem, target):
            reason = NOT_CONSTANT
        if reason:
            raise OpenPrimError(f"{dialect.where(op.location)}: error: solver '{solver.name}' is not applicable "
                                f"to {problem.descriptor()}: {reason}")
        return Choice(solver, solver.default_params(problem, target), "forced")
    fallback = heuristic(problem, kind, target, constant_filter)
    fallback = Choice(fallback, fallback.default_params(problem, target), "heuristic")
    if tuner is None:
        return fallback
    choice = tuner.choose(op, target, fallback, mode, enforce, budget)
    return fallback if not constant_filter and needs_constant_filter(choice.solver, problem, target) else choice


def _relayout_weights(op: ir.Operation, choice: Choice) -> ir.Operation:
    """Give the solver its weight layout (constants are permuted now; others through a transpose), then
    pack a constant filter as the solver asks (solvers.base.Solver.packed_filter)."""
    attrs = dialect.op_attrs(op)
    operands = dialect.operand_groups(op)
    if op.name in ("prim.matmul", "prim.norm_matmul"):
        problem = problem_of(op)
        rhs = 1 if op.name == "prim.matmul" else 3         # (a norm_matmul's panels: its rank-3 rhs says so)
        wide = choice.solver.padded_n(problem, choice.params)
        if wide is not None and rhs == 1 and constant(operands[1]) is not None:
            return _padded_matmul(op, choice, wide)
        packing = choice.solver.packed_rhs(problem, choice.params)
        with ir.InsertionPoint(op), op.location:
            packed = None if packing is None else transformed_constant(operands[rhs], packing, op.location)
            if packed is not None:
                operands[rhs] = packed
                op = swap(op, rebuild(op, operands, {"transpose_rhs": RHS_PANELS} if rhs == 1 else {}, op.location))
        return op
    if op.name == "prim.conv2d_backward_weights":
        return _relayout_filter_gradient(op, choice)
    if op.name not in ("prim.conv2d", "prim.conv2d_backward_data"):
        return op
    want = choice.solver.filter_layout()
    have = attrs["filter_layout"]
    on_gpu = "cpu" not in choice.solver.targets
    packing = choice.solver.packed_filter(problem_of(op), choice.params)
    block = filter_block(packing[0]) if packing else 0
    # a flipped input-gradient filter is relaid out unflipped and flipped after (the transposes then merge)
    unflipped = _reversed_taps_of(operands[1]) if have == "RSCK" else None
    source, flip_ops = (operands[1], []) if unflipped is None else unflipped
    if block and constant(operands[1]) is None and not _stored_parameter(operands[1]):
        with ir.InsertionPoint(op), op.location:
            relaid = _block_packed(source, have, block, op.location)            # [K/b, R, S, C, b]
            operands[1] = relaid if unflipped is None else _taps_reversed(relaid, 1, op.location)
            op = swap(op, rebuild(op, operands, {"filter_layout": packing[0]}, op.location))
        erase_dead(flip_ops)
        _one_transpose(relaid, on_gpu)
        return op
    if want is not None and want != have:
        with ir.InsertionPoint(op), op.location:
            relaid = transpose(source, filter_perm(have, want), op.location)
            operands[1] = relaid if unflipped is None else _taps_reversed(relaid, want.index("R"), op.location)
            op = swap(op, rebuild(op, operands, {"filter_layout": want}, op.location))
        erase_dead(flip_ops)
        if constant(relaid) is None:
            _one_transpose(relaid, on_gpu)
    if packing and dialect.op_attrs(op)["filter_layout"] == want:
        layout, transform = packing
        with ir.InsertionPoint(op), op.location:
            packed = transformed_constant(operands[1], transform, op.location)
            if packed is not None:
                operands[1] = packed
                op = swap(op, rebuild(op, operands, {"filter_layout": layout}, op.location))
    return op


def _block_packed(w: ir.Value, have: str, block: int, loc) -> ir.Value:
    """A filter computed at run time (a training graph's, or a flipped one) in blocks of `block` output
    channels, "KRSC<b>k" [K/b, R, S, C, b], by one transpose from its layout `have` (its K split first: a
    view), where a constant one is packed at compile time. The transpose to the solver's plain layout
    costs the same; the blocks make the CPU implicit GEMM read each tile's filter slice as one stream (ResNet-18's
    3x3 layers at batch 8 on 2 AVX2 cores, the filter an input, its transpose included: 512 channels at 7x7
    23.7 -> 18.6 ms, 256 at 14x14 18.2 -> 13.3 ms)."""
    shape = list(w.type.shape)
    k = have.index("K")
    names = list(have[:k]) + ["B", "b"] + list(have[k + 1:])
    split = reshape(w, shape[:k] + [shape[k] // block, block] + shape[k + 1:], loc)
    return transpose(split, [names.index(d) for d in "BRSCb"], loc)


def _stored_parameter(w: ir.Value) -> bool:
    """Whether filter w is a parameter under weights="values" read through transposes only, which
    param_layouts stores in the layout they make (no kernel per call; a blocked layout it cannot store)."""
    while isinstance(w.owner, ir.Operation) and w.owner.name == "prim.transpose":
        w = w.owner.operands[0]
    if not isinstance(w.owner, ir.Block):
        return False
    arg, block = ir.BlockArgument(w), w.owner
    return arg.arg_number >= len(block.arguments) - len(contract.param_names(block.owner))


PADDED_COLUMNS_BYTES = 1 << 20   # _pad_columns: the least weight bytes worth a slice launch on a GPU


def _padded_matmul(op: ir.Operation, choice: Choice, wide: int) -> ir.Operation:
    """matmul(x, W[K, N]) + bias -> slice(matmul(x, W'[K, wide]) + bias', N): W' (zero columns appended) packed
    into its panels (Solver.padded_n), the bias padded alike; returns the new matmul."""
    n = op.result.type.shape[-1]
    packing = choice.solver.packed_rhs(dataclasses.replace(problem_of(op), n=wide), choice.params)
    with ir.InsertionPoint(op), op.location:
        rhs = transformed_constant(dialect.operand_groups(op)[1],
                                   lambda w: packing(np.pad(w, ((0, 0), (0, wide - n)))), op.location)
    return _widened(op, wide, rhs, {"transpose_rhs": RHS_PANELS})


def _widened(op: ir.Operation, wide: int, rhs: ir.Value, attrs: dict) -> ir.Operation:
    """The matmul `op` computing `wide` columns from `rhs` (its [K, N] rhs with zero columns appended, in
    whatever form `attrs` say), the bias padded with zeros alike, its result sliced back to N columns; returns
    the new matmul."""
    operands = dialect.operand_groups(op)
    n = op.result.type.shape[-1]
    with ir.InsertionPoint(op), op.location:
        if operands[2] is not None:
            operands[2] = pad_zeros(operands[2], 0, wide - n, op.location)
        operands[1] = rhs
        shape = list(op.result.type.shape)
        new = rebuild(op, operands, attrs, op.location,
                      ir.RankedTensorType.get(shape[:-1] + [wide], op.result.type.element_type))
        cut = create("slice", [new.result], shape, op.result, {"starts": [0] * len(shape), "ends": shape,
                                                               "steps": [1] * len(shape)}, op.location)
    op.result.replace_all_uses_with(cut)
    op.erase()
    return new


def _pad_columns(op: ir.Operation, target: Target) -> ir.Operation:
    """A GPU matmul whose constant [K, N] rhs has N no multiple of 8 (a vocabulary: GPT-2's 50257) gets zero
    columns appended up to the next multiple, its result sliced back, where the predicted time says it pays:
    the matrix-core GEMMs read 8 columns (16 bytes) at a time, and without them the layer falls to the SIMT
    GEMM. Not with a residual epilogue (it would need padding per call), nor under PADDED_COLUMNS_BYTES of
    weights (a classifier's 7 columns: its time is its launch, and the slice would add one)."""
    if op.name != "prim.matmul" or not target.is_gpu:
        return op
    p = problem_of(op)
    rhs = dialect.operand_groups(op)[1]
    if p.n % 8 == 0 or p.transpose_rhs or p.batched_rhs or "residual" in p.epilogue.split("+") \
            or len(rhs.type.shape) != 2 or producer(rhs, "prim.constant") is None \
            or p.k * p.n * (4 if p.dtype == "f32" else 2) < PADDED_COLUMNS_BYTES:
        return op
    padded = dataclasses.replace(p, n=-(-p.n // 8) * 8)
    item = 4 if p.dtype == "f32" else 2
    slice_time = 2 * item * p.batch * p.m * p.n / (target.rates[1] * 1e9)     # the slice reads and writes M x N
    best = lambda q: heuristic(q, "matmul", target).cost(q, target)  # noqa: E731
    if best(padded) + slice_time >= best(p):
        return op
    with ir.InsertionPoint(op), op.location:
        wide = pad_zeros(rhs, 1, padded.n - p.n, op.location)
    return _widened(op, padded.n, wide, {})


def _relayout_filter_gradient(op: ir.Operation, choice: Choice) -> ir.Operation:
    """A filter gradient computed in the solver's filter layout, transposed back into the op's."""
    want, have = choice.solver.filter_layout(), dialect.op_attrs(op)["filter_layout"]
    if want is None or want == have:
        return op
    perm = filter_perm(have, want)
    shape = [op.result.type.shape[p] for p in perm]
    with ir.InsertionPoint(op), op.location:
        new = rebuild(op, dialect.operand_groups(op), {"filter_layout": want}, op.location,
                      ir.RankedTensorType.get(shape, op.result.type.element_type))
        back = transpose(new.result, [perm.index(i) for i in range(4)], op.location)
    op.result.replace_all_uses_with(back)
    op.erase()
    return new


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
    contract.set_solver(op, choice.solver.name)
    contract.set_params(op, choice.params)
    contract.set_problem(op, problem.descriptor())
    contract.set_choice(op, choice.source)
    if choice.seconds is not None:
        contract.set_measured_us(op, choice.seconds * 1e6)
    return op


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
def _backward_data_as_forward(op: ir.Operation, target: Target) -> ir.Operation:
    """A stride-1 NHWC backward-data convolution as the forward convolution it is, where the predicted time
    says so: dx = dy, padded by d(R-1) - pad on each side, correlated with the filter's taps reversed and its
    K and C swapped within each group (RSCK: wf[r, s, kk, g Cg + c] = w[g Kg + kk, R-1-r, S-1-s, c]), made by a
    gather of the reversed taps and a transpose. Every forward solver then serves it (implicit GEMM, direct,
    depthwise, the GPUs' matrix cores), where the backward-data solvers are GEMM + col2im or the reference."""
    if op.name != "prim.conv2d_backward_data" or dialect.op_attrs(op)["layout"] != "NHWC":
        return op
    p = problem_of(op)
    if tuple(p.strides) != (1, 1) or min(flip_pads(p)) < 0:
        return op
    q = forward_problem(p)
    flip = 3 * 2 * 4 * p.k * (p.c // p.groups) * p.r * p.s / (target.rates[1] * 1e9)   # 3 kernels over the filter
    if predicted_time(q, target) + flip >= predicted_time(p, target):
        return op
    g, kg, cg, loc = p.groups, p.k // p.groups, p.c // p.groups, op.location
    dy, w = dialect.operand_groups(op)
    fl, taps = p.filter_layout, p.r * p.s
    relayout = producer(w, "prim.transpose")
    if relayout is not None:         # prim-layout's transpose of the filter: start from what it read
        perm, w = dialect.op_attrs(relayout)["perm"], relayout.operands[0]
        fl = "".join(fl[list(perm).index(d)] for d in range(4))
    with ir.InsertionPoint(op), loc:
        krsc = w if fl == "KRSC" else transpose(w, filter_perm(fl, "KRSC"), loc)
        taps_kc = reshape(krsc, [g, kg, taps, cg], loc)
        rsck = reshape(transpose(taps_kc, [2, 1, 0, 3], loc), [p.r, p.s, kg, p.c], loc)  # RSCK of q: [R, S, Kg, C]
        wf = _taps_reversed(rsck, 0, loc) if taps > 1 else rsck
        y = create("conv2d", [dy, wf, None, None], op.result.type.shape, op.result,
                   {"strides": [1, 1], "padding": list(q.padding), "dilations": list(p.dilations), "groups": g,
                    "layout": "NHWC", "filter_layout": "RSCK", "activation": "none", "activation_params": []}, loc)
    _one_transpose(rsck, target.is_gpu)
    op.result.replace_all_uses_with(y)
    op.erase()
    if relayout is not None and not list(relayout.result.uses):
        relayout.erase()
    return y.owner


def _taps_reversed(w: ir.Value, at: int, loc) -> ir.Value:
    """Filter w with its taps reversed (R and S, dims at and at + 1): a gather of whole rows along the
    merged R S dim, the rows everything after it (kernels/cpu/gather.py copies them as vectors)."""
    shape = list(w.type.shape)
    taps = shape[at] * shape[at + 1]
    merged = reshape(w, [math.prod(shape[:at]), taps, math.prod(shape[at + 2:])], loc)
    flipped = create("gather", [merged, index_constant(np.arange(taps)[::-1], loc)], merged.type.shape, merged,
                     {"axis": 1}, loc)
    return reshape(flipped, shape, loc)


def _reversed_taps_of(w: ir.Value) -> tuple[ir.Value, list[ir.Operation]] | None:
    """(the filter that _taps_reversed(., 0) reversed into w, the three ops that did it), else None."""
    outer = producer(w, "prim.reshape")
    flip = producer(outer.operands[0], "prim.gather") if outer is not None else None
    inner = producer(flip.operands[0], "prim.reshape") if flip is not None else None
    index = constant(flip.operands[1]) if inner is not None else None
    shape = list(w.type.shape)
    if index is None or dialect.op_attrs(flip)["axis"] != 1 or list(flip.operands[0].type.shape)[0] != 1 or \
            list(index) != list(range(shape[0] * shape[1]))[::-1] or inner.operands[0].type != w.type:
        return None            # (not R and S reversed as one dim: a gather of anything else stays where it is)
    return inner.operands[0], [inner, flip, outer]


def _one_transpose(v: ir.Value, on_gpu: bool) -> None:
    """The reshapes and transposes that made the run-time filter v as at most one transpose (collapse_moves;
    a flipped backward-data filter's relayouts were three copies of the filter), on GPUs only where that is
    a tiled transpose (a batched swap of two groups of dims: gpu_transpose.split)."""
    end = producer(v)
    if end is not None and reshape_or_transpose(end):
        collapse_moves(end, reshape_or_transpose,
                       (lambda perm: gpu_transpose.split(perm) is not None) if on_gpu else (lambda perm: True))


SELECTED_OPS = ("prim.conv2d", "prim.matmul", "prim.norm_matmul", "prim.attention", "prim.depthwise_pointwise",
                "prim.conv2d_backward_data", "prim.conv2d_backward_weights")


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
    """Stages 0 and 1 on a graph function (module docstring): the layouts unless prim-layout has laid the
    function out, then the problems in their solvers' form; returns the conv2d/matmul ops still to choose a
    solver for, as selection sees them."""
    ops = lambda: [o.operation for o in fn.regions[0].blocks[0].operations]  # noqa: E731
    if MARK in fn.attributes:
        del fn.attributes[MARK]
    else:
        lay_out(fn, layout)
    _fuse_depthwise_pointwise(fn, target, forced)
    if not forced:
        for op in ops():
            backward_data_by_phases(op, target, lambda problem: predicted_time(problem, target)) or \
                backward_weights_as_gemms(op, target, lambda problem: _reference_only(problem, target))
    reshape_problem = (lambda op: op) if forced else \
        (lambda op: _subsample_pointwise(_densify_groups(_backward_data_as_forward(op, target), target), target))
    chosen = [_pad_columns(_pad_channels(reshape_problem(_untranspose_rhs(op)), target), target) for op in ops()
              if op.name in SELECTED_OPS and contract.solver(op) is None]
    matmul_time = lambda problem: heuristic(problem, "matmul", target).cost(problem, target)  # noqa: E731
    return [fuse_norm_matmul(op, target, forced, matmul_time) for op in chosen]


@dataclass
class Options:
    NAME = NAME
    target: Target = Target("cpu")
    solver: str = ""          # force a solver (else $OPENPRIM_SOLVER, else the heuristic)
    layout: str = "NHWC"      # the layout stage's, where prim-layout has not run: "NHWC" or "keep"

    mode: str = ""            # immediate | find | hybrid (else $OPENPRIM_FIND_MODE, else hybrid)
    find_budget: float = 5.0  # seconds of find per problem
    enforce: str = ""         # hybrid's searches: NONE | DB_UPDATE | SEARCH | SEARCH_DB_UPDATE ($OPENPRIM_FIND_ENFORCE)
    tuner: Tuner | None = None  # the database and Find (given by the driver, not by pipeline text)

    def __post_init__(self):
        check_layout(self.layout)
        forced_solver()     # a bad $OPENPRIM_SOLVER is an error even where the option overrides it
        self.solver = forced_solver(self.solver)
        self.mode, self.enforce = find_mode(self.mode), find_enforce(self.enforce)

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        slow = []   # layers left on a slow kernel where the target has matrix cores: one warning at the end
        with module_op.context:
            for fn in graph_functions(module_op):
                choices = {}  # problem descriptor -> Choice: repeated layers are decided (and found) once
                for op in prepare(fn, self.layout, self.target, self.solver):
                    problem = problem_of(op)
                    key = problem.descriptor()
                    if key not in choices:
                        choices[key] = decide(op, self.target, self.solver, self.mode, self.enforce,
                                              self.find_budget, self.tuner)
                    choice, kind = choices[key], op.name[5:]
                    if why := slow_fallbacks.why_slow(problem, kind, choice.solver, choice.source, self.target):
                        slow.append(slow_fallbacks.Fallback(dialect.where(op.location), kind, key,
                                                            choice.solver.name, why))
                    apply(op, choice, problem)
                cancel_transposes(fn)
                store_params_permuted(fn)
                _unit_transposes_to_views(fn)
        slow_fallbacks.warn(slow, self.target)

"""A layer_norm or rms_norm and the matmuls that read it, as prim.norm_matmul ops: prim-select's stage 1.

A pre-LN transformer normalizes the residual stream before each projection (GPT-2: ln_1 -> the q/k/v
projection, ln_2 -> the FFN's up projection, ln_f -> the head). At a decode step the norm is a launch over a
few rows whose output goes through memory only to be read by the next GEMV; a GEMV kernel that normalizes
the rows as it reads them (kernels/gpu/gemv.py RowNorm: every block computes the few rows' statistics
first) leaves out that launch and that round trip. Fused where

  - the norm normalizes the last dim only, has no residual operand, and only matmuls read it, as their
    lhs (directly or through a reshape that keeps the last dim: [B, 1, K] -> [B, K]), the one fused with a
    2-d [K, N] rhs (after prim-select made linear weights [K, N]). Each matmul gets the norm (GPT-2's q, k
    and v projections of ln_1, split by matmul_views: each block recomputes the statistics anyway), and
    the norm goes once none reads it;
  - a norm_matmul solver applies (solvers.gpu_simt.NormGemvSolver: NVIDIA, a GEMV's few rows) and predicts
    no more time than the matmul's own best solver; or, with a forced solver, that solver is one of them.

The norm's statistics are computed as its warp kernel computes them and its output rounded to the data type
before the multiply, so the result is the unfused one's.
"""
from __future__ import annotations

import dataclasses

from mlir import ir

from openprim import dialect
from openprim.base.target import Target
from openprim.solvers import applicable
from openprim.solvers.problem import NormGemmProblem, problem_of

from .rewrite import create, producer, reshape, single_use

NORMS = ("prim.layer_norm", "prim.rms_norm")


def _read_as_lhs_only(v: ir.Value) -> bool:
    """Whether every use of v is a matmul's lhs (q, k and v projections of one norm: each gets the norm)."""
    return all(u.owner.name == "prim.matmul" and u.operand_number == 0 for u in v.uses)


def _rows_view(v: ir.Value, shape: list[int], norm: ir.Operation) -> ir.Value:
    """v reshaped to `shape`, made before the norm (where every matmul reading the norm can use it) or the one
    made there for an earlier matmul."""
    for use in v.uses:
        view = use.owner
        if view.name == "prim.reshape" and list(view.results[0].type.shape) == shape and \
                view.operation.is_before_in_block(norm):
            return view.results[0]
    with ir.InsertionPoint(norm), norm.location:
        return reshape(v, shape, norm.location)


def fuse_norm_matmul(op: ir.Operation, target: Target, forced: str, matmul_time) -> ir.Operation:
    """op (a prim.matmul about to get a solver) with the norm that produces its lhs folded in as a
    prim.norm_matmul where that applies and pays (module docstring); returns the op to select a solver for.
    matmul_time(problem): the predicted time of the matmul's best solver."""
    if op.name != "prim.matmul" or dialect.op_attrs(op)["transpose_rhs"] != 0:
        return op
    lhs, w, bias, residual = dialect.operand_groups(op)
    view = producer(lhs, "prim.reshape")        # [B, S, K] -> [B S, K] between them: the norm's input alike
    x = view.operands[0] if view is not None and lhs.type.shape[-1] == view.operands[0].type.shape[-1] else lhs
    norm = next((producer(x, name) for name in NORMS if producer(x, name) is not None), None)
    if norm is None or (x is not lhs and not single_use(x)) or not _read_as_lhs_only(lhs) or len(w.type.shape) != 2:
        return op
    groups, attrs = dialect.operand_groups(norm), dialect.op_attrs(norm)
    if groups[-1] is not None or attrs["normalized_ndim"] != 1:
        return op
    kind = norm.name[len("prim."):]
    problem = NormGemmProblem(**dataclasses.asdict(problem_of(op)), norm=kind)
    solvers = [s for s, why in applicable(problem, "norm_matmul", target) if why is None]
    if forced:
        solvers = [s for s in solvers if s.name == forced]
    if not solvers or not forced and min(s.cost(problem, target) for s in solvers) > matmul_time(problem_of(op)):
        return op
    scale, shift = groups[1], groups[2] if kind == "layer_norm" else None
    matmul_attrs = dialect.op_attrs(op)
    rows = groups[0] if x is lhs else _rows_view(groups[0], list(lhs.type.shape), norm)
    with ir.InsertionPoint(op), op.location:
        y = create("norm_matmul", [rows, scale, shift, w, bias, residual], op.result.type.shape, op.result,
                   {"norm": kind, "epsilon": attrs["epsilon"], "activation": matmul_attrs["activation"],
                    "activation_params": matmul_attrs["activation_params"]}, op.location)
    op.result.replace_all_uses_with(y)
    op.erase()
    if x is not lhs and not list(lhs.uses):
        lhs.owner.erase()
    if not list(x.uses):
        norm.erase()
    return getattr(y.owner, "operation", y.owner)

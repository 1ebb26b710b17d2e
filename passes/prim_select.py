"""prim-select: choose a layout, then a solver and its parameters for every conv2d and matmul.

1. Layout. The fast CPU solvers want NHWC: an NCHW conv2d (and pooling, batch/group norm) becomes
   transpose -> NHWC op -> transpose back; back-to-back inverse transposes then cancel, so an NCHW
   network pays one transpose at each end instead of two per layer.
2. Solver. Every applicable solver of the registry (solvers.py) is ranked by its predicted time; the
   cheapest wins unless the user forces one (`solver=` option or $OPENPRIM_SOLVER, MIOpen-style).
   The choice is written on the op: prim.solver, prim.params (the heuristic's tunables) and
   prim.problem (the readable problem descriptor that a tuning database will key on).
3. Constant weights are re-laid out once, at compile time, into the layout the solver reads
   (RSCK filters, [K, N] GEMM operands; a non-constant operand gets a transpose kernel).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from mlir import ir

from openprim import dialect
from openprim.errors import OpenPrimError

from .kernels import graph_functions
from .rewrite import producer, rebuild, swap, transpose
from openprim.targets import parse_target

from .solvers import SOLVERS, applicable, problem_of

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


def _cancel_transposes(fn) -> None:
    """transpose(transpose(x, p), q) with p then q the identity -> x; then drop unused transposes."""
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name != "prim.transpose":
            continue
        inner = producer(op.operands[0], "prim.transpose")
        if inner is None:
            continue
        p, q = dialect.op_attrs(inner)["perm"], dialect.op_attrs(op)["perm"]
        if [p[i] for i in q] == list(range(len(p))):
            op.result.replace_all_uses_with(inner.operands[0])
    changed = True
    while changed:
        changed = False
        for op in reversed([o.operation for o in fn.regions[0].blocks[0].operations]):
            if op.name in ("prim.transpose", "prim.constant") and not list(op.result.uses):
                op.erase()
                changed = True


def _forced_solver(option: str, op_kind: str):
    name = option or os.environ.get("OPENPRIM_SOLVER", "")
    if not name:
        return None
    if name not in SOLVERS:
        raise OpenPrimError(f"unknown solver '{name}'; solvers: {', '.join(SOLVERS)}")
    return SOLVERS[name] if SOLVERS[name].op == op_kind else None


def select_solver(op: ir.Operation, target: str, forced: str = ""):
    """(solver, params, problem) for a conv2d/matmul: the forced solver, else the cheapest applicable."""
    problem = problem_of(op)
    kind = op.name[5:]
    choice = _forced_solver(forced, kind)
    if choice is not None:
        reason = dict((s.name, r) for s, r in applicable(problem, kind, target))[choice.name]
        if reason:
            raise OpenPrimError(f"{dialect.where(op.location)}: error: solver '{choice.name}' is not applicable "
                                f"to {problem.descriptor()}: {reason}")
    else:
        ok = [s for s, reason in applicable(problem, kind, target) if reason is None]
        choice = min(ok, key=lambda s: s.cost(problem, target))
    return choice, choice.default_params(problem), problem


def _relayout_weights(op: ir.Operation, solver) -> ir.Operation:
    """Give the solver its weight layout (constants are permuted now; others through a transpose)."""
    attrs = dialect.op_attrs(op)
    operands = dialect.operand_groups(op)
    if op.name == "prim.conv2d":
        want = solver.filter_layout()
        have = attrs["filter_layout"]
        if want is None or want == have:
            return op
        with ir.InsertionPoint(op), op.location:
            operands[1] = transpose(operands[1], FILTER_PERM[(have, want)], op.location)
            return swap(op, rebuild(op, operands, {"filter_layout": want}, op.location))
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



@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    solver: str = ""          # force a solver (else $OPENPRIM_SOLVER, else the heuristic)
    layout: str = "NHWC"      # "NHWC": run NCHW ops in NHWC through transposes; "keep": leave layouts

    def __post_init__(self):
        parse_target(self.target)
        for name in (self.solver, os.environ.get("OPENPRIM_SOLVER", "")):
            if name and name not in SOLVERS:
                raise OpenPrimError(f"unknown solver '{name}'; solvers: {', '.join(SOLVERS)}")

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        with module_op.context:
            for fn in graph_functions(module_op):
                ops = lambda: [o.operation for o in fn.regions[0].blocks[0].operations]  # noqa: E731
                if self.layout == "NHWC":
                    for op in ops():
                        if op.name in LAYOUT_OPS and dialect.op_attrs(op)["layout"] == "NCHW":
                            _to_nhwc(op)
                    _cancel_transposes(fn)
                elif self.layout != "keep":
                    raise OpenPrimError(f"prim-select: layout must be NHWC or keep, got '{self.layout}'")
                for op in ops():
                    if op.name not in ("prim.conv2d", "prim.matmul") or "prim.solver" in op.attributes:
                        continue
                    op = _untranspose_rhs(op)
                    solver, _, _ = select_solver(op, self.target, self.solver)
                    op = _relayout_weights(op, solver)
                    solver, params, problem = select_solver(op, self.target, self.solver)
                    op.attributes["prim.solver"] = ir.StringAttr.get(solver.name)
                    op.attributes["prim.params"] = ir.DictAttr.get(
                        {k: ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v) for k, v in params.items()})
                    op.attributes["prim.problem"] = ir.StringAttr.get(problem.descriptor())
                _cancel_transposes(fn)

"""prim-tile: each kernel's loop nests tiled, threaded and vectorized by a transform-dialect schedule.

Kernels are outlined as in prim-lower (the chosen solver's linalg form), then the schedule of
schedules.py, parametrized by the solver's prim.params, is applied with the transform interpreter.
The result is still on tensors: prim-lower bufferizes it and lowers it to LLVM. A solver with a
hand-written kernel supplies it whole instead: on the CPU its cpu_kernel (vector loops on memrefs,
cpu_implicit_gemm.py), on GPU targets its gpu_kernel (shared-memory tiles, register blocking); every
other GPU kernel stays linalg for prim-lower's generic grid mapping.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir, passmanager

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target

from openprim.kernels import schedules
from openprim.kernels.gpu import pool as gpu_pool
from openprim.kernels.gpu import rows as gpu_rows
from openprim.kernels.gpu import transpose as gpu_transpose
from openprim.solvers.registry import SOLVERS, THREADS, problem_of

from .outline import outline

NAME = "prim-tile"


def schedule_kernel(text: str, kt, ops) -> ir.Module:
    """Parse one kernel with its schedule, run the transform interpreter; the module holds the kernel."""
    op = ops[0]
    main = None
    if len(ops) == 1 and "prim.solver" in op.attributes:
        solver = SOLVERS[ir.StringAttr(op.attributes["prim.solver"]).value]
        if not solver.scheduled:
            return ir.Module.parse(text)
        params = {a.name: ir.IntegerAttr(a.attr).value for a in ir.DictAttr(op.attributes["prim.params"])}
        if hasattr(solver, "cpu_kernel"):
            return _solver_kernel(solver, solver.cpu_kernel, text, op, params)
        main = solver.schedule(problem_of(op), params)
    elif threaded := schedules.threaded_final_op(kt, THREADS):
        tag, main = threaded
        text = text.replace(tag, 'prim.role = "epilogue"}', 1)
    script = schedules.script(main, kt.aux)
    module = ir.Module.parse("module attributes {transform.with_named_sequence} {\n" + text + "\n" + script + "\n}")
    try:
        passmanager.PassManager.parse("builtin.module(transform-interpreter)").run(module.operation)
    except ir.MLIRError as e:
        name = text.split("@", 1)[1].split("(", 1)[0]
        raise OpenPrimError(f"{dialect.where(op.location)}: error: scheduling kernel '{name}' failed: "
                            f"{dialect.format_mlir_error(e)}") from None
    return module


def _solver_kernel(solver, make, text: str, op, params) -> ir.Module:
    """A solver's whole hand-written kernel: make(name, [(argument, memref type)], problem, params,
    attributes) -> the kernel function text, with the signature of the outlined kernel `text`."""
    header = text[text.index("func.func"):].split("{", 1)[0]
    name = header.split("@", 1)[1].split("(", 1)[0]
    signature = re.findall(r"(%\w+): (memref<[^>]*>)", header)
    kernel = make(name, signature, problem_of(op), params, dialect.op_attrs(op))
    try:
        return ir.Module.parse(kernel)
    except ir.MLIRError as e:
        raise OpenPrimError(f"{dialect.where(op.location)}: error: solver '{solver.name}' built an invalid "
                            f"kernel: {dialect.format_mlir_error(e)}") from None


def _row_op(op) -> int:
    """How many trailing dimensions a softmax / log_softmax / layer_norm reduces (0: not a row op)."""
    attrs, rank = dialect.op_attrs(op), len(op.result.type.shape)
    if op.name in ("prim.softmax", "prim.log_softmax"):
        return 1 if attrs["axis"] % rank == rank - 1 and rank > 1 else 0
    if op.name == "prim.layer_norm":
        return attrs["normalized_ndim"] if attrs["normalized_ndim"] < rank else 0
    return 0


def gpu_kernel(text: str, kt, ops) -> ir.Module:
    """GPU targets: the solver's own gpu-dialect kernel (bufferized, with its launch) where it has one,
    a block-per-row kernel for row reductions, a one-pass pooling kernel, a tiled transpose for layout
    changes; otherwise the
    linalg kernel, which prim-lower maps onto the grid loop nest by loop nest."""
    op = ops[0]
    header = text[text.index("func.func"):].split("{", 1)[0]
    name = header.split("@", 1)[1].split("(", 1)[0]
    signature = re.findall(r"(%\w+): (memref<[^>]*>)", header)
    if len(ops) == 1 and (reduced := _row_op(op)):
        groups = dialect.operand_groups(op)
        kernel = gpu_rows.row_kernel(name, signature, op.name[5:], reduced, dialect.dtype_name(
            op.result.type.element_type), dialect.op_attrs(op), tuple(g is not None for g in groups[1:3]))
        return ir.Module.parse(kernel)
    if len(ops) == 1 and op.name in ("prim.max_pool2d", "prim.avg_pool2d") and dialect.op_attrs(op)["layout"] == "NHWC":
        return ir.Module.parse(gpu_pool.pool_kernel(name, signature, op.name[5:8], dialect.op_attrs(op),
                                                    tuple(op.result.type.shape),
                                                    dialect.dtype_name(op.result.type.element_type)))
    if len(ops) == 1 and op.name == "prim.transpose" and gpu_transpose.split(dialect.op_attrs(op)["perm"]):
        return ir.Module.parse(gpu_transpose.transpose_kernel(
            name, signature, dialect.op_attrs(op)["perm"], dialect.dtype_name(op.result.type.element_type)))
    if len(ops) == 1 and "prim.solver" in op.attributes:
        solver = SOLVERS[ir.StringAttr(op.attributes["prim.solver"]).value]
        if hasattr(solver, "gpu_kernel"):
            params = {a.name: ir.IntegerAttr(a.attr).value for a in ir.DictAttr(op.attributes["prim.params"])}
            return _solver_kernel(solver, solver.gpu_kernel, text, op, params)
    return ir.Module.parse(text)


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        target = parse_target(self.target)
        with module_op.context:
            outline(module_op, target, gpu_kernel if target.is_gpu else schedule_kernel)

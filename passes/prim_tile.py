"""prim-tile: each kernel's loop nests tiled, threaded and vectorized by a transform-dialect schedule.

Kernels are outlined as in prim-lower (the chosen solver's linalg form), then the schedule of
schedules.py, parametrized by the solver's prim.params, is applied with the transform interpreter.
The result is still on tensors: prim-lower bufferizes it and lowers it to LLVM. On GPU targets a
solver with a hand-structured gpu kernel (shared-memory tiles, register blocking) supplies it whole;
every other kernel stays linalg for prim-lower's generic grid mapping.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir, passmanager

from openprim import dialect
from openprim.errors import OpenPrimError
from openprim.targets import parse_target

from . import schedules
from .kernels import outline
from .solvers import SOLVERS, THREADS, problem_of

NAME = "prim-tile"


def schedule_kernel(text: str, kt, ops) -> ir.Module:
    """Parse one kernel with its schedule, run the transform interpreter; the module holds the kernel."""
    op = ops[0]
    main = None
    if len(ops) == 1 and "prim.solver" in op.attributes:
        solver = SOLVERS[ir.StringAttr(op.attributes["prim.solver"]).value]
        params = {a.name: ir.IntegerAttr(a.attr).value for a in ir.DictAttr(op.attributes["prim.params"])}
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


def gpu_kernel(text: str, kt, ops) -> ir.Module:
    """GPU targets: the solver's own gpu-dialect kernel (bufferized, with its launch) where it has one;
    otherwise the linalg kernel, which prim-lower maps onto the grid loop nest by loop nest."""
    op = ops[0]
    if len(ops) == 1 and "prim.solver" in op.attributes:
        solver = SOLVERS[ir.StringAttr(op.attributes["prim.solver"]).value]
        if hasattr(solver, "gpu_kernel"):
            params = {a.name: ir.IntegerAttr(a.attr).value for a in ir.DictAttr(op.attributes["prim.params"])}
            header = text[text.index("func.func"):].split("{", 1)[0]
            name = header.split("@", 1)[1].split("(", 1)[0]
            signature = re.findall(r"(%\w+): (memref<[^>]*>)", header)
            kernel = solver.gpu_kernel(name, signature, problem_of(op), params, dialect.op_attrs(op))
            try:
                return ir.Module.parse(kernel)
            except ir.MLIRError as e:
                raise OpenPrimError(f"{dialect.where(op.location)}: error: solver '{solver.name}' built an invalid "
                                    f"kernel: {dialect.format_mlir_error(e)}") from None
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
            outline(module_op, str(target), gpu_kernel if target.is_gpu else schedule_kernel)

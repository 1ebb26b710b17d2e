"""prim-tile: each kernel's loop nests tiled, threaded and vectorized by a transform-dialect schedule.

Kernels are outlined as in prim-lower (the chosen solver's linalg form), then the schedule of
schedules.py, parametrized by the solver's prim.params, is applied with the transform interpreter.
The result is still on tensors: prim-lower bufferizes it and lowers it to LLVM.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir, passmanager

from openprim import dialect
from openprim.errors import OpenPrimError

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


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        if self.target != "cpu":
            raise OpenPrimError(f"prim-tile: unknown target '{self.target}' (this build supports: cpu)")
        with module_op.context:
            outline(module_op, self.target, schedule_kernel)

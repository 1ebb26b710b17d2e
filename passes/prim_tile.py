"""prim-tile: each kernel's loop nests tiled, threaded and vectorized, or replaced by a hand-written kernel.

Kernels are outlined as in prim-lower (the chosen solver's linalg form). A hand-written kernel takes the
place of the linalg one where the target has one (kernels/registry.py): a solver's `kernel(request)`
for a conv2d/matmul (CPU vector loops on memrefs, GPU shared-memory tiles, tensor cores), or the op's
own builder (GPU row reductions, pooling, transposes). Otherwise, on the CPU, the schedule of
kernels/schedules.py (the solver's, parametrized by its prim.params; threads for a final elementwise op)
is applied with the transform interpreter, and on GPUs the linalg kernel is left for prim-lower's grid
mapping. Results are still on tensors where linalg: prim-lower bufferizes and lowers them.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

from mlir import ir, passmanager

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target
from openprim.dialect import contract
from openprim.kernels import schedules
from openprim.kernels.cpu import channel_gather as cpu_channel_gather
from openprim.kernels.cpu import concat as cpu_concat
from openprim.kernels.gpu import concat as gpu_concat
from openprim.kernels.registry import KernelRequest, op_kernel
from openprim.solvers import SOLVERS
from openprim.solvers.base import THREADS
from openprim.solvers.problem import problem_of

from .outline import outline
from .channel_shuffle import gather_map, outline_channel_shuffles
from .concat_chains import outline_concat_chains

NAME = "prim-tile"


def _solver(op):
    """(solver, params) chosen by prim-select, or (None, {})."""
    name = contract.solver(op)
    return (None, {}) if name is None else (SOLVERS[name], contract.params(op))


def hand_written(text: str, ops, target: Target) -> ir.Module | None:
    """The hand-written kernel for the outlined kernel `text` (with its signature), or None."""
    header = text[text.index("func.func"):].split("{", 1)[0]
    signature = re.findall(r"(%\w+): (memref<[^>]*>)", header)
    if len(ops) > 1 and target.kind == "cpu" and ops[0].name == "prim.concat" and \
            any(o.name == "prim.transpose" for o in ops):                     # outline_channel_shuffles
        inputs, mapping = gather_map(ops)
        return ir.Module.parse(cpu_channel_gather.gather_kernel(
            header.split("@", 1)[1].split("(", 1)[0], signature,
            [signature[ir.BlockArgument(v).arg_number] for v in inputs], mapping, THREADS))
    if len(ops) > 1 and ops[0].name == "prim.concat":  # outline_concat_chains
        # the kernel arguments of the chain's inputs in order, then of the batch_norm's parameters (an
        # input used twice is one argument)
        bn = next((o for o in ops if o.name == "prim.batch_norm"), None)
        used = [ops[0].operands[0]] + [o.operands[1] for o in ops if o.name == "prim.concat"] + \
            (list(bn.operands)[1:] if bn else [])
        args = [signature[ir.BlockArgument(v).arg_number] for v in used] + signature[-1:]
        name, axis = header.split("@", 1)[1].split("(", 1)[0], dialect.op_attrs(ops[0])["axis"]
        epsilon, relu = dialect.op_attrs(bn)["epsilon"] if bn else None, ops[-1].name == "prim.relu"
        if target.is_gpu:
            return ir.Module.parse(gpu_concat.concat_kernel(name, signature, args, axis, epsilon, relu))
        return ir.Module.parse(cpu_concat.concat_kernel(name, signature, args, axis, THREADS, epsilon, relu))
    if len(ops) != 1:
        return None
    op = ops[0]
    solver, params = _solver(op)
    request = KernelRequest(
        name=header.split("@", 1)[1].split("(", 1)[0], signature=signature,
        op=op.name[5:], attrs=dialect.op_attrs(op), shape=tuple(op.result.type.shape),
        dtype=dialect.dtype_name(op.result.type.element_type),
        given=tuple(g is not None for g in dialect.operand_groups(op)), target=target,
        problem=problem_of(op) if solver else None, params=params)
    kernel = solver.kernel(request) if solver else op_kernel(request)
    if kernel is None:
        return None
    try:
        return ir.Module.parse(kernel)
    except ir.MLIRError as e:
        maker = f"solver '{solver.name}'" if solver else f"the {request.op} kernel"
        raise OpenPrimError(f"{dialect.where(op.location)}: error: {maker} built an invalid kernel: "
                            f"{dialect.format_mlir_error(e)}") from None


def scheduled(text: str, kt, ops) -> ir.Module:
    """The linalg kernel with its transform schedule applied (CPU): the solver's, or threads over a
    final elementwise op; as it is when there is none."""
    op = ops[0]
    main = None
    solver, params = _solver(op) if len(ops) == 1 else (None, {})
    if solver is not None:
        if not solver.scheduled:
            return ir.Module.parse(text)
        main = solver.schedule(problem_of(op), params)
    elif threaded := schedules.threaded_final_op(kt, THREADS):
        tag, main = threaded
        text = text.replace(tag, contract.role_text("epilogue") + "}", 1)
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
    target: Target = Target("cpu")
    timings: dict | None = None   # kernel name -> seconds to build it (given by the driver, not by text)

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        target = self.target

        def kernel(text, kt, ops):
            t0 = time.perf_counter()
            made = hand_written(text, ops, target)
            if made is None:
                made = ir.Module.parse(text) if target.is_gpu else scheduled(text, kt, ops)
            if self.timings is not None:
                self.timings[text.split("@", 1)[1].split("(", 1)[0]] = time.perf_counter() - t0
            return made
        with module_op.context:
            if target.kind == "cpu":  # one gather per channel-shuffle result
                outline_channel_shuffles(module_op)
            outline_concat_chains(module_op)   # one copy per concat chain
            outline(module_op, target, kernel)

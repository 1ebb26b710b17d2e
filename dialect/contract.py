"""The IR attributes that one layer writes and another reads: their names, writers and readers, here only.

`prim.*` attributes ride on prim ops, graph functions and kernel functions; `openprim.*` ones on ops of other
dialects (the kernels module, nvgpu). Each has a name constant, a writer (`set_*`/`mark_*` on an op, or
`*_text` for the kernels' IR-text builders) and a reader (op -> Python value, or the default when absent).

prim.solver               the solver's name. Written by prim-select (passes/prim_select.py) on a compute op and by
                          outlining (passes/outline.py) on its kernel function; read by prim-tile and outlining
                          (which kernel to build), prim-select (chosen already), `openprim conv`
                          (driver/tuning_commands.py).
prim.params               the solver's parameters {name: int}. Written by prim-select; read by prim-tile, outlining
                          (the build; the dedup key), `openprim conv`.
prim.problem              the problem descriptor the tuning database keys on. Written by prim-select; read by
                          `openprim conv`.
prim.choice               where the choice came from ("forced", "db", "find", "heuristic"). Written by prim-select;
                          read by `openprim conv`.
prim.measured_us          the choice's measured time. Written by prim-select when it measured; read by readers of
                          the IR (test_tuning.py).
prim.fused                a private function whose body becomes one kernel. Written by passes/fused_functions.py;
                          read by outlining, and fused_functions.py and channel_shuffle.py (numbering).
prim.op                   the op kind a kernel function computes ("conv2d", "fused_elementwise"). Written by
                          outlining; read by tools and tests.
prim.kernel               the declaration the graph calls is a kernel's. Written by outlining; for readers of the IR.
prim.in_place             the arguments that a kernel reads at each output index just before writing it there
                          (an i64, or an array of them), so that the output may take one of their buffers.
                          Written by kernels/cpu/implicit_gemm.py, kernels/*/index_copy.py and outlining (CPU
                          elementwise kernels: every operand of the result's type); read by driver/plan.py.
prim.copy_launch          a GPU kernel whose first launch only copies argument i (the i64) to its output, so that the
                          runtime leaves it out where the plan gives both one buffer (a KV cache written in place).
                          Written by kernels/gpu/index_copy.py; read by backends/gpu_common.launches.
prim.batch_chunks         how many chunks of its batch a graph function runs once each. Written by
                          passes/batch_chunks.py; read by batch-chunks (done already) and driver/plan.py.
prim.input_names          a graph function's input names. Written by pyfrontend/emit.py; read by driver/plan.py.
prim.param_names          the names of a graph function's parameters: its last arguments, after the inputs, are
                          weights that the executable holds and a caller may replace (compile(weights="values")).
                          Written by pyfrontend/emit.py; read by driver/plan.py (the plan's "params") and
                          passes/batch_chunks.py (parameters carry no batch).
prim.param_perms          per parameter, the permutation it is stored in (empty: as the caller gives it): stored =
                          transpose(given, perm), the layout its readers want. Written by passes/param_layouts.py
                          (prim-select); read by driver/plan.py (the plan's params' "perm", which load_weights
                          applies on the host).
prim.checks               what each of a graph function's last results means when it is not 0 after a run (the
                          bounds checks of gather's indices): those results are checks, not outputs. Written by
                          pyfrontend/emit.py; read by driver/plan.py (the plan's "checks", which the runtime reads).
prim.state                a graph function's state carried between calls (a KV cache): flat (input, result) index
                          pairs, the result being the input's value in the next call. Written by
                          pyfrontend/emit.py; read by driver/plan.py (the plan's "state") and passes/batch_chunks.py
                          (a graph with state is not split into chunks).
prim.role, prim.aux       which op of a linalg kernel a schedule step tiles (a role, or the index of another op).
                          Written by kernels/irtext.py (prim-tile: a final elementwise op's role); matched by
                          kernels/schedules.py's transform.structured.match, inside prim-tile.
openprim.element_strides  a TMA tensor map's element strides (a strided convolution's A). Written by
                          kernels/nvidia/wgmma.py on nvgpu.tma.create.descriptor; read by backends/nvvm.
openprim.scratch_bytes    the most heap one CPU kernel call allocates, so that the runtime refuses a plan that
                          cannot fit. Written by backends/cpu/compiler.py on the kernels module; read by
                          driver/plan.py.
"""
from __future__ import annotations

from mlir import ir

SOLVER = "prim.solver"
PARAMS = "prim.params"
PROBLEM = "prim.problem"
CHOICE = "prim.choice"
MEASURED_US = "prim.measured_us"
FUSED = "prim.fused"
OP = "prim.op"
KERNEL = "prim.kernel"
IN_PLACE = "prim.in_place"
COPY_LAUNCH = "prim.copy_launch"
BATCH_CHUNKS = "prim.batch_chunks"
INPUT_NAMES = "prim.input_names"
PARAM_NAMES = "prim.param_names"
PARAM_PERMS = "prim.param_perms"
CHECKS = "prim.checks"
STATE = "prim.state"
ROLE = "prim.role"
AUX = "prim.aux"
ELEMENT_STRIDES = "openprim.element_strides"
SCRATCH_BYTES = "openprim.scratch_bytes"


def _i64(op, value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64, op.context), value)


def _str(op, name: str) -> str | None:
    return ir.StringAttr(op.attributes[name]).value if name in op.attributes else None


def _int(op, name: str) -> int | None:
    return ir.IntegerAttr(op.attributes[name]).value if name in op.attributes else None


# ----------------------------------------------------------------------------- prim-select's choice
def set_solver(op, name: str) -> None:
    op.attributes[SOLVER] = ir.StringAttr.get(name, op.context)


def solver(op) -> str | None:
    return _str(op, SOLVER)


def set_params(op, values: dict[str, int]) -> None:
    op.attributes[PARAMS] = ir.DictAttr.get({k: _i64(op, v) for k, v in values.items()}, op.context)


def params(op) -> dict[str, int]:
    if PARAMS not in op.attributes:
        return {}
    return {a.name: ir.IntegerAttr(a.attr).value for a in ir.DictAttr(op.attributes[PARAMS])}


def set_problem(op, descriptor: str) -> None:
    op.attributes[PROBLEM] = ir.StringAttr.get(descriptor, op.context)


def problem(op) -> str | None:
    return _str(op, PROBLEM)


def set_choice(op, source: str) -> None:
    op.attributes[CHOICE] = ir.StringAttr.get(source, op.context)


def choice(op) -> str | None:
    return _str(op, CHOICE)


def set_measured_us(op, us: float) -> None:
    op.attributes[MEASURED_US] = ir.FloatAttr.get_f64(us, op.context)


def measured_us(op) -> float | None:
    return ir.FloatAttr(op.attributes[MEASURED_US]).value if MEASURED_US in op.attributes else None


# ----------------------------------------------------------------------------- functions and kernels
def mark_fused(fn) -> None:
    fn.attributes[FUSED] = ir.UnitAttr.get(fn.context)


def is_fused(fn) -> bool:
    return FUSED in fn.attributes


def set_kernel_op(kernel, kind: str) -> None:
    kernel.attributes[OP] = ir.StringAttr.get(kind, kernel.context)


def mark_kernel(declaration) -> None:
    declaration.attributes[KERNEL] = ir.UnitAttr.get(declaration.context)


def in_place_text(index: int) -> str:
    """The attribute in a kernel function's `attributes {...}`: its output may take argument `index`'s buffer."""
    return f"{IN_PLACE} = {index} : i64"


def set_in_place(kernel, indices) -> None:
    """The kernel's output may take the buffer of any one of the arguments `indices`."""
    kernel.attributes[IN_PLACE] = ir.ArrayAttr.get([_i64(kernel, i) for i in indices], kernel.context)


def in_place(kernel) -> tuple[int, ...]:
    """The arguments whose buffer the kernel's output may take (none: ())."""
    if IN_PLACE not in kernel.attributes:
        return ()
    attr = kernel.attributes[IN_PLACE]
    if isinstance(attr, ir.ArrayAttr):
        return tuple(ir.IntegerAttr(a).value for a in ir.ArrayAttr(attr))
    return (ir.IntegerAttr(attr).value,)


def copy_launch_text(index: int) -> str:
    """The attribute in a kernel function's `attributes {...}`: its first launch only copies argument `index` to
    the output."""
    return f"{COPY_LAUNCH} = {index} : i64"


def copy_launch(kernel) -> int | None:
    """The argument the kernel's first launch only copies to its output (none: None)."""
    return ir.IntegerAttr(kernel.attributes[COPY_LAUNCH]).value if COPY_LAUNCH in kernel.attributes else None


def set_batch_chunks(fn, chunks: int) -> None:
    fn.attributes[BATCH_CHUNKS] = _i64(fn, chunks)


def batch_chunks(fn) -> int | None:
    return _int(fn, BATCH_CHUNKS)


def set_input_names(fn, names: list[str]) -> None:
    fn.attributes[INPUT_NAMES] = ir.ArrayAttr.get([ir.StringAttr.get(n, fn.context) for n in names], fn.context)


def input_names(fn) -> list[str] | None:
    return [ir.StringAttr(a).value for a in fn.attributes[INPUT_NAMES]] if INPUT_NAMES in fn.attributes else None


def set_param_names(fn, names: list[str]) -> None:
    fn.attributes[PARAM_NAMES] = ir.ArrayAttr.get([ir.StringAttr.get(n, fn.context) for n in names], fn.context)


def param_names(fn) -> list[str]:
    """The parameters' names (the last len() arguments of the graph function); [] when it has none."""
    return [ir.StringAttr(a).value for a in fn.attributes[PARAM_NAMES]] if PARAM_NAMES in fn.attributes else []


def set_param_perms(fn, perms: list[list[int] | None]) -> None:
    fn.attributes[PARAM_PERMS] = ir.ArrayAttr.get([ir.DenseI64ArrayAttr.get(list(p or []), fn.context)
                                                   for p in perms], fn.context)


def param_perms(fn) -> list[list[int] | None]:
    """Per parameter, its storage permutation, None where it is stored as given (all None when absent)."""
    if PARAM_PERMS not in fn.attributes:
        return [None] * len(param_names(fn))
    return [[int(x) for x in ir.DenseI64ArrayAttr(a)] or None for a in fn.attributes[PARAM_PERMS]]


def set_checks(fn, messages: list[str]) -> None:
    fn.attributes[CHECKS] = ir.ArrayAttr.get([ir.StringAttr.get(m, fn.context) for m in messages], fn.context)


def checks(fn) -> list[str]:
    return [ir.StringAttr(a).value for a in fn.attributes[CHECKS]] if CHECKS in fn.attributes else []


def set_state(fn, pairs: list[tuple[int, int]]) -> None:
    fn.attributes[STATE] = ir.DenseI64ArrayAttr.get([k for pair in pairs for k in pair], fn.context)


def state(fn) -> list[tuple[int, int]]:
    """The (input index, result index) pairs of the state a graph function carries; [] when it has none."""
    flat = [int(k) for k in ir.DenseI64ArrayAttr(fn.attributes[STATE])] if STATE in fn.attributes else []
    return list(zip(flat[::2], flat[1::2]))


# ----------------------------------------------------------------------------- schedule tags (IR text)
def role_text(role: str) -> str:
    """The tag of a structured op that a schedule step names by its role ("epilogue", "acc", ...)."""
    return f'{ROLE} = "{role}"'


def aux_text(index: int) -> str:
    """The tag of the index-th other structured op (padding, im2col, transposes, elementwise)."""
    return f"{AUX} = {index}"


# ----------------------------------------------------------------------------- target-specific
def element_strides_text(strides) -> str:
    """The attribute of an nvgpu.tma.create.descriptor whose box steps over its tensor."""
    return f"{ELEMENT_STRIDES} = array<i64: {', '.join(map(str, strides))}>"


def element_strides(descriptor, rank: int) -> list[int]:
    if ELEMENT_STRIDES not in descriptor.attributes:
        return [1] * rank
    return [int(x) for x in ir.DenseI64ArrayAttr(descriptor.attributes[ELEMENT_STRIDES])]


def set_scratch_bytes(kernels_module, nbytes: int) -> None:
    kernels_module.attributes[SCRATCH_BYTES] = _i64(kernels_module, nbytes)


def scratch_bytes(kernels_module) -> int | None:
    return _int(kernels_module, SCRATCH_BYTES)

"""prim-lower: every prim op left to a reference kernel, then the kernels module to native code.

Kernels already made by prim-tile are kept; any prim op still in a graph function gets its reference
semantics (kernels/semantics.py) untiled. Then, inside `module @kernels` only, bufferization (in place
into the caller's output buffer), and by target:

  cpu      math on f32 vectors as polynomials (prim-cpu-vector-math), then the CPU backend's lowering
           (backends/cpu): the LLVM dialect with the bare-pointer calling
           convention, every kernel `void kernel(T *in0, ..., T *out)`, called through ctypes;
  nvvm/rocdl  every loop nest onto the grid (prim-gpu-map, or the solver's own gpu kernel), then the
           backend's lowering (backends/nvvm, backends/rocdl): one `gpu.module @device` holding every kernel
           (bare pointers as parameters; backends/gpu_common.py), then a `gpu.binary @device`: PTX for nvvm,
           a linked hsaco for rocdl. The host side of each kernel function is left as allocations +
           `gpu.launch_func`s with constant sizes: the launch plan.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from openprim.backends.registry import for_target
from openprim.base.target import Target

from . import cpu_vector_math, prim_gpu_map
from .outline import outline

NAME = "prim-lower"

BUFFERIZE = (
    "func.func(canonicalize,cse)",
    "eliminate-empty-tensors",
    "empty-tensor-to-alloc-tensor",
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
    "canonicalize",
    "buffer-deallocation-pipeline",
)


def copies_to_linalg(op, _pass=None):
    """memref.copy -> linalg.copy, so strided copies become loops instead of calls to MLIR's
    runtime library (memrefCopy), which neither the JIT nor a standalone .so has."""
    from mlir.dialects import linalg  # imports the linalg OpDSL (slow): only when lowering
    copies = []
    op.walk(lambda o: (copies.append(o) if o.name == "memref.copy" else None, ir.WalkResult.ADVANCE)[1])
    for c in copies:
        with ir.InsertionPoint(c), c.location:
            linalg.copy(c.operands[0], outs=[c.operands[1]])
        c.erase()


GPU_MAP = (  # after memref-copy-to-linalg: linalg -> loop nests on the grid -> outlined gpu.funcs
    "func.func(convert-linalg-to-parallel-loops)",
    "fold-memref-alias-ops",
    "canonicalize",
    "prim-gpu-map",
    "convert-parallel-loops-to-gpu",
    "gpu-launch-sink-index-computations",
    "gpu-kernel-outlining",
    "canonicalize",
)


@dataclass
class Options:
    NAME = NAME
    target: Target = Target("cpu")
    threads: bool = True      # OpenMP threads over the kernels' scf.forall loops (when the runtime exists)

    def entries(self):
        """Pass-manager entries: Python passes on the whole module, upstream pipelines nested in the
        kernels module (a pass may not run its own pass manager on a nested op)."""
        target = self.target
        nested = lambda steps: "builtin.module(" + ",".join(steps) + ")"  # noqa: E731
        # GPU: scratch buffers belong to the launch plan, so no deallocation (nor its analysis, which
        # rejects the gpu ops of solver kernels).
        bufferize = BUFFERIZE[:-1] if target.is_gpu else BUFFERIZE
        head = [(f"{NAME}-outline", lambda op: outline(op, target)),
                *([] if target.is_gpu else [(cpu_vector_math.NAME, cpu_vector_math.expand)]),
                nested(bufferize), ("memref-copy-to-linalg", copies_to_linalg)]
        tail = for_target(target).lowering(target, self.threads, nested)
        if not target.is_gpu:
            return head + tail
        return head + [nested(GPU_MAP[:3]), ("prim-gpu-map", prim_gpu_map.Options().run), nested(GPU_MAP[4:])] + tail

"""prim-lower: every prim op left to a reference kernel, then the kernels module to the LLVM dialect.

Kernels already made by prim-tile are kept; any prim op still in a graph function gets its reference
semantics (semantics.py) untiled. Then, inside `module @kernels` only, bufferization (in place into
the caller's output buffer) and the CPU lowering to LLVM, with the bare-pointer calling convention:
every kernel is `void kernel(T *in0, ..., T *out)`, which the runtime calls through ctypes.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from openprim.errors import OpenPrimError
from openprim.runtime.cpu import openmp_library

from .kernels import outline

NAME = "prim-lower"


def openmp_available() -> bool:
    """Threaded kernels call the LLVM/Intel OpenMP runtime (__kmpc_*, e.g. PyPI intel-openmp):
    without it they are compiled single-threaded."""
    return openmp_library() is not None

BUFFERIZE = (
    "func.func(canonicalize,cse)",
    "eliminate-empty-tensors",
    "empty-tensor-to-alloc-tensor",
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
    "canonicalize",
    "buffer-deallocation-pipeline",
)
CPU_TO_LLVM = (  # after memref-copy-to-linalg
    "convert-linalg-to-loops",
    "fold-memref-alias-ops",
    "convert-vector-to-scf{full-unroll=true}",
    "lower-affine",
    "func.func(scf-forall-to-parallel)",
    "{omp}",
    "expand-strided-metadata",
    "lower-affine",
    "finalize-memref-to-llvm",  # before scf-to-cf: the OpenMP regions' alloca_scope must stay one block
    "convert-scf-to-cf",
    "convert-math-to-llvm",
    "convert-math-to-libm",  # erf etc.: scalar libm calls, so before the vector ops are lowered
    "convert-vector-to-llvm{enable-x86vector=true}",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-cf-to-llvm",
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=true}",
    "convert-openmp-to-llvm",  # after func: it would convert signatures without the bare-pointer option
    "convert-ub-to-llvm",
    "reconcile-unrealized-casts",
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


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    threads: bool = True      # OpenMP threads over the kernels' scf.forall loops (when the runtime exists)

    def entries(self):
        """Pass-manager entries: Python passes on the whole module, upstream pipelines nested in the
        kernels module (a pass may not run its own pass manager on a nested op)."""
        if self.target != "cpu":
            raise OpenPrimError(f"prim-lower: unknown target '{self.target}' (this build supports: cpu)")
        omp = "convert-scf-to-openmp" if self.threads and openmp_available() else "func.func(scf-forall-to-for)"
        nested = lambda steps: "builtin.module(" + ",".join(steps).replace("{omp}", omp) + ")"  # noqa: E731
        return [(f"{NAME}-outline", lambda op: outline(op, self.target)),
                nested(BUFFERIZE), ("memref-copy-to-linalg", copies_to_linalg), nested(CPU_TO_LLVM)]

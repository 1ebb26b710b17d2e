"""prim-lower: every prim op left to a reference kernel, then the kernels module to the LLVM dialect.

Kernels already made by prim-tile are kept; any prim op still in a graph function gets its reference
semantics (semantics.py) untiled. Then, inside `module @kernels` only, bufferization (in place into
the caller's output buffer) and the CPU lowering to LLVM, with the bare-pointer calling convention:
every kernel is `void kernel(T *in0, ..., T *out)`, which the runtime calls through ctypes.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir, passmanager

from openprim.errors import OpenPrimError

from .kernels import kernels_module, outline

NAME = "prim-lower"

BUFFERIZE = (
    "linalg-fuse-elementwise-ops",
    "eliminate-empty-tensors",
    "empty-tensor-to-alloc-tensor",
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
    "canonicalize",
    "buffer-deallocation-pipeline",
)
CPU_TO_LLVM = (
    "convert-linalg-to-loops",
    "fold-memref-alias-ops",
    "convert-vector-to-scf{full-unroll=true}",
    "lower-affine",
    "scf-forall-to-parallel",
    "{omp}",
    "convert-scf-to-cf",
    "expand-strided-metadata",
    "lower-affine",
    "convert-vector-to-llvm{enable-x86vector=true}",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "finalize-memref-to-llvm",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-cf-to-llvm",
    "convert-openmp-to-llvm",
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1}",
    "reconcile-unrealized-casts",
)


def cpu_pipeline(threads: bool) -> str:
    steps = [s.replace("{omp}", "convert-scf-to-openmp" if threads else "canonicalize")
             for s in BUFFERIZE + CPU_TO_LLVM]
    return "builtin.module(builtin.module(" + ",".join(steps) + "))"


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    threads: bool = True

    def run(self, module_op):
        if self.target != "cpu":
            raise OpenPrimError(f"prim-lower: unknown target '{self.target}' (this build supports: cpu)")
        outline(module_op, self.target)
        km = kernels_module(module_op, self.target)
        if "prim.lowered" in km.attributes:
            return
        pm = passmanager.PassManager.parse(cpu_pipeline(self.threads))
        pm.run(module_op)
        km.attributes["prim.lowered"] = ir.UnitAttr.get()

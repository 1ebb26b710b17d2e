"""prim-lower: every prim op left to a reference kernel, then the kernels module to the LLVM dialect.

Kernels already made by prim-tile are kept; any prim op still in a graph function gets its reference
semantics (semantics.py) untiled. Then, inside `module @kernels` only, bufferization (in place into
the caller's output buffer) and the CPU lowering to LLVM, with the bare-pointer calling convention:
every kernel is `void kernel(T *in0, ..., T *out)`, which the runtime calls through ctypes.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir, passmanager
from mlir.dialects import linalg

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
    "{copies}",
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
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=true}",
    "convert-openmp-to-llvm",  # after func: it would convert signatures without the bare-pointer option
    "reconcile-unrealized-casts",
)


def copies_to_linalg(op, _pass=None):
    """memref.copy -> linalg.copy, so strided copies become loops instead of calls to MLIR's
    runtime library (memrefCopy), which neither the JIT nor a standalone .so has."""
    copies = []
    op.walk(lambda o: (copies.append(o) if o.name == "memref.copy" else None, ir.WalkResult.ADVANCE)[1])
    for c in copies:
        with ir.InsertionPoint(c), c.location:
            linalg.copy(c.operands[0], outs=[c.operands[1]])
        c.erase()


def cpu_pipeline(threads: bool) -> passmanager.PassManager:
    pm = passmanager.PassManager("builtin.module")
    for step in BUFFERIZE + CPU_TO_LLVM:
        step = step.replace("{omp}", "convert-scf-to-openmp" if threads else "canonicalize")
        if step == "{copies}":
            pm.add(copies_to_linalg, "memref-copy-to-linalg")
        else:
            pm.add(step)
    return pm


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
        cpu_pipeline(self.threads).run(km)
        km.attributes["prim.lowered"] = ir.UnitAttr.get()

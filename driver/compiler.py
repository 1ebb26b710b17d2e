"""The compiler driver: frontend graph or prim module -> pipeline -> plan + native kernels -> executable.

    module  = to_module(graph)                      # prim dialect
    passes.run(module, "prim-pipeline{target=cpu}", tuner=Tuner())   # fuse, select, tile, lower
    plan    = build_plan(module, target)            # launch order + static memory plan + weights
    kernels = the target's backend (backends/<kind>/): .so, PTX/cubin or hsaco; or MLIR's ExecutionEngine

It is the layer that wires the others together: the passes get the tuning database and Find from here
(a `Tuner`), the backends serialize what the passes lowered, the runtime runs it.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mlir import ir

from openprim import __version__, dialect, passes
from openprim.backends import untimed
from openprim.backends.cpu.compiler import kernels_ir
from openprim.backends.registry import for_target
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim.passes import prim_pipeline
from openprim.passes.prim_select import check_layout
from openprim.plan import build_plan
from openprim.pyfrontend import Graph, to_module
from openprim.runtime import artifact, cpu
from openprim.runtime.executor import CpuExecutable
from openprim.runtime.gpu import GpuExecutable, open_device
from openprim.timings import CompileTimings
from openprim.tuning.tuner import Tuner


def load_module(source, ctx: ir.Context | None = None) -> ir.Module:
    """A prim module from a Graph, MLIR text, a .mlir path or an ir.Module."""
    if isinstance(source, ir.Module):
        return source
    if isinstance(source, Graph):
        return to_module(source, ctx)
    text, name = (Path(source).read_text(), str(source)) if isinstance(source, Path) else (source, "<string>")
    return dialect.parse(text, name, ctx or dialect.new_context())


def lower(source, target: str = "cpu", solver: str = "", pipeline: str | None = None,
          layout: str = "NHWC", timings: CompileTimings | None = None) -> ir.Module:
    """The module through the pipeline. layout: "NHWC" runs NCHW convolutions and pools in NHWC (transposes
    that cancel between layers); "keep" leaves every op in its own layout (for solvers that read NCHW).
    timings: record the seconds of each stage and of building each kernel there."""
    check_layout(layout)
    if pipeline:
        return passes.run(load_module(source), pipeline, tuner=Tuner())
    timings = timings or CompileTimings()
    options = prim_pipeline.Options(target=str(parse_target(target)), solver=solver, layout=layout, tuner=Tuner(),
                                    timings=timings.kernels)
    with timings.stage("emit"):
        module = load_module(source)
    return passes.run_stages(module, options, timings.stage)


BACKENDS = ("native", "engine")


def jit(module: ir.Module, target: str = "cpu", backend: str = "native") -> CpuExecutable:
    """Executable kernels in this process.

    native: llc -O3 on the kernels split across the cores, linked into a shared object that ctypes
            loads (the same code as an AOT artifact; ResNet-18 in about 4 s on 2 cores);
    engine: MLIR's ExecutionEngine at opt level 3 (O3 IR optimization + codegen in one thread;
            about 3x slower to compile, same speed of the code)."""
    target = parse_target(target)
    plan, weights = build_plan(module, target)
    if target.is_gpu:
        device = open_device(target)
        files = kernel_files(module, target, device.arch())
        image = files.get("kernels.cubin", files.get("kernels.ptx", files.get("kernels.hsaco")))
        return GpuExecutable(plan, image, weights, device)
    if backend == "engine":
        from mlir.execution_engine import ExecutionEngine  # loads MLIR's JIT libraries: only when asked
        engine = ExecutionEngine(kernels_ir(module), opt_level=3, shared_libs=cpu.shared_libs())
        return CpuExecutable(plan, engine.raw_lookup, weights, keepalive=engine, packed=True)
    if backend != "native":
        raise OpenPrimError(f"unknown backend '{backend}'; backends: {', '.join(BACKENDS)}")
    lib, address = cpu.load_library(kernel_files(module, target)["kernels.so"])
    return CpuExecutable(plan, address, weights, keepalive=lib)


def compile(source, target: str = "cpu", solver: str = "", pipeline: str | None = None, backend: str = "native",
            verbose=False, layout: str = "NHWC"):
    """Compile a Graph (or prim module) for `target` and return a callable on numpy arrays."""
    t0 = time.perf_counter()
    module = lower(source, target, solver, pipeline, layout)
    t1 = time.perf_counter()
    exe = jit(module, target, backend)
    exe.compile_seconds = {"passes": t1 - t0, "codegen": time.perf_counter() - t1}
    if verbose:
        print(f"compiled in {t1 - t0:.2f} s (passes) + {exe.compile_seconds['codegen']:.2f} s (LLVM)", file=sys.stderr)
    return exe


def kernel_files(module: ir.Module, target, device_arch: str | None = None,
                 timings: CompileTimings | None = None) -> dict[str, bytes]:
    """The artifact members holding a lowered module's kernels (the target backend's serialization):
    kernels.so (cpu), kernels.ptx + kernels.cubin (nvvm), kernels.hsaco (rocdl). device_arch: the GPU this
    process will run them on, when known; timings: record the backend's steps."""
    target = parse_target(target)
    return for_target(target).kernel_files(module, target, device_arch, timings.stage if timings else untimed)


def save(source, path: str, target: str = "cpu", solver: str = "", pipeline: str | None = None,
         layout: str = "NHWC", timings: CompileTimings | None = None) -> dict:
    """Compile ahead of time into one .oprim file; returns its manifest (plus timing). timings: record
    where the time went (`openprim compile --timings`)."""
    t0 = time.perf_counter()
    target = str(parse_target(target))
    info = write_artifact(lower(source, target, solver, pipeline, layout, timings), path, target, timings)
    return {**info, "seconds": time.perf_counter() - t0}


def write_artifact(module: ir.Module, path: str, target, timings: CompileTimings | None = None) -> dict:
    """The .oprim file of a module lowered for `target`; returns its manifest."""
    target = parse_target(target)
    timings = timings or CompileTimings()
    with timings.stage("plan"):
        plan, weights = build_plan(module, target)
    kernels = kernel_files(module, target, timings=timings)
    timings.kernel_count, timings.step_count = len({s["kernel"] for s in plan["steps"]}), len(plan["steps"])
    meta = {"compiler": f"openprim {__version__}", "target": str(target),
            **for_target(target).artifact_meta(target, kernels)}
    artifact.write(path, plan, kernels, weights, meta)
    return {**meta, "plan": plan, "bytes": os.path.getsize(path)}

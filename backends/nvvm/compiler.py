"""The NVIDIA backend: the `gpu.module @device` to PTX (MLIR's NVVM serializer), and PTX to a cubin.

Lowering: the kernels merged into `gpu.module @device` (backends/gpu_common.py) with 32-bit index math where
exact and TMA tensor maps passed as pointers; nvgpu before gpu (the tensor-map and mbarrier types), then gpu
to NVVM with bare-pointer kernel parameters, NVVM ops that are inline PTX to LLVM, and
`gpu-module-to-binary{format=isa}`: the `gpu.binary @device` holds PTX for the target's PTX architecture
(sm_90 compiles as sm_90a: wgmma, TMA).
Launches: the host side read by gpu_common.launches, plus the tensor maps the runtime encodes at load time.
Serialization: the PTX, plus a cubin from the CUDA toolkit's ptxas when it is installed (else the
driver compiles the PTX when the artifact is loaded).
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target
from openprim.dialect import contract, kernels_module
from openprim.runtime.kernel_files import CUBIN, PTX

from .. import device_image, gpu_common, untimed

TENSOR_MAP = "!nvgpu.tensormap.descriptor"


def _index32(device: ir.Operation) -> bool:
    """32-bit index math is exact and lowers everywhere: every memref the kernels index has fewer than
    2**31 elements (so do the grids: one thread per element at most), and there is no nvgpu op
    (convert-nvgpu-to-nvvm builds 64-bit memref descriptors whatever the data layout says)."""
    sizes, nvgpu = [0], False

    def visit(op):
        nonlocal nvgpu
        nvgpu = nvgpu or op.name.startswith("nvgpu.")
        for r in list(op.results) + [a for reg in op.regions for b in reg.blocks for a in b.arguments]:
            if isinstance(r.type, ir.MemRefType) and r.type.has_static_shape:
                sizes.append(math.prod(r.type.shape))
        return ir.WalkResult.ADVANCE
    device.walk(visit)
    return not nvgpu and max(sizes) < 2 ** 31


def _tensor_map_parameters(f: ir.Operation) -> None:
    """A kernel's tensor-map parameters become pointers (to the 128-byte CUtensorMap the runtime puts in
    device memory), cast back to their nvgpu type inside: convert-gpu-to-nvvm cannot type a kernel
    parameter of nvgpu type, and the launch passes an address anyway."""
    block = f.regions[0].blocks[0]
    ptr = ir.Type.parse("!llvm.ptr")
    changed = False
    for arg in block.arguments:
        if str(arg.type).startswith(TENSOR_MAP):
            typed = arg.type
            arg.set_type(ptr)
            with ir.InsertionPoint.at_block_begin(block):
                cast = ir.Operation.create("builtin.unrealized_conversion_cast", results=[typed], operands=[arg])
            arg.replace_all_uses_except(cast.result, cast)
            changed = True
    if changed:
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([a.type for a in block.arguments], ftype.results))


def merge(module: ir.Operation) -> None:
    """The kernels into `gpu.module @device`, with 32-bit index math where exact (half the cost of 64-bit
    div/rem by constants) and TMA tensor maps passed as pointers (_tensor_map_parameters)."""
    device = gpu_common.merge_device_modules(module)
    if device is None:
        return
    with module.context, ir.Location.unknown():
        if _index32(device):
            device.attributes["dlti.dl_spec"] = ir.Attribute.parse("#dlti.dl_spec<#dlti.dl_entry<index, 32 : i32>>")
        for f in [o.operation for o in device.regions[0].blocks[0].operations]:
            _tensor_map_parameters(f)

        def launch_pointers(op):
            if op.name == "gpu.launch_func":
                for i, v in enumerate(op.operands):
                    if str(v.type).startswith(TENSOR_MAP):
                        with ir.InsertionPoint(op):
                            op.operands[i] = ir.Operation.create("builtin.unrealized_conversion_cast",
                                                                 results=[ir.Type.parse("!llvm.ptr")], operands=[v]).result
            return ir.WalkResult.ADVANCE
        kernels_module(module).walk(launch_pointers)


def lowering(target: Target, threads: bool, nested) -> list:
    """prim-lower's steps after the kernels are mapped onto the grid."""
    return [("prim-gpu-merge", merge), nested([
        f"nvvm-attach-target{{chip={target.ptx_arch} O=3}}",
        "gpu.module(fold-memref-alias-ops,expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm)"]),
        ("wgmma-chains", chain_wgmma), nested([
        "gpu.module(convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true},convert-nvvm-to-llvm)",
        "reconcile-unrealized-casts", "gpu-module-to-binary{format=isa}"])]


# Ops that may sit between two chained wgmmas: index and descriptor arithmetic, views, the accumulator's
# struct shuffles; nothing that reads or writes memory or synchronizes.
_CHAIN_OPS = re.compile(r"(arith\.|llvm\.(mlir\.|extractvalue|insertvalue|ptrtoint|add|sub|mul|shl|lshr|or|and"
                        r"|zext|trunc|getelementptr)|memref\.(view|subview|reinterpret_cast|extract)|"
                        r"builtin\.unrealized_conversion_cast)")
_WGMMA_SYNC = ("nvvm.wgmma.commit.group.sync.aligned", "nvvm.wgmma.wait.group.sync.aligned", "nvvm.wgmma.fence.aligned")


def chain_wgmma(module: ir.Operation) -> int:
    """Issue chained warpgroup MMAs as one group: where a wgmma's accumulator is an earlier wgmma's result
    (through the accumulator struct's insert/extract and casts only) and what lies between them is the
    earlier op's commit + wait_group + the later op's fence and index arithmetic, those three go. Each
    nvgpu.warpgroup.mma lowers to fence, its k steps, commit, wait_group 1, so a kernel that issues one op
    per k step (a transposed A: kernels/nvidia/wgmma_backward_weights.py) would wait on every k16 product;
    within one op the lowering chains its k steps the same way. Returns how many waits it removed."""
    removed = 0

    def position(op) -> list[int]:
        return list(ir.DenseI64ArrayAttr(op.attributes["position"]))

    def producer(value) -> ir.Operation | None:
        """The wgmma whose result `value` is, through struct shuffles and casts; None otherwise."""
        path = []                                # the positions still to extract, outermost first
        while isinstance(value.owner, (ir.Operation, ir.OpView)):
            op = value.owner.operation
            if op.name == "nvvm.wgmma.mma_async":
                return op if not path else None
            if op.name == "builtin.unrealized_conversion_cast" and len(op.operands) == 1:
                value = op.operands[0]
            elif op.name == "llvm.extractvalue":
                path, value = position(op) + path, op.operands[0]
            elif op.name == "llvm.insertvalue":  # operands (container, value)
                at = position(op)
                if path[:len(at)] == at:
                    path, value = path[len(at):], op.operands[1]
                else:
                    value = op.operands[0]
            else:
                return None
        return None

    chained = []

    def visit(op):
        if op.name == "nvvm.wgmma.mma_async":
            chained.append(op)
        return ir.WalkResult.ADVANCE

    kernels_module(module).walk(visit)
    for second in chained:
        first = producer(second.operands[0])        # (accumulator, descriptor A, descriptor B)
        if first is None:
            continue
        ops = [o.operation for o in second.block.operations]
        at = next(i for i, o in enumerate(ops) if o == second)
        start = next((i for i in range(at - 1, -1, -1) if ops[i] == first), None)
        if start is None:
            continue
        between = ops[start + 1:at]
        sync = [o for o in between if o.name in _WGMMA_SYNC]
        if sorted(o.name for o in sync) != sorted(_WGMMA_SYNC) or \
                any(o.name not in _WGMMA_SYNC and not _CHAIN_OPS.match(o.name) for o in between):
            continue
        for o in sync:
            o.erase()
        removed += 1
    return removed


def _tensor_map(op: ir.Operation, where: dict) -> list:
    """The launch argument of an nvgpu.tma.create.descriptor: ["tensormap", spec], spec being what the runtime
    needs to encode a TMA tensor map (cuTensorMapEncodeTiled) of the buffer under a memref.cast: the memory
    (one of the other launch arguments), dims and box (what lands in shared memory) outermost first,
    element strides (box[i] * strides[i] elements are traversed), 128-byte swizzle, zeros out of bounds."""
    source = op.operands[0].owner
    ranked = ir.MemRefType(source.operands[0].type)
    desc = str(op.result.type)
    box = [int(x) for x in re.search(r"tensor = memref<([\dx]+)x[a-z]", desc).group(1).split("x")]
    for key, want in (("swizzle", "swizzle_128b"), ("oob", "zero"), ("interleave", "none")):
        if f"{key} = {want}" not in desc:
            raise OpenPrimError(f"tensor map {desc}: only {key} = {want} is supported")
    l2 = re.search(r"l2promo = (\w+)", desc).group(1)
    spec = {"memory": where[op.operands[0]], "dtype": dialect.dtype_name(ranked.element_type),
            "shape": list(ranked.shape), "box": box, "element_strides": contract.element_strides(op, len(box)),
            "swizzle": 128, "l2promo": {"none": 0, "l2promo_64b": 64, "l2promo_128b": 128, "l2promo_256b": 256}[l2]}
    layout, offset = ranked.get_strides_and_offset()
    if offset:
        raise OpenPrimError(f"tensor map {desc}: a view with an offset ({offset}) is not supported")
    if layout != [int(np.prod(ranked.shape[i + 1:])) for i in range(ranked.rank)]:
        spec["strides"] = layout       # a strided (possibly overlapping) view: elements, outermost first
    return ["tensormap", spec]


def launches(module: ir.Module, weights_bytes: int) -> tuple[dict, bytes]:
    """The plan's launches (gpu_common.launches); a tensor map argument is ["tensormap", spec] (_tensor_map),
    which the runtime encodes into device memory at load time and passes by address."""
    return gpu_common.launches(module, weights_bytes, {"nvgpu.tma.create.descriptor": _tensor_map})


def ptxas(ptx: bytes, arch: str) -> bytes | None:
    """A cubin for `arch` from PTX, when the CUDA toolkit's ptxas is installed (else None)."""
    tool = shutil.which("ptxas") or next((p for p in (os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                                    "bin", "ptxas"),) if os.path.exists(p)), None)
    if not tool:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        Path(src).write_bytes(ptx)
        r = subprocess.run([tool, f"-arch={arch}", "-O3", src, "-o", out], capture_output=True, text=True)
        if r.returncode:
            raise OpenPrimError(f"ptxas failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
        return Path(out).read_bytes()


def kernel_files(module: ir.Module, target: Target, device_arch: str | None = None, stage=untimed) -> dict[str, bytes]:
    """kernels.ptx, and kernels.cubin when ptxas is here and the code is for the device it will run on
    (device_arch: the GPU of this process, when known; a cubin for another chip would not load)."""
    ptx = device_image(module)
    files = {PTX: ptx}
    if (device_arch or target.arch) == target.arch:
        with stage("ptxas"):
            cubin = ptxas(ptx, target.ptx_arch)
        if cubin:
            files[CUBIN] = cubin
    return files


def artifact_meta(target: Target, files: dict[str, bytes]) -> dict:
    """The chip the cubin was assembled for (None: PTX only)."""
    return {"cubin_arch": target.arch if CUBIN in files else None}

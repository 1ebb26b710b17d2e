"""prim-lower: every prim op left to a reference kernel, then the kernels module to native code.

Kernels already made by prim-tile are kept; any prim op still in a graph function gets its reference
semantics (kernels/semantics.py) untiled. Then, inside `module @kernels` only, bufferization (in place
into the caller's output buffer), and by target:

  cpu      the CPU backend's lowering (backends/cpu): the LLVM dialect with the bare-pointer calling
           convention, every kernel `void kernel(T *in0, ..., T *out)`, called through ctypes;
  nvvm/rocdl  every loop nest onto the grid (prim-gpu-map, or the solver's own gpu kernel), one
           `gpu.module @device` holding every kernel (bare pointers as parameters), then the backend's
           lowering (backends/nvvm, backends/rocdl) to a `gpu.binary @device`: PTX for nvvm, a linked
           hsaco for rocdl. The host side of each kernel function is left as allocations +
           `gpu.launch_func`s with constant sizes: the launch plan.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir

from openprim.backends.registry import for_target
from openprim.base.target import parse_target
from openprim.dialect import body, kernels_module

from . import prim_gpu_map
from .outline import outline

NAME = "prim-lower"

BUFFERIZE = (
    "func.func(canonicalize,cse)",
    "eliminate-empty-tensors",
    "empty-tensor-to-alloc-tensor",
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
    "canonicalize",
    "buffer-deallocation-pipeline",
)


def copies_to_linalg(op, _pass=None):
    """memref.copy -> linalg.copy, so strided copies become loops instead of calls to MLIR's
    runtime library (memrefCopy), which neither the JIT nor a standalone .so has."""
    from mlir.dialects import linalg  # imports the linalg OpDSL (slow): only when lowering
    copies = []
    op.walk(lambda o: (copies.append(o) if o.name == "memref.copy" else None, ir.WalkResult.ADVANCE)[1])
    for c in copies:
        with ir.InsertionPoint(c), c.location:
            linalg.copy(c.operands[0], outs=[c.operands[1]])
        c.erase()


GPU_MAP = (  # after memref-copy-to-linalg: linalg -> loop nests on the grid -> outlined gpu.funcs
    "func.func(convert-linalg-to-parallel-loops)",
    "fold-memref-alias-ops",
    "canonicalize",
    "prim-gpu-map",
    "convert-parallel-loops-to-gpu",
    "gpu-launch-sink-index-computations",
    "gpu-kernel-outlining",
    "canonicalize",
)
DEVICE = "device"


def _pointer_facts(f: ir.Operation) -> None:
    """Every memref parameter of a kernel is a whole plan buffer: 64-byte aligned, and never the same
    memory as another parameter (the memory plan keeps a step's buffers apart). Telling LLVM lets it
    keep several loads in flight across stores and use vector loads."""
    ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    unit, align = ir.UnitAttr.get(), ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 16)
    attrs = [ir.DictAttr.get({"llvm.noalias": unit, "llvm.align": align}) if isinstance(t, ir.MemRefType)
             else ir.DictAttr.get({}) for t in ftype.inputs]
    f.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


def _tensor_map_pointers(f: ir.Operation) -> None:
    """Tensor-map parameters become pointers (to the 128-byte CUtensorMap the runtime puts in device
    memory), cast back to their nvgpu type inside: convert-gpu-to-nvvm cannot type a kernel
    parameter of nvgpu type, and the launch passes an address anyway."""
    block = f.regions[0].blocks[0]
    ptr = ir.Type.parse("!llvm.ptr")
    changed = False
    for arg in block.arguments:
        if str(arg.type).startswith("!nvgpu.tensormap.descriptor"):
            typed = arg.type
            arg.set_type(ptr)
            with ir.InsertionPoint.at_block_begin(block), ir.Location.unknown():
                cast = ir.Operation.create("builtin.unrealized_conversion_cast", results=[typed], operands=[arg])
            arg.replace_all_uses_except(cast.result, cast)
            changed = True
    if changed:
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([a.type for a in block.arguments], ftype.results))


def _index32(mods) -> bool:
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
    for m in mods:
        m.walk(visit)
    return not nvgpu and max(sizes) < 2 ** 31


def merge_device_modules(module: ir.Operation, index32: bool = True) -> None:
    """The outlined gpu.modules (one per launch) into one `gpu.module @device`, each kernel renamed
    after its old module (unique): one code object per network."""
    km = kernels_module(module)
    mods = [o.operation for o in body(km).operations if o.operation.name == "gpu.module"]
    if not mods:
        return
    with module.context, ir.Location.unknown():
        with ir.InsertionPoint(body(km)):
            device = ir.Operation.create("gpu.module", attributes={"sym_name": ir.StringAttr.get(DEVICE)}, regions=1)
            device.regions[0].blocks.append()
        dest = device.regions[0].blocks[0]
        if index32 and _index32(mods):  # 32-bit index math: half the cost of 64-bit div/rem by constants
            device.attributes["dlti.dl_spec"] = ir.Attribute.parse("#dlti.dl_spec<#dlti.dl_entry<index, 32 : i32>>")
        renamed = {}
        for m in mods:
            old = ir.StringAttr(m.attributes["sym_name"]).value
            for f in [o.operation for o in m.regions[0].blocks[0].operations]:
                if f.name == "gpu.func":
                    renamed[(old, ir.StringAttr(f.attributes["sym_name"]).value)] = old
                    f.attributes["sym_name"] = ir.StringAttr.get(old)
                    _tensor_map_pointers(f)
                    _pointer_facts(f)
                    if "workgroup_attributions" in f.attributes:  # 16-byte aligned: vector shared loads
                        n = ir.IntegerAttr(f.attributes["workgroup_attributions"]).value
                        f.attributes["workgroup_attrib_attrs"] = ir.ArrayAttr.get(
                            [ir.DictAttr.get({"llvm.align": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 16)})] * n)
                    dest.append(f)
            m.erase()

        def retarget(op):
            if op.name == "gpu.launch_func":
                path = ir.SymbolRefAttr(op.attributes["kernel"]).value
                op.attributes["kernel"] = ir.SymbolRefAttr.get([DEVICE, renamed[tuple(path)]])
                for i, v in enumerate(op.operands):  # tensor maps: passed as pointers (_tensor_map_pointers)
                    if str(v.type).startswith("!nvgpu.tensormap.descriptor"):
                        with ir.InsertionPoint(op), ir.Location.unknown():
                            op.operands[i] = ir.Operation.create("builtin.unrealized_conversion_cast",
                                                                 results=[ir.Type.parse("!llvm.ptr")], operands=[v]).result
            return ir.WalkResult.ADVANCE
        km.walk(retarget)


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    threads: bool = True      # OpenMP threads over the kernels' scf.forall loops (when the runtime exists)

    def entries(self):
        """Pass-manager entries: Python passes on the whole module, upstream pipelines nested in the
        kernels module (a pass may not run its own pass manager on a nested op)."""
        target = parse_target(self.target)
        nested = lambda steps: "builtin.module(" + ",".join(steps) + ")"  # noqa: E731
        # GPU: scratch buffers belong to the launch plan, so no deallocation (nor its analysis, which
        # rejects the gpu ops of solver kernels).
        bufferize = BUFFERIZE[:-1] if target.is_gpu else BUFFERIZE
        head = [(f"{NAME}-outline", lambda op: outline(op, target)),
                nested(bufferize), ("memref-copy-to-linalg", copies_to_linalg)]
        tail = for_target(target).lowering(target, self.threads, nested)
        if not target.is_gpu:
            return head + tail
        return (head + [nested(GPU_MAP[:3]), ("prim-gpu-map", prim_gpu_map.Options().run), nested(GPU_MAP[4:]),
                        ("prim-gpu-merge", lambda op: merge_device_modules(op, target.kind == "nvvm"))] + tail)

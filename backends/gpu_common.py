"""What the GPU backends (nvvm, rocdl) share: the outlined device modules merged into one `gpu.module @device`,
and the host side of the lowered kernels read into the plan's launches.

A vendor's backend adds its own steps after the merge and passes the host ops only it knows to `launches`
(backends/nvvm: TMA tensor maps).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.dtypes import ITEMSIZE
from openprim.base.errors import OpenPrimError
from openprim.dialect import body, contract, kernels_module

from . import aligned

DEVICE = "device"
# A vendor's host op -> (op, where) -> the launch argument its result is; `where` maps each host value seen so
# far to its argument (["arg", i], ["scratch", offset], ...).
HostValue = Callable[[ir.Operation, dict], list]


def constant_int(v: ir.Value, what: str) -> int:
    """The value of an arith.constant integer/index; anything else is an error about `what`."""
    owner = v.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        raise OpenPrimError(f"{what} is not a compile-time constant")
    return ir.IntegerAttr(owner.attributes["value"]).value


def _pointer_facts(f: ir.Operation) -> None:
    """Every memref parameter of a kernel is a whole plan buffer: 64-byte aligned, and never the same
    memory as another parameter (the memory plan keeps a step's buffers apart). Telling LLVM lets it
    keep several loads in flight across stores and use vector loads."""
    ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    unit, align = ir.UnitAttr.get(), ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 16)
    attrs = [ir.DictAttr.get({"llvm.noalias": unit, "llvm.align": align}) if isinstance(t, ir.MemRefType)
             else ir.DictAttr.get({}) for t in ftype.inputs]
    f.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


def merge_device_modules(module: ir.Operation) -> ir.Operation | None:
    """The outlined gpu.modules (one per launch) into one `gpu.module @device`, each kernel renamed
    after its old module (unique): one code object per network. Returns @device (None: no kernel)."""
    km = kernels_module(module)
    mods = [o.operation for o in body(km).operations if o.operation.name == "gpu.module"]
    if not mods:
        return None
    with module.context, ir.Location.unknown():
        with ir.InsertionPoint(body(km)):
            device = ir.Operation.create("gpu.module", attributes={"sym_name": ir.StringAttr.get(DEVICE)}, regions=1)
            device.regions[0].blocks.append()
        dest = device.regions[0].blocks[0]
        renamed = {}
        for m in mods:
            old = ir.StringAttr(m.attributes["sym_name"]).value
            for f in [o.operation for o in m.regions[0].blocks[0].operations]:
                if f.name == "gpu.func":
                    renamed[(old, ir.StringAttr(f.attributes["sym_name"]).value)] = old
                    f.attributes["sym_name"] = ir.StringAttr.get(old)
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
            return ir.WalkResult.ADVANCE
        km.walk(retarget)
    return device


def _constant_int(v: ir.Value) -> int:
    return constant_int(v, "a GPU launch size or scalar argument")


def launches(module: ir.Module, weights_bytes: int, host_values: dict[str, HostValue]) -> tuple[dict, bytes]:
    """Per kernel function of a GPU-lowered module: its launches in order and its scratch buffers;
    and the bytes of the constant tables the kernels read, to append to the weights blob.

    A host kernel function only allocates scratch buffers, takes constant tables and launches: each
    `gpu.launch_func` becomes {"function", "grid", "block", "shared", "args"}, an argument being
    ["arg", i] (the i-th buffer the plan passes the kernel, output last), ["scratch", offset] (a byte
    offset in the scratch area), ["weight", offset] (in the weights), ["i64", value], or what
    host_values[op name] makes of a vendor's host op (nvvm: ["tensormap", spec]). The first launch of a
    kernel that names it in `prim.copy_launch` has "unless_aliased": [i, output]: the runtime leaves it out
    where those two arguments are one buffer."""
    km = kernels_module(module.operation)
    globals_ = {ir.StringAttr(o.attributes["sym_name"]).value: o.operation for o in body(km).operations
                if o.operation.name == "memref.global"}
    tables, table_at = [], {}
    kernels = {}
    for fn in [o.operation for o in body(km).operations if o.operation.name == "func.func"]:
        block = fn.regions[0].blocks[0]
        where = {a: ["arg", i] for i, a in enumerate(block.arguments)}
        scratch, launched = 0, []
        for op in [o.operation for o in block.operations]:
            if op.name == "memref.alloc":
                t = op.result.type
                where[op.result] = ["scratch", scratch]
                scratch += aligned(int(np.prod(t.shape)) * ITEMSIZE[dialect.dtype_name(t.element_type)])
            elif op.name == "memref.get_global":
                name = ir.FlatSymbolRefAttr(op.attributes["name"]).value
                if name not in table_at:
                    data = np.ascontiguousarray(dialect.to_numpy(globals_[name].attributes["initial_value"])).tobytes()
                    table_at[name] = weights_bytes + sum(len(t) for t in tables)
                    tables.append(data + bytes(aligned(len(data)) - len(data)))
                where[op.result] = ["weight", table_at[name]]
            elif op.name in ("memref.cast", "memref.collapse_shape", "memref.expand_shape",
                             "memref.reinterpret_cast", "builtin.unrealized_conversion_cast"):
                where[op.result] = where[op.operands[0]]            # a view: the same address
            elif op.name in host_values:
                where[op.result] = host_values[op.name](op, where)
            elif op.name == "gpu.launch_func":
                launch = op.opview
                sizes = [_constant_int(v) for v in (launch.gridSizeX, launch.gridSizeY, launch.gridSizeZ,
                                                    launch.blockSizeX, launch.blockSizeY, launch.blockSizeZ)]
                shared = launch.dynamicSharedMemorySize
                args = [where[v] if v in where else ["i64", _constant_int(v)] for v in launch.kernelOperands]
                launched.append({"function": ir.SymbolRefAttr(op.attributes["kernel"]).value[-1],
                                 "grid": sizes[:3], "block": sizes[3:],
                                 "shared": 0 if shared is None else _constant_int(shared), "args": args})
            elif op.name not in ("arith.constant", "memref.dealloc", "func.return"):
                raise OpenPrimError(f"kernel '{ir.StringAttr(fn.attributes['sym_name']).value}': host op "
                                    f"'{op.name}' is not a launch (was the module lowered for a GPU target?)")
        if (source := contract.copy_launch(fn)) is not None:
            launched[0]["unless_aliased"] = [source, len(block.arguments) - 1]
        kernels[ir.StringAttr(fn.attributes["sym_name"]).value] = {"launches": launched, "scratch_bytes": scratch}
    return kernels, b"".join(tables)

"""From a lowered module to a launch plan: what runs in which order on which buffers.

After prim-lower, a graph function is a list of `prim.constant`s, `prim.reshape`s (views, no
kernel) and calls of kernel declarations. `build_plan` turns it into the runtime's JSON-able plan and
a weights blob; `assign_offsets` is the static memory plan: each intermediate gets a byte range of
one arena, shared with any value whose lifetime does not overlap (greedy first-fit, biggest first).
"""
from __future__ import annotations

import re

import numpy as np
from mlir import ir

from openprim import __version__, dialect
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim.dialect import graph_functions, kernels_module
from openprim.passes.rewrite import constant_int
from openprim.base.dtypes import ITEMSIZE
from openprim.runtime.executor import ALIGN

PLAN_VERSION = 3  # 2: views name the value whose storage they share (`view_of`); 3: `batch_chunks`


def _round(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def assign_offsets(sizes: list[int], lifetimes: list[tuple[int, int]]) -> tuple[list[int], int]:
    """Offsets so that values alive at the same time never overlap; returns (offsets, arena bytes)."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    placed, offsets = [], [0] * len(sizes)
    for i in order:
        lo, hi = lifetimes[i]
        busy = sorted((offsets[j], offsets[j] + sizes[j]) for j in placed
                      if not (lifetimes[j][1] < lo or hi < lifetimes[j][0]))
        off = 0
        for b0, b1 in busy:
            if off + sizes[i] <= b0:
                break
            off = max(off, _round(b1))
        offsets[i] = off
        placed.append(i)
    return offsets, max((offsets[i] + sizes[i] for i in range(len(sizes))), default=0)


def build_plan(module: ir.Module, target) -> tuple[dict, bytes]:
    """The plan (JSON-able) and the weights blob of a module lowered for `target` (a Target or its text)."""
    target = parse_target(target)
    fns = graph_functions(module.operation)
    if len(fns) != 1:
        raise OpenPrimError(f"expected exactly one graph function, found {len(fns)}")
    fn = fns[0]
    block = fn.regions[0].blocks[0]
    ids, values, steps = {}, [], []
    roots = []  # per value: the value whose storage it shares (itself, or a reshape's source)

    def new_value(v, storage, root=None):
        t = v.type
        ids[v] = len(values)
        values.append({"shape": list(t.shape), "dtype": dialect.dtype_name(t.element_type), "storage": storage})
        roots.append(ids[v] if root is None else roots[root])
        return ids[v]

    names = ([ir.StringAttr(a).value for a in fn.attributes["prim.input_names"]]
             if "prim.input_names" in fn.attributes else [f"arg{i}" for i in range(len(block.arguments))])
    inputs = [{"name": n, "value": new_value(a, "arena")} for n, a in zip(names, block.arguments)]
    weight_off = 0
    chunks = []  # the weights blob: each constant's bytes, padded to the next aligned offset
    for op in [o.operation for o in block.operations]:
        if op.name == "prim.constant":
            i = new_value(op.result, "weight")
            data = dialect.to_numpy(op.attributes["value"])
            values[i]["offset"] = weight_off
            end = _round(weight_off + data.nbytes)
            chunks += [np.ascontiguousarray(data).tobytes(), bytes(end - weight_off - data.nbytes)]
            weight_off = end
        elif op.name == "prim.reshape":
            src = ids[op.operands[0]]
            new_value(op.result, values[src]["storage"], src)
        elif op.name == "func.call":
            args = [ids[a] for a in op.operands]
            out = new_value(op.result, "arena")
            steps.append({"kernel": ir.FlatSymbolRefAttr(op.attributes["callee"]).value, "args": args + [out]})
        elif op.name == "func.return":
            outputs = [ids[a] for a in op.operands]
        else:
            raise OpenPrimError(f"{dialect.where(op.location)}: error: '{op.name}' was not lowered to a kernel")
    _outputs_in_place(steps, values, roots, _in_place_args(module), inputs, outputs)
    # Lifetimes of arena roots, in step indices: inputs from -1, outputs to the end.
    n = len(steps)
    life = {}
    for i, s in enumerate(steps):
        for a in s["args"]:
            r = roots[a]
            lo, hi = life.get(r, (i, i))
            life[r] = (min(lo, i), max(hi, i))
    for spec in inputs:
        r = roots[spec["value"]]
        life[r] = (-1, life.get(r, (-1, -1))[1])
    for o in outputs:
        r = roots[o]
        life[r] = (life.get(r, (n, n))[0], n)
    arena_roots = [r for r in life if values[r]["storage"] == "arena"]
    sizes = [_round(int(np.prod(values[r]["shape"])) * ITEMSIZE[values[r]["dtype"]]) for r in arena_roots]
    offsets, arena = assign_offsets(sizes, [life[r] for r in arena_roots])
    where = dict(zip(arena_roots, offsets))
    for i, v in enumerate(values):
        if v["storage"] == "arena":
            v["offset"] = where.get(roots[i], 0)
        elif roots[i] != i:
            v["offset"] = values[roots[i]]["offset"]
        if roots[i] != i:
            v["view_of"] = roots[i]   # the runtime binds a caller's buffer to a value and all its views
    plan = {"format": "openprim-plan", "version": PLAN_VERSION, "compiler": f"openprim {__version__}",
            "target": str(target), "values": values, "inputs": inputs, "outputs": outputs, "steps": steps,
            "arena_bytes": arena, "weights_bytes": weight_off,
            "naive_bytes": sum(sizes)}
    if "prim.batch_chunks" in fn.attributes:  # passes/batch_chunks.py: the steps run once per chunk
        plan["batch_chunks"] = ir.IntegerAttr(fn.attributes["prim.batch_chunks"]).value
    km = kernels_module(module.operation)
    if not target.is_gpu and km is not None and "openprim.scratch_bytes" in km.attributes:  # backends/cpu
        plan["scratch_bytes"] = ir.IntegerAttr(km.attributes["openprim.scratch_bytes"]).value
    if target.is_gpu:
        plan["kernels"], tables = gpu_launches(module, weight_off)
        plan["scratch_bytes"] = max((k["scratch_bytes"] for k in plan["kernels"].values()), default=0)
        plan["weights_bytes"] += len(tables)
        chunks.append(tables)
    return plan, b"".join(chunks)


def _in_place_args(module: ir.Module) -> dict[str, int]:
    """{kernel: the argument whose buffer its output may take} (the kernels' `prim.in_place`)."""
    km = kernels_module(module.operation)
    return {ir.StringAttr(f.attributes["sym_name"]).value: ir.IntegerAttr(f.attributes["prim.in_place"]).value
            for f in ([] if km is None else [o.operation for o in km.regions[0].blocks[0].operations])
            if "prim.in_place" in f.attributes}


def _outputs_in_place(steps, values, roots, in_place: dict[str, int], inputs, outputs) -> None:
    """Give a step's output the buffer of its residual where the kernel allows it (`in_place`) and the
    residual dies there: no later step reads it, no other argument of the step shares its buffer, it is
    neither a graph input nor output, and it has the output's size. A residual convolution then reads and
    writes one buffer, as ONNX Runtime's Sum fusion does: where the output is larger than the caches (ResNet-50
    at batch 8: 25 MB), writing a separate buffer costs a read of each line before the write."""
    fixed = {roots[spec["value"]] for spec in inputs} | {roots[o] for o in outputs}
    last = {}
    for i, s in enumerate(steps):
        for a in s["args"]:
            last[roots[a]] = i
    for i, s in enumerate(steps):
        at = in_place.get(s["kernel"])
        if at is None:
            continue
        res, out = roots[s["args"][at]], roots[s["args"][-1]]
        others = {roots[a] for j, a in enumerate(s["args"][:-1]) if j != at}
        nbytes = [int(np.prod(values[r]["shape"])) * ITEMSIZE[values[r]["dtype"]] for r in (res, out)]
        if last[res] != i or res in others or res in fixed or out in fixed or nbytes[0] != nbytes[1] or \
                values[res]["storage"] != "arena" or out != s["args"][-1]:
            continue
        for v, r in enumerate(roots):
            if r == out:
                roots[v] = res
        last[res] = last[out]


def _constant_int(v: ir.Value) -> int:
    return constant_int(v, "a GPU launch size or scalar argument")


def _tensor_map(op: ir.Operation, where: dict) -> dict:
    """What the runtime needs to encode a TMA tensor map (cuTensorMapEncodeTiled) of the buffer under a
    memref.cast: the memory, dims and box (what lands in shared memory) outermost first, element strides
    (openprim.element_strides: box[i] * strides[i] elements are traversed), 128-byte swizzle, zeros out
    of bounds."""
    source = op.operands[0].owner
    ranked = ir.MemRefType(source.operands[0].type)
    desc = str(op.result.type)
    box = [int(x) for x in re.search(r"tensor = memref<([\dx]+)x[a-z]", desc).group(1).split("x")]
    for key, want in (("swizzle", "swizzle_128b"), ("oob", "zero"), ("interleave", "none")):
        if f"{key} = {want}" not in desc:
            raise OpenPrimError(f"tensor map {desc}: only {key} = {want} is supported")
    l2 = re.search(r"l2promo = (\w+)", desc).group(1)
    strides = [int(x) for x in ir.DenseI64ArrayAttr(op.attributes["openprim.element_strides"])] \
        if "openprim.element_strides" in op.attributes else [1] * len(box)
    spec = {"memory": where[op.operands[0]], "dtype": dialect.dtype_name(ranked.element_type),
            "shape": list(ranked.shape), "box": box, "element_strides": strides, "swizzle": 128,
            "l2promo": {"none": 0, "l2promo_64b": 64, "l2promo_128b": 128, "l2promo_256b": 256}[l2]}
    layout, offset = ranked.get_strides_and_offset()
    if offset:
        raise OpenPrimError(f"tensor map {desc}: a view with an offset ({offset}) is not supported")
    if layout != [int(np.prod(ranked.shape[i + 1:])) for i in range(ranked.rank)]:
        spec["strides"] = layout       # a strided (possibly overlapping) view: elements, outermost first
    return spec


def gpu_launches(module: ir.Module, weights_bytes: int) -> tuple[dict, bytes]:
    """Per kernel function of a GPU-lowered module: its launches in order and its scratch buffers;
    and the bytes of the constant tables the kernels read, to append to the weights blob.

    A host kernel function only allocates scratch buffers, takes constant tables and launches: each
    `gpu.launch_func` becomes {"function", "grid", "block", "shared", "args"}, an argument being
    ["arg", i] (the i-th buffer the plan passes the kernel, output last), ["scratch", offset] (a byte
    offset in the scratch area), ["weight", offset] (in the weights), ["i64", value] or ["tensormap", spec]
    (the address of a TMA tensor map the runtime encodes at load time over spec["memory"], one of the
    others; see _tensor_map)."""
    km = kernels_module(module.operation)
    globals_ = {ir.StringAttr(o.attributes["sym_name"]).value: o.operation for o in km.regions[0].blocks[0].operations
                if o.operation.name == "memref.global"}
    tables, table_at = [], {}
    kernels = {}
    for fn in [o.operation for o in km.regions[0].blocks[0].operations if o.operation.name == "func.func"]:
        block = fn.regions[0].blocks[0]
        where = {a: ["arg", i] for i, a in enumerate(block.arguments)}
        scratch, launches = 0, []
        for op in [o.operation for o in block.operations]:
            if op.name == "memref.alloc":
                t = op.result.type
                where[op.result] = ["scratch", scratch]
                scratch += _round(int(np.prod(t.shape)) * ITEMSIZE[dialect.dtype_name(t.element_type)])
            elif op.name == "memref.get_global":
                name = ir.FlatSymbolRefAttr(op.attributes["name"]).value
                if name not in table_at:
                    data = np.ascontiguousarray(dialect.to_numpy(globals_[name].attributes["initial_value"])).tobytes()
                    table_at[name] = weights_bytes + sum(len(t) for t in tables)
                    tables.append(data + bytes(_round(len(data)) - len(data)))
                where[op.result] = ["weight", table_at[name]]
            elif op.name in ("memref.cast", "memref.collapse_shape", "memref.expand_shape",
                             "memref.reinterpret_cast", "builtin.unrealized_conversion_cast"):
                where[op.result] = where[op.operands[0]]            # a view: the same address
            elif op.name == "nvgpu.tma.create.descriptor":
                where[op.result] = ["tensormap", _tensor_map(op, where)]
            elif op.name == "gpu.launch_func":
                launch = op.opview
                sizes = [_constant_int(v) for v in (launch.gridSizeX, launch.gridSizeY, launch.gridSizeZ,
                                                    launch.blockSizeX, launch.blockSizeY, launch.blockSizeZ)]
                shared = launch.dynamicSharedMemorySize
                args = [where[v] if v in where else ["i64", _constant_int(v)] for v in launch.kernelOperands]
                launches.append({"function": ir.SymbolRefAttr(op.attributes["kernel"]).value[-1],
                                 "grid": sizes[:3], "block": sizes[3:],
                                 "shared": 0 if shared is None else _constant_int(shared), "args": args})
            elif op.name not in ("arith.constant", "memref.dealloc", "func.return"):
                raise OpenPrimError(f"kernel '{ir.StringAttr(fn.attributes['sym_name']).value}': host op "
                                    f"'{op.name}' is not a launch (was the module lowered for a GPU target?)")
        kernels[ir.StringAttr(fn.attributes["sym_name"]).value] = {"launches": launches, "scratch_bytes": scratch}
    return kernels, b"".join(tables)

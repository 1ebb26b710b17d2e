"""Kernel outlining, shared by prim-tile and prim-lower.

Every compute op of a graph function (or every call of a prim-fuse'd elementwise function) becomes a
kernel: a destination-passing function in the nested `module @kernels` (reference semantics from
semantics.py, then a schedule if one is given), plus a private declaration at the top level that the
graph calls. The graph function then reads as the launch plan:

    func.func private @conv2d_0(tensor<..>, tensor<..>) -> tensor<..> attributes {prim.kernel}
    func.func @main(%x) { %w = "prim.constant"() ...; %y = call @conv2d_0(%x, %w) ...; return %y }
    module @kernels { func.func @conv2d_0(%in0: memref<..>, %in1: memref<..>, %out: memref<..>) {...} }

Identical kernels (same ops, shapes and attributes) are emitted once.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from openprim import dialect

from .semantics import EMITTERS, KernelText, V, mtype

KERNELS = "kernels"
NOT_KERNELS = ("prim.constant", "prim.reshape")


def body(module: ir.Operation) -> ir.Block:
    """The block of a builtin.module operation (passes receive operations, not ir.Module)."""
    return module.regions[0].blocks[0]


def kernels_module(module: ir.Operation, target: str, create=True):
    for op in body(module).operations:
        if op.operation.name == "builtin.module" and "sym_name" in op.attributes:
            if ir.StringAttr(op.attributes["sym_name"]).value == KERNELS:
                return op
    if not create:
        return None
    with module.context, ir.Location.unknown(), ir.InsertionPoint(body(module)):
        km = ir.Operation.create("builtin.module", regions=1,
                                 attributes={"sym_name": ir.StringAttr.get(KERNELS),
                                             "prim.target": ir.StringAttr.get(target)})
        km.regions[0].blocks.append()
    return km


def _symbols(module):
    return {ir.StringAttr(op.attributes["sym_name"]).value: op
            for op in body(module).operations if op.operation.name == "func.func"}


def graph_functions(module):
    """Public function definitions: the graphs (fused helpers are private, kernels are declarations)."""
    return [op for op in body(module).operations
            if op.operation.name == "func.func" and "sym_visibility" not in op.attributes and len(op.regions[0].blocks)]


def _value_v(v: ir.Value, name: str) -> V:
    t = v.type
    return V(name, t.shape, dialect.dtype_name(t.element_type))


def kernel_text(name: str, ops: list, inputs: list, result: ir.Value, attrs: str = "") -> str:
    """The kernel function for prim `ops` reading `inputs` and producing `result`."""
    kt = KernelText()
    env = {}
    for i, v in enumerate(inputs):
        vv = _value_v(v, f"%t{i}")
        kt.emit(f"%t{i} = bufferization.to_tensor %in{i} restrict : {mtype(vv.shape, vv.dtype)} to {vv.type}")
        env[v] = vv
    for op in ops:
        groups = dialect.operand_groups(op)
        operands = [None if g is None else env[g] for g in groups]
        shape = tuple(op.result.type.shape)
        dtype = dialect.dtype_name(op.result.type.element_type)
        env[op.result] = EMITTERS[op.name[5:]](kt, op.name[5:], operands, dialect.op_attrs(op), shape, dtype)
    r = env[result]
    kt.emit(f"bufferization.materialize_in_destination {r.name} in restrict writable %out : "
            f"({r.type}, {mtype(r.shape, r.dtype)}) -> ()")
    ins = [(_value_v(v, "").shape, _value_v(v, "").dtype) for v in inputs]
    return kt.text(name, ins, (r.shape, r.dtype), attrs)


def kernel_units(module):
    """(graph op to replace, prim ops of the kernel, kernel inputs, callee values map) per kernel, in order."""
    syms = _symbols(module)
    for fn in graph_functions(module):
        for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
            if op.name.startswith("prim.") and op.name not in NOT_KERNELS:
                yield op, [op], [v for v in dialect.operand_groups(op) if v is not None]
            elif op.name == "func.call":
                callee = syms[ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
                if "prim.fused" in callee.attributes:
                    yield op, callee, list(op.operands)


def outline(module: ir.Operation, target: str, schedule=None) -> None:
    """Replace every compute op / fused call of the graph functions by a call to a kernel.

    schedule(kernel_func_op, prim_ops) rewrites the fresh kernel in place (tiling, vectorization)."""
    ctx = module.context
    km = kernels_module(module, target)
    seen: dict[str, str] = {}
    fused_used = {}
    count = len(km.regions[0].blocks[0].operations)
    with ctx, ir.Location.unknown():
        for anchor, body, inputs in kernel_units(module):  # lazily: inputs read after earlier rewrites
            if isinstance(body, list):
                ops, result = body, anchor.result
            else:  # a prim-fuse'd function: its body ops, with its arguments as the kernel inputs
                fused_used[ir.StringAttr(body.attributes['sym_name']).value] = body
                blk = body.regions[0].blocks[0]
                ops = [o.operation for o in blk.operations if o.operation.name != "func.return"]
                inputs = list(blk.arguments)
                result = list(blk.operations)[-1].operands[0]
            kind = ops[0].name[5:] if len(ops) == 1 else "fused_elementwise"
            solver = ops[0].attributes["prim.solver"].value if "prim.solver" in ops[0].attributes else ""
            key_text = kernel_text("KERNEL", ops, inputs, result)
            key = key_text + solver + (str(ops[0].attributes["prim.params"]) if "prim.params" in ops[0].attributes else "")
            name = seen.get(key)
            if name is None:
                name = f"{kind}_{count}"
                count += 1
                seen[key] = name
                kmod = ir.Module.parse(key_text.replace("@KERNEL", f"@{name}", 1))
                kfn = kmod.body.operations[0]
                kfn.attributes["prim.op"] = ir.StringAttr.get(kind)
                if solver:
                    kfn.attributes["prim.solver"] = ir.StringAttr.get(solver)
                if schedule is not None:
                    schedule(kfn, ops)
                km.regions[0].blocks[0].append(kfn)
                fn = anchor.parent
                while fn.operation.name != "func.func":
                    fn = fn.parent
                with ir.InsertionPoint(fn):
                    decl = func.FuncOp(name, ([v.type for v in anchor.operands], [anchor.result.type]),
                                       visibility="private")
                decl.attributes["prim.kernel"] = ir.UnitAttr.get()
            with ir.InsertionPoint(anchor), anchor.location:
                call = func.CallOp([anchor.result.type], ir.FlatSymbolRefAttr.get(name), list(anchor.operands))
            anchor.result.replace_all_uses_with(call.result)
            anchor.erase()
        for f in fused_used.values():
            f.erase()

"""Kernel outlining, shared by prim-tile and prim-lower.

Every compute op of a graph function (or every call of a prim-fuse'd elementwise function) becomes a
kernel: a destination-passing function in the nested `module @kernels` (reference semantics from
kernels/semantics.py, then a schedule if one is given), plus a private declaration at the top level that the
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
from openprim.base.dtypes import ITEMSIZE
from openprim.base.ops import ELEMENTWISE
from openprim.base.target import Target
from openprim.dialect import body, contract, graph_functions, kernels_module
from openprim.kernels.irtext import KernelText, V, mtype
from openprim.kernels.semantics import EMITTERS, emit_fused
from openprim.solvers import SOLVERS

NOT_KERNELS = ("prim.constant", "prim.reshape")
VIEW_ALIGN = 64     # a slice viewed in place starts at a multiple of these bytes (runtime.executor.ALIGN)


def slice_view_offset(op: ir.Operation) -> int | None:
    """The element offset in its source at which a prim.slice's result lies as one contiguous run (every
    dim before some dim k of size 1 in the result, every dim after k whole, no step where the result has
    more than one element), starting at a multiple of VIEW_ALIGN bytes: such a slice is a view of its
    source in the plan, no kernel (driver/plan.py). Else None."""
    if op.name != "prim.slice":
        return None
    src, out = list(op.operands[0].type.shape), list(op.result.type.shape)
    attrs = dialect.op_attrs(op)
    if any(st != 1 and n > 1 for st, n in zip(attrs["steps"], out)) or 0 in out:
        return None
    k = next((d for d, n in enumerate(out) if n > 1), len(out) - 1)
    if any(out[d] != src[d] for d in range(k + 1, len(out))):
        return None
    offset, stride = 0, 1
    for d in range(len(src) - 1, -1, -1):
        offset += attrs["starts"][d] * stride
        stride *= src[d]
    itemsize = ITEMSIZE[dialect.dtype_name(op.result.type.element_type)]
    return offset if offset * itemsize % VIEW_ALIGN == 0 else None


def _symbols(module):
    return {ir.StringAttr(op.attributes["sym_name"]).value: op
            for op in body(module).operations if op.operation.name == "func.func"}


def _value_v(v: ir.Value, name: str) -> V:
    t = v.type
    return V(name, t.shape, dialect.dtype_name(t.element_type))


def _emitter(op):
    """The op's chosen solver's build (prim-select), else its reference semantics."""
    chosen = contract.solver(op)
    if chosen is not None:
        solver, params = SOLVERS[chosen], contract.params(op)
        return lambda kt, name, operands, attrs, shape, dtype: solver.build(kt, operands, attrs, shape, dtype, params)
    return EMITTERS[op.name[5:]]


def kernel_text(name: str, ops: list, inputs: list, result: ir.Value, gpu=False) -> tuple[str, KernelText]:
    """The kernel function for prim `ops` reading `inputs` and producing `result` (and its builder)."""
    kt = KernelText(pad_block=1 << 62) if gpu else KernelText()
    env = {}
    for i, v in enumerate(inputs):
        vv = _value_v(v, f"%t{i}")
        kt.emit(f"%t{i} = bufferization.to_tensor %in{i} restrict : {mtype(vv.shape, vv.dtype)} to {vv.type}")
        env[v] = vv
    shape = tuple(result.type.shape)
    dtype = dialect.dtype_name(result.type.element_type)
    if len(ops) > 1 and ops[0].name == "prim.concat":  # concat_chains.outline_concat_chains: op by op
        for op in ops:
            env[op.result] = EMITTERS[op.name[5:]](kt, op.name[5:], [env[v] for v in op.operands],
                                                   dialect.op_attrs(op), tuple(op.result.type.shape), dtype)
        r = env[ops[-1].result]
    elif len(ops) > 1:  # a prim-fuse'd elementwise chain: one loop nest
        chain = [(op.name[5:], dialect.op_attrs(op), list(op.operands), op.result) for op in ops]
        r = emit_fused(kt, chain, env, shape, dtype)
    else:
        op = ops[0]
        operands = [None if g is None else env[g] for g in dialect.operand_groups(op)]
        r = _emitter(op)(kt, op.name[5:], operands, dialect.op_attrs(op), shape, dtype)
    kt.result = r.name
    kt.emit(f"bufferization.materialize_in_destination {r.name} in restrict writable %out : "
            f"({r.type}, {mtype(r.shape, r.dtype)}) -> ()")
    ins = [(_value_v(v, "").shape, _value_v(v, "").dtype) for v in inputs]
    return kt.text(name, ins, (r.shape, r.dtype)), kt


def kernel_units(module):
    """Per kernel, in program order: (graph op to replace, the kernel's prim ops, its input values, its
    result value, the prim-fuse'd function it came from or None). A generator: each unit is read after
    the previous one was rewritten."""
    syms = _symbols(module)
    for fn in graph_functions(module):
        for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
            if op.name.startswith("prim.") and op.name not in NOT_KERNELS and slice_view_offset(op) is None:
                yield op, [op], [v for v in dialect.operand_groups(op) if v is not None], op.result, None
            elif op.name == "func.call":
                callee = syms[ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
                if contract.is_fused(callee):  # its body ops, its arguments as the kernel inputs
                    blk = callee.regions[0].blocks[0]
                    ops = [o.operation for o in blk.operations]
                    yield op, ops[:-1], list(blk.arguments), ops[-1].operands[0], callee


def _mark_choice(call, op) -> None:
    """prim-select's solver, parameters and problem descriptor of `op`, copied onto the call of its kernel."""
    contract.set_solver(call, contract.solver(op))
    if params := contract.params(op):
        contract.set_params(call, params)
    if (problem := contract.problem(op)) is not None:
        contract.set_problem(call, problem)


def outline(module: ir.Operation, target: Target, schedule=None) -> None:
    """Replace every compute op / fused call of the graph functions by a call to a kernel.

    schedule(kernel_text, kernel_builder, prim_ops) -> a module holding the kernel, tiled and vectorized;
    without it the kernel is parsed as is (reference loop nests)."""
    ctx = module.context
    km = kernels_module(module, target)
    seen: dict[tuple, str] = {}
    fused_used = {}
    count = len(km.regions[0].blocks[0].operations)
    with ctx, ir.Location.unknown():
        for anchor, ops, inputs, result, fused in kernel_units(module):
            if fused is not None:
                fused_used[ir.StringAttr(fused.attributes["sym_name"]).value] = fused
            kind = ops[0].name[5:] if len(ops) == 1 or ops[0].name == "prim.concat" else "fused_elementwise"
            solver = contract.solver(ops[0])
            key_text, kt = kernel_text("KERNEL", ops, inputs, result, gpu=target.is_gpu)
            key = (key_text, solver, str(contract.params(ops[0])))
            name = seen.get(key)
            if name is None:
                name = f"{kind}_{count}"
                count += 1
                seen[key] = name
                text = key_text.replace("@KERNEL", f"@{name}", 1)
                kmod = schedule(text, kt, ops) if schedule else ir.Module.parse(text)
                kfn = next(o.operation for o in kmod.body.operations if o.operation.name == "func.func")
                contract.set_kernel_op(kfn, kind)
                if not target.is_gpu and all(o.name[5:] in ELEMENTWISE for o in ops) and \
                        (same := [i for i, v in enumerate(inputs) if v.type == result.type]):
                    contract.set_in_place(kfn, same)   # each reads its element where it writes the result's
                if solver:
                    contract.set_solver(kfn, solver)
                body(km).append(kfn)  # moves it out of kmod, which must stay alive until here
                fn = anchor.parent
                while fn.operation.name != "func.func":
                    fn = fn.parent
                with ir.InsertionPoint(fn):
                    decl = func.FuncOp(name, ([v.type for v in anchor.operands], [anchor.result.type]),
                                       visibility="private")
                contract.mark_kernel(decl)
            with ir.InsertionPoint(anchor), anchor.location:
                call = func.CallOp([anchor.result.type], ir.FlatSymbolRefAttr.get(name), list(anchor.operands))
            if solver:   # the layer's choice on its launch, for the plan's steps (driver/plan.py: openprim profile)
                _mark_choice(call.operation, ops[0])
            anchor.result.replace_all_uses_with(call.result)
            anchor.erase()
        for f in fused_used.values():
            f.erase()

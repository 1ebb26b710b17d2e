"""Ops moved out of a graph into a private function marked prim.fused, which becomes one kernel.

prim-fuse's elementwise groups (elementwise_groups.py), prim-tile's concat chains (concat_chains.py) and
channel shuffles (channel_shuffle.py) each outline a group of ops so: the graph calls @fused_<index>,
whose body is the group, and passes/outline.py turns that body into one kernel (one loop nest, or a
hand-written copy). The indices run on over the functions a module already has (fused_count).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from openprim.dialect import body, contract


def fused_count(module_op) -> int:
    """The number of prim.fused functions in the module: the index of the next one."""
    return sum(1 for op in body(module_op).operations if op.operation.name == "func.func" and contract.is_fused(op))


def outline_fused(fn, group: list, index: int) -> None:
    """Move `group` (producers before consumers; its last op is the only one used outside) into @fused_<index>."""
    inside = {o.result for o in group}
    inputs = []
    for o in group:
        for v in o.operands:
            if v not in inside and v not in inputs:
                inputs.append(v)
    last = group[-1]
    name = f"fused_{index}"
    with ir.InsertionPoint(fn), ir.Location.unknown():
        f = func.FuncOp(name, ([v.type for v in inputs], [last.result.type]), visibility="private")
        contract.mark_fused(f)
        blk = f.add_entry_block()
    with ir.InsertionPoint(last), last.location:
        call = func.CallOp([last.result.type], ir.FlatSymbolRefAttr.get(name), inputs)
    call.operation.move_after(last)  # after the whole group: every input dominates it
    last.result.replace_all_uses_with(call.result)
    for o in group:
        blk.append(o)
        for v, a in zip(inputs, blk.arguments):
            o.replace_uses_of_with(v, a)
    with ir.InsertionPoint(blk), last.location:
        func.ReturnOp([last.result])

"""Parameters stored in the layout their readers want (weights="values"): prim-select's last rewrite.

Under weights="values" a graph function's last arguments are its parameters (prim.param_names), and the
layout stages give a convolution's filter the layout its solver reads through transposes: KCRS -> KRSC
(prim-layout), then -> RSCK (prim-select), one transpose kernel each, on every call (ResNet-18: 11.7 M
weights, about 30 ms a call on 2 cores). A constant is permuted once at compile time instead
(rewrite.transpose). A parameter that only transposes read, all to the same composed permutation, is
instead stored permuted: its argument takes the transposed type, the transposes go, and prim.param_perms
records the permutation, which `load_weights` applies on the host when it writes the parameter
(driver/plan.py records it as the parameter's "perm"; runtime/executor.py applies it).
"""
from __future__ import annotations

from mlir import ir

from openprim import dialect
from openprim.dialect import contract


def _chain(op: ir.Operation) -> tuple[list, list[int]]:
    """The transposes from `op` on while each is the only reader of the one before: (them, their composed
    perm: the last result = transpose(op's operand, perm))."""
    ops, perm = [op], list(dialect.op_attrs(op)["perm"])
    while True:
        uses = list(ops[-1].result.uses)
        if len(uses) != 1 or uses[0].owner.name != "prim.transpose":
            return ops, perm
        nxt = uses[0].owner
        q = list(dialect.op_attrs(nxt)["perm"])
        ops.append(nxt)
        perm = [perm[i] for i in q]


def store_params_permuted(fn) -> None:
    """The rewrite on one graph function (module docstring); nothing where it has no parameters."""
    names = contract.param_names(fn)
    if not names:
        return
    with fn.location:
        _store_permuted(fn, names)


def _store_permuted(fn, names: list[str]) -> None:
    block = fn.regions[0].blocks[0]
    args = list(block.arguments)[len(block.arguments) - len(names):]
    perms = contract.param_perms(fn)
    changed = False
    for k, a in enumerate(args):
        readers = [u.owner for u in a.uses]
        if not readers or any(r.name != "prim.transpose" for r in readers):
            continue
        chains = [_chain(r) for r in readers]
        perm = chains[0][1]
        if any(p != perm for _, p in chains[1:]):
            continue
        t = ir.RankedTensorType(a.type)
        a.set_type(ir.RankedTensorType.get([t.shape[i] for i in perm], t.element_type))
        for ops, _ in chains:
            ops[-1].result.replace_all_uses_with(a)
            for op in reversed(ops):
                op.erase()
        before = perms[k] or list(range(len(perm)))
        composed = [before[i] for i in perm]
        perms[k] = None if composed == sorted(composed) else composed
        changed = True
    if changed:
        contract.set_param_perms(fn, perms)
        ret = block.operations[len(block.operations) - 1]
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [v.type for v in block.arguments], [v.type for v in ret.operands]))

"""Chains of concats, with the batch norm and ReLU after them, as one copy kernel each (prim-tile).

The frontends write an n-input concat as a left-nested chain of binary ones, concat(concat(x0, x1), x2)...,
which copies the growing prefix at every step; DenseNet follows its concats with BN -> ReLU -> conv. A
chain (each inner result used only by the next concat, one axis) and the batch norm on the concat axis and
the relu that are its only uses become one private prim.fused function (fused_functions.py), whose
arguments are the chain's inputs in order, then the batch norm's parameters. kernels/cpu/concat.py and
kernels/gpu/concat.py build its kernel: every input written once, normalized and rectified on the way.
"""
from __future__ import annotations

from mlir import ir

from openprim import dialect
from openprim.dialect import graph_functions

from .fused_functions import fused_count, outline_fused
from .rewrite import producer, single_use


def _concat_chains(fn) -> list[list[ir.Operation]]:
    """Maximal left-nested chains concat(concat(x0, x1), x2)... along one axis, each inner result used
    only by the next concat of the chain (the frontends' n-input concat), extended by a batch_norm on
    the concat axis that is the chain's only use and then a relu that is the batch_norm's only use
    (DenseNet's pre-activation: concat -> BN -> ReLU -> conv). A chain of one concat needs the BN."""
    chains, chain_of = [], {}
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name != "prim.concat":
            continue
        lhs = producer(op.operands[0], "prim.concat")
        if lhs is not None and lhs in chain_of and single_use(op.operands[0]) and \
                dialect.op_attrs(lhs)["axis"] == dialect.op_attrs(op)["axis"] and chain_of[lhs][-1] == lhs:
            chain_of[op] = chain_of[lhs]
            chain_of[op].append(op)
        else:
            chain_of[op] = [op]
            chains.append(chain_of[op])
    for chain in chains:
        last = chain[-1]
        rank = len(last.result.type.shape)
        bn = _only_user(last, "prim.batch_norm")
        if bn is None or bn.operands[0] != last.result or \
                (1 if dialect.op_attrs(bn)["layout"] == "NCHW" else rank - 1) != dialect.op_attrs(last)["axis"] % rank:
            continue
        chain.append(bn)
        relu = _only_user(bn, "prim.relu")
        if relu is not None:
            chain.append(relu)
    return [c for c in chains if len(c) > 1]


def _only_user(op: ir.Operation, name: str) -> ir.Operation | None:
    """The op named `name` that is the only use of op's result, or None."""
    uses = list(op.result.uses)
    owner = getattr(uses[0].owner, "operation", uses[0].owner) if len(uses) == 1 else None
    return owner if owner is not None and owner.name == name else None


def outline_concat_chains(module_op) -> None:
    """Each chain of binary concats (_concat_chains, with the batch_norm and relu that follow it) into
    a private function marked `prim.fused`, whose arguments are the chain's inputs in order (then the
    batch_norm's parameters): one kernel that writes every input once (kernels/cpu/concat.py,
    kernels/gpu/concat.py) instead of copying the growing prefix at every step, then normalizing and
    rectifying it in two more passes. prim-tile runs this after prim-layout has sunk its transposes
    through the single concats."""
    with module_op.context:
        count = fused_count(module_op)
        for fn in graph_functions(module_op):
            for chain in _concat_chains(fn):
                outline_fused(fn, chain, count)
                count += 1

"""Channel shuffles as channel gathers (CPU, prim-tile after prim-select): ShuffleNet's copies in one pass.

A ShuffleNet v2 unit ends with concat(x1, branch) along the channels, reshape [.., C] -> [.., g, C/g],
transpose of the last two dims, reshape back (the channel shuffle), and the next unit slices the result
into its two halves. Laid out NHWC, each step is a copy of the whole tensor. All of them only move
channels within a pixel, so each result that leaves the chain is one gather of the concat's inputs
(kernels/cpu/channel_gather.py), reading them once:

    concat -> reshape -> transpose -> reshape [-> slice of the channels]     (one group per result)

A chain with several slices is cloned, one copy per slice; the slices then read x1 and the branch directly.
The map from output channel to (input, channel) is found by running the chain's own view ops on an array
of channel labels (gather_map), so any group count works. Only chains that keep the leading (pixel) dims
in place match.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.dialect import graph_functions

from .fused_functions import fused_count, outline_fused
from .rewrite import single_use


def _shuffle_chain(concat: ir.Operation) -> list[ir.Operation] | None:
    """[concat, reshape, transpose, reshape] of a channel shuffle after this concat (last axis), each used
    once but the last, the pixel dims kept throughout; else None."""
    shape = list(concat.result.type.shape)
    rank, lead = len(shape), shape[:-1]
    if dialect.op_attrs(concat)["axis"] % rank != rank - 1:
        return None
    chain, v = [concat], concat.result
    for name in ("prim.reshape", "prim.transpose", "prim.reshape"):
        if not single_use(v):        # the last reshape's result may have several users (the slices)
            return None
        op = next(iter(v.uses)).owner
        op = getattr(op, "operation", op)
        if op.name != name or list(op.result.type.shape[:len(lead)]) != lead:
            return None
        if name == "prim.transpose" and list(dialect.op_attrs(op)["perm"])[:len(lead)] != list(range(len(lead))):
            return None
        chain.append(op)
        v = op.result
    return chain if list(v.type.shape) == shape else None


def _channel_slice(op: ir.Operation) -> bool:
    """A unit-step slice of the last axis only."""
    if op.name != "prim.slice":
        return False
    a, shape = dialect.op_attrs(op), list(op.operands[0].type.shape)
    return list(a["steps"]) == [1] * len(shape) and list(a["starts"][:-1]) == [0] * (len(shape) - 1) and \
        list(a["ends"][:-1]) == shape[:-1]


def gather_map(ops: list[ir.Operation]) -> tuple[list[ir.Value], list[tuple[int, int]]]:
    """The concat's inputs and, per output channel of the group's result, (input index, channel)."""
    concat, rest = ops[0], ops[1:]
    inputs = list(concat.operands)
    labels = np.concatenate([np.stack([np.full(v.type.shape[-1], i), np.arange(v.type.shape[-1])], -1)
                             for i, v in enumerate(inputs)])          # [C, 2]
    lead = len(concat.result.type.shape) - 1
    for op in rest:
        tail = list(op.result.type.shape)[lead:]
        if op.name == "prim.reshape":
            labels = labels.reshape(tail + [2])
        elif op.name == "prim.transpose":
            perm = [p - lead for p in dialect.op_attrs(op)["perm"][lead:]]
            labels = labels.transpose(perm + [len(perm)])
        else:   # the channel slice
            a = dialect.op_attrs(op)
            labels = labels[a["starts"][-1]:a["ends"][-1]]
    return inputs, [(int(i), int(c)) for i, c in labels.reshape(-1, 2)]


def outline_channel_shuffles(module_op) -> None:
    """Each channel-shuffle chain (module docstring) into fused functions, one per result that leaves it."""
    with module_op.context:
        count = fused_count(module_op)
        for fn in graph_functions(module_op):
            for concat in [o.operation for o in fn.regions[0].blocks[0].operations if o.operation.name == "prim.concat"]:
                chain = _shuffle_chain(concat)
                if chain is None:
                    continue
                users = [getattr(u.owner, "operation", u.owner) for u in chain[-1].result.uses]
                slices = [u for u in users if _channel_slice(u)]
                for s in slices:
                    with ir.InsertionPoint(s):
                        copy, v = [], None
                        for op in chain:
                            c = op.clone()
                            c = getattr(c, "operation", c)
                            if v is not None:
                                c.operands[0] = v
                            copy.append(c)
                            v = c.result
                    s.operands[0] = v
                    outline_fused(fn, copy + [s], count)
                    count += 1
                if len(slices) < len(users):
                    outline_fused(fn, chain, count)
                    count += 1
                else:
                    for op in reversed(chain):
                        op.erase()

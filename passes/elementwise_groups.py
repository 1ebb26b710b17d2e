"""Trees of elementwise ops as one fused function each: prim-fuse's last rewrite.

After the other rewrites, a maximal tree of elementwise ops whose inner results each have exactly one use,
inside the tree, moves into a private function marked prim.fused (fused_functions.py); prim-tile and
prim-lower make it one kernel, a single loop nest that reads the tree's inputs and writes its root.
"""
from __future__ import annotations

import math

from mlir import ir

from openprim import dialect
from openprim.base.dtypes import FLOATS
from openprim.base.ops import ELEMENTWISE

from .fused_functions import outline_fused
from .rewrite import producer, reshape, single_use


def elementwise_groups(fn) -> list[list[ir.Operation]]:
    """Maximal trees of elementwise ops whose inner results each have exactly one use, inside the tree."""
    group_of = {}
    groups = []
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name[5:] not in ELEMENTWISE or dialect.dtype_name(op.result.type.element_type) not in FLOATS:
            continue   # integer arithmetic stays exact in kernels of its own (a fused body computes in f32)
        g = [op]
        for v in op.operands:
            prod = producer(v)
            if prod is not None and prod in group_of and single_use(v):
                pg = group_of[prod]
                if groups[pg] is not None and prod == groups[pg][-1]:
                    g = groups[pg] + g
                    groups[pg] = None
        idx = len(groups)
        groups.append(g)
        for o in g:
            group_of[o] = idx
    return [g for g in groups if g is not None and len(g) > 1]


SMALL_PRODUCER = 4096   # elements: a producer this small is computed again per element of its consumer


def _unit_dims(shape) -> list[int]:
    return [d for d in shape if d != 1]


def hoist_reshapes_of_small_ops(fn) -> int:
    """reshape(op(a, b...)) -> op(reshape(a), reshape(b)...) for a small elementwise op whose one use is a
    reshape that only adds or drops unit dims, every operand the op's shape or a scalar: the op then reads
    as the operand of the elementwise tree the reshape fed, and joins it (a training batch norm's
    scale * inv_std [C], viewed [C, 1, 1] for the map's affine step, was a launch of its own per layer). How
    many it moved."""
    moved = 0
    for view in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if view.name != "prim.reshape":
            continue
        op = producer(view.operands[0])
        if op is None or op.name[5:] not in ELEMENTWISE or not single_use(view.operands[0]) or \
                dialect.dtype_name(op.result.type.element_type) not in FLOATS:
            continue
        shape, new = list(op.result.type.shape), list(view.result.type.shape)
        if _unit_dims(shape) != _unit_dims(new) or math.prod(shape) > SMALL_PRODUCER or \
                any(list(v.type.shape) not in (shape, []) for v in op.operands):
            continue
        with ir.InsertionPoint(view), view.location:
            operands = [v if not v.type.shape else reshape(v, new, view.location) for v in op.operands]
            hoisted = ir.Operation.create(op.name, results=[view.result.type], operands=operands,
                                          attributes={k: op.attributes[k] for k in op.attributes}, loc=op.location)
        view.result.replace_all_uses_with(hoisted.result)
        view.erase()
        op.erase()
        moved += 1
    return moved


def outline_elementwise_groups(fn, index: int) -> int:
    """Each group of graph function fn into @fused_<index>, @fused_<index + 1>, ...; the next free index.
    Small ops that feed a tree through a unit-dim reshape are moved past it first, to join the tree."""
    while hoist_reshapes_of_small_ops(fn):
        pass
    for group in elementwise_groups(fn):
        outline_fused(fn, group, index)
        index += 1
    return index

"""Trees of elementwise ops as one fused function each: prim-fuse's last rewrite.

After the other rewrites, a maximal tree of elementwise ops whose inner results each have exactly one use,
inside the tree, moves into a private function marked prim.fused (fused_functions.py); prim-tile and
prim-lower make it one kernel, a single loop nest that reads the tree's inputs and writes its root.
"""
from __future__ import annotations

from mlir import ir

from openprim import dialect
from openprim.base.dtypes import FLOATS
from openprim.base.ops import ELEMENTWISE

from .fused_functions import outline_fused
from .rewrite import producer, single_use


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


def outline_elementwise_groups(fn, index: int) -> int:
    """Each group of graph function fn into @fused_<index>, @fused_<index + 1>, ...; the next free index."""
    for group in elementwise_groups(fn):
        outline_fused(fn, group, index)
        index += 1
    return index

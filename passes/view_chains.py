"""Chains of data movement that are one transpose, written as one.

Exported models move data in steps that each copy on their own, where together they are a single
permutation of the source's elements:

  - transpose -> reshape -> transpose: Swin's attention output moved back from the heads (BSHD -> BHSD) and
    then out of its windows ([B nW, S, H, D] -> [B, nH, nW, wh, ww, H D] -> the map's rows), two copies;
  - concat of strided slices: Swin's patch merging, cat(x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2],
    x[1::2, 1::2]) over channels, four slice copies and three concats (a space-to-depth);
  - torch.roll (a gather by constant indices per axis) and a window partition: Swin's shifted windows,
    three copies that are one gather of whole rows per image.

As in matmul_views.py, the chain is replayed on the positions of its source's elements (numpy arange), and
the map written as reshape -> transpose -> reshape when it is one (`as_one_transpose`), else, where it moves
whole rows of the last dim the same way in each batch element, as reshape -> gather -> reshape; a chain is
rewritten only when that leaves fewer copies than it had, and only when the map is provably the same.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect

from .matmul_views import (MAX_POSITIONS, VIEWS, as_one_transpose, as_row_gather, constant_gather, copies,
                           emit_row_gather, emit_views, erase_dead, positions, source_chain)
from .rewrite import producer, reshape

MOVES = ("prim.reshape", "prim.transpose")


def merge_reshapes(op: ir.Operation) -> bool:
    """reshape(reshape(x, s1), s2) -> reshape(x, s2), and a reshape back to x's own type -> x: an importer's
    view and its inverse (torch.onnx's group norm, [N, C, H, W] -> [N, G, rest] -> back) leave the map as it
    was, so the layout transposes on either side of them meet and cancel."""
    inner = producer(op.operands[0], "prim.reshape")
    source = op.operands[0] if inner is None else inner.operands[0]
    if source.type == op.result.type:
        op.result.replace_all_uses_with(source)
    elif inner is not None:
        with ir.InsertionPoint(op), op.location:
            op.result.replace_all_uses_with(reshape(source, op.result.type.shape, op.location))
    else:
        return False
    op.erase()
    if inner is not None and not list(inner.result.uses):
        inner.erase()
    return True


def _movable(op: ir.Operation) -> bool:
    return op.name in MOVES or constant_gather(op) is not None


def reshape_or_transpose(op: ir.Operation) -> bool:
    return op.name in MOVES


def _chain_end(op: ir.Operation) -> bool:
    """Whether op is a move (reshape, transpose, constant gather) whose result is read, but not by exactly one
    other move."""
    if not _movable(op):
        return False
    users = [u.owner for u in op.result.uses]
    return bool(users) and not (len(users) == 1 and _movable(users[0]))


def collapse_moves(end: ir.Operation, movable=_movable, fits=lambda perm: True) -> bool:
    """The longest chain of moves ending at `end` (each result used once; `movable` says which ops are
    moves) -> at most one transpose between reshapes (where `fits` its permutation), or else one gather of
    whole rows (Swin's roll and window partition), when that removes a copy."""
    v, ops = source_chain(end.operands[0], movable, single_use=True)
    ops.append(end)
    before = copies(ops)
    size = int(np.prod(v.type.shape))
    if before < 2 or size > MAX_POSITIONS:
        return False
    pos = positions(v.type.shape, ops)
    loc, width = end.location, v.type.shape[-1]
    views = as_one_transpose(pos) if pos.size == size else None
    moved = views is not None and views[1] != sorted(views[1])     # else the chain is a reshape: always fits
    if views is not None and int(moved) < before and (not moved or fits(list(views[1]))):
        with ir.InsertionPoint(end), loc:
            end.result.replace_all_uses_with(emit_views(v, views[0], views[1], end.result.type.shape, loc))
    elif (rows := as_row_gather(pos, width, size)) is not None:
        with ir.InsertionPoint(end), loc:
            end.result.replace_all_uses_with(emit_row_gather(v, rows, width, end.result.type.shape, loc))
    else:
        return False
    erase_dead(ops)
    return True


def _concat_tree(op: ir.Operation, axis: int) -> tuple[list[ir.Value], list[ir.Operation]]:
    """(the leaves, left to right, the concats, outermost first) of a tree of concats along `axis` whose
    inner concats are used only in it."""
    leaves, concats = [], [op]
    for x in op.operands:
        inner = producer(x, "prim.concat")
        if inner is not None and len(list(x.uses)) == 1 and dialect.op_attrs(inner)["axis"] % len(x.type.shape) == axis:
            sub_leaves, sub_concats = _concat_tree(inner, axis)
            leaves, concats = leaves + sub_leaves, concats + sub_concats
        else:
            leaves.append(x)
    return leaves, concats


def concat_of_slices(op: ir.Operation) -> bool:
    """A tree of concats whose leaves are views (slices, reshapes, transposes; used only here) of one source
    that together permute it -> at most one transpose between reshapes."""
    axis = dialect.op_attrs(op)["axis"] % len(op.result.type.shape)
    leaves, concats = _concat_tree(op, axis)
    chains = [source_chain(x, lambda op: op.name in VIEWS, single_use=True) for x in leaves]
    source = chains[0][0]
    size = int(np.prod(source.type.shape))
    if any(src != source or not ops for src, ops in chains) or size != int(np.prod(op.result.type.shape)) or \
            size > MAX_POSITIONS:
        return False
    views = as_one_transpose(np.concatenate([positions(source.type.shape, ops) for _, ops in chains], axis))
    if views is None:
        return False
    with ir.InsertionPoint(op), op.location:
        op.result.replace_all_uses_with(emit_views(source, views[0], views[1], op.result.type.shape, op.location))
    erase_dead(concats[::-1])   # erased last to first: the root first
    for _, ops in chains:
        erase_dead(ops)
    return True


def collapse_view_chains(fn) -> bool:
    """One sweep of both rewrites over graph function fn, in program order; whether any fired."""
    changed = False
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name == "prim.concat" and len(list(op.result.uses)) and all(
                u.owner.name != "prim.concat" for u in op.result.uses):
            changed = concat_of_slices(op) or changed
        elif _chain_end(op):
            changed = collapse_moves(op) or changed
    return changed

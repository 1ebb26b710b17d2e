"""Attention on the heads where the projections leave them: prim.attention in layout BSHD, without the
transposes that an exported multi-head attention puts around it.

A model splits a projection [B, S, H*D] into heads as a view [B, S, H, D] and then transposes each of
q, k and v to [B, H, S, D] for scaled_dot_product_attention, whose result it transposes back before the
out-projection. Every transpose is a kernel that reads and writes the whole tensor: four per layer, 22% of
ViT-B/16's time on the H200 and 18% of a BERT-base layer's. In layout BSHD the attention reads the rows
of each head in place (a row of head h at position s is row s H + h of the [B S H, D] matrix), so

    transpose(x, [0,2,1,3]) -> q    (k, v likewise)             attention(x, y, z, layout = BSHD) -> o
    attention(q, k, v, layout = BHSD) -> a                 =>   (o used where transpose(a) was)
    transpose(a, [0,2,1,3]) -> o

The rewrite fires when it removes more transposes than it adds: an operand that is not such a transpose
gets one to BSHD, and a result that is also used untransposed gets one back to BHSD for those uses. A
transpose is removed only when this attention is its only user. prim-fuse runs it once prim-decompose has
decomposed every attention without a kernel: the attention ops left have one, and the kernels (and the
decomposition) take both layouts.
"""
from __future__ import annotations

from mlir import ir

from openprim import dialect

from .prim_decompose import HEADS_SWAP
from .rewrite import producer, rebuild, transpose


def _heads_swap(op) -> bool:
    return op is not None and op.name == "prim.transpose" and list(dialect.op_attrs(op)["perm"]) == HEADS_SWAP


def _users(v: ir.Value) -> list:
    return [u.owner for u in v.uses]


def heads_inner(op: ir.Operation) -> bool:
    """Rewrite one BHSD prim.attention into BSHD when that removes transposes (module docstring)."""
    attrs = dialect.op_attrs(op)
    if attrs["layout"] != "BHSD":
        return False
    q, k, v, mask = dialect.operand_groups(op)
    inputs = list(dict.fromkeys([q, k, v]))          # distinct values (self-attention may pass k as v)
    swapped = {x: producer(x) for x in inputs if _heads_swap(producer(x))}
    removed_in = [x for x in swapped if all(u == op for u in _users(x))]
    outs = [u for u in _users(op.result) if _heads_swap(u)]
    others = len(_users(op.result)) - len(outs)
    if len(removed_in) + len(outs) <= (len(inputs) - len(swapped)) + (1 if others else 0):
        return False
    loc = op.location
    with ir.InsertionPoint(op), loc:
        heads = {x: swapped[x].operands[0] if x in swapped else transpose(x, HEADS_SWAP, loc) for x in inputs}
        result_t = ir.RankedTensorType.get([op.result.type.shape[p] for p in HEADS_SWAP], op.result.type.element_type)
        new = rebuild(op, [heads[q], heads[k], heads[v], mask], {"layout": "BSHD"}, loc, result_t)
    for t in outs:
        t.result.replace_all_uses_with(new.result)
        t.erase()
    if others:
        with ir.InsertionPoint(op), loc:
            back = transpose(new.result, HEADS_SWAP, loc)
        op.result.replace_all_uses_with(back)
    op.erase()
    for x in removed_in:
        swapped[x].erase()
    return True


def attention_layouts(fn) -> bool:
    """heads_inner over the attention ops of graph function fn; whether any changed."""
    ops = [o.operation for o in fn.regions[0].blocks[0].operations if o.operation.name == "prim.attention"]
    return any([heads_inner(op) for op in ops])

"""Common subexpressions: identical prim ops computed once (prim-fuse's first step).

Upstream `cse` leaves prim ops alone (IRDL ops declare no memory effects, so it must assume they have
some), and the importers repeat work per layer: a Hugging Face decoder builds its attention mask's
additive form (`where(mask, 0, -inf)`) once per layer, each time from constants of its own, so a GPT-2
decode step launched the same 544-element kernel twelve times. In program order, an op is replaced by an
earlier one with the same name, operands, attributes and result types; constants are compared by their
value attribute (MLIR uniques attributes, so equal values are one object and compare in O(1)). Every prim
op is a pure function of its operands but prim.bounds_check, whose result the runtime reads as an error
report of its own: those stay. So do reshapes, transposes and slices: they cost little or nothing, and the
rewrites that see through them want each used once (Swin's patch merging is four pairs of slices, two of
them alike, recognized as one space-to-depth only while each slice has its one use). And so do concats:
an importer writes each n-input concat as a chain of binary ones, and DenseNet's layer i concatenates the
same first i feature maps as layer i - 1 did plus one; merged, every chain would share its prefix with the
next, no chain link would have one use, and concat_chains could no longer write each layer's concatenation
with its batch norm and ReLU in one pass (DenseNet-121 on the H100: 2.4 -> 3.2 ms, three passes a layer).
"""
from __future__ import annotations

from .matmul_views import VIEWS

KEEP = ("prim.bounds_check", "prim.concat") + VIEWS


def merge_common_subexpressions(fn) -> bool:
    """Replace each prim op of graph function fn by an earlier identical one; whether any was."""
    seen, merged = {}, []
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if not op.name.startswith("prim.") or op.name in KEEP or len(op.regions):
            continue
        key = (op.name, tuple(op.operands), tuple((a, op.attributes[a]) for a in op.attributes),
               tuple(r.type for r in op.results))
        first = seen.setdefault(key, op)
        if first is not op:
            for old, new in zip(op.results, first.results):
                old.replace_all_uses_with(new)
            merged.append(op)
    for op in merged:
        op.erase()
    return bool(merged)

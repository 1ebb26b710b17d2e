"""prim-decompose: composite ops that the target has no kernel for, rewritten into the ops it has.

`prim.attention` is softmax(scale * q @ k^T + mask) @ v. Where an attention solver applies on the target
(solvers/: the NVIDIA and AMD flash-attention kernels, f16/bf16, head dims 64 and 128; on mma.sync also 16
and 32), the op stays whole and prim-select chooses it, so the S x S scores never reach
memory. Everywhere else (the CPU, other dtypes
and head dims) it becomes the ops that every target already runs well:

    s = matmul(q * scale, k, transpose_rhs)  batched over B*H, [B, H, Sq, Sk]; the scale on q where q is no
                                             larger than s (D <= Sk), which prim-fuse then folds into the
                                             weights of q's projection (BERT: no kernel for it), else on s
    s = s (+ mask) (+ causal)                causal: a constant [Sq, Sk] of 0 and -inf (key j > query i); a
                                             mask [P, ..] tiling the batch is added over [B / P, P, H, Sq, Sk]
    p = softmax(s, axis=-1)
    o = matmul(p, v)                         batched, [B, H, Sq, D]

An attention in layout BSHD (its operands and result [B, S, H, D]) is decomposed between transposes to
and from BHSD.

Grouped-query attention (Llama: H query heads over Hkv key/value heads) reaches here with each key/value head
repeated G = H / Hkv times (transformers' repeat_kv: reshape, expand, reshape), which would materialize G
copies of the whole KV cache per layer and step. Where k and v are such repeats of k0, v0 [B, Hkv, Sk, D],
the products read k0 and v0 instead, with the G query heads of a group as G * Sq rows of one batched matmul:

    s = matmul(reshape(q, [B, Hkv, G*Sq, D]), k0, transpose_rhs) viewed as [B, H, Sq, Sk]
    o = matmul(reshape(p, [B, Hkv, G*Sq, Sk]), v0) viewed as [B, H, Sq, D]

The pass runs first, so that prim-fuse then fuses the scale and mask adds into one elementwise kernel
and prim-select picks a GEMM solver for both products like for any other matmul.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.target import Target
from openprim.dialect import graph_functions
from openprim.solvers import applicable
from openprim.solvers.problem import problem_of

from .rewrite import constant, create, new_constant, producer, reshape, transpose

NAME = "prim-decompose"
HEADS_SWAP = [0, 2, 1, 3]   # BSHD <-> BHSD


def has_kernel(op: ir.Operation, target: Target) -> bool:
    """Whether an attention solver applies to `op` on `target` (the op then stays whole)."""
    return any(reason is None for _, reason in applicable(problem_of(op), "attention", target))


def _matmul(a: ir.Value, b: ir.Value, shape, transpose_rhs: bool, loc) -> ir.Value:
    return create("matmul", [a, b, None, None], shape, a,
                   {"transpose_rhs": int(transpose_rhs), "activation": "none", "activation_params": []}, loc)


def shared_heads(x: ir.Value) -> tuple[ir.Value, list[ir.Operation]] | None:
    """(x0, the ops that repeat it) where x [B, Hkv*G, S, D] is x0 [B, Hkv, S, D] with each head repeated G
    times: reshape(broadcast(reshape(x0, [B, Hkv, 1, S, D]), [B, Hkv, G, S, D])), the broadcast a
    prim.broadcast or an add of zeros (an imported expand); else None."""
    outer = producer(x, "prim.reshape")
    if outer is None:
        return None
    wide = outer.operands[0]
    shape = dialect.shape_of(wide)
    grow = producer(wide, "prim.broadcast") or producer(wide, "prim.add")
    if len(shape) != 5 or grow is None:
        return None
    sources = [o for o in grow.operands if dialect.shape_of(o) != shape] if grow.name == "prim.add" \
        else list(grow.operands)
    zeros = [o for o in grow.operands if dialect.shape_of(o) == shape] if grow.name == "prim.add" else []
    if len(sources) != 1 or any(constant(z) is None or np.any(constant(z)) for z in zeros):
        return None
    inner = producer(sources[0], "prim.reshape")
    b, hkv, g, sk, d = shape
    if inner is None or dialect.shape_of(sources[0]) != (b, hkv, 1, sk, d) or \
            dialect.shape_of(inner.operands[0]) != (b, hkv, sk, d):
        return None
    return inner.operands[0], [outer, grow, *[producer(z) for z in zeros], inner]


def decompose_attention(op: ir.Operation) -> None:
    """Replace one prim.attention by matmul, scale, mask adds, softmax and matmul (module docstring)."""
    q, k, v, mask = dialect.operand_groups(op)
    attrs = dialect.op_attrs(op)
    loc = op.location
    heads_inner = attrs["layout"] == "BSHD"
    with ir.InsertionPoint(op), loc:
        if heads_inner:
            q, k, v = (transpose(x, HEADS_SWAP, loc) for x in (q, k, v))
        B, H, Sq, D = dialect.shape_of(q)
        Sk = dialect.shape_of(k)[2]
        scores = (B, H, Sq, Sk)
        def scaled(x, shape):
            return create("mul", [x, new_constant(np.array(attrs["scale"]), q, loc)], shape, q, {}, loc)
        if D <= Sk:   # q is no larger than the scores: scale it (prim-fuse folds that into q's projection)
            q = scaled(q, (B, H, Sq, D))
        grouped = [shared_heads(x) for x in (k, v)] if not heads_inner else [None, None]
        if all(grouped) and dialect.shape_of(grouped[0][0]) == dialect.shape_of(grouped[1][0]):
            hkv = dialect.shape_of(grouped[0][0])[1]
            rows = H // hkv * Sq
            s = reshape(_matmul(reshape(q, (B, hkv, rows, D), loc), grouped[0][0], (B, hkv, rows, Sk), True, loc),
                        scores, loc)
        else:
            grouped = None
            s = _matmul(q, k, scores, True, loc)
        if D > Sk:
            s = scaled(s, scores)
        if mask is not None and len(dialect.shape_of(mask)) == 4 and dialect.shape_of(mask)[0] not in (1, B):
            P = dialect.shape_of(mask)[0]     # the mask tiles the batch: add it over [B / P, P, H, Sq, Sk]
            s = reshape(create("add", [reshape(s, (B // P, P, H, Sq, Sk), loc), mask], (B // P, P, H, Sq, Sk), q,
                               {}, loc), scores, loc)
        elif mask is not None:
            s = create("add", [s, mask], scores, q, {}, loc)
        if attrs["causal"]:
            above = np.arange(Sk)[None, :] > np.arange(Sq)[:, None]
            s = create("add", [s, new_constant(np.where(above, -np.inf, 0.0), q, loc)], scores, q, {}, loc)
        p = create("softmax", [s], scores, q, {"axis": -1}, loc)
        if grouped:
            out = reshape(_matmul(reshape(p, (B, hkv, rows, Sk), loc), grouped[1][0], (B, hkv, rows, D), False, loc),
                          (B, H, Sq, D), loc)
        else:
            out = _matmul(p, v, (B, H, Sq, D), False, loc)
        if heads_inner:
            out = transpose(out, HEADS_SWAP, loc)
    op.result.replace_all_uses_with(out)
    op.erase()
    for _, repeat in grouped or ():
        for dead in repeat:   # the repeats, unless something else reads them
            if dead is not None and not list(dead.result.uses):
                dead.erase()


@dataclass
class Options:
    NAME = NAME
    target: Target = Target("cpu")

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        with module_op.context:
            for fn in graph_functions(module_op):
                for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
                    if op.name == "prim.attention" and not has_kernel(op, self.target):
                        decompose_attention(op)

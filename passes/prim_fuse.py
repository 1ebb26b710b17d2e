"""prim-fuse: fewer, bigger kernels.

Transposes of constants are folded first; then three rewrites over each graph function, in program order:
  1. batch_norm(conv2d(x, W, b)) with constant W, b and BN parameters -> conv2d(x, W', b'):
       s = scale / sqrt(var + eps);  W'[k] = W[k] * s[k];  b' = (b - mean) * s + shift
  2. conv2d/matmul epilogues, cuDNN's ConvBiasActivation with z: y = act(conv(x) + bias + z)
       add(conv, c)  with c a per-channel constant -> bias
       add(conv, z)  with z of the output shape      -> residual
       act(conv)     for an elementwise activation   -> activation
     each only while the conv/matmul result has no other use.
  3. chains of elementwise ops (each intermediate used once) -> a private function marked `prim.fused`,
     called from the graph; prim-tile/prim-lower turn it into one kernel (one loop nest).
outline_concat_chains does the same for chains of binary concats and the batch_norm + relu after them (one
copy kernel per chain); prim-tile calls it on the CPU, once prim-select has moved its layout transposes
through the single concats.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlir import ir
from mlir.dialects import func

from openprim import dialect
from openprim.base.ops import ELEMENTWISE
from openprim.dialect import body, graph_functions
from openprim.kernels.semantics import unary_activation

from .rewrite import constant, new_constant, producer, rebuild, single_use, transpose

NAME = "prim-fuse"
ACTIVATION_OPS = ("relu", "leaky_relu", "clamp", "sigmoid", "tanh", "gelu", "silu", "elu", "hardsigmoid", "hardswish")







def _channel_axis(op) -> int:
    if op.name == "prim.matmul":
        return len(op.result.type.shape) - 1
    return 1 if dialect.op_attrs(op)["layout"] == "NCHW" else 3


def _per_channel(c: np.ndarray, out_shape, axis) -> np.ndarray | None:
    """c as a [K] vector if it broadcasts against out_shape along `axis` only, else None."""
    K = out_shape[axis]
    full = [1] * len(out_shape)
    full[axis] = K
    aligned = (1,) * (len(out_shape) - c.ndim) + tuple(c.shape)
    if len(aligned) != len(out_shape) or any(d not in (1, f) for d, f in zip(aligned, full)):
        return None
    return np.broadcast_to(c.reshape(aligned), full).reshape(K)


def _fold_batch_norm(bn: ir.Operation) -> bool:
    conv = producer(bn.operands[0], "prim.conv2d")
    if conv is None or not single_use(bn.operands[0]):
        return False
    ca, ba = dialect.op_attrs(conv), dialect.op_attrs(bn)
    x, w, bias, residual = dialect.operand_groups(conv)
    if ca["activation"] != "none" or residual is not None or ca["layout"] != ba["layout"]:
        return False
    scale, shift, mean, var = (constant(v) for v in bn.operands[1:])
    wd = constant(w)
    bd = constant(bias) if bias is not None else np.zeros(bn.operands[1].type.shape[0])
    if any(a is None for a in (scale, shift, mean, var, wd, bd)):
        return False
    s = scale / np.sqrt(var + ba["epsilon"])
    k_axis = 3 if ca["filter_layout"] == "RSCK" else 0  # the filter's output-channel axis
    with ir.InsertionPoint(bn), bn.location:
        new_w = new_constant(wd * np.expand_dims(s, [a for a in range(4) if a != k_axis]), w, bn.location)
        new_b = new_constant((bd - mean) * s + shift, bn.operands[1], bn.location)
        fused = rebuild(conv, [x, new_w, new_b, None], {}, conv.location)
    bn.result.replace_all_uses_with(fused.result)
    bn.erase()
    conv.erase()
    return True


def _fuse_epilogue(op: ir.Operation) -> bool:
    """Fold `op` (an add or an activation) into the conv2d/matmul producing its operand."""
    for i, v in enumerate(op.operands):
        prod = producer(v)
        if prod is None or prod.name not in ("prim.conv2d", "prim.matmul") or not single_use(v):
            continue
        attrs = dialect.op_attrs(prod)
        x, w, bias, residual = dialect.operand_groups(prod)
        if attrs["activation"] != "none":
            continue
        if op.name == "prim.add":
            other = op.operands[1 - i]
            if tuple(other.type.shape) == tuple(prod.result.type.shape) and residual is None and \
                    tuple(op.result.type.shape) == tuple(prod.result.type.shape):
                new = ([x, w, bias, other], {})
            else:
                c = constant(other)
                axis = _channel_axis(prod)
                vec = None if c is None or bias is not None else _per_channel(c, prod.result.type.shape, axis)
                if vec is None or tuple(op.result.type.shape) != tuple(prod.result.type.shape):
                    continue
                with ir.InsertionPoint(op), op.location:
                    new_bias = new_constant(vec, other, op.location)
                new = ([x, w, new_bias, residual], {})
        else:
            act, params = unary_activation(op.name[5:], dialect.op_attrs(op))
            new = ([x, w, bias, residual], {"activation": act, "activation_params": params})
        with ir.InsertionPoint(op):
            fused = rebuild(prod, new[0], new[1], prod.location)
        op.result.replace_all_uses_with(fused.result)
        op.erase()
        prod.erase()
        return True
    return False


def _fold_constant_transposes(fn) -> None:
    """transpose(constant) -> constant (e.g. weights re-laid out in the model), so the rewrites below
    see constants."""
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name == "prim.transpose" and producer(op.operands[0], "prim.constant") is not None:
            with ir.InsertionPoint(op), op.location:
                op.result.replace_all_uses_with(transpose(op.operands[0], dialect.op_attrs(op)["perm"], op.location))
            op.erase()


def erase_dead_constants(fn) -> None:
    """Drop the prim.constants that rewrites left without uses (folded weights, BN parameters)."""
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name == "prim.constant" and not list(op.result.uses):
            op.erase()


def _elementwise_groups(fn) -> list[list[ir.Operation]]:
    """Maximal trees of elementwise ops whose inner results each have exactly one use, inside the tree."""
    group_of = {}
    groups = []
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name[5:] not in ELEMENTWISE:
            continue
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


def _outline(fn, group: list, index: int) -> None:
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
        f.attributes["prim.fused"] = ir.UnitAttr.get()
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
    batch_norm's parameters): one kernel that writes every input once (kernels/cpu/concat.py) instead of
    copying the growing prefix at every step, then normalizing and rectifying it in two more passes.
    prim-tile runs this on the CPU after prim-select (whose transposes sink through single concats)."""
    with module_op.context:
        count = sum(1 for op in body(module_op).operations
                    if op.operation.name == "func.func" and "prim.fused" in op.attributes)
        for fn in graph_functions(module_op):
            for chain in _concat_chains(fn):
                _outline(fn, chain, count)
                count += 1


@dataclass
class Options:
    NAME = NAME
    fold_batch_norm: bool = True
    epilogues: bool = True
    elementwise: bool = True

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        with module_op.context:
            count = sum(1 for op in body(module_op).operations
                        if op.operation.name == "func.func" and "prim.fused" in op.attributes)
            for fn in graph_functions(module_op):
                _fold_constant_transposes(fn)
                changed = True
                while changed:  # each rewrite erases ops: restart the scan after one
                    changed = False
                    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
                        if self.fold_batch_norm and op.name == "prim.batch_norm" and _fold_batch_norm(op):
                            changed = True
                            break
                        if self.epilogues and (op.name == "prim.add" or op.name[5:] in ACTIVATION_OPS) \
                                and _fuse_epilogue(op):
                            changed = True
                            break
                if self.elementwise:
                    for group in _elementwise_groups(fn):
                        _outline(fn, group, count)
                        count += 1
                erase_dead_constants(fn)

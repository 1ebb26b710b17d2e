"""prim-fuse: fewer, bigger kernels.

Transposes of constants are folded first; then four rewrites over each graph function, in program order:
  1. batch_norm(conv2d(x, W, b)) with constant W, b and BN parameters -> conv2d(x, W', b'):
       s = scale / sqrt(var + eps);  W'[k] = W[k] * s[k];  b' = (b - mean) * s + shift
  2. conv2d/matmul epilogues, cuDNN's ConvBiasActivation with z: y = act(conv(x) + bias + z)
       add(conv, c)  with c a per-channel constant -> bias
       add(conv, z)  with z of the output shape      -> residual
       act(conv)     for an elementwise activation   -> activation
     each only while the conv/matmul result has no other use, also seen through reshapes/transposes
     (_through_views); mul(c, conv/matmul) with c per output channel and constant W, b folds into W, b
     (ConvNeXt's layer scale), so the residual add after it becomes the epilogue; mul(x, sigmoid(x)) is
     silu(x) (exporters' SiLU), an activation like the others.
     layer_norm/rms_norm(add(x, r)) with x, r of the norm's shape -> the norm with operand residual = r:
     one row kernel reads x + r (kernels/gpu/rows.py, kernels/cpu/rows.py), the sum never goes through
     memory. Only while the add has no other use: an op has one result here, so a pre-LN block's sum
     that is also the next residual stays an add (there it is usually a GEMM's residual epilogue, which
     this rewrite comes after in program order).
  3. the decomposed RMSNorm of ONNX exports, h / sqrt(reduce_mean(h^2 over the trailing dims) + eps)
     [* scale], each intermediate used once -> rms_norm(h, scale): one row kernel instead of a
     reduction and an elementwise kernel that reads h again.
  4. chains of elementwise ops (each intermediate used once) -> a private function marked `prim.fused`,
     called from the graph; prim-tile/prim-lower turn it into one kernel (one loop nest).
Between sweeps, patch convolutions become GEMMs (conv_patches.py), the view ops move around the GEMMs
(matmul_views.py) and into attention's layout (attention_layout.py: the heads read where the projections
leave them), and 1x1 convolutions over a channel concat become one convolution per concat input, each
the residual of the next (concat_split.py: SqueezeNet's squeeze layers, the concat never written).
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

from .attention_layout import attention_layouts
from .concat_split import split_convolutions_over_concats
from .conv_patches import patch_convolutions
from .matmul_views import rewrite_views
from .rewrite import constant, create, new_constant, producer, rebuild, reshape, single_use, transpose

NAME = "prim-fuse"
NORMS = ("prim.layer_norm", "prim.rms_norm")
TO_NCHW = [0, 3, 1, 2]  # the permute back to NCHW, which prim-select cancels against the NHWC layers around it
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


def _through_views(v: ir.Value):
    """(conv2d/matmul, views) when v is that op's result seen through a chain of reshapes and transposes
    (the importer's Linear on a rank-4 input is reshape -> matmul -> reshape; ConvNeXt permutes its
    result back to NCHW), every value on the way used once; views are outermost last. Else (None, [])."""
    views = []
    while single_use(v):
        prod = producer(v)
        if prod is None:
            break
        if prod.name in ("prim.conv2d", "prim.matmul"):
            return prod, views
        if prod.name not in ("prim.reshape", "prim.transpose"):
            break
        views.insert(0, prod)
        v = prod.operands[0]
    return None, []


def _view_axis(views, axis: int) -> int | None:
    """The axis of the last view's result that `axis` of the first view's operand becomes, or None when
    a reshape splits or merges it."""
    for view in views:
        if view.name == "prim.transpose":
            axis = list(dialect.op_attrs(view)["perm"]).index(axis)
            continue
        src, dst = list(view.operands[0].type.shape), list(view.result.type.shape)
        inner = int(np.prod(src[axis + 1:]))
        axis = next((b for b in range(len(dst)) if dst[b] == src[axis] and int(np.prod(dst[b + 1:])) == inner), None)
        if axis is None:
            return None
    return axis


def _replay(v: ir.Value, views, loc) -> ir.Value:
    """v through the same reshapes and transposes as `views`."""
    for view in views:
        v = transpose(v, dialect.op_attrs(view)["perm"], loc) if view.name == "prim.transpose" else \
            reshape(v, view.result.type.shape, loc)
    return v


def _unreplay(v: ir.Value, views, loc) -> ir.Value:
    """v (shaped like the last view's result) taken back through the inverse of `views`."""
    for view in reversed(views):
        if view.name == "prim.transpose":
            perm = list(dialect.op_attrs(view)["perm"])
            v = transpose(v, [perm.index(i) for i in range(len(perm))], loc)
        else:
            v = reshape(v, view.operands[0].type.shape, loc)
    return v


def _replace_through_views(op: ir.Operation, prod: ir.Operation, views, operands, attrs) -> None:
    """Replace `op` by prod rebuilt with operands/attrs, seen through `views`; erase op, views and prod."""
    with ir.InsertionPoint(op), op.location:
        fused = rebuild(prod, operands, attrs, prod.location)
        op.result.replace_all_uses_with(_replay(fused.result, views, op.location))
    op.erase()
    for view in reversed(views):
        view.erase()
    prod.erase()


def _fuse_epilogue(op: ir.Operation) -> bool:
    """Fold `op` (an add or an activation) into the conv2d/matmul producing its operand, also when that
    result reaches op through reshapes and transposes (an activation commutes with them; a channel bias
    is mapped back to the producer's channel axis). A residual goes back through the inverse views only
    when their transposes are permutes to NCHW: the inverse transposes it gets then cancel in prim-select
    with the ones that lay the NCHW network out in NHWC, where another permute (a transformer's
    [S, B, E] <-> [B, S, E]) would just move a transpose from the GEMM's result to its residual."""
    for i, v in enumerate(op.operands):
        prod, views = _through_views(v)
        if prod is None:
            continue
        attrs = dialect.op_attrs(prod)
        x, w, bias, residual = dialect.operand_groups(prod)
        if attrs["activation"] != "none":
            continue
        if op.name == "prim.add":
            if tuple(op.result.type.shape) != tuple(v.type.shape):
                continue
            other = op.operands[1 - i]
            if tuple(other.type.shape) == tuple(v.type.shape) and residual is None and \
                    all(list(dialect.op_attrs(t)["perm"]) == TO_NCHW for t in views if t.name == "prim.transpose"):
                with ir.InsertionPoint(op), op.location:
                    other = _unreplay(other, views, op.location)
                _replace_through_views(op, prod, views, [x, w, bias, other], {})
                return True
            c, axis = constant(other), _view_axis(views, _channel_axis(prod))
            vec = None if c is None or bias is not None or axis is None else _per_channel(c, v.type.shape, axis)
            if vec is None:
                continue
            with ir.InsertionPoint(op), op.location:
                new_bias = new_constant(vec, other, op.location)
            _replace_through_views(op, prod, views, [x, w, new_bias, residual], {})
            return True
        act, params = unary_activation(op.name[5:], dialect.op_attrs(op))
        _replace_through_views(op, prod, views, [x, w, bias, residual], {"activation": act, "activation_params": params})
        return True
    return False


def _fold_channel_scale(mul: ir.Operation) -> bool:
    """mul(c, conv2d/matmul(x, W, b)) with c a per-output-channel constant (ConvNeXt's layer scale, seen
    through the permute back to NCHW) or a scalar (attention's scale on q, through the head split) and
    constant W, b -> conv2d/matmul(x, W * c, b * c): the scale costs nothing, and the residual add after
    it can become the GEMM's epilogue."""
    for i, v in enumerate(mul.operands):
        prod, views = _through_views(v)
        c = constant(mul.operands[1 - i])
        if prod is None or c is None or tuple(mul.result.type.shape) != tuple(v.type.shape):
            continue
        attrs = dialect.op_attrs(prod)
        x, w, bias, residual = dialect.operand_groups(prod)
        if c.size == 1:   # a scalar scales every channel alike, whatever views split the channel axis
            vec = np.full(prod.result.type.shape[_channel_axis(prod)], float(c.reshape(())))
        else:
            axis = _view_axis(views, _channel_axis(prod))
            vec = None if axis is None else _per_channel(c, v.type.shape, axis)
        wd = constant(w)
        bd = None if bias is None else constant(bias)
        if vec is None or wd is None or (bias is not None and bd is None) or attrs["activation"] != "none" \
                or residual is not None:
            continue
        if prod.name == "prim.conv2d":
            k_axis = 3 if attrs["filter_layout"] == "RSCK" else 0
        else:
            k_axis = wd.ndim - 2 if attrs["transpose_rhs"] else wd.ndim - 1
        shape = [1] * wd.ndim
        shape[k_axis] = vec.size
        with ir.InsertionPoint(mul), mul.location:
            new_w = new_constant(wd * vec.reshape(shape), w, mul.location)
            new_b = None if bias is None else new_constant(bd * vec, bias, mul.location)
        _replace_through_views(mul, prod, views, [x, new_w, new_b, None], {})
        return True
    return False


def _match_silu(mul: ir.Operation) -> bool:
    """mul(x, sigmoid(x)) (either order, the sigmoid used there only) -> silu(x): exporters spell SiLU/Swish so
    (ONNX before opset 22, EfficientNet's every activation), and as one activation it becomes the epilogue of
    the convolution or GEMM before it."""
    for i, v in enumerate(mul.operands):
        sig = producer(v, "prim.sigmoid")
        if sig is None or not single_use(v) or sig.operands[0] != mul.operands[1 - i] or \
                tuple(v.type.shape) != tuple(mul.result.type.shape):
            continue
        with ir.InsertionPoint(mul), mul.location:
            silu = create("silu", [sig.operands[0]], mul.result.type.shape, mul.result, {}, mul.location)
        mul.result.replace_all_uses_with(silu)
        mul.erase()
        sig.erase()
        return True
    return False


def _fuse_norm_residual(norm: ir.Operation) -> bool:
    """Fold the add producing a layer_norm/rms_norm's input into the norm as its residual operand."""
    groups = dialect.operand_groups(norm)
    add = producer(groups[0], "prim.add")
    if add is None or groups[-1] is not None or not single_use(groups[0]):
        return False
    shape = tuple(norm.result.type.shape)
    if any(tuple(v.type.shape) != shape for v in add.operands):
        return False
    with ir.InsertionPoint(norm):
        fused = rebuild(norm, [add.operands[0], *groups[1:-1], add.operands[1]], {}, norm.location)
    norm.result.replace_all_uses_with(fused.result)
    norm.erase()
    add.erase()
    return True


def _single_producer(v: ir.Value, name: str):
    """The `name` op defining v when v has no other use, else None."""
    return producer(v, name) if single_use(v) else None


def _match_rms_norm(div: ir.Operation) -> bool:
    """div(h, sqrt(add(reduce_mean(pow(h, 2)), eps))) [* scale] -> rms_norm(h, scale) (rewrite 3)."""
    h = div.operands[0]
    sqrt = _single_producer(div.operands[1], "prim.sqrt")
    add = sqrt and _single_producer(sqrt.operands[0], "prim.add")
    if add is None:
        return False
    eps = next((constant(v) for v in add.operands if constant(v) is not None and constant(v).size == 1), None)
    red = next((_single_producer(v, "prim.reduce") for v in add.operands if producer(v, "prim.reduce")), None)
    pw = red and _single_producer(red.operands[0], "prim.pow")
    if eps is None or pw is None or pw.operands[0] != h or constant(pw.operands[1]) is None or \
            not np.all(constant(pw.operands[1]) == 2):
        return False
    ra, R = dialect.op_attrs(red), len(h.type.shape)
    axes = sorted(a % R for a in ra["axes"])
    k = len(axes)
    if ra["kind"] != "mean" or not ra["keepdims"] or axes != list(range(R - k, R)) or \
            tuple(div.result.type.shape) != tuple(h.type.shape):
        return False
    last, scale = div, None
    uses = list(div.result.uses)
    mul = getattr(uses[0].owner, "operation", uses[0].owner) if len(uses) == 1 else None
    if mul is not None and mul.name == "prim.mul":
        other = mul.operands[1] if mul.operands[0] == div.result else mul.operands[0]
        c, norm_shape = constant(other), tuple(h.type.shape[R - k:])
        if c is not None and c.size == int(np.prod(norm_shape)) and tuple(mul.result.type.shape) == tuple(h.type.shape):
            with ir.InsertionPoint(mul), mul.location:
                scale = new_constant(c.reshape(norm_shape), other, mul.location)
            last = mul
    attrs = {"epsilon": dialect.make_attr(float(eps.reshape(())), "f64"), "normalized_ndim": dialect.make_attr(k, "i64"),
             "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, scale is not None, 0])}
    with ir.InsertionPoint(last), last.location:
        norm = ir.Operation.create("prim.rms_norm", results=[last.result.type],
                                   operands=[h] + ([scale] if scale is not None else []), attributes=attrs)
    last.result.replace_all_uses_with(norm.result)
    for op in ([last] if last is not div else []) + [div, sqrt, add, red, pw]:
        op.erase()
    return True


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
    concat_split: bool = True

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
                        if self.epilogues and op.name == "prim.mul" and (_match_silu(op) or _fold_channel_scale(op)):
                            changed = True
                            break
                        if self.elementwise and op.name == "prim.div" and _match_rms_norm(op):
                            changed = True
                            break
                        if self.epilogues and op.name in NORMS and _fuse_norm_residual(op):
                            changed = True
                            break
                    else:  # nothing left to fuse: patch convolutions as GEMMs, move the view ops around
                        # the GEMMs and into attention, then fuse again
                        changed = self.epilogues and (patch_convolutions(fn) | rewrite_views(fn) |
                                                      attention_layouts(fn) |
                                                      (self.concat_split and split_convolutions_over_concats(fn)))
                if self.elementwise:
                    for group in _elementwise_groups(fn):
                        _outline(fn, group, count)
                        count += 1
                erase_dead_constants(fn)

"""prim-layout: NCHW convolutions, pools and norms run in NHWC, through transposes that cancel between layers.

The fast solvers read NHWC (channels innermost) and RSCK filters. With layout=NHWC (the default), on each
graph function:
1. Wrap. Every NCHW conv2d, max/avg/global pool, batch_norm and group_norm becomes transpose -> the op in
   NHWC -> transpose back; a conv2d's KCRS filter becomes KRSC and its residual is transposed like its
   input (rewrite.transpose permutes a constant at compile time, so constant filters cost nothing).
2. Sink. One sweep in program order moves the transposes down past the ops between layers that have an
   NHWC form, so that they meet the next layer's (a transpose moved past one op reaches the next):
     concat and elementwise ops   op(T(a), T(b)) -> T(op(a, b)), a concat's axis permuted; an elementwise
                                  operand of the same rank that broadcasts (an SE block's [N, C, 1, 1]
                                  scale) gets the inverse transpose instead, which cancels with its maker;
     channel slices, pads         the bounds move to the NHWC axes (ShuffleNetV2's channel split, BiT's
                                  padded stem);
     reductions                   the axes move; a mean over H and W is a global average pool of the NHWC map;
     channel shuffles             reshape -> transpose of the channel factors -> reshape, on the last axes.
3. Cancel. transpose(transpose(x, p), q) with p then q the identity is x, any other two in a row (the inner
   one read only there) one transpose, a value read by several layers is transposed once per perm, and
   transposes and constants left without uses are dropped.
An NCHW network then pays one transpose at each end instead of two per layer. layout=keep leaves every op
in its own layout (for solvers that read NCHW).

The pass marks each graph function it lays out with prim.layout (the option it ran with). prim-select runs
this stage itself on a function without the mark, with its own `layout` option, so a pipeline without
prim-layout ('prim-fuse,prim-select') gives the same IR as one with it; prim-select then drops the mark.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.ops import ELEMENTWISE
from openprim.dialect import contract, graph_functions

from .rewrite import producer, reshape, single_use, transpose

NAME = "prim-layout"
MARK = "prim.layout"   # on a graph function this pass laid out: the layout option it ran with
LAYOUTS = ("NHWC", "keep")
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
# The ops with an NHWC form, and which of their operands are 4-d activations (transposed with them); the
# training ops too: a backward convolution's dy and x, a batch norm's x and dy.
LAYOUT_OPS = {"prim.conv2d": (0, 3), "prim.max_pool2d": (0,), "prim.avg_pool2d": (0,),
              "prim.global_avg_pool": (0,), "prim.batch_norm": (0,), "prim.group_norm": (0,),
              "prim.conv2d_backward_data": (0,), "prim.conv2d_backward_weights": (0, 1),
              "prim.batch_norm_training": (0,), "prim.batch_norm_statistics": (0,), "prim.batch_norm_backward": (0, 1),
              "prim.batch_norm_backward_sums": (0, 1),
              "prim.max_pool2d_backward": (0, 1), "prim.avg_pool2d_backward": (0,)}
FILTER_OPERAND = {"prim.conv2d": 1, "prim.conv2d_backward_data": 1}   # a KCRS filter becomes KRSC
# Results that are not an activation: a filter gradient (KCRS computed as KRSC, transposed back alike),
# per-channel statistics (no layout).
FILTER_RESULT = ("prim.conv2d_backward_weights",)
UNLAID_RESULT = ("prim.batch_norm_statistics", "prim.batch_norm_backward_sums")


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise OpenPrimError(f"unknown layout '{layout}'; layouts: NHWC (run NCHW ops in NHWC), keep (leave layouts)")
    return layout


def _to_nhwc(op: ir.Operation) -> None:
    """Rewrite an NCHW layout op as transpose -> NHWC op -> transpose (a KCRS filter, operand or filter
    gradient, as KRSC: the same permutation)."""
    spec_attrs = {k: op.attributes[k] for k in op.attributes}
    operands = dialect.operand_groups(op)
    kcrs = dialect.op_attrs(op).get("filter_layout") == "KCRS"
    with ir.InsertionPoint(op), op.location:
        new_operands = list(operands)
        for i in LAYOUT_OPS[op.name]:
            if operands[i] is not None:
                new_operands[i] = transpose(operands[i], TO_NHWC, op.location)
        if op.name in FILTER_OPERAND and kcrs:
            i = FILTER_OPERAND[op.name]
            new_operands[i] = transpose(operands[i], TO_NHWC, op.location)
        if kcrs:
            spec_attrs["filter_layout"] = dialect.make_attr("KRSC", "str")
        spec_attrs["layout"] = dialect.make_attr("NHWC", "str")
        out_t = op.result.type
        moved = op.name not in UNLAID_RESULT and (op.name not in FILTER_RESULT or kcrs)
        shape = [out_t.shape[p] for p in TO_NHWC] if moved else list(out_t.shape)
        new = ir.Operation.create(op.name, results=[ir.RankedTensorType.get(shape, out_t.element_type)],
                                  operands=[v for v in new_operands if v is not None],
                                  attributes=spec_attrs, loc=op.location)
        back = transpose(new.result, TO_NCHW, op.location) if moved else new.result
    op.result.replace_all_uses_with(back)
    op.erase()


def _sink_past_layout_free(op: ir.Operation) -> None:
    """op(transpose(a, p), transpose(b, p), ...) -> transpose(op(a, b, ...), p) for the ops that do not
    care about layout: concat (its axis permuted) and elementwise ops whose operands all have the result's
    shape. NCHW networks put such ops between layers (Inception/SqueezeNet concats, DenseNet's BN-ReLU)."""
    kind = op.name[5:]
    inner = [producer(v, "prim.transpose") for v in op.operands]
    out_t = op.result.type
    # The operands as large as the result must all be transposes by one perm; an elementwise op's
    # broadcast operands of the same rank (an SE block's [N, C, 1, 1] scale) are transposed back
    # instead: small, and that transpose cancels with the one that made them.
    full = [kind == "concat" or list(v.type.shape) == list(out_t.shape) for v in op.operands]
    movers = [t for t, f in zip(inner, full) if f]
    if not movers or any(t is None for t in movers) or len({tuple(dialect.op_attrs(t)["perm"]) for t in movers}) != 1:
        return
    if any(not f and len(v.type.shape) != len(out_t.shape) for v, f in zip(op.operands, full)):
        return  # broadcasting from a lower rank: the dims do not line up
    perm = list(dialect.op_attrs(movers[0])["perm"])
    inverse = [perm.index(i) for i in range(len(perm))]
    attrs = {k: op.attributes[k] for k in op.attributes}
    if kind == "concat":
        attrs["axis"] = dialect.make_attr(perm[dialect.op_attrs(op)["axis"] % len(perm)], "i64")
    with ir.InsertionPoint(op), op.location:
        operands = [t.operands[0] if t is not None and list(dialect.op_attrs(t)["perm"]) == perm
                    else transpose(v, inverse, op.location) for v, t in zip(op.operands, inner)]
        _replace_transposed(op, operands, attrs, perm)


def _replace_transposed(op: ir.Operation, operands: list, attrs: dict, perm: list) -> None:
    """Replace op by a copy on `operands` (its operands un-transposed by perm) followed by transpose(perm)."""
    out_t = op.result.type
    shape = [0] * len(perm)
    for i, p in enumerate(perm):   # transpose(x, perm)[i] is x's dim perm[i]
        shape[p] = out_t.shape[i]
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create(op.name, results=[ir.RankedTensorType.get(shape, out_t.element_type)],
                                  operands=operands, attributes=attrs, loc=op.location)
        back = transpose(new.result, perm, op.location)
    op.result.replace_all_uses_with(back)
    op.erase()


def _sink_past_slice(op: ir.Operation) -> None:
    """slice(transpose(x, NHWC -> NCHW)) -> transpose(slice'(x)), the bounds permuted: ShuffleNetV2's channel
    split (a slice on C of NCHW) becomes a slice on the last axis of NHWC. Only layout transposes move:
    another transpose read by several slices (a transformer's heads) would become one per slice."""
    inner = producer(op.operands[0], "prim.transpose")
    if inner is None or list(dialect.op_attrs(inner)["perm"]) != TO_NCHW:
        return
    perm = TO_NCHW
    attrs = {k: op.attributes[k] for k in op.attributes}
    for key in ("starts", "ends", "steps"):
        values = dialect.op_attrs(op)[key]
        moved = [0] * len(perm)
        for i, p in enumerate(perm):
            moved[p] = values[i]
        attrs[key] = dialect.make_attr(moved, "i64s")
    _replace_transposed(op, [inner.operands[0]], attrs, perm)


def _sink_past_pad(op: ir.Operation) -> None:
    """pad(transpose(x, NHWC -> NCHW)) -> transpose(pad'(x)), the pads permuted: a constant pad between two
    layers (BiT's stem pads its convolution's output by 1 before the max pool) stays in NHWC, where the
    transposes around it cancel and its copy moves whole channel vectors."""
    inner = producer(op.operands[0], "prim.transpose")
    if inner is None or list(dialect.op_attrs(inner)["perm"]) != TO_NCHW:
        return
    perm, rank = TO_NCHW, len(TO_NCHW)
    pads = dialect.op_attrs(op)["pads"]
    moved = [0] * (2 * rank)
    for i, p in enumerate(perm):
        moved[p], moved[rank + p] = pads[i], pads[rank + i]
    attrs = {k: op.attributes[k] for k in op.attributes}
    attrs["pads"] = dialect.make_attr(moved, "i64s")
    _replace_transposed(op, [inner.operands[0]], attrs, perm)


def _sink_past_reduce(op: ir.Operation) -> None:
    """reduce(transpose(x, p), axes) -> reduce(x, p[axes]) [-> a transpose of the kept axes]: a mean over
    H and W of an NCHW map seen through NHWC (ShuffleNet's head, `x.mean([2, 3])`) reads the NHWC map
    in place instead of a transpose kernel first (that mean: a global average pool, whose NHWC kernel reads
    channel vectors). The transpose left moves only what the reduction kept;
    kept in order (keepdims = 0) or as unit dims (keepdims = 1), it is none or a view."""
    inner = producer(op.operands[0], "prim.transpose")
    if inner is None or list(dialect.op_attrs(inner)["perm"]) != TO_NCHW:
        return  # only layout transposes: a reduction over a transformer's permuted axes stays as written
    attrs = dialect.op_attrs(op)
    perm = TO_NCHW
    rank = len(perm)
    axes = sorted(a % rank for a in attrs["axes"])
    moved = sorted(perm[a] for a in axes)
    if attrs["kind"] == "mean" and rank == 4 and moved == [1, 2]:   # a global average pool: its NHWC kernel
        with ir.InsertionPoint(op), op.location:
            n, h, w, c = inner.operands[0].type.shape
            pool = ir.Operation.create(
                "prim.global_avg_pool", results=[ir.RankedTensorType.get([n, 1, 1, c], op.result.type.element_type)],
                operands=[inner.operands[0]], attributes={"layout": dialect.make_attr("NHWC", "str")},
                loc=op.location)
            op.result.replace_all_uses_with(reshape(pool.result, op.result.type.shape, op.location))
        op.erase()
        return
    new_attrs = {k: op.attributes[k] for k in op.attributes}
    new_attrs["axes"] = dialect.make_attr(moved, "i64s")
    if attrs["keepdims"]:
        _replace_transposed(op, [inner.operands[0]], new_attrs, perm)
        return
    kept = [perm[i] for i in range(rank) if i not in axes]   # source axes of the result, in result order
    order = sorted(kept)
    with ir.InsertionPoint(op), op.location:
        shape = [inner.operands[0].type.shape[a] for a in order]
        new = ir.Operation.create(op.name, results=[ir.RankedTensorType.get(shape, op.result.type.element_type)],
                                  operands=[inner.operands[0]], attributes=new_attrs, loc=op.location)
        out = new.result if kept == order else transpose(new.result, [order.index(a) for a in kept], op.location)
    op.result.replace_all_uses_with(out)
    op.erase()


def _sink_past_channel_shuffle(op: ir.Operation) -> None:
    """The channel shuffle of an NHWC map seen through NCHW, found at its last reshape:
        reshape(transpose(reshape(transpose(x, [0, 3, 1, 2]), [N, g1, .., gk, H, W]), q), [N, C, H, W])
    with q permuting only the channel factors g1..gk (ShuffleNet: [N, g, C/g, H, W], q = (0, 2, 1, 3, 4))
    -> transpose(reshape(transpose(reshape(x, [N, H, W, g1, .., gk]), q'), [N, H, W, C]), [0, 3, 1, 2]),
    q' the same permutation of the factors on the last axes: the shuffle stays in NHWC, and the
    transposes on either side of it cancel with those of the layers around."""
    shuffle = producer(op.operands[0], "prim.transpose")
    split = None if shuffle is None else producer(shuffle.operands[0], "prim.reshape")
    to_nchw = None if split is None else producer(split.operands[0], "prim.transpose")
    if to_nchw is None or list(dialect.op_attrs(to_nchw)["perm"]) != TO_NCHW:
        return
    if not single_use(shuffle.result) or not single_use(split.result):
        return
    n, c, h, w = to_nchw.result.type.shape
    parts = list(split.result.type.shape)
    q = list(dialect.op_attrs(shuffle)["perm"])
    k = len(parts) - 3
    if (k < 2 or parts[0] != n or parts[-2:] != [h, w] or list(op.result.type.shape) != [n, c, h, w]
            or q[0] != 0 or q[-2:] != [k + 1, k + 2]):
        return  # not a split of C alone, or a permutation that moves N, H or W
    loc = op.location
    with ir.InsertionPoint(op), loc:
        x = reshape(to_nchw.operands[0], [n, h, w, *parts[1:-2]], loc)
        x = transpose(x, [0, 1, 2, *[2 + d for d in q[1:-2]]], loc)
        back = transpose(reshape(x, [n, h, w, c], loc), TO_NCHW, loc)
    op.result.replace_all_uses_with(back)
    op.erase()
    shuffle.erase()
    split.erase()


def _nhwc_type(t) -> ir.RankedTensorType:
    """An NCHW-broadcast type (rank <= 4, leading 1s implied) as its NHWC counterpart (rank 0 stays)."""
    shape = list(t.shape)
    if not shape:
        return t
    shape = [1] * (4 - len(shape)) + shape
    return ir.RankedTensorType.get([shape[p] for p in TO_NHWC], t.element_type)


def _sink_past_fused_call(op: ir.Operation, callee) -> None:
    """call @fused_k(T(a), T(b), ..) -> T(call @fused_k_nhwc(a, b, ..)) for a prim-fuse'd group of elementwise
    ops on 4-d maps (operands that broadcast, like [C, 1, 1] or [1, C, 1, 1], transposed to [1, 1, 1, C]; the
    group copied onto the NHWC types): the transposes on either side of it then cancel. Training graphs
    leave such groups between layers, with batch norm unfolded: BN's output + the residual, ReLU; the
    gradient's x_hat = (x - mean) inv_std and dy x_hat of the scale's gradient."""
    out_t = op.results[0].type if len(op.results) == 1 else None
    if callee is None or out_t is None or len(out_t.shape) != 4:
        return
    body_ops = [o.operation for o in callee.regions[0].blocks[0].operations]
    if any(o.name != "func.return" and (o.name[5:] not in ELEMENTWISE or any(len(r.type.shape) > 4 for r in o.results))
           for o in body_ops):
        return
    full = [list(v.type.shape) == list(out_t.shape) for v in op.operands]
    inner = [producer(v, "prim.transpose") for v in op.operands]
    if any(len(v.type.shape) > 4 for v in op.operands) or not any(full) or any(
            f and (t is None or list(dialect.op_attrs(t)["perm"]) != TO_NCHW) for f, t in zip(full, inner)):
        return
    name = ir.StringAttr(callee.attributes["sym_name"]).value + "_nhwc"
    with ir.InsertionPoint(callee), op.location:
        copy = callee.clone()
        copy.attributes["sym_name"] = ir.StringAttr.get(name)
        block = copy.regions[0].blocks[0]
        for a in block.arguments:
            a.set_type(_nhwc_type(a.type))
        for o in block.operations:
            for r in o.results:
                r.set_type(_nhwc_type(r.type))
        copy.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], [_nhwc_type(out_t)]))
    with ir.InsertionPoint(op), op.location:
        operands = [t.operands[0] if f else v if not v.type.shape else transpose(
            v if len(v.type.shape) == 4 else reshape(v, [1] * (4 - len(v.type.shape)) + list(v.type.shape),
                                                     op.location), TO_NHWC, op.location)
            for v, f, t in zip(op.operands, full, inner)]
        call = func.CallOp([_nhwc_type(out_t)], ir.FlatSymbolRefAttr.get(name), operands)
        back = transpose(call.result, TO_NCHW, op.location)
    op.results[0].replace_all_uses_with(back)
    op.erase()


def _sink_transposes(fn) -> None:
    """Move the layout transposes down past the ops that have an NHWC form: concat, elementwise ops,
    slices, pads, reductions and channel shuffles. NCHW networks put such ops between layers; moved past them,
    the transposes of the layers on either side meet and cancel. One pass in program order: a transpose
    moved past one op reaches the next."""
    sinks = {"concat": _sink_past_layout_free, "slice": _sink_past_slice, "pad": _sink_past_pad,
             "reshape": _sink_past_channel_shuffle,
             "reduce": _sink_past_reduce, "activation_backward": _sink_past_layout_free,
             **{k: _sink_past_layout_free for k in ELEMENTWISE}}
    fused = {ir.StringAttr(f.attributes["sym_name"]).value: f.operation for f in fn.parent.regions[0].blocks[0]
             if f.operation.name == "func.func" and contract.is_fused(f.operation)}
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name == "func.call":
            _sink_past_fused_call(op, fused.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value))
            continue
        sink = sinks.get(op.name[5:])
        if sink is not None:
            sink(op)
    called = {ir.FlatSymbolRefAttr(o.attributes["callee"]).value for o in fn.regions[0].blocks[0].operations
              if o.operation.name == "func.call"}
    for name, f in fused.items():   # the NCHW groups that now run on NHWC copies
        if name not in called and name + "_nhwc" in called:
            f.erase()


def cancel_transposes(fn) -> None:
    """transpose(transpose(x, p), q) with p then q the identity -> x, and otherwise -> one transpose where the
    inner one has no other reader; one transpose per (value, perm) (a value read by several NCHW layers gets
    one transpose each); then drop unused transposes."""
    first = {}
    for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
        if op.name != "prim.transpose":
            continue
        inner = producer(op.operands[0], "prim.transpose")
        q = dialect.op_attrs(op)["perm"]
        composed = None if inner is None else [dialect.op_attrs(inner)["perm"][i] for i in q]
        if composed == list(range(len(q))):
            op.result.replace_all_uses_with(inner.operands[0])
        elif composed is not None and single_use(inner.result):
            with ir.InsertionPoint(op), op.location:   # two in a row (a filter gradient's layouts): one kernel
                op.result.replace_all_uses_with(transpose(inner.operands[0], composed, op.location))
        elif (op.operands[0], tuple(q)) in first:
            op.result.replace_all_uses_with(first[(op.operands[0], tuple(q))])
        else:
            first[(op.operands[0], tuple(q))] = op.result
    changed = True
    while changed:
        changed = False
        for op in reversed([o.operation for o in fn.regions[0].blocks[0].operations]):
            if op.name in ("prim.transpose", "prim.constant") and not list(op.result.uses):
                op.erase()
                changed = True



def lay_out(fn, layout: str) -> None:
    """The stage on one graph function (module docstring): wrap, sink, cancel; nothing for layout=keep."""
    check_layout(layout)
    if layout == "NHWC":
        for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
            if op.name in LAYOUT_OPS and dialect.op_attrs(op)["layout"] == "NCHW":
                _to_nhwc(op)
        _sink_transposes(fn)
        cancel_transposes(fn)


@dataclass
class Options:
    NAME = NAME
    layout: str = "NHWC"      # "NHWC": run NCHW ops in NHWC through transposes; "keep": leave layouts

    def __post_init__(self):
        check_layout(self.layout)

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        with module_op.context:
            for fn in graph_functions(module_op):
                lay_out(fn, self.layout)
                fn.attributes[MARK] = ir.StringAttr.get(self.layout)

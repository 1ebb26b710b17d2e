"""Reference semantics of every `prim` op, written as linalg/tensor/arith/math IR text with the builder
of irtext.py.

A kernel is a list of prim ops (one op, or a fused elementwise chain) with external inputs and one
result; EMITTERS maps each op to the function that emits its linalg form, emit_fused writes a chain as
one loop nest. f16/bf16 are computed in f32 (reductions accumulate in f32) and rounded once at the end.
"""
from __future__ import annotations

import math

import numpy as np

from openprim.base.dtypes import FLOATS
from openprim.base.ops import ELEMENTWISE, RHS_PANELS, attention_dims, filter_block, filter_dims

from .irtext import KernelText, V, amap, elem, ttype


# -------------------------------------------------------------------------- scalar activation bodies
def activation(kt: KernelText, name: str, params, x: str) -> str:
    """act(x) on an f32 scalar inside a generic body."""
    if name == "none":
        return x
    if name == "relu":
        return kt.scalar("arith.maximumf", x, kt.const(0.0))
    if name == "leaky_relu":
        pos = _cmp(kt, "ogt", x, kt.const(0.0))
        return _select(kt, pos, x, kt.scalar("arith.mulf", x, kt.const(params[0])))
    if name == "clamp":
        lo = kt.scalar("arith.maximumf", x, kt.const(params[0]))
        return kt.scalar("arith.minimumf", lo, kt.const(params[1]))
    if name == "sigmoid":
        return _sigmoid(kt, x)
    if name == "tanh":
        return kt.scalar("math.tanh", x)
    if name == "gelu":  # 0.5 x (1 + erf(x / sqrt 2))
        e = kt.scalar("math.erf", kt.scalar("arith.mulf", x, kt.const(1 / math.sqrt(2))))
        return kt.scalar("arith.mulf", kt.scalar("arith.mulf", x, kt.const(0.5)),
                         kt.scalar("arith.addf", e, kt.const(1.0)))
    if name == "gelu_tanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = kt.scalar("arith.mulf", kt.scalar("arith.mulf", x, x), x)
        inner = kt.scalar("arith.addf", x, kt.scalar("arith.mulf", x3, kt.const(0.044715)))
        t = kt.scalar("math.tanh", kt.scalar("arith.mulf", inner, kt.const(math.sqrt(2 / math.pi))))
        return kt.scalar("arith.mulf", kt.scalar("arith.mulf", x, kt.const(0.5)),
                         kt.scalar("arith.addf", t, kt.const(1.0)))
    if name == "silu":
        return kt.scalar("arith.mulf", x, _sigmoid(kt, x))
    if name == "hardsigmoid":  # clamp(alpha x + beta, 0, 1) (ONNX; torch: alpha 1/6, beta 1/2)
        return _unit_clamp(kt, kt.scalar("math.fma", x, kt.const(params[0]), kt.const(params[1])))
    if name == "hardswish":  # x * hardsigmoid(x) with alpha 1/6, beta 1/2 (MobileNetV3)
        return kt.scalar("arith.mulf", x, _unit_clamp(kt, kt.scalar("math.fma", x, kt.const(1 / 6), kt.const(0.5))))
    if name == "elu":
        pos = _cmp(kt, "ogt", x, kt.const(0.0))
        em1 = kt.scalar("math.expm1", x)
        return _select(kt, pos, x, kt.scalar("arith.mulf", em1, kt.const(params[0])))
    raise ValueError(f"unknown activation {name}")


def _cmp(kt, pred, a, b):
    n = kt.fresh("b")
    kt.emit(f"  {n} = arith.cmpf {pred}, {a}, {b} : f32")
    return n


def _select(kt, cond, a, b):
    n = kt.fresh("s")
    kt.emit(f"  {n} = arith.select {cond}, {a}, {b} : f32")
    return n


def _unit_clamp(kt, x):
    return kt.scalar("arith.minimumf", kt.scalar("arith.maximumf", x, kt.const(0.0)), kt.const(1.0))


def _sigmoid(kt, x):
    neg = kt.scalar("arith.negf", x)
    den = kt.scalar("arith.addf", kt.scalar("math.exp", neg), kt.const(1.0))
    return kt.scalar("arith.divf", kt.const(1.0), den)


# Standalone elementwise ops -> (activation name, params)
def unary_activation(op: str, attrs: dict):
    if op == "leaky_relu":
        return "leaky_relu", [attrs["alpha"]]
    if op == "elu":
        return "elu", [attrs["alpha"]]
    if op == "clamp":
        return "clamp", [attrs["min"], attrs["max"]]
    if op == "hardsigmoid":
        return "hardsigmoid", [attrs["alpha"], attrs["beta"]]
    if op == "gelu":
        return ("gelu_tanh" if attrs["approximate"] == "tanh" else "gelu"), []
    return op, []



# -------------------------------------------------------------------------- op emitters
def _broadcast_operand(kt: KernelText, x: V, out_shape) -> tuple[V, str]:
    """x aligned to out_shape by numpy rules: (x with broadcast unit dims collapsed away, its map)."""
    R, r = len(out_shape), len(x.shape)
    kept = [i for i in range(r) if not (x.shape[i] == 1 and out_shape[R - r + i] != 1)]
    if len(kept) != r:
        groups, pending = [], []   # each kept dim with the dropped unit dims before it
        for i in range(r):
            pending.append(i)
            if i in kept:
                groups.append(pending)
                pending = []
        if pending and groups:
            groups[-1] += pending
        shape = [x.shape[i] for i in kept]
        n = kt.fresh("b")
        reassoc = "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"
        kt.emit(f"{n} = tensor.collapse_shape {x.name} {reassoc} : {x.type} into {ttype(shape, x.dtype)}")
        x = V(n, shape, x.dtype)
    return x, amap(R, [f"d{R - r + i}" for i in kept])


def elementwise(kt: KernelText, inputs: list, out_shape, dtype, fn) -> V:
    """out[i] = fn(inputs[i] as f32...) with numpy broadcasting; fn(kt, args) -> f32 scalar."""
    ins, maps = zip(*[_broadcast_operand(kt, x, out_shape) for x in inputs])
    R = len(out_shape)

    def body(args, kt):
        xs = [kt.to_f32(a, v.dtype) for a, v in zip(args, ins)]
        return kt.from_f32(fn(kt, xs), dtype)

    return kt.generic(list(ins), list(maps), kt.empty(out_shape, dtype), amap(R, [f"d{i}" for i in range(R)]),
                      ["parallel"] * R, body)


BINARY_OP = {"add": "arith.addf", "sub": "arith.subf", "mul": "arith.mulf", "div": "arith.divf",
             "maximum": "arith.maximumf", "minimum": "arith.minimumf", "pow": "math.powf"}
UNARY_MATH_OP = {"exp": "math.exp", "log": "math.log", "sqrt": "math.sqrt", "abs": "math.absf", "erf": "math.erf",
                 "sin": "math.sin", "cos": "math.cos"}


def emit_elementwise(kt, op, operands, attrs, shape, dtype):
    if dtype not in FLOATS:
        return typed_elementwise(kt, operands, shape, dtype,
                                 lambda kt, xs: kt.scalar(INTEGER_BINARY_OP[op], *xs, ty=elem(dtype)))
    return elementwise(kt, operands, shape, dtype, lambda kt, xs: scalar_op(kt, op, attrs, xs))


# -------------------------------------------------------------------------- integers, bools, indexing
# Integers compute exactly in their own type (div is floor division); a bool is an i8 holding 0 or 1.
INTEGER_BINARY_OP = {"add": "arith.addi", "sub": "arith.subi", "mul": "arith.muli", "div": "arith.floordivsi",
                     "maximum": "arith.maxsi", "minimum": "arith.minsi"}
FLOAT_PREDICATE = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
INTEGER_PREDICATE = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
INTEGER_BITS = {"i64": 64, "i32": 32, "bool": 8}


def typed_elementwise(kt: KernelText, inputs: list, out_shape, dtype, fn) -> V:
    """out[i] = fn(inputs[i]...) with numpy broadcasting, the scalars in their own types (no f32)."""
    ins, maps = zip(*[_broadcast_operand(kt, x, out_shape) for x in inputs])
    R = len(out_shape)
    return kt.generic(list(ins), list(maps), kt.empty(out_shape, dtype), amap(R, [f"d{i}" for i in range(R)]),
                      ["parallel"] * R, lambda args, kt: fn(kt, args[:len(ins)]))


def _bool_of(kt, i1: str) -> str:
    """An i1 condition as a bool (i8 0/1)."""
    return kt.scalar("arith.extui", i1, ty="i1 to i8")


def convert(kt: KernelText, a: str, src: str, dst: str) -> str:
    """Scalar a of dtype src as dtype dst: floats through f32, float -> integer truncating toward zero,
    anything -> bool as a != 0."""
    if src == dst:
        return a
    if dst == "bool":
        if src in FLOATS:
            return _bool_of(kt, _cmp_typed(kt, "arith.cmpf une", kt.to_f32(a, src), kt.const(0.0), "f32"))
        return _bool_of(kt, _cmp_typed(kt, "arith.cmpi ne", a, kt.const(0, elem(src)), elem(src)))
    if src in FLOATS and dst in FLOATS:
        return kt.from_f32(kt.to_f32(a, src), dst)
    if src in FLOATS:
        return kt.scalar("arith.fptosi", kt.to_f32(a, src), ty=f"f32 to {dst}")
    if dst in FLOATS:
        to_float = "arith.uitofp" if src == "bool" else "arith.sitofp"
        return kt.from_f32(kt.scalar(to_float, a, ty=f"{elem(src)} to f32"), dst)
    widen = "arith.extui" if src == "bool" else "arith.extsi"
    op = widen if INTEGER_BITS[dst] > INTEGER_BITS[src] else "arith.trunci"
    return kt.scalar(op, a, ty=f"{elem(src)} to {elem(dst)}")


def _cmp_typed(kt, op: str, a: str, b: str, ty: str) -> str:
    n = kt.fresh("b")
    kt.emit(f"  {n} = {op}, {a}, {b} : {ty}")
    return n


def emit_cast(kt, op, operands, attrs, shape, dtype):
    src = operands[0].dtype
    return typed_elementwise(kt, operands, shape, dtype, lambda kt, xs: convert(kt, xs[0], src, dtype))


def emit_compare(kt, op, operands, attrs, shape, dtype):
    src, kind = operands[0].dtype, attrs["kind"]

    def body(kt, xs):
        if src in FLOATS:
            a, b = (kt.to_f32(x, src) for x in xs)
            return _bool_of(kt, _cmp_typed(kt, f"arith.cmpf {FLOAT_PREDICATE[kind]}", a, b, "f32"))
        return _bool_of(kt, _cmp_typed(kt, f"arith.cmpi {INTEGER_PREDICATE[kind]}", *xs, elem(src)))
    return typed_elementwise(kt, operands, shape, dtype, body)


def emit_logical(kt, op, operands, attrs, shape, dtype):
    return typed_elementwise(kt, operands, shape, dtype,
                             lambda kt, xs: kt.scalar(f"arith.{attrs['kind']}i", *xs, ty="i8"))


def emit_logical_not(kt, op, operands, attrs, shape, dtype):
    return typed_elementwise(kt, operands, shape, dtype,
                             lambda kt, xs: kt.scalar("arith.xori", xs[0], kt.const(1, "i8"), ty="i8"))


def emit_where(kt, op, operands, attrs, shape, dtype):
    def body(kt, xs):
        c = _cmp_typed(kt, "arith.cmpi ne", xs[0], kt.const(0, "i8"), "i8")
        n = kt.fresh("s")
        kt.emit(f"  {n} = arith.select {c}, {xs[1]}, {xs[2]} : {elem(dtype)}")
        return n
    return typed_elementwise(kt, operands, shape, dtype, body)


def emit_broadcast(kt, op, operands, attrs, shape, dtype):
    return typed_elementwise(kt, operands, shape, dtype, lambda kt, xs: xs[0])


def _clamped_index(kt: KernelText, i: str, idtype: str, size: int) -> str:
    """Index value i (an i64/i32 scalar) as an `index` within [0, size): negative ones count from the end,
    one still outside is clamped (its bounds_check reports it; no read leaves the tensor)."""
    ix = kt.scalar("arith.index_cast", i, ty=f"{elem(idtype)} to index")
    zero, n = kt.const(0, "index"), kt.const(size, "index")
    neg = _cmp_typed(kt, "arith.cmpi slt", ix, zero, "index")
    wrapped = kt.fresh("s")
    kt.emit(f"  {wrapped} = arith.select {neg}, {kt.scalar('arith.addi', ix, n, ty='index')}, {ix} : index")
    low = kt.scalar("arith.maxsi", wrapped, zero, ty="index")
    return kt.scalar("arith.minsi", low, kt.const(size - 1, "index"), ty="index")


def _loop_index(kt: KernelText, d: int) -> str:
    n = kt.fresh("ix")
    kt.emit(f"  {n} = linalg.index {d} : index")
    return n


def _extract(kt: KernelText, x: V, coords: list) -> str:
    n = kt.fresh("e")
    kt.emit(f"  {n} = tensor.extract {x.name}[{', '.join(coords)}] : {x.type}")
    return n


def emit_gather(kt, op, operands, attrs, shape, dtype):
    """One generic over the result reading the indices at the axis' loop dims and x with tensor.extract."""
    x, idx = operands
    axis, R, r = attrs["axis"] % len(x.shape), len(shape), len(idx.shape)

    def body(args, kt):
        i = _clamped_index(kt, args[0], idx.dtype, x.shape[axis])
        coords = [_loop_index(kt, d) for d in range(axis)] + [i] + \
                 [_loop_index(kt, d + r - 1) for d in range(axis + 1, len(x.shape))]
        return _extract(kt, x, coords)
    imap = amap(R, [f"d{axis + k}" for k in range(r)])
    return kt.generic([idx], [imap], kt.empty(shape, dtype), amap(R, [f"d{k}" for k in range(R)]),
                      ["parallel"] * R, body)


def emit_gather_elements(kt, op, operands, attrs, shape, dtype):
    x, idx = operands
    axis, R = attrs["axis"] % len(x.shape), len(shape)

    def body(args, kt):
        coords = [_clamped_index(kt, args[0], idx.dtype, x.shape[axis]) if d == axis else _loop_index(kt, d)
                  for d in range(R)]
        return _extract(kt, x, coords)
    ident = amap(R, [f"d{k}" for k in range(R)])
    return kt.generic([idx], [ident], kt.empty(shape, dtype), ident, ["parallel"] * R, body)


def emit_index_copy(kt, op, operands, attrs, shape, dtype):
    """One generic over the result and the indices j (an inner reduction loop, initialized with the input):
    out[a.., t, b..] = updates[a.., j, b..] where indices[j] (wrapped from the end) is t, the last such j
    winning; an index out of range matches no t. The result is written whole (kernels/cpu/index_copy.py
    writes only the rows where it may)."""
    x, idx, upd = operands
    R = len(shape)
    axis = attrs["axis"] % R
    imap = amap(R + 1, [f"d{R}"])
    umap = amap(R + 1, [f"d{R}" if d == axis else f"d{d}" for d in range(R)])
    omap = amap(R + 1, [f"d{d}" for d in range(R)])

    def body(args, kt):
        i = kt.scalar("arith.index_cast", args[0], ty=f"{elem(idx.dtype)} to index")
        n = kt.const(x.shape[axis], "index")
        neg = _cmp_typed(kt, "arith.cmpi slt", i, kt.const(0, "index"), "index")
        wrapped = kt.fresh("s")
        kt.emit(f"  {wrapped} = arith.select {neg}, {kt.scalar('arith.addi', i, n, ty='index')}, {i} : index")
        hit = _cmp_typed(kt, "arith.cmpi eq", wrapped, _loop_index(kt, axis), "index")
        out = kt.fresh("s")
        kt.emit(f"  {out} = arith.select {hit}, {args[1]}, {args[2]} : {elem(dtype)}")
        return out
    return kt.generic([idx, upd], [imap, umap], x, omap, ["parallel"] * R + ["reduction"], body)


def emit_cumsum(kt, op, operands, attrs, shape, dtype):
    """out[.., j, ..] = sum of x[.., k, ..] over k <= j (k < j exclusive; k >= j, k > j reversed): one generic
    with k as an inner reduction loop, the axis' length squared per row (fine for position ids and masks);
    floats accumulate in f32."""
    x = operands[0]
    R = len(shape)
    axis = attrs["axis"] % R
    pred = {(0, 0): "sle", (1, 0): "slt", (0, 1): "sge", (1, 1): "sgt"}[(attrs["exclusive"], attrs["reverse"])]
    acc_dtype = "f32" if dtype in FLOATS else dtype
    xmap = amap(R + 1, [f"d{R}" if d == axis else f"d{d}" for d in range(R)])
    omap = amap(R + 1, [f"d{d}" for d in range(R)])

    def body(args, kt):
        k, j = _loop_index(kt, R), _loop_index(kt, axis)
        inside = _cmp_typed(kt, f"arith.cmpi {pred}", k, j, "index")
        v = convert(kt, args[0], dtype, acc_dtype)
        n = kt.fresh("s")
        kt.emit(f"  {n} = arith.select {inside}, {v}, {kt.const(0, elem(acc_dtype))} : {elem(acc_dtype)}")
        add = "arith.addf" if acc_dtype in FLOATS else "arith.addi"
        return kt.scalar(add, args[1], n, ty=elem(acc_dtype))
    acc = kt.generic([x], [xmap], kt.filled(shape, acc_dtype, 0), omap, ["parallel"] * R + ["reduction"], body)
    if acc_dtype == dtype:
        return acc
    return typed_elementwise(kt, [acc], shape, dtype, lambda kt, xs: convert(kt, xs[0], acc_dtype, dtype))


SERIAL_CHECK = 64     # indices a bounds check counts in one loop; more: a count per row first


def emit_bounds_check(kt, op, operands, attrs, shape, dtype):
    """The count of indices outside [-size, size). Up to SERIAL_CHECK of them in one loop; more in two: the
    indices as [rows, n / rows] (rows the largest divisor of n up to sqrt(n)), a count per row (the parallel
    loop a GPU maps: a thread per row), then their sum (one loop over the rows). A single loop over all n was
    one GPU thread walking a BERT batch's 1024 token ids (25 us of a 1.2 ms forward on the H200)."""
    idx, size = operands[0], attrs["size"]
    n, r = math.prod(idx.shape), len(idx.shape)
    ty = elem(idx.dtype)

    def count(args, kt):
        low = _cmp_typed(kt, "arith.cmpi slt", args[0], kt.const(-size, ty), ty)
        high = _cmp_typed(kt, "arith.cmpi sge", args[0], kt.const(size, ty), ty)
        bad = kt.scalar("arith.extui", kt.scalar("arith.ori", low, high, ty="i1"), ty="i1 to i32")
        return kt.scalar("arith.addi", args[1], bad, ty="i32")
    if n <= SERIAL_CHECK:    # d0 is the result's single element, the parallel loop
        return kt.generic([idx], [amap(r + 1, [f"d{k + 1}" for k in range(r)])], kt.filled(shape, "i32", 0),
                          amap(r + 1, ["d0"]), ["parallel"] + ["reduction"] * r, count)
    rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    per_row = kt.generic([kt.reshape(idx, (rows, n // rows))], [amap(2, ["d0", "d1"])], kt.filled((rows,), "i32", 0),
                         amap(2, ["d0"]), ["parallel", "reduction"], count)
    return kt.generic([per_row], [amap(2, ["d1"])], kt.filled(shape, "i32", 0), amap(2, ["d0"]),
                      ["parallel", "reduction"], lambda args, kt: kt.scalar("arith.addi", args[1], args[0], ty="i32"))


def epilogue(kt, acc: V, bias, residual, channel_dim: int, attrs, dtype, always=False) -> V:
    """act(acc + bias[channel] + residual), rounded to dtype: the fused tail of conv/matmul.

    always=True (solver kernels): emitted even when it is a plain copy, as the schedule's anchor."""
    R = len(acc.shape)
    ins, maps = [acc], [amap(R, [f"d{i}" for i in range(R)])]
    if bias is not None:
        ins.append(bias)
        maps.append(amap(R, [f"d{channel_dim}"]))
    if residual is not None:
        ins.append(residual)
        maps.append(maps[0])
    act, params = attrs["activation"], attrs["activation_params"]
    if len(ins) == 1 and act == "none" and dtype == acc.dtype and not always:
        return acc

    def body(args, kt):
        y = args[0]
        for a, v in zip(args[1:len(ins)], ins[1:]):
            y = kt.scalar("arith.addf", y, kt.to_f32(a, v.dtype))
        return kt.from_f32(activation(kt, act, params, y), dtype)

    return kt.generic(ins, maps, kt.empty(acc.shape, dtype), maps[0], ["parallel"] * R, body,
                      role="epilogue" if always else None)


def mac_body(in_dtypes):
    """acc += a * b in f32."""
    def body(args, kt):
        a, b = (kt.to_f32(x, d) for x, d in zip(args[:2], in_dtypes))
        return kt.scalar("arith.addf", args[2], kt.scalar("arith.mulf", a, b))
    return body


def emit_conv2d(kt, op, operands, attrs, shape, dtype):
    """Grouped, strided, dilated, padded direct convolution as one generic over explicit group dims."""
    x, w, bias, residual = operands
    nchw = attrs["layout"] == "NCHW"
    G = attrs["groups"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    pt, pl, pb, pr = attrs["padding"]
    if nchw:
        N, C, H, W = x.shape
        x = kt.pad(x, [0, 0, pt, pl], [0, 0, pb, pr], 0.0)
        x = kt.reshape(x, (N, G, C // G) + x.shape[2:])
    else:
        N, H, W, C = x.shape
        x = kt.pad(x, [0, pt, pl, 0], [0, pb, pr, 0], 0.0)
        x = kt.reshape(x, x.shape[:3] + (G, C // G))
    if attrs["filter_layout"] == "KCRS":
        K, Cg, R, S = w.shape
        w = kt.reshape(w, (G, K // G, Cg, R, S))
        wmap = ["d1", "d2", "d5", "d6", "d7"]
    elif attrs["filter_layout"] == "KRSC":
        K, R, S, Cg = w.shape
        w = kt.reshape(w, (G, K // G, R, S, Cg))
        wmap = ["d1", "d2", "d6", "d7", "d5"]
    elif block := filter_block(attrs["filter_layout"]):  # [K/b, R, S, Cg, b]: k = (g*Kg/b + kg//b)*b + kg%b
        R, S, Cg = w.shape[1:4]
        K = w.shape[0] * block
        wmap = [f"d1 * {K // G // block} + d2 floordiv {block}", "d6", "d7", "d5", f"d2 mod {block}"]
    else:  # RSCK
        R, S, Cg, K = w.shape
        w = kt.reshape(w, (R, S, Cg, G, K // G))
        wmap = ["d6", "d7", "d5", "d1", "d2"]
    Kg = K // G
    # loops: d0=n d1=g d2=kg d3=oh d4=ow | d5=c d6=r d7=s
    ih, iw = f"d3 * {sh} + d6 * {dh}", f"d4 * {sw} + d7 * {dw}"
    if nchw:
        OH, OW = shape[2], shape[3]
        xmap, omap, oshape = ["d0", "d1", "d5", ih, iw], ["d0", "d1", "d2", "d3", "d4"], (N, G, Kg, OH, OW)
    else:
        OH, OW = shape[1], shape[2]
        xmap, omap, oshape = ["d0", ih, iw, "d1", "d5"], ["d0", "d3", "d4", "d1", "d2"], (N, OH, OW, G, Kg)
    acc = kt.generic([x, w], [amap(8, xmap), amap(8, wmap)], kt.filled(oshape, "f32", 0.0), amap(8, omap),
                     ["parallel"] * 5 + ["reduction"] * 3, mac_body([x.dtype, w.dtype]))
    acc = kt.reshape(acc, shape)
    return epilogue(kt, acc, bias, residual, 1 if nchw else 3, attrs, dtype)


def emit_depthwise_pointwise(kt, op, operands, attrs, shape, dtype):
    """The depthwise convolution (its result rounded to dtype, as a kernel that keeps it on chip rounds its
    GEMM operand), then the 1x1 convolution: two emit_conv2d's with RSCK views of the filters."""
    x, dw, dw_bias, w, bias, residual = operands
    (R, S, C), K = dw.shape, w.shape[1]
    h = emit_conv2d(kt, op, [x, kt.reshape(dw, (R, S, 1, C)), dw_bias, None],
                    {**attrs, "groups": C, "filter_layout": "RSCK", "activation": attrs["dw_activation"],
                     "activation_params": attrs["dw_activation_params"]}, shape[:3] + (C,), dtype)
    return emit_conv2d(kt, op, [h, kt.reshape(w, (1, 1, C, K)), bias, residual],
                       {**attrs, "strides": [1, 1], "padding": [0, 0, 0, 0], "dilations": [1, 1], "groups": 1,
                        "filter_layout": "RSCK"}, shape, dtype)


def emit_norm_matmul(kt, op, operands, attrs, shape, dtype):
    """The norm over the last dim (its result rounded to dtype, as the GEMV kernels round their A operand),
    then the matmul."""
    x, scale, shift, w, bias, residual = operands
    norm = {"epsilon": attrs["epsilon"], "normalized_ndim": 1}
    h = emit_layer_norm(kt, op, [x, scale, shift, None], norm, tuple(x.shape), dtype) \
        if attrs["norm"] == "layer_norm" else emit_rms_norm(kt, op, [x, scale, None], norm, tuple(x.shape), dtype)
    return emit_matmul(kt, op, [h, w, bias, residual], {**attrs, "transpose_rhs": RHS_PANELS if len(w.shape) == 3 else 0},
                       shape, dtype)


def emit_matmul(kt, op, operands, attrs, shape, dtype):
    a, b, bias, residual = operands
    B = len(a.shape) - 2
    L = B + 3  # loops: batch..., m, n | k
    m, n, k = f"d{B}", f"d{B + 1}", f"d{B + 2}"
    batch = [f"d{i}" for i in range(B)]
    amap_ = amap(L, batch + [m, k])
    if attrs["transpose_rhs"] == RHS_PANELS:   # [N/NT, K, NT], one for every batch
        bmap = amap(L, [f"{n} floordiv {b.shape[2]}", k, f"{n} mod {b.shape[2]}"])
    else:
        bdims = [n, k] if attrs["transpose_rhs"] else [k, n]
        bmap = amap(L, (batch if len(b.shape) > 2 else []) + bdims)
    acc = kt.generic([a, b], [amap_, bmap], kt.filled(shape, "f32", 0.0), amap(L, batch + [m, n]),
                     ["parallel"] * (B + 2) + ["reduction"], mac_body([a.dtype, b.dtype]))
    return epilogue(kt, acc, bias, residual, len(shape) - 1, attrs, dtype)


def _channel_map(rank, layout):
    return amap(rank, ["d1" if layout == "NCHW" else f"d{rank - 1}"])


def emit_batch_norm(kt, op, operands, attrs, shape, dtype):
    x, scale, shift, mean, var = operands
    R, eps = len(shape), attrs["epsilon"]
    cm = _channel_map(R, attrs["layout"])
    ident = amap(R, [f"d{i}" for i in range(R)])

    def body(args, kt):
        xv, s, b, mu, v = (kt.to_f32(a, dtype) for a in args[:5])
        inv = kt.scalar("math.rsqrt", kt.scalar("arith.addf", v, kt.const(eps)))
        y = kt.scalar("arith.mulf", kt.scalar("arith.subf", xv, mu), kt.scalar("arith.mulf", inv, s))
        return kt.from_f32(kt.scalar("arith.addf", y, b), dtype)

    return kt.generic([x, scale, shift, mean, var], [ident, cm, cm, cm, cm], kt.empty(shape, dtype), ident,
                      ["parallel"] * R, body)


def _moments(kt, x: V, keep: list, count: int):
    """mean and 1/sqrt(var + eps)-ready variance over the dims not in `keep` (f32 tensors of shape keep)."""
    R = len(x.shape)
    red = [d for d in range(R) if d not in keep]
    its = ["reduction" if d in red else "parallel" for d in range(R)]
    ident = amap(R, [f"d{i}" for i in range(R)])
    kmap = amap(R, [f"d{d}" for d in keep])
    kshape = [x.shape[d] for d in keep]

    def sum_body(args, kt):
        return kt.scalar("arith.addf", args[1], kt.to_f32(args[0], x.dtype))

    total = kt.generic([x], [ident], kt.filled(kshape, "f32", 0.0), kmap, its, sum_body)

    def sq_body(args, kt):
        d = kt.scalar("arith.subf", kt.to_f32(args[0], x.dtype), kt.scalar("arith.mulf", args[1], kt.const(1 / count)))
        return kt.scalar("arith.addf", args[2], kt.scalar("arith.mulf", d, d))

    sq = kt.generic([x, total], [ident, kmap], kt.filled(kshape, "f32", 0.0), kmap, its, sq_body)
    return total, sq, kmap


def _normalize(kt, x, total, sq, kmap, count, eps, affine: list, dtype):
    """(x - mean) * rsqrt(var + eps) [* scale + shift], affine = [(V, map), ...] for scale then shift."""
    R = len(x.shape)
    ident = amap(R, [f"d{i}" for i in range(R)])
    ins = [x, total, sq] + [v for v, _ in affine]
    maps = [ident, kmap, kmap] + [m for _, m in affine]

    def body(args, kt):
        mean = kt.scalar("arith.mulf", args[1], kt.const(1 / count))
        var = kt.scalar("arith.mulf", args[2], kt.const(1 / count))
        inv = kt.scalar("math.rsqrt", kt.scalar("arith.addf", var, kt.const(eps)))
        y = kt.scalar("arith.mulf", kt.scalar("arith.subf", kt.to_f32(args[0], x.dtype), mean), inv)
        if len(affine) >= 1:
            y = kt.scalar("arith.mulf", y, kt.to_f32(args[3], affine[0][0].dtype))
        if len(affine) == 2:
            y = kt.scalar("arith.addf", y, kt.to_f32(args[4], affine[1][0].dtype))
        return kt.from_f32(y, dtype)

    return kt.generic(ins, maps, kt.empty(x.shape, dtype), ident, ["parallel"] * R, body)


def _norm_rows(kt, x: V, residual: V | None, shape, k: int) -> V:
    """The input of layer_norm / rms_norm as [rows, D]: x + residual summed in f32 when the residual
    (prim-fuse's folded add) is given."""
    if residual is not None:
        x = elementwise(kt, [x, residual], shape, "f32", lambda kt, xs: kt.scalar("arith.addf", *xs))
    return kt.reshape(x, (math.prod(shape[:-k]), math.prod(shape[-k:])))


def emit_layer_norm(kt, op, operands, attrs, shape, dtype):
    x, scale, shift, residual = operands
    k = attrs["normalized_ndim"]
    D = math.prod(shape[-k:])
    x2 = _norm_rows(kt, x, residual, shape, k)
    total, sq, kmap = _moments(kt, x2, [0], D)
    affine = [(kt.reshape(v, (D,)), amap(2, ["d1"])) for v in (scale, shift) if v is not None]
    if scale is None and shift is not None:  # shift only: add it with a unit scale
        affine = [(kt.filled((D,), dtype, 1.0), amap(2, ["d1"]))] + affine
    y = _normalize(kt, x2, total, sq, kmap, D, attrs["epsilon"], affine, dtype)
    return kt.reshape(y, shape)


def emit_rms_norm(kt, op, operands, attrs, shape, dtype):
    """h * rsqrt(mean(h^2) + eps) [* scale], h = x [+ residual], statistics in f32."""
    x, scale, residual = operands
    k = attrs["normalized_ndim"]
    D = math.prod(shape[-k:])
    h = _norm_rows(kt, x, residual, shape, k)
    rows = h.shape[0]
    ident, row = amap(2, ["d0", "d1"]), amap(2, ["d0"])

    def sq_body(args, kt):
        v = kt.to_f32(args[0], h.dtype)
        return kt.scalar("math.fma", v, v, args[1])

    sq = kt.generic([h], [ident], kt.filled((rows,), "f32", 0.0), row, ["parallel", "reduction"], sq_body)
    ins, maps = [h, sq], [ident, row]
    if scale is not None:
        ins.append(kt.reshape(scale, (D,)))
        maps.append(amap(2, ["d1"]))

    def body(args, kt):
        ms = kt.scalar("arith.mulf", args[1], kt.const(1 / D))
        inv = kt.scalar("math.rsqrt", kt.scalar("arith.addf", ms, kt.const(attrs["epsilon"])))
        y = kt.scalar("arith.mulf", kt.to_f32(args[0], h.dtype), inv)
        if scale is not None:
            y = kt.scalar("arith.mulf", y, kt.to_f32(args[2], ins[2].dtype))
        return kt.from_f32(y, dtype)

    y = kt.generic(ins, maps, kt.empty(h.shape, dtype), ident, ["parallel"] * 2, body)
    return kt.reshape(y, shape)


def emit_group_norm(kt, op, operands, attrs, shape, dtype):
    x, scale, shift = operands
    G = attrs["groups"]
    if attrs["layout"] == "NCHW":
        N, C, H, W = shape
        x4 = kt.reshape(x, (N, G, C // G, H * W))
        keep, cmap = [0, 1], ["d1", "d2"]
    else:
        N, H, W, C = shape
        x4 = kt.reshape(x, (N, H * W, G, C // G))
        keep, cmap = [0, 2], ["d2", "d3"]
    count = (C // G) * H * W
    total, sq, kmap = _moments(kt, x4, keep, count)
    affine = [(kt.reshape(v, (G, C // G)), amap(4, cmap)) for v in (scale, shift)]
    return kt.reshape(_normalize(kt, x4, total, sq, kmap, count, attrs["epsilon"], affine, dtype), shape)


def _pool_geometry(x: V, attrs, shape):
    nchw = attrs["layout"] == "NCHW"
    H, W = (x.shape[2], x.shape[3]) if nchw else (x.shape[1], x.shape[2])
    OH, OW = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
    return nchw, H, W, OH, OW


def _window_views(kt, x: V, attrs, shape, pad_value: float) -> list:
    """The kh*kw strided views of the padded input, row-major over the window: view (r, s) holds the window
    element (r, s) of every output position. Padding grows to cover ceil_mode's last windows."""
    nchw, H, W, OH, OW = _pool_geometry(x, attrs, shape)
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["strides"]
    dh, dw = attrs.get("dilations", (1, 1))
    pt, pl, pb, pr = attrs["padding"]
    pb = max(pb, (OH - 1) * sh + dh * (kh - 1) + 1 - H - pt)
    pr = max(pr, (OW - 1) * sw + dw * (kw - 1) + 1 - W - pl)
    low, high = ([0, 0, pt, pl], [0, 0, pb, pr]) if nchw else ([0, pt, pl, 0], [0, pb, pr, 0])
    xp = kt.pad(x, low, high, pad_value)
    views = []
    for r in range(kh):
        for c in range(kw):
            off = [0, 0, r * dh, c * dw] if nchw else [0, r * dh, c * dw, 0]
            strides = [1, 1, sh, sw] if nchw else [1, sh, sw, 1]
            n = kt.fresh("win")
            kt.emit(f"{n} = tensor.extract_slice {xp.name}[{', '.join(map(str, off))}] [{', '.join(map(str, shape))}] "
                    f"[{', '.join(map(str, strides))}] : {xp.type} to {ttype(shape, x.dtype)}")
            views.append(V(n, shape, x.dtype))
    return views


def _pool(kt, x: V, attrs, shape, pad_value: float, combine: str, dtype: str, scale: V | None = None) -> V:
    """A window reduction as ONE elementwise generic over the kh*kw strided views of the padded input
    (view (r, s) holds the window element (r, s) of every output position), combined with `combine`
    and optionally multiplied by `scale[oh, ow]`. Padding grows to cover ceil_mode's last windows."""
    nchw = attrs["layout"] == "NCHW"
    views = _window_views(kt, x, attrs, shape, pad_value)
    ident = amap(4, ["d0", "d1", "d2", "d3"])
    ins, maps = list(views), [ident] * len(views)
    if scale is not None:
        ins.append(scale)
        maps.append(amap(4, ["d2", "d3"] if nchw else ["d1", "d2"]))

    def body(args, kt):
        acc = kt.to_f32(args[0], x.dtype)
        for a in args[1:len(views)]:
            acc = kt.scalar(combine, acc, kt.to_f32(a, x.dtype))
        if scale is not None:
            acc = kt.scalar("arith.mulf", acc, args[len(views)])
        return kt.from_f32(acc, dtype)

    return kt.generic(ins, maps, kt.empty(shape, dtype), ident, ["parallel"] * 4, body)


def emit_max_pool2d(kt, op, operands, attrs, shape, dtype):
    return _pool(kt, operands[0], attrs, shape, -math.inf, "arith.maximumf", dtype)


def avg_pool_divisors(H, W, OH, OW, attrs) -> np.ndarray:
    """PyTorch's avg_pool2d divisor per output position (count_include_pad and ceil_mode rules)."""
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["strides"]
    pt, pl, pb, pr = attrs["padding"]

    def counts(size, out, k, s, p0, p1):
        c = []
        for o in range(out):
            start = o * s - p0
            end = min(start + k, size + p1)
            if attrs["count_include_pad"]:
                c.append(end - start)
            else:
                c.append(min(end, size) - max(start, 0))
        return np.array(c, np.float64)

    return np.outer(counts(H, OH, kh, sh, pt, pb), counts(W, OW, kw, sw, pl, pr))


def emit_avg_pool2d(kt, op, operands, attrs, shape, dtype):
    x = operands[0]
    nchw, H, W, OH, OW = _pool_geometry(x, attrs, shape)
    inv = kt.constant_tensor((1.0 / avg_pool_divisors(H, W, OH, OW, attrs)).astype(np.float32))
    return _pool(kt, x, attrs, shape, 0.0, "arith.addf", dtype, scale=inv)


def emit_global_avg_pool(kt, op, operands, attrs, shape, dtype):
    x = operands[0]
    nchw = attrs["layout"] == "NCHW"
    N, C = shape[0], (shape[1] if nchw else shape[3])
    HW = x.shape[2] * x.shape[3] if nchw else x.shape[1] * x.shape[2]
    x3 = kt.reshape(x, (N, C, HW) if nchw else (N, HW, C))
    # Iterations (n, c | hw) in both layouts: the parallel dimensions outermost, so a GPU maps one
    # thread per (n, c) (coalesced along c in NHWC) rather than one per image.
    xmap = amap(3, ["d0", "d1", "d2"] if nchw else ["d0", "d2", "d1"])

    def sum_body(args, kt):
        return kt.scalar("arith.addf", args[1], kt.to_f32(args[0], x.dtype))

    total = kt.generic([x3], [xmap], kt.filled((N, C), "f32", 0.0), amap(3, ["d0", "d1"]),
                       ["parallel", "parallel", "reduction"], sum_body)
    mean = elementwise(kt, [total], (N, C), dtype, lambda kt, xs: kt.scalar("arith.mulf", xs[0], kt.const(1 / HW)))
    return kt.reshape(mean, shape)


def emit_softmax(kt, op, operands, attrs, shape, dtype):
    """Numerically stable (log-)softmax: max, sum of exp(x - max), then normalize."""
    x = operands[0]
    R = len(shape)
    ax = attrs["axis"] % R
    ident = amap(R, [f"d{i}" for i in range(R)])
    rmap = amap(R, [f"d{i}" for i in range(R) if i != ax])
    rshape = [d for i, d in enumerate(shape) if i != ax]
    its = ["reduction" if i == ax else "parallel" for i in range(R)]
    mx = kt.generic([x], [ident], kt.filled(rshape, "f32", -math.inf), rmap, its,
                    lambda a, kt: kt.scalar("arith.maximumf", a[1], kt.to_f32(a[0], x.dtype)))

    def sum_body(a, kt):
        e = kt.scalar("math.exp", kt.scalar("arith.subf", kt.to_f32(a[0], x.dtype), a[1]))
        return kt.scalar("arith.addf", a[2], e)

    total = kt.generic([x, mx], [ident, rmap], kt.filled(rshape, "f32", 0.0), rmap, its, sum_body)
    log = op == "log_softmax"

    def out_body(a, kt):
        d = kt.scalar("arith.subf", kt.to_f32(a[0], x.dtype), a[1])
        y = kt.scalar("arith.subf", d, kt.scalar("math.log", a[2])) if log else \
            kt.scalar("arith.divf", kt.scalar("math.exp", d), a[2])
        return kt.from_f32(y, dtype)

    return kt.generic([x, mx, total], [ident, rmap, rmap], kt.empty(shape, dtype), ident, ["parallel"] * R, out_body)


def emit_transpose(kt, op, operands, attrs, shape, dtype):
    """out[d0, d1, ...] = x[...] with x's dim perm[i] indexed by out's dim i."""
    x, perm = operands[0], list(attrs["perm"])
    R = len(shape)
    xmap = amap(R, [f"d{perm.index(j)}" for j in range(R)])
    return kt.generic([x], [xmap], kt.empty(shape, dtype), amap(R, [f"d{i}" for i in range(R)]),
                      ["parallel"] * R, lambda a, kt: a[0])


def emit_concat(kt, op, operands, attrs, shape, dtype):
    """Each input copied into its place along the axis, in blocks (KernelText.insert_blocks)."""
    ax = attrs["axis"] % len(shape)
    acc = kt.empty(shape, dtype)
    off = 0
    for x in operands:
        acc = kt.insert_blocks(x, acc, [off if i == ax else 0 for i in range(len(shape))])
        off += x.shape[ax]
    return acc


def emit_pad(kt, op, operands, attrs, shape, dtype):
    x, pads = operands[0], attrs["pads"]
    R = len(shape)
    return kt.pad(x, pads[:R], pads[R:], attrs["value"])


def emit_reshape(kt, op, operands, attrs, shape, dtype):
    return kt.reshape(operands[0], shape)


def emit_slice(kt, op, operands, attrs, shape, dtype):
    """The strided view of the input (tensor.extract_slice), copied by one elementwise generic."""
    x = operands[0]
    R = len(shape)
    n = kt.fresh("sl")
    starts, sizes, steps = (", ".join(map(str, v)) for v in (attrs["starts"], shape, attrs["steps"]))
    kt.emit(f"{n} = tensor.extract_slice {x.name}[{starts}] [{sizes}] [{steps}] : {x.type} to {ttype(shape, x.dtype)}")
    ident = amap(R, [f"d{i}" for i in range(R)])
    return kt.generic([V(n, shape, x.dtype)], [ident], kt.empty(shape, dtype), ident, ["parallel"] * R,
                      lambda a, kt: a[0])


REDUCE_INIT = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf}
REDUCE_COMBINE = {"sum": "arith.addf", "mean": "arith.addf", "max": "arith.maximumf", "min": "arith.minimumf"}


def emit_reduce(kt, op, operands, attrs, shape, dtype):
    """One generic with the kept dims as the outer parallel loops and the reduced dims inner (a GPU maps
    a thread per output), accumulated in f32; then mean's scale and the rounding, and the keepdims view."""
    x, kind = operands[0], attrs["kind"]
    R = len(x.shape)
    reduced = sorted(a % R for a in attrs["axes"])
    kept = [d for d in range(R) if d not in reduced]
    order = kept + reduced  # loop i runs over dim order[i] of x
    kshape = [x.shape[d] for d in kept]
    acc = kt.generic([x], [amap(R, [f"d{order.index(d)}" for d in range(R)])],
                     kt.filled(kshape, "f32", REDUCE_INIT[kind]), amap(R, [f"d{i}" for i in range(len(kept))]),
                     ["parallel"] * len(kept) + ["reduction"] * len(reduced),
                     lambda a, kt: kt.scalar(REDUCE_COMBINE[kind], a[1], kt.to_f32(a[0], x.dtype)))
    if kind == "mean":
        inv = 1.0 / math.prod(x.shape[d] for d in reduced)
        acc = elementwise(kt, [acc], kshape, dtype, lambda kt, xs: kt.scalar("arith.mulf", xs[0], kt.const(inv)))
    elif dtype != "f32":
        acc = elementwise(kt, [acc], kshape, dtype, lambda kt, xs: xs[0])
    if kshape or not shape:
        return kt.reshape(acc, shape)
    n = kt.fresh("r")  # every dim reduced, kept as size 1: a 0-d tensor expanded (reshape() goes through 1-d)
    kt.emit(f"{n} = tensor.expand_shape {acc.name} [] output_shape [{', '.join(map(str, shape))}] : "
            f"{acc.type} into {ttype(shape, dtype)}")
    return V(n, shape, dtype)


def emit_attention(kt, op, operands, attrs, shape, dtype):
    """softmax(scale * q @ k^T + mask, causal: -inf where key j > query i) @ v, the scores in f32; the
    reference form (the S x S scores are a tensor): targets with a flash kernel replace it."""
    q, k, v, mask = operands
    B, H, Sq, D = attention_dims(q.shape, attrs["layout"])
    Sk = attention_dims(k.shape, attrs["layout"])[2]
    ident = amap(4, ["d0", "d1", "d2", "d3"])

    def rows(b, h, s, d):    # an operand's indexing map from (batch, head, sequence, head dim) loop dims
        return amap(5, [b, h, s, d] if attrs["layout"] == "BHSD" else [b, s, h, d])

    scores = kt.generic([q, k], [rows("d0", "d1", "d2", "d4"), rows("d0", "d1", "d3", "d4")],
                        kt.filled((B, H, Sq, Sk), "f32", 0.0), amap(5, ["d0", "d1", "d2", "d3"]),
                        ["parallel"] * 4 + ["reduction"], mac_body([q.dtype, k.dtype]))
    ins, maps = [scores], [ident]
    if mask is not None and len(mask.shape) == 4 and mask.shape[0] not in (1, B):   # tiling the batch
        ins.append(mask)
        maps.append(amap(4, [f"d0 mod {mask.shape[0]}"] + [f"d{i}" if n > 1 else "0"
                                                         for i, n in enumerate(mask.shape[1:], 1)]))
    elif mask is not None:
        m, mmap = _broadcast_operand(kt, mask, (B, H, Sq, Sk))
        ins.append(m)
        maps.append(mmap)

    def logits(a, kt):
        y = kt.scalar("arith.mulf", a[0], kt.const(attrs["scale"]))
        if mask is not None:
            y = kt.scalar("arith.addf", y, kt.to_f32(a[1], mask.dtype))
        if attrs["causal"]:
            i, j, above = kt.fresh("i"), kt.fresh("j"), kt.fresh("b")
            kt.emit(f"  {i} = linalg.index 2 : index")
            kt.emit(f"  {j} = linalg.index 3 : index")
            kt.emit(f"  {above} = arith.cmpi ugt, {j}, {i} : index")
            y = _select(kt, above, kt.const(-math.inf), y)
        return y

    logit = kt.generic(ins, maps, kt.empty((B, H, Sq, Sk), "f32"), ident, ["parallel"] * 4, logits)
    probs = emit_softmax(kt, "softmax", [logit], {"axis": -1}, (B, H, Sq, Sk), "f32")
    out = kt.generic([probs, v], [amap(5, ["d0", "d1", "d2", "d4"]), rows("d0", "d1", "d4", "d3")],
                     kt.filled(shape, "f32", 0.0), rows("d0", "d1", "d2", "d3"),
                     ["parallel"] * 4 + ["reduction"], mac_body(["f32", v.dtype]))
    return out if dtype == "f32" else kt.generic([out], [ident], kt.empty(shape, dtype), ident, ["parallel"] * 4,
                                                 lambda a, kt: kt.from_f32(a[0], dtype))


# -------------------------------------------------------------------------- training: the backward ops
# Reference forms, like the forward ops': f32 arithmetic and accumulation, one rounding at the end. Where a
# gradient gathers from the windows that read an input element (a pool's), a stride makes the window's index
# a quotient, so those generics read with tensor.extract (as gather does) rather than through an affine map.
def _select_typed(kt, cond, a, b, ty="f32"):
    n = kt.fresh("s")
    kt.emit(f"  {n} = arith.select {cond}, {a}, {b} : {ty}")
    return n


def _strided_source(kt, i: str, offset: int, stride: int, count: int) -> tuple[str, str]:
    """For an index i: (whether j = i + offset is q * stride with 0 <= q < count, q where it is, else 0)."""
    j = kt.scalar("arith.addi", i, kt.const(offset, "index"), ty="index") if offset else i
    zero = kt.const(0, "index")
    valid = _cmp_typed(kt, "arith.cmpi sge", j, zero, "index")
    q = j
    if stride > 1:
        s = kt.const(stride, "index")
        q = kt.scalar("arith.divsi", j, s, ty="index")
        exact = _cmp_typed(kt, "arith.cmpi eq", kt.scalar("arith.remsi", j, s, ty="index"), zero, "index")
        valid = kt.scalar("arith.andi", valid, exact, ty="i1")
    inside = _cmp_typed(kt, "arith.cmpi slt", q, kt.const(count, "index"), "index")
    valid = kt.scalar("arith.andi", valid, inside, ty="i1")
    return valid, _select_typed(kt, valid, q, zero, "index")


def _pointwise(kt, operands: list, shape, dtype, fn) -> V:
    """out[i] = fn(kt, the operands' scalars as f32) over shape; operands = [(V, its indexing map)]."""
    R = len(shape)
    ins = [v for v, _ in operands]

    def body(args, kt):
        return kt.from_f32(fn(kt, [kt.to_f32(a, v.dtype) for a, v in zip(args, ins)]), dtype)
    return kt.generic(ins, [m for _, m in operands], kt.empty(shape, dtype), amap(R, [f"d{i}" for i in range(R)]),
                      ["parallel"] * R, body)


def _kept_reduce(kt, full: list, kept: list, keep: list, term, combine="arith.addf", init=0.0) -> V:
    """An f32 tensor over the dims `keep` of the same-shaped tensors `full`: the combine of term(kt, full's
    scalars, kept's scalars) over the other dims. The kept dims are the outer, parallel loops (a GPU maps a
    thread per result), `kept` are tensors over them (statistics computed before)."""
    shape = full[0].shape
    R = len(shape)
    order = keep + [d for d in range(R) if d not in keep]
    fmap = amap(R, [f"d{order.index(d)}" for d in range(R)])
    kmap = amap(R, [f"d{i}" for i in range(len(keep))])
    ins = list(full) + list(kept)

    def body(args, kt):
        xs = [kt.to_f32(a, v.dtype) for a, v in zip(args, ins)]
        return kt.scalar(combine, args[len(ins)], term(kt, xs[:len(full)], xs[len(full):]))
    return kt.generic(ins, [fmap] * len(full) + [kmap] * len(kept), kt.filled([shape[d] for d in keep], "f32", init),
                      kmap, ["parallel"] * len(keep) + ["reduction"] * (R - len(keep)), body)


def _f(kt, op, *xs):
    return kt.scalar(f"arith.{op}f", *xs)


def _rounded(kt, acc: V, dtype: str) -> V:
    """An f32 accumulator in dtype (itself for f32)."""
    R = len(acc.shape)
    return acc if dtype == acc.dtype else _pointwise(kt, [(acc, amap(R, [f"d{i}" for i in range(R)]))], acc.shape,
                                                     dtype, lambda kt, xs: xs[0])


def _flipped_filter(kt, w: V, layout: str) -> V:
    """w with its taps reversed, wf[.., r, s, ..] = w[.., R-1-r, S-1-s, ..], read with tensor.extract (an affine map
    of -r would stop the CPU schedule's tiling, which takes only positive coefficients)."""
    rd, sd = {"KCRS": (2, 3), "KRSC": (1, 2), "RSCK": (0, 1)}[layout]

    def body(args, kt):
        idx = [_loop_index(kt, d) for d in range(4)]
        for d in (rd, sd):
            idx[d] = kt.scalar("arith.subi", kt.const(w.shape[d] - 1, "index"), idx[d], ty="index")
        return _extract(kt, w, idx)
    return kt.generic([], [], kt.empty(w.shape, w.dtype), amap(4, [f"d{i}" for i in range(4)]), ["parallel"] * 4, body)


def emit_conv2d_backward_data(kt, op, operands, attrs, shape, dtype):
    """dx as one stride-1 correlation over explicit group dims with the filter's taps reversed (wf): dy spread
    `stride` apart (zeros between) into dz, padded so that dx[ih] = sum over r of dz[ih + r dh + oh0] * wf[r] reads
    inside it, oh0 = pt + lh - (R-1) dh (likewise along the width)."""
    dy, w = operands
    nchw = attrs["layout"] == "NCHW"
    G = attrs["groups"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    pt, pl = attrs["padding"][:2]
    H, W = attrs["input_size"]
    K, Cg, R, S = filter_dims(attrs["filter_layout"], w.shape)
    N, OH, OW = (dy.shape[0], dy.shape[2], dy.shape[3]) if nchw else dy.shape[:3]
    Kg = K // G
    lh, lw = max(0, (R - 1) * dh - pt), max(0, (S - 1) * dw - pl)      # dz's rows before dy's first
    zh, zw = lh + max((OH - 1) * sh + 1, H + pt), lw + max((OW - 1) * sw + 1, W + pl)
    zshape = (N, K, zh, zw) if nchw else (N, zh, zw, K)
    hd, wd = (2, 3) if nchw else (1, 2)
    if (sh, sw) == (1, 1):
        low, high = [0] * 4, [0] * 4
        low[hd], low[wd], high[hd], high[wd] = lh, lw, zh - lh - OH, zw - lw - OW
        dz = kt.pad(dy, low, high, 0.0)
    else:
        def spread(args, kt):
            idx = [_loop_index(kt, d) for d in range(4)]
            vh, idx[hd] = _strided_source(kt, idx[hd], -lh, sh, OH)
            vw, idx[wd] = _strided_source(kt, idx[wd], -lw, sw, OW)
            return _select_typed(kt, kt.scalar("arith.andi", vh, vw, ty="i1"), _extract(kt, dy, idx),
                                 kt.const(0.0, elem(dy.dtype)), elem(dy.dtype))
        dz = kt.generic([], [], kt.empty(zshape, dy.dtype), amap(4, [f"d{i}" for i in range(4)]), ["parallel"] * 4,
                        spread)
    # loops: d0=n d1=g d2=c d3=ih d4=iw | d5=kg d6=r d7=s
    ih, iw = f"d3 + d6 * {dh} + {pt + lh - (R - 1) * dh}", f"d4 + d7 * {dw} + {pl + lw - (S - 1) * dw}"
    if nchw:
        dz = kt.reshape(dz, (N, G, Kg, zh, zw))
        zmap, omap, oshape = ["d0", "d1", "d5", ih, iw], ["d0", "d1", "d2", "d3", "d4"], (N, G, Cg, H, W)
    else:
        dz = kt.reshape(dz, (N, zh, zw, G, Kg))
        zmap, omap, oshape = ["d0", ih, iw, "d1", "d5"], ["d0", "d3", "d4", "d1", "d2"], (N, H, W, G, Cg)
    fl = attrs["filter_layout"]
    wshape, wmap = {"KCRS": ((G, Kg, Cg, R, S), ["d1", "d5", "d2", "d6", "d7"]),
                    "KRSC": ((G, Kg, R, S, Cg), ["d1", "d5", "d6", "d7", "d2"]),
                    "RSCK": ((R, S, Cg, G, Kg), ["d6", "d7", "d2", "d1", "d5"])}[fl]
    wf = kt.reshape(_flipped_filter(kt, w, fl), wshape)
    acc = kt.generic([dz, wf], [amap(8, zmap), amap(8, wmap)], kt.filled(oshape, "f32", 0.0),
                     amap(8, omap), ["parallel"] * 5 + ["reduction"] * 3, mac_body([dz.dtype, w.dtype]))
    return _rounded(kt, kt.reshape(acc, shape), dtype)


def emit_conv2d_backward_weights(kt, op, operands, attrs, shape, dtype):
    """dw[g, kg, c, r, s] = sum over n, oh, ow of dy[n, g, kg, oh, ow] * x_padded[n, g, c, oh sh + r dh, ow sw + s dw]:
    one generic, the filter's dims parallel and (n, oh, ow) the reduction."""
    x, dy = operands
    nchw = attrs["layout"] == "NCHW"
    G = attrs["groups"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    pt, pl, pb, pr = attrs["padding"]
    R, S = attrs["filter_size"]
    # loops: d0=g d1=kg d2=c d3=r d4=s | d5=n d6=oh d7=ow
    ih, iw = f"d6 * {sh} + d3 * {dh}", f"d7 * {sw} + d4 * {dw}"
    if nchw:
        (N, C, _, _), (K, OH, OW) = x.shape, (dy.shape[1], dy.shape[2], dy.shape[3])
        xp = kt.pad(x, [0, 0, pt, pl], [0, 0, pb, pr], 0.0)
        xp = kt.reshape(xp, (N, G, C // G) + xp.shape[2:])
        dyg = kt.reshape(dy, (N, G, K // G, OH, OW))
        xmap, dmap = ["d5", "d0", "d2", ih, iw], ["d5", "d0", "d1", "d6", "d7"]
    else:
        (N, _, _, C), (OH, OW, K) = x.shape, dy.shape[1:]
        xp = kt.pad(x, [0, pt, pl, 0], [0, pb, pr, 0], 0.0)
        xp = kt.reshape(xp, xp.shape[:3] + (G, C // G))
        dyg = kt.reshape(dy, (N, OH, OW, G, K // G))
        xmap, dmap = ["d5", ih, iw, "d0", "d2"], ["d5", "d6", "d7", "d0", "d1"]
    Kg, Cg = K // G, C // G
    oshape, omap = {"KCRS": ((G, Kg, Cg, R, S), ["d0", "d1", "d2", "d3", "d4"]),
                    "KRSC": ((G, Kg, R, S, Cg), ["d0", "d1", "d3", "d4", "d2"]),
                    "RSCK": ((R, S, Cg, G, Kg), ["d3", "d4", "d2", "d0", "d1"])}[attrs["filter_layout"]]
    acc = kt.generic([xp, dyg], [amap(8, xmap), amap(8, dmap)], kt.filled(oshape, "f32", 0.0), amap(8, omap),
                     ["parallel"] * 5 + ["reduction"] * 3, mac_body([xp.dtype, dyg.dtype]))
    return _rounded(kt, kt.reshape(acc, shape), dtype)


def _channels_view(kt, x: V, layout: str) -> V:
    """A 4-d activation with its channels as dim 1: NCHW [N, C, H W], NHWC [N H W, C]."""
    if layout == "NCHW":
        N, C, H, W = x.shape
        return kt.reshape(x, (N, C, H * W))
    N, H, W, C = x.shape
    return kt.reshape(x, (N * H * W, C))


def _statistics(kt, x: V, keep: list, count: int):
    """f32 sums over the dims of x not in keep: (sum x, sum (x - mean)^2), the kept dims the parallel loops."""
    total = _kept_reduce(kt, [x], [], keep, lambda kt, f, k: f[0])

    def square(kt, f, k):
        d = _f(kt, "sub", f[0], _f(kt, "mul", k[0], kt.const(1 / count)))
        return _f(kt, "mul", d, d)
    return total, _kept_reduce(kt, [x], [total], keep, square)


def _mean_inv_std(kt, total: str, sq: str, count: int, eps: float) -> tuple[str, str]:
    mean = _f(kt, "mul", total, kt.const(1 / count))
    var = _f(kt, "mul", sq, kt.const(1 / count))
    return mean, kt.scalar("math.rsqrt", _f(kt, "add", var, kt.const(eps)))


def emit_batch_norm_training(kt, op, operands, attrs, shape, dtype):
    x, scale, shift = operands
    xv = _channels_view(kt, x, attrs["layout"])
    count = math.prod(shape) // xv.shape[1]
    total, sq = _statistics(kt, xv, [1], count)
    cm = amap(len(xv.shape), ["d1"])
    y = _normalize(kt, xv, total, sq, cm, count, attrs["epsilon"], [(scale, cm), (shift, cm)], dtype)
    return kt.reshape(y, shape)


def _two_rows(kt, a: V, b: V, shape, dtype, rows=lambda kt, a, b: (a, b)) -> V:
    """[2, C] from two [C] vectors: one generic choosing the row by its index, rows(a, b) its two values."""
    def body(kt, xs):
        first = _cmp_typed(kt, "arith.cmpi eq", _loop_index(kt, 0), kt.const(0, "index"), "index")
        return _select(kt, first, *rows(kt, *xs))
    cm = amap(2, ["d1"])
    return _pointwise(kt, [(a, cm), (b, cm)], shape, dtype, body)


def emit_batch_norm_statistics(kt, op, operands, attrs, shape, dtype):
    """[mean; 1 / sqrt(biased var + eps)] per channel."""
    xv = _channels_view(kt, operands[0], attrs["layout"])
    count = math.prod(operands[0].shape) // xv.shape[1]
    total, sq = _statistics(kt, xv, [1], count)
    return _two_rows(kt, total, sq, shape, dtype,
                     lambda kt, t, q: _mean_inv_std(kt, t, q, count, attrs["epsilon"]))


def _backward_sums(kt, dyv: V, xv: V, mean: V) -> tuple[V, V]:
    """f32 sum(dy) and sum(dy (x - mean)) per channel (dim 1 of the channel views)."""
    return (_kept_reduce(kt, [dyv], [], [1], lambda kt, f, k: f[0]),
            _kept_reduce(kt, [dyv, xv], [mean], [1], lambda kt, f, k: _f(kt, "mul", f[0], _f(kt, "sub", f[1], k[0]))))


def emit_batch_norm_backward(kt, op, operands, attrs, shape, dtype):
    """dx = scale * inv_std / M * (M dy - sum(dy) - (x - mean) inv_std^2 sum(dy (x - mean))), sums per channel
    (the rows of the sums operand where it is given)."""
    dy, x, scale, mean, inv, *given = operands
    dyv, xv = (_channels_view(kt, v, attrs["layout"]) for v in (dy, x))
    M = math.prod(shape) // xv.shape[1]
    sums = given[0] if given and given[0] is not None else None
    s1, s2 = (sums, sums) if sums is not None else _backward_sums(kt, dyv, xv, mean)

    def body(kt, xs):
        g, xx, sc, mu, iv, a, b = xs
        xc = _f(kt, "mul", _f(kt, "sub", xx, mu), _f(kt, "mul", iv, iv))
        t = _f(kt, "sub", _f(kt, "sub", _f(kt, "mul", g, kt.const(M)), a), _f(kt, "mul", xc, b))
        return _f(kt, "mul", t, _f(kt, "mul", _f(kt, "mul", sc, iv), kt.const(1 / M)))
    R = len(xv.shape)
    ident, cm = amap(R, [f"d{i}" for i in range(R)]), amap(R, ["d1"])
    rows = (amap(R, ["0", "d1"]), amap(R, ["1", "d1"])) if sums is not None else (cm, cm)
    dx = _pointwise(kt, [(dyv, ident), (xv, ident), (scale, cm), (mean, cm), (inv, cm), (s1, rows[0]),
                         (s2, rows[1])], xv.shape, dtype, body)
    return kt.reshape(dx, shape)


def emit_batch_norm_backward_sums(kt, op, operands, attrs, shape, dtype):
    """[sum(dy); sum(dy (x - mean))] per channel."""
    dy, x, mean = operands
    return _two_rows(kt, *_backward_sums(kt, *(_channels_view(kt, v, attrs["layout"]) for v in (dy, x)), mean),
                     shape, dtype)


def emit_layer_norm_backward(kt, op, operands, attrs, shape, dtype):
    """g = dy * scale; dx = inv_std / D * (D g - sum(g) - (x - mean) inv_std^2 sum(g (x - mean))) per row of D,
    the statistics recomputed from x."""
    dy, x, scale = operands
    k = attrs["normalized_ndim"]
    D = math.prod(shape[-k:])
    rows = math.prod(shape[:-k])
    dy2, x2 = kt.reshape(dy, (rows, D)), kt.reshape(x, (rows, D))
    ident, row = amap(2, ["d0", "d1"]), amap(2, ["d0"])
    g = dy2 if scale is None else _pointwise(kt, [(dy2, ident), (kt.reshape(scale, (D,)), amap(2, ["d1"]))],
                                             (rows, D), "f32", lambda kt, xs: _f(kt, "mul", *xs))
    total, sq = _statistics(kt, x2, [0], D)
    s1 = _kept_reduce(kt, [g], [], [0], lambda kt, f, k: f[0])

    def centered(kt, f, k):
        return _f(kt, "mul", f[0], _f(kt, "sub", f[1], _f(kt, "mul", k[0], kt.const(1 / D))))
    s2 = _kept_reduce(kt, [g, x2], [total], [0], centered)

    def body(kt, xs):
        gv, xx, t, q, a, b = xs
        mean, inv = _mean_inv_std(kt, t, q, D, attrs["epsilon"])
        xc = _f(kt, "mul", _f(kt, "sub", xx, mean), _f(kt, "mul", inv, inv))
        u = _f(kt, "sub", _f(kt, "sub", _f(kt, "mul", gv, kt.const(D)), a), _f(kt, "mul", xc, b))
        return _f(kt, "mul", u, _f(kt, "mul", inv, kt.const(1 / D)))
    dx = _pointwise(kt, [(g, ident), (x2, ident), (total, row), (sq, row), (s1, row), (s2, row)], (rows, D), dtype,
                    body)
    return kt.reshape(dx, shape)


def activation_backward(kt: KernelText, name: str, params, dy: str, x: str) -> str:
    """dy * act'(x) on f32 scalars; at the kinks PyTorch's values (relu'(0) = 0, clamp' = 0 on its bounds,
    hardswish' = x / 3 + 1/2 on (-3, 3), 0 at -3 and 1 at 3, hardsigmoid' = 0 on its bounds)."""
    zero, one = kt.const(0.0), kt.const(1.0)

    def between(v, lo, hi):
        return kt.scalar("arith.andi", _cmp(kt, "ogt", v, kt.const(lo)), _cmp(kt, "olt", v, kt.const(hi)), ty="i1")
    if name == "relu":
        return _select(kt, _cmp(kt, "ogt", x, zero), dy, zero)
    if name == "leaky_relu":
        return _select(kt, _cmp(kt, "ogt", x, zero), dy, _f(kt, "mul", dy, kt.const(params[0])))
    if name == "elu":
        neg = _f(kt, "mul", dy, _f(kt, "mul", kt.scalar("math.exp", x), kt.const(params[0])))
        return _select(kt, _cmp(kt, "ogt", x, zero), dy, neg)
    if name == "clamp":
        return _select(kt, between(x, params[0], params[1]), dy, zero)
    if name == "hardsigmoid":
        t = kt.scalar("math.fma", x, kt.const(params[0]), kt.const(params[1]))
        return _select(kt, between(t, 0.0, 1.0), _f(kt, "mul", dy, kt.const(params[0])), zero)
    if name == "hardswish":
        mid = _f(kt, "mul", dy, kt.scalar("math.fma", x, kt.const(1 / 3), kt.const(0.5)))
        above = _select(kt, _cmp(kt, "oge", x, kt.const(3.0)), dy, mid)
        return _select(kt, _cmp(kt, "ole", x, kt.const(-3.0)), zero, above)
    if name in ("sigmoid", "silu"):
        s = _sigmoid(kt, x)
        ds = _f(kt, "mul", s, _f(kt, "sub", one, s))
        if name == "silu":      # s + x s (1 - s)
            ds = kt.scalar("math.fma", x, ds, s)
        return _f(kt, "mul", dy, ds)
    if name == "tanh":
        t = kt.scalar("math.tanh", x)
        return _f(kt, "mul", dy, _f(kt, "sub", one, _f(kt, "mul", t, t)))
    if name == "gelu":  # Phi(x) + x phi(x)
        cdf = _f(kt, "mul", _f(kt, "add", kt.scalar("math.erf", _f(kt, "mul", x, kt.const(1 / math.sqrt(2)))), one),
                 kt.const(0.5))
        pdf = _f(kt, "mul", kt.scalar("math.exp", _f(kt, "mul", _f(kt, "mul", x, x), kt.const(-0.5))),
                 kt.const(1 / math.sqrt(2 * math.pi)))
        return _f(kt, "mul", dy, kt.scalar("math.fma", x, pdf, cdf))
    if name == "gelu_tanh":  # d/dx 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
        beta, kappa = math.sqrt(2 / math.pi), 0.044715
        x2 = _f(kt, "mul", x, x)
        u = _f(kt, "mul", _f(kt, "mul", x, kt.scalar("math.fma", x2, kt.const(kappa), one)), kt.const(beta))
        t = kt.scalar("math.tanh", u)
        left = _f(kt, "mul", _f(kt, "add", t, one), kt.const(0.5))
        du = _f(kt, "mul", kt.scalar("math.fma", x2, kt.const(3 * kappa), one), kt.const(beta))
        right = _f(kt, "mul", _f(kt, "mul", _f(kt, "mul", x, kt.const(0.5)), _f(kt, "sub", one, _f(kt, "mul", t, t))),
                   du)
        return _f(kt, "mul", dy, _f(kt, "add", left, right))
    raise ValueError(f"no gradient for activation {name}")


def emit_activation_backward(kt, op, operands, attrs, shape, dtype):
    act, params = attrs["activation"], attrs["activation_params"]
    return elementwise(kt, operands, shape, dtype, lambda kt, xs: activation_backward(kt, act, params, *xs))


def _window_gradient(kt, attrs, shape, dtype, OH, OW, take) -> V:
    """dx over the input's `shape`: at each input position, the sum over the window taps (r, s) whose window
    (oh, ow) exists of take(kt, coords of (oh, ow) in src's layout, r * kw + s) (an f32 scalar, read with
    tensor.extract: (oh, ow) = ((ih + pt - r dh) / sh, (iw + pl - s dw) / sw) where that divides)."""
    nchw = attrs["layout"] == "NCHW"
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["strides"]
    dh, dw = attrs.get("dilations", (1, 1))
    pt, pl = attrs["padding"][:2]
    hd, wd = (2, 3) if nchw else (1, 2)

    def body(args, kt):
        idx = [_loop_index(kt, d) for d in range(4)]
        rows = [_strided_source(kt, idx[hd], pt - r * dh, sh, OH) for r in range(kh)]
        cols = [_strided_source(kt, idx[wd], pl - s * dw, sw, OW) for s in range(kw)]
        acc = kt.const(0.0)
        for r, (vh, oh) in enumerate(rows):
            for s, (vw, ow) in enumerate(cols):
                at = list(idx)
                at[hd], at[wd] = oh, ow
                hit, v = take(kt, at, r * kw + s)
                ok = kt.scalar("arith.andi", vh, vw, ty="i1")
                if hit is not None:
                    ok = kt.scalar("arith.andi", ok, hit, ty="i1")
                acc = _f(kt, "add", acc, _select(kt, ok, v, kt.const(0.0)))
        return kt.from_f32(acc, dtype)
    return kt.generic([], [], kt.empty(shape, dtype), amap(4, ["d0", "d1", "d2", "d3"]), ["parallel"] * 4, body)


def emit_max_pool2d_backward(kt, op, operands, attrs, shape, dtype):
    """The tap of each window's first maximum (row-major; padding is -inf and never wins), as an i32 tensor over
    the output; then every input position sums the dy of the windows whose maximum it is."""
    dy, x = operands
    OH, OW = _pool_geometry(x, attrs, dy.shape)[3:]
    views = _window_views(kt, x, attrs, dy.shape, -math.inf)
    ident = amap(4, ["d0", "d1", "d2", "d3"])

    def first_max(args, kt):
        best, tap = kt.to_f32(args[0], x.dtype), kt.const(0, "i32")
        for k, a in enumerate(args[1:len(views)], 1):
            v = kt.to_f32(a, x.dtype)
            above = _cmp(kt, "ogt", v, best)
            best, tap = _select(kt, above, v, best), _select_typed(kt, above, kt.const(k, "i32"), tap, "i32")
        return tap
    taps = kt.generic(views, [ident] * len(views), kt.empty(dy.shape, "i32"), ident, ["parallel"] * 4, first_max)

    def take(kt, at, k):
        hit = _cmp_typed(kt, "arith.cmpi eq", _extract(kt, taps, at), kt.const(k, "i32"), "i32")
        return hit, kt.to_f32(_extract(kt, dy, at), dy.dtype)
    return _window_gradient(kt, attrs, shape, dtype, OH, OW, take)


def emit_avg_pool2d_backward(kt, op, operands, attrs, shape, dtype):
    """dy / the window's divisor (avg_pool_divisors, a constant) over the output, then every input position sums
    it over the windows that hold the position."""
    dy = operands[0]
    nchw, H, W, OH, OW = _pool_geometry(V("", shape, dtype), attrs, dy.shape)
    inv = kt.constant_tensor((1.0 / avg_pool_divisors(H, W, OH, OW, attrs)).astype(np.float32))
    ident = amap(4, ["d0", "d1", "d2", "d3"])
    scaled = _pointwise(kt, [(dy, ident), (inv, amap(4, ["d2", "d3"] if nchw else ["d1", "d2"]))], dy.shape, "f32",
                        lambda kt, xs: _f(kt, "mul", *xs))
    return _window_gradient(kt, attrs, shape, dtype, OH, OW,
                            lambda kt, at, k: (None, _extract(kt, scaled, at)))


def emit_softmax_backward(kt, op, operands, attrs, shape, dtype):
    """softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy); the sums along the axis."""
    dy, y = operands
    R = len(shape)
    keep = [d for d in range(R) if d != attrs["axis"] % R]
    ident, km = amap(R, [f"d{i}" for i in range(R)]), amap(R, [f"d{d}" for d in keep])
    if op == "softmax_backward":
        s = _kept_reduce(kt, [dy, y], [], keep, lambda kt, f, k: _f(kt, "mul", *f))
        return _pointwise(kt, [(dy, ident), (y, ident), (s, km)], shape, dtype,
                          lambda kt, xs: _f(kt, "mul", xs[1], _f(kt, "sub", xs[0], xs[2])))
    s = _kept_reduce(kt, [dy], [], keep, lambda kt, f, k: f[0])
    return _pointwise(kt, [(dy, ident), (y, ident), (s, km)], shape, dtype,
                      lambda kt, xs: _f(kt, "sub", xs[0], _f(kt, "mul", kt.scalar("math.exp", xs[1]), xs[2])))


def _row_logsumexp(kt, logits: V) -> tuple[V, V]:
    """(max, sum of exp(x - max)) of every row of [N, C] logits, f32 [N]."""
    mx = _kept_reduce(kt, [logits], [], [0], lambda kt, f, k: f[0], "arith.maximumf", -math.inf)
    return mx, _kept_reduce(kt, [logits], [mx], [0], lambda kt, f, k: kt.scalar("math.exp", _f(kt, "sub", f[0], k[0])))


def emit_cross_entropy(kt, op, operands, attrs, shape, dtype):
    """mean over n of log(sum exp(x[n] - max[n])) + max[n] - x[n, t[n]]: one reduction over the rows into [1] (its
    loop of one the parallel one), x[n, t[n]] read with tensor.extract, t clamped into [0, C) as gather's."""
    logits, targets = operands
    N, C = logits.shape
    mx, se = _row_logsumexp(kt, logits)

    def body(args, kt):
        t = _clamped_index(kt, args[2], targets.dtype, C)
        xt = kt.to_f32(_extract(kt, logits, [_loop_index(kt, 1), t]), logits.dtype)
        loss = _f(kt, "sub", _f(kt, "add", kt.scalar("math.log", args[1]), args[0]), xt)
        return _f(kt, "add", args[3], loss)
    row = amap(2, ["d1"])
    total = kt.generic([mx, se, targets], [row] * 3, kt.filled((1,), "f32", 0.0), amap(2, ["d0"]),
                       ["parallel", "reduction"], body)
    return _pointwise(kt, [(total, amap(1, ["d0"]))], shape, dtype,
                      lambda kt, xs: _f(kt, "mul", xs[0], kt.const(1 / N)))


def emit_cross_entropy_backward(kt, op, operands, attrs, shape, dtype):
    """(softmax(x) - onehot(t)) / N [* grad_output] over [N, C]."""
    logits, targets, grad = operands
    N, C = logits.shape
    mx, se = _row_logsumexp(kt, logits)
    row = amap(2, ["d0"])
    ins, maps = [logits, mx, se, targets], [amap(2, ["d0", "d1"]), row, row, row]
    if grad is not None:
        g, gmap = _broadcast_operand(kt, grad, shape)
        ins.append(g)
        maps.append(gmap)

    def body(args, kt):
        p = _f(kt, "div", kt.scalar("math.exp", _f(kt, "sub", kt.to_f32(args[0], logits.dtype), args[1])), args[2])
        hit = _cmp_typed(kt, "arith.cmpi eq", _loop_index(kt, 1), _clamped_index(kt, args[3], targets.dtype, C),
                         "index")
        d = _f(kt, "mul", _f(kt, "sub", p, _select(kt, hit, kt.const(1.0), kt.const(0.0))), kt.const(1 / N))
        if grad is not None:
            d = _f(kt, "mul", d, kt.to_f32(args[4], grad.dtype))
        return kt.from_f32(d, dtype)
    return kt.generic(ins, maps, kt.empty(shape, dtype), amap(2, ["d0", "d1"]), ["parallel"] * 2, body)


EMITTERS = {
    "conv2d": emit_conv2d, "depthwise_pointwise": emit_depthwise_pointwise, "matmul": emit_matmul,
    "norm_matmul": emit_norm_matmul, "batch_norm": emit_batch_norm,
    "layer_norm": emit_layer_norm, "rms_norm": emit_rms_norm, "group_norm": emit_group_norm, "max_pool2d": emit_max_pool2d,
    "avg_pool2d": emit_avg_pool2d, "global_avg_pool": emit_global_avg_pool, "softmax": emit_softmax,
    "log_softmax": emit_softmax, "transpose": emit_transpose, "concat": emit_concat, "pad": emit_pad,
    "reshape": emit_reshape, "slice": emit_slice, "reduce": emit_reduce, "attention": emit_attention,
    **{n: emit_elementwise for n in ELEMENTWISE},
    "cast": emit_cast, "compare": emit_compare, "logical": emit_logical, "logical_not": emit_logical_not,
    "where": emit_where, "broadcast": emit_broadcast, "gather": emit_gather, "gather_elements": emit_gather_elements,
    "index_copy": emit_index_copy, "cumsum": emit_cumsum, "bounds_check": emit_bounds_check,
    "conv2d_backward_data": emit_conv2d_backward_data, "conv2d_backward_weights": emit_conv2d_backward_weights,
    "batch_norm_training": emit_batch_norm_training, "batch_norm_statistics": emit_batch_norm_statistics,
    "batch_norm_backward": emit_batch_norm_backward, "batch_norm_backward_sums": emit_batch_norm_backward_sums,
    "layer_norm_backward": emit_layer_norm_backward,
    "activation_backward": emit_activation_backward, "max_pool2d_backward": emit_max_pool2d_backward,
    "avg_pool2d_backward": emit_avg_pool2d_backward, "softmax_backward": emit_softmax_backward,
    "log_softmax_backward": emit_softmax_backward, "cross_entropy": emit_cross_entropy,
    "cross_entropy_backward": emit_cross_entropy_backward,
}


def scalar_op(kt: KernelText, op: str, attrs: dict, xs: list) -> str:
    """One elementwise prim op on f32 scalars."""
    if op in BINARY_OP:
        return kt.scalar(BINARY_OP[op], *xs)
    if op in UNARY_MATH_OP:
        return kt.scalar(UNARY_MATH_OP[op], xs[0])
    act, params = unary_activation(op, attrs)
    return activation(kt, act, params, xs[0])


def emit_fused(kt: KernelText, ops: list, env: dict, shape, dtype) -> V:
    """A chain of elementwise ops as ONE generic over the result shape: every external input is read
    once per output element (broadcast), every intermediate lives in a register.
    ops = [(name, attrs, operand keys, result key)]; env maps the external keys to tensors."""
    ext = [k for _, _, keys, _ in ops for k in keys if k in env]
    ext = list(dict.fromkeys(ext))
    ins, maps = zip(*[_broadcast_operand(kt, env[k], shape) for k in ext])
    R = len(shape)

    def body(args, kt):
        val = {k: kt.to_f32(a, v.dtype) for k, a, v in zip(ext, args, ins)}
        for name, attrs, keys, res in ops:
            val[res] = scalar_op(kt, name, attrs, [val[k] for k in keys])
        return kt.from_f32(val[ops[-1][3]], dtype)

    return kt.generic(list(ins), list(maps), kt.empty(shape, dtype), amap(R, [f"d{i}" for i in range(R)]),
                      ["parallel"] * R, body)

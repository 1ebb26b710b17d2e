"""The `prim` op set: one table that the IRDL file, the verifier and the frontend all derive from.

Each op lists its operands (single or optional), its attributes (every attribute is required; the
frontend fills defaults) and a shape rule.  `infer(op_name, shapes, attrs)` returns the result shape or
raises `ShapeError` whose message names the reason; callers prefix the op and the location.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from openprim.base.dtypes import DTYPES, FLOATS, INTEGERS

LAYOUTS = ("NCHW", "NHWC")
FILTER_LAYOUTS = ("KCRS", "KRSC", "RSCK")
# A blocked filter, "KRSC<b>k": [K/b, R, S, C, b], output channels in blocks of b innermost. prim-select packs
# constant filters so for the CPU implicit GEMM: a register tile's b channels of one (r, s, c) tap are one
# vector, and the whole filter slice of a tile is one contiguous stream (the hardware prefetcher follows it).
BLOCKED_FILTER = re.compile(r"KRSC(\d+)k")


# A Winograd-transformed 3x3 filter, "W<m>KC<b>k": [(m+2)^2, K/b, C, b], U = G g G^T of F(m x m, 3 x 3) for
# every (c, k), computed at compile time (in float64, rounded once) for the CPU Winograd kernel.
WINOGRAD_FILTER = re.compile(r"W(\d+)KC(\d+)k")


def filter_block(layout: str) -> int:
    """b of a blocked filter layout "KRSC<b>k", 0 for the plain ones."""
    m = BLOCKED_FILTER.fullmatch(layout)
    return int(m[1]) if m else 0


def winograd_filter(layout: str) -> tuple[int, int]:
    """(m, b) of a Winograd-transformed filter layout "W<m>KC<b>k", (0, 0) for the others."""
    m = WINOGRAD_FILTER.fullmatch(layout)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def filter_dims(layout: str, w) -> tuple[int, int, int, int]:
    """(K, C per group, R, S) of a filter of shape w in `layout`."""
    if filter_block(layout):
        return w[0] * w[4], w[3], w[1], w[2]
    if winograd_filter(layout)[0]:
        return w[1] * w[3], w[2], 3, 3
    return {"KCRS": (w[0], w[1], w[2], w[3]), "KRSC": (w[0], w[3], w[1], w[2]),
            "RSCK": (w[3], w[2], w[0], w[1])}[layout]
# Activations a conv/matmul epilogue (and the standalone ops) implement; value = number of parameters.
ACTIVATIONS = {"none": 0, "relu": 0, "leaky_relu": 1, "clamp": 2, "sigmoid": 0, "tanh": 0,
               "gelu": 0, "gelu_tanh": 0, "silu": 0, "elu": 1, "hardsigmoid": 2, "hardswish": 0}


class ShapeError(ValueError):
    """A shape or attribute that an op does not accept."""


@dataclass(frozen=True)
class OpSpec:
    name: str
    operands: tuple = ()          # (name, "single" | "optional")
    attributes: dict = field(default_factory=dict)  # name -> "i64" | "f64" | "str" | "i64s" | "f64s" | "elements"
    doc: str = ""


def _spec(name, operands=(), attributes=None, doc=""):
    ops = tuple((o, "single") if isinstance(o, str) else o for o in operands)
    return OpSpec(name, ops, attributes or {}, doc)


EPILOGUE = {"activation": "str", "activation_params": "f64s"}
CONV_ATTRS = {"strides": "i64s", "padding": "i64s", "dilations": "i64s", "groups": "i64", "layout": "str",
              "filter_layout": "str"}
POOL_ATTRS = {"max_pool2d": {"kernel": "i64s", "strides": "i64s", "padding": "i64s", "dilations": "i64s",
                             "ceil_mode": "i64", "layout": "str"},
              "avg_pool2d": {"kernel": "i64s", "strides": "i64s", "padding": "i64s", "ceil_mode": "i64",
                             "count_include_pad": "i64", "layout": "str"}}
UNARY_ATTRS = {"relu": {}, "leaky_relu": {"alpha": "f64"}, "clamp": {"min": "f64", "max": "f64"},
               "sigmoid": {}, "tanh": {}, "gelu": {"approximate": "str"}, "silu": {}, "elu": {"alpha": "f64"},
               "hardsigmoid": {"alpha": "f64", "beta": "f64"}, "hardswish": {}}
UNARY_MATH = ("exp", "log", "sqrt", "abs", "erf", "sin", "cos")    # elementwise functions without attributes
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")
REDUCE_KINDS = ("sum", "mean", "max", "min")
COMPARE_KINDS = ("eq", "ne", "lt", "le", "gt", "ge")
LOGICAL_KINDS = ("and", "or", "xor")
RHS_PANELS = 2   # matmul transpose_rhs value: the rhs is [N/NT, K, NT], NT-column panels each contiguous

OPS: dict[str, OpSpec] = {s.name: s for s in [
    _spec("constant", (), {"value": "elements"}, doc="a weight or constant tensor"),
    _spec("conv2d", ("input", "filter", ("bias", "optional"), ("residual", "optional")),
          {**CONV_ATTRS, **EPILOGUE},
          doc="y = act(conv(x, w) + bias + residual); padding = [top, left, bottom, right]"),
    _spec("depthwise_pointwise", ("input", "dw_filter", ("dw_bias", "optional"), "filter", ("bias", "optional"),
                                  ("residual", "optional")),
          {"strides": "i64s", "padding": "i64s", "dilations": "i64s", "layout": "str", "dw_activation": "str",
           "dw_activation_params": "f64s", **EPILOGUE},
          doc="MobileNet's depthwise -> pointwise pair in one op (prim-select makes it where a kernel keeps the "
              "depthwise result on chip): h = dw_act(depthwise(x, dw_filter [R, S, C]) + dw_bias), "
              "y = act(h @ filter [C, K] + bias + residual); NHWC"),
    _spec("matmul", ("lhs", "rhs", ("bias", "optional"), ("residual", "optional")),
          {"transpose_rhs": "i64", **EPILOGUE},
          doc="y = act(lhs @ rhs(^T) + bias + residual); rhs is [K,N] ([N,K] with transpose_rhs = 1; "
              "[N/NT, K, NT] panels with 2, as prim-select packs constant weights) or batched like lhs"),
    _spec("norm_matmul", ("input", ("scale", "optional"), ("shift", "optional"), "rhs", ("bias", "optional"),
                          ("residual", "optional")),
          {"norm": "str", "epsilon": "f64", **EPILOGUE},
          doc="a layer_norm or rms_norm over the last dim feeding a matmul, in one op (prim-select makes it where a "
              "GEMV kernel normalizes the rows as it reads them): y = act(norm(input) @ rhs [K, N] + bias + residual); rhs "
              "may be [N/NT, K, NT] panels, as prim-select packs constant weights"),
    _spec("batch_norm", ("input", "scale", "shift", "mean", "variance"), {"epsilon": "f64", "layout": "str"}),
    _spec("layer_norm", ("input", ("scale", "optional"), ("shift", "optional"), ("residual", "optional")),
          {"epsilon": "f64", "normalized_ndim": "i64"},
          doc="h = input + residual; y = (h - mean) / sqrt(var + eps) * scale + shift over the trailing "
              "normalized_ndim dims"),
    _spec("rms_norm", ("input", ("scale", "optional"), ("residual", "optional")),
          {"epsilon": "f64", "normalized_ndim": "i64"},
          doc="h = input + residual; y = h / sqrt(mean(h^2) + eps) * scale over the trailing normalized_ndim dims"),
    _spec("group_norm", ("input", "scale", "shift"), {"groups": "i64", "epsilon": "f64", "layout": "str"}),
    *[_spec(n, ("input",), a) for n, a in UNARY_ATTRS.items()],
    *[_spec(n, ("input",)) for n in UNARY_MATH],
    *[_spec(n, ("lhs", "rhs")) for n in BINARY],
    _spec("max_pool2d", ("input",), POOL_ATTRS["max_pool2d"]),
    _spec("avg_pool2d", ("input",), POOL_ATTRS["avg_pool2d"]),
    _spec("global_avg_pool", ("input",), {"layout": "str"}),
    _spec("softmax", ("input",), {"axis": "i64"}),
    _spec("log_softmax", ("input",), {"axis": "i64"}),
    _spec("reshape", ("input",), doc="the result type carries the new shape"),
    _spec("transpose", ("input",), {"perm": "i64s"}),
    # Binary: IRDL 22 binds one type to a variadic operand group, so concat of n inputs is a chain.
    _spec("concat", ("lhs", "rhs"), {"axis": "i64"}),
    _spec("pad", ("input",), {"pads": "i64s", "value": "f64"}, doc="pads = [begin..., end...]"),
    _spec("slice", ("input",), {"starts": "i64s", "ends": "i64s", "steps": "i64s"},
          doc="out[i] = x[starts + i * steps] on every axis: 0 <= start < end <= size, steps >= 1"),
    _spec("reduce", ("input",), {"kind": "str", "axes": "i64s", "keepdims": "i64"},
          doc="sum, mean, max or min over axes; keepdims = 1 keeps them as size 1"),
    _spec("attention", ("query", "key", "value", ("mask", "optional")),
          {"scale": "f64", "causal": "i64", "layout": "str"},
          doc="softmax(scale * q @ k^T + mask [+ causal: -inf where key > query index]) @ v per batch and head; "
              "layout BHSD: q [B,H,Sq,D], k/v [B,H,Sk,D]; BSHD: q [B,Sq,H,D], k/v [B,Sk,H,D] (the heads "
              "of a projection, untransposed); the result is shaped like q; mask broadcastable to [B,H,Sq,Sk], "
              "or [P,..] with P dividing B tiling the batch (batch b reads mask[b mod P]: Swin's P windows per "
              "image)"),
    _spec("cast", ("input",), doc="the input's values in the result's element type (float -> int truncates toward "
                                  "zero, anything -> bool is != 0)"),
    _spec("compare", ("lhs", "rhs"), {"kind": "str"},
          doc="lhs <kind> rhs elementwise with broadcasting (eq, ne, lt, le, gt, ge): a bool tensor"),
    _spec("logical", ("lhs", "rhs"), {"kind": "str"}, doc="and, or, xor of two bool tensors, broadcasting"),
    _spec("logical_not", ("input",), doc="not of a bool tensor"),
    _spec("where", ("condition", "lhs", "rhs"), doc="condition ? lhs : rhs elementwise, the three broadcast"),
    _spec("broadcast", ("input",), doc="the input broadcast (numpy rules) to the result type's shape"),
    _spec("gather", ("input", "indices"), {"axis": "i64"},
          doc="out[a.., i.., b..] = input[a.., indices[i..], b..] (ONNX Gather, an embedding lookup on axis 0); "
              "an index in [-size, 0) counts from the end, one out of range is read as the nearest in range and "
              "reported by the plan's bounds_check"),
    _spec("gather_elements", ("input", "indices"), {"axis": "i64"},
          doc="out[i] = input[i with its axis coordinate replaced by indices[i]] (torch.gather); indices are "
              "shaped like the result"),
    _spec("index_copy", ("input", "indices", "updates"), {"axis": "i64"},
          doc="the input with out[a.., indices[j], b..] = updates[a.., j, b..] along axis (torch.index_copy: a KV "
              "cache written at its positions); indices 1-d, updates shaped like the input with len(indices) on "
              "the axis; an index out of range writes nothing and is reported by the plan's bounds_check"),
    _spec("cumsum", ("input",), {"axis": "i64", "exclusive": "i64", "reverse": "i64"},
          doc="running sums along axis (exclusive: without the element itself; reverse: from the end)"),
    _spec("bounds_check", ("indices",), {"size": "i64"},
          doc="the number of indices outside [-size, size), a 1-element i32 tensor the runtime reads after a run"),
    # Training (issue 31): the gradients of the forward ops, one result each like every prim op. The attributes
    # repeat the forward's; where the forward's result does not determine a shape (a stride > 1 leaves the
    # input's size open, the filter's size is not in grad_output) an attribute gives it.
    _spec("conv2d_backward_data", ("grad_output", "filter"), {**CONV_ATTRS, "input_size": "i64s"},
          doc="grad_input of conv2d: dx[n, c, ih, iw] = sum of dy[n, k, oh, ow] * w[k, c, r, s] over the (k, r, s) of "
              "c's group with oh * sh + r * dh - pt = ih (likewise w); input_size = the forward input's [H, W]"),
    _spec("conv2d_backward_weights", ("input", "grad_output"), {**CONV_ATTRS, "filter_size": "i64s"},
          doc="grad_filter of conv2d: dw[k, c, r, s] = sum over n, oh, ow of dy[n, k, oh, ow] * "
              "x_padded[n, c, oh * sh + r * dh, ow * sw + s * dw] within k's group; filter_size = [R, S], the result "
              "in filter_layout"),
    _spec("batch_norm_training", ("input", "scale", "shift"), {"epsilon": "f64", "layout": "str"},
          doc="y = (x - mean) / sqrt(var + eps) * scale + shift with the batch's statistics per channel: mean and "
              "biased variance over N, H, W"),
    _spec("batch_norm_statistics", ("input",), {"epsilon": "f64", "layout": "str"},
          doc="the batch's statistics per channel as one [2, C] tensor: row 0 the mean over N, H, W, row 1 the "
              "inverse standard deviation 1 / sqrt(biased var + eps) (what batch_norm_backward takes); one op for the "
              "two, as a prim op has one result and both come out of the same passes over the input"),
    _spec("batch_norm_backward", ("grad_output", "input", "scale", "saved_mean", "saved_inv_std", ("sums", "optional")),
          {"layout": "str"},
          doc="grad_input of batch_norm_training: dx = scale * inv_std / M * (M dy - sum(dy) - xhat sum(dy xhat)), "
              "xhat = (x - saved_mean) * saved_inv_std, the sums over the M = N H W values of a channel; with sums "
              "(batch_norm_backward_sums of the same operands, made for the scale and shift gradients) they are "
              "read from it, not summed again: one pass over dy and x"),
    _spec("batch_norm_backward_sums", ("grad_output", "input", "saved_mean"), {"layout": "str"},
          doc="the two sums per channel that batch norm's scale and shift gradients are, as one [2, C] tensor: row 0 "
              "sum(dy), row 1 sum(dy (x - saved_mean)) over N, H, W (times saved_inv_std: the scale's gradient); one "
              "pass over dy and x for both, as batch_norm_backward makes them for grad_input"),
    _spec("layer_norm_backward", ("grad_output", "input", ("scale", "optional")),
          {"epsilon": "f64", "normalized_ndim": "i64"},
          doc="grad_input of layer_norm over the trailing normalized_ndim dims (D values, the statistics recomputed): "
              "g = dy * scale, dx = inv_std / D * (D g - sum(g) - xhat sum(g xhat))"),
    _spec("activation_backward", ("grad_output", "input"), EPILOGUE,
          doc="dy * act'(x) for the epilogue activations (relu6 is clamp 0..6, gelu_tanh the tanh form); at the "
              "kinks PyTorch's choice: relu'(0) = 0, clamp' = 0 at and outside the bounds, hardswish' = x/3 + 1/2 "
              "on (-3, 3), 0 at -3, 1 at 3"),
    _spec("max_pool2d_backward", ("grad_output", "input"), POOL_ATTRS["max_pool2d"],
          doc="grad_input of max_pool2d: each window's dy goes to the first maximum of the window (row-major, "
              "padding never wins), summed where windows overlap"),
    _spec("avg_pool2d_backward", ("grad_output",), {**POOL_ATTRS["avg_pool2d"], "input_size": "i64s"},
          doc="grad_input of avg_pool2d: each window's dy / its divisor (count_include_pad and ceil_mode as the "
              "forward) to every input position of the window; input_size = the forward input's [H, W] (the values "
              "of the input are not needed)"),
    _spec("softmax_backward", ("grad_output", "output"), {"axis": "i64"},
          doc="grad_input of softmax from its output y: dx = y * (dy - sum(dy * y)) along axis"),
    _spec("log_softmax_backward", ("grad_output", "output"), {"axis": "i64"},
          doc="grad_input of log_softmax from its output y: dx = dy - exp(y) * sum(dy) along axis"),
    _spec("cross_entropy", ("logits", "targets"),
          doc="the mean over the N rows of logsumexp(logits[n]) - logits[n, targets[n]]: logits [N, C], integer "
              "targets [N] (a class index, read as the nearest in range when out of it), result [1]"),
    _spec("cross_entropy_backward", ("logits", "targets", ("grad_output", "optional")),
          doc="grad_logits of cross_entropy: (softmax(logits) - onehot(targets)) / N, times grad_output [1] when "
              "given"),
]}
ELEMENTWISE = frozenset(UNARY_ATTRS) | frozenset(UNARY_MATH) | frozenset(BINARY)
# Ops that move or select elements without computing on them: any dtype (their result's is the input's).
DATA_MOVEMENT = frozenset({"constant", "reshape", "transpose", "concat", "pad", "slice", "broadcast", "gather",
                           "gather_elements", "index_copy"})
# Arithmetic that integers take too (exactly, in their own type; integer div is floor division).
INTEGER_ARITHMETIC = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "cumsum"})


def _need(cond, msg):
    if not cond:
        raise ShapeError(msg)


def fmt_shape(shape):
    return "x".join(map(str, shape)) if shape else "scalar"


def broadcast(a, b):
    """numpy broadcasting of two shapes."""
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        _need(x == y or x == 1 or y == 1, f"shapes {fmt_shape(a)} and {fmt_shape(b)} do not broadcast")
        out.append(max(x, y))
    return tuple(reversed(out))


def _pair(attrs, key, n, positive=True):
    v = tuple(attrs[key])
    _need(len(v) == n, f"'{key}' needs {n} values, got {len(v)}")
    _need(all(x > 0 for x in v) if positive else all(x >= 0 for x in v),
          f"'{key}' must be {'positive' if positive else 'non-negative'}, got {list(v)}")
    return v


def _layout(attrs, rank4):
    lay = attrs["layout"]
    _need(lay in LAYOUTS, f"layout must be one of {LAYOUTS}, got '{lay}'")
    _need(len(rank4) == 4, f"expects a 4-d {lay} input, got {fmt_shape(rank4)}")
    n, c, h, w = (rank4[0], rank4[1], rank4[2], rank4[3]) if lay == "NCHW" else \
        (rank4[0], rank4[3], rank4[1], rank4[2])
    return n, c, h, w


def _nchw_out(lay, n, c, h, w):
    return (n, c, h, w) if lay == "NCHW" else (n, h, w, c)


def window_out(size, k, s, p0, p1, d=1, ceil=False):
    """Output length of a sliding window (PyTorch rules, incl. ceil_mode's last-window clip)."""
    span = size + p0 + p1 - d * (k - 1) - 1
    _need(span >= 0, f"window {k} (dilation {d}) is larger than the padded input {size + p0 + p1}")
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + p0:
        out -= 1
    return out


def _check_activation(attrs):
    act = attrs["activation"]
    _need(act in ACTIVATIONS, f"unknown activation '{act}'; expected one of {sorted(ACTIVATIONS)}")
    _need(len(attrs["activation_params"]) == ACTIVATIONS[act],
          f"activation '{act}' takes {ACTIVATIONS[act]} parameters, got {len(attrs['activation_params'])}")


def _conv2d(shapes, attrs):
    x, w = shapes[0], shapes[1]
    n, c, h, wd = _layout(attrs, x)
    fl = attrs["filter_layout"]
    block, (wm, wb) = filter_block(fl), winograd_filter(fl)
    _need(fl in FILTER_LAYOUTS or block or wm, f"filter_layout must be one of {FILTER_LAYOUTS}, got '{fl}'")
    _need(len(w) == (5 if block else 4), f"expects a {5 if block else 4}-d {fl} filter, got {fmt_shape(w)}")
    _need(not block or w[4] == block, f"a {fl} filter has blocks of {block} output channels, got {fmt_shape(w)}")
    _need(not wm or (w[0] == (wm + 2) ** 2 and w[3] == wb), f"a {fl} filter is [{(wm + 2) ** 2}, K/{wb}, C, {wb}], "
          f"got {fmt_shape(w)}")
    k, cg, r, s = filter_dims(fl, w)
    g = attrs["groups"]
    _need(g >= 1 and c % g == 0 and k % g == 0,
          f"groups={g} must divide input channels {c} and output channels {k}")
    _need(cg * g == c, f"filter has {cg} channels per group but input has {c} channels in {g} groups")
    sh, sw = _pair(attrs, "strides", 2)
    dh, dw = _pair(attrs, "dilations", 2)
    pt, pl, pb, pr = _pair(attrs, "padding", 4, positive=False)
    oh, ow = window_out(h, r, sh, pt, pb, dh), window_out(wd, s, sw, pl, pr, dw)
    out = _nchw_out(attrs["layout"], n, k, oh, ow)
    _epilogue(shapes[2], shapes[3], attrs, out, k)
    return out


def _epilogue(bias, residual, attrs, out, channels):
    _check_activation(attrs)
    _need(bias is None or tuple(bias) == (channels,), f"bias must have shape {channels}, got {fmt_shape(bias or ())}")
    _need(residual is None or tuple(residual) == tuple(out),
          f"residual must have the output shape {fmt_shape(out)}, got {fmt_shape(residual or ())}")


def _depthwise_pointwise(shapes, attrs):
    x, dw, dw_bias, w = shapes[:4]
    _need(attrs["layout"] == "NHWC", f"layout must be NHWC, got '{attrs['layout']}'")
    n, c, h, wd = _layout(attrs, x)
    _need(len(dw) == 3 and dw[2] == c, f"dw_filter must be [R, S, {c}], got {fmt_shape(dw)}")
    _need(dw_bias is None or tuple(dw_bias) == (c,), f"dw_bias must have shape {c}, got {fmt_shape(dw_bias or ())}")
    _need(len(w) == 2 and w[0] == c, f"filter must be [{c}, K], got {fmt_shape(w)}")
    _check_activation({"activation": attrs["dw_activation"], "activation_params": attrs["dw_activation_params"]})
    sh, sw = _pair(attrs, "strides", 2)
    dh, dwl = _pair(attrs, "dilations", 2)
    pt, pl, pb, pr = _pair(attrs, "padding", 4, positive=False)
    out = (n, window_out(h, dw[0], sh, pt, pb, dh), window_out(wd, dw[1], sw, pl, pr, dwl), w[1])
    _epilogue(shapes[4], shapes[5], attrs, out, w[1])
    return out


def _matmul(shapes, attrs):
    a, b = shapes[0], shapes[1]
    _need(len(a) >= 2 and len(b) >= 2, f"operands must have rank >= 2, got {fmt_shape(a)} and {fmt_shape(b)}")
    if attrs["transpose_rhs"] == RHS_PANELS:
        _need(len(b) == 3, f"a panel-packed rhs must be [N/NT, K, NT], got {fmt_shape(b)}")
        _need(a[-1] == b[1], f"contraction sizes differ: {fmt_shape(a)} @ panels {fmt_shape(b)}")
        out = tuple(a[:-1]) + (b[0] * b[2],)
        _epilogue(shapes[2], shapes[3], attrs, out, out[-1])
        return out
    kb, nb = (b[-1], b[-2]) if attrs["transpose_rhs"] else (b[-2], b[-1])
    _need(a[-1] == kb, f"contraction sizes differ: {fmt_shape(a)} @ {fmt_shape(b)}"
          + (" (rhs transposed)" if attrs["transpose_rhs"] else ""))
    _need(len(b) == 2 or tuple(b[:-2]) == tuple(a[:-2]),
          f"batched rhs {fmt_shape(b)} must have the batch dims of lhs {fmt_shape(a)}")
    out = tuple(a[:-1]) + (nb,)
    _epilogue(shapes[2], shapes[3], attrs, out, nb)
    return out


def _channel_vec(shapes, c, names):
    for shp, nm in zip(shapes, names):
        _need(tuple(shp) == (c,), f"{nm} must have shape {c}, got {fmt_shape(shp)}")


def _batch_norm(shapes, attrs):
    n, c, h, w = _layout(attrs, shapes[0])
    _channel_vec(shapes[1:], c, ("scale", "shift", "mean", "variance"))
    _need(attrs["epsilon"] >= 0, "epsilon must be non-negative")
    return tuple(shapes[0])


def _layer_norm(shapes, attrs):
    """layer_norm and rms_norm: the parameters have the normalized shape, the residual the input's."""
    x, k, residual = shapes[0], attrs["normalized_ndim"], shapes[-1]
    _need(1 <= k <= len(x), f"normalized_ndim={k} must be in [1, {len(x)}] for input {fmt_shape(x)}")
    _need(attrs["epsilon"] >= 0, "epsilon must be non-negative")
    for shp in filter(None, shapes[1:-1]):
        _need(tuple(shp) == tuple(x[-k:]), f"scale/shift must have shape {fmt_shape(x[-k:])}, got {fmt_shape(shp)}")
    _need(residual is None or tuple(residual) == tuple(x),
          f"residual must have the input shape {fmt_shape(x)}, got {fmt_shape(residual or ())}")
    return tuple(x)


NORM_KINDS = ("layer_norm", "rms_norm")


def _norm_matmul(shapes, attrs):
    x, scale, shift, w = shapes[:4]
    _need(attrs["norm"] in NORM_KINDS, f"norm must be one of {', '.join(NORM_KINDS)}, got '{attrs['norm']}'")
    _need(attrs["norm"] == "layer_norm" or shift is None, "rms_norm has no shift")
    _layer_norm([x, scale, shift, None], {"epsilon": attrs["epsilon"], "normalized_ndim": 1})
    _need(len(w) == 2 and w[0] == x[-1] or len(w) == 3 and w[1] == x[-1],
          f"rhs must be [{x[-1]}, N] (or [N/NT, {x[-1]}, NT] panels), got {fmt_shape(w)}")
    out = tuple(x[:-1]) + (w[-1] * (w[0] if len(w) == 3 else 1),)
    _epilogue(shapes[4], shapes[5], attrs, out, out[-1])
    return out


def _group_norm(shapes, attrs):
    n, c, h, w = _layout(attrs, shapes[0])
    g = attrs["groups"]
    _need(g >= 1 and c % g == 0, f"groups={g} must divide the {c} channels")
    _channel_vec(shapes[1:], c, ("scale", "shift"))
    return tuple(shapes[0])


def _pool(shapes, attrs):
    n, c, h, w = _layout(attrs, shapes[0])
    kh, kw = _pair(attrs, "kernel", 2)
    sh, sw = _pair(attrs, "strides", 2)
    dh, dw = _pair(attrs, "dilations", 2) if "dilations" in attrs else (1, 1)
    pt, pl, pb, pr = _pair(attrs, "padding", 4, positive=False)
    _need(max(pt, pb) <= kh // 2 and max(pl, pr) <= kw // 2,
          f"padding {[pt, pl, pb, pr]} must be at most half the kernel {[kh, kw]}")
    ceil = bool(attrs["ceil_mode"])
    return _nchw_out(attrs["layout"], n, c, window_out(h, kh, sh, pt, pb, dh, ceil),
                     window_out(w, kw, sw, pl, pr, dw, ceil))


def _axis(attrs, rank, key="axis"):
    a = attrs[key]
    _need(-rank <= a < rank, f"{key}={a} is out of range for rank {rank}")
    return a % rank


def _transpose(shapes, attrs):
    x, perm = shapes[0], list(attrs["perm"])
    _need(sorted(perm) == list(range(len(x))), f"perm {perm} is not a permutation of {len(x)} dims")
    return tuple(x[p] for p in perm)


def _concat(shapes, attrs):
    ax = _axis(attrs, len(shapes[0]))
    for shp in shapes[1:]:
        _need(len(shp) == len(shapes[0]) and all(a == b for i, (a, b) in enumerate(zip(shp, shapes[0])) if i != ax),
              f"inputs {', '.join(fmt_shape(s) for s in shapes)} differ outside axis {ax}")
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    return tuple(out)


def _pad(shapes, attrs):
    x, pads = shapes[0], list(attrs["pads"])
    _need(len(pads) == 2 * len(x), f"pads needs {2 * len(x)} values for rank {len(x)}, got {len(pads)}")
    _need(all(p >= 0 for p in pads), f"pads must be non-negative, got {pads}")
    return tuple(d + pads[i] + pads[i + len(x)] for i, d in enumerate(x))


def _slice(shapes, attrs):
    x = shapes[0]
    starts, ends, steps = (list(attrs[k]) for k in ("starts", "ends", "steps"))
    _need(len(starts) == len(ends) == len(steps) == len(x),
          f"starts, ends and steps need {len(x)} values each (one per axis), got {len(starts)}, {len(ends)} and "
          f"{len(steps)}")
    _need(all(s >= 1 for s in steps), f"steps must be positive, got {steps}")
    for ax, (d, b, e) in enumerate(zip(x, starts, ends)):
        _need(0 <= b < e <= d, f"axis {ax} of size {d}: needs 0 <= start < end <= {d}, got start {b}, end {e}")
    return tuple(-(-(e - b) // s) for b, e, s in zip(starts, ends, steps))


def _reduce(shapes, attrs):
    x, kind, axes = shapes[0], attrs["kind"], list(attrs["axes"])
    _need(kind in REDUCE_KINDS, f"kind must be one of {REDUCE_KINDS}, got '{kind}'")
    _need(bool(axes), "axes must not be empty")
    _need(all(-len(x) <= a < len(x) for a in axes), f"axes {axes} are out of range for rank {len(x)}")
    reduced = {a % len(x) for a in axes}
    _need(len(reduced) == len(axes), f"axes {axes} name an axis twice")
    _need(attrs["keepdims"] in (0, 1), f"keepdims must be 0 or 1, got {attrs['keepdims']}")
    if attrs["keepdims"]:
        return tuple(1 if i in reduced else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in reduced)


def _unary(shapes, attrs):
    if "approximate" in attrs:
        _need(attrs["approximate"] in ("none", "tanh"), f"approximate must be 'none' or 'tanh', got '{attrs['approximate']}'")
    return tuple(shapes[0])


def _global_pool(shapes, attrs):
    n, c, h, w = _layout(attrs, shapes[0])
    return _nchw_out(attrs["layout"], n, c, 1, 1)


def _softmax(shapes, attrs):
    _axis(attrs, len(shapes[0]))
    return tuple(shapes[0])


ATTENTION_LAYOUTS = ("BHSD", "BSHD")


def attention_dims(shape, layout: str) -> tuple[int, int, int, int]:
    """(B, H, S, D) of an attention operand of `shape` in `layout`."""
    b, x, y, d = shape
    return (b, x, y, d) if layout == "BHSD" else (b, y, x, d)


def _attention(shapes, attrs):
    q, k, v, mask = shapes
    layout = attrs["layout"]
    _need(layout in ATTENTION_LAYOUTS, f"layout must be one of {', '.join(ATTENTION_LAYOUTS)}, got {layout!r}")
    _need(len(q) == 4 and len(k) == 4 and len(v) == 4,
          f"query, key and value must be 4-d [{', '.join(layout)}], got {fmt_shape(q)}, "
          f"{fmt_shape(k)} and {fmt_shape(v)}")
    _need(tuple(k) == tuple(v), f"key {fmt_shape(k)} and value {fmt_shape(v)} must have the same shape")
    (b, h, sq, d), (kb, kh, sk, kd) = attention_dims(q, layout), attention_dims(k, layout)
    _need((b, h, d) == (kb, kh, kd),
          f"query {fmt_shape(q)} and key {fmt_shape(k)} must agree in batch, heads and head dim")
    _need(attrs["causal"] in (0, 1), f"causal must be 0 or 1, got {attrs['causal']}")
    scores = (b, h, sq, sk)
    if mask is not None:
        fits = len(mask) <= 4 and all(m in (1, s) for m, s in zip(reversed(mask), reversed(scores)))
        tiled = len(mask) == 4 and mask[0] > 0 and b % mask[0] == 0 and \
            all(m in (1, s) for m, s in zip(mask[1:], scores[1:]))
        _need(fits or tiled, f"mask {fmt_shape(mask)} does not broadcast to the scores {fmt_shape(scores)} "
                             f"(nor tile their batch: a first dim dividing {b})")
    return tuple(q)


def _same_shape(shapes, attrs):
    return tuple(shapes[0])


def _kinds(kinds):
    """The shape rule of a binary op with a `kind` out of kinds."""
    def rule(shapes, attrs):
        _need(attrs["kind"] in kinds, f"kind must be one of {kinds}, got '{attrs['kind']}'")
        return broadcast(shapes[0], shapes[1])
    return rule


def _axis(attrs, rank, what="axis"):
    axis = attrs["axis"]
    _need(-rank <= axis < rank, f"{what} {axis} is out of range for a rank-{rank} input")
    return axis % rank


def _gather(shapes, attrs):
    x, idx = shapes
    axis = _axis(attrs, len(x))
    return tuple(x[:axis]) + tuple(idx) + tuple(x[axis + 1:])


def _index_copy(shapes, attrs):
    x, idx, upd = shapes
    axis = _axis(attrs, len(x))
    _need(len(idx) == 1, f"indices must be 1-d, got {fmt_shape(idx)}")
    want = tuple(x[:axis]) + tuple(idx) + tuple(x[axis + 1:])
    _need(tuple(upd) == want, f"updates {fmt_shape(upd)} must be {fmt_shape(want)}: the input's shape with the "
                              f"indices' length on axis {axis}")
    return tuple(x)


def _gather_elements(shapes, attrs):
    x, idx = shapes
    axis = _axis(attrs, len(x))
    _need(len(idx) == len(x), f"indices {fmt_shape(idx)} must have the input's rank {len(x)}")
    _need(all(i <= d for a, (i, d) in enumerate(zip(idx, x)) if a != axis),
          f"indices {fmt_shape(idx)} exceed the input {fmt_shape(x)} off the axis {axis}")
    return tuple(idx)


def _cumsum(shapes, attrs):
    _axis(attrs, len(shapes[0]))
    return tuple(shapes[0])


def _bounds_check(shapes, attrs):
    _need(attrs["size"] > 0, f"size must be positive, got {attrs['size']}")
    return (1,)


def _where(shapes, attrs):
    return broadcast(broadcast(shapes[0], shapes[1]), shapes[2])


# ----------------------------------------------------------------------------- training: the backward ops
def _same_as(shapes, names):
    """Operands that must have the first one's shape (a gradient and the tensor it is the gradient of)."""
    for shp, nm in zip(shapes[1:], names[1:]):
        _need(tuple(shp) == tuple(shapes[0]), f"{nm} {fmt_shape(shp)} must have the shape of {names[0]} "
              f"{fmt_shape(shapes[0])}")


def _conv_window(attrs, h, w, r, s, oh, ow, what):
    """The forward's window attributes checked; that an h x w input gives the oh x ow output."""
    sh, sw = _pair(attrs, "strides", 2)
    dh, dw = _pair(attrs, "dilations", 2)
    pt, pl, pb, pr = _pair(attrs, "padding", 4, positive=False)
    want = (window_out(h, r, sh, pt, pb, dh), window_out(w, s, sw, pl, pr, dw))
    _need(want == (oh, ow), f"grad_output is {oh}x{ow} but {what} gives a {want[0]}x{want[1]} output")


def _plain_filter_layout(attrs):
    fl = attrs["filter_layout"]
    _need(fl in FILTER_LAYOUTS, f"filter_layout must be one of {FILTER_LAYOUTS}, got '{fl}'")
    return fl


def _conv2d_backward_data(shapes, attrs):
    dy, w = shapes
    n, k, oh, ow = _layout(attrs, dy)
    fl = _plain_filter_layout(attrs)
    _need(len(w) == 4, f"expects a 4-d {fl} filter, got {fmt_shape(w)}")
    fk, cg, r, s = filter_dims(fl, w)
    _need(fk == k, f"grad_output has {k} channels but the filter has {fk} output channels")
    g = attrs["groups"]
    _need(g >= 1 and k % g == 0, f"groups={g} must divide the output channels {k}")
    h, wd = _pair(attrs, "input_size", 2)
    _conv_window(attrs, h, wd, r, s, oh, ow, f"a {h}x{wd} input (input_size) with a {r}x{s} filter")
    return _nchw_out(attrs["layout"], n, cg * g, h, wd)


def _conv2d_backward_weights(shapes, attrs):
    x, dy = shapes
    n, c, h, wd = _layout(attrs, x)
    dn, k, oh, ow = _layout(attrs, dy)
    _need(dn == n, f"grad_output has batch {dn} but the input has {n}")
    fl = _plain_filter_layout(attrs)
    g = attrs["groups"]
    _need(g >= 1 and c % g == 0 and k % g == 0, f"groups={g} must divide input channels {c} and output channels {k}")
    r, s = _pair(attrs, "filter_size", 2)
    _conv_window(attrs, h, wd, r, s, oh, ow, f"the {h}x{wd} input with a {r}x{s} filter (filter_size)")
    return {"KCRS": (k, c // g, r, s), "KRSC": (k, r, s, c // g), "RSCK": (r, s, c // g, k)}[fl]


def _batch_norm_training(shapes, attrs):
    n, c, h, w = _layout(attrs, shapes[0])
    _channel_vec(shapes[1:], c, ("scale", "shift"))
    _need(attrs["epsilon"] >= 0, "epsilon must be non-negative")
    return tuple(shapes[0])


def _batch_norm_statistics(shapes, attrs):
    n, c, h, w = _layout(attrs, shapes[0])
    _need(attrs["epsilon"] >= 0, "epsilon must be non-negative")
    return (2, c)


def _batch_norm_backward(shapes, attrs):
    _same_as(shapes[:2], ("grad_output", "input"))
    n, c, h, w = _layout(attrs, shapes[1])
    _channel_vec(shapes[2:5], c, ("scale", "saved_mean", "saved_inv_std"))
    if len(shapes) > 5 and shapes[5] is not None:
        _need(tuple(shapes[5]) == (2, c), f"sums must have shape 2x{c}, got {fmt_shape(shapes[5])}")
    return tuple(shapes[1])


def _batch_norm_backward_sums(shapes, attrs):
    _same_as(shapes[:2], ("grad_output", "input"))
    n, c, h, w = _layout(attrs, shapes[1])
    _channel_vec(shapes[2:], c, ("saved_mean",))
    return (2, c)


def _layer_norm_backward(shapes, attrs):
    _same_as(shapes[:2], ("grad_output", "input"))
    return _layer_norm([shapes[1], shapes[2], None], attrs)


def _activation_backward(shapes, attrs):
    _same_as(shapes, ("grad_output", "input"))
    _check_activation(attrs)
    _need(attrs["activation"] != "none", "activation must not be 'none' (its gradient is grad_output)")
    return tuple(shapes[1])


def _pool_backward(shapes, attrs, x):
    """The forward pool's rules on an input of shape x; that grad_output has its result's shape."""
    out = _pool([x], attrs)
    _need(tuple(shapes[0]) == tuple(out), f"grad_output {fmt_shape(shapes[0])} must have the pool's output shape "
          f"{fmt_shape(out)} (input {fmt_shape(x)})")
    return tuple(x)


def _max_pool2d_backward(shapes, attrs):
    return _pool_backward(shapes, attrs, tuple(shapes[1]))


def _avg_pool2d_backward(shapes, attrs):
    n, c, _, _ = _layout(attrs, shapes[0])
    h, w = _pair(attrs, "input_size", 2)
    return _pool_backward(shapes, attrs, _nchw_out(attrs["layout"], n, c, h, w))


def _softmax_backward(shapes, attrs):
    _same_as(shapes, ("grad_output", "output"))
    _axis(attrs, len(shapes[0]))
    return tuple(shapes[0])


def _cross_entropy(shapes, attrs):
    logits, targets = shapes[:2]
    _need(len(logits) == 2, f"logits must be 2-d [N, C], got {fmt_shape(logits)}")
    _need(tuple(targets) == (logits[0],), f"targets must be [{logits[0]}] (one class per row of the logits), "
          f"got {fmt_shape(targets)}")
    if len(shapes) > 2:   # cross_entropy_backward
        _need(shapes[2] is None or tuple(shapes[2]) == (1,), f"grad_output must be [1] (the loss's gradient), "
              f"got {fmt_shape(shapes[2] or ())}")
        return tuple(logits)
    return (1,)


_RULES = {
    "conv2d": _conv2d, "depthwise_pointwise": _depthwise_pointwise, "matmul": _matmul, "norm_matmul": _norm_matmul,
    "batch_norm": _batch_norm, "layer_norm": _layer_norm,
    "rms_norm": _layer_norm, "group_norm": _group_norm, "max_pool2d": _pool, "avg_pool2d": _pool,
    "global_avg_pool": _global_pool,
    "softmax": _softmax, "log_softmax": _softmax, "transpose": _transpose, "concat": _concat, "pad": _pad,
    "slice": _slice, "reduce": _reduce, "attention": _attention,
    **{n: _unary for n in (*UNARY_ATTRS, *UNARY_MATH)},
    **{n: (lambda shapes, attrs: broadcast(shapes[0], shapes[1])) for n in BINARY},
    "cast": _same_shape, "logical_not": _same_shape, "compare": _kinds(COMPARE_KINDS), "logical": _kinds(LOGICAL_KINDS), "where": _where,
    "gather": _gather, "gather_elements": _gather_elements, "index_copy": _index_copy, "cumsum": _cumsum, "bounds_check": _bounds_check,
    "conv2d_backward_data": _conv2d_backward_data, "conv2d_backward_weights": _conv2d_backward_weights,
    "batch_norm_training": _batch_norm_training, "batch_norm_statistics": _batch_norm_statistics,
    "batch_norm_backward": _batch_norm_backward, "batch_norm_backward_sums": _batch_norm_backward_sums,
    "layer_norm_backward": _layer_norm_backward,
    "activation_backward": _activation_backward, "max_pool2d_backward": _max_pool2d_backward,
    "avg_pool2d_backward": _avg_pool2d_backward, "softmax_backward": _softmax_backward,
    "log_softmax_backward": _softmax_backward, "cross_entropy": _cross_entropy,
    "cross_entropy_backward": _cross_entropy,
}


def infer_dtype(name: str, dtypes: list, attrs) -> str | None:
    """The result dtype of op `name` over its operand dtypes (None for an absent optional), or ShapeError
    naming why they do not fit. None for `cast` and `constant`, whose result type says it."""
    given = [d for d in dtypes if d is not None]
    if name in ("cast", "constant"):
        return None
    if name == "where":
        _need(given[0] == "bool", f"the condition must be bool, got {given[0]}")
        _need(given[1] == given[2], f"lhs and rhs mix dtypes {given[1]} and {given[2]}")
        return given[1]
    if name in ("gather", "gather_elements", "index_copy"):
        _need(given[1] in INTEGERS, f"indices must be integers ({', '.join(INTEGERS)}), got {given[1]}")
        if name == "index_copy":
            _need(given[2] == given[0], f"updates must be {given[0]} like the input, got {given[2]}")
        return given[0]
    if name == "bounds_check":
        _need(given[0] in INTEGERS, f"indices must be integers ({', '.join(INTEGERS)}), got {given[0]}")
        return "i32"
    if name in ("cross_entropy", "cross_entropy_backward"):
        _need(given[0] in FLOATS, f"logits must be float ({', '.join(FLOATS)}), got {given[0]}")
        _need(given[1] in INTEGERS, f"targets must be integers ({', '.join(INTEGERS)}), got {given[1]}")
        _need(len(given) < 3 or given[2] == given[0],
              f"grad_output must be {given[0]} like the logits, got {given[-1]}")
        return given[0]
    _need(len(set(given)) == 1, f"operands mix dtypes {', '.join(sorted(set(given)))}")
    dtype = given[0]
    if name == "compare":
        return "bool"
    if name in ("logical", "logical_not"):
        _need(dtype == "bool", f"operands must be bool, got {dtype}")
        return "bool"
    if name in DATA_MOVEMENT or (name in INTEGER_ARITHMETIC and dtype in INTEGERS):
        return dtype
    _need(dtype in FLOATS, f"takes float tensors ({', '.join(FLOATS)}), got {dtype}: cast the operand first")
    return dtype


def infer(name: str, shapes, attrs) -> tuple:
    """Result shape of op `name` (without the 'prim.' prefix) or ShapeError.

    `shapes` follows the op's operand list, None for an absent optional operand."""
    return _RULES[name](shapes, attrs)


def numel(shape) -> int:
    return math.prod(shape)

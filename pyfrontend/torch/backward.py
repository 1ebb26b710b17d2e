"""The aten ops of training graphs (issue 31), mapped to the Graph's backward ops: handlers of the torch importer
(pyfrontend/torch/importer.py), which this module adds to its `_HANDLERS` when it is imported (the package's
__init__ imports it, so any import of the importer has them).

AOTAutograd (torch.compile with gradients: driver/torch_backend.py) splits a model's joint graph into a forward
and a backward fx graph of aten ops; pyfrontend/torch/aot.py imports each. Their ops, after the core-ATen
decompositions that `TRAINING_KEPT` leaves out (so that these reach the importer whole):

    convolution_backward              conv2d_backward (grad_input, grad_weight, grad_bias by output_mask)
    _native_batch_norm_legit_functional, _native_batch_norm_legit (training)
                                      batch_norm_statistics, the output normalized from them elementwise; the
                                      running-stat updates computed ((1 - m) * running + m * batch; the
                                      variance unbiased), so the buffers follow eager's
    native_batch_norm_backward        batch_norm_backward (train); eval mode from the running statistics
    native_layer_norm (mean, rstd)    [1] and [2] computed when read (reductions), for the backward
    native_layer_norm_backward        layer_norm_backward (the forward's eps, which the backward graph does not
                                      carry, from the forward graph; without it, the gradient from mean/rstd)
    threshold_backward, gelu_backward, silu_backward, hardswish_backward, hardsigmoid_backward,
    hardtanh_backward, leaky_relu_backward, elu_backward
                                      activation_backward (relu, gelu/gelu_tanh, silu, ..., clamp)
    sigmoid_backward, tanh_backward   grad * y * (1 - y), grad * (1 - y * y) from the output y
    _softmax_backward_data, _log_softmax_backward_data
                                      softmax_backward, log_softmax_backward
    max_pool2d_with_indices_backward  max_pool2d_backward (recomputed from the input: the indices are not read)
    avg_pool2d_backward               avg_pool2d_backward
    _adaptive_avg_pool2d_backward     to 1x1: grad broadcast over H, W divided by H * W
    nll_loss_forward                  minus the gathered log-probabilities summed over the rows whose target is
                                      not ignore_index, over their count (mean); total_weight is that count.
                                      [N, C] input, targets [N], no class weights, reduction mean or sum
    nll_loss_backward                 -onehot(target) * grad / total_weight (an ignored row: no class matches)

ignore_index: any value outside [0, C) is taken (the default -100 too); a class index is not. Rows whose target
is ignore_index are masked out, as torch does. Any other target outside [0, C) (negative ones are made C
first, as Python's indices would wrap) fails the run-time bounds check of the gather: an OpenPrimError after
the run (on a GPU reported at a later call, as CUDA's device-side asserts are; the torch backend on the
CPU runs that call eagerly, so that torch reports it).
mm, t, sum, view, expand and the elementwise ops of the backward graph are the importer's own handlers.
"""
from __future__ import annotations

import numpy as np

from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.torch.importer import (_HANDLERS, _Const, _ints, _op_key, _pad4, _shape,
                                                h_native_bn_legit, h_native_layer_norm)

# Ops that the core-ATen decomposition table would split but that map to one Graph op (or a short chain): the
# torch backend removes them from the table it gives AOTAutograd.
TRAINING_KEPT = ("convolution_backward", "native_batch_norm_backward", "native_layer_norm_backward",
                 "threshold_backward", "gelu_backward", "silu_backward", "hardswish_backward",
                 "hardsigmoid_backward", "hardtanh_backward", "leaky_relu_backward", "elu_backward",
                 "sigmoid_backward", "tanh_backward", "_softmax_backward_data", "_log_softmax_backward_data",
                 "max_pool2d_with_indices_backward", "avg_pool2d_backward", "_adaptive_avg_pool2d_backward",
                 "nll_loss_forward", "nll_loss_backward", "_native_batch_norm_legit_functional")


class _Lazy(tuple):
    """A multi-output op's results, each made when a getitem reads it (so that an output nobody reads adds no
    op to the Graph): makers[i]() -> the value, None for one that cannot be made."""

    def __new__(cls, makers):
        self = super().__new__(cls, [None] * len(makers))
        self._makers, self._made = makers, {}
        return self

    def __getitem__(self, i):
        if i not in self._made:
            self._made[i] = self._makers[i]() if self._makers[i] is not None else None
        return self._made[i]


def _x4(im, x):
    """An activation as 4-d NCHW for the 2-d ops: [N, C] and [N, C, L] viewed as [N, C, L, 1]; (x4, undo)."""
    x = im.tensor(x)
    if not 2 <= x.ndim <= 4:
        raise OpenPrimError(f"a {x.ndim}-d input {list(x.shape)}: only 2-d, 3-d and 4-d are supported")
    if x.ndim == 4:
        return x, lambda t: t
    shape = x.shape
    return im.g.reshape(x, (*shape, *[1] * (4 - len(shape)))), lambda t: im.g.reshape(t, shape)


def _vec(im, v, c, fill, name):
    return im.tensor(v if v is not None else _Const(np.full(c, fill), name))


def _per_channel(im, v):
    """A [C] vector as [C, 1, 1], to broadcast over an NCHW activation."""
    v = im.tensor(v)
    return im.g.reshape(v, (v.shape[0], 1, 1))


# ----------------------------------------------------------------------------- convolution
def h_convolution_backward(im, n, grad, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                           groups, output_mask):
    if transposed:
        raise OpenPrimError("the backward of a transposed convolution is not supported")
    x, w, grad = im.tensor(x), im.tensor(w), im.tensor(grad)
    if x.ndim != 4:
        raise OpenPrimError(f"only the backward of 2-d convolutions (4-d input) is supported, got rank {x.ndim}")
    return tuple(im.g.conv2d_backward(grad, x, w, stride=tuple(_ints(stride)), padding=_pad4(padding),
                                      dilation=tuple(_ints(dilation)), groups=int(groups),
                                      output_mask=tuple(bool(m) for m in output_mask)))


# ----------------------------------------------------------------------------- batch norm
def _running_update(im, running, batch, momentum):
    return im.g.add(im.g.mul(im.tensor(running), 1.0 - float(momentum)), im.g.mul(batch, float(momentum)))


def _bn_training(im, x, w, b, running_mean, running_var, momentum, eps):
    """Lazy (output, save_mean, save_rstd, new_running_mean, new_running_var) of training-mode batch norm."""
    x4, undo = _x4(im, x)
    c = x4.shape[1]
    count = x4.shape[0] * x4.shape[2] * x4.shape[3]
    stats = {}

    def statistics():
        if not stats:
            stats["mean"], stats["rstd"] = im.g.batch_norm_statistics(x4, float(eps))
        return stats["mean"], stats["rstd"]

    def new_var():
        rstd = statistics()[1]     # the biased variance 1 / rstd^2 - eps, made unbiased as torch's update
        var = im.g.sub(im.g.div(1.0, im.g.mul(rstd, rstd)), float(eps))
        return _running_update(im, running_var, im.g.mul(var, count / max(count - 1, 1)), momentum)

    def output():
        """(x - mean) * (rstd * scale) + shift, one elementwise pass over x with the statistics (which the
        saved tensors and the running averages need anyway) instead of batch_norm_training's own three."""
        mean, rstd = statistics()
        g, channel = im.g, (lambda v: im.g.reshape(v, [c, 1, 1]))  # noqa: E731 - NCHW broadcast
        scale = g.mul(rstd, _vec(im, w, c, 1.0, "bn_scale"))
        y = g.add(g.mul(g.sub(x4, channel(mean)), channel(scale)), channel(_vec(im, b, c, 0.0, "bn_shift")))
        return undo(y)

    return _Lazy([
        output,
        lambda: statistics()[0], lambda: statistics()[1],
        None if running_mean is None else lambda: _running_update(im, running_mean, statistics()[0], momentum),
        None if running_var is None else new_var])


def h_native_bn_legit_functional(im, n, x, w, b, running_mean, running_var, training, momentum, eps):
    """AOTAutograd's functional batch norm: the running statistics come back as outputs (AOTAutograd copies
    them into the buffers), computed as torch updates them; in eval mode, the inference op."""
    if not training:
        y = h_native_bn_legit(im, n, x, w, b, running_mean, running_var, False, momentum, eps)[0]
        return (y, None, None, running_mean, running_var)
    return _bn_training(im, x, w, b, running_mean, running_var, momentum, eps)


def h_native_bn_legit_training(im, n, x, w, b, *rest):
    """_native_batch_norm_legit (.no_stats and .default): the importer's mapping of the output, and in training
    mode save_mean and save_rstd when a backward graph reads them (batch_norm_statistics)."""
    out = h_native_bn_legit(im, n, x, w, b, *rest)
    training = True if len(rest) == 3 else rest[2]
    if not training:
        return out
    eps = rest[-1]
    lazy = _bn_training(im, x, w, b, None, None, 0.0, eps)
    return _Lazy([lambda: out[0], lambda: lazy[1], lambda: lazy[2]])


def h_native_batch_norm_backward(im, n, grad, x, w, running_mean, running_var, save_mean, save_rstd, train, eps,
                                 output_mask):
    grad4, undo = _x4(im, grad)
    x4, _ = _x4(im, x)
    c = x4.shape[1]
    mask = tuple(bool(m) for m in output_mask)
    scale = _vec(im, w, c, 1.0, "bn_scale")
    if train:
        gx, gw, gb = im.g.batch_norm_backward(grad4, x4, scale, im.tensor(save_mean), im.tensor(save_rstd),
                                              output_mask=mask)
    else:    # eval mode: y = (x - running_mean) * rstd * w + b with constant statistics
        rstd = im.g.div(1.0, im.g.sqrt(im.g.add(im.tensor(running_var), float(eps))))
        gx = im.g.mul(grad4, _per_channel(im, im.g.mul(scale, rstd))) if mask[0] else None
        xhat = im.g.mul(im.g.sub(x4, _per_channel(im, running_mean)), _per_channel(im, rstd)) if mask[1] else None
        gw = im.g.reduce(im.g.mul(grad4, xhat), "sum", [0, 2, 3]) if mask[1] else None
        gb = im.g.reduce(grad4, "sum", [0, 2, 3]) if mask[2] else None
    return (None if gx is None else undo(gx), gw, gb)


# ----------------------------------------------------------------------------- layer norm
def h_native_layer_norm_stats(im, n, x, shape, w, b, eps):
    """native_layer_norm: the importer's output, and mean and rstd ([..., 1, ..., 1]) when read."""
    out = h_native_layer_norm(im, n, x, shape, w, b, eps)
    t = im.tensor(x)
    axes = list(range(t.ndim - len(shape), t.ndim))
    stats = {}

    def mean():
        if "mean" not in stats:
            stats["mean"] = im.g.reduce(t, "mean", axes, keepdims=True)
        return stats["mean"]

    def rstd():
        d = im.g.sub(t, mean())
        var = im.g.reduce(im.g.mul(d, d), "mean", axes, keepdims=True)
        return im.g.div(1.0, im.g.sqrt(im.g.add(var, float(eps))))
    return _Lazy([lambda: out[0], mean, rstd])


def layer_norm_eps(im, n):
    """The eps of the forward layer norm whose saved mean a native_layer_norm_backward node reads, or None: the
    forward graph's import records it by the name of its mean output (aot.py), which the backward graph's
    placeholder carries."""
    mean = n.args[3]
    return (getattr(im, "layer_norm_eps", None) or {}).get(getattr(mean, "name", None))


def h_native_layer_norm_backward(im, n, grad, x, shape, mean, rstd, w, b, output_mask):
    grad, x = im.tensor(grad), im.tensor(x)
    k = len(shape)
    mask = tuple(bool(m) for m in output_mask)
    scale = None if w is None else im.tensor(w)
    eps = layer_norm_eps(im, n)
    if eps is not None:
        gx, gw, gb = im.g.layer_norm_backward(grad, x, scale, float(eps), k, output_mask=mask)
        return (gx, gw if w is not None else None, gb if b is not None else None)
    # without the forward's eps: from the saved statistics, xhat = (x - mean) * rstd,
    # dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = grad * w
    axes = list(range(x.ndim - k, x.ndim))
    lead = list(range(x.ndim - k))
    xhat = im.g.mul(im.g.sub(x, im.tensor(mean)), im.tensor(rstd))
    gx = gw = gb = None
    if mask[0]:
        g = grad if scale is None else im.g.mul(grad, scale)
        inner = im.g.sub(im.g.sub(g, im.g.reduce(g, "mean", axes, keepdims=True)),
                         im.g.mul(xhat, im.g.reduce(im.g.mul(g, xhat), "mean", axes, keepdims=True)))
        gx = im.g.mul(inner, im.tensor(rstd))
    if mask[1] and w is not None:
        gw = im.g.reduce(im.g.mul(grad, xhat), "sum", lead) if lead else im.g.mul(grad, xhat)
    if mask[2] and b is not None:
        gb = im.g.reduce(grad, "sum", lead) if lead else grad
    return (gx, gw, gb)


# ----------------------------------------------------------------------------- activations
def _activation(name, params=None):
    def h(im, n, grad, x, *rest):
        return im.g.activation_backward(im.tensor(grad), im.tensor(x), name, params)
    return h


def h_threshold_backward(im, n, grad, x, threshold):
    """relu's backward: grad where x > threshold, else 0 (x is relu's input or output: the same where it counts)."""
    grad, x = im.tensor(grad), im.tensor(x)
    if threshold == 0:
        return im.g.activation_backward(grad, x, "relu")
    return im.g.where(im.g.le(x, float(threshold)), 0.0, grad)


def h_gelu_backward(im, n, grad, x, approximate="none"):
    return im.g.activation_backward(im.tensor(grad), im.tensor(x), "gelu_tanh" if approximate == "tanh" else "gelu")


def h_hardtanh_backward(im, n, grad, x, lo, hi):
    return im.g.activation_backward(im.tensor(grad), im.tensor(x), "clamp", (float(lo), float(hi)))


def h_leaky_relu_backward(im, n, grad, x, slope, self_is_result=False):
    if self_is_result and slope <= 0:
        raise OpenPrimError(f"leaky_relu_backward from the output with negative_slope {slope} <= 0")
    return im.g.activation_backward(im.tensor(grad), im.tensor(x), "leaky_relu", (float(slope),))


def h_elu_backward(im, n, grad, alpha, scale, input_scale, is_result, x):
    if scale != 1 or input_scale != 1:
        raise OpenPrimError("elu_backward with scale/input_scale != 1 (selu, celu) is not supported")
    grad, x = im.tensor(grad), im.tensor(x)
    if is_result:    # from the output y: grad * (y + alpha) where y <= 0
        return im.g.where(im.g.gt(x, 0.0), grad, im.g.mul(grad, im.g.add(x, float(alpha))))
    return im.g.activation_backward(grad, x, "elu", (float(alpha),))


def h_sigmoid_backward(im, n, grad, y):
    y = im.tensor(y)
    return im.g.mul(im.tensor(grad), im.g.mul(y, im.g.sub(1.0, y)))


def h_tanh_backward(im, n, grad, y):
    y = im.tensor(y)
    return im.g.mul(im.tensor(grad), im.g.sub(1.0, im.g.mul(y, y)))


def h_softmax_backward(im, n, grad, y, dim, input_dtype=None):
    return im.g.softmax_backward(im.tensor(grad), im.tensor(y), int(dim))


def h_log_softmax_backward(im, n, grad, y, dim, input_dtype=None):
    return im.g.log_softmax_backward(im.tensor(grad), im.tensor(y), int(dim))


# ----------------------------------------------------------------------------- pools
def h_max_pool2d_backward(im, n, grad, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False, indices=None):
    """max_pool2d_with_indices_backward: recomputed from the input (each window's grad to its first maximum, as
    torch's indices point); the indices argument is not read (aot.py lets the forward skip making them)."""
    k = _ints(kernel)
    return im.g.max_pool2d_backward(im.tensor(grad), im.tensor(x), tuple(k), tuple(_ints(stride) or k),
                                    _pad4(padding), tuple(_ints(dilation)), bool(ceil_mode))


def h_avg_pool2d_backward(im, n, grad, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                          divisor_override=None):
    """avg_pool2d_backward: only the input's shape is read (aot.py does not make the input a Graph input)."""
    if divisor_override is not None:
        raise OpenPrimError("avg_pool2d divisor_override is not supported")
    shape = _shape(n.args[1])
    if len(shape) != 4:
        raise OpenPrimError(f"avg_pool2d_backward of a {len(shape)}-d input: only 4-d is supported")
    k = _ints(kernel)
    return im.g.avg_pool2d_backward(im.tensor(grad), shape[2:], tuple(k), tuple(_ints(stride) or k), _pad4(padding),
                                    bool(ceil_mode), bool(count_include_pad))


def h_adaptive_avg_pool2d_backward(im, n, grad, x):
    grad, shape = im.tensor(grad), _shape(n.args[1])
    if len(shape) != 4 or tuple(grad.shape[2:]) != (1, 1):
        raise OpenPrimError(f"_adaptive_avg_pool2d_backward to {list(grad.shape)} from {list(shape)}: only an "
                            "output of 1x1 is supported")
    return im.g.mul(im.g.broadcast_to(grad, shape), 1.0 / (shape[2] * shape[3]))


# ----------------------------------------------------------------------------- cross entropy
_REDUCTIONS = {1: "mean", 2: "sum"}


def _nll_checks(im, n, lp_shape, weight, reduction, ignore_index):
    if weight is not None:
        raise OpenPrimError("nll_loss with class weights is not supported")
    if reduction not in _REDUCTIONS:
        raise OpenPrimError(f"nll_loss with reduction {reduction} ('none') is not supported (mean and sum are)")
    if len(lp_shape) != 2:
        raise OpenPrimError(f"nll_loss of a {len(lp_shape)}-d input {list(lp_shape)}: only [N, C] is supported")
    if 0 <= ignore_index < lp_shape[1]:
        raise OpenPrimError(f"nll_loss with ignore_index={ignore_index}, a class index, is not supported (an "
                            f"index outside [0, {lp_shape[1]}), such as the default -100, is)")


def _kept(im, target, ignore_index, classes) -> tuple:
    """(the targets with ignore_index made 0 and every other negative one `classes`, bool [N]: which are
    not ignore_index). The gather's bounds check then passes exactly torch's targets, [0, C) or ignore_index
    (its own range is [-C, C), Python's indices)."""
    t = im.tensor(target)
    kept = im.g.ne(t, ignore_index)
    return im.g.where(kept, im.g.where(im.g.lt(t, 0), classes, t), 0), kept


def h_nll_loss_forward(im, n, lp, target, weight, reduction, ignore_index):
    """(loss, total_weight): minus the sum of the log-probabilities at the targets over the rows whose target is
    not ignore_index, divided by their count (mean); total_weight is that count. Masked, not the fused
    cross_entropy, so that an ignored target is what torch makes it, with no run-time check failing."""
    lp_t = im.tensor(lp)
    _nll_checks(im, n, lp_t.shape, weight, reduction, ignore_index)
    N, C = lp_t.shape
    t, kept = _kept(im, target, ignore_index, C)
    picked = im.g.gather_elements(lp_t, im.g.reshape(t, [N, 1]), 1)
    total = im.g.reduce(im.g.where(im.g.reshape(kept, [N, 1]), picked, 0.0), "sum")
    count = im.g.reduce(im.g.cast(kept, lp_t.dtype), "sum")
    loss = im.g.mul(im.g.div(total, count) if reduction == 1 else total, -1.0)
    return im.g.reshape(loss, []), im.g.reshape(count, [])


def h_nll_loss_backward(im, n, grad, lp, target, weight, reduction, ignore_index, total_weight):
    """The gradient of the log-probabilities: -grad / total_weight (mean; -grad for sum) at each row's target,
    0 elsewhere and on the rows whose target is ignore_index (it equals no class). The forward's bounds
    check has seen these targets: an out-of-range one matches no class here either."""
    shape = _shape(n.args[1])
    _nll_checks(im, n, shape, weight, reduction, ignore_index)
    N, C = shape
    t = im.tensor(target)
    onehot = im.g.eq(im.g.reshape(t, [N, 1]), im.tensor(_Const(np.arange(C, dtype=np.int64)[None, :], "classes")))
    g = im.g.mul(im.g.reshape(im.tensor(grad), [1, 1]), -1.0)
    if reduction == 1:
        g = im.g.div(g, im.g.reshape(im.tensor(total_weight), [1, 1]))
    return im.g.where(onehot, g, 0.0)


# ----------------------------------------------------------------------------- scatters of slices (slice's backward)
def h_slice_scatter(im, n, base, src, dim=0, start=None, end=None, step=1):
    """base with base[start:end] along dim replaced by src (step 1): src padded with zeros where base is a
    constant zero tensor (the gradient of a slice), else a concat of base's two sides around src."""
    shape = _shape(n)
    d = dim % len(shape)
    b, e, s = slice(start, end, step).indices(shape[d])
    if s != 1:
        raise OpenPrimError(f"slice_scatter with step {step} is not supported (step 1 is)")
    src = im.tensor(src)
    if isinstance(base, _Const) and not base.value.any():
        if (b, e) == (0, shape[d]):
            return src
        begins, ends = [0] * len(shape), [0] * len(shape)
        begins[d], ends[d] = b, shape[d] - e
        return im.g.pad(src, begins + ends, 0.0)
    base = im.tensor(base)
    parts = [im.g.slice(base, [0], [b], axes=[d])] if b > 0 else []
    parts.append(src)
    if e < shape[d]:
        parts.append(im.g.slice(base, [e], [shape[d]], axes=[d]))
    return parts[0] if len(parts) == 1 else im.g.concat(parts, d)


def h_select_scatter(im, n, base, src, dim, index):
    """base with base.select(dim, index) replaced by src (select's backward)."""
    shape = _shape(n)
    d, i = dim % len(shape), index % shape[dim % len(shape)]
    src = im.tensor(src)
    return h_slice_scatter(im, n, base, im.g.reshape(src, [*src.shape[:d], 1, *src.shape[d:]]), d, i, i + 1)


HANDLERS = {
    "slice_scatter": h_slice_scatter, "select_scatter": h_select_scatter,
    "convolution_backward": h_convolution_backward,
    "_native_batch_norm_legit_functional": h_native_bn_legit_functional,
    "_native_batch_norm_legit": h_native_bn_legit_training,
    "native_batch_norm_backward": h_native_batch_norm_backward,
    "native_layer_norm": h_native_layer_norm_stats,
    "native_layer_norm_backward": h_native_layer_norm_backward,
    "threshold_backward": h_threshold_backward, "gelu_backward": h_gelu_backward,
    "silu_backward": _activation("silu"), "hardswish_backward": _activation("hardswish"),
    "hardsigmoid_backward": _activation("hardsigmoid"), "hardtanh_backward": h_hardtanh_backward,
    "leaky_relu_backward": h_leaky_relu_backward, "elu_backward": h_elu_backward,
    "sigmoid_backward": h_sigmoid_backward, "tanh_backward": h_tanh_backward,
    "_softmax_backward_data": h_softmax_backward, "_log_softmax_backward_data": h_log_softmax_backward,
    "max_pool2d_with_indices_backward": h_max_pool2d_backward, "avg_pool2d_backward": h_avg_pool2d_backward,
    "_adaptive_avg_pool2d_backward": h_adaptive_avg_pool2d_backward,
    "nll_loss_forward": h_nll_loss_forward, "nll_loss_backward": h_nll_loss_backward,
}
# _native_batch_norm_legit and native_layer_norm replace the importer's own: the same output, and the statistics
# too where a getitem reads them (importer.SUPPORTED_OPS, the torch.export importer's list, stays as it is).
_HANDLERS.update(HANDLERS)

# Arguments that a handler reads only for their shape or not at all (fx arg position per op): a placeholder
# that only such arguments read is no Graph input (aot.py).
UNREAD_ARGS = {
    "max_pool2d_with_indices_backward": (7,),          # the indices: recomputed from the input
    "avg_pool2d_backward": (1,),                       # the input: its shape only
    "_adaptive_avg_pool2d_backward": (1,),
    "nll_loss_backward": (1,),                         # the log-probabilities: their shape only
}


def unread_args(n, im=None) -> tuple:
    """The positions of fx node n's arguments that its handler does not read (UNREAD_ARGS, and those that
    depend on the node: batch norm's running statistics in training, its saved ones in eval mode, the saved
    layer-norm statistics where the forward's eps is known; its bias, whose presence alone counts)."""
    op = _op_key(n.target)
    if op == "native_batch_norm_backward":
        return (3, 4) if n.args[7] else (5, 6)
    if op == "native_layer_norm_backward":     # the bias: whether there is one
        return (3, 4, 6) if im is not None and layer_norm_eps(im, n) is not None else (6,)
    return UNREAD_ARGS.get(op, ())


NOTES = {
    "convolution_backward": "training: 2-d, not transposed; output_mask",
    "_native_batch_norm_legit_functional": "training (AOTAutograd): batch statistics; running stats updated",
    "_native_batch_norm_legit": "training: save_mean/save_rstd for the backward",
    "native_batch_norm_backward": "training and eval mode; 2-d, 3-d and 4-d inputs",
    "native_layer_norm": "mean and rstd too (for the backward)",
    "native_layer_norm_backward": "training; the forward's eps (else from mean and rstd)",
    "threshold_backward": "training (relu)",
    "max_pool2d_with_indices_backward": "training; recomputed from the input (the indices are not read)",
    "avg_pool2d_backward": "training; no divisor_override",
    "_adaptive_avg_pool2d_backward": "training; output 1x1",
    "nll_loss_forward": "[N, C] input; no class weights; mean or sum; ignore_index outside the classes",
    "nll_loss_backward": "as nll_loss_forward",
    "elu_backward": "scale and input_scale 1",
    "leaky_relu_backward": "from the output only with a positive slope",
}

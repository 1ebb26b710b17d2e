"""float64 numpy references for every op of the OpenPrim frontend (pyfrontend/graph.py).

Written independently of the compiler (no import of kernels/semantics.py): plain numpy in float64,
following PyTorch's conventions where the frontend does (conv/pool output sizes, ceil_mode, the
avg_pool2d divisor, gelu, elu, layer/group norm with biased variance).

Layouts: activations are NCHW or NHWC; conv filters are KCRS or KRSC (K out channels, C in-channels
per group, R x S kernel). Padding is always given as (top, left, bottom, right).
"""
from __future__ import annotations

import math

import numpy as np

_ERF = np.frompyfunc(math.erf, 1, 1)


def f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def pad4(p):
    """int | (ph, pw) | (top, left, bottom, right) -> (top, left, bottom, right)."""
    if isinstance(p, int):
        return (p, p, p, p)
    p = tuple(p)
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    assert len(p) == 4, p
    return p


def pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def to_nchw(x, layout):
    return f64(x) if layout == "NCHW" else np.transpose(f64(x), (0, 3, 1, 2))


def from_nchw(x, layout):
    return x if layout == "NCHW" else np.transpose(x, (0, 2, 3, 1))


# ----------------------------------------------------------------------------- activations
def erf(x):
    return _ERF(f64(x)).astype(np.float64)


def relu(x):
    return np.maximum(f64(x), 0.0)


def leaky_relu(x, alpha=0.01):
    x = f64(x)
    return np.where(x > 0, x, alpha * x)


def clamp(x, lo, hi):
    return np.minimum(np.maximum(f64(x), lo), hi)


def relu6(x):
    return clamp(x, 0.0, 6.0)


def sigmoid(x):
    x = f64(x)
    # split by sign so neither branch overflows
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def tanh(x):
    return np.tanh(f64(x))


def gelu(x, approximate="none"):
    x = f64(x)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    assert approximate == "none", approximate
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def silu(x):
    x = f64(x)
    return x * sigmoid(x)


def elu(x, alpha=1.0):
    x = f64(x)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


def activation(x, name="none", params=()):
    """The conv/matmul epilogue activations by name (as in base/ops.py ACTIVATIONS)."""
    params = tuple(params)
    if name == "none":
        return f64(x)
    if name == "relu":
        return relu(x)
    if name == "leaky_relu":
        return leaky_relu(x, *params)
    if name == "clamp":
        return clamp(x, *params)
    if name == "sigmoid":
        return sigmoid(x)
    if name == "tanh":
        return tanh(x)
    if name == "gelu":
        return gelu(x)
    if name == "gelu_tanh":
        return gelu(x, "tanh")
    if name == "silu":
        return silu(x)
    if name == "elu":
        return elu(x, *params)
    raise ValueError(f"unknown activation {name}")


# ----------------------------------------------------------------------------- window sizes
def window_out(size, k, s, p0, p1, d=1, ceil_mode=False):
    """PyTorch's output length of a sliding window (pooling_output_shape), with padding p0/p1."""
    eff = d * (k - 1) + 1
    num = size + p0 + p1 - eff
    assert num >= 0, "window larger than padded input"
    out = (num + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p0:
        out -= 1  # the last window must start inside the input or the left padding
    return out


# ----------------------------------------------------------------------------- conv / matmul
def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
           filter_layout=None, activation_name="none", activation_params=()):
    """Grouped, strided, dilated, zero-padded cross-correlation (torch.nn.functional.conv2d)."""
    filter_layout = filter_layout or ("KCRS" if layout == "NCHW" else "KRSC")
    xn = to_nchw(x, layout)
    wk = f64(w) if filter_layout == "KCRS" else np.transpose(f64(w), (0, 3, 1, 2))
    N, C, H, W = xn.shape
    K, Cg, R, S = wk.shape
    G = groups
    assert C == Cg * G and K % G == 0
    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    pt, pl, pb, pr = pad4(padding)
    OH = window_out(H, R, sh, pt, pb, dh)
    OW = window_out(W, S, sw, pl, pr, dw)
    xp = np.pad(xn, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    xg = xp.reshape(N, G, Cg, xp.shape[2], xp.shape[3])
    wg = wk.reshape(G, K // G, Cg, R, S)
    out = np.zeros((N, G, K // G, OH, OW))
    for r in range(R):
        for s in range(S):
            h0, w0 = r * dh, s * dw
            patch = xg[:, :, :, h0:h0 + sh * (OH - 1) + 1:sh, w0:w0 + sw * (OW - 1) + 1:sw]
            out += np.einsum("ngchw,gkc->ngkhw", patch, wg[:, :, :, r, s])
    out = out.reshape(N, K, OH, OW)
    if bias is not None:
        out = out + f64(bias)[None, :, None, None]
    return from_nchw(activation(out, activation_name, activation_params), layout)


def matmul(a, b, bias=None, transpose_rhs=False, activation_name="none", activation_params=()):
    """a @ b (b: [K,N], or [N,K] with transpose_rhs; 2-d or batched like a) + bias[N], then act."""
    a, b = f64(a), f64(b)
    if transpose_rhs:
        b = np.swapaxes(b, -1, -2)
    out = np.matmul(a, b)
    if bias is not None:
        out = out + f64(bias)
    return activation(out, activation_name, activation_params)


def linear(x, w, bias=None):
    return matmul(x, w, bias, transpose_rhs=True)


# ----------------------------------------------------------------------------- normalization
def batch_norm(x, scale, shift, mean, variance, eps=1e-5, layout="NCHW"):
    """Inference batch norm with running statistics, per channel."""
    x = f64(x)
    shp = [1] * x.ndim
    shp[1 if layout == "NCHW" else x.ndim - 1] = -1

    def c(v):
        return f64(v).reshape(shp)

    return (x - c(mean)) / np.sqrt(c(variance) + eps) * c(scale) + c(shift)


def layer_norm(x, scale=None, shift=None, eps=1e-5, normalized_ndim=1):
    x = f64(x)
    axes = tuple(range(x.ndim - normalized_ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if scale is not None:
        y = y * f64(scale)
    if shift is not None:
        y = y + f64(shift)
    return y


def group_norm(x, groups, scale, shift, eps=1e-5, layout="NCHW"):
    xn = to_nchw(x, layout)
    N, C, H, W = xn.shape
    xg = xn.reshape(N, groups, C // groups, H, W)
    mu = xg.mean(axis=(2, 3, 4), keepdims=True)
    var = ((xg - mu) ** 2).mean(axis=(2, 3, 4), keepdims=True)
    y = ((xg - mu) / np.sqrt(var + eps)).reshape(N, C, H, W)
    y = y * f64(scale)[None, :, None, None] + f64(shift)[None, :, None, None]
    return from_nchw(y, layout)


# ----------------------------------------------------------------------------- pooling
def max_pool2d(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False, layout="NCHW"):
    xn = to_nchw(x, layout)
    N, C, H, W = xn.shape
    (kh, kw) = pair(kernel)
    (sh, sw) = pair(stride if stride is not None else kernel)
    (dh, dw) = pair(dilation)
    pt, pl, pb, pr = pad4(padding)
    OH = window_out(H, kh, sh, pt, pb, dh, ceil_mode)
    OW = window_out(W, kw, sw, pl, pr, dw, ceil_mode)
    # pad with -inf far enough that every (ceil_mode) window is in range; padding never wins
    eb = max(pb, (OH - 1) * sh + dh * (kh - 1) + 1 - H - pt)
    er = max(pr, (OW - 1) * sw + dw * (kw - 1) + 1 - W - pl)
    xp = np.pad(xn, ((0, 0), (0, 0), (pt, eb), (pl, er)), constant_values=-np.inf)
    out = np.full((N, C, OH, OW), -np.inf)
    for r in range(kh):
        for s in range(kw):
            h0, w0 = r * dh, s * dw
            out = np.maximum(out, xp[:, :, h0:h0 + sh * (OH - 1) + 1:sh, w0:w0 + sw * (OW - 1) + 1:sw])
    return from_nchw(out, layout)


def avg_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True, layout="NCHW"):
    """PyTorch semantics: the window is clipped to the padded extent [-pad0, size + pad1); the divisor
    is that clipped window's size (count_include_pad) or the number of real elements in it."""
    xn = to_nchw(x, layout)
    N, C, H, W = xn.shape
    (kh, kw) = pair(kernel)
    (sh, sw) = pair(stride if stride is not None else kernel)
    pt, pl, pb, pr = pad4(padding)
    OH = window_out(H, kh, sh, pt, pb, 1, ceil_mode)
    OW = window_out(W, kw, sw, pl, pr, 1, ceil_mode)
    out = np.zeros((N, C, OH, OW))
    for oh in range(OH):
        hs = oh * sh - pt
        he = min(hs + kh, H + pb)
        ph = he - hs
        hs, he = max(hs, 0), min(he, H)
        for ow in range(OW):
            ws = ow * sw - pl
            we = min(ws + kw, W + pr)
            pw = we - ws
            ws, we = max(ws, 0), min(we, W)
            total = xn[:, :, hs:he, ws:we].sum(axis=(2, 3))
            div = ph * pw if count_include_pad else (he - hs) * (we - ws)
            out[:, :, oh, ow] = total / div
    return from_nchw(out, layout)


def global_avg_pool(x, layout="NCHW"):
    xn = to_nchw(x, layout)
    return from_nchw(xn.mean(axis=(2, 3), keepdims=True), layout)


# ----------------------------------------------------------------------------- softmax
def softmax(x, axis=-1):
    x = f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    x = f64(x)
    d = x - x.max(axis=axis, keepdims=True)
    return d - np.log(np.exp(d).sum(axis=axis, keepdims=True))


# ----------------------------------------------------------------------------- binary (numpy broadcasting)
def add(a, b):
    return f64(a) + f64(b)


def sub(a, b):
    return f64(a) - f64(b)


def mul(a, b):
    return f64(a) * f64(b)


def div(a, b):
    return f64(a) / f64(b)


# ----------------------------------------------------------------------------- data movement
def reshape(x, shape):
    return f64(x).reshape(shape)


def flatten(x, start_dim=1):
    x = f64(x)
    return x.reshape(x.shape[:start_dim] + (-1,))


def transpose(x, perm):
    return np.transpose(f64(x), perm)


def concat(xs, axis=0):
    return np.concatenate([f64(x) for x in xs], axis=axis)


def pad(x, pads, value=0.0):
    """pads = [begin_0, ..., begin_{r-1}, end_0, ..., end_{r-1}] (the prim.pad convention)."""
    x = f64(x)
    r = x.ndim
    assert len(pads) == 2 * r
    return np.pad(x, [(pads[i], pads[i + r]) for i in range(r)], constant_values=value)


# ----------------------------------------------------------------------------- training: gradients
# Each is the gradient (the vector-Jacobian product with dy) of the forward reference above, written from its
# definition: test_backward_ops.py checks every one against central differences of the forward and against
# torch.autograd.
_TO_KCRS = {"KCRS": (0, 1, 2, 3), "KRSC": (0, 3, 1, 2), "RSCK": (3, 2, 0, 1)}


def filter_to_kcrs(w, filter_layout):
    return np.transpose(f64(w), _TO_KCRS[filter_layout])


def filter_from_kcrs(w, filter_layout):
    return np.transpose(f64(w), np.argsort(_TO_KCRS[filter_layout]))


def _conv_taps(N, C, H, W, K, R, S, stride, padding, dilation):
    """(OH, OW, [(r, s, row slice, column slice)]) of conv2d's reads of the padded input, tap by tap."""
    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    pt, pl, pb, pr = pad4(padding)
    OH, OW = window_out(H, R, sh, pt, pb, dh), window_out(W, S, sw, pl, pr, dw)
    taps = [(r, s, slice(r * dh, r * dh + sh * (OH - 1) + 1, sh), slice(s * dw, s * dw + sw * (OW - 1) + 1, sw))
            for r in range(R) for s in range(S)]
    return OH, OW, taps


def conv2d_backward_data(dy, w, input_size, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
                         filter_layout=None):
    """d(sum(conv2d(x, w) * dy)) / dx: each tap's dy times the filter scattered back onto the padded input it read."""
    filter_layout = filter_layout or ("KCRS" if layout == "NCHW" else "KRSC")
    dyn, wk = to_nchw(dy, layout), filter_to_kcrs(w, filter_layout)
    N, K, OH, OW = dyn.shape
    _, Cg, R, S = wk.shape
    G = groups
    H, W = input_size
    pt, pl, pb, pr = pad4(padding)
    oh, ow, taps = _conv_taps(N, Cg * G, H, W, K, R, S, stride, padding, dilation)
    assert (oh, ow) == (OH, OW), ((oh, ow), (OH, OW))
    gxp = np.zeros((N, G, Cg, H + pt + pb, W + pl + pr))
    dyg, wg = dyn.reshape(N, G, K // G, OH, OW), wk.reshape(G, K // G, Cg, R, S)
    for r, s, rows, cols in taps:
        gxp[:, :, :, rows, cols] += np.einsum("ngkhw,gkc->ngchw", dyg, wg[:, :, :, r, s])
    return from_nchw(gxp[:, :, :, pt:pt + H, pl:pl + W].reshape(N, G * Cg, H, W), layout)


def conv2d_backward_weights(x, dy, filter_size, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
                            filter_layout=None):
    """d(sum(conv2d(x, w) * dy)) / dw: per tap, the padded input's patch against dy, summed over N, OH, OW."""
    filter_layout = filter_layout or ("KCRS" if layout == "NCHW" else "KRSC")
    xn, dyn = to_nchw(x, layout), to_nchw(dy, layout)
    N, C, H, W = xn.shape
    K = dyn.shape[1]
    G = groups
    R, S = pair(filter_size)
    pt, pl, pb, pr = pad4(padding)
    OH, OW, taps = _conv_taps(N, C, H, W, K, R, S, stride, padding, dilation)
    xg = np.pad(xn, ((0, 0), (0, 0), (pt, pb), (pl, pr))).reshape(N, G, C // G, H + pt + pb, W + pl + pr)
    dyg = dyn.reshape(N, G, K // G, OH, OW)
    gw = np.zeros((G, K // G, C // G, R, S))
    for r, s, rows, cols in taps:
        gw[:, :, :, r, s] = np.einsum("ngchw,ngkhw->gkc", xg[:, :, :, rows, cols], dyg)
    return filter_from_kcrs(gw.reshape(K, C // G, R, S), filter_layout)


def _channel_axes(layout):
    return (0, 2, 3) if layout == "NCHW" else (0, 1, 2)


def _per_channel(v, layout):
    return f64(v).reshape((1, -1, 1, 1) if layout == "NCHW" else (1, 1, 1, -1))


def batch_norm_statistics(x, eps=1e-5, layout="NCHW"):
    """(mean, 1 / sqrt(biased variance + eps)) per channel over N, H, W."""
    x = f64(x)
    axes = _channel_axes(layout)
    mean = x.mean(axis=axes)
    var = ((x - _per_channel(mean, layout)) ** 2).mean(axis=axes)
    return mean, 1.0 / np.sqrt(var + eps)


def batch_norm_training(x, scale, shift, eps=1e-5, layout="NCHW"):
    """Batch norm with the batch's statistics (torch's training mode output)."""
    mean, inv = batch_norm_statistics(x, eps, layout)
    return (f64(x) - _per_channel(mean, layout)) * _per_channel(inv * f64(scale), layout) + _per_channel(shift, layout)


def batch_norm_backward(dy, x, scale, mean, inv_std, layout="NCHW"):
    """(dx, dscale, dshift) of batch_norm_training, the statistics given: dxhat = dy * scale,
    dx = inv_std * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), means over N, H, W."""
    dy, axes = f64(dy), _channel_axes(layout)
    xhat = (f64(x) - _per_channel(mean, layout)) * _per_channel(inv_std, layout)
    dxhat = dy * _per_channel(scale, layout)
    dx = _per_channel(inv_std, layout) * (dxhat - dxhat.mean(axis=axes, keepdims=True)
                                          - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))
    return dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)


def layer_norm_backward(dy, x, scale=None, eps=1e-5, normalized_ndim=1):
    """(dx, dscale or None, dshift) of layer_norm over the trailing normalized_ndim dims."""
    dy, x = f64(dy), f64(x)
    axes = tuple(range(x.ndim - normalized_ndim, x.ndim))
    lead = tuple(range(x.ndim - normalized_ndim))
    mu = x.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    xhat = (x - mu) * inv
    dxhat = dy if scale is None else dy * f64(scale)
    dx = inv * (dxhat - dxhat.mean(axis=axes, keepdims=True) - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))
    return dx, None if scale is None else (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def hardsigmoid(x, alpha=1 / 6, beta=0.5):
    return clamp(alpha * f64(x) + beta, 0.0, 1.0)


def hardswish(x):
    return f64(x) * hardsigmoid(x)


ACTIVATION_FORWARD = {"relu": relu, "leaky_relu": leaky_relu, "clamp": clamp, "sigmoid": sigmoid, "tanh": tanh,
                      "gelu": gelu, "gelu_tanh": lambda x: gelu(x, "tanh"), "silu": silu, "elu": elu,
                      "hardsigmoid": hardsigmoid, "hardswish": hardswish}


def activation_backward(dy, x, name, params=()):
    """dy * act'(x); at the kinks torch's values: relu'(0) = 0, clamp' = 0 on its bounds (hardtanh),
    hardsigmoid' = 0 on its bounds, hardswish' = x / 3 + 1/2 on (-3, 3), 0 at -3 and 1 at 3."""
    dy, x = f64(dy), f64(x)
    if name == "relu":
        d = (x > 0) * 1.0
    elif name == "leaky_relu":
        d = np.where(x > 0, 1.0, params[0])
    elif name == "clamp":
        d = ((x > params[0]) & (x < params[1])) * 1.0
    elif name == "sigmoid":
        s = sigmoid(x)
        d = s * (1 - s)
    elif name == "tanh":
        d = 1 - np.tanh(x) ** 2
    elif name == "gelu":
        d = 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    elif name == "gelu_tanh":
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (x + 0.044715 * x ** 3))
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
    elif name == "silu":
        s = sigmoid(x)
        d = s * (1 + x * (1 - s))
    elif name == "elu":
        d = np.where(x > 0, 1.0, params[0] * np.exp(np.minimum(x, 0.0)))
    elif name == "hardsigmoid":
        t = params[0] * x + params[1]
        d = ((t > 0) & (t < 1)) * params[0]
    elif name == "hardswish":
        d = np.where(x <= -3, 0.0, np.where(x < 3, x / 3 + 0.5, 1.0))
    else:
        raise ValueError(f"no gradient for activation {name}")
    return dy * d


def max_pool2d_backward(dy, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False, layout="NCHW"):
    """Each window's dy added at the window's first maximum (row-major over its real positions), as torch."""
    xn, dyn = to_nchw(x, layout), to_nchw(dy, layout)
    N, C, H, W = xn.shape
    (kh, kw), (sh, sw), (dh, dw) = pair(kernel), pair(stride if stride is not None else kernel), pair(dilation)
    pt, pl = pad4(padding)[:2]
    gx = np.zeros_like(xn)
    n, c = np.meshgrid(np.arange(N), np.arange(C), indexing="ij")
    for oh in range(dyn.shape[2]):
        rows = [h for h in (oh * sh - pt + r * dh for r in range(kh)) if 0 <= h < H]
        for ow in range(dyn.shape[3]):
            cols = [w for w in (ow * sw - pl + s * dw for s in range(kw)) if 0 <= w < W]
            first = xn[:, :, rows][:, :, :, cols].reshape(N, C, -1).argmax(axis=-1)   # numpy: the first maximum
            np.add.at(gx, (n, c, np.array(rows)[first // len(cols)], np.array(cols)[first % len(cols)]),
                      dyn[:, :, oh, ow])
    return from_nchw(gx, layout)


def avg_pool2d_backward(dy, input_size, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                        layout="NCHW"):
    """Each window's dy / its divisor (avg_pool2d's) added to every real position of the window."""
    dyn = to_nchw(dy, layout)
    N, C, OH, OW = dyn.shape
    H, W = input_size
    (kh, kw), (sh, sw) = pair(kernel), pair(stride if stride is not None else kernel)
    pt, pl, pb, pr = pad4(padding)
    gx = np.zeros((N, C, H, W))
    for oh in range(OH):
        hs = oh * sh - pt
        he = min(hs + kh, H + pb)
        for ow in range(OW):
            ws = ow * sw - pl
            we = min(ws + kw, W + pr)
            h0, h1, w0, w1 = max(hs, 0), min(he, H), max(ws, 0), min(we, W)
            div = (he - hs) * (we - ws) if count_include_pad else (h1 - h0) * (w1 - w0)
            gx[:, :, h0:h1, w0:w1] += dyn[:, :, oh, ow][:, :, None, None] / div
    return from_nchw(gx, layout)


def softmax_backward(dy, y, axis=-1):
    dy, y = f64(dy), f64(y)
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def log_softmax_backward(dy, y, axis=-1):
    dy, y = f64(dy), f64(y)
    return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)


def cross_entropy(logits, targets):
    """torch's cross_entropy (reduction mean) of logits [N, C] and class indices [N], as a [1] array."""
    lp = log_softmax(logits, axis=1)
    return np.array([-lp[np.arange(len(targets)), np.asarray(targets)].mean()])


def cross_entropy_backward(logits, targets, grad=None):
    n = len(targets)
    onehot = np.zeros(np.shape(logits))
    onehot[np.arange(n), np.asarray(targets)] = 1.0
    return (softmax(logits, axis=1) - onehot) / n * (1.0 if grad is None else f64(grad)[0])


def matmul_backward(dy, a, b, transpose_rhs=False):
    """(da, db) of y = a @ b (b^T with transpose_rhs); a 2-d b shared by a batched a sums over the batch."""
    dy, a, b = f64(dy), f64(a), f64(b)
    bm = np.swapaxes(b, -1, -2) if transpose_rhs else b
    da = dy @ np.swapaxes(bm, -1, -2)
    db = np.swapaxes(a, -1, -2) @ dy
    if b.ndim == 2 and db.ndim > 2:
        db = db.reshape(-1, *db.shape[-2:]).sum(axis=0)
    return da, np.swapaxes(db, -1, -2) if transpose_rhs else db

"""float64 references of every Graph op: test/python/reference.py, plus the ops it lacks (the math functions,
maximum/minimum/pow, hardswish/hardsigmoid, slice, reduce, resize_nearest, rms_norm, attention), written the
same way: plain numpy, independent of the compiler."""
from __future__ import annotations

import math

import numpy as np

import fuzzing  # noqa: F401 - puts test/python on sys.path
from reference import (add, avg_pool2d, batch_norm, clamp, concat, conv2d, div, elu, erf, f64, flatten,  # noqa: F401
                       gelu, global_avg_pool, group_norm, layer_norm, leaky_relu, linear, log_softmax, matmul,
                       max_pool2d, mul, pad, relu, relu6, reshape, sigmoid, silu, softmax, sub, tanh, transpose)


def exp(x):
    return np.exp(f64(x))


def log(x):
    return np.log(f64(x))


def sqrt(x):
    return np.sqrt(f64(x))


def abs(x):  # noqa: A001 - the op's name
    return np.abs(f64(x))


def maximum(a, b):
    return np.maximum(f64(a), f64(b))


def minimum(a, b):
    return np.minimum(f64(a), f64(b))


def pow(a, b):  # noqa: A001 - the op's name
    return np.power(f64(a), f64(b))


def slice(x, starts, ends, axes=None, steps=None):  # noqa: A001 - the op's name
    """x[start:end:step] on each of axes (default the first len(starts)), Python's clamping rules."""
    x = f64(x)
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(axes) if steps is None else list(steps)
    index = [np.s_[:]] * x.ndim
    for ax, b, e, s in zip(axes, starts, ends, steps):
        index[ax] = np.s_[b:e:s]
    return x[tuple(index)]


def reduce(x, kind, axes=None, keepdims=False):
    fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind]
    axes = tuple(range(np.ndim(x))) if axes is None else tuple(axes)
    return fn(f64(x), axis=axes, keepdims=bool(keepdims))


def resize_nearest(x, scales):
    """out[i] = x[i // scale] on every axis."""
    x = f64(x)
    for ax, s in enumerate(scales):
        x = np.repeat(x, int(s), axis=ax)
    return x


def hardsigmoid(x, alpha=1 / 6, beta=0.5):
    return np.clip(alpha * f64(x) + beta, 0.0, 1.0)


def hardswish(x):
    return f64(x) * hardsigmoid(x)


def rms_norm(x, scale=None, eps=1e-5, normalized_ndim=1):
    """x / sqrt(mean(x^2) + eps) [* scale] over the trailing normalized_ndim axes."""
    x = f64(x)
    axes = tuple(range(x.ndim - normalized_ndim, x.ndim))
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y if scale is None else y * f64(scale)


def attention(q, k, v, mask=None, causal=False, scale=None, layout="BHSD"):
    """softmax(scale q k^T + mask; causal: key j > query i masked) @ v per batch and head, as torch's
    scaled_dot_product_attention; layout BSHD: q, k, v and the result are [B, S, H, D], the mask still
    broadcasts to [B, H, Sq, Sk]."""
    swap = (0, 2, 1, 3) if layout == "BSHD" else (0, 1, 2, 3)
    q, k, v = (f64(t).transpose(swap) for t in (q, k, v))
    s = np.einsum("bhid,bhjd->bhij", q, k) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = s + f64(mask)
    if causal:
        s = np.where(np.arange(k.shape[2])[None, :] > np.arange(q.shape[2])[:, None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v).transpose(swap)

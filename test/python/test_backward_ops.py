"""The backward ops of training (issue 31): conv2d_backward_data / _weights, batch_norm_training / _statistics /
_backward, layer_norm_backward, activation_backward, max/avg_pool2d_backward, softmax / log_softmax_backward,
cross_entropy and its backward, and the Graph's matmul_backward (existing ops).

Three checks:
  1. the float64 references (reference.py) against central differences of the forward references, on small
     random shapes: the yardstick itself is a gradient;
  2. the references, and the ops compiled in f32, against torch.autograd in float64 (skipped without torch);
  3. every op compiled (the reference kernels, "prim-lower", and the default pipeline) on random data against the
     references, in f32, f16 and bf16: odd sizes, stride 2, asymmetric padding, dilation 2, groups and depthwise,
     both layouts and the three filter layouts, ceil_mode, count_include_pad.
GPU targets record and replay through helpers.run_on_gpu like test_ops.py (OPENPRIM_TEST_TARGET, OPENPRIM_GPU_RECORD).

    python -m pytest test/python/test_backward_ops.py -q
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import openprim
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, rounded
from openprim.base.errors import OpenPrimError
from openprim.dialect import graph_functions
from openprim.passes import batch_chunks
from openprim.pyfrontend import Graph

PIPELINES = {"lower": "prim-lower", "full": None}


def grid(configs=None):
    """pytest params over ([config,] dtype, pipeline), as test_ops.py's."""
    out = []
    for cfg in configs if configs is not None else [None]:
        for dt in DTYPES:
            for pname, pipe in PIPELINES.items():
                vals = (dt, pipe) if configs is None else (cfg, dt, pipe)
                out.append(pytest.param(*vals, id=f"{dt}-{pname}" if configs is None else f"{cfg['id']}-{dt}-{pname}"))
    return out


def int_input(net: Net, shape, high: int, dtype="i64"):
    """An integer graph input of values in [0, high) (class indices), fed as they are."""
    v = net.rng.integers(0, high, shape)
    t = net.g.input(net._name("t"), shape, dtype)
    net.feeds.append(v.astype(np.int64 if dtype == "i64" else np.int32))
    return t, v


# ----------------------------------------------------------------------------- configurations
def _random_conv(seed):
    """A convolution of random geometry (odd sizes, any stride, padding, dilation, groups, layouts)."""
    r = np.random.default_rng(seed)
    g = int(r.choice([1, 2, 3]))
    R, S = (int(v) for v in r.integers(1, 4, 2))
    dil = tuple(int(v) for v in r.integers(1, 3, 2))
    pad = (int(r.integers(0, R)), int(r.integers(0, S)), int(r.integers(0, R)), int(r.integers(0, S)))
    H = int(r.integers(dil[0] * (R - 1) + 1, 12)) | 1
    W = int(r.integers(dil[1] * (S - 1) + 1, 12)) | 1
    layout = str(r.choice(["NCHW", "NHWC"]))
    return dict(id=f"random{seed}", layout=layout, N=int(r.integers(1, 3)), C=g * int(r.integers(1, 4)),
                H=H, W=W, K=g * int(r.integers(1, 4)), kernel=(R, S), stride=tuple(int(v) for v in r.integers(1, 3, 2)),
                padding=pad, dilation=dil, groups=g, filter_layout=str(r.choice(["KCRS", "KRSC", "RSCK"])))


CONV = [
    dict(id="nchw_s2_asympad", layout="NCHW", N=2, C=3, H=9, W=7, K=5, kernel=(3, 3), stride=2,
         padding=(1, 0, 2, 1), dilation=1, groups=1, filter_layout="KCRS"),
    dict(id="nhwc_dil2_groups2_krsc", layout="NHWC", N=1, C=4, H=11, W=9, K=6, kernel=(3, 3), stride=1,
         padding=(2, 1, 2, 1), dilation=2, groups=2, filter_layout="KRSC"),
    dict(id="nhwc_depthwise_x2_s2_rsck", layout="NHWC", N=2, C=5, H=9, W=7, K=10, kernel=(3, 3), stride=2,
         padding=(1, 1, 0, 2), dilation=1, groups=5, filter_layout="RSCK"),
    dict(id="nchw_depthwise_s2_dil2", layout="NCHW", N=1, C=3, H=9, W=9, K=3, kernel=(3, 3), stride=2,
         padding=(2, 2, 1, 2), dilation=2, groups=3, filter_layout="KCRS"),
    # rows beyond the last window get no gradient; a 1x1 with strides (2, 3)
    dict(id="nchw_1x1_s2x3", layout="NCHW", N=2, C=6, H=9, W=8, K=4, kernel=(1, 1), stride=(2, 3),
         padding=0, dilation=1, groups=1, filter_layout="KCRS"),
    dict(id="nchw_krsc_3x2_dil2x1", layout="NCHW", N=1, C=4, H=7, W=9, K=5, kernel=(3, 2), stride=(1, 2),
         padding=(1, 0, 1, 1), dilation=(2, 1), groups=1, filter_layout="KRSC"),
    _random_conv(31),
    _random_conv(9),     # NHWC activations with a KCRS filter
]


def _conv_data(net: Net, cfg):
    """(x, w, dy) inputs of a conv config and their float64 values, and the forward's keyword arguments."""
    N, C, H, W, K, (R, S), G = cfg["N"], cfg["C"], cfg["H"], cfg["W"], cfg["K"], cfg["kernel"], cfg["groups"]
    kw = {k: cfg[k] for k in ("stride", "padding", "dilation", "groups", "layout", "filter_layout")}
    x, xv = net.input((N, C, H, W) if cfg["layout"] == "NCHW" else (N, H, W, C))
    wshape = {"KCRS": (K, C // G, R, S), "KRSC": (K, R, S, C // G), "RSCK": (R, S, C // G, K)}[cfg["filter_layout"]]
    w, wv = net.input(wshape, scale=0.5)
    yshape = ref.conv2d(np.zeros(x.shape), ref.filter_to_kcrs(np.zeros(wshape), cfg["filter_layout"]),
                        **{**kw, "filter_layout": "KCRS"}).shape
    dy, dyv = net.input(yshape)
    return (x, xv), (w, wv), (dy, dyv), kw


def _conv_forward(x, w, kw):
    return ref.conv2d(x, ref.filter_to_kcrs(w, kw["filter_layout"]), **{**kw, "filter_layout": "KCRS"})


MAXPOOL = [
    dict(id="k3s2p1", layout="NCHW", x=(2, 3, 9, 7), kernel=3, stride=2, padding=1, dilation=1, ceil_mode=False),
    dict(id="nhwc_dil2_ceil_asympad", layout="NHWC", x=(2, 9, 13, 3), kernel=(3, 2), stride=2,
         padding=(1, 0, 0, 1), dilation=(2, 1), ceil_mode=True),
    dict(id="overlap_k3s1_dil2", layout="NCHW", x=(1, 2, 8, 9), kernel=3, stride=1, padding=(0, 1, 1, 1),
         dilation=2, ceil_mode=False),
    dict(id="nhwc_k2s2_ceil_odd", layout="NHWC", x=(1, 7, 5, 4), kernel=2, stride=2, padding=0, dilation=1,
         ceil_mode=True),
    dict(id="nhwc_threads_tail", layout="NHWC", x=(4, 40, 36, 37), kernel=3, stride=2, padding=1, dilation=1,
         ceil_mode=False),   # images split between the threads on the CPU, 37 channels: a vector tail
]
AVGPOOL = [
    dict(id="k3s2p1_ceil_incl", layout="NCHW", x=(2, 3, 9, 8), kernel=3, stride=2, padding=1, ceil_mode=True,
         count_include_pad=True),
    dict(id="nhwc_ceil_excl_asympad", layout="NHWC", x=(2, 7, 11, 5), kernel=(3, 2), stride=(2, 3),
         padding=(1, 0, 0, 1), ceil_mode=True, count_include_pad=False),
    dict(id="overlap_k3s1_excl", layout="NCHW", x=(1, 2, 7, 6), kernel=3, stride=1, padding=1, ceil_mode=False,
         count_include_pad=False),
]
POOL_KEYS = {"max": ("kernel", "stride", "padding", "dilation", "ceil_mode"),
             "avg": ("kernel", "stride", "padding", "ceil_mode", "count_include_pad")}
ACTIVATIONS = [("relu", ()), ("relu6", ()), ("gelu", ()), ("gelu_tanh", ()), ("silu", ()), ("sigmoid", ()),
               ("tanh", ()), ("hardswish", ()), ("leaky_relu", (0.2,)), ("elu", (0.7,)),
               ("hardsigmoid", (1 / 6, 0.5)), ("clamp", (-0.5, 0.8))]


def _act(name, params):
    """(epilogue name, params) of ACTIVATIONS' entries (relu6 is clamp 0..6)."""
    return ("clamp", (0.0, 6.0)) if name == "relu6" else (name, params)


# ----------------------------------------------------------------------------- 1. references vs finite differences
def numeric_vjp(f, x, dy, h=1e-6):
    """d sum(f(x) * dy) / dx by central differences, element by element (float64)."""
    x = np.array(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = np.sum(f(x) * dy)
        x[i] = old - h
        g[i] = (up - np.sum(f(x) * dy)) / (2 * h)
        x[i] = old
    return g


def fd_close(got, x, f, dy, what):
    want = numeric_vjp(f, x, dy)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(want).max()), err_msg=what)


@pytest.mark.parametrize("cfg", CONV, ids=[c["id"] for c in CONV])
def test_fd_conv2d(cfg, rng):
    net = Net(rng, "f32", cfg["layout"])
    (_, x), (_, w), (_, dy), kw = _conv_data(net, cfg)
    H, W = (x.shape[2:] if cfg["layout"] == "NCHW" else x.shape[1:3])
    fd_close(ref.conv2d_backward_data(dy, w, (H, W), **kw), x, lambda v: _conv_forward(v, w, kw), dy, "data")
    fd_close(ref.conv2d_backward_weights(x, dy, cfg["kernel"], **kw), w, lambda v: _conv_forward(x, v, kw), dy,
             "weights")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_fd_batch_norm(layout, rng):
    x = rng.standard_normal((3, 4, 3, 5) if layout == "NCHW" else (3, 3, 5, 4)) * 2 + 0.5
    scale, shift, dy = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(x.shape)
    gx, gs, gb = ref.batch_norm_backward(dy, x, scale, *ref.batch_norm_statistics(x, 1e-3, layout), layout)
    fd_close(gx, x, lambda v: ref.batch_norm_training(v, scale, shift, 1e-3, layout), dy, "x")
    fd_close(gs, scale, lambda v: ref.batch_norm_training(x, v, shift, 1e-3, layout), dy, "scale")
    fd_close(gb, shift, lambda v: ref.batch_norm_training(x, scale, v, 1e-3, layout), dy, "shift")


@pytest.mark.parametrize("ndim", [1, 2])
def test_fd_layer_norm(ndim, rng):
    x = rng.standard_normal((2, 3, 5)) * 1.5
    scale, shift = rng.standard_normal(x.shape[-ndim:]), rng.standard_normal(x.shape[-ndim:])
    dy = rng.standard_normal(x.shape)
    gx, gs, gb = ref.layer_norm_backward(dy, x, scale, 1e-4, ndim)
    fd_close(gx, x, lambda v: ref.layer_norm(v, scale, shift, 1e-4, ndim), dy, "x")
    fd_close(gs, scale, lambda v: ref.layer_norm(x, v, shift, 1e-4, ndim), dy, "scale")
    fd_close(gb, shift, lambda v: ref.layer_norm(x, scale, v, 1e-4, ndim), dy, "shift")
    fd_close(ref.layer_norm_backward(dy, x, None, 1e-4, ndim)[0], x,
             lambda v: ref.layer_norm(v, None, None, 1e-4, ndim), dy, "x without scale")


@pytest.mark.parametrize("name,params", ACTIVATIONS, ids=[a for a, _ in ACTIVATIONS])
def test_fd_activation(name, params, rng):
    x, dy = rng.standard_normal((5, 7)) * 4, rng.standard_normal((5, 7))
    act, params = _act(name, params)
    fd_close(ref.activation_backward(dy, x, act, params), x, lambda v: ref.ACTIVATION_FORWARD[act](v, *params), dy, act)


FD_MAXPOOL = [c for c in MAXPOOL if math.prod(c["x"]) <= 2000]   # central differences cost a forward pass per
                                                                  # element twice: the 213,120-element case is for the kernels


@pytest.mark.parametrize("kind,cfg", [("max", c) for c in FD_MAXPOOL] + [("avg", c) for c in AVGPOOL],
                         ids=[f"max-{c['id']}" for c in FD_MAXPOOL] + [f"avg-{c['id']}" for c in AVGPOOL])
def test_fd_pool(kind, cfg, rng):
    x = rng.standard_normal(cfg["x"])
    kw = {k: cfg[k] for k in POOL_KEYS[kind]}
    forward = (ref.max_pool2d if kind == "max" else ref.avg_pool2d)
    dy = rng.standard_normal(forward(x, layout=cfg["layout"], **kw).shape)
    if kind == "max":
        got = ref.max_pool2d_backward(dy, x, layout=cfg["layout"], **kw)
    else:
        hw = x.shape[2:] if cfg["layout"] == "NCHW" else x.shape[1:3]
        got = ref.avg_pool2d_backward(dy, hw, layout=cfg["layout"], **kw)
    fd_close(got, x, lambda v: forward(v, layout=cfg["layout"], **kw), dy, kind)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_fd_softmax(axis, rng):
    x, dy = rng.standard_normal((3, 4, 5)) * 2, rng.standard_normal((3, 4, 5))
    fd_close(ref.softmax_backward(dy, ref.softmax(x, axis), axis), x, lambda v: ref.softmax(v, axis), dy, "softmax")
    fd_close(ref.log_softmax_backward(dy, ref.log_softmax(x, axis), axis), x, lambda v: ref.log_softmax(v, axis), dy,
             "log_softmax")


def test_fd_cross_entropy(rng):
    x, t, g = rng.standard_normal((5, 7)) * 2, rng.integers(0, 7, 5), rng.standard_normal(1)
    fd_close(ref.cross_entropy_backward(x, t, g), x, lambda v: ref.cross_entropy(v, t), g, "cross_entropy")


@pytest.mark.parametrize("ashape,bshape,transpose_rhs", [((5, 7), (7, 3), False), ((2, 5, 7), (7, 3), False),
                                                         ((2, 5, 7), (2, 7, 3), False), ((2, 5, 7), (3, 7), True),
                                                         ((2, 5, 7), (2, 3, 7), True)])
def test_fd_matmul(ashape, bshape, transpose_rhs, rng):
    a, b = rng.standard_normal(ashape), rng.standard_normal(bshape)
    dy = rng.standard_normal(ref.matmul(a, b, transpose_rhs=transpose_rhs).shape)
    da, db = ref.matmul_backward(dy, a, b, transpose_rhs)
    fd_close(da, a, lambda v: ref.matmul(v, b, transpose_rhs=transpose_rhs), dy, "a")
    fd_close(db, b, lambda v: ref.matmul(a, v, transpose_rhs=transpose_rhs), dy, "b")


# ----------------------------------------------------------------------------- 3. the compiled ops vs the references
@pytest.mark.parametrize("cfg,dtype,pipeline", grid(CONV))
def test_conv2d_backward(cfg, dtype, pipeline, rng):
    """grad_input, grad_filter and the bias's gradient (a reduce) of one convolution."""
    net = Net(rng, dtype, cfg["layout"])
    (x, xv), (w, wv), (dy, dyv), kw = _conv_data(net, cfg)
    outs = net.g.conv2d_backward(dy, x, w, output_mask=(True, True, True), **kw)
    gx, gw, gb = net.run(pipeline, *outs)
    hw = xv.shape[2:] if cfg["layout"] == "NCHW" else xv.shape[1:3]
    R, S = cfg["kernel"]
    Kg, (OH, OW) = cfg["K"] // cfg["groups"], (dyv.shape[2:] if cfg["layout"] == "NCHW" else dyv.shape[1:3])
    assert_close(gx, ref.conv2d_backward_data(dyv, wv, hw, **kw), dtype, reduction=Kg * R * S, what="grad_input")
    assert_close(gw, ref.conv2d_backward_weights(xv, dyv, (R, S), **kw), dtype, reduction=cfg["N"] * OH * OW,
                 what="grad_filter")
    axes = (0, 2, 3) if cfg["layout"] == "NCHW" else (0, 1, 2)
    assert_close(gb, dyv.sum(axis=axes), dtype, reduction=cfg["N"] * OH * OW, what="grad_bias")


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_batch_norm_training_and_backward(dtype, pipeline, rng):
    net = Net(rng, dtype)
    outs, wants = [], []
    for layout, shape, C in (("NCHW", (2, 5, 7, 9), 5), ("NHWC", (3, 5, 7, 3), 3)):
        x, xv = net.input(shape, scale=2.0)
        (s, sv), (b, bv) = net.input((C,)), net.input((C,))
        dy, dyv = net.input(shape)
        mean, inv = (rounded(v, dtype) for v in ref.batch_norm_statistics(xv, 1e-3, layout))
        m, mv = net.g.input(net._name("m"), (C,)), mean
        i, iv = net.g.input(net._name("i"), (C,)), inv
        net.feeds += [mv.astype(np.float32), iv.astype(np.float32)]
        outs += [net.g.batch_norm_training(x, s, b, 1e-3, layout), *net.g.batch_norm_statistics(x, 1e-3, layout),
                 *net.g.batch_norm_backward(dy, x, s, m, i, layout)]
        wants += [(f"training {layout}", ref.batch_norm_training(xv, sv, bv, 1e-3, layout), 1),
                  *[(f"statistics {what} {layout}", v, 1) for what, v in
                    zip(("mean", "inv_std"), ref.batch_norm_statistics(xv, 1e-3, layout))],
                  *[(f"backward {what} {layout}", v, xv.size // C) for what, v in
                    zip(("grad_input", "grad_scale", "grad_shift"),
                        ref.batch_norm_backward(dyv, xv, sv, mv, iv, layout))]]
    for out, (what, want, red) in zip(net.run(pipeline, *outs), wants):
        assert_close(out, want, dtype, reduction=red if "grad_input" not in what else 1, what=what)


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_batch_norm_chain(dtype, pipeline, rng):
    """The statistics op feeding the backward, as a training step does: the true gradient of the training output."""
    net = Net(rng, dtype, "NHWC")
    x, xv = net.input((2, 3, 5, 7), scale=1.5)
    (s, sv), (dy, dyv) = net.input((7,)), net.input((2, 3, 5, 7))
    mean, inv = net.g.batch_norm_statistics(x, 1e-5)
    outs = net.g.batch_norm_backward(dy, x, s, mean, inv)
    wants = ref.batch_norm_backward(dyv, xv, sv, *ref.batch_norm_statistics(xv, 1e-5, "NHWC"), "NHWC")
    for out, want, what in zip(net.run(pipeline, *outs), wants, ("grad_input", "grad_scale", "grad_shift")):
        assert_close(out, want, dtype, reduction=1 if what == "grad_input" else 30, what=what)


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_batch_norm_many_rows(dtype, pipeline, rng):
    """Statistics and backward over more rows than one block sums (GPU: rows split across blocks, the last
    split ragged), channels not a multiple of 8, a mean far from zero against a unit spread (shifted sums)."""
    net = Net(rng, dtype, "NHWC")
    x, xv = net.input((3, 37, 29, 12), scale=1.0)
    xv = rounded(xv + 6.0, dtype)
    net.feeds[-1] = xv.astype(np.float32)
    (s, sv), (dy, dyv) = net.input((12,)), net.input((3, 37, 29, 12))
    mean, inv = net.g.batch_norm_statistics(x, 1e-5)
    outs = [mean, inv, *net.g.batch_norm_backward(dy, x, s, mean, inv),
            net.g.batch_norm_backward(dy, x, s, mean, inv, output_mask=(True, False, False))[0]]
    want_stats = ref.batch_norm_statistics(xv, 1e-5, "NHWC")
    wants = [*want_stats, *ref.batch_norm_backward(dyv, xv, sv, *want_stats, "NHWC")]
    wants.append(wants[2])
    rows = 3 * 37 * 29
    for out, want, what in zip(net.run(pipeline, *outs), wants, ("mean", "inv_std", "grad_input", "grad_scale",
                                                                  "grad_shift", "grad_input")):
        assert_close(out, want, dtype, reduction=1 if what == "grad_input" else rows, what=what)


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_layer_norm_backward(dtype, pipeline, rng):
    net = Net(rng, dtype)
    g = net.g
    cases = []
    for shape, k, with_scale in (((2, 7, 13), 1, True), ((2, 3, 5, 7), 2, False), ((3, 9), 1, True), ((5, 3), 2, True)):
        x, xv = net.input(shape, scale=2.0)
        dy, dyv = net.input(shape)
        s, sv = net.input(shape[-k:]) if with_scale else (None, None)
        outs = g.layer_norm_backward(dy, x, s, 1e-4, k)
        wants = ref.layer_norm_backward(dyv, xv, sv, 1e-4, k)
        lead = int(np.prod(shape[:-k]))
        cases += [(o, f"{what} {shape} ndim={k}", want, 1 if what == "grad_input" else lead)
                  for o, want, what in zip(outs, wants, ("grad_input", "grad_scale", "grad_shift")) if o is not None]
    for out, (_, what, want, red) in zip(net.run(pipeline, *[c[0] for c in cases]), cases):
        assert_close(out, want, dtype, reduction=red, what=what)


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_activation_backward(dtype, pipeline, rng):
    net = Net(rng, dtype)
    x, xv = net.input((2, 3, 9, 7), scale=4.0)
    dy, dyv = net.input((2, 3, 9, 7))
    outs = [net.g.activation_backward(dy, x, name, params or None) for name, params in ACTIVATIONS]
    for out, (name, params) in zip(net.run(pipeline, *outs), ACTIVATIONS):
        act, p = _act(name, params)
        if act == "hardsigmoid":
            p = tuple(rounded(v, "f32") for v in p)
        assert_close(out, ref.activation_backward(dyv, xv, act, p), dtype, what=name)


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_max_pool2d_backward(dtype, pipeline, rng):
    net = Net(rng, dtype)
    outs, wants = [], []
    for cfg in MAXPOOL:
        x, xv = net.input(cfg["x"])
        kw = {k: cfg[k] for k in POOL_KEYS["max"]}
        dy, dyv = net.input(ref.max_pool2d(xv, layout=cfg["layout"], **kw).shape)
        outs.append(net.g.max_pool2d_backward(dy, x, layout=cfg["layout"], **kw))
        wants.append(ref.max_pool2d_backward(dyv, xv, layout=cfg["layout"], **kw))
    for out, want, cfg in zip(net.run(pipeline, *outs), wants, MAXPOOL):
        assert_close(out, want, dtype, reduction=4, what=cfg["id"])


@pytest.mark.skipif(TARGET != "cpu", reason="the CPU kernel (kernels/cpu/max_pool_backward.py)")
def test_max_pool2d_backward_ties():
    """Windows full of equal values (three levels): each window's gradient goes to its first maximum in
    row-major order, exactly, as PyTorch's does."""
    x = np.random.default_rng(5).integers(0, 3, (3, 17, 19, 21)).astype(np.float32)
    kw = dict(kernel=3, stride=2, padding=1, dilation=1, ceil_mode=True)
    dy = np.random.default_rng(6).standard_normal(ref.max_pool2d(x, layout="NHWC", **kw).shape).astype(np.float32)
    g = Graph()
    g.output(g.max_pool2d_backward(g.input("dy", dy.shape), g.input("x", x.shape), layout="NHWC", **kw))
    np.testing.assert_allclose(openprim.compile(g)(dy, x), ref.max_pool2d_backward(dy, x, layout="NHWC", **kw),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_avg_pool2d_backward(dtype, pipeline, rng):
    net = Net(rng, dtype)
    outs, wants = [], []
    for cfg in AVGPOOL:
        kw = {k: cfg[k] for k in POOL_KEYS["avg"]}
        hw = cfg["x"][2:] if cfg["layout"] == "NCHW" else cfg["x"][1:3]
        dy, dyv = net.input(ref.avg_pool2d(np.zeros(cfg["x"]), layout=cfg["layout"], **kw).shape)
        outs.append(net.g.avg_pool2d_backward(dy, hw, layout=cfg["layout"], **kw))
        wants.append(ref.avg_pool2d_backward(dyv, hw, layout=cfg["layout"], **kw))
    for out, want, cfg in zip(net.run(pipeline, *outs), wants, AVGPOOL):
        assert_close(out, want, dtype, reduction=4, what=cfg["id"])


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_softmax_backward(dtype, pipeline, rng):
    net = Net(rng, dtype)
    x = rng.standard_normal((2, 3, 5, 7)) * 2
    cases = []
    for axis in (-1, 1, 0):
        for log in (False, True):
            y, yv = net.g.input(net._name("y"), x.shape), rounded((ref.log_softmax if log else ref.softmax)(x, axis),
                                                                   dtype)
            net.feeds.append(yv.astype(np.float32))
            dy, dyv = net.input(x.shape)
            op, fn = ("log_softmax_backward", ref.log_softmax_backward) if log else \
                ("softmax_backward", ref.softmax_backward)
            cases.append((getattr(net.g, op)(dy, y, axis), f"{op} axis={axis}", fn(dyv, yv, axis), x.shape[axis]))
    v = rng.standard_normal(9)     # a 1-d row: the sums are 0-d
    y, yv = net.g.input(net._name("y"), (9,)), rounded(ref.softmax(v, 0), dtype)
    net.feeds.append(yv.astype(np.float32))
    dy, dyv = net.input((9,))
    cases.append((net.g.softmax_backward(dy, y, 0), "softmax_backward 1-d", ref.softmax_backward(dyv, yv, 0), 9))
    for out, (_, what, want, red) in zip(net.run(pipeline, *[c[0] for c in cases]), cases):
        assert_close(out, want, dtype, reduction=red, what=what)


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_cross_entropy(dtype, pipeline, rng):
    net = Net(rng, dtype)
    g = net.g
    x, xv = net.input((5, 7), scale=2.0)
    t, tv = int_input(net, (5,), 7)
    x2, x2v = net.input((3, 11), scale=3.0)
    t2, t2v = int_input(net, (3,), 11, "i32")
    d, dv = net.input((1,))
    cases = [(g.cross_entropy(x, t), "loss", ref.cross_entropy(xv, tv), 7),
             (g.cross_entropy_backward(x, t), "grad", ref.cross_entropy_backward(xv, tv), 7),
             (g.cross_entropy(x2, t2), "loss i32", ref.cross_entropy(x2v, t2v), 11),
             (g.cross_entropy_backward(x2, t2, d), "grad i32 * grad_output", ref.cross_entropy_backward(x2v, t2v, dv),
              11)]
    for out, (_, what, want, red) in zip(net.run(pipeline, *[c[0] for c in cases]), cases):
        assert_close(out, want, dtype, reduction=red, what=what)


@pytest.mark.parametrize("dtype,pipeline", grid())
def test_matmul_backward(dtype, pipeline, rng):
    """The Graph's matmul_backward: matmuls and transposes, no new op."""
    net = Net(rng, dtype)
    cases = []
    for ashape, bshape, tr in (((5, 7), (7, 3), False), ((2, 5, 7), (7, 3), False), ((2, 5, 7), (2, 7, 3), False),
                               ((2, 5, 7), (3, 7), True), ((3, 5), (9, 5), True)):
        (a, av), (b, bv) = net.input(ashape), net.input(bshape)
        dy, dyv = net.input(ref.matmul(av, bv, transpose_rhs=tr).shape)
        ga, gb = net.g.matmul_backward(dy, a, b, tr)
        wa, wb = ref.matmul_backward(dyv, av, bv, tr)
        M = int(np.prod(ashape[:-1])) if len(bshape) == 2 else ashape[-2]
        cases += [(ga, f"grad_a {ashape} {bshape} {tr}", wa, dyv.shape[-1]), (gb, f"grad_b {ashape} {bshape}", wb, M)]
    for out, (_, what, want, red) in zip(net.run(pipeline, *[c[0] for c in cases]), cases):
        assert_close(out, want, dtype, reduction=red, what=what)


# ----------------------------------------------------------------------------- 2. torch.autograd
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _t(torch, a, grad=True):
    return torch.tensor(np.asarray(a, np.float64), requires_grad=grad)


def _vs_torch(got, want, what, dtype="f32", reduction=1):
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    assert_close(got, want, dtype, reduction=reduction, what=what)


@pytest.mark.parametrize("cfg", CONV[:3] + CONV[-1:], ids=[c["id"] for c in CONV[:3] + CONV[-1:]])
def test_torch_conv2d(cfg, torch, rng):
    net = Net(rng, "f32", cfg["layout"])
    (x, xv), (w, wv), (dy, dyv), kw = _conv_data(net, cfg)
    F = torch.nn.functional
    nchw = cfg["layout"] == "NCHW"
    tx, tw = _t(torch, xv if nchw else xv.transpose(0, 3, 1, 2)), _t(torch, ref.filter_to_kcrs(wv, kw["filter_layout"]))
    pt, pl, pb, pr = ref.pad4(cfg["padding"])
    y = F.conv2d(F.pad(tx, (pl, pr, pt, pb)), tw, None, cfg["stride"], 0, cfg["dilation"], cfg["groups"])
    y.backward(_t(torch, dyv if nchw else dyv.transpose(0, 3, 1, 2), False))
    gx_t = tx.grad.numpy() if nchw else tx.grad.numpy().transpose(0, 2, 3, 1)
    gw_t = ref.filter_from_kcrs(tw.grad.numpy(), kw["filter_layout"])
    hw = xv.shape[2:] if nchw else xv.shape[1:3]
    np.testing.assert_allclose(ref.conv2d_backward_data(dyv, wv, hw, **kw), gx_t, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ref.conv2d_backward_weights(xv, dyv, cfg["kernel"], **kw), gw_t, rtol=1e-10, atol=1e-10)
    gx, gw = net.run(None, *net.g.conv2d_backward(dy, x, w, **kw)[:2])
    _vs_torch(gx, gx_t, "grad_input", reduction=27)
    _vs_torch(gw, gw_t, "grad_filter", reduction=100)


def test_torch_batch_norm(torch, rng):
    net = Net(rng, "f32")
    x, xv = net.input((3, 4, 5, 7), scale=2.0)
    (s, sv), (b, bv), (dy, dyv) = net.input((4,)), net.input((4,)), net.input((3, 4, 5, 7))
    tx, ts, tb = _t(torch, xv), _t(torch, sv), _t(torch, bv)
    y, save_mean, save_invstd = torch.ops.aten.native_batch_norm(tx, ts, tb, None, None, True, 0.1, 1e-5)
    y.backward(_t(torch, dyv, False))
    mean, inv = net.g.batch_norm_statistics(x)
    outs = net.run(None, net.g.batch_norm_training(x, s, b), mean, inv, *net.g.batch_norm_backward(dy, x, s, mean, inv))
    want = [y, save_mean, save_invstd, tx.grad, ts.grad, tb.grad]
    names = ["output", "mean", "inv_std", "grad_input", "grad_scale", "grad_shift"]
    refs = [ref.batch_norm_training(xv, sv, bv), *ref.batch_norm_statistics(xv),
            *ref.batch_norm_backward(dyv, xv, sv, *ref.batch_norm_statistics(xv))]
    for got, r, w, what in zip(outs, refs, want, names):
        np.testing.assert_allclose(r, w.detach().numpy(), rtol=1e-9, atol=1e-9, err_msg=what)
        _vs_torch(got, w, what, reduction=105)


def test_torch_layer_norm(torch, rng):
    net = Net(rng, "f32")
    x, xv = net.input((2, 3, 5, 7), scale=2.0)
    (s, sv), (dy, dyv), bv = net.input((5, 7)), net.input((2, 3, 5, 7)), rng.standard_normal((5, 7))
    tx, ts, tb = _t(torch, xv), _t(torch, sv), _t(torch, bv)
    torch.nn.functional.layer_norm(tx, (5, 7), ts, tb, 1e-5).backward(_t(torch, dyv, False))
    outs = net.run(None, *net.g.layer_norm_backward(dy, x, s, 1e-5, 2))
    for got, r, w, what in zip(outs, ref.layer_norm_backward(dyv, xv, sv, 1e-5, 2), (tx.grad, ts.grad, tb.grad),
                               ("grad_input", "grad_scale", "grad_shift")):
        np.testing.assert_allclose(r, w.numpy(), rtol=1e-9, atol=1e-9, err_msg=what)
        _vs_torch(got, w, what, reduction=6)


def test_torch_activations(torch, rng):
    F = torch.nn.functional
    fns = {"relu": F.relu, "relu6": F.relu6, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
           "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "hardswish": F.hardswish,
           "leaky_relu": lambda v: F.leaky_relu(v, 0.2), "elu": lambda v: F.elu(v, 0.7), "hardsigmoid": F.hardsigmoid,
           "clamp": lambda v: F.hardtanh(v, -0.5, 0.8)}
    net = Net(rng, "f32")
    x, xv = net.input((3, 41), scale=4.0)
    xv[0, :9] = [0.0, 6.0, -3.0, 3.0, -0.5, 0.8, 0.25, -6.0, 1.0]   # the kinks: torch's choices there
    net.feeds[0][0, :9] = xv[0, :9]
    dy, dyv = net.input((3, 41))
    outs = net.run(None, *[net.g.activation_backward(dy, x, name, params or None) for name, params in ACTIVATIONS])
    for got, (name, params) in zip(outs, ACTIVATIONS):
        tx = _t(torch, xv)
        fns[name](tx).backward(_t(torch, dyv, False))
        tol = 1e-7 if name == "hardsigmoid" else 1e-9    # torch's hardsigmoid' is grad * float32(1/6)
        np.testing.assert_allclose(ref.activation_backward(dyv, xv, *_act(name, params)), tx.grad.numpy(), rtol=tol,
                                   atol=tol, err_msg=name)
        _vs_torch(got, tx.grad, name)


def test_torch_pools(torch, rng):
    """Integer-valued data, so that windows hold ties: torch gives the gradient to the first maximum."""
    F = torch.nn.functional
    net = Net(rng, "f32")
    cases = [("max", dict(kernel=3, stride=2, padding=1, dilation=1, ceil_mode=False), (2, 3, 9, 7)),
             ("max", dict(kernel=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(2, 1), ceil_mode=True),
              (1, 2, 10, 7)),
             ("avg", dict(kernel=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), (2, 3, 9, 8)),
             ("avg", dict(kernel=(2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=False, count_include_pad=True),
              (1, 2, 7, 9))]
    outs, wants = [], []
    for kind, kw, shape in cases:
        xv = rng.integers(-2, 3, shape).astype(np.float64)
        x = net.g.input(net._name("x"), shape)
        net.feeds.append(xv.astype(np.float32))
        tx = _t(torch, xv)
        if kind == "max":
            y = F.max_pool2d(tx, kw["kernel"], kw["stride"], kw["padding"], kw["dilation"], kw["ceil_mode"])
        else:
            y = F.avg_pool2d(tx, kw["kernel"], kw["stride"], kw["padding"], kw["ceil_mode"], kw["count_include_pad"])
        dy, dyv = net.input(tuple(y.shape))
        y.backward(_t(torch, dyv, False))
        r = ref.max_pool2d_backward(dyv, xv, **kw) if kind == "max" else ref.avg_pool2d_backward(dyv, shape[2:], **kw)
        np.testing.assert_allclose(r, tx.grad.numpy(), rtol=1e-10, atol=1e-10, err_msg=f"{kind} {kw}")
        outs.append(net.g.max_pool2d_backward(dy, x, **kw) if kind == "max" else
                    net.g.avg_pool2d_backward(dy, shape[2:], **kw))
        wants.append(tx.grad)
    for got, want, (kind, kw, _) in zip(net.run(None, *outs), wants, cases):
        _vs_torch(got, want, f"{kind} {kw}", reduction=4)


def test_torch_softmax_cross_entropy(torch, rng):
    net = Net(rng, "f32")
    g = net.g
    xv = rng.standard_normal((4, 9)) * 2
    outs, wants = [], []
    for fn, op in ((torch.softmax, g.softmax_backward), (torch.log_softmax, g.log_softmax_backward)):
        tx = _t(torch, xv)
        y = fn(tx, 1)
        dy, dyv = net.input((4, 9))
        y.backward(_t(torch, dyv, False))
        yin = g.input(net._name("y"), (4, 9))
        net.feeds.append(y.detach().numpy().astype(np.float32))
        outs.append(op(dy, yin, 1))
        wants.append(tx.grad)
    logits, lv = net.input((6, 5), scale=2.0)
    t, tv = int_input(net, (6,), 5)
    tl = _t(torch, lv)
    loss = torch.nn.functional.cross_entropy(tl, torch.tensor(tv))
    loss.backward()
    np.testing.assert_allclose(ref.cross_entropy(lv, tv), [loss.item()], rtol=1e-12)
    np.testing.assert_allclose(ref.cross_entropy_backward(lv, tv), tl.grad.numpy(), rtol=1e-10, atol=1e-12)
    outs += [g.cross_entropy(logits, t), g.cross_entropy_backward(logits, t)]
    wants += [loss.detach().reshape(1), tl.grad]
    for got, want, what in zip(net.run(None, *outs), wants, ("softmax", "log_softmax", "cross_entropy", "grad")):
        _vs_torch(got, want, what, reduction=9)


def test_torch_matmul(torch, rng):
    net = Net(rng, "f32")
    (a, av), (b, bv), (dy, dyv) = net.input((2, 5, 7)), net.input((3, 7)), net.input((2, 5, 3))
    ta, tb = _t(torch, av), _t(torch, bv)
    (ta @ tb.T).backward(_t(torch, dyv, False))
    for r, w in zip(ref.matmul_backward(dyv, av, bv, True), (ta.grad, tb.grad)):
        np.testing.assert_allclose(r, w.numpy(), rtol=1e-10, atol=1e-10)
    for got, want, what in zip(net.run(None, *net.g.matmul_backward(dy, a, b, True)), (ta.grad, tb.grad), "ab"):
        _vs_torch(got, want, what, reduction=10)


# ----------------------------------------------------------------------------- the passes, the checks, the errors
def test_batch_chunks_keep_batch_reductions_whole():
    """prim-batch-chunks does not split a batch across the ops that reduce over it; the per-sample ones pass."""
    def reason(build):
        g = Graph()
        x = g.input("x", (8, 4, 9, 9))
        g.output(*build(g, x))
        module = openprim.compiler.load_module(g)
        found = batch_chunks.analyze(graph_functions(module.operation)[0])
        return found if isinstance(found, str) else None
    c = lambda n: np.ones(n, np.float32)  # noqa: E731
    assert "'prim.batch_norm_training' mixes samples" in reason(
        lambda g, x: [g.batch_norm_training(x, g.param("s", c(4)), g.param("b", c(4)))])
    assert "'prim.batch_norm_statistics' mixes samples" in reason(lambda g, x: [g.relu(g.batch_norm_statistics(x)[0])])
    assert "'prim.batch_norm_backward' mixes samples" in reason(
        lambda g, x: [g.batch_norm_backward(x, x, g.param("s", c(4)), g.param("m", c(4)), g.param("i", c(4)),
                                            output_mask=(True, False, False))[0]])
    assert "'prim.conv2d_backward_weights' mixes samples" in reason(
        lambda g, x: [g.conv2d_backward_weights(x, x, 1)])
    assert "'prim.cross_entropy_backward' mixes samples" in reason(
        lambda g, x: [g.cross_entropy_backward(g.reshape(x, (8, -1)), np.arange(8))])
    assert "'prim.softmax_backward' mixes samples" in reason(lambda g, x: [g.softmax_backward(x, x, 0)])
    assert reason(lambda g, x: [g.softmax_backward(x, x, 1), g.activation_backward(x, x, "silu"),
                                g.max_pool2d_backward(g.max_pool2d(x, 3, 2), x, 3, 2),
                                g.conv2d_backward_data(x, g.param("w", np.ones((4, 4, 1, 1))), (9, 9)),
                                g.layer_norm_backward(x, x, normalized_ndim=3, output_mask=(True, False, False))[0]])\
        is None


@pytest.mark.skipif(TARGET != "cpu", reason="runs on the CPU")
def test_cross_entropy_target_out_of_range():
    g = Graph()
    x, t = g.input("x", (3, 4)), g.input("t", (3,), "i64")
    g.output(g.cross_entropy(x, t))
    run = openprim.compile(g)
    xv = np.zeros((3, 4), np.float32)
    np.testing.assert_allclose(run(xv, np.array([0, 3, 1])), [np.log(4)], rtol=1e-6)
    with pytest.raises(OpenPrimError, match=r"prim\.cross_entropy \(4 classes\): an index is outside \[-4, 4\)"):
        run(xv, np.array([0, 4, 1]))


def _bad_input_size(g):
    g.conv2d_backward_data(g.input("dy", (1, 4, 4, 4)), g.input("w", (4, 3, 3, 3)), (12, 12), stride=2)


def _bad_filter_size(g):
    g.conv2d_backward_weights(g.input("x", (1, 3, 9, 9)), g.input("dy", (1, 4, 4, 4)), 1, stride=2)


def _bad_bn_channels(g):
    g.batch_norm_backward(g.input("dy", (2, 3, 4, 4)), g.input("x", (2, 3, 4, 4)), g.input("s", (3,)),
                          g.input("m", (4,)), g.input("i", (3,)), output_mask=(True, False, False))


def _bad_bn_sums(g):
    x = g.input("x", (2, 3, 4, 4))
    g._emit("batch_norm_backward", [x, x, g.input("s", (3,)), g.input("m", (3,)), g.input("i", (3,)),
                                    g.input("sums", (3, 2))], {"layout": "NCHW"})


def _bad_pool_grad(g):
    g.max_pool2d_backward(g.input("dy", (1, 2, 4, 4)), g.input("x", (1, 2, 9, 9)), 3, 2, 1)


def _bad_activation(g):
    g.activation_backward(g.input("dy", (2, 3)), g.input("x", (2, 3)), "none")


def _bad_targets(g):
    g.cross_entropy(g.input("x", (4, 5)), g.input("t", (4,)))


ERRORS = [(_bad_input_size, r"prim\.conv2d_backward_data .*grad_output is 4x4 but a 12x12 input \(input_size\) with a "
                            r"3x3 filter gives a 5x5 output"),
          (_bad_filter_size, r"prim\.conv2d_backward_weights .*grad_output is 4x4 but the 9x9 input with a 1x1 filter "
                             r"\(filter_size\) gives a 5x5 output"),
          (_bad_bn_channels, r"prim\.batch_norm_backward .*saved_mean must have shape 3, got 4"),
          (_bad_bn_sums, r"prim\.batch_norm_backward .*sums must have shape 2x3, got 3x2"),
          (_bad_pool_grad, r"prim\.max_pool2d_backward .*grad_output 1x2x4x4 must have the pool's output shape "
                           r"1x2x5x5"),
          (_bad_activation, r"prim\.activation_backward .*activation must not be 'none'"),
          (_bad_targets, r"prim\.cross_entropy .*targets must be integers \(i64, i32\), got f32")]


@pytest.mark.parametrize("build,match", ERRORS, ids=[f.__name__[1:] for f, _ in ERRORS])
def test_build_errors(build, match):
    with pytest.raises(OpenPrimError, match=match):
        build(Graph())

"""prim-fuse: what it fuses, what it must leave alone, and that the fused kernels compute the same
numbers as the unfused graph (float64 numpy, reference.py), in f32 and f16. (bf16 is left out on
purpose: prim-fuse does not read bf16 constants, so it folds no batch_norm or bias add there.)

Each case builds a small graph and states the expected structure:
  ops       the graph function's ops after `prim-fuse` (constants left out; a call reads 'call @f')
  fused     the op names in the body of each prim-fuse'd elementwise function (as a multiset)
  kernels   (bias, residual, activation) of each prim.conv2d / prim.matmul after prim-fuse
  launches  the number of kernel launches of the compiled plan, per layout (NCHW convolutions run
            as NHWC between two transposes, plus one per residual input)

    python -m pytest test/python/test_fusion.py -q
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import reference as ref
from helpers import Net, assert_close, fused_bodies, graph_ops, op_names, operands
from openprim import dialect, passes
from openprim.pyfrontend import to_module

FUSION_DTYPES = ("f32", "f16")

N, C, H, W, K = 2, 3, 9, 7, 5      # batch, conv input channels, odd spatial sizes, output channels
CONV_KW = dict(stride=(2, 1), padding=(1, 0, 2, 1))
RED = C * 3 * 3


# ----------------------------------------------------------------------------- graph pieces
class Case:
    """A Net in `layout` with helpers that return (tensor, float64 reference) pairs."""

    def __init__(self, net: Net, layout: str):
        self.net, self.g, self.layout = net, net.g, layout

    def x(self):
        return self.net.input((N, C, H, W) if self.layout == "NCHW" else (N, H, W, C))

    def conv(self, x, bias=True, **kw):
        (x, xv), g = x, self.g
        w, wv = self.net.weight((K, C, 3, 3) if self.layout == "NCHW" else (K, 3, 3, C), scale=0.5)
        b, bv = self.net.weight((K,)) if bias else (None, None)
        return g.conv2d(x, w, b, **CONV_KW, **kw), ref.conv2d(xv, wv, bv, layout=self.layout, **CONV_KW, **kw)

    def channel_param(self):
        """A per-channel constant, shaped to broadcast against the conv output like in torch."""
        return self.net.weight((K, 1, 1) if self.layout == "NCHW" else (K,))

    def bn(self, y, constant=True):
        (y, yv), net = y, self.net
        make = net.weight if constant else net.input
        (s, sv), (t, tv), (m, mv) = (make((K,)) for _ in range(3))
        v, vv = make((K,), positive=True)
        return self.g.batch_norm(y, s, t, m, v, eps=1e-3), ref.batch_norm(yv, sv, tv, mv, vv, 1e-3, self.layout)


def conv_bias_relu(c: Case):
    y, yv = c.conv(c.x(), bias=False)
    b, bv = c.channel_param()
    return [(c.g.relu(y + b), ref.relu(yv + bv), RED)]


def conv_bn_relu(c: Case):
    y, yv = c.bn(c.conv(c.x()))
    return [(c.g.relu(y), ref.relu(yv), RED)]


def conv_residual_relu(c: Case):
    y, yv = c.conv(c.x())
    r, rv = c.net.input(yv.shape)
    return [(c.g.relu(c.g.add(r, y)), ref.relu(rv + yv), RED)]


def conv_bn_residual_leaky(c: Case):
    y, yv = c.bn(c.conv(c.x(), bias=False))
    r, rv = c.net.input(yv.shape)
    return [(c.g.leaky_relu(y + r, 0.2), ref.leaky_relu(yv + rv, 0.2), RED)]


def matmul_bias_gelu(c: Case):
    net, g = c.net, c.g
    (a, av), (w, wv), (b, bv) = net.input((2, 5, 7)), net.weight((7, 9)), net.weight((9,))
    (x, xv), (w2, w2v), (b2, b2v) = net.input((5, 11)), net.weight((4, 11)), net.weight((4,))
    return [(g.gelu(g.matmul(a, w) + b), ref.gelu(ref.matmul(av, wv, bv)), 7),
            (g.gelu(g.linear(x, w2) + b2, approximate="tanh"), ref.gelu(ref.linear(xv, w2v, b2v), "tanh"), 11)]


def conv_bn_swish(c: Case):
    """y * sigmoid(y), the exporters' SiLU, is silu: the conv's activation (a vector exp polynomial on the CPU)."""
    y, yv = c.bn(c.conv(c.x()))
    return [(y * c.g.sigmoid(y), ref.silu(yv), RED)]


def matmul_sigmoid_times_saturating(c: Case):
    """sigmoid(m) * m (the other operand order) over outputs of magnitude up to ~100, where the exp clamps."""
    net, g = c.net, c.g
    (a, av), (w, wv), (b, bv) = net.input((6, 11)), net.weight((11, 40), scale=12.0), net.weight((40,))
    m, mv = g.matmul(a, w) + b, ref.matmul(av, wv, bv)
    return [(g.sigmoid(m) * m, ref.silu(mv), 11)]


def elementwise_scalar(c: Case):
    (x, xv), g = c.net.input((2, 3, 5, 7), scale=2.0), c.g
    return [(g.sigmoid(x * 2.0) + g.tanh(x) - 0.5, ref.sigmoid(xv * 2.0) + ref.tanh(xv) - 0.5, 1)]


def elementwise_broadcast(c: Case):
    net, g = c.net, c.g
    (x, xv), (y, yv), (z, zv) = net.input((2, 3, 5, 7)), net.input((3, 1, 7)), net.weight((5, 1))
    (d, dv), (e, ev) = net.input((2, 1, 5, 1)), net.input((1, 3, 1, 7))
    return [(g.silu((x - y) * z) + (d * e) / 3.0, ref.silu((xv - yv) * zv) + (dv * ev) / 3.0, 1)]


def conv_then_chain(c: Case):
    """relu folds into the conv; the mul/add after it form an elementwise kernel of their own."""
    y, yv = c.conv(c.x())
    return [(c.g.relu(y) * 2.0 + 1.0, ref.relu(yv) * 2.0 + 1.0, RED)]


# ---- fusion must not happen
def conv_used_twice(c: Case):
    """The conv result is an output too: relu cannot become its epilogue."""
    y, yv = c.conv(c.x())
    return [(c.g.relu(y), ref.relu(yv), RED), (y, yv, RED)]


def conv_used_twice_inside(c: Case):
    """relu(y) + y: y has two uses, so neither relu nor the add is folded into the conv."""
    y, yv = c.conv(c.x(), bias=False)
    return [(c.g.relu(y) + y, ref.relu(yv) + yv, RED)]


def matmul_used_twice(c: Case):
    net, g = c.net, c.g
    (a, av), (w, wv) = net.input((5, 7)), net.weight((7, 9))
    m = g.matmul(a, w)
    return [(g.gelu(m), ref.gelu(ref.matmul(av, wv)), 7), (g.add(m, m), 2 * ref.matmul(av, wv), 7)]


def conv_relu_sigmoid(c: Case):
    """The activation slot is taken by relu: sigmoid stays a kernel of its own."""
    y, yv = c.conv(c.x())
    return [(c.g.sigmoid(c.g.relu(y)), ref.sigmoid(ref.relu(yv)), RED)]


def conv_times_sigmoid_of_other(c: Case):
    """y * sigmoid(z) of two different values, the sigmoid used twice: no silu (the sigmoid is z's activation)."""
    y, yv = c.conv(c.x())
    z, zv = c.conv(c.x())
    s, sv = c.g.sigmoid(z), ref.sigmoid(zv)
    return [(y * s + s, yv * sv + sv, RED)]


def conv_relu_bn(c: Case):
    """batch_norm after the activation cannot be folded into the weights."""
    y, yv = c.conv(c.x())
    return [c.bn((c.g.relu(y), ref.relu(yv))) + (RED,)]


def conv_bn_from_inputs(c: Case):
    """batch_norm with runtime (input) statistics cannot be folded; relu then follows the BN, not the conv."""
    y, yv = c.bn(c.conv(c.x()), constant=False)
    return [(c.g.relu(y), ref.relu(yv), RED)]


def conv_add_not_per_channel(c: Case):
    """A constant that varies along W is no bias (and not of the output shape: no residual)."""
    y, yv = c.conv(c.x(), bias=False)
    ow = yv.shape[3] if c.layout == "NCHW" else yv.shape[2]
    p, pv = c.net.weight((ow,) if c.layout == "NCHW" else (ow, 1))
    return [(c.g.relu(y + p), ref.relu(yv + pv), RED)]


def conv_add_input_bias(c: Case):
    """A per-channel add of a runtime input (not a constant) is not folded into the bias."""
    y, yv = c.conv(c.x(), bias=False)
    b, bv = c.net.input((K, 1, 1) if c.layout == "NCHW" else (K,))
    return [(c.g.relu(y + b), ref.relu(yv + bv), RED)]


# ----------------------------------------------------------------------------- expectations
CONV, MM, RELU = "prim.conv2d", "prim.matmul", "relu"
BOTH = ("NHWC", "NCHW")

CASES = [
    # build, layouts, ops after prim-fuse, fused bodies, kernels, launches per layout
    (conv_bias_relu, BOTH, [CONV], {}, [(True, False, RELU)], {"NHWC": 1, "NCHW": 3}),
    (conv_bn_relu, BOTH, [CONV], {}, [(True, False, RELU)], {"NHWC": 1, "NCHW": 3}),
    (conv_residual_relu, BOTH, [CONV], {}, [(True, True, RELU)], {"NHWC": 1, "NCHW": 4}),
    (conv_bn_residual_leaky, ("NHWC",), [CONV], {}, [(True, True, "leaky_relu")], {"NHWC": 1}),
    (matmul_bias_gelu, ("NHWC",), [MM, MM], {}, [(True, False, "gelu"), (True, False, "gelu_tanh")], {"NHWC": 2}),
    (conv_bn_swish, BOTH, [CONV], {}, [(True, False, "silu")], {"NHWC": 1, "NCHW": 3}),
    (matmul_sigmoid_times_saturating, ("NHWC",), [MM], {}, [(True, False, "silu")], {"NHWC": 1}),
    (elementwise_scalar, ("NHWC",), ["call @fused_0"],
     {"fused_0": ["prim.mul", "prim.sigmoid", "prim.tanh", "prim.add", "prim.sub"]}, [], {"NHWC": 1}),
    (elementwise_broadcast, ("NHWC",), ["call @fused_0"],
     {"fused_0": ["prim.sub", "prim.mul", "prim.silu", "prim.mul", "prim.div", "prim.add"]}, [], {"NHWC": 1}),
    (conv_then_chain, BOTH, [CONV, "call @fused_0"], {"fused_0": ["prim.mul", "prim.add"]}, [(True, False, RELU)],
     {"NHWC": 2, "NCHW": 4}),
    # no fusion
    (conv_used_twice, ("NHWC",), [CONV, "prim.relu"], {}, [(True, False, "none")], {"NHWC": 2}),
    (conv_used_twice_inside, ("NHWC",), [CONV, "call @fused_0"], {"fused_0": ["prim.relu", "prim.add"]},
     [(False, False, "none")], {"NHWC": 2}),
    (matmul_used_twice, ("NHWC",), [MM, "prim.gelu", "prim.add"], {}, [(False, False, "none")], {"NHWC": 3}),
    (conv_relu_sigmoid, ("NHWC",), [CONV, "prim.sigmoid"], {}, [(True, False, RELU)], {"NHWC": 2}),
    (conv_relu_bn, ("NHWC",), [CONV, "prim.batch_norm"], {}, [(True, False, RELU)], {"NHWC": 2}),
    (conv_times_sigmoid_of_other, ("NHWC",), [CONV, CONV, "call @fused_0"],
     {"fused_0": ["prim.mul", "prim.add"]}, [(True, False, "none"), (True, False, "sigmoid")], {"NHWC": 3}),
    (conv_bn_from_inputs, ("NHWC",), [CONV, "prim.batch_norm", "prim.relu"], {}, [(True, False, "none")],
     {"NHWC": 3}),
    (conv_add_not_per_channel, BOTH, [CONV, "call @fused_0"], {"fused_0": ["prim.add", "prim.relu"]},
     [(False, False, "none")], {"NHWC": 2, "NCHW": 4}),
    (conv_add_input_bias, ("NHWC",), [CONV, "call @fused_0"], {"fused_0": ["prim.add", "prim.relu"]},
     [(False, False, "none")], {"NHWC": 2}),
]


def _params():
    out = []
    for case in CASES:
        for layout in case[1]:
            for dt in FUSION_DTYPES:
                tag = f"{case[0].__name__}-{dt}" + (f"-{layout}" if len(case[1]) > 1 else "")
                out.append(pytest.param(case, layout, dt, id=tag))
    return out


def _kernels(module):
    out = []
    for op in graph_ops(module):
        if op.name in (CONV, MM):
            has = operands(op)
            out.append((has["bias"], has["residual"], dialect.op_attrs(op)["activation"]))
    return out


@pytest.mark.parametrize("case,layout,dtype", _params())
def test_fusion(case, layout, dtype, rng):
    build, _, ops, fused, kernels, launches = case
    net = Net(rng, dtype, layout)
    built = build(Case(net, layout))
    outs = net.run(None, *[y for y, _, _ in built])

    # (a) numerics of the compiled graph (full pipeline)
    for i, (out, (_, want, red)) in enumerate(zip(outs, built)):
        assert_close(out, want, dtype, reduction=red, what=f"{build.__name__} output {i}")

    # (b) structure after prim-fuse alone
    m = passes.run(to_module(net.g), "prim-fuse")
    assert op_names(m) == ops
    got_fused = {k: collections.Counter(v) for k, v in fused_bodies(m).items()}
    assert got_fused == {k: collections.Counter(v) for k, v in fused.items()}
    assert _kernels(m) == kernels

    # ... and the number of kernel launches of the compiled plan
    assert len(net.exe.plan["steps"]) == launches[layout], net.launches()


@pytest.mark.parametrize("k", [pytest.param(3, id="K=R=3"), pytest.param(4, id="K=4")])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_bn_fold_rsck_filter(layout, k, rng):
    """conv2d with an RSCK filter (R x S x C x K), then a constant batch_norm."""
    net = Net(rng, "f32", layout)
    x, xv = net.input((1, 5, 7, 2) if layout == "NHWC" else (1, 2, 5, 7))
    w, wv = net.weight((3, 3, 2, k))
    (s, sv), (t, tv), (m, mv) = (net.weight((k,)) for _ in range(3))
    v, vv = net.weight((k,), positive=True)
    y = net.g.batch_norm(net.g.conv2d(x, w, padding=1, filter_layout="RSCK"), s, t, m, v)
    out, = net.run(None, y)
    want = ref.conv2d(xv, wv.transpose(3, 0, 1, 2), padding=1, layout=layout, filter_layout="KRSC")
    assert_close(out, ref.batch_norm(want, sv, tv, mv, vv, layout=layout), "f32", reduction=18)


def test_fused_epilogue_attributes():
    """The activation parameters travel with the activation (leaky_relu alpha, clamp bounds)."""
    net = Net(np.random.default_rng(0), "f32", "NHWC")
    c = Case(net, "NHWC")
    y1, _ = c.conv(c.x())
    y2, _ = c.conv(c.x())
    net.g.output(net.g.leaky_relu(y1, 0.3), net.g.clamp(y2, -0.5, 0.25))
    convs = [op for op in graph_ops(passes.run(to_module(net.g), "prim-fuse")) if op.name == CONV]
    got = [(dialect.op_attrs(op)["activation"], dialect.op_attrs(op)["activation_params"]) for op in convs]
    assert got == [("leaky_relu", [0.3]), ("clamp", [-0.5, 0.25])]

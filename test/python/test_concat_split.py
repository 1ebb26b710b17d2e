"""1x1 convolutions over a channel concat, split per concat input: prim-fuse's concat_split rewrite.

Against float64 numpy on every dtype: NCHW and NHWC, two and three concat inputs of odd widths, a max pool
(SqueezeNet's 3x3/2, ceil mode) between the concat and the convolution, bias, relu and a residual; the
concat must be gone from the compiled plan. Then the convolutions it must leave alone, and SqueezeNet's
fire modules: their 6 squeeze layers after a concat are split, the classifier (512 -> 1000) is not.
Under OPENPRIM_TEST_TARGET=nvvm:sm_90 the numerics run on the GPU machine (helpers.run_on_gpu).
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, kernel_info
import openprim
from openprim import passes
from openprim.dialect import graph_functions
from openprim.pyfrontend import Graph, to_module

CASES = [  # layout, concat widths, K, pool, residual
    ("NCHW", (8, 16), 6, False, False),
    ("NHWC", (16, 24, 8), 10, True, False),
    ("NCHW", (5, 11), 4, True, True),
    ("NHWC", (32, 32), 16, False, True),
]


def _fire(net, layout, widths, k, pool, residual):
    """relu(conv1x1(concat of relu(conv3x3(x)) branches [-> max pool]) + bias [+ z]) and its float64
    reference."""
    n, h, c = 2, 11, 8
    nchw = layout == "NCHW"
    x, xv = net.input((n, c, h, h) if nchw else (n, h, h, c))
    branches, refs = [], []
    for width in widths:
        w, wv = net.weight((width, c, 3, 3) if nchw else (width, 3, 3, c), scale=0.3)
        b, bv = net.weight((width,))
        fl = "KCRS" if nchw else "KRSC"
        branches.append(net.g.conv2d(x, w, b, padding=1, layout=layout, filter_layout=fl, activation="relu"))
        refs.append(ref.conv2d(xv, wv, bv, padding=1, layout=layout, filter_layout=fl, activation_name="relu"))
    axis = 1 if nchw else 3
    cat, want = net.g.concat(branches, axis=axis), np.concatenate(refs, axis=axis)
    if pool:
        cat = net.g.max_pool2d(cat, 3, stride=2, ceil_mode=True, layout=layout)
        want = ref.max_pool2d(want, 3, stride=2, ceil_mode=True, layout=layout)
    fl = "KCRS" if nchw else "KRSC"
    w, wv = net.weight((k, sum(widths), 1, 1) if nchw else (k, 1, 1, sum(widths)), scale=0.3)
    b, bv = net.weight((k,))
    y = net.g.conv2d(cat, w, b, layout=layout, filter_layout=fl)
    want = ref.conv2d(want, wv, bv, layout=layout, filter_layout=fl)
    if residual:
        z, zv = net.input(want.shape)
        y, want = net.g.add(y, z), want + zv
    return net.g.relu(y), ref.relu(want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}_{len(c[1])}in{'_pool' if c[3] else ''}"
                         f"{'_res' if c[4] else ''}")
def test_concat_split_numerics(rng, dtype, case):
    layout, widths, k, pool, residual = case
    net = Net(rng, dtype)
    y, want = _fire(net, layout, widths, k, pool, residual)
    out = net.run(None, y)[0]
    assert "concat" not in [op for op, _ in kernel_info(net.module).values()]
    assert_close(out, want, dtype, reduction=sum(widths) * 9)


def _fused_ops(graph) -> collections.Counter:
    module = passes.run(to_module(graph), "prim-fuse")
    fn = graph_functions(module.operation)[0]
    return collections.Counter(op.operation.name for op in fn.regions[0].blocks[0].operations)


@pytest.mark.parametrize("kw, k", [(dict(kernel=3, padding=1), 4), (dict(kernel=1, stride=2), 4),
                                   (dict(kernel=1), 24)], ids=["3x3", "strided", "widening"])
def test_convolutions_kept(rng, kw, k):
    """A 3x3 or strided convolution, or one with as many output channels as the concat: unchanged."""
    g = Graph()
    a, b = g.input("a", (1, 8, 6, 6)), g.input("b", (1, 16, 6, 6))
    ks = kw.pop("kernel")
    w = g.param("w", rng.standard_normal((k, 24, ks, ks)))
    g.output(g.conv2d(g.concat([a, b], axis=1), w, **kw))
    ops = _fused_ops(g)
    assert ops["prim.concat"] == 1 and ops["prim.conv2d"] == 1


@pytest.mark.skipif(TARGET != "cpu", reason="compiles for the CPU")
def test_squeezenet_fire_modules_split():
    """SqueezeNet 1.1 (examples/zoo_models.py, torchvision's structure) through the ONNX importer: the 7
    squeeze layers after a fire module read its expand layers directly (5 after a concat, 2 after concat ->
    max pool); only the classifier's concat stays (it widens 512 channels to 1000), and the network still
    matches torch eager."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import zoo_models
    from openprim.pyfrontend.onnx import import_model

    model = zoo_models.get("squeezenet1_1")
    g = import_model(zoo_models.to_onnx("squeezenet1_1", module=model))
    ops = _fused_ops(g)
    assert ops["prim.concat"] == 1 and ops["prim.conv2d"] == 26 + 7
    x = zoo_models.example_input("squeezenet1_1")
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    assert_close(openprim.compile(g)(x.numpy()), want, "f32", reduction=512)

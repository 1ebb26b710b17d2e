"""What MobileNetV3, EfficientNet, ResNeXt and ConvNeXt add to OpenPrim, from the op up to the network.

1. hardswish and hardsigmoid: the standalone ops against float64 numpy in f32/f16/bf16 (hardsigmoid with
   torch's and ONNX's alpha/beta), and fused into a convolution's epilogue by prim-fuse (one launch).
2. The importers map them whole: ONNX HardSwish/HardSigmoid and torch's aten.hardswish/hardsigmoid (kept
   out of the core-ATen decomposition) become prim.hardswish/prim.hardsigmoid.
3. Squeeze-and-excitation (global average pool -> 1x1 conv -> ReLU/SiLU -> 1x1 conv -> sigmoid or
   hardsigmoid -> channel scale, the [N, C, 1, 1] / [N, 1, 1, C] scale broadcast over the image), NCHW
   and NHWC, against numpy; the launches it takes are pinned: pool, two convolutions with their
   activations fused, the broadcast multiply (plus, in NCHW, the layout transposes).
4. The four models of examples/vision_models.py (torchvision's structure and names) at 64x64 through
   compile_module (torch.export) and the ONNX importer, against PyTorch eager on the CPU (float32,
   1e-4 of the output's largest magnitude).

Parts 1 and 3 build Graphs with helpers.Net, so they also run on a GPU target (OPENPRIM_TEST_TARGET with
OPENPRIM_GPU_RECORD / OPENPRIM_GPU_REPLAY, see helpers.py).

    python -m pytest test/python/test_vision_models.py -q
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import openprim
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, graph_ops
from openprim import passes
from openprim.pyfrontend import to_module
from openprim.base.target import parse_target


def hardsigmoid(x, alpha=1 / 6, beta=0.5):
    return ref.clamp(alpha * ref.f64(x) + beta, 0.0, 1.0)


def hardswish(x):
    return ref.f64(x) * hardsigmoid(x)


# ----------------------------------------------------------------------------- 1. the ops
@pytest.mark.parametrize("dtype", DTYPES)
def test_hard_activations(dtype, rng):
    """Standalone, on values spread over both saturated ends and the linear part (|x| up to ~8)."""
    net = Net(rng, dtype, layout="NHWC")
    x, xv = net.input((3, 5, 7, 9), scale=4.0)
    g = net.g
    outs = net.run(None, g.hardswish(x), g.hardsigmoid(x), g.hardsigmoid(x, alpha=0.2, beta=0.5))
    for out, want, what in zip(outs, (hardswish(xv), hardsigmoid(xv), hardsigmoid(xv, 0.2, 0.5)),
                               ("hardswish", "hardsigmoid", "hardsigmoid(0.2, 0.5)")):
        assert_close(out, want, dtype, what=what)
    assert 0 < np.mean(hardsigmoid(xv) == 1.0) < 0.5 and 0 < np.mean(hardsigmoid(xv) == 0.0) < 0.5


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_hard_activations_fused_into_conv(dtype, rng):
    """conv -> hardswish and conv + bias -> hardsigmoid(alpha 0.2) are each one conv2d with the epilogue."""
    net = Net(rng, dtype, layout="NHWC")
    x, xv = net.input((2, 9, 7, 16))
    w, wv = net.weight((24, 3, 3, 16), scale=0.3)
    b, bv = net.weight((24,))
    g = net.g
    kw = dict(stride=(2, 1), padding=1)
    y1 = g.hardswish(g.conv2d(x, w, **kw))
    y2 = g.hardsigmoid(g.conv2d(x, w, b, **kw), alpha=0.2, beta=0.5)
    out1, out2 = net.run(None, y1, y2)
    conv = ref.conv2d(xv, wv, layout="NHWC", **kw)
    assert_close(out1, hardswish(conv), dtype, reduction=9 * 16, what="conv + hardswish")
    assert_close(out2, hardsigmoid(conv + bv, 0.2, 0.5), dtype, reduction=9 * 16, what="conv + hardsigmoid")
    assert [op for _, op, _ in net.launches()] == ["conv2d", "conv2d"]
    fused = [op for op in graph_ops(passes.run(to_module(net.g), "prim-fuse")) if op.name == "prim.conv2d"]
    assert [str(op.attributes["activation"]) for op in fused] == ['"hardswish"', '"hardsigmoid"']


# ----------------------------------------------------------------------------- 2. the importers
def _kinds(graph):
    return {op.name for op in graph_ops(to_module(graph))}


@pytest.mark.skipif(TARGET != "cpu", reason="importers, checked on the CPU")
def test_torch_import_keeps_hard_activations():
    torch = pytest.importorskip("torch")
    from openprim.pyfrontend.torch import import_exported

    class Hard(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.hardswish(x) - torch.nn.functional.hardsigmoid(x * 2)
    x = torch.randn(2, 3, 5, 7) * 4
    g, _ = import_exported(torch.export.export(Hard(), (x,)))
    assert {"prim.hardswish", "prim.hardsigmoid"} <= _kinds(g) and "prim.clamp" not in _kinds(g)
    got = np.asarray(openprim.compile(g)(x.numpy()))
    np.testing.assert_allclose(got, Hard()(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(TARGET != "cpu", reason="importers, checked on the CPU")
def test_onnx_hard_activations():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from openprim.pyfrontend.onnx import import_model
    nodes = [helper.make_node("HardSwish", ["x"], ["a"]),
             helper.make_node("HardSigmoid", ["x"], ["b"], alpha=0.3, beta=0.4),
             helper.make_node("Add", ["a", "b"], ["y"])]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 5, 7])  # noqa: E731
    model = helper.make_model(helper.make_graph(nodes, "hard", [vi("x")], [vi("y")]),
                              opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    g = import_model(model.SerializeToString())
    assert {"prim.hardswish", "prim.hardsigmoid"} <= _kinds(g)
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 7)).astype(np.float32) * 4
    got = np.asarray(openprim.compile(g)(x))
    np.testing.assert_allclose(got, hardswish(x) + hardsigmoid(x, 0.3, 0.4), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- 3. squeeze-and-excitation
SE = [dict(id="nhwc_relu_hardsigmoid", layout="NHWC", act="relu", scale="hardsigmoid"),
      dict(id="nhwc_silu_sigmoid", layout="NHWC", act="silu", scale="sigmoid"),
      dict(id="nchw_relu_sigmoid", layout="NCHW", act="relu", scale="sigmoid")]


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("cfg", SE, ids=[c["id"] for c in SE])
def test_squeeze_excitation(cfg, dtype, rng):
    N, C, H, W, S = 2, 40, 7, 9, 12
    layout = cfg["layout"]
    nchw = layout == "NCHW"
    net = Net(rng, dtype, layout=layout)
    g = net.g
    x, xv = net.input((N, C, H, W) if nchw else (N, H, W, C))
    (w1, w1v), (w2, w2v) = (net.weight((co, ci, 1, 1) if nchw else (co, 1, 1, ci), scale=ci ** -0.5)
                            for co, ci in ((S, C), (C, S)))
    (b1, b1v), (b2, b2v) = net.weight((S,)), net.weight((C,))
    s = g.conv2d(g.global_avg_pool(x), w1, b1)
    s = g.relu(s) if cfg["act"] == "relu" else g.silu(s)
    s = g.conv2d(s, w2, b2)
    s = g.sigmoid(s) if cfg["scale"] == "sigmoid" else g.hardsigmoid(s)
    out, = net.run(None, g.mul(x, s))
    axes = (2, 3) if nchw else (1, 2)
    sv = ref.conv2d(ref.f64(xv).mean(axis=axes, keepdims=True), w1v, b1v, layout=layout)
    sv = ref.relu(sv) if cfg["act"] == "relu" else ref.silu(sv)
    sv = ref.conv2d(sv, w2v, b2v, layout=layout)
    sv = ref.sigmoid(sv) if cfg["scale"] == "sigmoid" else hardsigmoid(sv)
    assert_close(out, xv * sv, dtype, reduction=C, what=cfg["id"])
    launches = [op for _, op, _ in net.launches()]
    # NCHW: x goes to NHWC for the pool; the [N, 1, 1, C] scale's way back to [N, C, 1, 1] only moves unit
    # dims, a view (prim-select's _unit_transposes_to_views), not a kernel
    layout_ops = ["transpose"] if nchw else []
    assert launches == layout_ops + ["global_avg_pool", "conv2d", "conv2d", "mul"], launches


# ----------------------------------------------------------------------------- 4. the models
RTOL = 1e-4
CPU_ONLY = pytest.mark.skipif(TARGET != "cpu", reason="models against PyTorch eager on the CPU")


@pytest.fixture(scope="module")
def vision_models():
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    import vision_models
    return vision_models


def check_model(vision_models, name, via, batch=2, size=64):
    import torch
    module, x = vision_models.get(name), vision_models.example_input(batch, size)
    with torch.no_grad():
        want = module(x).numpy()
    if via == "torch":
        from openprim.torch_backend import compile_module
        got = compile_module(module, (x,), target="cpu")(x).numpy()
    else:
        from openprim.pyfrontend.onnx import import_model
        got = np.asarray(openprim.compile(import_model(vision_models.torch_models.to_onnx(module, x)))(x.numpy()))
    assert got.shape == want.shape == (batch, 1000)
    scale, err = float(np.abs(want).max()), float(np.abs(got - want).max())
    assert err <= RTOL * scale, f"{name} via {via}: max |err| {err:.3g}, max |ref| {scale:.3g}"


@CPU_ONLY
@pytest.mark.parametrize("via", ["torch", pytest.param("onnx", marks=pytest.mark.slow)])
def test_mobilenet_v3_large(vision_models, via):
    check_model(vision_models, "mobilenet_v3_large", via)


@CPU_ONLY
@pytest.mark.slow
@pytest.mark.parametrize("via", ["torch", "onnx"])
@pytest.mark.parametrize("name", ["efficientnet_b0", "resnext50_32x4d", "convnext_tiny"])
def test_model(vision_models, name, via):
    check_model(vision_models, name, via)


def test_torchvision_names(vision_models):
    """Parameter counts and a few state_dict names as torchvision has them."""
    counts = {"mobilenet_v3_large": 5483032, "efficientnet_b0": 5288548, "resnext50_32x4d": 25028904,
              "convnext_tiny": 28589128}
    names = {"mobilenet_v3_large": "features.4.block.2.fc1.weight", "efficientnet_b0": "features.2.1.block.2.fc2.bias",
             "resnext50_32x4d": "layer3.5.conv2.weight", "convnext_tiny": "features.5.8.layer_scale"}
    for name, count in counts.items():
        model = vision_models.get(name)
        assert sum(p.numel() for p in model.parameters()) == count, name
        assert names[name] in model.state_dict(), name
    assert vision_models.get("resnext50_32x4d").layer1[0].conv2.groups == 32


def test_build_errors(vision_models):
    from openprim.base.errors import OpenPrimError
    with pytest.raises(OpenPrimError, match="unknown model 'vgg'"):
        vision_models.build("vgg")
    with pytest.raises(OpenPrimError, match="via must be 'torch' or 'onnx'"):
        vision_models.build("convnext_tiny", size=32, via="tflite")


@CPU_ONLY
@pytest.mark.slow
@pytest.mark.parametrize("name,depthwise,se", [("mobilenet_v3_large", 15, 8), ("efficientnet_b0", 16, 16)])
def test_gpu_launches(vision_models, name, depthwise, se):
    """Compiled for sm_90 (not run): every depthwise convolution on conv_depthwise_gpu; SiLU, hardswish
    and the SE scale activations fused into convolutions (no elementwise kernels); each SE block one
    pool, two convolutions and the broadcast multiply; of the layout transposes only the input's (the NCHW
    model's SE multiplies do not keep the image in NCHW; the pooled [N, 1, 1, C] head goes back to NCHW as a
    view)."""
    import collections

    import openprim.compiler
    import openprim.plan
    import torch
    from helpers import kernel_info
    from openprim.pyfrontend.torch import import_exported
    g, _ = import_exported(torch.export.export(vision_models.get(name), (vision_models.example_input(2, 64),)))
    module = openprim.compiler.lower(g, "nvvm:sm_90")
    info = kernel_info(module)
    kinds = collections.Counter(tuple(info[s["kernel"]]) for s in openprim.plan.build_plan(module, parse_target("nvvm:sm_90"))[0]["steps"])
    assert kinds[("conv2d", "conv_depthwise_gpu")] == depthwise, kinds
    assert kinds[("transpose", "")] == 1 and kinds[("mul", "")] == se, kinds
    assert kinds[("global_avg_pool", "")] == se + 1, kinds
    assert {op for op, _ in kinds} == {"conv2d", "transpose", "global_avg_pool", "mul", "matmul"}, kinds

"""The ONNX importer (openprim.pyfrontend.onnx.import_model) and backend (openprim.onnx_backend).

(a) one small model per supported op (odd shapes, strides, padding, dilation, groups), compiled and
    compared with onnx's reference evaluator run in float64;
(b) the errors: an unsupported op, a malformed model, a dynamic input shape, non-float inputs; the
    nodes `openprim onnx-check` lists; the coverage table of docs/frontends.md;
(c) onnx's backend test suite: the node tests of the supported ops and the PyTorch-converted model
    tests (see SUPPORTED / EXCLUDE and MODEL_TESTS / EXCLUDE_MODELS below).
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
import onnx  # noqa: E402
import onnx.backend.test  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import openprim  # noqa: E402
from openprim.base.errors import OpenPrimError  # noqa: E402
import openprim.onnx_backend as onnx_backend  # noqa: E402
from openprim.cli import main as openprim_main  # noqa: E402
from openprim.pyfrontend.onnx import import_model, importer  # noqa: E402

F = TensorProto.FLOAT


# ----------------------------------------------------------------------------- helpers
def make(nodes, inputs, outputs, inits=None, opset=17):
    """A model: inputs {name: shape} (float), outputs [names] (shapes from shape inference) or
    {name: shape}, inits {name: array}."""
    if isinstance(nodes, onnx.NodeProto):
        nodes = [nodes]
    ins = [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()]
    if not isinstance(outputs, dict):
        outputs = {n: None for n in outputs}
    outs = [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()]
    m = helper.make_model(helper.make_graph(nodes, "t", ins, outs, inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m)
    for o, io in zip(m.graph.output, inferred.graph.output):
        if not o.type.tensor_type.HasField("shape"):
            o.CopyFrom(io)
    return m


def _as_double(model):
    """The same model in float64: float inputs, outputs, initializers and Constant values."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        if vi.type.tensor_type.elem_type == F:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for i, init in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(init)
        if a.dtype == np.float32:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.float64), init.name))
    for node in m.graph.node:
        for at in node.attribute:
            if at.type == onnx.AttributeProto.TENSOR and at.t.data_type == F:
                at.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(at.t).astype(np.float64)))
    return m


def check(model, rng, feeds=None, rtol=1e-4, want=None):
    """Compile `model` with OpenPrim and compare every output with the float64 reference (onnx's
    reference evaluator, or the outputs `want` where that is wrong)."""
    init = {i.name for i in model.graph.initializer}
    if feeds is None:
        feeds = {}
        for vi in model.graph.input:
            if vi.name in init:
                continue
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    if want is None:
        want = ReferenceEvaluator(_as_double(model)).run(None, {k: v.astype(np.float64) for k, v in feeds.items()})
    rep = onnx_backend.prepare(model)
    got = rep.run([feeds[n] for n in rep.input_names])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert g.shape == w.shape, (g.shape, w.shape)
        atol = rtol * max(float(np.max(np.abs(w))) if w.size else 0.0, 1.0)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def r(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ----------------------------------------------------------------------------- (a) every op
def conv_case(rng, x, w, opset=17, bias=True, **attrs):
    inits = {"w": r(rng, *w, scale=0.3)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = r(rng, w[0])
        ins.append("b")
    return make(helper.make_node("Conv", ins, ["y"], **attrs), {"x": x}, ["y"], inits, opset)


CONV = {
    "plain": dict(x=(1, 3, 9, 11), w=(5, 3, 3, 3)),
    "stride2_pad": dict(x=(2, 4, 13, 10), w=(6, 4, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    "asym_pad_dilation": dict(x=(1, 3, 12, 12), w=(4, 3, 3, 2), pads=[2, 0, 1, 1], dilations=[2, 3]),
    "groups": dict(x=(1, 6, 8, 7), w=(9, 2, 3, 3), group=3, pads=[1, 1, 1, 1]),
    "depthwise": dict(x=(1, 8, 10, 10), w=(8, 1, 3, 3), group=8, strides=[2, 2], pads=[1, 1, 1, 1]),
    "pointwise_nobias": dict(x=(1, 16, 5, 7), w=(8, 16, 1, 1), bias=False),
    "same_upper": dict(x=(1, 3, 11, 9), w=(4, 3, 3, 4), strides=[2, 2], auto_pad="SAME_UPPER"),
    "same_lower": dict(x=(1, 3, 10, 9), w=(4, 3, 4, 3), strides=[2, 1], auto_pad="SAME_LOWER"),
    "valid": dict(x=(1, 3, 8, 8), w=(4, 3, 3, 3), auto_pad="VALID"),
    "conv1d": dict(x=(2, 3, 17), w=(4, 3, 5), strides=[2], pads=[2, 1]),
    "opset13": dict(x=(1, 2, 6, 6), w=(3, 2, 3, 3), opset=13),
    "opset21": dict(x=(1, 2, 6, 6), w=(3, 2, 3, 3), opset=21),
}


@pytest.mark.parametrize("case", CONV)
def test_conv(case, rng):
    check(conv_case(rng, **CONV[case]), rng)


def unary(op, shape=(2, 3, 5, 7), opset=17, **attrs):
    return make(helper.make_node(op, ["x"], ["y"], **attrs), {"x": shape}, ["y"], opset=opset)


UNARY = {
    "relu": unary("Relu"), "sigmoid": unary("Sigmoid"), "tanh": unary("Tanh", (3, 17)),
    "leakyrelu": unary("LeakyRelu", alpha=0.3), "leakyrelu_default": unary("LeakyRelu", (5, 3)),
    "elu": unary("Elu", alpha=0.7), "hardsigmoid": unary("HardSigmoid", alpha=0.3, beta=0.4),
    "hardsigmoid_default": unary("HardSigmoid", (4, 9)), "hardswish": unary("HardSwish", (1, 3, 4, 5)),
    "gelu": unary("Gelu", opset=20), "gelu_tanh": unary("Gelu", opset=20, approximate="tanh"),
    "softmax": unary("Softmax", (3, 4, 5), axis=1), "softmax_default": unary("Softmax", (3, 7)),
    "logsoftmax": unary("LogSoftmax", (3, 4, 5), axis=-1), "identity": unary("Identity", (3, 4)),
    "dropout": unary("Dropout", (3, 4)), "flatten": unary("Flatten", (2, 3, 4, 5), axis=2),
    "flatten0": unary("Flatten", (2, 3, 4), axis=0), "transpose": unary("Transpose", (2, 3, 4), perm=[2, 0, 1]),
    "transpose_default": unary("Transpose", (2, 3, 4)),
    "globalavgpool": unary("GlobalAveragePool", (2, 3, 5, 7)),
    "globalavgpool_1d": unary("GlobalAveragePool", (2, 3, 5)),
    "exp": unary("Exp", (3, 5, 7)), "abs": unary("Abs", (4, 9)), "erf": unary("Erf", (2, 3, 5)),
    "softplus": unary("Softplus", (3, 11)), "softsign": unary("Softsign", (2, 7, 3)),
    "mish": unary("Mish", (2, 3, 5), opset=18), "globalmaxpool": unary("GlobalMaxPool", (2, 3, 5, 7)),
    "dropout_opset12": unary("Dropout", (3, 5), opset=12),
    "cast_float": unary("Cast", (3, 5), to=TensorProto.FLOAT), "selu": unary("Selu", (3, 7), alpha=1.3, gamma=0.9),
    "selu_default": unary("Selu", (2, 5)),
}


@pytest.mark.parametrize("case", UNARY)
def test_unary(case, rng):
    check(UNARY[case], rng)


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal"])
def test_unary_positive(op, rng):
    m = unary(op, (3, 5, 7))
    check(m, rng, {"x": np.abs(r(rng, 3, 5, 7)) + 0.3})


def test_global_max_pool_1d(rng):
    """Against numpy: onnx's reference GlobalMaxPool reduces axes 1 and 2 of a 3-d input."""
    x = r(rng, 2, 3, 7)
    y = onnx_backend.prepare(unary("GlobalMaxPool", (2, 3, 7))).run([x])[0]
    np.testing.assert_array_equal(y, x.max(axis=2, keepdims=True))


def test_softplus_large_inputs(rng):
    """relu(x) + log(1 + exp(-|x|)): no overflow where exp(x) would."""
    x = (r(rng, 4, 5) * 60).astype(np.float32)
    check(unary("Softplus", (4, 5)), rng, {"x": x})


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.7), (None, 0.2), (0.0, None), (None, None)])
def test_clip(lo, hi, rng):
    inits, ins = {}, ["x", "", ""]
    if lo is not None:
        inits["lo"], ins[1] = np.array(lo, np.float32), "lo"
    if hi is not None:
        inits["hi"], ins[2] = np.array(hi, np.float32), "hi"
    while ins[-1] == "":
        ins.pop()
    check(make(helper.make_node("Clip", ins, ["y"]), {"x": (3, 5, 2)}, ["y"], inits), rng)


@pytest.mark.parametrize("computed", ["min", "max", "both"])
def test_clip_computed_bounds(computed, rng):
    """min/max given as graph inputs (opset 11+): maximum and minimum ops."""
    ins = {"x": (3, 5, 2)}
    inits = {}
    for name in ("lo", "hi"):
        if computed == "both" or {"lo": "min", "hi": "max"}[name] == computed:
            ins[name] = ()
        else:
            inits[name] = np.array(-0.3 if name == "lo" else 0.4, np.float32)
    feeds = {"x": r(rng, 3, 5, 2), **{k: np.array(v, np.float32) for k, v in (("lo", -0.6), ("hi", 0.5)) if k in ins}}
    check(make(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), ins, ["y"], inits), rng, feeds)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)),
                                    ((2, 3, 4, 5), ()), ((3, 1, 5), (2, 1, 4, 1))])
def test_binary(op, shapes, rng):
    a, b = shapes
    m = make(helper.make_node(op, ["a", "b"], ["y"]), {"a": a, "b": b}, ["y"])
    feeds = {"a": r(rng, *a), "b": r(rng, *b)}
    if op == "Div":
        feeds["b"] = (np.sign(feeds["b"]) * (np.abs(feeds["b"]) + 0.5)).astype(np.float32)
    if op == "Pow":
        feeds["a"] = (np.abs(feeds["a"]) + 0.5).astype(np.float32)
    check(m, rng, feeds)


@pytest.mark.parametrize("exponent", [np.array(2.0, np.float32), np.array(3, np.int64), np.array([0.5], np.float32)])
def test_pow_constant_exponent(exponent, rng):
    """x ** 2 and x ** 3 of negative x (decomposed norms), x ** 0.5 of positive x."""
    m = make(helper.make_node("Pow", ["x", "e"], ["y"]), {"x": (3, 4, 5)}, ["y"], {"e": exponent})
    x = r(rng, 3, 4, 5)
    check(m, rng, {"x": np.abs(x) + 0.1 if exponent.dtype == np.float32 and exponent.reshape(-1)[0] == 0.5 else x})


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic(op, rng):
    m = make(helper.make_node(op, ["a", "b", "c"], ["y"]), {"a": (2, 3, 4), "b": (3, 1), "c": (4,)}, ["y"])
    check(m, rng)
    check(make(helper.make_node(op, ["a"], ["y"]), {"a": (3, 5)}, ["y"]), rng)


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div"])
def test_binary_constant_operands(op, rng):
    """A scalar constant (Constant node) and a broadcast initializer on either side."""
    nodes = [helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array(1.5, np.float32))),
             helper.make_node(op, ["x", "s"], ["t"]),
             helper.make_node(op, ["c", "t"], ["y"])]
    check(make(nodes, {"x": (2, 3, 4)}, ["y"], {"c": (np.abs(r(rng, 3, 1)) + 0.5)}), rng)


def pool(op, shape, **attrs):
    return make(helper.make_node(op, ["x"], ["y"], **attrs), {"x": shape}, ["y"])


POOLS = {
    "max_k3s2": pool("MaxPool", (1, 3, 11, 10), kernel_shape=[3, 3], strides=[2, 2]),
    "max_pad_dil": pool("MaxPool", (2, 2, 12, 13), kernel_shape=[3, 2], pads=[1, 1, 1, 0], dilations=[2, 2]),
    "max_ceil": pool("MaxPool", (1, 2, 10, 11), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    "max_same_upper": pool("MaxPool", (1, 2, 9, 8), kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    "max_big_pad": pool("MaxPool", (1, 2, 7, 7), kernel_shape=[3, 3], pads=[2, 2, 2, 2]),
    "max_1d": pool("MaxPool", (2, 3, 15), kernel_shape=[4], strides=[3], pads=[1, 2]),
    "avg_incl": pool("AveragePool", (1, 3, 9, 10), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                     count_include_pad=1),
    "avg_excl": pool("AveragePool", (1, 3, 9, 10), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "avg_ceil": pool("AveragePool", (1, 2, 10, 11), kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1,
                     pads=[1, 0, 1, 1]),
    "avg_same_lower": pool("AveragePool", (1, 2, 8, 9), kernel_shape=[2, 3], strides=[2, 2],
                           auto_pad="SAME_LOWER"),
    "avg_big_pad_excl": pool("AveragePool", (1, 2, 7, 8), kernel_shape=[3, 3], pads=[2, 2, 2, 2]),
    "avg_big_pad_incl": pool("AveragePool", (1, 2, 7, 8), kernel_shape=[3, 3], pads=[2, 1, 2, 2],
                             count_include_pad=1),
}


@pytest.mark.parametrize("case", POOLS)
def test_pool(case, rng):
    check(POOLS[case], rng)


def test_batchnorm(rng):
    c = 5
    inits = {"s": r(rng, c), "b": r(rng, c), "m": r(rng, c), "v": (np.abs(r(rng, c)) + 0.2)}
    for shape in [(2, c, 7, 6), (3, c), (2, c, 9)]:
        check(make(helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3),
                   {"x": shape}, ["y"], inits), rng)


def test_instance_and_group_norm(rng):
    c = 6
    inits = {"s": r(rng, c), "b": r(rng, c)}
    check(make(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4),
               {"x": (2, c, 5, 7)}, ["y"], inits), rng)
    check(make(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"]),
               {"x": (2, c, 11)}, ["y"], inits), rng)
    check(make(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-4),
               {"x": (2, c, 5, 7)}, {"y": (2, c, 5, 7)}, inits, opset=21), rng)
    # GroupNormalization-18 (scale and bias per group) is deprecated: onnx's checker rejects it
    m = make(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2),
             {"x": (1, c, 4, 3)}, {"y": (1, c, 4, 3)}, {"s": r(rng, 2), "b": r(rng, 2)}, opset=18)
    with pytest.raises(OpenPrimError, match="^malformed ONNX model: .*deprecated"):
        import_model(m)


@pytest.mark.parametrize("axis,shape", [(-1, (3, 4, 7)), (1, (2, 3, 4, 5)), (0, (4, 6)), (-2, (2, 5, 3))])
def test_layer_norm(axis, shape, rng):
    norm = shape[axis % len(shape):]
    check(make(helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis, epsilon=1e-4),
               {"x": shape}, ["y"], {"s": r(rng, *norm), "b": r(rng, *norm)}), rng)


GEMM = {
    "plain": dict(a=(5, 7), b=(7, 3), c=(3,)),
    "transB_alpha_beta": dict(a=(4, 6), b=(9, 6), c=(1, 9), transB=1, alpha=0.5, beta=2.0),
    "transA": dict(a=(6, 4), b=(6, 5), c=(4, 5), transA=1),
    "scalar_c": dict(a=(3, 6), b=(6, 5), c=(), beta=0.3),
    "no_c": dict(a=(3, 6), b=(6, 5), c=None, alpha=1.7),
}


@pytest.mark.parametrize("case", GEMM)
def test_gemm(case, rng):
    p = dict(GEMM[case])
    a, b, c = p.pop("a"), p.pop("b"), p.pop("c")
    inits = {"b": r(rng, *b)}
    ins = ["a", "b"]
    if c is not None:
        inits["c"] = r(rng, *c)
        ins.append("c")
    check(make(helper.make_node("Gemm", ins, ["y"], **p), {"a": a}, ["y"], inits), rng)


def test_gemm_runtime_operands(rng):
    m = make(helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5, beta=1.5),
             {"a": (3, 4), "b": (5, 4), "c": (3, 5)}, ["y"])
    check(m, rng)


@pytest.mark.parametrize("a,b,const", [((5, 7), (7, 3), True), ((2, 5, 7), (7, 3), True),
                                       ((2, 3, 4), (2, 4, 5), False), ((7,), (7, 3), True),
                                       ((2, 3, 4), (4,), True), ((3, 4), (2, 4, 5), False),
                                       ((2, 1, 3, 4), (5, 4, 2), True)])
def test_matmul(a, b, const, rng):
    if const:
        m = make(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": a}, ["y"], {"b": r(rng, *b)})
    else:
        m = make(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": a, "b": b}, ["y"])
    check(m, rng)


def test_reshape_concat_pad(rng):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),              # (2, 3, 20) -> (2, 0, -1, 5)
             helper.make_node("Concat", ["r", "c"], ["cat"], axis=2),
             helper.make_node("Pad", ["cat", "pads", "val"], ["y"], mode="constant")]
    inits = {"shape": np.array([2, 0, -1, 5], np.int64), "c": r(rng, 2, 3, 2, 5),
             "pads": np.array([0, 1, 2, 0, 0, 0, 1, 3], np.int64), "val": np.array(0.25, np.float32)}
    check(make(nodes, {"x": (2, 3, 20)}, ["y"], inits), rng)


def test_concat_three_and_pad_axes(rng):
    nodes = [helper.make_node("Concat", ["a", "b", "a"], ["c"], axis=-1),
             helper.make_node("Pad", ["c", "pads", "", "axes"], ["y"])]
    inits = {"pads": np.array([1, 2, 0, 1], np.int64), "axes": np.array([-1, 1], np.int64)}
    check(make(nodes, {"a": (2, 3, 4), "b": (2, 3, 1)}, ["y"], inits, opset=18), rng)


def test_shape_gather_unsqueeze_concat_fold(rng):
    """The usual exporter pattern: flatten through Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["c"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["c", "shape"], ["flat"]),
             helper.make_node("Unsqueeze", ["flat", "ax1"], ["u"]),
             helper.make_node("Squeeze", ["u", "ax1"], ["sq"]),
             helper.make_node("Gemm", ["sq", "fw", "fb"], ["y"], transB=1)]
    inits = {"w": r(rng, 4, 3, 3, 3, scale=0.3), "zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64), "ax1": np.array([1], np.int64),
             "fw": r(rng, 10, 4 * 6 * 5, scale=0.1), "fb": r(rng, 10)}
    m = make(nodes, {"x": (2, 3, 6, 5)}, ["y"], inits)
    g = import_model(m)
    assert not any(n.op in ("gather", "shape") for n in g.nodes)
    check(m, rng)


def test_small_cnn(rng):
    """Conv-BN-Relu-MaxPool-Conv(Clip)-GlobalAveragePool-Flatten-Gemm-Softmax, two outputs."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=2),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
             helper.make_node("Add", ["r2", "p1"], ["res"]),
             helper.make_node("GlobalAveragePool", ["res"], ["gap"]),
             helper.make_node("Flatten", ["gap"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["prob"])]
    inits = {"w1": r(rng, 8, 3, 3, 3, scale=0.3), "b1": r(rng, 8), "s": r(rng, 8), "bb": r(rng, 8),
             "m": r(rng, 8), "v": np.abs(r(rng, 8)) + 0.5, "w2": r(rng, 8, 4, 3, 3, scale=0.2),
             "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32), "fw": r(rng, 10, 8), "fb": r(rng, 10)}
    # opset 15, not 13: onnx's reference BatchNormalization-9 (opsets 9-13) blends in the batch
    # statistics (its momentum attribute gets a default), which is not the ONNX inference semantics.
    check(make(nodes, {"x": (2, 3, 17, 15)}, ["logits", "prob"], inits, opset=15), rng)


# ----------------------------------------------------------------------------- (a) model-zoo ops
@pytest.mark.parametrize("size,alpha,beta,bias,shape", [(5, 1e-4, 0.75, 1.0, (1, 7, 5, 6)), (4, 0.5, 0.6, 2.0, (2, 6, 5, 3)),
                                                       (3, 0.8, 1.5, 1.0, (2, 5, 9)), (1, 0.3, 0.5, 1.5, (1, 3, 4, 4))])
def test_lrn(size, alpha, beta, bias, shape, rng):
    """Against numpy: onnx's reference LRN sums the squares of the first N channels only (N the batch)."""
    x = r(rng, *shape, scale=2.0)
    squares, c = x.astype(np.float64) ** 2, shape[1]
    lo, hi = (size - 1) // 2, size // 2
    window = np.stack([squares[:, max(0, i - lo):i + hi + 1].sum(axis=1) for i in range(c)], axis=1)
    want = x / (bias + alpha / size * window) ** beta
    check(make(helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias),
               {"x": shape}, ["y"]), rng, {"x": x}, want=[want])


def test_dropout_mask_output(rng):
    """Dropout's mask output imports while nothing reads it, and is one clear error once a node does."""
    x = {"x": (3, 5)}
    unread = [helper.make_node("Dropout", ["x"], ["d", "mask"]), helper.make_node("Relu", ["d"], ["y"])]
    check(make(unread, x, ["y"]), rng)
    read = [helper.make_node("Dropout", ["x"], ["d", "mask"], name="drop"),
            helper.make_node("Cast", ["mask"], ["m"], to=F, name="use_mask"), helper.make_node("Add", ["d", "m"], ["y"])]
    with pytest.raises(OpenPrimError, match=r"^ONNX node 'drop' \(Dropout, opset 17\) is not supported by OpenPrim: "
                                            r"its mask output 'mask' is read by node 'use_mask'$"):
        import_model(make(read, x, {"y": (3, 5)}))


def resize(shape, scales=None, sizes=None, opset=17, axes=None, **attrs):
    """A Resize node with constant scales (or sizes); opset 11-12 also need the roi input."""
    inits, ins = {}, ["x", "roi" if opset < 13 else ""]
    if opset < 13:
        inits["roi"] = np.zeros(0, np.float32)
    ins.append("scales" if scales is not None else "")
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
    if sizes is not None:
        ins.append("sizes")
        inits["sizes"] = np.array(sizes, np.int64)
    if axes is not None:
        attrs["axes"] = axes
    while ins[-1] == "":
        ins.pop()
    return make(helper.make_node("Resize", ins, ["y"], **attrs), {"x": shape}, ["y"], inits, opset)


RESIZE = {
    "half_pixel_default": resize((1, 3, 4, 5), scales=[1, 1, 2, 3]),
    "pytorch_nearest": resize((2, 3, 5, 4), scales=[1, 1, 3, 2], coordinate_transformation_mode="asymmetric",
                              nearest_mode="floor"),
    "sizes": resize((1, 2, 3, 5), sizes=[1, 2, 6, 10]),
    "round_prefer_ceil_channels": resize((1, 2, 3, 3), scales=[1, 2, 2, 1], nearest_mode="round_prefer_ceil"),
    "opset11_roi": resize((1, 2, 3, 4), scales=[1, 1, 2, 2], opset=11, coordinate_transformation_mode="asymmetric",
                          nearest_mode="floor"),
    "opset18_axes": resize((1, 2, 3, 4), scales=[3, 2], opset=18, axes=[2, 3]),
    "scale_one": resize((1, 2, 3, 4), scales=[1, 1, 1, 1]),
    "align_corners_scale2": resize((1, 2, 3, 4), scales=[1, 1, 2, 2], coordinate_transformation_mode="align_corners"),
    # fractional and downsampling scales, and modes that do not repeat each element the same number of times
    "half_pixel_fractional": resize((1, 2, 5, 7), scales=[1, 1, 1.5, 2.7]),
    "half_pixel_down": resize((1, 2, 4, 7), scales=[1, 1, 0.5, 0.3]),
    "pytorch_nearest_fractional": resize((2, 3, 5, 7), scales=[1, 1, 2.7, 1.5], nearest_mode="floor",
                                         coordinate_transformation_mode="asymmetric"),
    "asymmetric_round": resize((1, 2, 3, 4), scales=[1, 1, 3, 3], coordinate_transformation_mode="asymmetric"),
    "align_corners_scale3": resize((1, 2, 3, 4), scales=[1, 1, 3, 3], coordinate_transformation_mode="align_corners"),
    "half_pixel_symmetric_ceil": resize((1, 2, 5, 7), scales=[1, 1, 1.5, 0.6], nearest_mode="ceil",
                                        coordinate_transformation_mode="half_pixel_symmetric"),
    "pytorch_half_pixel_sizes": resize((1, 2, 5, 7), sizes=[1, 2, 8, 1], nearest_mode="round_prefer_ceil",
                                       coordinate_transformation_mode="pytorch_half_pixel"),
    # mode linear (bilinear on 4-d, trilinear on 5-d): every coordinate transformation, up and down, sizes
    "linear_half_pixel": resize((2, 3, 5, 7), scales=[1, 1, 2, 2], mode="linear"),
    "linear_half_pixel_fractional": resize((1, 2, 5, 7), scales=[1, 1, 1.7, 0.6], mode="linear"),
    "linear_align_corners": resize((1, 2, 4, 5), sizes=[1, 2, 9, 3], mode="linear",
                                   coordinate_transformation_mode="align_corners"),
    "linear_asymmetric": resize((1, 2, 3, 4), scales=[1, 1, 2.5, 3], mode="linear",
                                coordinate_transformation_mode="asymmetric"),
    "linear_pytorch_half_pixel": resize((1, 2, 5, 6), sizes=[1, 2, 1, 11], mode="linear",
                                        coordinate_transformation_mode="pytorch_half_pixel"),
    "linear_half_pixel_symmetric": resize((1, 2, 5, 7), scales=[1, 1, 1.5, 0.6], mode="linear",
                                          coordinate_transformation_mode="half_pixel_symmetric"),
    "linear_1d_axes": resize((2, 3, 7), scales=[3], opset=18, axes=[2], mode="linear"),
    "trilinear": resize((1, 2, 3, 4, 5), scales=[1, 1, 2, 1.5, 0.8], mode="linear"),
    # mode cubic (Keys, cubic_coeff_a; exclude_outside renormalizes at the edges): CrossViT scales its input
    "cubic_half_pixel": resize((1, 2, 6, 7), scales=[1, 1, 2, 1.5], mode="cubic"),
    "cubic_down_sizes": resize((1, 2, 9, 8), sizes=[1, 2, 5, 3], mode="cubic"),
    "cubic_align_corners_a05": resize((1, 2, 4, 5), scales=[1, 1, 2.5, 2], mode="cubic", cubic_coeff_a=-0.5,
                                      coordinate_transformation_mode="align_corners"),
    "cubic_exclude_outside": resize((2, 1, 5, 6), scales=[1, 1, 1.7, 0.8], mode="cubic", exclude_outside=1),
    "cubic_asymmetric": resize((1, 2, 4, 4), scales=[1, 1, 3, 2], mode="cubic",
                               coordinate_transformation_mode="asymmetric"),
}


@pytest.mark.parametrize("case", RESIZE)
def test_resize(case, rng):
    check(RESIZE[case], rng)


@pytest.mark.parametrize("opset", [7, 9])
def test_upsample(opset, rng):
    """Upsample (opsets 7-9: scales attribute, then input), converted to Resize. Against numpy: onnx's
    reference Upsample does not take the scales attribute."""
    if opset == 7:
        node, inits = helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0], mode="nearest"), {}
    else:
        node, inits = helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest"), \
            {"s": np.array([1, 1, 2, 3], np.float32)}
    x = r(rng, 1, 3, 4, 5)
    check(make(node, {"x": (1, 3, 4, 5)}, {"y": (1, 3, 8, 15)}, inits, opset), rng, {"x": x},
          want=[x.repeat(2, axis=2).repeat(3, axis=3)])


@pytest.mark.parametrize("model,match", [
    (resize((1, 2, 3, 4), scales=[1, 1, 2, 2], mode="area"), r"mode='area'"),
    (resize((1, 2, 3, 4), scales=[1, 1, 0.5, 0.5], mode="linear", antialias=1, opset=18),
     r"antialias=1 with mode='linear'"),
    (resize((1, 2, 3, 4), scales=[1, 1, 2, 2], mode="cubic", coordinate_transformation_mode="tf_crop_and_resize"),
     r"coordinate_transformation_mode='tf_crop_and_resize' with mode='cubic'"),
    (resize((1, 2, 3, 4), scales=[1, 1, 2, 2], coordinate_transformation_mode="tf_crop_and_resize"),
     r"coordinate_transformation_mode='tf_crop_and_resize' with nearest_mode='round_prefer_floor'"),
])
def test_resize_unsupported(model, match):
    with pytest.raises(OpenPrimError, match=r"^ONNX node '.*' \(Resize, opset 1[78]\) is not supported by OpenPrim: " + match):
        import_model(model)


SLICE = {
    "two_axes": dict(x=(5, 7, 4), starts=[1, 2], ends=[4, 6], axes=[0, 1]),
    "steps_negative_bounds": dict(x=(3, 9, 8), starts=[-7, 1], ends=[9, -1], axes=[1, -1], steps=[3, 2]),
    "clamped_int64_end": dict(x=(4, 6), starts=[2], ends=[np.iinfo(np.int64).max], axes=[1]),
    "default_axes": dict(x=(6, 5), starts=[1, 0], ends=[5, 3]),
}


@pytest.mark.parametrize("case", SLICE)
def test_slice(case, rng):
    p = dict(SLICE[case])
    x = p.pop("x")
    inits = {k: np.array(v, np.int64) for k, v in p.items()}
    ins = ["x", "starts", "ends"] + (["axes"] if "axes" in p else ([""] if "steps" in p else [])) + \
        (["steps"] if "steps" in p else [])
    check(make(helper.make_node("Slice", ins, ["y"]), {"x": x}, ["y"], inits), rng)


def test_slice_opset9_attributes_and_negative_step(rng):
    m = make(helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 2]), {"x": (4, 3, 6)},
             {"y": (2, 3, 5)}, opset=9)
    check(m, rng)
    inits = {"s": np.array([5], np.int64), "e": np.array([0], np.int64), "a": np.array([1], np.int64),
             "st": np.array([-1], np.int64)}
    m = make(helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="rev"), {"x": (2, 7)}, ["y"], inits)
    with pytest.raises(OpenPrimError, match=r"'rev' \(Slice, opset 17\) is not supported by OpenPrim: negative steps \[-1\]"):
        import_model(m)


SPLIT = {
    "equal": dict(x=(2, 6, 5), outs=3, axis=1),
    "split_input": dict(x=(7, 4), outs=3, split=[2, 4, 1]),
    "num_outputs_uneven": dict(x=(3, 7), outs=3, axis=-1, num_outputs=3, opset=18),
    "attribute_opset11": dict(x=(5, 3), outs=2, split=[2, 3], opset=11),
}


@pytest.mark.parametrize("case", SPLIT)
def test_split(case, rng):
    p = dict(SPLIT[case])
    x, n, opset = p.pop("x"), p.pop("outs"), p.pop("opset", 17)
    outs = [f"y{i}" for i in range(n)]
    inits, ins = {}, ["x"]
    if "split" in p and opset >= 13:
        inits["split"] = np.array(p.pop("split"), np.int64)
        ins.append("split")
    m = make(helper.make_node("Split", ins, outs, **p), {"x": x}, outs, inits, opset)
    if opset < 13:  # shape inference of the old model: declare the output shapes
        m = make(helper.make_node("Split", ins, outs, **p), {"x": x}, {"y0": (2, 3), "y1": (3, 3)}, inits, opset)
    check(m, rng)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
                                "ReduceSumSquare"])
@pytest.mark.parametrize("axes,keepdims,opset", [([1, -1], 1, 17), ([0], 0, 17), (None, 0, 17), ([2, 0], 0, 18),
                                                 ([-2], 1, 18)])
def test_reduce(op, axes, keepdims, opset, rng):
    """axes as an attribute (ReduceSum: an input from 13) or an input (opset 18), keepdims both ways."""
    inits, ins, attrs = {}, ["x"], {"keepdims": keepdims}
    if axes is not None:
        if opset >= 18 or op == "ReduceSum":
            inits["axes"] = np.array(axes, np.int64)
            ins.append("axes")
        else:
            attrs["axes"] = axes
    check(make(helper.make_node(op, ins, ["y"], **attrs), {"x": (3, 4, 5)}, ["y"], inits, opset), rng)


@pytest.mark.parametrize("repeats,shape", [([1, 3, 2], (2, 3, 4)), ([2, 1], (3, 5)), ([1, 1], (3, 5))])
def test_tile(repeats, shape, rng):
    check(make(helper.make_node("Tile", ["x", "reps"], ["y"]), {"x": shape}, ["y"],
               {"reps": np.array(repeats, np.int64)}), rng)


def test_reduce_noop_with_empty_axes(rng):
    check(make(helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1), {"x": (3, 4)}, ["y"]), rng)


GATHER = {
    "scalar_axis1": dict(x=(3, 5, 4), idx=np.array(2), axis=1),
    "run_and_repeat": dict(x=(7, 3), idx=np.array([1, 2, 3, 3, 3, 6, 0, -1]), axis=0),
    "2d_indices_last_axis": dict(x=(2, 3, 6), idx=np.array([[0, 2, 4], [5, 1, 1]]), axis=-1),
}


@pytest.mark.parametrize("case", GATHER)
def test_gather_constant_indices(case, rng):
    p = GATHER[case]
    m = make(helper.make_node("Gather", ["x", "i"], ["y"], axis=p["axis"]), {"x": p["x"]}, ["y"],
             {"i": p["idx"].astype(np.int64)})
    check(m, rng)


@pytest.mark.parametrize("mode,pads", [("reflect", [0, 2, 1, 0, 1, 3]), ("edge", [1, 0, 2, 2, 3, 0]),
                                       ("constant", [0, -1, 2, 1, 1, -2]), ("reflect", [0, -1, 1, 0, 2, -1])])
def test_pad_modes(mode, pads, rng):
    """reflect and edge (copies of slices), negative pads (a crop first). Against numpy.pad: onnx's
    reference Pad takes no negative pads."""
    x = r(rng, 2, 5, 4)
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, b, e in zip(x.shape, pads[:3], pads[3:]))
    want = np.pad(x[crop], [(max(b, 0), max(e, 0)) for b, e in zip(pads[:3], pads[3:])], mode=mode)
    m = make(helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode), {"x": (2, 5, 4)}, ["y"],
             {"pads": np.array(pads, np.int64)})
    check(m, rng, {"x": x}, want=[want])


def test_pad_wrap_unsupported():
    m = make(helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap", name="p"), {"x": (2, 5)}, ["y"],
             {"pads": np.array([0, 1, 0, 1], np.int64)}, opset=19)
    with pytest.raises(OpenPrimError, match=r"'p' \(Pad, opset 19\) is not supported by OpenPrim: mode='wrap' "
                                            r"\(constant, reflect and edge are supported\)"):
        import_model(m)


CONV_TRANSPOSE = {
    "plain": dict(x=(1, 3, 5, 4), w=(3, 2, 3, 3)),
    "stride2_pads_outpad": dict(x=(2, 4, 5, 6), w=(4, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1],
                                output_padding=[1, 0]),
    "stride3x2_dilation_asym": dict(x=(1, 2, 4, 5), w=(2, 3, 2, 3), strides=[3, 2], dilations=[2, 1],
                                    pads=[0, 1, 2, 0]),
    "big_pads_crop": dict(x=(1, 2, 6, 6), w=(2, 2, 2, 2), strides=[2, 2], pads=[2, 1, 3, 2]),
    "depthwise_nobias": dict(x=(1, 4, 5, 5), w=(4, 1, 3, 3), group=4, strides=[2, 2], pads=[1, 1, 1, 1], bias=False),
    "same_upper_output_shape": dict(x=(1, 2, 4, 5), w=(2, 3, 3, 3), strides=[2, 2], auto_pad="SAME_UPPER",
                                    output_shape=[9, 10]),
    "same_lower": dict(x=(1, 2, 4, 3), w=(2, 2, 4, 3), strides=[2, 3], auto_pad="SAME_LOWER"),
    "conv1d": dict(x=(2, 3, 7), w=(3, 4, 3), strides=[2], pads=[1, 0]),
    "groups2": dict(x=(1, 4, 4, 5), w=(4, 3, 2, 3), group=2, strides=[2, 1], pads=[0, 1, 1, 0]),
    "runtime_w_groups2": dict(x=(2, 6, 3, 4), w=(6, 2, 3, 2), group=2, strides=[1, 2], output_padding=[0, 1],
                              runtime_w=True),
    "runtime_w": dict(x=(1, 3, 4, 4), w=(3, 5, 3, 3), strides=[2, 2], pads=[1, 1, 0, 0], runtime_w=True),
}


def test_conv_transpose_output_shape_beyond(rng):
    """An output_shape 2 beyond the natural size on each axis: padding -1 at both ends, zeros around the
    natural result (onnx's reference evaluator refuses the node: the natural result padded is the answer)."""
    xv, wv, bv = r(rng, 1, 2, 3, 4), r(rng, 2, 3, 3, 3, scale=0.5), r(rng, 3)
    natural = make(helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2]), {"x": (1, 2, 3, 4)},
                   ["y"], {"w": wv, "b": np.zeros(3, np.float32)})
    y = ReferenceEvaluator(_as_double(natural)).run(None, {"x": xv.astype(np.float64)})[0]
    assert y.shape == (1, 3, 7, 9)
    want = np.pad(y, [(0, 0), (0, 0), (1, 1), (1, 1)]) + bv.reshape(1, 3, 1, 1)
    m = make(helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], output_shape=[9, 11]),
             {"x": (1, 2, 3, 4)}, ["y"], {"w": wv, "b": bv})
    check(m, rng, {"x": xv}, want=[want])


@pytest.mark.parametrize("cond", [True, False])
def test_if_constant_condition(cond, rng):
    """The branch a constant condition takes is imported in place; it reads values of the outer graph."""
    then_branch = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                                    [helper.make_tensor_value_info("t", F, (3, 4))])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", F, (3, 4))])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    check(make(nodes, {"x": (3, 4)}, {"y": (3, 4)}, {"c": np.array(cond)}), rng)


POOLS_3D = {
    "avg_depth_window": pool("AveragePool", (2, 1, 7, 3, 4), kernel_shape=[3, 1, 1], pads=[1, 0, 0, 1, 0, 0],
                             count_include_pad=1),
    "max_hw_window": pool("MaxPool", (1, 2, 3, 7, 6), kernel_shape=[1, 3, 2], strides=[1, 2, 2], pads=[0, 1, 0, 0, 1, 0]),
}


@pytest.mark.parametrize("case", POOLS_3D)
def test_pool_3d_trivial_window(case, rng):
    """3-d pools with a size-1 window on depth (PyTorch's LocalResponseNorm export) or on height and width."""
    check(POOLS_3D[case], rng)


def test_pool_3d_full_window_unsupported():
    m = pool("MaxPool", (1, 2, 4, 5, 6), kernel_shape=[2, 2, 2])
    with pytest.raises(OpenPrimError, match=r"\(MaxPool, opset 17\) is not supported by OpenPrim: 3-d pooling with a "
                                            r"window on depth and on height or width"):
        import_model(m)


@pytest.mark.parametrize("direction, layout, states, peepholes", [
    ("forward", 0, False, False), ("reverse", 0, True, True), ("bidirectional", 1, True, False),
    ("bidirectional", 0, False, True)])
def test_lstm(rng, direction, layout, states, peepholes):
    """LSTM unrolled (Y, Y_h, Y_c): every direction, batch-first layout, initial states, peepholes; against
    onnx's reference evaluator in float64."""
    seq, batch, width, hidden = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    inits = {"W": r(rng, dirs, 4 * hidden, width, scale=0.5), "R": r(rng, dirs, 4 * hidden, hidden, scale=0.5),
             "B": r(rng, dirs, 8 * hidden, scale=0.3)}
    ins, inputs = ["X", "W", "R", "B", "", "", ""], {"X": (batch, seq, width) if layout else (seq, batch, width)}
    if states:
        ins[5:7] = ["h0", "c0"]
        inputs.update({n: (batch, dirs, hidden) if layout else (dirs, batch, hidden) for n in ("h0", "c0")})
    if peepholes:
        ins.append("P")
        inits["P"] = r(rng, dirs, 3 * hidden, scale=0.3)
    while ins[-1] == "":
        ins.pop()
    m = make(helper.make_node("LSTM", ins, ["Y", "Y_h", "Y_c"], hidden_size=hidden, direction=direction,
                              layout=layout), inputs, ["Y", "Y_h", "Y_c"], inits, opset=14)
    check(m, rng, rtol=1e-5)


def test_lstm_torch_export(tmp_path, rng):
    """nn.LSTM (two layers, bidirectional, batch first: Sequencer's token mixing) exported by torch.onnx,
    against PyTorch in float64."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(8, 12, num_layers=2, bidirectional=True, batch_first=True).eval()
    x = r(rng, 3, 7, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(lstm, (torch.from_numpy(x),), str(tmp_path / "lstm.onnx"), dynamo=False, opset_version=17,
                          input_names=["x"])
    with torch.no_grad():
        want = [w.numpy() for w in lstm.double()(torch.from_numpy(x).double())[0:1]]
    model = onnx.load(str(tmp_path / "lstm.onnx"))
    assert importer.unsupported_nodes(model) == {}
    got = onnx_backend.prepare(model).run([x])[0]
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-5)


def test_torch_export(tmp_path, rng):
    """A PyTorch module with the ops of this section, exported by torch.onnx (LocalResponseNorm as a 3-d
    AveragePool behind an If, chunk as Split or Slice, interpolate as Resize, reflection and replication
    padding, amax/mean/norm as reductions, strided slicing), against PyTorch in float64."""
    torch = pytest.importorskip("torch")
    nn, fn = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pad, self.conv1 = nn.ReflectionPad2d(2), nn.Conv2d(3, 16, 5)
            self.lrn = nn.LocalResponseNorm(5, alpha=1e-3, beta=0.75, k=2.0)
            self.conv2, self.up = nn.Conv2d(8, 16, 3, padding=1), nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
            self.edge, self.fc = nn.ReplicationPad2d((1, 0, 1, 0)), nn.Linear(8, 5)

        def forward(self, x):
            y = fn.max_pool2d(self.lrn(fn.relu(self.conv1(self.pad(x)))), 3, 2, ceil_mode=True)
            a, b = y.chunk(2, dim=1)
            y = self.edge(self.up(fn.interpolate(self.conv2(a * torch.sigmoid(b)), scale_factor=2, mode="nearest")))
            y = torch.clamp(y, min=-1.0) ** 2 + y.abs().sqrt() - torch.exp(-y.pow(2))
            m = y.amax(dim=(2, 3)) + y.mean(dim=(2, 3)) + fn.adaptive_max_pool2d(y, 1).flatten(1)
            return self.fc(m / m.norm(dim=1, keepdim=True)), y[:, :, 1::2, :-1]

    torch.manual_seed(0)
    net, x = Net().eval(), rng.standard_normal((2, 3, 23, 19)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.from_numpy(x),), str(tmp_path / "net.onnx"), dynamo=False, opset_version=17,
                          input_names=["x"])
    model = onnx.load(str(tmp_path / "net.onnx"))
    assert importer.unsupported_nodes(model) == {}
    with torch.no_grad():
        want = [w.numpy() for w in net.double()(torch.from_numpy(x).double())]
    check(model, rng, {"x": x}, want=want)


def _conv_transpose_by_group(m, xv, wv, bias, groups):
    """The float64 output of ConvTranspose model `m` as one ungrouped ConvTranspose per group (onnx's
    reference evaluator mixes up the groups of a grouped one, depthwise aside)."""
    attrs = [a for a in m.graph.node[0].attribute if a.name != "group"]
    cin = xv.shape[1] // groups
    parts = []
    for k in range(groups):
        sub = make(helper.make_node("ConvTranspose", ["x", "w"], ["y"]), {"x": (xv.shape[0], cin) + xv.shape[2:]},
                   ["y"], {"w": wv[k * cin:(k + 1) * cin]})
        sub.graph.node[0].attribute.extend(attrs)
        parts.append(ReferenceEvaluator(_as_double(sub)).run(None, {"x": xv[:, k * cin:(k + 1) * cin].astype(np.float64)})[0])
    return np.concatenate(parts, axis=1) + bias.reshape(1, -1, *[1] * (xv.ndim - 2))


@pytest.mark.parametrize("case", CONV_TRANSPOSE)
def test_conv_transpose(case, rng):
    p = dict(CONV_TRANSPOSE[case])
    x, w, bias, runtime_w = p.pop("x"), p.pop("w"), p.pop("bias", True), p.pop("runtime_w", False)
    xv, wv = r(rng, *x), r(rng, *w, scale=0.5)
    inits, ins = {} if runtime_w else {"w": wv}, ["x", "w"]
    bv = r(rng, w[1] * p.get("group", 1))
    if bias:
        inits["b"] = bv
        ins.append("b")
    m = make(helper.make_node("ConvTranspose", ins, ["y"], **p), {"x": x, **({"w": w} if runtime_w else {})}, ["y"],
             inits)
    feeds = {"x": xv, **({"w": wv} if runtime_w else {})}
    grouped = p.get("group", 1) > 1 and w[1] > 1
    check(m, rng, feeds, want=[_conv_transpose_by_group(m, xv, wv, bv if bias else np.zeros(1), p["group"])]
          if grouped else None)


def test_import_from_path_and_input_shapes(tmp_path, rng):
    m = make(helper.make_node("Relu", ["x"], ["y"]), {"x": ("N", 3, 4)}, ["y"])
    with pytest.raises(OpenPrimError, match=r"ONNX input 'x' has a dynamic dimension 'N'.*input_shapes"):
        import_model(m)
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    g = import_model(str(p), input_shapes={"x": (2, 3, 4)})
    x = r(rng, 2, 3, 4)
    np.testing.assert_array_equal(openprim.compile(g)(x), np.maximum(x, 0))
    rep = onnx_backend.prepare(m, input_shapes={"x": (2, 3, 4)})
    np.testing.assert_array_equal(rep.run({"x": x})[0], np.maximum(x, 0))


def test_run_node_and_device(rng):
    assert onnx_backend.supports_device("CPU")
    assert not onnx_backend.supports_device("TPU") and not onnx_backend.supports_device("CUDA:x")
    x = r(rng, 3, 4)
    (y,) = onnx_backend.run_node(helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.2), [x])
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.2 * x), rtol=1e-6)
    (y,) = onnx_backend.run_model(unary("Sigmoid", (3, 4)), [x.astype(np.float64)])
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-5)
    with pytest.raises(OpenPrimError, match=r"runs on 'CPU' or 'CUDA\[:N\]', got device 'TPU'"):
        onnx_backend.prepare(unary("Relu"), device="TPU")
    if not onnx_backend.supports_device("CUDA"):   # no GPU here: one line saying so, before any compile
        with pytest.raises(OpenPrimError, match="no usable NVIDIA GPU|no NVIDIA GPU|CUDA driver not available"):
            onnx_backend.prepare(unary("Relu"), device="CUDA")


# ----------------------------------------------------------------------------- (b) errors
def test_unsupported_op():
    m = make([helper.make_node("Relu", ["x"], ["r"], name="n1"),
              helper.make_node("Hardmax", ["r"], ["y"], name="n3")], {"x": (2, 3)}, ["y"])
    with pytest.raises(OpenPrimError) as e:
        import_model(m)
    assert str(e.value) == "ONNX node 'n3' (Hardmax, opset 17) is not supported by OpenPrim"


@pytest.mark.parametrize("equation,shapes", [
    ("bhlk,bhtk->bhlt", [(2, 3, 5, 4), (2, 3, 6, 4)]),     # CvT's attention scores
    ("bhlt,bhtv->bhlv", [(2, 3, 5, 6), (2, 3, 6, 4)]),
    ("ij,jk", [(4, 5), (5, 3)]),                            # implicit output: the letters seen once
    ("ij,kj->ik", [(3, 5), (4, 5)]),
    ("bn,anm->bam", [(2, 3), (4, 3, 5)]),                   # free dims of both, out of order
    ("ijk,j->ik", [(2, 3, 4), (3,)]),
    ("ab,cd->abcd", [(2, 3), (4, 5)]),                      # an outer product
    ("i,i->", [(7,), (7,)]),                                # a dot product: a scalar
    ("ijk->ki", [(2, 3, 4)]),                               # one operand: a sum, then a transpose
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)])])
def test_einsum(rng, equation, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    check(make(helper.make_node("Einsum", names, ["y"], equation=equation), dict(zip(names, shapes)), ["y"]), rng)


@pytest.mark.parametrize("equation,shapes,why", [
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], "ellipses"),
    ("ii->i", [(3, 3)], "repeats a letter"),
    ("ij,jk->ik", [(3, 4), (5, 2)], "dimension 'j' is 4 in one operand and 5 in another")])
def test_einsum_refused(equation, shapes, why):
    names = [f"x{i}" for i in range(len(shapes))]
    m = make(helper.make_node("Einsum", names, ["y"], equation=equation, name="e"), dict(zip(names, shapes)),
             {"y": None})
    with pytest.raises(OpenPrimError, match=rf"ONNX node 'e' \(Einsum, opset 17\).*{re.escape(why)}"):
        import_model(m)


def test_unsupported_attribute():
    m = make(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn", num_groups=3, stash_type=0),
             {"x": (2, 3, 4, 4)}, {"y": (2, 3, 4, 4)}, {k: np.ones(3, np.float32) for k in "sb"}, opset=21)
    with pytest.raises(OpenPrimError, match=r"ONNX node 'gn' \(GroupNormalization, opset 21\) is not supported "
                                            r"by OpenPrim: stash_type other than float"):
        import_model(m)


@pytest.mark.parametrize("outputs", [["y"], ["y", "rm", "rv"]])
def test_batchnorm_training_mode(rng, outputs):
    """training_mode=1: the batch's statistics (BiT's weight-standardized convolutions export it), and the
    running statistics where the node's outputs ask for them; rank 2, 3 and 4 inputs."""
    c = 4
    inits = {"s": r(rng, c), "b": r(rng, c), "m": r(rng, c), "v": np.abs(r(rng, c)) + 0.5}
    for shape in [(3, c, 5, 6), (6, c), (2, c, 7)]:
        node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outputs, epsilon=1e-3,
                                momentum=0.8, training_mode=1)
        x = r(rng, *shape, scale=2.0) + 1.5
        shapes = {"y": shape, "rm": (c,), "rv": (c,)}
        check(make(node, {"x": shape}, {o: shapes[o] for o in outputs}, inits), rng, {"x": x})


@pytest.mark.parametrize("training_mode", [1, 0])
def test_batchnorm_of_constants_is_folded(rng, training_mode):
    """BiT's weight-standardized convolution as torch.onnx exports it: the filters reshaped to [1, K, C R S],
    a BatchNormalization of them (training_mode=1: their own statistics), reshaped back, into Conv. All of
    it is constant: folded at import (in float64), so the graph holds the convolution alone."""
    k, c = 6, 3
    inits = {"w": r(rng, k, c, 3, 3) + 0.5, "shape": np.array([1, k, -1], np.int64),
             "back": np.array([k, c, 3, 3], np.int64), "s": np.ones(k, np.float32), "b": np.zeros(k, np.float32),
             "m": r(rng, k), "v": np.abs(r(rng, k)) + 0.5}
    nodes = [helper.make_node("Reshape", ["w", "shape"], ["w3"]),
             helper.make_node("BatchNormalization", ["w3", "s", "b", "m", "v"], ["ws"], epsilon=1e-6,
                              training_mode=training_mode),
             helper.make_node("Reshape", ["ws", "back"], ["w4"]),
             helper.make_node("Conv", ["x", "w4"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])]
    m = make(nodes, {"x": (2, c, 9, 7)}, {"y": (2, k, 5, 4)}, inits)
    check(m, rng)
    assert [n.op for n in import_model(m).nodes if n.op != "constant"] == ["conv2d"]


@pytest.mark.parametrize("groups", [2, 6])
def test_group_norm_as_torch_onnx_writes_it(rng, groups):
    """GroupNorm below opset 18 as torch.onnx exports it: reshape [N, C, H, W] -> [N, G, rest], instance norm of
    G channels, reshape back, the per-channel affine. Imported as the map's group norm (scale and shift
    repeated per channel), not a norm of a [N, G, rest, 1] view: against the reference, and the graph
    holds one group_norm of the 4-d map."""
    n, c, h, w = 2, 6, 5, 3
    inits = {"split": np.array([n, groups, -1], np.int64), "back": np.array([n, c, h, w], np.int64),
             "s": r(rng, groups) + 1, "b": r(rng, groups), "gamma": r(rng, c, 1, 1), "beta": r(rng, c, 1, 1)}
    nodes = [helper.make_node("Reshape", ["x", "split"], ["v"]),
             helper.make_node("InstanceNormalization", ["v", "s", "b"], ["nv"], epsilon=1e-4),
             helper.make_node("Reshape", ["nv", "back"], ["n4"]),
             helper.make_node("Mul", ["n4", "gamma"], ["m"]),
             helper.make_node("Add", ["m", "beta"], ["y"])]
    m = make(nodes, {"x": (n, c, h, w)}, {"y": (n, c, h, w)}, inits, opset=13)
    check(m, rng, {"x": r(rng, n, c, h, w, scale=2.0) + 1.0})
    norms = [nd for nd in import_model(m).nodes if nd.op in ("group_norm", "instance_norm")]
    assert [(nd.op, nd.attrs["groups"], nd.operands[0].shape) for nd in norms] == [("group_norm", groups, (n, c, h, w))]


def test_malformed_model():
    # a node that reads a tensor nothing defines
    m = make(helper.make_node("Relu", ["nowhere"], ["y"]), {"x": (2, 3)}, {"y": (2, 3)})
    with pytest.raises(OpenPrimError, match=r"^malformed ONNX model: .*nowhere") as e:
        import_model(m)
    assert "\n" not in str(e.value)
    with pytest.raises(OpenPrimError, match=r"^cannot read ONNX model"):
        import_model(b"this is not a protobuf")


def test_old_opset_is_converted(rng):
    """Below opset 13 a model is converted first: Clip-6 and Pad-2 take their operands as attributes."""
    nodes = [helper.make_node("Clip", ["x"], ["c"], min=-0.5, max=0.7),
             helper.make_node("Pad", ["c"], ["y"], pads=[0, 1, 2, 0], value=0.5)]
    m = make(nodes, {"x": (3, 4)}, {"y": (3, 7)}, opset=6)
    check(m, rng)
    old = make(helper.make_node("ScaledTanh", ["x"], ["y"]), {"x": (2, 3)}, {"y": (2, 3)}, opset=1)
    with pytest.raises(OpenPrimError, match=r"^ONNX model uses opset 1; converting it to opset 13 failed: "):
        import_model(old)


def test_shape_error_names_the_node():
    m = make(helper.make_node("Add", ["a", "b"], ["y"], name="bad_add"), {"a": (2, 3), "b": (4,)}, {"y": (2, 4)})
    with pytest.raises(OpenPrimError, match=r"ONNX node 'bad_add' \(Add, opset 17\): shapes"):
        import_model(m)


def test_non_float_inputs():
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "t",
        [helper.make_tensor_value_info("x", TensorProto.STRING, (2, 3))],
        [helper.make_tensor_value_info("y", TensorProto.STRING, (2, 3))]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OpenPrimError, match="ONNX input 'x' has element type STRING; OpenPrim supports float"):
        import_model(m)
    rep = onnx_backend.prepare(unary("Relu", (2, 3)))
    with pytest.raises(OpenPrimError, match=r"input 'x' has dtype int64; the model takes a float tensor there \(f32\)"):
        rep.run([np.ones((2, 3), np.int64)])


def test_backend_runs_integer_inputs():
    """Token ids through the ONNX backend: an int64 input stays int64 (Gather of an embedding table), and
    the output comes back in its declared type."""
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("Cast", ["ids"], ["c"], to=TensorProto.INT32)], "t",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, (3,))],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, (3, 2)),
         helper.make_tensor_value_info("c", TensorProto.INT32, (3,))],
        [numpy_helper.from_array(table, "table")]), opset_imports=[helper.make_opsetid("", 17)])
    e, c = onnx_backend.prepare(m).run([np.array([5, 0, -1])])
    np.testing.assert_array_equal(e, table[[5, 0, -1]])
    assert c.dtype == np.int32 and list(c) == [5, 0, -1]


def _gaps_model():
    """Relu, TopK, two Hardmax (unmapped), and Shape -> ConstantOfShape (unmapped, but folded)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("TopK", ["r", "k"], ["v", "i"], name="topk", axis=1),
             helper.make_node("Hardmax", ["v"], ["h1"], name="hm1"), helper.make_node("Hardmax", ["h1"], ["h2"], name="hm2"),
             helper.make_node("Shape", ["h2"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["z"], name="zeros"),
             helper.make_node("Add", ["h2", "z"], ["y"])]
    return make(nodes, {"x": (2, 5)}, {"y": (2, 3)}, {"k": np.array([3], np.int64)})


def test_unsupported_nodes():
    assert importer.unsupported_nodes(_gaps_model()) == {"TopK": ["topk"], "Hardmax": ["hm1", "hm2"]}
    assert importer.unsupported_nodes(unary("Relu")) == {}
    upsample = make(helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 2.0]), {"x": (2, 3)}, {"y": (2, 6)}, opset=7)
    assert importer.unsupported_nodes(upsample) == {}  # read as the Resize it converts to


def test_onnx_check_command(tmp_path, capsys):
    gaps, good, junk = tmp_path / "gaps.onnx", tmp_path / "good.onnx", tmp_path / "junk.onnx"
    onnx.save(_gaps_model(), str(gaps))
    onnx.save(make([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["y"])],
                   {"x": (2, 3)}, ["y"]), str(good))   # a dynamic dimension is refused: test_cli_reliability.py
    junk.write_text("not a protobuf")
    assert openprim_main(["onnx-check", str(gaps)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{gaps}: opset 17, inputs: x float[2,5]",
        "3 of 7 nodes are not supported (2 op types):",
        "  Hardmax  x2  first: 'hm1'",
        "  TopK     x1  first: 'topk'"]
    assert openprim_main(["onnx-check", str(good)]) == 0
    assert capsys.readouterr().out == f"{good}: all 2 nodes supported (opset 17, inputs: x float[2,3])\n"
    for path, error in ((tmp_path / "none.onnx", "no such file"), (junk, "cannot read ONNX model: DecodeError")):
        assert openprim_main(["onnx-check", str(path)]) == 1
        out = capsys.readouterr()
        assert out.out == "" and out.err.count("\n") == 1, out
        assert out.err.startswith(f"openprim: error: {path}: {error}" if error == "no such file"
                                  else f"openprim: error: {error}"), out.err


DOC_TABLE = ("<!-- onnx-coverage: importer.coverage_table() -->", "<!-- end onnx-coverage -->")
TORCH_DOC_TABLE = ("<!-- torch-coverage: check.coverage_table() -->", "<!-- end torch-coverage -->")


def test_coverage_table_in_docs():
    """docs/frontends.md shows each importer's own table: the ONNX importer's (supported_ops() and its notes)
    and the torch importer's (pyfrontend/torch/check.py: SUPPORTED_OPS and its notes)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "frontends.md").read_text()
    table = doc.split(DOC_TABLE[0])[1].split(DOC_TABLE[1])[0].strip()
    assert table == importer.coverage_table(), \
        "docs/frontends.md is stale: paste in openprim.pyfrontend.onnx.importer.coverage_table()"
    assert set(importer._NOTES) <= set(importer.supported_ops())
    assert importer.supported_ops()["Gelu"] == (20, 21) and importer.supported_ops()["Upsample"] == (7, 9)
    pytest.importorskip("torch")
    from openprim.pyfrontend.torch import check
    table = doc.split(TORCH_DOC_TABLE[0])[1].split(TORCH_DOC_TABLE[1])[0].strip()
    assert table == check.coverage_table(), \
        "docs/frontends.md is stale: paste in openprim.pyfrontend.torch.check.coverage_table()"
    assert set(check._NOTES) <= set(check.importer.SUPPORTED_OPS)


# ----------------------------------------------------------------------------- (c) onnx backend tests
SUPPORTED = ["conv", "basic_conv", "batchnorm", "relu", "leakyrelu", "prelu", "clip", "sigmoid", "tanh", "gelu",
             "elu", "hardsigmoid", "hardswish", "add", "sub", "mul", "div", "neg", "sum", "maxpool", "averagepool",
             "globalaveragepool", "gemm", "matmul", "softmax", "logsoftmax", "layer_normalization",
             "group_normalization", "instancenorm", "reshape", "flatten", "transpose", "concat",
             "constant", "constant_pad", "identity", "dropout", "shape", "unsqueeze", "squeeze",
             "exp", "log", "sqrt", "abs", "erf", "pow", "max", "min", "mean", "reciprocal", "softplus", "softsign",
             "mish", "lrn", "resize", "upsample", "split", "slice", "reduce_mean", "reduce_sum", "reduce_max",
             "reduce_min", "reduce_l1", "reduce_l2", "reduce_sum_square", "globalmaxpool", "convtranspose", "gather",
             "reflect_pad", "edge_pad", "selu", "tile", "expand", "lstm"]

EXCLUDE = [
    # function-body expansions (*_expanded*): they use ops outside the supported set (CastLike of computed
    # tensors, Where, Less, ...) or pass reduction axes as runtime inputs; these families only use
    # supported ops (Exp, Log, ReduceMax/Mean/Sum, Sqrt, Pow, ...)
    (r"^(?!test_(clip_default_inbounds|hardswish|mish|softmax|logsoftmax|layer_normalization|group_normalization)_"
     r".*expanded)test_.*_expanded"),
    # Expand's shape as a graph input (an int64 tensor at run time): only constant shapes are supported
    r"^test_expand_(dim_changed|dim_unchanged|shape_model\d)_",
    # integer and unsigned element types: only float tensors are supported
    r"_u?int(8|16|32|64)", r"^test_div_int32_trunc",
    # float64 models: an error (OpenPrim computes in f32 at most; test_precision.py checks the message)
    r"^test_(max|min)_float64_",
    # a different op whose name starts with a supported one
    (r"^test_(convinteger|matmulinteger|gemm_batched|constantofshape|shape_clip|averagepool_3d|"
     r"maxpool_3d|clip_default_int8|gather_elements|split_to_sequence)"),
    # 3-d spatial pools and transposed convolutions: only 1-d and 2-d windows
    r"^test_(averagepool|maxpool|convtranspose)_3d",
    # AveragePool with dilations (opset 19): the graph's avg_pool2d has no dilation
    r"^test_averagepool_2d_dilations",
    # MaxPool's second output (argmax Indices, int64) and storage_order
    r"^test_maxpool_with_argmax",
    # Dropout: the mask output (bool), a graph output
    r"^test_dropout_default_mask",
    # LayerNormalization with its Mean and InvStdDev outputs (the node tests always request them)
    r"^test_layer_normalization_(?!.*_expanded)",
    # shape / pads / axes passed as runtime int64 graph inputs (they must be constants: initializers)
    r"^test_reshape_", r"^test_constant_pad", r"^test_(un)?squeeze",
    # likewise reduction axes, Slice's starts/ends, Split's sizes, Gather's indices, Resize's and
    # Upsample's scales/sizes, reflect/edge Pad's pads, Tile's repeats (Resize's cubic mode, and
    # reductions over empty or bool tensors, are not supported either)
    r"^test_(reduce_|slice|split_(variable_parts|zero_size)|gather_|resize_|upsample_nearest|edge_pad|reflect_pad|"
    r"tile)",
    # Shape's result is an int64 graph output: only float outputs are supported
    r"^test_shape_",
    # LSTM's sequence_lens as a graph input (per-sequence lengths known at run time): whole sequences only
    r"^test_lstm_with_peepholes",
    # sequence- and optional-typed identity
    r"^test_identity_(sequence|opt)",
]

# onnx's model tests of PyTorch modules (pytorch-converted: test_Conv2d, test_BatchNorm2d_eval, ...;
# pytorch-operator: test_operator_*), opsets 6-12 (the importer converts them to opset 13): all of
# them run, except the ones below.
MODEL_TESTS = [t.name for kind in ("pytorch-converted", "pytorch-operator")
               for t in onnx.backend.test.loader.load_model_tests(kind=kind)]
EXCLUDE_MODELS = [
    # 3-d convolutions and pools: only 1-d and 2-d windows
    r"^test_(Conv3d|AvgPool3d|MaxPool3d)",
    # PRelu-6's per-channel slope of shape [C]: opset 7+ broadcasts it against the last axis instead,
    # and the version converter does not reshape it, so the converted model is ill-formed
    r"^test_PReLU_\dd_multiparam",
    # integer inputs (Embedding's indices, the non-float params test)
    r"^test_(Embedding|operator_non_float_params)",
    # the stored float64 inputs are uninitialized memory (denormals next to 1e+223), out of float32's range
    r"^test_operator_(add_broadcast|add_size1_singleton_broadcast|add_size1_right_broadcast|addconstant)_",
    # a float64 (DOUBLE) model: an error (test_precision.py)
    r"^test_operator_add_size1_broadcast_",
]

with warnings.catch_warnings():  # numpy warnings from generating unrelated ops' test data
    warnings.simplefilter("ignore")
    backend_test = onnx.backend.test.BackendTest(onnx_backend, __name__)
backend_test.include(r"^test_({})(_.*)?_cpu$".format("|".join(SUPPORTED)))
backend_test.include(r"^({})_cpu$".format("|".join(MODEL_TESTS)))
for pattern in EXCLUDE + EXCLUDE_MODELS:
    backend_test.exclude(pattern)
globals().update(backend_test.enable_report().test_cases)

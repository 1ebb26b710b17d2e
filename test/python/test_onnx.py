"""The ONNX importer (openprim.pyfrontend.onnx.import_model) and backend (openprim.onnx_backend).

(a) one small model per supported op (odd shapes, strides, padding, dilation, groups), compiled and
    compared with onnx's reference evaluator run in float64;
(b) the errors: an unsupported op, a malformed model, a dynamic input shape, non-float inputs;
(c) onnx's backend test suite: the node tests of the supported ops and the PyTorch-converted model
    tests (see SUPPORTED / EXCLUDE and MODEL_TESTS / EXCLUDE_MODELS below).
"""
from __future__ import annotations

import warnings

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
from openprim.pyfrontend.onnx import import_model  # noqa: E402

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


def check(model, rng, feeds=None, rtol=1e-4):
    """Compile `model` with OpenPrim and compare every output with the float64 reference."""
    init = {i.name for i in model.graph.initializer}
    if feeds is None:
        feeds = {}
        for vi in model.graph.input:
            if vi.name in init:
                continue
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
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
}


@pytest.mark.parametrize("case", UNARY)
def test_unary(case, rng):
    check(UNARY[case], rng)


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


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)),
                                    ((2, 3, 4, 5), ()), ((3, 1, 5), (2, 1, 4, 1))])
def test_binary(op, shapes, rng):
    a, b = shapes
    m = make(helper.make_node(op, ["a", "b"], ["y"]), {"a": a, "b": b}, ["y"])
    feeds = {"a": r(rng, *a), "b": r(rng, *b)}
    if op == "Div":
        feeds["b"] = (np.sign(feeds["b"]) * (np.abs(feeds["b"]) + 0.5)).astype(np.float32)
    check(m, rng, feeds)


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
    assert not onnx_backend.supports_device("CUDA")
    x = r(rng, 3, 4)
    (y,) = onnx_backend.run_node(helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.2), [x])
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.2 * x), rtol=1e-6)
    (y,) = onnx_backend.run_model(unary("Sigmoid", (3, 4)), [x.astype(np.float64)])
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-5)
    with pytest.raises(OpenPrimError, match="CPU only"):
        onnx_backend.prepare(unary("Relu"), device="CUDA")


# ----------------------------------------------------------------------------- (b) errors
def test_unsupported_op():
    m = make([helper.make_node("Relu", ["x"], ["r"], name="n1"),
              helper.make_node("Erf", ["r"], ["y"], name="n3")], {"x": (2, 3)}, ["y"])
    with pytest.raises(OpenPrimError) as e:
        import_model(m)
    assert str(e.value) == "ONNX node 'n3' (Erf, opset 17) is not supported by OpenPrim"


def test_unsupported_attribute():
    m = make(helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn",
                              training_mode=1), {"x": (2, 3, 4, 4)}, {"y": (2, 3, 4, 4)},
             {k: np.ones(3, np.float32) for k in "sbmv"})
    with pytest.raises(OpenPrimError, match=r"ONNX node 'bn' \(BatchNormalization, opset 17\) is not supported "
                                            r"by OpenPrim: training_mode=1"):
        import_model(m)


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
        [helper.make_node("Relu", ["x"], ["y"])], "t",
        [helper.make_tensor_value_info("x", TensorProto.INT32, (2, 3))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, (2, 3))]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OpenPrimError, match="ONNX input 'x' has element type INT32; OpenPrim supports float"):
        import_model(m)
    rep = onnx_backend.prepare(unary("Relu", (2, 3)))
    with pytest.raises(OpenPrimError, match="input 'x' has dtype int64; OpenPrim supports float"):
        rep.run([np.ones((2, 3), np.int64)])


# ----------------------------------------------------------------------------- (c) onnx backend tests
SUPPORTED = ["conv", "basic_conv", "batchnorm", "relu", "leakyrelu", "prelu", "clip", "sigmoid", "tanh", "gelu",
             "elu", "hardsigmoid", "hardswish", "add", "sub", "mul", "div", "neg", "sum", "maxpool", "averagepool",
             "globalaveragepool", "gemm", "matmul", "softmax", "logsoftmax", "layer_normalization",
             "group_normalization", "instancenorm", "reshape", "flatten", "transpose", "concat",
             "constant", "constant_pad", "identity", "dropout", "shape", "unsqueeze", "squeeze"]

EXCLUDE = [
    # function-body expansions (*_expanded*): they use ops outside the supported set (Cast/CastLike of
    # computed tensors, Where, Less, Exp, ReduceMean, Sqrt, ...); these two only use supported ops
    r"^(?!test_(clip_default_inbounds|hardswish)_expanded)test_.*_expanded",
    # integer and unsigned element types: only float tensors are supported
    r"_u?int(8|16|32|64)", r"^test_div_int32_trunc",
    # a different op whose name starts with a supported one
    (r"^test_(convinteger|convtranspose|matmulinteger|gemm_batched|constantofshape|shape_clip|averagepool_3d|"
     r"maxpool_3d|clip_default_int8)"),
    # 3-d spatial pools: only 1-d and 2-d windows
    r"^test_(averagepool|maxpool)_3d",
    # AveragePool with dilations (opset 19): the graph's avg_pool2d has no dilation
    r"^test_averagepool_2d_dilations",
    # MaxPool's second output (argmax Indices, int64) and storage_order
    r"^test_maxpool_with_argmax",
    # training-mode BatchNormalization (batch statistics, running-mean outputs)
    r"^test_batchnorm_.*training_mode",
    # Dropout: the mask output (bool)
    r"^test_dropout_default_mask",
    # Clip with min/max given as runtime graph inputs (clamp needs constant bounds)
    r"^test_clip(_example|_inbounds|_outbounds|_splitbounds|_default_min|_default_max|_min_greater_than_max)?_cpu",
    # LayerNormalization with its Mean and InvStdDev outputs (the node tests always request them)
    r"^test_layer_normalization_",
    # shape / pads / axes passed as runtime int64 graph inputs (they must be constants: initializers)
    r"^test_reshape_", r"^test_constant_pad", r"^test_(un)?squeeze",
    # Shape's result is an int64 graph output: only float outputs are supported
    r"^test_shape_",
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
    # ops outside the supported set: ConvTranspose, Split (GLU, chunk), Exp, Softplus, Selu, Pow, Sqrt,
    # Max/Min, ReduceSum/ReduceMean, Tile, Slice
    r"^test_(ConvTranspose2d|GLU|PoissonNLLLLoss|Softplus|SELU)",
    r"^test_operator_(convtranspose|chunk|exp|selu|pow|sqrt|max|min|reduced_(sum|mean)|repeat|index)",
    # Abs (Softsign = x / (1 + |x|)) is not mapped
    r"^test_Softsign",
    # Pad with mode reflect / edge: only constant padding
    r"^test_(ReflectionPad2d|ReplicationPad2d|operator_pad)_",
    # PRelu-6's per-channel slope of shape [C]: opset 7+ broadcasts it against the last axis instead,
    # and the version converter does not reshape it, so the converted model is ill-formed
    r"^test_PReLU_\dd_multiparam",
    # integer inputs (Embedding's indices, the non-float params test)
    r"^test_(Embedding|operator_non_float_params)",
    # the stored float64 inputs are uninitialized memory (denormals next to 1e+223), out of float32's range
    r"^test_operator_(add_broadcast|add_size1_singleton_broadcast|add_size1_right_broadcast|addconstant)_",
]

with warnings.catch_warnings():  # numpy warnings from generating unrelated ops' test data
    warnings.simplefilter("ignore")
    backend_test = onnx.backend.test.BackendTest(onnx_backend, __name__)
backend_test.include(r"^test_({})(_.*)?_cpu$".format("|".join(SUPPORTED)))
backend_test.include(r"^({})_cpu$".format("|".join(MODEL_TESTS)))
for pattern in EXCLUDE + EXCLUDE_MODELS:
    backend_test.exclude(pattern)
globals().update(backend_test.enable_report().test_cases)

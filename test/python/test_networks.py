"""End to end: ResNet-18-like and MobileNetV2-like networks built with the frontend, compiled through the
whole pipeline, against a float64 numpy evaluation of the same graph (reference.py, op by op)."""
import os
import sys

import numpy as np
import pytest

import openprim
from openprim import compiler
from openprim.runtime import load
from openprim.base.dtypes import from_storage

import reference as ref
from helpers import TARGET, run_on_gpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import mobilenetv2  # noqa: E402
import resnet  # noqa: E402


def evaluate(graph, inputs):
    """The graph in float64, node by node, with the reference implementation of each op."""
    val = {id(t): ref.f64(a) for t, a in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        a = node.attrs
        xs = [None if t is None else val[id(t)] for t in node.operands]
        op = node.op
        if op == "constant":
            y = from_storage(node.value, node.result.dtype).astype(np.float64)
        elif op == "conv2d":
            y = ref.conv2d(xs[0], xs[1], xs[2], a["strides"], a["padding"], a["dilations"], a["groups"],
                           a["layout"], a["filter_layout"])
            y = ref.activation(y if xs[3] is None else y + xs[3], a["activation"], a["activation_params"])
        elif op == "matmul":
            y = ref.matmul(xs[0], xs[1], xs[2], bool(a["transpose_rhs"]))
            y = ref.activation(y if xs[3] is None else y + xs[3], a["activation"], a["activation_params"])
        elif op == "batch_norm":
            y = ref.batch_norm(*xs, eps=a["epsilon"], layout=a["layout"])
        elif op == "max_pool2d":
            y = ref.max_pool2d(xs[0], a["kernel"], a["strides"], a["padding"], a["dilations"], bool(a["ceil_mode"]),
                               a["layout"])
        elif op == "global_avg_pool":
            y = ref.global_avg_pool(xs[0], a["layout"])
        elif op == "reshape":
            y = xs[0].reshape(node.result.shape)
        elif op == "transpose":
            y = ref.transpose(xs[0], a["perm"])
        elif op == "clamp":
            y = ref.clamp(xs[0], a["min"], a["max"])
        elif op in ("relu", "add"):
            y = getattr(ref, op)(*xs)
        else:
            raise NotImplementedError(op)
        val[id(node.result)] = y
    return [val[id(t)] for t in graph.outputs]


def check(graph, out, expect, dtype):
    scale = np.abs(expect).max()
    tol = {"f32": 1e-4, "f16": 3e-2, "bf16": 8e-2}[dtype]
    err = np.abs(out - expect).max() / scale
    assert np.isfinite(out).all() and np.abs(out).max() > 0
    assert err < tol, f"max error {err:.2e} of the output scale (tolerance {tol})"


NETS = [
    pytest.param(resnet.build, dict(size=64, layout="NCHW", dtype="f32", classes=10), id="resnet18-NCHW-f32"),
    pytest.param(resnet.build, dict(size=57, layout="NHWC", dtype="f16", classes=10), id="resnet18-NHWC-f16-odd"),
    pytest.param(mobilenetv2.build, dict(size=64, layout="NCHW", dtype="f32", classes=10, width=0.5),
                 id="mobilenetv2-NCHW-f32"),
    pytest.param(mobilenetv2.build, dict(size=48, layout="NHWC", dtype="bf16", classes=10, width=0.5),
                 id="mobilenetv2-NHWC-bf16"),
]


@pytest.mark.slow
@pytest.mark.parametrize("build,kwargs", NETS)
def test_network(build, kwargs):
    g = build(**kwargs)
    x = np.random.default_rng(3).standard_normal(g.inputs[0].shape).astype(np.float32)
    xr = from_storage(openprim.base.dtypes.to_storage(x, kwargs["dtype"]), kwargs["dtype"])
    out = run_on_gpu(g, [x])[2] if TARGET != "cpu" else openprim.compile(g)(x)
    check(g, out, evaluate(g, [xr])[0], kwargs["dtype"])


@pytest.mark.slow
def test_aot_artifact_matches_jit(tmp_path):
    g = resnet.build(depth=18, size=32, classes=10)
    x = np.random.default_rng(4).standard_normal(g.inputs[0].shape).astype(np.float32)
    path = str(tmp_path / "r.oprim")
    info = compiler.save(g, path)
    assert info["plan"]["arena_bytes"] < info["plan"]["naive_bytes"]
    net = load(path)
    np.testing.assert_array_equal(net(x), net(x))
    check(g, net(x), evaluate(g, [x])[0], "f32")
    engine = openprim.compile(g, backend="engine")
    check(g, engine(x), evaluate(g, [x])[0], "f32")


@pytest.mark.slow
@pytest.mark.skipif(TARGET != "cpu", reason="on GPUs ResNet-50 is checked by bench/gpu_networks.py (51 MB of fp16 weights)")
def test_resnet50_bottlenecks_and_torch_replay():
    """ResNet-50 (bottleneck blocks, stride on the 3x3) against float64 numpy, and the PyTorch replay that
    bench/gpu_networks.py times it against on GPUs (the same build() and seeded weights through
    TorchGraph) against both: the GPU benchmark compares like with like."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    from gpu_networks import TorchGraph
    kw = dict(depth=50, batch=2, size=32, layout="NHWC", dtype="f32", classes=10)
    g = resnet.build(**kw)
    assert sum(n.op == "conv2d" for n in g.nodes) == 53
    x = np.random.default_rng(3).standard_normal(g.inputs[0].shape).astype(np.float32)
    out = openprim.compile(g)(x)
    check(g, out, evaluate(g, [x])[0], "f32")
    tg = TorchGraph(torch, "NHWC", "f32", device="cpu")
    resnet.build(**kw, graph=tg)
    with torch.no_grad():
        replay = tg.forward(torch.tensor(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last))
    check(g, out, replay.double().numpy(), "f32")

"""prim-batch-chunks (passes/batch_chunks.py): a memory-bound network compiled for a part of its batch and
run once per part, on the CPU.

The numerics run a small convolutional network of every kind of op the pass lets through (a strided
convolution, a depthwise one, a 1x1 with a residual that is a second input, a channel slice, a global pool,
a reshape, a matmul and a softmax; two outputs) at batch 6 in chunks of 2 and 3 (the pass's budget set
for it), against float64 numpy on every dtype. Then the runtime's side: inputs and outputs keep the whole
batch (shapes in errors, `openprim inspect`), and the choice on whole networks: MobileNetV2 (memory-bound)
is chunked at batch 8, ResNet-50 (compute-bound) is not, nor is any GPU target.
"""
from __future__ import annotations

import functools
import os
import sys

import numpy as np
import pytest

import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close
import openprim
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target
from openprim.compiler import load_module
from openprim.dialect import graph_functions
from openprim.passes import batch_chunks, prim_pipeline

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import mobilenetv2  # noqa: E402
import resnet  # noqa: E402

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="the pass is in the CPU pipeline only")
N = 6
PEAK = 4 * 13 * 13 + 8 * 7 * 7


def _net(net):
    """Two outputs (pooled features, class probabilities) of a small NCHW network and their float64
    references; one sample's largest op (the first convolution) reads and writes PEAK f32 values."""
    x, xv = net.input((N, 4, 13, 13))
    w1, w1v = net.weight((8, 4, 3, 3), scale=0.4)
    b1, b1v = net.weight((8,))
    y = net.g.relu(net.g.conv2d(x, w1, b1, stride=2, padding=1))
    yv = ref.relu(ref.conv2d(xv, w1v, b1v, stride=2, padding=1))
    wd, wdv = net.weight((8, 1, 3, 3), scale=0.4)
    y = net.g.conv2d(y, wd, padding=1, groups=8)
    yv = ref.conv2d(yv, wdv, padding=1, groups=8)
    wp, wpv = net.weight((6, 8, 1, 1), scale=0.4)
    z, zv = net.input((N, 6, 7, 7))
    y = net.g.add(net.g.conv2d(y, wp), z)
    yv = ref.conv2d(yv, wpv) + zv
    y, yv = net.g.slice(y, [1], [5], axes=[1]), yv[:, 1:5]
    pooled, pv = net.g.global_avg_pool(y), yv.mean(axis=(2, 3), keepdims=True)
    feats, fv = net.g.reshape(pooled, (N, 4)), pv.reshape(N, 4)
    m, mv = net.weight((4, 5), scale=0.5)
    logits = net.g.matmul(feats, m)
    lv = fv @ mv
    e = np.exp(lv - lv.max(axis=1, keepdims=True))
    return (feats, net.g.softmax(logits, axis=-1)), (fv, e / e.sum(axis=1, keepdims=True))


def _budget(monkeypatch, dtype, samples):
    """Set the pass's budget to fit `samples` samples of _net's largest op and no more."""
    item = 4 if dtype == "f32" else 2
    monkeypatch.setattr(batch_chunks, "Options",
                        functools.partial(batch_chunks.Options, budget=int((samples + 0.5) * PEAK * item)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk", [2, 3, N])
def test_chunked_numerics(dtype, chunk, rng, monkeypatch):
    _budget(monkeypatch, dtype, chunk)
    net = Net(rng, dtype)
    outs, wants = _net(net)
    got = net.run(None, *outs)
    assert net.exe.plan.get("batch_chunks", 1) == N // chunk
    assert net.exe.plan["values"][net.exe.plan["inputs"][0]["value"]]["shape"][0] == chunk
    for g, w, what in zip(got, wants, ("features", "probabilities")):
        assert g.shape == w.shape
        assert_close(g, w, dtype, reduction=36, what=what)


def test_whole_batch_at_the_boundary(rng, monkeypatch):
    """Inputs are checked against the whole batch, and `openprim inspect` shows it and the chunks."""
    _budget(monkeypatch, "f32", 2)
    net = Net(rng, "f32")
    outs, _ = _net(net)
    net.g.output(*outs)
    exe = openprim.compile(net.g, cache=False)
    assert exe.plan["batch_chunks"] == 3
    with pytest.raises(OpenPrimError, match=r"input 'x1' must have shape \(6, 4, 13, 13\), got \(2, 4, 13, 13\)"):
        exe(net.feeds[0][:2], net.feeds[1][:2])


def test_inspect_shows_the_whole_batch(rng, monkeypatch, tmp_path, capsys):
    from openprim.cli import main
    _budget(monkeypatch, "f32", 2)
    net = Net(rng, "f32")
    outs, _ = _net(net)
    net.g.output(*outs)
    path = str(tmp_path / "net.oprim")
    openprim.compiler.save(net.g, path)
    assert main(["inspect", path]) == 0
    text = capsys.readouterr().out
    assert "input x1: f32[6, 4, 13, 13]" in text and "output 1: f32[6, 5]" in text
    assert "batch: compiled for 2, run in 3 chunks" in text


@pytest.mark.parametrize("build,chunk", [
    (mobilenetv2.build, 2),                               # memory-bound: 5.7 MiB a sample in its largest layer
    (functools.partial(resnet.build, depth=50), 8),       # compute-bound: 45 multiply-adds a byte
])
def test_choice_on_networks(build, chunk):
    module = load_module(build(batch=8))
    with module.context:
        fn = graph_functions(module.operation)[0]
        found = batch_chunks.analyze(fn)
        assert isinstance(found, batch_chunks.Analysis), found
        opts = batch_chunks.Options()
        assert batch_chunks.chunk_size(found, opts.budget, opts.max_intensity) == chunk


def test_gpu_pipelines_do_not_chunk():
    assert batch_chunks.NAME in [n for n, _ in prim_pipeline.Options(target=Target("cpu")).stages()]
    assert batch_chunks.NAME not in [n for n, _ in prim_pipeline.Options(target=Target("nvvm", "sm_90")).stages()]

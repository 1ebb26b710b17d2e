"""prim-select's layout transposes moving through channel slices and channel shuffles.

An NCHW network runs its convolutions in NHWC; the transposes around each layer cancel only where they
meet, so prim-select moves them down past the ops between layers that have an NHWC form. ShuffleNetV2's
units put a channel shuffle (reshape [N, g, C/g, H, W] -> transpose (0, 2, 1, 3, 4) -> reshape back) and
a channel split (two slices on C) between their convolutions; both now run in NHWC, so the whole
network pays one layout transpose at its input and one before its head.

1. Random NCHW graphs with shuffles (groups 2 and 4, odd channels per group), channel slices (odd
   widths, a strided one) and concats, batch 1 and 3, against float64 numpy; the IR after prim-select
   keeps only the layout transposes at the ends and one shuffle transpose per shuffle.
2. A constant pad between a convolution and a max pool (BiT's stem) runs in NHWC, against numpy.
3. Reductions of an NCHW map (means over H and W become global average pools; others reduce the NHWC
   axes), odd sizes, batch 3, keepdims 0 and 1, against float64 numpy, with no layout transpose left.
4. ShuffleNetV2 x1.0 (examples/zoo_models.py) at 64x64 through the ONNX importer: the transposes of
   its plan, and its output against PyTorch in float64.

    python -m pytest test/python/test_layout_sinking.py -q
"""
from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import openprim
import reference as ref
from helpers import TARGET, Net, assert_close, graph_ops
from openprim import dialect, passes
from openprim.pyfrontend import to_module

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="compiles and inspects CPU plans")

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def shuffle_ref(x, groups):
    n, c, h, w = x.shape
    return x.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)


def transposes(module) -> list[list[int]]:
    """The perm of every prim.transpose of the graph function, in order."""
    return [list(dialect.op_attrs(op)["perm"]) for op in graph_ops(module) if op.name == "prim.transpose"]


@pytest.mark.parametrize("groups,batch,dtype", [(2, 1, "f32"), (2, 3, "f32"), (4, 1, "f32"), (4, 3, "f32"),
                                                (4, 3, "bf16")])
def test_shuffle_unit(groups, batch, dtype, rng):
    """conv -> shuffle -> split (odd widths) -> conv on one part -> concat -> shuffle -> strided channel
    slice -> conv; the second shuffle is also an output, so it goes back to NCHW there."""
    per_group = 7 if groups == 2 else 5
    c = groups * per_group
    split = 5 if groups == 2 else 7
    net = Net(rng, dtype)
    g = net.g
    x, xv = net.input((batch, 5, 7, 9))
    w1, w1v = net.weight((c, 5, 1, 1), scale=0.5)
    w2, w2v = net.weight((c - split, c - split, 3, 3), scale=0.2)
    w3, w3v = net.weight((3, (c + 1) // 2, 1, 1), scale=0.5)

    def shuffle(t):
        s = g.reshape(t, (batch, groups, c // groups, 7, 9))
        return g.reshape(g.transpose(s, (0, 2, 1, 3, 4)), (batch, c, 7, 9))

    a = shuffle(g.relu(g.conv2d(x, w1)))
    keep, part = g.slice(a, [0], [split], axes=[1]), g.slice(a, [split], [c], axes=[1])
    b = shuffle(g.concat([keep, g.relu(g.conv2d(part, w2, padding=1))], axis=1))
    y = g.conv2d(g.slice(b, [1], [c], axes=[1], steps=[2]), w3)
    out_y, out_b = net.run(None, y, b)

    av = shuffle_ref(ref.relu(ref.conv2d(xv, w1v)), groups)
    bv = shuffle_ref(np.concatenate([av[:, :split], ref.relu(ref.conv2d(av[:, split:], w2v, padding=1))], 1), groups)
    assert_close(out_b, bv, dtype, reduction=9 * c, what="shuffled map")
    assert_close(out_y, ref.conv2d(bv[:, 1::2], w3v), dtype, reduction=9 * c, what="output")

    selected = passes.run(to_module(g), "prim-fuse,prim-select")
    perms = transposes(selected)
    # The input's layout transpose, one per output, and each shuffle as one transpose of its last two axes.
    assert sorted(map(tuple, perms)) == sorted([tuple(TO_NHWC), tuple(TO_NCHW), tuple(TO_NCHW),
                                                (0, 1, 2, 4, 3), (0, 1, 2, 4, 3)]), perms
    assert not any(op.name == "prim.slice" and op.result.type.shape[1] == c for op in graph_ops(selected))


def test_permutation_of_three_factors_and_no_shuffle(rng):
    """A reshape into three channel factors permuted (0, 3, 1, 2, 4, 5) runs in NHWC too; a reshape ->
    transpose -> reshape that moves a spatial axis is left in NCHW (and still computes the same)."""
    net = Net(rng, "f32")
    g = net.g
    x, xv = net.input((3, 4, 5, 6))
    w, wv = net.weight((12, 4, 1, 1))
    w2, w2v = net.weight((2, 12, 1, 1))
    a = g.conv2d(x, w)
    s = g.transpose(g.reshape(a, (3, 2, 3, 2, 5, 6)), (0, 3, 1, 2, 4, 5))
    y = g.conv2d(g.reshape(s, (3, 12, 5, 6)), w2)
    spatial = g.reshape(g.transpose(g.reshape(a, (3, 2, 6, 5, 6)), (0, 1, 2, 4, 3)), (3, 12, 6, 5))
    out_y, out_s = net.run(None, y, spatial)
    av = ref.conv2d(xv, wv)
    sv = av.reshape(3, 2, 3, 2, 5, 6).transpose(0, 3, 1, 2, 4, 5).reshape(3, 12, 5, 6)
    assert_close(out_y, ref.conv2d(sv, w2v), "f32", reduction=12)
    assert_close(out_s, av.reshape(3, 2, 6, 5, 6).transpose(0, 1, 2, 4, 3).reshape(3, 12, 6, 5), "f32", reduction=4)
    perms = transposes(passes.run(to_module(g), "prim-fuse,prim-select"))
    assert [0, 1, 2, 5, 3, 4] in perms and [0, 1, 2, 4, 3] in perms, perms


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_reductions_read_the_nhwc_map(dtype, rng):
    """conv (NCHW, run NHWC) -> mean over H, W (keepdims 0 and 1), sum over H, W keeping dims, max over H
    (its kept N, C, W transposed back), min over C: each against numpy; the means are global average
    pools and the only transposes left are the input's and the max's small result's."""
    net = Net(rng, dtype)
    g = net.g
    x, xv = net.input((3, 5, 7, 9))
    w, wv = net.weight((11, 5, 3, 3), scale=0.3)
    y = g.relu(g.conv2d(x, w, padding=1))
    outs = net.run(None, g.reduce(y, "mean", [2, 3]), g.reduce(y, "mean", [-1, -2], keepdims=True),
                   g.reduce(y, "sum", [2, 3], keepdims=True), g.reduce(y, "max", [2]), g.reduce(y, "min", [1]))
    yv = ref.relu(ref.conv2d(xv, wv, padding=1))
    wants = [yv.mean((2, 3)), yv.mean((2, 3), keepdims=True), yv.sum((2, 3), keepdims=True), yv.max(2), yv.min(1)]
    for out, want, red, what in zip(outs, wants, (63, 63, 63, 1, 1), ("mean", "mean keepdims", "sum", "max", "min")):
        assert_close(out, want, dtype, reduction=red * 45, what=what)
    selected = passes.run(to_module(g), "prim-fuse,prim-select")
    perms = transposes(selected)
    assert sorted(map(tuple, perms)) == [(0, 2, 1), (0, 2, 3, 1)], perms
    assert [op.name for op in graph_ops(selected)].count("prim.global_avg_pool") == 2


@pytest.mark.parametrize("dtype,value", [("f32", 0.0), ("f32", -0.75), ("bf16", 0.5)])
def test_pad_between_layers_runs_in_nhwc(dtype, value, rng):
    """conv (NCHW, run NHWC) -> a constant pad of H and W (uneven sides, BiT's stem pads by 1) -> max pool ->
    conv: against numpy, and after prim-select the only transposes are the input's and the output's."""
    net = Net(rng, dtype)
    g = net.g
    x, xv = net.input((3, 5, 7, 9))
    w, wv = net.weight((6, 5, 3, 3), scale=0.3)
    w2, w2v = net.weight((4, 6, 1, 1), scale=0.5)
    p = g.pad(g.conv2d(x, w, stride=2), [0, 0, 1, 2, 0, 0, 2, 1], value)
    y = g.conv2d(g.max_pool2d(p, 3, stride=2), w2)
    (out,) = net.run(None, y)
    pv = np.pad(ref.conv2d(xv, wv, stride=2), [(0, 0), (0, 0), (1, 2), (2, 1)], constant_values=value)
    assert_close(out, ref.conv2d(ref.max_pool2d(pv, 3, stride=2), w2v), dtype, reduction=45 * 6, what="output")
    perms = transposes(passes.run(to_module(g), "prim-fuse,prim-select"))
    assert sorted(map(tuple, perms)) == [(0, 2, 3, 1), (0, 3, 1, 2)], perms


def test_shufflenet_plan_keeps_layout_transposes_at_the_ends():
    """ShuffleNetV2 x1.0 at 64x64 (batch 2) through the ONNX importer: after prim-select its only layout
    transpose is the input's (the head's mean over H and W reads the NHWC map: a global average pool);
    its 16 shuffles are one transpose each; in the compiled plan those become channel gathers
    (passes/channel_shuffle.py), so it launches the input's transpose only, and matches PyTorch in float64."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import zoo_models
    from openprim.pyfrontend.onnx import import_model

    model = zoo_models.get("shufflenet_v2_x1_0")
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), f, dynamo=False, opset_version=11, input_names=["x"], output_names=["y"])
    graph = import_model(f.getvalue())

    selected = passes.run(to_module(graph), "prim-fuse,prim-select")
    perms = transposes(selected)
    assert perms.count(TO_NHWC) == 1 and perms.count(TO_NCHW) == 0, perms
    assert perms.count([0, 1, 2, 4, 3]) == 16 and len(perms) == 17, perms
    assert "prim.reduce" not in str(selected) and str(selected).count("prim.global_avg_pool") == 1

    module = openprim.compiler.lower(graph)
    exe = openprim.compiler.jit(module)
    kinds = [s["kernel"].rsplit("_", 1)[0] for s in exe.plan["steps"]]
    assert kinds.count("transpose") == 1 and "slice" not in kinds, kinds
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    assert_close(exe(x.numpy()), want, "f32", reduction=1024)

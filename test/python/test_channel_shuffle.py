"""Channel shuffles as channel gathers on the CPU (passes/channel_shuffle.py, kernels/cpu/channel_gather.py).

Against float64 numpy on every dtype: concat -> reshape -> transpose -> reshape [-> channel slices] in NHWC
with 2 and 3 groups, odd channel counts (interleaved vectors plus element tails), uneven slices, and a
shuffle that is also used whole; a ShuffleNet v2 unit written in NCHW (prim-select moves it to NHWC);
the plan has no transpose, slice or concat kernel left. Then the map pieces, and ShuffleNet v2's ONNX
import: every unit's concat/transpose/slices become two gathers, and it still matches torch eager.
"""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, kernel_info
from openprim.kernels.cpu.channel_gather import pieces

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="a CPU kernel")


def _shuffle_ref(x, groups):
    n, h, w, c = x.shape
    return x.reshape(n, h, w, groups, c // groups).transpose(0, 1, 2, 4, 3).reshape(n, h, w, c)


CASES = [  # widths of the concat inputs, groups, channel slices (start, end) of the shuffled result, whole too
    ((29, 29), 2, [(0, 29), (29, 58)], False),
    ((16, 16), 2, [(0, 16), (16, 32)], True),
    ((12, 9, 6), 3, [(0, 10), (10, 27)], False),
    ((5, 3), 2, [], True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}_g{c[1]}_{len(c[2])}slices"
                         f"{'_whole' if c[3] else ''}")
def test_channel_shuffle_numerics(rng, dtype, case):
    widths, groups, slices, whole = case
    net = Net(rng, dtype, layout="NHWC")
    g = net.g
    n, h, w = 2, 5, 3
    ins = [net.input((n, h, w, c)) for c in widths]
    c = sum(widths)
    cat = g.concat([t for t, _ in ins], axis=3)
    shuffled = g.reshape(g.transpose(g.reshape(cat, (n, h, w, groups, c // groups)), (0, 1, 2, 4, 3)), (n, h, w, c))
    want = _shuffle_ref(np.concatenate([v for _, v in ins], axis=3), groups)
    outs = [g.slice(shuffled, [0, 0, 0, s0], [n, h, w, s1]) for s0, s1 in slices]
    wants = [want[..., s0:s1] for s0, s1 in slices]
    if whole:
        outs.append(g.relu(shuffled))
        wants.append(ref.relu(want))
    got = net.run(None, *outs)
    kinds = [op for op, _ in kernel_info(net.module).values()]
    assert not {"transpose", "slice"} & set(kinds), kinds
    for o, wnt in zip(got, wants):
        assert_close(o, wnt, dtype)


def test_shufflenet_unit_nchw(rng):
    """A stride-1 ShuffleNet v2 unit in NCHW (split; 1x1 -> depthwise 3x3 -> 1x1 on one half; concat;
    shuffle) and a 1x1 convolution after it: prim-select lays the shuffle out NHWC, it becomes a gather,
    and the result matches float64 numpy."""
    net = Net(rng, "f32")
    g = net.g
    x, xv = net.input((2, 16, 7, 7))
    (w1, w1v), (wd, wdv), (w2, w2v), (w3, w3v) = (net.weight(s, scale=0.3) for s in
                                                   ((8, 8, 1, 1), (8, 1, 3, 3), (8, 8, 1, 1), (4, 16, 1, 1)))
    x1, x2 = g.slice(x, [0, 0, 0, 0], [2, 8, 7, 7]), g.slice(x, [0, 8, 0, 0], [2, 16, 7, 7])
    y = g.relu(g.conv2d(g.conv2d(g.relu(g.conv2d(x2, w1)), wd, padding=1, groups=8), w2))
    cat = g.concat([x1, y], axis=1)
    shuffled = g.reshape(g.transpose(g.reshape(cat, (2, 2, 8, 7, 7)), (0, 2, 1, 3, 4)), (2, 16, 7, 7))
    got = net.run(None, g.relu(g.conv2d(shuffled, w3)))[0]
    yv = ref.relu(ref.conv2d(ref.conv2d(ref.relu(ref.conv2d(xv[:, 8:], w1v)), wdv, padding=1, groups=8), w2v))
    catv = np.concatenate([xv[:, :8], yv], axis=1)
    want = ref.relu(ref.conv2d(catv.reshape(2, 2, 8, 7, 7).transpose(0, 2, 1, 3, 4).reshape(2, 16, 7, 7), w3v))
    assert_close(got, want, "f32", reduction=16 * 9)
    assert "concat" in [op for op, _ in kernel_info(net.module).values()]    # the gather (named after its first op)


def test_gather_pieces():
    """Interleaves of 16 outputs, runs of 8, elements for the rest."""
    interleave = [(i % 2, 3 + i // 2) for i in range(16)]
    run = [(1, c) for c in range(20, 28)]
    odd = [(0, 7), (1, 0)]
    got = pieces(interleave + run + odd)
    assert got == [("interleave", 0, 0, 3, 1, 3), ("run", 16, 1, 20), ("element", 24, 0, 7), ("element", 25, 1, 0)]


def test_shufflenet_onnx_gathers():
    """ShuffleNet v2 x1.0 (examples/zoo_models.py) through the ONNX importer: no transpose or slice kernel
    is left after the stem, and the network matches torch eager."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import zoo_models
    import openprim
    from openprim.pyfrontend.onnx import import_model

    model = zoo_models.get("shufflenet_v2_x1_0")
    exe = openprim.compile(import_model(zoo_models.to_onnx("shufflenet_v2_x1_0", module=model)))
    kinds = [s["kernel"].rsplit("_", 1)[0] for s in exe.plan["steps"]]
    assert kinds.count("transpose") == 1 and "slice" not in kinds, kinds   # the input's NCHW -> NHWC only
    x = zoo_models.example_input("shufflenet_v2_x1_0")
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    assert_close(exe(x.numpy()), want, "f32", reduction=1024)

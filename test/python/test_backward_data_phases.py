"""Strided backward-data convolutions as one stride-1 forward convolution per phase (passes/backward_data_phases.py):
the phases' taps and paddings, and the input gradient against float64 numpy for strides 2 and 3, odd sizes,
asymmetric and large padding (negative phase paddings: dy sliced), filters wider than the stride and
narrower (phases without taps: zeros), groups and depthwise, f16; where prim-select rewrote the layer
(concatenations in the plan) and where it kept conv_bwd_data_gemm, the result must be the same."""
from __future__ import annotations

import numpy as np
import pytest

import openprim
import reference as ref
from openprim.passes.backward_data_phases import phases
from openprim.pyfrontend import Graph
from openprim.solvers.problem import ConvProblem

from helpers import TARGET, assert_close, rounded, run_on_gpu


def test_phase_plan():
    """ResNet's 3x3 stride-2 pad-1 layer at 56 -> 28: phase (0, 0) takes tap 1 of each dim, (1, 1) taps 0
    and 2 (reversed: dy row i + 1 - t), all on the 28 x 28 grid without slicing; a 1x1 stride-2 layer has
    taps in phase (0, 0) only."""
    p = ConvProblem(8, 64, 56, 56, 128, 3, 3, 28, 28, (2, 2), (1, 1, 1, 1), (1, 1), 1, "NHWC", "KRSC", "f32", "none",
                    "bwd_data")
    plan = phases(p)
    assert [ph["taps"] for ph in plan] == [([1], [1]), ([1], [0, 2]), ([0, 2], [1]), ([0, 2], [0, 2])]
    assert [ph["pads"] for ph in plan] == [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 0, 1, 1)]
    assert all((ph["problem"].oh, ph["problem"].ow) == (28, 28) for ph in plan)
    q = ConvProblem(8, 64, 56, 56, 128, 1, 1, 28, 28, (2, 2), (0, 0, 0, 0), (1, 1), 1, "NHWC", "KRSC", "f32", "none",
                    "bwd_data")
    assert [ph["taps"] is not None for ph in phases(q)] == [True, False, False, False]


CASES = [  # N, C, H, W, K, (R, S), stride, padding (t, l, b, r), groups
    (8, 64, 56, 56, 128, (3, 3), (2, 2), (1, 1, 1, 1), 1),      # ResNet's: rewritten on the CPU
    (8, 128, 28, 28, 256, (3, 3), (2, 2), (1, 1, 1, 1), 1),
    (2, 5, 13, 11, 7, (3, 3), (2, 2), (1, 1, 1, 1), 1),
    (1, 3, 9, 10, 4, (5, 5), (3, 3), (2, 2, 2, 2), 1),
    (2, 8, 15, 15, 8, (4, 4), (2, 2), (1, 1, 1, 1), 1),
    (2, 6, 7, 7, 6, (3, 3), (2, 2), (0, 0, 0, 0), 1),
    (2, 6, 12, 9, 9, (3, 2), (2, 3), (2, 0, 1, 1), 3),          # groups, asymmetric stride and padding
    (2, 16, 14, 14, 16, (3, 3), (2, 2), (1, 1, 1, 1), 16),      # depthwise
    (3, 16, 20, 20, 32, (1, 1), (2, 2), (0, 0, 0, 0), 1),       # phases without taps
    (2, 12, 17, 17, 24, (3, 3), (2, 2), (3, 3, 3, 3), 1),       # padding past the filter: dy sliced
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-s{c[6][0]}{c[6][1]}-g{c[8]}")
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_backward_data_strided(case, dtype):
    N, C, H, W, K, (R, S), stride, pad, groups = case
    rng = np.random.default_rng(N * H + K)
    OH = (H + pad[0] + pad[2] - R) // stride[0] + 1
    OW = (W + pad[1] + pad[3] - S) // stride[1] + 1
    dy = rounded(rng.standard_normal((N, OH, OW, K)), dtype)
    w = rounded(rng.standard_normal((K, R, S, C // groups)) * 0.2, dtype)
    g = Graph(dtype=dtype)
    g.output(g.conv2d_backward_data(g.input("dy", dy.shape), g.input("w", w.shape), (H, W), stride=stride,
                                    padding=pad, groups=groups, layout="NHWC", filter_layout="KRSC"))
    want = ref.conv2d_backward_data(dy, w, (H, W), stride, pad, 1, groups, layout="NHWC", filter_layout="KRSC")
    if TARGET != "cpu":
        got = run_on_gpu(g, [dy, w])[2]
    else:
        exe = openprim.compile(g)
        got = exe(dy, w)
        if case[0] == 8:   # the big layers: the CPU's predicted times choose the phases
            assert any(s["kernel"].startswith("concat") for s in exe.plan["steps"])
    assert_close(got, want, dtype, reduction=R * S * K // groups)

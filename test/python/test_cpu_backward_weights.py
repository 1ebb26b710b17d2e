"""The CPU filter-gradient kernel (kernels/cpu/backward_weights.py, solver conv_bwd_weights_gemm) against float64
numpy: register tiles whose channels leave a tail (C % MT) and whose filters end in a narrower vector (NT not
a multiple of the lanes), 8 and 16 lanes, stride 2, dilation, asymmetric padding and a padding so wide that a
tap never meets the image, several row chunks and filter blocks (the byte budgets made small), chunks that
cross images, the K tiles shared unevenly between the threads, f32 and f16 (accumulated in f32, rounded once)."""
from __future__ import annotations

import numpy as np
import pytest

import openprim
import openprim.kernels.cpu.backward_weights as kernel
import reference as ref
from helpers import TARGET, assert_close, rounded
from openprim.base.target import Target, parse_target
from openprim.pyfrontend import Graph
from openprim.solvers import SOLVERS

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="the CPU's filter-gradient kernel")

CASES = [  # N, C, H, W, K, (R, S), stride, padding (t, l, b, r), dilation, (MT, NT)
    (2, 10, 9, 7, 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (4, 24)),      # C tail 2, NT = 3 vectors of 8
    (3, 9, 11, 10, 20, (3, 3), (2, 2), (1, 0, 2, 1), (1, 1), (6, 20)),     # C tail 3, NT = 16 + 4 / 20
    (1, 16, 12, 13, 12, (3, 2), (1, 2), (2, 1, 2, 0), (2, 1), (8, 12)),     # dilation, strides (1, 2)
    (2, 8, 2, 6, 16, (3, 3), (1, 1), (3, 1, 3, 1), (3, 1), (6, 8)),        # taps r = 0, 2 never meet the image
    (2, 12, 8, 8, 40, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), (6, 8)),       # 1x1 stride 2: 5 K tiles, 2 threads
    (4, 8, 7, 7, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (8, 16)),       # chunks across images
]


def _case(case, dtype):
    N, C, H, W, K, (R, S), stride, pad, dil, _ = case
    rng = np.random.default_rng(N * H + K + R + C)
    OH = (H + pad[0] + pad[2] - dil[0] * (R - 1) - 1) // stride[0] + 1
    OW = (W + pad[1] + pad[3] - dil[1] * (S - 1) - 1) // stride[1] + 1
    x, dy = rounded(rng.standard_normal((N, H, W, C)), dtype), rounded(rng.standard_normal((N, OH, OW, K)), dtype)
    g = Graph(dtype=dtype, layout="NHWC")
    g.output(g.conv2d_backward_weights(g.input("x", x.shape), g.input("dy", dy.shape), (R, S), stride=stride,
                                       padding=pad, dilation=dil, filter_layout="RSCK"))
    want = ref.conv2d_backward_weights(x, dy, (R, S), stride, pad, dil, 1, layout="NHWC", filter_layout="RSCK")
    return g, (x, dy), want, N * OH * OW


@pytest.mark.parametrize("budgets", ["one chunk", "small chunks and blocks"])
@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-{c[5][0]}x{c[5][1]}-s{c[6][0]}")
def test_backward_weights_kernel(case, dtype, lanes, budgets, monkeypatch):
    monkeypatch.setattr(Target, "vector_lanes", property(lambda self: lanes))
    mt, nt = case[-1]
    monkeypatch.setattr(SOLVERS["conv_bwd_weights_gemm"], "default_params", lambda p, target: {"mt": mt, "nt": nt})
    if budgets != "one chunk":     # a chunk of a row or two, a block of one K tile
        monkeypatch.setattr(kernel, "CHUNK_BYTES", 1)
        monkeypatch.setattr(kernel, "DW_BLOCK_BYTES", 1)
    g, feeds, want, reduction = _case(case, dtype)
    exe = openprim.compile(g)
    assert [s["solver"] for s in exe.plan["steps"] if s.get("solver")] == ["conv_bwd_weights_gemm"]
    assert_close(exe(*feeds), want, dtype, reduction=reduction)


def test_default_tiles():
    """6 x 16 on AVX2 and 8 x 32 on AVX-512; the filters of a tile always divide K, the channels do not
    have to (a tail tile takes the rest)."""
    from openprim.solvers.problem import parse_descriptor
    solver = SOLVERS["conv_bwd_weights_gemm"]
    p = parse_descriptor("conv2d_bwd_weights-8x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none")
    assert solver.default_params(p, parse_target("cpu:x86-64-v3")) == {"mt": 6, "nt": 16}
    assert solver.default_params(p, parse_target("cpu:x86-64-v4")) == {"mt": 8, "nt": 32}
    odd = parse_descriptor("conv2d_bwd_weights-2x3x9x9-k20-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none")
    assert solver.default_params(odd, parse_target("cpu:x86-64-v3")) == {"mt": 3, "nt": 10}

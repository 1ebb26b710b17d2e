"""Split-K on sm_90 (kernels/nvidia/wgmma.py emit_split_k): grids far smaller than the GPU split their k
tiles into runs on grid z, partial sums in an f32 scratch, added with the epilogue by a second launch.

1. The heuristic (solvers/nvidia.py WgmmaSolver.splits): ResNet-18's batch-1 layers with 4 blocks take
   18 (7x7, 72 k tiles) and 9 runs (14x14, 36), a batch-32 layer none; the plan has the GEMM launch on
   grid z = runs, then the reduction launch, and the scratch for runs x M x N floats. Compile-only (no GPU).
2. Numerics against float64 numpy on a GPU target (recorded and replayed through helpers.py, or on
   a GPU machine with MLIR): 3x3 convolutions (odd images, stride 2, bias + residual + relu), a 1x1 one
   read as a flat matrix, and a linear layer, with forced runs of 2 to 18, f16 and bf16.

    python -m pytest test/python/test_gpu_split_k.py -q
    OPENPRIM_TEST_TARGET=nvvm:sm_90 OPENPRIM_GPU_RECORD=out/gpu_cases_splitk python -m pytest test/python/test_gpu_split_k.py -q
"""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from helpers import TARGET, Net, assert_close
from openprim import compiler
from openprim.base.target import parse_target
from openprim.plan import build_plan
from openprim.pyfrontend import Graph
from openprim.solvers import SOLVERS
from openprim.solvers.problem import ConvProblem, GemmProblem

H200 = parse_target("nvvm:sm_90")


def conv_problem(n, c, hw, k, r, stride=1):
    oh = (hw + 2 * (r // 2) - r) // stride + 1
    return ConvProblem(n, c, hw, hw, k, r, r, oh, oh, (stride, stride), (r // 2,) * 4, (1, 1), 1, "NHWC", "RSCK",
                       "f16", "bias+relu")


@pytest.mark.parametrize("problem,splits", [
    (conv_problem(1, 512, 7, 512, 3), 18),     # ResNet-18 layer4: 4 blocks, 72 k tiles
    (conv_problem(1, 256, 14, 256, 3), 9),     # layer3: 4 blocks, 36 k tiles
    (conv_problem(32, 512, 7, 512, 3), 1),     # batch 32: 52 blocks of 128 x 128 already
    (conv_problem(1, 64, 56, 64, 3), 1),       # layer1: 25 blocks, 9 k tiles
])
def test_heuristic_runs(problem, splits):
    params = SOLVERS["conv_implicit_gemm_wgmma"].default_params(problem, H200)
    assert params.get("splits", 1) == splits, params


@pytest.mark.parametrize("m,k,n,tile", [
    (1024, 768, 768, 6),      # BERT-base at 8 x 128: 48 blocks of 128 x 128 on 132 SMs -> 64 x 64
    (1024, 3072, 768, 6),     # its FFN down projection, long k: still under a wave
    (1024, 768, 3072, 5),     # 192 blocks, the last wave 45% full -> 128 x 64 on two warpgroups
    (4096, 768, 768, 5),
    (4096, 768, 2304, 7),     # 576 blocks: 87% -> 128 x 128
    (4096, 3072, 768, 0),     # a long reduction keeps 128 x 128 with 4 stages
    (16, 768, 768, 7),        # few blocks: split over k instead
])
def test_matmul_tile_for_partial_waves(m, k, n, tile):
    """WgmmaSolver.partial_wave_tile: the tiles that ran fastest on the H100 at these shapes (bench/RESULTS.md,
    2026-12-07); convolutions keep the ResNet-measured choice."""
    params = SOLVERS["gemm_wgmma"].default_params(GemmProblem(1, m, n, k, False, False, "f16", "bias"), H200)
    assert params["tile"] == tile, params
    assert SOLVERS["conv_implicit_gemm_wgmma"].default_params(conv_problem(8, 256, 16, 768, 1), H200)["tile"] == 7


def test_split_k_plan():
    """The 7x7 layer at batch 1: the GEMM launch on grid z = 18, then the reduction launch (a thread per 8
    output channels: 49 x 512 / 8 threads), and 18 x 49 x 512 floats of scratch."""
    rng = np.random.default_rng(0)
    g = Graph(layout="NHWC", dtype="f16")
    x = g.input("x", (1, 7, 7, 512))
    g.output(g.relu(g.conv2d(x, g.param("w", rng.standard_normal((512, 3, 3, 512)) * 0.02), padding=1)))
    plan, _ = build_plan(compiler.lower(g, "nvvm:sm_90"), parse_target("nvvm:sm_90"))
    kernel, = plan["kernels"].values()
    gemm, reduce = kernel["launches"]
    assert gemm["grid"] == [4, 1, 18], gemm["grid"]
    assert reduce["grid"] == [-(-49 * 512 // 8 // 256), 1, 1] and reduce["block"] == [256, 1, 1], reduce
    assert kernel["scratch_bytes"] >= 18 * 49 * 512 * 4


# (id, NHWC input, output channels, kernel, stride, runs, epilogue)
CASES = [
    ("7x7_c512_k256_res_relu_18", (1, 7, 7, 512), 256, 3, 1, 18, "bias+res+relu"),
    ("9x11_c128_k64_s2_relu_6", (2, 9, 11, 128), 64, 3, 2, 6, "bias+relu"),
    ("5x5_c192_k72_odd_3", (1, 5, 5, 192), 72, 3, 1, 3, "none"),
    ("1x1_flat_c1024_k128_4", (1, 7, 7, 1024), 128, 1, 1, 4, "bias+relu"),
]


@pytest.mark.skipif(TARGET == "cpu", reason="the sm_90 kernel (numerics on the GPU: record/replay)")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_split_k_conv(case, dtype, rng, monkeypatch):
    what, shape, k, r, stride, runs, epi = case
    solver = SOLVERS["conv_implicit_gemm_wgmma"]
    monkeypatch.setattr(solver, "default_params", lambda p, target: {"tile": 0, "splits": runs})
    net = Net(rng, dtype, layout="NHWC")
    x, xv = net.input(shape)
    w, wv = net.weight((k, r, r, shape[3]), scale=1 / np.sqrt(r * r * shape[3]))
    b, bv = net.weight((k,)) if epi != "none" else (None, None)
    y = net.g.conv2d(x, w, b, stride=stride, padding=r // 2)
    want = ref.conv2d(xv, wv, bv, stride=stride, padding=r // 2, layout="NHWC")
    if "res" in epi:
        res, resv = net.input(want.shape)
        y, want = net.g.add(y, res), want + resv
    if "relu" in epi:
        y, want = net.g.relu(y), ref.relu(want)
    out, = net.run(None, y, solver="conv_implicit_gemm_wgmma")
    assert_close(out, want, dtype, reduction=r * r * shape[3], what=what)


@pytest.mark.skipif(TARGET == "cpu", reason="the sm_90 kernel (numerics on the GPU: record/replay)")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_split_k_linear(dtype, rng, monkeypatch):
    """[49, 2048] x [2048, 256] + bias in 8 runs of 4 k tiles."""
    monkeypatch.setattr(SOLVERS["gemm_wgmma"], "default_params", lambda p, target: {"tile": 0, "splits": 8})
    net = Net(rng, dtype)
    a, av = net.input((49, 2048))
    w, wv = net.weight((2048, 256), scale=2048 ** -0.5)
    b, bv = net.weight((256,))
    out, = net.run(None, net.g.matmul(a, w, b), solver="gemm_wgmma")
    assert_close(out, ref.matmul(av, wv, bv), dtype, reduction=2048, what="linear")

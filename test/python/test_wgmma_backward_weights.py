"""The sm_90 filter-gradient kernel (kernels/nvidia/wgmma_backward_weights.py, solver conv_bwd_weights_wgmma):
an implicit GEMM over the batch and the map, dy and x read in place by TMA, transposed wgmma operands.

1. Selection and plan, compile-only (any machine): ResNet-50's filter gradients take the solver (no per-tap
   GEMMs, no transposed copy of dy), the RGB stem too (padded to 8 channels, patches first), f32 and grouped
   problems do not; the k tile's pixel box; the plan's launches (grid = column blocks x row blocks x runs,
   then the runs' sum) and the split heuristic.
2. Numerics against float64 numpy on an sm_90 GPU (recorded and replayed through helpers.py, or on a GPU
   machine with MLIR): odd maps, stride 2, asymmetric padding, dilation, a 5x5 filter, K and C that are not
   multiples of 64 (40, 72, 96, 136), every tile config and forced runs, the patches form (3, 5 and 16
   channels), f16 and bf16.

    python -m pytest test/python/test_wgmma_backward_weights.py -q
    bash scripts/gpu_check.sh local /tmp/gc nvvm:sm_90 test/python/test_wgmma_backward_weights.py
"""
from __future__ import annotations

import numpy as np
import pytest

import openprim
import reference as ref
from helpers import TARGET, assert_close, kernel_info, rounded, run_on_gpu
from openprim import compiler
from openprim.base.target import parse_target
from openprim.kernels.nvidia import wgmma_backward_weights as kernel
from openprim.plan import build_plan
from openprim.pyfrontend import Graph
from openprim.solvers import SOLVERS
from openprim.solvers.problem import ConvProblem

SM90 = parse_target("nvvm:sm_90")
SOLVER = SOLVERS["conv_bwd_weights_wgmma"]


def _graph(n, c, h, w, k, rs, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), dtype="f16", filter_layout="KCRS"):
    oh = (h + pad[0] + pad[2] - dil[0] * (rs[0] - 1) - 1) // stride[0] + 1
    ow = (w + pad[1] + pad[3] - dil[1] * (rs[1] - 1) - 1) // stride[1] + 1
    g = Graph(dtype=dtype, layout="NHWC")
    g.output(g.conv2d_backward_weights(g.input("x", (n, h, w, c)), g.input("dy", (n, oh, ow, k)), rs, stride=stride,
                                       padding=pad, dilation=dil, layout="NHWC", filter_layout=filter_layout))
    return g, (n, h, w, c), (n, oh, ow, k)


def _solvers(g) -> set[str]:
    return {solver for _, solver in kernel_info(compiler.lower(g, "nvvm:sm_90")).values() if solver}


@pytest.mark.parametrize("c, size, k, r, stride", [(64, 56, 64, 3, 1), (64, 56, 256, 1, 1), (128, 56, 128, 3, 2),
                                                  (512, 7, 512, 3, 1), (1024, 14, 256, 1, 1), (256, 56, 512, 1, 2)])
def test_resnet_layers_take_the_kernel(c, size, k, r, stride):
    g, _, _ = _graph(8, c, size, size, k, (r, r), (stride, stride), (r // 2,) * 4)
    assert _solvers(g) == {"conv_bwd_weights_wgmma"}


def test_f32_keeps_the_gemms():
    g, _, _ = _graph(2, 64, 16, 16, 64, (3, 3), pad=(1, 1, 1, 1), dtype="f32")
    assert _solvers(g) & {"gemm_mma", "gemm_gpu"} and "conv_bwd_weights_wgmma" not in _solvers(g)


def test_rgb_stem_padded_to_8_channels():
    """3 channels: x padded with zero channels to 8 (TMA strides), the kernel in its patches form (fewer than
    IM2COL_CHANNELS: 49 taps x 8 channels side by side, a 1x1 gradient of them), the gradient cut back."""
    g, _, _ = _graph(2, 3, 32, 32, 64, (7, 7), (2, 2), (3, 3, 3, 3))
    info = kernel_info(compiler.lower(g, "nvvm:sm_90"))
    assert [op for op, _ in info.values()][:2] == ["pad", "conv2d_backward_weights"], info
    assert {solver for _, solver in info.values() if solver} == {"conv_bwd_weights_wgmma"}
    p = ConvProblem(2, 8, 32, 32, 64, 7, 7, 16, 16, (2, 2), (3,) * 4, (1, 1), 1, "NHWC", "KRSC", "f16", "none",
                    "bwd_weights")
    patches = kernel.kernel_problem(p)
    assert (patches.c, patches.h, patches.r, patches.strides) == (392, 16, 1, (1, 1))
    assert kernel.columns(p) == 448 and kernel.kernel_problem(patches) is patches


@pytest.mark.parametrize("n, oh, ow, box", [(32, 7, 7, (2, 7, 8)), (32, 14, 14, (1, 7, 16)), (32, 28, 28, (1, 4, 28)),
                                            (32, 56, 56, (1, 8, 8)), (1, 7, 7, (1, 8, 8))])
def test_reduction_box(n, oh, ow, box):
    """The k tile's pixel box: the fewest pixels computed in vain (7 x 7: 98 of 112; 28 x 28: none), 64 or more."""
    assert kernel.reduction_box(n, oh, ow) == box


def test_not_applicable():
    p = ConvProblem(2, 64, 8, 8, 64, 3, 3, 8, 8, (1, 1), (1,) * 4, (1, 1), 2, "NHWC", "KRSC", "f16", "none",
                    "bwd_weights")
    assert "grouped" in SOLVER.is_applicable(p, SM90)
    assert "sm_90" in SOLVER.is_applicable(p, parse_target("nvvm:sm_80"))


@pytest.mark.parametrize("n, c, size, k, r, splits_above", [
    (32, 64, 56, 64, 3, 8),       # 9 column blocks of 64: a wave needs runs
    (32, 512, 7, 512, 3, 0),      # 4608 columns x 512 rows: 96 blocks of 128 x 192, most of a wave
    (1, 512, 7, 512, 3, 0),       # one k tile: no split
])
def test_split_heuristic(n, c, size, k, r, splits_above):
    p = ConvProblem(n, c, size, size, k, r, r, size, size, (1, 1), (r // 2,) * 4, (1, 1), 1, "NHWC", "KRSC", "f16",
                    "none", "bwd_weights")
    params = SOLVER.default_params(p, SM90)
    tiles = kernel.geometry(p)[2]
    assert tiles % params["splits"] == 0 and params["splits"] > splits_above, params
    bm, bn, _ = kernel.CONFIGS[params["tile"]]
    blocks = -(-k // bm) * -(-kernel.columns(p) // bn) * params["splits"]
    assert blocks <= 4 * SM90.chip.units, (params, blocks)


def test_plan_launches(monkeypatch):
    """Forced 128 x 128 tiles in 4 runs: the GEMM launch on grid (576 / 128 -> 5, 256 / 128, 4) of two
    warpgroups, then the runs' sum (a thread per 8 of 256 x 576 gradients), 4 x 256 x 576 floats of scratch,
    and the transpose back to KCRS."""
    monkeypatch.setattr(SOLVER, "default_params", lambda p, target: {"tile": 0, "splits": 4})
    g, _, _ = _graph(4, 64, 16, 16, 256, (3, 3), pad=(1, 1, 1, 1))
    plan, _ = build_plan(compiler.lower(g, "nvvm:sm_90"), SM90)
    gradient = next(k for name, k in plan["kernels"].items() if name.startswith("conv2d_backward_weights"))
    gemm, total = gradient["launches"]
    assert gemm["grid"] == [5, 2, 4] and gemm["block"] == [256, 1, 1], gemm
    assert total["grid"] == [-(-256 * 576 // 8 // 256), 1, 1], total
    assert gradient["scratch_bytes"] >= 4 * 256 * 576 * 4
    assert any(name.startswith("transpose") for name in plan["kernels"])


# (id, N, C, H, W, K, (R, S), stride, padding (t, l, b, r), dilation, tile, runs, filter layout)
CASES = [
    ("odd_map_k40", 2, 64, 9, 11, 40, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, 1, "KCRS"),
    ("c96_s2_asym", 3, 96, 10, 9, 64, (3, 3), (2, 2), (1, 0, 2, 1), (1, 1), 0, 1, "RSCK"),
    ("1x1_runs3", 3, 64, 13, 13, 128, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2, 3, "KRSC"),
    ("dilated_tile1", 2, 128, 12, 12, 64, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1, 2, "KCRS"),
    ("k192_runs4_tile4", 4, 64, 16, 16, 192, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4, 4, "KCRS"),
    ("c72_k136_tile5", 1, 72, 7, 7, 136, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 5, 1, "KCRS"),
    ("5x5_s2_tile3", 2, 64, 10, 10, 64, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 3, 1, "KCRS"),
    ("1x1_s2_tile6_runs2", 4, 256, 14, 14, 64, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 6, 2, "KCRS"),
    # fewer than 32 channels: patches first; C not a multiple of 8: padded to 8 by the pass
    ("stem_c3_7x7_s2", 2, 3, 20, 18, 64, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 6, 2, "KCRS"),
    ("c16_3x3_patches", 3, 16, 9, 10, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, 1, "KRSC"),
    ("c5_5x5_s2_patches", 2, 5, 11, 12, 24, (5, 5), (2, 2), (2, 1, 2, 1), (1, 1), 6, 1, "RSCK"),
]


@pytest.mark.skipif(TARGET == "cpu", reason="the sm_90 kernel (numerics on the GPU: record/replay)")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_filter_gradient(case, dtype, monkeypatch):
    what, n, c, h, w, k, rs, stride, pad, dil, tile, runs, fl = case
    monkeypatch.setattr(SOLVER, "default_params", lambda p, target: {"tile": tile, "splits": runs})
    g, xs, ys = _graph(n, c, h, w, k, rs, stride, pad, dil, dtype, fl)
    # the forced runs divide the k tiles of the problem the kernel gets (C padded to 8 by the pass)
    assert kernel.geometry(ConvProblem(n, -(-c // 8) * 8, h, w, k, *rs, ys[1], ys[2], stride, pad, dil, 1, "NHWC",
                                       "KRSC", dtype, "none", "bwd_weights"))[2] % runs == 0, "bad case"
    rng = np.random.default_rng(n * h + k + c)
    x, dy = rounded(rng.standard_normal(xs), dtype), rounded(rng.standard_normal(ys), dtype)
    want = ref.conv2d_backward_weights(x, dy, rs, stride, pad, dil, 1, layout="NHWC", filter_layout=fl)
    module, plan, got = run_on_gpu(g, [x, dy])
    assert any(st.get("solver") == "conv_bwd_weights_wgmma" for st in plan["steps"])
    assert_close(got, want, dtype, reduction=n * ys[1] * ys[2], what=what)


def test_kernel_text_reads_operands_transposed():
    """Four warpgroup MMAs a k tile (one per 16 pixels), both operands transposed (MN-major), on tensor maps
    of pixel boxes of dy and (strided) x."""
    p = ConvProblem(4, 64, 14, 14, 128, 3, 3, 7, 7, (2, 2), (1,) * 4, (1, 1), 1, "NHWC", "KRSC", "f16", "none",
                    "bwd_weights")
    sig = [("%x", "memref<4x14x14x64xf16>"), ("%dy", "memref<4x7x7x128xf16>"), ("%o", "memref<128x3x3x64xf16>")]
    text = kernel.backward_weights_kernel("k", sig, p, 0, 1, smem_limit=SM90.chip.shared_per_block)  # 4 x 7 x 4: 112 pixels
    assert text.count("{transposeA, transposeB}") == 7
    assert "element_strides = array<i64: 1, 2, 2, 1>" in text
    with pytest.raises(ValueError, match="shared memory"):
        kernel.backward_weights_kernel("k", sig, p, 1, 1, smem_limit=64 * 1024)
    assert openprim   # (the package import registers the dialect for compiler.lower above)

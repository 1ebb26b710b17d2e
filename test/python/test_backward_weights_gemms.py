"""Filter gradients as one GEMM per filter tap (passes/backward_weights_gemms.py), where the reference loop nest
is a target's only backward-weights solver (the GPUs), and as one GEMM of the stacked taps where the input
has fewer than 8 channels: against float64 numpy for 3x3, 1x1, 7x7 stride 2,
asymmetric padding, dilation, strides (1, 2), NCHW activations and the three filter layouts, channel and row
counts that are not multiples of 8 (padded), f32 and f16; on
the CPU, which has conv_bwd_weights_gemm, the rewrite is forced by making the reference look like the only
solver. For nvvm (compiled, not run here): every product on the matrix cores where sm_90's filter-gradient
kernel does not apply (sm_80), grouped convolutions left to the reference. Under OPENPRIM_TEST_TARGET=nvvm:sm_90 the numerics cases record and replay on the
GPU (helpers.run_on_gpu) without forcing anything."""
from __future__ import annotations

import numpy as np
import pytest

import openprim
import reference as ref
from helpers import TARGET, assert_close, kernel_info, rounded, run_on_gpu
from openprim.passes import prim_select
from openprim.passes.backward_weights_gemms import FEW_CHANNELS
from openprim.pyfrontend import Graph

CASES = [  # N, C, H, W, K, (R, S), stride, padding (t, l, b, r), dilation, layout, filter layout
    (2, 5, 9, 7, 6, (3, 3), (2, 2), (1, 0, 2, 1), (1, 1), "NHWC", "KCRS"),
    (3, 8, 6, 5, 16, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "NHWC", "RSCK"),      # x read as it is
    (2, 16, 10, 9, 8, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), "NHWC", "KRSC"),
    (1, 3, 17, 15, 8, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), "NHWC", "KCRS"),     # a stem
    (1, 4, 11, 13, 5, (3, 2), (1, 2), (2, 1, 2, 0), (2, 1), "NCHW", "KCRS"),     # dilation, NCHW
    (2, 16, 12, 12, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "NHWC", "KCRS"),   # no padding for the matrix cores
]


def _case(case, dtype):
    N, C, H, W, K, (R, S), stride, pad, dil, layout, fl = case
    rng = np.random.default_rng(N * H + K + R)
    OH = (H + pad[0] + pad[2] - dil[0] * (R - 1) - 1) // stride[0] + 1
    OW = (W + pad[1] + pad[3] - dil[1] * (S - 1) - 1) // stride[1] + 1
    xs, ys = ((N, H, W, C), (N, OH, OW, K)) if layout == "NHWC" else ((N, C, H, W), (N, K, OH, OW))
    x, dy = rounded(rng.standard_normal(xs), dtype), rounded(rng.standard_normal(ys), dtype)
    g = Graph(dtype=dtype)
    g.output(g.conv2d_backward_weights(g.input("x", xs), g.input("dy", ys), (R, S), stride=stride, padding=pad,
                                       dilation=dil, layout=layout, filter_layout=fl))
    want = ref.conv2d_backward_weights(x, dy, (R, S), stride, pad, dil, 1, layout=layout, filter_layout=fl)
    return g, [x, dy], want, N * OH * OW


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-{c[5][0]}x{c[5][1]}-{c[9]}-{c[10]}")
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_backward_weights_gemms(case, dtype, monkeypatch):
    g, feeds, want, reduction = _case(case, dtype)
    if TARGET != "cpu":
        got = run_on_gpu(g, feeds)[2]
    else:
        monkeypatch.setattr(prim_select, "_reference_only", lambda problem, target: True)
        exe = openprim.compile(g)
        assert not any(s["kernel"].startswith("conv2d_backward_weights") for s in exe.plan["steps"])
        gemms = 1 if case[1] < FEW_CHANNELS else case[5][0] * case[5][1]     # few channels: the taps stacked
        assert sum(s["kernel"].startswith("matmul") for s in exe.plan["steps"]) == gemms
        got = exe(*feeds)
    assert_close(got, want, dtype, reduction=reduction)


@pytest.mark.skipif(TARGET != "cpu", reason="compiles for the CPU")
def test_cpu_keeps_its_solver():
    """The CPU has a filter-gradient solver: with 8 or more channels nothing is rewritten there."""
    g, _, _, _ = _case(CASES[2], "f32")
    exe = openprim.compile(g)
    assert [s["solver"] for s in exe.plan["steps"] if s.get("solver")] == ["conv_bwd_weights_gemm"]


@pytest.mark.skipif(TARGET != "cpu", reason="compiles for the CPU")
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_cpu_stem_keeps_its_kernel(dtype):
    """A 3-channel 7x7 stride-2 stem's filter gradient on the CPU, unforced: no GEMM rewrite, the filter-gradient
    kernel (3 channels x 16 filters a tile, x read in place), against float64."""
    g, feeds, want, reduction = _case(CASES[3], dtype)
    exe = openprim.compile(g)
    assert [s["solver"] for s in exe.plan["steps"] if s.get("solver")] == ["conv_bwd_weights_gemm"]
    assert_close(exe(*feeds), want, dtype, reduction=reduction)


def _nvvm_solvers(graph, arch: str = "sm_90") -> set[str]:
    """The solvers of the kernels compiled for `arch` (GEMMs of one shape share a kernel)."""
    return {solver for _, solver in kernel_info(openprim.compiler.lower(graph, f"nvvm:{arch}")).values() if solver}


@pytest.mark.parametrize("arch, n, c, size, r, stride, solvers", [
    ("sm_80", 2, 3, 32, 7, 2, {"gemm_mma"}),       # the stem (3 channels, padded to 8): one GEMM of the taps
    ("sm_80", 4, 64, 28, 3, 1, {"gemm_mma"}),
    ("sm_80", 4, 64, 28, 3, 2, {"gemm_mma"}),
    ("sm_80", 1, 64, 7, 3, 1, {"gemm_mma"}),       # batch 1, a 7 x 7 map: 49 rows, padded to 56
])
def test_nvvm_products_on_matrix_cores(arch, n, c, size, r, stride, solvers):
    """Where the GPU has no filter-gradient kernel for the problem (sm_80), the GEMMs go to the matrix cores, no
    reference or SIMT kernel; sm_90's own is test_wgmma_backward_weights.py's."""
    g = Graph(dtype="f16", layout="NHWC")
    oh = (size + 2 * (r // 2) - r) // stride + 1
    g.output(g.conv2d_backward_weights(g.input("x", (n, size, size, c)), g.input("dy", (n, oh, oh, 64)), (r, r),
                                       stride=stride, padding=r // 2, layout="NHWC", filter_layout="KCRS"))
    assert _nvvm_solvers(g, arch) == solvers


def test_nvvm_grouped_stays_reference():
    g = Graph(dtype="f16", layout="NHWC")
    g.output(g.conv2d_backward_weights(g.input("x", (2, 8, 8, 16)), g.input("dy", (2, 8, 8, 16)), (3, 3), padding=1,
                                       groups=4, layout="NHWC", filter_layout="KCRS"))
    assert _nvvm_solvers(g) == {"conv_bwd_weights_reference"}

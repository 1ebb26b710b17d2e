"""MobileNet's depthwise -> pointwise pair as one kernel on NVIDIA GPUs (prim-select's
_fuse_depthwise_pointwise, prim.depthwise_pointwise, kernels/nvidia/depthwise_pointwise.py).

Each case is a depthwise convolution with its bias and activation, then a 1x1 convolution with its bias,
residual and activation, on odd image sizes, stride 1 and 2, dilation, asymmetric padding, 5x5 and 3x5
windows, channel counts that fill a k tile or not and output channels that fill one block column or
several. Outputs are checked against float64 numpy with the depthwise result rounded to the data type
(the kernel rounds it as the GEMM's operand; unfused, it is stored in that type). On a GPU target
(OPENPRIM_TEST_TARGET, recorded and replayed through helpers.py) every pair must run as one launch of
conv_depthwise_pointwise_mma; on the CPU the same graphs run unfused.

    OPENPRIM_TEST_TARGET=nvvm:sm_90 OPENPRIM_GPU_RECORD=out/gpu_cases_dwpw python -m pytest test/python/test_depthwise_pointwise.py -q
"""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import openprim.compiler
import reference as ref
from helpers import TARGET, Net, assert_close, depthwise_case, rounded
from openprim.base.target import parse_target
from openprim.solvers import SOLVERS
from openprim.solvers.problem import DepthwisePointwiseProblem

ACTS = {"none": (lambda g, y: y, ref.f64), "relu": (lambda g, y: g.relu(y), ref.relu),
        "relu6": (lambda g, y: g.relu6(y), ref.relu6),
        "hardswish": (lambda g, y: g.hardswish(y), lambda v: v * ref.clamp(v / 6 + 0.5, 0.0, 1.0))}

# x (N, H, W, C), the depthwise window, stride, padding (top, left, bottom, right), dilation, its bias and
# activation; the pointwise output channels K, bias, residual, activation.
CASES = [
    dict(id="3x3_s1_c16_k24_res", x=(2, 9, 11, 16), kernel=(3, 3), stride=1, padding=(1, 1, 1, 1), dilation=1,
         dw_bias=True, dw_act="relu6", k=24, bias=True, residual=True, act="none"),
    dict(id="3x3_s2_c40_k16", x=(2, 13, 9, 40), kernel=(3, 3), stride=2, padding=(1, 1, 1, 1), dilation=1,
         dw_bias=True, dw_act="relu6", k=16, bias=True, residual=False, act="none"),
    dict(id="5x5_dil2_c24_k136_hswish", x=(1, 11, 12, 24), kernel=(5, 5), stride=1, padding=(4, 4, 4, 4),
         dilation=2, dw_bias=False, dw_act="hardswish", k=136, bias=True, residual=False, act="relu"),
    dict(id="3x5_s1x2_asym_c72_k40", x=(3, 8, 21, 72), kernel=(3, 5), stride=(1, 2), padding=(0, 2, 1, 1),
         dilation=1, dw_bias=True, dw_act="none", k=40, bias=False, residual=True, act="relu6"),
]


def pair(net: Net, cfg):
    """cfg's depthwise convolution (KRSC filter) and pointwise convolution (KRSC 1x1) on net.g: (output,
    float64 reference with the depthwise result rounded to the data type)."""
    g, C = net.g, cfg["x"][3]
    h, hv = depthwise_case(net, {**cfg, "bias": cfg["dw_bias"], "residual": False, "act": cfg["dw_act"]}, ACTS)
    hv = rounded(hv, net.dtype)
    wp, wpv = net.weight((cfg["k"], 1, 1, C), scale=1 / np.sqrt(C))
    bp, bpv = net.weight((cfg["k"],)) if cfg["bias"] else (None, None)
    y = g.conv2d(h, wp, bp)
    want = ref.conv2d(hv, wpv, bpv, layout="NHWC")
    if cfg["residual"]:
        r, rv = net.input(want.shape)
        y, want = g.add(y, r), want + rv
    op, act = ACTS[cfg["act"]]
    return op(g, y), act(want)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c["id"])
def test_pair_numerics(rng, dtype, cfg):
    net = Net(rng, dtype, layout="NHWC")
    y, want = pair(net, cfg)
    out = net.run(None, y, solver="conv_depthwise_pointwise_mma")[0]      # fused whatever the grid
    assert_close(out, rounded(want, dtype), dtype, reduction=cfg["x"][3])
    if TARGET.startswith("nvvm"):
        assert [(op, s) for _, op, s in net.launches()] == [("depthwise_pointwise", "conv_depthwise_pointwise_mma")]


MOBILENET_V2_PAIRS = 17


@pytest.mark.parametrize("target, fused", [("nvvm:sm_90", 3), ("nvvm:sm_80", 3), ("rocdl:gfx942", 0), ("cpu", 0)])
def test_mobilenet_v2_pairs(target, fused):
    """Compiled (not run): on NVIDIA prim-select fuses MobileNetV2's pairs where the fused kernel pays, those
    whose grid has 8+ blocks per multiprocessor at batch 32: 32@112 -> 16, 96@112/2 -> 24 and 144@56 -> 24
    (solver.pays). The kernels are what the banner says: the taps multiplied in f32 vectors (math.fma), the
    GEMM on mma.sync. Nothing is fused elsewhere."""
    sys.path.insert(0, "examples")
    import mobilenetv2
    g = mobilenetv2.build(batch=32, layout="NHWC", dtype="f16" if target != "cpu" else "f32")
    stages = f"prim-fuse,prim-select{{target={target}}}"
    selected = str(openprim.compiler.lower(g, target, pipeline=stages))
    solvers = re.findall(r'prim.solver = "(\w+)"', selected)
    assert selected.count('"prim.depthwise_pointwise"') == solvers.count("conv_depthwise_pointwise_mma") == fused
    assert solvers.count("conv_depthwise_gpu") + solvers.count("conv_depthwise") == MOBILENET_V2_PAIRS - fused
    if fused:
        tiled = str(openprim.compiler.lower(g, target, pipeline=f"{stages},prim-tile{{target={target}}}"))
        assert re.search(r"math\.fma .*vector<8xf32>", tiled) and "nvgpu.mma.sync" in tiled


def test_solver_applies():
    solver, t = SOLVERS["conv_depthwise_pointwise_mma"], parse_target("nvvm:sm_90")
    problem = lambda dtype, c, k: DepthwisePointwiseProblem(32, c, 56, 56, k, 3, 3, 56, 56, (1, 1), (1, 1, 1, 1),  # noqa: E731
                                                            (1, 1), dtype, "bias+clamp", "bias+residual")
    assert solver.is_applicable(problem("f16", 144, 24), t) is None
    assert "f16 or bf16" in solver.is_applicable(problem("f32", 144, 24), t)
    assert "multiples of 8" in solver.is_applicable(problem("f16", 12, 24), t)
    assert solver.default_params(problem("f16", 144, 24), t) == {"tile": 1}
    assert solver.default_params(problem("f16", 576, 160), t) == {"tile": 0}

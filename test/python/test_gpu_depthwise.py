"""Depthwise convolutions (groups = C = K, NHWC) and the GPU solver for them (conv_depthwise_gpu,
kernels/gpu/depthwise.py).

Each case is one convolution with an epilogue that prim-fuse folds into it from graph ops
(act(conv(x, w, b) + residual)), in f32, f16 and bf16, on odd image sizes: 3x3, 5x5 and 7x7 windows (and 3x5),
stride 1 and 2, dilation 2, asymmetric padding, channel counts that are not a multiple of the 16-byte
vector (12, 6, 9, 3: the kernel narrows its vector to 4, 2 and 1 channels), output widths that the
thread's pixel count divides or not (a ragged right edge). Outputs are checked against float64 numpy
(reference.py). On a GPU target (OPENPRIM_TEST_TARGET, recorded and replayed through helpers.py) every
depthwise convolution must run on conv_depthwise_gpu with its epilogue fused (one launch per case);
on the CPU the same cases run on the CPU's solvers. The rest checks the solver itself: its
applicability and cost against the reference kernel it replaces, and its kernels for every GPU target.

    python -m pytest test/python/test_gpu_depthwise.py -q
    OPENPRIM_TEST_TARGET=nvvm:sm_90 OPENPRIM_GPU_RECORD=out/gpu_cases_dw python -m pytest test/python/test_gpu_depthwise.py -q
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import openprim.compiler
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, depthwise_case
from openprim.base.target import parse_target
from openprim.pyfrontend import Graph
from openprim.solvers import SOLVERS
from openprim.solvers.problem import ConvProblem

GPU = TARGET != "cpu"

# x: (N, H, W, C); padding (top, left, bottom, right); act: (name, params) as the graph op applies it
CASES = [
    dict(id="3x3_s1_c16_relu6", x=(2, 9, 11, 16), kernel=(3, 3), stride=1, padding=(1, 1, 1, 1), dilation=1,
         bias=True, residual=False, act="relu6"),
    dict(id="3x3_s2_c12_silu_res", x=(2, 11, 9, 12), kernel=(3, 3), stride=2, padding=(1, 1, 1, 1), dilation=1,
         bias=True, residual=True, act="silu"),
    dict(id="3x3_dil2_c6_gelu", x=(1, 9, 13, 6), kernel=(3, 3), stride=1, padding=(2, 2, 2, 2), dilation=2,
         bias=False, residual=True, act="gelu"),
    dict(id="5x5_s2_c24_asympad", x=(2, 13, 15, 24), kernel=(5, 5), stride=2, padding=(2, 1, 1, 2), dilation=1,
         bias=True, residual=False, act="hardswish"),
    dict(id="5x5_s1_c9_plain", x=(1, 7, 10, 9), kernel=(5, 5), stride=1, padding=(2, 2, 2, 2), dilation=1,
         bias=False, residual=False, act="none"),
    dict(id="7x7_s1_c40_res", x=(2, 14, 14, 40), kernel=(7, 7), stride=1, padding=(3, 3, 3, 3), dilation=1,
         bias=True, residual=True, act="none"),
    dict(id="7x7_s2_dil2_c3", x=(1, 17, 19, 3), kernel=(7, 7), stride=(2, 1), padding=(6, 5, 6, 7),
         dilation=(2, 1), bias=True, residual=False, act="silu"),
    dict(id="3x3_s1_c8_relu", x=(1, 5, 4, 8), kernel=(3, 3), stride=1, padding=(1, 1, 1, 1), dilation=1,
         bias=False, residual=False, act="relu"),
    dict(id="3x5_s1x2_c32_nopad", x=(3, 8, 21, 32), kernel=(3, 5), stride=(1, 2), padding=(0, 0, 0, 0),
         dilation=1, bias=True, residual=True, act="relu6"),
]


ACTS = {"none": (lambda g, y: y, ref.f64), "relu": (lambda g, y: g.relu(y), ref.relu),
        "relu6": (lambda g, y: g.relu6(y), ref.relu6), "silu": (lambda g, y: g.silu(y), ref.silu),
        "gelu": (lambda g, y: g.gelu(y), ref.gelu),
        "hardswish": (lambda g, y: g.hardswish(y), lambda v: v * ref.clamp(v / 6 + 0.5, 0.0, 1.0))}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", CASES, ids=[c["id"] for c in CASES])
def test_depthwise(cfg, dtype, rng):
    net = Net(rng, dtype, layout="NHWC")
    y, want = depthwise_case(net, cfg, ACTS)
    out, = net.run(None, y)
    R, S = cfg["kernel"]
    assert_close(out, want, dtype, reduction=R * S, what=cfg["id"])
    launches = [(op, solver) for _, op, solver in net.launches()]
    assert launches == [("conv2d", "conv_depthwise_gpu" if GPU else "conv_depthwise")], launches  # epilogue fused


def _problem(c=32, dtype="f16", groups=None, layout="NHWC", k=None, epilogue="bias+clamp"):
    return ConvProblem(8, c, 56, 56, k or c, 3, 3, 56, 56, (1, 1), (1, 1, 1, 1), (1, 1), groups or c, layout,
                       "RSCK", dtype, epilogue)


def test_applicability_and_cost():
    """Applies to depthwise NHWC problems only, on GPU targets only; cheaper than the reference
    kernel that depthwise convolutions fell to before (and than nothing else that applies)."""
    dw = SOLVERS["conv_depthwise_gpu"]
    target = parse_target("nvvm:sm_90")
    assert dw.is_applicable(_problem(), target) is None
    assert "not depthwise" in dw.is_applicable(_problem(groups=8), target)
    assert "not depthwise" in dw.is_applicable(_problem(k=64), target)   # channel multiplier 2
    assert "NHWC" in dw.is_applicable(_problem(layout="NCHW"), target)
    assert "cpu" not in dw.targets
    ref_cost = SOLVERS["conv_reference"].cost(_problem(), target)
    assert dw.cost(_problem(), target) < ref_cost / 10
    assert dw.cost(_problem(dtype="f16"), target) < dw.cost(_problem(dtype="f32"), target)


def _compiled(target, dtype, c):
    """The lowered module (text) of one depthwise conv + bias + relu6 for `target`."""
    g = Graph(layout="NHWC", dtype=dtype)
    rng = np.random.default_rng(0)
    x = g.input("x", (2, 10, 10, c))
    y = g.conv2d(x, g.param("w", rng.standard_normal((c, 3, 3, 1))), g.param("b", rng.standard_normal(c)),
                 padding=1, groups=c)
    g.output(g.relu6(y))
    return str(openprim.compiler.lower(g, target))


@pytest.mark.parametrize("target", ["nvvm:sm_80", "nvvm:sm_90", "rocdl:gfx942", "rocdl:gfx1100"])
@pytest.mark.parametrize("dtype,c,load", [("f16", 32, "v4.b32"), ("bf16", 12, "v4.b16"), ("f32", 32, "v4.b32"),
                                          ("f32", 6, "v2.b32")])
def test_kernel_vectors(target, dtype, c, load):
    """Every GPU target selects the solver and compiles its kernel; on NVIDIA the PTX reads whole
    channel vectors: 16 bytes where C allows (8 x f16, 4 x f32), else the widest that divides C."""
    text = _compiled(target, dtype, c)
    assert re.findall(r'prim.solver = "(\w+)"', text) == ["conv_depthwise_gpu"]
    assert "gpu.binary" in text
    if target.startswith("nvvm"):
        assert set(re.findall(r"ld\.global\.nc\.(v\d\.b\d+)", text)) == {load}

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


# Forced (WT, HT, vector bytes): several output rows per thread sharing input rows, a ragged bottom edge
# (HT that does not divide OH), narrower vectors, and one pixel per thread.
TILES = [(4, 2, 16), (2, 4, 8), (7, 2, 8), (1, 3, 16)]


@pytest.mark.skipif(not GPU, reason="the thread tiles are the GPU kernel's (OPENPRIM_TEST_TARGET)")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", TILES, ids=["x".join(map(str, t)) for t in TILES])
@pytest.mark.parametrize("cfg", [c for c in CASES if c["kernel"][0] * c["kernel"][1] <= 25],
                         ids=[c["id"] for c in CASES if c["kernel"][0] * c["kernel"][1] <= 25])
def test_depthwise_tiles(cfg, tile, dtype, rng, monkeypatch):
    wt, ht, vbytes = tile
    monkeypatch.setattr(SOLVERS["conv_depthwise_gpu"], "default_params",
                        lambda p, target: {"wt": wt, "ht": ht, "vbytes": vbytes})
    net = Net(rng, dtype, layout="NHWC")
    y, want = depthwise_case(net, cfg, ACTS)
    out, = net.run(None, y)
    assert_close(out, want, dtype, reduction=cfg["kernel"][0] * cfg["kernel"][1], what=f"{cfg['id']} {tile}")


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


@pytest.mark.parametrize("ht,rows", [(1, 3), (2, 4), (4, 6)])
def test_rows_loaded_once(ht, rows, monkeypatch):
    """HT output rows a thread load each input row they share once: 3x3, stride 1, WT = 4 reads
    6 columns of HT + 2 rows (plus the 9 taps), and the loads are 16-byte f16 vectors."""
    monkeypatch.setattr(SOLVERS["conv_depthwise_gpu"], "default_params",
                        lambda p, target: {"wt": 4, "ht": ht, "vbytes": 16})
    text = _compiled("nvvm:sm_90", "f16", 32)
    loads = re.findall(r"ld\.global\.nc\.(v\d\.b\d+)", text)
    assert set(loads) == {"v4.b32"}
    assert len(loads) == 6 * rows + 9 + 1, len(loads)   # + the bias vector


@pytest.mark.parametrize("target", ["nvvm:sm_80", "nvvm:sm_90", "rocdl:gfx942", "rocdl:gfx1100"])
@pytest.mark.parametrize("vbytes,dtype,c,load", [
    (16, "f16", 32, "v4.b32"), (16, "bf16", 12, "v4.b16"), (16, "f32", 32, "v4.b32"), (16, "f32", 6, "v2.b32"),
    (8, "f16", 32, "v4.b16"), (8, "bf16", 12, "v4.b16"), (8, "f16", 6, "v2.b16"), (8, "f32", 32, "v2.b32"),
    (8, "f32", 3, None)])
def test_kernel_vectors(target, vbytes, dtype, c, load, monkeypatch):
    """Every GPU target selects the solver and compiles its kernel; on NVIDIA the PTX reads whole
    channel vectors: `vbytes` bytes where C allows (16: 8 x f16, 4 x f32; 8: 4 x f16, 2 x f32), else the
    widest that divides C (scalars for f32 with C = 3)."""
    solver = SOLVERS["conv_depthwise_gpu"]
    heuristic = solver.default_params
    monkeypatch.setattr(solver, "default_params", lambda p, t: {**heuristic(p, t), "vbytes": vbytes})
    text = _compiled(target, dtype, c)
    assert set(re.findall(r'prim.solver = "(\w+)"', text)) == {"conv_depthwise_gpu"}   # the kernel and its call
    assert "gpu.binary" in text
    if target.startswith("nvvm"):
        vectors = set(re.findall(r"ld\.global\.nc\.(v\d\.b\d+)", text))
        assert vectors == ({load} if load else set()), vectors

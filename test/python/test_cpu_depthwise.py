"""The CPU depthwise convolution kernel (conv_depthwise, kernels/cpu/depthwise.py).

Each case is one depthwise convolution (groups = C = K, NHWC) with an epilogue that prim-fuse folds into it
from graph ops (act(conv(x, w, b) + residual)), checked against float64 numpy (reference.py) on random
data, in f32, f16 and bf16: odd image sizes (7, 13, 17), channel counts that leave a tail of the channel
vector (3: no full vector at all, 37: four vectors and a tail of 5; 24: none), 3x3, 5x5 and 7x7 windows
(and 3x5), stride 1, 2 and 2x1, dilation 2, asymmetric and large padding (window rows and columns outside the
image: the zeroed taps, the border tiles), batch 1 with an odd number of output rows (the channel blocks
split between the threads) and batch 2 (the rows split), every activation. Each must run as one launch of
conv_depthwise whose kernel is the vector kernel (no linalg left). Then the register tile's parameters
(wt, ct) on one hard case each, and the linalg schedule that params kernel=0 still selects.

    python -m pytest test/python/test_cpu_depthwise.py -q
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import openprim.compiler
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, depthwise_case
from openprim.solvers import SOLVERS

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="the CPU kernel")

# x: (N, H, W, C); padding (top, left, bottom, right); act: a name of ACTS
CASES = [
    dict(id="3x3_s1_c37_relu6", x=(1, 13, 17, 37), kernel=(3, 3), stride=1, padding=(1, 1, 1, 1), dilation=1,
         bias=True, residual=False, act="relu6"),
    dict(id="3x3_s2_c24_asympad_res_silu", x=(2, 17, 13, 24), kernel=(3, 3), stride=2, padding=(0, 1, 2, 0),
         dilation=1, bias=True, residual=True, act="silu"),
    dict(id="3x3_dil2_c3_gelu", x=(1, 7, 13, 3), kernel=(3, 3), stride=1, padding=(2, 2, 2, 2), dilation=2,
         bias=False, residual=True, act="gelu"),
    dict(id="5x5_s2_c37_hardswish", x=(2, 13, 17, 37), kernel=(5, 5), stride=2, padding=(2, 1, 1, 2), dilation=1,
         bias=True, residual=False, act="hardswish"),
    dict(id="5x5_s1_c24_dil2_bigpad", x=(1, 7, 17, 24), kernel=(5, 5), stride=1, padding=(5, 4, 3, 6),
         dilation=2, bias=True, residual=True, act="leaky_relu"),
    dict(id="7x7_s1_c37_res", x=(1, 17, 7, 37), kernel=(7, 7), stride=1, padding=(3, 3, 3, 3), dilation=1,
         bias=True, residual=True, act="none"),
    dict(id="7x7_s2x1_dil2x1_c3", x=(1, 17, 13, 3), kernel=(7, 7), stride=(2, 1), padding=(6, 5, 6, 7),
         dilation=(2, 1), bias=True, residual=False, act="elu"),
    dict(id="3x5_s1x2_c24_nopad", x=(2, 7, 17, 24), kernel=(3, 5), stride=(1, 2), padding=(0, 0, 0, 0),
         dilation=1, bias=False, residual=False, act="sigmoid"),
    dict(id="3x3_s1_c24_tanh", x=(1, 13, 13, 24), kernel=(3, 3), stride=1, padding=(1, 0, 1, 2), dilation=1,
         bias=True, residual=False, act="tanh"),
    dict(id="3x3_s2_c37_relu_res", x=(1, 13, 7, 37), kernel=(3, 3), stride=2, padding=1, dilation=1,
         bias=True, residual=True, act="relu"),
    dict(id="3x3_s1_c24_hardsigmoid", x=(2, 7, 7, 24), kernel=(3, 3), stride=1, padding=1, dilation=1,
         bias=True, residual=False, act="hardsigmoid"),
    dict(id="3x3_s1_c37_gelu_tanh", x=(1, 7, 17, 37), kernel=(3, 3), stride=1, padding=1, dilation=2,
         bias=True, residual=False, act="gelu_tanh"),
]

# name: (graph op, float64 reference)
ACTS = {
    "none": (lambda g, y: y, ref.f64),
    "relu": (lambda g, y: g.relu(y), ref.relu),
    "relu6": (lambda g, y: g.relu6(y), ref.relu6),
    "leaky_relu": (lambda g, y: g.leaky_relu(y, 0.1), lambda v: ref.leaky_relu(v, 0.1)),
    "sigmoid": (lambda g, y: g.sigmoid(y), ref.sigmoid),
    "tanh": (lambda g, y: g.tanh(y), ref.tanh),
    "gelu": (lambda g, y: g.gelu(y), ref.gelu),
    "gelu_tanh": (lambda g, y: g.gelu(y, approximate="tanh"), lambda v: ref.gelu(v, approximate="tanh")),
    "silu": (lambda g, y: g.silu(y), ref.silu),
    "hardsigmoid": (lambda g, y: g.hardsigmoid(y), lambda v: ref.clamp(v / 6 + 0.5, 0.0, 1.0)),
    "hardswish": (lambda g, y: g.hardswish(y), lambda v: v * ref.clamp(v / 6 + 0.5, 0.0, 1.0)),
    "elu": (lambda g, y: g.elu(y, 0.7), lambda v: ref.elu(v, 0.7)),
}


def check(cfg, dtype, rng, vector=True):
    """Compile and run cfg; its one launch is conv_depthwise, a vector kernel (vector=True) or linalg."""
    net = Net(rng, dtype, layout="NHWC")
    y, want = depthwise_case(net, cfg, ACTS)
    out, = net.run(None, y)
    R, S = cfg["kernel"]
    assert_close(out, want, dtype, reduction=R * S, what=cfg["id"])
    launches = net.launches()
    assert [(op, solver) for _, op, solver in launches] == [("conv2d", "conv_depthwise")], launches
    text = str(openprim.compiler.lower(net.g, pipeline="prim-fuse,prim-select,prim-tile"))
    # the vector kernel works on 1-d views of memrefs; the linalg schedule's result is still on tensors
    kernel = "vector.fma" in text and "memref.reinterpret_cast" in text and "tensor.extract_slice" not in text
    assert kernel == vector, text[:2000]
    return text


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", CASES, ids=[c["id"] for c in CASES])
def test_depthwise(cfg, dtype, rng):
    check(cfg, dtype, rng)


@pytest.mark.parametrize("params", [{"wt": 1, "ct": 16, "order": 0}, {"wt": 7, "ct": 8, "order": 1},
                                    {"wt": 8, "ct": 16, "order": 1}, {"wt": 6, "ct": 32, "order": 0},
                                    {"wt": 4, "ct": 8, "order": 0}, {"wt": 4, "ct": 8, "order": 1}],
                         ids=lambda p: f"wt{p['wt']}_ct{p['ct']}_order{p['order']}")
@pytest.mark.parametrize("cfg", [CASES[0], CASES[4], CASES[6], CASES[9]], ids=lambda c: c["id"])
def test_register_tiles(cfg, params, rng, monkeypatch):
    """Every tile shape and loop order, on tails of columns and channels (37 channels in vectors of 32
    leave 5), with the channels split between the threads or not."""
    monkeypatch.setattr(SOLVERS["conv_depthwise"], "default_params", lambda p, target: {**params, "kernel": 1})
    check(cfg, "f32", rng)


def test_linalg_schedule_still_selectable(rng, monkeypatch):
    """params kernel=0: the linalg depthwise convolution and its transform schedule (no vector kernel)."""
    monkeypatch.setattr(SOLVERS["conv_depthwise"], "default_params",
                        lambda p, target: {"wt": 4, "ct": 8, "kernel": 0})
    check(dict(CASES[2], x=(1, 8, 12, 16)), "f32", rng, vector=False)


def test_channel_parts_and_zeroed_rows(rng):
    """Batch 1, 7 output rows: each row's channel blocks are split in two parts (a part index slowest in the
    forall, the tail in the last); a window row outside the image for some output rows is selected to zero."""
    text = check(dict(CASES[0], x=(1, 7, 9, 37)), "f32", rng)
    assert re.search(r"scf.forall \(%\w+\) in \(14\)", text), text[:3000]
    assert "scf.if" in text and "arith.select" in text


def test_not_applicable():
    """Channel multiplier 2 (K = 2C) and NCHW are not depthwise problems for this kernel."""
    from openprim.base.target import parse_target
    from openprim.solvers.problem import ConvProblem
    cpu = parse_target("cpu")

    def problem(k=16, layout="NHWC"):
        return ConvProblem(1, 16, 9, 9, k, 3, 3, 9, 9, (1, 1), (1, 1, 1, 1), (1, 1), 16, layout, "RSCK", "f32",
                           "bias")
    dw = SOLVERS["conv_depthwise"]
    assert dw.is_applicable(problem(), cpu) is None
    assert "not depthwise" in dw.is_applicable(problem(k=32), cpu)
    assert "NHWC" in dw.is_applicable(problem(layout="NCHW"), cpu)
    assert np.isfinite(dw.cost(problem(), cpu))

"""Grouped convolutions on the NVIDIA matrix cores: prim-select merges small groups into groups of 64 input
and 64 output channels (block-diagonal filters); sm_90's wgmma implicit GEMM runs one group per block
column, sm_80's mma.sync one GEMM per group on grid z (kernels/nvidia/mma.py).

Numerics against float64 numpy (f16/bf16: ResNeXt's 4, 8, 16 and 32 channels per group, stride 2, odd maps,
bias, ReLU and residual epilogues); they run on the CPU here and on the GPU machine under
OPENPRIM_TEST_TARGET=nvvm:sm_90 (helpers.run_on_gpu). The selection is checked by compiling for sm_90 here.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import reference as ref
from helpers import Net, assert_close
from openprim import passes
from openprim.kernels.nvidia.wgmma import CONFIGS
from openprim.pyfrontend import Graph, to_module

CASES = [  # N, H, W, C, groups, stride, epilogue
    (2, 9, 11, 128, 32, 1, "bias+relu"),       # 4 per group, merged 16 to a group of 64
    (1, 14, 13, 256, 32, 2, "bias"),           # 8 per group, stride 2
    (2, 7, 7, 512, 32, 1, "residual+relu"),    # 16 per group
    (1, 8, 6, 192, 6, 1, "none"),              # 32 per group, 3 merged groups
]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"c{c[3]}g{c[4]}s{c[5]}")
def test_grouped_convolution(rng, dtype, case):
    n, h, w, c, groups, stride, epilogue = case
    net = Net(rng, dtype, layout="NHWC")
    x, xv = net.input((n, h, w, c))
    wt, wv = net.weight((c, 3, 3, c // groups), scale=0.2)
    b, bv = net.weight((c,)) if "bias" in epilogue else (None, None)
    y = net.g.conv2d(x, wt, b, stride=stride, padding=1, groups=groups)
    want = ref.conv2d(xv, wv, bv, stride=stride, padding=1, groups=groups, layout="NHWC")
    if "residual" in epilogue:
        z, zv = net.input(want.shape)
        y, want = net.g.add(y, z), want + zv
    if "relu" in epilogue:
        y, want = net.g.relu(y), ref.relu(want)
    out = net.run(None, y)[0]
    assert_close(out, want, dtype, reduction=9 * c // groups)


@pytest.mark.parametrize("c, groups, merged", [(128, 32, 2), (1024, 32, 16), (192, 6, 3), (96, 32, None)])
def test_groups_merged_for_sm90(c, groups, merged):
    """Compiled for sm_90 (no GPU needed): merged into C/64 groups on conv_implicit_gemm_wgmma with a
    64-column tile; 96 channels do not split into groups of 64 and take another solver."""
    g = Graph(dtype="f16", layout="NHWC")
    w = np.random.default_rng(0).standard_normal((c, 3, 3, c // groups))
    g.output(g.conv2d(g.input("x", (8, 14, 14, c)), g.param("w", w), padding=1, groups=groups))
    text = str(passes.run(to_module(g), "prim-fuse,prim-select{target=nvvm:sm_90}"))
    solver = re.search(r'prim.solver = "(\w+)"', text).group(1)
    if merged is None:
        assert solver != "conv_implicit_gemm_wgmma" or f"groups = {groups}" not in text
        return
    assert f"groups = {merged} : i64" in text and solver == "conv_implicit_gemm_wgmma", text[-600:]
    assert CONFIGS[int(re.search(r"tile = (\d+)", text).group(1))][1] == 64


@pytest.mark.parametrize("c, groups", [(128, 32), (1024, 32), (256, 32), (192, 6)])
def test_groups_on_mma_for_sm80(c, groups):
    """Compiled for sm_80 (mma.sync, no wgmma): a grouped convolution runs on the tensor cores, one GEMM per
    group on grid z, its groups merged to 64 channels where fewer than 8 would not fill a 16-byte row."""
    g = Graph(dtype="f16", layout="NHWC")
    w = np.random.default_rng(0).standard_normal((c, 3, 3, c // groups))
    g.output(g.conv2d(g.input("x", (8, 14, 14, c)), g.param("w", w), padding=1, groups=groups))
    text = str(passes.run(to_module(g), "prim-fuse,prim-select{target=nvvm:sm_80}"))
    assert re.search(r'prim.solver = "(\w+)"', text).group(1) == "conv_implicit_gemm_mma", text[-600:]
    per_group = c // int(re.search(r"groups = (\d+) : i64", text).group(1))
    assert per_group % 8 == 0 and (c // groups >= 8 or per_group == 64), per_group

"""Patch convolutions (kernel = stride, unpadded, one group) as GEMMs: prim-fuse's conv_patches rewrite.

Against float64 numpy on every dtype: NCHW and NHWC, the three filter layouts, bias and activation
epilogues, patches of 2, 4 and 16 (ViT's), odd sizes; the convolutions it must leave alone; and ViT's patch
embedding in fp16 for nvvm:sm_90, one transpose and one GEMM (compile only). Under
OPENPRIM_TEST_TARGET=nvvm:sm_90 the numerics run on the GPU machine (helpers.run_on_gpu).
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import reference as ref
from helpers import DTYPES, Net, assert_close, kernel_info
from openprim import compiler, passes
from openprim.dialect import graph_functions
from openprim.pyfrontend import Graph, to_module

CASES = [  # N, C, H, W, K, patch, layout, filter layout, bias, activation
    (2, 3, 8, 12, 5, 2, "NCHW", "KCRS", True, "relu"),
    (1, 3, 20, 12, 7, 4, "NHWC", "KRSC", True, "none"),
    (3, 5, 8, 8, 9, 4, "NHWC", "RSCK", False, "gelu"),
    (2, 3, 32, 48, 12, 16, "NCHW", "KCRS", True, "none"),
]


def _fused_ops(graph) -> collections.Counter:
    module = passes.run(to_module(graph), "prim-fuse")
    fn = graph_functions(module.operation)[0]
    return collections.Counter(op.operation.name for op in fn.regions[0].blocks[0].operations)


def _patch_conv(net, case):
    n, c, h, w, k, p, layout, filter_layout, bias, act = case
    x, xv = net.input((n, c, h, w) if layout == "NCHW" else (n, h, w, c))
    w_shape = {"KCRS": (k, c, p, p), "KRSC": (k, p, p, c), "RSCK": (p, p, c, k)}[filter_layout]
    wt, wv = net.weight(w_shape, scale=0.3)
    b, bv = net.weight((k,)) if bias else (None, None)
    y = net.g.conv2d(x, wt, b, stride=p, layout=layout, filter_layout=filter_layout, activation=act)
    w_ref = wv.transpose(3, 2, 0, 1) if filter_layout == "RSCK" else wv
    want = ref.conv2d(xv, w_ref, bv, stride=p, layout=layout,
                      filter_layout="KCRS" if filter_layout == "RSCK" else filter_layout, activation_name=act)
    return y, want


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[6]}_{c[7]}_p{c[5]}")
def test_patch_convolution_numerics(rng, dtype, case):
    net = Net(rng, dtype)
    y, want = _patch_conv(net, case)
    out = net.run(None, y)[0]
    kernels = [op for op, _ in kernel_info(net.module).values()]
    assert "conv2d" not in kernels and "matmul" in kernels, kernels
    assert_close(out, want, dtype, reduction=case[1] * case[5] ** 2)


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(stride=1), dict(stride=2, groups=3),
                                dict(stride=2, dilation=2)], ids=["padded", "overlapping", "grouped", "dilated"])
def test_other_convolutions_stay(kw):
    g = Graph()
    w = np.ones((6, 3 // kw.get("groups", 1), 2, 2))
    g.output(g.conv2d(g.input("x", (1, 3, 8, 8)), g.param("w", w), **kw))
    assert _fused_ops(g)["prim.conv2d"] == 1


def test_ragged_image_stays():
    """An image that the patches do not tile (the convolution drops the last rows) keeps its convolution."""
    g = Graph()
    g.output(g.conv2d(g.input("x", (1, 3, 9, 8)), g.param("w", np.ones((4, 3, 2, 2))), stride=2))
    assert _fused_ops(g)["prim.conv2d"] == 1


def test_vit_patch_embedding_on_sm90(tmp_path):
    """ViT-B/16's patch embedding and its flattening to tokens, fp16 for sm_90: the image's patches are one
    transpose, the embedding one GEMM with its bias; no conv, pad or layout transpose is left."""
    g = Graph(dtype="f16")
    rng = np.random.default_rng(0)
    y = g.conv2d(g.input("x", (2, 3, 224, 224)), g.param("w", rng.standard_normal((768, 3, 16, 16)) * 0.02),
                 g.param("b", rng.standard_normal(768)), stride=16)
    g.output(g.transpose(g.reshape(y, (2, 768, 196)), (0, 2, 1)))
    plan = compiler.save(g, str(tmp_path / "patches.oprim"), target="nvvm:sm_90")["plan"]
    kinds = [step["kernel"].rstrip("0123456789_") for step in plan["steps"]]
    assert kinds == ["transpose", "matmul"], kinds

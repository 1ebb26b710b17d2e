"""Patch convolutions as GEMMs: a convolution whose windows tile the image (kernel = stride, no padding, no
dilation, one group) is a matmul of the image's patches, and the patches are a permutation of the image.

ViT's patch embedding (16x16, stride 16) and ConvNeXt's stem (4x4, stride 4) have 3 input channels. A
convolution kernel reads them as whole k tiles of channels (the sm_90 implicit GEMM: 64 channels a filter
tap, 8 after padding C to 8, so 8x the work), while the same computation as a GEMM has a reduction of
C R S = 768 (48): no channel padding, and the GEMM kernels' tiles. With p = R = S (NCHW shown; NHWC keeps
C last in the patch):

    x [B, C, H, W] -> reshape [B, C, H/p, p, W/p, p] -> transpose [B, H/p, W/p, C, p, p] -> [M, C p p]
    y = matmul(patches, filter as [K, C p p] (transpose_rhs), bias, activation)   M = B H/p W/p
    y [M, K] -> reshape [B, H/p, W/p, K] (-> transpose [B, K, H/p, W/p] for NCHW)

The input transpose replaces the NCHW -> NHWC transpose such a first layer has anyway, and the views after
the GEMM are what matmul_views then folds (ViT flattens the map back to [B, H/p W/p, K]: no copy is left).
Only with a constant filter (reordered at compile time) and no residual epilogue.
"""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.ops import FILTER_LAYOUTS, filter_dims

from .rewrite import constant, create, new_constant, reshape, transpose


def _patch_filter(w: np.ndarray, layout: str, nchw: bool) -> np.ndarray:
    """The filter as [K, patch] with the patch's elements in the order the patches are read: (C, R, S)
    for an NCHW input, (R, S, C) for NHWC."""
    kcrs = {"KCRS": w, "KRSC": w.transpose(0, 3, 1, 2), "RSCK": w.transpose(3, 2, 0, 1)}[layout]
    ordered = kcrs if nchw else kcrs.transpose(0, 2, 3, 1)
    return ordered.reshape(ordered.shape[0], -1)


def patches_as_gemm(op: ir.Operation) -> bool:
    """Rewrite one patch convolution (module docstring) into views around a matmul; whether it did."""
    a = dialect.op_attrs(op)
    x, w, bias, residual = dialect.operand_groups(op)
    if a["filter_layout"] not in FILTER_LAYOUTS or residual is not None or a["groups"] != 1:
        return False
    wd = constant(w)
    K, C, R, S = filter_dims(a["filter_layout"], list(w.type.shape))
    if wd is None or R * S == 1 or list(a["strides"]) != [R, S] or any(a["padding"]) \
            or list(a["dilations"]) != [1, 1]:
        return False
    nchw = a["layout"] == "NCHW"
    B, H, W = (x.type.shape[i] for i in ((0, 2, 3) if nchw else (0, 1, 2)))
    if H % R or W % S:
        return False
    h, w_ = H // R, W // S
    loc = op.location
    with ir.InsertionPoint(op), loc:
        if nchw:
            split = reshape(x, [B, C, h, R, w_, S], loc)
            rows = transpose(split, [0, 2, 4, 1, 3, 5], loc)
        else:
            split = reshape(x, [B, h, R, w_, S, C], loc)
            rows = transpose(split, [0, 1, 3, 2, 4, 5], loc)
        lhs = reshape(rows, [B * h * w_, C * R * S], loc)
        rhs = new_constant(_patch_filter(wd, a["filter_layout"], nchw), w, loc)
        mm = create("matmul", [lhs, rhs, bias, None], [B * h * w_, K], x,
                    {"transpose_rhs": 1, "activation": a["activation"], "activation_params": a["activation_params"]},
                    loc)
        y = reshape(mm, [B, h, w_, K], loc)
        if nchw:
            y = transpose(y, [0, 3, 1, 2], loc)
    op.result.replace_all_uses_with(y)
    op.erase()
    return True


def patch_convolutions(fn) -> bool:
    """patches_as_gemm over the convolutions of graph function fn; whether any changed."""
    ops = [o.operation for o in fn.regions[0].blocks[0].operations if o.operation.name == "prim.conv2d"]
    return any([patches_as_gemm(op) for op in ops])

"""Issue 15: the launches of a ConvNeXt block and a ViT encoder layer, and their numerics.

torch.export gives a Linear on a rank-3/4 input as reshape -> matmul -> reshape, and ConvNeXt's block ends
in permute(NHWC -> NCHW) -> layer scale (a per-channel multiply) -> residual add. prim-fuse used to see a
reshape, not the matmul, under the GELU, and a transpose under the multiply, so each stayed its own kernel
and the elementwise tail kept its NCHW transposes. Now (passes/prim_fuse.py) the epilogue rewrites look
through reshapes and transposes, the layer scale folds into the second Linear's weights, and the residual
add becomes that GEMM's epilogue, its inverse permute cancelling in prim-select: a block is depthwise conv,
LayerNorm, GEMM + GELU, GEMM + residual, all NHWC.

1. Launch counts per op, compile only (no device), for nvvm:sm_90 in f16 and for the CPU, of a 2-stage
   ConvNeXt with one block per stage and a 1-layer ViT: no elementwise kernel is left, ConvNeXt keeps
   only the input's layout transpose.
2. The same models on the CPU target against PyTorch eager in float64 (odd sizes).

    python -m pytest -q test/python/test_gpu_fusion.py
"""
from __future__ import annotations

import os
import sys
from collections import Counter

import pytest

import openprim.compiler
import openprim.plan
from openprim.base.target import parse_target
from helpers import assert_close, kernel_info

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import transformer_models  # noqa: E402 - examples/, put on sys.path above
import vision_models  # noqa: E402

SIZE = {"convnext": 36, "vit": 48}   # ConvNeXt: a 9x9 map after the stride-4 stem, 4x4 after the downsampling;
                                     # ViT: 3x3 patches of 16


def convnext():
    """ConvNeXt with two stages of one block each (20 and 36 channels), seeded, with random layer scales."""
    torch.manual_seed(0)
    model = vision_models.ConvNeXt(settings=[(20, 36, 1), (36, None, 1)], stochastic_depth_prob=0.0, classes=7)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape))
            elif isinstance(m, vision_models.CNBlock):
                m.layer_scale.copy_(0.5 + 0.1 * torch.randn(m.layer_scale.shape))
    return model.eval()


def vit():
    """One encoder layer of ViT/12: 2 heads of 20, MLP 72, 9 patches + the class token."""
    return transformer_models.vit_b_16(image_size=SIZE["vit"], num_layers=1, num_heads=2, hidden_dim=40, mlp_dim=72,
                                       num_classes=7)


MODELS = {"convnext": convnext, "vit": vit}


def image(name: str, batch=2):
    return torch.randn(batch, 3, SIZE[name], SIZE[name], generator=torch.Generator().manual_seed(1))


def launches(name: str, target: str, dtype) -> Counter:
    """{prim op: launches} of the model's plan compiled for target (compile only)."""
    from openprim.pyfrontend.torch import import_exported
    model, x = MODELS[name]().to(dtype), image(name).to(dtype)
    graph, _ = import_exported(torch.export.export(model, (x,)))
    module = openprim.compiler.lower(graph, target)
    info = kernel_info(module)
    return Counter(info[s["kernel"]][0] for s in openprim.plan.build_plan(module, parse_target(target))[0]["steps"])


# 2 blocks: depthwise, LayerNorm, GEMM + GELU, GEMM + bias + residual each; the stem (a patch convolution:
# one transpose of the NCHW input into its patches and a GEMM, passes/conv_patches.py) + LayerNorm2d, the
# downsampling LayerNorm2d + conv, the pool, the head's LayerNorm + Linear.
CONVNEXT = {"conv2d": 3, "layer_norm": 5, "matmul": 6, "global_avg_pool": 1, "transpose": 1}
# the patch embedding (the image's patches: one transpose, and a GEMM; passes/conv_patches.py), class-token
# concat, position add, ln_1; attention (head_dim 20: no flash kernel, decomposed):
# q, k and v as three GEMMs on the block input (passes/matmul_views.py splits the packed in-projection, so no
# slices and no [B, S, E] -> [S, B, E] transpose), the head split transposes, q k^T, scale, softmax, p v,
# the out-projection with the residual add in its epilogue (its row permutation moved before it), ln_2,
# GEMM + GELU, GEMM + residual, final LayerNorm, the class token's slice, head. No GELU launch.
VIT = {"concat": 1, "add": 1, "layer_norm": 3, "matmul": 10, "transpose": 5, "slice": 1, "mul": 1, "softmax": 1}


def _dtype(name):
    return {"f16": torch.float16, "f32": torch.float32}[name]


@pytest.mark.parametrize("target, dtype", [("nvvm:sm_90", "f16"), ("cpu", "f32")])
@pytest.mark.parametrize("name, want", [("convnext", CONVNEXT), ("vit", VIT)])
def test_launches(name, want, target, dtype):
    counts = launches(name, target, _dtype(dtype))
    assert dict(counts) == want, dict(counts)


@pytest.mark.parametrize("name", list(MODELS))
def test_numerics_against_eager(name):
    """The CPU compile (same prim-fuse rewrites) of the f32 model against eager PyTorch in float64."""
    from openprim.torch_backend import compile_module
    model, x = MODELS[name](), image(name)
    got = compile_module(model, (x,), target="cpu")(x).numpy()
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    assert_close(got, want, "f32", reduction=16, what=name)

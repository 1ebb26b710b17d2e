"""prim.attention: its shape rule, its decomposition (prim-decompose), its numerics against float64 numpy on
every dtype (odd sequence lengths, head dims 16 to 128 and odd ones, causal with Sq != Sk, additive masks),
the importers' mapping of torch's scaled_dot_product_attention and ONNX's attention patterns, and the NVIDIA
flash-attention kernel's IR.

Under OPENPRIM_TEST_TARGET=nvvm:sm_90 with OPENPRIM_GPU_RECORD=DIR the numerics cases are recorded for the
GPU machine (f16/bf16 with head dims 16, 32, 64 and 128 run the flash kernels there; see
helpers.run_on_gpu)."""
from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest
from helpers import TARGET, Net, assert_close, kernel_info, rounded

import openprim
from openprim.backends.nvvm.compiler import device_image
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim.pyfrontend import Graph
from openprim.solvers import SOLVERS
from openprim.solvers.problem import AttentionProblem


def reference(q, k, v, mask=None, causal=False, scale=None):
    """softmax(scale q k^T + mask, causal: key j > query i masked) @ v in float64."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if mask is not None and mask.ndim == 4 and mask.shape[0] not in (1, q.shape[0]):   # tiling the batch
        mask = np.tile(mask, (q.shape[0] // mask.shape[0], 1, 1, 1))
    if mask is not None:
        s = s + mask
    if causal:
        s = np.where(np.arange(k.shape[2])[None, :] > np.arange(q.shape[2])[:, None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v)


def _attention(rng, dtype, b, h, sq, sk, d, causal=False, mask_shape=None, scale=None, layout="BHSD"):
    """(outputs, expected, net) of one attention on random inputs; layout BSHD: q, k, v and the output
    [B, S, H, D]."""
    net = Net(rng, dtype)
    swap = (0, 1, 2, 3) if layout == "BHSD" else (0, 2, 1, 3)
    q, qv = net.input(tuple((b, h, sq, d)[i] for i in swap))
    k, kv = net.input(tuple((b, h, sk, d)[i] for i in swap))
    v, vv = net.input(tuple((b, h, sk, d)[i] for i in swap))
    m, mv = net.input(mask_shape) if mask_shape else (None, None)
    out = net.run(None, net.g.attention(q, k, v, m, causal=causal, scale=scale, layout=layout))[0]
    want = reference(qv.transpose(swap), kv.transpose(swap), vv.transpose(swap), mv, causal, scale)
    return out, want.transpose(swap), net


CASES = [  # b, h, sq, sk, d, causal, mask shape
    (1, 2, 37, 37, 64, False, None),
    (2, 3, 19, 45, 64, True, None),          # causal with Sq < Sk (top-left aligned, as torch)
    (1, 2, 70, 33, 128, True, None),         # causal with Sq > Sk
    (2, 2, 29, 53, 128, False, (2, 1, 29, 53)),
    (1, 3, 21, 17, 24, False, (17,)),        # an odd head dim, a mask broadcast over queries
    (2, 1, 131, 67, 64, True, (1, 1, 131, 67)),
    (6, 3, 17, 17, 24, False, (2, 3, 1, 17)),  # a mask tiling the batch (batch b reads mask[b mod 2])
]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}h{}q{}k{}d{}{}{}".format(
    *c[:5], "c" if c[5] else "", "m" if c[6] else ""))
def test_attention_numerics(rng, dtype, case):
    *shape, causal, mask_shape = case
    out, want, net = _attention(rng, dtype, *shape, causal=causal, mask_shape=mask_shape)
    assert_close(out, rounded(want, dtype), dtype, reduction=shape[3])


FLASH_CASES = [  # b, h, sq, sk, d, causal, mask shape: ragged query blocks (64 mma.sync, 128 wgmma) and key tiles
    (1, 2, 200, 300, 64, True, None),            # causal skips the key tiles past each query block
    (1, 2, 130, 77, 128, False, None),
    (2, 2, 150, 300, 128, False, None),          # wgmma: two full key tiles, then a ragged one
    (1, 1, 390, 390, 64, True, None),            # wgmma: 4 query blocks, up to 4 key tiles, both slots reused
    (1, 67, 129, 150, 64, False, None),          # wgmma: 134 (query tile, head) items, more than 132 blocks
    (1, 67, 260, 260, 64, True, None),           # wgmma: 134 causal pairs of query tiles (one of them alone)
    (1, 3, 300, 300, 128, True, None),           # wgmma: 3 query tiles (short key loops, P in registers)
    (2, 1, 65, 129, 128, True, (65, 129)),       # a 2-d mask, one row and one key past the tiles
    (2, 3, 33, 70, 64, False, (2, 3, 1, 70)),    # a mask broadcast over queries
    (1, 2, 1, 5, 64, False, (1, 2, 1, 1)),       # one query, a mask broadcast over keys
    (2, 6, 49, 49, 32, False, (1, 6, 49, 49)),   # Swin's windows: head dim 32 (mma.sync), bias + windows' mask
    (1, 3, 77, 100, 16, True, None),             # head dim 16: mma.sync also on sm_90
    (4, 3, 49, 49, 32, False, (2, 3, 49, 49)),   # Swin's shifted windows: the mask tiles the batch
    (6, 2, 30, 70, 64, False, (3, 1, 1, 70)),
]
ON_NVIDIA = TARGET.startswith("nvvm")


def _assert_flash(net, masked: bool, d: int = 64):
    """On NVIDIA targets the attention is one flash-attention kernel: on sm_90 the wgmma one unless there is
    an additive mask or the head dim is not 64 or 128, elsewhere the mma.sync one."""
    if ON_NVIDIA:
        wgmma = TARGET.startswith("nvvm:sm_90") and not masked and d in (64, 128)
        solver = "attention_flash_wgmma" if wgmma else "attention_flash_mma"
        assert list(kernel_info(net.module).values()) == [("attention", solver)]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", FLASH_CASES, ids=lambda c: "b{}h{}q{}k{}d{}{}{}".format(
    *c[:5], "c" if c[5] else "", "m" if c[6] else ""))
def test_flash_attention_numerics(rng, dtype, case):
    *shape, causal, mask_shape = case
    out, want, net = _attention(rng, dtype, *shape, causal=causal, mask_shape=mask_shape)
    _assert_flash(net, bool(mask_shape), shape[4])
    assert_close(out, rounded(want, dtype), dtype, reduction=shape[3])


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", [FLASH_CASES[0], FLASH_CASES[2], CASES[4]], ids=["causal", "mask2d", "d24"])
def test_attention_heads_inner_numerics(rng, dtype, case):
    """Layout BSHD (the heads of a projection, untransposed): the flash kernel's rows of head h at s H + h
    in f16/bf16 with head dims 64/128 on NVIDIA, the decomposition between transposes elsewhere."""
    *shape, causal, mask_shape = case
    out, want, net = _attention(rng, dtype, *shape, causal=causal, mask_shape=mask_shape, layout="BSHD")
    if dtype != "f32" and shape[4] in (64, 128):
        _assert_flash(net, bool(mask_shape))
    assert_close(out, rounded(want, dtype), dtype, reduction=shape[3])


def test_flash_attention_explicit_scale(rng):
    """An explicit scale with a full [B, H, Sq, Sk] mask."""
    out, want, net = _attention(rng, "f16", 1, 2, 45, 90, 64, mask_shape=(1, 2, 45, 90), scale=0.2)
    _assert_flash(net, True)
    assert_close(out, rounded(want, "f16"), "f16", reduction=64)


def test_constant_zero_mask_is_no_mask(rng):
    """transformers' "attend everywhere" mask (a constant of zeros, where HuBERT or wav2vec2 get no
    attention_mask) is dropped at build time: no [B, H, Sq, Sk] add of zeros per head."""
    g = Graph()
    q, k, v = (g.input(n, (1, 2, 9, 16)) for n in "qkv")
    zeros, ones = g.param("zeros", np.zeros((1, 1, 9, 9))), g.param("ones", np.ones((1, 1, 9, 9)))
    g.output(g.attention(q, k, v, zeros))
    g.output(g.attention(q, k, v, ones))
    masks = [n.operands[3] for n in g.nodes if n.op == "attention"]
    assert masks[0] is None and masks[1] is ones
    qv, kv, vv = (rng.standard_normal((1, 2, 9, 16)).astype(np.float32) for _ in range(3))
    out = openprim.compile(g)(qv, kv, vv)
    assert_close(out[0], reference(qv, kv, vv), "f32", reduction=16)
    assert_close(out[1], reference(qv, kv, vv, np.ones((9, 9))), "f32", reduction=16)


@pytest.mark.skipif(not ON_NVIDIA, reason="the flash kernel's rule (the decomposed softmax gives NaN there)")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_flash_attention_fully_masked_rows_are_zero(rng, dtype):
    """Rows whose every key the mask removes (-inf) come out 0, not NaN; the others as the reference."""
    net = Net(rng, dtype)
    q, qv = net.input((1, 1, 70, 128))
    k, kv = net.input((1, 1, 100, 128))
    v, vv = net.input((1, 1, 100, 128))
    mv = rounded(rng.standard_normal((70, 100)), dtype)
    dead = [0, 13, 64, 69]
    mv[dead] = -np.inf
    net.feeds.append(mv.astype(np.float32))
    out = net.run(None, net.g.attention(q, k, v, net.g.input("mask", mv.shape)))[0]
    _assert_flash(net, True)
    want = reference(qv, kv, vv, mv)
    want[:, :, dead] = 0.0
    assert_close(out, rounded(want, dtype), dtype, reduction=128)


@pytest.mark.parametrize("target", ["nvvm:sm_80", "nvvm:sm_90"])
def test_flash_solver_applies(target):
    """f16/bf16 with head dims 16, 32, 64 and 128 take the flash kernel on mma.sync GPUs; others say why not."""
    solver, t = SOLVERS["attention_flash_mma"], parse_target(target)
    problem = lambda dtype, d: AttentionProblem(16, 512, 512, d, True, (512, 512), dtype)  # noqa: E731
    for d in (16, 32, 64, 128):
        assert solver.is_applicable(problem("f16", d), t) is None
    assert solver.is_applicable(problem("bf16", 128), t) is None
    assert "takes f16 or bf16" in solver.is_applicable(problem("f32", 64), t)
    assert "head dim 24" in solver.is_applicable(problem("f16", 24), t)
    assert "head dim 80" in solver.is_applicable(problem("f16", 80), t)
    assert "head dim 256" in solver.is_applicable(problem("f16", 256), t)
    assert solver.cost(problem("f16", 64), t) > 0


@pytest.mark.parametrize("d, flash", [(64, True), (128, True), (32, True), (80, False)])
def test_flash_kept_whole_on_nvvm(d, flash):
    """Compiled (not run) for sm_90: prim-decompose keeps the attention whole where the flash solver applies,
    prim-select chooses it and prim-tile emits its kernel; other head dims are decomposed into GEMMs."""
    g = Graph(dtype="f16")
    q, k, v = (g.input(n, (2, 2, 37, d)) for n in "qkv")
    g.output(g.attention(q, k, v, g.input("m", (37, 37)), causal=True))
    kinds = list(kernel_info(openprim.compiler.lower(g, "nvvm:sm_90")).values())
    if flash:
        assert kinds == [("attention", "attention_flash_mma")]
    else:
        assert "attention" not in [op for op, _ in kinds] and [op for op, _ in kinds].count("matmul") == 2


@pytest.mark.skipif(not shutil.which("ptxas"), reason="ptxas (CUDA toolkit) not on PATH")
@pytest.mark.parametrize("sq, d, causal, dense", [
    (512, 64, False, True), (512, 128, True, True), (2048, 128, False, True), (384, 64, True, True),
    (300, 128, True, True), (100, 64, False, True), (197, 64, False, False), (500, 128, False, False)])
def test_flash_wgmma_not_serialized(tmp_path, sq, d, causal, dense):
    """ptxas keeps the wgmma flash kernel's products asynchronous (no C7513: "wgmma.mma_async instructions
    are serialized", which costs up to 20%) and, where every key tile is whole, does not spill. Both broke on
    LLVM's register copies and loop shapes (the opaque moves of flash_attention_wgmma.py); ragged key tiles
    still spill a few bookkeeping values per item."""
    g = Graph(dtype="bf16")
    q, k, v = (g.input(n, (8, 16, sq, d)) for n in "qkv")
    g.output(g.attention(q, k, v, causal=causal))
    module = openprim.compiler.lower(g, "nvvm:sm_90")
    assert [s for _, s in kernel_info(module).values()] == ["attention_flash_wgmma"]
    (tmp_path / "k.ptx").write_bytes(device_image(module))
    run = subprocess.run(["ptxas", "-arch=sm_90a", "-v", "k.ptx", "-o", "k.cubin"], cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    assert "C7513" not in run.stderr, run.stderr
    if dense:
        assert "0 bytes spill stores" in run.stderr, run.stderr


def test_attention_explicit_scale(rng):
    out, want, _ = _attention(rng, "f32", 1, 2, 9, 11, 16, scale=0.3)
    assert_close(out, want, "f32", reduction=16)


@pytest.mark.skipif(TARGET != "cpu", reason="reads the CPU plan")
def test_decomposed_on_cpu(rng):
    """On the CPU attention runs as two batched GEMMs around a fused scale/mask kernel and a softmax."""
    _, _, net = _attention(rng, "f32", 1, 2, 9, 11, 16, causal=True, mask_shape=(1, 2, 9, 11))
    kinds = [op for op, _ in kernel_info(net.module).values()]
    assert "attention" not in kinds
    assert kinds.count("matmul") == 2 and "softmax" in kinds


@pytest.mark.parametrize("shapes, why", [
    (((1, 2, 8, 16), (1, 2, 9, 16), (1, 2, 9, 8)), "must have the same shape"),
    (((1, 2, 8, 16), (1, 3, 9, 16), (1, 3, 9, 16)), "must agree in batch, heads and head dim"),
    (((2, 8, 16), (2, 9, 16), (2, 9, 16)), "must be 4-d"),
])
def test_attention_shape_errors(shapes, why):
    g = Graph(dtype="f32")
    q, k, v = (g.input(n, s) for n, s in zip("qkv", shapes))
    with pytest.raises(OpenPrimError, match=why):
        g.attention(q, k, v)


def test_attention_mask_must_broadcast():
    g = Graph(dtype="f32")
    q, k, v = g.input("q", (1, 2, 8, 16)), g.input("k", (1, 2, 9, 16)), g.input("v", (1, 2, 9, 16))
    with pytest.raises(OpenPrimError, match="does not broadcast to the scores 1x2x8x9"):
        g.attention(q, k, v, g.input("m", (8, 8)))
    q, k, v = g.input("q4", (4, 2, 8, 16)), g.input("k4", (4, 2, 9, 16)), g.input("v4", (4, 2, 9, 16))
    with pytest.raises(OpenPrimError, match=r"nor tile their batch: a first dim dividing 4"):
        g.attention(q, k, v, g.input("m3", (3, 2, 8, 9)))


# ----------------------------------------------------------------------------- importers
def _graph_ops(graph) -> list[str]:
    return [n.op for n in graph.nodes if n.op != "constant"]


@pytest.mark.skipif(TARGET != "cpu", reason="compiles for the CPU")
@pytest.mark.parametrize("causal, masked", [(True, False), (False, True)])
def test_torch_sdpa_imports_as_attention(causal, masked):
    """F.scaled_dot_product_attention (causal, or with an additive float mask) through torch.export is one
    prim.attention, and the compiled graph matches torch eager in float64."""
    torch = pytest.importorskip("torch")
    from openprim.pyfrontend.torch import import_exported

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.randn(1, 3, 13, 21))

        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=self.mask if masked else None, is_causal=causal)

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(s, generator=gen) for s in [(2, 3, 13, 24), (2, 3, 21, 24), (2, 3, 21, 24)])
    model = M().eval()
    g, _ = import_exported(torch.export.export(model, (q, k, v)))
    assert _graph_ops(g).count("attention") == 1 and "softmax" not in _graph_ops(g)
    with torch.no_grad():
        want = model.double()(q.double(), k.double(), v.double()).numpy()
    out = openprim.compile(g)(q.numpy(), k.numpy(), v.numpy())
    assert_close(out, want, "f32", reduction=24)


@pytest.mark.skipif(TARGET != "cpu", reason="compiles for the CPU")
def test_onnx_bert_layer_attention_matched():
    """The BERT-base layer of examples/zoo_models.py through the ONNX importer: its MatMul/Transpose/Div/
    Softmax/MatMul chain is one attention op (the layer has one), and the layer still matches torch eager."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import zoo_models
    from openprim.pyfrontend.onnx import import_model

    model = zoo_models.get("bert_layer")
    g = import_model(zoo_models.to_onnx("bert_layer", module=model))
    assert _graph_ops(g).count("attention") == 1 and "softmax" not in _graph_ops(g)
    x = zoo_models.example_input("bert_layer")
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    assert_close(openprim.compile(g)(x.numpy()), want, "f32", reduction=3072)


@pytest.mark.skipif(TARGET != "cpu", reason="compiles for the CPU")
def test_onnx_pattern_with_mul_scale_and_mask(rng):
    """MatMul(Q, Transpose(K)) -> Mul(scale) -> Add(mask) -> Softmax -> MatMul(V) written with onnx.helper."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from openprim.pyfrontend.onnx import import_model

    shapes = {"q": (2, 3, 11, 16), "k": (2, 3, 19, 16), "v": (2, 3, 19, 16)}
    mask = rng.standard_normal((1, 1, 11, 19)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "c"], ["ss"]),
             helper.make_node("Add", ["ss", "mask"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(
        nodes, "attn", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3, 11, 16))],
        [numpy_helper.from_array(np.array(0.2, np.float32), "c"), numpy_helper.from_array(mask, "mask")])
    g = import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert _graph_ops(g) == ["attention"]
    feeds = [rng.standard_normal(s).astype(np.float32) for s in shapes.values()]
    out = openprim.compile(g)(*feeds)
    assert_close(out, reference(*(f.astype(np.float64) for f in feeds), mask.astype(np.float64), scale=0.2),
                 "f32", reduction=16)

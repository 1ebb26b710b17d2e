"""RMSNorm and LayerNorm, alone and fused with the residual add, against float64 numpy.

prim.rms_norm (y = h / sqrt(mean(h^2) + eps) * scale) and prim.layer_norm over one or two trailing
dimensions, where h is the input or, once prim-fuse folded an add into the norm (its `residual`
operand), the sum of two tensors read by the row kernel (kernels/cpu/rows.py, kernels/gpu/rows.py).
Row lengths 7, 37 and 769 (shorter than a vector, a masked tail; one row to 64); f32, f16 and bf16. Rows
of whole 16-byte vectors (40, 768, 1032, 4 x 48) take the GPU's warp-per-row kernel: a partly filled last
vector slot, rows not a multiple of the block's 8, and (1032 in f32) too long for it.

On the CPU every case runs here. On GPUs (OPENPRIM_TEST_TARGET=nvvm:sm_90) the numerics cases are
recorded for a GPU machine and replayed (helpers.run_on_gpu). The launch counts are pinned by compiling
for every target here (no device needed): a residual norm is one launch, a pre-LN sum that is also
returned stays an add, and a GEMM with bias + GELU/SiLU is one launch (the epilogue). The importers
(torch.export's aten.rms_norm, ONNX RMSNormalization-23) run on the CPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import openprim.compiler
import openprim.plan
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, kernel_info
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph
from openprim.base.target import parse_target

# the last: every dim normalized, which no row kernel takes: the reference semantics (kernels/semantics.py)
SHAPES = [((1, 7), 1), ((6, 37), 1), ((2, 3, 769), 1), ((64, 37), 1), ((3, 4, 37), 2), ((5, 37), 2),
          ((9, 40), 1), ((3, 5, 768), 1), ((11, 1032), 1), ((3, 4, 48), 2)]
SHAPE_IDS = ["one_row_7", "rows_37", "rows_769", "rows_64x37", "two_dims_4x37", "whole_5x37",
             "warp_40", "warp_768", "warp_1032", "warp_two_dims_4x48"]
TARGETS = ["cpu", "nvvm:sm_90", "rocdl:gfx942"]


def rms_norm(h, scale=None, eps=1e-5, normalized_ndim=1):
    """float64 reference: h / sqrt(mean(h^2) + eps) [* scale] over the trailing dims."""
    h = np.asarray(h, np.float64)
    axes = tuple(range(h.ndim - normalized_ndim, h.ndim))
    y = h / np.sqrt((h * h).mean(axis=axes, keepdims=True) + eps)
    return y if scale is None else y * np.asarray(scale, np.float64)


def _norm(net, op, h, shape, ndim, affine, eps):
    """The norm op on h with random parameters of the normalized shape; (result, float64 reference fn)."""
    s, sv = net.weight(shape[-ndim:]) if affine else (None, None)
    if op == "rms_norm":
        return net.g.rms_norm(h, s, eps=eps, normalized_ndim=ndim), lambda v: rms_norm(v, sv, eps, ndim)
    t, tv = net.weight(shape[-ndim:]) if affine else (None, None)
    return net.g.layer_norm(h, s, t, eps=eps, normalized_ndim=ndim), lambda v: ref.layer_norm(v, sv, tv, eps, ndim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("shape,ndim", SHAPES, ids=SHAPE_IDS)
def test_norm(rng, shape, ndim, op, residual, dtype):
    net = Net(rng, dtype)
    x, xv = net.input(shape, scale=2.0)
    h, hv = x, xv + 0.75          # a mean away from 0 (what layer_norm subtracts, what rms_norm keeps)
    net.feeds[-1] = (xv + 0.75).astype(np.float32)
    if residual:
        r, rv = net.input(shape)
        h, hv = x + r, hv + rv
    y, want = _norm(net, op, h, shape, ndim, affine=True, eps=1e-5)
    out, = net.run(None, y)
    if residual and TARGET == "cpu":  # the sum is summed inside the norm's kernel: one launch
        assert [o for _, o, _ in net.launches()] == [op]
    assert_close(out, want(hv), dtype, what=f"{op} {shape} residual={residual}")


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_norm_without_parameters(rng, op):
    net = Net(rng, "f32")
    x, xv = net.input((5, 769), scale=3.0)
    r, rv = net.input((5, 769))
    y, want = _norm(net, op, x + r, (5, 769), 1, affine=False, eps=1e-3)
    out, = net.run(None, y)
    assert_close(out, want(xv + rv), "f32", what=op)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_pre_ln_sum_also_returned(rng, dtype):
    """h = x + r is the next block's residual and the norm's input: both come out right (the add is
    its own kernel, ops having one result)."""
    net = Net(rng, dtype)
    x, xv = net.input((4, 37))
    r, rv = net.input((4, 37))
    h = x + r
    y, want = _norm(net, "rms_norm", h, (4, 37), 1, affine=True, eps=1e-6)
    out, hsum = net.run(None, y, h)
    assert_close(out, want(xv + rv), dtype, what="rms_norm(h)")
    assert_close(hsum, xv + rv, dtype, what="h")


def _plan_ops(g, target):
    """[(prim.op, solver)] of every launch of g compiled for target (compiled only: no device needed)."""
    module = openprim.compiler.lower(g, target)
    info = kernel_info(module)
    return [info[s["kernel"]] for s in openprim.plan.build_plan(module, parse_target(target))[0]["steps"]]


def _row_kernel_text(g, target, op):
    """The text of op's kernel after prim-tile on target."""
    text = str(openprim.compiler.lower(g, target, pipeline=f"prim-select{{target={target}}},prim-tile{{target={target}}}"))
    kernels = text[text.index("module @kernels"):]
    return kernels[kernels.index(f"func.func @{op}_"):].split("func.func", 2)[1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("target", TARGETS)
def test_residual_norm_is_one_row_kernel(target, op, dtype):
    g = Graph(dtype=dtype)
    x, r = g.input("x", (8, 769)), g.input("r", (8, 769))
    s = g.param("s", np.linspace(0.5, 1.5, 769))
    y = g.rms_norm(x + r, s) if op == "rms_norm" else g.layer_norm(x + r, s, g.param("t", np.ones(769)))
    g.output(y)
    assert _plan_ops(g, target) == [(op, "")]
    kernel = _row_kernel_text(g, target, op)
    assert ("gpu.all_reduce" if target != "cpu" else "vector.reduction") in kernel and "linalg." not in kernel
    assert kernel.count("arith.addf") >= 1


@pytest.mark.parametrize("target", TARGETS)
def test_sum_with_another_use_stays_an_add(target):
    g = Graph(dtype="f16")
    x, r = g.input("x", (8, 256)), g.input("r", (8, 256))
    h = x + r
    g.output(g.rms_norm(h), h)
    assert [o for o, _ in _plan_ops(g, target)] == ["add", "rms_norm"]


GEMM_SOLVER = {"cpu": "gemm_packed", "nvvm:sm_90": "gemm_wgmma", "rocdl:gfx942": "gemm_mfma"}


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("target", TARGETS)
def test_gemm_bias_activation_is_one_launch(target, act):
    """A transformer MLP's first GEMM: linear + bias + GELU/SiLU in the GEMM's epilogue, on the tensor
    cores (wgmma on sm_90, MFMA on gfx942)."""
    g = Graph(dtype="f16")
    x = g.input("x", (4, 64, 256))
    y = g.linear(x, g.param("w", np.ones((512, 256)) / 256), g.param("b", np.ones(512)))
    g.output(g.silu(y) if act == "silu" else g.gelu(y, "tanh" if act == "gelu_tanh" else "none"))
    assert _plan_ops(g, target) == [("matmul", GEMM_SOLVER[target])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_gemm_bias_activation_numerics(rng, act, dtype):
    net = Net(rng, dtype)
    x, xv = net.input((2, 33, 96))
    w, wv = net.weight((160, 96), scale=0.1)
    b, bv = net.weight((160,))
    y = net.g.linear(x, w, b)
    out, = net.run(None, net.g.silu(y) if act == "silu" else net.g.gelu(y))
    if TARGET == "cpu":
        assert [o for _, o, _ in net.launches()] == ["matmul"]
    assert_close(out, getattr(ref, act)(ref.linear(xv, wv, bv)), dtype, reduction=96, what=f"linear + {act}")


def test_rms_norm_scale_shape_is_checked():
    g = Graph()
    x = g.input("x", (4, 37))
    with pytest.raises(OpenPrimError, match=r"prim.rms_norm .*scale/shift must have shape 37, got 36"):
        g.rms_norm(x, g.param("s", np.ones(36)))


# ----------------------------------------------------------------------------- importers (CPU)
@pytest.mark.skipif(TARGET != "cpu", reason="importers: checked on the CPU")
def test_torch_rms_norm(rng):
    torch = pytest.importorskip("torch")
    from openprim.torch_backend import compile_module

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.RMSNorm(37)                       # eps None: float32's machine epsilon
            self.norm2 = torch.nn.RMSNorm([4, 37], eps=1e-3, elementwise_affine=False)
            with torch.no_grad():
                self.norm.weight.copy_(torch.from_numpy(rng.standard_normal(37)))

        def forward(self, x, r):
            return self.norm(x + r), self.norm2(x), torch.nn.functional.rms_norm(r, [37], eps=1e-4)

    m = Block().eval()
    x, r = (torch.from_numpy(rng.standard_normal((2, 4, 37)).astype(np.float32)) for _ in range(2))
    outs = compile_module(m, (x, r))(x, r)
    xv, rv, sv = x.double().numpy(), r.double().numpy(), m.norm.weight.detach().double().numpy()
    wants = [rms_norm(xv + rv, sv, float(np.finfo(np.float32).eps)), rms_norm(xv, None, 1e-3, 2),
             rms_norm(rv, None, 1e-4)]
    for out, want in zip(outs, wants):
        assert_close(np.asarray(out), want, "f32", what="torch rms_norm")


@pytest.mark.skipif(TARGET != "cpu", reason="importers: checked on the CPU")
def test_onnx_rms_normalization(rng):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from openprim.pyfrontend.onnx import import_model

    sv = rng.standard_normal((5, 37)).astype(np.float32)
    nodes = [helper.make_node("Add", ["x", "r"], ["h"]),
             helper.make_node("RMSNormalization", ["h", "s"], ["y"], axis=-2, epsilon=1e-4)]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 5, 37]) for n in ("x", "r", "y")]
    graph = helper.make_graph(nodes, "rms", io[:2], io[2:], [numpy_helper.from_array(sv, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    onnx.checker.check_model(model)
    g = import_model(model)
    x, r = (rng.standard_normal((3, 5, 37)).astype(np.float32) for _ in range(2))
    module = openprim.compiler.lower(g)
    exe = openprim.compiler.jit(module)
    assert [kernel_info(module)[s["kernel"]][0] for s in exe.plan["steps"]] == ["rms_norm"]
    want = rms_norm(x.astype(np.float64) + r, sv, 1e-4, 2)
    assert_close(exe(x, r), want, "f32", what="ONNX RMSNormalization")


@pytest.mark.skipif(TARGET != "cpu", reason="importers: checked on the CPU")
def test_onnx_decomposed_rms_norm(rng):
    """Pow, ReduceMean, Add, Sqrt, Div, Mul (an RMSNorm as exporters write it) after a residual Add:
    prim-fuse makes it one rms_norm with the residual, one launch."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from openprim.pyfrontend.onnx import import_model

    sv = rng.standard_normal(37).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
             numpy_helper.from_array(sv, "s"), numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    nodes = [helper.make_node("Add", ["x", "r"], ["h"]), helper.make_node("Pow", ["h", "two"], ["p"]),
             helper.make_node("ReduceMean", ["p", "axes"], ["m"], keepdims=1),
             helper.make_node("Add", ["m", "eps"], ["a"]), helper.make_node("Sqrt", ["a"], ["q"]),
             helper.make_node("Div", ["h", "q"], ["d"]), helper.make_node("Mul", ["d", "s"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 3, 37]) for n in ("x", "r", "y")]
    model = helper.make_model(helper.make_graph(nodes, "rms", io[:2], io[2:], inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    module = openprim.compiler.lower(import_model(model))
    exe = openprim.compiler.jit(module)
    assert [kernel_info(module)[s["kernel"]][0] for s in exe.plan["steps"]] == ["rms_norm"]
    x, r = (rng.standard_normal((4, 3, 37)).astype(np.float32) for _ in range(2))
    want = rms_norm(x.astype(np.float64) + r, sv, float(np.float32(1e-6)))
    assert_close(exe(x, r), want, "f32", what="decomposed ONNX RMSNorm")

"""The CPU row kernels (kernels/cpu/rows.py): softmax, log_softmax and layer_norm against float64 numpy.

Row lengths that are multiples of the 16 lanes, shorter than one vector, and with a masked tail; one row
(serial), a few rows, and enough rows for the threaded form (scf.forall); f32, f16 and bf16. Softmax
also on very large and very negative values (the max subtraction and exp's clamping) and with -inf
scores (masked positions: exactly 0 out, the rest normalized among themselves). layer_norm with and
without its scale and shift, over one and two trailing dimensions. Each case checks that the kernel
built is the row kernel (vector reductions, no linalg) before running it.
"""
from __future__ import annotations

import numpy as np
import pytest

import openprim.compiler
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, rounded
from openprim.kernels.cpu import vmath

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="a CPU kernel")

# (id, shape): rows x length with length % 16 of 0, < 16 and a tail; the last two are threaded
SHAPES = [
    ("one_row_7", (1, 7)),
    ("rows_16", (5, 16)),
    ("batched_37", (3, 4, 37)),
    ("threaded_600", (64, 600)),
    ("threaded_bert_128", (1, 12, 128, 128)),
]


def _uses_row_kernel(g, op: str) -> None:
    """The graph's kernel for `op` after prim-tile is the hand-written row kernel."""
    text = str(openprim.compiler.lower(g, pipeline="prim-select,prim-tile"))
    kernels = text[text.index("module @kernels"):]
    kernel = kernels[kernels.index(f"func.func @{op}_"):].split("func.func", 2)[1]
    assert "vector.reduction" in kernel and "linalg." not in kernel, f"{op}: not the row kernel:\n{kernel[:2000]}"


def _softmax(rng, dtype, shape, op="softmax", scale=1.0, offset=0.0, masked=False):
    net = Net(rng, dtype)
    x, xv = net.input(shape, scale=scale)
    if offset or masked:
        xv = xv + offset
        if masked:  # every other row: a third of its positions -inf (never the whole row)
            hit = (rng.uniform(size=shape) < 0.35) & (np.arange(shape[-1]) != shape[-1] // 2)
            hit[..., ::2, :] = False
            xv = np.where(hit, -np.inf, xv)
        xv = rounded(xv, dtype)
        net.feeds[-1] = xv.astype(np.float32)
    y = getattr(net.g, op)(x)
    out, = net.run(None, y)
    _uses_row_kernel(net.g, op)
    want = getattr(ref, op)(xv)
    if masked and op == "softmax":
        assert np.all(out[np.isinf(xv)] == 0), "masked positions are not exactly 0"
    if masked and op == "log_softmax":
        keep = ~np.isinf(xv)
        assert np.all(np.isneginf(out[~keep])), "masked positions are not -inf"
        out, want = np.where(keep, out, 0.0), np.where(keep, want, 0.0)
    assert_close(out, want, dtype, what=f"{op} {shape}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [s for _, s in SHAPES], ids=[i for i, _ in SHAPES])
def test_softmax_rows(rng, shape, op, dtype):
    _softmax(rng, dtype, shape, op, scale=3.0)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("offset", [3e4, -3e4], ids=["large", "very_negative"])
def test_softmax_stable_at_large_magnitudes(rng, op, offset):
    # values far beyond exp's range (x - max is what reaches exp), spread wide enough that many underflow
    _softmax(rng, "f32", (9, 45), op, scale=40.0, offset=offset)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_masked_inf(rng, op, dtype):
    _softmax(rng, dtype, (6, 53), op, scale=2.0, masked=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", ["scale_shift", "scale", "shift", "none"])
@pytest.mark.parametrize("shape,ndim", [((1, 7), 1), ((3, 5, 37), 1), ((70, 768), 1), ((4, 3, 25), 2)],
                         ids=["one_row_7", "rows_37", "threaded_768", "two_dims"])
def test_layer_norm_rows(rng, shape, ndim, affine, dtype):
    net = Net(rng, dtype)
    x, xv = net.input(shape, scale=2.0)
    xv = rounded(xv + 1.5, dtype)   # a mean far from 0
    net.feeds[-1] = xv.astype(np.float32)
    s, sv = net.weight(shape[-ndim:]) if "scale" in affine else (None, None)
    t, tv = net.weight(shape[-ndim:]) if "shift" in affine else (None, None)
    y = net.g.layer_norm(x, s, t, eps=1e-5, normalized_ndim=ndim)
    out, = net.run(None, y)
    _uses_row_kernel(net.g, "layer_norm")
    assert_close(out, ref.layer_norm(xv, sv, tv, 1e-5, ndim), dtype, what=f"layer_norm {shape} {affine}")


def test_exp_polynomial_bounds():
    # the clamp keeps 2^n a normal float: n = floor(x log2 e + 1/2) >= -126 at EXP_LO; at EXP_HI it reaches
    # 128, which exp caps at 127 (r then up to ln 2), and EXP_HI stays under ln of the largest float
    n = np.floor(np.array([vmath.EXP_LO, vmath.EXP_HI], np.float32) * np.float32(np.log2(np.e)) + 0.5)
    assert n[0] >= -126 and n[1] == 128
    assert np.float32(vmath.EXP_HI) < np.log(np.finfo(np.float32).max)

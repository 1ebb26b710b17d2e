"""The CPU pooling kernels (kernels/cpu/pool.py): max_pool2d, avg_pool2d, global_avg_pool against float64 numpy.

Odd sizes; channel counts that are one block of 4 x 16 lanes, several blocks (the block loop), and blocks
with leftover vectors and a C % 16 tail; stride 2, asymmetric padding, ceil_mode (windows past the padded
extent), dilation, rectangular windows, count_include_pad both ways; batch > 1 and pools big enough for the
threaded form (scf.forall); f32, f16 and bf16. Each case checks that the kernel built is the hand-written
one (vector loads, no linalg) before running it. NCHW graphs run the same kernels (prim-select makes the
pools NHWC); with layout=keep the NCHW pools keep the reference lowering.
"""
from __future__ import annotations

import numpy as np
import pytest

import openprim.compiler
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close
from openprim.kernels.cpu import pool as cpu_pool

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="a CPU kernel")


def _kernel_text(g, op: str) -> str:
    text = str(openprim.compiler.lower(g, pipeline="prim-select,prim-tile"))
    kernels = text[text.index("module @kernels"):]
    return kernels[kernels.index(f"func.func @{op}_"):].split("func.func", 2)[1]


def _uses_pool_kernel(g, op: str, threaded: bool | None = None) -> None:
    """The graph's kernel for `op` after prim-tile is the hand-written pool kernel."""
    kernel = _kernel_text(g, op)
    assert "vector.load" in kernel and "linalg." not in kernel and "tensor.pad" not in kernel, \
        f"{op}: not the pool kernel:\n{kernel[:2000]}"
    if threaded is not None:
        assert ("scf.forall" in kernel) == threaded, f"{op}: threaded should be {threaded}:\n{kernel[:2000]}"


def _pool(rng, dtype, shape, op, layout="NHWC", threaded=None, **kw):
    net = Net(rng, dtype, layout=layout)
    x, xv = net.input(shape)
    y = getattr(net.g, op)(x, **kw)
    out, = net.run(None, y)
    _uses_pool_kernel(net.g, op, threaded)
    want = getattr(ref, op)(xv, layout=layout, **kw)
    assert_close(out, want, dtype, what=f"{op} {shape} {kw}")
    return out, want


# (id, input shape NHWC, attributes): odd sizes; C = 37 (2 vectors + a tail of 5), 83 (one block + a vector + 3),
# 130 (two blocks in a loop + a tail of 2), 64 (one block, no tail)
MAX_CASES = [
    ("resnet_stem_3x3s2p1", (1, 56, 56, 64), dict(kernel=3, stride=2, padding=1)),
    ("odd_s2_c37", (2, 13, 11, 37), dict(kernel=3, stride=2, padding=1)),
    ("asym_pad_ceil_c83", (1, 15, 14, 83), dict(kernel=3, stride=2, padding=(1, 0, 0, 1), ceil_mode=True)),
    ("googlenet_ceil_c130", (1, 17, 17, 130), dict(kernel=3, stride=2, ceil_mode=True)),
    ("s1_same_c19", (2, 9, 10, 19), dict(kernel=3, stride=1, padding=1)),
    ("dilated_c37", (1, 14, 13, 37), dict(kernel=3, stride=1, padding=(1, 1, 1, 1), dilation=2)),
    ("dilated_s2_ceil_c20", (1, 16, 15, 20), dict(kernel=(3, 2), stride=(2, 3), padding=(1, 1, 0, 1),
                                                  dilation=(2, 3), ceil_mode=True)),
    ("rect_2x5_c5", (3, 7, 12, 5), dict(kernel=(2, 5), stride=(1, 2), padding=(0, 2, 1, 1))),
    ("whole_image_c70", (2, 5, 6, 70), dict(kernel=(5, 6), stride=1)),
]


@pytest.mark.parametrize("case", [c for _, *c in MAX_CASES], ids=[i for i, *_ in MAX_CASES])
def test_max_pool(rng, case):
    shape, kw = case
    _pool(rng, "f32", shape, "max_pool2d", **kw)


AVG_CASES = [
    ("densenet_2x2s2_c128", (1, 28, 28, 128), dict(kernel=2, stride=2)),
    ("odd_s2_pad_c37", (2, 13, 11, 37), dict(kernel=3, stride=2, padding=1)),
    ("asym_pad_ceil_c83", (1, 15, 14, 83), dict(kernel=3, stride=2, padding=(1, 0, 0, 1), ceil_mode=True)),
    ("ceil_past_padding_c21", (2, 10, 9, 21), dict(kernel=3, stride=2, padding=1, ceil_mode=True)),
    ("s1_same_c130", (1, 9, 7, 130), dict(kernel=3, stride=1, padding=1)),
    ("rect_c5", (3, 8, 11, 5), dict(kernel=(2, 4), stride=(2, 3), padding=(1, 2, 0, 1), ceil_mode=True)),
]


@pytest.mark.parametrize("include_pad", [True, False], ids=["include_pad", "exclude_pad"])
@pytest.mark.parametrize("case", [c for _, *c in AVG_CASES], ids=[i for i, *_ in AVG_CASES])
def test_avg_pool(rng, case, include_pad):
    shape, kw = case
    _pool(rng, "f32", shape, "avg_pool2d", count_include_pad=include_pad, **kw)


def test_avg_pool_divisors_differ(rng):
    """The two divisor rules give different results at the border (so the cases above tell them apart)."""
    kw = dict(kernel=3, stride=2, padding=1, ceil_mode=True)
    a, _ = _pool(rng, "f32", (1, 10, 9, 21), "avg_pool2d", count_include_pad=True, **kw)
    b, _ = _pool(rng, "f32", (1, 10, 9, 21), "avg_pool2d", count_include_pad=False, **kw)
    assert np.abs(a - b).max() > 1e-3


GLOBAL_CASES = [
    ("resnet_7x7_c512", (1, 7, 7, 512)),
    ("squeezenet_13x13_c1000", (1, 13, 13, 1000)),
    ("batch_c37", (3, 5, 9, 37)),
    ("batch_c2048", (2, 7, 7, 2048)),
    ("c64_56x56", (1, 56, 56, 64)),
]


@pytest.mark.parametrize("case", [c for _, c in GLOBAL_CASES], ids=[i for i, _ in GLOBAL_CASES])
def test_global_avg_pool(rng, case):
    _pool(rng, "f32", case, "global_avg_pool")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, kw", [
    ("max_pool2d", dict(kernel=3, stride=2, padding=(1, 0, 0, 1), ceil_mode=True)),
    ("avg_pool2d", dict(kernel=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("global_avg_pool", {}),
], ids=["max", "avg", "global"])
def test_dtypes(rng, op, kw, dtype):
    _pool(rng, dtype, (2, 13, 12, 83), op, **kw)


@pytest.mark.parametrize("dtype", DTYPES)
def test_threaded_rows(rng, dtype):
    """Big enough for scf.forall over the (n, oh) rows (batch 2: rows cross images) and over the (n, channel
    block)s of global_avg_pool."""
    assert min(2 * (56 * 53 + 28 * 27) * 48, 2 * (29 * 27 + 1) * 170) >= cpu_pool.SERIAL_ELEMENTS
    _pool(rng, dtype, (2, 56, 53, 48), "max_pool2d", threaded=True, kernel=3, stride=2, padding=1)
    _pool(rng, dtype, (2, 56, 53, 48), "avg_pool2d", threaded=True, kernel=3, stride=1, padding=1)
    _pool(rng, dtype, (2, 29, 27, 170), "global_avg_pool", threaded=True)


def test_small_pool_serial(rng):
    """Under SERIAL_ELEMENTS elements moved (input + output): one thread (no fork/join)."""
    assert 2 * (6 * 7 + 3 * 4) * 37 < cpu_pool.SERIAL_ELEMENTS
    _pool(rng, "f32", (2, 6, 7, 37), "max_pool2d", threaded=False, kernel=3, stride=2, padding=1)


@pytest.mark.parametrize("op, kw", [("max_pool2d", dict(kernel=3, stride=2, padding=1, ceil_mode=True)),
                                    ("avg_pool2d", dict(kernel=3, stride=2, padding=1, count_include_pad=False)),
                                    ("global_avg_pool", {})], ids=["max", "avg", "global"])
def test_nchw_graph(rng, op, kw):
    """An NCHW graph's pool runs the same NHWC kernel (prim-select's layout transposes around it)."""
    _pool(rng, "f32", (2, 21, 13, 11), op, layout="NCHW", **kw)


def test_nchw_kept_uses_reference(rng):
    """With the NCHW layout kept, the pool keeps the reference lowering (and is still right)."""
    net = Net(rng, "f32", layout="NCHW")
    x, xv = net.input((1, 5, 9, 8))
    net.g.output(net.g.max_pool2d(x, 3, 2, 1))
    module = openprim.compiler.lower(net.g, layout="keep")
    out = openprim.compiler.jit(module)(*net.feeds)
    assert_close(out, ref.max_pool2d(xv, 3, 2, 1), "f32", what="NCHW max_pool2d")
    assert cpu_pool.pool_kernel("k", [("%a", "memref<1x5x9x8xf32>"), ("%b", "memref<1x5x5x4xf32>")],
                                "max_pool2d", {"layout": "NCHW"}, "f32") is None

"""global_avg_pool on GPUs (kernels/gpu/pool.py global_pool_kernel) against float64 numpy.

Odd images (7x7, 13x11, 112x112) and channel counts that take a 16-byte vector per thread (32, 96,
1000 in f16/bf16), narrower ones (130: 2 channels a thread; 3: one) and more than one channel chunk
(1280); batch 1 (few blocks) to 12 (split over 49 pixel ranges of two loop steps each, summed by a
second launch); f32, f16, bf16; data with a nonzero mean (a dropped or doubled pixel shows in f32) or
centred. On a GPU target (OPENPRIM_TEST_TARGET, recorded and replayed through helpers.py) every case
must run on the hand-written kernel; on the CPU the same cases run on the CPU pool kernel (the
reference path). The compile-only tests check the kernel's plan and build it for both GPU targets.

    python -m pytest test/python/test_gpu_pool.py -q
    OPENPRIM_TEST_TARGET=nvvm:sm_90 OPENPRIM_GPU_RECORD=out/gpu_cases_gap python -m pytest test/python/test_gpu_pool.py -q
"""
from __future__ import annotations

import re

import pytest

import openprim.compiler
import openprim.plan
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close
from openprim.kernels.gpu.pool import BLOCKS, UNROLL, GlobalPoolPlan
from openprim.pyfrontend import Graph
from openprim.base.target import parse_target

GPU = TARGET != "cpu"

# (id, NHWC input, data with a nonzero mean)
CASES = [
    ("7x7_c3", (2, 7, 7, 3), True),
    ("13x11_c32", (3, 13, 11, 32), False),
    ("13x11_c96", (2, 13, 11, 96), True),
    ("7x7_c130", (2, 7, 7, 130), True),
    ("7x7_c1000", (1, 7, 7, 1000), False),
    ("7x7_c1280_two_chunks", (2, 7, 7, 1280), True),
    ("112x112_c32_b1", (1, 112, 112, 32), True),
    ("efficientnet_se_56x56_c96", (4, 56, 56, 96), False),
]


def _launches(net: Net) -> list[str]:
    return [op for _, op, _ in net.launches()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_global_avg_pool(case, dtype, rng):
    what, shape, positive = case
    net = Net(rng, dtype, layout="NHWC")
    x, xv = net.input(shape, positive=positive)
    out, = net.run(None, net.g.global_avg_pool(x))
    assert_close(out, ref.global_avg_pool(xv, layout="NHWC"), dtype, what=what)
    assert _launches(net) == ["global_avg_pool"]


def test_several_steps_a_split(rng):
    """A pool big enough that each split takes two loop steps (the step's offset), the last split one
    pixel short (the clamped, zeroed loads): 12 x 12543 pixels of 32 channels."""
    shape = (12, 111, 113, 32)
    plan = GlobalPoolPlan(shape[0], shape[1] * shape[2], shape[3], "f32")
    assert plan.groups == 2 and plan.splits * plan.groups * UNROLL * plan.rows > shape[1] * shape[2]
    net = Net(rng, "f32", layout="NHWC")
    x, xv = net.input(shape, positive=True)
    out, = net.run(None, net.g.global_avg_pool(x))
    assert_close(out, ref.global_avg_pool(xv, layout="NHWC"), "f32", what="two steps a split")


def test_nchw_graph(rng):
    """An NCHW graph (a torch model): prim-select runs the pool in NHWC behind a transpose."""
    net = Net(rng, "f32", layout="NCHW")
    x, xv = net.input((2, 24, 9, 13), positive=True)
    out, = net.run(None, net.g.global_avg_pool(x))
    assert_close(out, ref.global_avg_pool(xv, layout="NCHW"), "f32", what="nchw")
    assert "global_avg_pool" in _launches(net)


@pytest.mark.parametrize("n,h,w,c,dtype", [(32, 112, 112, 32, "f16"), (32, 56, 56, 96, "f16"), (1, 7, 7, 1280, "f16"),
                                           (2, 13, 11, 130, "f32"), (256, 7, 7, 1024, "bf16"), (1, 1, 1, 3, "f32")])
def test_plan(n, h, w, c, dtype):
    """The split covers every pixel and channel once: the splits' ranges tile H*W with only the last
    ragged, the chunks' lanes cover C; blocks of at most 256 threads; about BLOCKS blocks where the
    image holds that much work."""
    p = GlobalPoolPlan(n, h * w, c, dtype)
    span = p.groups * UNROLL * p.rows
    assert (p.splits - 1) * span < h * w <= p.splits * span
    assert c % p.vec == 0 and p.vec * {"f32": 4, "f16": 2, "bf16": 2}[dtype] <= 16
    assert (p.chunks - 1) * p.lanes < c // p.vec <= p.chunks * p.lanes
    assert p.lanes * p.rows <= 256
    blocks = n * p.chunks * p.splits
    if p.groups > 1:
        assert BLOCKS / 2 <= blocks <= BLOCKS, blocks
    assert blocks <= max(BLOCKS, n * p.chunks)


def _lowered(target: str, shape, dtype: str) -> str:
    g = Graph(layout="NHWC", dtype=dtype)
    g.output(g.global_avg_pool(g.input("x", shape)))
    return openprim.compiler.lower(g, target)


@pytest.mark.parametrize("target", ["nvvm:sm_90", "nvvm:sm_80", "rocdl:gfx942"])
@pytest.mark.parametrize("shape,dtype,loads,launches", [
    ((32, 112, 112, 32), "f16", "v4.b32", 2),      # split over pixels: partial sums, then a second launch
    ((2, 13, 11, 130), "bf16", "v2.b16", 2),       # 130 channels: 2 a thread, 12 splits of 12 pixels
    ((2, 7, 7, 64), "f32", "v4.b32", 1),           # one loop step a thread: no split, one launch
])
def test_compiles(target, shape, dtype, loads, launches):
    """Every GPU target builds the kernel (a gpu.binary) with the planned launches; on NVIDIA the PTX
    reads whole channel vectors (16 bytes where C allows) and reduces through shared memory."""
    module = _lowered(target, shape, dtype)
    text = str(module)
    assert "gpu.binary" in text
    kernels = openprim.plan.build_plan(module, parse_target(target))[0]["kernels"]
    (kernel,) = [k for name, k in kernels.items() if name.startswith("global_avg_pool")]
    assert len(kernel["launches"]) == launches, kernel
    n, h, w, c = shape
    p = GlobalPoolPlan(n, h * w, c, dtype)
    assert kernel["launches"][0]["grid"] == [p.chunks, p.splits, n]
    assert kernel["launches"][0]["block"] == [p.lanes, p.rows, 1]
    assert kernel["scratch_bytes"] >= (n * p.splits * c * 4 if launches == 2 else 0)
    if target.startswith("nvvm"):
        found = set(re.findall(r"ld\.global\.nc\.(v\d\.b\d+|b\d+)", text))
        assert found == {loads} if loads == "v4.b32" else loads in found, found
        assert "bar.sync" in text and "st.shared" in text

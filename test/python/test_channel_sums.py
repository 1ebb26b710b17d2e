"""Per-channel sums of channels-last maps (kernels/cpu/channel_sums.py on the CPU): batch norm's statistics,
its training forward and backward in NHWC, group norm, and reduces over every dim but the last (and, on GPUs, over the
dims around a run of kept ones: an NCHW map's channel sums), against float64 numpy.

Shapes cover one chunk of rows run serially, many chunks split between the threads with a short last chunk,
channel counts below, at and past a vector (3, 16, 37, 130: the C % 16 tail masked) and past one group of
channel vectors; reductions over the trailing dims (on GPUs a block per row: a vocabulary's maximum, rows
shorter than a block, a ragged end past the unrolled loop); f16 and bf16 maps are widened to f32 and rounded once."""
from __future__ import annotations

import numpy as np
import pytest

import openprim
import reference as ref
from openprim.pyfrontend import Graph

from helpers import TARGET, assert_close, rounded, run_on_gpu

SHAPES = [(1, 3, 5, 16), (2, 7, 9, 3), (3, 33, 31, 37), (2, 19, 23, 130), (8, 56, 56, 64)]


def run(g: Graph, feeds: list) -> list:
    res = run_on_gpu(g, feeds)[2] if TARGET != "cpu" else openprim.compile(g)(*feeds)
    return list(res) if isinstance(res, (tuple, list)) else [res]


def data(shape, dtype, seed, offset=0.0):
    """Random values rounded to dtype, off zero by `offset` (a mean the two-pass variance must handle)."""
    return rounded(np.random.default_rng(seed).standard_normal(shape) * 2 + offset, dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_statistics_training_backward(shape, dtype):
    C = shape[-1]
    x, dy = data(shape, dtype, sum(shape), offset=3.0), data(shape, dtype, C)
    scale, shift = data((C,), dtype, 1) + 1, data((C,), dtype, 2)
    g = Graph(dtype=dtype)
    xi, dyi, si, bi = g.input("x", shape), g.input("dy", shape), g.input("s", (C,)), g.input("b", (C,))
    mean, inv = g.batch_norm_statistics(xi, layout="NHWC")
    g.output(mean)
    g.output(inv)
    g.output(g.batch_norm_training(xi, si, bi, layout="NHWC"))
    for t in g.batch_norm_backward(dyi, xi, si, mean, inv, layout="NHWC"):
        g.output(t)
    out = run(g, [x, dy, scale, shift])
    want_mean, want_inv = ref.batch_norm_statistics(x, layout="NHWC")
    rows = x.size // C
    assert_close(out[0], want_mean, dtype, rows, "mean")
    assert_close(out[1], want_inv, dtype, what="inv_std")
    assert_close(out[2], ref.batch_norm_training(x, scale, shift, layout="NHWC"), dtype, what="training")
    # the backward from the statistics as computed (as a training step uses them)
    stats = [rounded(o, dtype) for o in out[:2]]
    for got, want, what in zip(out[3:], ref.batch_norm_backward(dy, x, scale, *stats, layout="NHWC"),
                               ("dx", "dscale", "dshift")):
        assert_close(got, want, dtype, rows if what != "dx" else 1, what)


@pytest.mark.parametrize("shape,groups", [((1, 5, 7, 16), 8), ((2, 7, 9, 6), 3), ((3, 33, 31, 40), 4),
                                          ((2, 24, 24, 64), 32), ((4, 3, 3, 130), 1), ((8, 56, 56, 64), 32)])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_group_norm(shape, groups, dtype):
    """Group norm of an NHWC map: statistics per sample and group (a sample's rows never share a chunk with
    the next sample's), channels per group 1 to 130, a mean far from zero."""
    C = shape[-1]
    x = data(shape, dtype, sum(shape) + groups, offset=4.0)
    scale, shift = data((C,), dtype, 1) + 1, data((C,), dtype, 2)
    g = Graph(dtype=dtype)
    g.output(g.group_norm(g.input("x", shape), groups, g.input("s", (C,)), g.input("b", (C,)), eps=1e-4,
                          layout="NHWC"))
    assert_close(run(g, [x, scale, shift])[0], ref.group_norm(x, groups, scale, shift, 1e-4, "NHWC"), dtype,
                 what="group_norm")


@pytest.mark.parametrize("shape,axes,keepdims", [((2, 9, 11, 37), [0, 1, 2], 0), ((8, 56, 56, 64), [0, 1, 2], 1),
                                                 ((300, 130), [0], 0), ((5, 7, 16), [-3, -2], 1)])
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min"])
def test_reduce_leading_dims(shape, axes, keepdims, kind):
    x = data(shape, "f32", len(shape) + shape[-1], offset=-1.0)
    g = Graph()
    g.output(g.reduce(g.input("x", shape), kind, axes, keepdims=bool(keepdims)))
    want = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind](x, axis=tuple(axes),
                                                                                 keepdims=bool(keepdims))
    assert_close(run(g, [x])[0], want, "f32", x.size // shape[-1] if kind in ("sum", "mean") else 1)


@pytest.mark.parametrize("shape,axes,keepdims", [
    ((4, 64, 7, 7), [0, 2, 3], 0),        # an NCHW map's channel sums (a batch norm's gradients in NCHW)
    ((3, 37, 9, 11), [0, 2, 3], 1),
    ((2, 5, 130, 3), [0, 3], 0),          # two kept dims, 650 "channels" of 3 values
    ((6, 40, 1000), [0, 2], 0),           # rows longer than a warp's pass
    ((16, 8, 3), [2], 0)])                # nothing before the kept dims
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("kind", ["sum", "mean"])
def test_reduce_around_kept_dims(shape, axes, keepdims, dtype, kind):
    """Sums over the dims before and after a run of kept ones (on GPUs: a warp per row of the trailing
    dims, then the channel sums of those rows' totals)."""
    x = data(shape, dtype, sum(shape), offset=0.5)
    g = Graph(dtype=dtype)
    g.output(g.reduce(g.input("x", shape), kind, axes, keepdims=bool(keepdims)))
    want = {"sum": np.sum, "mean": np.mean}[kind](x, axis=tuple(axes), keepdims=bool(keepdims))
    reduced = int(np.prod([shape[a] for a in axes]))
    assert_close(run(g, [x])[0], want, dtype, reduced)


@pytest.mark.parametrize("shape,axes,keepdims", [
    ((1, 50257), [-1], True), ((16, 50257), [1], False), ((3, 37), [-1], True), ((5, 7, 9, 130), [-2, -1], True),
    ((40, 8192), [-1], False), ((2, 33, 4097), [2], True), ((7, 300), [0, 1], False)])   # the last: a 0-d total
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min"])
def test_reduce_trailing_dims(shape, axes, keepdims, dtype, kind):
    """Reductions of each row of the trailing dims (greedy decoding's maximum over a vocabulary), a row's
    extreme placed at a random column and an infinity that is not the answer present, so that a missed load changes max and min."""
    x = data(shape, dtype, sum(shape) + len(axes), offset=0.25)
    rows = x.reshape(-1, int(np.prod([shape[a] for a in axes])))
    rng = np.random.default_rng(len(shape))
    for r in range(rows.shape[0]):
        rows[r, rng.integers(rows.shape[1])] = 40.0 if r % 2 else -40.0
    if kind in ("max", "min"):
        rows[0, -1] = -np.inf if kind == "max" else np.inf
    g = Graph(dtype=dtype)
    g.output(g.reduce(g.input("x", shape), kind, axes, keepdims=keepdims))
    want = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind](
        x.astype(np.float64), axis=tuple(axes), keepdims=keepdims)
    assert_close(run(g, [x])[0], want, dtype, rows.shape[1] if kind in ("sum", "mean") else 1)

"""Integer and bool tensors: every op that takes or makes them, on random data against numpy written out
here (not the importers' or the Graph's own evaluation), with odd shapes, broadcasting and negative
indices; gather's run-time bounds check; dtype promotion; what float-only ops and the runtime refuse.

GPU targets run through the record/replay of helpers.run_on_gpu like every other op test."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import openprim
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph
from openprim.runtime import load

from helpers import TARGET, assert_close, rounded, run_on_gpu

INT_NP = {"i64": np.int64, "i32": np.int32, "bool": np.bool_}


def run(g: Graph, feeds: list, *outputs):
    """The outputs of g on feeds (numpy arrays in their own dtypes), on TARGET."""
    g.output(*outputs)
    if TARGET != "cpu":
        res = run_on_gpu(g, feeds)[2]
    else:
        res = openprim.compile(g)(*feeds)
    return list(res) if isinstance(res, tuple) else [res]


def ints(rng, shape, lo=-1000, hi=1000, dtype="i64"):
    return rng.integers(lo, hi, shape).astype(INT_NP[dtype])


def shapes_that_broadcast(rng, rank):
    """Two shapes of `rank` (odd sizes) that broadcast, some axes 1 in one of them, and their result."""
    full = tuple(int(d) for d in rng.integers(1, 7, rank) * 2 + 1)
    a = tuple(1 if rng.random() < 0.3 else d for d in full)
    b = tuple(1 if rng.random() < 0.3 and a[i] != 1 else d for i, d in enumerate(full))
    return a, b[rng.integers(0, 2):]


@pytest.mark.parametrize("src,dst", [("f32", "i64"), ("f32", "i32"), ("f16", "i64"), ("i64", "f32"), ("i64", "f16"),
                                     ("i32", "bf16"), ("bool", "f32"), ("f32", "bool"), ("i64", "i32"),
                                     ("i32", "i64"), ("bool", "i64"), ("i64", "bool")])
def test_cast(src, dst):
    rng = np.random.default_rng(zlib.crc32(f"{src}-{dst}".encode()))   # the same in every process (GPU replay)
    shape = (3, 5, 7)
    if src in INT_NP:
        x = ints(rng, shape, 0 if src == "bool" else -3000, 2 if src == "bool" else 3000, src)
    else:
        x = rounded(rng.standard_normal(shape) * 40, src)
        x[0, 0, :3] = [0.0, -0.0, 2.0]
    g = Graph(dtype=src if src not in INT_NP else "f32")
    y = g.cast(g.input("x", shape, src), dst)
    out = run(g, [x.astype(np.float32) if src not in INT_NP else x], y)[0]
    if dst == "bool":
        want = x != 0
    elif dst in INT_NP:
        want = np.trunc(np.asarray(x, np.float64)).astype(INT_NP[dst])   # toward zero, as torch and C
    else:
        want = rounded(np.asarray(x, np.float64), dst)
    assert out.dtype == (np.float32 if dst == "bf16" else INT_NP.get(dst, {"f32": np.float32, "f16": np.float16}.get(dst)))
    np.testing.assert_array_equal(np.asarray(out, np.float64), np.asarray(want, np.float64))


@pytest.mark.parametrize("dtype", ["f32", "f16", "i64", "i32", "bool"])
@pytest.mark.parametrize("seed", [0, 1])
def test_compare(dtype, seed):
    rng = np.random.default_rng(seed)
    sa, sb = shapes_that_broadcast(rng, 3)
    if dtype in INT_NP:
        lo, hi = (0, 2) if dtype == "bool" else (-4, 4)      # a narrow range: many equal pairs
        a, b = ints(rng, sa, lo, hi, dtype), ints(rng, sb, lo, hi, dtype)
    else:
        a, b = (rounded(rng.integers(-4, 4, s) * 0.5, dtype) for s in (sa, sb))
    g = Graph(dtype=dtype if dtype not in INT_NP else "f32")
    x, y = g.input("a", sa, dtype), g.input("b", sb, dtype)
    kinds = ("eq", "ne") if dtype == "bool" else ("eq", "ne", "lt", "le", "gt", "ge")
    feeds = [np.asarray(v, np.float32) if dtype == "f32" else np.asarray(v, np.float16) if dtype == "f16" else v
             for v in (a, b)]
    outs = run(g, feeds, *[getattr(g, k)(x, y) for k in kinds])
    ops = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}
    for k, out in zip(kinds, outs):
        assert out.dtype == np.bool_, k
        np.testing.assert_array_equal(out, ops[k](a, b), err_msg=k)


def test_logical_and_where():
    rng = np.random.default_rng(3)
    sa, sb = shapes_that_broadcast(rng, 3)
    a, b = rng.random(sa) < 0.5, rng.random(sb) < 0.5
    full = np.broadcast_shapes(sa, sb)
    u, v = rng.standard_normal(full), rng.standard_normal((full[-1],))
    i, j = ints(rng, full, dtype="i64"), ints(rng, (1,) * len(full), dtype="i64")
    g = Graph()
    x, y = g.input("a", sa, "bool"), g.input("b", sb, "bool")
    fu, fv = g.input("u", full), g.input("v", (full[-1],))
    ii, jj = g.input("i", full, "i64"), g.input("j", (1,) * len(full), "i64")
    outs = run(g, [a, b, u.astype(np.float32), v.astype(np.float32), i, j],
               g.logical_and(x, y), g.logical_or(x, y), g.logical_xor(x, y), g.logical_not(x),
               g.where(g.logical_and(x, y), fu, fv), g.where(x, ii, jj), g.where(y, 1.5, fu))
    want = [a & b, a | b, a ^ b, ~a]
    for out, w in zip(outs[:4], want):
        np.testing.assert_array_equal(out, w)
    assert_close(outs[4], np.where(a & b, rounded(u, "f32"), rounded(v, "f32")), "f32")
    np.testing.assert_array_equal(outs[5], np.where(a, i, j))
    assert_close(outs[6], np.where(b, 1.5, rounded(u, "f32")), "f32")


@pytest.mark.parametrize("dtype", ["i64", "bool", "f32"])
def test_broadcast_to(dtype):
    rng = np.random.default_rng(4)
    x = ints(rng, (3, 1, 5), 0, 2, "bool") if dtype == "bool" else ints(rng, (3, 1, 5)) if dtype == "i64" else \
        rng.standard_normal((3, 1, 5)).astype(np.float32)
    g = Graph()
    y = g.broadcast_to(g.input("x", x.shape, dtype), (2, 3, 7, -1))
    out = run(g, [x], y)[0]
    np.testing.assert_array_equal(out, np.broadcast_to(x, (2, 3, 7, 5)))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("data_dtype,index_dtype", [("f32", "i64"), ("f16", "i32"), ("i64", "i64"), ("bool", "i32")])
def test_gather(axis, data_dtype, index_dtype):
    rng = np.random.default_rng(zlib.crc32(f"{axis}-{data_dtype}-{index_dtype}".encode()))
    shape = (7, 5, 3)
    n = shape[axis]
    idx = ints(rng, (2, 9), -n, n, index_dtype)            # negative indices count from the end
    data = rounded(rng.standard_normal(shape), data_dtype) if data_dtype in ("f32", "f16") else \
        ints(rng, shape, 0, 2 if data_dtype == "bool" else 10**12, data_dtype)
    g = Graph(dtype=data_dtype if data_dtype in ("f32", "f16") else "f32")
    x = g.input("x", shape, data_dtype)
    i = g.input("i", idx.shape, index_dtype)
    feed = data.astype(np.float32 if data_dtype == "f32" else np.float16) if data_dtype in ("f32", "f16") else data
    out = run(g, [feed, idx], g.gather(x, i, axis))[0]
    np.testing.assert_array_equal(np.asarray(out, np.float64), np.take(np.asarray(data, np.float64), idx, axis=axis))


@pytest.mark.parametrize("shape,axis,index_shape", [
    ((6, 9, 37), 1, (2, 5)),            # rows of 37: four vectors and a scalar tail, one thread
    ((3, 50, 8, 64), 1, (70,)),         # 630 rows of 512: the pairs split between the threads
    ((2, 9, 16), 1, (9,)),              # a filter's taps reversed (an input gradient's flip)
    ((40, 8), 0, (3, 4)),               # rows of exactly one vector
    ((4, 6, 5), 1, (3, 3)),             # rows of 5: copied by scalars
    ((5, 7), 1, (7,)),                  # fewer than 16 indices along the innermost axis: one masked gather
    ((3, 2, 40), 2, (2, 19))])          # 38 along the innermost axis: two gathers of 16, a masked one of 6
@pytest.mark.parametrize("dtype", ["f32", "f16", "i64", "bool"])
def test_gather_whole_rows(shape, axis, index_shape, dtype):
    """Gathers of whole rows and of single elements (on the CPU: kernels/cpu/gather.py copies rows, vectors
    then scalars, and gathers elements 16 at a time, masked for the rest), negative indices counted from
    the end."""
    rng = np.random.default_rng(zlib.crc32(f"{shape}-{dtype}".encode()))
    n = shape[axis]
    idx = np.arange(n)[::-1].copy() if index_shape == (n,) else ints(rng, index_shape, -n, n)
    data = rounded(rng.standard_normal(shape), dtype) if dtype in ("f32", "f16") else \
        ints(rng, shape, 0, 2 if dtype == "bool" else 10**12, dtype)
    g = Graph(dtype=dtype if dtype in ("f32", "f16") else "f32")
    feed = data.astype(np.float32 if dtype == "f32" else np.float16) if dtype in ("f32", "f16") else data
    out = run(g, [feed, idx], g.gather(g.input("x", shape, dtype), g.input("i", idx.shape, "i64"), axis))[0]
    np.testing.assert_array_equal(np.asarray(out, np.float64), np.take(np.asarray(data, np.float64), idx, axis=axis))


@pytest.mark.parametrize("shape", [(3, 4), (9, 31)])   # counted in one loop; per row of [9, 31], then summed
def test_embedding_with_a_constant_table_and_an_out_of_range_id(shape):
    """An id outside [-V, V) is an error after the run, naming the line that made the lookup and counting the
    bad ids; the ids in range give the rows."""
    rng = np.random.default_rng(5)
    table = rng.standard_normal((11, 6)).astype(np.float32)
    g = Graph()
    ids = g.input("ids", shape, "i64")
    g.output(g.embedding(ids, g.param("table", table)))
    exe = openprim.compile(g) if TARGET == "cpu" else None
    good = ints(rng, shape, -11, 11)
    if exe is None:
        pytest.skip("the error path runs on the CPU here; GPU runs of the check are in scripts/gpu_check.sh")
    np.testing.assert_array_equal(exe(good), table[good])
    for bad in (11, -12, 2**40):
        ids_bad = good.copy()
        ids_bad[-1, 1] = bad
        ids_bad[0, -1] = bad
        with pytest.raises(OpenPrimError, match=r"test_integer_ops.py:\d+: prim.gather \(axis 0 of 11x6\): an index "
                                                r"is outside \[-11, 11\) \(2 of them\)"):
            exe(ids_bad)
    np.testing.assert_array_equal(exe(good), table[good])    # the check resets with each run


def test_constant_out_of_range_indices_are_an_error_at_build():
    g = Graph()
    x = g.input("x", (4, 3))
    with pytest.raises(OpenPrimError, match=r"indices in \[0, 4\], outside \[-4, 4\)"):
        g.gather(g.param("t", np.ones((4, 3))), np.array([0, 4]), 0)
    with pytest.raises(OpenPrimError, match=r"test_integer_ops.py:\d+: error: prim.gather \(axis 0 of 4x3\): the "
                                            r"indices hold values in \[-9, 7\], outside \[-4, 4\)"):
        g.gather(x, [1, 7, -9], 0)               # of a computed tensor: checked as the op is added too
    with pytest.raises(OpenPrimError, match="indices must be integers"):
        g.gather(x, g.input("f", (2,)), 0)


@pytest.mark.parametrize("axis", [0, 2, -2])
def test_gather_elements(axis):
    rng = np.random.default_rng(6 + axis)
    shape = (5, 4, 7)
    n = shape[axis]
    ishape = tuple(n + 2 if a == axis % 3 else d - (a == 0) for a, d in enumerate(shape))
    idx = ints(rng, ishape, -n, n)
    data = rng.standard_normal(shape).astype(np.float32)
    g = Graph()
    out = run(g, [data, idx], g.gather_elements(g.input("x", shape), g.input("i", ishape, "i64"), axis))[0]
    sub = data[tuple(slice(0, d) if a != axis % 3 else slice(None) for a, d in enumerate(ishape))]
    want = np.take_along_axis(sub, np.where(idx < 0, idx + n, idx), axis=axis)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", ["i64", "i32", "f32", "f16"])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumsum(dtype, exclusive, reverse):
    rng = np.random.default_rng(7)
    shape, axis = (3, 9, 5), 1
    x = ints(rng, shape, -10**6, 10**6, dtype) if dtype in INT_NP else rounded(rng.standard_normal(shape), dtype)
    g = Graph(dtype=dtype if dtype not in INT_NP else "f32")
    feed = x if dtype in INT_NP else x.astype(np.float32 if dtype == "f32" else np.float16)
    out = run(g, [feed], g.cumsum(g.input("x", shape, dtype), axis, exclusive, reverse))[0]
    y = np.asarray(x, np.float64 if dtype not in INT_NP else np.int64)
    y = np.flip(y, axis) if reverse else y
    s = np.cumsum(y, axis) - (y if exclusive else 0)
    want = np.flip(s, axis) if reverse else s
    if dtype in INT_NP:
        np.testing.assert_array_equal(out, want.astype(INT_NP[dtype]))
    else:
        assert_close(out, want, dtype, reduction=shape[axis])


def test_integer_arithmetic_is_exact():
    """Values beyond 2^24 (where f32 would round) and negative floor division, broadcasting with numbers."""
    rng = np.random.default_rng(8)
    a = ints(rng, (4, 7), -2**40, 2**40)
    b = ints(rng, (7,), 1, 1000) * rng.choice([-1, 1], 7)
    g = Graph()
    x, y = g.input("a", a.shape, "i64"), g.input("b", b.shape, "i64")
    outs = run(g, [a, b], g.add(x, y), g.sub(x, 3), g.mul(y, y), g.floor_divide(x, y), g.maximum(x, y),
               g.minimum(x, 5), g.add(2**33, y))
    for out, want in zip(outs, [a + b, a - 3, b * b, a // b, np.maximum(a, b), np.minimum(a, 5), 2**33 + b]):
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, want)


def test_promotion_follows_torch():
    g = Graph()
    i64, i32 = g.input("a", (3,), "i64"), g.input("b", (3,), "i32")
    flag, f = g.input("c", (3,), "bool"), g.input("d", (3,))
    assert g.add(i64, 0.5).dtype == "f32"          # a float number makes integers the graph's float dtype
    assert g.add(i64, 2).dtype == "i64"
    assert g.add(i32, i64).dtype == "i64"
    assert g.add(flag, 1).dtype == "i64"
    assert g.mul(f, i64).dtype == "f32"
    assert g.where(flag, i32, 7).dtype == "i32"
    half = Graph(dtype="f16")
    assert half.add(half.input("x", (2,)), 1).dtype == "f16"
    assert half.add(half.input("y", (2,), "i64"), 0.5).dtype == "f16"


def test_float_only_ops_refuse_integers():
    g = Graph()
    x = g.input("x", (1, 3, 8, 8), "i64")
    with pytest.raises(OpenPrimError, match=r"prim.conv2d .*takes float tensors \(f32, f16, bf16\), got i64: cast"):
        g.conv2d(x, g.param("w", np.ones((4, 3, 3, 3)), "i64"))
    with pytest.raises(OpenPrimError, match="takes float tensors"):
        g.softmax(x)
    with pytest.raises(OpenPrimError, match="dtype must be one of"):
        g.input("y", (2,), "i8")


def test_runtime_refuses_inputs_that_do_not_fit():
    g = Graph()
    a, b, c = g.input("a", (3,), "i64"), g.input("b", (3,), "i32"), g.input("c", (3,), "bool")
    g.output(g.add(a, g.cast(b, "i64")), g.logical_not(c))
    exe = openprim.compile(g)
    s, flags = exe(np.array([1.0, 2.0, 3.0]), np.array([1, 2, 3], np.int64), np.array([0, 1, 1]))
    np.testing.assert_array_equal(s, [2, 4, 6])
    np.testing.assert_array_equal(flags, [True, False, False])
    with pytest.raises(OpenPrimError, match=r"input 'a' holds non-integral values \(float64\); a i64 tensor"):
        exe(np.array([1.5, 2, 3]), np.ones(3, np.int32), np.ones(3, bool))
    with pytest.raises(OpenPrimError, match=r"input 'b' has values in \[1, 4294967296\], beyond the range of i32"):
        exe(np.ones(3), np.array([1, 2, 2**32]), np.ones(3, bool))
    with pytest.raises(OpenPrimError, match=r"input 'c' has values in \[0, 2\], beyond the range of bool \[0, 1\]"):
        exe(np.ones(3), np.ones(3, np.int32), np.array([0, 1, 2]))


def test_constants_are_evaluated_at_build():
    """Position ids from arange, their embedding rows, a mask from comparisons: constants, no kernels."""
    rng = np.random.default_rng(9)
    table = rng.standard_normal((16, 4)).astype(np.float32)
    g = Graph()
    x = g.input("x", (2, 8, 4))
    pos = g.embedding(g.reshape(g.arange(8), (1, 8)), g.param("pos", table))
    causal = g.ge(g.reshape(g.arange(8), (8, 1)), g.reshape(g.arange(8), (1, 8)))
    y = g.add(x, pos)
    z = g.where(causal, 0.0, -1e9)
    assert {n.op for n in g.nodes} == {"constant", "add"}
    assert not g.checks
    xv = rng.standard_normal((2, 8, 4)).astype(np.float32)
    g.output(y, g.add(z, 0.0))
    got_y, got_z = openprim.compile(g)(xv)
    assert_close(got_y, xv + table[None, :8], "f32")
    np.testing.assert_array_equal(got_z, np.where(np.tril(np.ones((8, 8), bool)), 0.0, -1e9).astype(np.float32))


def test_artifact_keeps_its_checks(tmp_path):
    """The bounds check travels in the artifact's plan: a loaded .oprim refuses an out-of-range id too."""
    g = Graph()
    ids = g.input("ids", (4,), "i32")
    g.output(g.embedding(ids, g.param("t", np.arange(12.0).reshape(6, 2))))
    path = tmp_path / "m.oprim"
    openprim.compiler.save(g, str(path))
    exe = load(str(path))
    np.testing.assert_array_equal(exe(np.array([0, 5, -1, 2], np.int32)), np.arange(12.0).reshape(6, 2)[[0, 5, -1, 2]])
    with pytest.raises(OpenPrimError, match=r"an index is outside \[-6, 6\) \(2 of them\)"):
        exe(np.array([6, 0, -7, 1], np.int32))


def test_isnan_isinf_any_all():
    x = np.array([[1.0, np.nan, -np.inf], [0.0, 2.0, 3.0]], np.float32)
    g = Graph()
    t = g.input("x", x.shape)
    i = g.input("i", (2, 3), "i64")
    outs = run(g, [x, np.array([[0, 0, 5], [0, 0, 0]])], g.isnan(t), g.isinf(t), g.any(g.isinf(t)),
               g.all(g.gt(t, -1.0), [1], True), g.any(i, [0]))
    np.testing.assert_array_equal(outs[0], np.isnan(x))
    np.testing.assert_array_equal(outs[1], np.isinf(x))
    assert outs[2].dtype == np.bool_ and bool(outs[2]) is True
    np.testing.assert_array_equal(outs[3], [[False], [True]])
    np.testing.assert_array_equal(outs[4], [False, False, True])

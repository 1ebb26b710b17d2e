"""Integer and bool tensors on the ONNX path (issue 30): the ops that map them, and Hugging Face language
models exported with torch.onnx.export.

(a) one small model per newly mapped op, built with onnx.helper on random data (odd shapes, negative
    indices, broadcasting), compiled on the CPU and compared with numpy: Cast, the comparisons, And/Or/Xor/
    Not, Where, Gather with run-time indices (out of range: an error after the run that names the node),
    GatherElements, GatherND, CumSum, Expand and Tile of integers, Range/ConstantOfShape/Shape/Size as
    constants, integer arithmetic (Div truncates toward zero), Mod, IsNaN/IsInf; constant folding; the
    NaN guard of torch.onnx's attention (Where(IsNaN(softmax), 0, softmax)) folded into prim.attention;
    Attention-23 with a computed boolean mask;
(b) BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, GPT-2, the T5 encoder and MobileBERT from their configs
    (random weights, 2 layers, hidden 64, vocab 1000), input_ids and an attention mask with padding,
    exported with torch.onnx.export, imported, compiled and compared with PyTorch eager.
"""
from __future__ import annotations

import importlib.util
import math
import os
import sys
import zlib

import numpy as np
import pytest

pytest.importorskip("onnx")
import onnx  # noqa: E402
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import openprim  # noqa: E402
from openprim.base.errors import OpenPrimError  # noqa: E402

from openprim.pyfrontend.onnx import import_model  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))   # language_models (torch)


# ----------------------------------------------------------------------------- helpers
node = helper.make_node


def make(nodes, inputs, outputs, inits=None, opset=17):
    """A model: inputs {name: (elem type, shape)}, outputs {name: elem type} (shapes from shape inference),
    inits {name: array}."""
    if isinstance(nodes, onnx.NodeProto):
        nodes = [nodes]
    ins = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()]
    m = helper.make_model(helper.make_graph(nodes, "t", ins, outs, inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 23 else 8
    inferred = onnx.shape_inference.infer_shapes(m)
    for o, io in zip(m.graph.output, inferred.graph.output):
        o.CopyFrom(io)
    return m


def run(model, **feeds):
    """The model imported, compiled on the CPU and run: its outputs as a tuple."""
    out = openprim.compile(import_model(model))(**feeds)
    return out if isinstance(out, tuple) else (out,)


def same(got, want):
    """Integer and bool results exactly (dtype included), floats to fp32 rounding."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "iub":
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def odd(rng, n, lo=2, hi=9):
    """n random sizes in [lo, hi], the first odd."""
    sizes = [int(v) for v in rng.integers(lo, hi + 1, n)]
    sizes[0] |= 1
    return tuple(sizes)


# ----------------------------------------------------------------------------- (a) the ops
def test_integer_and_bool_inputs_and_outputs(rng):
    """int64 -> i64, int32 -> i32, bool -> bool, int8/uint8 -> i64 inputs; the outputs in their types."""
    nodes = [node("Add", ["a", "a"], ["a2"]), node("Mul", ["b", "b"], ["b2"]),
             node("Not", ["c"], ["nc"]), node("Sub", ["d", "e"], ["de"])]
    m = make(nodes, {"a": (T.INT64, (3, 5)), "b": (T.INT32, (7,)), "c": (T.BOOL, (2, 3)), "d": (T.INT8, (4,)),
                     "e": (T.UINT8, (4,))},
             {"a2": T.INT64, "b2": T.INT32, "nc": T.BOOL, "de": T.INT8})
    g = import_model(m)
    assert [t.dtype for t in g.inputs] == ["i64", "i32", "bool", "i64", "i64"]
    a, b = rng.integers(-50, 50, (3, 5)), rng.integers(-1000, 1000, 7).astype(np.int32)
    c, d, e = rng.random((2, 3)) < 0.5, rng.integers(-100, 100, 4).astype(np.int8), rng.integers(0, 200, 4)
    a2, b2, nc, de = run(m, a=a, b=b, c=c, d=d, e=e.astype(np.uint8))
    same(a2, a + a), same(b2, b * b), same(nc, ~c)
    same(de, d.astype(np.int64) - e)   # computed in i64 (what int8 holds, exactly)


def test_unsupported_element_types():
    m = make(node("Identity", ["x"], ["y"]), {"x": (T.STRING, (2,))}, {"y": T.STRING})
    with pytest.raises(OpenPrimError, match="ONNX input 'x' has element type STRING; OpenPrim supports float"):
        import_model(m)
    m = make(node("Relu", ["x"], ["y"]), {"x": (T.DOUBLE, (2,))}, {"y": T.DOUBLE})
    with pytest.raises(OpenPrimError, match="ONNX input 'x' is float64"):
        import_model(m)
    big = np.array([2 ** 63 + 5], np.uint64)
    m = make(node("Add", ["x", "c"], ["y"]), {"x": (T.UINT64, (1,))}, {"y": T.UINT64}, {"c": big})
    with pytest.raises(OpenPrimError, match="uint64 constant 'c' has values beyond int64"):
        import_model(m)


def test_cast(rng):
    """Cast of computed tensors between float, integer and bool types: float -> int truncates toward zero,
    anything -> bool is != 0."""
    to = {"i64": T.INT64, "i32": T.INT32, "b": T.BOOL, "f": T.FLOAT, "h": T.FLOAT16, "u8": T.UINT8}
    nodes = [node("Cast", ["x"], ["x_" + k], to=v) for k, v in to.items()]
    nodes += [node("Cast", ["n"], ["n_f"], to=T.FLOAT), node("Cast", ["n"], ["n_b"], to=T.BOOL),
              node("Cast", ["n"], ["n_i32"], to=T.INT32), node("Cast", ["p"], ["p_f"], to=T.FLOAT),
              node("Cast", ["p"], ["p_i"], to=T.INT64),
              node("CastLike", ["n", "x"], ["n_like"])]
    outs = {"x_" + k: v for k, v in to.items()}
    outs.update(n_f=T.FLOAT, n_b=T.BOOL, n_i32=T.INT32, p_f=T.FLOAT, p_i=T.INT64, n_like=T.FLOAT)
    m = make(nodes, {"x": (T.FLOAT, (3, 7)), "n": (T.INT64, (5, 1, 3)), "p": (T.BOOL, (9,))}, outs)
    x = (rng.standard_normal((3, 7)) * 6).astype(np.float32)
    x[0, :3] = [0.0, -0.0, 2.0]
    x_u8 = np.abs(x)
    n, p = rng.integers(-3, 4, (5, 1, 3)), rng.random(9) < 0.5
    got = run(m, x=x, n=n, p=p)
    want = [x.astype(np.int64), x.astype(np.int32), x != 0, x, x, x_u8.astype(np.int64)]
    want += [n.astype(np.float32), n != 0, n.astype(np.int32), p.astype(np.float32), p.astype(np.int64),
             n.astype(np.float32)]
    got = list(got)
    got[5] = run(m, x=x_u8, n=n, p=p)[5]   # UINT8 of non-negative values (negative ones: ONNX's wrapping)
    for g_, w in zip(got, want):
        same(g_, w)


@pytest.mark.parametrize("elem", [T.FLOAT, T.INT64, T.INT32])
def test_comparisons(rng, elem):
    """Equal, Less, LessOrEqual, Greater, GreaterOrEqual with broadcasting; small integers make ties."""
    ops = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
           "GreaterOrEqual": np.greater_equal}
    p, q, r = odd(rng, 3)
    nodes = [node(op, ["a", "b"], [op]) for op in ops]
    m = make(nodes, {"a": (elem, (p, 1, r)), "b": (elem, (q, r))}, {op: T.BOOL for op in ops})
    dt = {T.FLOAT: np.float32, T.INT64: np.int64, T.INT32: np.int32}[elem]
    a, b = rng.integers(-3, 3, (p, 1, r)).astype(dt), rng.integers(-3, 3, (q, r)).astype(dt)
    if elem == T.FLOAT:
        a += np.float32(0.5) * (rng.random((p, 1, r)) < 0.3)
    for got, f in zip(run(m, a=a, b=b), ops.values()):
        same(got, f(a, b))


def test_logical_ops(rng):
    ops = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
    nodes = [node(op, ["a", "b"], [op]) for op in ops] + [node("Not", ["a"], ["Not"])]
    m = make(nodes, {"a": (T.BOOL, (2, 3, 7)), "b": (T.BOOL, (7,))}, {**{op: T.BOOL for op in ops}, "Not": T.BOOL})
    a, b = rng.random((2, 3, 7)) < 0.5, rng.random(7) < 0.5
    got = run(m, a=a, b=b)
    for g_, f in zip(got, ops.values()):
        same(g_, f(a, b))
    same(got[3], ~a)


def test_where(rng):
    """A computed condition selecting float and integer values, the three broadcast; a constant branch."""
    nodes = [node("Where", ["c", "x", "y"], ["f"]), node("Where", ["c", "i", "k"], ["n"])]
    m = make(nodes, {"c": (T.BOOL, (3, 1, 6)), "x": (T.FLOAT, (5, 1)), "y": (T.FLOAT, (3, 5, 6)),
                     "i": (T.INT64, (6,))}, {"f": T.FLOAT, "n": T.INT64}, {"k": np.array(-7, np.int64)})
    c, x = rng.random((3, 1, 6)) < 0.5, rng.standard_normal((5, 1)).astype(np.float32)
    y, i = rng.standard_normal((3, 5, 6)).astype(np.float32), rng.integers(-9, 9, 6)
    f, n = run(m, c=c, x=x, y=y, i=i)
    same(f, np.where(c, x, y)), same(n, np.where(c, i, -7))


def test_gather_runtime_indices(rng):
    """An embedding lookup (a weight table, int64 ids with negative ones) and a gather along axis 1 of a
    computed tensor with int32 indices, and a 0-d index."""
    vocab, dim, b, s_, n = int(rng.integers(20, 60)) | 1, *odd(rng, 3), int(rng.integers(2, 9))
    xs = odd(rng, 3)
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    nodes = [node("Gather", ["table", "ids"], ["emb"]),
             node("Gather", ["x", "j"], ["cols"], axis=1),
             node("Gather", ["x", "s"], ["row"], axis=-3)]
    m = make(nodes, {"ids": (T.INT64, (b, s_)), "x": (T.FLOAT, xs), "j": (T.INT32, (n,)),
                     "s": (T.INT64, ())}, {"emb": T.FLOAT, "cols": T.FLOAT, "row": T.FLOAT}, {"table": table})
    ids, x = rng.integers(-vocab, vocab, (b, s_)), rng.standard_normal(xs).astype(np.float32)
    ids[0, :2] = [-vocab, vocab - 1]
    j, s = rng.integers(-xs[1], xs[1], n).astype(np.int32), np.array(-1, np.int64)
    emb, cols, row = run(m, ids=ids, x=x, j=j, s=s)
    same(emb, table[ids]), same(cols, np.take(x, j, axis=1)), same(row, x[-1])


def test_gather_out_of_range_is_an_error_after_the_run(rng):
    table = rng.standard_normal((10, 3)).astype(np.float32)
    m = make(node("Gather", ["table", "ids"], ["emb"], name="word_embeddings"),
             {"ids": (T.INT64, (2, 5))}, {"emb": T.FLOAT}, {"table": table})
    exe = openprim.compile(import_model(m))
    ok = rng.integers(0, 10, (2, 5))
    same(exe(ids=ok), table[ok])
    bad = ok.copy()
    bad[1, 3] = 10
    with pytest.raises(OpenPrimError, match=r"ONNX node 'word_embeddings' \(Gather\): indices 'ids': .*"
                                            r"an index is outside \[-10, 10\) \(1 of them\)"):
        exe(ids=bad)
    bad[1, 3] = -11
    with pytest.raises(OpenPrimError, match="word_embeddings"):
        exe(ids=bad)


def test_gather_constant_indices(rng):
    """Constant indices, negative ones too, on computed float data (slices), integer and bool data."""
    idx = np.array([[2, -1], [0, -4]], np.int64)
    nodes = [node("Gather", ["x", "i"], ["xf"], axis=1), node("Gather", ["n", "i"], ["xn"], axis=1),
             node("Gather", ["b", "i"], ["xb"], axis=1)]
    m = make(nodes, {"x": (T.FLOAT, (3, 5)), "n": (T.INT64, (3, 5)), "b": (T.BOOL, (3, 5))},
             {"xf": T.FLOAT, "xn": T.INT64, "xb": T.BOOL}, {"i": idx})
    x, n, b = rng.standard_normal((3, 5)).astype(np.float32), rng.integers(-9, 9, (3, 5)), rng.random((3, 5)) < .5
    for got, data in zip(run(m, x=x, n=n, b=b), (x, n, b)):
        same(got, np.take(data, idx, axis=1))
    bad = make(node("Gather", ["n", "i"], ["y"], name="g"), {"n": (T.INT64, (3, 5))}, {"y": T.INT64},
               {"i": np.array([5], np.int64)})
    with pytest.raises(OpenPrimError, match=r"ONNX node 'g' \(Gather, opset 17\): indices \[5\] are out of range"):
        import_model(bad)


def _gather_elements(x, idx, axis):
    axis %= x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    sub = x[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(idx.shape))]
    return np.take_along_axis(sub, idx, axis)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(rng, axis):
    """Run-time indices (negative ones too, narrower than the data off the axis) and constant ones."""
    x = rng.standard_normal(odd(rng, 3, 3)).astype(np.float32)
    n = x.shape[axis]
    shp = [int(rng.integers(1, d + 1)) for d in x.shape]   # narrower than the data off the axis
    shp[axis] = int(rng.integers(1, 10))
    idx = rng.integers(-n, n, shp)
    const = rng.integers(-n, n, shp)
    nodes = [node("GatherElements", ["x", "i"], ["y"], axis=axis),
             node("GatherElements", ["x", "c"], ["z"], axis=axis)]
    m = make(nodes, {"x": (T.FLOAT, x.shape), "i": (T.INT64, tuple(shp))}, {"y": T.FLOAT, "z": T.FLOAT}, {"c": const})
    y, z = run(m, x=x, i=idx)
    same(y, _gather_elements(x, idx, axis)), same(z, _gather_elements(x, const, axis))


def test_gather_elements_out_of_range():
    m = make(node("GatherElements", ["x", "i"], ["y"], axis=1, name="ge"),
             {"x": (T.INT64, (2, 3)), "i": (T.INT64, (2, 2))}, {"y": T.INT64})
    exe = openprim.compile(import_model(m))
    x = np.arange(6).reshape(2, 3)
    same(exe(x=x, i=np.array([[0, -1], [2, 1]])), np.array([[0, 2], [5, 4]]))
    with pytest.raises(OpenPrimError, match=r"ONNX node 'ge' \(GatherElements\).*outside \[-3, 3\)"):
        exe(x=x, i=np.array([[0, 3], [2, 1]]))


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_constant_indices(rng, batch_dims):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    if batch_dims == 0:
        idx = np.stack([rng.integers(-3, 3, (2, 6)), rng.integers(-4, 4, (2, 6))], -1)
        want = x[idx[..., 0], idx[..., 1]]
    else:
        idx = rng.integers(-4, 4, (3, 2, 1))
        want = np.stack([x[b][idx[b, :, 0]] for b in range(3)])
    m = make(node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims), {"x": (T.FLOAT, x.shape)},
             {"y": T.FLOAT}, {"i": idx})
    same(run(m, x=x)[0], want)
    # the attention-mask form: every element in order, one reshape
    whole = np.stack(np.meshgrid(np.arange(3), np.arange(4), indexing="ij"), -1)[:, None]
    m = make(node("GatherND", ["b", "i"], ["y"]), {"b": (T.BOOL, (3, 4))}, {"y": T.BOOL}, {"i": whole})
    assert [n.op for n in import_model(m).nodes] == ["reshape"]
    b = rng.random((3, 4)) < 0.5
    same(run(m, b=b)[0], b[:, None, :])


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_constant_indices(rng, reduction):
    """MViTv2's in-place add into a slice of the attention scores, as torch.onnx exports it: ScatterND with
    constant indices, whole elements (k = rank) with a repeated position and negative indices, and slices
    (k < rank); against numpy in float64."""
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    for idx, upd_shape in [(np.array([[0, 1, 2], [2, -1, 0], [0, 1, 2], [1, 3, -5]]), (4,)),
                           (np.array([[[2], [0]], [[1], [-3]]]), (2, 2, 4, 5)),
                           (np.array([[1, 2], [0, 3], [2, 0]]), (3, 5))]:
        upd = rng.standard_normal(upd_shape).astype(np.float32)
        want = x.astype(np.float64).copy()
        for j in np.ndindex(*idx.shape[:-1]):
            where = tuple(idx[j])
            want[where] = want[where] + upd[j] if reduction == "add" else upd[j]
        m = make(node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction),
                 {"x": (T.FLOAT, x.shape), "u": (T.FLOAT, upd.shape)}, {"y": T.FLOAT}, {"i": idx}, opset=18)
        got = run(m, x=x, u=upd)[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"indices {idx.tolist()}")


def test_scatter_nd_refusals():
    m = make(node("ScatterND", ["x", "i", "u"], ["y"], reduction="mul"), {"x": (T.FLOAT, (3, 4)), "u": (T.FLOAT, (2,))},
             {"y": T.FLOAT}, {"i": np.array([[0, 1], [2, 2]])}, opset=18)
    with pytest.raises(OpenPrimError, match=r"ScatterND.*reduction='mul' \(only 'none' and 'add'\)"):
        import_model(m)
    m = make(node("ScatterND", ["x", "i", "u"], ["y"]), {"x": (T.FLOAT, (3, 4)), "u": (T.FLOAT, (1,))},
             {"y": T.FLOAT}, {"i": np.array([[3, 0]])})
    with pytest.raises(OpenPrimError, match=r"ScatterND.*out of range for the axes \[3, 4\]"):
        import_model(m)


def _cumsum(x, axis, exclusive, reverse):
    y = np.flip(x, axis) if reverse else x
    s = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        s = s - y
    return np.flip(s, axis) if reverse else s


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(rng, exclusive, reverse):
    nodes = [node("CumSum", ["n", "ax"], ["sn"], exclusive=exclusive, reverse=reverse),
             node("CumSum", ["x", "ax32"], ["sx"], exclusive=exclusive, reverse=reverse)]
    a, b, c = odd(rng, 3)
    m = make(nodes, {"n": (T.INT64, (a, b)), "x": (T.FLOAT, (c, a, b))}, {"sn": T.INT64, "sx": T.FLOAT},
             {"ax": np.array(1, np.int64), "ax32": np.array(-2, np.int32)})
    n, x = rng.integers(-50, 50, (a, b)), rng.standard_normal((c, a, b)).astype(np.float32)
    sn, sx = run(m, n=n, x=x)
    same(sn, _cumsum(n, 1, exclusive, reverse)), same(sx, _cumsum(x, 1, exclusive, reverse))


def test_expand_and_tile_of_integers(rng):
    """Expand of computed int and bool tensors (a constant shape), Tile of an integer one."""
    nodes = [node("Expand", ["n", "shape"], ["en"]), node("Expand", ["b", "shape"], ["eb"]),
             node("Tile", ["n", "reps"], ["tn"]), node("Expand", ["x", "shape"], ["ex"])]
    m = make(nodes, {"n": (T.INT64, (3, 1)), "b": (T.BOOL, (1, 5)), "x": (T.FLOAT, (3, 1))},
             {"en": T.INT64, "eb": T.BOOL, "tn": T.INT64, "ex": T.FLOAT},
             {"shape": np.array([2, 3, 5], np.int64), "reps": np.array([2, 3], np.int64)})
    n, b, x = rng.integers(-9, 9, (3, 1)), rng.random((1, 5)) < .5, rng.standard_normal((3, 1)).astype(np.float32)
    en, eb, tn, ex = run(m, n=n, b=b, x=x)
    same(en, np.broadcast_to(n, (2, 3, 5))), same(eb, np.broadcast_to(b, (2, 3, 5)))
    same(tn, np.tile(n, (2, 3))), same(ex, np.broadcast_to(x, (2, 3, 5)))


def test_shape_range_constant_of_shape_are_constants(rng):
    """Shape, Size, Range and ConstantOfShape of static shapes, and what is computed from them, are
    constants: only the additions with the input are left."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "one"], ["w"]),
             node("Range", ["zero", "w", "one"], ["r"]), node("Add", ["x", "r"], ["y"]),
             node("ConstantOfShape", ["s"], ["k"], value=numpy_helper.from_array(np.array([7], np.int64))),
             node("Size", ["x"], ["sz"]), node("Mul", ["k", "sz"], ["k2"]),
             node("Sub", ["x", "k2"], ["z"])]
    m = make(nodes, {"x": (T.INT64, (3, 5))}, {"y": T.INT64, "z": T.INT64},
             {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)})
    assert sorted(n.op for n in import_model(m).nodes if n.op != "constant") == ["add", "sub"]
    x = rng.integers(-100, 100, (3, 5))
    y, z = run(m, x=x)
    same(y, x + np.arange(5)), same(z, x - 7 * 15)


@pytest.mark.parametrize("elem", [T.INT64, T.INT32])
def test_integer_arithmetic(rng, elem):
    """Add, Sub, Mul, Min, Max, Neg, Abs, Relu, Clip, Sum of integers (negative ones too), broadcasting."""
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Min": np.minimum, "Max": np.maximum}
    unary = {"Neg": np.negative, "Abs": np.abs, "Relu": lambda v: np.maximum(v, 0)}
    nodes = [node(op, ["a", "b"], [op]) for op in binary] + \
        [node(op, ["a"], [op]) for op in unary] + \
        [node("Clip", ["a", "lo", "hi"], ["Clip"]), node("Sum", ["a", "b", "a"], ["Sum"])]
    dt = np.int64 if elem == T.INT64 else np.int32
    m = make(nodes, {"a": (elem, (3, 5)), "b": (elem, (5,))}, {op: elem for op in [*binary, *unary, "Clip", "Sum"]},
             {"lo": np.array(-20, dt), "hi": np.array(30, dt)})
    a, b = rng.integers(-1000, 1000, (3, 5)).astype(dt), rng.integers(-1000, 1000, 5).astype(dt)
    got = run(m, a=a, b=b)
    want = [f(a, b) for f in binary.values()] + [f(a) for f in unary.values()] + [np.clip(a, -20, 30), a + b + a]
    for g_, w in zip(got, want):
        same(g_, w.astype(dt))


def test_integer_div_truncates_toward_zero(rng):
    """ONNX's integer Div truncates: signed operands (the floor division corrected), non-negative ones (a
    floor division alone: the Cast of a bool and a positive constant)."""
    nodes = [node("Div", ["a", "b"], ["q"]), node("Div", ["a", "c"], ["qc"]),
             node("Cast", ["p"], ["pi"], to=T.INT64), node("Add", ["pi", "seven"], ["pn"]),
             node("Div", ["pn", "three"], ["qn"]),
             node("Mod", ["a", "b"], ["m0"]), node("Mod", ["a", "b"], ["m1"], fmod=1)]
    m = make(nodes, {"a": (T.INT64, (4, 9)), "b": (T.INT64, (9,)), "p": (T.BOOL, (9,))},
             {"q": T.INT64, "qc": T.INT64, "qn": T.INT64, "m0": T.INT64, "m1": T.INT64},
             {"c": np.array(-4, np.int64), "seven": np.array(7, np.int64), "three": np.array(3, np.int64)})
    g = import_model(m)
    divs = [n for n in g.nodes if n.op == "div"]
    assert len(divs) == 5   # q, qc, m1: corrected (compare, logical ops); qn and m0: one floor division each
    a, b, p = rng.integers(-50, 50, (4, 9)), rng.integers(1, 9, 9) * rng.choice([-1, 1], 9), rng.random(9) < 0.5
    a[0, :4] = [-7, 7, -8, 0]
    b[:4] = [2, -2, 2, -3]
    q, qc, qn, m0, m1 = run(m, a=a, b=b, p=p)
    trunc = lambda x, y: (np.abs(x) // np.abs(y)) * np.sign(x) * np.sign(y)   # noqa: E731
    same(q, trunc(a, b)), same(qc, trunc(a, -4)), same(qn, (p + 7) // 3)
    same(m0, np.mod(a, b)), same(m1, np.fmod(a, b))


def test_isnan_isinf(rng):
    nodes = [node("IsNaN", ["x"], ["nan"]), node("IsInf", ["x"], ["inf"]),
             node("IsInf", ["x"], ["pos"], detect_negative=0),
             node("IsInf", ["x"], ["neg"], detect_positive=0)]
    m = make(nodes, {"x": (T.FLOAT, (3, 7))}, {k: T.BOOL for k in ("nan", "inf", "pos", "neg")})
    x = rng.standard_normal((3, 7)).astype(np.float32)
    x[0, :3], x[2, 4] = [np.nan, np.inf, -np.inf], np.nan
    nan, inf, pos, neg = run(m, x=x)
    same(nan, np.isnan(x)), same(inf, np.isinf(x)), same(pos, np.isposinf(x)), same(neg, np.isneginf(x))


def test_constant_subgraphs_fold():
    """Nodes whose inputs are all constants are evaluated at import, GatherElements along more than 32
    values included (onnx's reference evaluator fails on it; torch.onnx writes one for BERT's
    token_type_ids): only the Add with the input is left."""
    nodes = [node("Range", ["zero", "n", "one"], ["r"]),
             node("Unsqueeze", ["r", "zero1"], ["r2"]),
             node("GatherElements", ["r2", "pos"], ["ge"], axis=1),
             node("Equal", ["ge", "three"], ["eq"]), node("Not", ["eq"], ["ne"]),
             node("Cast", ["ne"], ["c"], to=T.INT64), node("CumSum", ["c", "one"], ["cs"]),
             node("Where", ["ne", "cs", "ge"], ["w"]), node("Add", ["x", "w"], ["y"])]
    pos = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 35, 5]], np.int64)
    m = make(nodes, {"x": (T.INT64, (1, 11))}, {"y": T.INT64},
             {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "n": np.array(40, np.int64),
              "zero1": np.array([0], np.int64), "pos": pos, "three": np.array(3, np.int64)})
    assert [n.op for n in import_model(m).nodes if n.op != "constant"] == ["add"]
    ne = pos != 3
    want = np.where(ne, np.cumsum(ne, axis=1), pos)
    x = np.arange(11)[None]
    same(run(m, x=x)[0], x + want)


def test_constant_node_the_reference_cannot_fold(monkeypatch):
    """Where onnx's reference evaluator fails on a node of constants that the importer maps, the mapping
    computes it, the Graph evaluates it at build (an integer or bool result), and what follows folds."""
    from onnx.reference.op_run import OpRun
    from openprim.pyfrontend.onnx import importer

    class Equal(OpRun):
        op_domain = ""

        def _run(self, a, b):
            raise RuntimeError("no reference today")
    monkeypatch.setattr(importer, "_reference_ops", lambda: [Equal])
    nodes = [node("Equal", ["a", "b"], ["eq"]), node("Cast", ["eq"], ["c"], to=T.INT64),
             node("CumSum", ["c", "zero"], ["cs"]), node("Add", ["x", "cs"], ["y"])]
    a, b = np.array([1, 2, 3, 4, 5]), np.array([1, 0, 3, 0, 5])
    m = make(nodes, {"x": (T.INT64, (5,))}, {"y": T.INT64}, {"a": a, "b": b, "zero": np.array(0, np.int64)})
    assert [n.op for n in import_model(m).nodes if n.op != "constant"] == ["add"]
    same(run(m, x=np.arange(5))[0], np.arange(5) + np.cumsum(a == b))


def _sdpa_model(b, h, s, d):
    """torch.onnx's scaled_dot_product_attention with a boolean mask (opset 18+): Q * sqrt(scale) @ (K^T
    through Reshape [B*H, S, D] -> Transpose -> Reshape) * sqrt(scale) + Where(mask, 0, -inf), Softmax,
    the NaN guard Where(IsNaN(p), 0, p), MatMul V."""
    c = 1.0 / math.sqrt(math.sqrt(d))
    nodes = [node("Reshape", ["k", "s3"], ["k3"]), node("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]),
             node("Reshape", ["kt3", "s4"], ["kt"]), node("Mul", ["q", "c"], ["qs"]),
             node("Mul", ["kt", "c"], ["ks"]), node("Where", ["mask", "zero", "ninf"], ["bias"]),
             node("MatMul", ["qs", "ks"], ["scores"]), node("Add", ["scores", "bias"], ["masked"]),
             node("Softmax", ["masked"], ["p"], axis=-1), node("IsNaN", ["p"], ["isnan"]),
             node("Where", ["isnan", "zero", "p"], ["pg"]), node("MatMul", ["pg", "v"], ["y"])]
    shp = (b, h, s, d)
    return make(nodes, {"q": (T.FLOAT, shp), "k": (T.FLOAT, shp), "v": (T.FLOAT, shp), "mask": (T.BOOL, (b, 1, s, s))},
                {"y": T.FLOAT}, {"s3": np.array([b * h, s, d], np.int64), "s4": np.array([b, h, d, s], np.int64),
                                 "c": np.array(c, np.float32), "zero": np.array(0.0, np.float32),
                                 "ninf": np.array(-np.inf, np.float32)}, opset=18)


def _attention_ref(q, k, v, mask):
    """softmax(q k^T / sqrt(d) + (0 where mask else -inf)) v, a query row without keys 0."""
    scores = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    scores = np.where(mask, scores, -np.inf)
    top = np.max(scores, -1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0))
    total = e.sum(-1, keepdims=True)
    p = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return p @ v


def test_sdpa_pattern_with_nan_guard_is_one_attention(rng):
    """torch.onnx's attention chain, its NaN guard included, is one prim.attention whose mask is the additive
    [B, 1, S, S] one (not per head); a query row with every key masked is 0, as in PyTorch."""
    b, h, s, d = 2, 3, 7, 5
    m = _sdpa_model(b, h, s, d)
    g = import_model(m)
    att = [n for n in g.nodes if n.op == "attention"]
    assert len(att) == 1 and att[0].operands[3].shape == (b, 1, s, s)
    assert not [n for n in g.nodes if n.op in ("softmax", "matmul")]
    q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3))
    mask = rng.random((b, 1, s, s)) < 0.7
    mask[..., 0] = True
    mask[1, 0, 3] = False   # query 3 of batch 1: no key
    y = run(m, q=q, k=k, v=v, mask=mask)[0]
    assert np.isfinite(y).all() and not y[1, :, 3].any()
    np.testing.assert_allclose(y, _attention_ref(q, k, v, mask), rtol=1e-4, atol=1e-5)


def test_attention_op_computed_boolean_mask(rng):
    """Attention-23 with a boolean attn_mask computed at run time (narrower than the keys: padded with
    False); a row it leaves no key is 0, as ONNX defines it."""
    b, h, s, d = 2, 2, 5, 4
    nodes = [node("Greater", ["m", "half"], ["mask"]), node("Attention", ["q", "k", "v", "mask"], ["y"])]
    shp = (b, h, s, d)
    m = make(nodes, {"q": (T.FLOAT, shp), "k": (T.FLOAT, shp), "v": (T.FLOAT, shp), "m": (T.FLOAT, (b, 1, s, s - 1))},
             {"y": T.FLOAT}, {"half": np.array(0.5, np.float32)}, opset=23)
    q, k, v = (rng.standard_normal(shp).astype(np.float32) for _ in range(3))
    mv = rng.random((b, 1, s, s - 1)).astype(np.float32)
    mv[..., 0] = 1.0
    mv[0, 0, 2] = 0.0   # query 2 of batch 0: no key
    y = run(m, q=q, k=k, v=v, m=mv)[0]
    mask = np.concatenate([mv > 0.5, np.zeros((b, 1, s, 1), bool)], -1)
    assert not y[0, :, 2].any()
    np.testing.assert_allclose(y, _attention_ref(q, k, v, mask), rtol=1e-4, atol=1e-5)


def test_gather_nd_runtime_indices_refused():
    m = make(node("GatherND", ["x", "i"], ["y"], name="gnd"), {"x": (T.FLOAT, (3, 4)),
             "i": (T.INT64, (2, 2))}, {"y": T.FLOAT})
    with pytest.raises(OpenPrimError, match=r"'gnd' \(GatherND, opset 17\) is not supported .*constant indices only"):
        import_model(m)


# ----------------------------------------------------------------------------- (b) language models
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=1000)


def _config(tf, name):
    return {
        "bert": lambda: tf.BertModel(tf.BertConfig(**SMALL)),
        "roberta": lambda: tf.RobertaModel(tf.RobertaConfig(**SMALL)),
        "albert": lambda: tf.AlbertModel(tf.AlbertConfig(embedding_size=32, **SMALL)),
        "electra": lambda: tf.ElectraModel(tf.ElectraConfig(embedding_size=32, **SMALL)),
        "distilbert": lambda: tf.DistilBertModel(tf.DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                                                     vocab_size=1000)),
        "gpt2": lambda: tf.GPT2Model(tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, use_cache=False,
                                                   bos_token_id=0, eos_token_id=0)),
        "t5_encoder": lambda: tf.T5EncoderModel(tf.T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                                            vocab_size=1000)),
        "mobilebert": lambda: tf.MobileBertModel(tf.MobileBertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, intra_bottleneck_size=32,
            embedding_size=32, true_hidden_size=32, vocab_size=1000)),
        "llama": lambda: tf.LlamaModel(tf.LlamaConfig(num_key_value_heads=2, use_cache=False, **SMALL)),
    }[name]()


# torch.onnx's default (dynamo) exporter needs onnxscript; without it, and for the T5 encoder (torch 2.13's
# decompositions turn its attention output's reshape into a view of a non-contiguous tensor and fail), the
# TorchScript exporter (dynamo=False), given the inputs by position through a wrapper (with kwargs it passes
# BERT's forward use_cache twice).
DYNAMO = importlib.util.find_spec("onnxscript") is not None
MODELS = ["bert", "roberta", "albert", "electra", "distilbert", "gpt2", "t5_encoder", "mobilebert", "llama"]


@pytest.mark.filterwarnings("ignore")   # the exporters' own (deprecations, tracer warnings)
@pytest.mark.parametrize("name", MODELS)
def test_language_model(name, tmp_path):
    """Exported with torch.onnx.export (input_ids int64 [2, 16], an attention mask with the second row
    padded from position 10), imported, compiled on the CPU: last_hidden_state as PyTorch's; every
    attention one prim.attention (not Llama's yet), its mask [B, 1, S, S] (T5: with the per-head position bias,
    [B, H, S, S])."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = _config(tf, name).eval()
    ids = torch.randint(0, 1000, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask)[0].numpy()
    path = tmp_path / f"{name}.onnx"
    if DYNAMO and name != "t5_encoder":
        torch.onnx.export(model, (), str(path), kwargs={"input_ids": ids, "attention_mask": mask},
                          input_names=["input_ids", "attention_mask"], verbose=False)
    else:
        import language_models   # needs torch, imported above
        # (in eval mode: the exporter puts the module back in the mode it found it in, submodules included)
        torch.onnx.export(language_models.LastHidden(model).eval(), (ids, mask), str(path), dynamo=False,
                          input_names=["input_ids", "attention_mask"])
    g = import_model(str(path))
    assert [(t.name, t.dtype) for t in g.inputs] == [("input_ids", "i64"), ("attention_mask", "i64")]
    att = [n for n in g.nodes if n.op == "attention"]
    # Llama's grouped-query attention (its key/value heads repeated by Expand) stays MatMul/Softmax in ONNX:
    # not matched into prim.attention yet (the torch path matches it)
    assert len(att) == (0 if name == "llama" else 2)
    heads = 4 if name == "t5_encoder" else 1
    assert all(n.operands[3].shape == (2, heads, 16, 16) for n in att)
    out = openprim.compile(g)(input_ids=ids.numpy(), attention_mask=mask.numpy())
    out = out[0] if isinstance(out, tuple) else out
    err = np.abs(out - ref).max() / max(1.0, np.abs(ref).max())
    assert err <= 1e-4, err

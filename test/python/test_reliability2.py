"""Issue 29, items 2 and 3: one regression test per reported fault, named after it. compile_module's arguments
(keywords by name, the training mode restored, plain functions and numpy inputs), openprim.compile on a
model file's path, resize_nearest with fractional scales (against PyTorch), bf16 and f16 data on the host
(ml_dtypes.bfloat16, uint16 refused, out-of-range values an error) and the Graph ops' argument checks.

The property everywhere: a correct result (float64 or PyTorch reference) or one OpenPrimError line."""
import warnings

import numpy as np
import pytest

import openprim
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph
from openprim.pyfrontend.graph import nearest_sources

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")
F = torch.nn.functional

from openprim.torch_backend import compile_module  # noqa: E402 (needs torch)


def one_error(fn, match):
    """fn() raises one OpenPrimError line matching `match`, and no numpy warning on the way."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(OpenPrimError, match=match) as e:
            fn()
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- compile_module
class Sub(torch.nn.Module):
    def forward(self, a, b):
        return a - b


def test_compile_module_binds_keywords_by_name(rng):
    a, b = (torch.from_numpy(rng.standard_normal((3, 5)).astype(np.float32)) for _ in range(2))
    run = compile_module(Sub(), (a, b))
    want = a.double().numpy() - b.double().numpy()
    for got in (run(b=b, a=a), run(a, b=b), run(a, b)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    one_error(lambda: run(a, b, c=b),
              r"^compile_module: got an unexpected keyword argument 'c'; forward takes \(a, b\)$")
    one_error(lambda: run(b=b), r"missing a required argument: 'a'")


def test_compile_module_restores_training_mode():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Dropout(0.5), torch.nn.Linear(3, 2)).train()
    model[2].eval()   # a mix: each submodule keeps its own mode
    compile_module(model, (torch.randn(2, 4),))
    assert [m.training for m in model.modules()] == [True, True, True, False]


def test_compile_module_plain_function_and_numpy_inputs(rng):
    x = torch.from_numpy(rng.standard_normal((2, 7)).astype(np.float32))
    run = compile_module(lambda t: torch.relu(t) + 1, (x,))
    np.testing.assert_allclose(run(x).numpy(), np.maximum(x.double().numpy(), 0) + 1, rtol=1e-6)
    np.testing.assert_allclose(run(t=x).numpy(), np.maximum(x.double().numpy(), 0) + 1, rtol=1e-6)
    one_error(lambda: compile_module(Sub(), (x.numpy(), x.numpy())),
              r"^compile_module: example input 0 is a numpy.ndarray; pass torch tensors \(torch.from_numpy\(a\)\)$")
    one_error(lambda: compile_module("model", (x,)), r"^compile_module: expected a torch.nn.Module or a function")


def test_compile_a_model_file_path(tmp_path, rng):
    """A str or Path of a model file goes through the importer registry; a missing one says so."""
    path = tmp_path / "small.py"
    path.write_text("from openprim.pyfrontend import Graph\n\ndef build(n=3):\n    g = Graph()\n"
                    "    g.output(g.relu(g.input('x', (2, n))))\n    return g\n")
    x = rng.standard_normal((2, 3)).astype(np.float32)
    for source in (str(path), path):
        np.testing.assert_array_equal(openprim.compile(source)(x), np.maximum(x, 0))
    one_error(lambda: openprim.compile(str(tmp_path / "missing.onnx")), r"missing\.onnx'?: no such file")


# ----------------------------------------------------------------------------- resize_nearest
SCALES = (1.5, 2.7, 0.5, 2, 1.25, 0.3, 1 / 3, 7)


def test_nearest_sources_are_torchs():
    """The index rule, on every size up to 40 and random scales too, against F.interpolate of an arange
    (its special cases where the output keeps or doubles the size included)."""
    scales = SCALES + tuple(np.random.default_rng(0).uniform(0.2, 5.0, 30))
    for s in scales:
        for n in range(1, 41):
            x = torch.arange(n, dtype=torch.float32).reshape(1, 1, 1, n)
            if int(n * s) < 1:
                continue
            for recompute in (None, True):
                y = F.interpolate(x, scale_factor=(1.0, s), mode="nearest", recompute_scale_factor=recompute)
                got = nearest_sources(n, y.shape[-1], None if recompute else s)
                np.testing.assert_array_equal(got, y.reshape(-1).numpy(), err_msg=f"scale {s}, size {n}")


def test_resize_nearest_fractional_scales(rng):
    """Graph.resize_nearest on odd sizes equals F.interpolate(mode="nearest") exactly (scale 1.5 gave 2x2
    where PyTorch gives 3x3: the scale was truncated to an int)."""
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    g = Graph()
    xi = g.input("x", x.shape)
    cases = [((s, s), g.resize_nearest(xi, [1, 1, s, s])) for s in SCALES[:4]]
    cases.append(((2.7, 0.5), g.resize_nearest(xi, [1, 1, 2.7, 0.5])))
    g.output(*[t for _, t in cases])
    for (scale, _), got in zip(cases, openprim.compile(g)(x)):
        want = F.interpolate(torch.from_numpy(x).double(), scale_factor=scale, mode="nearest").numpy()
        assert got.shape == want.shape, scale
        np.testing.assert_array_equal(got, want.astype(np.float32), err_msg=str(scale))


@pytest.mark.parametrize("kwargs", [dict(scale_factor=1.5), dict(scale_factor=2.7), dict(scale_factor=0.5),
                                    dict(scale_factor=2), dict(scale_factor=(1.25, 0.3)), dict(size=(11, 4)),
                                    dict(scale_factor=2.7, recompute_scale_factor=True)],
                         ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
def test_torch_interpolate_nearest(kwargs, rng):
    """aten.upsample_nearest2d imports (it was an unsupported op) with torch's output size and indices."""
    class Resize(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(torch.tanh(x), mode="nearest", **kwargs)
    x = torch.from_numpy(rng.standard_normal((1, 2, 5, 7)).astype(np.float32))
    got = compile_module(Resize(), (x,))(x).numpy()
    want = Resize()(x.double()).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_take_matches_numpy(rng):
    """Graph.take (what resize and ONNX Gather, Pad and Resize read through) on runs of every kind."""
    x = rng.standard_normal((3, 9, 4)).astype(np.float32)
    g = Graph()
    xi = g.input("x", x.shape)
    lists = [rng.integers(-9, 9, 23).tolist(), [8, 7, 6, 0, 0, 0, 0, 1, 2, 3, 3, 5, 7], list(range(0, 9, 2)) * 3,
             [int(i) for i in nearest_sources(9, 24, 2.7)], [4]]
    g.output(*[g.take(xi, idx, 1) for idx in lists])
    for idx, got in zip(lists, openprim.compile(g)(x)):
        np.testing.assert_array_equal(got, np.take(x, idx, axis=1))


# ----------------------------------------------------------------------------- bf16 and f16 on the host
def bf16_relu():
    g = Graph(dtype="bf16")
    g.output(g.relu(g.input("x", (3,))))
    return openprim.compile(g)


def test_bf16_input_uint16_refused_ml_dtypes_accepted():
    """[1, 200, 3000] as uint16 came back ~0 (read as bf16 bits); ml_dtypes.bfloat16 arrays are bf16 values."""
    run = bf16_relu()
    values = np.array([1, 200, -3000], np.float32)
    one_error(lambda: run(values.astype(np.uint16)),
              r"^input 'x' is a uint16 array for a bf16 tensor: pass its values as floats or an ml_dtypes\.bfloat16 "
              r"array \(raw bf16 bits: a\.view\(ml_dtypes\.bfloat16\)\)$")
    out = run(values.astype(ml_dtypes.bfloat16))
    assert out.dtype == np.float32            # bf16 outputs stay float32, which holds every bf16 value
    np.testing.assert_array_equal(out, [1, 200, 0])
    bits = np.array([0x3F80, 0x4348, 0], np.uint16)   # 1.0, 200.0 and 0.0 as bits, said explicitly
    np.testing.assert_array_equal(run(bits.view(ml_dtypes.bfloat16)), [1, 200, 0])


def test_bf16_param_uint16_refused_ml_dtypes_accepted(rng):
    w = rng.standard_normal(5)
    g = Graph(dtype="bf16")
    one_error(lambda: g.param("w", np.array([1, 200], np.uint16)), r"error: param 'w' is a uint16 array for a bf16")
    x = g.input("x", (5,))
    g.output(g.mul(x, g.param("w", w.astype(ml_dtypes.bfloat16))))
    xv = np.linspace(-2, 2, 5).astype(ml_dtypes.bfloat16)
    want = xv.astype(np.float64) * w.astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(openprim.compile(g)(xv), want, rtol=1e-2)


@pytest.mark.parametrize("dtype,big", [("f16", 1e6), ("bf16", 3.4e38)])
def test_values_beyond_the_dtype_are_an_error(dtype, big):
    """A finite value that the dtype cannot hold: an error for params and inputs, never a silent inf (an f16
    param of 1e6 was stored as inf with a numpy warning; bf16 rounded 3.4e38 up to inf silently)."""
    g = Graph(dtype=dtype)
    one_error(lambda: g.param("w", np.array([1.0, big])),
              rf"error: param 'w' \(float64\) has values beyond the range of {dtype} \(largest \|x\| ")
    other = Graph(dtype=dtype)
    one_error(lambda: other.mul(other.input("y", (2,)), big), rf"prim\.mul: operand \(float64\) has values beyond the")
    x = g.input("x", (2,))
    g.output(g.relu(x))
    run = openprim.compile(g)
    one_error(lambda: run(np.array([1.0, big], np.float32)),
              rf"^input 'x' \(float32\) has values beyond the range of {dtype} \(largest \|x\| ")
    np.testing.assert_array_equal(run(np.array([np.inf, -2.0], np.float32)), [np.inf, 0])   # inf is a value
    if dtype == "f16":
        one_error(lambda: run(np.array([1, 70000], np.float32).astype(ml_dtypes.bfloat16)),
                  r"^input 'x' \(float32\) has values beyond the range of f16")


# ----------------------------------------------------------------------------- Graph argument checks
def _graph():
    g = Graph()
    return g, g.input("x", (2, 3, 4, 5))


BAD_ARGS = {
    "flatten_float_dim": (lambda g, x: g.flatten(x, start_dim=1.5),
                          r"flatten: 'start_dim' must be an integer, got 1\.5"),
    "flatten_dim_range": (lambda g, x: g.flatten(x, start_dim=4),
                          r"flatten \(operand 2x3x4x5\): start_dim 4 must be in \[-4, 4\)"),
    "slice_float_start": (lambda g, x: g.slice(x, [1.5], [2]), r"prim\.slice: 'starts' must be integers, got \[1\.5\]"),
    "slice_int_ends": (lambda g, x: g.slice(x, [1], 2), r"prim\.slice: 'ends' must be a list of integers, got 2"),
    "reduce_keepdims": (lambda g, x: g.reduce(x, "sum", [1], keepdims="no"),
                        r"prim\.reduce: 'keepdims' must be True or False, got 'no'"),
    "reduce_axes": (lambda g, x: g.reduce(x, "sum", 1), r"prim\.reduce: 'axes' must be a list of integers, got 1"),
    "reduce_kind": (lambda g, x: g.reduce(x, 3, [1]), r"prim\.reduce: 'kind' must be a string, got 3"),
    "transpose_perm": (lambda g, x: g.transpose(x, 3), r"prim\.transpose: 'perm' must be a list of integers, got 3"),
    "reshape_shape": (lambda g, x: g.reshape(x, 120), r"prim\.reshape: 'shape' must be a list of integers, got 120"),
    "pad_pads": (lambda g, x: g.pad(x, 1), r"prim\.pad: 'pads' must be a list of integers, got 1"),
    "concat_tensor": (lambda g, x: g.concat(x), r"prim\.concat: expected a non-empty list of Tensors"),
    "concat_one_number": (lambda g, x: g.concat([5]), r"prim\.concat: expected a Tensor of this graph, got int"),
    "matmul_flag": (lambda g, x: g.matmul(x, x, transpose_rhs="yes"),
                    r"prim\.matmul: 'transpose_rhs' must be True or False, got 'yes'"),
    "matmul_params": (lambda g, x: g.matmul(x, x, activation="leaky_relu", activation_params=0.5),
                      r"prim\.matmul: 'activation_params' must be a list of numbers, got 0\.5"),
    "pool_ceil_mode": (lambda g, x: g.max_pool2d(x, 2, ceil_mode="x"),
                       r"prim\.max_pool2d: 'ceil_mode' must be True or False, got 'x'"),
    "avg_pool_count": (lambda g, x: g.avg_pool2d(x, 2, count_include_pad=2),
                       r"prim\.avg_pool2d: 'count_include_pad' must be True or False, got 2"),
    "attention_causal": (lambda g, x: g.attention(x, x, x, causal="no"),
                         r"prim\.attention: 'causal' must be True or False, got 'no'"),
    "conv_stride": (lambda g, x: g.conv2d(x, g.param("w", np.ones((2, 3, 1, 1))), stride=1.5),
                    r"prim\.conv2d: 'strides' must be integers, got \[1\.5, 1\.5\]"),
    "add_string": (lambda g, x: x + "a", r"prim\.add: 'operand' must be a number, got 'a'"),
    "add_numbers": (lambda g, x: g.add(1, 2), r"prim\.add: expected a Tensor of this graph, got int"),
    "param_name": (lambda g, x: g.param(3, np.ones(2)), r"param name must be a non-empty string, got 3"),
    "resize_scales": (lambda g, x: g.resize_nearest(x, [1, 1, 2, "2"]),
                      r"resize_nearest \(operand 2x3x4x5\): scales must be 4 positive numbers"),
    "resize_empty": (lambda g, x: g.resize_nearest(x, [1, 1, 0.2, 1]),
                     r"resize_nearest \(operand 2x3x4x5\): the result would be empty \(2x3x0x5\)"),
    "resize_none_scale": (lambda g, x: g.resize_nearest(x, [1, 1, None, 2]), r"\(None where size is given\)"),
    "take_range": (lambda g, x: g.take(x, [0, 4], 1), r"take \(operand 2x3x4x5\): axis 1 must be in \[-4, 4\) and the "
                                                       r"indices a non-empty list in range, got \[0, 4\]"),
    "take_axes_count": (lambda g, x: g.take_axes(x, [None]), r"take_axes \(operand 2x3x4x5\): expected 4 lists"),
}


@pytest.mark.parametrize("case", BAD_ARGS)
def test_graph_op_arguments_are_checked(case):
    """Each was a TypeError or ValueError from inside the builder (or accepted): now one OpenPrimError at the
    user's line that names the op, the argument and what it takes."""
    build, match = BAD_ARGS[case]
    g, x = _graph()
    one_error(lambda: build(g, x), r"^\S+test_reliability2\.py:\d+: error: .*" + match)


def test_graph_flags_take_bools_and_01():
    g, x = _graph()
    for flag in (True, 1, np.bool_(True)):
        assert g.reduce(x, "sum", [1], keepdims=flag).shape == (2, 1, 4, 5)
    assert g.flatten(x, start_dim=-2).shape == (2, 3, 20)

"""Precision: f16/bf16 models from ONNX and PyTorch, precision= on fp32 models, float64 errors, and f32
accumulation in the f16/bf16 kernels.

Every result is compared with a float64 reference on random data: onnx's reference evaluator on the same
model in DOUBLE (with the weights as the low-precision model holds them), the PyTorch module in float64,
or numpy. CPU target (the default).
"""
import copy

import numpy as np
import pytest
from helpers import assert_close, rounded

import openprim
import openprim.compiler
from openprim.base.dtypes import to_storage
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph
from openprim.pyfrontend.precision import with_precision
from openprim.runtime import artifact

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from openprim.pyfrontend.onnx import import_model  # noqa: E402

ELEM = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16,
        "f64": TensorProto.DOUBLE}
HOST = {"f32": np.float32, "f16": np.float16, "bf16": np.float32}


def _np_type(dtype):
    if dtype == "bf16":
        import ml_dtypes  # onnx's own dependency: its bfloat16 tensors are ml_dtypes arrays
        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16, "f64": np.float64}[dtype]


def _onnx_model(nodes, inputs, outputs, weights, dtype, opset):
    """A model whose float tensors are all of `dtype`; weights: {name: float64 array} (integer arrays are
    kept as int64: shapes)."""
    elem = ELEM[dtype]
    inits = [numpy_helper.from_array(np.asarray(v).astype(np.int64 if np.asarray(v).dtype.kind in "iu"
                                                          else _np_type(dtype)), n) for n, v in weights.items()]
    m = helper.make_model(helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, elem, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, elem, s) for n, s in outputs.items()], inits),
        opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def cnn(seed, dtype, opset=17, ref=False):
    """conv + batch norm + relu + max pool + identity Casts + reshape (int64 shape) + gemm, all in `dtype`
    (ref: the same model in DOUBLE with the weights rounded to `dtype`, for the reference)."""
    rng = np.random.default_rng(seed)
    w = {"w": rng.standard_normal((8, 3, 3, 3)) * 0.4, "b": rng.standard_normal(8) * 0.2,
         "scale": rng.uniform(0.5, 1.5, 8), "shift": rng.standard_normal(8) * 0.2,
         "mean": rng.standard_normal(8) * 0.2, "var": rng.uniform(0.5, 1.5, 8),
         "w2": rng.standard_normal((5, 240)) * 0.1, "b2": rng.standard_normal(5) * 0.1}
    w = {k: rounded(v, dtype) for k, v in w.items()} | {"shape": np.array([1, -1])}
    kind = "f64" if ref else dtype
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Cast", ["p"], ["p32"], to=ELEM["f64" if ref else "f32"]),
             helper.make_node("Cast", ["p32"], ["p2"], to=ELEM[kind]),
             helper.make_node("Reshape", ["p2", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1)]
    return _onnx_model(nodes, {"x": [1, 3, 11, 13]}, {"y": [1, 5]}, w, kind, opset)


def attention_head(seed, dtype, ref=False):
    """matmul + bias + layer norm, then a softmax computed in float between two Casts (as fp16 exports of
    transformers do), in `dtype`."""
    rng = np.random.default_rng(seed)
    w = {"w": rng.standard_normal((37, 29)) * 0.3, "b": rng.standard_normal(29) * 0.3,
         "gamma": rng.uniform(0.5, 1.5, 29), "beta": rng.standard_normal(29) * 0.2}
    w = {k: rounded(v, dtype) for k, v in w.items()}
    kind = "f64" if ref else dtype
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("LayerNormalization", ["a", "gamma", "beta"], ["l"], axis=-1, epsilon=1e-5),
             helper.make_node("Cast", ["l"], ["l32"], to=ELEM["f64" if ref else "f32"]),
             helper.make_node("Softmax", ["l32"], ["s"], axis=-1),
             helper.make_node("Cast", ["s"], ["y"], to=ELEM[kind])]
    return _onnx_model(nodes, {"x": [3, 37]}, {"y": [3, 29]}, w, kind, 17 if dtype != "bf16" else 22)


def onnx_reference(model_ref, x):
    return ReferenceEvaluator(model_ref).run(None, {"x": np.asarray(x, np.float64)})[0]


# ----------------------------------------------------------------------------- ONNX f16 / bf16 models
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_onnx_low_precision_cnn(dtype, rng):
    """An f16/bf16 model imports as an f16/bf16 Graph (weights stored in it, Casts gone) and runs in it."""
    opset = 17 if dtype == "f16" else 22  # Conv and MaxPool take bfloat16 from opset 22
    g = import_model(cnn(1, dtype, opset))
    assert g.dtype == dtype and {t.dtype for t in g.inputs + g.outputs} == {dtype}
    assert {n.value.dtype for n in g.nodes if n.op == "constant"} == {np.dtype(np.float16 if dtype == "f16"
                                                                               else np.uint16)}
    x = rounded(rng.standard_normal((1, 3, 11, 13)), dtype)
    y = openprim.compile(g)(x.astype(HOST[dtype]))
    assert y.dtype == HOST[dtype]
    assert_close(y, onnx_reference(cnn(1, dtype, opset, ref=True), x), dtype, reduction=240)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_onnx_low_precision_layernorm_softmax(dtype, rng):
    g = import_model(attention_head(2, dtype))
    assert g.dtype == dtype
    x = rounded(rng.standard_normal((3, 37)), dtype)
    y = openprim.compile(g)(x.astype(HOST[dtype]))
    assert y.dtype == HOST[dtype]
    assert_close(y, onnx_reference(attention_head(2, dtype, ref=True), x), dtype, reduction=37)


# ----------------------------------------------------------------------------- PyTorch .half() / .bfloat16()
def _torch_modules():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.fc = nn.Linear(8 * 5 * 6, 7)

        def forward(self, x):
            y = nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
            return self.fc(torch.flatten(y, 1))

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm = nn.Linear(37, 29), nn.LayerNorm(29)

        def forward(self, x):
            return torch.softmax(self.norm(self.fc(x)), dim=-1)

    return torch, {"cnn": (Cnn, (1, 3, 11, 13), 27), "head": (Head, (3, 37), 37)}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("net", ["cnn", "head"])
def test_torch_low_precision_module(net, dtype):
    """torch.export of a .half()/.bfloat16() module imports as an f16/bf16 Graph (as compile_module does:
    import_exported, then openprim.compile); the reference is the same weights in float64."""
    torch, nets = _torch_modules()
    from openprim.pyfrontend.torch import import_exported
    cls, shape, reduction = nets[net]
    torch.manual_seed(0)
    model = cls().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 1.5)
    tdtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    low = model.to(tdtype)
    x = torch.randn(shape).to(tdtype)
    g, names = import_exported(torch.export.export(low, (x,)))
    assert g.dtype == dtype and {t.dtype for t in g.inputs + g.outputs} == {dtype}
    with torch.no_grad():
        want = copy.deepcopy(low).double()(x.double()).numpy()
    y = openprim.compile(g)(x.float().numpy())
    assert y.dtype == HOST[dtype]
    assert_close(y, want, dtype, reduction=reduction)


# ----------------------------------------------------------------------------- precision= on fp32 models
def fp32_net(rng):
    """An fp32 Graph (conv + bn + relu + pool + linear + softmax, and a second output: the pooled sum) and
    its float64 reference."""
    x = rng.standard_normal((2, 3, 13, 11))
    w = {"w": rng.standard_normal((6, 3, 3, 3)) * 0.4, "scale": rng.uniform(0.5, 1.5, 6),
         "shift": rng.standard_normal(6) * 0.2, "mean": rng.standard_normal(6) * 0.2,
         "var": rng.uniform(0.5, 1.5, 6), "fc": rng.standard_normal((9, 6)) * 0.5}
    g = Graph(dtype="f32")
    xi = g.input("x", x.shape)
    p = {k: g.param(k, v) for k, v in w.items()}
    c = g.conv2d(xi, p["w"], padding=1)
    r = g.relu(g.batch_norm(c, p["scale"], p["shift"], p["mean"], p["var"]))
    pooled = g.flatten(g.global_avg_pool(g.max_pool2d(r, 2)))
    g.output(g.softmax(g.linear(pooled, p["fc"])), g.reduce(pooled, "sum", axes=[1]))
    # float64 reference
    cols = np.zeros((2, 6, 13, 11))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(3):
        for j in range(3):
            cols += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + 13, j:j + 11], w["w"][:, :, i, j])
    ch = (slice(None), None, None)
    bn = (cols - w["mean"][ch]) / np.sqrt(w["var"][ch] + 1e-5) * w["scale"][ch] + w["shift"][ch]
    rr = np.maximum(bn, 0)[:, :, :12, :10].reshape(2, 6, 6, 2, 5, 2).max(axis=(3, 5))
    pooled_ref = rr.mean(axis=(2, 3))
    logits = pooled_ref @ w["fc"].T
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return g, x, [e / e.sum(axis=1, keepdims=True), pooled_ref.sum(axis=1)]


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_precision_on_fp32_model(precision, rng):
    """compile(precision=) computes in the low precision (every value and weight of the plan is f16/bf16)
    and keeps float32 inputs and outputs; the error is within the low precision's tolerance."""
    g, x, want = fp32_net(rng)
    exe = openprim.compile(g, precision=precision)
    values = exe.plan["values"]
    assert {v["dtype"] for v in values} == {precision}
    edges = [s["value"] for s in exe.plan["inputs"]] + exe.plan["outputs"]
    assert [values[i].get("host_dtype") for i in edges] == ["f32"] * 3
    assert g.dtype == "f32" and all(n.result.dtype == "f32" for n in g.nodes)  # the model is unchanged
    ys = exe(x.astype(np.float32))
    for y, w in zip(ys, want):
        assert y.dtype == np.float32
        assert_close(y, w, precision, reduction=27)
    exact = openprim.compile(g)(x.astype(np.float32))  # f32: tighter, so the low precision really differs
    assert_close(exact[0], want[0], "f32", reduction=27)
    assert not np.array_equal(exact[0], ys[0])


def test_precision_artifact_keeps_io_dtypes(rng, tmp_path):
    """An .oprim saved with precision="f16" holds f16 weights (half the bytes) and converts at its edges."""
    g, x, want = fp32_net(rng)
    path = str(tmp_path / "net.oprim")
    info16 = openprim.compiler.save(g, path, precision="f16")
    info32 = openprim.compiler.save(g, str(tmp_path / "net32.oprim"))
    assert info16["plan"]["weights_bytes"] < info32["plan"]["weights_bytes"]
    exe = artifact.load(path)
    y, s = exe(x)
    assert y.dtype == s.dtype == np.float32
    assert_close(y, want[0], "f16", reduction=27)
    assert_close(s, want[1], "f16", reduction=27)


def test_precision_onnx_fp32_model_bf16(rng):
    model = cnn(4, "f32")
    x = rng.standard_normal((1, 3, 11, 13)).astype(np.float32)
    exe = openprim.compile(import_model(model), precision="bf16")
    assert {v["dtype"] for v in exe.plan["values"]} == {"bf16"}
    y = exe(x)
    assert y.dtype == np.float32
    assert_close(y, onnx_reference(cnn(4, "f32", ref=True), x), "bf16", reduction=240)


def test_with_precision_weights():
    """Weights are rounded once to nearest even; finite values beyond f16's range saturate, inf stays."""
    g = Graph()
    x = g.input("x", (4,))
    big = np.array([1e9, -1e9, np.inf, 1 / 3], np.float32)
    g.output(g.add(x, g.param("c", big)))
    low = with_precision(g, "f16")
    (c,) = [n.value for n in low.nodes if n.op == "constant"]
    np.testing.assert_array_equal(c, np.array([65504, -65504, np.inf, np.float16(1 / 3)], np.float16))
    assert with_precision(g, None) is g and with_precision(g, "f32") is g
    b = [n.value for n in with_precision(g, "bf16").nodes if n.op == "constant"][0]
    np.testing.assert_array_equal(b, to_storage(big, "bf16"))
    with pytest.raises(OpenPrimError, match="precision must be one of f32, f16, bf16"):
        with_precision(g, "fp16")


# ----------------------------------------------------------------------------- float64 and integer tensors
@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_precision_keeps_integers_and_checks(precision, rng):
    """Only float tensors change dtype: token ids, comparisons and an embedding's bounds check (a training
    graph's targets) keep theirs, and the check still fails a run with an id out of range."""
    g = Graph()
    ids = g.input("ids", (5,), dtype="i64")
    table = rng.standard_normal((7, 3)).astype(np.float32)
    rows = g.embedding(ids, g.param("table", table))
    g.output(g.where(g.reshape(g.eq(ids, 2), (5, 1)), rows, g.mul(rows, 2.0)))
    low = with_precision(g, precision)
    assert low.inputs[0].dtype == "i64" and [t.dtype for t in low.outputs] == [precision]
    assert len(low.checks) == len(g.checks) == 1
    exe = openprim.compile(g, precision=precision)
    given = np.array([0, 2, 6, 2, 1])
    want = np.where((given == 2)[:, None], table[given], 2 * table[given])
    assert_close(exe(given), want, precision, reduction=1)
    with pytest.raises(OpenPrimError, match="outside"):
        exe(np.array([0, 7, 1, 2, 3]))


def test_onnx_double_model_is_an_error(rng):
    model = cnn(5, "f32", ref=True)  # DOUBLE throughout
    with pytest.raises(OpenPrimError, match=r"ONNX input 'x' is float64;.*convert the model to float32"):
        import_model(model)
    # a float model that casts a computed tensor to DOUBLE and adds a DOUBLE weight
    nodes = [helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE),
             helper.make_node("Add", ["d", "c"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)]
    m = helper.make_model(helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.full((2, 3), 1e300), "c")]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OpenPrimError, match=r"\(Cast, opset 17\): a computed tensor cast to DOUBLE is float64"):
        import_model(m)


def test_onnx_integer_data_must_be_exact():
    """An integer constant read as data must be exact in the Graph's dtype; shape constants are fine."""
    def model(exponent, dtype):
        nodes = [helper.make_node("Pow", ["x", "e"], ["p"]), helper.make_node("Reshape", ["p", "shape"], ["y"])]
        return _onnx_model(nodes, {"x": [2, 3]}, {"y": [3, 2]}, {"e": np.array([exponent]),
                                                                 "shape": np.array([3, 2])}, dtype, 17)
    x = np.random.default_rng(0).uniform(0.5, 1.5, (2, 3))
    y = openprim.compile(import_model(model(3, "f16")))(x.astype(np.float16))
    assert_close(y, rounded(x, "f16").reshape(3, 2) ** 3, "f16")
    with pytest.raises(OpenPrimError, match="integer constant 'e'.*cannot be computed exactly in f16"):
        import_model(model(4097, "f16"))


def test_torch_double_module_is_an_error():
    torch, nets = _torch_modules()
    from openprim.pyfrontend.torch import import_exported
    model = nets["head"][0]().eval().double()
    ep = torch.export.export(model, (torch.randn(3, 37, dtype=torch.float64),))
    with pytest.raises(OpenPrimError, match="'fc.weight' is float64.*call .float()"):
        import_exported(ep)
    ep = torch.export.export(nets["head"][0]().eval(), (torch.randn(3, 37, dtype=torch.float64),))
    with pytest.raises(OpenPrimError, match="input 'x' is float64"):
        import_exported(ep)


# ----------------------------------------------------------------------------- f32 accumulation
def _accumulate_f16(values, dtype):
    """The sum of `values` accumulated in `dtype` itself (what an f16/bf16 accumulator would give)."""
    acc = 0.0
    for v in values:
        acc = float(rounded([acc + v], dtype)[0])
    return acc


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_reductions_accumulate_in_f32(dtype, rng):
    """Sums over thousands of elements: an f16/bf16 accumulator stalls (f16 also overflows past 65504),
    checked here against the same tolerance; the kernels accumulate in f32 and pass it."""
    n = 8192
    ones = rounded(rng.uniform(0.5, 1.5, (2, n)), dtype)           # reduce sum: stalls in f16/bf16
    shifted = rounded(40 + rng.standard_normal((2, n)), dtype)     # layer norm: sum 330000 > f16 max
    image = rounded(30 + rng.standard_normal((1, 4, 64, 64)), dtype)  # global pool / group norm
    rows = rounded(rng.standard_normal((2, n)) * 0.1, dtype)       # softmax: sum of exp stalls
    g = Graph(dtype=dtype)
    a, b, c, d = (g.input(k, v.shape) for k, v in zip("abcd", (ones, shifted, image, rows)))
    gamma, beta = g.param("gamma", np.ones(4)), g.param("beta", np.zeros(4))
    g.output(g.reduce(a, "sum", axes=[1]), g.layer_norm(b), g.flatten(g.global_avg_pool(c)),
             g.group_norm(c, 2, gamma, beta), g.softmax(d), g.reduce(a, "mean", axes=[1]))
    ys = openprim.compile(g)(ones, shifted, image, rows)
    mu = shifted.mean(axis=1, keepdims=True)
    grouped = image.reshape(1, 2, -1)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    want = [ones.sum(axis=1), (shifted - mu) / np.sqrt(shifted.var(axis=1, keepdims=True) + 1e-5),
            image.mean(axis=(2, 3)).reshape(1, 4),
            ((grouped - grouped.mean(axis=2, keepdims=True)) /
             np.sqrt(grouped.var(axis=2, keepdims=True) + 1e-5)).reshape(image.shape),
            e / e.sum(axis=1, keepdims=True), ones.mean(axis=1)]
    for i, (y, w) in enumerate(zip(ys, want)):
        assert_close(y, w, dtype, what=f"output {i}")
    # the test can fail: accumulating in the dtype itself misses the tolerance
    stalled = _accumulate_f16(ones[0], dtype)
    with pytest.raises(AssertionError):
        assert_close(np.array([stalled]), want[0][:1], dtype)


def test_cli_precision(tmp_path):
    """openprim compile|run --precision: the artifact computes in f16 and still takes and returns float32;
    a wrong value is one error line."""
    import subprocess
    model = tmp_path / "fp32_model.py"
    model.write_text("import numpy as np\n"
                     "from openprim.pyfrontend import Graph\n"
                     "def build():\n"
                     "    g = Graph()\n"
                     "    x = g.input('x', (3, 17))\n"
                     "    w = np.random.default_rng(0).standard_normal((11, 17))\n"
                     "    g.output(g.softmax(g.linear(x, g.param('w', w))))\n"
                     "    return g\n")
    x = np.random.default_rng(1).standard_normal((3, 17)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = str(tmp_path / "m.oprim")

    def cli(*args):
        return subprocess.run(["openprim", *args], capture_output=True, text=True)
    r = cli("compile", str(model), "--precision", "f16", "--no-cache", "-o", out)
    assert r.returncode == 0, r.stderr
    assert {v["dtype"] for v in artifact.load(out).plan["values"]} == {"f16"}
    r = cli("run", out, "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"), "--repeat", "0")
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npy")
    logits = x.astype(np.float64) @ np.random.default_rng(0).standard_normal((11, 17)).T
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    assert y.dtype == np.float32
    assert_close(y, e / e.sum(axis=1, keepdims=True), "f16", reduction=17)
    r = cli("run", str(model), "--precision", "bf16", "--no-cache", "--repeat", "0")
    assert r.returncode == 0 and "output 0: shape (3, 11)" in r.stdout, r.stderr
    r = cli("run", str(model), "--precision", "f8", "--repeat", "0")
    assert r.returncode == 2 and "invalid choice: 'f8'" in r.stderr and "Traceback" not in r.stderr


def test_precision_through_compile_cache(rng, tmp_path, monkeypatch):
    """The compile cache keys on precision and its hits keep the float32 edges."""
    monkeypatch.setenv("OPENPRIM_CACHE", "1")
    monkeypatch.setenv("OPENPRIM_CACHE_DIR", str(tmp_path / "cache"))
    g, x, want = fp32_net(rng)
    first, again = openprim.compile(g, precision="f16"), openprim.compile(g, precision="f16")
    assert (first.cache_hit, again.cache_hit) == (False, True)
    assert openprim.compile(g, precision="bf16").cache_hit is False
    y, s = again(x)
    assert y.dtype == np.float32 and {v["dtype"] for v in again.plan["values"]} == {"f16"}
    assert_close(y, want[0], "f16", reduction=27)

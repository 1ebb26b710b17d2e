"""Weights as values (`openprim.compile(graph, weights="values")`, docs/artifacts.md): a Graph's float params
are held by the executable and replaced by `load_weights` without a recompile.

Each weight set is checked against (a) a fresh compile of a Graph holding those weights as constants (batch
norm folded, filters packed, Winograd: other rounding, so within f32 tolerance) and (b) float64 numpy; on a
conv + batch norm + relu + linear network and on a transformer block (layer norm, linear layers, attention,
gelu, residuals). Also: the rule for which params become values, an .oprim artifact loaded by the runtime
and loaded from an .npz, every error naming the parameter, calls from threads during loads (each result is
one weight set's, never a mix), the GPU runtime's load against the stand-in driver of test_device_arrays.py,
an artifact for nvvm:sm_90, the compile cache key and the CLI option, and the default (weights="constants")
plan without parameters.
"""
from __future__ import annotations

import copy
import math
import threading
import time
import warnings
import zipfile

import numpy as np
import pytest

import openprim
from helpers import assert_close
from openprim import cache, compiler
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim.cli import main as cli_main
from openprim.pyfrontend import Graph
from openprim.pyfrontend.emit import FrozenParamWarning
from openprim.runtime import artifact, load

EPS = 1e-5


# ------------------------------------------------------------------------------------ the networks
def conv_weights(rng) -> dict:
    """conv(3 -> 8, 3x3) + BN + relu, conv(8 -> 16, 3x3) + BN + relu, global average pool, linear(16 -> 5)."""
    def he(*shape):
        return (rng.standard_normal(shape) * math.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32)

    def bn(name, c):
        return {f"{name}.weight": rng.uniform(0.5, 1.5, c).astype(np.float32),
                f"{name}.bias": (0.1 * rng.standard_normal(c)).astype(np.float32),
                f"{name}.running_mean": (0.1 * rng.standard_normal(c)).astype(np.float32),
                f"{name}.running_var": rng.uniform(0.5, 1.5, c).astype(np.float32)}
    return {"conv1.weight": he(8, 3, 3, 3), "conv1.bias": (0.1 * rng.standard_normal(8)).astype(np.float32),
            **bn("bn1", 8), "conv2.weight": he(16, 8, 3, 3), **bn("bn2", 16),
            "fc.weight": he(5, 16), "fc.bias": (0.1 * rng.standard_normal(5)).astype(np.float32)}


def conv_net(w: dict) -> Graph:
    g = Graph(name="convnet")
    x = g.input("x", (2, 3, 12, 12))
    p = {k: g.param(k, v) for k, v in w.items()}

    def bn(y, name):
        return g.batch_norm(y, p[f"{name}.weight"], p[f"{name}.bias"], p[f"{name}.running_mean"],
                            p[f"{name}.running_var"], eps=EPS)
    y = g.relu(bn(g.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=1), "bn1"))
    y = g.relu(bn(g.conv2d(y, p["conv2.weight"], padding=1), "bn2"))
    g.output(g.linear(g.flatten(g.global_avg_pool(y)), p["fc.weight"], p["fc.bias"]))
    return g


def _conv(x, w, b=None, pad=1):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - r + 1, wd + 2 * pad - s + 1
    out = sum(np.einsum("nchw,kc->nkhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
              for i in range(r) for j in range(s))
    return out if b is None else out + b[None, :, None, None]


def conv_reference(w: dict, x) -> np.ndarray:
    w = {k: v.astype(np.float64) for k, v in w.items()}

    def bn(y, name):
        c = lambda a: a[None, :, None, None]  # noqa: E731
        return (y - c(w[f"{name}.running_mean"])) / np.sqrt(c(w[f"{name}.running_var"]) + EPS) \
            * c(w[f"{name}.weight"]) + c(w[f"{name}.bias"])
    y = np.maximum(bn(_conv(x.astype(np.float64), w["conv1.weight"], w["conv1.bias"]), "bn1"), 0)
    y = np.maximum(bn(_conv(y, w["conv2.weight"]), "bn2"), 0)
    return y.mean(axis=(2, 3)) @ w["fc.weight"].T + w["fc.bias"]


B, S, D, H, F = 2, 6, 16, 2, 32   # batch, tokens, width, heads, MLP width
ORDER = np.array([0, 2, 1, 3, 5, 4])                      # an i64 constant: a token order
KEEP = np.array([True, True, False, True, True, True])    # a bool constant: tokens kept


def block_weights(rng) -> dict:
    def lin(name, n, k):
        return {f"{name}.weight": (rng.standard_normal((n, k)) / math.sqrt(k)).astype(np.float32),
                f"{name}.bias": (0.1 * rng.standard_normal(n)).astype(np.float32)}
    ln = lambda name: {f"{name}.weight": rng.uniform(0.5, 1.5, D).astype(np.float32),  # noqa: E731
                       f"{name}.bias": (0.1 * rng.standard_normal(D)).astype(np.float32)}
    return {**ln("ln1"), **lin("q", D, D), **lin("k", D, D), **lin("v", D, D), **lin("out", D, D), **ln("ln2"),
            **lin("fc1", F, D), **lin("fc2", D, F)}


def block(w: dict) -> Graph:
    """A pre-norm transformer block; tokens reordered by an i64 constant, one token zeroed by a bool one."""
    g = Graph(name="block")
    x = g.input("x", (B, S, D))
    p = {k: g.param(k, v) for k, v in w.items()}
    x = g.gather(x, g.param("order", ORDER, "i64"), axis=1)
    x = g.where(g.reshape(g.param("keep", KEEP, "bool"), (1, S, 1)), x, 0.0)
    h = g.layer_norm(x, p["ln1.weight"], p["ln1.bias"], eps=EPS)

    def heads(name):
        t = g.reshape(g.linear(h, p[f"{name}.weight"], p[f"{name}.bias"]), (B, S, H, D // H))
        return g.transpose(t, [0, 2, 1, 3])
    a = g.attention(heads("q"), heads("k"), heads("v"))
    a = g.reshape(g.transpose(a, [0, 2, 1, 3]), (B, S, D))
    x = x + g.linear(a, p["out.weight"], p["out.bias"])
    h = g.layer_norm(x, p["ln2.weight"], p["ln2.bias"], eps=EPS)
    h = g.gelu(g.linear(h, p["fc1.weight"], p["fc1.bias"]))
    g.output(x + 0.5 * g.linear(h, p["fc2.weight"], p["fc2.bias"]))
    return g


def block_reference(w: dict, x) -> np.ndarray:
    w = {k: v.astype(np.float64) for k, v in w.items()}
    x = np.where(KEEP[None, :, None], x.astype(np.float64)[:, ORDER], 0.0)

    def ln(t, name):
        mu, var = t.mean(-1, keepdims=True), t.var(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + EPS) * w[f"{name}.weight"] + w[f"{name}.bias"]

    def lin(t, name):
        return t @ w[f"{name}.weight"].T + w[f"{name}.bias"]
    h = ln(x, "ln1")
    q, k, v = (lin(h, n).reshape(B, S, H, D // H).transpose(0, 2, 1, 3) for n in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D // H)
    s = np.exp(s - s.max(-1, keepdims=True))
    a = (s / s.sum(-1, keepdims=True)) @ v
    x = x + lin(a.transpose(0, 2, 1, 3).reshape(B, S, D), "out")
    h = lin(ln(x, "ln2"), "fc1")
    h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    return x + 0.5 * lin(h, "fc2")


NETS = {"convnet": (conv_net, conv_weights, conv_reference, (2, 3, 12, 12), 8 * 9 + 16),
        "block": (block, block_weights, block_reference, (B, S, D), 3 * D + F)}


@pytest.fixture(scope="module")
def compiled():
    """Per network, its executable compiled once with weights="values" (the first weight set's values)."""
    rng = np.random.default_rng(31)
    return {name: openprim.compile(build(weights(rng)), weights="values")
            for name, (build, weights, *_) in NETS.items()}


# ------------------------------------------------------------------------------------ load, run, compare
@pytest.mark.parametrize("name", NETS)
def test_weight_sets_match_constants_and_float64(compiled, name, rng):
    build, weights, reference, shape, reduction = NETS[name]
    exe = compiled[name]
    x = rng.standard_normal(shape).astype(np.float32)
    for _ in range(3):
        w = weights(rng)
        exe.load_weights(w)
        y = exe(x)
        assert_close(y, openprim.compile(build(w))(x), "f32", reduction, f"{name} against weights='constants'")
        assert_close(y, reference(w, x), "f32", reduction, f"{name} against float64")
        state = exe.state_dict()
        assert list(state) == exe.param_names and all(np.array_equal(state[k], w[k]) for k in w)


def test_which_params_become_values(compiled):
    """Named float params in graph order; not the i64/bool constants, nor the Graph's own scalars."""
    rng = np.random.default_rng(0)
    assert compiled["convnet"].param_names == list(conv_weights(rng))
    assert compiled["block"].param_names == list(block_weights(rng))
    plan = compiled["block"].plan
    assert plan["version"] == 4 and {plan["values"][p["value"]]["storage"] for p in plan["params"]} == {"param"}
    # the linear layers' weights are stored as [in, out] (perm [1, 0]) and given as torch holds them
    assert {p["name"]: p.get("perm") for p in plan["params"]}["q.weight"] == [1, 0]
    assert not any(s["op"] == "transpose" and any(plan["values"][a]["storage"] == "param" for a in s["args"])
                   for s in plan["steps"]), "a parameter is re-laid out on every call"


def test_params_folded_at_build_time_stay_constants():
    """A param that only ops the Graph evaluates while it is built read (their operands all constants) is
    compiled into their result: it is no parameter, and a warning names it."""
    g = Graph()
    x = g.input("x", (3, 4))
    table = g.param("table", np.arange(20.0).reshape(5, 4))     # rows looked up by constant ids: evaluated
    w = g.param("w", np.ones((4, 4)))
    g.output(g.matmul(x + g.gather(table, g.param("ids", np.array([4, 0, 2]), "i64")), w))
    with pytest.warns(FrozenParamWarning, match="param.s. table are read only by ops the Graph evaluated"):
        exe = compiler.compile(g, weights="values")
    assert exe.param_names == ["w"]
    with pytest.raises(OpenPrimError, match="unknown parameter.s. 'table'"):
        exe.load_weights({"table": np.zeros((5, 4))}, strict=False)


def test_a_name_given_twice():
    """Parameters are named uniquely: a name several params share is the first one's, then "<name>#2", ..."""
    g = Graph()
    x = g.input("x", (4,))
    g.output(x * g.param("w", np.ones(4)) + g.param("w", np.ones(4)) - g.param("w", np.ones(4)))
    exe = compiler.compile(g, weights="values")
    assert exe.param_names == ["w", "w#2", "w#3"]
    exe.load_weights({"w": np.full(4, 2.0), "w#2": np.full(4, 3.0), "w#3": np.ones(4)})
    assert np.array_equal(exe(np.ones(4, np.float32)), np.full(4, 4.0))


# ------------------------------------------------------------------------------------ artifacts
def test_artifact_and_npz(compiled, tmp_path, rng):
    build, weights, reference, shape, reduction = NETS["convnet"]
    w0, w1 = weights(rng), weights(rng)
    path = tmp_path / "net.oprim"
    info = compiler.save(build(w0), str(path), weights="values")
    assert artifact.read(str(path))[0]["version"] == 3 and "params" in info["plan"]
    with zipfile.ZipFile(path) as z:
        assert "params.bin" in z.namelist()
    exe = load(str(path))
    x = rng.standard_normal(shape).astype(np.float32)
    assert exe.param_names == list(w0)
    assert_close(exe(x), reference(w0, x), "f32", reduction, "the artifact's initial weights")
    np.savez(tmp_path / "w1.npz", **w1)
    exe.load_weights(tmp_path / "w1.npz")
    y1 = exe(x)
    assert_close(y1, reference(w1, x), "f32", reduction, "weights from an .npz")
    compiled["convnet"].load_weights(str(tmp_path / "w1.npz"))
    assert np.array_equal(compiled["convnet"](x), y1), "the JIT and the artifact run the same kernels"
    assert all(np.array_equal(v, w0[k]) for k, v in load(str(path)).state_dict().items()), \
        "a load changes the executable, not its artifact"


def test_older_runtimes_refuse_parameters(tmp_path, monkeypatch):
    """An artifact with parameters has format version 3: a runtime that reads version 2 only says so."""
    build, weights, *_ = NETS["convnet"]
    path = str(tmp_path / "net.oprim")
    compiler.save(build(weights(np.random.default_rng(1))), path, weights="values")
    monkeypatch.setattr(artifact, "VERSIONS", (2,))
    with pytest.raises(OpenPrimError, match=r"artifact format version 3 is not supported \(this runtime reads "
                                            r"versions 2\); update OpenPrim, or recompile the model"):
        load(path)


def test_manifest_checks_the_params(tmp_path):
    build, weights, *_ = NETS["convnet"]
    path = str(tmp_path / "net.oprim")
    compiler.save(build(weights(np.random.default_rng(2))), path, weights="values")
    manifest, kernels, w = artifact.read(path)
    with zipfile.ZipFile(path) as z:
        params = z.read("params.bin")

    def rewritten(change, members=None):
        m = {k: v for k, v in manifest.items() if k not in ("format", "version", "kernel_files", "signatures",
                                                              "members", "digest", "plan")}
        plan = copy.deepcopy(manifest["plan"])
        change(plan)
        out = str(tmp_path / "edited.oprim")
        artifact.write(out, plan, kernels, w, m, params=members if members is not None else params)
        return out
    with pytest.raises(OpenPrimError, match="parameter names .* are not unique"):
        load(rewritten(lambda p: p["params"][1].update(name=p["params"][0]["name"])))
    with pytest.raises(OpenPrimError, match="perm .* is not a permutation"):
        load(rewritten(lambda p: p["params"][0].update(perm=[0, 0, 1, 2])))
    with pytest.raises(OpenPrimError, match="params are 4 bytes, the plan expects"):
        load(rewritten(lambda p: None, b"1234"))
    with pytest.raises(OpenPrimError, match="ends at byte .* past the param of"):
        load(rewritten(lambda p: p.update(params_bytes=64), params[:64]))


# ------------------------------------------------------------------------------------ errors
def test_errors_name_the_parameter(compiled):
    exe = compiled["convnet"]
    good = exe.state_dict()
    x = np.ones((2, 3, 12, 12), np.float32)
    before = exe(x)
    cases = [({**good, "conv1.weight": np.zeros((8, 3, 3))},
              r"parameter 'conv1.weight' must have shape \(8, 3, 3, 3\)"),
             ({**good, "conv9.weight": np.zeros(3)}, r"unknown parameter\(s\) 'conv9.weight'"),
             ({k: v for k, v in good.items() if k != "bn2.bias"},
              r"missing parameter\(s\) 'bn2.bias' \(pass strict=False"),
             ({**good, "fc.bias": np.full(5, 1e39)},
              r"parameter 'fc.bias' \(float64\) has values beyond the range of f32"),
             ({**good, "fc.bias": np.arange(5)}, r"parameter 'fc.bias' is int64; a f32 parameter takes floating"),
             ("/nonexistent/w.npz", r"/nonexistent/w.npz: cannot read as a .npz"),
             ([1, 2], "load_weights takes a mapping of names to arrays or the path of a .npz file")]
    for weights, match in cases:
        with pytest.raises(OpenPrimError, match=match):
            exe.load_weights(weights)
    assert np.array_equal(exe(x), before), "a refused load changes nothing"
    exe.load_weights({"fc.bias": good["fc.bias"] + 1}, strict=False)     # the others keep their values
    assert np.allclose(exe(x), before + 1, atol=1e-5)
    exe.load_weights(good)
    with pytest.raises(OpenPrimError, match="has no parameters to load: its weights are compile-time constants"):
        openprim.compile(conv_net(good)).load_weights(good)


def test_bf16_parameters():
    """A uint16 array for a bf16 parameter is refused (it would be read as bits); ml_dtypes' bfloat16 is not."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    g = Graph(dtype="bf16")
    x = g.input("x", (4, 8))
    g.output(g.linear(x, g.param("w", np.ones((3, 8)))))
    exe = compiler.compile(g, weights="values")
    with pytest.raises(OpenPrimError, match=r"parameter 'w' is a uint16 array for a bf16 tensor"):
        exe.load_weights({"w": np.ones((3, 8), np.uint16)})
    w = np.random.default_rng(3).standard_normal((3, 8)).astype(ml_dtypes.bfloat16)
    exe.load_weights({"w": w})
    xs = np.ones((4, 8), np.float32)
    assert_close(exe(xs), xs @ w.astype(np.float64).T, "bf16", 8)
    assert np.array_equal(exe.state_dict()["w"], w.astype(np.float32))


# ------------------------------------------------------------------------------------ threads
def test_calls_during_loads_see_one_weight_set(compiled, rng):
    """4 threads call while another loads two weight sets in turn: every result is one of the two outputs,
    bit for bit."""
    _, weights, _, shape, _ = NETS["convnet"]
    exe = compiled["convnet"]
    x = rng.standard_normal(shape).astype(np.float32)
    sets = [weights(rng), weights(rng)]
    want = []
    for w in sets:
        exe.load_weights(w)
        want.append(exe(x))
    assert not np.array_equal(want[0], want[1])
    done, results, errors = threading.Event(), [], []

    def caller():
        try:
            while not done.is_set():
                results.append(exe(x))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    loads, start = 0, time.perf_counter()
    while len(results) < 400 and time.perf_counter() - start < 30 and not errors:
        exe.load_weights(sets[loads % 2])
        loads += 1
    done.set()
    for t in threads:
        t.join()
    assert not errors and len(results) >= 400 and loads > 50
    seen = [sum(np.array_equal(r, w) for r in results) for w in want]
    assert sum(seen) == len(results), f"{len(results) - sum(seen)} of {len(results)} results are neither weight set's"
    assert min(seen) > 0, seen
    assert exe.arenas <= 5


# ------------------------------------------------------------------------------------ GPU
def test_gpu_runtime_loads_into_the_params_region(monkeypatch, rng):
    """GpuExecutable against test_device_arrays.py's stand-in driver: the plan of that file with its weight a
    parameter; a load waits for the device, copies into the params region, and the replayed graph reads it."""
    import test_device_arrays as fake_gpu
    from openprim.runtime.cuda import CudaDevice
    from openprim.runtime.gpu import GpuExecutable
    fake = fake_gpu.install(monkeypatch, fake_gpu.FakeCuda())
    plan = fake_gpu._plan()
    plan["values"][2].update(storage="param", offset=0)
    plan.update(version=4, params=[{"name": "w", "value": 2}], params_bytes=fake_gpu.N * 4, weights_bytes=0)
    x, s, w0, w1 = (rng.standard_normal(shape).astype(np.float32) for shape in (fake_gpu.SHAPE, 7, fake_gpu.SHAPE,
                                                                               fake_gpu.SHAPE))
    exe = GpuExecutable(plan, b"image", b"", CudaDevice(0), params=w0.tobytes())
    assert exe.param_names == ["w"]
    np.testing.assert_allclose(exe(x, s), fake_gpu._want(x, s, w0), rtol=1e-5, atol=1e-6)
    fake.log.clear()
    exe.load_weights({"w": w1})
    assert [e[:2] for e in fake.log] == [("HtoD", exe.params)], "one copy, into the params region"
    np.testing.assert_allclose(exe(x, s), fake_gpu._want(x, s, w1), rtol=1e-5, atol=1e-6)
    assert fake.calls("graph_launch") and not fake.calls("begin_capture"), "the graph of the first call still serves"
    assert np.array_equal(exe.state_dict()["w"], w1)
    with pytest.raises(OpenPrimError, match=r"parameter 'w' must have shape \(3, 5, 7\)"):
        exe.load_weights({"w": w1[0]})


def test_gpu_artifact_with_parameters(tmp_path):
    """An artifact for sm_90 with weights="values" (no GPU here: it is written and read, not run)."""
    build, weights, *_ = NETS["block"]
    path = str(tmp_path / "block.oprim")
    info = compiler.save(build(weights(np.random.default_rng(4))), path, target="nvvm:sm_90", weights="values")
    manifest, _, _ = artifact.read(path)
    assert manifest["version"] == 3 and [p["name"] for p in manifest["plan"]["params"]] == list(
        weights(np.random.default_rng(4)))
    assert info["plan"]["params_bytes"] > 0


# ------------------------------------------------------------------------------------ the option elsewhere
def test_cache_key_and_cli(tmp_path, monkeypatch):
    build, weights, *_ = NETS["convnet"]
    g = build(weights(np.random.default_rng(5)))
    cpu = parse_target("cpu")
    assert cache.graph_key(g, cpu, {"layout": "NHWC", "weights": "constants"}) == \
        cache.graph_key(g, cpu, {"layout": "NHWC"})
    assert cache.graph_key(g, cpu, {"weights": "values"}) != cache.graph_key(g, cpu, {})
    with pytest.raises(OpenPrimError, match="weights must be one of constants, values, got 'consts'"):
        openprim.compile(g, weights="consts")
    with pytest.raises(OpenPrimError, match="weights='values' needs a Graph"):
        compiler.compile("func.func @main() { return }", weights="values")
    model = tmp_path / "m.py"
    model.write_text("import numpy as np\nfrom openprim.pyfrontend import Graph\n"
                     "def build():\n    g = Graph()\n    x = g.input('x', (2, 4))\n"
                     "    g.output(g.linear(x, g.param('w', np.ones((3, 4))), g.param('b', np.zeros(3))))\n"
                     "    return g\n")
    out = tmp_path / "m.oprim"
    assert cli_main(["compile", str(model), "-o", str(out), "--weights", "values", "--no-cache"]) == 0
    exe = load(str(out))
    assert exe.param_names == ["w", "b"]
    exe.load_weights({"w": np.full((3, 4), 2.0), "b": np.arange(3.0)})
    assert np.array_equal(exe(np.ones((2, 4), np.float32)), np.tile([8.0, 9.0, 10.0], (2, 1)))


def test_constants_by_default(tmp_path):
    """weights="constants" (the default) is what it was: no parameters in the plan, the batch norms folded,
    the same plan and weights as an explicit weights="constants", format version 2 without params.bin."""
    build, weights, *_ = NETS["convnet"]
    w = weights(np.random.default_rng(6))
    a, b = str(tmp_path / "a.oprim"), str(tmp_path / "b.oprim")
    info = compiler.save(build(w), a)
    compiler.save(build(w), b, weights="constants")
    plan = info["plan"]
    assert artifact.read(a)[0]["version"] == 2 and plan["version"] == 3
    assert "params" not in plan and "params_bytes" not in plan
    assert {v["storage"] for v in plan["values"]} <= {"arena", "weight"}
    assert not any(s["op"] == "batch_norm" for s in plan["steps"]), "batch norms are folded"
    (ma, _, wa), (mb, _, wb) = artifact.read(a), artifact.read(b)
    assert ma["plan"] == mb["plan"] and wa == wb
    with zipfile.ZipFile(a) as z:
        assert sorted(z.namelist()) == ["kernels.so", "manifest.json", "weights.bin"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        openprim.compile(build(w))   # no FrozenParamWarning: the rule only runs for weights="values"


def test_winograd_needs_a_constant_filter():
    """The packed Winograd kernels transform the filter at compile time: forced on a parameter's filter it is
    an error, and the heuristic does not choose them for one."""
    rng = np.random.default_rng(7)
    g = Graph(layout="NHWC")
    x = g.input("x", (1, 16, 16, 16))
    g.output(g.conv2d(x, g.param("w", rng.standard_normal((32, 3, 3, 16)).astype(np.float32)), padding=1))
    solver = "conv_winograd_f4x3_packed"
    assert compiler.compile(g, solver=solver).plan["steps"][0]["solver"] == solver
    with pytest.raises(OpenPrimError, match=f"solver '{solver}' is not applicable .*: needs a constant filter"):
        compiler.compile(g, solver=solver, weights="values")
    exe = compiler.compile(g, weights="values")
    assert all("winograd" not in s.get("solver", "") or not s["solver"].endswith("_packed") for s in exe.plan["steps"])


def test_contract_and_batch_chunks():
    """prim.param_names and prim.param_perms read back; prim-batch-chunks finds the batch of the inputs, not
    of the parameters (which are arguments too)."""
    from openprim import dialect
    from openprim.dialect import contract, graph_functions
    from openprim.passes import batch_chunks
    from openprim.pyfrontend.emit import to_module
    g = Graph()
    x = g.input("x", (4, 8, 6, 6))
    w = g.param("w", np.ones((8, 8, 3, 3), np.float32))
    g.output(g.relu(g.conv2d(x, w, g.param("b", np.zeros(8, np.float32)), padding=1)))
    with dialect.new_context() as ctx:
        module = to_module(g, ctx, params=True)
        fn = graph_functions(module.operation)[0]
        assert contract.param_names(fn) == ["w", "b"] and contract.param_perms(fn) == [None, None]
        contract.set_param_perms(fn, [[2, 3, 1, 0], None])
        assert contract.param_perms(fn) == [[2, 3, 1, 0], None]
        found = batch_chunks.analyze(fn)
        assert isinstance(found, batch_chunks.Analysis) and found.n == 4, found


def test_compile_cache_keeps_the_parameters(tmp_path, monkeypatch, rng):
    monkeypatch.setenv("OPENPRIM_CACHE", "1")
    monkeypatch.setenv("OPENPRIM_CACHE_DIR", str(tmp_path))
    build, weights, reference, shape, reduction = NETS["convnet"]
    w0, w1 = weights(rng), weights(rng)
    x = rng.standard_normal(shape).astype(np.float32)
    first = openprim.compile(build(w0), weights="values")
    again = openprim.compile(build(w0), weights="values")
    constants = openprim.compile(build(w0))
    assert (first.cache_hit, again.cache_hit, constants.cache_hit) == (False, True, False)
    assert again.param_names == list(w0) and "params" not in constants.plan
    again.load_weights(w1)
    assert_close(again(x), reference(w1, x), "f32", reduction, "a cache hit's executable, new weights")
    assert_close(openprim.compile(build(w0), weights="values")(x), reference(w0, x), "f32", reduction,
                 "the entry keeps its initial weights")

"""Emission of a Graph (pyfrontend/emit.py) and what reads it back: constants in the module's text (bf16
included), `openprim emit` with its weights out of line (model.mlir + model.weights.npz) read back by
openprim-opt, `openprim run` and the .mlir importer; and the torch importer's warnings (issue 29)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from mlir import ir

import openprim
from openprim import cli, dialect, opt
from openprim.base.dtypes import to_storage
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import emit, importers


@pytest.mark.parametrize("n", range(1, 18))
def test_bf16_constant_read_back(n):
    """Every bf16 constant's bits come back from its printed form: MLIR prints what decimal cannot
    round-trip (inf, nan) as 0xFF80-style bits, and small constants as a list, large ones as one hex string
    (a causal mask of n x n failed for n = 4, 7, 8 before: 0xFF80 was read as two numbers, 0 and 80)."""
    values = np.linspace(-3e5, 2e-3, n * n).reshape(n, n)
    values[np.arange(n)[None, :] > np.arange(n)[:, None]] = -np.inf
    values.flat[::5] = np.inf
    values.flat[1::7] = np.nan
    bits = to_storage(values, "bf16")
    with dialect.new_context(), ir.Location.unknown():
        attr = ir.DenseElementsAttr.get(bits, type=ir.BF16Type.get(), shape=[n, n])
        np.testing.assert_array_equal(dialect.to_numpy(attr), bits)


# A model file: a small network whose conv and linear weights are larger than INLINE_ELEMENTS (two of them
# named alike, in characters an MLIR handle cannot hold) and whose batch norm parameters and bias are not.
MODEL = """
import numpy as np
from openprim.pyfrontend import Graph

def build(dtype="f32"):
    rng = np.random.default_rng(0)
    w = lambda *shape: rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
    g = Graph(layout="NCHW", dtype=dtype)
    y = g.conv2d(g.input("x", (2, 3, 9, 9)), g.param("stem/conv:0", w(8, 3, 3, 3)), stride=2, padding=1)
    y = g.relu(g.batch_norm(y, g.param("bn.weight", w(8) + 1), g.param("bn.bias", w(8)), g.param("bn.mean", w(8)),
                            g.param("bn.var", np.full(8, 1.5))))
    y = g.flatten(g.global_avg_pool(g.conv2d(y, g.param("stem/conv:0", w(24, 8, 1, 1)))))
    g.output(g.softmax(g.linear(y, g.param("fc.weight", w(10, 24)), g.param("fc.bias", w(10)))))
    return g
"""


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(MODEL)
    return path


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_emit_round_trip(tmp_path, model, dtype):
    """`openprim emit` writes model.mlir with the large weights as dense_resource handles and their data in
    model.weights.npz; openprim-opt runs prim-pipeline on it, and `openprim run model.mlir` gives what
    compiling the Graph gives."""
    mlir, npz = tmp_path / "net.mlir", tmp_path / "net.weights.npz"
    assert cli.main(["emit", str(model), "-D", f"dtype={dtype}", "-o", str(mlir)]) == 0
    text = mlir.read_text()
    assert text.count("dense_resource<") == 3 and "dialect_resources" not in text and len(text) < 4000
    for name in ("stem_conv_0", "stem_conv_0_1", "fc.weight"):
        assert f"dense_resource<{name}> :" in text
    with np.load(npz) as z:
        assert sorted(z.files) == ["fc.weight", "stem_conv_0", "stem_conv_0_1"]
        assert z["stem_conv_0_1"].shape == (24, 8, 1, 1) and z["fc.weight"].dtype == to_storage(0, dtype).dtype

    lowered = tmp_path / "lowered.mlir"
    assert opt.main([str(mlir), "-p", "prim-pipeline", "-o", str(lowered)]) == 0
    assert "module @kernels" in lowered.read_text()

    x = np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)
    want = openprim.compile(importers.load(str(model), dtype=dtype))(x)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", str(mlir), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"),
                     "--repeat", "0"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)


def test_emit_weights_missing_or_wrong(tmp_path, model):
    """Without its .npz a module still parses and verifies, but whatever needs a weight's data is one error
    naming the file; an array of the wrong shape is one error naming the array and the constant."""
    mlir = tmp_path / "m.mlir"
    npz, n = emit.write(importers.load(str(model)), str(mlir))
    assert npz == str(tmp_path / "m.weights.npz") and n == 3
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(npz, **{**arrays, "fc.weight": arrays["fc.weight"][:5]})
    with pytest.raises(OpenPrimError, match=r"m.weights.npz: 'fc.weight' is float32\[5, 24\]; the constant at "
                                            r"\S*m.mlir:\d+:\d+ needs float32\[10, 24\]"):
        importers.load(str(mlir))
    (tmp_path / "m.weights.npz").unlink()
    assert opt.main([str(mlir), "--verify-only", "-o", str(tmp_path / "v.mlir")]) == 0
    with pytest.raises(OpenPrimError, match=r"cannot read the data of dense_resource<stem_conv_0>.*\.weights\.npz"):
        openprim.compile(importers.load(str(mlir)))


def test_small_constants_stay_inline(model):
    """to_module without a weights dict (what compiles) holds every constant's data; with one, constants of
    up to INLINE_ELEMENTS elements stay in the module."""
    g = importers.load(str(model))
    assert "dense_resource" not in str(emit.to_module(g))
    weights = {}
    text = str(emit.to_module(g, weights=weights))
    assert text.count("dense<") == 5 and len(weights) == 3   # the batch norm parameters and the bias


def test_compile_module_no_future_warning():
    """compile_module emits no FutureWarning: torch's own LeafSpec deprecation, raised inside
    run_decompositions, is silenced there (and as an error it made the import skip the decompositions)."""
    torch = pytest.importorskip("torch")
    from openprim.torch_backend import compile_module
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU())
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = compile_module(model, (x,))
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]
    np.testing.assert_allclose(run(x).numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)

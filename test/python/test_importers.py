"""The importer registry (openprim.pyfrontend.importers): files by suffix (.py, .onnx, .pt2, .mlir) through
`load` and the `openprim` commands; the policy both importers share (importers/common.py); the room for
importers of MLIR-level input (pyfrontend/mlir_import/: `.mlir` prim modules compile and run)."""
import sys

import numpy as np
import pytest

import openprim
from openprim import cli
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph, importers, to_module
from openprim.pyfrontend.importers import common

MODEL_PY = """\
import numpy as np
from openprim.pyfrontend import Graph


def build(channels=4):
    g = Graph()
    x = g.input("x", (2, 3, 5, 5))
    w = np.random.default_rng(0).standard_normal((channels, 3, 3, 3))
    g.output(g.relu(g.conv2d(x, g.param("w", w), padding=1)))
    return g
"""


def openprim_main(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line_error(capsys, *argv) -> str:
    rc, _, err = openprim_main(capsys, *argv)
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, (rc, err)
    return err


# ----------------------------------------------------------------------------- the shared policy
def test_common_policy():
    assert common.dominant_dtype({"f16": 10, "f32": 3}, "f32") == "f16"
    assert common.dominant_dtype({"f16": 5, "f32": 5}, None) == "f32"      # f32 wins a tie
    assert common.dominant_dtype({}, "bf16") == "bf16" and common.dominant_dtype({}, None) == "f32"
    assert common.inexact_int(np.array([2048, -7]), "f16", "e") is None
    assert common.inexact_int(np.array([1.5e9]), "bf16", "e") is None      # floats are not its business
    assert common.inexact_int(np.array([4097]), "f16", "e") == (
        "integer constant 'e' (values up to 4097) is read as data and cannot be computed exactly in f16; "
        "OpenPrim computes in floats only")
    assert common.float64_message("ONNX input 'x'", "fix it").startswith("ONNX input 'x' is float64; ")
    assert {common.DTYPE_NAMES[d]: d for d in common.DTYPE_NAMES if d in ("f32", "f16", "bf16")} == common.GRAPH_DTYPES


def test_missing_optional_package(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "onnx", None)   # an import of onnx fails as if it were not installed
    with pytest.raises(OpenPrimError, match=rf"^importing {path} needs the 'onnx' package: "
                                            r"pip install 'openprim\[onnx\]'$"):
        importers.load(path)


# ----------------------------------------------------------------------------- the registry
def test_suffixes_and_errors(tmp_path, capsys):
    assert importers.suffixes() == [".py", ".onnx", ".pt2", ".mlir"]
    (tmp_path / "m.txt").write_text("x")
    kinds = ("expected .py (a Python model file defining build()), .onnx (an ONNX model), .pt2 (a program "
             "saved with torch.export.save), .mlir (a prim-dialect module)")
    with pytest.raises(OpenPrimError) as e:
        importers.load(tmp_path / "m.txt")
    assert str(e.value) == f"{tmp_path / 'm.txt'}: unknown kind of file; {kinds}"
    with pytest.raises(OpenPrimError, match="is a directory; expected a model file: .py"):
        importers.load(tmp_path)
    with pytest.raises(OpenPrimError, match="no such file"):
        importers.load(tmp_path / "none.onnx")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "m.onnx")
    # an ONNX model's options beyond input_shapes and dims are sizes of its named dimensions
    assert importers.load(tmp_path / "m.onnx", N=4).inputs[0].shape == (4, 3)
    with pytest.raises(OpenPrimError, match=r"dims names \['batch'\], not a named dimension of any input "
                                            r"\(the model's: \['N'\]\)"):
        importers.load(tmp_path / "m.onnx", batch=2)
    assert "unknown kind of file; expected .py" in one_line_error(capsys, "compile", str(tmp_path / "m.txt"))


def test_python_model_file(tmp_path, capsys):
    """A .py model: build()'s keyword arguments are the options (-D on the command line)."""
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    assert importers.load(path, channels=2).outputs[0].shape == (2, 2, 5, 5)
    assert "build() got an unexpected keyword argument 'nosuch'" in one_line_error(
        capsys, "run", str(path), "-D", "nosuch=1", "--repeat", "0")


def test_register(monkeypatch, tmp_path):
    monkeypatch.setattr(importers, "_IMPORTERS", dict(importers._IMPORTERS))

    def toy(path, /, size=3):
        g = Graph()
        g.output(g.relu(g.input("x", (size,))))
        return g
    importers.register((".toy",), toy, what="a toy")
    (tmp_path / "a.toy").write_text("")
    assert importers.load(tmp_path / "a.toy", size=5).inputs[0].shape == (5,)
    assert importers.suffixes()[-1] == ".toy"
    with pytest.raises(OpenPrimError, match="a toy takes no option bogus; its options: size"):
        importers.load(tmp_path / "a.toy", bogus=1)
    with pytest.raises(ValueError, match=r"suffixes \['.onnx'\] already have an importer"):
        importers.register((".onnx",), toy)


# ----------------------------------------------------------------------------- .pt2: torch.export.save
def test_pt2(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 5 * 5, 7)).eval()
    x = torch.randn(2, 3, 5, 5)
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    graph = importers.load(path)
    assert isinstance(graph, Graph) and graph.inputs[0].shape == (2, 3, 5, 5)
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    np.testing.assert_allclose(openprim.compile(graph)(x.numpy()), want, rtol=1e-4, atol=1e-5)
    np.save(tmp_path / "x.npy", x.numpy())
    rc, out, _ = openprim_main(capsys, "run", str(path), "--input", str(tmp_path / "x.npy"), "-o",
                               str(tmp_path / "y.npy"), "--repeat", "0")
    assert rc == 0 and out.startswith(f"compiled {path} for cpu")
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)
    (tmp_path / "bad.pt2").write_bytes(b"not a zip")
    assert "bad.pt2: cannot read as a torch.export program: BadZipFile" in one_line_error(
        capsys, "run", str(tmp_path / "bad.pt2"))
    assert "a program saved with torch.export.save takes no option batch; it has none" in one_line_error(
        capsys, "run", str(path), "-D", "batch=2")


# ----------------------------------------------------------------------------- .mlir: the MLIR room
def test_mlir_prim_module(tmp_path, capsys):
    """A .mlir prim module imports as an ir.Module; `openprim compile` (uncached: the cache keys Graphs) and
    `openprim run` take it, with the numbers of the Graph it was emitted from; the Graph-only commands say
    they need a Graph."""
    (tmp_path / "model.py").write_text(MODEL_PY)
    graph = importers.load(tmp_path / "model.py")
    path = tmp_path / "model.mlir"
    path.write_text(str(to_module(graph)))
    module = importers.load(path)
    assert not isinstance(module, Graph) and "prim.conv2d" in str(module)
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 5)).astype(np.float32)
    want = openprim.compile(graph)(x)
    np.save(tmp_path / "x.npy", x)
    rc, out, err = openprim_main(capsys, "compile", str(path), "-o", str(tmp_path / "m.oprim"))
    assert rc == 0 and out.startswith(f"compiled {path} for cpu"), err
    for model in (str(tmp_path / "m.oprim"), str(path)):
        rc, _, err = openprim_main(capsys, "run", model, "--input", str(tmp_path / "x.npy"), "-o",
                                   str(tmp_path / "y.npy"), "--repeat", "0")
        assert rc == 0, err
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(OpenPrimError, match="a prim module; this command needs a model that imports as a Graph"):
        cli.load_model(str(path), [])


def test_mlir_errors(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_text("module {\n  hello\n}\n")
    assert one_line_error(capsys, "run", str(bad)).startswith(f"{bad}:2:3: error: ")
    two = tmp_path / "two.mlir"
    body = "(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %r = \"prim.relu\"(%a) : (tensor<4xf32>) -> tensor<4xf32>\n" \
           "  return %r : tensor<4xf32>\n}\n"
    two.write_text(f"func.func @f{body}func.func @g{body}")
    with pytest.raises(OpenPrimError, match="two.mlir: holds 2 graph functions"):
        importers.load(two)
    shape = tmp_path / "shape.mlir"
    shape.write_text("func.func @f(%a: tensor<4xf32>) -> tensor<5xf32> {\n"
                     "  %r = \"prim.relu\"(%a) : (tensor<4xf32>) -> tensor<5xf32>\n  return %r : tensor<5xf32>\n}\n")
    with pytest.raises(OpenPrimError, match=r"shape.mlir:2:\d+: error: 'prim.relu' op "):
        importers.load(shape)
    binary = tmp_path / "binary.mlir"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(OpenPrimError, match=r"binary.mlir: not MLIR text \(byte 128 is not UTF-8\)"):
        importers.load(binary)

"""`openprim torch-check MODEL` (pyfrontend/torch/check.py): every aten op the torch importer cannot map in a
torch.export program, with counts and the first node of each; exit status 0 only when the program imports.

    python -m pytest test/python/test_torch_check.py -q
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from openprim.cli import main as openprim_main  # noqa: E402
from openprim.pyfrontend.torch import check, importer  # noqa: E402


class Unmapped(torch.nn.Module):
    """A mapped op (linear, relu, add) and an op the importer has no mapping for, twice."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = torch.relu(self.fc(x))
        return torch.special.bessel_j0(y) + torch.special.bessel_j0(x)


class Mapped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.sigmoid(self.fc(x)) * 2.0


def _save(tmp_path, module, name, *inputs):
    path = tmp_path / name
    torch.export.save(torch.export.export(module.eval(), inputs), str(path))
    return str(path)


def _cli(capsys, *argv):
    rc = openprim_main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_unmapped_op_listed_with_its_count(tmp_path, capsys):
    assert not importer.maps(torch.ops.aten.special_bessel_j0.default)   # else pick another op for this test
    path = _save(tmp_path, Unmapped(), "unmapped.pt2", torch.randn(2, 4))
    rc, out, err = _cli(capsys, "torch-check", path)
    assert rc == 1, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith(f"{path}: ") and "inputs: x float32[2,4]" in lines[0], out
    assert lines[1].startswith("2 of ") and lines[1].endswith("op nodes are not mapped (1 aten op):"), out
    assert lines[2].startswith("  aten.special_bessel_j0.default  x2  first: 'special_bessel_j0' ("), out
    assert "test_torch_check.py:" in lines[2] and "in forward" in lines[2], out   # the source line of the node
    assert len(lines) == 3, out
    assert err == f"openprim: error: {path} cannot be imported by the torch importer: 1 unmapped aten op, on stdout\n"


def test_all_mapped_exits_0(tmp_path, capsys):
    path = _save(tmp_path, Mapped(), "mapped.pt2", torch.randn(2, 4))
    rc, out, err = _cli(capsys, "torch-check", path)
    assert rc == 0 and err == "", err
    assert out.startswith(f"{path}: all ") and "op nodes map" in out and out.count("\n") == 1, out


def test_mapped_but_refused_by_the_import(tmp_path, capsys):
    """Every op maps, but the import refuses the program (a float64 input): exit 1, the import's reason."""
    path = _save(tmp_path, Mapped().double(), "double.pt2", torch.randn(2, 4, dtype=torch.float64))
    rc, out, err = _cli(capsys, "torch-check", path)
    assert rc == 1, (out, err)
    lines = out.splitlines()
    assert len(lines) == 2 and "inputs: x float64[2,4]" in lines[0], out
    assert lines[1].startswith("not importable: torch import: ") and "is float64" in lines[1], out
    assert err.endswith("refused by the import, on stdout\n") and err.count("\n") == 1, err


MODEL_FILE = """
import torch
from openprim.pyfrontend.torch import import_exported


class M(torch.nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(torch.tanh(x))


def build(batch=1):
    return import_exported(torch.export.export(M().eval(), (torch.randn(batch, 4),)))[0]
"""


def test_model_file(tmp_path, capsys):
    """A .py model file, loaded as the importers registry loads it: the programs its build() imports."""
    path = tmp_path / "model.py"
    path.write_text(MODEL_FILE)
    rc, out, err = _cli(capsys, "torch-check", str(path), "-D", "batch=3")
    assert rc == 1 and "inputs: x float32[3,4]" in out, (out, err)
    assert "  aten.special_bessel_j0.default  x1  first: 'special_bessel_j0' (model.py:8 in forward)" in out, out
    graph_api = tmp_path / "graph.py"
    graph_api.write_text("from openprim.pyfrontend import Graph\n\n\ndef build():\n    g = Graph()\n"
                         "    g.output(g.relu(g.input('x', (1, 4))))\n    return g\n")
    rc, out, err = _cli(capsys, "torch-check", str(graph_api))
    assert rc == 1 and out == "" and err.count("\n") == 1 and "imports no torch.export program" in err, err


@pytest.mark.parametrize("case", ["missing", "directory", "not a program", "unknown suffix", "option"])
def test_user_errors_are_one_line(tmp_path, capsys, case):
    """No traceback: one error line on stderr, nothing on stdout, exit status 1."""
    junk, onnx_file = tmp_path / "junk.pt2", tmp_path / "junk.onnx"
    junk.write_bytes(b"not a zip file")
    onnx_file.write_bytes(b"x")
    mapped = _save(tmp_path, Mapped(), "mapped.pt2", torch.randn(2, 4))
    argv, error = {
        "missing": ([str(tmp_path / "none.pt2")], f"'{tmp_path / 'none.pt2'}': no such file"),
        "directory": ([str(tmp_path)], f"{tmp_path}: is a directory"),
        "not a program": ([str(junk)], f"{junk}: cannot read as a torch.export program"),
        "unknown suffix": ([str(onnx_file)], f"{onnx_file}: torch-check reads a .pt2 program"),
        "option": ([mapped, "-D", "batch=2"], f"{mapped}: a program saved with torch.export.save takes no option"),
    }[case]
    rc, out, err = _cli(capsys, "torch-check", *argv)
    assert rc == 1 and out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith(f"openprim: error: {error}"), err


def test_coverage_table_lists_every_mapped_op():
    table = check.coverage_table()
    rows = table.splitlines()[2:]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == sorted(
        importer.SUPPORTED_OPS, key=lambda op: (op.lstrip("_").lower(), op))
    assert set(check._NOTES) <= set(importer.SUPPORTED_OPS)

"""The `openprim` command's contract with its user (GitHub issue 29): a run of an artifact refuses the options
that only apply to compiling; a closed pipe ends a command quietly, as it ends `cat`; `onnx-check` refuses
what the import refuses.

    python -m pytest test/python/test_cli_reliability.py -q
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from openprim import cli

MODEL = """
import numpy as np
from openprim.pyfrontend import Graph


def build(batch=1):
    g = Graph(layout="NHWC")
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 4))
    g.output(g.relu(g.conv2d(g.input("x", (batch, 6, 6, 4)), g.param("w", w), padding=1)))
    return g
"""


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """(model file, its compiled .oprim)."""
    d = tmp_path_factory.mktemp("cli")
    model, art = d / "tiny.py", d / "tiny.oprim"
    model.write_text(MODEL)
    assert cli.main(["compile", str(model), "-o", str(art)]) == 0
    return str(model), str(art)


def _cli(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("flags", [["--precision", "f16"], ["-D", "batch=4"], ["--solver", "conv_direct"],
                                   ["--target", "cpu"], ["--layout", "keep"], ["--no-cache"],
                                   ["-D", "batch=4", "--precision", "bf16"]])
def test_artifact_run_refuses_compile_flags(artifact, capsys, flags):
    """They used to be ignored (exit 0): the run did something else than asked."""
    _, art = artifact
    rc, out, err = _cli(capsys, "run", art, "--repeat", "0", *flags)
    given = [f for f in flags if f.startswith("-")]
    assert rc == 1 and out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith(f"openprim: error: {art} is compiled already: {', '.join(given)} ") and \
        "only to compiling a model" in err, err


def test_run_keeps_compile_flags_of_a_model(artifact, capsys):
    model, art = artifact
    assert _cli(capsys, "run", art, "--repeat", "0")[0] == 0
    rc, out, err = _cli(capsys, "run", model, "--repeat", "0", "-D", "batch=2", "--layout", "keep", "--no-cache",
                        "--solver", "conv_direct", "--target", "cpu")
    assert rc == 0 and "output 0: shape (2, 6, 6, 8)" in out, err


@pytest.mark.parametrize("argv", [["inspect", "{art}"], ["run", "{art}", "--repeat", "0"]])
def test_closed_pipe_ends_quietly_as_cat(artifact, argv):
    """`openprim inspect X | head -1` printed a BrokenPipeError traceback. The reader here closes the pipe
    before the command writes (it takes longer than that to start): status 141, as a shell reports for
    `cat` killed by SIGPIPE, and nothing on stderr."""
    _, art = artifact
    p = subprocess.Popen([sys.executable, "-m", "openprim.cli", *[a.format(art=art) for a in argv]],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == cli.SIGPIPE_STATUS and err == "", err


def _onnx_cases():
    """The six models onnx-check passed and the import refused: (name, model, what the refusal says)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T, helper, numpy_helper
    vi = helper.make_tensor_value_info

    def model(nodes, inputs, outputs, inits=(), opset=17):
        m = helper.make_model(helper.make_graph(nodes, "t", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    return [
        ("opset 30", model(relu, [vi("x", T.FLOAT, (2, 3))], [vi("y", T.FLOAT, (2, 3))], opset=30),
         "ONNX model uses opset 30"),
        ("float64", model(relu, [vi("x", T.DOUBLE, (2, 3))], [vi("y", T.DOUBLE, (2, 3))]), "is float64"),
        ("dynamic", model(relu, [vi("x", T.FLOAT, ("N", 3))], [vi("y", T.FLOAT, ("N", 3))]),
         "has a dynamic dimension 'N'"),
        ("string input", model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", T.STRING, (2, 3))],
                               [vi("y", T.STRING, (2, 3))]), "element type STRING"),
        ("resize area", model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="area")],
                              [vi("x", T.FLOAT, (1, 1, 2, 2))], [vi("y", T.FLOAT, (1, 1, 4, 4))],
                              [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")]), "mode='area'"),
        ("pad reflect", model([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
                              [vi("x", T.FLOAT, (1, 3))], [vi("y", T.FLOAT, (1, 11))],
                              [numpy_helper.from_array(np.array([0, 4, 0, 4], np.int64), "p")]),
         "reflect pads 4 and 4 of axis 1 must be smaller than its size 3"),
    ], onnx


def test_onnx_check_refuses_what_the_import_refuses(tmp_path, capsys):
    """onnx-check said "all nodes supported" for each of these; it now runs the import's own checks
    (importer.check_model) and names the reason, as the import does."""
    cases, onnx = _onnx_cases()
    from openprim.base.errors import OpenPrimError
    from openprim.pyfrontend.onnx import import_model
    for name, m, why in cases:
        path = tmp_path / f"{name.replace(' ', '_')}.onnx"
        onnx.save(m, str(path))
        with pytest.raises(OpenPrimError) as refused:
            import_model(str(path))
        assert why in str(refused.value), (name, refused.value)
        rc, out, err = _cli(capsys, "onnx-check", str(path))
        lines = out.splitlines()
        assert rc == 1 and err == f"openprim: error: {path} cannot be imported: 1 reason(s), on stdout\n", (name, err)
        assert len(lines) == 2 and lines[1] == f"not importable: {refused.value}", (name, out)


def test_onnx_check_reports_all_model_problems_at_once(tmp_path, capsys):
    """Every refusal of the model as a whole, not only the first the import meets."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T, helper
    vi = helper.make_tensor_value_info
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "t",
        [vi("a", T.DOUBLE, (2, 3)), vi("b", T.FLOAT, ("N", 3))], [vi("y", T.FLOAT, (2, 3))]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "two.onnx"
    onnx.save(m, str(path))
    rc, out, _ = _cli(capsys, "onnx-check", str(path))
    assert rc == 1 and [line.split(":")[0] for line in out.splitlines()[1:]] == ["not importable"] * 2, out
    assert "'a' is float64" in out and "'b' has a dynamic dimension 'N'" in out, out


def test_tune_progress_plain_in_a_log_a_bar_on_a_terminal(artifact, monkeypatch, tmp_path):
    """tune's progress was carriage returns and escape codes in a log; now one plain line per measured
    configuration where stderr is no terminal, and a tqdm bar where it is one."""
    import io
    from openprim.tuning_commands import Progress
    model, _ = artifact
    r = subprocess.run([sys.executable, "-m", "openprim.cli", "tune", model, "--budget", "0"], capture_output=True,
                       text=True, env={**os.environ, "OPENPRIM_USER_DB_PATH": str(tmp_path / "db.sqlite")})
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "\x1b" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert lines and all(line.startswith("[1/1] conv2d-1x4x6x6-k8-3x3") and " us" in line for line in lines), lines

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with Progress("[1/1] layer") as progress:
        progress.update(1, 4, "conv_direct {} 1.0 us")
        progress.update(2, 4, "conv_direct {} 2.0 us")
    assert "\r[1/1] layer:  50%|" in terminal.getvalue(), terminal.getvalue()

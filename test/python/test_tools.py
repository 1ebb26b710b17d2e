"""The dialect file, the command-line tools, artifacts and the MLIR-free runtime."""
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from openprim import compiler
from openprim.pyfrontend import Graph

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def run(*cmd, stdin=None):
    return subprocess.run(list(cmd), capture_output=True, text=True, input=stdin)


def small_graph():
    rng = np.random.default_rng(0)
    g = Graph(layout="NHWC")
    x = g.input("x", (1, 9, 7, 5))
    y = g.conv2d(x, g.param("w", rng.standard_normal((8, 3, 3, 5))), g.param("b", rng.standard_normal(8)),
                 stride=2, padding=1)
    g.output(g.softmax(g.flatten(g.relu(y))))
    return g


def test_irdl_file_is_generated_from_ops():
    r = run(sys.executable, "-m", "openprim.dialect", "--check")
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("a") / "small.oprim")
    compiler.save(small_graph(), path)
    return path


def test_runtime_runs_without_mlir(artifact):
    """An artifact loads and runs in a process where importing mlir fails."""
    x = np.random.default_rng(1).standard_normal((1, 9, 7, 5)).astype(np.float32)
    expect = compiler.compile(small_graph())(x)
    code = (
        "import sys, numpy as np\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mlir' or name.startswith('mlir.'): raise ImportError('mlir blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from openprim.runtime import load\n"
        f"y = load({artifact!r})(np.load(sys.argv[1]))\n"
        "assert not any(m == 'mlir' or m.startswith('mlir.') for m in sys.modules)\n"
        "np.save(sys.argv[2], y)\n")
    d = os.path.dirname(artifact)
    np.save(os.path.join(d, "x.npy"), x)
    r = run(sys.executable, "-c", code, os.path.join(d, "x.npy"), os.path.join(d, "y.npy"))
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(os.path.join(d, "y.npy")), expect, rtol=1e-6, atol=1e-7)


def test_cli_run_artifact(artifact, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 9, 7, 5), np.float32))
    r = run("openprim", "run", artifact, "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"),
            "--repeat", "2")
    assert r.returncode == 0, r.stderr
    assert "output 0: shape (1, 160)" in r.stdout and "median" in r.stdout
    assert np.load(tmp_path / "y.npy").shape == (1, 160)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "manifest", "weights", "version", "target"])
def test_bad_artifact_is_refused(artifact, tmp_path, damage):
    bad = str(tmp_path / "bad.oprim")
    data = open(artifact, "rb").read()
    if damage == "truncate":
        open(bad, "wb").write(data[: len(data) // 2])
    elif damage == "garbage":
        open(bad, "wb").write(b"not a zip at all")
    else:
        with zipfile.ZipFile(artifact) as z:
            members = {n: z.read(n) for n in z.namelist()}
        manifest = json.loads(members["manifest.json"])
        if damage == "manifest":
            members["manifest.json"] = b"{broken"
        elif damage == "weights":
            members["weights.bin"] = members["weights.bin"][:-64]
        elif damage == "version":
            manifest["version"] = 99
            members["manifest.json"] = json.dumps(manifest).encode()
        else:
            manifest["target"] = "rocdl:gfx942"
            members["manifest.json"] = json.dumps(manifest).encode()
        with zipfile.ZipFile(bad, "w") as z:
            for n, v in members.items():
                z.writestr(n, v)
    r = run("openprim", "run", bad, "--repeat", "0")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "bad.oprim" in r.stderr, r.stderr


def test_cli_model_errors(tmp_path):
    model = tmp_path / "bad_model.py"
    model.write_text("from openprim.pyfrontend import Graph\n"
                     "def build():\n"
                     "    g = Graph()\n"
                     "    x = g.input('x', (1, 3, 8, 8))\n"
                     "    w = g.param('w', __import__('numpy').ones((4, 2, 3, 3)))\n"
                     "    return g.conv2d(x, w)\n")
    r = run("openprim", "run", str(model))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{model}:6: error: prim.conv2d" in r.stderr, r.stderr
    r = run("openprim", "run", str(tmp_path / "missing.py"))
    assert r.returncode == 1 and "no such file" in r.stderr
    r = run("openprim", "compile", os.path.join(ROOT, "examples", "resnet.py"), "--solver", "winograd")
    assert r.returncode == 1 and "unknown solver 'winograd'" in r.stderr and "Traceback" not in r.stderr


def test_cli_layout(tmp_path):
    """--layout keep leaves an NCHW model's convolutions in NCHW (same outputs as the default NHWC);
    any other value is one error line."""
    model = tmp_path / "nchw_model.py"
    model.write_text("import numpy as np\n"
                     "from openprim.pyfrontend import Graph\n"
                     "def build():\n"
                     "    g = Graph(layout='NCHW')\n"
                     "    x = g.input('x', (1, 8, 9, 7))\n"
                     "    w = np.random.default_rng(0).standard_normal((8, 2, 3, 3))\n"
                     "    g.output(g.relu(g.conv2d(x, g.param('w', w), padding=1, groups=4)))\n"
                     "    return g\n")
    outs = []
    for layout in ("NHWC", "keep"):
        y = str(tmp_path / f"y_{layout}.npy")
        r = run("openprim", "run", str(model), "--layout", layout, "--repeat", "0", "-o", y)
        assert r.returncode == 0, r.stderr
        outs.append(np.load(y))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    r = run("openprim", "compile", str(model), "--layout", "keep", "-o", str(tmp_path / "m.oprim"))
    assert r.returncode == 0 and "1 kernel launches" in r.stdout, (r.stdout, r.stderr)
    r = run("openprim", "compile", str(model), "--layout", "NCHW", "-o", str(tmp_path / "m.oprim"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "openprim: error: unknown layout 'NCHW'; layouts: NHWC (run NCHW ops in NHWC), " \
        "keep (leave layouts)", r.stderr


def test_opt_errors(tmp_path):
    r = run("openprim-opt", "-", "-p", "prim-fuse", stdin="func.func @f( {")
    assert r.returncode == 1 and r.stderr.startswith("<stdin>:1:") and "Traceback" not in r.stderr
    r = run("openprim-opt", "-", "-p", "no-such-pass", stdin="module {}")
    assert r.returncode == 1 and "no-such-pass" in r.stderr
    r = run("openprim-opt", "-", "-p", "prim-select{solver=nope}", stdin="module {}")
    assert r.returncode == 1 and "unknown solver 'nope'" in r.stderr

"""Input fuzzing (issue 16): mutated .onnx and .mlir files, bad .npy inputs and environment variables.

The property, for everything a user hands in: a correct result, or one OpenPrimError (one line, nonzero
exit status), never another exception, a traceback, an abort, a signal or a hang. The mutants come from
test/fuzzing/inputs.py (seeded); they run in worker processes, so an abort or a hang is recorded against
the input that caused it instead of ending the test session. Each test runs its kind's mutants and
reports every violation at once, with the file that reproduces it (kept under pytest's tmp_path).
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test/: the fuzzing package
from fuzzing import inputs  # noqa: E402

onnx = pytest.importorskip("onnx")

MUTANTS_PER_KIND = 10
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _check(results: list[dict], what: str) -> Counter:
    """Fail with every result that is not ok/error; returns the outcome counts."""
    counts = Counter(r["outcome"] for r in results)
    print(f"{what}: {len(results)} tried, {dict(counts)}")   # the figures (pytest -s)
    bad = [r for r in results if r["outcome"] not in ("ok", "error")]
    assert not bad, f"{what}: {dict(counts)}\n" + "\n".join(
        f"{r['outcome']}: {r.get('argv') or r.get('path')}: {r['detail'][-600:]}" for r in bad)
    return counts


def _write(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def test_onnx_mutants(tmp_path):
    """Through the importer (then compiled and compared with onnx's evaluator when they import), and
    through `openprim onnx-check` and `openprim run`."""
    items = [{"call": "onnx", "path": _write(tmp_path / "valid.onnx", inputs.onnx_model().SerializeToString())}]
    for kind in inputs.ONNX_KINDS:
        for seed in range(MUTANTS_PER_KIND):
            path = _write(tmp_path / f"{kind}.{seed}.onnx", inputs.onnx_mutant(kind, seed))
            items.append({"call": "onnx", "path": path})
            items.append({"call": "cli", "argv": ["onnx-check", path]})
            if seed < 3:
                items.append({"call": "cli", "argv": ["run", path, "--repeat", "0", "--no-cache"]})
    results = inputs.run_items(items, str(tmp_path))
    assert results[0]["outcome"] == "ok", results[0]       # the unmutated model imports and is correct
    counts = _check(results, "onnx mutants")
    assert counts["error"] > len(items) // 3, counts      # most mutants are rejected, each with one line


def _mlir_text() -> str:
    from openprim.pyfrontend import Graph, to_module
    g = Graph(layout="NHWC")
    x = g.input("x", (1, 5, 5, 3))
    y = g.relu(g.conv2d(x, g.param("w", np.random.default_rng(0).standard_normal((4, 3, 3, 3))), padding=1))
    g.output(g.softmax(g.reshape(g.global_avg_pool(y), (1, 4))))
    return str(to_module(g))


def test_mlir_mutants(tmp_path):
    """Through openprim-opt: parsed and verified, and what parses runs through prim-pipeline."""
    text = _mlir_text()
    items = [{"call": "opt", "argv": [_write(tmp_path / "valid.mlir", text.encode()), "-p", "prim-pipeline",
                                      "-o", str(tmp_path / "out.mlir")]}]
    for kind in inputs.MLIR_KINDS:
        for seed in range(3 * MUTANTS_PER_KIND):   # cheap: most end in the parser
            path = _write(tmp_path / f"{kind}.{seed}.mlir", inputs.mlir_mutant(text, kind, seed))
            argv = [path, "--verify-only"] if seed % 2 else [path, "-p", "prim-pipeline", "-o",
                                                              str(tmp_path / "out.mlir")]
            items.append({"call": "opt", "argv": argv})
    for name, data in (("empty.mlir", b""), ("nul.mlir", b"module {\0}"), ("deep.mlir", b"(" * 100000),
                       ("utf16.mlir", text.encode("utf-16"))):
        items.append({"call": "opt", "argv": [_write(tmp_path / name, data)]})
    items.append({"call": "opt", "argv": [str(tmp_path)]})                       # a directory
    items.append({"call": "opt", "argv": [str(tmp_path / "missing.mlir")]})
    items.append({"call": "opt", "argv": [str(tmp_path / "valid.mlir"), "-p", "prim-nonesuch"]})
    items.append({"call": "opt", "argv": [str(tmp_path / "valid.mlir"), "-p", "prim-select{solver=nonesuch}"]})
    results = inputs.run_items(items, str(tmp_path))
    assert results[0]["outcome"] == "ok", results[0]
    counts = _check(results, "mlir mutants")
    assert counts["error"] > len(items) // 2 and counts["ok"] > 1, counts


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """A small .oprim (input x: f32[1, 5, 5, 3]), its input and its output."""
    import openprim.compiler
    from openprim.pyfrontend import Graph
    rng = np.random.default_rng(0)
    g = Graph(layout="NHWC")
    x = g.input("x", (1, 5, 5, 3))
    g.output(g.relu(g.conv2d(x, g.param("w", rng.standard_normal((4, 3, 3, 3))), padding=1)))
    path = str(tmp_path_factory.mktemp("npy") / "net.oprim")
    openprim.compiler.save(g, path)
    feed = rng.standard_normal((1, 5, 5, 3)).astype(np.float32)
    return path, feed, openprim.compile(g)(feed)


def test_bad_npy_inputs(tmp_path, artifact):
    """`openprim run x.oprim --input BAD.npy -o y.npy`: a correct output or one line, exit status 1."""
    path, feed, want = artifact
    good = tmp_path / "good.npy"
    np.save(good, feed)
    raw = good.read_bytes()
    rng = np.random.default_rng(0)
    cases = {"garbage": bytes(rng.integers(0, 256, 300, dtype=np.uint8)), "empty": b"",
             "truncated": raw[:len(raw) // 2], "header_only": raw[:128],
             "bad_header": raw[:10] + b"{'descr': 'zz', 'fortran_order': False, 'shape': (1, 2), }" + raw[70:],
             "flipped": inputs._flip(raw, __import__("random").Random(3))}
    files = {name: _write(tmp_path / f"{name}.npy", data) for name, data in cases.items()}
    arrays = {"float64": feed.astype(np.float64), "int64": np.ones(feed.shape, np.int64),
              "complex": feed.astype(np.complex64), "bool": feed > 0, "fortran": np.asfortranarray(feed),
              "wrong_shape": feed.reshape(1, 3, 5, 5), "wrong_rank": feed[0], "zero_size": np.zeros((0, 5, 5, 3), np.float32),
              "scalar": np.float32(1.0), "strings": np.array(["a", "b"]), "structured": np.zeros(3, "i4,f4"),
              "nan": np.full(feed.shape, np.nan, np.float32), "float16": feed.astype(np.float16)}
    for name, a in arrays.items():
        np.save(tmp_path / f"{name}.npy", a)
        files[name] = str(tmp_path / f"{name}.npy")
    np.save(tmp_path / "object.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    files["object"] = str(tmp_path / "object.npy")
    files["directory"], files["missing"] = str(tmp_path), str(tmp_path / "missing.npy")
    items = [{"call": "cli", "argv": ["run", path, "--input", f, "--repeat", "0", "-o", str(tmp_path / f"{n}.out.npy")]}
             for n, f in files.items()]
    items.append({"call": "cli", "argv": ["run", path, "--input", str(good), "--input", str(good), "--repeat", "0"]})
    items.append({"call": "cli", "argv": ["run", path, "--input", str(good), "--repeat", "0",
                                          "-o", str(tmp_path / "good.out.npy")]})
    results = inputs.run_items(items, str(tmp_path))
    _check(results, "npy inputs")
    assert results[-1]["outcome"] == "ok", results[-1]
    np.testing.assert_allclose(np.load(tmp_path / "good.out.npy"), want, rtol=1e-5, atol=1e-5)
    for name in ("float64", "fortran", "float16"):   # convertible without loss of meaning: a correct result
        r = results[list(files).index(name)]
        if r["outcome"] == "ok":
            np.testing.assert_allclose(np.load(tmp_path / f"{name}.out.npy"), want, rtol=1e-2, atol=1e-2)
    for name in ("garbage", "empty", "truncated", "bad_header", "wrong_shape", "wrong_rank", "complex", "strings",
                 "object", "structured", "missing", "directory"):
        assert results[list(files).index(name)]["outcome"] == "error", (name, results[list(files).index(name)])


PY_MODELS = {
    "syntax_error": "def build(:\n",
    "no_build": "x = 1\n",
    "build_raises": "def build():\n    raise ValueError('boom')\n",
    "returns_int": "def build():\n    return 42\n",
    "missing_import": "import nonexistent_module_of_a_user\n",
    "exits": "import sys\nsys.exit(3)\n",
    "binary": bytes(range(256)),
    "bad_shape": "from openprim.pyfrontend import Graph\ndef build():\n    g = Graph()\n"
                 "    g.output(g.relu(g.input('x', (1, 'a', 4))))\n    return g\n",
}


@pytest.mark.parametrize("name", PY_MODELS)
def test_bad_python_models(tmp_path, name):
    """`openprim run model.py` on a model file that cannot build a Graph: one line, nonzero exit."""
    text = PY_MODELS[name]
    path = _write(tmp_path / "model.py", text if isinstance(text, bytes) else text.encode())
    for argv in (["run", path, "--repeat", "0"], ["run", path, "-D", "nosuch=3", "--repeat", "0"]):
        results = inputs.run_items([{"call": "cli", "argv": argv}], str(tmp_path))
        _check(results, "python models")
        assert results[0]["outcome"] == "error", results[0]


ENV = {"OPENPRIM_SOLVER": ["nonesuch", "gemm", "\x01"], "OPENPRIM_FIND_MODE": ["sometimes", ""],
       "OPENPRIM_FIND_ENFORCE": ["always", "7"], "OPENPRIM_CACHE": ["maybe", "0"],
       "OPENPRIM_CACHE_MAX_MB": ["-5", "lots", "1e99"], "OPENPRIM_CACHE_DIR": ["<file>", "/proc/nope"],
       "XDG_CACHE_HOME": ["<file>"], "OPENPRIM_USER_DB_PATH": ["<dir>", "<garbage>"],
       "OPENPRIM_LOCK_DIR": ["<file>"], "OPENPRIM_ALLOW_TF32": ["yes"], "CC": ["/nonexistent/cc"]}


def test_environment_variables(tmp_path):
    """`openprim run model.py` with each variable OpenPrim reads set to a bad value: it runs, or says
    what is wrong in one line (exit status 1). Each in a fresh process (the variables are read there)."""
    model = tmp_path / "model.py"
    model.write_text("import numpy as np\nfrom openprim.pyfrontend import Graph\n\n\ndef build():\n"
                     "    g = Graph(layout='NHWC')\n    x = g.input('x', (1, 5, 5, 3))\n"
                     "    g.output(g.relu(g.conv2d(x, g.param('w', np.ones((4, 3, 3, 3))), padding=1)))\n"
                     "    return g\n")
    special = {"<file>": _write(tmp_path / "a_file", b"x"), "<dir>": str(tmp_path),
               "<garbage>": _write(tmp_path / "garbage.sqlite", bytes(range(256)) * 8)}
    bad = []
    for var, values in ENV.items():
        for value in values:
            env = {**os.environ, "OPENPRIM_CACHE_DIR": str(tmp_path / "cache")}
            if var == "XDG_CACHE_HOME":     # read only without OPENPRIM_CACHE_DIR
                del env["OPENPRIM_CACHE_DIR"]
            env[var] = special.get(value, value)
            p = subprocess.run([sys.executable, "-m", "openprim.cli", "run", str(model), "--repeat", "0"],
                               env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
            lines = [line for line in p.stderr.strip().splitlines() if "warning" not in line]
            if p.returncode < 0 or "Traceback" in p.stderr or (p.returncode != 0 and len(lines) != 1):
                bad.append(f"{var}={value!r}: exit {p.returncode}: {p.stderr.strip()[-600:]}")
    assert not bad, "\n".join(bad)

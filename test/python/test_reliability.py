"""Issue 16, part A: every crash, traceback and silently wrong answer a new user hit, one regression test
each (named after the item), and input fuzzing of .oprim files, the tuning database file and CLI flags.

The property everywhere: a correct result (checked against float64 numpy) or one OpenPrimError line and a
nonzero exit; never a traceback, an abort, a signal or a wrong answer.
"""
import contextlib
import io
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
import warnings
import zipfile

import numpy as np
import pytest

from openprim import cli, compiler, opt
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph
from openprim.runtime import artifact, codeobject, load
from openprim.runtime import manifest as manifest_check
from openprim.base.target import parse_target

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def conv_reference(x, w, b, stride, pad):
    """NCHW conv + bias in float64."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    out = np.zeros((n, k, oh, ow))
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j])
    return out + b[None, :, None, None]


def model(channels=5, seed=0):
    """A conv + bias + tanh graph with odd sizes, its weights and a float64 reference function."""
    rng = np.random.default_rng(seed)
    w, b = rng.standard_normal((channels, 3, 3, 3)) / 3, rng.standard_normal(channels)
    g = Graph()
    x = g.input("x", (2, 3, 9, 7))
    g.output(g.tanh(g.conv2d(x, g.param("w", w), g.param("b", b), padding=1)))
    return g, (lambda xv: np.tanh(conv_reference(xv.astype(np.float64), w, b, 1, 1)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(artifact path, reference, other artifact path: the same graph with other channels)."""
    d = tmp_path_factory.mktemp("rel")
    g, ref = model()
    compiler.save(g, str(d / "a.oprim"))
    compiler.save(model(channels=7, seed=1)[0], str(d / "b.oprim"))
    return str(d / "a.oprim"), ref, str(d / "b.oprim")


def x_input(seed=3):
    return np.random.default_rng(seed).standard_normal((2, 3, 9, 7)).astype(np.float32)


def cli_main(*argv, tool=cli):
    """(exit status, stderr) of tool.main(argv) in-process; argparse errors exit 2 through SystemExit."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = tool.main(list(argv))
        except SystemExit as e:
            rc = e.code
    return rc, err.getvalue()


def assert_one_line_error(rc, err, *words):
    assert rc not in (0, None), err
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert lines and ("error:" in lines[-1]), err
    for w in words:
        assert w in err, err


def rewrite(src, dst, members=None, manifest_edit=None):
    """Copy an artifact with members replaced and the manifest edited (valid zip CRCs)."""
    with zipfile.ZipFile(src) as z:
        data = {n: z.read(n) for n in z.namelist()}
    if manifest_edit:
        m = json.loads(data["manifest.json"])
        manifest_edit(m)
        data["manifest.json"] = json.dumps(m).encode()
    data.update(members or {})
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        for n, v in data.items():
            z.writestr(n, v)
    return dst


# ------------------------------------------------------------------------------------------------ crashes

@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_crash_tanh_on_rocdl(tmp_path, arch):
    """tanh and gelu(approximate="tanh") for rocdl aborted LLVM ("no libcall available for ftanh"); it is
    now expanded through exp before the ROCDL lowering, and the code object links with no undefined symbol."""
    g = Graph()
    x = g.input("x", (3, 37))
    g.output(g.gelu(g.tanh(x), approximate="tanh"))
    path = str(tmp_path / "t.oprim")
    compiler.save(g, path, target=f"rocdl:{arch}")
    m, kernels, _ = artifact.read(path)
    names = {k["name"] for k in codeobject.amdgpu_kernels(kernels["kernels.hsaco"])}
    launched = {la["function"] for k in m["plan"]["kernels"].values() for la in k["launches"]}
    assert launched and launched <= names


def test_crash_sigill_cpu_features(built, tmp_path, monkeypatch):
    """A CPU artifact records the instruction set extensions it needs; a CPU that lacks any is refused at
    load with one line naming them and the level to recompile for (it died of SIGILL before)."""
    path = str(tmp_path / "v3.oprim")
    g, ref = model()
    compiler.save(g, path, target="cpu:x86-64-v3")
    m, _, _ = artifact.read(path)
    assert m["cpu"] == "x86-64-v3" and {"avx2", "fma", "bmi2"} <= set(m["cpu_features"])
    if {"avx2", "fma"} <= manifest_check.host_cpu_features():
        np.testing.assert_allclose(load(path)(x_input()), ref(x_input()), rtol=1e-5, atol=1e-5)
    v2_host = frozenset(("cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"))
    monkeypatch.setattr(manifest_check, "host_cpu_features", lambda: v2_host)
    with pytest.raises(OpenPrimError, match=r"compiled for x86-64-v3 \(needs .*avx2.*\); this CPU lacks avx, "
                                            r"avx2, .*; recompile with --target cpu:x86-64-v2"):
        load(path)


def test_crash_sigill_host_artifact_records_host_features(built):
    """The default target (this CPU) records this CPU's features, so the artifact loads here."""
    m, _, _ = artifact.read(built[0])
    assert set(m["cpu_features"]) == set(manifest_check.host_cpu_features())
    np.testing.assert_allclose(load(built[0])(x_input()), built[1](x_input()), rtol=1e-5, atol=1e-5)


def test_crash_bf16_odd_vectors_for_avx512bf16(tmp_path):
    """llc aborted ("Do not know how to soft promote this operator's operand!") on the concat kernel of
    12 and 9 bf16 channels when generating for a CPU with AVX512-BF16 (Zen 4): compiled for one here,
    whatever this machine is."""
    g = Graph(layout="NHWC", dtype="bf16")
    a, b = g.input("a", (2, 5, 3, 12)), g.input("b", (2, 5, 3, 9))
    g.output(g.relu(g.concat([a, b], axis=3)))
    compiler.save(g, str(tmp_path / "c.oprim"), target="cpu:znver4")
    m, _, _ = artifact.read(str(tmp_path / "c.oprim"))
    assert m["cpu"] == "znver4"


def test_crash_unknown_cpu_name():
    g, _ = model()
    with pytest.raises(OpenPrimError, match="llc does not know the CPU 'x86-64-v9'"):
        compiler.compile(g, target="cpu:x86-64-v9")


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (1, 0, 8, 8)])
def test_crash_zero_size_batch_or_channels(shape):
    """A zero batch or zero input channels aborted in an MLIR assertion: the frontend refuses it."""
    with pytest.raises(OpenPrimError, match="dimensions must be positive integers"):
        Graph().input("x", shape)
    g = Graph()
    x = g.input("x", (1, 3, 8, 8))
    with pytest.raises(OpenPrimError, match="param 'w' is empty"):
        g.conv2d(x, g.param("w", np.ones((0, 3, 3, 3))))


def test_crash_zero_batch_conv_zero_division(tmp_path):
    """A zero-batch conv in MLIR (openprim-opt) raised ZeroDivisionError in the solvers' cost model."""
    g = Graph()
    g.output(g.conv2d(g.input("x", (1, 3, 8, 8)), g.param("w", np.ones((4, 3, 3, 3)))))
    text = str(compiler.load_module(g)).replace("1x3x8x8", "0x3x8x8").replace("1x4x6x6", "0x4x6x6")
    (tmp_path / "z.mlir").write_text(text)
    rc, err = cli_main(str(tmp_path / "z.mlir"), "-p", "prim-pipeline", "-o", str(tmp_path / "o.mlir"), tool=opt)
    assert_one_line_error(rc, err, "zero-size tensor")


def test_crash_segfault_under_memory_limit(monkeypatch, built):
    """A kernel's scratch allocation failed under a memory limit and the kernel segfaulted: the plan now
    carries the most one kernel allocates, and a compile or load whose arena + weights + scratch exceed the
    free memory (MemAvailable, RLIMIT_AS) is refused before anything is allocated, naming the sizes."""
    g = Graph()
    g.output(g.conv2d(g.input("x", (2, 16, 17, 15)), g.param("w", np.ones((16, 16, 3, 3))), padding=1))
    module = compiler.lower(g, "cpu", solver="conv_im2col_gemm")
    from openprim.plan import build_plan
    plan, _ = build_plan(module, parse_target("cpu"))
    assert plan["scratch_bytes"] >= 2 * 17 * 15 * 16 * 9 * 4   # the im2col matrix at least
    monkeypatch.setattr(manifest_check, "host_memory", lambda: (1 << 16, "the address-space limit (ulimit -v)"))
    with pytest.raises(OpenPrimError, match=r"needs [\d.]+ MiB of host memory \(arena .* kernel scratch [\d.]+ MiB\); "
                                            r"the address-space limit \(ulimit -v\) leaves 0.1 MiB"):
        compiler.jit(module, "cpu")
    monkeypatch.setattr(manifest_check, "host_memory", lambda: (16, "MemAvailable"))
    with pytest.raises(OpenPrimError, match="cannot run here"):
        load(built[0])


def test_crash_segfault_under_ulimit_subprocess(tmp_path):
    """The real thing: under ulimit -v, a model whose buffers cannot fit exits 1 with one line, no signal."""
    model_file = tmp_path / "big.py"
    model_file.write_text("import numpy as np\nfrom openprim.pyfrontend import Graph\n"
                          "def build():\n    g = Graph()\n    x = g.input('x', (512, 64, 128, 128))\n"
                          "    g.output(g.relu(x))\n    return g\n")
    limit = 2560 * 2**20
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
            "from openprim import cli; sys.exit(cli.main(['run', %r, '--repeat', '0']))" % (limit, limit, str(model_file)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "needs" in r.stderr and "MiB of host memory" in r.stderr


# --------------------------------------------------------------------------------------------- tracebacks

@pytest.mark.parametrize("what", ["directory", "mlir", "unknown extension"])
def test_traceback_run_on_directory_mlir_or_unknown_file(tmp_path, what):
    path = {"directory": tmp_path, "mlir": tmp_path / "m.mlir", "unknown extension": tmp_path / "m.txt"}[what]
    if what != "directory":
        path.write_text("hello")
    rc, err = cli_main("run", str(path))
    assert_one_line_error(rc, err, str(path))


def test_traceback_garbage_kernels_so_with_valid_crcs(built, tmp_path):
    bad = rewrite(built[0], str(tmp_path / "bad.oprim"), {"kernels.so": os.urandom(4096)})
    with pytest.raises(OpenPrimError, match="kernels.so is not a shared object"):
        load(bad)
    rc, err = cli_main("run", bad, "--repeat", "0")
    assert_one_line_error(rc, err, "bad.oprim")


def _drop_step_argument(m):
    m["plan"]["steps"][0]["args"].pop(0)


def _offset_past_arena(m):
    m["plan"]["values"][m["plan"]["outputs"][0]]["offset"] = m["plan"]["arena_bytes"]


def _swap_output_onto_input(m):   # consistent but wrong: only the digest can tell
    p = m["plan"]
    p["values"][p["outputs"][0]]["offset"] = p["values"][p["inputs"][0]["value"]]["offset"]


@pytest.mark.parametrize("edit, message", [
    (_drop_step_argument, r"takes (\d+) arguments, the step passes"),
    (_offset_past_arena, "past the arena"),
    (lambda m: m["plan"]["values"][0].update(shape=[2, 3, 9.5, 7]), "not a list of positive integers"),
    (lambda m: m["plan"]["steps"][0].update(kernel="nope"), "kernel 'nope' has no recorded signature"),
    (lambda m: m["plan"].update(arena_bytes=-1), "arena_bytes -1"),
    (lambda m: m["plan"].update(batch_chunks=0), "batch_chunks 0 is not a positive integer"),
    (lambda m: m["plan"].update(batch_chunks="2"), "batch_chunks '2' is not a positive integer"),
    (lambda m: m["plan"]["steps"][0]["args"].append(10**6), "value ids of the plan"),
    (lambda m: m["plan"]["values"][-1].update(view_of=len(m["plan"]["values"])), "view_of .* is not an earlier value"),
    (lambda m: m.update(signatures={k: v[:-1] for k, v in m["signatures"].items()}), "takes"),
    (_swap_output_onto_input, "manifest was edited"),
    (lambda m: m.update(cpu_features=[]), "manifest was edited"),
])
def test_traceback_hand_edited_manifest(built, tmp_path, edit, message):
    """Hand edits gave numpy errors, and a step missing an argument exited 0 with a wrong output."""
    bad = rewrite(built[0], str(tmp_path / "bad.oprim"), manifest_edit=edit)
    with pytest.raises(OpenPrimError, match=message):
        load(bad)


def test_traceback_stride_1_5():
    g = Graph()
    x = g.input("x", (1, 3, 8, 8))
    with pytest.raises(OpenPrimError, match="'strides' must be integers, got \\[1.5, 1.5\\]"):
        g.conv2d(x, g.param("w", np.ones((4, 3, 3, 3))), stride=1.5)
    with pytest.raises(OpenPrimError, match="'kernel' must be integers"):
        g.max_pool2d(x, 2.5)


def test_traceback_compile_42():
    import openprim
    with pytest.raises(OpenPrimError, match="cannot compile a int"):
        openprim.compile(42)


def test_traceback_repeat_minus_one(built):
    rc, err = cli_main("run", built[0], "--repeat", "-1")
    assert rc == 2 and "--repeat: must be an integer >= 0, got -1" in err and "Traceback" not in err


def test_traceback_output_into_missing_directory(built, tmp_path):
    missing = str(tmp_path / "no" / "such" / "y.npy")
    rc, err = cli_main("run", built[0], "-o", missing, "--repeat", "0")
    assert_one_line_error(rc, err, "does not exist")
    rc, err = cli_main("compile", "/no/such/model.py", "-o", str(tmp_path / "no" / "m.oprim"))
    assert_one_line_error(rc, err)
    with pytest.raises(OpenPrimError, match="artifact .*cannot write there"):
        compiler.save(model()[0], str(tmp_path / "no" / "m.oprim"))


def test_traceback_openprim_opt_on_binary_file(tmp_path):
    (tmp_path / "b.mlir").write_bytes(bytes(range(256)) * 4)
    rc, err = cli_main(str(tmp_path / "b.mlir"), tool=opt)
    assert_one_line_error(rc, err, "not MLIR text")


def test_traceback_conv_of_784_gib(monkeypatch):
    """A conv whose activations need 784 GiB: refused before numpy allocates, naming the sizes; `compile`
    warns that the artifact cannot run here."""
    g = Graph()
    g.output(g.conv2d(g.input("x", (4096, 64, 512, 512)), g.param("w", np.ones((64, 64, 1, 1)))))
    with pytest.raises(OpenPrimError, match=r"needs \d+\.\d MiB of host memory \(arena \d+"):
        compiler.compile(g)


def test_traceback_compile_warns_when_the_artifact_cannot_run_here(tmp_path, monkeypatch):
    (tmp_path / "m.py").write_text("import numpy as np\nfrom openprim.pyfrontend import Graph\n"
                                   "def build():\n    g = Graph()\n    g.output(g.relu(g.input('x', (3, 5))))\n"
                                   "    return g\n")
    monkeypatch.setattr(manifest_check, "host_memory", lambda: (16, "MemAvailable"))
    rc, err = cli_main("compile", str(tmp_path / "m.py"), "-o", str(tmp_path / "m.oprim"))
    assert rc == 0 and "warning:" in err and "cannot run on this machine" in err and "MemAvailable" in err


# ----------------------------------------------------------------------------------------- silently wrong

def test_silently_wrong_duplicate_input_name():
    g = Graph()
    g.input("x", (1, 3))
    with pytest.raises(OpenPrimError, match="input 'x' is defined twice"):
        g.input("x", (1, 3))


def test_silently_wrong_input_dimension_8_5():
    with pytest.raises(OpenPrimError, match=r"dimensions must be positive integers, got \[1, 8.5\]"):
        Graph().input("x", (1, 8.5))
    g = Graph()
    x = g.input("x", (2, 6))
    with pytest.raises(OpenPrimError, match="'shape' must be integers"):
        g.reshape(x, (3, 4.0))


@pytest.fixture
def user_db(tmp_path, monkeypatch):
    path = tmp_path / "tuning.sqlite"
    monkeypatch.setenv("OPENPRIM_USER_DB_PATH", str(path))
    monkeypatch.setenv("OPENPRIM_LOCK_DIR", str(tmp_path / "locks"))
    from openprim.tuning import db
    db._unusable.clear()
    return path


CONV_KEY = "conv2d-1x16x9x9-k16-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none"


@pytest.mark.parametrize("seconds, params, solver, problem, message", [
    ("-0.001", "{}", "direct-nhwc", CONV_KEY, "SECONDS must be a positive"),
    ("nan", "{}", "direct-nhwc", CONV_KEY, "SECONDS must be a positive"),
    ("inf", "{}", "direct-nhwc", CONV_KEY, "SECONDS must be a positive"),
    ("1e-3", "{}", "no-such-solver", CONV_KEY, "unknown solver"),
    ("1e-3", '{"zz": 3}', "direct-nhwc", CONV_KEY, "would never be used"),
    ("1e-3", "{}", "direct-nhwc", "conv2d-garbage", "not a problem descriptor"),
])
def test_silently_wrong_db_add_negative_time(user_db, seconds, params, solver, problem, message):
    """`db add` accepted a negative time, and the selector then picked a solver 175x slower: records are
    validated as a compile would use them, and invalid stored records are ignored."""
    from openprim.solvers import SOLVERS
    if solver == "direct-nhwc" and solver not in SOLVERS:
        solver = next(iter(SOLVERS))
    rc, err = cli_main("db", "add", problem, "cpu", solver, params, seconds)
    assert_one_line_error(rc, err, message)
    assert not user_db.exists() or not sqlite3.connect(user_db).execute("SELECT * FROM records").fetchall()


def test_silently_wrong_negative_time_in_db_is_ignored(user_db):
    from openprim.tuning import db
    from openprim.solvers import SOLVERS
    solver = next(s for s in SOLVERS.values() if s.op == "conv2d").name
    db.record(CONV_KEY, "cpu:test", solver, {}, -5.0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert db.records(CONV_KEY, "cpu:test") == []
    assert any("not a positive number of seconds" in str(x.message) for x in w)


def test_silently_wrong_db_add_valid_record_round_trips(user_db):
    """A descriptor from a real layer parses back to its problem; a valid record is stored and used."""
    from openprim import tuning_commands
    from openprim.tuning import db
    from openprim.solvers import applicable
    from openprim.solvers.problem import parse_descriptor, problem_of
    g = Graph(layout="NHWC")
    g.output(g.matmul(g.input("a", (3, 5, 7)), g.param("b", np.ones((7, 11)))))
    g.output(g.conv2d(g.input("x", (1, 9, 7, 5)), g.param("w", np.ones((4, 3, 3, 5))), stride=2, padding=1))
    module, todo = tuning_commands.layers(g, "cpu")
    with module.context:
        for op, key, _ in todo:
            problem = problem_of(op)
            assert parse_descriptor(key) == problem
            solver = next(s for s, why in applicable(problem, op.name[5:], db.parse_target("cpu")) if why is None)
            params = solver.default_params(problem, db.parse_target("cpu"))
            rc, err = cli_main("db", "add", key, "cpu", solver.name, json.dumps(params), "2.5e-5")
            assert rc == 0, err
            assert db.best(problem, db.arch_of(db.parse_target("cpu"))).seconds == 2.5e-5


def test_silently_wrong_concurrent_tuners_take_turns(user_db, tmp_path):
    """Concurrent tuners timed each other's contention: a worker now waits for the device's measurement
    lock, held here by another process, before it times a candidate."""
    from openprim.tuning import find, lock
    from openprim.base.target import parse_target
    (tmp_path / "locks").mkdir(exist_ok=True)
    if find._worker is not None:   # a worker of another test: started with another lock directory
        find._worker.kill()
        find._worker = None
    holder = subprocess.Popen([sys.executable, "-c",
                               "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(3)",
                               str(lock.lock_dir() / "measure-cpu.lock")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    g = Graph(layout="NHWC")
    g.output(g.conv2d(g.input("x", (1, 9, 7, 5)), g.param("w", np.ones((4, 3, 3, 5)))))
    module, todo = __import__("openprim.tuning_commands", fromlist=["layers"]).layers(g, "cpu")
    with module.context:
        op = todo[0][0]
        solver = find.space(op, parse_target("cpu"))[0]
        t0 = time.monotonic()
        out, seconds = find.measure(find.candidate_module(op, *solver), parse_target("cpu"))
        waited = time.monotonic() - t0
    holder.wait()
    find._worker.kill()
    find._worker = None
    assert waited >= 2.0 and 0 < seconds < 1.0


# ---------------------------------------------------------------------------------------------------- noisy

def test_noisy_measure_tuning_with_nothing_timed_exits_nonzero(tmp_path):
    bundle = tmp_path / "b.tune"
    with zipfile.ZipFile(bundle, "w") as z:
        z.writestr("0000.oprim", b"not an artifact")
        z.writestr("index.json", json.dumps({"format": "openprim-tuning-bundle", "compiler": "x", "target": "nvvm:sm_90",
                                             "candidates": [{"file": "0000.oprim", "weights": None, "problem": "p",
                                                             "arch": "nvvm:sm_90", "solver": "s", "params": {},
                                                             "tolerance": 1e-4, "heuristic": True}]}))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "measure_tuning.py"), str(bundle),
                        str(tmp_path / "r.json")], capture_output=True, text=True)
    assert r.returncode == 1 and "0 of 1 candidates timed" in r.stdout
    assert "no candidate could be timed" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------------- fuzzing

def _outcome(path, x):
    """'error' (an OpenPrimError) or the output; any other exception fails the test."""
    try:
        return load(path)(x)
    except OpenPrimError as e:
        assert "\n" not in str(e)
        return "error"


def test_fuzz_oprim_bit_flips_truncation_and_swapped_members(built, tmp_path):
    path, ref, other = built
    data = open(path, "rb").read()
    rng = random.Random(16)
    x = x_input()
    want = ref(x)
    outcomes = {"error": 0, "correct": 0}
    cases = [("flip", rng.randrange(len(data)), 1 << rng.randrange(8)) for _ in range(40)] + \
            [("truncate", rng.randrange(len(data)), 0) for _ in range(10)]
    for kind, at, bit in cases:
        mutated = bytearray(data)
        if kind == "flip":
            mutated[at] ^= bit
        else:
            mutated = mutated[:at]
        bad = tmp_path / "m.oprim"
        bad.write_bytes(bytes(mutated))
        out = _outcome(str(bad), x)
        if isinstance(out, str):
            outcomes["error"] += 1
        else:
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
            outcomes["correct"] += 1
    with zipfile.ZipFile(other) as z:
        swapped = {n: z.read(n) for n in ("kernels.so", "weights.bin")}
    for name, member in swapped.items():
        assert _outcome(rewrite(path, str(tmp_path / f"s-{name}.oprim"), {name: member}), x) == "error"
    assert outcomes["error"] >= 40


def _mutations(rng):
    """Random edits of a manifest: drop a key, change a number, a string or a type, anywhere in it."""
    def walk(node, depth=0):
        if isinstance(node, dict) and node:
            key = rng.choice(sorted(node))
            return node, key, node[key]
        if isinstance(node, list) and node:
            i = rng.randrange(len(node))
            return node, i, node[i]
        return None

    def mutate(m):
        node = m
        for _ in range(rng.randrange(1, 6)):
            found = walk(node)
            if found is None:
                break
            parent, key, child = found
            if not isinstance(child, (dict, list)) or rng.random() < 0.3:
                choice = rng.randrange(6)
                if choice == 0 and isinstance(parent, dict):
                    del parent[key]
                elif choice == 1:
                    parent[key] = -1
                elif choice == 2:
                    parent[key] = (child + rng.choice([1, 64, -64, 10**9])) if isinstance(child, int) \
                        and not isinstance(child, bool) else "x"
                elif choice == 3:
                    parent[key] = None
                elif choice == 4:
                    parent[key] = [child]
                else:
                    parent[key] = 2.5
                return
            node = child
    return mutate


def test_fuzz_oprim_edited_manifests(built, tmp_path):
    path, ref, _ = built
    rng = random.Random(1616)
    x = x_input()
    errors = 0
    for i in range(60):
        bad = rewrite(path, str(tmp_path / "e.oprim"), manifest_edit=_mutations(rng))
        out = _outcome(bad, x)
        if isinstance(out, str):
            errors += 1
        else:
            np.testing.assert_allclose(out, ref(x), rtol=1e-5, atol=1e-5)
        try:
            cli_main("inspect", bad)
        except Exception as e:  # noqa: BLE001 - what the test is about
            pytest.fail(f"openprim inspect raised {type(e).__name__}: {e}")
    assert errors >= 50


@pytest.mark.parametrize("content", ["random bytes", "empty", "bad rows"])
def test_fuzz_tuning_db_file(user_db, content):
    """A corrupt or hostile user database never stops a compile nor changes its numbers."""
    from openprim.solvers import SOLVERS
    if content == "random bytes":
        user_db.write_bytes(os.urandom(5000))
    elif content == "empty":
        user_db.write_bytes(b"")
    else:
        g = Graph(layout="NHWC")
        g.output(g.conv2d(g.input("x", (1, 9, 7, 5)), g.param("w", np.ones((4, 3, 3, 5)))))
        conn = sqlite3.connect(user_db)
        conn.execute("CREATE TABLE records (problem TEXT, arch TEXT, solver TEXT, params TEXT, seconds REAL, "
                     "version TEXT, timestamp REAL, PRIMARY KEY (problem, arch, solver, params))")
        from openprim import tuning_commands
        from openprim.tuning import db
        module, todo = tuning_commands.layers(g, "cpu")
        key = todo[0][1]
        arch = db.arch_of(db.parse_target("cpu"))
        for solver, params, seconds in [(next(iter(SOLVERS)), "{", 1e-9), ("nope", "{}", 1e-9),
                                        (next(iter(SOLVERS)), '{"a": 1}', -1.0), (next(iter(SOLVERS)), "[]", 1e-9),
                                        (next(iter(SOLVERS)), "{}", float("nan"))]:
            conn.execute("INSERT OR REPLACE INTO records VALUES (?,?,?,?,?,?,?)",
                         (key, arch, solver, params, seconds, db.compiler_version(), 0))
        conn.commit()
        conn.close()
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 5, 3, 3))
    g = Graph()
    g.output(g.conv2d(g.input("x", (1, 5, 9, 7)), g.param("w", w)))
    x = rng.standard_normal((1, 5, 9, 7)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = compiler.compile(g)(x)
    np.testing.assert_allclose(out, conv_reference(x.astype(np.float64), w, np.zeros(4), 1, 0), rtol=1e-4, atol=1e-4)


GARBAGE = ["-1", "0", "nan", "inf", "1e400", "99999999999999999999", "", "abc", "/", "/no/such/file",
           "1.5", "-0", "\x00", "--", "9" * 400]


def test_fuzz_cli_flags(built, tmp_path, user_db, monkeypatch):
    """Random garbage flag values for every subcommand: a clean usage error (exit 2) or one OpenPrimError
    line (exit 1), never another exception type."""
    monkeypatch.chdir(tmp_path)   # outputs named by garbage values land here
    rng = random.Random(7)
    flags = {
        "run": ["--repeat", "--seed", "--input", "-o", "--target", "--solver", "--layout", "-D"],
        "compile": ["-o", "--target", "--solver", "--layout", "-D"],
        "inspect": [],
        "tune": ["--budget", "--target", "--measure-on", "-D"],
        "explain": ["--target", "-D"],
        "conv": ["-n", "-c", "-H", "-W", "-k", "-y", "-x", "-p", "-q", "-u", "-v", "-l", "-j", "-g", "-F", "-i",
                 "--dtype", "--layout"],
        "db": [],
        "onnx-check": [],
    }
    positional = {"run": [built[0], "/no/such.py", str(tmp_path), "/no/such.oprim"],
                  "compile": ["/no/such.py", str(tmp_path)], "inspect": [built[0], str(tmp_path), "/no/x.oprim"],
                  "tune": ["/no/such.py"], "explain": ["/no/such.py", str(tmp_path)], "conv": [],
                  "db": ["add", "import", "frob"], "onnx-check": ["/no/such.onnx", str(tmp_path)]}
    tried = 0
    for _ in range(120):
        cmd = rng.choice(sorted(flags))
        argv = [cmd] + ([rng.choice(positional[cmd])] if positional[cmd] else [])
        if cmd == "db":
            argv += [rng.choice(GARBAGE) for _ in range(rng.randrange(0, 6))]
        for flag in rng.sample(flags[cmd], min(len(flags[cmd]), rng.randrange(1, 3))) if flags[cmd] else []:
            argv += [flag, rng.choice(GARBAGE)]
        if cmd == "conv":
            argv += ["-n", rng.choice(["-1", "0", "nan", "1.5", "abc"])]  # never a valid conv: it would compile one
        if cmd == "run" and argv[1] == built[0] and "--repeat" not in argv:
            argv += ["--repeat", "0"]
        try:
            rc, err = cli_main(*argv)
        except Exception as e:  # noqa: BLE001 - what the test is about
            pytest.fail(f"openprim {argv!r} raised {type(e).__name__}: {e}")
        assert rc in (0, 1, 2), (argv, rc, err)
        assert "Traceback" not in err, (argv, err)
        tried += 1
    assert tried >= 80


def test_fuzz_tune_budget_nan_and_negative(built):
    for value in ("nan", "-3", "inf", "1e400"):
        rc, err = cli_main("tune", "/no/such.py", "--budget", value)
        assert rc == 2 and "must be a non-negative number of seconds" in err, err
    rc, err = cli_main("tune", "/no/such.py", "--budget", "0")   # 0: the defaults only; the file is missing
    assert_one_line_error(rc, err, "no such file")


def test_silently_wrong_input_beyond_f32_range(built):
    """A float64 input with values beyond float32's range used to become inf (NaN outputs, a numpy warning)."""
    from openprim.runtime import artifact
    net = artifact.load(built[0])
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 7))
    x[1, 2, 3, 4] = 1e39
    with pytest.raises(OpenPrimError, match=r"input 'x' \(float64\) has values beyond the range of f32 "
                                            r"\(largest \|x\| 1e\+39\)"):
        net(x)
    x[1, 2, 3, 4] = 0.5
    np.testing.assert_allclose(net(x), built[1](x), rtol=1e-4, atol=1e-5)

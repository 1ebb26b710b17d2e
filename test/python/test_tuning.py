"""Algorithm selection and tuning: the tuning database (tuning/db.py), prim-select's modes (immediate,
find, hybrid and their environment variables), find's search (tuning/find.py) and the commands (tune, explain,
conv, db, scripts/measure_tuning.py).

The database cases: records round-trip, the user database wins over the system one, several processes
write at once with nothing lost, and a missing directory, a corrupt file or a stale record each give
one warning and are ignored; a tile parameter is stored by its table entry's name, so reordering the
table keeps a record's meaning. `db add` and `db show` take every problem kind. Find's measurements are planted (find.measure replaced) where a test needs
them deterministic; the command tests compile and time a tiny model for real.

    python -m pytest test/python/test_tuning.py -q
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import sqlite3
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from openprim import cli, passes
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim.dialect import contract
from openprim.kernels.nvidia import depthwise_pointwise
from openprim.kernels.nvidia import wgmma as gpu_wgmma
from openprim.pyfrontend import to_module
from openprim.solvers import SOLVERS
from openprim.solvers.problem import parse_descriptor
from openprim.tuning import db as tuning_db
from openprim.tuning import find
from openprim.dialect import graph_functions
from openprim.tuning.db import TuningDBWarning
from openprim.tuning.tuner import Tuner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU = parse_target("cpu")
ARCH = tuning_db.arch_of(CPU)
CONV = "conv2d-1x4x6x6-k8-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-relu"
IM2COL = {"kt": 4, "mt": 4, "nt": 8}   # conv_im2col_gemm's default for CONV, and among its tunables
MODEL = """
import numpy as np
from openprim.pyfrontend import Graph


def build():
    rng = np.random.default_rng(0)
    g = Graph(layout="NHWC")
    y = g.relu(g.conv2d(g.input("x", (1, 6, 6, 4)), g.param("w", rng.standard_normal((8, 3, 3, 4))), padding=1))
    g.output(g.linear(g.flatten(g.global_avg_pool(y)), g.param("fc", rng.standard_normal((4, 8)))))
    return g
"""


@pytest.fixture(autouse=True)
def user_db(tmp_path, monkeypatch):
    """A fresh user database per test, no system database, and every warning shown again."""
    path = tmp_path / "user.sqlite"
    monkeypatch.setenv("OPENPRIM_USER_DB_PATH", str(path))
    monkeypatch.setattr(tuning_db, "SYSTEM_DB", tmp_path / "system.sqlite")
    monkeypatch.setattr(tuning_db, "_warned", set())
    monkeypatch.setattr(tuning_db, "_unusable", set())
    return path


def _graph():
    ns = {}
    exec(MODEL, ns)
    return ns["build"]()


def _select(options: str = ""):
    """prim-fuse + prim-select on the tiny model: {op name: (solver, choice, params, measured_us)}."""
    module = to_module(_graph())
    passes.run(module, f"prim-fuse,prim-select{{{options}}}", tuner=Tuner())
    out = {}
    with module.context:
        for op in graph_functions(module.operation)[0].regions[0].blocks[0].operations:
            op = op.operation
            if contract.solver(op) is not None:
                out[op.name] = (contract.solver(op), contract.choice(op), contract.params(op), contract.measured_us(op))
    return out


def _db_warnings(rec):
    return [w for w in rec if issubclass(w.category, TuningDBWarning)]


# ----------------------------------------------------------------------------- the database
def test_record_and_best_user_wins(tmp_path):
    assert tuning_db.best(CONV, ARCH) is None  # no database yet: no record, no warning
    tuning_db.record(CONV, ARCH, "conv_direct", {"wt": 6, "ft": 8, "ct": 4}, 3e-6, path=tuning_db.SYSTEM_DB)
    assert tuning_db.best(CONV, ARCH).solver == "conv_direct"
    tuning_db.record(CONV, ARCH, "conv_im2col_gemm", IM2COL, 5e-6)
    tuning_db.record(CONV, ARCH, "conv_reference", {}, 9e-6)
    best = tuning_db.best(CONV, ARCH)  # the user's record wins even though the system's is faster
    assert (best.solver, best.params, best.source) == ("conv_im2col_gemm", IM2COL, "user")
    tuning_db.record(CONV, ARCH, "conv_im2col_gemm", IM2COL, 1e-5)  # same key: replaced
    assert tuning_db.best(CONV, ARCH).solver == "conv_reference"
    assert tuning_db.best(CONV, "cpu:other") is None
    raw = sqlite3.connect(tuning_db.user_path()).execute("SELECT params FROM records").fetchall()
    assert ('{"kt": 4, "mt": 4, "nt": 8}',) in raw  # JSON with sorted keys


def _writer(args):
    path, worker, count = args
    os.environ["OPENPRIM_USER_DB_PATH"] = path
    for i in range(count):
        assert tuning_db.record(f"p{worker}-{i}", ARCH, "conv_reference", {}, 1e-6 * i)


def test_concurrent_writers(user_db):
    """4 processes x 40 records at once into a database none of them has created yet (creating it and switching
    it to WAL race), three times: all present, the file intact."""
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        for n in range(3):
            path = user_db.with_name(f"user{n}.sqlite")
            pool.map(_writer, [(str(path), w, 40) for w in range(4)])
            conn = sqlite3.connect(path)
            assert conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == 160
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            conn.close()


def test_unwritable_location_warns_once(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    for bad in (tmp_path / "file" / "sub" / "db.sqlite", tmp_path):  # missing directory; a directory, not a file
        monkeypatch.setenv("OPENPRIM_USER_DB_PATH", str(bad))
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            assert not tuning_db.record(CONV, ARCH, "conv_reference", {}, 1e-6)
            assert not tuning_db.record(CONV, ARCH, "conv_reference", {}, 1e-6)
            assert tuning_db.best(CONV, ARCH) is None
        assert len(_db_warnings(rec)) == 1 and "results are not cached" in str(rec[0].message)


def test_corrupt_database_kept_and_ignored(user_db):
    user_db.write_bytes(b"this is not an SQLite database" * 100)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert tuning_db.best(CONV, ARCH) is None
        assert not tuning_db.record(CONV, ARCH, "conv_reference", {}, 1e-6)
        assert _select("mode=immediate")["prim.conv2d"][1] == "heuristic"
    assert len(_db_warnings(rec)) == 1 and "unusable" in str(rec[0].message)
    assert user_db.read_bytes() == b"this is not an SQLite database" * 100


@pytest.mark.parametrize("solver, params, version, why", [
    ("conv_winograd_f9x9", {}, None, "unknown solver"),
    ("conv_im2col_gemm", IM2COL, "0.0.1", "compiler version"),
    ("conv_im2col_gemm", {"kt": 4, "mt": 4}, None, "parameters"),
    ("conv_im2col_gemm", {**IM2COL, "mt": 5}, None, "invalid values of mt"),
    ("conv_depthwise", {"wt": 2, "ct": 8}, None, "does not apply"),
])
def test_stale_record_ignored_with_one_warning(solver, params, version, why):
    tuning_db.record(CONV, ARCH, solver, params, 1e-9, version=version)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = _select("mode=immediate")
        _select("mode=immediate")
    assert got["prim.conv2d"][1] == "heuristic"
    assert len(_db_warnings(rec)) == 1 and why in str(rec[0].message)


# ----------------------------------------------------------------------------- solver tables
SM90 = parse_target("nvvm:sm_90")
WGMMA_CONV = "conv2d-2x64x9x9-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f16-none"


def test_table_entries_stored_by_name(monkeypatch):
    """A tile parameter indexes a table of kernel configurations: stored by the entry's name, a record keeps
    its meaning when the table is reordered (read back to the entry's new index), and is ignored with one
    warning when its entry is gone or when it stored an index (a database from before names)."""
    solver = SOLVERS["conv_implicit_gemm_wgmma"]
    problem = parse_descriptor(WGMMA_CONV)
    tile = next(i for i in solver.tunables(problem)["tile"] if i != solver.default_params(problem, SM90)["tile"])
    config, name = gpu_wgmma.CONFIGS[tile], solver.tables()["tile"][tile]
    tuning_db.record(WGMMA_CONV, str(SM90), solver.name, {"tile": tile}, 1e-6)
    stored = sqlite3.connect(tuning_db.user_path()).execute("SELECT params FROM records").fetchone()[0]
    assert json.loads(stored) == {"tile": name}
    monkeypatch.setattr(gpu_wgmma, "CONFIGS", gpu_wgmma.CONFIGS[::-1])
    rec = tuning_db.best(problem, str(SM90), SM90)
    assert rec.params["tile"] != tile and gpu_wgmma.CONFIGS[rec.params["tile"]] == config
    monkeypatch.setattr(gpu_wgmma, "CONFIGS", [c for c in gpu_wgmma.CONFIGS if c != config])
    for stored, why in ((stored, f'tile "{name}" of {solver.name} is not an entry of its table'),
                        ('{"tile": 0}', f"tile 0 of {solver.name} is a table index")):
        conn = sqlite3.connect(tuning_db.user_path())
        with conn:
            conn.execute("UPDATE records SET params = ?", (stored,))
        conn.close()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert tuning_db.best(problem, str(SM90), SM90) is None
        assert len(_db_warnings(caught)) == 1 and why in str(caught[0].message)


def test_every_table_names_its_entries():
    """Each parameter a solver declares as a table index has one distinct name per index it can take."""
    problems = {"conv2d": parse_descriptor(WGMMA_CONV), "matmul": parse_descriptor("gemm-b1-m64-n64-k64-nn-f16-none"),
                "norm_matmul": parse_descriptor("norm_gemm-layer_norm-b1-m16-n64-k64-nn-f16-none"),
                "depthwise_pointwise": parse_descriptor("depthwise_pointwise-2x16x8x8-3x3-s1x1-p1x1x1x1-d1x1-none-"
                                                        "k16-f16-none"),
                "attention": parse_descriptor("attention-b2-q64-k64-d64-f16")}
    tabled = [s for s in SOLVERS.values() if s.tables()]
    assert {s.name for s in tabled} >= {"conv_implicit_gemm_gpu", "conv_implicit_gemm_mma", "gemm_wgmma",
                                        "conv_implicit_gemm_mfma", "attention_flash_wmma",
                                        "conv_depthwise_pointwise_mma"}
    for s in tabled:
        for k, names in s.tables().items():
            assert len(set(names)) == len(names) and set(s.tunables(problems[s.op])[k]) <= set(range(len(names)))


# ----------------------------------------------------------------------------- modes
def test_immediate_uses_the_database():
    tuning_db.record(CONV, ARCH, "conv_im2col_gemm", IM2COL, 2.5e-6)
    heuristic = _select("mode=immediate")["prim.conv2d"]
    assert heuristic[0] != "conv_reference"
    tuning_db.record(CONV, ARCH, "conv_reference", {}, 1e-6)
    assert _select("mode=immediate")["prim.conv2d"] == ("conv_reference", "db", {}, pytest.approx(1.0))
    assert _select("mode=immediate solver=conv_direct")["prim.conv2d"][:2] == ("conv_direct", "forced")


def _planted(monkeypatch, times: dict, wrong=()):
    """find.measure answering from a table (solver -> seconds); solvers in `wrong` give a wrong output."""
    calls = []

    def measure(text, target, keep=()):
        solver = text.split('prim.solver = "')[1].split('"')[0]
        calls.append(solver)
        return np.full(3, 1.0 + (solver in wrong)), times.get(solver, 1e-3)
    monkeypatch.setattr(find, "measure", measure)
    return calls


def test_find_picks_the_fastest_correct_solver(monkeypatch):
    calls = _planted(monkeypatch, {"conv_reference": 1e-7, "conv_im2col_gemm": 2e-6, "gemm_reference": 3e-7}, wrong=("conv_reference",))
    got = _select("mode=find find-budget=0.3")
    assert got["prim.conv2d"] == ("conv_im2col_gemm", "find", pytest.approx(got["prim.conv2d"][2]), pytest.approx(2.0))
    assert got["prim.matmul"][:2] == ("gemm_reference", "find")
    assert "conv_reference" in calls
    rec = tuning_db.best(CONV, ARCH)  # every correct measurement stored; the wrong one never
    assert rec.solver == "conv_im2col_gemm"
    assert all(r.solver != "conv_reference" for r in tuning_db.records(CONV, ARCH))


def test_search_exhaustive_or_sampled(monkeypatch):
    _planted(monkeypatch, {})
    module = to_module(_graph())
    passes.run(module, "prim-fuse")
    from openprim.passes.prim_select import prepare
    with module.context:
        conv, matmul = prepare(graph_functions(module.operation)[0], "NHWC", CPU)
        for op in (conv, matmul):
            space = find.space(op, CPU)
            budget0 = find.search(op, CPU, 0.0)
            solvers = {s for s, _ in space}
            # out of time at once: the defaults of the two solvers predicted fastest (and the heuristic's)
            assert 2 <= len(budget0) <= 3 and len({r.solver for r in budget0}) == len(budget0)
            assert {r.solver for r in budget0} <= solvers
            assert len(find.search(op, CPU, 5.0)) >= len(space)  # time enough: all of it (descent adds neighbours)


def test_search_keeps_the_budget(monkeypatch):
    """A measurement starts only when it is expected to end within the budget, compile included. The search
    overshot 2-6x: it measured all of a small space whatever the budget, started a candidate with a moment
    left, and compiled the three leaders twice more each to confirm them. The planted worker here takes
    COMPILE seconds per candidate and re-times one it kept (the leaders) at once."""
    compile_seconds, kept = 0.15, set()

    def measure(text, target, keep=()):
        if find.digest(text) not in kept:
            time.sleep(compile_seconds)
        kept.clear()
        kept.update(keep)
        return np.full(3, 1.0), 1e-6 * (1 + len(text) % 7)
    monkeypatch.setattr(find, "measure", measure)
    module = to_module(_graph())
    passes.run(module, "prim-fuse")
    from openprim.passes.prim_select import prepare
    with module.context:
        for op in prepare(graph_functions(module.operation)[0], "NHWC", CPU):
            for budget in (0.0, 1.0):
                t0 = time.monotonic()
                results = find.search(op, CPU, budget)
                took = time.monotonic() - t0
                # whatever the budget: the heuristic's choice and the next most plausible solver's default
                assert took <= max(1.2 * budget, 3 * compile_seconds) + 0.1, (op.name, budget, took)
                assert len(results) >= (2 if budget == 0 else int(budget / compile_seconds) - 2), results


def test_hybrid_and_environment(monkeypatch):
    _planted(monkeypatch, {"conv_reference": 1e-7})
    assert _select()["prim.conv2d"][1] == "heuristic"  # hybrid, NONE: a miss is not searched
    monkeypatch.setenv("OPENPRIM_FIND_ENFORCE", "SEARCH")
    assert _select("find-budget=0.2")["prim.conv2d"][:2] == ("conv_reference", "find")
    monkeypatch.setenv("OPENPRIM_FIND_ENFORCE", "3")
    assert _select()["prim.conv2d"][:2] == ("conv_reference", "db")  # now a hit: not searched again
    monkeypatch.setenv("OPENPRIM_FIND_ENFORCE", "DB_UPDATE")
    _planted(monkeypatch, {"conv_im2col_gemm": 1e-8})
    assert _select("find-budget=0.2")["prim.conv2d"][:2] == ("conv_im2col_gemm", "find")  # a hit, searched again
    monkeypatch.delenv("OPENPRIM_FIND_ENFORCE")
    for value, choice in (("2", "db"), ("fast", "db"), ("normal", "find"), ("1", "find"), ("hybrid", "db")):
        monkeypatch.setenv("OPENPRIM_FIND_MODE", value)
        assert _select("find-budget=0.1")["prim.conv2d"][1] == choice, value
    monkeypatch.setenv("OPENPRIM_FIND_MODE", "sometimes")
    with pytest.raises(OpenPrimError, match="unknown find mode 'sometimes'"):
        _select()
    with pytest.raises(OpenPrimError, match="unknown find enforce"):
        _select("mode=immediate enforce=ALWAYS")


def test_find_on_a_gpu_target_without_the_gpu():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = _select("mode=find target=nvvm:sm_90")
    assert got["prim.conv2d"][1] == "heuristic"
    assert len(_db_warnings(rec)) == 1 and "--measure-on" in str(rec[0].message)


# ----------------------------------------------------------------------------- commands
def _cli(*args, env=None, cwd=None):
    cmd = [sys.executable, "-m", "openprim.cli", *args] if args[0] != "script" else [sys.executable, *args[1:]]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)


def test_tune_explain_and_conv(tmp_path, user_db):
    model = tmp_path / "tiny.py"
    model.write_text(MODEL)
    r = _cli("tune", str(model), "--budget", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(CONV + " x1: best ") and "speedup" in lines[0] and "heuristic" in lines[0]
    assert "tuned 2 distinct layers" in lines[-1]
    best = tuning_db.best(CONV, ARCH)
    assert best is not None and f"{best.solver} {tuning_db.params_key(best.params)}" in lines[0]
    r = _cli("explain", str(model))
    assert r.returncode == 0, r.stderr
    assert f"choice: {best.solver} {tuning_db.params_key(best.params) if best.params else '{}'} from db" in r.stdout
    assert re.search(r"^  conv_depthwise +not applicable: not depthwise", r.stdout, re.M), r.stdout
    r = _cli("conv", "-c", "4", "-H", "6", "-W", "6", "-k", "8", "-p", "1", "-q", "1", "-u", "2", "--layout", "NHWC",
             "-t", "1")
    assert r.returncode == 0, r.stderr
    assert "(ok)" in r.stdout and "GFLOP/s" in r.stdout
    for bad, msg in ((["-F", "9"], "-F 9: 0 (all directions), 1 forward"), (["-g", "3"], "-g 3 must divide"),
                     (["--solver", "conv_depthwise"], "not applicable")):
        r = _cli("conv", *bad)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and msg in r.stderr, r.stderr
    r = _cli("tune", str(model), "--target", "nvvm:sm_90")
    assert r.returncode == 1 and "--measure-on" in r.stderr and r.stderr.count("\n") == 1


def test_conv_directions():
    """`openprim conv -F`, MIOpenDriver's directions: each one compiled, checked against float64 numpy (a strided,
    dilated, grouped, asymmetric case: the reference solvers; a plain one: the fast ones, the stride-1 input
    gradient as a forward convolution); on a GPU target with no GPU here, compiled only (all three directions
    on the matrix cores of sm_90, sm_80 and gfx942)."""
    r = _cli("conv", "-n", "2", "-c", "6", "-H", "9", "-W", "8", "-k", "4", "-p", "1", "-q", "2", "-u", "2", "-l", "2",
             "-g", "2", "-F", "0")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["forward", "backward data", "backward weights"], r.stdout
    assert all(ln.endswith("(ok)") for ln in lines), r.stdout
    assert "conv2d_bwd_data-2x6x9x8-k4-3x3-s2x1-p1x2x1x2-d2x1-g2" in lines[1] and "conv2d_bwd_weights-" in lines[2]
    r = _cli("conv", "-n", "2", "-c", "8", "-H", "9", "-W", "7", "-k", "16", "-p", "1", "-q", "1", "-F", "6", "-t", "1",
             "--layout", "NHWC")
    assert r.returncode == 0, r.stderr
    assert "(as the forward convolution of dy with the reversed filter): solver conv_" in r.stdout, r.stdout
    assert "solver conv_bwd_weights_gemm" in r.stdout and r.stdout.count("GFLOP/s") == 2, r.stdout
    for target, weights in (("nvvm:sm_90", "conv2d_bwd_weights-2x16x9x7-k16-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f16"
                                            "-none: solver conv_bwd_weights_wgmma"),
                            ("nvvm:sm_80", "(the first of 9 GEMMs, one per filter tap): solver gemv_mma"),
                            ("rocdl:gfx942", "(the first of 9 GEMMs, one per filter tap): solver gemm_mfma")):
        r = _cli("conv", "-n", "2", "-c", "16", "-H", "9", "-W", "7", "-k", "16", "-p", "1", "-q", "1", "-F", "0",
                 "--dtype", "f16", "--target", target)
        assert r.returncode == 0, r.stderr
        assert r.stdout.count(f"compiled for {target} (no such GPU here to run it)") == 3, r.stdout
        # the filter gradient: sm_90's own kernel; elsewhere, whose only solver is the reference loop nest, as
        # GEMMs on the matrix cores (16 rows: C = 16)
        assert weights in r.stdout, r.stdout


def test_bundle_measure_import(tmp_path, user_db):
    """--measure-on with the CPU target standing in for a GPU: the bundle, the runtime-only script, db import."""
    model = tmp_path / "tiny.py"
    model.write_text(MODEL)
    r = _cli("tune", str(model), "--measure-on", str(tmp_path / "b.tune"), "--budget", "0")
    assert r.returncode == 0, r.stderr
    r = _cli("script", os.path.join(ROOT, "scripts", "measure_tuning.py"), str(tmp_path / "b.tune"),
             str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert results and all(r["seconds"] for r in results)
    r = _cli("db", "import", str(tmp_path / "r.json"))
    assert r.returncode == 0 and f"imported {len(results)} records" in r.stdout
    assert tuning_db.best(CONV, ARCH) is not None
    r = _cli("db", "import", str(model))
    assert r.returncode == 1 and "cannot read tuning results" in r.stderr


def test_commands_that_cannot_store_exit_nonzero(tmp_path, user_db):
    """`tune` into a database that is not one warned "results are not cached" and still printed "tuned ... ->
    the database", exit 0; `db import` said "imported 0 records". Now each stops before any work with one
    error line, exit 1, and the file is left as it was."""
    garbage = b"this is not an SQLite database" * 100
    user_db.write_bytes(garbage)
    model, results = tmp_path / "tiny.py", tmp_path / "r.json"
    model.write_text(MODEL)
    results.write_text(json.dumps({"format": "openprim-tuning-results", "compiler": tuning_db.compiler_version(),
                                   "results": [{"problem": CONV, "arch": ARCH, "solver": "conv_reference",
                                                "params": {}, "seconds": 1e-6}]}))
    for argv, what in ((["tune", str(model), "--budget", "0"], ""), (["db", "import", str(results)], ": nothing imported"),
                       (["db", "add", CONV, "cpu", "conv_reference", "{}", "1e-6"], "")):
        r = _cli(*argv)
        assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1, (argv, r.stdout, r.stderr)
        assert f"tuning database {user_db} is not writable (file is not a database){what}" in r.stderr, r.stderr
    assert user_db.read_bytes() == garbage


# Installed (PYTHONPATH) in the tuners of test_concurrent_tuners_take_turns: every process logs its flock calls
# (and the closes that release one) with the time and its CPU time.
LOCK_LOG = """
import fcntl, os, time
_flock, _close, _held = fcntl.flock, os.close, set()


def _log(event):
    with open(os.environ["LOCK_LOG"], "a") as f:
        f.write(f"{os.getpid()} {event} {time.monotonic()} {time.process_time()}\\n")


def flock(fd, op):
    if op == fcntl.LOCK_UN and fd in _held:
        _held.discard(fd)
        _log("release")
    _flock(fd, op)
    if op != fcntl.LOCK_UN:
        _held.add(fd)
        _log("exclusive" if op == fcntl.LOCK_EX else "shared")


def close(fd):
    if fd in _held:
        _held.discard(fd)
        _log("release")
    _close(fd)


fcntl.flock, os.close = flock, close
"""


def test_concurrent_tuners_take_turns(tmp_path):
    """Two `openprim tune` at once stored times of one configuration 13x apart: each timed beside the other's
    work done outside the measurement lock (its start and passes, its worker's start, its candidate modules).
    Every process of a tuner now computes under the lock (tuning/lock.py), read here from a log of each
    process's lock calls with its CPU time: between its first lock and its last, no process spends more than
    0.15 s of CPU at a stretch nor 0.6 s in all holding none (a worker's start, or its ~40 candidate
    compiles, take more; the bookkeeping between locks, ~90 gaps of ~1 ms per worker and a collector's pause,
    took 0.15-0.3 s in all), and no timing (exclusive) overlaps another process's hold. The budget holds
    for both: each layer's search ends within 1.2 x B + 1 s (the worker's start, the leaders' re-timing),
    or measured only what a choice needs (the heuristic's and the next most plausible solver's default)."""
    site, model, log, budget = tmp_path / "site", tmp_path / "tiny.py", tmp_path / "locks.log", 2.0
    site.mkdir()
    (site / "sitecustomize.py").write_text(LOCK_LOG)
    model.write_text(MODEL)
    env = {**os.environ, "LOCK_LOG": str(log), "OPENPRIM_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": os.pathsep.join([str(site)] + os.environ.get("PYTHONPATH", "").split(os.pathsep))}
    procs = [subprocess.Popen([sys.executable, "-m", "openprim.cli", "tune", str(model), "--budget", str(budget)],
                              env={**env, "OPENPRIM_USER_DB_PATH": str(tmp_path / f"{n}.sqlite")},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        layers = re.findall(r"\((\d+) configurations, ([\d.]+) s\)", out)   # past the budget: only what a
        assert len(layers) == 2 and all(float(t) <= 1.2 * budget + 1.0 or int(n) <= 3 for n, t in layers), out  # choice needs
    events = {}
    for line in log.read_text().splitlines():
        pid, event, at, cpu = line.split()
        events.setdefault(pid, []).append((event, float(at), float(cpu)))
    assert len(events) == 4, "two tuners, two workers"
    held = {}   # pid -> [(start, end, exclusive)]
    for pid, seq in events.items():
        depth, unlocked, opened = 0, [], {}
        for (event, at, cpu), (_, _, next_cpu) in zip(seq, seq[1:] + [seq[-1]]):
            if event == "release":
                depth -= 1
                start, exclusive = opened.pop(depth)
                held.setdefault(pid, []).append((start, at, exclusive))
            else:
                opened[depth] = (at, event == "exclusive")
                depth += 1
            if depth == 0:
                unlocked.append(next_cpu - cpu)
        assert max(unlocked) <= 0.15 and sum(unlocked) <= 0.6, (pid, sorted(unlocked)[-3:], sum(unlocked))
    for pid, spans in held.items():
        for start, end, exclusive in spans:
            if exclusive:
                assert not any(s < end and start < e for other, o in held.items() if other != pid for s, e, _ in o)


# One valid record of each problem kind: (descriptor, arch, solver, parameters as `db show` prints them).
DB_ADD = [
    (CONV, "cpu", "conv_im2col_gemm", IM2COL),
    (WGMMA_CONV, "nvvm:sm_90", "conv_implicit_gemm_wgmma", {"tile": "128x128-wg1-s4"}),
    ("gemm-b1-m16-n32-k8-nn-f32-bias+relu", "cpu", "gemm", {"kt": 8, "mt": 8, "nt": 32}),
    ("gemm-b1-m16-n32-k8-nn-panels16-f32-none", "cpu", "gemm_packed", {"mt": 6, "nt": 16, "pack": 0}),
    ("depthwise_pointwise-2x16x8x8-3x3-s1x1-p1x1x1x1-d1x1-bias+relu-k16-f16-bias", "nvvm:sm_80",
     "conv_depthwise_pointwise_mma", {"tile": "small"}),
    ("attention-b2-q16-k16-d64-causal-mask1x1x16x16-f16", "nvvm:sm_80", "attention_flash_mma", {}),
]


def _main(capsys, *argv):
    """(exit status, stdout, stderr) of the openprim command, in this process."""
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_db_add_and_show_every_problem_kind(capsys):
    """`db add` takes a record of every problem kind (table parameters by name) and the compile finds it with
    the solver's parameters; a record that no compile would use is refused, one error line, exit 1; `db show`
    lists the records, of one descriptor when given, and says why one would be ignored."""
    for key, arch, solver, params in DB_ADD:
        rc, _, err = _main(capsys, "db", "add", key, arch, solver, json.dumps(params), "2e-5")
        assert rc == 0, err
        target = parse_target(arch)
        rec = tuning_db.best(parse_descriptor(key), tuning_db.arch_of(target), target)
        assert (rec.solver, rec.params) == (solver, tuning_db.solver_params(solver, params))
    assert tuning_db.best(parse_descriptor(DB_ADD[4][0]), "nvvm:sm_80").params == \
        {"tile": depthwise_pointwise.TILES.index("small")}
    for key, arch, solver, params, why in [
            (CONV.replace("conv2d-", "conv2d_bwd_data-"), "cpu", "conv_im2col_gemm", IM2COL, "serves forward only"),
            (DB_ADD[5][0], "nvvm:sm_90", "attention_flash_wgmma", {}, "an additive mask"),
            (DB_ADD[2][0], "cpu", "conv_direct", {}, "solver 'conv_direct' is for conv2d, not matmul"),
            (DB_ADD[4][0], "nvvm:sm_80", "conv_depthwise_pointwise_mma", {"tile": 1}, "tile 1 of "
             "conv_depthwise_pointwise_mma is a table index"),
            (DB_ADD[4][0], "nvvm:sm_80", "conv_depthwise_pointwise_mma", {"tile": "huge"}, 'tile "huge" of '
             "conv_depthwise_pointwise_mma is not an entry of its table (large, small)"),
            ("gemm-b1-m16-n32-k8-nt-panels16-f32-none", "cpu", "gemm_packed", {}, "not a problem descriptor")]:
        rc, _, err = _main(capsys, "db", "add", key, arch, solver, json.dumps(params), "2e-5")
        assert rc == 1 and err.count("\n") == 1 and err.startswith("openprim: error: db add: ") and why in err, err
    rc, out, _ = _main(capsys, "db", "show")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == len(DB_ADD) + 1 and lines[-1].startswith(f"{len(DB_ADD)} records in ")
    assert f"{DB_ADD[4][0]} nvvm:sm_80 conv_depthwise_pointwise_mma {{\"tile\": \"small\"}} 20.0 us (user db)" in lines
    tuning_db.record(CONV, ARCH, "conv_depthwise", {"wt": 2, "ct": 8}, 1e-6)
    rc, out, _ = _main(capsys, "db", "show", CONV)
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 3 and all(line.startswith(CONV) for line in lines[:2])
    assert lines[0].endswith("(user db; ignored: solver 'conv_depthwise' does not apply: not depthwise (needs "
                             "groups = C = K))") and lines[1].endswith("(user db)")
    rc, _, err = _main(capsys, "db", "show", "conv2d-garbage")
    assert rc == 1 and err.count("\n") == 1 and "db show: 'conv2d-garbage' is not a problem descriptor" in err

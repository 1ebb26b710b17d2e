"""Fleet tuning on Ray (tuning/fleet.py) and the shippable database (tuning/dbfile.py), issue 33.

A local Ray cluster of 2 CPUs on this machine (one for the module: starting one takes seconds) tunes a model of
two small convolutions for the CPU target:
- the same choices as the serial `openprim tune`: the candidate that must win is planted (find_worker's
  $OPENPRIM_FIND_PLANTED test hook gives its time; outputs and every other time are real), so the comparison
  does not depend on timing noise;
- a run interrupted after 3 measurements and started again measures nothing that is stored, leaves the stored
  records as they are (same time, same timestamp), and a run with nothing left to do measures nothing;
- fault injection: a compile task's Ray worker and the measurer each die once mid-run ($OPENPRIM_FLEET_FAULT);
  the run finishes, Ray retried both (the ledger says who lost them), every layer is in the database once with a
  valid best, no measurement lost, none duplicated;
- `openprim tune --ray ADDRESS` (the module's cluster, as a second driver), the summary table on stdout and the
  progress line on stderr, and its one-line errors.
`openprim db export/import`: a round trip (also into the system database), and a corrupt file, another format
version, a changed solver (its tables or its tunables) or a bad record are refused with one error line, exit 1,
the database untouched.

    python -m pytest test/python/test_fleet_tuning.py -q
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
import ray

from openprim import cli
from openprim.base.target import parse_target
from openprim.solvers import SOLVERS
from openprim.pyfrontend import importers
from openprim.solvers.problem import parse_descriptor, problem_of
from openprim.tuning import db as tuning_db
from openprim.tuning import dbfile, find, fleet

CPU = parse_target("cpu")
ARCH = tuning_db.arch_of(CPU)
MODEL = """
import numpy as np
from openprim.pyfrontend import Graph


def build():
    rng = np.random.default_rng(0)
    g = Graph(layout="NHWC")
    y = g.relu(g.conv2d(g.input("x", (1, 6, 6, 4)), g.param("w", rng.standard_normal((8, 3, 3, 4))), padding=1))
    g.output(g.conv2d(y, g.param("w2", rng.standard_normal((8, 1, 1, 8)))))
    return g
"""
CONV = "conv2d-1x4x6x6-k8-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-relu"
IM2COL = {"kt": 4, "mt": 4, "nt": 8}


def _kill_serial_worker():
    """find's worker of this process, started by another test with another environment."""
    if find._worker is not None:
        find._worker.kill()
        find._worker.wait()
        find._worker.stdin.close()
        find._worker.stdout.close()
        find._worker = None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local cluster of 2 CPUs and this CPU's measurer resource, started with a lock directory of its own and
    the planted-times hook pointing at an empty table; its directory."""
    d = tmp_path_factory.mktemp("fleet")
    (d / "planted.json").write_text("{}")
    env = {"OPENPRIM_LOCK_DIR": str(d / "locks"), "OPENPRIM_FIND_PLANTED": str(d / "planted.json")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _kill_serial_worker()
    ray.init(**fleet.local_cluster(CPU, 2))
    yield d
    ray.shutdown()
    _kill_serial_worker()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


from test_tuning import user_db  # noqa: E402,F401 - the same fresh databases per test (autouse)


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(MODEL)
    return path


def _rows(path) -> dict:
    """{(problem, solver, params): (seconds, timestamp)} of a database."""
    conn = sqlite3.connect(path)
    try:
        return {(p, s, params): (sec, ts) for p, s, params, sec, ts in
                conn.execute("SELECT problem, solver, params, seconds, timestamp FROM records")}
    finally:
        conn.close()


def _layers(model_path):
    return find.layers(importers.load(str(model_path)), CPU)


def _valid_best(path, key: str):
    """The fastest record of a layer in the database at `path` that a compile would use."""
    found = tuning_db.stored(parse_descriptor(key), ARCH, CPU, path)
    return min(found, key=tuning_db.rank, default=None)


# ---------------------------------------------------------------------------------------------- the fleet

def test_same_choices_as_serial(cluster, model, tmp_path):
    """Per layer, the default of the second most plausible solver (measured whatever the budget, after the
    reference) is planted to be fastest: serial `openprim tune` and the fleet both pick it, store it as the
    layer's best, and the fleet's summary says so."""
    module, todo = _layers(model)
    planted, winners = {}, {}
    with module.context:
        for op, key, _ in todo:
            configs = find.space(op, CPU)
            defaults = [c for i, c in enumerate(configs) if i == 0 or configs[i - 1][0] != c[0]]
            defaults.sort(key=lambda c: SOLVERS[c[0]].cost(problem_of(op), CPU))
            winners[key] = defaults[1]
            planted[find.digest(find.candidate_module(op, *defaults[1]))] = 1e-9
    (cluster / "planted.json").write_text(json.dumps(planted))
    serial, fleet_db = tmp_path / "serial.sqlite", tmp_path / "fleet.sqlite"
    try:
        assert cli.main(["tune", str(model), "--budget", "0.5", "--db", str(serial)]) == 0
        report = fleet.tune_fleet([str(model)], CPU, db=str(fleet_db), budget=0.5, progress=False)
    finally:
        (cluster / "planted.json").write_text("{}")
    assert [layer["problem"] for layer in report.layers] == list(winners)
    for layer in report.layers:
        solver, params = winners[layer["problem"]]
        assert (layer["best"].solver, layer["best"].params, layer["best"].seconds) == (solver, params, 1e-9)
        assert layer["reference"] is not None and layer["error"] is None and layer["measured"] >= 2
        for db in (serial, fleet_db):
            best = _valid_best(db, layer["problem"])
            assert (best.solver, best.params) == (solver, params), db
    assert report.lost == report.retried == 0 and report.records == len(_rows(fleet_db))
    table = report.table().splitlines()
    assert table[0].split()[:3] == ["layer", "x", "best"] and len(table) == 2 + len(winners)
    assert all(winners[line.split()[0]][0] in line for line in table[2:])


class Interrupted(Exception):
    pass


def test_interrupted_run_resumes_without_measuring_again(cluster, model, tmp_path):
    db = tmp_path / "fleet.sqlite"
    seen = []

    def interrupt(key, result):
        seen.append(key)
        if len(seen) == 3:
            raise Interrupted
    with pytest.raises(Interrupted):
        fleet.tune_fleet([str(model)], "cpu", db=str(db), budget=1.0, on_result=interrupt, progress=False)
    first = _rows(db)
    assert len(first) >= 2   # what was measured before the interruption is stored

    measured = []
    report = fleet.tune_fleet([str(model)], "cpu", db=str(db), budget=1.0, progress=False, on_result=lambda k, r:
                              measured.append((k, r.solver, tuning_db.params_key(r.params))))
    assert not set(measured) & set(first)              # nothing stored is measured again
    assert report.stored == len(first) and report.measured == len(measured) > 0
    assert report.reference_reruns <= len(report.layers)   # only the references' outputs, for the checks
    second = _rows(db)
    assert all(second[k] == first[k] for k in first)   # stored records are not rewritten (time, timestamp)
    assert all(_valid_best(db, layer["problem"]) is not None for layer in report.layers)

    again = fleet.tune_fleet([str(model)], "cpu", db=str(db), budget=0.0, progress=False)
    assert again.measured == again.reference_reruns == 0 and again.stored == len(second)
    assert _rows(db) == second


def test_fault_injection_a_worker_and_the_measurer_die(cluster, model, tmp_path, monkeypatch):
    """Candidate 2's compile task kills its Ray worker, task 4 on the measurer kills the measurer (once each):
    Ray runs both again, elsewhere (a new worker, the restarted measurer); the run finishes with every layer
    in the database once, a valid best each, every successful measurement stored (lost 0), none twice."""
    monkeypatch.setenv("OPENPRIM_FLEET_FAULT", "compile@2,measure@4")
    db = tmp_path / "fleet.sqlite"
    report = fleet.tune_fleet([str(model)], "cpu", db=str(db), budget=1.0, progress=False)
    assert report.retried >= 2 and report.lost == 0
    lost = {name for name, w in report.workers.items() if w.retried}
    assert any(name.startswith("measurer") for name in lost) and any(not name.startswith("measurer") for name in lost)
    rows = _rows(db)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM (SELECT 1 FROM records GROUP BY problem, arch, solver, params "
                        "HAVING COUNT(*) > 1)").fetchone()[0] == 0
    assert {p for p, _, _ in rows} == {layer["problem"] for layer in report.layers}
    succeeded = {(layer["problem"], r.solver, tuning_db.params_key(r.params)) for layer in report.layers
                 for r in layer["configs"] if r.seconds is not None}
    assert succeeded == set(rows)   # every successful measurement stored, and nothing else
    for layer in report.layers:
        best = _valid_best(db, layer["problem"])
        assert best is not None and (best.solver, best.params) == (layer["best"].solver, layer["best"].params)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "openprim.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_tune_ray_command(cluster, model, tmp_path):
    """`openprim tune MODEL --ray ADDRESS` (this module's cluster): the table and the totals on stdout, the
    progress on stderr; mistakes are one error line."""
    db = tmp_path / "cli.sqlite"
    address = ray.get_runtime_context().gcs_address
    r = _cli("tune", str(model), "--ray", address, "--workers", "1", "--budget", "0", "--db", str(db))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("layer") and lines[2].startswith(CONV) and " conv" in lines[2]
    assert lines[-1].startswith("tuned 2 layers, ") and lines[-1].endswith("s)") and str(db) in lines[-1]
    assert "fleet: layers 2/2" in r.stderr
    assert {p for p, _, _ in _rows(db)} == {lines[2].split()[0], lines[3].split()[0]}
    for argv, msg in ((["--workers", "2"], "--workers applies to --ray"),
                      (["--ray", "--target", "nvvm:sm_90"], "cannot time nvvm:sm_90 on this machine"),
                      (["--ray", "--measure-on", str(tmp_path / "b.tune")], "--measure-on and --ray")):
        r = _cli("tune", str(model), *argv)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and msg in r.stderr, (argv, r.stderr)


# ------------------------------------------------------------------------------------- export and import

def _fill(path=None):
    tuning_db.record(CONV, ARCH, "conv_im2col_gemm", IM2COL, 2e-5, path=path)
    tuning_db.record(CONV, ARCH, "conv_reference", {}, 9e-5, path=path)
    tuning_db.record("gemm-b1-m16-n32-k8-nn-f32-bias+relu", ARCH, "gemm", {"kt": 8, "mt": 8, "nt": 32}, 3e-6,
                     path=path)
    tuning_db.record("conv2d-2x64x9x9-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f16-none", "nvvm:sm_90",
                     "conv_implicit_gemm_wgmma", {"tile": 0}, 4e-6, path=path)


def _db(capsys, *argv):
    rc = cli.main(["db", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_export_import_round_trip(capsys, tmp_path, user_db):
    _fill()
    tuning_db.record(CONV, ARCH, "conv_direct", {"wt": 6, "ft": 8, "ct": 4}, 1e-5, version="0.0.1")   # stale
    out = tmp_path / "fleet.json"
    rc, stdout, err = _db(capsys, "export", str(out))
    assert rc == 0 and "exported 4 records" in stdout and "1 that a compile would ignore left out" in stdout, err
    data = json.loads(out.read_text())
    assert data["format"] == dbfile.FORMAT and data["version"] == dbfile.VERSION
    assert set(data["solvers"]) == {"conv_im2col_gemm", "conv_reference", "gemm", "conv_implicit_gemm_wgmma"}
    wgmma = next(r for r in data["records"] if r["solver"] == "conv_implicit_gemm_wgmma")
    assert wgmma["params"] == {"tile": SOLVERS["conv_implicit_gemm_wgmma"].tables()["tile"][0]}   # by name
    other = tmp_path / "other.sqlite"
    rc, stdout, err = _db(capsys, "import", str(out), "--db", str(other))
    assert rc == 0 and f"imported 4 records into {other}" in stdout, err
    strip = lambda rows: {k: v[0] for k, v in rows.items()}   # noqa: E731 - the timestamps are the import's
    assert strip(_rows(other)) == {k: v for k, v in strip(_rows(user_db)).items() if k[1] != "conv_direct"}
    # twice: each record once (the primary key)
    assert _db(capsys, "import", str(out), "--db", str(other))[0] == 0 and len(_rows(other)) == 4
    # into the package's system database (here a temporary one): used after the user's, no log beside it
    rc, stdout, err = _db(capsys, "import", str(out), "--system")
    assert rc == 0 and str(tuning_db.SYSTEM_DB) in stdout, err
    assert not os.path.exists(f"{tuning_db.SYSTEM_DB}-wal")
    os.unlink(user_db)
    best = tuning_db.best(CONV, ARCH)
    assert (best.solver, best.params, best.source) == ("conv_im2col_gemm", IM2COL, "system")


def _broken(tmp_path, name: str, edit) -> str:
    data = json.loads((tmp_path / "fleet.json").read_text())
    edit(data)
    (tmp_path / name).write_text(json.dumps(data))
    return str(tmp_path / name)


def test_import_refuses_bad_files(capsys, tmp_path, user_db, monkeypatch):
    """Each: one error line, exit 1, no traceback, the database as it was."""
    _fill(tmp_path / "source.sqlite")
    assert _db(capsys, "export", str(tmp_path / "fleet.json"), "--db", str(tmp_path / "source.sqlite"))[0] == 0
    tuning_db.record(CONV, ARCH, "conv_direct", {"wt": 6, "ft": 8, "ct": 4}, 1e-5)
    before = user_db.read_bytes()
    (tmp_path / "truncated.json").write_text((tmp_path / "fleet.json").read_text()[:200])

    def set_(path, value):
        def edit(data):
            *head, last = path
            node = data
            for k in head:
                node = node[k]
            node[last] = value
        return edit
    cases = [
        (str(tmp_path / "truncated.json"), "cannot read tuning results or a tuning database export"),
        (_broken(tmp_path, "v2.json", set_(["version"], 2)), "format version 2 of openprim-tuning-db; this OpenPrim "
                                                             "reads version 1"),
        (_broken(tmp_path, "nolist.json", set_(["records"], {})), "corrupt tuning database export"),
        (_broken(tmp_path, "field.json", set_(["records", 0, "seconds"], "fast")), "record 1: corrupt"),
        (_broken(tmp_path, "digest.json", set_(["solvers", "conv_implicit_gemm_wgmma"], "0" * 64)),
         "1 record of a solver that changed since the export (conv_implicit_gemm_wgmma"),
        (_broken(tmp_path, "neg.json", set_(["records", 0, "seconds"], -1.0)), "is not a positive number"),
        (_broken(tmp_path, "param.json", set_(["records", 0, "params"], {"kt": 5, "mt": 4, "nt": 8})),
         "would never be used: invalid values of kt"),
        (_broken(tmp_path, "problem.json", set_(["records", 0, "problem"], "conv2d-garbage")),
         "is not a problem descriptor"),
    ]
    for path, msg in cases:
        rc, stdout, err = _db(capsys, "import", path)
        assert rc == 1 and err.count("\n") == 1 and msg in err and "Traceback" not in err, (path, err)
        assert user_db.read_bytes() == before, path
    # a solver whose tunables changed since the export: its records mean something else now
    monkeypatch.setattr(SOLVERS["conv_reference"], "tunables", lambda p: {"unroll": (1, 2)})
    rc, _, err = _db(capsys, "import", str(tmp_path / "fleet.json"))
    assert rc == 1 and err.count("\n") == 1 and "1 record of a solver that changed since the export " \
        "(conv_reference:" in err, err
    assert user_db.read_bytes() == before

"""Benchmark: fleet tuning on Ray (tuning/fleet.py, issue 33) against the serial `openprim tune`, CPU target.

    python bench/fleet_tuning_cpu.py                        # ResNet-50, 2 s per layer: ~10 min on 2 cores
    python bench/fleet_tuning_cpu.py --depth 18 --budget 0.5   # a quick look (~3 min)

It tunes the distinct conv2d/matmul layers of ResNet-50 (batch 1, 224x224, fp32; 25 layers as `openprim tune`
sees them) for this machine's CPU with a reduced budget per layer (--budget, default 2 s instead of tune's 10 s,
so that the whole script ends in about 10 minutes on 2 cores), each run into an empty database of its own:

  serial      tuning_commands.tune, exactly `openprim tune --budget B` (in this process, its find worker);
  ray_1       tune_fleet on a local Ray cluster of 1 CPU (one compile task at a time, plus the measurer);
  ray_2       the same with 2 CPUs;
  ray_2_fault ray_2 with $OPENPRIM_FLEET_FAULT: candidate 5's compile task kills its Ray worker and the
              measurer dies at task 9; Ray retries both. Reported: task attempts retried, records lost (a
              successful measurement of the run missing from its database), records duplicated (a key stored
              twice), layers without a valid best.

For each run: wall time (a fleet run's includes starting and stopping its Ray cluster), candidates measured,
wall seconds per candidate, and per layer the choice. Agreement with serial: a layer's choice is the same
(solver and parameters), or both choices are re-timed here, interleaved (find's worker, 5 rounds, medians) and
the ratio fleet/serial says whether the difference is within measurement noise.

Ray's overhead per candidate: K configurations of one layer (--overhead-layer) measured one after another
(a) by the serial path (find.measure: the worker compiles, runs and times in one request), (b) by the fleet's
tasks one at a time (a compile task on a 1-CPU cluster, then the measurer: artifact written, sent through the
object store, loaded, run, timed), (c) by the fleet's tasks all submitted at once on 2 CPUs (throughput).
Writes bench/fleet_tuning_cpu.json (--out).

This machine has 2 cores: a CPU measurement holds the machine's measurement lock exclusively while compiles
hold it shared (tuning/lock.py), so with one measurer per machine only the compiles overlap each other, never
a timing. Two workers cannot scale much here; the figures are what they are.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

import numpy as np  # noqa: E402

from timing import cpu_cores  # noqa: E402

from openprim import tuning_commands  # noqa: E402
from openprim.base.target import parse_target  # noqa: E402
from openprim.solvers.problem import parse_descriptor  # noqa: E402
from openprim.tuning import db as tuning_db  # noqa: E402
from openprim.tuning import find, fleet  # noqa: E402

TARGET = parse_target("cpu")
ARCH = tuning_db.arch_of(TARGET)
FAULT = "compile@5,measure@9"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def stop_worker():
    """find's worker of this process, stopped (the next measurement starts a new one)."""
    if find._worker is not None:
        find._worker.kill()
        find._worker.wait()
        find._worker = None


def key_of(solver, params) -> str:
    return f"{solver} {tuning_db.params_key(tuning_db.stored_params(solver, params))}"


def db_rows(path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT problem, arch, solver, params, seconds FROM records").fetchall()
    finally:
        conn.close()


def serial_run(graph, budget, path) -> dict:
    log(f"serial: openprim tune --budget {budget}")
    stop_worker()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        summary = tuning_commands.tune(graph, TARGET, budget, str(path))
    wall = time.monotonic() - t0
    stop_worker()
    layers = {s["problem"]: dict(choice=key_of(s["best"].solver, s["best"].params), best_us=s["best"].seconds * 1e6,
                                 heuristic_us=s["reference"].seconds * 1e6, configs=s["configs"]) for s in summary}
    n = sum(s["configs"] for s in summary)
    log(f"  {wall:.1f} s, {n} candidates")
    return dict(wall_s=wall, candidates=n, wall_per_candidate_s=wall / n, records=len(db_rows(path)), layers=layers)


def fleet_run(graph, budget, path, workers, fault=None) -> dict:
    log(f"ray {workers} worker(s){' with faults ' + fault if fault else ''}")
    if fault:
        os.environ[fleet.FAULT_ENV] = fault
    try:
        report = fleet.tune_fleet([graph], TARGET, workers=workers, db=str(path), budget=budget, progress=True)
    finally:
        os.environ.pop(fleet.FAULT_ENV, None)
    layers = {r["problem"]: dict(choice=key_of(r["best"].solver, r["best"].params), best_us=r["best"].seconds * 1e6,
                                 heuristic_us=r["reference"].seconds * 1e6 if r["reference"] else None,
                                 configs=r["measured"], seconds_of_work=r["seconds"])
              for r in report.layers if r["best"] is not None}
    rows = db_rows(path)
    keys = {(p, s, params) for p, _, s, params, _ in rows}
    succeeded = {(r["problem"], s.solver, tuning_db.params_key(tuning_db.stored_params(s.solver, s.params)))
                 for r in report.layers for s in r["configs"] if s.seconds is not None}
    conn = sqlite3.connect(path)
    duplicated = conn.execute("SELECT COUNT(*) FROM (SELECT 1 FROM records GROUP BY problem, arch, solver, params "
                              "HAVING COUNT(*) > 1)").fetchone()[0]
    conn.close()
    no_best = [r["problem"] for r in report.layers
               if not tuning_db.stored(parse_descriptor(r["problem"]), ARCH, TARGET, path)]
    out = dict(wall_s=report.wall_s, candidates=report.measured, wall_per_candidate_s=report.wall_s / report.measured,
               tasks=report.tasks, records=len(rows), retried=report.retried, lost_tasks=report.lost,
               records_lost=len(succeeded - keys), records_duplicated=duplicated, layers_without_best=no_best,
               failed=report.failed, workers={k: vars(v) for k, v in report.workers.items()}, layers=layers)
    log(f"  {report.wall_s:.1f} s, {report.measured} candidates, retried {report.retried}, "
        f"records lost {out['records_lost']}, duplicated {duplicated}")
    return out


def retime(op, configs, rounds=5) -> list[float]:
    """Median seconds of each configuration, timed interleaved in find's worker (executables kept)."""
    texts = [find.candidate_module(op, s, p) for s, p in configs]
    keep = {find.digest(t) for t in texts}
    times = [[] for _ in configs]
    for _ in range(rounds):
        for i, t in enumerate(texts):
            times[i].append(find.measure(t, TARGET, keep)[1])
    return [float(np.median(t)) for t in times]


def parse_choice(text):
    solver, _, params = text.partition(" ")
    return solver, tuning_db.solver_params(solver, json.loads(params))


def agreement(graph, serial, runs) -> dict:
    log("agreement: re-timing the layers whose choices differ")
    module, todo = find.layers(graph, TARGET)
    ops = {key: op for op, key, _ in todo}
    out = {}
    with module.context:
        for name, run in runs.items():
            same, ratios, rows = 0, [], []
            for key, s in serial["layers"].items():
                f = run["layers"].get(key)
                if f is None:
                    continue
                if f["choice"] == s["choice"]:
                    same += 1
                    continue
                t_serial, t_fleet = retime(ops[key], [parse_choice(s["choice"]), parse_choice(f["choice"])])
                ratios.append(t_fleet / t_serial)
                rows.append(dict(layer=key, serial=s["choice"], fleet=f["choice"], serial_us=t_serial * 1e6,
                                 fleet_us=t_fleet * 1e6, ratio=t_fleet / t_serial))
            out[name] = dict(same=same, layers=len(serial["layers"]), differing=rows,
                             ratio_median=float(np.median(ratios)) if ratios else 1.0,
                             ratio_max=max(ratios) if ratios else 1.0,
                             within_10pct=sum(r <= 1.10 for r in ratios))
            log(f"  {name}: {same}/{len(serial['layers'])} same; differing re-timed: fleet/serial median "
                f"{out[name]['ratio_median']:.3f}, max {out[name]['ratio_max']:.3f}")
    stop_worker()
    return out


def overhead(graph, layer_key, k) -> dict:
    """Seconds per candidate: serial path vs the fleet's tasks one at a time vs all at once (module docstring)."""
    import ray
    log(f"overhead: {k} configurations of {layer_key}")
    module, todo = find.layers(graph, TARGET)
    op, layer_key = next(((op, key) for op, key, _ in todo if key == layer_key),
                         next((op, key) for op, key, _ in todo if "-3x3-s1x1" in key))
    out = {}
    with module.context:
        configs = find.space(op, TARGET)
        firsts = [c for i, c in enumerate(configs) if i == 0 or configs[i - 1][0] != c[0]]
        picked = (firsts + [c for c in configs if c not in firsts])[:k + 1]   # the first one warms each path up
        texts = [find.candidate_module(op, s, p) for s, p in picked]
        # (a) serial
        stop_worker()
        find.measure(texts[0], TARGET)
        per = []
        for t in texts[1:]:
            t0 = time.monotonic()
            find.measure(t, TARGET)
            per.append(time.monotonic() - t0)
        stop_worker()
        out["serial_per_candidate_s"] = float(np.mean(per))
        # (b), (c) the fleet's tasks
        for workers, together in ((1, False), (2, True)):
            ray.init(**fleet.local_cluster(TARGET, workers))
            try:
                name = f"ledger-{time.time_ns()}"
                ledger = ray.remote(num_cpus=0)(fleet.Ledger).options(name=name).remote()
                measurer = ray.remote(fleet.Measurer).options(num_cpus=0, resources={fleet.resource(TARGET): 1}).remote(
                    str(TARGET), name, None, os.environ.get("OMP_NUM_THREADS"))
                compile_ = ray.remote(fleet.compile_task).options(num_cpus=1)
                c0 = compile_.remote(texts[0], str(TARGET), 0, ledger, None)
                ref_out, info = measurer.reference.options(num_returns=2).remote(0, find.digest(texts[0]), c0, set())
                ray.get(info)
                work, per = [], []
                t_all = time.monotonic()
                infos = []
                for n, t in enumerate(texts[1:], 1):
                    t0 = time.monotonic()
                    c = compile_.remote(t, str(TARGET), n, ledger, None)
                    infos.append(measurer.measure.remote(n, find.digest(t), c, ref_out, "f32", set()))
                    if not together:
                        i = ray.get(infos[-1])
                        per.append(time.monotonic() - t0)
                        work.append(i["compile_s"] + i["measure_s"])
                if together:
                    got = ray.get(infos)
                    work = [i["compile_s"] + i["measure_s"] for i in got]
                    out["ray_2_all_at_once_per_candidate_s"] = (time.monotonic() - t_all) / len(infos)
                    out["ray_2_work_per_candidate_s"] = float(np.mean(work))
                else:
                    out["ray_1_one_at_a_time_per_candidate_s"] = float(np.mean(per))
                    out["ray_1_work_per_candidate_s"] = float(np.mean(work))
            finally:
                ray.shutdown()
    out["ray_overhead_per_candidate_s"] = out["ray_1_one_at_a_time_per_candidate_s"] - out["serial_per_candidate_s"]
    out["ray_overhead_per_candidate_pct"] = 100 * out["ray_overhead_per_candidate_s"] / out["serial_per_candidate_s"]
    out.update(layer=layer_key, candidates=k)
    log(f"  serial {out['serial_per_candidate_s']:.3f} s/candidate, ray one at a time "
        f"{out['ray_1_one_at_a_time_per_candidate_s']:.3f} s (work {out['ray_1_work_per_candidate_s']:.3f}), "
        f"ray 2 CPUs all at once {out['ray_2_all_at_once_per_candidate_s']:.3f} s")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of search per layer (tune's default: 10)")
    ap.add_argument("--overhead-layer",
                    default="conv2d-1x128x28x28-k128-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-KRSC-f32-bias+relu")
    ap.add_argument("--overhead-candidates", type=int, default=12)
    ap.add_argument("--out", default=str(HERE / "fleet_tuning_cpu.json"))
    args = ap.parse_args()
    import resnet
    t_start, load_start = time.monotonic(), os.getloadavg()
    graph = resnet.build(depth=args.depth, batch=1, size=224)
    with tempfile.TemporaryDirectory(prefix="openprim-fleet-bench-") as tmp:
        os.environ["OPENPRIM_USER_DB_PATH"] = os.path.join(tmp, "user.sqlite")   # nothing else is touched
        serial = serial_run(graph, args.budget, Path(tmp) / "serial.sqlite")
        runs = {"ray_1": fleet_run(graph, args.budget, Path(tmp) / "ray1.sqlite", 1),
                "ray_2": fleet_run(graph, args.budget, Path(tmp) / "ray2.sqlite", 2),
                "ray_2_fault": fleet_run(graph, args.budget, Path(tmp) / "fault.sqlite", 2, FAULT)}
        agree = agreement(graph, serial, {k: runs[k] for k in ("ray_1", "ray_2")})
        over = overhead(graph, args.overhead_layer, args.overhead_candidates)
    result = dict(
        command=" ".join(["python", "bench/fleet_tuning_cpu.py", *sys.argv[1:]]),
        date=time.strftime("%Y-%m-%d"), host_cpu=ARCH, cores=cpu_cores(), python=platform.python_version(),
        ray=__import__("ray").__version__, model=f"resnet{args.depth} batch 1 224x224 f32 (distinct layers as "
                                                 f"openprim tune sees them)",
        budget_per_layer_s=args.budget, fault_injection=FAULT, total_script_s=time.monotonic() - t_start,
        load_average_start_end=[load_start, os.getloadavg()],
        serial=serial, **runs, agreement=agree, overhead=over,
        notes=["Each run tunes into an empty database of its own, so no run resumes another.",
               "A fleet layer's budget runs on its own clock (the seconds its candidates took to compile and "
               "measure), so a layer gets about as much search as serially; wall time includes starting and "
               "stopping the local Ray cluster (~4-5 s) and the measurer and its worker (~3 s).",
               "2 cores: a CPU timing holds the machine's measurement lock exclusively, compiles hold it shared, "
               "so timings never overlap compiles; only compiles overlap each other (and the orchestration). "
               "Other jobs shared the machine, so single timings are noisy (some kernels time 2x apart run to "
               "run); choices that differ are re-timed interleaved to judge them."])
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    log(f"wrote {args.out} ({result['total_script_s'] / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

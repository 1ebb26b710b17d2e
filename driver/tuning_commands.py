"""Tuning commands: `openprim tune`, `explain`, `conv` (MIOpenDriver's flags) and `db`. They compile (Find's
candidates, bundles, `conv`), so they are the driver's, above the tuning package they drive.

    openprim tune MODEL --target cpu --budget 10          # find per layer, results into the user database
    openprim tune MODEL --target nvvm:sm_90 --measure-on b.tune   # no such GPU here: compile the candidates
    python scripts/measure_tuning.py b.tune results.json  # on the GPU machine (runtime only)
    openprim db import results.json                       # back here: the measurements become records
    openprim db show [DESCRIPTOR]                         # the records, and why any would be ignored
    openprim explain MODEL --target cpu                   # every solver per layer, and where the choice came from
    openprim conv -n 1 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -t 1

The layers are the conv2d/matmul ops as prim-select sees them (after prim-fuse and the layout stage),
so a layer's descriptor is the key a compile looks up; identical layers are tuned once. Parameters are
printed, and read by `db add`, as the database stores them: a table index by its entry's name.
"""
from __future__ import annotations

from collections import Counter

import hashlib
import io
import json
import math
import os
import random
import sys
import tempfile
import time
import zipfile

import numpy as np
from tqdm import tqdm

from openprim import compiler, passes
from openprim.base.errors import OpenPrimError
from openprim.base.files import read_json
from openprim.passes import prim_select
from openprim.dialect import contract, graph_functions
from openprim.pyfrontend import Graph, to_module
from openprim.solvers import SOLVERS, applicable
from openprim.solvers.problem import DIRECTIONS, parse_descriptor, problem_of
from openprim.tuning import db as tuning_db
from openprim.tuning import dbfile, find, fleet
from openprim.tuning.tuner import Tuner

BUNDLE_FORMAT = "openprim-tuning-bundle"
RESULTS_FORMAT = "openprim-tuning-results"


def layers(graph, target):
    """(module, [(op, descriptor, count)]) of the distinct conv2d/matmul/attention problems of the graph, as
    prim-select sees them for `target` (a Target or its text): find.layers."""
    return find.layers(graph, compiler.target_of(target))


def _params(solver: str, params: dict) -> str:
    """A solver's parameters as the database stores them (and `db add` takes them)."""
    return tuning_db.params_key(tuning_db.stored_params(solver, params))


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f} us"


class Progress:
    """A layer's progress on stderr: a tqdm bar on a terminal, else one plain line per item (a log gets no
    carriage returns or escape codes)."""

    def __init__(self, what: str):
        self.what = what
        self.bar = tqdm(desc=what, unit="config", file=sys.stderr, leave=False, dynamic_ncols=True) \
            if sys.stderr.isatty() else None

    def update(self, done: int, total: int | None, item: str) -> None:
        """`done` of `total` items (None: unknown) done, the last one `item`."""
        if self.bar is None:
            print(f"{self.what}: {done}{f'/{total}' if total else ''} {item}", file=sys.stderr, flush=True)
            return
        self.bar.total = total
        self.bar.update(done - self.bar.n)
        self.bar.set_postfix_str(item)   # and shows it: an item takes long enough

    def note(self, line: str) -> None:
        """A line of its own (above the bar)."""
        (self.bar.write if self.bar is not None else print)(line, file=sys.stderr)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def tune(graph, target: str, budget: float, db: str | None = None) -> list[dict]:
    """Find per distinct layer (budget seconds each), store the measurements (in the user database, or `db`),
    print one line per layer. An OpenPrimError, before anything is measured, when the database cannot store
    them."""
    target = compiler.target_of(target)
    why_not = find.unavailable(target)
    if why_not:
        raise OpenPrimError(why_not)
    why_not = tuning_db.unwritable(db)
    if why_not:
        raise OpenPrimError(f"{why_not}: nothing would be stored; set OPENPRIM_USER_DB_PATH (or --db) to a "
                            f"writable file")
    module, todo = layers(graph, target)
    summary = []
    with module.context:
        for i, (op, key, count) in enumerate(todo):
            t0 = time.monotonic()
            with Progress(f"[{i + 1}/{len(todo)}] {key}") as progress:
                results = find.search(op, target, budget, lambda done, total, r: progress.update(
                    done, total, f"{r.solver} {_params(r.solver, r.params)} "
                                 f"{_us(r.seconds) if r.seconds is not None else r.error}"))
            if not find.store(key, target, results, db):
                raise OpenPrimError(f"tuning database {db or tuning_db.user_path()}: the measurements of {key} could "
                                    f"not be stored (see the warning)")
            best, ref = results[0], _reference(op, target, results)
            summary.append(dict(problem=key, count=count, best=best, reference=ref, configs=len(results),
                                seconds=time.monotonic() - t0))
            print(f"{key} x{count}: best {_us(best.seconds)} {best.solver} {_params(best.solver, best.params)}; "
                  f"heuristic {ref.solver} {_us(ref.seconds)}; speedup {ref.seconds / best.seconds:.2f}x "
                  f"({len(results)} configurations, {time.monotonic() - t0:.1f} s)")
    return summary


def _reference(op, target, results):
    problem = problem_of(op)
    h = prim_select.heuristic(problem, op.name[5:], target)
    return next(r for r in results if r.solver == h.name and r.params == h.default_params(problem, target))


def _store_without_weights(bundle_zip: zipfile.ZipFile, artifact: str, name: str, stored: set) -> str:
    """Copy an artifact into the bundle without its weights.bin, which goes in once per content; its name."""
    with zipfile.ZipFile(artifact) as a:
        weights = a.read("weights.bin")
        key = f"weights/{hashlib.sha256(weights).hexdigest()[:32]}.bin"
        if key not in stored:
            bundle_zip.writestr(key, weights)
            stored.add(key)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as out:
            for member in a.namelist():
                if member != "weights.bin":
                    out.writestr(member, a.read(member))
    bundle_zip.writestr(name, buf.getvalue())
    os.unlink(artifact)
    return key


def bundle(graph, target: str, path: str, budget: float, seed: int = 0) -> int:
    """Compile every candidate of every layer (all of a small space; else the solvers' defaults and random
    samples, within `budget` seconds of compiling per layer) into one zip: NNNN.oprim + index.json, the
    candidates' weights stored once per distinct content (weights/SHA.bin; scripts/measure_tuning.py puts
    them back): candidates of a layer mostly share one filter layout, and a bundle must stay small enough
    to send to the GPU machine."""
    target = compiler.target_of(target)
    module, todo = layers(graph, target)
    index, rng, stored_weights = [], random.Random(seed), set()
    with module.context, zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED) as z, \
            tempfile.TemporaryDirectory() as tmp:
        for i, (op, key, count) in enumerate(todo):
            configs = find.space(op, target)
            h = prim_select.heuristic(problem_of(op), op.name[5:], target)
            first = [c for j, c in enumerate(configs) if j == 0 or configs[j - 1][0] != c[0]]
            rest = [c for c in configs if c not in first]
            rng.shuffle(rest)
            deadline = time.monotonic() + budget
            entries = []
            with Progress(f"[{i + 1}/{len(todo)}] {key}") as progress:
                for n, (solver, params) in enumerate(first + rest):
                    if n >= len(first) and len(configs) > find.EXHAUSTIVE and time.monotonic() > deadline:
                        break
                    name = f"{len(index) + len(entries):04d}.oprim"
                    try:
                        lowered = compiler.lower(find.candidate_module(op, solver, params), target)
                        compiler.write_artifact(lowered, os.path.join(tmp, name), target)
                    except Exception as e:  # noqa: BLE001 - a configuration that does not compile is left out
                        progress.note(f"{key}: {solver} {_params(solver, params)} does not compile: "
                                      f"{str(e).splitlines()[0]}")
                        continue
                    progress.update(n + 1, len(configs), f"{solver} {_params(solver, params)} compiled")
                    weights = _store_without_weights(z, os.path.join(tmp, name), name, stored_weights)
                    entries.append(dict(file=name, weights=weights, problem=key, arch=tuning_db.arch_of(target),
                                        solver=solver, params=tuning_db.stored_params(solver, params),
                                        tolerance=find.TOLERANCE.get(problem_of(op).dtype, 1e-4),
                                        heuristic=solver == h.name and params == h.default_params(problem_of(op), target)))
            index += entries
        z.writestr("index.json", json.dumps(dict(format=BUNDLE_FORMAT, compiler=tuning_db.compiler_version(),
                                                 target=str(target), candidates=index), indent=1))
    os.replace(path + ".tmp", path)
    return len(index)


def tune_on_ray(models: list[str], defines: dict, target, address: str | None, workers: int | None,
                db: str | None, budget: float) -> None:
    """`openprim tune MODEL... --ray [ADDRESS]`: tuning/fleet.py's tune_fleet, then the summary table per
    layer (stdout) and the totals; an OpenPrimError when a layer could not be tuned."""
    report = fleet.tune_fleet(models, target, address=address or None, workers=workers, db=db, budget=budget,
                              defines=defines)
    print(report.table())
    print(f"tuned {report.totals()}")
    failed = [layer for layer in report.layers if layer["error"]]
    if failed:
        raise OpenPrimError(f"{len(failed)} of {len(report.layers)} layers could not be tuned; first: "
                            f"{failed[0]['problem']}: {failed[0]['error']}")


def db_import(path: str, db: str | None = None, system: bool = False) -> tuple[int, str]:
    """`openprim db import FILE`: a database export (tuning/dbfile.py) or measured results of a bundle
    (scripts/measure_tuning.py), into the user database, `db`, or (system) the package's system database;
    (records imported, the database)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise OpenPrimError(f"{path}: cannot read tuning results or a tuning database export ({e})") from None
    if isinstance(data, dict) and data.get("format") == dbfile.FORMAT:
        n, where = dbfile.import_file(path, db, system, data)
        return n, str(where)
    if system:
        raise OpenPrimError(f"{path}: --system imports a database export (openprim db export), not tuning results")
    return import_results(path, data, db), str(db or tuning_db.user_path())


def import_results(path: str, data=None, db: str | None = None) -> int:
    """Write the measurements of a results file (scripts/measure_tuning.py) into the user database (or `db`)."""
    if data is None:
        data = read_json(path, "tuning results")
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise OpenPrimError(f"{path}: not a tuning results file (format {RESULTS_FORMAT}) nor a tuning database "
                            f"export (openprim db export)")
    timed = [r for r in data.get("results", []) if r.get("seconds") is not None]
    params = []
    for r in timed:  # every result read before any is stored: a file is imported whole or not at all
        try:
            params.append(tuning_db.solver_params(r["solver"], r["params"]))
        except OpenPrimError as e:
            raise OpenPrimError(f"{path}: {r['problem']}: {e} (measure a bundle of this compiler)") from None
    why = tuning_db.unwritable(db)
    if why:
        raise OpenPrimError(f"{why}: nothing imported")
    stored = sum(tuning_db.record(r["problem"], r["arch"], r["solver"], p, r["seconds"], data["compiler"], db)
                 for r, p in zip(timed, params))
    if stored < len(timed):
        raise OpenPrimError(f"{path}: only {stored} of {len(timed)} records stored in {db or tuning_db.user_path()} "
                            f"(see the warning)")
    return stored


def decomposed_attention(graph, target) -> list[tuple[str, int, list]]:
    """[(descriptor, count, [(solver, why not)])] of the attention ops of the graph that no solver takes on
    `target`: prim-decompose splits them into two batched GEMMs (layers of their own) around a softmax."""
    target = compiler.target_of(target)
    module = to_module(graph)
    found = {}
    with module.context:
        for fn in graph_functions(module.operation):
            for op in [o.operation for o in fn.regions[0].blocks[0].operations]:
                if op.name == "prim.attention":
                    listed = applicable(problem_of(op), "attention", target)
                    if all(why for _, why in listed):
                        key = problem_of(op).descriptor()
                        found.setdefault(key, [key, 0, [(s.name, why) for s, why in listed]])[1] += 1
    return [tuple(v) for v in found.values()]


def explain(graph, target: str) -> None:
    """Per layer: its descriptor, every solver (applicable or why not, predicted and measured time), the
    choice a compile makes now and where it comes from. Attention that no solver takes is listed first,
    with why, as decomposed; its GEMMs follow as matmul layers."""
    target = compiler.target_of(target)
    for key, count, listed in decomposed_attention(graph, target):
        print(f"{key} x{count}")
        width = max([len(name) for name, _ in listed], default=0)
        for name, why in listed:
            print(f"  {name:{width}} not applicable: {why}")
        print("  choice: decomposed by prim-decompose (no attention solver applies on "
              f"{target}): matmul q k^T, scale and mask, softmax, matmul p v (the matmul layers below)")
    module, todo = layers(graph, target)
    mode = prim_select.find_mode()
    arch = tuning_db.arch_of(target)
    with module.context:
        for op, key, count in todo:
            problem = problem_of(op)
            measured = {}
            for rec in reversed(tuning_db.records(problem, arch, target)):  # the fastest per solver wins
                measured[rec.solver] = rec
            print(f"{key} x{count}")
            listed = [(s, why) for s, why in applicable(problem, op.name[5:], target)   # this direction's
                      if getattr(problem, "direction", "fwd") in s.directions]
            width = max(len(s.name) for s, _ in listed)
            for s, why in listed:
                rec = measured.get(s.name)
                state = f"not applicable: {why}" if why else \
                    f"predicted {_us(s.cost(problem, target))}, measured " + \
                    (f"{_us(rec.seconds)} with {_params(rec.solver, rec.params)} ({rec.source} db)" if rec else "-")
                print(f"  {s.name:{width}} {state}")
            print(f"  choice: {_choice(op, target, mode)}")


def _choice(op, target, mode: str) -> str:
    """The solver a compile picks for the layer `op` now, with its parameters and where it comes from."""
    if mode == "find":
        return "made by find when compiled (mode find)"
    c = prim_select.decide(op, target, prim_select.forced_solver(), mode="immediate", tuner=Tuner())
    return (f"{c.solver.name} {_params(c.solver.name, c.params)} from {c.source}"
            + (f" ({_us(c.seconds)})" if c.seconds is not None else "") + f" (mode {mode})")


def explain_buckets(graphs: dict, target: str, name: str) -> None:
    """`openprim explain --dynamic`: per bucket of the dimension `name` ({size: Graph}), the choice for each
    layer, and how many layers each solver takes there (`openprim explain` at one size lists every solver)."""
    target = compiler.target_of(target)
    mode = prim_select.find_mode()
    print(f"dynamic {name}: buckets {sorted(graphs)} on {target}")
    for b, graph in sorted(graphs.items()):
        module, todo = layers(graph, target)
        tally = Counter()
        print(f"{name}={b}: {len(todo)} distinct layers")
        with module.context:
            for op, key, count in todo:
                choice = _choice(op, target, mode)
                tally[choice.split()[0]] += count
                print(f"  {key} x{count}: {choice}")
        print(f"  solvers at {name}={b}: " + ", ".join(f"{s} x{n}" for s, n in tally.most_common()))


# MIOpenDriver's -F: one bit per direction (0 = all three)
DIRECTION_FLAGS = {1: "fwd", 2: "bwd_data", 4: "bwd_weights"}
CONV_OPS = ("prim.conv2d", "prim.conv2d_backward_data", "prim.conv2d_backward_weights")


def conv_graph(a, rng, direction: str = "fwd") -> tuple[Graph, list, np.ndarray]:
    """The convolution of MIOpenDriver's flags in one direction, with random data: (graph, its inputs, the
    float64 reference of its output). The filter is a parameter (a constant) forward, an input backward (as in
    training: the weights change every step)."""
    layout = a.layout
    g = Graph(layout=layout, dtype=a.dtype)
    if a.c % a.g or a.k % a.g:
        raise OpenPrimError(f"-g {a.g} must divide -c {a.c} and -k {a.k}")
    xs = (a.n, a.c, a.H, a.W) if layout == "NCHW" else (a.n, a.H, a.W, a.c)
    ws = (a.k, a.c // a.g, a.y, a.x) if layout == "NCHW" else (a.k, a.y, a.x, a.c // a.g)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws) / np.sqrt(a.c // a.g * a.y * a.x)
    conv = dict(stride=(a.u, a.v), padding=(a.p, a.q), dilation=(a.l, a.j), groups=a.g)
    if direction == "fwd":
        g.output(g.conv2d(g.input("x", xs), g.param("w", w), **conv))
        return g, [x], _conv_reference(x, w, a)
    oh, ow = _out_size(a.H, a.y, a.p, a.u, a.l), _out_size(a.W, a.x, a.q, a.v, a.j)
    dy = rng.standard_normal((a.n, a.k, oh, ow) if layout == "NCHW" else (a.n, oh, ow, a.k))
    dx, dw = _conv_backward_reference(x, w, dy, a)
    if direction == "bwd_data":
        g.output(g.conv2d_backward_data(g.input("dy", dy.shape), g.input("w", ws), (a.H, a.W), **conv))
        return g, [dy, w], dx
    g.output(g.conv2d_backward_weights(g.input("x", xs), g.input("dy", dy.shape), (a.y, a.x), **conv))
    return g, [x, dy], dw


def run_conv(a) -> None:
    """Compile each direction of -F (MIOpenDriver's: 1 forward, 2 backward data, 4 backward weights, a sum of
    them, 0 all) with the selected (or forced) solver, check it against float64 numpy, print the solver and,
    with -t 1, the time and GFLOP/s. On a GPU target without its GPU here, compile only."""
    mask = 7 if a.F == 0 else a.F
    if mask > 7:
        raise OpenPrimError(f"-F {a.F}: 0 (all directions), 1 forward, 2 backward data, 4 backward weights, "
                            f"or a sum of them")
    no_device = find.unavailable(compiler.target_of(a.target))
    wrong = [_run_direction(a, d, no_device) for bit, d in DIRECTION_FLAGS.items() if mask & bit]
    if any(wrong):
        raise OpenPrimError("; ".join(w for w in wrong if w))


def _run_direction(a, direction: str, no_device: str | None) -> str | None:
    """One direction of run_conv: None, or what was wrong."""
    g, inputs, want = conv_graph(a, np.random.default_rng(0), direction)
    module = to_module(g)
    solver = f" solver={a.solver}" if a.solver else ""
    passes.run(module, f"prim-fuse,prim-select{{target={a.target}{solver}}}", tuner=Tuner())
    ops = [o.operation for o in graph_functions(module.operation)[0].regions[0].blocks[0].operations
           if o.operation.name in CONV_OPS + ("prim.matmul",) and contract.solver(o.operation)]
    op = ops[0]
    problem, solver, source = contract.problem(op), contract.solver(op), contract.choice(op)
    params = _params(solver, contract.params(op))
    how = ""
    if op.name == "prim.matmul":     # passes/backward_weights_gemms.py
        how = f" (the first of {len(ops)} GEMMs, one per filter tap)"
    elif op.name == "prim.conv2d" and direction != "fwd":
        how = " (as the forward convolution of dy with the reversed filter)" if len(ops) == 1 else \
            f" (the first of {len(ops)} forward convolutions, one per phase of the input gradient)"
    line = f"{DIRECTIONS[direction]}: {problem}{how}: solver {solver} {params} ({source})"
    if no_device:
        with tempfile.TemporaryDirectory() as tmp:     # the whole compile, as for the GPU machine
            compiler.save(module, os.path.join(tmp, "conv.oprim"), a.target)
        print(f"{line}; compiled for {a.target} (no such GPU here to run it)")
        return None
    exe = compiler.compile(module, a.target)   # prim-select keeps the choice written on the op
    feeds = [v.astype(np.float32) for v in inputs]
    y = np.asarray(exe(*feeds), np.float64)
    err = float(np.max(np.abs(y - want))) / max(1.0, float(np.max(np.abs(want))))
    ok = err <= find.TOLERANCE[a.dtype]
    print(f"{line}; max relative error vs float64 {err:.1e} ({'ok' if ok else 'WRONG'})")
    if a.t:
        exe(*feeds)
        seconds = sum(exe.time_steps(a.i)) if hasattr(exe, "time_steps") and not hasattr(exe, "time_ms") \
            else exe.time_ms(a.i) / 1e3
        oh, ow = _out_size(a.H, a.y, a.p, a.u, a.l), _out_size(a.W, a.x, a.q, a.v, a.j)
        flops = 2.0 * a.n * oh * ow * a.k * (a.c // a.g) * a.y * a.x
        print(f"  time {seconds * 1e3:.4f} ms, {flops / seconds / 1e9:.1f} GFLOP/s")
    return None if ok else f"{problem}: the output does not match float64 numpy (error {err:.1e})"


def _out_size(size, k, pad, stride, dilation):
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _nchw(x, w, a):
    return (x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2)) if a.layout == "NHWC" else (x, w)


def _windows(a, h, wd, r, s):
    """(oh, ow, [(i, j, the input rows and columns tap (i, j) reads)]) of the flags' convolution."""
    oh, ow = _out_size(h, r, a.p, a.u, a.l), _out_size(wd, s, a.q, a.v, a.j)
    return oh, ow, [(i, j, np.s_[i * a.l:i * a.l + a.u * (oh - 1) + 1:a.u], np.s_[j * a.j:j * a.j + a.v * (ow - 1) + 1:a.v])
                    for i in range(r) for j in range(s)]


def _conv_reference(x, w, a):
    """Grouped, strided, dilated, zero-padded cross-correlation in float64 (the -layout of x and w)."""
    x, w = _nchw(x, w, a)
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    xg = np.pad(x, ((0, 0), (0, 0), (a.p, a.p), (a.q, a.q))).reshape(n, a.g, cg, h + 2 * a.p, wd + 2 * a.q)
    wg = w.reshape(a.g, k // a.g, cg, r, s)
    oh, ow, taps = _windows(a, h, wd, r, s)
    out = np.zeros((n, a.g, k // a.g, oh, ow))
    for i, j, rows, cols in taps:
        out += np.einsum("ngchw,gkc->ngkhw", xg[:, :, :, rows, cols], wg[:, :, :, i, j])
    out = out.reshape(n, k, oh, ow)
    return out.transpose(0, 2, 3, 1) if a.layout == "NHWC" else out


def _conv_backward_reference(x, w, dy, a):
    """(dx, dw) of _conv_reference's convolution for the output gradient dy, in float64 (the -layout's)."""
    x, w = _nchw(x, w, a)
    dy = dy.transpose(0, 3, 1, 2) if a.layout == "NHWC" else dy
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    xg = np.pad(x, ((0, 0), (0, 0), (a.p, a.p), (a.q, a.q))).reshape(n, a.g, cg, h + 2 * a.p, wd + 2 * a.q)
    wg, dyg = w.reshape(a.g, k // a.g, cg, r, s), dy.reshape(n, a.g, k // a.g, *dy.shape[2:])
    dxg, dw = np.zeros_like(xg), np.zeros_like(wg)
    for i, j, rows, cols in _windows(a, h, wd, r, s)[2]:
        dxg[:, :, :, rows, cols] += np.einsum("ngkhw,gkc->ngchw", dyg, wg[:, :, :, i, j])
        dw[:, :, :, i, j] = np.einsum("ngchw,ngkhw->gkc", xg[:, :, :, rows, cols], dyg)
    dx = dxg.reshape(n, c, h + 2 * a.p, wd + 2 * a.q)[:, :, a.p:a.p + h, a.q:a.q + wd]
    dw = dw.reshape(k, cg, r, s)
    if a.layout == "NHWC":
        return dx.transpose(0, 2, 3, 1), dw.transpose(0, 2, 3, 1)
    return dx, dw


def db_add(problem: str, arch: str, solver: str, params: str, seconds: str) -> None:
    """Store one measurement given by hand, validated as a compile would use it: the descriptor is a problem,
    the solver exists and applies to it, the parameters (as `db show` prints them) are the solver's, the time
    positive and finite."""
    try:
        values, secs = json.loads(params), float(seconds)
    except ValueError as e:
        raise OpenPrimError(f"db add: PARAMS must be a JSON object and SECONDS a number ({e})") from None
    if not (math.isfinite(secs) and secs > 0):
        raise OpenPrimError(f"db add: SECONDS must be a positive, finite number of seconds, got {seconds}")
    if solver not in SOLVERS:
        raise OpenPrimError(f"db add: unknown solver '{solver}'; solvers: {', '.join(SOLVERS)}")
    if not isinstance(values, dict):
        raise OpenPrimError("db add: PARAMS must be a JSON object, e.g. '{\"wt\": 8}'")
    target = compiler.target_of(arch)
    arch = tuning_db.arch_of(target)  # cpu: this machine's CPU
    try:
        prob = parse_descriptor(problem)
    except OpenPrimError as e:
        raise OpenPrimError(f"db add: {e}") from None
    rec = tuning_db.Record(problem, arch, solver, values, secs, tuning_db.compiler_version(), 0.0)
    why = tuning_db.invalid(rec, prob, target)
    if why:
        raise OpenPrimError(f"db add: the record would never be used: {why}")
    why = tuning_db.unwritable()
    if why or not tuning_db.record(problem, arch, solver, tuning_db.solver_params(solver, values), secs):
        raise OpenPrimError(f"db add: {why or f'cannot write {tuning_db.user_path()}'}")


def db_show(problem: str | None = None) -> None:
    """Print every record (of one problem descriptor) as stored, with its database and, for one that a
    compile would ignore, why; then how many there are, and where."""
    if problem is not None:
        try:
            parse_descriptor(problem)
        except OpenPrimError as e:
            raise OpenPrimError(f"db show: {e}") from None
    listed = tuning_db.listing(problem)
    for rec in listed:
        why = _ignored(rec)
        print(f"{rec.problem} {rec.arch} {rec.solver} {tuning_db.params_key(rec.params)} {_us(rec.seconds)} "
              f"({rec.source} db{f'; ignored: {why}' if why else ''})")
    print(f"{len(listed)} record{'' if len(listed) == 1 else 's'} in {tuning_db.user_path()} (user) and "
          f"{tuning_db.SYSTEM_DB} (system{'' if tuning_db.SYSTEM_DB.exists() else ', absent'})")


def _ignored(rec: tuning_db.Record) -> str | None:
    """Why a compile would not use a stored record (None: it would)."""
    try:
        return tuning_db.invalid(rec, parse_descriptor(rec.problem))
    except OpenPrimError as e:
        return str(e)

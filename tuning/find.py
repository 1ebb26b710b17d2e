"""Find: measure candidate (solver, parameters) configurations of one conv2d/matmul and rank them.

A candidate is the op alone in a fresh module (its non-constant operands become function arguments,
its constants are kept) with the solver and parameters already written on it, compiled by the whole
pipeline with the native backend, run on seeded random inputs and timed (the sum of the per-step
medians, so a solver that needs a transpose kernel pays for it). Candidates are compiled and run in a
worker process: a configuration that trips an assertion in LLVM or makes its kernel crash kills the
worker (restarted for the next one), not the compiler. Its output must match the heuristic
choice's within the dtype's tolerance: a wrong solver never wins, whatever its time.

Search (`search`): the heuristic's choice, the solvers' defaults (cheapest predicted first), then every
other configuration when the space (applicable solvers x the cartesian product of their tunables) has at
most EXHAUSTIVE, otherwise greedy coordinate descent from the best so far (one parameter changed at a
time), with random samples when the descent is stuck. The budget bounds it all: a measurement starts
only when it is expected to end in time, compile included (past the budget, still the two most plausible
solvers). The three fastest are re-timed, from executables the worker kept, and ranked by their median.

The decisions are the `Search` class (a generator of requests: measure this, re-time that), apart from how a
request is measured: here a `Bench` measures them one after the other in this process's worker; the fleet
(fleet.py) measures the requests of every layer of many models at once on a Ray cluster, from the same
Search. `layers` lists the distinct problems of a Graph as prim-select sees them (what both tune).
"""
from __future__ import annotations

import hashlib
import itertools
import pickle
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from mlir import ir
from mlir.dialects import func

from openprim import passes
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target
from openprim.dialect import graph_functions
from openprim.passes.prim_select import Choice, apply, heuristic, prepare
from openprim.pyfrontend import to_module
from openprim.passes.rewrite import producer
from openprim.runtime.gpu import open_device
from openprim.solvers import SOLVERS, applicable
from openprim.solvers.problem import problem_of

from . import db as tuning_db
from . import lock

EXHAUSTIVE = 24
TOLERANCE = {"f32": 1e-4, "f16": 2e-2, "bf16": 4e-2}   # max |error| / max(1, max |reference|)


@dataclass
class Result:
    solver: str
    params: dict
    seconds: float | None = None   # None: it failed (error says why)
    error: str | None = None


def unavailable(target: Target) -> str | None:
    """Why candidates cannot be timed here (None: they can): GPU targets need the GPU."""
    if not target.is_gpu:
        return None
    try:
        open_device(target)
    except OpenPrimError as e:
        return (f"cannot time {target} on this machine ({e}); compile the candidates with "
                f"`openprim tune MODEL --target {target} --measure-on BUNDLE` and time them on the GPU machine")
    return None


def space(op: ir.Operation, target: Target) -> list[tuple[str, dict]]:
    """Every (solver, params) of the applicable solvers; each solver's default first."""
    problem = problem_of(op)
    out = []
    for s, why in applicable(problem, op.name[5:], target):
        if why is None:
            t, default = s.tunables(problem), s.default_params(problem, target)
            keys = sorted(t)
            rest = [dict(zip(keys, v)) for v in itertools.product(*(t[k] for k in keys))]
            out += [(s.name, default)] + [(s.name, p) for p in rest if p != default]
    return out


def candidate_module(op: ir.Operation, solver: str, params: dict) -> str:
    """MLIR text of a module holding only `op`, with the solver and parameters chosen."""
    with op.context, ir.Location.unknown():
        module = ir.Module.create()
        args = [v for v in op.operands if producer(v, "prim.constant") is None]
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("layer", ([v.type for v in args], [op.result.type]))
        block = fn.add_entry_block()
        with ir.InsertionPoint(block):
            operands, it = [], iter(block.arguments)
            for v in op.operands:
                const = producer(v, "prim.constant")
                operands.append(next(it) if const is None else const.clone().result)
            new = ir.Operation.create(op.name, results=[op.result.type], operands=operands,
                                      attributes={k: op.attributes[k] for k in op.attributes})
            new = apply(new, Choice(SOLVERS[solver], params, "forced"), problem_of(op))
            func.ReturnOp([new.result])
        return str(module)


def mismatch(out, ref, dtype: str) -> str | None:
    err = float(np.max(np.abs(np.asarray(out, np.float64) - ref))) / max(1.0, float(np.max(np.abs(ref))))
    return None if err <= TOLERANCE.get(dtype, 1e-4) else f"wrong output (relative error {err:.2e})"


_worker = None
_startup = 0.0   # seconds the worker's last start took, left out of a measurement's expected time


def digest(text: str) -> str:
    """The name of a candidate module between find and its worker."""
    return hashlib.sha256(text.encode()).hexdigest()


def start_worker() -> subprocess.Popen:
    """Find's worker program (the driver's find_worker.py, started by its name, not imported), once it has
    said that it is ready: it starts under the caller's measurement lock (tuning/lock.py)."""
    proc = subprocess.Popen([sys.executable, "-m", "openprim.find_worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        pickle.load(proc.stdout)   # "ready"
    except EOFError:
        raise OpenPrimError(f"find's worker did not start (exit status {proc.wait()})") from None
    return proc


def ask(proc: subprocess.Popen, message: tuple):
    """The worker's reply to one message (find_worker.main lists them), this process's measurement lock let
    go meanwhile; an OpenPrimError when the worker replies with one (a candidate that fails) or dies (one
    that crashes LLVM or its kernel: the next message needs a new worker)."""
    try:
        with lock.waiting():
            pickle.dump(message, proc.stdin)
            proc.stdin.flush()
            reply = pickle.load(proc.stdout)
    except (EOFError, BrokenPipeError):
        raise OpenPrimError(f"the candidate crashed the compiler or its kernel (exit status {proc.wait()})") from None
    if isinstance(reply, str):
        raise OpenPrimError(reply)
    return reply


def measure(text: str, target: Target, keep=()) -> tuple[np.ndarray, float]:
    """(outputs, seconds) of a candidate module, compiled and run in the worker process (the driver's
    find_worker.py: a program of the layer above, started by its name, not imported). keep: the digests
    of the candidates whose executables the worker keeps to time again without compiling. This process
    lets go of its measurement lock while it waits (tuning/lock.py)."""
    global _worker, _startup
    if _worker is None or _worker.poll() is not None:
        t0 = time.monotonic()
        _worker = start_worker()
        _startup = time.monotonic() - t0
    return ask(_worker, (text, str(target), set(keep)))


def key(solver: str, params: dict) -> str:
    """A configuration's name among a search's results."""
    return solver + tuning_db.params_key(params)


class Bench:
    """Measures candidates of one op against the heuristic choice's output, in this process's worker.
    reference=False: the reference is measured when `measure_reference` is called (a Search's first request);
    results: the dict the results go to (a Search's)."""

    def __init__(self, op: ir.Operation, target: Target, results: dict | None = None, reference: bool = True):
        self.op, self.target = op, target
        self.problem = problem_of(op)
        self.slowest = 0.0   # seconds of the longest measurement so far, compile included
        self.elapsed = 0.0   # seconds of the last one
        self.digests: dict[str, str] = {}
        self.results: dict[str, Result] = {} if results is None else results
        ref = heuristic(self.problem, op.name[5:], target)
        self.reference_config = ref.name, ref.default_params(self.problem, target)
        self.reference = None   # its outputs
        if reference:
            self.measure_reference()

    _key = staticmethod(key)

    def measure_reference(self) -> Result:
        """Measure the heuristic's choice, whose outputs every other candidate's must match (an OpenPrimError
        when it fails: there is nothing to check against)."""
        solver, params = self.reference_config
        self.reference, seconds = self._measure(solver, params)
        self.results[key(solver, params)] = Result(solver, params, seconds)
        return self.results[key(solver, params)]

    def _measure(self, solver: str, params: dict, keep=None) -> tuple[np.ndarray, float]:
        """measure() of a candidate; the worker keeps the executables of `keep` (default: the leaders) and
        of this one. `slowest` learns how long it took, the worker's start left out."""
        global _startup
        text = candidate_module(self.op, solver, params)
        self.digests[key(solver, params)] = digest(text)
        keep = {self.digests[key(r.solver, r.params)] for r in self.leaders()} if keep is None else keep
        t0 = time.monotonic()
        try:
            return measure(text, self.target, keep | {digest(text)})
        finally:
            self.elapsed = time.monotonic() - t0 - _startup
            self.slowest = max(self.slowest, self.elapsed)
            _startup = 0.0

    def measured(self, solver, params) -> bool:
        return key(solver, params) in self.results

    def measure(self, solver: str, params: dict) -> Result:
        k = key(solver, params)
        if k not in self.results:
            try:
                out, seconds = self._measure(solver, params)
                wrong = mismatch(out, self.reference, self.problem.dtype)
                self.results[k] = Result(solver, params, None if wrong else seconds, wrong)
            except OpenPrimError as e:  # a configuration that does not compile is just not a candidate
                self.results[k] = Result(solver, params, error=str(e))
        return self.results[k]

    def retime(self, solver: str, params: dict, keep: list[tuple[str, dict]]) -> float | None:
        """Seconds of a measured candidate timed again (its executable, kept by the worker with those of
        `keep`: no compile); None when it fails."""
        try:
            return self._measure(solver, params, {self.digests[key(*c)] for c in keep if key(*c) in self.digests})[1]
        except OpenPrimError:
            return None

    def answer(self, request: Request):
        """What a Search expects back for its request, measured here."""
        if request.kind == "retime":
            return self.retime(request.solver, request.params, request.keep)
        result = self.measure_reference() if request.reference else self.measure(request.solver, request.params)
        return result, self.elapsed

    def leaders(self, top: int = 3) -> list[Result]:
        """The `top` fastest correct results."""
        return leaders(self.results, top)

    def best(self) -> Result:
        return self.leaders(1)[0]

    def confirm(self, top: int = 3, rounds: int = 2) -> None:
        """Time the `top` fastest again, `rounds` more times each (their executables, kept by the worker:
        no compile), and keep each one's median: a single short measurement on a busy machine must not
        decide a near-tie (nor what the database keeps)."""
        top = self.leaders(top)
        if len(top) < 2:
            return
        keep = {self.digests[key(r.solver, r.params)] for r in top}
        for r in top:
            times = [r.seconds]
            for _ in range(rounds):
                try:
                    times.append(self._measure(r.solver, r.params, keep)[1])
                except OpenPrimError:
                    break
            self.results[key(r.solver, r.params)] = Result(r.solver, r.params, float(np.median(times)))


def leaders(results: dict, top: int = 3) -> list[Result]:
    """The `top` fastest correct results."""
    return sorted((r for r in results.values() if r.seconds is not None), key=tuning_db.rank)[:top]


@dataclass
class Request:
    """What a Search asks for next: "measure" a configuration (compile, run, check against the reference's
    outputs, time), or "retime" a measured one (its executable again). keep: the configurations whose
    executables are worth keeping meanwhile (the leaders)."""
    kind: str
    solver: str
    params: dict
    keep: list = field(default_factory=list)
    reference: bool = False   # the heuristic's choice: its outputs are the reference of the others


class Search:
    """The decisions of one op's search, apart from how a candidate is measured: shared by the serial search
    (`search`: a Bench measures each request in this process's worker, one after the other) and the fleet
    (tuning/fleet.py: the searches of every layer at once, each request a compile task on any CPU and a
    measurement on the device's measurer). `steps()` generates Requests; the caller answers each one with
    `send`: a "measure" with (Result, seconds it took, compile included), a "retime" with its seconds (None:
    it failed). The first request is the reference (the heuristic's choice). `clock` (time.monotonic, or the
    fleet's sum of a layer's work) decides what fits the budget. `stored` results (of earlier runs, from the
    database) count as measured and cost nothing: a resumed search measures only what is not stored, and
    keeps their times (a stored leader is not timed again)."""

    def __init__(self, problem, kind: str, configs: list[tuple[str, dict]], target: Target, budget: float,
                 seed: int = 0, clock=time.monotonic, stored=()):
        self.problem, self.target, self.configs, self.clock = problem, target, configs, clock
        ref = heuristic(problem, kind, target)
        self.reference = ref.name, ref.default_params(problem, target)
        self.results: dict[str, Result] = {}
        self.stored: set[str] = set()
        for r in stored:
            self.results[key(r.solver, r.params)] = Result(r.solver, r.params, r.seconds)
            self.stored.add(key(r.solver, r.params))
        self.total = len(configs) if len(configs) <= EXHAUSTIVE else None
        self.slowest = 0.0   # seconds of the longest measurement so far, compile included
        self.deadline = clock() + budget
        self.rng = random.Random(seed)

    def fits(self) -> bool:
        """Whether a measurement expected to take as long as the longest one so far ends within the budget (one
        takes some time: a resumed search that has measured nothing yet fits nothing into a budget of 0)."""
        return self.clock() + max(self.slowest, 1e-9) <= self.deadline

    def measured(self, solver, params) -> bool:
        return key(solver, params) in self.results

    def leaders(self, top: int = 3) -> list[Result]:
        return leaders(self.results, top)

    def best(self) -> Result:
        return self.leaders(1)[0]

    def ranked(self) -> list[Result]:
        """The results, fastest first, failed ones last."""
        return self.leaders(len(self.results)) + [r for r in self.results.values() if r.seconds is None]

    def _measure(self, solver: str, params: dict, reference: bool = False):
        keep = [(r.solver, r.params) for r in self.leaders()]
        result, elapsed = yield Request("measure", solver, params, keep, reference)
        self.results[key(solver, params)] = result
        self.slowest = max(self.slowest, elapsed)

    def steps(self):
        """The requests: the reference, the solvers' defaults (cheapest predicted first; the first two
        whatever the budget), then all of a small space or greedy descent from the best (random samples when
        stuck) while measurements fit, then the leaders re-timed (`_confirm`)."""
        if not self.measured(*self.reference):
            yield from self._measure(*self.reference, reference=True)
        configs = self.configs
        defaults = [c for i, c in enumerate(configs) if i == 0 or configs[i - 1][0] != c[0]]
        defaults.sort(key=lambda c: SOLVERS[c[0]].cost(self.problem, self.target))
        for n, (solver, params) in enumerate(defaults):
            if n >= 2 and not self.fits():
                break
            if not self.measured(solver, params):
                yield from self._measure(solver, params)
        if self.total is not None:
            for solver, params in configs:
                if not self.measured(solver, params):
                    if not self.fits():
                        break
                    yield from self._measure(solver, params)
        else:
            while self.fits():
                near = [c for c in _neighbours(self.best(), self.problem) if not self.measured(*c)]
                rest = [c for c in configs if not self.measured(*c)]
                if not rest:
                    break
                yield from self._measure(*(near[0] if near else self.rng.choice(rest)))
        yield from self._confirm()

    def _confirm(self, top: int = 3, rounds: int = 2):
        """Time the `top` fastest again, `rounds` more times each (their executables, kept: no compile), and
        keep each one's median: a single short measurement on a busy machine must not decide a near-tie (nor
        what the database keeps). A stored one keeps its stored time."""
        best = self.leaders(top)
        if len(best) < 2:
            return
        keep = [(r.solver, r.params) for r in best]
        for r in best:
            if key(r.solver, r.params) in self.stored:
                continue
            times = [r.seconds]
            for _ in range(rounds):
                seconds = yield Request("retime", r.solver, r.params, keep)
                if seconds is None:
                    break
                times.append(seconds)
            self.results[key(r.solver, r.params)] = Result(r.solver, r.params, float(np.median(times)))


def drive(steps, answer) -> None:
    """Run a Search's steps, each request answered by `answer(request)` (the serial search's loop)."""
    reply = None
    while True:
        try:
            request = steps.send(reply)
        except StopIteration:
            return
        reply = answer(request)


def search(op: ir.Operation, target: Target, budget: float, progress=None, seed: int = 0) -> list[Result]:
    """Measured results, fastest first (failed ones last): the heuristic's choice (the reference), the
    solvers' defaults, cheapest predicted first, then every other configuration of a small space, else
    greedy descent from the best so far (random samples when stuck), then `confirm`. A measurement starts
    only when it is expected to end within `budget` seconds of the start, expecting it to take as long
    as the longest one so far (compile included); the reference and the next most plausible solver's
    default are measured whatever the budget. progress(done, total, result) follows each measurement.
    This process computes under the measurement lock meanwhile (tuning/lock.py)."""
    with lock.working(target):
        return _search(op, target, budget, progress, seed)


def _search(op: ir.Operation, target: Target, budget: float, progress, seed: int) -> list[Result]:
    plan = Search(problem_of(op), op.name[5:], space(op, target), target, budget, seed)
    bench = Bench(op, target, plan.results, reference=False)

    def answer(request: Request):
        reply = bench.answer(request)
        if progress and request.kind == "measure" and not request.reference:
            progress(len(plan.results), plan.total, reply[0])
        return reply
    drive(plan.steps(), answer)
    return plan.ranked()


def _neighbours(best: Result, problem) -> list[tuple[str, dict]]:
    """Configurations that differ from the best in one parameter."""
    space_ = SOLVERS[best.solver].tunables(problem)
    return [(best.solver, {**best.params, k: v}) for k in sorted(space_) for v in space_[k] if v != best.params[k]]


def store(problem: str, target: Target, results: list[Result], path=None) -> bool:
    """Every successful measurement into the user database (or the one at `path`); False when one could not
    be written."""
    arch = tuning_db.arch_of(target)
    return all(tuning_db.record(problem, arch, r.solver, r.params, r.seconds, path=path)
               for r in results if r.seconds is not None)


def layers(graph, target: Target):
    """(module, [(op, descriptor, count)]) of the distinct conv2d/matmul/attention problems of a Graph, as
    prim-select sees them for `target`: after prim-decompose, as in a compile, so an attention that no solver
    takes there is its two GEMMs. What `openprim tune` measures, serial or on a fleet."""
    module = to_module(graph)
    passes.run(module, f"prim-decompose{{target={target}}},prim-fuse")
    found = {}
    with module.context:
        for fn in graph_functions(module.operation):
            for op in prepare(fn, "NHWC", target):
                k = problem_of(op).descriptor()
                found.setdefault(k, [op, k, 0])[2] += 1
    return module, [tuple(v) for v in found.values()]

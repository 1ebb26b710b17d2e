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
"""
from __future__ import annotations

import hashlib
import itertools
import pickle
import random
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
from mlir import ir
from mlir.dialects import func

from openprim.base.errors import OpenPrimError
from openprim.base.target import Target
from openprim.passes.prim_select import Choice, apply, heuristic
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


def measure(text: str, target: Target, keep=()) -> tuple[np.ndarray, float]:
    """(outputs, seconds) of a candidate module, compiled and run in the worker process (the driver's
    find_worker.py: a program of the layer above, started by its name, not imported). keep: the digests
    of the candidates whose executables the worker keeps to time again without compiling. This process
    lets go of its measurement lock while it waits (tuning/lock.py)."""
    global _worker, _startup
    try:
        if _worker is None or _worker.poll() is not None:
            t0 = time.monotonic()
            _worker = subprocess.Popen([sys.executable, "-m", "openprim.find_worker"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            pickle.load(_worker.stdout)   # "ready": it started under this process's lock
            _startup = time.monotonic() - t0
        with lock.waiting():
            pickle.dump((text, str(target), set(keep)), _worker.stdin)
            _worker.stdin.flush()
            reply = pickle.load(_worker.stdout)
    except (EOFError, BrokenPipeError):
        raise OpenPrimError(f"the candidate crashed the compiler or its kernel (exit status {_worker.wait()})") from None
    if isinstance(reply, str):
        raise OpenPrimError(reply)
    return reply


class Bench:
    """Measures candidates of one op against the heuristic choice's output."""

    def __init__(self, op: ir.Operation, target: Target):
        self.op, self.target = op, target
        self.problem = problem_of(op)
        self.slowest = 0.0   # seconds of the longest measurement so far, compile included
        self.digests: dict[str, str] = {}
        self.results: dict[str, Result] = {}
        ref = heuristic(self.problem, op.name[5:], target)
        params = ref.default_params(self.problem, target)
        self.reference, seconds = self._measure(ref.name, params)
        self.results[self._key(ref.name, params)] = Result(ref.name, params, seconds)

    @staticmethod
    def _key(solver, params):
        return solver + tuning_db.params_key(params)

    def _measure(self, solver: str, params: dict, keep=None) -> tuple[np.ndarray, float]:
        """measure() of a candidate; the worker keeps the executables of `keep` (default: the leaders) and
        of this one. `slowest` learns how long it took, the worker's start left out."""
        global _startup
        text = candidate_module(self.op, solver, params)
        self.digests[self._key(solver, params)] = digest(text)
        keep = {self.digests[self._key(r.solver, r.params)] for r in self.leaders()} if keep is None else keep
        t0 = time.monotonic()
        try:
            return measure(text, self.target, keep | {digest(text)})
        finally:
            self.slowest = max(self.slowest, time.monotonic() - t0 - _startup)
            _startup = 0.0

    def measured(self, solver, params) -> bool:
        return self._key(solver, params) in self.results

    def measure(self, solver: str, params: dict) -> Result:
        key = self._key(solver, params)
        if key not in self.results:
            try:
                out, seconds = self._measure(solver, params)
                wrong = mismatch(out, self.reference, self.problem.dtype)
                self.results[key] = Result(solver, params, None if wrong else seconds, wrong)
            except OpenPrimError as e:  # a configuration that does not compile is just not a candidate
                self.results[key] = Result(solver, params, error=str(e))
        return self.results[key]

    def leaders(self, top: int = 3) -> list[Result]:
        """The `top` fastest correct results."""
        return sorted((r for r in self.results.values() if r.seconds is not None), key=tuning_db.rank)[:top]

    def best(self) -> Result:
        return self.leaders(1)[0]

    def confirm(self, top: int = 3, rounds: int = 2) -> None:
        """Time the `top` fastest again, `rounds` more times each (their executables, kept by the worker:
        no compile), and keep each one's median: a single short measurement on a busy machine must not
        decide a near-tie (nor what the database keeps)."""
        leaders = self.leaders(top)
        if len(leaders) < 2:
            return
        keep = {self.digests[self._key(r.solver, r.params)] for r in leaders}
        for r in leaders:
            times = [r.seconds]
            for _ in range(rounds):
                try:
                    times.append(self._measure(r.solver, r.params, keep)[1])
                except OpenPrimError:
                    break
            self.results[self._key(r.solver, r.params)] = Result(r.solver, r.params, float(np.median(times)))


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
    deadline = time.monotonic() + budget
    bench = Bench(op, target)
    configs = space(op, target)
    total = len(configs) if len(configs) <= EXHAUSTIVE else None
    rng = random.Random(seed)

    def fits() -> bool:
        return time.monotonic() + bench.slowest <= deadline

    def run(solver, params):
        r = bench.measure(solver, params)
        if progress:
            progress(len(bench.results), total, r)

    defaults = [c for i, c in enumerate(configs) if i == 0 or configs[i - 1][0] != c[0]]
    defaults.sort(key=lambda c: SOLVERS[c[0]].cost(bench.problem, target))
    for n, (solver, params) in enumerate(defaults):
        if n >= 2 and not fits():
            break
        run(solver, params)
    if total is not None:
        for solver, params in configs:
            if not bench.measured(solver, params):
                if not fits():
                    break
                run(solver, params)
    else:
        while fits():
            near = [c for c in _neighbours(bench.best(), bench.problem) if not bench.measured(*c)]
            rest = [c for c in configs if not bench.measured(*c)]
            if not rest:
                break
            run(*(near[0] if near else rng.choice(rest)))
    bench.confirm()
    done = sorted((r for r in bench.results.values() if r.seconds is not None), key=tuning_db.rank)
    return done + [r for r in bench.results.values() if r.seconds is None]


def _neighbours(best: Result, problem) -> list[tuple[str, dict]]:
    """Configurations that differ from the best in one parameter."""
    space_ = SOLVERS[best.solver].tunables(problem)
    return [(best.solver, {**best.params, k: v}) for k in sorted(space_) for v in space_[k] if v != best.params[k]]


def store(problem: str, target: Target, results: list[Result]) -> bool:
    """Every successful measurement into the user database; False when one could not be written."""
    arch = tuning_db.arch_of(target)
    return all(tuning_db.record(problem, arch, r.solver, r.params, r.seconds) for r in results if r.seconds is not None)

"""Compile a case every way that applies and compare each with the float64 reference.

The heuristic's variant goes through the compile cache, into a cache directory of this process's own
(private_cache: always a miss the first time), so it is also written as an .oprim artifact, validated and
loaded back, as `openprim compile` + `openprim run` and a second compile would; the forced solvers are
compiled in-process without the cache.

The variants of a case are the heuristic ("": no solver forced) and every solver that the registry says
applies (solvers.applicable) to every conv2d, or to every matmul, of the case as prim-select sees it with a
solver forced: after the pipeline's stages before it (prim-decompose turns an attention into matmuls,
prim-fuse's epilogues change the problem) and prim-select's layout stage with the case's layout option. A
solver is forced for all ops of its kind at once (openprim.compile's solver=), so one that applies to only
some of them cannot be forced on this case; `variants` counts those as skipped.

A variant fails with an exception from compile or run (any type: a valid graph must compile), or with a
mismatch (helpers.assert_close's AssertionError). A variant that passes is then called from 2-4 threads at
once (`threaded`), each thread on its own inputs, and fails ("threads") if any result differs from that of
a call alone on the same inputs. Failure.signature tells failures apart while shrinking.
GPU targets: `record` writes the variants as NAME.oprim + NAME.npz for scripts/gpu_replay.py, and
NAME.want.npz with the references; `verify` compares gpu_replay's outputs with them.
"""
from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass

import numpy as np

import fuzzing  # noqa: F401 - test/python on sys.path
import openprim
import openprim.compiler
from fuzzing.graphs import Case, render
from helpers import assert_close, rounded
from openprim import passes
from openprim.base.target import parse_target
from openprim.dialect import graph_functions
from openprim.passes import prim_select
from openprim.passes.prim_select import DEPTHWISE_POINTWISE
from openprim.pyfrontend import to_module
from openprim.solvers import SOLVERS, applicable
from openprim.solvers.problem import problem_of


@dataclass
class Failure(Exception):
    case: Case
    solver: str          # "" for the heuristic
    kind: str            # "mismatch", "threads" or the exception's type
    message: str

    @property
    def signature(self) -> str:
        """What stays the same while the case shrinks: the kind, and for an exception its message without
        paths, numbers and names."""
        if self.kind in ("mismatch", "threads"):
            return self.kind
        return self.kind + ":" + re.sub(r"\S*/\S*|[0-9]+|'[^']*'", "#", self.message)[:80]

    def __str__(self):
        return f"{self.kind} with solver {self.solver or '(heuristic)'}: {self.message.splitlines()[0][:400]}"


def _applicable_by_kind(case: Case, target, forced: str) -> dict[str, list[set]]:
    """Per op kind, the solvers that apply to each of its ops as prim-select sees them with `forced` forced."""
    module = to_module(render(case).graph)
    passes.run(module, ("" if target.is_gpu else "prim-batch-chunks,") + f"prim-decompose{{target={target}}},prim-fuse")
    ok_by_kind: dict[str, list[set]] = {}
    with module.context:
        for fn in graph_functions(module.operation):
            for op in prim_select.prepare(fn, case.compile_layout, target, forced):
                kind = op.name[5:]
                ok_by_kind.setdefault(kind, []).append(
                    {s.name for s, why in applicable(problem_of(op), kind, target) if why is None})
    return ok_by_kind


def variants(case: Case, target: str = "cpu") -> tuple[list[str], list[str]]:
    """(solvers to run: "" for the heuristic first, then each forced solver; solvers that apply to some
    but not all ops of their kind, which cannot be forced on this case). prim-select reshapes problems for
    its own choice only (a strided 1x1 convolution subsampled, a grouped one made dense): a forced solver
    sees them as they are, so they are looked at with a solver forced; the fused depthwise + pointwise op
    exists only when its own solver is the forced one."""
    target = parse_target(target)
    ok_by_kind = _applicable_by_kind(case, target, "(any solver)")
    if target.kind in SOLVERS[DEPTHWISE_POINTWISE].targets:
        fused = _applicable_by_kind(case, target, DEPTHWISE_POINTWISE).get("depthwise_pointwise")
        ok_by_kind.update({"depthwise_pointwise": fused} if fused else {})
    every = set().union(*(set.intersection(*sets) for sets in ok_by_kind.values())) if ok_by_kind else set()
    some = set().union(*(set.union(*sets) for sets in ok_by_kind.values())) if ok_by_kind else set()
    order = list(SOLVERS)
    return [""] + sorted(every, key=order.index), sorted(some - every, key=order.index)


_CACHE: list[str] = []


def private_cache() -> str:
    """A fresh compile-cache directory for this process, made the cache ($OPENPRIM_CACHE_DIR)."""
    if not _CACHE:
        _CACHE.append(tempfile.mkdtemp(prefix="openprim-fuzz-cache-"))
        atexit.register(shutil.rmtree, _CACHE[0], ignore_errors=True)
    os.environ["OPENPRIM_CACHE_DIR"] = _CACHE[0]
    return _CACHE[0]


def threads_of(case: Case) -> int:
    """How many threads call a case's executables at once: 2, 3 or 4, by its seed."""
    return 2 + case.seed % 3


def threaded(exe, feeds: list, dtype: str, threads: int, calls: int = 3) -> str | None:
    """Call exe from `threads` threads at once, `calls` times each, thread 0 on `feeds` and the others on
    random data of the same shapes: what differs first from a call alone on the same inputs, or None."""
    rng = np.random.default_rng(threads)
    inputs = [feeds] + [[rounded(rng.standard_normal(f.shape), dtype).astype(np.float32) for f in feeds]
                        for _ in range(threads - 1)]

    def outputs(x):
        got = exe(*x)
        return got if isinstance(got, tuple) else (got,)

    try:
        alone = [outputs(x) for x in inputs]
    except Exception as e:  # noqa: BLE001 - a call that fails alone is as much a finding
        return f"a call alone: {type(e).__name__}: {e}"
    start, problems = threading.Barrier(threads), []

    def work(t):
        try:
            start.wait()
            for c in range(calls):
                for i, (got, want) in enumerate(zip(outputs(inputs[t]), alone[t])):
                    if not np.array_equal(got, want, equal_nan=True):
                        problems.append(f"thread {t} of {threads}, call {c}: output {i} differs from a call alone "
                                        f"in {int(np.sum(got != want))} of {want.size} values")
                        return
        except Exception as e:  # noqa: BLE001 - any exception in a thread is a finding
            problems.append(f"thread {t} of {threads}: {type(e).__name__}: {e}")

    workers = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    if any(w.is_alive() for w in workers):
        return f"{threads} threads: not done after 120 s"
    return problems[0] if problems else None


def run_variant(case: Case, solver: str) -> None:
    """Compile `case` on the CPU (solver forced unless ""), run it and compare, then call it from
    threads_of(case) threads at once; raises Failure."""
    r = render(case)
    if not solver:
        private_cache()
    try:
        exe = openprim.compile(r.graph, target="cpu", solver=solver, layout=case.compile_layout, cache=not solver)
        got = exe(*r.feeds)
    except Exception as e:  # noqa: BLE001 - every exception of a valid graph is a finding
        raise Failure(case, solver, type(e).__name__, str(e) or repr(e)) from e
    got = got if isinstance(got, tuple) else (got,)
    try:
        assert len(got) == len(r.want), f"{len(got)} outputs, expected {len(r.want)}"
        for i, (out, want, red) in enumerate(zip(got, r.want, r.reductions)):
            assert_close(out, want, case.dtype, red, what=f"output {i} ({case.outputs[i]})")
    except AssertionError as e:
        raise Failure(case, solver, "mismatch", str(e)) from None
    problem = threaded(exe, r.feeds, case.dtype, threads_of(case))
    if problem is not None:
        raise Failure(case, solver, "threads", problem)


def fails(case: Case, solver: str) -> Failure | None:
    try:
        run_variant(case, solver)
    except Failure as f:
        return f
    return None


# ------------------------------------------------------------------------------------------------ GPU cases
def record(case: Case, target: str, directory: str) -> list[str]:
    """Write every variant of `case` for `target` into `directory` (NAME.oprim, NAME.npz inputs,
    NAME.want.npz references); returns the names. NAME: fuzz.SEED.SOLVER."""
    os.makedirs(directory, exist_ok=True)
    solvers, _ = variants(case, target)
    r = render(case)
    names = []
    for solver in solvers:
        name = f"fuzz.{case.seed}.{solver or 'heuristic'}"
        module = openprim.compiler.lower(r.graph, target, solver, None, case.compile_layout)
        openprim.compiler.write_artifact(module, os.path.join(directory, name + ".oprim"), target)
        np.savez(os.path.join(directory, name + ".npz"), *r.feeds)
        np.savez(os.path.join(directory, name + ".want.npz"), *r.want,
                 reductions=np.array(r.reductions), dtype=np.array(case.dtype))
        names.append(name)
    return names


def verify(directory: str, outputs: str) -> tuple[int, list[str]]:
    """(cases checked, one line per failure) of gpu_replay's `outputs` against the recorded references."""
    with np.load(outputs) as z:
        got = {k: z[k] for k in z.files}
    checked, failures = 0, []
    for path in sorted(glob.glob(os.path.join(directory, "*.want.npz"))):
        name = os.path.basename(path)[:-len(".want.npz")]
        checked += 1
        if f"{name}.error" in got:
            failures.append(f"{name}: on the GPU: {got[f'{name}.error']}")
            continue
        with np.load(path) as want:
            refs = [want[f"arr_{i}"] for i in range(len(want.files) - 2)]
            dtype, reductions = str(want["dtype"]), want["reductions"]
        try:
            for i, (ref, red) in enumerate(zip(refs, reductions)):
                key = f"{name}.out{i}"
                assert key in got, f"no output {i} in {outputs}"
                assert_close(got[key], ref, dtype, int(red), what=f"output {i}")
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    return checked, failures

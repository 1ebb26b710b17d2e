"""A failing case made small, and printed as a test to paste into test/python.

Greedy, like hypothesis' shrinker but on the Case's own structure: each round tries, in order, smaller
candidates and keeps the first that still fails the same way (Failure.signature) with the same solver:
  1. an earlier value as the only output (what comes after it is dropped): finds the first wrong op;
  2. a step dropped, its uses reading its first operand instead;
  3. an input dimension made 1, halved or less by one;
  4. an integer attribute (channels, kernel, stride, padding, ...) made 1 or 0, halved or less by one.
A candidate the frontend rejects (graphs.Invalid) is skipped. It stops when a round finds nothing or after
`budget` candidates. The test it prints is the rendered source of the small case (the same data, drawn
from the same seed), the compile with the failing solver, and helpers.assert_close on each output (and for
a "threads" failure, the calls from several threads: check.threaded).
"""
from __future__ import annotations

import time

from fuzzing.check import Failure, fails, threads_of
from fuzzing.graphs import Case, Invalid, case_text, render


def _prune(case: Case) -> Case:
    """Drop the steps no output needs (inputs included)."""
    needed = set(case.outputs)
    for s in reversed(case.steps):
        if s["name"] in needed:
            needed.update(s["src"])
    return case.copy(steps=[s for s in case.steps if s["name"] in needed])


def _smaller(v: int) -> list[int]:
    """Smaller values to try for an integer attribute or dimension, smallest first."""
    return sorted({x for x in (0 if v in (1, 2) else 1, v // 2, v - 1) if 0 <= x < v})


def _candidates(case: Case):
    names = [s["name"] for s in case.steps if s["op"] != "input"]
    for name in names:
        if case.outputs != [name]:
            yield _prune(case.copy(outputs=[name]))
    for i, s in enumerate(case.steps):
        if s["op"] == "input" or not s["src"]:
            continue
        c = case.copy()
        del c.steps[i]
        for t in c.steps:
            t["src"] = [s["src"][0] if x == s["name"] else x for x in t["src"]]
        c.outputs = list(dict.fromkeys(s["src"][0] if o == s["name"] else o for o in c.outputs))
        inputs = {t["name"] for t in c.steps if t["op"] == "input"}
        if not inputs.intersection(c.outputs):
            yield _prune(c)
    for i, s in enumerate(case.steps):
        if s["op"] == "input":
            for ax, d in enumerate(s["shape"]):
                for v in _smaller(d):
                    if v >= 1:
                        c = case.copy()
                        c.steps[i]["shape"] = tuple(v if j == ax else x for j, x in enumerate(s["shape"]))
                        yield c
    for i, s in enumerate(case.steps):
        for key, value in s.items():
            if key in ("name", "op", "src", "shape") or isinstance(value, (bool, float, str)):
                continue
            if isinstance(value, int):
                for v in _smaller(value):
                    c = case.copy()
                    c.steps[i][key] = v
                    yield c
            elif isinstance(value, (list, tuple)) and all(type(x) is int for x in value):
                for j, x in enumerate(value):
                    for v in _smaller(x):
                        c = case.copy()
                        c.steps[i][key] = type(value)(v if k == j else y for k, y in enumerate(value))
                        yield c


def shrink(failure: Failure, budget: int = 300, seconds: float = 120.0) -> tuple[Failure, int]:
    """(the smallest failure found, candidates tried)."""
    best, tried, t0 = failure, 0, time.monotonic()
    improved = True
    while improved and tried < budget and time.monotonic() - t0 < seconds:
        improved = False
        for cand in _candidates(best.case):
            if tried >= budget or time.monotonic() - t0 >= seconds:
                break
            try:
                render(cand)
            except Invalid:
                continue
            tried += 1
            f = fails(cand, best.solver)
            if f is not None and f.signature == best.signature:
                best, improved = f, True
                break
    return best, tried


HEADER = '''import os
import sys

import numpy as np

import openprim
from helpers import assert_close, rounded
from openprim.pyfrontend import Graph

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test/: the fuzzing package
from fuzzing import refops as fref  # noqa: E402
'''


def as_test(failure: Failure) -> str:
    """A pytest test (with the imports it needs above it) that reproduces `failure`."""
    case = failure.case
    body = render(case).source
    solver = failure.solver
    lines = [f"def test_fuzz_seed_{case.seed}{'_' + solver if solver else ''}():",
             f'    """scripts/fuzz.py, shrunk: {case_text(case)}.',
             f"    {failure.kind} with {'solver ' + solver if solver else 'the heuristic'}: "
             f"{failure.message.splitlines()[0][:160]}\"\"\"",
             *("    " + line for line in body),
             f"    run = openprim.compile(g, target=\"cpu\", solver={solver!r}, layout={case.compile_layout!r}, "
             f"cache={not solver})",
             "    got = run(*feeds)",
             "    got = got if isinstance(got, tuple) else (got,)",
             "    for i, (out, ref, reduction) in enumerate(zip(got, want, reductions)):",
             f"        assert_close(out, ref, {case.dtype!r}, reduction, what=f\"output {{i}}\")"]
    if failure.kind == "threads":
        lines.append(f"    assert threaded(run, feeds, {case.dtype!r}, {threads_of(case)}) is None")
        return HEADER + "from fuzzing.check import threaded  # noqa: E402\n\n\n" + "\n".join(lines) + "\n"
    return HEADER + "\n\n" + "\n".join(lines) + "\n"

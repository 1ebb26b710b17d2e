"""The tuning side of prim-select: choices from the tuning database and from Find.

prim-select computes the heuristic's choice and hands it to a `Tuner` (when the driver gave it one),
which applies the mode and enforce policy (after MIOpen's Find modes; see passes/prim_select.py):
    immediate  the database's fastest valid record, else the heuristic;
    hybrid     the database; on a miss, Find when the enforce setting allows a search, else the heuristic;
    find       Find: time the candidates, keep the fastest correct one, store every measurement.
Find needs the target's hardware here; without it (a GPU target on this machine) it says so once and
falls back to immediate.
"""
from __future__ import annotations

from mlir import ir

from openprim.base.target import Target
from openprim.passes.prim_select import Choice
from openprim.solvers import SOLVERS
from openprim.solvers.problem import problem_of

from . import db, find


class Tuner:
    """prim-select's Tuner: the user and system databases, and Find."""

    def choose(self, op: ir.Operation, target: Target, fallback: Choice, mode: str, enforce: str,
               budget: float) -> Choice:
        problem = problem_of(op)
        if mode != "find":
            rec = db.best(problem, db.arch_of(target), target)
            search = enforce in (("DB_UPDATE", "SEARCH_DB_UPDATE") if rec else ("SEARCH", "SEARCH_DB_UPDATE"))
            if mode == "immediate" or not search:
                return Choice(SOLVERS[rec.solver], rec.params, "db", rec.seconds) if rec else fallback
        why_not = find.unavailable(target)
        if why_not:
            db.warn_once(f"prim-select: find mode: {why_not}; using the database and the heuristic")
            return self.choose(op, target, fallback, "immediate", enforce, budget)
        results = find.search(op, target, budget)
        find.store(problem.descriptor(), target, results)
        best = results[0]
        return Choice(SOLVERS[best.solver], best.params, "find", best.seconds)

"""The differential fuzzer of OpenPrim (issue 16): random graphs over every op of the Graph frontend, compiled
with the heuristic and with every applicable solver forced, compared with float64 numpy.

    graphs.py   the seeded generator: a Case (inputs, symbolic steps, outputs) rendered to Python source that
                builds the Graph and its float64 reference side by side
    refops.py   the float64 references (test/python/reference.py plus the ops it lacks)
    check.py    which solvers apply to a case, compiling and comparing each variant (and calling it from
                several threads at once), recording GPU cases
    shrink.py   a failing case made small, printed as a ready-to-paste pytest test

Used by scripts/fuzz.py (N cases or T minutes) and test/python/test_fuzz.py (a fixed-seed slice). It imports
test/python's helpers and reference modules, so that folder goes on sys.path here.
"""
import os
import sys

_PYTHON_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PYTHON_TESTS not in sys.path:
    sys.path.insert(0, _PYTHON_TESTS)

"""The differential fuzzer (issue 16): random graphs, every applicable solver, float64 numpy as the oracle.

    python scripts/fuzz.py --cases 200 [--seed 1000]        # cases SEED, SEED+1, ... on the CPU
    python scripts/fuzz.py --minutes 10                      # as many as fit in 10 minutes
    python scripts/fuzz.py --cases 1 --seed 1234 --show      # one case: its source and variants

Each case (test/fuzzing/graphs.py) is compiled with the heuristic and with every solver that applies
forced, run, and compared with its float64 reference, then called from 2-4 threads at once and compared
with a call alone (test/fuzzing/check.py). A failing variant is shrunk and printed as a ready-to-paste
pytest test (test/fuzzing/shrink.py); the exit status is 1 if any failed.
The seed of each case is printed before it runs, so a case that kills the process is known.

A GPU target compiles the same cases and records them for the GPU machine instead of running them:

    python scripts/fuzz.py --cases 100 --target nvvm:sm_90 --record DIR   # here: DIR/fuzz.SEED.SOLVER.*
    python scripts/gpu_replay.py DIR DIR/outputs.npz                     # on the GPU machine (runtime only)
    python scripts/fuzz.py --verify DIR DIR/outputs.npz                  # here: compare with float64
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test"))

from fuzzing import check, graphs, shrink  # noqa: E402
from openprim.base.errors import OpenPrimError  # noqa: E402


def _cases(args):
    """Seeds in order until --cases ran out or --minutes passed."""
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else None
    seed = args.seed
    while (args.cases is None or seed < args.seed + args.cases) and (deadline is None or time.monotonic() < deadline):
        yield seed
        seed += 1


def run_cpu(args) -> int:
    counts = {"cases": 0, "variants": 0, "failed": 0, "partial": 0}
    failures, ops, kinds = [], Counter(), Counter()
    t0 = time.monotonic()
    for seed in _cases(args):
        case = graphs.generate(seed)
        solvers, partial = check.variants(case)
        ops.update(case.ops())
        print(f"{graphs.case_text(case)}; {len(solvers)} variants", flush=True)
        if args.show:
            print("\n".join("    " + line for line in graphs.render(case).source))
            print(f"    variants: {solvers}; applicable to only some ops: {partial}")
        counts["cases"] += 1
        counts["partial"] += len(partial)
        for solver in solvers:
            counts["variants"] += 1
            f = check.fails(case, solver)
            if f is not None:
                counts["failed"] += 1
                kinds[f.kind] += 1
                print(f"  FAIL {f}", flush=True)
                failures.append(f)
    seconds = time.monotonic() - t0
    print(f"\n{counts['cases']} cases, {counts['variants']} compiled variants (each also called from 2-4 threads), "
          f"{counts['failed']} failed {dict(kinds)} ({counts['partial']} solvers applicable to only some ops of a "
          f"case not run), {seconds:.0f} s")
    print(f"ops drawn: {len(ops)} of {len(graphs.RENDER)}: " + ", ".join(f"{op} {n}" for op, n in ops.most_common()))
    shown = set()
    for f in failures:
        if (f.signature, f.solver) in shown or len(shown) >= args.shrink:
            continue
        shown.add((f.signature, f.solver))
        small, tried = shrink.shrink(f)
        print(f"\n# seed {f.case.seed}, {f.solver or 'heuristic'}: shrunk with {tried} candidates to "
              f"{graphs.case_text(small.case)}\n# {small}\n")
        print(shrink.as_test(small))
    return 1 if failures else 0


def run_record(args) -> int:
    names, failed = [], 0
    for seed in _cases(args):
        case = graphs.generate(seed)
        print(graphs.case_text(case), flush=True)
        try:
            names += check.record(case, args.target, args.record)
        except Exception as e:  # noqa: BLE001 - a valid graph that does not compile for the target is a finding
            failed += 1
            print(f"  FAIL compiling for {args.target}: {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
    print(f"{len(names)} variants recorded in {args.record}, {failed} cases failed to compile: run `python "
          f"scripts/gpu_replay.py {args.record} OUT.npz` on the GPU machine, then `python scripts/fuzz.py --verify "
          f"{args.record} OUT.npz` here")
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--cases", type=int, help="number of cases")
    budget.add_argument("--minutes", type=float, help="run cases until this many minutes passed")
    budget.add_argument("--verify", nargs=2, metavar=("DIR", "OUTPUTS"),
                        help="check gpu_replay's OUTPUTS of the cases recorded in DIR")
    p.add_argument("--seed", type=int, default=0, help="the first case's seed (default 0)")
    p.add_argument("--target", default="cpu", help="cpu (default: compile, run, compare) or a GPU target (record)")
    p.add_argument("--record", metavar="DIR", help="GPU targets: where to write the cases")
    p.add_argument("--shrink", type=int, default=5, help="shrink and print at most this many distinct failures")
    p.add_argument("--show", action="store_true", help="print each case's source and variants")
    args = p.parse_args(argv)
    if args.cases is not None and args.cases < 0 or args.minutes is not None and args.minutes <= 0:
        p.error("--cases must be >= 0 and --minutes > 0")
    # the heuristic must not read the user's tuning database: a fresh one per run
    os.environ.setdefault("OPENPRIM_USER_DB_PATH", os.path.join(tempfile.mkdtemp(prefix="openprim-fuzz-"), "db.sqlite"))
    try:
        if args.verify:
            checked, failures = check.verify(*args.verify)
            print("\n".join(failures))
            print(f"{checked} GPU variants checked, {len(failures)} failed")
            return 1 if failures or not checked else 0
        if args.target != "cpu":
            if not args.record:
                p.error(f"target {args.target}: --record DIR is needed (the cases run on the GPU machine)")
            return run_record(args)
        return run_cpu(args)
    except OpenPrimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

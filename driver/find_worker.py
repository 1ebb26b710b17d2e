"""Find's worker process: compiles and times candidate modules sent by tuning/find.py's measure (run as
`python -m openprim.find_worker`).

A candidate that trips an assertion in LLVM or crashes in its kernel kills this process, not the
compiler that asked. It lives in the driver because it compiles; Find starts it as a program and
never imports it. It says "ready" once started (the tuner waits for that under its measurement lock:
tuning/lock.py), and keeps the executables of the candidates the tuner names (its leaders), so that
re-timing one costs no compile.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import sys

import numpy as np

from openprim import compiler
from openprim.tuning import find, lock


def compile_candidate(text: str, target: str):
    return compiler.jit(compiler.lower(text, target), target)


def inputs_of(exe, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(exe.plan["values"][i["value"]]["shape"]).astype(np.float32) for i in exe.plan["inputs"]]


def time_candidate(exe) -> float:
    """Seconds per run: the sum of the steps' medians (device events on a GPU), repeats for about 50 ms."""
    if hasattr(exe, "time_ms"):
        return exe.time_ms() / 1e3
    once = sum(exe.time_steps(1))
    return float(sum(exe.time_steps(int(np.clip(0.05 / max(once, 1e-7), 3, 50)))))


def measure_here(text: str, target: str, exe=None):
    """(executable, outputs, seconds): compile unless `exe` is given (CPU: under the shared measurement
    lock), then run and time under the exclusive one (tuning/lock.py): concurrent tuners take turns."""
    parsed = compiler.target_of(target)
    if exe is None:
        with lock.measuring(parsed, exclusive=False) if not parsed.is_gpu else contextlib.nullcontext():
            exe = compile_candidate(text, target)
    with lock.measuring(parsed):
        out = np.asarray(exe(*inputs_of(exe)), np.float64)
        return exe, out, time_candidate(exe)


def main() -> None:
    """The loop: (module text, target, digests to keep) in on stdin, (outputs, seconds) or an error line out."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever else writes to stdout must not corrupt the replies
    pickle.dump("ready", out)
    out.flush()
    kept = {}   # digest -> the executable of a candidate the tuner may time again
    while True:
        try:
            text, target, keep = pickle.load(sys.stdin.buffer)
        except EOFError:
            return
        digest = find.digest(text)
        try:
            exe, outputs, seconds = measure_here(text, target, kept.get(digest))
            kept[digest] = exe
            reply = outputs, seconds
        except Exception as e:  # noqa: BLE001 - reported to the parent as the candidate's failure
            reply = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        kept = {d: e for d, e in kept.items() if d in keep}
        pickle.dump(reply, out)
        out.flush()


if __name__ == "__main__":
    main()

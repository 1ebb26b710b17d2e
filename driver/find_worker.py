"""Find's worker process: compiles and times candidate modules sent by tuning/find.py's measure (run as
`python -m openprim.find_worker`).

A candidate that trips an assertion in LLVM or crashes in its kernel kills this process, not the
compiler that asked. It lives in the driver because it compiles; Find starts it as a program and
never imports it.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import sys

import numpy as np

from openprim import compiler
from openprim.tuning import lock


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


def measure_here(text: str, target: str) -> tuple[np.ndarray, float]:
    """Compile (CPU: under the shared measurement lock), then run and time under the exclusive one
    (tuning/lock.py): concurrent tuners on this machine take turns while timing."""
    parsed = compiler.target_of(target)
    with lock.measuring(parsed, exclusive=False) if not parsed.is_gpu else contextlib.nullcontext():
        exe = compile_candidate(text, target)
    with lock.measuring(parsed):
        out = np.asarray(exe(*inputs_of(exe)), np.float64)
        return out, time_candidate(exe)


def main() -> None:
    """The loop: (module text, target) in on stdin, (outputs, seconds) or an error line out."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever else writes to stdout must not corrupt the replies
    while True:
        try:
            text, target = pickle.load(sys.stdin.buffer)
        except EOFError:
            return
        try:
            reply = measure_here(text, target)
        except Exception as e:  # noqa: BLE001 - reported to the parent as the candidate's failure
            reply = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        pickle.dump(reply, out)
        out.flush()


if __name__ == "__main__":
    main()

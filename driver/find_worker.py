"""Find's worker process: compiles and times candidate modules sent by tuning/find.py's measure (run as
`python -m openprim.find_worker`).

A candidate that trips an assertion in LLVM or crashes in its kernel kills this process, not the
compiler that asked. It lives in the driver because it compiles; Find starts it as a program and
never imports it. It says "ready" once started (the tuner waits for that under its measurement lock:
tuning/lock.py), and keeps the executables of the candidates the tuner names (its leaders), so that
re-timing one costs no compile.

The fleet (tuning/fleet.py) splits a measurement in two, each in a worker of its own: a compile task on
any CPU asks for the candidate's .oprim artifact ("compile"), and the device's measurer has it loaded and
timed ("artifact"). The messages, on stdin; the reply is an error line (str) or:
    (text, target, keep)                              -> (outputs, seconds): compile, run, time
    ("compile", text, target)                         -> (artifact bytes, compile seconds)
    ("artifact", digest, data, target, keep, device)  -> (outputs, seconds, busy seconds): load (data None: the one kept
                                                         under digest), run, time; device: the GPU's
                                                         (index in this process, index on the machine)
keep: the digests of the executables to keep after this message.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import sys
import tempfile
import time

import numpy as np

from openprim import compiler
from openprim.runtime import load
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


def measure_here(text: str | None, target: str, exe=None, device: int = 0, digest: str | None = None):
    """(executable, outputs, seconds): compile unless `exe` is given (CPU: under the shared measurement
    lock), then run and time under the exclusive one (tuning/lock.py) of the device (GPU `device`: its index
    on this machine): concurrent tuners take turns. digest: the candidate's (default: of `text`)."""
    global waited
    parsed = compiler.target_of(target)
    if exe is None:
        with lock.measuring(parsed, exclusive=False) if not parsed.is_gpu else contextlib.nullcontext():
            exe = compile_candidate(text, target)
    t0 = time.monotonic()
    with lock.measuring(parsed, index=device):
        waited = time.monotonic() - t0
        out = np.asarray(exe(*inputs_of(exe)), np.float64)
        return exe, out, planted(time_candidate(exe), digest or find.digest(text))


waited = 0.0   # seconds the last measure_here waited for the device's measurement lock


def planted(seconds: float, digest: str) -> float:
    """A test hook: the seconds that $OPENPRIM_FIND_PLANTED (a JSON file {candidate digest: seconds}) gives the
    candidate, else its measured ones. Tests that compare two searches (serial and fleet) plant the times
    that must decide, so that the comparison does not depend on timing noise; the outputs stay real."""
    path = os.environ.get("OPENPRIM_FIND_PLANTED")
    if not path:
        return seconds
    with open(path) as f:
        table = json.load(f)
    return float(table.get(digest, seconds))


def compile_artifact(text: str, target: str) -> tuple[bytes, float]:
    """(the .oprim artifact of a candidate module, seconds its compile took): the fleet's compile task, on any
    CPU (CPU target: under the shared measurement lock, as any compile)."""
    parsed = compiler.target_of(target)
    with lock.measuring(parsed, exclusive=False) if not parsed.is_gpu else contextlib.nullcontext():
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "candidate.oprim")
            compiler.write_artifact(compiler.lower(text, target), path, target)
            with open(path, "rb") as f:
                return f.read(), time.monotonic() - t0


class Artifacts:
    """The executables of loaded artifacts (the fleet's measurer), by digest, and their files in `directory`."""

    def __init__(self, directory: str):
        self.dir = directory
        self.exes = {}

    def get(self, digest: str, data: bytes | None, target: str, device: int):
        """The executable of the artifact `data` (None: the one kept as `digest`) on GPU `device` of those this
        process sees (CPU targets: the host)."""
        if digest not in self.exes:
            if data is None:
                raise RuntimeError(f"no artifact kept as {digest[:12]}")
            path = os.path.join(self.dir, f"{digest}.oprim")
            with open(path, "wb") as f:
                f.write(data)
            self.exes[digest] = load(path, device)
        return self.exes[digest]

    def keep(self, digests) -> None:
        for d in [d for d in self.exes if d not in digests]:
            del self.exes[d]
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.dir, f"{d}.oprim"))


def answer(message, kept: dict, artifacts: Artifacts):
    """The reply to one message (the module docstring lists them)."""
    if message[0] == "compile":
        return compile_artifact(message[1], message[2])
    if message[0] == "artifact":
        _, digest, data, target, keep, (visible, physical) = message   # GPU: its index here, and on the machine
        t0 = time.monotonic()
        exe = artifacts.get(digest, data, target, visible)
        _, outputs, seconds = measure_here(None, target, exe, physical, digest)
        artifacts.keep(set(keep) | {digest})
        return outputs, seconds, time.monotonic() - t0 - waited
    text, target, keep = message
    digest = find.digest(text)
    exe, outputs, seconds = measure_here(text, target, kept.get(digest), digest=digest)
    kept[digest] = exe
    for d in [d for d in kept if d not in keep]:
        del kept[d]
    return outputs, seconds


def main() -> None:
    """The loop: a message in on stdin (the module docstring), its reply or an error line out."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever else writes to stdout must not corrupt the replies
    pickle.dump("ready", out)
    out.flush()
    kept = {}   # digest -> the executable of a candidate the tuner may time again
    with tempfile.TemporaryDirectory(prefix="openprim-find-") as tmp:
        artifacts = Artifacts(tmp)
        while True:
            try:
                message = pickle.load(sys.stdin.buffer)
            except EOFError:
                return
            try:
                reply = answer(message, kept, artifacts)
            except Exception as e:  # noqa: BLE001 - reported to the parent as the candidate's failure
                reply = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
                if len(message) == 3 and message[0] != "compile":   # (text, target, keep)
                    for d in [d for d in kept if d not in message[2]]:
                        del kept[d]
            pickle.dump(reply, out)
            out.flush()


if __name__ == "__main__":
    main()

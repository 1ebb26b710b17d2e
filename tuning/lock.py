"""The machine-wide measurement lock: concurrent tuners take turns, per device.

Two `openprim tune` runs on one machine stored times of one configuration 13x apart: a timing held
the lock exclusively, but only the worker's compile took it shared, so the other tuner's start (Python,
the passes over its model), its worker's start and the candidate modules it built ran beside the timing.
Every process of a tuner now holds, per device, an `fcntl.flock` on a file under the user cache directory:

- shared whenever it computes on the CPU (CPU targets): the tuner from before it reads the model to its
  end (`working`), Find's worker while it starts (the tuner waits for it under its own lock) and compiles;
- exclusive while the worker runs and times a candidate;
- not at all while it waits: the tuner for its worker's reply (`waiting`), the worker for the next candidate.

So a timing never overlaps another tuner's work on the same device, and work waits for a timing to end. On a
GPU target only the timing takes the lock: compiling on the host does not disturb the device. The kernel
releases a lock when its process dies, so a crashed worker never leaves it held. Where the lock file
cannot be created, tuning goes on unlocked with one warning.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from openprim.base.target import Target

from . import db

_working: list[int] = []   # the descriptor of the CPU lock this process holds shared while it works


def lock_dir() -> Path:
    """$OPENPRIM_LOCK_DIR, else $XDG_CACHE_HOME/openprim/locks, else ~/.cache/openprim/locks."""
    if os.environ.get("OPENPRIM_LOCK_DIR"):
        return Path(os.environ["OPENPRIM_LOCK_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "openprim" / "locks"


def device_name(target: Target, index: int = 0) -> str:
    """The device a measurement occupies: the host CPU, or GPU `index` of the target's vendor."""
    return "cpu" if not target.is_gpu else f"{'cuda' if target.kind == 'nvvm' else 'hip'}{index}"


def _open(target: Target, index: int) -> int | None:
    """A descriptor of the device's lock file, or None (one warning) where it cannot be created."""
    path = lock_dir() / f"measure-{device_name(target, index)}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        db.warn_once(f"measurement lock {path}: {e.strerror}; timing without it (concurrent tuners may disturb it)")
        return None


@contextlib.contextmanager
def measuring(target: Target, exclusive: bool = True, index: int = 0):
    """Hold the device's measurement lock (exclusive: timing; shared: compiling) for the with-block."""
    fd = _open(target, index)
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)   # releases the lock


@contextlib.contextmanager
def working(target: Target):
    """Hold the CPU's lock shared for the with-block, except inside `waiting()`: this process computes on
    the cores another tuner may be timing on. Nested blocks share the outer one's; GPU targets: nothing."""
    fd = None if target.is_gpu or _working else _open(target, 0)
    if fd is None:
        yield
        return
    _working.append(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        _working.clear()
        os.close(fd)


@contextlib.contextmanager
def waiting():
    """Let go of the lock `working` holds for the with-block: this process waits while its worker works."""
    for fd in _working:
        fcntl.flock(fd, fcntl.LOCK_UN)
    try:
        yield
    finally:
        for fd in _working:
            fcntl.flock(fd, fcntl.LOCK_SH)

"""The machine-wide measurement lock: concurrent tuners take turns while timing, per device.

Three `openprim tune` runs on one machine used to time each other's contention: each measured its
candidates while the others compiled and ran theirs, stored times up to 600x too slow, and each picked
a different "best". A Find worker now holds, per device, an exclusive `fcntl.flock` on a file under the
user cache directory while it runs and times a candidate, and (CPU targets, where compiling competes for
the same cores) a shared one while it compiles: timings wait for every compile in flight, and compiles
wait for a timing to end. The lock is released by the kernel when the process dies, so a crashed worker
never leaves it held. Where the lock file cannot be created, tuning goes on unlocked with one warning.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from openprim.base.target import Target

from . import db


def lock_dir() -> Path:
    """$OPENPRIM_LOCK_DIR, else $XDG_CACHE_HOME/openprim/locks, else ~/.cache/openprim/locks."""
    if os.environ.get("OPENPRIM_LOCK_DIR"):
        return Path(os.environ["OPENPRIM_LOCK_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "openprim" / "locks"


def device_name(target: Target, index: int = 0) -> str:
    """The device a measurement occupies: the host CPU, or GPU `index` of the target's vendor."""
    return "cpu" if not target.is_gpu else f"{'cuda' if target.kind == 'nvvm' else 'hip'}{index}"


@contextlib.contextmanager
def measuring(target: Target, exclusive: bool = True, index: int = 0):
    """Hold the device's measurement lock (exclusive: timing; shared: compiling) for the with-block."""
    path = lock_dir() / f"measure-{device_name(target, index)}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        db.warn_once(f"measurement lock {path}: {e.strerror}; timing without it (concurrent tuners may disturb it)")
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)   # releases the lock

"""Atomic file writes: a temporary file in the target's directory, renamed over it when complete; and JSON
files read with one clear error.

A reader (or a crash) never sees a half-written artifact, cache entry, DB or output; a failed write leaves
the old file as it was. The new file gets the mode a plain open() would give (0666 less the umask), not
mkstemp's 0600.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager

from .errors import OpenPrimError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_file(path, mode: str = "wb", what: str = "output"):
    """Yields a file object open on a temporary file beside `path`; on a clean exit it becomes `path`.
    A directory that is missing or not writable is one OpenPrimError naming `what` and the path."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    except OSError as e:
        raise OpenPrimError(f"{what} {path}: cannot write there ({e.strerror})") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise OpenPrimError(f"{what} {path}: cannot write there ({e.strerror or e})") from None
        raise


def read_json(path, what: str):
    """The JSON value of file `path`; one OpenPrimError line ("<path>: cannot read <what> (why)") when it
    cannot be read or parsed."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise OpenPrimError(f"{path}: cannot read {what} ({e})") from None

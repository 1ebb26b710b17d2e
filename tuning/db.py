"""The tuning database: measured times of (problem, target arch, solver, parameters), like MIOpen's find-db.    except sqlite3.DatabaseError as e:  # read-only, corrupt, locked past the timeout: keep the file as it is
        _unusable.add(str(path))

One SQLite table; a record is keyed by the problem descriptor (ConvProblem/GemmProblem.descriptor(), the
`prim.problem` attribute), the arch ("cpu:<host cpu>", "nvvm:sm_90", ...), the solver and its parameters
(JSON, sorted keys), and holds the measured seconds, the compiler version and a timestamp.

Two databases are read, the user's first (it wins), then the system one:
  user    $OPENPRIM_USER_DB_PATH, else ~/.cache/openprim/tuning.sqlite   (tuning writes here)
  system  tuning/data/tuning.sqlite inside the package, read-only          (may be absent: empty)

Why it never gets in the way of compiling: every failure degrades to "no record". Several processes
may tune at once (WAL journal, a busy timeout, one INSERT OR REPLACE per short transaction). A
directory that cannot be created or written, a corrupt file (kept as it is, never overwritten) and a
stale or invalid record (unknown solver, parameters the solver does not have, another compiler
version, a solver that does not apply) each give one warning per process and are then ignored.
"""
from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from openprim.base import __version__
from openprim.base.errors import OpenPrimError
from openprim.base.ops import window_out
from openprim.base.target import Target, parse_target
from openprim.solvers import SOLVERS, applicable
from openprim.solvers.problem import ConvProblem, GemmProblem

SYSTEM_DB = Path(__file__).parent / "data" / "tuning.sqlite"
SCHEMA = """CREATE TABLE IF NOT EXISTS records (
    problem TEXT NOT NULL, arch TEXT NOT NULL, solver TEXT NOT NULL, params TEXT NOT NULL,
    seconds REAL NOT NULL, version TEXT NOT NULL, timestamp REAL NOT NULL,
    PRIMARY KEY (problem, arch, solver, params))"""
BUSY_TIMEOUT_S = 30.0


class TuningDBWarning(UserWarning):
    """A database or a record that is ignored (the compile goes on without it)."""


@dataclass(frozen=True)
class Record:
    problem: str
    arch: str
    solver: str
    params: dict
    seconds: float
    version: str
    timestamp: float
    source: str = "user"     # which database it came from: "user" or "system"


_warned: set[str] = set()
_unusable: set[str] = set()   # databases found corrupt or unreadable in this process: not touched again


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, TuningDBWarning, stacklevel=3)


def user_path() -> Path:
    return Path(os.environ.get("OPENPRIM_USER_DB_PATH") or Path.home() / ".cache" / "openprim" / "tuning.sqlite")


def compiler_version() -> str:
    return __version__


def arch_of(target: Target) -> str:
    """The arch a measurement is valid for, a serialized Target: the host CPU for the CPU target
    (cpu:znver4), else the target itself."""
    return str(target.concrete)


def params_key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if readonly:
        return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, timeout=BUSY_TIMEOUT_S)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(SCHEMA)
    return conn


def _rows(path: Path, source: str, problem: str, arch: str) -> list[Record]:
    if str(path) in _unusable or not path.exists():
        return []
    try:
        conn = _connect(path, readonly=source == "system")
        try:
            rows = conn.execute("SELECT problem, arch, solver, params, seconds, version, timestamp FROM records "
                                "WHERE problem = ? AND arch = ? ORDER BY seconds", (problem, arch)).fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:  # corrupt, not a database, unreadable: keep the file, use none of it
        _unusable.add(str(path))
        warn_once(f"tuning database {path} is unusable ({e}): ignored, left as it is")
        return []
    out = []
    for p, a, s, params, sec, v, ts in rows:
        try:
            out.append(Record(p, a, s, json.loads(params), float(sec), v, ts, source))
        except (ValueError, TypeError):
            warn_once(f"tuning database {path}: malformed parameters {params!r} of {s} for {p}: record ignored")
    return out


_CONV = re.compile(r"conv2d-(\d+)x(\d+)x(\d+)x(\d+)-k(\d+)-(\d+)x(\d+)-s(\d+)x(\d+)-p(\d+)x(\d+)x(\d+)x(\d+)"
                   r"-d(\d+)x(\d+)-g(\d+)-(NCHW|NHWC)-(KCRS|KRSC|RSCK)-(f32|f16|bf16)-([a-z_+]+)")
_GEMM = re.compile(r"gemm-b(\d+)-m(\d+)-n(\d+)-k(\d+)-(nt|nn)(-batched)?-(f32|f16|bf16)-([a-z_+]+)")


def problem_of_descriptor(text: str):
    """The ConvProblem / GemmProblem a descriptor (ConvProblem/GemmProblem.descriptor()) names, or an
    OpenPrimError saying what is wrong with it."""
    m = _GEMM.fullmatch(text)
    if m:
        b, mm, n, k = map(int, m.groups()[:4])
        if min(b, mm, n, k) < 1:
            raise OpenPrimError(f"descriptor '{text}': sizes must be positive")
        return GemmProblem(b, mm, n, k, m[5] == "nt", bool(m[6]), m[7], m[8])
    m = _CONV.fullmatch(text)
    if not m:
        raise OpenPrimError(f"'{text}' is not a problem descriptor (e.g. conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-"
                            f"d1x1-g1-NHWC-RSCK-f32-none or gemm-b1-m128-n256-k64-nt-f32-none; see `openprim explain`)")
    n, c, h, w, k, r, s_, sh, sw, pt, pl, pb, pr, dh, dw, g = map(int, m.groups()[:16])
    if min(n, c, h, w, k, r, s_, sh, sw, dh, dw, g) < 1 or c % g or k % g:
        raise OpenPrimError(f"descriptor '{text}': sizes, strides, dilations and groups must be positive, "
                            f"groups dividing the channels")
    oh, ow = window_out(h, r, sh, pt, pb, dh), window_out(w, s_, sw, pl, pr, dw)
    if min(oh, ow) < 1:
        raise OpenPrimError(f"descriptor '{text}': the filter is larger than the padded input")
    return ConvProblem(n, c, h, w, k, r, s_, oh, ow, (sh, sw), (pt, pl, pb, pr), (dh, dw), g, m[17], m[18], m[19],
                       m[20])


def invalid(rec: Record, problem=None, target: Target | None = None) -> str | None:
    """Why a record cannot be used (None: it can). With the problem object and the target, the solver
    must apply to it and its parameters must be among the solver's tunables (or its default)."""
    if rec.version != compiler_version():
        return f"made by compiler version {rec.version}, this is {compiler_version()}"
    if not (isinstance(rec.seconds, (int, float)) and math.isfinite(rec.seconds) and rec.seconds > 0):
        return f"time {rec.seconds!r} is not a positive number of seconds"
    if not isinstance(rec.params, dict):
        return f"parameters {rec.params!r} are not a JSON object"
    solver = SOLVERS.get(rec.solver)
    if solver is None:
        return f"unknown solver '{rec.solver}'"
    if problem is None:
        return None
    reason = dict((s.name, r) for s, r in applicable(problem, solver.op, target or parse_target(rec.arch)))
    if rec.solver not in reason:
        return f"solver '{rec.solver}' is for {solver.op}, not this problem"
    if reason[rec.solver]:
        return f"solver '{rec.solver}' does not apply: {reason[rec.solver]}"
    space, default = solver.tunables(problem), solver.default_params(problem, target or parse_target(rec.arch))
    if set(rec.params) != set(default):
        return f"parameters {sorted(rec.params)} are not {rec.solver}'s ({sorted(default)})"
    bad = [k for k, v in rec.params.items() if v != default[k] and v not in space.get(k, ())]
    if bad:
        return f"invalid values of {', '.join(bad)} for {rec.solver}: {params_key(rec.params)}"
    return None


def records(problem, arch: str, target: Target | None = None) -> list[Record]:
    """Every valid record of the problem on arch, user database first, each fastest first. `problem` is a
    problem object (validated against the solvers) or a descriptor string (solver and version checked)."""
    key = problem if isinstance(problem, str) else problem.descriptor()
    obj = None if isinstance(problem, str) else problem
    out = []
    for path, source in ((user_path(), "user"), (SYSTEM_DB, "system")):
        for rec in _rows(path, source, key, arch):
            why = invalid(rec, obj, target)
            if why:
                warn_once(f"tuning database {path}: ignoring the record {rec.solver} {params_key(rec.params)} "
                          f"for {key} on {arch}: {why}")
            else:
                out.append(rec)
    return out


def rank(r) -> tuple:
    """How measurements order, fastest first: ties (timers tick in nanoseconds, tiny kernels tie)
    broken by solver and parameters, so that find and the database always agree on the best."""
    return r.seconds, r.solver, params_key(r.params)


def best(problem, arch: str, target: Target | None = None) -> Record | None:
    """The fastest valid record; a valid one in the user database wins over the system database."""
    found = records(problem, arch, target)
    user = [r for r in found if r.source == "user"]
    return min(user or found, key=rank, default=None)


def record(problem: str, arch: str, solver: str, params: dict, seconds: float, version: str | None = None,
           path: Path | None = None) -> bool:
    """Store one measurement in the user database (replacing the same key). False, with one warning
    per process, when the database cannot be written: tuning then goes on without caching."""
    path = Path(path or user_path())
    if str(path) in _unusable:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = _connect(path, readonly=False)
        try:
            with conn:
                conn.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (problem, arch, solver, params_key(params), float(seconds),
                              version or compiler_version(), time.time()))
        finally:
            conn.close()
        return True
    except OSError as e:
        warn_once(f"tuning database {path}: cannot create its directory ({e.strerror}): results are not cached")
    except sqlite3.DatabaseError as e:  # read-only, corrupt, locked past the timeout: keep the file as it is
        _unusable.add(str(path))
        warn_once(f"tuning database {path} is not writable ({e}): results are not cached")
    return False

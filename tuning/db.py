"""The tuning database: measured times of (problem, target arch, solver, parameters), like MIOpen's find-db.

One SQLite table; a record is keyed by the problem descriptor (solvers/problem.py's descriptor(), the
`prim.problem` attribute), the arch ("cpu:<host cpu>", "nvvm:sm_90", ...), the solver and its parameters
(JSON, sorted keys), and holds the measured seconds, the compiler version and a timestamp. A parameter that
indexes one of the solver's tables of kernel configurations (Solver.tables(), e.g. a tile config) is
stored by its entry's name and read back to the entry's index in the table as it is now: a record keeps
its meaning when a table is reordered or extended, and one whose entry is gone (or that stored an index:
written before names were) is ignored with a warning.

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

import dataclasses
import json
import math
import sqlite3
import time
import warnings
from pathlib import Path

from openprim.base import __version__
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target, parse_target
from openprim.base.settings import user_db_path as user_path
from openprim.solvers import SOLVERS, applicable

from .store import SYSTEM_DB, connect



class TuningDBWarning(UserWarning):
    """A database or a record that is ignored (the compile goes on without it)."""


@dataclasses.dataclass(frozen=True)
class Record:
    problem: str
    arch: str
    solver: str
    params: dict             # the solver's parameters (as stored, table entries by name: _rows, listing)
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


def compiler_version() -> str:
    return __version__


def arch_of(target: Target) -> str:
    """The arch a measurement is valid for, a serialized Target: the host CPU for the CPU target
    (cpu:znver4), else the target itself."""
    return str(target.concrete)


def params_key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def _tables(solver: str) -> dict[str, tuple[str, ...]]:
    return SOLVERS[solver].tables() if solver in SOLVERS else {}


def stored_params(solver: str, params: dict) -> dict:
    """A solver's parameters as the database keeps them: each one that indexes a table, by its entry's name."""
    tables = _tables(solver)
    return {k: tables[k][v] if k in tables else v for k, v in params.items()}


def solver_params(solver: str, stored: dict) -> dict:
    """The solver's parameters of stored ones: each table entry's name back to its index in the table as it is
    now; an OpenPrimError when the table has no such entry."""
    if not isinstance(stored, dict):
        raise OpenPrimError(f"parameters {stored!r} are not a JSON object")
    params = dict(stored)
    for k, names in _tables(solver).items():
        if k not in stored:
            continue
        if stored[k] not in names:
            what = "a table index, not an entry's name" if isinstance(stored[k], int) else "not an entry of its table"
            raise OpenPrimError(f"{k} {json.dumps(stored[k])} of {solver} is {what} ({', '.join(names)})")
        params[k] = names.index(stored[k])
    return params


def _rows(path: Path, source: str, problem: str | None = None, arch: str | None = None) -> list[Record]:
    """The records of a database as stored (of one problem on one arch, when given), fastest first."""
    if str(path) in _unusable or not path.exists():
        return []
    where, args = ("WHERE problem = ? AND arch = ? ", (problem, arch)) if problem is not None else ("", ())
    try:
        conn = connect(path, readonly=source == "system")
        try:
            rows = conn.execute("SELECT problem, arch, solver, params, seconds, version, timestamp FROM records "
                                f"{where}ORDER BY seconds", args).fetchall()
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


def invalid(rec: Record, problem=None, target: Target | None = None) -> str | None:
    """Why a stored record cannot be used (None: it can). With the problem object and the target, the solver
    must apply to it and its parameters must be among the solver's tunables (or its default)."""
    if rec.version != compiler_version():
        return f"made by compiler version {rec.version}, this is {compiler_version()}"
    if not (isinstance(rec.seconds, (int, float)) and math.isfinite(rec.seconds) and rec.seconds > 0):
        return f"time {rec.seconds!r} is not a positive number of seconds"
    solver = SOLVERS.get(rec.solver)
    if solver is None:
        return f"unknown solver '{rec.solver}'"
    try:
        params = solver_params(rec.solver, rec.params)
    except OpenPrimError as e:
        return str(e)
    if problem is None:
        return None
    if solver.op != problem.op:
        return f"solver '{rec.solver}' is for {solver.op}, not {problem.op}"
    target = target or parse_target(rec.arch)
    reason = dict((s.name, r) for s, r in applicable(problem, solver.op, target))[rec.solver]
    if reason:
        return f"solver '{rec.solver}' does not apply: {reason}"
    space, default = solver.tunables(problem), solver.default_params(problem, target)
    if set(params) != set(default):
        return f"parameters {sorted(params)} are not {rec.solver}'s ({sorted(default)})"
    bad = [k for k, v in params.items() if v != default[k] and v not in space.get(k, ())]
    if bad:
        return f"invalid values of {', '.join(bad)} for {rec.solver}: {params_key(rec.params)}"
    return None


def records(problem, arch: str, target: Target | None = None) -> list[Record]:
    """Every valid record of the problem on arch with the solver's parameters, user database first, each
    fastest first. `problem` is a problem object (validated against the solvers) or a descriptor string
    (solver, parameters and version checked)."""
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
                out.append(dataclasses.replace(rec, params=solver_params(rec.solver, rec.params)))
    return out


def listing(problem: str | None = None) -> list[Record]:
    """Every record as stored (of one problem descriptor, when given), user database first, each by problem,
    arch and time."""
    out = []
    for path, source in ((user_path(), "user"), (SYSTEM_DB, "system")):
        out += sorted((r for r in _rows(path, source) if problem in (None, r.problem)),
                      key=lambda r: (r.problem, r.arch, r.seconds))
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


def _write(path: Path, row: tuple | list | None) -> str | None:
    """Stores `row` (a list: every row, in one transaction) in the database at `path` (None: only takes its
    write lock); why it cannot (None: done)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(path, readonly=False)
        try:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                if row is not None:
                    conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
                                     row if isinstance(row, list) else [row])
        finally:
            conn.close()
        return None
    except OSError as e:
        return f": cannot create its directory ({e.strerror})"
    except sqlite3.DatabaseError as e:  # read-only, corrupt, locked past the timeout: keep the file as it is
        _unusable.add(str(path))
        return f" is not writable ({e})"


def unwritable(path: Path | None = None) -> str | None:
    """Why the user database cannot store records, one line (None: it can; an absent one is created)."""
    path = Path(path or user_path())
    why = _write(path, None)
    return why and f"tuning database {path}{why}"


def record(problem: str, arch: str, solver: str, params: dict, seconds: float, version: str | None = None,
           path: Path | None = None) -> bool:
    """Store one measurement (the solver's parameters) in the user database, replacing the same key. False,
    with one warning per process, when the database cannot be written: tuning then goes on without caching."""
    path = Path(path or user_path())
    if str(path) in _unusable:
        return False
    why = _write(path, (problem, arch, solver, params_key(stored_params(solver, params)), float(seconds),
                        version or compiler_version(), time.time()))
    if why:
        warn_once(f"tuning database {path}{why}: results are not cached")
    return why is None


def record_many(rows: list[tuple], path: Path | None = None) -> str | None:
    """Store measurements (problem, arch, solver, the solver's parameters, seconds[, version]) in the user
    database (or the one at `path`) in one transaction: all of them or none, each replacing the record of the
    same key (the table's primary key: a record exists once). Why they could not be (None: stored)."""
    path = Path(path or user_path())
    out = [(p, a, s, params_key(stored_params(s, params)), float(sec), (v[0] if v else compiler_version()), time.time())
           for p, a, s, params, sec, *v in rows]
    why = _write(path, out) if out else None
    return why and f"tuning database {path}{why}"


def stored(problem, arch: str, target: Target | None = None, path: Path | None = None) -> list[Record]:
    """The valid records of a problem object on arch in the user database (or the one at `path`) alone, with
    the solver's parameters: what a resumed tuning run has measured already (invalid ones are left out)."""
    path = Path(path or user_path())
    return [dataclasses.replace(r, params=solver_params(r.solver, r.params))
            for r in _rows(path, "user", problem.descriptor(), arch) if invalid(r, problem, target) is None]

"""A shippable tuning database: `openprim db export PATH` writes the records of a database to one versioned JSON
file, `openprim db import PATH` validates such a file and merges it into the user database, a named one
(--db), or the package's system database (--system: tuning/data/tuning.sqlite, which ships with the package;
MIOpen's perf-db workflow: a fleet fills a database, it is exported, and imported where it is shipped).

The file:
    {"format": "openprim-tuning-db", "version": 1, "compiler": "0.1.0", "created": <unix time>,
     "solvers": {solver: sha256 of its identity: op, directions, targets and tables()},
     "records": [{"problem": descriptor, "arch": "cpu:znver4" | "nvvm:sm_90" | ..., "solver": name,
                  "params": {as the database stores them: a table entry by name}, "seconds": s,
                  "version": compiler version, "timestamp": t, "tunables": sha256 of the solver's tunables
                  for this problem}]}

A record's parameters only mean what they meant when it was measured if the solver still has the same
tables and the same tunables for that problem: a file whose digests differ from this OpenPrim's solvers is
refused, whole, naming the solvers that changed (tune them again). Every record is also checked as a compile
would use it (db.invalid: the descriptor parses, the solver exists and applies, the parameters are among its
tunables, the compiler version, a positive time). Import is all or nothing: a file that does not parse, has
another format or version, or one bad record is one error line, and the database is left untouched; the
records are written in one transaction (each key once: the table's primary key). Export writes a temporary
file and renames it over PATH.
"""
from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import time
from pathlib import Path

from openprim.base.errors import OpenPrimError
from openprim.base.files import atomic_file, read_json
from openprim.base.target import parse_target
from openprim.solvers import SOLVERS
from openprim.solvers.problem import parse_descriptor

from . import db as tuning_db
from .store import connect

FORMAT = "openprim-tuning-db"
VERSION = 1
FIELDS = {"problem": str, "arch": str, "solver": str, "params": dict, "seconds": (int, float), "version": str,
          "timestamp": (int, float), "tunables": str}


def _sha(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=list).encode()).hexdigest()


def solver_digest(name: str) -> str:
    """A sha256 of what a solver's stored parameters depend on beyond the problem: its op, directions, targets
    and tables (the entries a table parameter names)."""
    s = SOLVERS[name]
    return _sha({"name": name, "op": s.op, "directions": list(s.directions), "targets": list(s.targets),
                 "tables": {k: list(v) for k, v in s.tables().items()}})


def tunables_digest(name: str, problem) -> str:
    """A sha256 of the solver's tunables (parameter -> candidate values) for the problem."""
    return _sha({k: list(v) for k, v in SOLVERS[name].tunables(problem).items()})


def _read_rows(path: Path) -> list[tuple]:
    if not path.is_file():
        raise OpenPrimError(f"{path}: no tuning database there")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT problem, arch, solver, params, seconds, version, timestamp FROM records "
                                "ORDER BY problem, arch, solver, params").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise OpenPrimError(f"{path}: not a readable tuning database ({e})") from None


def export(out: str, source=None) -> tuple[int, int]:
    """Write the valid records of the database at `source` (default: the user database) to the file `out`;
    (records written, records left out because a compile would ignore them)."""
    path = Path(source or tuning_db.user_path())
    records, skipped, solvers = [], 0, {}
    for problem, arch, solver, params, seconds, version, timestamp in _read_rows(path):
        try:
            stored = json.loads(params)
            prob = parse_descriptor(problem)
            rec = tuning_db.Record(problem, arch, solver, stored, seconds, version, timestamp)
            why = tuning_db.invalid(rec, prob, parse_target(arch))
        except (OpenPrimError, ValueError, TypeError):
            why = "unreadable"
        if why:
            skipped += 1
            continue
        solvers.setdefault(solver, solver_digest(solver))
        records.append(dict(problem=problem, arch=arch, solver=solver, params=stored, seconds=seconds,
                            version=version, timestamp=timestamp, tunables=tunables_digest(solver, prob)))
    data = dict(format=FORMAT, version=VERSION, compiler=tuning_db.compiler_version(), created=time.time(),
                solvers=dict(sorted(solvers.items())), records=records)
    with atomic_file(out, "w", "db export") as f:
        json.dump(data, f, indent=1)
    return len(records), skipped


def read(path: str, data=None) -> list[tuple]:
    """The records of an export file, validated (module docstring), as record_many rows; an OpenPrimError,
    one line, when the file or any record is not valid. `data`: the file's JSON, when read already."""
    if data is None:
        data = read_json(path, "a tuning database export")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise OpenPrimError(f"{path}: not a tuning database export (format {FORMAT})")
    if data.get("version") != VERSION:
        raise OpenPrimError(f"{path}: format version {data.get('version')!r} of {FORMAT}; this OpenPrim reads "
                            f"version {VERSION} (export it again with this version)")
    solvers, records = data.get("solvers"), data.get("records")
    if not isinstance(solvers, dict) or not all(isinstance(v, str) for v in solvers.values()) or \
            not isinstance(records, list):
        raise OpenPrimError(f"{path}: corrupt tuning database export ('solvers' must map names to digests, "
                            f"'records' must be a list)")
    changed = sorted(name for name, d in solvers.items() if name not in SOLVERS or solver_digest(name) != d)
    rows, changed_records = [], 0
    for i, r in enumerate(records):
        where = f"{path}: record {i + 1}"
        if not isinstance(r, dict) or any(not isinstance(r.get(k), t) or isinstance(r.get(k), bool)
                                          for k, t in FIELDS.items()):
            raise OpenPrimError(f"{where}: corrupt (a record has {', '.join(FIELDS)} of the right types)")
        if r["solver"] not in solvers:
            raise OpenPrimError(f"{where}: solver '{r['solver']}' has no digest in the file")
        try:
            problem = parse_descriptor(r["problem"])
            target = parse_target(r["arch"])
        except OpenPrimError as e:
            raise OpenPrimError(f"{where}: {e}") from None
        if r["solver"] in changed or tunables_digest(r["solver"], problem) != r["tunables"]:
            changed_records += 1
            if r["solver"] not in changed:
                changed.append(r["solver"])
            continue
        if not (math.isfinite(r["seconds"]) and r["seconds"] > 0):
            raise OpenPrimError(f"{where}: time {r['seconds']!r} is not a positive number of seconds")
        rec = tuning_db.Record(r["problem"], r["arch"], r["solver"], r["params"], float(r["seconds"]), r["version"],
                               r["timestamp"])
        why = tuning_db.invalid(rec, problem, target)
        if why:
            raise OpenPrimError(f"{where} ({r['problem']} {r['solver']}): would never be used: {why}")
        rows.append((r["problem"], r["arch"], r["solver"], tuning_db.solver_params(r["solver"], r["params"]),
                     float(r["seconds"]), r["version"]))
    if changed:
        many = changed_records != 1
        raise OpenPrimError(f"{path}: {changed_records} record{'s' if many else ''} of "
                            f"{'solvers' if many else 'a solver'} that changed since the export "
                            f"({', '.join(sorted(set(changed)))}: their tables or tunables differ, so their parameters "
                            f"may mean something else); nothing imported: tune them again")
    return rows


def import_file(path: str, dest=None, system: bool = False, data=None) -> tuple[int, Path]:
    """Merge a validated export file into the user database, the one at `dest`, or (system) the package's
    system database, in one transaction; (records, the database)."""
    rows = read(path, data)
    target = Path(tuning_db.SYSTEM_DB if system else dest or tuning_db.user_path())
    why = tuning_db.unwritable(target)
    if why:
        raise OpenPrimError(f"{why}: nothing imported")
    why = tuning_db.record_many(rows, target)
    if why:
        raise OpenPrimError(f"{why}: nothing imported")
    if system:   # a file that ships: no write-ahead log beside it (the package reads it immutable)
        conn = connect(target, readonly=False)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode=DELETE")
        finally:
            conn.close()
    return len(rows), target

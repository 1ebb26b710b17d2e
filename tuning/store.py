"""The tuning database's storage: where the databases are, the table, connections, and a digest of the
records. Plain sqlite, no MLIR and no solver: the compile cache (driver/cache.py) keys on `digest()` of
both databases on a machine that may have no MLIR; db.py validates records against the solvers."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

SYSTEM_DB = Path(__file__).parent / "data" / "tuning.sqlite"
SCHEMA = """CREATE TABLE IF NOT EXISTS records (
    problem TEXT NOT NULL, arch TEXT NOT NULL, solver TEXT NOT NULL, params TEXT NOT NULL,
    seconds REAL NOT NULL, version TEXT NOT NULL, timestamp REAL NOT NULL,
    PRIMARY KEY (problem, arch, solver, params))"""
BUSY_TIMEOUT_S = 30.0


def connect(path: Path, readonly: bool) -> sqlite3.Connection:
    """A connection: read-only (the system database, shipped in the package), or in WAL mode with the table
    created, so that several processes may tune into one database at once."""
    if readonly:
        return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, timeout=BUSY_TIMEOUT_S)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    _to_wal(conn)
    conn.execute(SCHEMA)
    return conn


def _to_wal(conn: sqlite3.Connection) -> None:
    """Switch to the WAL journal. SQLite answers "database is locked" at once, without its busy handler, when
    another process holds the file while it is being created or switched; so wait for it here, as the busy
    timeout would."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                conn.close()
                raise
            time.sleep(pause)
            pause = min(2 * pause, 0.05)


def digest(path: Path) -> str:
    """A sha256 of the records selection may read from the database at `path` (the timestamps left out), or
    why there are none: "none" (no file), "unusable" (selection ignores it, so must a key built on it)."""
    if not path.is_file():
        return "none"
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            rows = conn.execute("SELECT problem, arch, solver, params, seconds, version FROM records "
                                "ORDER BY problem, arch, solver, params").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return "unusable"
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()

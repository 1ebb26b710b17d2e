"""The environment variables that change what a compile produces: each spelled once, here, and read through
`setting`; `compile_environment()` is what the compile cache keys on (driver/cache.py), so a new variable
added to COMPILE_ENV cannot be forgotten by the cache.

    OPENPRIM_SOLVER        force one solver for every convolution/GEMM (passes/prim_select.py)
    OPENPRIM_FIND_MODE     immediate | find | hybrid (prim_select.find_mode)
    OPENPRIM_FIND_ENFORCE  hybrid mode's searches, after MIOPEN_FIND_ENFORCE (prim_select.find_enforce)
    OPENPRIM_ALLOW_TF32    1: f32 GEMMs may run on tensor cores in TF32 (solvers/nvidia.py)
    OPENPRIM_USER_DB_PATH  the user's tuning database (tuning/store.py), whose records the cache keys on too
"""
from __future__ import annotations

import os
from pathlib import Path

SOLVER = "OPENPRIM_SOLVER"
FIND_MODE = "OPENPRIM_FIND_MODE"
FIND_ENFORCE = "OPENPRIM_FIND_ENFORCE"
ALLOW_TF32 = "OPENPRIM_ALLOW_TF32"
USER_DB_PATH = "OPENPRIM_USER_DB_PATH"
COMPILE_ENV = (SOLVER, FIND_MODE, FIND_ENFORCE, ALLOW_TF32)


def setting(name: str) -> str:
    """The value of one of COMPILE_ENV ("" when unset)."""
    assert name in COMPILE_ENV, name
    return os.environ.get(name, "")


def compile_environment() -> dict[str, str]:
    return {name: setting(name) for name in COMPILE_ENV}


def user_db_path() -> Path:
    """$OPENPRIM_USER_DB_PATH, else ~/.cache/openprim/tuning.sqlite."""
    return Path(os.environ.get(USER_DB_PATH) or Path.home() / ".cache" / "openprim" / "tuning.sqlite")

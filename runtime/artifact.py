"""The `.oprim` artifact: one file that runs with numpy and ctypes alone (no MLIR).

A zip archive (stored, not compressed) with three members:
  manifest.json  format tag and version, compiler version, target, host CPU of the build, and the plan
                 (values with their storage, inputs, outputs, kernel launch order; see driver/plan.py)
  kernels.so     the kernels as a native shared library, `void kernel(T *arg0, ..., T *out)` each
  weights.bin    every constant, 64-byte aligned at the offsets the plan gives
Writes are atomic (temporary file + rename); a truncated, corrupt or foreign file is refused with one
line that says what is wrong.
"""
from __future__ import annotations

import json
import os
import platform
import tempfile
import zipfile

from openprim.errors import OpenPrimError

from .executor import CpuExecutable

FORMAT = "openprim-artifact"
VERSION = 1
MEMBERS = ("manifest.json", "kernels.so", "weights.bin")


def write(path: str, plan: dict, kernels: bytes, weights: bytes, meta: dict) -> None:
    manifest = {"format": FORMAT, "version": VERSION, **meta, "plan": plan}
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".oprim-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            z.writestr("manifest.json", json.dumps(manifest, indent=1))
            z.writestr("kernels.so", kernels)
            z.writestr("weights.bin", weights)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read(path: str) -> tuple[dict, bytes, bytes]:
    """(manifest, kernels.so bytes, weights bytes), validated."""
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            missing = [m for m in MEMBERS if m not in names]
            if missing:
                raise OpenPrimError(f"{path}: not an OpenPrim artifact (missing {', '.join(missing)})")
            bad = z.testzip()
            if bad:
                raise OpenPrimError(f"{path}: corrupt artifact (checksum mismatch in {bad})")
            manifest = json.loads(z.read("manifest.json"))
            kernels, weights = z.read("kernels.so"), z.read("weights.bin")
    except FileNotFoundError:
        raise OpenPrimError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, EOFError, json.JSONDecodeError, OSError) as e:
        raise OpenPrimError(f"{path}: not a valid OpenPrim artifact ({e})") from None
    if manifest.get("format") != FORMAT:
        raise OpenPrimError(f"{path}: not an OpenPrim artifact (format {manifest.get('format')!r})")
    if manifest.get("version") != VERSION:
        raise OpenPrimError(f"{path}: artifact format version {manifest.get('version')} is not supported "
                            f"(this runtime reads version {VERSION}); recompile the model")
    plan = manifest["plan"]
    if len(weights) != plan["weights_bytes"]:
        raise OpenPrimError(f"{path}: corrupt artifact (weights are {len(weights)} bytes, expected {plan['weights_bytes']})")
    return manifest, kernels, weights


def load(path: str) -> CpuExecutable:
    """An executable for the artifact on this machine's CPU."""
    manifest, kernels, weights = read(path)
    target = manifest.get("target")
    if target != "cpu":
        raise OpenPrimError(f"{path}: compiled for target '{target}'; this runtime runs 'cpu' artifacts")
    if manifest.get("machine") != platform.machine():
        raise OpenPrimError(f"{path}: compiled for {manifest.get('machine')}, this machine is {platform.machine()}")
    from . import cpu
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
        f.write(kernels)
    try:
        lib, address = cpu.load_library(f.name)
    finally:
        os.unlink(f.name)  # the mapping stays valid after unlink
    exe = CpuExecutable(manifest["plan"], address, weights, keepalive=lib)
    exe.manifest = manifest
    return exe

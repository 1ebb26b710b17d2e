"""The `.oprim` artifact: one file that runs with numpy and ctypes alone (no MLIR).

A zip archive (stored, not compressed) with these members:
  manifest.json  format tag and version, compiler version, target, host CPU of the build, and the plan
                 (values with their storage, inputs, outputs, kernel launch order, and for GPU targets
                 each kernel's launches: grid, block, arguments; see driver/plan.py)
  weights.bin    every constant, 64-byte aligned at the offsets the plan gives
  the kernels, by target:
    cpu     kernels.so     a native shared library, `void kernel(T *arg0, ..., T *out)` each
    nvvm    kernels.ptx    PTX of every kernel (the driver compiles it for the GPU it finds)
            kernels.cubin  the same kernels assembled by ptxas for the exact chip (when ptxas was found)
    rocdl   kernels.hsaco  an AMDGPU code object (ELF) for the chip
Writes are atomic (temporary file + rename); a truncated, corrupt or foreign file is refused with one
line that says what is wrong.
"""
from __future__ import annotations

import json
import os
import platform
import tempfile
import zipfile

from openprim.base.errors import OpenPrimError

from openprim.base.target import parse_target

from . import cpu
from .executor import CpuExecutable
from .gpu import GpuExecutable, open_device

FORMAT = "openprim-artifact"
VERSION = 1
MEMBERS = ("manifest.json", "weights.bin")
KERNELS = {"cpu": ("kernels.so",), "nvvm": ("kernels.ptx",), "rocdl": ("kernels.hsaco",)}  # required per target


def write(path: str, plan: dict, kernels: dict[str, bytes], weights: bytes, meta: dict) -> None:
    """kernels: member name -> bytes (see the table above)."""
    manifest = {"format": FORMAT, "version": VERSION, **meta, "kernel_files": sorted(kernels), "plan": plan}
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".oprim-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            z.writestr("manifest.json", json.dumps(manifest, indent=1))
            for name, data in kernels.items():
                z.writestr(name, data)
            z.writestr("weights.bin", weights)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read(path: str) -> tuple[dict, dict[str, bytes], bytes]:
    """(manifest, {kernel member: bytes}, weights bytes), validated."""
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
            try:
                kind = parse_target(manifest.get("target", "")).kind
            except OpenPrimError as e:
                raise OpenPrimError(f"{path}: {e}") from None
            missing = [m for m in KERNELS[kind] if m not in names]
            if missing:
                raise OpenPrimError(f"{path}: not an OpenPrim artifact (missing {', '.join(missing)})")
            kernels = {m: z.read(m) for m in manifest.get("kernel_files", []) if m in names}
            weights = z.read("weights.bin")
    except FileNotFoundError:
        raise OpenPrimError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, EOFError, json.JSONDecodeError, OSError) as e:
        raise OpenPrimError(f"{path}: not a valid OpenPrim artifact ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise OpenPrimError(f"{path}: not an OpenPrim artifact (format {manifest.get('format')!r})")
    if manifest.get("version") != VERSION:
        raise OpenPrimError(f"{path}: artifact format version {manifest.get('version')} is not supported "
                            f"(this runtime reads version {VERSION}); recompile the model")
    plan = manifest.get("plan")
    if not isinstance(plan, dict) or "weights_bytes" not in plan:
        raise OpenPrimError(f"{path}: corrupt artifact (the manifest has no valid plan)")
    if len(weights) != plan["weights_bytes"]:
        raise OpenPrimError(f"{path}: corrupt artifact (weights are {len(weights)} bytes, expected {plan['weights_bytes']})")
    return manifest, kernels, weights


def load(path: str, device: int = 0):
    """An executable for the artifact: on this machine's CPU, or on GPU `device` for a GPU target."""
    manifest, kernels, weights = read(path)
    target = parse_target(manifest.get("target"))
    if target.is_gpu:
        dev = open_device(target, device)
        arch = dev.arch()
        image = kernels["kernels.cubin"] if manifest.get("cubin_arch") == arch and "kernels.cubin" in kernels \
            else kernels[KERNELS[target.kind][0]]
        exe = GpuExecutable(manifest["plan"], image, weights, dev)
        exe.manifest = manifest
        return exe
    if manifest.get("machine") != platform.machine():
        raise OpenPrimError(f"{path}: compiled for {manifest.get('machine')}, this machine is {platform.machine()}")
    lib, address = cpu.load_library(kernels["kernels.so"])
    exe = CpuExecutable(manifest["plan"], address, weights, keepalive=lib)
    exe.manifest = manifest
    return exe

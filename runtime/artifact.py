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
line that says what is wrong. The manifest is validated as a whole before anything is allocated or run
(runtime/manifest.py): memory offsets, step arguments against each kernel's recorded signature, launch
dimensions, kernel names present in the code object; then what this machine must have to run it: the
CPU's instruction set extensions and enough host memory.
"""
from __future__ import annotations

import json
import platform
import zipfile

from openprim.base.errors import OpenPrimError
from openprim.base.files import atomic_file

from openprim.base.target import parse_target

from . import cpu, manifest as manifest_check
from .executor import CpuExecutable
from .gpu import GpuExecutable, open_device

FORMAT = "openprim-artifact"
VERSION = 2  # 2: kernel signatures, member digests, the CPU features the code needs (runtime/manifest.py)
MEMBERS = ("manifest.json", "weights.bin")
KERNELS = {"cpu": ("kernels.so",), "nvvm": ("kernels.ptx",), "rocdl": ("kernels.hsaco",)}  # required per target


def write(path: str, plan: dict, kernels: dict[str, bytes], weights: bytes, meta: dict) -> None:
    """kernels: member name -> bytes (see the table above)."""
    manifest = {"format": FORMAT, "version": VERSION, **meta, "kernel_files": sorted(kernels),
                "signatures": manifest_check.signature(plan),
                "members": manifest_check.member_digests({**kernels, "weights.bin": weights}), "plan": plan}
    manifest["digest"] = manifest_check.manifest_digest(manifest)
    with atomic_file(path, "wb", "artifact") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=1))
        for name, data in kernels.items():
            z.writestr(name, data)
        z.writestr("weights.bin", weights)


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
            if not isinstance(manifest, dict):
                raise OpenPrimError(f"{path}: not an OpenPrim artifact (the manifest is not a JSON object)")
            try:
                kind = parse_target(manifest.get("target", "")).kind
            except OpenPrimError as e:
                raise OpenPrimError(f"{path}: {e}") from None
            missing = [m for m in KERNELS[kind] if m not in names]
            if missing:
                raise OpenPrimError(f"{path}: not an OpenPrim artifact (missing {', '.join(missing)})")
            files = manifest.get("kernel_files", [])
            if not isinstance(files, list) or not all(isinstance(m, str) for m in files):
                raise OpenPrimError(f"{path}: corrupt artifact (kernel_files is not a list of member names)")
            kernels = {m: z.read(m) for m in files if m in names}
            weights = z.read("weights.bin")
    except FileNotFoundError:
        raise OpenPrimError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise OpenPrimError(f"{path}: is a directory, not an .oprim artifact") from None
    except (zipfile.BadZipFile, EOFError, json.JSONDecodeError, UnicodeDecodeError, OSError, ValueError,
            NotImplementedError, RuntimeError) as e:  # zipfile: bad headers, unsupported compression, encryption
        raise OpenPrimError(f"{path}: not a valid OpenPrim artifact ({e})") from None
    if manifest.get("format") != FORMAT:
        raise OpenPrimError(f"{path}: not an OpenPrim artifact (format {manifest.get('format')!r})")
    if manifest.get("version") != VERSION:
        raise OpenPrimError(f"{path}: artifact format version {manifest.get('version')} is not supported "
                            f"(this runtime reads version {VERSION}); recompile the model")
    plan = manifest.get("plan")
    if not isinstance(plan, dict):
        raise OpenPrimError(f"{path}: corrupt artifact (the manifest has no valid plan)")
    try:
        manifest_check.validate(manifest, kernels, weights, parse_target(manifest["target"]))
    except OpenPrimError as e:
        raise OpenPrimError(f"{path}: corrupt artifact ({e})") from None
    return manifest, kernels, weights


def load(path: str, device: int = 0, graphs: bool | None = None):
    """An executable for the artifact: on this machine's CPU, or on GPU `device` for a GPU target
    (graphs: replay its launches as a CUDA/HIP graph; None: unless OPENPRIM_GPU_GRAPHS=0)."""
    manifest, kernels, weights = read(path)
    target = parse_target(manifest.get("target"))
    if target.is_gpu:
        dev = open_device(target, device)
        arch = dev.arch()
        image = kernels["kernels.cubin"] if manifest.get("cubin_arch") == arch and "kernels.cubin" in kernels \
            else kernels[KERNELS[target.kind][0]]
        exe = GpuExecutable(manifest["plan"], image, weights, dev, graphs=graphs)
        exe.manifest = manifest
        return exe
    if manifest.get("machine") != platform.machine():
        raise OpenPrimError(f"{path}: compiled for {manifest.get('machine')}, this machine is {platform.machine()}")
    try:
        manifest_check.check_cpu(manifest)
    except OpenPrimError as e:
        raise OpenPrimError(f"{path}: {e}") from None
    short = manifest_check.memory_shortfall(manifest_check.host_sizes(manifest["plan"]))
    if short:
        raise OpenPrimError(f"{path}: cannot run here: it {short}")
    try:
        lib, address = cpu.load_library(kernels["kernels.so"])
    except OSError as e:
        raise OpenPrimError(f"{path}: kernels.so cannot be loaded ({e})") from None
    exe = CpuExecutable(manifest["plan"], address, weights, keepalive=lib)
    exe.manifest = manifest
    return exe

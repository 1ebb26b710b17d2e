"""The `.oprim` artifact: one file that runs with numpy and ctypes alone (no MLIR).

A zip archive (stored, not compressed) with these members:
  manifest.json  format tag and version, compiler version, target, host CPU of the build, and the plan
                 (values with their storage, inputs, outputs, kernel launch order, and for GPU targets
                 each kernel's launches: grid, block, arguments; see driver/plan.py)
  weights.bin    every constant, 64-byte aligned at the offsets the plan gives
  params.bin     (weights as values: format version 3) the parameters' initial data, at the offsets of the
                 plan's params region; the executable holds a copy that `load_weights` replaces
  the kernels, by target: kernel_files.py's table (kernels.so; kernels.ptx and a kernels.cubin; kernels.hsaco)
Writes are atomic (temporary file + rename); a truncated, corrupt or foreign file is refused with one
line that says what is wrong. The manifest is validated as a whole before anything is allocated or run
(runtime/manifest.py): memory offsets, step arguments against each kernel's recorded signature, launch
dimensions, kernel names present in the code object; then what this machine must have to run it: the
CPU's instruction set extensions and enough host memory.
"""
from __future__ import annotations

import json
import zipfile

from openprim.base.errors import OpenPrimError
from openprim.base.files import atomic_file

from openprim.base.target import Target, parse_target

from . import kernel_files, manifest as manifest_check
from .executable import build_executable

FORMAT = "openprim-artifact"
VERSION = 2  # 2: kernel signatures, member digests, the CPU features the code needs (runtime/manifest.py)
PARAMS_VERSION = 3  # 3: weights as values: the plan's "params", the params.bin member. Only an artifact with
#                     parameters has it, so that a runtime that reads version 2 only refuses it by its version
STATE_VERSION = 4  # 4: state carried between calls (the plan's "state"), with or without parameters
VERSIONS = (VERSION, PARAMS_VERSION, STATE_VERSION)
MEMBERS = ("manifest.json", "weights.bin")
PARAMS = "params.bin"


def write(path: str, plan: dict, kernels: dict[str, bytes], weights: bytes, meta: dict, params: bytes = b"") -> None:
    """kernels: member name -> bytes (see the table above); params: the params region's initial bytes, for
    a plan with parameters (driver/plan.py: params_blob)."""
    members = {**kernels, "weights.bin": weights, **({PARAMS: params} if "params" in plan else {})}
    version = STATE_VERSION if "state" in plan else PARAMS_VERSION if "params" in plan else VERSION
    manifest = {"format": FORMAT, "version": version, **meta,
                "kernel_files": sorted(kernels), "signatures": manifest_check.signature(plan),
                "members": manifest_check.member_digests(members), "plan": plan}
    manifest["digest"] = manifest_check.manifest_digest(manifest)
    with atomic_file(path, "wb", "artifact") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=1))
        for name, data in kernels.items():
            z.writestr(name, data)
        z.writestr("weights.bin", weights)
        if "params" in plan:
            z.writestr(PARAMS, params)


def read(path: str) -> tuple[dict, dict[str, bytes], bytes]:
    """(manifest, {kernel member: bytes}, weights bytes), validated."""
    return _read(path)[:3]


def _read(path: str) -> tuple[dict, dict[str, bytes], bytes, Target, bytes]:
    """read(path), the target the manifest names and the params region's initial bytes."""
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
                target = parse_target(manifest.get("target", ""))
            except OpenPrimError as e:
                raise OpenPrimError(f"{path}: {e}") from None
            if kernel_files.REQUIRED[target.kind] not in names:
                raise OpenPrimError(f"{path}: not an OpenPrim artifact (missing {kernel_files.REQUIRED[target.kind]})")
            files = manifest.get("kernel_files", [])
            if not isinstance(files, list) or not all(isinstance(m, str) for m in files):
                raise OpenPrimError(f"{path}: corrupt artifact (kernel_files is not a list of member names)")
            kernels = {m: z.read(m) for m in files if m in names}
            weights = z.read("weights.bin")
            params = z.read(PARAMS) if PARAMS in names else b""
    except FileNotFoundError:
        raise OpenPrimError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise OpenPrimError(f"{path}: is a directory, not an .oprim artifact") from None
    except (zipfile.BadZipFile, EOFError, json.JSONDecodeError, UnicodeDecodeError, OSError, ValueError,
            NotImplementedError, RuntimeError) as e:  # zipfile: bad headers, unsupported compression, encryption
        raise OpenPrimError(f"{path}: not a valid OpenPrim artifact ({e})") from None
    if manifest.get("format") != FORMAT:
        raise OpenPrimError(f"{path}: not an OpenPrim artifact (format {manifest.get('format')!r})")
    version = manifest.get("version")
    if version not in VERSIONS:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > max(VERSIONS)
        raise OpenPrimError(f"{path}: artifact format version {version} is not supported (this runtime reads "
                            f"versions {', '.join(map(str, VERSIONS))}); "
                            f"{'update OpenPrim, or ' if newer else ''}recompile the model")
    plan = manifest.get("plan")
    if not isinstance(plan, dict):
        raise OpenPrimError(f"{path}: corrupt artifact (the manifest has no valid plan)")
    if ("state" in plan) != (version == STATE_VERSION) or \
            (version != STATE_VERSION and ("params" in plan) != (version == PARAMS_VERSION)):
        raise OpenPrimError(f"{path}: corrupt artifact (format version {version} does not match whether the plan "
                            f"has params ({'params' in plan}) and state ({'state' in plan}))")
    try:
        manifest_check.validate(manifest, kernels, weights, target, params)
    except OpenPrimError as e:
        raise OpenPrimError(f"{path}: corrupt artifact ({e})") from None
    return manifest, kernels, weights, target, params


def load(path: str, device: int = 0, graphs: bool | None = None):
    """An executable for the artifact: on this machine's CPU, or on GPU `device` for a GPU target
    (graphs: replay its launches as a CUDA/HIP graph; None: unless OPENPRIM_GPU_GRAPHS=0)."""
    manifest, kernels, weights, target, params = _read(path)
    exe = build_executable(target, manifest["plan"], kernels, weights, manifest, device, graphs, path, params)
    exe.manifest = manifest
    return exe

"""The `.oprim` artifact: one file that runs with numpy and ctypes alone (no MLIR).

A zip archive (stored, not compressed) with these members:
  manifest.json  format tag and version, compiler version, target, host CPU of the build, and the plan
                 (values with their storage, inputs, outputs, kernel launch order, and for GPU targets
                 each kernel's launches: grid, block, arguments; see driver/plan.py)
  weights.bin    every constant, 64-byte aligned at the offsets the plan gives
  params.bin     (weights as values: format version 3) the parameters' initial data, at the offsets of the
                 plan's params region; the executable holds a copy that `load_weights` replaces
  the kernels, by target: kernel_files.py's table (kernels.so; kernels.ptx and a kernels.cubin; kernels.hsaco)
A dynamic artifact (version 5, runtime/dynamic.py) holds, instead of one plan and its kernels, a
bucket-B/ folder per bucket B of its dynamic dimension with that bucket's manifest.json (a version-2
manifest whose weights.bin is the pooled one) and kernels; its own manifest names the buckets, the
dimension (the "dynamic" entry) and every member's digest.
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

from . import dynamic, kernel_files, manifest as manifest_check
from .executable import build_executable
from .executor import same_state_layout
from .generation import Decoder
from .gpu import DeviceWeights, open_device

FORMAT = "openprim-artifact"
VERSION = 2  # 2: kernel signatures, member digests, the CPU features the code needs (runtime/manifest.py)
PARAMS_VERSION = 3  # 3: weights as values: the plan's "params", the params.bin member. Only an artifact with
#                     parameters has it, so that a runtime that reads version 2 only refuses it by its version
STATE_VERSION = 4  # 4: state carried between calls (the plan's "state"), with or without parameters
DYNAMIC_VERSION = 5  # 5: a dynamic dimension, one plan per bucket (runtime/dynamic.py): the manifest's "dynamic"
#                      and "buckets"; each bucket's manifest and kernels under bucket-B/, weights.bin the pool
VERSIONS = (VERSION, PARAMS_VERSION, STATE_VERSION, DYNAMIC_VERSION)
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


def write_dynamic(path: str, spec: dict, buckets: dict[int, tuple[dict, dict[str, bytes], bytes, dict]]) -> int:
    """One artifact for a dynamic dimension (runtime/dynamic.py's spec) from each bucket's (plan, kernels,
    weights, meta): the weights pooled, each bucket's manifest and kernels under bucket-B/. Returns the
    pool's size in bytes."""
    order = sorted(buckets)
    if any("params" in buckets[b][0] for b in order):
        raise OpenPrimError("a dynamic artifact cannot hold parameters (weights='values') yet; compile one "
                            "artifact per size")
    stateful = [b for b in order if "state" in buckets[b][0]]
    if stateful and "decoder" not in spec:
        raise OpenPrimError("a dynamic artifact holds carried state only as a decoder's (its buckets share one "
                            "state: openprim.decoding.Decoder.save); compile one artifact per size")
    if stateful and (len(stateful) != len(order) or any(same_state_layout(buckets[b][0], buckets[order[0]][0])
                                                         for b in order)):
        raise OpenPrimError("a decoder artifact's buckets must carry the same state (names, shapes, dtypes)")
    plans, pool = dynamic.pool_weights([(buckets[b][0], buckets[b][2]) for b in order])
    members = {"weights.bin": pool}
    for b, plan in zip(order, plans):
        kernels, meta = buckets[b][1], buckets[b][3]
        inner = {"format": FORMAT, "version": VERSION, **meta, "kernel_files": sorted(kernels),
                 "signatures": manifest_check.signature(plan),
                 "members": manifest_check.member_digests({**kernels, "weights.bin": pool}), "plan": plan}
        inner["digest"] = manifest_check.manifest_digest(inner)
        members[f"bucket-{b}/manifest.json"] = json.dumps(inner, indent=1).encode()
        members.update({f"bucket-{b}/{name}": data for name, data in kernels.items()})
    meta = buckets[order[0]][3]
    manifest = {"format": FORMAT, "version": DYNAMIC_VERSION, "compiler": meta.get("compiler"),
                "target": meta["target"], "dynamic": spec, "buckets": order,
                "members": manifest_check.member_digests(members)}
    manifest["digest"] = manifest_check.manifest_digest(manifest)
    with atomic_file(path, "wb", "artifact") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=1))
        for name, data in members.items():
            z.writestr(name, data)
    return len(pool)


def read(path: str) -> tuple[dict, dict, bytes]:
    """(manifest, {kernel member: bytes}, weights bytes), validated; of a dynamic artifact (version 5):
    (manifest, {bucket: (its manifest, {kernel member: bytes})}, the pooled weights)."""
    return _read(path)[:3]


def _read(path: str) -> tuple[dict, dict, bytes, Target, bytes]:
    """read(path), the target the manifest names and the params region's initial bytes. A dynamic
    artifact's second entry is _dynamic_buckets', its weights the pool."""
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
            if manifest.get("version") == DYNAMIC_VERSION:
                members = {m: z.read(m) for m in sorted(names - {"manifest.json"})}
                return manifest, _dynamic_buckets(path, manifest, members, target), members["weights.bin"], target, b""
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


def _dynamic_buckets(path: str, manifest: dict, members: dict[str, bytes], target: Target) -> dict:
    """{bucket: (its manifest, {kernel member: bytes})} of a dynamic artifact, every bucket validated as
    a plain artifact is (on the pooled weights) and the whole against the manifest's digests."""
    def need(cond, what):
        if not cond:
            raise OpenPrimError(f"{path}: corrupt artifact ({what})")
    spec, order = manifest.get("dynamic"), manifest.get("buckets")
    need(isinstance(spec, dict) and isinstance(spec.get("inputs"), dict) and isinstance(spec.get("outputs"), list),
         "the manifest has no valid dynamic dimension")
    try:
        expected = list(dynamic.bucket_range(spec).buckets)
    except (OpenPrimError, KeyError, TypeError) as e:
        raise OpenPrimError(f"{path}: corrupt artifact (dynamic dimension {spec!r}: {e})") from None
    need(order == expected, f"buckets {order!r} are not those of the range, {expected}")
    need(isinstance(manifest.get("members"), dict) and set(manifest["members"]) == set(members),
         "its members are not the ones its manifest records")
    pool_digest = manifest_check.member_digests({"weights.bin": members["weights.bin"]})
    try:
        manifest_check.check_integrity(manifest, members)
    except OpenPrimError as e:
        raise OpenPrimError(f"{path}: corrupt artifact ({e})") from None
    buckets = {}
    for b in order:
        inner = json.loads(members[f"bucket-{b}/manifest.json"])
        need(isinstance(inner, dict) and inner.get("version") == VERSION and isinstance(inner.get("plan"), dict)
             and isinstance(inner.get("kernel_files"), list), f"bucket {b}: no valid manifest")
        kernels = {m: members[f"bucket-{b}/{m}"] for m in inner["kernel_files"] if f"bucket-{b}/{m}" in members}
        need(kernel_files.REQUIRED[target.kind] in kernels, f"bucket {b}: missing {kernel_files.REQUIRED[target.kind]}")
        need(inner.get("target") == manifest.get("target"), f"bucket {b}: compiled for {inner.get('target')}")
        try:
            manifest_check.validate(inner, kernels, members["weights.bin"], target, known=pool_digest)
        except OpenPrimError as e:
            raise OpenPrimError(f"{path}: corrupt artifact (bucket {b}: {e})") from None
        buckets[b] = inner, kernels
    need(len({tuple(i["name"] for i in inner["plan"]["inputs"]) for inner, _ in buckets.values()}) == 1,
         "its buckets take different inputs")
    return buckets


def load(path: str, device: int = 0, graphs: bool | None = None):
    """An executable for the artifact: on this machine's CPU, or on GPU `device` for a GPU target
    (graphs: replay its launches as a CUDA/HIP graph; None: unless OPENPRIM_GPU_GRAPHS=0). A dynamic
    artifact gives a runtime.dynamic.DynamicExecutable, which makes each bucket's executable on first use;
    a decoder artifact (openprim.decoding.Decoder.save) a runtime.generation.Decoder (`.generate`)."""
    manifest, kernels, weights, target, params = _read(path)
    if manifest["version"] == DYNAMIC_VERSION:
        return _load_dynamic(path, manifest, kernels, weights, target, device, graphs)
    exe = build_executable(target, manifest["plan"], kernels, weights, manifest, device, graphs, path, params)
    exe.manifest = manifest
    return exe


def _load_dynamic(path, manifest, buckets, pool, target, device, graphs):
    if target.is_gpu:
        dev = open_device(target, device)
        shared = DeviceWeights(dev, pool, len(pool))
    else:
        dev, shared = device, dynamic.shared_weights(pool)

    def make(b):
        inner, kernels = buckets[b]
        return build_executable(target, inner["plan"], kernels, shared, inner, dev, graphs, f"{path} (bucket {b})")
    exe = dynamic.DynamicExecutable(manifest["dynamic"], {b: inner["plan"] for b, (inner, _) in buckets.items()}, make)
    exe.manifest = manifest
    return Decoder(exe) if "decoder" in manifest["dynamic"] else exe

"""Whole-manifest validation of a `.oprim` artifact, before anything is allocated, loaded or run.

An artifact is a zip whose CRCs only say that its members are what was written; a hand-edited manifest,
members swapped between artifacts or a corrupt code object with valid CRCs would otherwise surface as a
numpy error, a segfault in a kernel, or worse a run that exits 0 with a wrong output (a step with an
argument missing reads and writes through the wrong pointers). `validate` checks the manifest as a
whole against itself and the other members:

  memory    every value's bytes lie inside the arena, the weights or the params region; sizes are
            non-negative integers; the weights (and params) member has exactly the planned size
  params    (weights as values) plan.params is a list of {name, value[, perm]} with unique names, each value
            a parameter (storage "param", not a view), every parameter listed once, perm a permutation of
            its dims; no step writes one
  state     (carried between calls) plan.state is a list of {name, value, next[, copy]}, names unique
            among the inputs' too, each value a state's own storage, listed once; next a value of the plan
            that is the state itself (written in place) or, with copy, any value of its dtype and shape
  steps     every argument is a value of the plan; each step's arguments match the recorded signature
            of its kernel (count, dtypes, shapes: the kernels are compiled for static shapes); outputs
            land in the arena; inputs and outputs are values, input names unique
  launches  (GPU) grid and block are three positive integers within the hardware limits, dynamic shared
            memory within the chip's, every argument resolves inside its buffer
  code      every kernel the steps call (CPU: a symbol of kernels.so; GPU: a device function of the
            PTX/cubin/hsaco) is present in the code object, which must be one for this machine
  integrity the SHA-256 of every member (kernels, weights) is the one recorded, and the manifest's own
            digest matches: an edit that is still consistent (an offset moved onto another buffer of the
            same size, a kernels.so swapped in from another build of the same model) is refused as well

and `check_host` refuses, with the sizes or features named, an artifact that this machine cannot run:
CPU instruction set extensions the code needs (from /proc/cpuinfo; otherwise SIGILL in the first kernel)
and host memory for the arena and the weights (MemAvailable and RLIMIT_AS; otherwise a failed allocation
deep inside numpy or a kernel).
"""
from __future__ import annotations

import hashlib
import json
import math
import numbers
import platform
import resource
import struct

from openprim.base.dtypes import ITEMSIZE
from openprim.base.errors import OpenPrimError
from openprim.base.target import CHIPS, X86_LEVELS, Target, host_cpu_features

from . import codeobject, kernel_files

ELF_MACHINES = {"x86_64": 62, "aarch64": 183}
GRID_LIMITS = (2**31 - 1, 65535, 65535)
MAX_BLOCK_THREADS = 1024
ARG_KINDS = ("arg", "scratch", "weight", "i64", "tensormap")


class Invalid(OpenPrimError):
    """A manifest that contradicts itself or its artifact's other members."""


def _int(v, low: int = 0) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= low


def _need(cond, msg: str) -> None:
    if not cond:
        raise Invalid(msg)


def signature(plan: dict) -> dict[str, list]:
    """Per kernel: [dtype, shape] of each argument of its first step (output last), as written at compile."""
    sigs = {}
    for step in plan["steps"]:
        sigs.setdefault(step["kernel"], [[plan["values"][a]["dtype"], list(plan["values"][a]["shape"])]
                                         for a in step["args"]])
    return sigs


STORAGES = ("arena", "weight", "param", "state")
LIMITS = {"arena": "arena_bytes", "weight": "weights_bytes", "param": "params_bytes",
          "state": "state_bytes"}   # each storage's size


def _value_bytes(v: dict, i: int, storages=STORAGES) -> int:
    _need(isinstance(v, dict), f"value {i} is not an object")
    _need(v.get("dtype") in ITEMSIZE, f"value {i}: unknown dtype {v.get('dtype')!r}")
    shape = v.get("shape")
    _need(isinstance(shape, list) and all(_int(d, 1) for d in shape),
          f"value {i}: shape {shape!r} is not a list of positive integers")
    _need(v.get("storage") in storages, f"value {i}: storage {v.get('storage')!r} is not "
                                        f"{', '.join(storages[:-1])} or {storages[-1]}")
    _need(_int(v.get("offset")), f"value {i}: offset {v.get('offset')!r} is not a non-negative integer")
    return math.prod(shape) * ITEMSIZE[v["dtype"]]


def _check_plan(plan: dict, weights_len: int, params_len: int = 0) -> None:
    has_params, has_state = "params" in plan, "state" in plan
    for key in ("arena_bytes", "weights_bytes") + (("params_bytes",) if has_params else ()) + \
            (("state_bytes",) if has_state else ()):
        _need(_int(plan.get(key)), f"plan.{key} {plan.get(key)!r} is not a non-negative integer")
    _need(_int(plan.get("scratch_bytes", 0)), f"plan.scratch_bytes {plan.get('scratch_bytes')!r} is not a "
                                              f"non-negative integer")
    _need(_int(plan.get("batch_chunks", 1), 1), f"plan.batch_chunks {plan.get('batch_chunks')!r} is not a "
                                                f"positive integer")
    _need(weights_len == plan["weights_bytes"],
          f"weights are {weights_len} bytes, the plan expects {plan['weights_bytes']}")
    if has_params:
        _need(params_len == plan["params_bytes"],
              f"params are {params_len} bytes, the plan expects {plan['params_bytes']}")
    values = plan.get("values")
    _need(isinstance(values, list), "plan.values is not a list")
    for i, v in enumerate(values):
        storages = [k for k in STORAGES if k in ("arena", "weight") or (k == "param" and has_params)
                    or (k == "state" and has_state)]
        end = _value_bytes(v, i, storages) + v["offset"]
        limit = plan[LIMITS[v["storage"]]]
        _need(end <= limit, f"value {i} ({v['dtype']}{v['shape']}) ends at byte {end}, past the "
                            f"{v['storage']} of {limit} bytes")
        if "view_of" in v:
            root = v["view_of"]
            _need(_int(root) and root < i and "view_of" not in values[root]
                  and values[root]["storage"] == v["storage"] and values[root]["offset"] <= v["offset"]
                  and end <= values[root]["offset"] + _value_bytes(values[root], root, storages),
                  f"value {i}: view_of {root!r} is not an earlier value of the same storage whose bytes hold it")

    def is_value(a):
        return _int(a) and a < len(values)
    inputs, outputs, steps = plan.get("inputs"), plan.get("outputs"), plan.get("steps")
    _need(isinstance(inputs, list) and all(isinstance(i, dict) and isinstance(i.get("name"), str)
                                           and is_value(i.get("value")) for i in inputs),
          "plan.inputs must be a list of {name, value} with value ids of the plan")
    names = [i["name"] for i in inputs]
    _need(len(set(names)) == len(names), f"input names {names} are not unique")
    _need(isinstance(outputs, list) and (outputs or plan.get("state")) and all(map(is_value, outputs)),
          "plan.outputs must be a list of value ids of the plan, non-empty unless the plan carries state")
    _need(isinstance(steps, list), "plan.steps must be a list")  # empty: the outputs are inputs or constants
    if has_params:
        _check_params(plan, values, is_value)
    if has_state:
        _check_state(plan, values, is_value)
    checks = plan.get("checks", [])
    _need(isinstance(checks, list) and all(isinstance(c, dict) and is_value(c.get("value"))
                                           and isinstance(c.get("message"), str) for c in checks),
          "plan.checks must be a list of {value, message} with value ids of the plan")
    for n, s in enumerate(steps):
        _need(isinstance(s, dict) and isinstance(s.get("kernel"), str) and isinstance(s.get("args"), list)
              and s["args"] and all(map(is_value, s["args"])),
              f"step {n}: needs a kernel name and a non-empty list of value ids of the plan")
        _need(values[s["args"][-1]]["storage"] in ("arena", "state"),
              f"step {n} ({s['kernel']}) writes into the {values[s['args'][-1]]['storage']}s")


def _check_params(plan: dict, values: list, is_value) -> None:
    """plan.params: {name, value} with unique names, each value a parameter (storage param, no view), every
    parameter value listed exactly once."""
    params = plan["params"]
    _need(isinstance(params, list) and all(isinstance(p, dict) and isinstance(p.get("name"), str)
                                           and is_value(p.get("value")) for p in params),
          "plan.params must be a list of {name, value} with value ids of the plan")
    names = [p["name"] for p in params]
    _need(len(set(names)) == len(names), f"parameter names {names} are not unique")
    listed = [p["value"] for p in params]
    for p in params:
        v = values[p["value"]]
        _need(v["storage"] == "param" and "view_of" not in v,
              f"parameter '{p['name']}': value {p['value']} is not a parameter's own storage")
        perm = p.get("perm", list(range(len(v["shape"]))))
        _need(isinstance(perm, list) and all(_int(i) for i in perm) and sorted(perm) == list(range(len(v["shape"]))),
              f"parameter '{p['name']}': perm {perm!r} is not a permutation of its {len(v['shape'])} dims")
    roots = [i for i, v in enumerate(values) if v["storage"] == "param" and "view_of" not in v]
    _need(sorted(listed) == roots, f"parameter values {sorted(listed)} are not the plan's parameters {roots}")


def _check_state(plan: dict, values: list, is_value) -> None:
    """plan.state (the module docstring)."""
    state = plan["state"]
    _need(isinstance(state, list) and state and all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and is_value(e.get("value"))
        and is_value(e.get("next")) for e in state),
          "plan.state must be a non-empty list of {name, value, next} with value ids of the plan")
    names = [e["name"] for e in state] + [i["name"] for i in plan["inputs"]]
    _need(len(set(names)) == len(names), f"state and input names {names} are not unique")
    for e in state:
        v, nxt = values[e["value"]], values[e["next"]]
        _need(v["storage"] == "state" and "view_of" not in v,
              f"state '{e['name']}': value {e['value']} is not a state's own storage")
        _need((nxt["dtype"], nxt["shape"]) == (v["dtype"], v["shape"]),
              f"state '{e['name']}': its next value is {nxt['dtype']}{nxt['shape']}, not {v['dtype']}{v['shape']}")
        _need(e.get("copy") or e["next"] == e["value"] or nxt.get("view_of") == e["value"],
              f"state '{e['name']}': its next value {e['next']} is neither the state's storage nor copied")
    roots = [i for i, v in enumerate(values) if v["storage"] == "state" and "view_of" not in v]
    _need(sorted(e["value"] for e in state) == roots, "the state values are not the plan's state storage")


def _check_signatures(plan: dict, recorded) -> None:
    _need(isinstance(recorded, dict), "the manifest has no kernel signatures")
    values = plan["values"]
    for n, s in enumerate(plan["steps"]):
        want = recorded.get(s["kernel"])
        _need(isinstance(want, list), f"step {n}: kernel '{s['kernel']}' has no recorded signature")
        got = [[values[a]["dtype"], list(values[a]["shape"])] for a in s["args"]]
        _need(len(got) == len(want), f"step {n}: kernel '{s['kernel']}' takes {len(want)} arguments, "
                                     f"the step passes {len(got)}")
        for j, (g, w) in enumerate(zip(got, want)):
            _need(g == w, f"step {n}: argument {j} of kernel '{s['kernel']}' is {g[0]}{g[1]}, the kernel "
                          f"was compiled for {w[0]}{w[1]}")


def _check_launches(plan: dict, target: Target) -> set[str]:
    """The device functions the launches call; raises on a malformed launch."""
    kernels = plan.get("kernels")
    _need(isinstance(kernels, dict), "a GPU plan needs plan.kernels")
    chip = CHIPS[(target.kind, target.arch)]
    functions = set()
    limits = {"scratch": plan.get("scratch_bytes", 0), "weight": plan["weights_bytes"]}
    for n, s in enumerate(plan["steps"]):
        k = kernels.get(s["kernel"])
        _need(isinstance(k, dict) and isinstance(k.get("launches"), list) and k["launches"],
              f"step {n}: kernel '{s['kernel']}' has no launches")
        for launch in k["launches"]:
            where = f"step {n}: launch of {launch.get('function')!r}"
            _need(isinstance(launch.get("function"), str), f"{where}: no function name")
            functions.add(launch["function"])
            grid, block = launch.get("grid"), launch.get("block")
            _need(isinstance(grid, list) and len(grid) == 3 and all(_int(g, 1) and g <= m for g, m in
                                                                    zip(grid, GRID_LIMITS)),
                  f"{where}: grid {grid!r} is not 3 positive integers within {list(GRID_LIMITS)}")
            _need(isinstance(block, list) and len(block) == 3 and all(_int(b, 1) for b in block)
                  and math.prod(block) <= MAX_BLOCK_THREADS,
                  f"{where}: block {block!r} is not 3 positive integers of at most {MAX_BLOCK_THREADS} threads")
            _need(_int(launch.get("shared", 0)) and launch.get("shared", 0) <= chip.shared_per_block,
                  f"{where}: dynamic shared memory {launch.get('shared')!r} is not within the "
                  f"{chip.shared_per_block} bytes of {target.arch}")
            _need(isinstance(launch.get("args"), list), f"{where}: no argument list")
            if "unless_aliased" in launch:
                skip = launch["unless_aliased"]
                _need(isinstance(skip, list) and len(skip) == 2 and all(_int(j) and j < len(s["args"]) for j in skip),
                      f"{where}: unless_aliased {skip!r} is not two of the step's {len(s['args'])} arguments")
            for arg in launch["args"]:
                _need(isinstance(arg, list) and len(arg) == 2 and arg[0] in ARG_KINDS, f"{where}: argument {arg!r}")
                kind, v = arg
                if kind == "tensormap":
                    _need(isinstance(v, dict) and isinstance(v.get("memory"), list) and len(v["memory"]) == 2
                          and v["memory"][0] in ("arg", "scratch", "weight"), f"{where}: tensor map {v!r}")
                    kind, v = v["memory"]
                if kind == "arg":
                    _need(_int(v) and v < len(s["args"]), f"{where}: argument {arg!r} but the step passes "
                                                          f"{len(s['args'])} buffers")
                elif kind == "i64":
                    _need(isinstance(v, numbers.Integral) and -2**63 <= v < 2**64, f"{where}: scalar {v!r}")
                else:
                    _need(_int(v) and v <= limits[kind], f"{where}: {kind} offset {v!r} is past the "
                                                         f"{limits[kind]} bytes of the {kind} area")
    return functions


def _shared_object_symbols(data: bytes) -> set[str]:
    """The dynamic symbols of a shared object for this machine (an OpenPrimError if it is not one)."""
    machine = ELF_MACHINES.get(platform.machine())
    if machine is None:
        return set()   # an architecture this check does not know: dlopen still refuses a foreign file
    elf = codeobject._Elf(data, machine, f"a shared object for {platform.machine()}")
    _, dynsym, _, _ = elf.sections.get(".dynsym", (0, b"", 0, 0))
    _, dynstr, _, _ = elf.sections.get(".dynstr", (0, b"", 0, 0))
    try:
        return {codeobject._cstr(dynstr, struct.unpack_from("<I", dynsym, i)[0]) for i in range(0, len(dynsym), 24)}
    except (ValueError, UnicodeDecodeError, struct.error) as e:
        raise OpenPrimError(f"not a shared object for {platform.machine()} (corrupt symbol table: {e})") from None


def _device_functions(target: Target, kernels: dict[str, bytes]) -> dict[str, set[str]]:
    """Per code object member: the device functions it defines."""
    found = {}
    for member, data in kernels.items():
        if member == kernel_files.HSACO:
            found[member] = {k["name"] for k in codeobject.amdgpu_kernels(data)}
        elif member == kernel_files.CUBIN:
            found[member] = {k["name"] for k in codeobject.cubin_kernels(data)}
        elif member == kernel_files.PTX:
            try:
                found[member] = {k["name"] for k in codeobject.ptx_kernels(data.decode())}
            except UnicodeDecodeError:
                raise OpenPrimError(f"{kernel_files.PTX} is not PTX text") from None
    return found


def member_digests(members: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(members.items())}


def manifest_digest(manifest: dict) -> str:
    """SHA-256 of the manifest without its "digest" entry, in canonical JSON."""
    body = {k: v for k, v in manifest.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def check_integrity(manifest: dict, members: dict[str, bytes], known: dict[str, str] | None = None) -> None:
    """known: digests computed already (a dynamic artifact's pool, which every bucket records)."""
    recorded = manifest.get("members")
    _need(isinstance(recorded, dict), "the manifest records no member digests")
    digests = {**member_digests({k: v for k, v in members.items() if k not in (known or {})}), **(known or {})}
    for name, digest in sorted(digests.items()):
        _need(recorded.get(name) == digest, f"{name} is not the one this manifest was written with "
                                            f"(SHA-256 mismatch): members were swapped or edited")
    _need(manifest.get("digest") == manifest_digest(manifest),
          "the manifest was edited after it was written (digest mismatch); recompile the model")


def validate(manifest: dict, kernels: dict[str, bytes], weights: bytes, target: Target, params: bytes = b"",
             known: dict[str, str] | None = None) -> None:
    """Raise Invalid (what is wrong, where) unless the manifest is consistent as a whole (see the module doc);
    params: the params.bin member (weights as values); known: member digests computed already."""
    plan = manifest["plan"]
    _check_plan(plan, len(weights), len(params))
    members = {**kernels, "weights.bin": weights, **({"params.bin": params} if "params" in plan else {})}
    _check_signatures(plan, manifest.get("signatures"))
    if target.is_gpu:
        _need(plan.get("batch_chunks", 1) == 1, "plan.batch_chunks is for CPU plans (the GPU runtime runs the "
                                                "whole batch at once)")
        needed = _check_launches(plan, target)
        for member, names in _device_functions(target, kernels).items():
            missing = sorted(needed - names)
            _need(not missing, f"{member} lacks the device function(s) {', '.join(missing)} that the plan launches")
        check_integrity(manifest, members, known)
        return
    try:
        symbols = _shared_object_symbols(kernels[kernel_files.SHARED_OBJECT])
    except OpenPrimError as e:
        raise Invalid(f"{kernel_files.SHARED_OBJECT} is {e}") from None
    missing = sorted({s["kernel"] for s in plan["steps"]} - symbols) if symbols else []
    _need(not missing, f"{kernel_files.SHARED_OBJECT} lacks the kernel(s) {', '.join(missing)} that the plan calls")
    check_integrity(manifest, members, known)


def _best_level(have: frozenset[str]) -> str:
    return max((name for name, needs in X86_LEVELS.items() if set(needs) <= have), key=lambda n: len(X86_LEVELS[n]))


def check_cpu(manifest: dict) -> None:
    """Refuse CPU code that needs instruction set extensions this CPU lacks (it would die of SIGILL)."""
    needs = manifest.get("cpu_features") or []
    _need(isinstance(needs, list) and all(isinstance(f, str) for f in needs), f"cpu_features {needs!r} is not a list")
    have = host_cpu_features()
    if not have or not needs:
        return
    lacking = sorted(set(needs) - have)
    if lacking:
        raise OpenPrimError(f"compiled for {manifest.get('cpu')} (needs {', '.join(needs)}); this CPU lacks "
                            f"{', '.join(lacking)}; recompile with --target cpu:{_best_level(have)}")


def host_memory() -> tuple[int | None, str]:
    """(bytes this process can still allocate, where the limit comes from), None when unknown: the smaller
    of MemAvailable and the address-space limit left (RLIMIT_AS minus what is mapped now)."""
    limits = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limits.append((int(line.split()[1]) * 1024, "MemAvailable"))
    except (OSError, ValueError, IndexError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm") as f:
                mapped = int(f.read().split()[0]) * resource.getpagesize()
        except (OSError, ValueError, IndexError):
            mapped = 0
        limits.append((max(0, soft - mapped), "the address-space limit (ulimit -v)"))
    return min(limits, default=(None, "unknown"))


def memory_shortfall(sizes: dict[str, int]) -> str | None:
    """None when `sizes` (what -> bytes) fit into this machine's free host memory, else why not."""
    free, source = host_memory()
    total = sum(sizes.values())
    if free is None or total <= free:
        return None
    parts = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items() if v)
    return f"needs {total / 2**20:.1f} MiB of host memory ({parts}); {source} leaves {free / 2**20:.1f} MiB"


def host_sizes(plan: dict) -> dict[str, int]:
    """The host memory a CPU run needs: the arena, the weights (and their copy while loading), and the
    most one kernel call allocates (plan.scratch_bytes, see backends/cpu record_scratch)."""
    return {"arena": plan["arena_bytes"], "weights": 2 * plan["weights_bytes"],
            **({"params": 3 * plan["params_bytes"]} if "params" in plan else {}),   # initial, held, a load's new
            **({"state": plan["state_bytes"]} if "state" in plan else {}),
            "kernel scratch": plan.get("scratch_bytes", 0)}

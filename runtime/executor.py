"""Run a compiled plan: an arena of intermediates, weights, and kernel calls in order.

The plan (a JSON-able dict, see driver/plan.py) names for each value where it lives: the arena at a
byte offset (intermediates share it by liveness) or the weights blob. Every step calls one kernel with
one pointer per argument, output last. This file is the same for every driver: a driver only turns a
kernel name into a callable and owns the memory the pointers point to.

The weights and the kernels are shared by every call; an arena belongs to one call in flight at a time
(ctypes releases the GIL during a kernel, so calls from threads really overlap): concurrent calls each
take their own from a pool (CpuExecutable).

Inputs are read where the caller has them when they can be (C-contiguous, the storage dtype, 16-byte
aligned, and not read back from the arena by an output or a state copy): the call points its arena's step
pointers at the caller's array and back home afterwards, instead of copying the input into the arena (a
training step's backward reads ~260 MB of saved maps at ResNet-18's batch 8). Outputs are copied out into
64-byte aligned arrays, so an executable fed another's outputs reads them in place too.

Weights as values (a plan with "params", driver/plan.py): the parameters live in a params region that the
executable holds and `load_weights` replaces. On the CPU that is a generation swap: a load writes a new
region (a copy of the current one with the new values) and then publishes it with one assignment; a region
is never written once published. Each arena is bound to one region; a call takes an arena and, where its
region is not the current one, rebinds it first (its pointers; the arena's bytes stay). So a call in
flight runs on the old parameters or on the new ones, never on a mix, and calls never wait for a load.

State (a plan with "state", driver/plan.py: a KV cache): a region the executable holds from call to call,
zeros at first. A call reads the state and leaves its next value there (written in place by the kernels,
or copied in after the steps); calls of a stateful executable therefore take turns (one lock), and
`get_state`, `set_state`, `reset_state` read or replace it between calls. `share_state(other)` makes two
executables of the same state (a prefill and a decode step) work on one region.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import time

import numpy as np

from openprim.base.errors import OpenPrimError

from openprim.base.dtypes import FLOATS, ITEMSIZE, STORAGE, from_storage, host_to_storage

ALIGN = 64
_UNLOCKED = contextlib.nullcontext()


def host_shape(plan: dict, value: int) -> tuple:
    """The shape of an input or output as the caller sees it: a plan compiled for a part of its batch
    (plan.batch_chunks, passes/batch_chunks.py) takes and returns batch_chunks times dim 0."""
    shape, chunks = list(plan["values"][value]["shape"]), plan.get("batch_chunks", 1)
    return tuple([shape[0] * chunks, *shape[1:]] if chunks > 1 else shape)


def ordered_inputs(plan: dict, args, kwargs) -> list:
    """The arguments in plan input order, from positional and keyword arguments (not converted); a wrong
    count or name is one OpenPrimError."""
    ins = plan["inputs"]
    names = [i["name"] for i in ins]
    if kwargs:
        kwargs = dict(kwargs)
        args = list(args) + [kwargs.pop(i["name"]) for i in ins[len(args):] if i["name"] in kwargs]
        if kwargs:
            raise OpenPrimError(f"unknown input(s) {sorted(kwargs)}; inputs are {names}")
    if len(args) != len(ins):
        raise OpenPrimError(f"expected {len(ins)} input(s) {names}, got {len(args)}")
    return list(args)


def checked_inputs(plan: dict, args, kwargs) -> list[tuple[int, np.ndarray]]:
    """(value id, data in its storage dtype) per plan input, from positional and keyword arguments;
    a wrong count, name or shape is one OpenPrimError."""
    out = []
    for spec, a in zip(plan["inputs"], ordered_inputs(plan, args, kwargs)):
        v, shape = plan["values"][spec["value"]], host_shape(plan, spec["value"])
        a = np.asarray(a)
        if tuple(a.shape) != shape:
            raise OpenPrimError(f"input '{spec['name']}' must have shape {shape}, got {a.shape}")
        out.append((spec["value"], host_to_storage(a, v["dtype"], f"input '{spec['name']}'")))
    return out


def param_names(plan: dict) -> list[str]:
    """The names of a plan's parameters (weights as values), [] when it has none."""
    return [p["name"] for p in plan.get("params", ())]


def param_shape(v: dict, perm: list[int] | None) -> tuple:
    """The shape a caller gives a parameter whose value `v` is stored as transpose(given, perm)."""
    if perm is None:
        return tuple(v["shape"])
    inverse = np.argsort(perm)
    return tuple(v["shape"][j] for j in inverse)


def stored_param(v: dict, perm: list[int] | None, stored: np.ndarray) -> np.ndarray:
    """A parameter's value as the caller gives it (not converted), from its stored form."""
    return stored if perm is None else np.ascontiguousarray(stored.transpose(np.argsort(perm)))


def state_names(plan: dict) -> list[str]:
    """The names of a plan's state (carried between calls), [] when it has none."""
    return [e["name"] for e in plan.get("state", ())]


def checked_state(plan: dict, arrays) -> list[tuple[int, np.ndarray]]:
    """(value id, data in its storage dtype) per state entry that `arrays` (a mapping name -> array) gives;
    an unknown name or a wrong shape is one OpenPrimError naming it."""
    specs = {e["name"]: e["value"] for e in plan.get("state", ())}
    if not hasattr(arrays, "items"):
        raise OpenPrimError(f"set_state takes a mapping of state names to arrays, got {type(arrays).__name__}")
    unknown = [n for n in arrays if n not in specs]
    if unknown:
        raise OpenPrimError(f"set_state: unknown state {_listed(unknown)} (this executable's state: "
                            f"{_listed(specs) or 'none'})")
    out = []
    for name, a in arrays.items():
        v = plan["values"][specs[name]]
        a = np.asarray(a)
        if tuple(a.shape) != tuple(v["shape"]):
            raise OpenPrimError(f"set_state: '{name}' must have shape {tuple(v['shape'])}, got {tuple(a.shape)}")
        out.append((specs[name], host_to_storage(a, v["dtype"], f"state '{name}'")))
    return out


def same_state_layout(plan: dict, other: dict) -> str | None:
    """Why two plans cannot share one state region (names, shapes, dtypes, offsets differ), or None."""
    def layout(p):
        return [(e["name"], p["values"][e["value"]]["shape"], p["values"][e["value"]]["dtype"],
                 p["values"][e["value"]]["offset"]) for e in p.get("state", ())]
    if not plan.get("state"):
        return "this executable carries no state"
    if layout(plan) != layout(other):
        return "their state differs (names, shapes or dtypes): compile both from graphs with the same carried inputs"
    return None


def _listed(names) -> str:
    names = sorted(names)
    return ", ".join(repr(n) for n in names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")


def _mapping(weights) -> dict:
    """load_weights' argument as a dict: a mapping (a dict of numpy arrays, a torch state_dict's tensors via
    .numpy()) or the path of a .npz file."""
    if isinstance(weights, (str, os.PathLike)):
        path = os.fspath(weights)
        try:
            loaded = np.load(path, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - numpy's readers raise many types (OSError, ValueError, zipfile's)
            raise OpenPrimError(f"{path}: cannot read as a .npz of weights ({type(e).__name__}: {e})") from None
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise OpenPrimError(f"{path}: one array (.npy), not a .npz of named weights (np.savez(path, **weights))")
        with loaded:
            return {name: loaded[name] for name in loaded.files}
    if not hasattr(weights, "items"):
        raise OpenPrimError(f"load_weights takes a mapping of names to arrays or the path of a .npz file, got "
                            f"{type(weights).__name__}")
    return dict(weights.items())


def checked_params(plan: dict, weights, strict: bool = True) -> list[tuple[int, np.ndarray]]:
    """(value id, data in its storage dtype) per parameter that `weights` (a mapping name -> array, or a .npz
    path) gives. Every name must be a parameter; with strict, every parameter must be given. Each array must
    have the parameter's shape and hold floating-point values within its dtype's range (host_to_storage).
    Whatever is wrong, for every name, is one OpenPrimError."""
    if "params" not in plan:
        raise OpenPrimError("this executable has no parameters to load: its weights are compile-time constants; "
                            "compile with weights='values'")
    given = _mapping(weights)
    specs = {p["name"]: p["value"] for p in plan["params"]}
    problems = []
    unknown = [n for n in given if n not in specs]
    missing = [n for n in specs if n not in given] if strict else []
    if unknown:
        problems.append(f"unknown parameter(s) {_listed(unknown)} (this executable's parameters: "
                        f"{_listed(specs)})")
    if missing:
        problems.append(f"missing parameter(s) {_listed(missing)} (pass strict=False to keep their values)")
    out = []
    perms = {p["name"]: p.get("perm") for p in plan["params"]}
    for name, a in given.items():
        if name not in specs:
            continue
        v, what, perm = plan["values"][specs[name]], f"parameter '{name}'", perms[name]
        try:
            a = np.asarray(a)
            if tuple(a.shape) != param_shape(v, perm):
                raise OpenPrimError(f"{what} must have shape {param_shape(v, perm)}, got {tuple(a.shape)}")
            if a.dtype.kind in "iub" and not (v["dtype"] == "bf16" and a.dtype == np.uint16) and v["dtype"] in FLOATS:
                raise OpenPrimError(f"{what} is {a.dtype}; a {v['dtype']} parameter takes floating-point values")
            stored = host_to_storage(a, v["dtype"], what)
            out.append((specs[name], stored if perm is None else np.ascontiguousarray(stored.transpose(perm))))
        except OpenPrimError as e:
            problems.append(str(e))
        except (TypeError, ValueError, RuntimeError) as e:   # np.asarray of what is not an array
            problems.append(f"{what}: cannot read a {type(a).__name__} as an array ({e})")
    if problems:
        raise OpenPrimError("load_weights: " + "; ".join(problems))
    return out


def raise_failed_checks(plan: dict, read) -> None:
    """One OpenPrimError naming every run-time check of the plan (gather's index bounds) that a run failed;
    read(value id) -> that check's 1-element array."""
    failed = [f"{c['message']} ({int(n)} of them)" for c in plan.get("checks", ())
              if (n := read(c["value"]).reshape(-1)[0])]
    if failed:
        raise OpenPrimError("; ".join(failed))


def aligned_bytes(n: int, zeroed: bool = True) -> np.ndarray:
    """A uint8 buffer of n bytes (zeros unless zeroed=False) whose data pointer is 64-byte aligned."""
    raw = (np.zeros if zeroed else np.empty)(n + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + n]


class _Arena:
    """What one call in flight writes: every plan value viewed in an arena of its own (or in the shared
    weights, or in the params region `params` it is bound to), which the views keep alive, and every step's
    argument pointers into those views. raw: the arena's bytes, kept when it is rebound to new parameters."""

    __slots__ = ("views", "steps", "raw", "params", "state", "bindings")

    def __init__(self, exe: "CpuExecutable", params: np.ndarray, raw: np.ndarray | None = None):
        self.raw = arena = aligned_bytes(exe.plan["arena_bytes"]) if raw is None else raw
        self.params, self.state = params, exe.state_region
        regions = {"arena": arena, "param": params, "state": self.state}
        self.views = [_view(v, regions.get(v["storage"], exe.weights)) for v in exe.plan["values"]]
        self.steps = []
        # an input's or an output's root value -> the step pointers that read or write it, each with its
        # value's bytes past the root's (a view slice's offset)
        self.bindings = {v: [] for v in exe.bindable | set(exe.bound_outputs.values())}
        for fn, step in zip(exe.kernels, exe.plan["steps"]):
            ptrs = [ctypes.c_void_p(self.views[a].ctypes.data) for a in step["args"]]
            for a, p in zip(step["args"], ptrs):
                root = exe.roots[a]
                if root in self.bindings:
                    self.bindings[root].append((p, self.views[a].ctypes.data - self.views[root].ctypes.data))
            if exe.packed:
                ptrs = [(ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs]), ptrs]
            self.steps.append((fn, ptrs))

    def bind(self, value: int, address: int) -> None:
        """Point every step that reads input `value` (or writes output `value`) at `address` (the caller's
        array, this call's output array, or back home)."""
        for p, past in self.bindings[value]:
            p.value = address + past


def _root(values: list[dict], v: int) -> int:
    while "view_of" in values[v]:
        v = values[v]["view_of"]
    return v


def bindable_inputs(plan: dict, roots: list[int]) -> set[int]:
    """The inputs a call may pass in place (the caller's array read by the kernels, not copied into the
    arena): every input but those an output or a state copy reads back from the arena after the steps,
    and none of a plan run once per batch chunk."""
    if plan.get("batch_chunks", 1) != 1:
        return set()
    read_back = {roots[o] for o in plan["outputs"]} | {roots[c["value"]] for c in plan.get("checks", ())}
    read_back |= {roots[e[k]] for e in plan.get("state", ()) for k in ("value", "next")}
    return {i["value"] for i in plan["inputs"] if roots[i["value"]] == i["value"] and i["value"] not in read_back}


def bound_outputs(plan: dict, roots: list[int]) -> dict[int, int]:
    """{output position: its root value} for the outputs the kernels may write straight into an array made
    for the call, so that nothing is copied out of the arena after the steps: each whose root is in the
    arena, is no other output's or any input's, and is read back by no state copy or check; none of a plan
    run once per batch chunk. (Its arena bytes may hold other values before it is written: those keep them.)"""
    if plan.get("batch_chunks", 1) != 1:
        return {}
    values = plan["values"]
    taken = [roots[i["value"]] for i in plan["inputs"]] + [roots[o] for o in plan["outputs"]]
    read_back = {roots[c["value"]] for c in plan.get("checks", ())}
    read_back |= {roots[e[k]] for e in plan.get("state", ()) for k in ("value", "next")}
    return {k: roots[o] for k, o in enumerate(plan["outputs"])
            if values[roots[o]]["storage"] == "arena" and taken.count(roots[o]) == 1 and roots[o] not in read_back
            and whole_root(values, o, roots[o])}


def value_nbytes(value: dict) -> int:
    """The bytes of a plan value."""
    return math.prod(value["shape"]) * ITEMSIZE[value["dtype"]]


def whole_root(values: list[dict], v: int, root: int) -> bool:
    """Whether value v spans all of its root's bytes (itself, or a reshape of it; not a slice's run)."""
    return values[v]["offset"] == values[root]["offset"] and value_nbytes(values[v]) == value_nbytes(values[root])


INPUT_ALIGN = 16   # what numpy's allocator gives; the kernels assume no more than their element's alignment


def _in_place_ok(data: np.ndarray, home: np.ndarray) -> bool:
    """Whether the kernels may read `data` (of the input's shape, checked already) where it is: C-contiguous,
    the storage dtype, 16-byte aligned."""
    return data.dtype == home.dtype and data.flags.c_contiguous and data.ctypes.data % INPUT_ALIGN == 0


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose data is 64-byte aligned (an output another executable may then read in place)."""
    out = np.frombuffer(aligned_bytes(a.nbytes, zeroed=False), a.dtype, a.size).reshape(a.shape)
    out[...] = a
    return out


def _view(v: dict, base: np.ndarray) -> np.ndarray:
    count = int(np.prod(v["shape"], dtype=np.int64))
    return np.frombuffer(base, STORAGE[v["dtype"]], count, v["offset"]).reshape(v["shape"])


class CpuExecutable:
    """A compiled network on the CPU: call it with numpy arrays, get numpy arrays back.

    Calls from several threads at once are safe: each call takes an arena (with its step pointers) from a
    free list and gives it back, and a new one is made only when every arena is in use, so N concurrent
    callers make at most N arenas, kept for reuse. One caller at a time always reuses the same arena.
    A plan with parameters (weights as values): `load_weights` replaces them between calls, atomically for
    every call (the module docstring), `state_dict()` gives them."""

    def __init__(self, plan: dict, kernel_address, weights: bytes | np.ndarray, keepalive=None, packed=False,
                 params: bytes = b""):
        """kernel_address(name) -> address of `void name(T *arg0, ...)`; with packed=True, of MLIR's
        JIT wrapper `void _mlir_name(void **args)` (args[i] points at the i-th pointer). weights: the blob
        (copied), or a 64-byte aligned uint8 array of its size, used as it is (shared, never written).
        params: the initial bytes of the plan's params region (weights as values)."""
        self.plan = plan
        self._keepalive = keepalive
        self.packed = packed  # the JIT engine or the loaded library: kernels live as long as we do
        if isinstance(weights, np.ndarray) and weights.dtype == np.uint8 and weights.size == plan["weights_bytes"] \
                and weights.ctypes.data % ALIGN == 0:
            self.weights = weights       # aligned already (a dynamic artifact's pool, runtime/dynamic.py): shared
        else:
            self.weights = aligned_bytes(plan["weights_bytes"])
            self.weights[:] = np.frombuffer(weights, np.uint8, plan["weights_bytes"])
        self._params = aligned_bytes(plan.get("params_bytes", 0))   # the current region: never written again
        if plan.get("params_bytes"):
            self._params[:] = np.frombuffer(params, np.uint8, plan["params_bytes"])
        self._loading = threading.Lock()    # one load_weights at a time
        self.state_region = aligned_bytes(plan.get("state_bytes", 0))   # zeros: the state before any call
        self._stepping = threading.Lock() if "state" in plan else None  # calls of a stateful plan take turns
        fns = {}
        for step in plan["steps"]:
            name = step["kernel"]
            if name not in fns:
                address = kernel_address(name)
                if not address:
                    raise OpenPrimError(f"kernel '{name}' is missing from the compiled kernels")
                proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (1 if packed else len(step["args"]))))
                fns[name] = proto(address)
        self.kernels = [fns[step["kernel"]] for step in plan["steps"]]   # per step
        self.roots = [_root(plan["values"], v) for v in range(len(plan["values"]))]
        self.bindable = bindable_inputs(plan, self.roots)
        self.bound_outputs = bound_outputs(plan, self.roots)
        self._growing = threading.Lock()
        self.arenas = 0          # made so far: the most calls that were ever in flight at once
        self._free = [self._new_arena()]

    def _new_arena(self) -> _Arena:
        arena = _Arena(self, self._params)
        with self._growing:
            self.arenas += 1
        return arena

    def _take(self) -> _Arena:
        """A free arena (the one given back last: warm in the caches), or a new one when all are in use.
        list.pop and list.append are atomic, so the free list needs no lock. An arena bound to parameters that
        a load_weights has replaced since is rebound to the current ones."""
        try:
            arena = self._free.pop()
        except IndexError:
            return self._new_arena()
        params = self._params
        return arena if arena.params is params and arena.state is self.state_region else \
            _Arena(self, params, arena.raw)

    @property
    def input_names(self):
        return [i["name"] for i in self.plan["inputs"]]

    @property
    def param_names(self) -> list[str]:
        """The names of the parameters load_weights replaces (weights="values"); [] for constant weights."""
        return param_names(self.plan)

    def load_weights(self, weights, strict: bool = True) -> None:
        """Replace the parameters (weights="values") by `weights`: a mapping name -> array (numpy arrays; a
        torch state_dict's tensors via .numpy()) or the path of a .npz. Each array must have its parameter's
        shape and hold floats within its dtype's range; an unknown name, a missing one (unless strict=False:
        those keep their values) or a bad array is one OpenPrimError naming them, and nothing changes then.
        Calls in flight finish on the old parameters; calls that start after this returns see the new ones."""
        updates = checked_params(self.plan, weights, strict)
        with self._loading:
            new = aligned_bytes(len(self._params))
            new[:] = self._params
            for value, data in updates:
                _view(self.plan["values"][value], new)[...] = data
            self._params = new     # published whole: one assignment

    def state_dict(self) -> dict[str, np.ndarray]:
        """{name: a copy of the parameter's current value} (bf16 as float32, as outputs are)."""
        params, values = self._params, self.plan["values"]
        return {p["name"]: from_storage(stored_param(values[p["value"]], p.get("perm"),
                                                     _view(values[p["value"]], params).copy()),
                                        values[p["value"]]["dtype"])
                for p in self.plan.get("params", ())}

    @property
    def state_names(self) -> list[str]:
        """The names of the state this executable carries between calls (Graph.carry); [] for none."""
        return state_names(self.plan)

    def get_state(self) -> dict[str, np.ndarray]:
        """{name: a copy of the state's current value} (bf16 as float32, as outputs are)."""
        values = self.plan["values"]
        with self._stepping or _UNLOCKED:
            return {e["name"]: from_storage(_view(values[e["value"]], self.state_region).copy(),
                                            values[e["value"]]["dtype"]) for e in self.plan.get("state", ())}

    def state_views(self) -> dict[str, np.ndarray]:
        """{name: the state itself, a numpy view in its storage dtype (bf16 as uint16 bits)}: what a caller
        writes there is the state of the next call, and each call leaves the next value there. Views of the
        region as it is now: share_state replaces it. A fused optimizer keeps the parameters so, updated in
        place with no copy in or out."""
        values = self.plan["values"]
        return {e["name"]: _view(values[e["value"]], self.state_region) for e in self.plan.get("state", ())}

    def set_state(self, arrays) -> None:
        """Replace state entries by arrays (a mapping name -> array of the state's shape); others keep theirs."""
        updates = checked_state(self.plan, arrays)
        with self._stepping or _UNLOCKED:
            for value, data in updates:
                _view(self.plan["values"][value], self.state_region)[...] = data

    def reset_state(self) -> None:
        """Every state entry back to zeros (a new sequence; for a KV cache, the positions say what is valid)."""
        with self._stepping or _UNLOCKED:
            self.state_region[:] = 0

    def share_state(self, other: "CpuExecutable") -> None:
        """Work on `other`'s state region from now on (a prefill and a decode step of one cache): both
        plans must carry the same state. Calls of the two still take turns only within each executable:
        do not call both at once."""
        why = same_state_layout(self.plan, other.plan)
        if why:
            raise OpenPrimError(f"share_state: {why}")
        with self._stepping:
            self.state_region = other.state_region   # arenas rebind on their next call (_take)

    def __call__(self, *args, **kwargs):
        return self._call(args, kwargs)

    def timed_call(self, *args, **kwargs):
        """A call (as __call__) that also records when each kernel call starts and ends, for the profiler
        (runtime/profile.py): (outputs, an array [batch chunks x steps, 2] of time.perf_counter() seconds,
        the plan's steps in order once per chunk of the batch)."""
        spans = np.zeros((self.plan.get("batch_chunks", 1) * len(self.plan["steps"]), 2))
        return self._call(args, kwargs, spans), spans

    def _call(self, args, kwargs, spans=None):
        inputs = checked_inputs(self.plan, args, kwargs)
        with self._stepping or _UNLOCKED:
            arena = self._take()
            try:
                stored = self._run(arena, inputs, spans)
            finally:
                self._free.append(arena)
        values = self.plan["values"]
        outs = [from_storage(s, values[o]["dtype"], values[o].get("host_dtype"))
                for s, o in zip(stored, self.plan["outputs"])]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run(self, arena: _Arena, inputs, spans=None) -> list[np.ndarray]:
        """Copy the inputs into `arena` (or bind them in place), run the steps, return the outputs (storage
        dtype; written into arrays of their own where bound_outputs allows, else copied out); spans:
        where _steps records each kernel call's start and end, or None."""
        plan, views = self.plan, arena.views
        chunks = plan.get("batch_chunks", 1)
        if chunks == 1:
            bound = []
            for value, data in inputs:
                if value in arena.bindings and _in_place_ok(data, views[value]):
                    arena.bind(value, data.ctypes.data)    # read where it is: no copy into the arena
                    bound.append(value)
                else:
                    views[value][...] = data
            written = {}
            for k, root in self.bound_outputs.items():     # written where the caller gets it: no copy out
                home = views[plan["outputs"][k]]
                written[k] = np.frombuffer(aligned_bytes(home.nbytes), home.dtype, home.size).reshape(home.shape)
                arena.bind(root, written[k].ctypes.data)
                bound.append(root)
            try:
                self._steps(arena, spans)
            finally:
                for value in bound:
                    arena.bind(value, views[value].ctypes.data)
            for entry in plan.get("state", ()):
                if entry.get("copy"):
                    views[entry["value"]][...] = views[entry["next"]]
            raise_failed_checks(plan, views.__getitem__)
            return [written[k] if k in written else aligned_copy(views[o]) for k, o in enumerate(plan["outputs"])]
        stored = [np.empty(host_shape(plan, o), views[o].dtype) for o in plan["outputs"]]
        for i in range(chunks):  # the steps once per chunk of the batch (dim 0)
            for value, data in inputs:
                n = len(views[value])
                views[value][...] = data[i * n:(i + 1) * n]
            self._steps(arena, spans, i * len(arena.steps))
            raise_failed_checks(plan, views.__getitem__)
            for out, o in zip(stored, plan["outputs"]):
                n = len(views[o])
                out[i * n:(i + 1) * n] = views[o]
        return stored

    def _steps(self, arena: _Arena, spans=None, row: int = 0) -> None:
        """Call the kernels of `arena`'s steps in order. With spans (an array [rows, 2]), also record each
        call's start and end (time.perf_counter) in rows `row` on: the profiler's path, a loop of its own so
        that the plain one stays as it was."""
        packed = self.packed
        if spans is None:
            for fn, ptrs in arena.steps:
                fn(*ptrs[:1] if packed else ptrs)
            return
        clock = time.perf_counter
        for i, (fn, ptrs) in enumerate(arena.steps, row):
            start = clock()
            fn(*ptrs[:1] if packed else ptrs)
            spans[i] = start, clock()

    def run_steps(self):
        """The steps alone, on what the last call left in its arena (for timing)."""
        arena = self._take()
        try:
            self._steps(arena)
        finally:
            self._free.append(arena)

    def time_steps(self, repeat: int = 10) -> list[float]:
        """Seconds per kernel step (median of `repeat` runs; of one chunk of the batch), for profiling."""
        times = np.zeros((repeat, len(self.plan["steps"])))
        arena = self._take()
        try:
            for r in range(repeat):
                for i, (fn, ptrs) in enumerate(arena.steps):
                    t0 = time.perf_counter()
                    fn(*ptrs[:1] if self.packed else ptrs)
                    times[r, i] = time.perf_counter() - t0
        finally:
            self._free.append(arena)
        return list(np.median(times, axis=0))

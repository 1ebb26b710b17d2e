"""Run a compiled plan: an arena of intermediates, weights, and kernel calls in order.

The plan (a JSON-able dict, see driver/plan.py) names for each value where it lives: the arena at a
byte offset (intermediates share it by liveness) or the weights blob. Every step calls one kernel with
one pointer per argument, output last. This file is the same for every driver: a driver only turns a
kernel name into a callable and owns the memory the pointers point to.

The weights and the kernels are shared by every call; an arena belongs to one call in flight at a time
(ctypes releases the GIL during a kernel, so calls from threads really overlap): concurrent calls each
take their own from a pool (CpuExecutable).
"""
from __future__ import annotations

import ctypes
import threading
import time

import numpy as np

from openprim.base.errors import OpenPrimError

from openprim.base.dtypes import STORAGE, from_storage, host_to_storage

ALIGN = 64


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


def raise_failed_checks(plan: dict, read) -> None:
    """One OpenPrimError naming every run-time check of the plan (gather's index bounds) that a run failed;
    read(value id) -> that check's 1-element array."""
    failed = [f"{c['message']} ({int(n)} of them)" for c in plan.get("checks", ())
              if (n := read(c["value"]).reshape(-1)[0])]
    if failed:
        raise OpenPrimError("; ".join(failed))


def aligned_bytes(n: int) -> np.ndarray:
    """A zeroed uint8 buffer of n bytes whose data pointer is 64-byte aligned."""
    raw = np.zeros(n + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + n]


class _Arena:
    """What one call in flight writes: every plan value viewed in an arena of its own (or in the shared
    weights), which the views keep alive, and every step's argument pointers into those views."""

    __slots__ = ("views", "steps")

    def __init__(self, exe: "CpuExecutable"):
        arena = aligned_bytes(exe.plan["arena_bytes"])
        self.views = [_view(v, arena if v["storage"] == "arena" else exe.weights) for v in exe.plan["values"]]
        self.steps = []
        for fn, step in zip(exe.kernels, exe.plan["steps"]):
            ptrs = [ctypes.c_void_p(self.views[a].ctypes.data) for a in step["args"]]
            if exe.packed:
                ptrs = [(ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs]), ptrs]
            self.steps.append((fn, ptrs))


def _view(v: dict, base: np.ndarray) -> np.ndarray:
    count = int(np.prod(v["shape"], dtype=np.int64))
    return np.frombuffer(base, STORAGE[v["dtype"]], count, v["offset"]).reshape(v["shape"])


class CpuExecutable:
    """A compiled network on the CPU: call it with numpy arrays, get numpy arrays back.

    Calls from several threads at once are safe: each call takes an arena (with its step pointers) from a
    free list and gives it back, and a new one is made only when every arena is in use, so N concurrent
    callers make at most N arenas, kept for reuse. One caller at a time always reuses the same arena."""

    def __init__(self, plan: dict, kernel_address, weights: bytes | np.ndarray, keepalive=None, packed=False):
        """kernel_address(name) -> address of `void name(T *arg0, ...)`; with packed=True, of MLIR's
        JIT wrapper `void _mlir_name(void **args)` (args[i] points at the i-th pointer)."""
        self.plan = plan
        self._keepalive = keepalive
        self.packed = packed  # the JIT engine or the loaded library: kernels live as long as we do
        self.weights = aligned_bytes(plan["weights_bytes"])
        if plan["weights_bytes"]:
            self.weights[:] = np.frombuffer(weights, np.uint8, plan["weights_bytes"])
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
        self._growing = threading.Lock()
        self.arenas = 0          # made so far: the most calls that were ever in flight at once
        self._free = [self._new_arena()]

    def _new_arena(self) -> _Arena:
        arena = _Arena(self)
        with self._growing:
            self.arenas += 1
        return arena

    def _take(self) -> _Arena:
        """A free arena (the one given back last: warm in the caches), or a new one when all are in use.
        list.pop and list.append are atomic, so the free list needs no lock."""
        try:
            return self._free.pop()
        except IndexError:
            return self._new_arena()

    @property
    def input_names(self):
        return [i["name"] for i in self.plan["inputs"]]

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
        """Copy the inputs into `arena`, run the steps, return copies of the outputs (storage dtype); spans:
        where _steps records each kernel call's start and end, or None."""
        plan, views = self.plan, arena.views
        chunks = plan.get("batch_chunks", 1)
        if chunks == 1:
            for value, data in inputs:
                views[value][...] = data
            self._steps(arena, spans)
            raise_failed_checks(plan, views.__getitem__)
            return [views[o].copy() for o in plan["outputs"]]
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

"""Run a compiled plan: one arena of intermediates, weights, and kernel calls in order.

The plan (a JSON-able dict, see driver/plan.py) names for each value where it lives: the arena at a
byte offset (intermediates share it by liveness) or the weights blob. Every step calls one kernel with
one pointer per argument, output last. This file is the same for every driver: a driver only turns a
kernel name into a callable and owns the memory the pointers point to.
"""
from __future__ import annotations

import ctypes
import time

import numpy as np

from openprim.base.errors import OpenPrimError

from openprim.base.dtypes import STORAGE, from_storage, to_storage

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
        if a.dtype.kind not in "fiub":   # complex, strings, objects: no meaningful conversion to floats
            raise OpenPrimError(f"input '{spec['name']}' has dtype {a.dtype}; expected real numbers (float, int or bool)")
        stored = np.ascontiguousarray(to_storage(a, v["dtype"]))
        if a.dtype.kind == "f" and a.dtype.itemsize > stored.dtype.itemsize and a.size \
                and np.isinf(stored).any() and not np.isinf(a).any():
            raise OpenPrimError(f"input '{spec['name']}' ({a.dtype}) has values beyond the range of {v['dtype']} "
                                f"(largest |x| {np.nanmax(np.abs(a)):.4g}); scale it or compile in f32")
        out.append((spec["value"], stored))
    return out


def aligned_bytes(n: int) -> np.ndarray:
    """A zeroed uint8 buffer of n bytes whose data pointer is 64-byte aligned."""
    raw = np.zeros(n + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + n]


class CpuExecutable:
    """A compiled network on the CPU: call it with numpy arrays, get numpy arrays back."""

    def __init__(self, plan: dict, kernel_address, weights: bytes | np.ndarray, keepalive=None, packed=False):
        """kernel_address(name) -> address of `void name(T *arg0, ...)`; with packed=True, of MLIR's
        JIT wrapper `void _mlir_name(void **args)` (args[i] points at the i-th pointer)."""
        self.plan = plan
        self._keepalive = keepalive
        self.packed = packed  # the JIT engine or the loaded library: kernels live as long as we do
        self.arena = aligned_bytes(plan["arena_bytes"])
        self.weights = aligned_bytes(plan["weights_bytes"])
        if plan["weights_bytes"]:
            self.weights[:] = np.frombuffer(weights, np.uint8, plan["weights_bytes"])
        self.views = [self._view(v) for v in plan["values"]]
        self.steps = []
        fns = {}
        for step in plan["steps"]:
            name = step["kernel"]
            ptrs = [ctypes.c_void_p(self.views[a].ctypes.data) for a in step["args"]]
            if name not in fns:
                address = kernel_address(name)
                if not address:
                    raise OpenPrimError(f"kernel '{name}' is missing from the compiled kernels")
                proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (1 if packed else len(ptrs))))
                fns[name] = proto(address)
            if packed:
                ptrs = [(ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs]), ptrs]
            self.steps.append((fns[name], ptrs))

    def _view(self, v):
        dtype = STORAGE[v["dtype"]]
        count = int(np.prod(v["shape"], dtype=np.int64))
        base = self.arena if v["storage"] == "arena" else self.weights
        return np.frombuffer(base, dtype, count, v["offset"]).reshape(v["shape"])

    @property
    def input_names(self):
        return [i["name"] for i in self.plan["inputs"]]

    def __call__(self, *args, **kwargs):
        inputs = checked_inputs(self.plan, args, kwargs)
        plan, values = self.plan, self.plan["values"]
        chunks = plan.get("batch_chunks", 1)
        if chunks == 1:
            for value, data in inputs:
                self.views[value][...] = data
            self.run_steps()
            stored = [self.views[o].copy() for o in plan["outputs"]]
        else:  # the steps once per chunk of the batch (dim 0)
            stored = [np.empty(host_shape(plan, o), self.views[o].dtype) for o in plan["outputs"]]
            for i in range(chunks):
                for value, data in inputs:
                    n = len(self.views[value])
                    self.views[value][...] = data[i * n:(i + 1) * n]
                self.run_steps()
                for out, o in zip(stored, plan["outputs"]):
                    n = len(self.views[o])
                    out[i * n:(i + 1) * n] = self.views[o]
        outs = [from_storage(s, values[o]["dtype"], values[o].get("host_dtype")) for s, o in zip(stored, plan["outputs"])]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_steps(self):
        for fn, ptrs in self.steps:
            fn(*ptrs[:1] if self.packed else ptrs)

    def time_steps(self, repeat: int = 10) -> list[float]:
        """Seconds per kernel step (median of `repeat` runs; of one chunk of the batch), for profiling."""
        times = np.zeros((repeat, len(self.steps)))
        for r in range(repeat):
            for i, (fn, ptrs) in enumerate(self.steps):
                t0 = time.perf_counter()
                fn(*ptrs[:1] if self.packed else ptrs)
                times[r, i] = time.perf_counter() - t0
        return list(np.median(times, axis=0))

"""Run a compiled plan on a GPU: the same plan as the CPU (driver/plan.py), device memory instead of numpy.

Device memory is three allocations made once: the arena (inputs, outputs and intermediates at the
plan's offsets), the weights (copied once), and a scratch area that every kernel's temporary buffers
share (kernels run one after another on one stream). Each plan step is a list of launches whose
arguments are resolved to device pointers at load time, so a run is copies in, launches, copies out.
"""
from __future__ import annotations

import numpy as np

from openprim.base.dtypes import STORAGE, from_storage
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target

from .cuda import CudaDevice
from .device import Device, DeviceError
from .executor import checked_inputs
from .hip import HipDevice


def open_device(target, index: int = 0) -> Device:
    """The driver for a target ('nvvm:sm_90' -> CUDA, 'rocdl:gfx942' -> HIP; a Target or its text),
    checked against the device (Target.runs_on)."""
    target = parse_target(target)
    if target.kind == "nvvm":
        dev = CudaDevice(index)
    elif target.kind == "rocdl":
        dev = HipDevice(index)
    else:
        raise OpenPrimError(f"target '{target}' does not run on a GPU")
    why_not = target.runs_on(dev.arch())
    if why_not:
        raise DeviceError(f"{why_not} (GPU {index}: {dev.name()})")
    return dev


class GpuExecutable:
    """A compiled network on a GPU: call it with numpy arrays, get numpy arrays back."""

    def __init__(self, plan: dict, image: bytes, weights: bytes, device: Device):
        self.plan, self.device = plan, device
        self.module = device.load_module(image)
        self.arena = device.alloc(plan["arena_bytes"])
        self.weights = device.alloc(plan["weights_bytes"])
        self.scratch = device.alloc(plan.get("scratch_bytes", 0))
        if plan["weights_bytes"]:
            device.copy_to_device(self.weights, np.frombuffer(weights, np.uint8, plan["weights_bytes"]))
        self.pointers = [(self.arena if v["storage"] == "arena" else self.weights) + v["offset"]
                         for v in plan["values"]]
        functions = {}
        self.tensor_maps = {}  # (address, spec) -> device address of the encoded map
        self.launches = []  # (function, grid, block, args, shared, step index)
        for i, step in enumerate(plan["steps"]):
            buffers = [self.pointers[a] for a in step["args"]]
            for launch in plan["kernels"][step["kernel"]]["launches"]:
                name = launch["function"]
                if name not in functions:
                    functions[name] = device.function(self.module, name)
                args = [self._tensor_map(buffers, v) if kind == "tensormap" else self._address(buffers, kind, v)
                        for kind, v in launch["args"]]
                if launch["shared"] > device.DEFAULT_SHARED:
                    device.allow_shared(functions[name], launch["shared"])
                self.launches.append((functions[name], tuple(launch["grid"]), tuple(launch["block"]), args,
                                      launch["shared"], i))
        self.functions = functions

    def _address(self, buffers, kind, v) -> int:
        return buffers[v] if kind == "arg" else {"scratch": self.scratch, "weight": self.weights, "i64": 0}[kind] + v

    def _tensor_map(self, buffers, spec) -> int:
        """The device address of a TMA tensor map over one of the step's buffers (made once, at load)."""
        address = self._address(buffers, *spec["memory"])
        key = (address, repr(sorted((k, v) for k, v in spec.items() if k != "memory")))
        if key not in self.tensor_maps:
            self.tensor_maps[key] = self.device.tensor_map(address, spec)
        return self.tensor_maps[key]

    @property
    def input_names(self):
        return [i["name"] for i in self.plan["inputs"]]

    def __call__(self, *args, **kwargs):
        for value, data in checked_inputs(self.plan, args, kwargs):
            self.device.copy_to_device(self.pointers[value], data)
        self.run_steps()
        outs = []
        for o in self.plan["outputs"]:
            v = self.plan["values"][o]
            host = np.empty(v["shape"], STORAGE[v["dtype"]])
            self.device.copy_to_host(host, self.pointers[o])
            outs.append(from_storage(host, v["dtype"]))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_steps(self):
        for fn, grid, block, args, shared, _ in self.launches:
            self.device.launch(fn, grid, block, args, shared)
        self.device.synchronize()

    def time_ms(self, repeat: int = 20, warmup: int = 3) -> float:
        """Milliseconds per run of all the launches (device events; inputs already on the device)."""
        for _ in range(warmup):
            self.run_steps()
        return self.device.elapsed_ms(lambda: [self.device.launch(f, g, b, a, s) for f, g, b, a, s, _ in self.launches],
                                      repeat)

    def time_steps(self, repeat: int = 20) -> list[float]:
        """Milliseconds per plan step (all its launches), for profiling."""
        times = [0.0] * len(self.plan["steps"])
        for i in range(len(times)):
            mine = [x for x in self.launches if x[5] == i]
            times[i] = self.device.elapsed_ms(lambda: [self.device.launch(f, g, b, a, s) for f, g, b, a, s, _ in mine],
                                              repeat)
        return times

    def __del__(self):
        try:
            for p in (self.arena, self.weights, self.scratch, *self.tensor_maps.values()):
                self.device.free(p)
        except Exception:  # interpreter shutdown or a lost device: nothing left to free
            pass

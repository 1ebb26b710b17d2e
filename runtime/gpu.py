"""Run a compiled plan on a GPU: the same plan as the CPU (driver/plan.py), device memory instead of numpy.

Device memory is three allocations made once: the arena (inputs, outputs and intermediates at the
plan's offsets), the weights (copied once), and a scratch area that every kernel's temporary buffers
share (kernels run one after another on one stream); a plan with parameters (weights as values) has a
fourth, the params region, which `load_weights` overwrites in place (device copies under the lock, after
every call enqueued before it has finished, so a call sees all old or all new parameters; the addresses
do not change, so the captured graph stays valid); a plan with state (Graph.carry: a KV cache) has a fifth,
zeros at first, that calls read and leave the next state in (written in place, or copied in on the
stream after the launches), and `share_state` points at another executable's (launches bound anew, the
graph captured again). Each plan step is a list of launches whose
arguments are resolved to device pointers at load time, so a run is copies in, launches, copies out.

The launches are the same on every call but for the buffers of the plan's inputs and outputs: the
first call captures them once as a graph (stream capture on the executable's own non-blocking stream,
then instantiate) and every call replays it with one graph launch, on whatever stream the call runs on.
`graphs=False` (or OPENPRIM_GPU_GRAPHS=0) launches the kernels one by one.

A caller's device array is bound in place: the kernels that read an input (or a view of it) or write
an output take the caller's pointer as that argument, so the call copies nothing. When the pointer
differs from the previous call's, only those kernels' graph nodes get new arguments
(cuGraphExecKernelNodeSetParams). A buffer stays in the arena, copied in or out around the launches,
where binding cannot work: a TMA tensor map encodes the address (maps are made once, at load), the
caller's pointer is not aligned as the arena's offsets are, an output overlaps an input, the same value
is an input and an output or two outputs, the plan predates view records (plan version 1), or the
driver cannot update an instantiated graph (HIP here).

A call takes numpy arrays (copied in from the host through a page-locked buffer, asynchronously, outputs and
the run-time checks' counts copied back the same way: one wait a call) or device
arrays (runtime/arrays.py: __cuda_array_interface__ or DLPack), which are bound in place (or copied
device-to-device on the stream) and never touch the host; `run_into` also writes the outputs into the caller's device arrays on
the caller's stream (IO binding), without synchronizing. The arena is shared by all calls, so a call on
another stream than the previous one first waits for the previous one's work.

Threads: every call enqueues its work (the wait for the previous call, the copies in, the graph's update
and launch, the copies out) holding the executable's lock, so calls from threads are ordered on the
device one after another, each on its own stream, and none can change the graph or the arena while
another one enqueues. A numpy call holds the lock until its outputs are back on the host. Driver contexts
are current per thread: a thread's first call makes the device's current in it (_enter).
"""
from __future__ import annotations

import bisect
import itertools
import os
import threading

import numpy as np

from openprim.base.dtypes import STORAGE, from_storage
from openprim.base.errors import OpenPrimError
from openprim.base.target import Target

from .arrays import DeviceArray, check_bound, describe, is_device_array
from .cuda import CudaDevice
from .device import Device, DeviceError
from .executor import (ALIGN, checked_inputs, checked_params, checked_state, ordered_inputs, param_names,
                       raise_failed_checks, same_state_layout, state_names, stored_param, whole_root)
from .hip import HipDevice


_OPENED: dict[tuple[str, int], Device] = {}   # one Device per GPU and driver in a process
_OPENING = threading.Lock()


def open_device(target: Target, index: int = 0) -> Device:
    """The driver for a target (nvvm:sm_90 -> CUDA, rocdl:gfx942 -> HIP), checked against the device
    (Target.runs_on). GPU `index` is opened once per process: every executable on it shares the Device
    (share_state, a dynamic artifact's buckets and their weights need the same one), and made current in
    the calling thread."""
    if target.kind not in ("nvvm", "rocdl"):
        raise OpenPrimError(f"target '{target}' does not run on a GPU")
    with _OPENING:
        key = (target.kind, index)
        if key not in _OPENED:
            _OPENED[key] = CudaDevice(index) if target.kind == "nvvm" else HipDevice(index)
        dev = _OPENED[key]
    if getattr(_CURRENT, "device", None) is not dev:    # opened by another thread: its context is not current
        dev.make_current()                              # here (autograd's device thread loads the backward)
        _CURRENT.device = dev
    why_not = target.runs_on(dev.arch())
    if why_not:
        raise DeviceError(f"{why_not} (GPU {index}: {dev.name()})")
    return dev


def check_device_memory(plan: dict, device: Device) -> None:
    """Refuse, before allocating anything, a plan whose arena, weights and scratch do not fit into the
    device's free memory (one line naming the sizes), rather than failing at the third allocation."""
    sizes = {"arena": plan["arena_bytes"], "weights": plan["weights_bytes"], "scratch": plan.get("scratch_bytes", 0),
             **({"params": plan["params_bytes"]} if "params" in plan else {}),
             **({"state": plan["state_bytes"]} if "state" in plan else {})}
    free = device.free_memory()
    if free is not None and sum(sizes.values()) > free:
        parts = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items() if v)
        raise DeviceError(f"the model needs {sum(sizes.values()) / 2**20:.1f} MiB of device memory ({parts}); "
                          f"{device.name()} has {free / 2**20:.1f} MiB free")


_CURRENT = threading.local()   # .device: the Device an executable last made current in this thread


def graphs_enabled(graphs: bool | None) -> bool:
    """graphs, or when None the environment: OPENPRIM_GPU_GRAPHS=0 turns graph replay off."""
    return os.environ.get("OPENPRIM_GPU_GRAPHS", "1") != "0" if graphs is None else bool(graphs)


class DeviceWeights:
    """A weights blob in device memory, freed when the last executable using it is gone (one per plain
    executable; one for all buckets of a dynamic artifact, runtime/dynamic.py)."""

    def __init__(self, device: Device, blob: bytes, size: int):
        self.device, self.pointer = device, device.alloc(size)
        if size:
            device.copy_to_device(self.pointer, np.frombuffer(blob, np.uint8, size))

    def __del__(self):
        try:
            self.device.free(self.pointer)
        except Exception:  # interpreter shutdown or a lost device: nothing left to free
            pass


def left_out(launch: dict, buffers: list) -> bool:
    """Whether a launch is a copy onto itself, left out of the run: it is marked "unless_aliased" (a kernel's
    copy of its input to its output, backends/gpu_common.launches) and the plan gave both one buffer (a KV
    cache written in place). buffers: the step's arguments, as anything equal for one buffer."""
    return "unless_aliased" in launch and len({buffers[j] for j in launch["unless_aliased"]}) == 1


class GpuExecutable:
    """A compiled network on a GPU: call it with numpy arrays (numpy back) or device arrays (DeviceArrays
    back), or bind device buffers with run_into."""

    def __init__(self, plan: dict, image: bytes, weights, device: Device, graphs: bool | None = None,
                 params: bytes = b""):
        """weights: the blob (bytes), or DeviceWeights that other executables share (a dynamic artifact's
        pool). params: the initial bytes of the plan's params region (weights as values)."""
        self.plan, self.device = plan, device
        self.graphs = graphs_enabled(graphs)
        check_device_memory(plan, device)
        self.module = device.load_module(image)
        self.arena = device.alloc(plan["arena_bytes"])
        self.shared_weights = weights if isinstance(weights, DeviceWeights) else \
            DeviceWeights(device, weights, plan["weights_bytes"])
        self.weights = self.shared_weights.pointer
        self.scratch = device.alloc(plan.get("scratch_bytes", 0))
        self.params = device.alloc(plan["params_bytes"]) if "params" in plan else None
        if plan.get("params_bytes"):
            device.copy_to_device(self.params, np.frombuffer(params, np.uint8, plan["params_bytes"]))
        self.state = device.alloc(plan["state_bytes"]) if "state" in plan else None
        self.owns_state = True
        if plan.get("state_bytes"):
            device.copy_to_device(self.state, np.zeros(plan["state_bytes"], np.uint8))
        self._bind_launches()
        self.stream = device.create_stream()   # graphs are captured here; calls without a stream run here
        self.last_stream = self.stream         # where the previous call's work was enqueued
        self.graph = None                      # (graph, executable graph, its kernel nodes), at the first replay
        self.graph_targets = None              # the buffers the graph's nodes address now, per binding
        self._lock = threading.RLock()         # held while a call enqueues: the state above is one call's
        self.host, self.staged = None, None    # numpy calls' host buffer and its views (_staging)
        device.synchronize()                   # the weights and tensor maps are in place before any launch

    def _bind_launches(self) -> None:
        """Every value's device address and every launch's arguments (again after share_state)."""
        plan, device = self.plan, self.device
        regions = {"arena": self.arena, "param": self.params, "state": self.state}
        self.pointers = [regions.get(v["storage"], self.weights) + v["offset"] for v in plan["values"]]
        roots = [v.get("view_of", i) for i, v in enumerate(plan["values"])]
        bound = [i["value"] for i in plan["inputs"]] + list(plan["outputs"])
        bound_roots = [roots[v] for v in bound]
        slots = {r: b for b, r in enumerate(bound_roots)}     # root -> its binding (inputs, then outputs)
        functions = {}
        self.tensor_maps = {}  # (address, spec) -> device address of the encoded map
        self.launches = []  # (function, grid, block, args, shared, step index)
        # launch index -> [(argument position, binding, bytes from the bound value to the argument's)]: what
        # a bound buffer replaces (a view slice of it lies past its start)
        self.bound_args = {}
        mapped = set()         # bindings a tensor map addresses: never bound in place
        for i, step in enumerate(plan["steps"]):
            buffers = [self.pointers[a] for a in step["args"]]
            for launch in plan["kernels"][step["kernel"]]["launches"]:
                if left_out(launch, buffers):
                    continue
                name = launch["function"]
                if name not in functions:
                    functions[name] = device.function(self.module, name)
                args = [self._tensor_map(buffers, v) if kind == "tensormap" else self._address(buffers, kind, v)
                        for kind, v in launch["args"]]
                for pos, (kind, v) in enumerate(launch["args"]):
                    binding = slots.get(roots[step["args"][v]]) if kind == "arg" else \
                        slots.get(roots[step["args"][v["memory"][1]]]) if kind == "tensormap" and v["memory"][0] == "arg" \
                        else None
                    if binding is not None and kind == "arg":
                        past = self.pointers[step["args"][v]] - self.pointers[bound[binding]]
                        self.bound_args.setdefault(len(self.launches), []).append((pos, binding, past))
                    elif binding is not None:
                        mapped.add(binding)
                if launch["shared"] >= device.DEFAULT_SHARED:   # (at 48 KB, static shared memory would not fit)
                    device.allow_shared(functions[name], launch["shared"])
                self.launches.append((functions[name], tuple(launch["grid"]), tuple(launch["block"]), args,
                                      launch["shared"], i))
        self.functions = functions
        self.input_specs = [self._spec(i["name"], i["value"]) for i in plan["inputs"]]
        self.output_specs = [self._spec(f"output {k}", o) for k, o in enumerate(plan["outputs"])]
        self.arena_targets = [spec[1] for spec in self.input_specs + self.output_specs]
        self.bindable = [plan.get("version", 1) >= 2 and plan["values"][r]["storage"] == "arena"
                         and bound_roots.count(r) == 1 and b not in mapped and whole_root(plan["values"], bound[b], r)
                         for b, r in enumerate(bound_roots)]

    def _spec(self, name: str, value: int) -> tuple:
        """(name, device pointer, shape, dtype, bytes) of a plan input or output."""
        v = self.plan["values"][value]
        count = int(np.prod(v["shape"], dtype=np.int64))
        return name, self.pointers[value], tuple(v["shape"]), v["dtype"], count * np.dtype(STORAGE[v["dtype"]]).itemsize

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

    @property
    def param_names(self) -> list[str]:
        """The names of the parameters load_weights replaces (weights="values"); [] for constant weights."""
        return param_names(self.plan)

    def load_weights(self, weights, strict: bool = True) -> None:
        """Replace the parameters (weights="values"), as CpuExecutable.load_weights (checked the same way,
        nothing written on an error): under the lock, once every call enqueued before has finished, the new
        values are copied into the params region; calls enqueued after it see them."""
        updates = checked_params(self.plan, weights, strict)
        self._enter()
        with self._lock:
            self.device.synchronize()          # no call enqueued before still reads the parameters
            for value, data in updates:
                self.device.copy_to_device(self.pointers[value], data)
            self.device.synchronize()          # the host copies (legacy stream) land before the next call

    def state_dict(self) -> dict[str, np.ndarray]:
        """{name: the parameter's current value} (bf16 as float32), copied from the device."""
        params, values = self.plan.get("params", ()), self.plan["values"]
        copies = self._copies(params)
        return {p["name"]: from_storage(stored_param(values[p["value"]], p.get("perm"), copies[p["name"]]),
                                        values[p["value"]]["dtype"]) for p in params}

    def _copies(self, entries) -> dict[str, np.ndarray]:
        """{entry's name: a host copy of its value} (in storage dtype), after the calls enqueued before."""
        self._enter()
        out = {}
        with self._lock:
            self.device.synchronize()
            for e in entries:
                v = self.plan["values"][e["value"]]
                out[e["name"]] = np.empty(v["shape"], STORAGE[v["dtype"]])
                self.device.copy_to_host(out[e["name"]], self.pointers[e["value"]])
        return out

    @property
    def state_names(self) -> list[str]:
        """The names of the state this executable carries between calls (Graph.carry); [] for none."""
        return state_names(self.plan)

    def get_state(self) -> dict[str, np.ndarray]:
        """{name: the state's current value} (bf16 as float32), copied from the device after the calls
        enqueued before."""
        entries = self.plan.get("state", ())
        copies = self._copies(entries)
        return {e["name"]: from_storage(copies[e["name"]], self.plan["values"][e["value"]]["dtype"]) for e in entries}

    def set_state(self, arrays) -> None:
        """Replace state entries by arrays (a mapping name -> array of the state's shape); others keep theirs."""
        updates = checked_state(self.plan, arrays)
        self._enter()
        with self._lock:
            self.device.synchronize()
            for value, data in updates:
                self.device.copy_to_device(self.pointers[value], np.ascontiguousarray(data))

    def reset_state(self) -> None:
        """Every state entry back to zeros."""
        self._enter()
        with self._lock:
            self.device.synchronize()
            if self.plan.get("state_bytes"):
                self.device.copy_to_device(self.state, np.zeros(self.plan["state_bytes"], np.uint8))

    def share_state(self, other: "GpuExecutable") -> None:
        """Work on `other`'s state region from now on (as CpuExecutable.share_state; same device): the
        launches are bound anew and the graph is captured again at the next call."""
        why = same_state_layout(self.plan, other.plan)
        if why or other.device is not self.device:
            raise OpenPrimError(f"share_state: {why or 'the executables are on different devices'}")
        self._enter()
        with self._lock:
            self.device.synchronize()
            if self.owns_state:
                self.device.free(self.state)
            self.state, self.owns_state, self._shared_with = other.state, False, other   # keeps it alive
            for address in self.tensor_maps.values():
                self.device.free(address)
            self._bind_launches()
            if self.graph is not None:
                self.device.destroy_graph(*self.graph[:2])
                self.graph = None

    def _carry(self, stream) -> None:
        """Copy each state's next value into the state where the kernels did not write it in place."""
        for e in self.plan.get("state", ()):
            if e.get("copy"):
                v = self.plan["values"][e["value"]]
                nbytes = int(np.prod(v["shape"])) * np.dtype(STORAGE[v["dtype"]]).itemsize
                self.device.copy_device_to_device(self.pointers[e["value"]], self.pointers[e["next"]], nbytes, stream)

    def _enter(self) -> None:
        """Make the device's context current in the calling thread, where an executable has not (a
        server's worker thread that never used the GPU has no current context)."""
        if getattr(_CURRENT, "device", None) is not self.device:
            self.device.make_current()
            _CURRENT.device = self.device

    def __call__(self, *args, **kwargs):
        arrays = ordered_inputs(self.plan, args, kwargs)
        on_device = [is_device_array(a) for a in arrays]
        self._enter()
        if any(on_device):
            if not all(on_device):
                host = self.input_names[on_device.index(False)]
                raise OpenPrimError(f"input '{host}' is a host array while other inputs are on the GPU: "
                                    f"pass all inputs on GPU {self.device.index}, or all as numpy arrays")
            outs = [DeviceArray(self.device, shape, dtype) for _, _, shape, dtype, _ in self.output_specs]
            self.run_into(arrays, outs)
            return outs[0] if len(outs) == 1 else tuple(outs)
        inputs = checked_inputs(self.plan, arrays, {})
        checks = self.plan.get("checks", ())
        with self._lock:                       # until the outputs have left the arena
            staged_in, staged_out, staged_checks = self._staging()
            self.device.synchronize()          # the arena is free: no call is still reading it
            for (value, data), view in zip(inputs, staged_in):
                view[:] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
                self.device.copy_to_device_async(self.pointers[value], view, self.stream)
            self._enqueue(self.stream, self.arena_targets)
            self._carry(self.stream)
            self.last_stream = self.stream
            for (_, pointer, *_), view in zip(self.output_specs, staged_out):
                self.device.copy_to_host_async(view, pointer, self.stream)
            for check, view in zip(checks, staged_checks):
                self.device.copy_to_host_async(view, self.pointers[check["value"]], self.stream)
            self.device.stream_synchronize(self.stream)
            stored = [view.view(STORAGE[dtype]).reshape(shape).copy()
                      for view, (_, _, shape, dtype, _) in zip(staged_out, self.output_specs)]
            counts = {check["value"]: view.view(np.int32).copy() for check, view in zip(checks, staged_checks)}
        raise_failed_checks(self.plan, counts.__getitem__)
        outs = [from_storage(host, spec[3], self.plan["values"][o].get("host_dtype"))  # precision=
                for host, spec, o in zip(stored, self.output_specs, self.plan["outputs"])]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _staging(self) -> tuple[list, list, list]:
        """Byte views of the host buffer that numpy calls copy through (page-locked: the copies are
        asynchronous, and a call waits once, for its outputs and check counts), per input, output and
        run-time check; made at the first numpy call, used by one call at a time (under the lock)."""
        if self.staged is None:
            sizes = [spec[4] for spec in self.input_specs + self.output_specs] + [4] * len(self.plan.get("checks", ()))
            offsets = [0, *itertools.accumulate(-(-n // ALIGN) * ALIGN for n in sizes)]
            self.host = self.device.host_buffer(offsets[-1])
            views = [self.host[o:o + n] for o, n in zip(offsets, sizes)]
            ins, outs = len(self.input_specs), len(self.output_specs)
            self.staged = views[:ins], views[ins:ins + outs], views[ins + outs:]
        return self.staged

    def run_into(self, inputs, outputs, stream: int | None = None) -> None:
        """Run on device arrays: inputs (in plan order, or a dict by name) copied device-to-device into the
        arena, the plan launched (replayed as a graph unless graphs are off), the outputs copied into
        `outputs` (device arrays of the plan's output shapes and dtypes; a list, or one array). With a
        stream (an int CUstream/hipStream_t handle of this device) everything is enqueued there and the call
        returns at once; without one it runs on the executable's stream and returns when done."""
        if isinstance(inputs, dict):
            inputs = ordered_inputs(self.plan, (), dict(inputs))
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        if len(outputs) != len(self.output_specs):
            raise OpenPrimError(f"expected {len(self.output_specs)} output array(s), got {len(outputs)}")
        self._enter()
        if stream is not None:
            self.device.check_stream(stream)
        where = self.stream if stream is None else stream
        sources = self._bind(inputs, self.input_specs, "input", where)
        targets = self._bind(outputs, self.output_specs, "output", where)
        self.run_pointers([v.pointer for v in sources], [v.pointer for v in targets], where)
        for array in outputs:
            if isinstance(array, DeviceArray):
                array.stream = stream
        if stream is None:
            self.device.stream_synchronize(where)
            self.raise_failed_checks()

    def raise_failed_checks(self) -> None:
        """One OpenPrimError naming the plan's run-time checks that the last run failed; call it once that
        run is done (run_pointers returns before)."""
        raise_failed_checks(self.plan, self._read_check)

    def _read_check(self, value: int) -> np.ndarray:
        """A run-time check's count (plan["checks"]), read back after the run it belongs to."""
        host = np.empty(1, np.int32)
        self.device.copy_to_host(host, self.pointers[value])
        return host

    def _bind(self, arrays, specs, what, stream) -> list:
        """DeviceViews of the caller's arrays, checked against the plan; the producer's pending writes
        (a CAI stream other than ours) are ordered before `stream`."""
        if len(arrays) != len(specs):
            raise OpenPrimError(f"expected {len(specs)} {what}(s) {[s[0] for s in specs]}, got {len(arrays)}")
        views = []
        for array, (name, _, shape, dtype, _) in zip(arrays, specs):
            if not is_device_array(array):
                raise OpenPrimError(f"{what} '{name}' is not a device array (run_into takes arrays in GPU memory "
                                    f"with __cuda_array_interface__ or __dlpack__); call the model for numpy arrays")
            view = describe(array, stream)
            check_bound(view, what, name, shape, dtype, self.device)
            if view.stream not in (None, stream):
                self.device.wait(stream, view.stream)
            views.append(view)
        return views

    def run_pointers(self, inputs: list[int], outputs: list[int], stream: int) -> None:
        """run_into on raw device pointers, unchecked (a framework that checked its tensors itself): the
        buffers bound in place or copied, the plan, all enqueued on `stream`."""
        self._enter()
        with self._lock:
            self._follow(stream)
            targets = self._targets(inputs, outputs)
            n = len(inputs)
            copy = self.device.copy_device_to_device
            for (_, arena, _, _, nbytes), src, target in zip(self.input_specs, inputs, targets):
                if target != src:
                    copy(arena, src, nbytes, stream)
            self._enqueue(stream, targets)
            self._carry(stream)
            for (_, arena, _, _, nbytes), dst, target in zip(self.output_specs, outputs, targets[n:]):
                if target != dst:
                    copy(dst, arena, nbytes, stream)

    def _follow(self, stream) -> None:
        """Order what is enqueued on `stream` next after the previous call's work, which may still use the
        arena (on another stream); under the lock. Not inside a framework's capture (see _enqueue): a
        captured stream cannot wait for an event of another one, and the capture began after the device
        synchronized (torch.cuda.graph does so first)."""
        if stream != self.last_stream and not self.device.is_capturing(stream):
            self.device.wait(stream, self.last_stream)
            self.last_stream = stream

    def _targets(self, inputs: list[int], outputs: list[int]) -> list[int]:
        """Per binding (inputs, then outputs), the buffer the kernels address: the caller's where it
        can be bound in place (see the module docstring), else the arena's."""
        if self.graphs and not self.device.updates_graph_args:
            return self.arena_targets
        reads = sorted((p, p + spec[4]) for p, spec in zip(inputs, self.input_specs))
        starts = [lo for lo, _ in reads]
        reach = list(itertools.accumulate((hi for _, hi in reads), max))   # the furthest end up to each start
        targets = []
        for b, (pointer, spec) in enumerate(zip(inputs + outputs, self.input_specs + self.output_specs)):
            ok = self.bindable[b] and pointer % ALIGN == 0
            if ok and b >= len(inputs):   # an output must not overwrite an input the kernels still read
                before = bisect.bisect_left(starts, pointer + spec[4])      # the inputs that start before its end
                ok = before == 0 or reach[before - 1] <= pointer
            targets.append(pointer if ok else self.arena_targets[b])
        return targets

    def _enqueue(self, stream, targets: list[int]) -> None:
        """The plan's launches on `stream`, the bindings addressing `targets`: one graph launch (its nodes
        updated where a target changed), or every kernel launch when graphs are off or when the caller is
        capturing `stream` into its own graph (torch.compile's mode="reduce-overhead" records the training
        step's graphs so): then the launches become nodes of the caller's graph, addressing the buffers
        bound in this call, which its replays keep."""
        if not self.graphs or self.device.is_capturing(stream):
            self._launch_all(stream, targets)
            return
        if self.graph is None:
            graph, graph_exec = self.device.capture(self.stream, lambda: self._launch_all(self.stream, targets))
            nodes = self.device.graph_kernel_nodes(graph) if self.device.updates_graph_args else []
            self.graph, self.graph_targets = (graph, graph_exec, nodes), list(targets)
        elif targets != self.graph_targets:
            changed = {b for b, (new, old) in enumerate(zip(targets, self.graph_targets)) if new != old}
            for k, subs in self.bound_args.items():
                if any(b in changed for _, b, _ in subs):
                    fn, grid, block, _, shared, _ = self.launches[k]
                    self.device.set_graph_kernel_args(self.graph[1], self.graph[2][k], fn, grid, block,
                                                      self._args(k, targets), shared)
            self.graph_targets = list(targets)
        self.device.graph_launch(self.graph[1], stream)

    def _args(self, k: int, targets: list[int]) -> list[int]:
        """Launch k's arguments with the bound buffers at `targets`."""
        args = list(self.launches[k][3])
        for pos, b, past in self.bound_args.get(k, ()):
            args[pos] = targets[b] + past
        return args

    def _launch_all(self, stream, targets: list[int]) -> None:
        for k, (fn, grid, block, _, shared, _) in enumerate(self.launches):
            self.device.launch(fn, grid, block, self._args(k, targets), shared, stream)

    def run_steps(self):
        self._enter()
        with self._lock:
            self._follow(self.stream)
            self._launch_all(self.stream, self.arena_targets)
            self.device.stream_synchronize(self.stream)

    def time_ms(self, repeat: int = 20, warmup: int = 3, captured: int = 0) -> float:
        """Milliseconds per run of all the launches (device events; inputs already on the device).
        captured > 0 times `captured` runs recorded into one graph, launched `repeat` times: kernels
        shorter than a launch's host cost (a few microseconds) are then timed back to back."""
        self._enter()
        with self._lock:
            self._follow(self.stream)
            for _ in range(warmup):
                self.run_steps()
            if not captured:
                return self.device.elapsed_ms(lambda: self._launch_all(self.stream, self.arena_targets), repeat,
                                              self.stream)
            graph = self.device.capture(self.stream, lambda: [self._launch_all(self.stream, self.arena_targets)
                                                              for _ in range(captured)])
            try:
                self.device.graph_launch(graph[1], self.stream)
                return self.device.elapsed_ms(lambda: self.device.graph_launch(graph[1], self.stream), repeat,
                                              self.stream) / captured
            finally:
                self.device.destroy_graph(*graph)

    def time_steps(self, repeat: int = 20) -> list[float]:
        """Milliseconds per plan step (all its launches), for profiling."""
        self._enter()
        times = [0.0] * len(self.plan["steps"])
        with self._lock:
            self._follow(self.stream)
            for i in range(len(times)):
                mine = [x for x in self.launches if x[5] == i]
                times[i] = self.device.elapsed_ms(
                    lambda: [self.device.launch(f, g, b, a, s, self.stream) for f, g, b, a, s, _ in mine],
                    repeat, self.stream)
        return times

    def launch_spans(self, runs: int = 20, warmup: int = 3) -> np.ndarray:
        """For the profiler (runtime/profile.py): the plan's launches one by one on the executable's stream (no
        graph replay), on what the arena holds (call the executable first), `runs` times after `warmup`
        untimed runs, a timing event recorded before and after each launch. An array [runs, launches, 2]:
        each launch's start and end in milliseconds after its run's first start (self.launches[k][5] is
        launch k's step)."""
        self._enter()
        device, n = self.device, len(self.launches)
        spans = np.zeros((runs, n, 2))
        with self._lock:
            self._follow(self.stream)
            for _ in range(warmup):
                self._launch_all(self.stream, self.arena_targets)
            events = [device.create_timing_event() for _ in range(2 * n)]
            try:
                for r in range(runs):
                    for k, (fn, grid, block, _, shared, _) in enumerate(self.launches):
                        device.record(events[2 * k], self.stream)
                        device.launch(fn, grid, block, self._args(k, self.arena_targets), shared, self.stream)
                        device.record(events[2 * k + 1], self.stream)
                    device.stream_synchronize(self.stream)
                    spans[r] = np.reshape([device.event_ms(events[0], e) for e in events], (n, 2))
            finally:
                for e in events:
                    device.destroy_event(e)
        return spans

    def __del__(self):
        try:
            self.device.synchronize()
            if self.graph is not None:
                self.device.destroy_graph(*self.graph[:2])
            self.device.destroy_stream(self.stream)
            for p in (self.arena, self.scratch, *self.tensor_maps.values()):
                self.device.free(p)
            if self.params is not None:
                self.device.free(self.params)
            if self.state is not None and self.owns_state:
                self.device.free(self.state)
            if self.host is not None:
                self.device.free_host_buffer(self.host)
        except Exception:  # interpreter shutdown or a lost device: nothing left to free
            pass

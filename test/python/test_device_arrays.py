"""Device arrays, IO binding and graph replay of GpuExecutable, against a stand-in for cuda-bindings' driver.

`FakeCuda` is enough of `cuda.bindings.driver` to run a plan: "device memory" is host memory it allocates
and tracks (so a pointer it did not allocate is host memory to cuPointerGetAttribute), kernels are Python
functions run when launched, stream capture records launches instead of running them and cuGraphLaunch
replays them, and every call is logged. A hand-written two-kernel plan (odd shapes) is checked against
float64 numpy on random data, and the log shows what crossed the host boundary and what was launched.
Graph nodes are (graph, index); an executable graph holds its own copy of the launches, which
cuGraphExecKernelNodeSetParams rewrites. The same plan runs on a real GPU in scripts/gpu_frameworks.py.
"""
import ctypes
import enum
import gc
import sys
import types

import numpy as np
import pytest

from openprim.base.errors import OpenPrimError
from openprim.runtime import arrays
from openprim.runtime.arrays import DeviceArray, describe
from openprim.runtime.cuda import CudaDevice
from openprim.runtime.gpu import GpuExecutable

SHAPE, N = (3, 5, 7), 105
CONTEXT = 0xC0


class FakeCuda:
    """cuda.bindings.driver: calls return (CUresult, values...)."""

    class CUresult(enum.Enum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1
        CUDA_ERROR_INVALID_HANDLE = 400

    class CUdevice_attribute(enum.Enum):
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    class CUstream_flags(enum.Enum):
        CU_STREAM_NON_BLOCKING = 1

    class CUstreamCaptureMode(enum.Enum):
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    class CUstreamCaptureStatus(enum.Enum):
        CU_STREAM_CAPTURE_STATUS_NONE = 0
        CU_STREAM_CAPTURE_STATUS_ACTIVE = 1

    class CUpointer_attribute(enum.Enum):
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9

    class CUevent_flags(enum.Enum):
        CU_EVENT_DISABLE_TIMING = 2

    CUstream = int

    def __init__(self):
        self.ok = self.CUresult.CUDA_SUCCESS
        self.log = []                  # (call, details...)
        self.memory = {}               # base address -> (numpy buffer, bytes, device ordinal)
        self.pinned = {}               # page-locked host buffers: base address -> numpy buffer
        self.free_bytes = 1 << 36      # what cuMemGetInfo reports free
        self.streams = {0: CONTEXT, 1: CONTEXT, 2: CONTEXT}   # stream -> its context
        self.capturing = {}            # stream -> launches recorded
        self.graphs = {}
        self.execs = {}                # executable graph -> its launches (set_params changes them)
        self.handles = iter(range(0x5000, 0x6000))
        self.kernels = {"mul": (4, _mul), "relu_bias": (4, _relu_bias)}   # name -> (arguments, function)

    def __getattr__(self, name):       # calls without results
        return lambda *args: (self.ok,)

    def cuDeviceGetCount(self):
        return self.ok, 2

    def cuDeviceGet(self, index):
        return self.ok, index

    def cuDevicePrimaryCtxRetain(self, device):
        return self.ok, CONTEXT + device

    def cuGetErrorString(self, err):
        return self.ok, err.name.encode()

    def cuDeviceGetAttribute(self, attr, device):
        return self.ok, 9 if attr.name.endswith("MAJOR") else 0

    def cuModuleLoadData(self, image):
        return self.ok, "module"

    def cuModuleGetFunction(self, module, name):
        return self.ok, name.decode()

    def alloc(self, nbytes, device=0) -> int:
        raw = np.zeros(nbytes + 256, np.uint8)
        base = raw.ctypes.data + (-raw.ctypes.data) % 256
        self.memory[base] = (raw, nbytes, device)
        return base

    def cuMemAlloc(self, nbytes):
        ptr = self.alloc(nbytes)
        self.log.append(("alloc", ptr, nbytes))
        return self.ok, ptr

    def cuDeviceGetName(self, length, device):
        return self.ok, b"Fake GPU\0"

    def cuMemGetInfo(self):
        return self.ok, self.free_bytes, 1 << 37

    def cuMemFree(self, ptr):
        self.memory.pop(int(ptr), None)
        return (self.ok,)

    def device_of(self, ptr):
        for base, (_, nbytes, device) in self.memory.items():
            if base <= ptr < base + nbytes:
                return device
        return None

    def cuPointerGetAttribute(self, attr, ptr):
        device = self.device_of(ptr)
        return (self.CUresult.CUDA_ERROR_INVALID_VALUE, None) if device is None else (self.ok, device)

    def cuMemcpyHtoD(self, dst, src, nbytes):
        self.log.append(("HtoD", dst, nbytes))
        ctypes.memmove(dst, src, nbytes)
        return (self.ok,)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        self.log.append(("DtoH", src, nbytes))
        ctypes.memmove(dst, src, nbytes)
        return (self.ok,)

    def cuMemHostAlloc(self, nbytes, flags):
        raw = np.zeros(nbytes + 4096, np.uint8)
        base = raw.ctypes.data + (-raw.ctypes.data) % 4096
        self.pinned[base] = raw
        self.log.append(("host_alloc", base, nbytes))
        return self.ok, base

    def cuMemFreeHost(self, ptr):
        self.pinned.pop(int(ptr))
        return (self.ok,)

    def pinned_at(self, ptr, nbytes) -> bool:
        return any(base <= ptr and ptr + nbytes <= base + len(raw) for base, raw in self.pinned.items())

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        assert stream not in self.capturing, "copies are never captured"
        assert self.pinned_at(src, nbytes), "an asynchronous copy from pageable memory"
        self.log.append(("HtoDAsync", dst, nbytes, stream))
        ctypes.memmove(dst, src, nbytes)
        return (self.ok,)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        assert stream not in self.capturing, "copies are never captured"
        assert self.pinned_at(dst, nbytes), "an asynchronous copy into pageable memory"
        self.log.append(("DtoHAsync", src, nbytes, stream))
        ctypes.memmove(dst, src, nbytes)
        return (self.ok,)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        assert stream not in self.capturing, "copies are never captured"
        assert self.device_of(dst) is not None and self.device_of(src) is not None, "a DtoD copy touched host memory"
        self.log.append(("DtoD", dst, src, nbytes, stream))
        ctypes.memmove(dst, src, nbytes)
        return (self.ok,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        count, fn = self.kernels[f]
        pointers = (ctypes.c_void_p * count).from_address(params)
        args = [ctypes.c_uint64.from_address(p).value for p in pointers]
        if stream in self.capturing:
            self.capturing[stream].append((f, args))
        else:
            self.log.append(("launch", f, stream))
            fn(*args)
        return (self.ok,)

    def cuStreamCreate(self, flags):
        stream = next(self.handles)
        self.streams[stream] = CONTEXT
        return self.ok, stream

    def cuStreamGetCtx(self, stream):
        if stream not in self.streams:
            return (self.CUresult.CUDA_ERROR_INVALID_HANDLE, None)
        return self.ok, self.streams[stream]

    def cuEventCreate(self, flags):
        return self.ok, next(self.handles)

    def cuEventElapsedTime(self, start, stop):
        return self.ok, 0.5

    def cuEventRecord(self, event, stream):
        self.log.append(("record", event, stream))
        return (self.ok,)

    def cuStreamWaitEvent(self, stream, event, flags):
        self.log.append(("wait", stream, event))
        return (self.ok,)

    def cuStreamSynchronize(self, stream):
        self.log.append(("sync", stream))
        return (self.ok,)

    def cuStreamBeginCapture(self, stream, mode):
        self.log.append(("begin_capture", stream))
        self.capturing[stream] = []
        return (self.ok,)

    def cuStreamIsCapturing(self, stream):
        status = self.CUstreamCaptureStatus
        return self.ok, status.CU_STREAM_CAPTURE_STATUS_ACTIVE if stream in self.capturing else \
            status.CU_STREAM_CAPTURE_STATUS_NONE

    def cuStreamEndCapture(self, stream):
        graph = next(self.handles)
        self.graphs[graph] = self.capturing.pop(stream)
        self.log.append(("end_capture", stream, len(self.graphs[graph])))
        return self.ok, graph

    def cuGraphInstantiate(self, graph, flags):
        self.log.append(("instantiate", graph))
        self.execs[("exec", graph)] = list(self.graphs[graph])
        return self.ok, ("exec", graph)

    def cuGraphLaunch(self, graph_exec, stream):
        self.log.append(("graph_launch", stream))
        for f, args in self.execs[graph_exec]:
            self.kernels[f][1](*args)
        return (self.ok,)

    def cuGraphGetRootNodes(self, graph, count):
        return (self.ok, [(graph, 0)], 1) if self.graphs[graph] else (self.ok, [], 0)

    def cuGraphNodeGetDependentNodes(self, node, count):
        graph, i = node
        return (self.ok, [(graph, i + 1)], 1) if i + 1 < len(self.graphs[graph]) else (self.ok, [], 0)

    class CUDA_KERNEL_NODE_PARAMS:
        pass

    def cuGraphExecKernelNodeSetParams(self, graph_exec, node, p):
        count, _ = self.kernels[p.func]
        pointers = (ctypes.c_void_p * count).from_address(p.kernelParams)
        args = [ctypes.c_uint64.from_address(q).value for q in pointers]
        self.log.append(("set_params", node[1], args))
        self.execs[graph_exec][node[1]] = (p.func, args)
        return (self.ok,)

    def calls(self, name):
        return [entry for entry in self.log if entry[0] == name]


def _f32(ptr, n=N):
    return np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))


def _mul(x, w, out, n):                  # out = x * w
    _f32(out, n)[:] = _f32(x, n) * _f32(w, n)


def _relu_bias(t, s, out, n):           # out = relu(t) + s, s broadcast over the last dimension (7)
    _f32(out, n)[:] = (np.maximum(_f32(t, n), 0).reshape(-1, 7) + _f32(s, 7)).ravel()


def _plan():
    """x (3,5,7) and s (7,) in, y = relu(x * w) + s out, w a weight: two steps, one launch each."""
    def value(shape, storage, offset):
        return {"shape": list(shape), "dtype": "f32", "storage": storage, "offset": offset}
    values = [value(SHAPE, "arena", 0), value((7,), "arena", 512), value(SHAPE, "weights", 0),
              value(SHAPE, "arena", 1024), value(SHAPE, "arena", 1536)]

    def launch(name):
        return {"function": name, "grid": [1, 1, 1], "block": [128, 1, 1], "shared": 0,
                "args": [["arg", 0], ["arg", 1], ["arg", 2], ["i64", N]]}
    return {"version": 2, "values": values, "inputs": [{"name": "x", "value": 0}, {"name": "s", "value": 1}], "outputs": [4],
            "steps": [{"kernel": "mul", "args": [0, 2, 3]}, {"kernel": "relu_bias", "args": [3, 1, 4]}],
            "kernels": {"mul": {"launches": [launch("mul")]}, "relu_bias": {"launches": [launch("relu_bias")]}},
            "arena_bytes": 2048, "weights_bytes": N * 4, "scratch_bytes": 0}


class CaiArray:
    """A device array of the fake driver seen through __cuda_array_interface__ (as CuPy or Numba give it)."""

    def __init__(self, fake, data, device=0, strides=None, stream=None):
        data = np.ascontiguousarray(data)
        self.pointer = fake.alloc(data.nbytes, device)
        ctypes.memmove(self.pointer, data.ctypes.data, data.nbytes)
        self.__cuda_array_interface__ = {"shape": data.shape, "typestr": data.dtype.str, "strides": strides,
                                         "data": (self.pointer, False), "version": 3, "stream": stream}

    def numpy(self, dtype=np.float32):
        cai = self.__cuda_array_interface__
        return np.ctypeslib.as_array((ctypes.c_uint8 * (int(np.prod(cai["shape"])) * np.dtype(dtype).itemsize))
                                     .from_address(self.pointer)).view(dtype).reshape(cai["shape"]).copy()


class DlpackOnly:
    """A device array that only speaks DLPack (as JAX arrays do)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *, stream=None):
        return self.array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def install(monkeypatch, driver):
    """driver (a FakeCuda) as `cuda.bindings.driver` for the rest of the test, graph replay on; returns it.
    test_profile.py and test_load_weights.py run GpuExecutable on it too."""
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = driver
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    monkeypatch.delenv("OPENPRIM_GPU_GRAPHS", raising=False)
    return driver


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch, FakeCuda())


@pytest.fixture
def data(rng):
    x = rng.standard_normal(SHAPE).astype(np.float32)
    s = rng.standard_normal(7).astype(np.float32)
    w = rng.standard_normal(SHAPE).astype(np.float32)
    return x, s, w


def _exe(fake, w, graphs=None, device=0):
    return GpuExecutable(_plan(), b"image", w.tobytes(), CudaDevice(device), graphs=graphs)


def _want(x, s, w):
    return np.maximum(x.astype(np.float64) * w, 0) + s


def test_device_inputs_stay_on_the_device(fake, data):
    x, s, w = data
    exe = _exe(fake, w)
    dx, ds = CaiArray(fake, x), CaiArray(fake, s)
    fake.log.clear()
    y = exe(dx, ds)
    assert isinstance(y, DeviceArray) and y.shape == SHAPE and y.dtype == "f32"
    assert not fake.calls("HtoD") and not fake.calls("DtoH")
    assert not fake.calls("DtoD"), "inputs and the output are bound in place"
    launches = fake.execs[exe.graph[1]]
    assert launches[0][1][0] == dx.pointer and launches[1][1][1:3] == [ds.pointer, y.pointer]
    assert fake.device_of(y.pointer) == 0
    np.testing.assert_allclose(y.numpy(), _want(x, s, w), rtol=1e-5, atol=1e-6)


def test_second_call_replays_the_graph(fake, data, rng):
    x, s, w = data
    exe = _exe(fake, w)
    exe(CaiArray(fake, x), CaiArray(fake, s))
    assert [e[0] for e in fake.log if e[0] in ("begin_capture", "end_capture", "instantiate", "graph_launch")] == \
        ["begin_capture", "end_capture", "instantiate", "graph_launch"]
    assert fake.calls("end_capture")[0][2] == 2 and not fake.calls("launch")   # both kernels captured, none run
    fake.log.clear()
    x2 = rng.standard_normal(SHAPE).astype(np.float32)
    y2 = exe(x=CaiArray(fake, x2), s=CaiArray(fake, s))
    assert len(fake.calls("graph_launch")) == 1
    assert not fake.calls("launch") and not fake.calls("begin_capture") and not fake.calls("instantiate")
    np.testing.assert_allclose(y2.numpy(), _want(x2, s, w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_graphs_off_launches_kernels(fake, data, monkeypatch, how):
    x, s, w = data
    if how == "environment":
        monkeypatch.setenv("OPENPRIM_GPU_GRAPHS", "0")
    exe = _exe(fake, w, graphs=False if how == "argument" else None)
    for _ in range(2):
        fake.log.clear()
        y = exe(CaiArray(fake, x), CaiArray(fake, s))
        assert [e[1] for e in fake.calls("launch")] == ["mul", "relu_bias"]
        assert not fake.calls("graph_launch") and not fake.calls("begin_capture")
        np.testing.assert_allclose(y.numpy(), _want(x, s, w), rtol=1e-5, atol=1e-6)


def test_run_into_caller_buffers_and_stream(fake, data):
    x, s, w = data
    exe = _exe(fake, w)
    stream = fake.cuStreamCreate(0)[1]          # a stream of the same context, as PyTorch's would be
    out = CaiArray(fake, np.zeros(SHAPE, np.float32))
    fake.log.clear()
    exe.run_into([CaiArray(fake, x), CaiArray(fake, s)], [out], stream=stream)
    assert not fake.calls("DtoD") and fake.execs[exe.graph[1]][1][1][2] == out.pointer
    assert fake.calls("graph_launch") == [("graph_launch", stream)]
    assert fake.calls("begin_capture") == [("begin_capture", exe.stream)]     # captured on our own stream
    assert ("sync", stream) not in fake.log                                     # asynchronous on the caller's
    assert fake.calls("wait"), "the caller's stream waits for the executable's previous work"
    np.testing.assert_allclose(out.numpy(), _want(x, s, w), rtol=1e-5, atol=1e-6)
    fake.log.clear()                           # same stream again: no cross-stream wait
    exe.run_into({"s": CaiArray(fake, s), "x": CaiArray(fake, 2 * x)}, out, stream=stream)
    assert not fake.calls("wait")
    np.testing.assert_allclose(out.numpy(), _want(2 * x, s, w), rtol=1e-5, atol=1e-6)


def test_a_framework_capture_records_the_kernels(fake, data, rng):
    """Called while the caller captures its stream (torch.compile's mode="reduce-overhead"), the plan's
    kernels go into the caller's graph one by one, addressing this call's buffers: no graph of ours is
    launched inside the capture, and the captured stream waits for no event of another stream."""
    x, s, w = data
    exe = _exe(fake, w)
    exe(CaiArray(fake, x), CaiArray(fake, s))              # an eager call first: our own graph, on our stream
    stream = fake.cuStreamCreate(0)[1]
    dx, ds, out = CaiArray(fake, x), CaiArray(fake, s), CaiArray(fake, np.zeros(SHAPE, np.float32))
    fake.cuStreamBeginCapture(stream, None)
    fake.log.clear()
    exe.run_into([dx, ds], [out], stream=stream)
    assert not fake.calls("graph_launch") and not fake.calls("wait") and not fake.calls("launch")
    graph = fake.cuStreamEndCapture(stream)[1]
    assert [(f, a[:3]) for f, a in fake.graphs[graph]] == \
        [("mul", [dx.pointer, exe.pointers[2], exe.pointers[3]]), ("relu_bias", [exe.pointers[3], ds.pointer, out.pointer])]
    x2 = rng.standard_normal(SHAPE).astype(np.float32)        # the caller's replay: new data, same buffers
    ctypes.memmove(dx.pointer, x2.ctypes.data, x2.nbytes)
    fake.cuGraphLaunch(fake.cuGraphInstantiate(graph, 0)[1], stream)
    np.testing.assert_allclose(out.numpy(), _want(x2, s, w), rtol=1e-5, atol=1e-6)


def test_view_at_an_offset_is_bound_past_the_callers_pointer(fake, data, rng):
    """A value viewing its root at an offset (a slice's contiguous run: x[1] of x [2, 3, 5, 7]) is read at
    the caller's pointer plus that offset, in the first call's captured graph and after a new caller
    buffer updates the graph's nodes."""
    _, s, w = data
    plan = _plan()
    values = plan["values"]
    values[0]["shape"] = [2, *SHAPE]
    for v, offset in zip(values[1:], (1024, 0, 1536, 2048)):
        if v["storage"] == "arena":
            v["offset"] = offset
    values.append({"shape": list(SHAPE), "dtype": "f32", "storage": "arena", "offset": N * 4, "view_of": 0})
    plan["steps"][0]["args"] = [5, 2, 3]
    plan["arena_bytes"] = 2560
    exe = GpuExecutable(plan, b"image", w.tobytes(), CudaDevice(0))
    for _ in range(2):
        x = rng.standard_normal((2, *SHAPE)).astype(np.float32)
        dx = CaiArray(fake, x)
        y = exe(dx, CaiArray(fake, s))
        assert fake.execs[exe.graph[1]][0][1][0] == dx.pointer + N * 4
        np.testing.assert_allclose(y.numpy(), _want(x[1], s, w), rtol=1e-5, atol=1e-6)


def test_producer_stream_is_waited_for(fake, data):
    x, s, w = data
    exe = _exe(fake, w)
    producer = fake.cuStreamCreate(0)[1]
    fake.log.clear()
    exe(CaiArray(fake, x, stream=producer), CaiArray(fake, s))
    record = fake.calls("record")[0]
    assert record[2] == producer and ("wait", exe.stream, record[1]) in fake.log


def test_numpy_calls_still_work(fake, data):
    x, s, w = data
    exe = _exe(fake, w)
    for _ in range(2):
        y = exe(x, s)
        assert isinstance(y, np.ndarray)
        np.testing.assert_allclose(y, _want(x, s, w), rtol=1e-5, atol=1e-6)
    assert len(fake.calls("graph_launch")) == 2 and len(fake.calls("begin_capture")) == 1


def test_numpy_call_copies_asynchronously_and_waits_once(fake, data):
    """A numpy call's copies go through one page-locked buffer on the executable's stream (the fake refuses
    an asynchronous copy of pageable memory), and the call waits once, for its output and its checks'
    counts; a count left nonzero is the check's error."""
    x, s, w = data
    plan = _plan()
    plan["values"].append({"shape": [1], "dtype": "i32", "storage": "arena", "offset": 1984})
    plan["checks"] = [{"value": 5, "message": "an index past the table"}]
    exe = GpuExecutable(plan, b"image", w.tobytes(), CudaDevice(0))
    exe(x, s)
    fake.log.clear()
    np.testing.assert_allclose(exe(x, s), _want(x, s, w), rtol=1e-5, atol=1e-6)
    assert not fake.calls("HtoD") and not fake.calls("DtoH") and not fake.calls("host_alloc")
    assert [e[3] for e in fake.calls("HtoDAsync")] == [exe.stream] * 2
    assert [(e[2], e[3]) for e in fake.calls("DtoHAsync")] == [(4 * N, exe.stream), (4, exe.stream)]
    assert fake.calls("sync") == [("sync", exe.stream)]
    ctypes.memmove(exe.pointers[5], np.array([3], np.int32).ctypes.data, 4)
    with pytest.raises(OpenPrimError, match=r"an index past the table \(3 of them\)"):
        exe(x, s)


def test_dlpack_inputs_and_outputs(fake, data):
    x, s, w = data
    exe = _exe(fake, w)
    y = exe(CaiArray(fake, x), CaiArray(fake, s))
    capsule = y.__dlpack__()
    view = describe(DlpackOnly(y))
    assert (view.pointer, view.shape, view.dtype, view.contiguous) == (y.pointer, SHAPE, "f32", True)
    assert view.device_type == arrays.KDL_CUDA and view.device_id == 0
    assert y.__dlpack_device__() == (arrays.KDL_CUDA, 0)
    del view, capsule
    gc.collect()
    assert not arrays._LENT, "an unconsumed capsule releases the array it lent"
    # a DLPack-only input (JAX-like), made from our own output
    x2 = _device_array(exe, x)
    y2 = exe(DlpackOnly(x2), DlpackOnly(_device_array(exe, s)))
    np.testing.assert_allclose(y2.numpy(), _want(x, s, w), rtol=1e-5, atol=1e-6)
    gc.collect()
    assert not arrays._LENT


def _device_array(exe, values):
    """A DeviceArray of the executable's device holding `values`."""
    array = DeviceArray(exe.device, values.shape, "f32")
    ctypes.memmove(array.pointer, values.ctypes.data, values.nbytes)
    return array


def test_bf16_output_lends_through_dlpack_only(fake):
    device = CudaDevice()
    a = DeviceArray(device, (2, 3), "bf16")
    assert not hasattr(a, "__cuda_array_interface__")
    view = describe(a)
    assert view.dtype == "bf16" and view.shape == (2, 3)


@pytest.mark.parametrize("case, message", [
    ("shape", r"input 'x' must have shape \(3, 5, 7\), got \(3, 5, 6\)"),
    ("dtype", r"input 'x' must have dtype f32, got f16"),
    ("device", r"input 'x' is on GPU 1 but the model runs on GPU 0"),
    ("strides", r"input 'x' is not C-contiguous"),
    ("host", r"input 'x' is a host array while other inputs are on the GPU"),
    ("run_into_host", r"input 'x' is not a device array"),
    ("output_shape", r"output 'output 0' must have shape \(3, 5, 7\)"),
    ("stream", r"stream 0x77 is not a valid CUDA stream here"),
    ("foreign_stream", r"belongs to another CUDA context"),
])
def test_bad_device_inputs(fake, data, case, message):
    x, s, w = data
    exe = _exe(fake, w)
    good_x, good_s = CaiArray(fake, x), CaiArray(fake, s)
    out = CaiArray(fake, np.zeros(SHAPE, np.float32))
    stream = None
    if case == "stream":
        stream = 0x77
    if case == "foreign_stream":
        stream = fake.cuStreamCreate(0)[1]
        fake.streams[stream] = CONTEXT + 1
    bad = {"shape": CaiArray(fake, x[..., :6]), "dtype": CaiArray(fake, x.astype(np.float16)),
           "device": CaiArray(fake, x, device=1), "host": x, "run_into_host": x,
           "strides": _transposed(fake, x)}.get(case, good_x)
    fake.log.clear()
    with pytest.raises(OpenPrimError, match=message) as e:
        if case == "host":
            exe(bad, good_s)
        elif case == "output_shape":
            exe.run_into([good_x, good_s], [CaiArray(fake, np.zeros((3, 5), np.float32))])
        else:
            exe.run_into([bad, good_s], [out], stream=stream)
    assert "\n" not in str(e.value)
    assert not fake.calls("DtoD") and not fake.calls("HtoD") and not fake.calls("graph_launch")


def _transposed(fake, x):
    """x's shape, but a transposed (column-major) layout: strides say so."""
    a = CaiArray(fake, np.asfortranarray(x).ravel(order="K"))
    a.__cuda_array_interface__ = {**a.__cuda_array_interface__, "shape": x.shape, "strides": (4, 12, 60)}
    return a


def test_time_ms_still_launches(fake, data):
    x, s, w = data
    exe = _exe(fake, w)
    fake.log.clear()
    assert exe.time_ms(repeat=2, warmup=1) == 0.25
    assert [e[1] for e in fake.calls("launch")] == ["mul", "relu_bias"] * 3


def test_time_ms_captured(fake, data):
    """captured=K records K runs of the launches into one graph and divides the graph's time by K; the
    graph is destroyed afterwards and the outputs are still right."""
    x, s, w = data
    exe = _exe(fake, w)
    fake.log.clear()
    assert exe.time_ms(repeat=2, warmup=1, captured=4) == 0.5 / 2 / 4
    assert [e[2] for e in fake.calls("end_capture")] == [8]   # 4 runs of 2 kernels
    assert len(fake.calls("graph_launch")) == 3               # one to warm up, two timed
    assert [e[1] for e in fake.calls("launch")] == ["mul", "relu_bias"]   # the warm-up run only
    y = exe(CaiArray(fake, x), CaiArray(fake, s))
    np.testing.assert_allclose(y.numpy(), _want(x, s, w), rtol=1e-5, atol=1e-6)


def test_device_memory_checked_before_allocating(fake, data):
    """A plan larger than the device's free memory is one error naming the sizes, before any allocation."""
    fake.free_bytes = 1024
    with pytest.raises(OpenPrimError, match=r"needs 0.0 MiB of device memory \(arena 0.0 MiB, weights 0.0 MiB\); "
                                            r".* has 0.0 MiB free"):
        _exe(fake, data[2])
    assert not fake.calls("alloc")


def test_new_pointers_update_only_their_nodes(fake, data, rng):
    """A call with another input buffer rewrites the one node that reads it; a numpy call binds the arena
    again; every result is right."""
    x, s, w = data
    exe = _exe(fake, w)
    ds, out = CaiArray(fake, s), CaiArray(fake, np.zeros(SHAPE, np.float32))
    exe.run_into([CaiArray(fake, x), ds], [out])
    x2 = rng.standard_normal(SHAPE).astype(np.float32)
    fake.log.clear()
    exe.run_into([CaiArray(fake, x2), ds], [out])
    assert [e[1] for e in fake.calls("set_params")] == [0] and not fake.calls("DtoD")
    np.testing.assert_allclose(out.numpy(), _want(x2, s, w), rtol=1e-5, atol=1e-6)
    fake.log.clear()
    exe.run_into([CaiArray(fake, x2), ds], [out])
    assert [e[1] for e in fake.calls("set_params")] == [0]      # a new x buffer again; s and out unchanged
    fake.log.clear()
    np.testing.assert_allclose(exe(x, s), _want(x, s, w), rtol=1e-5, atol=1e-6)
    assert sorted(e[1] for e in fake.calls("set_params")) == [0, 1]
    assert fake.execs[exe.graph[1]][0][1][0] == exe.pointers[0] and not fake.calls("begin_capture")


def test_views_of_an_input_are_bound(fake, data):
    """A step that reads a view of the input (a reshape: view_of) reads the caller's buffer."""
    x, s, w = data
    plan = _plan()
    plan["values"].append({"shape": [N], "dtype": "f32", "storage": "arena", "offset": 0, "view_of": 0})
    plan["steps"][0]["args"][0] = 5
    exe = GpuExecutable(plan, b"image", w.tobytes(), CudaDevice(0))
    dx = CaiArray(fake, x)
    fake.log.clear()
    y = exe(dx, CaiArray(fake, s))
    assert not fake.calls("DtoD") and fake.execs[exe.graph[1]][0][1][0] == dx.pointer
    np.testing.assert_allclose(y.numpy(), _want(x, s, w), rtol=1e-5, atol=1e-6)


def _mapped_plan():
    """The plan with its first kernel reading x through a "tensor map" (the fake's map holds the address)."""
    plan = _plan()
    plan["kernels"]["mul"]["launches"][0]["args"][0] = ["tensormap", {"memory": ["arg", 0], "dtype": "f32"}]
    return plan


def _misaligned(fake, x):
    a = CaiArray(fake, np.concatenate([[0.0], x.ravel()]).astype(np.float32))
    a.__cuda_array_interface__ = {**a.__cuda_array_interface__, "shape": x.shape, "data": (a.pointer + 4, False)}
    return a


@pytest.mark.parametrize("case", ["misaligned", "plan_v1", "tensor_map", "output_overlaps_input", "no_node_update"])
def test_buffers_that_cannot_be_bound_are_copied(fake, data, monkeypatch, case):
    x, s, w = data
    plan = _mapped_plan() if case == "tensor_map" else _plan()
    if case == "plan_v1":
        del plan["version"]
    if case == "no_node_update":
        monkeypatch.setattr(CudaDevice, "updates_graph_args", False)

    def tensor_map(self, address, spec):
        ptr = self.alloc(128)
        ctypes.c_uint64.from_address(ptr).value = address
        return ptr
    monkeypatch.setattr(CudaDevice, "tensor_map", tensor_map)
    fake.kernels["mul"] = (4, (lambda m, *rest: _mul(ctypes.c_uint64.from_address(m).value, *rest))
                           if case == "tensor_map" else _mul)
    exe = GpuExecutable(plan, b"image", w.tobytes(), CudaDevice(0))
    dx = _misaligned(fake, x) if case == "misaligned" else CaiArray(fake, x)
    ds = CaiArray(fake, s)
    out = dx if case == "output_overlaps_input" else CaiArray(fake, np.zeros(SHAPE, np.float32))
    x_pointer = dx.__cuda_array_interface__["data"][0]
    fake.log.clear()
    exe.run_into([dx, ds], [out])
    copies = [(c[1], c[2]) for c in fake.calls("DtoD")]
    if case == "output_overlaps_input":
        assert copies == [(out.pointer, exe.pointers[4])]                # x read in place, y copied out after
    elif case in ("plan_v1", "no_node_update"):
        assert copies == [(exe.pointers[0], x_pointer), (exe.pointers[1], ds.pointer), (out.pointer, exe.pointers[4])]
    else:
        assert copies == [(exe.pointers[0], x_pointer)]                  # only x: s and the output are bound
    np.testing.assert_allclose(out.numpy(), _want(x, s, w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("aliased", [False, True])
def test_copy_launch_left_out_when_aliased(fake, data, aliased):
    """A kernel whose first launch only copies its input to its output ("unless_aliased": index_copy's
    copy of the cache) keeps that launch where the two are different buffers, and drops it where the plan
    gave them one (a cache written in place): the relu_bias step here reads t and writes y in one buffer."""
    x, s, w = data
    plan = _plan()
    copy = {"function": "copy", "grid": [1, 1, 1], "block": [128, 1, 1], "shared": 0,
            "args": [["arg", 0], ["arg", 2], ["i64", N]], "unless_aliased": [0, 2]}
    plan["kernels"]["relu_bias"]["launches"].insert(0, copy)
    plan["values"][4]["offset"] = 1024 if aliased else 1536
    fake.kernels["copy"] = (3, lambda src, out, n: _f32(out, n).__setitem__(slice(None), _f32(src, n)))
    exe = GpuExecutable(plan, b"image", w.tobytes(), CudaDevice(0), graphs=False)
    fake.log.clear()
    y = exe(x, s)
    launched = [e[1] for e in fake.calls("launch")]
    assert launched == (["mul", "relu_bias"] if aliased else ["mul", "copy", "relu_bias"])
    np.testing.assert_allclose(y, _want(x, s, w), rtol=1e-5, atol=1e-6)


def test_graphs_off_binds_in_the_launch_arguments(fake, data):
    x, s, w = data
    exe = _exe(fake, w, graphs=False)
    dx, ds = CaiArray(fake, x), CaiArray(fake, s)
    fake.log.clear()
    y = exe(dx, ds)
    assert not fake.calls("DtoD") and [e[1] for e in fake.calls("launch")] == ["mul", "relu_bias"]
    np.testing.assert_allclose(y.numpy(), _want(x, s, w), rtol=1e-5, atol=1e-6)


def test_open_device_once_per_gpu(fake, monkeypatch):
    """Every executable opened on one GPU gets the same Device: a decoder's prefill then shares the state of
    its step (share_state refuses executables on different Devices; each compile opened its own before)."""
    from openprim.base.target import parse_target
    from openprim.runtime import gpu
    monkeypatch.setattr(gpu, "_OPENED", {})
    target = parse_target("nvvm:sm_90")
    device = gpu.open_device(target, 0)
    assert gpu.open_device(target, 0) is device
    assert gpu.open_device(parse_target("nvvm:sm_80"), 0) is device     # an sm_80 build runs on sm_90

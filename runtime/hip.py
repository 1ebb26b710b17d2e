"""The HIP driver (AMD GPUs) through PyPI hip-python: loads hsaco code objects and runs their kernels.

hip-python imports without ROCm and only dlopens libamdhip64.so at the first real call, so the
constructor probes with hipGetDeviceCount to turn a missing ROCm into one DeviceError. Every hip-python
call returns a tuple (hipError_t, results...); `_check` turns a failure into a DeviceError naming the call.
Kernel arguments go to hipModuleLaunchKernel as an array of pointers to 64-bit values. Streams are ints
(hipStream_t handles; None or 0 is the null stream); graphs are captured in thread-local mode and
instantiated with hipGraphInstantiateWithFlags, as in the CUDA driver.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .device import Device, DeviceError


class HipDevice(Device):
    kind = "hip"

    def __init__(self, index: int = 0):
        try:
            from hip import hip
        except ImportError:
            raise DeviceError("HIP driver not available: pip install hip-python "
                              "(and ROCm 6+ for libamdhip64.so)") from None
        self._hip = hip
        try:
            err, count = hip.hipGetDeviceCount()
        except RuntimeError:
            raise DeviceError("ROCm's libamdhip64.so was not found: install ROCm 6+ "
                              "(or put its lib folder on LD_LIBRARY_PATH)") from None
        if err != hip.hipError_t.hipSuccess or count <= index:
            raise DeviceError("no AMD GPU found" if index == 0 else f"no AMD GPU {index} ({count} found)")
        self._call("hipSetDevice", index)
        self.index = index
        self.stream = None
        self._props = self._call("hipGetDeviceProperties", index)
        self._images = []          # code object bytes stay alive as long as their modules

    def _call(self, name: str, *args):
        """hip.<name>(*args); raises DeviceError on failure, else returns the result(s) after the error code."""
        hip = self._hip
        err, *out = getattr(hip, name)(*args)
        if err != hip.hipError_t.hipSuccess:
            text = hip.hipGetErrorString(err)[1]
            raise DeviceError(f"{name} failed: {err.name}: {text}")
        return out[0] if len(out) == 1 else tuple(out) or None

    def arch(self) -> str:
        return self._props.gcnArchName.split(":")[0]

    def name(self) -> str:
        return self._props.name

    def make_current(self) -> None:
        self._call("hipSetDevice", self.index)

    def load_module(self, image: bytes):
        self._images.append(image)
        return self._call("hipModuleLoadData", image)

    def function(self, module, name: str):
        return self._call("hipModuleGetFunction", module, name)

    def alloc(self, nbytes: int) -> int:
        return int(self._call("hipMalloc", max(nbytes, 1)))

    def free_memory(self) -> int | None:
        free, _ = self._call("hipMemGetInfo")
        return int(free)

    def free(self, ptr: int) -> None:
        self._call("hipFree", ptr)

    def copy_to_device(self, dst: int, src: np.ndarray) -> None:
        src = np.ascontiguousarray(src)
        self._call("hipMemcpyHtoD", dst, src, src.nbytes)

    def copy_to_host(self, dst: np.ndarray, src: int) -> None:
        if not dst.flags.c_contiguous:
            raise DeviceError("copy_to_host needs a C-contiguous destination array")
        self._call("hipMemcpyDtoH", dst, src, dst.nbytes)

    def copy_device_to_device(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._call("hipMemcpyDtoDAsync", dst, src, nbytes, stream)

    def host_buffer(self, nbytes: int) -> np.ndarray:
        ptr = int(self._call("hipHostMalloc", max(nbytes, 1), 0))
        return np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr))[:nbytes]

    def free_host_buffer(self, buffer: np.ndarray) -> None:
        self._call("hipHostFree", buffer.ctypes.data)

    def copy_to_device_async(self, dst: int, src: np.ndarray, stream=None) -> None:
        self._call("hipMemcpyHtoDAsync", dst, src, src.nbytes, stream)

    def copy_to_host_async(self, dst: np.ndarray, src: int, stream=None) -> None:
        self._call("hipMemcpyDtoHAsync", dst, src, dst.nbytes, stream)

    def pointer_device(self, ptr: int) -> int | None:
        hip = self._hip
        err, attrs = hip.hipPointerGetAttributes(ptr)
        if err != hip.hipError_t.hipSuccess or attrs.type != hip.hipMemoryType.hipMemoryTypeDevice:
            return None
        return int(attrs.device)

    def launch(self, function, grid, block, args, shared_bytes=0, stream=None) -> None:
        values = [ctypes.c_uint64(a & 0xFFFFFFFFFFFFFFFF) for a in args]
        params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        self._call("hipModuleLaunchKernel", function, *grid, *block, shared_bytes, stream, params, None)

    def create_stream(self) -> int:
        return int(self._call("hipStreamCreateWithFlags", self._hip.hipStreamNonBlocking))

    def destroy_stream(self, stream: int) -> None:
        self._call("hipStreamDestroy", stream)

    def check_stream(self, stream: int) -> None:
        if not stream:
            return
        hip = self._hip
        err, device = hip.hipStreamGetDevice(stream)
        if err != hip.hipError_t.hipSuccess or device != self.index:
            raise DeviceError(f"stream {stream:#x} is not a stream of AMD GPU {self.index}: pass a stream created there")

    def stream_synchronize(self, stream) -> None:
        self._call("hipStreamSynchronize", stream)

    def create_event(self):
        return self._call("hipEventCreateWithFlags", self._hip.hipEventDisableTiming)

    def record(self, event, stream) -> None:
        self._call("hipEventRecord", event, stream)

    def wait_event(self, stream, event) -> None:
        self._call("hipStreamWaitEvent", stream, event, 0)

    def destroy_event(self, event) -> None:
        self._call("hipEventDestroy", event)

    def capture(self, stream: int, enqueue) -> tuple:
        self._call("hipStreamBeginCapture", stream, self._hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal)
        try:
            enqueue()
        finally:
            graph = self._call("hipStreamEndCapture", stream)
        try:
            return graph, self._call("hipGraphInstantiateWithFlags", graph, 0)
        except DeviceError:
            self._hip.hipGraphDestroy(graph)
            raise

    def is_capturing(self, stream) -> bool:
        return bool(stream) and self._call("hipStreamIsCapturing", stream) != \
            self._hip.hipStreamCaptureStatus.hipStreamCaptureStatusNone

    def graph_launch(self, graph_exec, stream) -> None:
        self._call("hipGraphLaunch", graph_exec, stream)

    def destroy_graph(self, graph, graph_exec) -> None:
        self._call("hipGraphExecDestroy", graph_exec)
        self._call("hipGraphDestroy", graph)

    def synchronize(self) -> None:
        self._call("hipDeviceSynchronize")

    def elapsed_ms(self, fn, repeat: int = 1, stream=None) -> float:
        start, stop = self._call("hipEventCreate"), self._call("hipEventCreate")
        try:
            self._call("hipEventRecord", start, stream)
            for _ in range(repeat):
                fn()
            self._call("hipEventRecord", stop, stream)
            self._call("hipEventSynchronize", stop)
            return self._call("hipEventElapsedTime", start, stop)
        finally:
            self._call("hipEventDestroy", start)
            self._call("hipEventDestroy", stop)

    def create_timing_event(self):
        return self._call("hipEventCreate")

    def event_ms(self, start, end) -> float:
        return self._call("hipEventElapsedTime", start, end)

    def function_attributes(self, function) -> dict:
        attr = self._hip.hipFunction_attribute
        names = {"registers": attr.HIP_FUNC_ATTRIBUTE_NUM_REGS,
                 "shared_bytes": attr.HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                 "local_bytes": attr.HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                 "max_threads": attr.HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}
        found = {}
        for key, a in names.items():
            try:
                found[key] = self._call("hipFuncGetAttribute", a, function)
            except DeviceError:
                pass                   # not every attribute is reported by every ROCm version
        return found

"""The CUDA driver: NVIDIA GPUs through the driver API of `cuda-bindings` (no toolkit, no MLIR).

PTX is compiled by the driver when the module loads (JIT); a cubin for the exact chip loads as is.
Every call's CUresult is checked: a failure raises DeviceError naming the call and CUDA's message.
The primary context is used (the one PyTorch, CuPy and the runtime API use), so device pointers and
streams of those libraries are valid here. Graphs are captured in thread-local mode: an unsafe call of
this thread during the capture fails instead of being recorded, other threads are not disturbed.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .device import Device, DeviceError


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        raise DeviceError("CUDA driver not available: pip install cuda-bindings (and an NVIDIA driver)") from None
    return driver


class CudaDevice(Device):
    kind = "cuda"

    def __init__(self, index: int = 0):
        self.cu = _driver()
        try:
            self._check("cuInit", self.cu.cuInit(0))
        except Exception as e:  # DeviceError, or cuda-bindings' own error when libcuda is missing
            raise DeviceError(f"no usable NVIDIA GPU: {str(e).splitlines()[0]}") from None
        count = self._check("cuDeviceGetCount", self.cu.cuDeviceGetCount())
        if index >= count:
            raise DeviceError(f"no NVIDIA GPU number {index} (found {count})")
        self.device = self._check("cuDeviceGet", self.cu.cuDeviceGet(index))
        self.context = self._check("cuDevicePrimaryCtxRetain", self.cu.cuDevicePrimaryCtxRetain(self.device))
        self._check("cuCtxSetCurrent", self.cu.cuCtxSetCurrent(self.context))
        self.index = index
        self.stream = 0
        self._streams = {}            # int handle -> CUstream
        self._checked_streams = {0, 1, 2}   # the legacy and per-thread default streams: valid in any context

    def _s(self, stream):
        """The CUstream of an int handle (None: the device's stream)."""
        stream = self.stream if stream is None else stream
        found = self._streams.get(stream)
        if found is None:
            found = self._streams[stream] = self.cu.CUstream(stream)
        return found

    def _check(self, call, result):
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            _, msg = self.cu.cuGetErrorString(err)
            raise DeviceError(f"{call} failed: {msg.decode() if msg else err}")
        return values[0] if len(values) == 1 else values

    def _attribute(self, name):
        attr = getattr(self.cu.CUdevice_attribute, name)
        return self._check("cuDeviceGetAttribute", self.cu.cuDeviceGetAttribute(attr, self.device))

    def arch(self) -> str:
        return f"sm_{self._attribute('CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR')}" \
               f"{self._attribute('CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR')}"

    def name(self) -> str:
        return self._check("cuDeviceGetName", self.cu.cuDeviceGetName(256, self.device)).split(b"\0")[0].decode()

    def make_current(self) -> None:
        self._check("cuCtxSetCurrent", self.cu.cuCtxSetCurrent(self.context))

    def load_module(self, image: bytes):
        if not image.startswith(b"\x7fELF") and not image.endswith(b"\0"):
            image += b"\0"  # PTX text must be NUL-terminated
        return self._check("cuModuleLoadData", self.cu.cuModuleLoadData(image))

    def function(self, module, name: str):
        return self._check(f"cuModuleGetFunction({name})", self.cu.cuModuleGetFunction(module, name.encode()))

    def alloc(self, nbytes: int) -> int:
        return int(self._check("cuMemAlloc", self.cu.cuMemAlloc(max(nbytes, 1))))

    def free_memory(self) -> int | None:
        free, _ = self._check("cuMemGetInfo", self.cu.cuMemGetInfo())
        return int(free)

    def free(self, ptr: int) -> None:
        self._check("cuMemFree", self.cu.cuMemFree(ptr))

    def copy_to_device(self, dst: int, src: np.ndarray) -> None:
        src = np.ascontiguousarray(src)
        self._check("cuMemcpyHtoD", self.cu.cuMemcpyHtoD(dst, src.ctypes.data, src.nbytes))

    def copy_to_host(self, dst: np.ndarray, src: int) -> None:
        self._check("cuMemcpyDtoH", self.cu.cuMemcpyDtoH(dst.ctypes.data, src, dst.nbytes))

    def copy_device_to_device(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._check("cuMemcpyDtoDAsync", self.cu.cuMemcpyDtoDAsync(dst, src, nbytes, self._s(stream)))

    def host_buffer(self, nbytes: int) -> np.ndarray:
        ptr = int(self._check("cuMemHostAlloc", self.cu.cuMemHostAlloc(max(nbytes, 1), 0)))
        return np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr))[:nbytes]

    def free_host_buffer(self, buffer: np.ndarray) -> None:
        self._check("cuMemFreeHost", self.cu.cuMemFreeHost(buffer.ctypes.data))

    def copy_to_device_async(self, dst: int, src: np.ndarray, stream=None) -> None:
        self._check("cuMemcpyHtoDAsync", self.cu.cuMemcpyHtoDAsync(dst, src.ctypes.data, src.nbytes, self._s(stream)))

    def copy_to_host_async(self, dst: np.ndarray, src: int, stream=None) -> None:
        self._check("cuMemcpyDtoHAsync", self.cu.cuMemcpyDtoHAsync(dst.ctypes.data, src, dst.nbytes, self._s(stream)))

    def pointer_device(self, ptr: int) -> int | None:
        attr = self.cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        err, *value = self.cu.cuPointerGetAttribute(attr, ptr)
        return int(value[0]) if err == self.cu.CUresult.CUDA_SUCCESS else None

    @staticmethod
    def _params(args):
        """(values, pointers to them): the void** kernelParams of 64-bit arguments (keep both alive)."""
        values = (ctypes.c_uint64 * max(len(args), 1))(*[a & 0xFFFFFFFFFFFFFFFF for a in args])
        params = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.addressof(values) + 8 * i for i in range(len(args))])
        return values, params

    def launch(self, function, grid, block, args, shared_bytes=0, stream=None) -> None:
        values, params = self._params(args)
        self._check("cuLaunchKernel", self.cu.cuLaunchKernel(function, *grid, *block, shared_bytes, self._s(stream),
                                                             ctypes.addressof(params), 0))

    def create_stream(self) -> int:
        flags = self.cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        stream = self._check("cuStreamCreate", self.cu.cuStreamCreate(flags))
        self._streams[int(stream)] = stream
        self._checked_streams.add(int(stream))
        return int(stream)

    def destroy_stream(self, stream: int) -> None:
        self._check("cuStreamDestroy", self.cu.cuStreamDestroy(self._streams.pop(stream)))
        self._checked_streams.discard(stream)

    def check_stream(self, stream: int) -> None:
        if stream in self._checked_streams:
            return
        err, *ctx = self.cu.cuStreamGetCtx(self._s(stream))
        if err != self.cu.CUresult.CUDA_SUCCESS:
            self._streams.pop(stream, None)
            raise DeviceError(f"stream {stream:#x} is not a valid CUDA stream here: pass a stream of GPU {self.index} "
                              f"(e.g. torch.cuda.current_stream().cuda_stream)")
        if int(ctx[0]) != int(self.context):
            self._streams.pop(stream, None)
            raise DeviceError(f"stream {stream:#x} belongs to another CUDA context than GPU {self.index}'s primary "
                              f"context: pass a stream created on GPU {self.index}")
        self._checked_streams.add(stream)

    def stream_synchronize(self, stream) -> None:
        self._check("cuStreamSynchronize", self.cu.cuStreamSynchronize(self._s(stream)))

    def create_event(self):
        return self._check("cuEventCreate", self.cu.cuEventCreate(self.cu.CUevent_flags.CU_EVENT_DISABLE_TIMING))

    def record(self, event, stream) -> None:
        self._check("cuEventRecord", self.cu.cuEventRecord(event, self._s(stream)))

    def wait_event(self, stream, event) -> None:
        self._check("cuStreamWaitEvent", self.cu.cuStreamWaitEvent(self._s(stream), event, 0))

    def destroy_event(self, event) -> None:
        self._check("cuEventDestroy", self.cu.cuEventDestroy(event))

    def capture(self, stream: int, enqueue) -> tuple:
        mode = self.cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        self._check("cuStreamBeginCapture", self.cu.cuStreamBeginCapture(self._s(stream), mode))
        try:
            enqueue()
        finally:
            graph = self._check("cuStreamEndCapture", self.cu.cuStreamEndCapture(self._s(stream)))
        try:
            return graph, self._check("cuGraphInstantiate", self.cu.cuGraphInstantiate(graph, 0))
        except DeviceError:
            self.cu.cuGraphDestroy(graph)
            raise

    def is_capturing(self, stream) -> bool:
        status = self._check("cuStreamIsCapturing", self.cu.cuStreamIsCapturing(self._s(stream)))
        return status != self.cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE

    def graph_launch(self, graph_exec, stream) -> None:
        self._check("cuGraphLaunch", self.cu.cuGraphLaunch(graph_exec, self._s(stream)))

    def destroy_graph(self, graph, graph_exec) -> None:
        self._check("cuGraphExecDestroy", self.cu.cuGraphExecDestroy(graph_exec))
        self._check("cuGraphDestroy", self.cu.cuGraphDestroy(graph))

    updates_graph_args = True

    def graph_kernel_nodes(self, graph) -> list:
        """Walk the chain a one-stream capture makes: from its root, each node's one dependent."""
        nodes = []
        found, count = self._check("cuGraphGetRootNodes", self.cu.cuGraphGetRootNodes(graph, 2))
        while count:
            if count != 1:
                raise DeviceError(f"a captured plan is not a chain: node {len(nodes)} has {count} successors")
            nodes.append(found[0])
            found, *_, count = self._check("cuGraphNodeGetDependentNodes",
                                           self.cu.cuGraphNodeGetDependentNodes(found[0], 2))
        return nodes

    def set_graph_kernel_args(self, graph_exec, node, function, grid, block, args, shared_bytes) -> None:
        values, params = self._params(args)
        p = self.cu.CUDA_KERNEL_NODE_PARAMS()
        p.func = function
        p.gridDimX, p.gridDimY, p.gridDimZ = grid
        p.blockDimX, p.blockDimY, p.blockDimZ = block
        p.sharedMemBytes = shared_bytes
        p.kernelParams = ctypes.addressof(params)
        self._check("cuGraphExecKernelNodeSetParams", self.cu.cuGraphExecKernelNodeSetParams(graph_exec, node, p))

    def allow_shared(self, function, nbytes: int) -> None:
        attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self._check("cuFuncSetAttribute", self.cu.cuFuncSetAttribute(function, attr, nbytes))

    def tensor_map(self, address: int, spec: dict) -> int:
        """cuTensorMapEncodeTiled into a host CUtensorMap, copied to 128 bytes of device memory (the
        kernel reads it through a global pointer, as MLIR's CUDA runtime passes it). spec["strides"]
        (elements, outermost first) describes a strided view, else the tensor is contiguous."""
        cu = self.cu
        kinds = {"f16": "FLOAT16", "bf16": "BFLOAT16", "f32": "FLOAT32"}
        itemsize = {"f16": 2, "bf16": 2, "f32": 4}[spec["dtype"]]
        dims = list(reversed(spec["shape"]))                       # innermost first
        if "strides" in spec:                                      # a strided view (elements)
            strides = [itemsize * s for s in reversed(spec["strides"][:-1])]
        else:
            strides = [itemsize * int(np.prod(dims[:i + 1])) for i in range(len(dims) - 1)]
        steps = list(reversed(spec.get("element_strides", [1] * len(dims))))
        box = [b * t for b, t in zip(reversed(spec["box"]), steps)]      # elements traversed per dimension
        l2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[spec["l2promo"]]
        tmap = self._check("cuTensorMapEncodeTiled", cu.cuTensorMapEncodeTiled(
            getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{kinds[spec['dtype']]}"), len(dims),
            address, [cu.cuuint64_t(d) for d in dims], [cu.cuuint64_t(s) for s in strides],
            [cu.cuuint32_t(b) for b in box], [cu.cuuint32_t(t) for t in steps],
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{spec['swizzle']}B"),
            getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
        ptr = self.alloc(128)
        self._check("cuMemcpyHtoD", cu.cuMemcpyHtoD(ptr, tmap.getPtr(), 128))
        return ptr

    def synchronize(self) -> None:
        self._check("cuCtxSynchronize", self.cu.cuCtxSynchronize())

    def elapsed_ms(self, fn, repeat: int = 1, stream=None) -> float:
        start, stop = (self._check("cuEventCreate", self.cu.cuEventCreate(0)) for _ in range(2))
        self._check("cuEventRecord", self.cu.cuEventRecord(start, self._s(stream)))
        for _ in range(repeat):
            fn()
        self._check("cuEventRecord", self.cu.cuEventRecord(stop, self._s(stream)))
        self._check("cuEventSynchronize", self.cu.cuEventSynchronize(stop))
        ms = self._check("cuEventElapsedTime", self.cu.cuEventElapsedTime(start, stop))
        for e in (start, stop):
            self.cu.cuEventDestroy(e)
        return ms / repeat

    def create_timing_event(self):
        return self._check("cuEventCreate", self.cu.cuEventCreate(0))

    def event_ms(self, start, end) -> float:
        return self._check("cuEventElapsedTime", self.cu.cuEventElapsedTime(start, end))

    def function_attributes(self, function) -> dict:
        a = self.cu.CUfunction_attribute
        names = {"registers": a.CU_FUNC_ATTRIBUTE_NUM_REGS, "shared_bytes": a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                 "local_bytes": a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                 "max_threads": a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}
        return {k: self._check("cuFuncGetAttribute", self.cu.cuFuncGetAttribute(v, function)) for k, v in names.items()}

"""The HIP driver (AMD GPUs) through PyPI hip-python: loads hsaco code objects and runs their kernels.

hip-python imports without ROCm and only dlopens libamdhip64.so at the first real call, so the
constructor probes with hipGetDeviceCount to turn a missing ROCm into one DeviceError. Every hip-python
call returns a tuple (hipError_t, results...); `_check` turns a failure into a DeviceError naming the call.
Kernel arguments go to hipModuleLaunchKernel as an array of pointers to 64-bit values.
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

    def load_module(self, image: bytes):
        self._images.append(image)
        return self._call("hipModuleLoadData", image)

    def function(self, module, name: str):
        return self._call("hipModuleGetFunction", module, name)

    def alloc(self, nbytes: int) -> int:
        return int(self._call("hipMalloc", max(nbytes, 1)))

    def free(self, ptr: int) -> None:
        self._call("hipFree", ptr)

    def copy_to_device(self, dst: int, src: np.ndarray) -> None:
        src = np.ascontiguousarray(src)
        self._call("hipMemcpyHtoD", dst, src, src.nbytes)

    def copy_to_host(self, dst: np.ndarray, src: int) -> None:
        if not dst.flags.c_contiguous:
            raise DeviceError("copy_to_host needs a C-contiguous destination array")
        self._call("hipMemcpyDtoH", dst, src, dst.nbytes)

    def launch(self, function, grid, block, args, shared_bytes=0) -> None:
        values = [ctypes.c_uint64(a & 0xFFFFFFFFFFFFFFFF) for a in args]
        params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        self._call("hipModuleLaunchKernel", function, *grid, *block, shared_bytes, None, params, None)

    def synchronize(self) -> None:
        self._call("hipDeviceSynchronize")

    def elapsed_ms(self, fn, repeat: int = 1) -> float:
        start, stop = self._call("hipEventCreate"), self._call("hipEventCreate")
        try:
            self._call("hipEventRecord", start, None)
            for _ in range(repeat):
                fn()
            self._call("hipEventRecord", stop, None)
            self._call("hipEventSynchronize", stop)
            return self._call("hipEventElapsedTime", start, stop)
        finally:
            self._call("hipEventDestroy", start)
            self._call("hipEventDestroy", stop)

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

"""Device arrays in and out of the runtime: reading other libraries' GPU tensors, and lending ours.

A GPU executable takes, besides numpy arrays, any array that lives in device memory and says so
through one of the two protocols frameworks share:
  __cuda_array_interface__  a dict (version 3): data pointer, shape, typestr, strides in bytes (None:
                            C-contiguous), and the stream its producer last wrote it on (CuPy, Numba,
                            PyTorch: but PyTorch refuses bfloat16 here)
  __dlpack__                a PyCapsule "dltensor" holding a DLManagedTensor (PyTorch, CuPy, JAX); the
                            producer orders its writes before the stream we pass (`stream=`), and
                            `__dlpack_device__()` gives (device type, index) without making a capsule
`describe` turns either into a `DeviceView` (pointer, shape, dtype, device) without copying and without
taking ownership: a capsule is read, never consumed, so the producer's own capsule destructor frees it.
The runtime never imports torch, CuPy or JAX; the interfaces are plain attributes.

`DeviceArray` is what a call with device inputs returns: it owns one device allocation and lends it
through both protocols, so `torch.as_tensor(a, device="cuda")` (CAI) or `torch.from_dlpack(a)` /
`cupy.from_dlpack(a)` (DLPack) wrap it without a copy. Its DLPack capsule is built with ctypes: a
DLManagedTensor allocated by ctypes, whose `manager_ctx` is a key into `_LENT` holding the array (and
the structs) alive until the consumer calls the deleter; a capsule that is never consumed is freed by
its destructor, which calls the same deleter.
"""
from __future__ import annotations

import ctypes
import itertools
from dataclasses import dataclass

import numpy as np

from openprim.base.dtypes import ITEMSIZE, STORAGE, from_storage
from openprim.base.errors import OpenPrimError

# DLPack's device types (dlpack.h) and data type codes.
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_ROCM_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 10, 11, 13
KDL_INT, KDL_FLOAT, KDL_BFLOAT, KDL_BOOL = 0, 2, 4, 6
HOST_DEVICE_TYPES = (KDL_CPU, KDL_CUDA_HOST, KDL_ROCM_HOST)
DEVICE_TYPE = {"cuda": KDL_CUDA, "hip": KDL_ROCM}             # Device.kind -> DLPack device type

_TYPESTR = {"<f4": "f32", "<f2": "f16", "<i8": "i64", "<i4": "i32", "|b1": "bool"}   # CAI typestr -> dtype
_DLPACK_DTYPE = {(KDL_FLOAT, 32): "f32", (KDL_FLOAT, 16): "f16", (KDL_BFLOAT, 16): "bf16", (KDL_INT, 64): "i64",
                 (KDL_INT, 32): "i32", (KDL_BOOL, 8): "bool"}
_DLPACK_CODE = {dtype: code for code, dtype in _DLPACK_DTYPE.items()}   # dtype -> (type code, bits)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, CAPSULE_DESTRUCTOR]


@dataclass
class DeviceView:
    """Where another library's array lives: a device pointer (or host memory when device_type is a host
    type), its shape and dtype, and whether it is C-contiguous. `keepalive` holds the capsule, if any,
    until the copy that reads it has been enqueued."""
    pointer: int
    shape: tuple
    dtype: str | None                 # f32 / f16 / bf16, or None for any other element type
    type_name: str                    # the element type as the producer names it, for messages
    contiguous: bool
    device_type: int                  # a DLPack device type (CAI arrays: KDL_CUDA)
    device_id: int | None             # None: not known from the protocol (CAI): ask the driver
    stream: int | None = None         # CAI: the stream the producer wrote it on (None: already visible)
    keepalive: object = None


def is_device_array(obj) -> bool:
    """Whether obj is an array in GPU memory (not numpy, not a CPU tensor)."""
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or isinstance(obj, np.ndarray):
        return False
    return device()[0] not in HOST_DEVICE_TYPES


def _c_contiguous(shape, strides) -> bool:
    """strides in elements; dimensions of size 1 may have any stride."""
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def describe(obj, stream: int | None = None) -> DeviceView:
    """The DeviceView of a device array (CAI preferred: it needs no capsule). stream: the stream the
    reads will be enqueued on, passed to `__dlpack__` so the producer orders its writes before it."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        shape = tuple(int(n) for n in cai["shape"])
        typestr = cai["typestr"]
        dtype = _TYPESTR.get(typestr)
        itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
        strides = cai.get("strides")
        contiguous = strides is None or _c_contiguous(shape, [s // itemsize for s in strides])
        return DeviceView(int(cai["data"][0] or 0), shape, dtype, typestr, contiguous, KDL_CUDA, None,
                          cai.get("stream") if cai.get("version", 0) >= 3 else None)
    if stream == 0:
        stream = 1                    # DLPack names CUDA's legacy default stream 1 (0 is ambiguous there)
    capsule = obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
    t = DLManagedTensor.from_address(address).dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    code, bits = t.dtype.code, t.dtype.bits
    strides = [t.strides[i] for i in range(t.ndim)] if t.strides else None
    contiguous = strides is None or _c_contiguous(shape, strides)
    dtype = _DLPACK_DTYPE.get((code, bits)) if t.dtype.lanes == 1 else None
    return DeviceView((t.data or 0) + t.byte_offset, shape, dtype, f"dlpack(code={code}, bits={bits})", contiguous,
                      t.device.device_type, t.device.device_id, None, capsule)


# ------------------------------------------------------------------------------------------------------------
# Arrays we lend.

_LENT: dict[int, tuple] = {}          # manager_ctx -> (DeviceArray, DLManagedTensor, shape array)
_KEYS = itertools.count(1)


@DELETER
def _deleter(managed):
    _LENT.pop(managed.contents.manager_ctx or 0, None)


@CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    """Frees a capsule nobody consumed (a consumer renames it to "used_dltensor" and calls the deleter)."""
    capsule = ctypes.cast(capsule, ctypes.py_object)
    if _api.PyCapsule_IsValid(capsule, b"dltensor"):
        address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
        _deleter(ctypes.cast(address, ctypes.POINTER(DLManagedTensor)))


class DeviceArray:
    """An output in device memory, owned by this object (freed with it), lent to other libraries through
    __cuda_array_interface__ and __dlpack__ without copies. `numpy()` copies it to the host."""

    def __init__(self, device, shape, dtype: str, stream: int | None = None):
        self.device, self.shape, self.dtype = device, tuple(int(n) for n in shape), dtype
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * ITEMSIZE[dtype]
        self.pointer = device.alloc(self.nbytes)
        self.stream = stream          # the stream last written on (None: complete)

    @property
    def __cuda_array_interface__(self):
        if self.device.kind != "cuda":
            raise AttributeError("__cuda_array_interface__ is for CUDA memory")
        if self.dtype == "bf16":
            raise AttributeError("__cuda_array_interface__ has no bfloat16: use __dlpack__")
        return {"shape": self.shape, "typestr": np.dtype(STORAGE[self.dtype]).str, "data": (self.pointer, False),
                "strides": None, "version": 3, "stream": self.stream}

    def __dlpack_device__(self):
        return DEVICE_TYPE[self.device.kind], self.device.index

    def __dlpack__(self, *, stream=None):
        """A "dltensor" capsule; stream: the consumer's stream, made to wait for our last writes."""
        if stream not in (None, -1) and self.stream is not None and stream != self.stream:
            self.device.wait(stream, self.stream)
        key = next(_KEYS)
        shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        code, bits = _DLPACK_CODE[self.dtype]
        managed = DLManagedTensor(
            DLTensor(self.pointer, DLDevice(*self.__dlpack_device__()), len(self.shape), DLDataType(code, bits, 1),
                     shape, None, 0), key, _deleter)
        _LENT[key] = (self, managed, shape)
        return _api.PyCapsule_New(ctypes.addressof(managed), b"dltensor", _capsule_destructor)

    def numpy(self) -> np.ndarray:
        """A host copy (bf16 as float32 values)."""
        if self.stream is not None:
            self.device.stream_synchronize(self.stream)
        host = np.empty(self.shape, STORAGE[self.dtype])
        self.device.copy_to_host(host, self.pointer)
        return from_storage(host, self.dtype)

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, {self.device.kind}:{self.device.index})"

    def __del__(self):
        try:
            self.device.free(self.pointer)
        except Exception:  # interpreter shutdown or a lost device: nothing left to free
            pass


def check_bound(view: DeviceView, what: str, name: str, shape, dtype: str, device) -> None:
    """One OpenPrimError, naming the input/output, if a device array cannot be bound as that value."""
    where = f"{what} '{name}'"
    if view.device_type in HOST_DEVICE_TYPES:
        raise OpenPrimError(f"{where} is in host memory but the model runs on {device.kind} GPU {device.index}: "
                            f"move it to the GPU first (e.g. tensor.cuda()), or pass numpy arrays for every input")
    if view.device_type != DEVICE_TYPE[device.kind]:
        raise OpenPrimError(f"{where} is on a DLPack device of type {view.device_type}, not {device.kind}: "
                            f"move it to {device.kind} GPU {device.index}")
    ordinal = view.device_id if view.device_id is not None else device.pointer_device(view.pointer)
    if ordinal != device.index:
        raise OpenPrimError(f"{where} is on GPU {ordinal} but the model runs on GPU {device.index}: "
                            f"move it there (e.g. tensor.to('cuda:{device.index}'))" if ordinal is not None else
                            f"{where} is not device memory of GPU {device.index}: pass an array allocated there")
    if tuple(view.shape) != tuple(shape):
        raise OpenPrimError(f"{where} must have shape {tuple(shape)}, got {tuple(view.shape)}")
    if view.dtype != dtype:
        raise OpenPrimError(f"{where} must have dtype {dtype}, got {view.dtype or view.type_name}: "
                            f"convert it on the device (e.g. tensor.to(torch.{_TORCH_NAME[dtype]}))")
    if not view.contiguous:
        raise OpenPrimError(f"{where} is not C-contiguous: make it contiguous on the device first "
                            f"(e.g. tensor.contiguous())")


_TORCH_NAME = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i64": "int64", "i32": "int32", "bool": "bool"}

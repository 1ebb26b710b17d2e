"""Element types and their numpy storage. numpy has no bfloat16: bf16 tensors are stored as uint16 bits.

A plan's input and output values may carry a `host_dtype` besides their `dtype`: the element type the
caller passes and gets back when it differs from the one the kernels compute in (an fp32 model compiled
with precision="f16" computes in f16 and still takes and returns float32). `to_storage` converts any float
input to the stored type; `from_storage(a, dtype, host_dtype)` converts an output back at the edge.
"""
from __future__ import annotations

import numpy as np

STORAGE = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}
# The numpy type a caller sees for each dtype (numpy has no bfloat16: bf16 values come back as float32).
HOST = {"f32": np.float32, "f16": np.float16, "bf16": np.float32}
# The largest finite value of each dtype.
FINITE_MAX = {"f32": float(np.finfo(np.float32).max), "f16": float(np.finfo(np.float16).max),
              "bf16": 3.3895313892515355e38}


def to_storage(a, dtype: str) -> np.ndarray:
    """A float array in the storage format of dtype (bf16: round to nearest even)."""
    a = np.asarray(a)
    if dtype != "bf16":
        return np.ascontiguousarray(a, STORAGE[dtype])
    if a.dtype == np.uint16:
        return np.ascontiguousarray(a)
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    out = (rounded >> 16).astype(np.uint16)
    return np.where(np.isnan(a), np.uint16(0x7FC0), out).astype(np.uint16)


def from_storage(a: np.ndarray, dtype: str, host_dtype: str | None = None) -> np.ndarray:
    """The values of a stored tensor as a numpy float array (bf16 -> float32); host_dtype: converted to
    that dtype's numpy type (HOST) at the edge of a plan whose kernels compute in another dtype."""
    if dtype == "bf16":
        a = (np.asarray(a, np.uint16).astype(np.uint32) << 16).view(np.float32)
    if host_dtype is not None and host_dtype != dtype:
        return a.astype(HOST[host_dtype])
    return a

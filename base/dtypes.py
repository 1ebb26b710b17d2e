"""Element types and their numpy storage. numpy has no bfloat16: bf16 tensors are stored as uint16 bits.

A plan's input and output values may carry a `host_dtype` besides their `dtype`: the element type the
caller passes and gets back when it differs from the one the kernels compute in (an fp32 model compiled
with precision="f16" computes in f16 and still takes and returns float32). `to_storage` converts any float
input to the stored type; `from_storage(a, dtype, host_dtype)` converts an output back at the edge.
`host_to_storage` converts what a caller hands over (an input, a Graph param) and checks it: bf16 values
come as floats or as `ml_dtypes.bfloat16` arrays (the ecosystem's numpy bf16, read by its name, so the
runtime needs only numpy); a uint16 array is refused rather than read as bits (`a.view(ml_dtypes.bfloat16)`
says bits explicitly), and so are finite values that the dtype would turn into inf. bf16 outputs come back
as float32 (HOST), which holds every bf16 value exactly.

Integer and boolean tensors (token ids, attention masks, positions) are i64, i32 and bool: numpy's int64,
int32 and bool_. In the IR a bool is an `i8` holding 0 or 1 (`MLIR_TYPE`): a byte per element in memory on
every target, where an `i1` vector load would read packed bits. An integer input takes integers (or floats
with integral values), checked against the dtype's range; a bool input takes bools or 0/1.
"""
from __future__ import annotations

import numpy as np

from openprim.base.errors import OpenPrimError

FLOATS = ("f32", "f16", "bf16")
INTEGERS = ("i64", "i32")
DTYPES = FLOATS + INTEGERS + ("bool",)
STORAGE = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i64": np.int64, "i32": np.int32,
           "bool": np.bool_}
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "bool": 1}
# The numpy type a caller sees for each dtype (numpy has no bfloat16: bf16 values come back as float32).
HOST = {**STORAGE, "bf16": np.float32}
# The element type of each dtype in the IR (a bool is a byte).
MLIR_TYPE = {**{d: d for d in DTYPES}, "bool": "i8"}
# The largest finite value of each dtype.
FINITE_MAX = {"f32": float(np.finfo(np.float32).max), "f16": float(np.finfo(np.float16).max),
              "bf16": 3.3895313892515355e38}


def to_storage(a, dtype: str) -> np.ndarray:
    """A float array in the storage format of dtype (bf16: round to nearest even)."""
    a = np.asarray(a)
    if dtype == "bool":
        return np.ascontiguousarray(a != 0)
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


# Per storage: (its bits as integers, the mask that drops the sign, +-inf under it): an overflow shows in the
# stored bits without a float pass over the array.
INF_BITS = {"f32": (np.uint32, 0x7FFFFFFF, 0x7F800000), "f16": (np.uint16, 0x7FFF, 0x7C00),
            "bf16": (np.uint16, 0x7FFF, 0x7F80)}


def host_to_storage(a, dtype: str, what: str) -> np.ndarray:
    """A caller's array (an input or a weight, named by `what`) in the contiguous storage of dtype, its shape
    kept (numpy makes a 0-d array 1-d on the way): floats, ints, bools and ml_dtypes.bfloat16 values. A uint16
    array for bf16, another kind of data, or a value beyond the dtype's range is one OpenPrimError."""
    a = np.asarray(a)
    return _host_to_storage(a, dtype, what).reshape(a.shape)


def _host_to_storage(a, dtype: str, what: str) -> np.ndarray:
    if a.dtype.name == "bfloat16":   # ml_dtypes: its bits are the storage of bf16
        bits = np.ascontiguousarray(a).view(np.uint16)
        if dtype == "bf16":
            return bits
        a = from_storage(bits, "bf16")
    if a.dtype.kind not in "fiub":   # complex, strings, objects: no meaningful conversion to floats
        raise OpenPrimError(f"{what} has dtype {a.dtype}; expected real numbers (float, int, bool or "
                            f"ml_dtypes.bfloat16)")
    if dtype not in FLOATS:
        return _integers(a, dtype, what)
    if dtype == "bf16" and a.dtype == np.uint16:
        raise OpenPrimError(f"{what} is a uint16 array for a bf16 tensor: pass its values as floats or an "
                            f"ml_dtypes.bfloat16 array (raw bf16 bits: a.view(ml_dtypes.bfloat16))")
    if a.dtype == STORAGE.get(dtype) and dtype != "bf16":   # already the storage (the common call): as it is
        return np.ascontiguousarray(a)
    with np.errstate(over="ignore"):
        stored = np.ascontiguousarray(to_storage(a, dtype))
    bits, mask, inf = INF_BITS[dtype]
    if a.size and ((stored.view(bits) & mask) == inf).any():
        finite = np.isfinite(a)     # an inf in the storage: from a finite value, or was it there already?
        if (np.isinf(from_storage(stored, dtype)) & finite).any():
            raise OpenPrimError(f"{what} ({a.dtype}) has values beyond the range of {dtype} "
                                f"(largest |x| {np.abs(a[finite]).max():.4g}); scale it or compile in f32")
    return stored


def _integers(a: np.ndarray, dtype: str, what: str) -> np.ndarray:
    """a as the storage of an integer or bool dtype: a float array must hold integral values, every value
    must fit the dtype (bool: 0 or 1)."""
    if a.dtype.kind == "f":
        if not np.isfinite(a).all() or (a != np.round(a)).any():
            raise OpenPrimError(f"{what} holds non-integral values ({a.dtype}); a {dtype} tensor takes integers")
    if a.dtype == STORAGE[dtype]:
        return np.ascontiguousarray(a)
    if a.size:
        lo, hi = (0, 1) if dtype == "bool" else (np.iinfo(STORAGE[dtype]).min, np.iinfo(STORAGE[dtype]).max)
        amin, amax = a.min(), a.max()
        if amin < lo or amax > hi:
            raise OpenPrimError(f"{what} has values in [{amin}, {amax}], beyond the range of {dtype} [{lo}, {hi}]")
    return np.ascontiguousarray(a, STORAGE[dtype])

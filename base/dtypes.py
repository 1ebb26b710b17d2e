"""Element types and their numpy storage. numpy has no bfloat16: bf16 tensors are stored as uint16 bits."""
from __future__ import annotations

import numpy as np

STORAGE = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}


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


def from_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    """The values of a stored tensor as a numpy float array (bf16 -> float32)."""
    if dtype == "bf16":
        return (np.asarray(a, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return a

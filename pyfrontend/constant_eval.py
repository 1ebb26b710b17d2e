"""Ops over constants evaluated while the Graph is built, so they cost nothing at run time.

Position ids (`arange`), the token-type rows of an embedding looked up with constant ids, a causal mask
built with comparisons: an importer meets many ops whose operands are all constants. Graph._emit asks
`exact(op, dtype)`, and where the answer is yes it stores `evaluate(...)` as a constant instead of the op.
Evaluation is exact for integer and bool results and for the ops that only move or select elements; float
arithmetic is left to the kernels (their rounding is the one the model gets everywhere else).
"""
from __future__ import annotations

import numpy as np

from openprim.base import ops as spec
from openprim.base.dtypes import FLOATS, STORAGE, from_storage

# The ops evaluated for any result dtype: those that select or move elements, and casts.
SELECTING = frozenset({"cast", "compare", "logical", "logical_not", "where", "broadcast", "gather",
                       "gather_elements", "index_copy", "cumsum", "bounds_check"})


class OutOfRange(ValueError):
    """An index that does not address its axis."""


def exact(op: str, dtype: str) -> bool:
    """Whether op with a result of dtype is evaluated over constants (see the module docstring)."""
    if op == "cumsum":
        return dtype not in FLOATS
    return op in SELECTING or (dtype not in FLOATS and op in spec.OPS and op != "constant")


def _index(idx: np.ndarray, size: int, what: str) -> np.ndarray:
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise OutOfRange(f"{what} holds indices in [{idx.min()}, {idx.max()}], outside [{-size}, {size})")
    return np.where(idx < 0, idx + size, idx)


_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
            "ge": np.greater_equal}
_LOGICAL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.floor_divide,
           "maximum": np.maximum, "minimum": np.minimum}


def evaluate(op: str, values: list, attrs: dict, shape, dtype: str) -> np.ndarray:
    """The result of op over constant operands `values` (in their storage), in the values of dtype."""
    xs = [v if v.dtype != np.uint16 else from_storage(v, "bf16") for v in values]
    x = xs[0]
    if op == "cast":
        return (x != 0) if dtype == "bool" else np.trunc(x) if dtype not in FLOATS and x.dtype.kind == "f" else x
    if op == "compare":
        return _COMPARE[attrs["kind"]](xs[0], xs[1])
    if op == "logical":
        return _LOGICAL[attrs["kind"]](xs[0], xs[1])
    if op == "logical_not":
        return np.logical_not(x)
    if op == "where":
        return np.where(xs[0], xs[1], xs[2])
    if op == "broadcast":
        return np.broadcast_to(x, shape)
    if op == "gather":
        axis = attrs["axis"] % x.ndim
        return np.take(x, _index(xs[1], x.shape[axis], "the indices"), axis=axis)
    if op == "gather_elements":
        axis = attrs["axis"] % x.ndim
        idx = _index(xs[1], x.shape[axis], "the indices")
        sub = x[tuple(slice(0, n) if a != axis else slice(None) for a, n in enumerate(idx.shape))]
        return np.take_along_axis(sub, idx, axis=axis)
    if op == "index_copy":
        axis, out = attrs["axis"] % x.ndim, x.copy()
        idx = _index(xs[1], x.shape[axis], "the indices")
        out[(slice(None),) * axis + (idx,)] = xs[2]
        return out
    if op == "cumsum":
        return cumsum(x, attrs["axis"], attrs["exclusive"], attrs["reverse"])
    if op == "bounds_check":
        return np.array([np.count_nonzero((x < -attrs["size"]) | (x >= attrs["size"]))])
    if op in _BINARY:
        return _BINARY[op](xs[0], xs[1])
    if op == "reshape":
        return x.reshape(shape)
    if op == "transpose":
        return x.transpose(attrs["perm"])
    if op == "concat":
        return np.concatenate([xs[0], xs[1]], attrs["axis"])
    if op == "slice":
        return x[tuple(slice(b, e, s) for b, e, s in zip(attrs["starts"], attrs["ends"], attrs["steps"]))]
    if op == "pad":
        n = x.ndim
        return np.pad(x, [(attrs["pads"][i], attrs["pads"][n + i]) for i in range(n)],
                      constant_values=np.asarray(attrs["value"]).astype(STORAGE[dtype]))
    raise NotImplementedError(f"no constant evaluation of prim.{op}")


def cumsum(x: np.ndarray, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    """Running sums along axis as ONNX CumSum (exclusive, reverse) computes them."""
    y = np.flip(x, axis) if reverse else x
    s = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        s = np.concatenate([np.zeros_like(np.take(s, [0], axis)), np.take(s, range(s.shape[axis] - 1), axis)], axis)
    return np.flip(s, axis) if reverse else s

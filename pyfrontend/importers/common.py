"""What every importer decides alike: the Graph dtype of a source dtype, float64 and integer data, and
the wording of those errors and of a missing optional package.

A Graph has one dtype, f32, f16 or bf16. An importer names its source's element types as numpy does
("float32", "float16", "bfloat16", "float64", "int64", ...) and asks here: `GRAPH_DTYPES` maps the three
float types; float64 is refused wherever it would be computed (`float64_message`: OpenPrim does not run
float64 silently in float32); a model mixing the float types imports in `dominant_dtype`; an integer
constant read as data must be exact in the Graph's dtype (`inexact_int`). Plain Python: no MLIR.
"""
from __future__ import annotations

import importlib

import numpy as np

from openprim.base.errors import OpenPrimError

# Source dtype name -> Graph dtype.
GRAPH_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
# Graph dtype -> its name in torch and numpy (ml_dtypes' bfloat16), for the backends that convert back (the
# integer and bool dtypes too).
DTYPE_NAMES = {**{dtype: name for name, dtype in GRAPH_DTYPES.items()}, "i64": "int64", "i32": "int32", "bool": "bool"}
# The largest integer magnitude below which every integer is exact in each dtype (2^(mantissa bits + 1)).
EXACT_INT = {"f32": 2 ** 24, "f16": 2 ** 11, "bf16": 2 ** 8}


def float64_message(what: str, fix: str) -> str:
    """The error for a float64 tensor that would be computed; `fix` says what to change in the source."""
    return (f"{what} is float64; OpenPrim computes in float32, float16 or bfloat16 only and does not run "
            f"float64 silently in float32: {fix}")


def non_float_message(what: str, type_name: str) -> str:
    """The error for a computed tensor (an input, an output) of an integer or other non-float type."""
    return f"{what} has element type {type_name}; OpenPrim supports float tensors only"


def dominant_dtype(weight_elements: dict[str, int], first_input: str | None) -> str:
    """The Graph dtype of a model: the dtype of most weight elements ({Graph dtype: element count}; f32 wins
    a tie), or, without float weights, its first float input's, else f32."""
    if weight_elements:
        return max(weight_elements, key=lambda d: (weight_elements[d], d == "f32"))
    return first_input or "f32"


def inexact_int(value: np.ndarray, dtype: str, name: str) -> str | None:
    """Why the integer constant `name`, read as data, cannot be computed in `dtype`; None if it can (or is
    not an integer)."""
    if value.dtype.kind not in "iu" or not value.size:
        return None
    top = np.max(np.abs(value.astype(np.float64)))
    if top <= EXACT_INT[dtype]:
        return None
    return (f"integer constant '{name}' (values up to {top:.0f}) is read as data and cannot be computed "
            f"exactly in {dtype}; OpenPrim computes in floats only")


def require(package: str, who: str):
    """The optional package (an extra of openprim's of the same name: onnx, torch), imported for `who`;
    missing, one error saying what to install."""
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as e:
        if e.name != package:
            raise
        raise OpenPrimError(f"{who} needs the '{package}' package: pip install 'openprim[{package}]'") from None

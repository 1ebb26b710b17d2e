"""A graph builder that reads like PyTorch's functional API and emits a `prim` module.

Shapes are inferred as each op is added (with the same rules the dialect verifier uses), so a wrong
shape fails at the line of the user's model that made it, naming the op and the shapes.
"""
from __future__ import annotations

import functools
import math
import numbers
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from openprim.base import ops as spec
from openprim.base.errors import OpenPrimError
from openprim.base.dtypes import FLOATS, INTEGERS, host_to_storage

from . import constant_eval

_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                      for m in (sys.modules["openprim"], sys.modules["openprim.base.errors"], spec))


def _user_location():
    """(file, line) of the first stack frame outside openprim's own sources: the user's model code."""
    f = sys._getframe(1)
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_LIBRARY_DIRS + (here,)):
            return fn, f.f_lineno
        f = f.f_back
    return "<graph>", 0


@dataclass(eq=False)
class Tensor:
    """A value in a Graph: its shape and dtype are known when it is created."""
    graph: "Graph"
    shape: tuple
    dtype: str
    name: str = ""

    def __add__(self, o): return self.graph.add(self, o)
    def __radd__(self, o): return self.graph.add(o, self)
    def __sub__(self, o): return self.graph.sub(self, o)
    def __rsub__(self, o): return self.graph.sub(o, self)
    def __mul__(self, o): return self.graph.mul(self, o)
    def __rmul__(self, o): return self.graph.mul(o, self)
    def __truediv__(self, o): return self.graph.div(self, o)
    def __rtruediv__(self, o): return self.graph.div(o, self)
    def __matmul__(self, o): return self.graph.matmul(self, o)

    @property
    def ndim(self):
        return len(self.shape)


@dataclass(eq=False)
class Node:
    op: str                      # prim op name without prefix
    operands: list               # per spec entry: Tensor, or None for an absent optional
    attrs: dict
    result: Tensor
    loc: tuple = ("<graph>", 0)
    value: np.ndarray | None = None   # for constants


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isnan(v)


def _check_attr(name: str, value, kind: str) -> str | None:
    """Why a value does not fit its kind in the op table ("i64", "i64s", "f64", "f64s", "str") or "bool", or
    None. The dialect stores i64 attributes as integers: 1.5 would silently become 1."""
    if kind == "i64":
        return None if _is_int(value) else f"'{name}' must be an integer, got {value!r}"
    if kind == "f64":
        return None if _is_number(value) else f"'{name}' must be a number, got {value!r}"
    if kind == "bool":
        ok = isinstance(value, (bool, np.bool_)) or (_is_int(value) and value in (0, 1))
        return None if ok else f"'{name}' must be True or False, got {value!r}"
    if kind == "str":
        return None if isinstance(value, str) else f"'{name}' must be a string, got {value!r}"
    if kind in ("i64s", "f64s"):
        ok, what = (_is_int, "integers") if kind == "i64s" else (_is_number, "numbers")
        if not isinstance(value, (list, tuple, np.ndarray)):
            return f"'{name}' must be a list of {what}, got {value!r}"
        return None if all(ok(v) for v in value) else f"'{name}' must be {what}, got {list(value)}"
    return None


_NORMAL = {"i64": int, "bool": int, "f64": float, "str": str,
           "i64s": lambda v: [int(i) for i in v], "f64s": lambda v: [float(i) for i in v]}


def _pair(v, n=2):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _padding4(p):
    """int | (ph, pw) | (top, left, bottom, right) -> [top, left, bottom, right]."""
    p = _pair(p)
    if len(p) == 2:
        return [p[0], p[1], p[0], p[1]]
    if len(p) == 4:
        return list(p)
    raise OpenPrimError(f"padding must be an int, 2 or 4 values, got {p}")


@dataclass
class Graph:
    """Build a network op by op; `openprim.compile(graph)` turns it into a callable."""
    name: str = "main"
    layout: str = "NCHW"
    dtype: str = "f32"
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    # Run-time checks: (a 1-element tensor that must be 0 after a run, what it means when not); the
    # bounds of gather's indices. The emitted function returns them after the outputs.
    checks: list = field(default_factory=list)
    # State carried from call to call (a KV cache): (input index, output index) pairs, the output being the
    # input's value in the next call. The executable holds such an input (zeros at first) and the caller
    # neither gives it nor gets it back (runtime/executor.py).
    state: list = field(default_factory=list)
    _values: dict = field(default_factory=dict, repr=False)   # id(tensor) -> the storage of a constant
    _checked: set = field(default_factory=set, repr=False)     # (id(indices), size) with a bounds check

    # ------------------------------------------------------------------ leaves
    def input(self, name: str, shape, dtype: str | None = None) -> Tensor:
        dtype = dtype or self.dtype
        self._check_dtype(dtype, f"input '{name}'")
        loc = _user_location()
        if not isinstance(name, str) or not name:
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: input name must be a non-empty string, got {name!r}")
        if any(i.name == name for i in self.inputs):
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: input '{name}' is defined twice; give each input its own name")
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        if not all(_is_int(s) and s > 0 for s in shape):
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: input '{name}': dimensions must be positive integers, "
                                f"got {list(shape)}")
        t = Tensor(self, tuple(int(s) for s in shape), dtype, name)
        self.inputs.append(t)
        return t

    def channels_last_input(self, index: int) -> Tensor:
        """Take 4-D input `index` (N, C, H, W) in channels-last memory order: the input becomes (N, H, W, C)
        and a transpose back to (N, C, H, W) feeds what read it (returned). A caller's channels-last tensor is
        then passed as it lies in memory, and the NHWC layout's own transpose of the input cancels this one."""
        old = self.inputs[index]
        n, c, h, w = old.shape
        new = Tensor(self, (n, h, w, c), old.dtype, old.name)
        back = Tensor(self, old.shape, old.dtype, f"%{old.name}.nchw")
        for node in self.nodes:
            node.operands = [back if o is old else o for o in node.operands]
        self.outputs = [back if o is old else o for o in self.outputs]
        self.nodes.insert(0, Node("transpose", [new], {"perm": [0, 3, 1, 2]}, back))
        self.inputs[index] = new
        return back

    def channels_last_output(self, index: int) -> None:
        """Give 4-D output `index` (N, C, H, W) in channels-last memory order, as (N, H, W, C): the transpose
        that makes it cancels with the NHWC layout's transpose back, so a map computed in NHWC is returned as
        it lies (the caller views it as NCHW with channels-last strides)."""
        old = self.outputs[index]
        n, c, h, w = old.shape
        new = Tensor(self, (n, h, w, c), old.dtype, f"%{old.name}.nhwc")
        self.nodes.append(Node("transpose", [old], {"perm": [0, 2, 3, 1]}, new))
        self.outputs[index] = new

    def param(self, name: str, value, dtype: str | None = None) -> Tensor:
        """A weight: `value` is a numpy array of numbers (ml_dtypes.bfloat16 too), stored in `dtype` (default the
        graph's); a value beyond that dtype's range is an error, as for inputs (base/dtypes.host_to_storage)."""
        loc = _user_location()
        if not isinstance(name, str) or not name:
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: param name must be a non-empty string, got {name!r}")
        value = np.asarray(value)
        dtype = dtype or self.dtype
        self._check_dtype(dtype, f"param '{name}'")
        if value.size == 0:
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: param '{name}' is empty (shape {list(value.shape)}); "
                                f"every dimension must be at least 1")
        try:
            stored = host_to_storage(value, dtype, f"param '{name}'")
        except OpenPrimError as e:
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: {e}") from None
        t = Tensor(self, tuple(value.shape), dtype, name)
        self.nodes.append(Node("constant", [], {}, t, loc, stored))
        self._values[id(t)] = stored
        return t

    constant = param

    def producer(self, t: Tensor) -> Node | None:
        """The node whose result is t (None for an input)."""
        return next((n for n in reversed(self.nodes) if n.result is t), None)

    def output(self, *tensors: Tensor) -> None:
        for t in tensors:
            self._own(t, "output")
        self.outputs.extend(tensors)

    def carry(self, state: Tensor, new: Tensor) -> None:
        """Make input `state` persistent: the executable holds it (zeros until set), and `new` (an output,
        appended if it is not one yet) is its value for the next call. A KV cache: new = index_copy(state,
        axis, positions, rows), which the executable writes in place (only the rows)."""
        self._own(state, "carry")
        self._own(new, "carry")
        loc = _user_location()
        where = f"{loc[0]}:{loc[1]}: error: carry"
        if not any(state is t for t in self.inputs):
            raise OpenPrimError(f"{where}: the state must be an input of the graph")
        if (state.shape, state.dtype) != (new.shape, new.dtype):
            raise OpenPrimError(f"{where}: input '{state.name}' is {state.dtype}{list(state.shape)} but its next "
                                f"value is {new.dtype}{list(new.shape)}")
        i = next(k for k, t in enumerate(self.inputs) if t is state)
        if any(k == i for k, _ in self.state):
            raise OpenPrimError(f"{where}: input '{state.name}' is carried twice")
        if not any(new is t for t in self.outputs):
            self.outputs.append(new)
        self.state.append((i, next(k for k, t in enumerate(self.outputs) if t is new)))

    # ------------------------------------------------------------------ plumbing
    def _check_dtype(self, dtype, what):
        if dtype not in spec.DTYPES:
            raise OpenPrimError(f"{what}: dtype must be one of {spec.DTYPES}, got '{dtype}'")

    def _own(self, t, what):
        if not isinstance(t, Tensor) or t.graph is not self:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: {what}: expected a Tensor of this graph, "
                                f"got {type(t).__name__}")

    def _arg(self, what: str, name: str, value, kind: str):
        """Argument `name` of op `what` as its attribute holds it (ints, 0/1, floats, lists), checked against
        kind (_check_attr's); otherwise one OpenPrimError at the user's line naming the op and argument."""
        why = _check_attr(name, value, kind)
        if why:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: {what}: {why}")
        return _NORMAL[kind](value)

    def _promoted(self, what: str, *xs) -> list:
        """The operands (Tensors, Python numbers, numpy arrays) as Tensors of one dtype, as torch promotes:
        a float tensor's dtype over integer and bool ones (two float dtypes do not mix), the wider integer,
        the graph's float dtype where a float number meets only integer or bool tensors, i64 where an
        integer number meets only bool tensors."""
        tensors = [x for x in xs if isinstance(x, Tensor)]
        for t in tensors:
            self._own(t, what)
        dtypes = {t.dtype for t in tensors}
        numbers = [np.asarray(x) for x in xs if not isinstance(x, Tensor)]
        if dtypes & set(FLOATS):
            dtype = min(dtypes & set(FLOATS), key=FLOATS.index)   # more than one: prim.<op> says they mix
        elif any(n.dtype.kind == "f" for n in numbers):
            dtype = self.dtype if self.dtype in FLOATS else "f32"
        elif dtypes & set(INTEGERS):
            dtype = "i64" if "i64" in dtypes else "i32"
        else:
            dtype = "i64" if any(n.dtype.kind in "iu" for n in numbers) else "bool"
        return [self._as(x, dtype, what, keep_floats=True) for x in xs]

    def _as(self, x, dtype: str, what: str, keep_floats=False) -> Tensor:
        """x as a Tensor of dtype: a Tensor cast (a float one kept as it is with keep_floats: the op reports
        two float dtypes that mix), a number or array a constant."""
        if isinstance(x, Tensor):
            return x if x.dtype == dtype or keep_floats and x.dtype in FLOATS else self.cast(x, dtype)
        if not isinstance(x, (np.ndarray, bool, np.bool_)):
            x = self._arg(what, "operand", x, "f64")
        try:
            host_to_storage(np.asarray(x), dtype, f"{what}: operand")   # its error names the op, not a param
        except OpenPrimError as e:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: {e}") from None
        return self.param(f"scalar{len(self.nodes)}", np.asarray(x), dtype)

    def _emit(self, op: str, operands: list, attrs: dict, shape=None, dtype=None) -> Tensor:
        """Append op; its result's shape and dtype inferred (base/ops.py) unless given (reshape, broadcast: the
        shape; cast: the dtype). An op whose operands are all constants is evaluated here
        (pyfrontend/constant_eval.py) where that is exact: the result is a constant."""
        loc = _user_location()
        flat = [t for t in operands if t is not None]
        for t in flat:
            self._own(t, f"prim.{op}")
        for key, kind in spec.OPS[op].attributes.items():
            why = _check_attr(key, attrs[key], kind) if key in attrs else None
            if why:
                raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.{op}: {why}")
        if shape is None:
            shapes = [None if t is None else t.shape for t in operands]
            try:
                shape = spec.infer(op, shapes, attrs)
            except spec.ShapeError as e:
                given = ", ".join("x".join(map(str, t.shape)) for t in flat)
                raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.{op} (operands {given}): {e}") from None
        try:
            dtype = spec.infer_dtype(op, [None if t is None else t.dtype for t in operands], attrs) or dtype
        except spec.ShapeError as e:
            given = ", ".join(f"{spec.fmt_shape(t.shape)} {t.dtype}" for t in flat)
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.{op} (operands {given}): {e}") from None
        if 0 in tuple(shape):
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.{op}: the result would be empty "
                                f"({spec.fmt_shape(shape)}); every dimension must be at least 1")
        t = Tensor(self, tuple(shape), dtype, f"%{len(self.nodes)}")
        values = [self._values.get(id(o)) for o in flat]
        if flat and all(v is not None for v in values) and constant_eval.exact(op, dtype):
            try:
                value = constant_eval.evaluate(op, values, attrs, t.shape, dtype)
            except constant_eval.OutOfRange as e:
                raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.{op}: {e}") from None
            stored = host_to_storage(value, dtype, f"prim.{op}")
            self.nodes.append(Node("constant", [], {}, t, loc, stored))
            self._values[id(t)] = stored
            return t
        self.nodes.append(Node(op, operands, attrs, t, loc))
        return t

    def _filter_layout(self, layout):
        return "KCRS" if layout == "NCHW" else "KRSC"

    # ------------------------------------------------------------------ ops
    def conv2d(self, x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, layout=None,
               filter_layout=None, activation="none", activation_params=()):
        layout = layout or self.layout
        return self._emit("conv2d", [x, w, bias, None], {
            "strides": list(_pair(stride)), "padding": _padding4(padding), "dilations": list(_pair(dilation)),
            "groups": groups, "layout": layout, "filter_layout": filter_layout or self._filter_layout(layout),
            "activation": activation,
            "activation_params": self._arg("prim.conv2d", "activation_params", activation_params, "f64s")})

    def matmul(self, a, b, bias=None, transpose_rhs=False, activation="none", activation_params=()):
        return self._emit("matmul", [a, b, bias, None], {
            "transpose_rhs": self._arg("prim.matmul", "transpose_rhs", transpose_rhs, "bool"),
            "activation": activation,
            "activation_params": self._arg("prim.matmul", "activation_params", activation_params, "f64s")})

    def linear(self, x, w, bias=None):
        """x @ w.T + bias with w of shape [out_features, in_features], as torch.nn.functional.linear."""
        return self.matmul(x, w, bias, transpose_rhs=True)

    def batch_norm(self, x, scale, shift, mean, variance, eps=1e-5, layout=None):
        return self._emit("batch_norm", [x, scale, shift, mean, variance],
                          {"epsilon": eps, "layout": layout or self.layout})

    def layer_norm(self, x, scale=None, shift=None, eps=1e-5, normalized_ndim=1):
        return self._emit("layer_norm", [x, scale, shift, None], {"epsilon": eps, "normalized_ndim": normalized_ndim})

    def rms_norm(self, x, scale=None, eps=1e-5, normalized_ndim=1):
        """x / sqrt(mean(x^2) + eps) * scale over the trailing normalized_ndim dims (torch's nn.RMSNorm;
        its eps=None means the dtype's machine epsilon, which the importers resolve)."""
        return self._emit("rms_norm", [x, scale, None], {"epsilon": eps, "normalized_ndim": normalized_ndim})

    def group_norm(self, x, groups, scale, shift, eps=1e-5, layout=None):
        return self._emit("group_norm", [x, scale, shift],
                          {"groups": groups, "epsilon": eps, "layout": layout or self.layout})

    def relu(self, x): return self._emit("relu", [x], {})
    def sigmoid(self, x): return self._emit("sigmoid", [x], {})
    def tanh(self, x): return self._emit("tanh", [x], {})
    def silu(self, x): return self._emit("silu", [x], {})
    def leaky_relu(self, x, alpha=0.01): return self._emit("leaky_relu", [x], {"alpha": alpha})
    def elu(self, x, alpha=1.0): return self._emit("elu", [x], {"alpha": alpha})
    def clamp(self, x, min, max): return self._emit("clamp", [x], {"min": min, "max": max})
    def relu6(self, x): return self.clamp(x, 0.0, 6.0)
    def hardswish(self, x): return self._emit("hardswish", [x], {})

    def hardsigmoid(self, x, alpha=1 / 6, beta=0.5):
        """clamp(alpha x + beta, 0, 1): torch's defaults; ONNX's are alpha 0.2, beta 0.5."""
        return self._emit("hardsigmoid", [x], {"alpha": alpha, "beta": beta})
    def gelu(self, x, approximate="none"): return self._emit("gelu", [x], {"approximate": approximate})

    def exp(self, x): return self._emit("exp", [x], {})
    def log(self, x): return self._emit("log", [x], {})
    def sqrt(self, x): return self._emit("sqrt", [x], {})
    def abs(self, x): return self._emit("abs", [x], {})
    def erf(self, x): return self._emit("erf", [x], {})
    def sin(self, x): return self._emit("sin", [x], {})
    def cos(self, x): return self._emit("cos", [x], {})

    def add(self, a, b): return self._binary("add", a, b)
    def sub(self, a, b): return self._binary("sub", a, b)
    def mul(self, a, b): return self._binary("mul", a, b)
    def div(self, a, b): return self._binary("div", a, b)
    def maximum(self, a, b): return self._binary("maximum", a, b)
    def minimum(self, a, b): return self._binary("minimum", a, b)
    def pow(self, a, b): return self._binary("pow", a, b)

    def _binary(self, op, a, b):
        self._own(a if isinstance(a, Tensor) or not isinstance(b, Tensor) else b, f"prim.{op}")
        return self._emit(op, self._promoted(f"prim.{op}", a, b), {})

    def floor_divide(self, a, b):
        """a // b of integers (floor division, Python's and torch's rule)."""
        return self._binary("div", *[self._as(x, "i64", "floor_divide") if isinstance(x, Tensor) and x.dtype == "bool"
                                     else x for x in (a, b)])

    # ------------------------------------------------------------------ integers, bools, indexing
    def cast(self, x, dtype: str) -> Tensor:
        """x's values in dtype: float -> integer truncates toward zero, anything -> bool is x != 0."""
        self._own(x, "prim.cast")
        self._check_dtype(dtype, "prim.cast")
        return x if x.dtype == dtype else self._emit("cast", [x], {}, dtype=dtype)

    def _compare(self, kind, a, b):
        return self._emit("compare", self._promoted(f"prim.compare {kind}", a, b), {"kind": kind})

    def eq(self, a, b): return self._compare("eq", a, b)
    def ne(self, a, b): return self._compare("ne", a, b)
    def lt(self, a, b): return self._compare("lt", a, b)
    def le(self, a, b): return self._compare("le", a, b)
    def gt(self, a, b): return self._compare("gt", a, b)
    def ge(self, a, b): return self._compare("ge", a, b)

    def _logical(self, kind, a, b):
        what = f"prim.logical {kind}"
        return self._emit("logical", [self._as(x, "bool", what) for x in (a, b)], {"kind": kind})

    def logical_and(self, a, b): return self._logical("and", a, b)
    def logical_or(self, a, b): return self._logical("or", a, b)
    def logical_xor(self, a, b): return self._logical("xor", a, b)
    def logical_not(self, x): return self._emit("logical_not", [self._as(x, "bool", "prim.logical_not")], {})

    def where(self, condition, a, b):
        """condition ? a : b elementwise (condition: a bool tensor or anything != 0), the three broadcast."""
        lhs, rhs = self._promoted("prim.where", a, b)
        return self._emit("where", [self._as(condition, "bool", "prim.where"), lhs, rhs], {})

    def broadcast_to(self, x, shape):
        """x broadcast (numpy rules) to shape; -1 keeps x's size on that axis (torch's expand)."""
        self._own(x, "prim.broadcast")
        shape = self._arg("prim.broadcast", "shape", shape, "i64s")
        lead = len(shape) - x.ndim
        shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape))
        try:
            fits = lead >= 0 and spec.broadcast(x.shape, shape) == shape
        except spec.ShapeError:
            fits = False
        if not fits:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.broadcast: cannot broadcast "
                                f"{spec.fmt_shape(x.shape)} to {spec.fmt_shape(shape)}")
        return x if shape == x.shape else self._emit("broadcast", [x], {}, shape=shape)

    expand = broadcast_to

    def _indices(self, indices, what) -> Tensor:
        if isinstance(indices, Tensor):
            self._own(indices, what)
            return indices
        return self._as(np.asarray(indices, np.int64), "i64", what)

    def _bounds_check(self, indices: Tensor, size: int, what: str) -> None:
        """A run-time check that indices address an axis of `size`; constant indices are checked here."""
        known = self._values.get(id(indices))
        if known is not None:        # constant indices: checked now, at the line that made the op
            if known.size and (known.min() < -size or known.max() >= size):
                loc = _user_location()
                raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: {what}: the indices hold values in "
                                    f"[{known.min()}, {known.max()}], outside [{-size}, {size})")
            return
        if (id(indices), size) in self._checked:
            return
        self._checked.add((id(indices), size))
        loc = _user_location()
        t = self._emit("bounds_check", [indices], {"size": size})
        self.checks.append((t, f"{loc[0]}:{loc[1]}: {what}: an index is outside [{-size}, {size})"))

    def gather(self, x, indices, axis=0):
        """x's entries `indices` along axis (ONNX Gather, numpy.take): out[a.., i.., b..] = x[a.., indices[i..],
        b..]; negative indices count from the end. Indices known only at run time are checked after each run:
        one out of range is an error (the kernel reads within x meanwhile)."""
        self._own(x, "prim.gather")
        idx = self._indices(indices, "prim.gather")
        out = self._emit("gather", [x, idx], {"axis": axis})
        if idx.dtype in INTEGERS:
            self._bounds_check(idx, x.shape[axis], f"prim.gather (axis {axis} of {spec.fmt_shape(x.shape)})")
        return out

    def embedding(self, ids, table):
        """The rows of table [V, D] that ids name (torch's F.embedding): [*ids.shape, D]."""
        return self.gather(table, ids, 0)

    def gather_elements(self, x, indices, axis):
        """out[i] = x[i with its axis coordinate replaced by indices[i]] (torch.gather, ONNX GatherElements)."""
        self._own(x, "prim.gather_elements")
        idx = self._indices(indices, "prim.gather_elements")
        out = self._emit("gather_elements", [x, idx], {"axis": axis})
        if idx.dtype in INTEGERS:
            self._bounds_check(idx, x.shape[axis], f"prim.gather_elements (axis {axis} of {spec.fmt_shape(x.shape)})")
        return out

    def index_copy(self, x, axis, indices, updates):
        """x with out[a.., indices[j], b..] = updates[a.., j, b..] along axis (torch.index_copy; a KV cache
        written at the step's positions). Indices known only at run time are checked after each run: one
        out of range is an error (the kernel skips it meanwhile)."""
        self._own(x, "prim.index_copy")
        self._own(updates, "prim.index_copy")
        idx = self._indices(indices, "prim.index_copy")
        out = self._emit("index_copy", [x, idx, updates], {"axis": axis})
        if idx.dtype in INTEGERS:
            self._bounds_check(idx, x.shape[axis], f"prim.index_copy (axis {axis} of {spec.fmt_shape(x.shape)})")
        return out

    def cumsum(self, x, axis, exclusive=False, reverse=False):
        """Running sums along axis (torch.cumsum; ONNX CumSum's exclusive and reverse); bools sum as i64."""
        self._own(x, "prim.cumsum")
        x = self.cast(x, "i64") if x.dtype == "bool" else x
        return self._emit("cumsum", [x], {
            "axis": axis, "exclusive": self._arg("prim.cumsum", "exclusive", exclusive, "bool"),
            "reverse": self._arg("prim.cumsum", "reverse", reverse, "bool")})

    def isnan(self, x):
        """x != x (a bool tensor)."""
        return self.ne(x, x)

    def isinf(self, x):
        """|x| == inf (a bool tensor)."""
        return self.eq(self.abs(x), math.inf)

    def any(self, x, axes=None, keepdims=False):
        """Whether any element over axes (default all) is true or nonzero: the max of x as 0/1, compared."""
        self._own(x, "any")
        flags = self.cast(self.cast(x, "bool"), self.dtype if self.dtype in FLOATS else "f32")
        return self.gt(self.reduce(flags, "max", axes, keepdims), 0.0)

    def all(self, x, axes=None, keepdims=False):
        """Whether every element over axes (default all) is true or nonzero: the min of x as 0/1, compared."""
        self._own(x, "all")
        flags = self.cast(self.cast(x, "bool"), self.dtype if self.dtype in FLOATS else "f32")
        return self.gt(self.reduce(flags, "min", axes, keepdims), 0.0)

    def arange(self, start, end=None, step=1, dtype="i64"):
        """[start, end) by step as a constant (numpy.arange; torch.arange(end) with one argument)."""
        start, end = (0, start) if end is None else (start, end)
        return self.param(f"arange{len(self.nodes)}", np.arange(start, end, step), dtype)

    def _whole_window(self, x, kernel, padding, dilation, ceil_mode, layout) -> bool:
        """Whether a ceil_mode pool's window is larger than the input (HF EfficientNet pools 3x3 with a 640
        window), without padding or dilation: its one window, clipped to the input as PyTorch and ONNX clip
        ceil_mode windows, is the whole input, a global pool. (A window the input's size stays a pool.)"""
        self._own(x, "pool")
        if x.ndim != 4 or any(_padding4(padding)) or any(d != 1 for d in _pair(dilation)):
            return False
        h, w = (x.shape[2], x.shape[3]) if layout == "NCHW" else (x.shape[1], x.shape[2])
        kh, kw = _pair(kernel)
        return bool(ceil_mode) and kh >= h and kw >= w and (kh, kw) != (h, w)

    def max_pool2d(self, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False, layout=None):
        layout = layout or self.layout
        if self._whole_window(x, kernel, padding, dilation, ceil_mode, layout):
            return self.reduce(x, "max", [2, 3] if layout == "NCHW" else [1, 2], keepdims=True)
        return self._emit("max_pool2d", [x], {
            "kernel": list(_pair(kernel)), "strides": list(_pair(stride or kernel)), "padding": _padding4(padding),
            "dilations": list(_pair(dilation)),
            "ceil_mode": self._arg("prim.max_pool2d", "ceil_mode", ceil_mode, "bool"),
            "layout": layout or self.layout})

    def avg_pool2d(self, x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True, layout=None):
        layout = layout or self.layout
        if self._whole_window(x, kernel, padding, 1, ceil_mode, layout):
            return self.global_avg_pool(x, layout)
        return self._emit("avg_pool2d", [x], {
            "kernel": list(_pair(kernel)), "strides": list(_pair(stride or kernel)), "padding": _padding4(padding),
            "ceil_mode": self._arg("prim.avg_pool2d", "ceil_mode", ceil_mode, "bool"),
            "count_include_pad": self._arg("prim.avg_pool2d", "count_include_pad", count_include_pad, "bool"),
            "layout": layout or self.layout})

    def global_avg_pool(self, x, layout=None):
        return self._emit("global_avg_pool", [x], {"layout": layout or self.layout})

    def softmax(self, x, axis=-1): return self._emit("softmax", [x], {"axis": axis})
    def log_softmax(self, x, axis=-1): return self._emit("log_softmax", [x], {"axis": axis})

    def attention(self, q, k, v, mask=None, causal=False, scale=None, layout="BHSD"):
        """softmax(scale * q @ k^T + mask) @ v per batch and head, as torch's scaled_dot_product_attention:
        q [B, H, Sq, D], k/v [B, H, Sk, D] (layout="BSHD": [B, Sq, H, D] and [B, Sk, H, D], the result too),
        an additive mask broadcastable to [B, H, Sq, Sk], causal keeps key j <= query i (top-left
        aligned), scale defaults to 1/sqrt(D). A constant mask of zeros (transformers' "attend everywhere"
        mask where no attention_mask was given: HuBERT, wav2vec2) is no mask."""
        self._own(q, "prim.attention")
        known = None if mask is None else self._values.get(id(mask))
        if known is not None and not known.any():
            mask = None
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        return self._emit("attention", [q, k, v, mask], {
            "scale": scale, "causal": self._arg("prim.attention", "causal", causal, "bool"), "layout": layout})

    def reshape(self, x, shape):
        self._own(x, "prim.reshape")
        shape = self._arg("prim.reshape", "shape", shape, "i64s")
        if shape.count(-1) > 1:
            raise OpenPrimError(f"prim.reshape: at most one -1 in {shape}")
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            shape[shape.index(-1)] = spec.numel(x.shape) // max(known, 1)
        if spec.numel(shape) != spec.numel(x.shape):
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.reshape: cannot reshape "
                                f"{spec.fmt_shape(x.shape)} to {spec.fmt_shape(shape)}")
        return self._emit("reshape", [x], {}, shape=tuple(shape))

    def flatten(self, x, start_dim=1):
        """x with the dims from start_dim on (negative: from the end) made one, as torch.flatten."""
        self._own(x, "flatten")
        start_dim = self._arg("flatten", "start_dim", start_dim, "i64")
        if not -x.ndim <= start_dim < x.ndim:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: flatten (operand {spec.fmt_shape(x.shape)}): start_dim "
                                f"{start_dim} must be in [{-x.ndim}, {x.ndim})")
        return self.reshape(x, tuple(x.shape[:start_dim % x.ndim]) + (-1,))

    def transpose(self, x, perm):
        return self._emit("transpose", [x], {"perm": self._arg("prim.transpose", "perm", perm, "i64s")})

    def concat(self, xs, axis=0):
        """Concatenate along axis (a chain of binary prim.concat ops)."""
        if not isinstance(xs, (list, tuple)) or not xs:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.concat: expected a non-empty list of Tensors, "
                                f"got {xs!r}")
        out = xs[0]
        self._own(out, "prim.concat")
        for x in xs[1:]:
            out = self._emit("concat", [out, x], {"axis": axis})
        return out

    def pad(self, x, pads, value=0.0):
        return self._emit("pad", [x], {"pads": self._arg("prim.pad", "pads", pads, "i64s"), "value": value})

    def slice(self, x, starts, ends, axes=None, steps=None):
        """x[start:end:step] on each of `axes` (default: the first len(starts)), the other axes whole.
        Python's slicing rules: negative starts/ends count from the end, out-of-range ones are clamped."""
        self._own(x, "prim.slice")
        starts = self._arg("prim.slice", "starts", starts, "i64s")
        ends = self._arg("prim.slice", "ends", ends, "i64s")
        axes = list(range(len(starts))) if axes is None else self._arg("prim.slice", "axes", axes, "i64s")
        steps = [1] * len(axes) if steps is None else self._arg("prim.slice", "steps", steps, "i64s")
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise OpenPrimError(f"prim.slice: starts, ends, axes and steps differ in length: {list(starts)}, "
                                f"{list(ends)}, {axes}, {steps}")
        begin, end, step = [0] * x.ndim, list(x.shape), [1] * x.ndim
        for ax, b, e, s in zip(axes, starts, ends, steps):
            if not -x.ndim <= ax < x.ndim or s < 1:
                loc = _user_location()
                raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: prim.slice (operand {spec.fmt_shape(x.shape)}): "
                                    f"axis {ax} must be in [{-x.ndim}, {x.ndim}) and step {s} positive")
            ax %= x.ndim
            begin[ax], end[ax], step[ax] = slice(b, e, s).indices(x.shape[ax])
        return self._emit("slice", [x], {"starts": begin, "ends": end, "steps": step})

    def reduce(self, x, kind, axes=None, keepdims=False):
        """sum, mean, max or min of x over `axes` (default: all)."""
        self._own(x, "prim.reduce")
        axes = list(range(x.ndim)) if axes is None else self._arg("prim.reduce", "axes", axes, "i64s")
        return self._emit("reduce", [x], {"kind": self._arg("prim.reduce", "kind", kind, "str"), "axes": axes,
                                          "keepdims": self._arg("prim.reduce", "keepdims", keepdims, "bool")})

    def take(self, x, indices, axis=0):
        """x's entries `indices` (in [-size, size)) along axis, in order, as numpy.take: each run that reads x
        repeated k times with a step (a nearest resize, a strided or repeated run; `_pattern`) is a slice of
        a broadcast multiply, and the runs are concatenated."""
        self._own(x, "take")
        axis = self._arg("take", "axis", axis, "i64")
        indices = self._arg("take", "indices", indices, "i64s")
        if not -x.ndim <= axis < x.ndim or not indices or \
                not all(-x.shape[axis] <= i < x.shape[axis] for i in indices):
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: take (operand {spec.fmt_shape(x.shape)}): axis {axis} must "
                                f"be in [{-x.ndim}, {x.ndim}) and the indices a non-empty list in range, got {indices}")
        axis %= x.ndim
        size = x.shape[axis]
        idx = np.asarray(indices, np.int64) % size
        if np.array_equal(idx, np.arange(size)):
            return x
        parts, i = [], 0
        while i < len(idx):
            n, k, b, a = _pattern(idx[i:])
            lo, hi = int(idx[i]), int(idx[i + n - 1]) + 1     # the span of x that the run reads
            part = x if (lo, hi) == (0, size) else self.slice(x, [lo], [hi], axes=[axis])
            part = self._repeat(part, [k if d == axis else 1 for d in range(x.ndim)])
            if (a - lo * k, b, n) != (0, 1, part.shape[axis]):
                part = self.slice(part, [a - lo * k], [a - lo * k + b * (n - 1) + 1], axes=[axis], steps=[b])
            parts.append(part)
            i += n
        return self.concat(parts, axis)

    def resize_nearest(self, x, scales=None, size=None):
        """Nearest-neighbour resize as torch.nn.functional.interpolate(mode="nearest") of a 4-d tensor (aten's
        upsample_nearest2d), on every axis: `size` outputs (default floor(in * scale)), output i reading input
        `nearest_sources(in, out, scale)` (`take_axes`); a scale may be None where size is given (then in / out)."""
        self._own(x, "resize_nearest")
        what = f"resize_nearest (operand {spec.fmt_shape(x.shape)})"
        size = None if size is None else self._arg(what, "size", size, "i64s")
        scales = [None] * x.ndim if scales is None else \
            list(scales) if isinstance(scales, (list, tuple, np.ndarray)) else scales
        given = size is not None and len(size) == x.ndim and min(size) > 0
        if not (isinstance(scales, list) and len(scales) == x.ndim and (size is None or given) and
                all(s is None and given or _is_number(s) and 0 < s < math.inf for s in scales)):
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: {what}: scales must be {x.ndim} positive numbers (None "
                                f"where size is given) or size {x.ndim} positive integers, got scales {scales}, "
                                f"size {size}")
        out = size or [math.floor(d * s) for d, s in zip(x.shape, scales)]   # as aten: in double
        if min(out) < 1:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: {what}: the result would be empty ({spec.fmt_shape(out)}); "
                                f"every dimension must be at least 1")
        return self.take_axes(x, [nearest_sources(d, o, s) for d, o, s in zip(x.shape, out, scales)])

    def put(self, x, positions, values, accumulate=False):
        """x with values written at its flat positions `positions` (constant integers, values broadcast to
        their shape), or added there with accumulate: torch's index_put and ONNX ScatterND with constant
        indices. Positions that repeat add up through a matmul by a constant 0/1 matrix (accumulate), else
        one prim.gather of the values to x's positions and a where (the last value wins a repeated
        position, as numpy's)."""
        self._own(x, "put")
        flat = np.asarray(positions, np.int64).reshape(-1)
        count, size = flat.size, spec.numel(x.shape)
        if not count:
            return x
        if tuple(values.shape) != tuple(np.shape(positions)):
            values = self.broadcast_to(values, list(np.shape(positions)))
        values = self.reshape(values, [count])
        if accumulate and np.unique(flat).size < count:        # repeated positions add up
            if count * size > PUT_SUMS:
                loc = _user_location()
                raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: put with accumulate: {count} values onto {size} "
                                    f"positions, some repeated: the {count} x {size} sums are past what is "
                                    f"supported ({PUT_SUMS})")
            sums = np.zeros((count, size), np.float32)
            sums[np.arange(count), flat] = 1.0
            added = self.matmul(self.reshape(values, [1, count]), self.param(f"put_sums{len(self.nodes)}", sums))
            return self.add(x, self.reshape(added, list(x.shape)))
        source = np.zeros(size, np.int64)
        source[flat] = np.arange(count)                        # the last value wins a repeated position
        picked = self.reshape(self.gather(values, source, 0), list(x.shape))
        mask = np.zeros(size, bool)
        mask[flat] = True
        mask = mask.reshape(x.shape)
        return self.add(x, self.where(mask, picked, 0.0)) if accumulate else self.where(mask, picked, x)

    def interpolate(self, x, sources, mode="linear", cubic_a=-0.75, exclude_outside=False):
        """x resampled along every axis d at the source coordinates sources[d] (None: the axis as it is), as
        torch's linear/bilinear/trilinear/bicubic upsampling and ONNX Resize modes linear and cubic compute
        it: out[j] = sum over taps t of x[index_t[j]] * weight_t[j] (`interpolation_taps`: 2 taps for linear,
        4 for cubic, indices clamped to the axis, which repeats the edge). Each tap is a prim.gather of
        constant indices along the axis times a constant weight broadcast along it; a tap whose weights are
        all 0 is left out, so whole coordinates read one gather."""
        self._own(x, "interpolate")
        if not isinstance(sources, (list, tuple)) or len(sources) != x.ndim or mode not in ("linear", "cubic"):
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: interpolate (operand {spec.fmt_shape(x.shape)}): "
                                f"expected mode 'linear' or 'cubic' and {x.ndim} arrays of source coordinates "
                                f"(None: an axis whole), got mode {mode!r}, {sources!r}")
        y = x
        for axis, src in enumerate(sources):
            if src is None:
                continue
            shape = [1] * x.ndim
            terms = []
            for index, weight in interpolation_taps(src, x.shape[axis], mode, cubic_a, exclude_outside):
                if not weight.any():
                    continue
                read = y if np.array_equal(index, np.arange(y.shape[axis])) else self.gather(y, index, axis)
                if not np.all(weight == 1):
                    shape[axis] = len(weight)
                    read = self.mul(read, self.param(f"interp_w{len(self.nodes)}", weight.reshape(shape), x.dtype))
                terms.append(read)
            y = functools.reduce(self.add, terms)
        return y

    def take_axes(self, x, indices):
        """`take` on every axis d with indices[d] (None: the axis whole); the axes whose indices repeat each
        element k times (i // k) are one broadcast multiply together."""
        self._own(x, "take_axes")
        if not isinstance(indices, (list, tuple)) or len(indices) != x.ndim:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: take_axes (operand {spec.fmt_shape(x.shape)}): expected "
                                f"{x.ndim} lists of indices (None: an axis whole), got {indices!r}")
        reps = []
        for d, idx in zip(x.shape, indices):
            k = 0 if idx is None else len(idx) // d
            reps.append(k if k > 1 and len(idx) == k * d and np.array_equal(idx, np.arange(k * d) // k) else 1)
        y = self._repeat(x, reps)
        for axis, (idx, r) in enumerate(zip(indices, reps)):
            if idx is not None and r == 1:
                y = self.take(y, idx, axis)
        return y

    def _repeat(self, x, reps):
        """x with each element repeated reps[d] times along each axis d, out[i] = x[i // reps]: x with a unit
        axis after each, times a broadcast tensor of ones (exact), viewed as the result."""
        if all(r == 1 for r in reps):
            return x
        split = [d for size in x.shape for d in (size, 1)]
        ones = self.param(f"resize_ones{len(self.nodes)}", np.ones([d for r in reps for d in (1, r)]), x.dtype)
        return self.reshape(self.mul(self.reshape(x, split), ones), [d * r for d, r in zip(x.shape, reps)])

    # ------------------------------------------------------------------ training: the backward ops (issue 31)
    def _conv_attrs(self, stride, padding, dilation, groups, layout, filter_layout):
        layout = layout or self.layout
        return {"strides": list(_pair(stride)), "padding": _padding4(padding), "dilations": list(_pair(dilation)),
                "groups": groups, "layout": layout, "filter_layout": filter_layout or self._filter_layout(layout)}

    def conv2d_backward_data(self, grad, w, input_size, stride=1, padding=0, dilation=1, groups=1, layout=None,
                             filter_layout=None):
        """The gradient of conv2d's input from grad (the gradient of its output) and the filter w, the forward's
        arguments given again; input_size = the forward input's (H, W) (a stride > 1 leaves it open)."""
        return self._emit("conv2d_backward_data", [grad, w], {
            **self._conv_attrs(stride, padding, dilation, groups, layout, filter_layout),
            "input_size": self._arg("prim.conv2d_backward_data", "input_size", list(_pair(input_size)), "i64s")})

    def conv_transpose(self, x, w, bias=None, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), output_padding=(0, 0),
                       groups=1):
        """A 1-d or 2-d transposed convolution (torch's ConvTranspose1d/2d, ONNX ConvTranspose) of x [N, C, (H,)
        W] by w [C, K / groups, (kh,) kw] as what it is, the input gradient of the convolution it transposes
        (prim.conv2d_backward_data and its solvers, not a convolution over zeros inserted between the inputs):
        w is that convolution's KCRS filter, the result's size that convolution's input size. pads: begins then
        ends per spatial axis (ONNX's order); a negative one (an output beyond the natural size) is zeros
        around the result."""
        nd = x.ndim - 2
        if nd not in (1, 2) or w.ndim != x.ndim:
            loc = _user_location()
            raise OpenPrimError(f"{loc[0]}:{loc[1]}: error: conv_transpose: a 1-d or 2-d input and a filter of its "
                                f"rank, got {spec.fmt_shape(x.shape)} and {spec.fmt_shape(w.shape)}")
        stride, dilation, output_padding, pads = list(stride), list(dilation), list(output_padding), list(pads)
        if nd == 1:  # [N, C, L] as [N, C, L, 1] with a (k, 1) filter
            x, w = self.reshape(x, (*x.shape, 1)), self.reshape(w, (*w.shape, 1))
            stride, dilation, output_padding, pads = stride + [1], dilation + [1], output_padding + [0], \
                [pads[0], 0, pads[1], 0]
        inner = [max(p, 0) for p in pads]
        size = [stride[i] * (x.shape[2 + i] - 1) + output_padding[i] + dilation[i] * (w.shape[2 + i] - 1) + 1
                - inner[i] - inner[i + 2] for i in range(2)]
        y = self.conv2d_backward_data(x, w, size, stride=tuple(stride), padding=tuple(inner),
                                      dilation=tuple(dilation), groups=groups)
        if min(pads) < 0:
            y = self.pad(y, [0, 0, max(-pads[0], 0), max(-pads[1], 0), 0, 0, max(-pads[2], 0), max(-pads[3], 0)])
        if bias is not None:
            y = self.add(y, self.reshape(bias, (1, y.shape[1], 1, 1)))
        return self.reshape(y, y.shape[:3]) if nd == 1 else y

    def conv2d_backward_weights(self, x, grad, filter_size, stride=1, padding=0, dilation=1, groups=1, layout=None,
                                filter_layout=None):
        """The gradient of conv2d's filter from its input x and grad, in filter_layout; filter_size = (R, S)."""
        return self._emit("conv2d_backward_weights", [x, grad], {
            **self._conv_attrs(stride, padding, dilation, groups, layout, filter_layout),
            "filter_size": self._arg("prim.conv2d_backward_weights", "filter_size", list(_pair(filter_size)), "i64s")})

    def conv2d_backward(self, grad, x, w, stride=1, padding=0, dilation=1, groups=1, layout=None,
                        filter_layout=None, output_mask=(True, True, False)):
        """(grad_input, grad_filter, grad_bias) of y = conv2d(x, w, bias): the two backward ops, and the bias's
        gradient as the sum of grad over N, H, W. output_mask says which to make, as torch's convolution_backward
        (the graph launches every op it holds, used or not); the others are None."""
        self._own(w, "conv2d_backward")
        kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, layout=layout,
                  filter_layout=filter_layout)
        layout = layout or self.layout
        fl = filter_layout or self._filter_layout(layout)
        _, _, r, s = spec.filter_dims(fl, w.shape) if fl in spec.FILTER_LAYOUTS and w.ndim == 4 else (0, 0, 1, 1)
        size = x.shape[2:] if layout == "NCHW" else x.shape[1:3]
        gx = self.conv2d_backward_data(grad, w, size, **kw) if output_mask[0] else None
        gw = self.conv2d_backward_weights(x, grad, (r, s), **kw) if output_mask[1] else None
        gb = self.reduce(grad, "sum", [0, 2, 3] if layout == "NCHW" else [0, 1, 2]) if output_mask[2] else None
        return gx, gw, gb

    def batch_norm_training(self, x, scale, shift, eps=1e-5, layout=None):
        """Batch norm with the batch's statistics (mean and biased variance per channel over N, H, W), as
        torch's batch_norm(training=True) computes its output."""
        return self._emit("batch_norm_training", [x, scale, shift], {"epsilon": eps, "layout": layout or self.layout})

    def batch_norm_statistics(self, x, eps=1e-5, layout=None):
        """(mean, inv_std) per channel of the batch, [C] each, inv_std = 1 / sqrt(biased var + eps): what
        batch_norm_backward takes (torch's save_mean and save_invstd). One op makes both, as one [2, C] tensor:
        a prim op has one result, and the two come out of the same passes over x."""
        return self._rows(self._emit("batch_norm_statistics", [x], {"epsilon": eps, "layout": layout or self.layout}))

    def _rows(self, t):
        """The two rows of a [2, C] tensor, [C] each."""
        return tuple(self.reshape(self.slice(t, [i], [i + 1]), [t.shape[1]]) for i in (0, 1))

    def batch_norm_backward(self, grad, x, scale, mean, inv_std, layout=None, output_mask=(True, True, True)):
        """(grad_input, grad_scale, grad_shift) of batch_norm_training from the saved statistics
        (batch_norm_statistics): grad_shift = sum(grad), grad_scale = sum(grad * (x - mean)) * inv_std over N,
        H, W, both sums from one batch_norm_backward_sums (one pass over grad and x), which grad_input then
        reads instead of summing again; output_mask says which to make (torch's native_batch_norm_backward's),
        the others are None."""
        layout = layout or self.layout
        if not (output_mask[1] or output_mask[2]):
            gx = self._emit("batch_norm_backward", [grad, x, scale, mean, inv_std], {"layout": layout}) \
                if output_mask[0] else None
            return gx, None, None
        sums = self._emit("batch_norm_backward_sums", [grad, x, mean], {"layout": layout})
        gx = self._emit("batch_norm_backward", [grad, x, scale, mean, inv_std, sums], {"layout": layout}) \
            if output_mask[0] else None
        gshift, total = self._rows(sums)
        return gx, total * inv_std if output_mask[1] else None, gshift if output_mask[2] else None

    def layer_norm_backward(self, grad, x, scale=None, eps=1e-5, normalized_ndim=1, output_mask=(True, True, True)):
        """(grad_input, grad_scale, grad_shift) of layer_norm(x, scale, shift) over the trailing normalized_ndim
        dims; grad_scale = sum(grad * xhat), grad_shift = sum(grad) over the leading dims, as reduces. output_mask
        says which to make (torch's native_layer_norm_backward's); the others are None, grad_scale also without a
        scale."""
        gx = self._emit("layer_norm_backward", [grad, x, scale], {"epsilon": eps, "normalized_ndim": normalized_ndim}) \
            if output_mask[0] else None
        lead = list(range(x.ndim - normalized_ndim))

        def total(t):
            return self.reduce(t, "sum", lead) if lead else t
        gscale = total(grad * self.layer_norm(x, eps=eps, normalized_ndim=normalized_ndim)) \
            if output_mask[1] and scale is not None else None
        return gx, gscale, total(grad) if output_mask[2] else None

    _ACTIVATION_DEFAULTS = {"relu6": ("clamp", (0.0, 6.0)), "leaky_relu": ("leaky_relu", (0.01,)),
                            "elu": ("elu", (1.0,)), "hardsigmoid": ("hardsigmoid", (1 / 6, 0.5))}

    def activation_backward(self, grad, x, activation, params=None):
        """grad * act'(x) of an activation by its epilogue name (base/ops.ACTIVATIONS: relu, clamp, gelu (erf),
        gelu_tanh, silu, sigmoid, tanh, hardswish, ...; "relu6" is clamp(0, 6)); params default to torch's."""
        name, default = self._ACTIVATION_DEFAULTS.get(activation, (activation, ()))
        params = default if params is None else params
        return self._emit("activation_backward", [grad, x], {
            "activation": name,
            "activation_params": self._arg("prim.activation_backward", "activation_params", params, "f64s")})

    def max_pool2d_backward(self, grad, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False, layout=None):
        """The gradient of max_pool2d's input x (the forward's arguments again): each window's grad goes to the
        window's first maximum, as PyTorch's."""
        return self._emit("max_pool2d_backward", [grad, x], {
            "kernel": list(_pair(kernel)), "strides": list(_pair(stride or kernel)), "padding": _padding4(padding),
            "dilations": list(_pair(dilation)),
            "ceil_mode": self._arg("prim.max_pool2d_backward", "ceil_mode", ceil_mode, "bool"),
            "layout": layout or self.layout})

    def avg_pool2d_backward(self, grad, input_size, kernel, stride=None, padding=0, ceil_mode=False,
                            count_include_pad=True, layout=None):
        """The gradient of avg_pool2d's input; input_size = its (H, W)."""
        what = "prim.avg_pool2d_backward"
        return self._emit("avg_pool2d_backward", [grad], {
            "kernel": list(_pair(kernel)), "strides": list(_pair(stride or kernel)), "padding": _padding4(padding),
            "ceil_mode": self._arg(what, "ceil_mode", ceil_mode, "bool"),
            "count_include_pad": self._arg(what, "count_include_pad", count_include_pad, "bool"),
            "layout": layout or self.layout,
            "input_size": self._arg(what, "input_size", list(_pair(input_size)), "i64s")})

    def softmax_backward(self, grad, y, axis=-1):
        """The gradient of softmax's input from its output y."""
        return self._emit("softmax_backward", [grad, y], {"axis": axis})

    def log_softmax_backward(self, grad, y, axis=-1):
        """The gradient of log_softmax's input from its output y."""
        return self._emit("log_softmax_backward", [grad, y], {"axis": axis})

    def cross_entropy(self, logits, targets):
        """torch's cross_entropy(logits [N, C], targets [N] class indices) with reduction="mean": a [1] tensor.
        Targets known only at run time are checked after each run, as gather's indices (the kernel reads the
        nearest class meanwhile)."""
        self._own(logits, "prim.cross_entropy")
        t = self._indices(targets, "prim.cross_entropy")
        out = self._emit("cross_entropy", [logits, t], {})
        self._bounds_check(t, logits.shape[1], f"prim.cross_entropy ({logits.shape[1]} classes)")
        return out

    def cross_entropy_backward(self, logits, targets, grad=None):
        """The gradient of cross_entropy's logits, (softmax(logits) - onehot(targets)) / N, times grad ([1], the
        loss's gradient) when given."""
        self._own(logits, "prim.cross_entropy_backward")
        t = self._indices(targets, "prim.cross_entropy_backward")
        out = self._emit("cross_entropy_backward", [logits, t, grad], {})
        self._bounds_check(t, logits.shape[1], f"prim.cross_entropy_backward ({logits.shape[1]} classes)")
        return out

    def matmul_backward(self, grad, a, b, transpose_rhs=False, output_mask=(True, True)):
        """(grad_a, grad_b) of y = a @ b (b^T with transpose_rhs) from existing ops: grad_a = grad @ b^T, grad_b =
        a^T @ grad (grad^T @ a transposed); a 2-d b shared by a batched a gets the sum over the batch. output_mask
        says which to make; the other is None."""
        for t in (grad, a, b):
            self._own(t, "matmul_backward")
        ga = self.matmul(grad, b, transpose_rhs=not transpose_rhs) if output_mask[0] else None
        if not output_mask[1]:
            return ga, None
        if b.ndim == 2 and a.ndim > 2:      # one b for the whole batch: the rows of every batch are one GEMM
            a, grad = self.reshape(a, [-1, a.shape[-1]]), self.reshape(grad, [-1, grad.shape[-1]])
        swap = list(range(a.ndim - 2)) + [a.ndim - 1, a.ndim - 2]
        gb = self.matmul(self.transpose(grad, swap), a) if transpose_rhs else self.matmul(self.transpose(a, swap), grad)
        return ga, gb


def nearest_sources(size: int, out: int, scale: float | None = None) -> np.ndarray:
    """The input index each of `out` outputs reads on an axis of `size` in torch's nearest resize (aten
    UpSample.h nearest_idx): i where out == size, i // 2 where out == 2 * size, else min(floor(i * s), size - 1)
    in float32 with s = float32(1 / scale), or float32(size) / out without a scale."""
    i = np.arange(out)
    if out in (size, 2 * size):
        return i * size // out
    s = np.float32(1.0 / scale) if scale else np.float32(size) / np.float32(out)
    return np.minimum(np.floor(i.astype(np.float32) * s), size - 1).astype(np.int64)


def linear_sources(size: int, out: int, scale: float | None = None, align_corners: bool = False) -> np.ndarray:
    """The source coordinate each of `out` outputs reads on an axis of `size` in torch's linear resizes
    (aten UpSample.h area_pixel_compute_source_index): i * (size - 1) / (out - 1) with align_corners, else
    (i + 0.5) * s - 0.5 with s = 1 / scale (or size / out without one), at least 0. In float64; torch's
    float32 arithmetic differs by an ulp of the coordinate."""
    i = np.arange(out, dtype=np.float64)
    if align_corners:
        return i * ((size - 1) / (out - 1) if out > 1 else 0.0)
    s = 1.0 / scale if scale else size / out
    return np.maximum((i + 0.5) * s - 0.5, 0.0)


def interpolation_taps(src, size: int, mode: str, cubic_a: float = -0.75, exclude_outside: bool = False):
    """[(indices, weights)] per tap of resampling an axis of `size` at the source coordinates src: linear,
    the coordinate clamped to [0, size - 1], indices floor(c) and floor(c) + 1, weights 1 - t and t (t the
    fraction); cubic (Keys, coefficient cubic_a: torch's and ONNX's -0.75), indices floor(c) - 1 ... + 2
    and their four weights, indices beyond the axis clamped to it (the edge repeated), or with
    exclude_outside their weights 0 and the rest renormalized (ONNX). Indices int64, weights float64."""
    c = np.asarray(src, np.float64).reshape(-1)
    if mode == "linear":
        c = np.clip(c, 0, size - 1)
        i0 = np.floor(c).astype(np.int64)
        t = c - i0
        return [(i0, 1 - t), (np.minimum(i0 + 1, size - 1), t)]
    i0 = np.floor(c).astype(np.int64)
    t, a = c - i0, cubic_a
    d = [1 + t, t, 1 - t, 2 - t]             # distances to the four neighbours
    near = [((a + 2) * u - (a + 3)) * u * u + 1 for u in d[1:3]]
    far = [((a * u - 5 * a) * u + 8 * a) * u - 4 * a for u in (d[0], d[3])]
    weights = np.stack([far[0], near[0], near[1], far[1]])
    index = i0 + np.arange(-1, 3)[:, None]
    if exclude_outside:
        weights = np.where((index >= 0) & (index < size), weights, 0.0)
        weights = weights / weights.sum(0, keepdims=True)
    return list(zip(np.clip(index, 0, size - 1), weights))


PUT_SUMS = 1 << 24    # entries of the 0/1 matrix that adds repeated positions (Graph.put with accumulate)

_MAX_REPEAT, _MAX_STEP, _MAX_RUN = 64, 16, 1024


def _pattern(idx: np.ndarray) -> tuple[int, int, int, int]:
    """(n, k, b, a): the longest prefix of idx (n <= _MAX_RUN) with idx[i] == (a + b * i) // k, that is x
    repeated k times and read from a with step b; 1 <= b <= _MAX_STEP (the repeated tensor at most that many
    times the run) and k <= _MAX_REPEAT or the length of idx's leading run of one index."""
    if len(idx) == 1 or idx[1] < idx[0]:
        return 1, 1, 1, int(idx[0])
    run = int(np.argmax(idx != idx[0])) or len(idx)
    ks = np.union1d(np.arange(1, _MAX_REPEAT + 1), [run])[:, None, None]
    bs = np.arange(1, _MAX_STEP + 1)[None, :, None]
    width = 64
    while True:
        part = idx[:width]
        i = np.arange(len(part))
        lo = np.maximum.accumulate(part * ks - bs * i, axis=-1)       # a >= idx[i] * k - b * i
        hi = np.minimum.accumulate((part + 1) * ks - 1 - bs * i, axis=-1)
        fits = (lo <= hi).sum(axis=-1)
        kb = np.unravel_index(np.argmax(fits), fits.shape)   # the longest, then the fewest repeats and step
        n = int(fits[kb])
        if n < len(part) or len(part) == len(idx) or width >= _MAX_RUN:
            return n, int(ks[kb[0], 0, 0]), int(bs[0, kb[1], 0]), int(lo[kb][n - 1])
        width *= 4

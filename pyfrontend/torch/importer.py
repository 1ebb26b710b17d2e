"""PyTorch importer: a `torch.export.ExportedProgram` (core ATen ops) becomes an OpenPrim Graph.

    from openprim.pyfrontend.torch import import_exported, import_file
    g, names = import_exported(torch.export.export(model.eval(), (x,)))
    g = import_file("model.pt2")                   # a program saved with torch.export.save

Parameters, buffers and lifted constants become `g.param` (constants: BN folds into the conv);
user inputs become `g.input` with the static shapes the export recorded. Every op computed from constants
only (the `permute` of a linear weight, Swin's relative-position index and shifted-window mask, `arange`
position ids) is evaluated with torch at import time, mapped or not (pyfrontend/torch/folding.py). An
op the importer does not map and cannot fold raises OpenPrimError naming every such op of the graph.

Precision. A Graph has one dtype: programs of `.half()` and `.bfloat16()` modules import as f16 and
bf16 Graphs, fp32 ones as f32 (`program_dtype`: the type of most elements of the floating parameters,
buffers and constants, or, without any, of the first floating input; a mix imports in that dominant
dtype, and casts between float32, float16 and bfloat16 are identities). Float64 parameters, buffers,
constants, inputs and casts are an error: OpenPrim computes in float32 at most. Integer and bool tensors
(token ids, attention masks, position ids) keep their types: int64 and int32 inputs and constants are i64
and i32, bool ones bool (other integer types i64); every node's result takes the dtype its export recorded
(`_Importer.dtype_of`), so comparisons, casts and torch's promotions come out as torch computes them. The
ONNX importer decides the float policy alike: pyfrontend/importers/common.py.

This module only builds a Graph (plain data): it imports neither the compiler (`openprim.compiler`)
nor MLIR. What compiles an imported model (`compile_module`, the torch.compile backend
`openprim_backend`) is in the driver layer, `openprim.torch_backend`.
"""
from __future__ import annotations

import logging
import math
import operator
import warnings

import numpy as np
from openprim.base.dtypes import FINITE_MAX
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.attention import match_attention, merge_batched_matmuls
from openprim.pyfrontend.graph import Graph, Tensor, linear_sources
from openprim.base.dtypes import FLOATS
from openprim.pyfrontend.importers.common import GRAPH_DTYPES, dominant_dtype, float64_message, require
from openprim.pyfrontend.torch.folding import const_tensors, fold_node, foldable_nodes

torch = require("torch", "the torch importer")

# What to change in a float64 program.
_FLOAT64_FIX = "call .float() (or .half(), .bfloat16()) on the module and its inputs"


def _graph_dtype(dtype, what: str) -> str | None:
    """The Graph dtype of a torch dtype: float32, float16, bfloat16; float64 an error naming `what`; None
    for any other."""
    name = str(dtype).removeprefix("torch.")
    if name == "float64":
        raise OpenPrimError(float64_message(what, _FLOAT64_FIX))
    return GRAPH_DTYPES.get(name)


def _integer_dtype(dtype) -> str | None:
    """The Graph dtype of a torch integer or bool dtype (int32 -> i32, bool, any other integer i64), else None."""
    if dtype == torch.bool:
        return "bool"
    if dtype.is_floating_point or dtype.is_complex:
        return None
    return "i32" if dtype == torch.int32 else "i64"


def _numpy_dtype(value: np.ndarray, float_dtype: str) -> str:
    """The Graph dtype of a constant read as numpy (floats: the Graph's one float dtype)."""
    kind = value.dtype.kind
    return "bool" if kind == "b" else "i32" if value.dtype == np.int32 else "i64" if kind in "iu" else float_dtype


def program_dtype(ep) -> str:
    """The Graph dtype of an ExportedProgram (importers/common.py `dominant_dtype`): of its floating
    parameters, buffers and constants, or, without any, of its first floating input. A float64 one is an
    error that names it."""
    counts = {}
    tensors = list(ep.state_dict.items()) + list((getattr(ep, "constants", {}) or {}).items())
    for name, t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
            dtype = _graph_dtype(t.dtype, f"torch import: '{name}'")
            if dtype:
                counts[dtype] = counts.get(dtype, 0) + t.numel()
    vals = [(n.target, n.meta.get("val")) for n in ep.graph_module.graph.nodes if n.op == "placeholder"]
    first = next((_graph_dtype(v.dtype, f"torch import: input '{name}'") for name, v in vals
                  if getattr(v, "dtype", None) is not None and v.dtype.is_floating_point), None)
    return dominant_dtype(counts, first)


class _Const:
    """A value known at import time (a weight, or an op on weights only)."""
    __slots__ = ("name", "value")

    def __init__(self, value, name):
        value = np.asarray(value)
        self.value = value.astype(np.float64, copy=False) if value.dtype.kind == "f" else value
        self.name = name


def _np(t):
    t = t.detach().cpu()
    if t.dtype.is_floating_point:
        return t.to(torch.float64).numpy()
    return t.numpy()


def _shape(node):
    val = node.meta.get("val")
    if val is None or not hasattr(val, "shape"):
        raise OpenPrimError(f"torch import: node '{node.name}' has no recorded tensor shape")
    try:
        return tuple(int(s) for s in val.shape)
    except (TypeError, ValueError):
        raise OpenPrimError(f"torch import: input '{node.name}' has a dynamic shape {tuple(val.shape)}; "
                            "OpenPrim needs static shapes") from None


def _norm_dims(dims, rank):
    return sorted(d % rank for d in dims)


class _Importer:
    def __init__(self, ep, constant_inputs=None):
        self.ep = ep
        self.g = Graph(layout="NCHW", dtype=program_dtype(ep))
        self.env = {}           # fx node -> Tensor | _Const | tuple (multi-output) | python value
        self.params = {}        # id(_Const) -> Tensor (materialized weights)
        self.input_names = []
        self.constant_inputs = constant_inputs or {}

    # ------------------------------------------------------------------ values
    def tensor(self, v) -> Tensor:
        """A graph Tensor for v (materializing a constant as a g.param once)."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, _Const):
            if v.value.size == 0:
                raise OpenPrimError(f"torch import: a zero-size tensor {list(v.value.shape)} ('{v.name}') is an "
                                    "operand here; OpenPrim takes empty tensors only as operands of a "
                                    "concatenation (which leaves them out)")
            hit = self.params.get(id(v))
            if hit is None:
                value = v.value.astype(np.float32) if v.value.dtype.kind == "f" else v.value
                t = self.g.param(v.name, value, _numpy_dtype(value, self.g.dtype))
                self.params[id(v)] = hit = (v, t)     # keeps v alive, so its id is not reused
            return hit[1]
        raise OpenPrimError(f"torch import: expected a tensor, got {type(v).__name__}")

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    # ------------------------------------------------------------------ driver
    def run(self):
        ep = self.ep
        sig = ep.graph_signature
        state = dict(ep.state_dict)
        consts = dict(getattr(ep, "constants", {}) or {})
        to_param = dict(sig.inputs_to_parameters)
        to_buffer = dict(sig.inputs_to_buffers)
        to_const = dict(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
        user_inputs = list(sig.user_inputs)
        graph = ep.graph_module.graph
        self._plan_folding(graph, const_tensors(ep, self.constant_inputs))

        for n in graph.nodes:
            if n.op == "placeholder":
                name = n.target
                if name in to_param or name in to_buffer or name in to_const:
                    key = to_param.get(name) or to_buffer.get(name) or to_const.get(name)
                    src = state.get(key)
                    if src is None:
                        src = consts.get(key)
                    if src is None:
                        raise OpenPrimError(f"torch import: no value for '{key}'")
                    self.env[n] = _Const(_np(src), _safe(key))
                elif name in user_inputs:
                    idx = user_inputs.index(name)
                    if idx in self.constant_inputs:
                        self.env[n] = _Const(_np(self.constant_inputs[idx]), _safe(name))
                    else:
                        self.env[n] = self.input_of(n, name, getattr(n.meta.get("val"), "dtype", torch.float32))
                        self.input_names.append(name)
                else:
                    raise OpenPrimError(f"torch import: placeholder '{name}' is not an input, "
                                        "parameter, buffer or constant")
            elif n.op in ("get_attr", "call_function"):
                self.env[n] = self.value_of(n, ep.graph_module)
            elif n.op == "output":
                outs = n.args[0]
                outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                n_user = len(sig.user_outputs)
                if len(outs) != n_user:
                    raise OpenPrimError("torch import: the program mutates buffers (training mode?); "
                                        "export the model in eval mode")
                results = []
                for o in outs:
                    v = self.env[o] if isinstance(o, torch.fx.Node) else o
                    t = self.tensor(v)
                    if t in self.g.inputs or t in results or self._is_param(t):   # an output must be an op's
                        t = self.g.mul(t, 1.0) if t.dtype in FLOATS else self.g.where(True, t, t)
                    results.append(t)
                self.g.output(*results)
                merge_batched_matmuls(self.g)   # aten.matmul's view + bmm + view as one 4-d matmul
                match_attention(self.g)         # matmul/softmax/matmul chains (Swin's windows) -> attention
            else:
                raise OpenPrimError(f"torch import: unsupported fx node kind '{n.op}' ({n.name})")
        return self.g, self.input_names

    def _plan_folding(self, graph, folded) -> None:
        """The nodes computed from constants (torch/folding.py) given `folded` (fx node -> value known at
        import); one error naming every op that is neither mapped nor foldable."""
        self.folded = folded
        self.foldable = foldable_nodes(graph, folded.__contains__)
        unsupported = sorted({str(n.target) for n in graph.nodes if n.op == "call_function"
                              and n not in self.foldable and _op_key(n.target) not in _HANDLERS})
        if unsupported:
            raise OpenPrimError("torch import: unsupported op(s): " + ", ".join(unsupported))

    def input_of(self, n, name: str, dtype) -> Tensor:
        """The Graph input for placeholder n of torch dtype `dtype` (floats in the Graph's float dtype)."""
        what = f"torch import: input '{name}'"
        graph_dtype = _graph_dtype(dtype, what) and self.g.dtype or _integer_dtype(dtype)
        if graph_dtype is None:
            raise OpenPrimError(f"{what} has element type {dtype}, which OpenPrim does not take")
        return self.g.input(_safe(name), _shape(n), graph_dtype)

    def value_of(self, n, module):
        """The value of a get_attr (of `module`) or call_function node: folded, or its handler's result in
        the dtype the program recorded."""
        if n.op == "get_attr":
            obj = module
            for part in n.target.split("."):
                obj = getattr(obj, part)
            return _Const(_np(obj), _safe(n.target))
        if n in self.foldable:
            return self._fold(n)
        fn = _HANDLERS[_op_key(n.target)]
        args = [self.arg(a) for a in n.args]
        kwargs = {k: self.arg(v) for k, v in n.kwargs.items()}
        try:
            return self._recorded_dtype(n, fn(self, n, *args, **kwargs))
        except OpenPrimError as e:
            raise OpenPrimError(f"torch import: {n.target} ('{n.name}'): {e}") from None

    def dtype_of(self, n) -> str | None:
        """The Graph dtype of fx node n's result as the export recorded it (floats: the Graph's one)."""
        dtype = getattr(n.meta.get("val"), "dtype", None)
        if dtype is None:
            return None
        return self.g.dtype if dtype.is_floating_point else _integer_dtype(dtype)

    def _recorded_dtype(self, n, value):
        """A handler's Tensor result in the dtype the export recorded for n (a comparison's bool, a cast, the
        promotion of integer and float operands); other results as they are."""
        want = self.dtype_of(n)
        if isinstance(value, Tensor) and want is not None and value.dtype != want:
            return self.g.cast(value, want)
        return value

    def _is_param(self, t):
        return any(p is t for _, p in self.params.values())

    def _fold(self, n):
        """A node computed from constants only (torch/folding.py), evaluated with torch: its value as
        _Consts (named after its first constant input, as the numpy folds of the handlers do)."""
        try:
            val = fold_node(n, self.folded)
        except Exception as e:  # noqa: BLE001 - torch's own error, in one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise OpenPrimError(f"torch import: {n.target} ('{n.name}'): cannot fold constant node: "
                                f"{type(e).__name__}: {first}") from None
        self.folded[n] = val
        src = next((self.env[i] for i in n.all_input_nodes if isinstance(self.env.get(i), _Const)), None)
        name = src.name if src is not None else _safe(n.name)

        def conv(v):
            if isinstance(v, torch.Tensor):
                if v.ndim and 0 in v.stride() and v.numel():   # a broadcast view (expand): kept one (h_bmm)
                    base = v[tuple(slice(0, 1) if st == 0 else slice(None) for st in v.stride())]
                    return _Const(np.broadcast_to(_np(base), tuple(v.shape)), name)
                return _Const(_np(v), name)
            if isinstance(v, (list, tuple)):
                return type(v)(conv(x) for x in v)
            return v
        return conv(val)


def _safe(name):
    return "".join(c if c.isalnum() or c == "_" else "_" for c in str(name)) or "v"


def _op_key(target):
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "name", None)
    if callable(name):            # OpOverload.name() -> 'aten::add.Tensor'
        full = name()                      # other namespaces (prims::, quantized::) are not mapped
        ns, _, rest = full.partition("::")
        return rest.split(".")[0] if ns == "aten" else full
    if target in _PY_OPS:
        return _PY_OPS[target]
    return str(target)


_PY_OPS = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div"}


# ---------------------------------------------------------------------------- handlers
def _ints(v, n=2):
    if v is None:
        return None
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def _pad4(p):
    p = _ints(p) or [0, 0]
    return (p[0], p[1], p[0], p[1])


def h_convolution(im, n, x, w, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                  transposed=False, output_padding=(0, 0), groups=1):
    if transposed:   # 1-d and 2-d, as the input gradient of the convolution it transposes
        nd = im.tensor(x).ndim - 2
        padding = list(_ints(padding, nd))
        return im.g.conv_transpose(im.tensor(x), im.tensor(w), None if bias is None else im.tensor(bias),
                                   _ints(stride, nd), padding + padding, _ints(dilation, nd),
                                   _ints(output_padding, nd), int(groups))
    if isinstance(padding, str):
        raise OpenPrimError(f"padding='{padding}' is not supported; give explicit padding")
    if im.tensor(x).ndim == 3:   # 1-d (ConvBERT, SqueezeBERT): [N, C, L] as [N, C, L, 1] with a (k, 1) filter
        x3 = im.tensor(x)
        w4 = _Const(w.value[..., None], w.name) if isinstance(w, _Const) else \
            im.g.reshape(im.tensor(w), (*im.tensor(w).shape, 1))
        y = im.g.conv2d(im.g.reshape(x3, (*x3.shape, 1)), im.tensor(w4), None if bias is None else im.tensor(bias),
                        stride=(_ints(stride, 1)[0], 1), padding=[_ints(padding, 1)[0], 0, _ints(padding, 1)[0], 0],
                        dilation=(_ints(dilation, 1)[0], 1), groups=int(groups))
        return im.g.reshape(y, y.shape[:3])
    if im.tensor(x).ndim != 4:
        raise OpenPrimError(f"only 1-d and 2-d convolution (3-d, 4-d input) is supported, got rank {im.tensor(x).ndim}")
    return im.g.conv2d(im.tensor(x), im.tensor(w), None if bias is None else im.tensor(bias),
                       stride=tuple(_ints(stride)), padding=_pad4(padding), dilation=tuple(_ints(dilation)),
                       groups=int(groups))


def h_conv2d(im, n, x, w, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    return h_convolution(im, n, x, w, bias, stride, padding, dilation, False, (0, 0), groups)


def _bn(im, x, w, b, mean, var, eps):
    """prim.batch_norm is NCHW: an [N, C] or [N, C, L] input (BatchNorm1d) is viewed as [N, C, L, 1] and back."""
    x = im.tensor(x)
    c = x.shape[1] if x.ndim >= 2 else 0
    if not 2 <= x.ndim <= 4:
        raise OpenPrimError(f"batch_norm of a {x.ndim}-d input {list(x.shape)}: only 2-d, 3-d and 4-d are supported")
    if w is None:
        w = _Const(np.ones(c), "bn_scale")
    if b is None:
        b = _Const(np.zeros(c), "bn_shift")
    x4 = x if x.ndim == 4 else im.g.reshape(x, (*x.shape, *[1] * (4 - x.ndim)))
    y = im.g.batch_norm(x4, im.tensor(w), im.tensor(b), im.tensor(mean), im.tensor(var), float(eps))
    return y if x.ndim == 4 else im.g.reshape(y, x.shape)


def _batch_statistics(im, x, w, b, eps):
    """Batch norm with the batch's own statistics (training-mode BN, instance norm through its [1, N*C, ...]
    view, NFNet's weight standardization when it is not folded): per channel (dim 1), mean and biased variance
    over every other dim, in the Graph's ops (two reductions and one elementwise pass)."""
    x = im.tensor(x)
    if x.ndim < 2:
        raise OpenPrimError(f"batch_norm with batch statistics of a {x.ndim}-d input: expected [N, C, ...]")
    axes = [0, *range(2, x.ndim)]
    mean = im.g.reduce(x, "mean", axes, keepdims=True)
    d = im.g.sub(x, mean)
    var = im.g.reduce(im.g.mul(d, d), "mean", axes, keepdims=True)
    y = im.g.div(d, im.g.sqrt(im.g.add(var, float(eps))))
    per_channel = (x.shape[1], *[1] * (x.ndim - 2))
    if w is not None:
        y = im.g.mul(y, im.g.reshape(im.tensor(w), per_channel))
    if b is not None:
        y = im.g.add(y, im.g.reshape(im.tensor(b), per_channel))
    return y


def h_native_bn_legit(im, n, x, w, b, *rest):
    """aten._native_batch_norm_legit: .no_stats (training, momentum, eps) and .default with running statistics
    (mean, var, training, momentum, eps). Training uses the batch's statistics (the running ones are not
    updated: an inference artifact keeps none); otherwise the running statistics."""
    if len(rest) == 3:
        return (_batch_statistics(im, x, w, b, rest[2]), None, None)
    mean, var, training, _, eps = rest
    return (_batch_statistics(im, x, w, b, eps) if training else _bn(im, x, w, b, mean, var, eps), None, None)


def h_native_bn_no_training(im, n, x, w, b, mean, var, momentum, eps):
    return (_bn(im, x, w, b, mean, var, eps), None, None)


def h_native_batch_norm(im, n, x, w, b, mean, var, training, momentum, eps):
    if training:
        raise OpenPrimError("batch_norm in training mode; call model.eval() before export")
    return (_bn(im, x, w, b, mean, var, eps), None, None)


def h_batch_norm(im, n, x, w, b, mean, var, training, momentum, eps, cudnn_enabled=True):
    if training:
        raise OpenPrimError("batch_norm in training mode; call model.eval() before export")
    return _bn(im, x, w, b, mean, var, eps)


def h_layer_norm(im, n, x, shape, w=None, b=None, eps=1e-5, cudnn_enable=True):
    x = im.tensor(x)
    return im.g.layer_norm(x, None if w is None else im.tensor(w), None if b is None else im.tensor(b),
                           float(eps), len(shape))


def h_native_layer_norm(im, n, x, shape, w, b, eps):
    return (h_layer_norm(im, n, x, shape, w, b, eps), None, None)


def h_rms_norm(im, n, x, shape, w=None, eps=None):
    """aten.rms_norm (nn.RMSNorm, F.rms_norm); eps None is the input dtype's machine epsilon, as torch's."""
    if eps is None:
        eps = torch.finfo(n.args[0].meta["val"].dtype).eps
    return im.g.rms_norm(im.tensor(x), None if w is None else im.tensor(w), float(eps), len(shape))


def _gn(im, x, groups, w, b, eps):
    """prim.group_norm of a 4-d map; another rank >= 2 ([N, C, L] of a 1-d convolution, [N, C, D, H, W]) as the
    map [N, C, prod(spatial), 1]: the statistics of a group are over its channels and every position alike."""
    x = im.tensor(x)
    if x.ndim < 2:
        raise OpenPrimError(f"group_norm needs an input [N, C, ...] of rank >= 2, got rank {x.ndim}")
    c = x.shape[1]
    w = im.tensor(w if w is not None else _Const(np.ones(c), "gn_scale"))
    b = im.tensor(b if b is not None else _Const(np.zeros(c), "gn_shift"))
    if x.ndim == 4:
        return im.g.group_norm(x, int(groups), w, b, float(eps))
    flat = im.g.reshape(x, [x.shape[0], c, math.prod(x.shape[2:]), 1])
    return im.g.reshape(im.g.group_norm(flat, int(groups), w, b, float(eps)), list(x.shape))


def h_group_norm(im, n, x, groups, w=None, b=None, eps=1e-5, cudnn_enabled=True):
    return _gn(im, x, groups, w, b, eps)


def h_native_group_norm(im, n, x, w, b, N, C, HxW, groups, eps):
    return (_gn(im, x, groups, w, b, eps), None, None)


def _unary(name):
    def h(im, n, x, *a, **k):
        return getattr(im.g, name)(im.tensor(x))
    return h


def h_leaky_relu(im, n, x, alpha=0.01):
    return im.g.leaky_relu(im.tensor(x), float(alpha))


def h_hardtanh(im, n, x, lo=-1.0, hi=1.0):
    return im.g.clamp(im.tensor(x), float(lo), float(hi))


def h_clamp(im, n, x, lo=None, hi=None):
    """clamp with number bounds (prim.clamp), or with tensor bounds or one side only (maximum, minimum:
    T5's f16 clamp by a value computed at run time)."""
    x = im.tensor(x)
    if all(isinstance(v, (int, float)) for v in (lo, hi)):
        return im.g.clamp(x, float(lo), float(hi))
    bound = lambda v: v if isinstance(v, (int, float)) else im.tensor(v)   # noqa: E731
    y = x if lo is None else im.g.maximum(x, bound(lo))
    return y if hi is None else im.g.minimum(y, bound(hi))


def h_isnan(im, n, x):
    return im.g.isnan(im.tensor(x))


def h_isinf(im, n, x):
    return im.g.isinf(im.tensor(x))


def h_any(im, n, x, dim=None, keepdim=False):
    return im.g.any(im.tensor(x), None if dim is None else _ints(dim, 1), keepdim)


def h_all(im, n, x, dim=None, keepdim=False):
    return im.g.all(im.tensor(x), None if dim is None else _ints(dim, 1), keepdim)


def h_relu6(im, n, x):
    return im.g.relu6(im.tensor(x))


def h_gelu(im, n, x, approximate="none"):
    return im.g.gelu(im.tensor(x), approximate)


def h_elu(im, n, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1 or input_scale != 1:
        raise OpenPrimError("elu with scale/input_scale != 1 (selu/celu) is not supported")
    return im.g.elu(im.tensor(x), float(alpha))


def h_max_pool2d(im, n, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    k = _ints(kernel)
    s = _ints(stride) or k
    return im.g.max_pool2d(im.tensor(x), tuple(k), tuple(s), _pad4(padding), tuple(_ints(dilation)), bool(ceil_mode))


def h_max_pool2d_with_indices(im, n, *a, **k):
    return (h_max_pool2d(im, n, *a, **k), None)


def h_avg_pool2d(im, n, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
    if divisor_override is not None:
        raise OpenPrimError("avg_pool2d divisor_override is not supported")
    k = _ints(kernel)
    s = _ints(stride) or k
    return im.g.avg_pool2d(im.tensor(x), tuple(k), tuple(s), _pad4(padding), bool(ceil_mode), bool(count_include_pad))


def h_avg_pool3d(im, n, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
    """A window along the depth axis only (kernel (kd, 1, 1)): F.local_response_norm's channel average,
    as torch decomposes LRN. It is avg_pool2d of kernel (kd, 1) over the [N*C, 1, D, H*W] view."""
    x = im.tensor(x)
    k, s, p = _ints(kernel, 3), _ints(stride, 3) or _ints(kernel, 3), _ints(padding, 3)
    if divisor_override is not None or x.ndim != 5 or k[1:] != [1, 1] or s[1:] != [1, 1] or p[1:] != [0, 0]:
        raise OpenPrimError(f"avg_pool3d with kernel {k}, stride {s}, padding {p} on {x.shape}: only windows along "
                            f"the depth axis (kernel (k, 1, 1), stride (s, 1, 1), padding (p, 0, 0)) are supported")
    n_, c, d, h, w = x.shape
    y = im.g.avg_pool2d(im.g.reshape(x, (n_ * c, 1, d, h * w)), (k[0], 1), (s[0], 1), (p[0], 0, p[0], 0),
                        bool(ceil_mode), bool(count_include_pad), layout="NCHW")
    return im.g.reshape(y, (n_, c, y.shape[2], h, w))


def h_adaptive_avg_pool2d(im, n, x, size):
    x = im.tensor(x)
    size = _ints(size)
    if x.ndim == 4 and tuple(size) == (1, 1):
        return im.g.global_avg_pool(x)
    if x.ndim == 4 and tuple(size) == x.shape[2:]:
        return x
    raise OpenPrimError(f"adaptive_avg_pool2d to {size} on {x.shape}: only output size 1x1 is supported")


def h_mean(im, n, x, dims=None, keepdim=False, dtype=None):
    """Spatial mean of NCHW -> global_avg_pool; any other mean: prim.reduce "mean" over dims (a row per
    kept index: Llama's RMSNorm mean over the hidden dim stays per token, which prim-fuse's pattern and a
    dynamic batch's analysis both read)."""
    x = im.tensor(x)
    r = x.ndim
    dims = list(range(r)) if dims is None or len(dims) == 0 else sorted(set(_norm_dims(dims, r)))
    out = _out_shape(n)
    if r == 4 and dims == [2, 3]:
        y = im.g.global_avg_pool(x)
        return y if keepdim else im.g.reshape(y, out)
    y = im.g.reduce(x, "mean", dims, bool(keepdim))
    return y if tuple(y.shape) == tuple(out) else im.g.reshape(y, out)


def h_sum(im, n, x, dims=None, keepdim=False, dtype=None):
    """aten.sum (.default, .dim_IntList): prim.reduce "sum" over dims (None or []: every dim)."""
    if dtype is not None and _graph_dtype(dtype, "a sum's result") is None:
        raise OpenPrimError(f"sum to {dtype} is not supported")
    x = im.tensor(x)
    dims = list(range(x.ndim)) if dims is None or len(dims) == 0 else sorted(set(_norm_dims(dims, x.ndim)))
    out = _out_shape(n)
    y = im.g.reduce(x, "sum", dims, bool(keepdim))
    return y if tuple(y.shape) == tuple(out) else im.g.reshape(y, out)


def h_split_with_sizes(im, n, x, sizes, dim=0):
    """aten.split_with_sizes (and split.Tensor, an int size: equal parts, the last smaller): slices of dim."""
    shp = x.value.shape if isinstance(x, _Const) else im.tensor(x).shape
    d = int(dim) % len(shp)
    if isinstance(sizes, int):
        sizes = [min(sizes, shp[d] - i) for i in range(0, shp[d], sizes)] if sizes > 0 else []
    sizes = [int(s) for s in sizes]
    if sum(sizes) != shp[d] or min(sizes, default=0) < 0:
        raise OpenPrimError(f"split of dim {dim} (size {shp[d]}) into {sizes}: the sizes must add up to it")
    offsets = np.cumsum([0] + sizes).tolist()
    outs = []
    for i, size in enumerate(sizes):
        out = list(shp)
        out[d] = size
        outs.append(_slice(im, x, d, offsets[i], offsets[i + 1], 1, out))
    return tuple(outs)


def h_flip(im, n, x, dims):
    """torch.flip: each dim read backwards (Graph.take)."""
    if isinstance(x, _Const):
        return _Const(np.flip(x.value, [int(d) for d in dims]).copy(), x.name + "_flip")
    x = im.tensor(x)
    for d in {int(d) % x.ndim for d in dims}:
        x = x if x.shape[d] == 1 else im.g.take(x, list(range(x.shape[d] - 1, -1, -1)), d)
    return x


def h_permute(im, n, x, perm):
    if isinstance(x, _Const):
        return _Const(np.transpose(x.value, perm), x.name + "_t")
    return im.g.transpose(im.tensor(x), [p % im.tensor(x).ndim for p in perm])


def h_t(im, n, x):
    r = x.value.ndim if isinstance(x, _Const) else im.tensor(x).ndim
    return x if r < 2 else h_permute(im, n, x, [1, 0])


def h_transpose(im, n, x, d0, d1):
    r = x.value.ndim if isinstance(x, _Const) else im.tensor(x).ndim
    perm = list(range(r))
    perm[d0 % r], perm[d1 % r] = perm[d1 % r], perm[d0 % r]
    return h_permute(im, n, x, perm)


def h_view(im, n, x, shape):
    shape = list(_ints(shape, 1))
    if isinstance(x, _Const):
        return _Const(x.value.reshape(shape), x.name)
    x = im.tensor(x)
    if tuple(shape) == x.shape:
        return x
    return im.g.reshape(x, shape)


def h_flatten(im, n, x, start=0, end=-1):
    shp = x.value.shape if isinstance(x, _Const) else im.tensor(x).shape
    r = len(shp)
    if r == 0:
        return h_view(im, n, x, [1])
    s, e = start % r, end % r
    new = list(shp[:s]) + [int(np.prod(shp[s:e + 1]))] + list(shp[e + 1:])
    return h_view(im, n, x, new)


def h_unsqueeze(im, n, x, dim):
    shp = list(_out_shape(n))
    return h_view(im, n, x, shp)


def h_squeeze(im, n, x, *dims):
    return h_view(im, n, x, list(_out_shape(n)))


def _out_shape(n):
    return _shape(n)


def h_expand(im, n, x, size, implicit=False):
    shp = x.value.shape if isinstance(x, _Const) else im.tensor(x).shape
    out = _out_shape(n)
    if tuple(shp) == tuple(out):
        return x
    if isinstance(x, _Const):
        return _Const(np.broadcast_to(x.value, out), x.name)    # a view: h_bmm unbroadcasts an expanded weight
    x = im.tensor(x)
    if x.dtype not in FLOATS:
        return im.g.broadcast_to(x, out)
    # floats: broadcast by adding zeros of the target shape (fused with the elementwise ops around it)
    return im.g.add(x, im.tensor(_Const(np.zeros(out), "zeros")))


def h_slice(im, n, x, dim=0, start=None, end=None, step=1):
    """x[start:end:step] along dim (prim.slice); an empty one is a zero-size constant (what a partial
    rotary embedding passes through when the rotation covers the whole head: `q[..., rotary_dim:]`)."""
    return _slice(im, x, dim, start, end, step, _out_shape(n))


def _slice(im, x, dim, start, end, step, out):
    if 0 in out:
        return _Const(np.zeros(out, np.float32), "empty")
    if isinstance(x, _Const):
        sl = [slice(None)] * x.value.ndim
        sl[dim] = slice(start, end, step)
        return _Const(x.value[tuple(sl)], x.name)
    x = im.tensor(x)
    d = dim % x.ndim
    b, e, s = slice(start, end, step).indices(x.shape[d])
    if (b, e, s) == (0, x.shape[d], 1):
        return x
    y = im.g.slice(x, [b], [e], axes=[d], steps=[s])
    return y if tuple(y.shape) == tuple(out) else im.g.reshape(y, out)


def h_select(im, n, x, dim, index):
    shp = x.value.shape if isinstance(x, _Const) else im.tensor(x).shape
    d = dim % len(shp)
    i = index % shp[d]
    if isinstance(x, _Const):
        return _Const(np.take(x.value, i, axis=d), x.name)
    shp = list(shp)
    shp[d] = 1
    return im.g.reshape(_slice(im, x, d, i, i + 1, 1, shp), _out_shape(n))


def h_identity(im, n, x, *a, **k):
    return x


def h_dropout(im, n, x, p=0.5, train=False):
    if train:
        raise OpenPrimError("dropout in training mode; call model.eval() before export")
    return x


def h_native_dropout(im, n, x, p, train):
    if train:
        raise OpenPrimError("dropout in training mode; call model.eval() before export")
    return (x, None)


def h_getitem(im, n, x, i):
    if not isinstance(x, (tuple, list)):
        raise OpenPrimError("getitem of a single tensor (indexing) is not supported")
    v = x[i]
    if v is None:
        raise OpenPrimError(f"output {i} of {n.args[0].target} (indices / statistics) is not supported")
    return v


def _binary(op, npop):
    def h(im, n, a, b, alpha=1, **kw):
        if kw.get("rounding_mode") is not None and (kw["rounding_mode"] != "floor" or im.dtype_of(n) in FLOATS):
            raise OpenPrimError(f"div with rounding_mode='{kw['rounding_mode']}' is supported for integer floor "
                                f"division only")
        if alpha != 1:
            if isinstance(b, (int, float)):
                b = b * alpha
            elif isinstance(b, _Const):
                b = _Const(b.value * alpha, b.name)
            else:
                b = im.g.mul(im.tensor(b), float(alpha))
        consts = [isinstance(v, (_Const, int, float)) for v in (a, b)]
        if all(consts):
            av = a.value if isinstance(a, _Const) else a
            bv = b.value if isinstance(b, _Const) else b
            return _Const(npop(av, bv), "folded")
        want = im.dtype_of(n)    # torch computes in the result's dtype: int / int is a float division
        a, b = (v if isinstance(v, (int, float)) else _as_dtype(im, im.tensor(v), want) for v in (a, b))
        if op == "div" and kw.get("rounding_mode") == "floor" and want not in FLOATS:
            return im.g.floor_divide(a, b)
        return getattr(im.g, op)(a, b)
    return h


def _as_dtype(im, t: Tensor, dtype: str | None) -> Tensor:
    """t cast to dtype where torch computes in it (a float result: an integer operand becomes float)."""
    return t if dtype is None or t.dtype == dtype else im.g.cast(t, dtype)


def h_rsub(im, n, a, b, alpha=1):
    # b - alpha * a
    return _binary("sub", np.subtract)(im, n, b, a if alpha == 1 else _mul_scalar(im, a, alpha))


def _mul_scalar(im, a, s):
    if isinstance(a, _Const):
        return _Const(a.value * s, a.name)
    return im.g.mul(im.tensor(a), float(s))


def h_neg(im, n, x):
    return _mul_scalar(im, x, -1.0)


def h_abs(im, n, x):
    """|x| = relu(x) + relu(-x) (one of the two is 0, so this is exact)."""
    if isinstance(x, _Const):
        return _Const(np.abs(x.value), x.name)
    x = im.tensor(x)
    return im.g.add(im.g.relu(x), im.g.relu(im.g.mul(x, -1.0)))


def _masked(im):
    """The bias of a masked attention score: -1e30, or the Graph dtype's lowest finite value (f16)."""
    return -min(1e30, FINITE_MAX[im.g.dtype])


def h_sdpa(im, n, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """softmax(q @ k^T * scale + mask) @ v: prim.attention for [B, H, S, D] operands, else three prim ops
    (batch dims of q, k, v must match)."""
    if dropout_p:
        raise OpenPrimError("scaled_dot_product_attention with dropout_p > 0 is not supported")
    q, k, v = im.tensor(q), im.tensor(k), im.tensor(v)
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise OpenPrimError(f"scaled_dot_product_attention: batch dims of q {q.shape}, k {k.shape}, v {v.shape} "
                            "must match (no broadcasting / GQA)")
    scale = 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)
    if attn_mask is not None:
        if isinstance(attn_mask, _Const) and attn_mask.value.dtype == np.bool_:
            attn_mask = _Const(np.where(attn_mask.value, 0.0, _masked(im)), "attn_mask")
        elif isinstance(attn_mask, _Const) and attn_mask.value.dtype.kind != "f":
            raise OpenPrimError("scaled_dot_product_attention: integer attn_mask is not supported")
        attn_mask = im.tensor(attn_mask)
        if attn_mask.dtype == "bool":   # True: attend; one additive mask broadcast over the heads, not per head
            attn_mask = im.g.where(attn_mask, 0.0, _masked(im))
        elif attn_mask.dtype not in FLOATS:
            raise OpenPrimError("scaled_dot_product_attention: integer attn_mask is not supported")
    if q.ndim == 4 and k.shape == v.shape:  # [B, H, S, D]: one prim.attention (flash attention where it applies)
        return im.g.attention(q, k, v, attn_mask, causal=bool(is_causal), scale=scale)
    s = im.g.mul(im.g.matmul(q, k, transpose_rhs=True), scale)
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        s = im.g.add(s, im.tensor(_Const(np.triu(np.full((L, S), _masked(im)), 1), "causal_mask")))
    if attn_mask is not None:
        s = im.g.add(s, attn_mask)
    return im.g.matmul(im.g.softmax(s, -1), v)


def h_softmax(im, n, x, dim, half_to_float=False, dtype=None):
    return im.g.softmax(im.tensor(x), int(dim))


def h_log_softmax(im, n, x, dim, half_to_float=False, dtype=None):
    return im.g.log_softmax(im.tensor(x), int(dim))


def _matmul2(im, a, b, bias=None):
    """a @ b (+ bias), using transpose_rhs for a constant rhs given transposed (the linear weight)."""
    ta = im.tensor(a)
    if isinstance(b, _Const) and b.value.ndim == 2:
        w = _Const(np.ascontiguousarray(b.value.T), b.name)     # [N, K]: the linear layout
        out = im.g.matmul(ta, im.tensor(w), bias, transpose_rhs=True)
    else:
        out = im.g.matmul(ta, im.tensor(b), bias)
    return out


def _bias_vec(im, bias, n_out, out_shape):
    """bias as a [N] vector for the matmul epilogue, or None if it must be added separately."""
    if isinstance(bias, _Const):
        v = bias.value
        if v.ndim == 1 and v.shape[0] == n_out:
            return im.tensor(bias)
        if v.ndim == 2 and v.shape == (1, n_out):
            return im.tensor(_Const(v.reshape(n_out), bias.name))
    elif isinstance(bias, Tensor) and bias.shape == (n_out,):
        return bias
    return None


def h_addmm(im, n, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise OpenPrimError(f"addmm with beta={beta}, alpha={alpha} is not supported")
    out_shape = _out_shape(n)
    vec = _bias_vec(im, bias, out_shape[-1], out_shape)
    y = _matmul2(im, a, b, vec)
    if vec is None:
        y = im.g.add(y, im.tensor(bias))
    return y


def h_mm(im, n, a, b):
    if isinstance(a, _Const) and isinstance(b, _Const):
        return _Const(a.value @ b.value, "folded")
    return _matmul2(im, a, b)


def h_bmm(im, n, a, b):
    if isinstance(b, _Const) and b.value.ndim == 3 and b.value.strides[0] == 0:  # a linear's weight, expanded
        return _matmul2(im, a, _Const(b.value[0], b.name))                       # by torch's matmul decomposition
    return im.g.matmul(im.tensor(a), im.tensor(b))


def h_matmul(im, n, a, b):
    ra = a.value.ndim if isinstance(a, _Const) else im.tensor(a).ndim
    rb = b.value.ndim if isinstance(b, _Const) else im.tensor(b).ndim
    if ra < 2 or rb < 2:
        raise OpenPrimError("matmul with a 1-d operand is not supported")
    if rb == 2:
        return _matmul2(im, a, b)
    return im.g.matmul(im.tensor(a), im.tensor(b))


def h_linear(im, n, x, w, bias=None):
    if not isinstance(w, _Const) and not isinstance(w, Tensor):
        raise OpenPrimError("linear weight must be a tensor")
    bvec = None if bias is None else _bias_vec(im, bias, _out_shape(n)[-1], None)
    y = im.g.linear(im.tensor(x), im.tensor(w), bvec)
    if bias is not None and bvec is None:
        y = im.g.add(y, im.tensor(bias))
    return y


def h_cat(im, n, xs, dim=0):
    """torch.cat; its empty operands (zero-size constants) are left out."""
    xs = [im.tensor(x) for x in xs if not (isinstance(x, _Const) and x.value.size == 0)]
    if not xs:
        return _Const(np.zeros(_out_shape(n), np.float32), "empty")
    return xs[0] if len(xs) == 1 else im.g.concat(xs, int(dim) % xs[0].ndim)


def h_constant_pad_nd(im, n, x, pad, value=0.0):
    x = im.tensor(x)
    r = x.ndim
    pad = list(pad)
    if len(pad) % 2 or len(pad) > 2 * r:
        raise OpenPrimError(f"pad {pad} does not fit rank {r}")
    begins, ends = [0] * r, [0] * r
    for i in range(len(pad) // 2):         # torch: last dim first, (begin, end) pairs
        d = r - 1 - i
        begins[d], ends[d] = pad[2 * i], pad[2 * i + 1]
    if any(p < 0 for p in begins + ends):           # cropping (F.fold's padding): a slice first
        if any(x.shape[d] + min(b, 0) + min(e, 0) <= 0 for d, (b, e) in enumerate(zip(begins, ends))):
            raise OpenPrimError(f"pad {pad} crops all of a dimension of {list(x.shape)}")
        x = im.g.slice(x, [-min(b, 0) for b in begins], [x.shape[d] + min(e, 0) for d, e in enumerate(ends)])
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
    return im.g.pad(x, begins + ends, float(value)) if any(begins + ends) else x


def h_alias(im, n, x, *a, **k):
    return x


def _row_major_view(size, stride, offset, numel) -> bool:
    """Whether as_strided(size, stride, offset) of a contiguous tensor of `numel` elements reads all of it in
    order: a reshape (row-major strides on every dimension larger than 1, no offset, the same count)."""
    dense = [math.prod(size[i + 1:]) for i in range(len(size))]
    return not offset and math.prod(size) == numel and all(s == d for s, d, k in zip(stride, dense, size) if k != 1)


def h_as_strided(im, n, x, size, stride, offset=0):
    """A reshape only: sizes and strides that read the whole tensor in row-major order (the decomposition of
    an adaptive_avg_pool2d to 1x1 restrides its unit dimensions; a flatten's backward of a channels-last
    map views a flat buffer as [N, C] and [N, C, 1, 1])."""
    size, stride = list(_ints(size, 1)), list(_ints(stride, 1))
    shape = x.value.shape if isinstance(x, _Const) else im.tensor(x).shape
    if not _row_major_view(size, stride, offset, math.prod(shape)):
        raise OpenPrimError(f"as_strided to {size} with strides {stride} (offset {offset}) is not a plain view "
                            f"of {list(shape)}; only a reshape is supported")
    return h_view(im, n, x, size)


def h_as_strided_scatter(im, n, base, src, size, stride, offset=0):
    """base with the strided view (size, stride, offset) replaced by src: where the view is all of base in
    row-major order (a flatten's backward on a channels-last map), src reshaped to base's shape."""
    size, stride = list(_ints(size, 1)), list(_ints(stride, 1))
    shape = _out_shape(n)
    if not _row_major_view(size, stride, offset, math.prod(shape)):
        raise OpenPrimError(f"as_strided_scatter into {list(shape)} through sizes {size}, strides {stride} (offset "
                            f"{offset}) writes part of it; only a view of all of it is supported")
    return h_view(im, n, src, shape)


def h_copy(im, n, dst, src, non_blocking=False):
    """copy_'s functional form: src broadcast to dst's shape (and dtype); dst's values are not read."""
    return h_expand(im, n, src, _out_shape(n))


def h_upsample_nearest2d(im, n, x, output_size=None, *scales):
    """F.interpolate(mode="nearest") of a 4-d tensor: .vec (output_size or scale_factors, a list) and .default
    (output_size, scales_h, scales_w), with torch's index rule (Graph.resize_nearest). (The 1-d and 3-d
    forms reach the importer decomposed.)"""
    x = im.tensor(x)
    factors = scales[0] if str(n.target).endswith(".vec") else scales
    factors = [1.0, 1.0, *factors] if factors else None
    return im.g.resize_nearest(x, factors, None if output_size is None else [*x.shape[:2], *output_size])


def h_upsample_bilinear2d(im, n, x, output_size, align_corners, *scales):
    """F.interpolate(mode="bilinear") (DPT's fusion stages, segmentation heads; .vec with scale_factors,
    .default with scales_h, scales_w): H and W interpolated at torch's source coordinates (`linear_sources`,
    Graph.interpolate). (linear, trilinear and bicubic reach the importer decomposed.)"""
    x = im.tensor(x)
    factors = scales[0] if str(n.target).endswith(".vec") else scales
    spatial = x.ndim - 2
    factors = list(factors) if factors else [None] * spatial
    out = list(output_size) if output_size else [math.floor(d * f) for d, f in zip(x.shape[2:], factors)]
    if len(out) != spatial or len(factors) != spatial or min(out) < 1:
        raise OpenPrimError(f"{n.target}: output size {out} (scales {factors}) does not fit input {list(x.shape)}")
    sources = [None, None] + [linear_sources(d, o, f, bool(align_corners))
                              for d, o, f in zip(x.shape[2:], out, factors)]
    return im.g.interpolate(x, sources)


def h_to_copy(im, n, x, dtype=None, **k):
    """A cast (`_to_copy`, `to.dtype`, `type_as`): between float types the identity (the Graph has one float
    dtype), to and from integers and bool a prim.cast (_recorded_dtype makes it from the recorded dtype)."""
    if dtype is not None and dtype.is_floating_point:
        _graph_dtype(dtype, "a cast's result")   # float64: the error
    return x


def h_type_as(im, n, x, other):
    return x


def h_ignored(im, n, *a, **k):
    """Nodes without a tensor result that only assert at export (_assert_tensor_metadata)."""
    return None


def h_embedding(im, n, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """F.embedding: the rows of weight that indices name (prim.gather on axis 0, bounds checked at run time)."""
    return im.g.embedding(im.tensor(indices), im.tensor(weight))


def _compare(kind):
    def h(im, n, a, b):
        return getattr(im.g, kind)(*(v if isinstance(v, (int, float, bool)) else im.tensor(v) for v in (a, b)))
    return h


def _logical(kind):
    """and/or/xor of bool tensors (`__and__`, `bitwise_and` and `logical_and` alike on bools)."""
    def h(im, n, a, b):
        a, b = (v if isinstance(v, (int, bool)) else im.tensor(v) for v in (a, b))
        if str(n.target).split(".")[1].startswith(("bitwise", "__")) and \
                any(isinstance(v, Tensor) and v.dtype != "bool" for v in (a, b)):
            raise OpenPrimError("bitwise operations on integer tensors are not supported (bool tensors are)")
        return getattr(im.g, f"logical_{kind}")(a, b)
    return h


def h_logical_not(im, n, x):
    x = im.tensor(x)
    if str(n.target).split(".")[1].startswith("bitwise") and x.dtype != "bool":
        raise OpenPrimError("bitwise_not of an integer tensor is not supported (of a bool tensor it is)")
    return im.g.logical_not(x)


def h_where(im, n, condition, a, b):
    a, b = (v if isinstance(v, (int, float, bool)) else im.tensor(v) for v in (a, b))
    return im.g.where(im.tensor(condition), a, b)


def h_cumsum(im, n, x, dim, dtype=None):
    return im.g.cumsum(im.tensor(x), int(dim))


def h_index(im, n, x, indices):
    """x[i0, i1, ...] (aten.index.Tensor, None for a whole axis) with numpy's advanced-indexing rules. Constant
    index tensors: the flat positions of x that the result reads, computed here, one prim.gather of x flattened
    (masks built from an attention mask with aranges). One index tensor known at run time: prim.gather on
    its axis (bounds checked)."""
    x = im.tensor(x)
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    runtime = [(d, i) for d, i in given if not isinstance(i, _Const)]
    if not runtime:
        positions = np.arange(math.prod(x.shape)).reshape(x.shape)
        try:
            flat = positions[tuple(slice(None) if i is None else i.value for i in indices)]
        except IndexError as e:
            raise OpenPrimError(f"index: {e}") from None
        if not flat.size:
            raise OpenPrimError(f"index: the result of indexing {list(x.shape)} would be empty")
        return im.g.gather(im.g.reshape(x, [-1]), flat, 0)
    if len(given) == 1:
        d, i = given[0]
        return im.g.gather(x, im.tensor(i), d)
    raise OpenPrimError("index with several index tensors, one of them computed at run time, is not supported")


def h_index_copy(im, n, x, dim, index, source):
    """x with its entries `index` along dim replaced by source's (prim.index_copy; a KV cache update)."""
    x = im.tensor(x)
    return im.g.index_copy(x, int(dim), index.value if isinstance(index, _Const) else im.tensor(index),
                           im.tensor(source))




def h_index_put(im, n, x, indices, values, accumulate=False):
    """x[i0, i1, ..] = values (or += with accumulate). Constant index tensors (F.fold's col2im, masks built
    from aranges): the flat position of x that each value lands on, computed here; positions that repeat
    with accumulate add up through a matmul by a constant 0/1 matrix, otherwise one prim.gather of the
    values to x's positions and a where (the last value wins where a position repeats, as numpy's).
    One 1-d index tensor known at run time: prim.index_copy on that axis, values broadcast to the rows."""
    x = im.tensor(x)
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if given and all(isinstance(i, _Const) for _, i in given) and (accumulate or len(given) > 1
                                                                   or np.ndim(given[0][1].value) != 1):
        return _index_put_constant(im, x, indices, im.tensor(values), accumulate)
    if accumulate or len(given) != 1:
        raise OpenPrimError(f"index_put with {'accumulate=True' if accumulate else f'{len(given)} index tensors'} is "
                            "not supported (one index tensor, accumulate=False: index_copy, is)")
    d, i = given[0]
    idx = i.value if isinstance(i, _Const) else im.tensor(i)
    if len(idx.shape) != 1:
        raise OpenPrimError(f"index_put with a {len(idx.shape)}-d index tensor is not supported (1-d is)")
    rows = list(x.shape)
    rows[d] = idx.shape[0]
    return im.g.index_copy(x, d, idx, im.g.broadcast_to(im.tensor(values), rows))


def _index_put_constant(im, x, indices, values, accumulate):
    """h_index_put with every index tensor a constant: the flat positions of x they address (Graph.put)."""
    positions = np.arange(math.prod(x.shape)).reshape(x.shape)
    try:
        target = positions[tuple(slice(None) if i is None else i.value for i in indices)]
    except IndexError as e:
        raise OpenPrimError(f"index_put: {e}") from None
    return im.g.put(x, target, values, accumulate)


def h_gather(im, n, x, dim, index, sparse_grad=False):
    """torch.gather: out[i] = x[i with dim's coordinate index[i]] (prim.gather_elements, bounds checked)."""
    return im.g.gather_elements(im.tensor(x), index.value if isinstance(index, _Const) else im.tensor(index), int(dim))


def h_rsqrt(im, n, x):
    return im.g.div(1.0, im.g.sqrt(im.tensor(x)))


def h_index_select(im, n, x, dim, index):
    """x's entries `index` along dim (prim.gather; run-time indices bounds checked)."""
    return im.g.gather(im.tensor(x), index.value if isinstance(index, _Const) else im.tensor(index), int(dim))


def h_vector_norm(im, n, x, ord=2, dim=None, keepdim=False, dtype=None):
    """linalg.vector_norm for ord 2 (sqrt of the sum of squares), 1 (sum of |x|) and inf (max |x|)."""
    x = im.tensor(x)
    axes = None if dim is None else _ints(dim, 1)
    if ord == 2:
        return im.g.sqrt(im.g.reduce(im.g.mul(x, x), "sum", axes, keepdim))
    if ord == 1:
        return im.g.reduce(im.g.abs(x), "sum", axes, keepdim)
    if ord == math.inf:
        return im.g.reduce(im.g.abs(x), "max", axes, keepdim)
    raise OpenPrimError(f"linalg.vector_norm with ord={ord} is not supported (2, 1 and inf are)")


def h_repeat(im, n, x, repeats):
    """Tensor.repeat (numpy.tile): x with a unit axis before each axis, broadcast to the repeats, viewed whole."""
    x = im.tensor(x)
    reps = list(repeats)
    lead = len(reps) - x.ndim
    shape = (1,) * lead + x.shape
    tiled = im.g.broadcast_to(im.g.reshape(x, [d for s in shape for d in (1, s)]),
                              [d for r, s in zip(reps, shape) for d in (r, s)])
    return im.g.reshape(tiled, [r * s for r, s in zip(reps, shape)])


def _math(name):
    def h(im, n, x):
        return getattr(im.g, name)(im.tensor(x))
    return h


def h_reciprocal(im, n, x):
    return im.g.div(1.0, im.tensor(x))


def h_full_like(im, n, x, value, **k):
    """full_like of a run-time tensor: a constant of its shape (its values are never read)."""
    return _Const(np.full(_out_shape(n), value), "full")


_HANDLERS = {
    "getitem": h_getitem,
    "convolution": h_convolution, "conv2d": h_conv2d,
    "_native_batch_norm_legit_no_training": h_native_bn_no_training, "_native_batch_norm_legit": h_native_bn_legit,
    "native_batch_norm": h_native_batch_norm, "batch_norm": h_batch_norm,
    "native_layer_norm": h_native_layer_norm, "layer_norm": h_layer_norm, "rms_norm": h_rms_norm,
    "native_group_norm": h_native_group_norm, "group_norm": h_group_norm,
    "relu": _unary("relu"), "relu_": _unary("relu"), "sigmoid": _unary("sigmoid"), "tanh": _unary("tanh"),
    "silu": _unary("silu"), "silu_": _unary("silu"), "hardswish": _unary("hardswish"),
    "hardswish_": _unary("hardswish"), "hardsigmoid": _unary("hardsigmoid"), "hardsigmoid_": _unary("hardsigmoid"),
    "leaky_relu": h_leaky_relu, "hardtanh": h_hardtanh, "hardtanh_": h_hardtanh, "relu6": h_relu6,
    "clamp": h_clamp, "gelu": h_gelu, "elu": h_elu,
    "max_pool2d": h_max_pool2d, "max_pool2d_with_indices": h_max_pool2d_with_indices,
    "avg_pool2d": h_avg_pool2d, "avg_pool3d": h_avg_pool3d, "adaptive_avg_pool2d": h_adaptive_avg_pool2d,
    "_adaptive_avg_pool2d": h_adaptive_avg_pool2d, "mean": h_mean, "sum": h_sum,
    "addmm": h_addmm, "mm": h_mm, "bmm": h_bmm, "matmul": h_matmul, "linear": h_linear,
    "t": h_t, "permute": h_permute, "transpose": h_transpose,
    "view": h_view, "reshape": h_view, "_unsafe_view": h_view, "flatten": h_flatten,
    "unsqueeze": h_unsqueeze, "squeeze": h_squeeze, "expand": h_expand,
    "split_with_sizes": h_split_with_sizes, "split": h_split_with_sizes,
    "add": _binary("add", np.add), "sub": _binary("sub", np.subtract), "mul": _binary("mul", np.multiply),
    "div": _binary("div", np.divide), "pow": _binary("pow", np.power), "rsub": h_rsub, "neg": h_neg, "abs": h_abs, "scaled_dot_product_attention": h_sdpa,
    "softmax": h_softmax, "_softmax": h_softmax, "log_softmax": h_log_softmax, "_log_softmax": h_log_softmax,
    "cat": h_cat, "concat": h_cat, "constant_pad_nd": h_constant_pad_nd,
    "clone": h_identity, "detach": h_identity, "alias": h_alias, "as_strided": h_as_strided, "contiguous": h_identity,
    "as_strided_scatter": h_as_strided_scatter, "copy": h_copy,
    "dropout": h_dropout, "native_dropout": h_native_dropout, "_to_copy": h_to_copy, "to": h_to_copy,
    "type_as": h_type_as, "_assert_tensor_metadata": h_ignored, "embedding": h_embedding,
    "eq": _compare("eq"), "ne": _compare("ne"), "lt": _compare("lt"), "le": _compare("le"),
    "gt": _compare("gt"), "ge": _compare("ge"),
    "__and__": _logical("and"), "bitwise_and": _logical("and"), "logical_and": _logical("and"),
    "__or__": _logical("or"), "bitwise_or": _logical("or"), "logical_or": _logical("or"),
    "__xor__": _logical("xor"), "bitwise_xor": _logical("xor"), "logical_xor": _logical("xor"),
    "bitwise_not": h_logical_not, "logical_not": h_logical_not, "where": h_where, "cumsum": h_cumsum,
    "index": h_index, "index_copy": h_index_copy, "index_put": h_index_put, "full_like": h_full_like, "gather": h_gather, "rsqrt": h_rsqrt, "isnan": h_isnan,
    "isinf": h_isinf, "any": h_any, "all": h_all, "index_select": h_index_select,
    "linalg_vector_norm": h_vector_norm, "repeat": h_repeat, "sqrt": _math("sqrt"), "exp": _math("exp"),
    "log": _math("log"), "erf": _math("erf"), "sin": _math("sin"), "cos": _math("cos"), "reciprocal": h_reciprocal,
    "lift_fresh_copy": h_identity, "slice": h_slice, "select": h_select, "upsample_nearest2d": h_upsample_nearest2d,
    "upsample_bilinear2d": h_upsample_bilinear2d, "flip": h_flip,
}

SUPPORTED_OPS = tuple(sorted(k for k in _HANDLERS if k != "getitem"))


def maps(target) -> bool:
    """Whether the importer has a mapping for the fx call_function `target` (any overload of a mapped op;
    pyfrontend/torch/check.py lists the nodes of a program without one)."""
    return _op_key(target) in _HANDLERS


def unsupported_ops(ep) -> list[str]:
    """The call_function targets of ep's graph that the importer cannot map (sorted, unique)."""
    graph = ep.graph_module.graph
    foldable = foldable_nodes(graph, const_tensors(ep).__contains__)
    return sorted({str(n.target) for n in graph.nodes
                   if n.op == "call_function" and n not in foldable and _op_key(n.target) not in _HANDLERS})


# ---------------------------------------------------------------------------- entry point
def _decompose(ep):
    """Core ATen, except scaled_dot_product_attention, which is kept whole (its decomposition guards
    fully masked rows with any/eq/where, which OpenPrim has no ops for), silu/hardswish/hardsigmoid
    (prim ops, fused as conv epilogues; decomposed they are x * sigmoid(x), a one-sided clamp and a
    division: elementwise kernels of their own) and rms_norm (a prim op: one row kernel)."""
    try:
        from torch.export import default_decompositions
        table = default_decompositions()
        kept = ("scaled_dot_product", "silu", "hardswish", "hardsigmoid", "aten.rms_norm")
        for k in [k for k in table if any(op in str(k) for op in kept)]:
            table.pop(k)
        with warnings.catch_warnings():   # torch (2.13) deep-copies its own LeafSpecs, which warn about themselves
            warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning)
            return ep.run_decompositions(table)
    except Exception:  # noqa: BLE001 - keep the training-IR program; its ops are mapped too
        return ep


def import_exported(ep, constant_inputs=None, decompose=True):
    """ExportedProgram -> (Graph, input_names). The Graph's outputs are ep's user outputs, flattened.

    constant_inputs: {user input position: tensor} to import as constants instead of inputs.
    decompose: run ep.run_decompositions() first (core ATen; scaled_dot_product_attention kept)."""
    if decompose:
        ep = _decompose(ep)
    return _Importer(ep, constant_inputs).run()


def import_file(path) -> Graph:
    """The Graph of a `.pt2` file: an ExportedProgram saved with torch.export.save."""
    log = logging.getLogger("torch.export")   # it logs a traceback before trying the older format
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        ep = torch.export.load(path)
    except Exception as e:  # noqa: BLE001 - any reader failure (zip, pickle, schema version) is one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise OpenPrimError(f"{path}: cannot read as a torch.export program: {type(e).__name__}: {first}") from None
    finally:
        log.setLevel(level)
    return import_exported(ep)[0]

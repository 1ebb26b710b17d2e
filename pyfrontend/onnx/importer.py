"""Import an ONNX model (opsets 13-21) into an OpenPrim `Graph`.

`import_model(model_or_path, input_shapes=None, dims=None) -> Graph` (a ModelProto, a path or serialized
bytes; `input_shapes` overrides or fixes dynamic input shapes by input name, `dims` sizes named dynamic
dimensions). The model is checked with
onnx.checker first. Initializers become `g.param`. Every tensor whose value is known at import time
(initializers, Constant, Shape/Size of a static tensor, and any node whose inputs are all known: the
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains of exporters) is kept as a numpy array, folded
with onnx's reference evaluator, and becomes a graph param only when a compute op consumes it.

The mapped ops are the `op_<OpType>` methods of `_Importer`: `supported_ops()` lists them with their
opsets and `coverage_table()` with notes (docs/frontends.md shows it); `unsupported_nodes(model)` lists
the nodes of a model that none of them maps, and `check_model(model)` those and every other reason the
import refuses the model, by the import's own checks (`openprim onnx-check`).

A model older than opset 13 (the PyTorch-converted models of onnx's backend tests are opset 6-12) is
first converted to opset 13 with onnx.version_converter, which rewrites the attributes that later
became inputs (Pad's pads, Clip's bounds, Unsqueeze's axes) and the changed Softmax semantics.
A model whose opset is newer than 21 is accepted node by node: a node passes only if its op's
definition at that opset has the same inputs, outputs and attributes as at opset 21 (Conv-22 or
Reshape-25 only add element types), or, for an op first defined later (Attention-23), if the importer
reads that definition (_NEWER_OPS). Unsupported ops and attributes, dynamic shapes and tensors of other
element types (strings, complex, float8) are reported as one-line `OpenPrimError`s naming the node, its op
type and the opset.

Precision. A Graph has one float dtype: float, float16 and bfloat16 models import as f32, f16 and bf16
Graphs, and a model that mixes them (an f16 model with float inputs and outputs, Casts around a
LayerNormalization kept in float) imports in its dominant dtype, `model_dtype`: the type of most elements of
its float initializers, or, without any, of its first float input. Casts between these types are identities,
and every weight is rounded to the Graph's dtype (the runtime converts inputs of another float type; the
outputs come back in the Graph's dtype, and the ONNX backend casts them to the declared types). Float64
tensors are an error wherever they are computed (an input, a weight a compute node reads, a Cast of a
computed tensor): OpenPrim computes in f32 at most. An integer constant that a float op reads as data (Pow's
exponent) must be exact in the Graph's dtype.

Integers and bools. Integer and bool tensors keep their types: int64 -> i64, int32 -> i32, bool -> bool,
and the other integer types (int8, int16, uint8, uint16, uint32, uint64) compute in i64, which holds their
values (a uint64 constant beyond it is an error; an input, at run time). Inputs (token ids, attention
masks), constants and every node's result have the Graph dtype of their ONNX type: where a mapping gives
another one (the Graph's torch-style promotion), the result is cast to the type ONNX infers for it
(`_Importer.recorded`). Comparisons, logical ops, Where, Gather with run-time indices (an embedding lookup;
its indices are bounds-checked after each run), GatherElements, GatherND with constant indices, CumSum and
integer arithmetic map to the Graph's ops; integer Div truncates toward zero as ONNX does (floor division
where both operands are known non-negative, else corrected by the remainder's sign). The torch importer
decides the float dtypes alike: pyfrontend/importers/common.py.

Attention. Exporters' attention chains are folded into prim.attention by pyfrontend/attention.py after the
import, the NaN guard of torch.onnx's scaled_dot_product_attention (Where(IsNaN(softmax), 0, softmax), which
makes a query row without any key 0) included: it becomes the same guard on the attention's result.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from openprim.base.dtypes import FLOATS, INTEGERS, from_storage
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.attention import match_attention, merge_batched_matmuls
from openprim.pyfrontend.graph import Graph, Tensor
from openprim.pyfrontend.importers.common import (GRAPH_DTYPES, dominant_dtype, float64_message, inexact_int,
                                                  require)

MIN_OPSET, MAX_OPSET = 13, 21
# Ops first defined after MAX_OPSET that the importer maps: the definitions (their since_version) it reads.
_NEWER_OPS = {"Attention": (23, 24, 25), "RMSNormalization": (23,)}
# TensorProto's float elem types (FLOAT, FLOAT16, BFLOAT16, DOUBLE) by the names of importers/common.py.
_FLOAT_NAMES = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64"}
# TensorProto's integer and bool elem types as Graph dtypes: INT64, INT32, BOOL as themselves; INT8, INT16,
# UINT8, UINT16, UINT32 and UINT64 compute in i64, which holds their values (UINT64's up to 2^63 - 1).
_INT_DTYPES = {7: "i64", 6: "i32", 9: "bool", 3: "i64", 5: "i64", 2: "i64", 4: "i64", 12: "i64", 13: "i64"}
# What to change in a float64 model.
_FLOAT64_FIX = "convert the model to float32 first"
_F32_MAX = float(np.finfo(np.float32).max)
# Integer results known to be >= 0: op -> the inputs that must be (every input: "all"; none: always).
_NONNEG = {**{op: (0,) for op in ("Cast", "CumSum", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                                   "Identity", "Expand", "Tile", "Slice", "Split", "Gather", "GatherElements",
                                   "GatherND", "ReduceMax", "ReduceMin")},
           **{op: "all" for op in ("Add", "Mul", "Div", "Min", "Max", "Sum", "Concat")},
           "Where": (1, 2), "Abs": (), "Relu": ()}
# Ops that are never folded at import time even when all inputs are known: random ones, and If, whose
# branches read values of the graph around them (op_If imports the branch it takes).
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
            "Bernoulli", "If"}


def _import_time(method):
    """Marks an op_ method whose results are numpy arrays known at import time (Constant, Shape, Size)."""
    method.import_time = True
    return method


def _unchanged_since_max_opset(op, opset) -> bool:
    """Whether `op` at `opset` reads as at MAX_OPSET. Opsets above it are accepted node by node: only
    where the op's definition differs from its opset-21 one in type constraints alone (same inputs,
    outputs, attributes and defaults), as for Conv-22 or Reshape-25 (which only add element types). An op of
    _NEWER_OPS passes at the opsets whose definition it lists."""
    from onnx import defs
    if op in _NEWER_OPS:
        try:
            return defs.get_schema(op, opset).since_version in _NEWER_OPS[op]
        except Exception:  # noqa: BLE001 - not defined at that opset
            return False
    if opset <= MAX_OPSET:
        return True

    def signature(version):
        sc = defs.get_schema(op, version)
        return ([i.name for i in sc.inputs], [o.name for o in sc.outputs],
                sorted((k, str(x.default_value)) for k, x in sc.attributes.items()))
    try:
        return signature(opset) == signature(MAX_OPSET)
    except Exception:  # noqa: BLE001 - no opset-21 definition
        return False


class _Importer:
    def __init__(self, model, input_shapes):
        self.onnx = require("onnx", "the ONNX importer")
        self.model = model
        self.input_shapes = dict(input_shapes or {})
        self.opset = model_opset(model)
        self.g = Graph(name=(model.graph.name or "main").replace(" ", "_"), layout="NCHW",
                       dtype=model_dtype(model))
        self.tensors: dict[str, Tensor] = {}     # name -> graph value
        self.consts: dict[str, np.ndarray] = {}  # name -> value known at import time
        self.readers: dict[str, str] = {}       # name -> the first node (or graph output) that reads it
        self.types = _elem_types(model)         # name -> the ONNX elem type of a value (shape inference)
        self.nonneg: set[str] = set()           # names of computed integer values known to be >= 0
        self.node = None
        self.nparams = 0

    # ------------------------------------------------------------------ helpers
    def fail(self, why):
        n = self.node
        raise OpenPrimError(f"ONNX node '{n.name or n.output[0]}' ({n.op_type}, opset {self.opset}): {why}")

    def unsupported(self, what=None):
        n = self.node
        msg = f"ONNX node '{n.name or n.output[0]}' ({n.op_type}, opset {self.opset}) is not supported by OpenPrim"
        raise OpenPrimError(msg + (f": {what}" if what else ""))

    def attrs(self, node):
        h = self.onnx.helper
        out = {}
        for a in node.attribute:
            if a.ref_attr_name:
                self.unsupported("attribute references (functions) are not supported")
            v = h.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            out[a.name] = v
        return out

    def has(self, i):
        return i < len(self.node.input) and self.node.input[i] != ""

    def is_const(self, name):
        return name in self.consts

    def const(self, i, what="input"):
        name = self.node.input[i]
        if name not in self.consts:
            self.unsupported(f"{what} '{name}' must be a constant (initializer or foldable)")
        return self.consts[name]

    def t(self, i):
        """Input i as a graph Tensor (a known constant becomes a param of its own dtype: floats the Graph's,
        integers and bools as _array_dtype says)."""
        name = self.node.input[i]
        if name in self.tensors:
            return self.tensors[name]
        if name in self.consts:
            v = self.consts[name]
            if v.size == 0:
                self.fail(f"input '{name}' is empty (shape {list(v.shape)}); OpenPrim takes empty tensors only as "
                          "operands of a Concat (which leaves them out)")
            dtype = _array_dtype(v, self.g.dtype)
            if dtype is None:
                self.unsupported(f"constant '{name}' has dtype {v.dtype}")
            if v.dtype == np.uint64 and v.size and v.max() > np.iinfo(np.int64).max:
                self.fail(f"uint64 constant '{name}' has values beyond int64, which OpenPrim computes them in")
            t = self.g.param(self._pname(name), v.astype(np.float32) if dtype in FLOATS else v, dtype)
            self.tensors[name] = t
            return t
        raise OpenPrimError(f"ONNX node '{self.node.name or self.node.output[0]}' ({self.node.op_type}): "
                            f"input '{name}' is not defined before use")

    def _pname(self, name):
        self.nparams += 1
        clean = "".join(c if c.isalnum() or c in "_." else "_" for c in name) or "c"
        return f"{clean}_{self.nparams}"

    def param(self, value, hint="c"):
        return self.g.param(self._pname(hint), np.asarray(value, np.float32))

    def shape(self, i):
        name = self.node.input[i]
        if name in self.consts:
            return tuple(self.consts[name].shape)
        return self.t(i).shape

    def ints(self, i, what):
        """Constant input i as a list of ints."""
        return [int(v) for v in np.asarray(self.const(i, what)).reshape(-1)]

    def axis(self, axis, rank):
        if not -rank <= axis < rank:
            self.fail(f"axis={axis} is out of range for rank {rank}")
        return axis % rank

    # ------------------------------------------------------------------ entry
    def run(self):
        onnx = self.onnx
        gr = self.model.graph
        problems = _model_problems(self.model, self.input_shapes)
        if problems:
            raise OpenPrimError(problems[0])
        for init in gr.initializer:
            try:
                self.consts[init.name] = onnx.numpy_helper.to_array(init)
            except (ValueError, KeyError, TypeError) as e:  # data of another size or type than declared
                raise OpenPrimError(f"ONNX initializer '{init.name}' cannot be read (dims {list(init.dims)}, "
                                    f"data_type {init.data_type}): {_first_line(e)}; the file is corrupt") from None
        for inp in gr.input:
            if inp.name not in self.consts:  # else an initializer listed as an input (IR < 4 style): a weight
                self.tensors[inp.name] = self.g.input(inp.name, _input_shape(inp, self.input_shapes),
                                                      _elem_dtype(inp.type.tensor_type.elem_type, self.g.dtype))
        for node in gr.node:
            for name in node.input:
                self.readers.setdefault(name, f"node '{node.name or node.output[0]}'")
        for o in gr.output:
            self.readers.setdefault(o.name, "a graph output")
        self.convert_all(gr.node)
        outs = []
        for o in gr.output:
            if o.name in self.tensors:
                outs.append(self.tensors[o.name])
            elif o.name in self.consts:
                v = self.consts[o.name]
                dtype = _array_dtype(v, self.g.dtype)
                if dtype is None:
                    raise OpenPrimError(f"ONNX output '{o.name}' (a constant) has dtype {v.dtype}; "
                                        f"{_TYPES_SUPPORTED}")
                # A constant output: materialise it through a no-op so it is a computed value (integers and
                # bools are constants whatever the Graph does with them: they stay one).
                p = self.g.param(self._pname(o.name), v.astype(np.float32) if dtype in FLOATS else v, dtype)
                outs.append(self.g.reshape(p, p.shape) if dtype in FLOATS else p)
            else:
                raise OpenPrimError(f"ONNX output '{o.name}' is not produced by any node")
        self.g.output(*outs)
        merge_batched_matmuls(self.g)   # a 4-d MatMul reshaped to 3-d and back (as torch.onnx writes some)
        match_attention(self.g)  # MatMul/Transpose/Div/Add/Softmax/MatMul chains -> one attention op
        return self.g

    # ------------------------------------------------------------------ nodes
    def set(self, i, value):
        name = self.node.output[i]
        if isinstance(value, Tensor):
            self.tensors[name] = value
            stored = self.g._values.get(id(value))   # a constant the Graph evaluated: known here too
            if stored is not None:
                self.consts[name] = from_storage(stored, value.dtype)
        else:
            self.consts[name] = np.asarray(value)

    def fold(self, node) -> bool:
        """Evaluate a node whose inputs are all known with onnx's reference implementation (_reference_ops:
        its repairs); where that fails, False for an op the importer maps (the mapping computes it, the
        Graph evaluating what it can at build time), else the error."""
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        ins = [i for i in node.input if i]
        vis = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(self.consts[i].dtype),
                                             self.consts[i].shape) for i in ins]
        outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        m = helper.make_model(helper.make_graph([node], "fold", vis, outs),
                              opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            with np.errstate(all="ignore"):   # log(0), a cast of inf: as the model computes them (T5's buckets)
                res = ReferenceEvaluator(m, new_ops=_reference_ops()).run(None, {i: self.consts[i] for i in ins})
        except Exception as e:  # noqa: BLE001
            if hasattr(self, "op_" + node.op_type):
                return False
            self.fail(f"cannot fold constant node: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        for name, v in zip([o for o in node.output if o], res):
            self.consts[name] = np.asarray(v)
        return True

    def convert_all(self, nodes):
        for node in nodes:
            self.node = node
            if node.domain not in ("", "ai.onnx"):
                self.unsupported(f"domain '{node.domain}'")
            self.convert(node)
        self.node = None

    def convert(self, node):
        op = node.op_type
        a = self.attrs(node)
        ins = [i for i in node.input if i]
        if ins and op not in _NO_FOLD and all(i in self.consts for i in ins) and self.fold(node):
            return
        fn = getattr(self, "op_" + op, None)
        if fn is None:
            self.unsupported()
        doubles = [i for i in ins if i in self.consts and self.consts[i].dtype == np.float64]
        if doubles:
            self.fail(float64_message(f"constant '{doubles[0]}'", _FLOAT64_FIX))
        if not _unchanged_since_max_opset(op, self.opset):
            self.unsupported(f"its definition changed after opset {MAX_OPSET}")
        wanted = [i for i, o in enumerate(node.output) if o]      # an output named "" is not wanted
        try:
            res = fn(a)
        except OpenPrimError as e:
            msg = str(e)
            if msg.startswith("ONNX node"):
                raise
            if ": error: " in msg:  # the builder's "file:line: error: prim.op ...": drop the python location
                msg = msg.split(": error: ", 1)[1]
            self.fail(msg)
        if not isinstance(res, tuple):
            res = (res,)
        if wanted and wanted[-1] >= len(res):
            self.unsupported(f"only the first {len(res)} output(s) are supported")
        for i in wanted:
            if res[i] is not None:  # None: an output nothing reads (Dropout's mask)
                self.set(i, self.recorded(node.output[i], res[i]))
        keeps = _NONNEG.get(op)
        if keeps is not None and all(self.nonnegative(n) for n in (ins if keeps == "all" else
                                                                     [node.input[j] for j in keeps])):
            self.nonneg.update(o for o in node.output if o in self.tensors and self.tensors[o].dtype in INTEGERS)

    def recorded(self, name, value):
        """A Tensor result in the Graph dtype of the type ONNX infers for it (a cast where the mapping's
        result has another: the Graph promotes as torch does); other results as they are."""
        want = _elem_dtype(self.types.get(name), self.g.dtype)
        if isinstance(value, Tensor) and want is not None and value.dtype != want:
            return self.g.cast(value, want)
        return value

    def nonnegative(self, name) -> bool:
        """Whether the integer value `name` is known to be >= 0: a constant, a bool, or what _NONNEG derives."""
        if name in self.consts:
            v = self.consts[name]
            return v.dtype.kind in "iub" and (v.dtype.kind != "i" or not v.size or v.min() >= 0)
        return name in self.nonneg or (name in self.tensors and self.tensors[name].dtype == "bool")

    def op_If(self, a):
        """A constant condition: the nodes of the branch it takes, imported in its place."""
        branch = a["then_branch" if bool(np.asarray(self.const(0, "cond")).reshape(-1)[0]) else "else_branch"]
        node = self.node
        for init in branch.initializer:
            self.consts[init.name] = self.onnx.numpy_helper.to_array(init)
        self.convert_all(branch.node)
        self.node = node
        return tuple(self.tensors[o.name] if o.name in self.tensors else self.consts[o.name] for o in branch.output)

    @_import_time
    def op_Constant(self, a):
        return self._constant(a)

    @_import_time
    def op_Shape(self, a):
        shp = np.array(self.shape(0), np.int64)
        return shp[a.get("start", 0):a.get("end", len(shp))]

    @_import_time
    def op_Size(self, a):
        return np.array(math.prod(self.shape(0)), np.int64)

    def _constant(self, a):
        from onnx import numpy_helper
        if "value" in a:
            return numpy_helper.to_array(a["value"])
        if "value_float" in a:
            return np.array(a["value_float"], np.float32)
        if "value_floats" in a:
            return np.array(a["value_floats"], np.float32)
        if "value_int" in a:
            return np.array(a["value_int"], np.int64)
        if "value_ints" in a:
            return np.array(a["value_ints"], np.int64)
        self.unsupported("only tensor/float/int Constant values are supported")

    # --- lifting 1-d / n-d channel ops to the 4-d NCHW ops of the graph
    def _to4d(self, x):
        if x.ndim == 4:
            return x, None
        if x.ndim < 2:
            self.fail(f"expects an input of rank >= 2, got shape {x.shape}")
        n, c = x.shape[:2]
        rest = math.prod(x.shape[2:])
        return self.g.reshape(x, (n, c, rest, 1)), x.shape

    def _from4d(self, y, shape):
        return y if shape is None else self.g.reshape(y, shape)

    # --- conv and pools
    def _window(self, a, in_sp, k, strides, dil):
        nd = len(in_sp)
        auto = a.get("auto_pad", "NOTSET")
        if auto in ("NOTSET", ""):
            pads = list(a.get("pads", [0] * 2 * nd))
            return pads
        if auto == "VALID":
            return [0] * 2 * nd
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            begins, ends = [], []
            for i in range(nd):
                out = -(-in_sp[i] // strides[i])
                total = max((out - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - in_sp[i], 0)
                small = total // 2
                b = small if auto == "SAME_UPPER" else total - small
                begins.append(b)
                ends.append(total - b)
            return begins + ends
        self.unsupported(f"auto_pad='{auto}'")

    def _spatial(self, a, x_shape, k):
        nd = len(x_shape) - 2
        if nd not in (1, 2):
            self.unsupported(f"{nd}-d spatial input (only 1-d and 2-d)")
        strides = list(a.get("strides", [1] * nd))
        dil = list(a.get("dilations", [1] * nd))
        pads = self._window(a, list(x_shape[2:]), k, strides, dil)
        if nd == 1:  # lift to 2-d: width 1
            return (strides + [1], dil + [1], [pads[0], 0, pads[1], 0], True)
        return strides, dil, [pads[0], pads[1], pads[2], pads[3]], False

    def op_Conv(self, a):
        x = self.t(0)
        wshape = self.shape(1)
        k = list(wshape[2:])
        strides, dil, pads, lifted = self._spatial(a, x.shape, k)
        if self.is_const(self.node.input[1]):
            wv = self.consts[self.node.input[1]]
            w = self.param(wv[..., None] if lifted else wv, self.node.input[1])
        else:
            w = self.t(1)
            if lifted:
                w = self.g.reshape(w, tuple(wshape) + (1,))
        bias = None
        if self.has(2):
            bias = self.param(self.const(2), self.node.input[2]) if self.is_const(self.node.input[2]) else self.t(2)
        if lifted:
            x = self.g.reshape(x, tuple(x.shape) + (1,))
        y = self.g.conv2d(x, w, bias, stride=tuple(strides), padding=tuple(pads), dilation=tuple(dil),
                          groups=int(a.get("group", 1)))
        if lifted:
            y = self.g.reshape(y, y.shape[:3])
        return y

    def op_ConvTranspose(self, a):
        """1-d and 2-d: Graph.conv_transpose (the input gradient of the convolution it transposes), its pads
        from pads, auto_pad or output_shape (negative where output_shape is beyond the natural size)."""
        x = self.t(0)
        nd = x.ndim - 2
        if nd not in (1, 2):
            self.unsupported(f"{nd}-d spatial input (only 1-d and 2-d)")
        wshape = self.shape(1)
        groups, cin = int(a.get("group", 1)), x.shape[1]
        if len(wshape) != nd + 2 or wshape[0] != cin or cin % groups:
            self.fail(f"W of shape {wshape} does not fit {cin} input channels in {groups} groups")
        k = list(wshape[2:])
        strides, dil = list(a.get("strides", [1] * nd)), list(a.get("dilations", [1] * nd))
        out_pad = list(a.get("output_padding", [0] * nd))
        if any(p >= s for p, s in zip(out_pad, strides)):
            self.unsupported(f"output_padding {out_pad} not below strides {strides}")
        span = [(k[i] - 1) * dil[i] + 1 for i in range(nd)]
        auto = a.get("auto_pad", "NOTSET")
        if auto in ("SAME_UPPER", "SAME_LOWER") or "output_shape" in a:
            want = list(a["output_shape"])[-nd:] if "output_shape" in a else \
                [x.shape[2 + i] * strides[i] for i in range(nd)]
            total = [strides[i] * (x.shape[2 + i] - 1) + out_pad[i] + span[i] - want[i] for i in range(nd)]
            begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
            pads = begin + [t - b for t, b in zip(total, begin)]
        elif auto == "VALID":
            pads = [0] * 2 * nd
        elif auto in ("NOTSET", ""):
            pads = list(a.get("pads", [0] * 2 * nd))
        else:
            self.unsupported(f"auto_pad='{auto}'")
        return self.g.conv_transpose(x, self.t(1), self.t(2) if self.has(2) else None, strides, pads, dil, out_pad,
                                     groups)

    def _pool_view(self, a, x, k):
        """The pool as a 2-d one: (input, window, strides, dilations, [top, left, bottom, right] pads, the
        shape of its result as the node's, or None). 1-d gets a unit width; 3-d needs a trivial window (size
        1, stride 1, no padding) on depth, which joins the channels, or on height and width, which become one
        axis (PyTorch's LocalResponseNorm exports a size x 1 x 1 AveragePool)."""
        if x.ndim != 5:
            strides, dil, pads, lifted = self._spatial(a, x.shape, k)
            if not lifted:
                return x, k, strides, dil, pads, None
            return self.g.reshape(x, tuple(x.shape) + (1,)), k + [1], strides, dil, pads, lambda y: y.shape[:3]
        strides, dil = list(a.get("strides", [1] * 3)), list(a.get("dilations", [1] * 3))
        pads = self._window(a, list(x.shape[2:]), k, strides, dil)
        trivial = [k[i] == 1 and strides[i] == 1 and pads[i] == pads[i + 3] == 0 for i in range(3)]
        n, c, d, h, w = x.shape
        if trivial[1] and trivial[2]:
            return (self.g.reshape(x, (n, c, d, h * w)), [k[0], 1], [strides[0], 1], [dil[0], 1],
                    [pads[0], 0, pads[3], 0], lambda y: (n, c, y.shape[2], h, w))
        if trivial[0]:
            return (self.g.reshape(x, (n, c * d, h, w)), k[1:], strides[1:], dil[1:],
                    [pads[1], pads[2], pads[4], pads[5]], lambda y: (n, c, d) + tuple(y.shape[2:]))
        self.unsupported("3-d pooling with a window on depth and on height or width")

    def _pool(self, a, kind):
        if a.get("storage_order", 0) != 0:
            self.unsupported("storage_order=1")
        x, k, strides, dil, pads, restore = self._pool_view(a, self.t(0), list(a["kernel_shape"]))
        ceil = bool(a.get("ceil_mode", 0))
        pt, pl, pb, pr = pads
        if max(pt, pb) > k[0] // 2 or max(pl, pr) > k[1] // 2:
            # The graph's pools take at most half the kernel as padding (PyTorch's rule); ONNX takes any.
            # Pad explicitly instead: exact for max pooling and for averages that count the padding.
            if ceil:
                self.unsupported(f"pads {pads} larger than half the kernel {k} with ceil_mode=1")
            x = self.g.pad(x, [0, 0, pt, pl, 0, 0, pb, pr], -_F32_MAX if kind == "max" else 0.0)
            if kind == "avg" and not a.get("count_include_pad", 0):
                # average over the padded input, rescaled by kernel size / real elements per window
                h, w = x.shape[2] - pt - pb, x.shape[3] - pl - pr
                ones = np.pad(np.ones((h, w)), ((pt, pb), (pl, pr)))
                oh = (ones.shape[0] - k[0]) // strides[0] + 1
                ow = (ones.shape[1] - k[1]) // strides[1] + 1
                cnt = np.array([[ones[i * strides[0]:i * strides[0] + k[0], j * strides[1]:j * strides[1] + k[1]].sum()
                                 for j in range(ow)] for i in range(oh)])
                y = self.g.avg_pool2d(x, tuple(k), tuple(strides), 0, count_include_pad=True)
                y = self.g.mul(y, self.param((k[0] * k[1] / cnt)[None, None], "avg_rescale"))
                return y if restore is None else self.g.reshape(y, restore(y))
            pads = [0, 0, 0, 0]
        if kind == "max":
            y = self.g.max_pool2d(x, tuple(k), tuple(strides), tuple(pads), tuple(dil), ceil_mode=ceil)
        else:
            if any(d != 1 for d in dil):
                self.unsupported("AveragePool with dilations")
            y = self.g.avg_pool2d(x, tuple(k), tuple(strides), tuple(pads), ceil_mode=ceil,
                                  count_include_pad=bool(a.get("count_include_pad", 0)))
        return y if restore is None else self.g.reshape(y, restore(y))

    def op_MaxPool(self, a):
        return self._pool(a, "max")

    def op_AveragePool(self, a):
        return self._pool(a, "avg")

    def op_GlobalAveragePool(self, a):
        x, shp = self._to4d(self.t(0))
        y = self.g.global_avg_pool(x)
        if shp is not None:
            y = self.g.reshape(y, tuple(shp[:2]) + (1,) * (len(shp) - 2))
        return y

    # --- norms
    def _vec(self, i, c, what):
        """Input i as a [c] param: constants are broadcast/flattened; tensors must already be [c]."""
        if self.is_const(self.node.input[i]):
            v = np.asarray(self.consts[self.node.input[i]], np.float32)
            try:
                v = np.broadcast_to(v.reshape(-1) if v.size == c else v, (c,))
            except ValueError:
                self.fail(f"{what} has shape {v.shape}, expected ({c},)")
            return self.param(v, self.node.input[i])
        t = self.t(i)
        if t.shape != (c,):
            self.fail(f"{what} has shape {t.shape}, expected ({c},)")
        return t

    def op_BatchNormalization(self, a):
        x, shp = self._to4d(self.t(0))
        c, eps = x.shape[1], float(a.get("epsilon", 1e-5))
        if a.get("training_mode", 0):
            return self._batch_norm_training(x, shp, c, eps, float(a.get("momentum", 0.9)))
        vs = [self._vec(i, c, w) for i, w in enumerate(("scale", "B", "mean", "var"), start=1)]
        return self._from4d(self.g.batch_norm(x, *vs, eps=eps), shp)

    def _batch_norm_training(self, x, shp, c, eps, momentum):
        """training_mode=1: normalized by the batch's mean and (biased) variance per channel, as torch exports
        batch_norm(training=True) (BiT's weight standardization); the running statistics, where asked for,
        are input_mean * momentum + mean * (1 - momentum) and the same of the variance."""
        y = self._from4d(self.g.batch_norm_training(x, self._vec(1, c, "scale"), self._vec(2, c, "B"), eps=eps), shp)
        if not any(self.node.output[1:]):
            return y
        mean, inv_std = self.g.batch_norm_statistics(x, eps=eps)
        var = self.g.sub(self.g.div(self.param(1.0), self.g.mul(inv_std, inv_std)), self.param(eps))
        kept, new = self.param(momentum), self.param(1.0 - momentum)
        running = [self.g.add(self.g.mul(self._vec(i, c, what), kept), self.g.mul(stat, new))
                   for i, what, stat in ((3, "input_mean", mean), (4, "input_var", var))]
        return (y, *running)[:len(self.node.output)]

    def op_InstanceNormalization(self, a):
        eps = float(a.get("epsilon", 1e-5))
        grouped = self._group_view(self.t(0), eps)
        if grouped is not None:
            return grouped
        x, shp = self._to4d(self.t(0))
        c = x.shape[1]
        y = self.g.group_norm(x, c, self._vec(1, c, "scale"), self._vec(2, c, "B"), eps=eps)
        return self._from4d(y, shp)

    def _group_view(self, x, eps: float):
        """A group norm as torch.onnx writes it below opset 18: a map [N, C, H, W] reshaped to [N, G, C/G H W],
        instance-normalized (G channels), reshaped back (then the per-channel affine). Normalized as the
        map's group norm instead, its scale and shift repeated per channel, so the layout pass sees a norm
        of the NCHW map (no 4-d view of [N, G, C/G H W, 1] between transposes); None where x is not such a
        view or the scale and shift are not constants."""
        view = self.g.producer(x)
        if x.ndim != 3 or view is None or view.op != "reshape" or view.operands[0].ndim != 4:
            return None
        src = view.operands[0]
        n, c, h, w = src.shape
        groups = x.shape[1]
        if x.shape[0] != n or c % groups or x.shape[2] != c // groups * h * w or \
                not all(self.is_const(self.node.input[i]) for i in (1, 2)):
            return None
        scale, shift = (np.asarray(self.consts[self.node.input[i]], np.float32).reshape(-1) for i in (1, 2))
        if scale.size != groups or shift.size != groups:
            return None
        affine = [self.param(np.repeat(v, c // groups), self.node.input[i]) for i, v in ((1, scale), (2, shift))]
        return self.g.reshape(self.g.group_norm(src, groups, *affine, eps=eps), x.shape)

    def op_GroupNormalization(self, a):
        if a.get("stash_type", 1) != 1:
            self.unsupported("stash_type other than float")
        x, shp = self._to4d(self.t(0))
        c, groups = x.shape[1], int(a["num_groups"])
        if groups <= 0 or c % groups:
            self.fail(f"num_groups={groups} must divide the {c} channels")
        # (GroupNormalization-18, with per-group scale and bias, is deprecated: the checker rejects it)
        y = self.g.group_norm(x, groups, self._vec(1, c, "scale"), self._vec(2, c, "bias"),
                              eps=float(a.get("epsilon", 1e-5)))
        return self._from4d(y, shp)

    def op_LayerNormalization(self, a):
        x, k, vec = self._trailing_norm(a)
        return self.g.layer_norm(x, vec(1), vec(2), eps=float(a.get("epsilon", 1e-5)), normalized_ndim=k)

    def op_RMSNormalization(self, a):
        """RMSNormalization-23: x / sqrt(mean(x^2) + epsilon) * scale over the dims from `axis` on."""
        x, k, vec = self._trailing_norm(a)
        return self.g.rms_norm(x, vec(1), eps=float(a.get("epsilon", 1e-5)), normalized_ndim=k)

    def _trailing_norm(self, a):
        """(x, number of normalized trailing dims, vec(i): input i as a parameter of the normalized shape)
        of a Layer/RMSNormalization node."""
        if a.get("stash_type", 1) != 1:
            self.unsupported("stash_type other than float")
        x = self.t(0)
        r = x.ndim
        axis = int(a.get("axis", -1))
        if not -r <= axis < r:
            self.fail(f"axis={axis} is out of range for rank {r}")
        k = r - axis % r
        norm_shape = x.shape[r - k:]

        def vec(i):
            if not self.has(i):
                return None
            if self.is_const(self.node.input[i]):
                v = np.asarray(self.consts[self.node.input[i]], np.float32)
                try:
                    v = np.broadcast_to(v, norm_shape)
                except ValueError:
                    v = None
                if v is not None:
                    return self.param(v, self.node.input[i])
            t = self.t(i)
            if t.shape != norm_shape:
                self.unsupported(f"scale/bias of shape {t.shape} for normalized shape {norm_shape}")
            return t
        return x, k, vec

    # --- activations
    def op_Relu(self, a):
        x = self.t(0)
        return self.g.relu(x) if x.dtype in FLOATS else self.g.maximum(x, 0)
    def op_Sigmoid(self, a): return self.g.sigmoid(self.t(0))
    def op_Tanh(self, a): return self.g.tanh(self.t(0))
    def op_LeakyRelu(self, a): return self.g.leaky_relu(self.t(0), float(a.get("alpha", 0.01)))
    def op_Elu(self, a): return self.g.elu(self.t(0), float(a.get("alpha", 1.0)))
    def op_Neg(self, a):
        x = self.t(0)
        return self.g.mul(x, -1.0 if x.dtype in FLOATS else -1)
    def op_Exp(self, a): return self.g.exp(self.t(0))
    def op_Log(self, a): return self.g.log(self.t(0))
    def op_Sqrt(self, a): return self.g.sqrt(self.t(0))
    def op_Abs(self, a):
        x = self.t(0)
        return self.g.abs(x) if x.dtype in FLOATS else self.g.where(self.g.lt(x, 0), self.g.mul(x, -1), x)
    def op_Erf(self, a): return self.g.erf(self.t(0))
    def op_Reciprocal(self, a): return self.g.div(1.0, self.t(0))

    def op_Selu(self, a):
        alpha = float(a.get("alpha", 1.67326319217681884765625))  # ONNX's defaults (float32 values)
        gamma = float(a.get("gamma", 1.05070102214813232421875))
        return self.g.mul(self.g.elu(self.t(0), alpha), gamma)

    def _softplus(self, x):
        """log(1 + exp(x)) as relu(x) + log(1 + exp(-|x|)): no overflow for large x."""
        return self.g.add(self.g.relu(x), self.g.log(self.g.add(self.g.exp(self.g.mul(self.g.abs(x), -1.0)), 1.0)))

    def op_Softplus(self, a): return self._softplus(self.t(0))
    def op_Softsign(self, a): return self.g.div(self.t(0), self.g.add(self.g.abs(self.t(0)), 1.0))

    def op_Mish(self, a):
        x = self.t(0)
        return self.g.mul(x, self.g.tanh(self._softplus(x)))

    def op_PRelu(self, a):
        """x for x >= 0, slope * x below: relu(x) - slope * relu(-x), exact (one term is 0)."""
        x = self.t(0)
        try:
            ok = np.broadcast_shapes(self.shape(1), x.shape) == x.shape
        except ValueError:
            ok = False
        if not ok:
            self.fail(f"slope of shape {self.shape(1)} does not broadcast to X {x.shape}")
        return self.g.sub(self.g.relu(x), self.g.mul(self.t(1), self.g.relu(self.g.mul(x, -1.0))))

    def op_Gelu(self, a):
        approx = a.get("approximate", "none")
        if approx not in ("none", "tanh"):
            self.unsupported(f"approximate='{approx}'")
        return self.g.gelu(self.t(0), approx)

    def op_Clip(self, a):
        if self.t(0).dtype not in FLOATS or \
                any(self.has(i) and not self.is_const(self.node.input[i]) for i in (1, 2)):  # integers, computed bounds
            y = self.g.maximum(self.t(0), self.t(1)) if self.has(1) else self.t(0)
            return self.g.minimum(y, self.t(2)) if self.has(2) else y
        lo = float(self.const(1, "min").reshape(())) if self.has(1) else -_F32_MAX
        hi = float(self.const(2, "max").reshape(())) if self.has(2) else _F32_MAX
        lo, hi = max(lo, -_F32_MAX), min(hi, _F32_MAX)
        return self.g.clamp(self.t(0), lo, hi)

    def op_HardSigmoid(self, a):
        return self.g.hardsigmoid(self.t(0), float(a.get("alpha", 0.2)), float(a.get("beta", 0.5)))

    def op_HardSwish(self, a): return self.g.hardswish(self.t(0))

    # --- elementwise binary
    def _binary(self, fn):
        shapes = [self.shape(0), self.shape(1)]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            self.fail(f"shapes {shapes[0]} and {shapes[1]} do not broadcast")
        x, y = self.t(0), self.t(1)
        for i, other in ((0, y), (1, x)):   # an integer constant a float op reads (Pow's exponent): exact
            name = self.node.input[i]
            if other.dtype in FLOATS and name in self.consts:
                inexact = inexact_int(self.consts[name], self.g.dtype, name)
                if inexact:
                    self.fail(inexact)
        return fn(x, y)

    def op_Add(self, a): return self._binary(self.g.add)
    def op_Sub(self, a): return self._binary(self.g.sub)
    def op_Mul(self, a): return self._binary(self.g.mul)

    def op_Div(self, a):
        """Integers: ONNX truncates toward zero. The Graph's integer division floors: the same where both
        operands are known non-negative, else one more where the remainder is nonzero and the signs differ."""
        if self.t(0).dtype in FLOATS or self.t(1).dtype in FLOATS:
            return self._binary(self.g.div)
        return self._binary(self._trunc_div)

    def _trunc_div(self, x, y):
        q = self.g.floor_divide(x, y)
        if self.nonnegative(self.node.input[0]) and self.nonnegative(self.node.input[1]):
            return q
        r = self.g.sub(x, self.g.mul(q, y))
        off = self.g.logical_and(self.g.ne(r, 0), self.g.logical_xor(self.g.lt(x, 0), self.g.lt(y, 0)))
        return self.g.add(q, self.g.cast(off, q.dtype))

    def op_Mod(self, a):
        """Integers: fmod=0 takes the divisor's sign (x - floor(x / y) * y), fmod=1 the dividend's (C's fmod)."""
        x, y = self.t(0), self.t(1)
        if x.dtype in FLOATS or y.dtype in FLOATS:
            self.unsupported("Mod of float tensors (integers only)")
        div = self._trunc_div if a.get("fmod", 0) else self.g.floor_divide
        return self._binary(lambda x, y: self.g.sub(x, self.g.mul(div(x, y), y)))

    def op_Equal(self, a): return self._binary(self.g.eq)
    def op_Less(self, a): return self._binary(self.g.lt)
    def op_LessOrEqual(self, a): return self._binary(self.g.le)
    def op_Greater(self, a): return self._binary(self.g.gt)
    def op_GreaterOrEqual(self, a): return self._binary(self.g.ge)
    def op_And(self, a): return self._binary(self.g.logical_and)
    def op_Or(self, a): return self._binary(self.g.logical_or)
    def op_Xor(self, a): return self._binary(self.g.logical_xor)
    def op_Not(self, a): return self.g.logical_not(self.t(0))

    def op_IsNaN(self, a):
        x = self.t(0)
        return self.g.ne(x, x)

    def op_IsInf(self, a):
        x = self.t(0)
        pos, neg = a.get("detect_positive", 1), a.get("detect_negative", 1)
        if pos and neg:
            return self.g.eq(self.g.abs(x), math.inf)
        if pos or neg:
            return self.g.eq(x, math.inf if pos else -math.inf)
        return self.g.logical_and(self.g.eq(x, math.inf), self.g.eq(x, -math.inf))   # neither: all False

    def op_Where(self, a):
        shapes = [self.shape(i) for i in range(3)]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            self.fail(f"shapes {shapes[0]}, {shapes[1]} and {shapes[2]} do not broadcast")
        return self.g.where(self.t(0), self.t(1), self.t(2))

    def op_Pow(self, a): return self._binary(self.g.pow)

    def _variadic(self, fn):
        y = self.t(0)
        for i in range(1, len(self.node.input)):
            y = fn(y, self.t(i))
        return y

    def op_Sum(self, a): return self._variadic(self.g.add)
    def op_Max(self, a): return self._variadic(self.g.maximum)
    def op_Min(self, a): return self._variadic(self.g.minimum)

    def op_Mean(self, a):
        n = len(self.node.input)
        return self.g.mul(self._variadic(self.g.add), 1.0 / n) if n > 1 else self.t(0)

    # --- matmul / gemm
    def op_Gemm(self, a):
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        trans_b = bool(a.get("transB", 0))
        x = self.t(0)
        if x.ndim != 2:
            self.fail(f"A must be 2-d, got {x.shape}")
        if a.get("transA", 0):
            x = self.g.transpose(x, (1, 0))
        bname = self.node.input[1]
        if self.is_const(bname):
            bv = np.asarray(self.consts[bname], np.float64) * alpha
            b, alpha = self.param(bv, bname), 1.0
        else:
            b = self.t(1)
        n = b.shape[0] if trans_b else b.shape[1]
        bias, late = None, None
        if self.has(2) and beta != 0.0:
            cname = self.node.input[2]
            if self.is_const(cname):
                cv = np.asarray(self.consts[cname], np.float64) * beta
                if cv.size == n and cv.shape[-1:] == (n,) and alpha == 1.0:  # [N] or [1, N]: a bias
                    bias = self.param(cv.reshape(-1), cname)
                elif cv.size == 1 and alpha == 1.0:
                    bias = self.param(np.full((n,), cv.reshape(())), cname)
                else:
                    late = self.param(cv, cname)
            else:
                late = self.t(2)
                if beta != 1.0:
                    late = self.g.mul(late, beta)
        y = self.g.matmul(x, b, bias, transpose_rhs=trans_b)
        if alpha != 1.0:
            y = self.g.mul(y, alpha)
        if late is not None:
            y = self.g.add(y, late)
        return y

    def _bcast_batch(self, x, i, batch):
        """x ([..., m, n]) broadcast to batch + [m, n]: a constant is broadcast at import time, a
        tensor by reshape and repeated concatenation."""
        full = batch + tuple(x.shape[-2:])
        if tuple(x.shape) == full:
            return x
        if self.is_const(self.node.input[i]) and self.consts[self.node.input[i]].ndim == x.ndim:
            return self.param(np.broadcast_to(self.consts[self.node.input[i]], full), self.node.input[i])
        x = self.g.reshape(x, (1,) * (len(full) - x.ndim) + tuple(x.shape))
        for ax, d in enumerate(batch):
            if x.shape[ax] != d:
                x = self.g.concat([x] * d, axis=ax)
        return x

    def op_MatMul(self, a):
        x, w = self.t(0), self.t(1)
        xs, ws = x.shape, w.shape
        if len(xs) == 0 or len(ws) == 0:
            self.fail("MatMul operands must not be scalars")
        if len(xs) == 1:
            x = self.g.reshape(x, (1,) + xs)
        if len(ws) == 1:
            w = self.g.reshape(w, ws + (1,))
        if w.ndim > 2 and tuple(x.shape[:-2]) != tuple(w.shape[:-2]):
            batch = tuple(np.broadcast_shapes(tuple(x.shape[:-2]), tuple(w.shape[:-2])))
            x = self._bcast_batch(x, 0, batch)
            w = self._bcast_batch(w, 1, batch)
        y = self.g.matmul(x, w)
        out = np.broadcast_shapes(tuple(xs[:-2]), tuple(ws[:-2])) + \
            ((xs[-2],) if len(xs) >= 2 else ()) + ((ws[-1],) if len(ws) >= 2 else ())
        if tuple(y.shape) != tuple(out):
            y = self.g.reshape(y, out)
        return y

    def op_LSTM(self, a):
        """LSTM unrolled over its (static) sequence: per direction one GEMM of every step's input by W with
        both biases, then per step the recurrent GEMM of H by R, the gates (ONNX order i, o, f, c; peepholes
        P if given), C and H; Y stacks the H of every step. W, R, B and P constants (sliced per direction
        at import) or run-time values; the default activations (sigmoid, tanh, tanh), no clip, no
        input_forget, every sequence whole (sequence_lens absent or the full length); layout 0 and 1
        (batch first); initial H and C optional (else zeros, left out)."""
        x = self.t(0)
        hidden, direction = int(a["hidden_size"]), a.get("direction", "forward")
        dirs = 2 if direction == "bidirectional" else 1
        default = ["Sigmoid", "Tanh", "Tanh"] * dirs
        if [act.capitalize() for act in a.get("activations", default)] != default or "clip" in a or \
                a.get("input_forget", 0):
            self.unsupported("activations other than sigmoid, tanh, tanh, clip or input_forget")
        batch_first = int(a.get("layout", 0)) == 1
        if batch_first:
            x = self.g.transpose(x, [1, 0, 2])
        seq, batch, width = x.shape
        if self.has(4) and not (self.is_const(self.node.input[4]) and np.all(self.const(4) == seq)):
            self.unsupported("sequence_lens other than the whole sequence")
        if tuple(self.shape(1)) != (dirs, 4 * hidden, width) or tuple(self.shape(2)) != (dirs, 4 * hidden, hidden):
            self.fail(f"W {list(self.shape(1))} and R {list(self.shape(2))} do not fit {dirs} direction(s) of "
                      f"hidden size {hidden} over inputs of width {width}")
        g = self.g

        def part(i, d, lo, hi):
            """Input i's direction d, columns [lo, hi) of its last axis."""
            v = g.slice(self.t(i), [d], [d + 1], axes=[0])
            v = g.slice(v, [lo], [hi], axes=[v.ndim - 1]) if (lo, hi) != (0, v.shape[-1]) else v
            return g.reshape(v, list(v.shape[1:]))
        ys, hs, cs = [], [], []
        for d in range(dirs):
            bias = g.add(part(3, d, 0, 4 * hidden), part(3, d, 4 * hidden, 8 * hidden)) if self.has(3) else None
            xw = g.matmul(g.reshape(x, [seq * batch, width]), part(1, d, 0, width), bias, transpose_rhs=True)
            xw = g.reshape(xw, [seq, batch, 4 * hidden])
            h, c = (g.reshape(g.slice(self.t(i), [d], [d + 1], axes=[1 if batch_first else 0]), [batch, hidden])
                    if self.has(i) else None for i in (5, 6))
            rd = part(2, d, 0, hidden)
            p = [part(7, d, k * hidden, (k + 1) * hidden) for k in range(3)] if self.has(7) else None
            steps = [None] * seq
            for t in (reversed(range(seq)) if direction == "reverse" or d == 1 else range(seq)):
                gates = g.reshape(g.slice(xw, [t], [t + 1], axes=[0]), [batch, 4 * hidden])
                if h is not None:
                    gates = g.add(gates, g.matmul(h, rd, transpose_rhs=True))
                i, o, f, cand = (g.slice(gates, [k * hidden], [(k + 1) * hidden], axes=[1]) for k in range(4))
                if p is not None and c is not None:
                    i, f = g.add(i, g.mul(p[0], c)), g.add(f, g.mul(p[2], c))
                i, cand = g.sigmoid(i), g.tanh(cand)
                c = g.mul(i, cand) if c is None else g.add(g.mul(g.sigmoid(f), c), g.mul(i, cand))
                if p is not None:
                    o = g.add(o, g.mul(p[1], c))
                h = g.mul(g.sigmoid(o), g.tanh(c))
                steps[t] = g.reshape(h, [1, 1, batch, hidden])
            ys.append(g.concat(steps, 0) if seq > 1 else steps[0])
            hs.append(g.reshape(h, [1, batch, hidden]))
            cs.append(g.reshape(c, [1, batch, hidden]))
        y, yh, yc = (g.concat(v, 0 if v is not ys else 1) if dirs > 1 else v[0] for v in (ys, hs, cs))
        if batch_first:
            y, yh, yc = g.transpose(y, [2, 0, 1, 3]), g.transpose(yh, [1, 0, 2]), g.transpose(yc, [1, 0, 2])
        return y, yh, yc

    def op_Einsum(self, a):
        """One or two operands as transposes, sums and one batched matmul: letters of both operands and the
        output are the batch, of both but not the output contracted (K), of one operand and the output its
        free dims (M or N), of one operand only summed away first. Ellipses and repeated letters within an
        operand (diagonals) are refused."""
        terms, out = _einsum_terms(str(a["equation"]), len(self.node.input), self.fail)
        xs = [self.t(i) for i in range(len(terms))]
        for x, term in zip(xs, terms):
            if x.ndim != len(term):
                self.fail(f"operand '{term}' of the equation has {len(term)} dims, the input has shape {x.shape}")
        sizes = {}
        for x, term in zip(xs, terms):
            for letter, n in zip(term, x.shape):
                if sizes.setdefault(letter, n) != n:
                    self.fail(f"dimension '{letter}' is {sizes[letter]} in one operand and {n} in another")
        shared = [set(out).union(*(t for j, t in enumerate(terms) if j != i)) for i in range(len(terms))]
        xs = [self._einsum_sum_away(x, term, keep) for x, term, keep in zip(xs, terms, shared)]
        terms = [[c for c in term if c in keep] for term, keep in zip(terms, shared)]
        if len(xs) == 1:
            return self.g.transpose(xs[0], [terms[0].index(c) for c in out]) if terms[0] != list(out) else xs[0]
        (x, tx), (y, ty) = zip(xs, terms)
        batch = [c for c in tx if c in ty and c in out]
        k = [c for c in tx if c in ty and c not in out]
        m, n = [c for c in tx if c not in ty], [c for c in ty if c not in tx]
        size = lambda letters: math.prod(sizes[c] for c in letters)   # noqa: E731
        lhs = self.g.reshape(self._einsum_order(x, tx, batch + m + k), (size(batch), size(m), size(k)))
        rhs = self.g.reshape(self._einsum_order(y, ty, batch + k + n), (size(batch), size(k), size(n)))
        prod = self.g.reshape(self.g.matmul(lhs, rhs), tuple(sizes[c] for c in batch + m + n))
        return self._einsum_order(prod, batch + m + n, list(out))

    def _einsum_sum_away(self, x, term, keep):
        """x summed over its letters not in `keep` (those of the output and of the other operand)."""
        alone = [i for i, c in enumerate(term) if c not in keep]
        return self.g.reduce(x, "sum", alone) if alone else x

    def _einsum_order(self, x, have, want):
        return x if list(have) == list(want) else self.g.transpose(x, [list(have).index(c) for c in want])

    # --- softmax
    def op_Softmax(self, a): return self.g.softmax(self.t(0), int(a.get("axis", -1)))
    def op_LogSoftmax(self, a): return self.g.log_softmax(self.t(0), int(a.get("axis", -1)))

    def op_Attention(self, a):
        """Attention-23/24/25 without a KV cache, as one prim.attention: 4-d [B, heads, S, D] Q, K, V, or 3-d
        [B, S, heads * D] ones split by q_num_heads/kv_num_heads (the result joined back). K/V heads that
        several query heads share (GQA, MQA) are repeated, one per query head."""
        for i, what in ((4, "past_key"), (5, "past_value"), (6, "nonpad_kv_seqlen")):
            if self.has(i):
                self.unsupported(f"the {what} input (a KV cache)")
        if float(a.get("softcap", 0.0)) != 0.0:
            self.unsupported(f"softcap={a['softcap']} (only 0)")
        if int(a.get("qk_matmul_output_mode", 0)) != 0:
            self.unsupported(f"qk_matmul_output_mode={a['qk_matmul_output_mode']} (only 0)")
        for side in ("left_window_size", "right_window_size"):
            if int(a.get(side, -1)) != -1:
                self.unsupported(f"{side}={a[side]} (sliding windows)")
        q, k, v = self.t(0), self.t(1), self.t(2)
        if not q.ndim == k.ndim == v.ndim or q.ndim not in (3, 4):
            self.fail(f"Q, K, V must all be 3-d or all 4-d, got {q.shape}, {k.shape}, {v.shape}")
        three_d = q.ndim == 3
        if three_d:
            if "q_num_heads" not in a or "kv_num_heads" not in a:
                self.fail("3-d Q, K, V need the q_num_heads and kv_num_heads attributes")
            heads = int(a["q_num_heads"]), int(a["kv_num_heads"]), int(a["kv_num_heads"])
            for x, h, what in zip((q, k, v), heads, "QKV"):
                if h <= 0 or x.shape[2] % h:
                    self.fail(f"{what} {x.shape}: its hidden size is not a multiple of {h} heads")
            q, k, v = (self.g.transpose(self.g.reshape(x, (x.shape[0], x.shape[1], h, x.shape[2] // h)), (0, 2, 1, 3))
                       for x, h in zip((q, k, v), heads))
        hq, hkv = q.shape[1], k.shape[1]
        if hq != hkv:
            if hq % hkv:
                self.fail(f"{hq} query heads are not a multiple of {hkv} key/value heads")
            k, v = (self._repeat_heads(x, hq // hkv) for x in (k, v))
        scale = float(a["scale"]) if "scale" in a else None
        mask, guard = self._attention_mask(q.shape[2], k.shape[2], bool(a.get("is_causal", 0)))
        y = self.g.attention(q, k, v, mask, causal=bool(a.get("is_causal", 0)), scale=scale)
        if guard:   # a query row that a computed boolean mask leaves no key: 0, as ONNX defines it (not NaN)
            y = self.g.where(self.g.ne(y, y), 0.0, y)
        if not three_d:
            return y
        b, h, s, d = y.shape
        return self.g.reshape(self.g.transpose(y, (0, 2, 1, 3)), (b, s, h * d))

    def _repeat_heads(self, x, n):
        """[B, H, S, D] -> [B, H * n, S, D], each head n times in a row (numpy's repeat on axis 1)."""
        b, h, s, d = x.shape
        x5 = self.g.reshape(x, (b, h, 1, s, d))
        return self.g.reshape(self.g.concat([x5] * n, 2), (b, h * n, s, d))

    def _attention_mask(self, sq, skv, causal):
        """(Attention's attn_mask (input 3) as prim.attention's additive mask, or None; whether the result
        needs the NaN guard). True keeps a key (0), False removes it (-inf). A mask narrower than the keys
        leaves the keys past it out (ONNX pads it with False / -inf). A constant mask may not remove every
        key of a query (ONNX defines that row as 0; the decomposed softmax would give NaN); a computed
        boolean one may: its rows of NaN become 0 (the guard)."""
        if not self.has(3):
            return None, False
        name = self.node.input[3]
        if not self.is_const(name):
            m = self.t(3)
            guard = m.dtype == "bool"
            if guard:
                m = self.g.where(m, 0.0, -math.inf)
            elif m.dtype not in FLOATS:
                self.fail(f"attn_mask '{name}' has dtype {m.dtype}; it must be boolean or float")
            if m.shape[-1] < skv:
                m = self.g.pad(m, [0] * (2 * m.ndim - 1) + [skv - m.shape[-1]], -math.inf if guard else -_F32_MAX)
            return m, guard
        m = np.asarray(self.consts[name])
        if m.dtype == np.bool_:
            m = np.where(m, 0.0, -np.inf)
        elif not _is_float(m.dtype):
            self.fail(f"attn_mask '{name}' has dtype {m.dtype}; it must be boolean or float")
        m = np.asarray(m, np.float32)
        if m.ndim == 0 or m.shape[-1] > skv:
            self.fail(f"attn_mask {m.shape} does not fit {skv} keys")
        m = np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, skv - m.shape[-1])], constant_values=-np.inf)
        try:
            bias = m + np.where((np.arange(skv)[None, :] > np.arange(sq)[:, None]) & causal, -np.inf, 0.0)
        except ValueError:
            self.fail(f"attn_mask {m.shape} does not broadcast to the {sq} x {skv} scores")
        if np.isneginf(bias).all(axis=-1).any():
            self.unsupported("an attn_mask that removes every key of a query row")
        return self.param(m, name), False

    # --- shape ops (tensors)
    def op_Identity(self, a): return self.t(0)

    def op_Cast(self, a):
        """To any float type (the Graph's one: the identity between floats), integer type or bool: float ->
        integer truncates toward zero, anything -> bool is != 0."""
        return self._cast(self.t(0), a.get("to", 0))

    def op_CastLike(self, a):
        """To the type of input 1 (a constant's, or a computed tensor's Graph dtype)."""
        like = self.node.input[1]
        if like not in self.consts:
            return self.g.cast(self.t(0), self.t(1).dtype)
        return self._cast(self.t(0), self.onnx.helper.np_dtype_to_tensor_dtype(self.consts[like].dtype))

    def _cast(self, x, to):
        if _FLOAT_NAMES.get(to) == "float64":
            self.fail(float64_message("a computed tensor cast to DOUBLE", _FLOAT64_FIX))
        dtype = _elem_dtype(to, self.g.dtype)
        if dtype is None:
            self.unsupported(f"Cast of a computed tensor to {_type_name(to)}")
        return self.g.cast(x, dtype)

    def op_Dropout(self, a):
        """Inference: the identity. The mask output imports only while nothing reads it."""
        if self.has(2):
            tm = self.const(2, "training_mode")
            if bool(np.asarray(tm).reshape(())):
                self.unsupported("training_mode=True")
        mask = self.node.output[1] if len(self.node.output) > 1 else ""
        if mask in self.readers:
            self.unsupported(f"its mask output '{mask}' is read by {self.readers[mask]}")
        y = self.consts[self.node.input[0]] if self.is_const(self.node.input[0]) else self.t(0)
        return y, None

    def op_Reshape(self, a):
        x = self.t(0)
        shape = [int(s) for s in self.const(1, "shape").reshape(-1)]
        allowzero = int(a.get("allowzero", 0))
        out = [x.shape[i] if (s == 0 and not allowzero) else s for i, s in enumerate(shape)]
        if out.count(-1) > 1:
            self.fail(f"shape {shape} has more than one -1")
        if -1 in out:
            known = math.prod(s for s in out if s != -1)
            if known == 0 or math.prod(x.shape) % known:
                self.fail(f"cannot reshape {x.shape} to {shape}")
            out[out.index(-1)] = math.prod(x.shape) // known
        if math.prod(out) != math.prod(x.shape) or any(s <= 0 for s in out):
            self.fail(f"cannot reshape {x.shape} to {shape}")
        return self.g.reshape(x, tuple(out))

    def op_Flatten(self, a):
        x = self.t(0)
        r = x.ndim
        axis = int(a.get("axis", 1))
        if not -r <= axis <= r:
            self.fail(f"axis={axis} is out of range for rank {r}")
        axis %= (r + 1) if axis >= 0 else r
        return self.g.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))

    def op_Transpose(self, a):
        x = self.t(0)
        perm = list(a.get("perm", list(reversed(range(x.ndim)))))
        return self.g.transpose(x, perm)

    def op_Concat(self, a):
        """Empty operands (zero-size constants: an empty Slice) are left out."""
        xs = [self.t(i) for i in range(len(self.node.input))
              if self.has(i) and not (self.is_const(self.node.input[i]) and self.consts[self.node.input[i]].size == 0)]
        axis = int(a["axis"])
        if not xs:
            self.fail("every operand is empty")
        if len(xs) == 1:
            return xs[0]
        return self.g.concat(xs, axis % xs[0].ndim)

    def _axes(self, a, i, rank):
        if self.has(i):
            axes = [int(v) for v in self.const(i, "axes").reshape(-1)]
        else:
            axes = list(a.get("axes", []))
        return [ax % rank for ax in axes]

    def op_Unsqueeze(self, a):
        x = self.t(0)
        raw = [int(v) for v in self.const(1, "axes").reshape(-1)]
        r = x.ndim + len(raw)
        axes = sorted(ax % r for ax in raw)
        out = list(x.shape)
        for ax in axes:
            out.insert(ax, 1)
        return self.g.reshape(x, tuple(out))

    def op_Squeeze(self, a):
        x = self.t(0)
        axes = self._axes(a, 1, x.ndim) if self.has(1) else [i for i, s in enumerate(x.shape) if s == 1]
        for ax in axes:
            if x.shape[ax] != 1:
                self.fail(f"cannot squeeze axis {ax} of size {x.shape[ax]}")
        return self.g.reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in axes))

    def op_Pad(self, a):
        """constant, reflect (pads < size) and edge; negative pads crop."""
        mode = a.get("mode", "constant")
        if mode not in ("constant", "reflect", "edge"):
            self.unsupported(f"mode='{mode}' (constant, reflect and edge are supported)")
        x = self.t(0)
        r = x.ndim
        pads = self.ints(1, "pads")
        value = 0.0
        if self.has(2):
            value = float(np.asarray(self.const(2, "constant_value")).reshape(()))
        if self.has(3):
            axes = [int(v) % r for v in self.const(3, "axes").reshape(-1)]
            full = [0] * (2 * r)
            for j, ax in enumerate(axes):
                full[ax], full[ax + r] = pads[j], pads[j + len(axes)]
            pads = full
        if len(pads) != 2 * r:
            self.fail(f"pads needs {2 * r} values, got {len(pads)}")
        if any(p < 0 for p in pads):
            x = self.g.slice(x, [max(-p, 0) for p in pads[:r]], [d - max(-p, 0) for d, p in zip(x.shape, pads[r:])])
            pads = [max(p, 0) for p in pads]
        if not any(pads):
            return x
        if mode == "constant":
            return self.g.pad(x, pads, value)
        for ax in range(r):
            begin, end, d = pads[ax], pads[ax + r], x.shape[ax]
            if not begin and not end:
                continue
            if mode == "edge":
                x = self.g.take(x, [0] * begin + list(range(d)) + [d - 1] * end, ax)
                continue
            if max(begin, end) >= d:
                self.fail(f"reflect pads {begin} and {end} of axis {ax} must be smaller than its size {d}")
            x = self.g.take(x, list(range(begin, 0, -1)) + list(range(d)) + list(range(d - 2, d - 2 - end, -1)), ax)
        return x

    # --- slicing, gathering, splitting, resizing
    def op_Slice(self, a):
        """steps >= 1."""
        x = self.t(0)
        starts, ends = self.ints(1, "starts"), self.ints(2, "ends")
        axes = self.ints(3, "axes") if self.has(3) else list(range(len(starts)))
        steps = self.ints(4, "steps") if self.has(4) else [1] * len(starts)
        if any(s < 0 for s in steps):
            self.unsupported(f"negative steps {steps}")
        if len({ax % max(x.ndim, 1) for ax in axes}) != len(axes):
            self.fail(f"axes {axes} name an axis twice")
        shape = list(x.shape)
        for b, e, ax, st in zip(starts, ends, axes, steps):
            shape[ax % max(x.ndim, 1)] = len(range(*slice(b, e, st).indices(x.shape[ax % max(x.ndim, 1)])))
        if 0 in shape:   # a zero-size constant: what a partial rotary embedding passes on when it rotates all
            return np.zeros(shape, np.float32 if x.dtype in FLOATS else np.int64)
        return self.g.slice(x, starts, ends, axes, steps)

    def op_Gather(self, a):
        """Indices computed at run time: prim.gather (an embedding lookup), its indices bounds-checked after
        each run. Constant indices: checked here; slices of float data (Graph.take), a prim.gather of
        integer or bool data."""
        x = self.t(0)
        axis = self.axis(int(a.get("axis", 0)), x.ndim)
        if not self.is_const(self.node.input[1]):
            return self._checked(self.g.gather, x, self._indices(1), axis)
        idx = self._const_indices(1, x.shape[axis], axis)
        if x.dtype not in FLOATS:
            return self.g.gather(x, idx, axis)
        n = x.shape[axis]
        y = self.g.take(x, [int(v) % n for v in idx.reshape(-1)], axis)
        out = tuple(x.shape[:axis]) + idx.shape + tuple(x.shape[axis + 1:])
        return y if y.shape == out else self.g.reshape(y, out)

    def _indices(self, i):
        """Input i, computed indices: an integer Tensor."""
        idx = self.t(i)
        if idx.dtype not in INTEGERS:
            self.fail(f"indices '{self.node.input[i]}' must be integers, got {idx.dtype}")
        return idx

    def _const_indices(self, i, n, axis, empty_ok=False):
        """Constant input i as indices into an axis of size n, checked: integers in [-n, n)."""
        idx = np.asarray(self.const(i, "indices"))
        if idx.dtype.kind not in "iu" or (idx.size == 0 and not empty_ok):
            self.fail(f"indices must be a non-empty integer tensor, got dtype {idx.dtype}, shape {idx.shape}")
        if ((idx < -n) | (idx >= n)).any():
            self.fail(f"indices {idx.reshape(-1).tolist()[:16]} are out of range for axis {axis} of size {n}")
        return idx.astype(np.int64)

    def _checked(self, op, *args):
        """Graph op `op` (gather, gather_elements) whose run-time bounds checks name this node."""
        n = len(self.g.checks)
        y = op(*args)
        node, idx = self.node.name or self.node.output[0], self.node.input[1]
        for j in range(n, len(self.g.checks)):
            t, message = self.g.checks[j]
            why = message.split(": ", 2)[-1] if message.count(": ") >= 2 else message
            self.g.checks[j] = (t, f"ONNX node '{node}' ({self.node.op_type}): indices '{idx}': {why}")
        return y

    def op_GatherElements(self, a):
        """prim.gather_elements; computed indices are bounds-checked after each run."""
        x = self.t(0)
        axis = self.axis(int(a.get("axis", 0)), x.ndim)
        if self.is_const(self.node.input[1]):
            return self.g.gather_elements(x, self._const_indices(1, x.shape[axis], axis), axis)
        return self._checked(self.g.gather_elements, x, self._indices(1), axis)

    def op_GatherND(self, a):
        """Constant indices (any batch_dims): the flat positions of the data they read, computed here, one
        prim.gather of the data flattened (a reshape where they read it all in order)."""
        x = self.t(0)
        b = int(a.get("batch_dims", 0))
        if not self.is_const(self.node.input[1]):
            self.unsupported("indices computed at run time (constant indices only)")
        idx = np.asarray(self.const(1, "indices"))
        k = idx.shape[-1] if idx.ndim else 0
        if idx.dtype.kind not in "iu" or idx.ndim < 1 or not 1 <= k <= x.ndim - b or idx.shape[:b] != x.shape[:b]:
            self.fail(f"indices {idx.dtype}{list(idx.shape)} do not index data {list(x.shape)} "
                      f"with batch_dims={b}")
        dims = np.array(x.shape[b:b + k])
        if ((idx < -dims) | (idx >= dims)).any():
            self.fail(f"indices out of range for the axes {dims.tolist()}")
        positions = np.arange(math.prod(x.shape)).reshape(x.shape)
        flat = _gather_nd(positions, idx % dims, b)
        if flat.size == positions.size and np.array_equal(flat.reshape(-1), positions.reshape(-1)):
            return self.g.reshape(x, flat.shape)
        return self.g.gather(self.g.reshape(x, (-1,)), flat, 0)

    def op_ScatterND(self, a):
        """Constant indices, reduction none or add: the flat positions of the data they address, computed
        here (Graph.put: a gather of the updates and a where, or their sums); MViTv2's in-place add of its
        relative position terms to a slice of the attention scores exports as one."""
        x = self.t(0)
        reduction = a.get("reduction", "none")
        if reduction not in ("none", "add"):
            self.unsupported(f"reduction='{reduction}' (only 'none' and 'add')")
        if not self.is_const(self.node.input[1]):
            self.unsupported("indices computed at run time (constant indices only)")
        idx = np.asarray(self.const(1, "indices"))
        k = idx.shape[-1] if idx.ndim else 0
        if idx.dtype.kind not in "iu" or not 1 <= k <= x.ndim:
            self.fail(f"indices {idx.dtype}{list(idx.shape)} do not index data {list(x.shape)}")
        dims = np.array(x.shape[:k])
        if ((idx < -dims) | (idx >= dims)).any():
            self.fail(f"indices out of range for the axes {dims.tolist()}")
        positions = _gather_nd(np.arange(math.prod(x.shape)).reshape(x.shape), idx % dims, 0)
        return self.g.put(x, positions, self.t(2), accumulate=reduction == "add")

    def op_CumSum(self, a):
        """The axis a constant input; exclusive and reverse."""
        x = self.t(0)
        axis = self.axis(int(np.asarray(self.const(1, "axis")).reshape(())), x.ndim)
        return self.g.cumsum(x, axis, bool(a.get("exclusive", 0)), bool(a.get("reverse", 0)))

    @_import_time
    def op_Range(self, a):
        """Of constants: a constant (folded before any op_ method: here the inputs are computed)."""
        start, limit, delta = (self.const(i, what) for i, what in enumerate(("start", "limit", "delta")))
        return np.arange(start, limit, delta).astype(start.dtype)

    @_import_time
    def op_ConstantOfShape(self, a):
        """Of a constant shape (Shape of a static one): a constant."""
        shape = self.ints(0, "shape")
        value = self.onnx.numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        return np.full(shape, value.reshape(-1)[0], value.dtype)

    def op_Split(self, a):
        """The split input, num_outputs, or equal parts."""
        x = self.t(0)
        axis = self.axis(int(a.get("axis", 0)), x.ndim)
        d, n = x.shape[axis], len(self.node.output)
        if self.has(1):
            sizes = self.ints(1, "split")
        elif "num_outputs" in a:  # opset 18: the last part is smaller when d does not divide evenly
            chunk = -(-d // int(a["num_outputs"]))
            sizes = [chunk] * (int(a["num_outputs"]) - 1) + [d - chunk * (int(a["num_outputs"]) - 1)]
        else:
            sizes = [d // n] * n
        if len(sizes) != n or sum(sizes) != d or min(sizes) <= 0:
            self.fail(f"split sizes {sizes} do not cut axis {axis} of size {d} into {n} non-empty parts")
        offsets = np.cumsum([0] + sizes).tolist()
        return tuple(x if size == d else self.g.slice(x, [offsets[i]], [offsets[i + 1]], axes=[axis])
                     for i, size in enumerate(sizes))

    def op_Expand(self, a):
        """Constant shape, numpy's (bidirectional) broadcasting: x, left-padded with unit axes to the result's
        rank, times a tensor of ones on the axes that it broadcasts (exact)."""
        x = self.t(0)
        shape = self.ints(1, "shape")
        try:
            out = tuple(np.broadcast_shapes(tuple(x.shape), tuple(shape)))
        except ValueError:
            self.fail(f"shape {shape} does not broadcast with the input's {list(x.shape)}")
        if min(out, default=1) < 1:
            self.fail(f"the result {list(out)} would be empty")
        if out == tuple(x.shape):
            return x
        padded = (1,) * (len(out) - x.ndim) + tuple(x.shape)
        if padded != tuple(x.shape):
            x = self.g.reshape(x, padded)
        if padded == out:
            return x
        if x.dtype not in FLOATS:   # integers and bools: prim.broadcast
            return self.g.broadcast_to(x, out)
        ones = self.param(np.ones([o if d == 1 else 1 for d, o in zip(padded, out)]), "expand_ones")
        return self.g.mul(x, ones)

    def op_Tile(self, a):
        """Constant repeats: x with a unit axis before each repeated one, times a broadcast tensor of ones
        (exact), viewed as the result."""
        x = self.t(0)
        reps = self.ints(1, "repeats")
        if len(reps) != x.ndim or min(reps, default=1) < 1:
            self.fail(f"repeats {reps} must be {x.ndim} positive values")
        if all(n == 1 for n in reps):
            return x
        split = self.g.reshape(x, [d for size in x.shape for d in (1, size)])
        if x.dtype not in FLOATS:   # integers and bools: prim.broadcast
            y = self.g.broadcast_to(split, [d for n, size in zip(reps, x.shape) for d in (n, size)])
        else:
            y = self.g.mul(split, self.param(np.ones([d for n in reps for d in (n, 1)]), "tile_ones"))
        return self.g.reshape(y, [n * size for n, size in zip(reps, x.shape)])

    def op_Resize(self, a):
        """Modes nearest and linear, any scales or sizes, every coordinate transformation but
        tf_crop_and_resize: nearest reads the input index of each output index per axis as onnx's reference
        computes it (`_nearest_sources`, every nearest_mode; Graph.take_axes), linear interpolates at the
        source coordinates (`_resize_coordinates`, Graph.interpolate), cubic too (cubic_coeff_a,
        exclude_outside)."""
        mode = a.get("mode", "nearest")
        if mode not in ("nearest", "linear", "cubic"):
            self.unsupported(f"mode='{mode}'")
        if mode != "nearest" and a.get("antialias", 0):
            self.unsupported(f"antialias=1 with mode='{mode}'")
        x = self.t(0)
        r = x.ndim
        axes = [self.axis(int(v), r) for v in a.get("axes", range(r))]
        sizes = self.ints(3, "sizes") if self.has(3) else []
        scales = np.asarray(self.const(2, "scales"), np.float64).reshape(-1) if self.has(2) else np.zeros(0)
        if sizes:
            if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
                self.unsupported(f"keep_aspect_ratio_policy='{a['keep_aspect_ratio_policy']}'")
            given, what = [(s / x.shape[ax]) for ax, s in zip(axes, sizes)], "sizes"
        else:
            given, what = scales.tolist(), "scales"
            sizes = [int(f * x.shape[ax]) for ax, f in zip(axes, given)]
        if len(given) != len(axes):
            self.fail(f"{what} needs {len(axes)} values, got {len(given)}")
        if not all(f > 0 and s > 0 for f, s in zip(given, sizes)):
            self.fail(f"{what} {[*given]} make an empty result")
        ctm = a.get("coordinate_transformation_mode", "half_pixel")
        nearest = a.get("nearest_mode", "round_prefer_floor")
        sources = [None] * r
        for ax, f, size in zip(axes, given, sizes):
            if mode != "nearest":
                sources[ax] = _resize_coordinates(ctm, x.shape[ax], size, f)
                if sources[ax] is None:
                    self.unsupported(f"coordinate_transformation_mode='{ctm}' with mode='{mode}'")
                continue
            sources[ax] = _nearest_sources(ctm, nearest, x.shape[ax], size, f)
            if sources[ax] is None:
                self.unsupported(f"coordinate_transformation_mode='{ctm}' with nearest_mode='{nearest}'")
        if mode != "nearest":
            return self.g.interpolate(x, sources, mode, float(a.get("cubic_coeff_a", -0.75)),
                                      bool(a.get("exclude_outside", 0)))
        return self.g.take_axes(x, sources)

    # --- reductions
    def _reduce(self, a, kind, before=None, after=None):
        """kind over the axes (attribute, or input from opset 18 / ReduceSum-13), keepdims; no axes:
        every axis, or the input itself with noop_with_empty_axes."""
        x = self.t(0)
        axes = self.ints(1, "axes") if self.has(1) else list(a.get("axes", []))
        if not axes and a.get("noop_with_empty_axes", 0):
            return x
        y = before(x) if before else x
        y = self.g.reduce(y, kind, axes or None, bool(a.get("keepdims", 1)))
        return after(y) if after else y

    def op_ReduceSum(self, a): return self._reduce(a, "sum")
    def op_ReduceMean(self, a): return self._reduce(a, "mean")
    def op_ReduceMax(self, a): return self._reduce(a, "max")
    def op_ReduceMin(self, a): return self._reduce(a, "min")
    def op_ReduceL1(self, a): return self._reduce(a, "sum", self.g.abs)
    def op_ReduceSumSquare(self, a): return self._reduce(a, "sum", lambda x: self.g.mul(x, x))
    def op_ReduceL2(self, a): return self._reduce(a, "sum", lambda x: self.g.mul(x, x), self.g.sqrt)

    def op_GlobalMaxPool(self, a):
        x = self.t(0)
        if x.ndim < 3:
            self.fail(f"expects an input of rank >= 3, got shape {x.shape}")
        return self.g.reduce(x, "max", list(range(2, x.ndim)), keepdims=True)

    def op_LRN(self, a):
        """x / (bias + alpha / size * (sum of x^2 over size channels around each)) ^ beta; the channel
        sum is an average pool of size x 1 over a (channels, pixels) view, times size."""
        x = self.t(0)
        if x.ndim < 3:
            self.fail(f"expects an input of rank >= 3, got shape {x.shape}")
        size = int(a["size"])
        alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0))
        n, c = x.shape[:2]
        squares = self.g.reshape(self.g.mul(x, x), (n, 1, c, math.prod(x.shape[2:])))
        lo = (size - 1) // 2
        mean = self.g.avg_pool2d(squares, (size, 1), 1, (lo, 0, size - 1 - lo, 0), count_include_pad=True,
                                 layout="NCHW")
        den = self.g.add(self.g.mul(mean, alpha), bias)  # alpha / size * sum = alpha * mean
        return self.g.div(x, self.g.pow(self.g.reshape(den, x.shape), beta))


@functools.cache
def _reference_ops() -> list:
    """Ops of onnx's reference evaluator that fold() replaces: GatherElements (onnx 1.16-1.23 fail on
    more than 32 values along the axis with indices narrower than the data, as torch.onnx writes BERT's
    token_type_ids: np.choose's limit, and a fallback that reshapes wrongly) and BatchNormalization (its
    implementation for opsets 9-13 mixes in batch statistics; BiT's weight standardization is one of
    constant filters)."""
    from onnx.reference.op_run import OpRun

    class BatchNormalization(OpRun):
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, training_mode=0, **_):
            """y in float64, rounded to x's type; with training_mode, the batch's statistics and the running
            ones (input * momentum + batch * (1 - momentum))."""
            x64, scale, bias, mean, var = (v.astype(np.float64) for v in (x, scale, bias, mean, var))
            if training_mode:
                axes = (0, *range(2, x.ndim))
                batch_mean, batch_var = x64.mean(axes), x64.var(axes)
                running = (mean * momentum + batch_mean * (1 - momentum), var * momentum + batch_var * (1 - momentum))
                mean, var = batch_mean, batch_var
            per_channel = (-1,) + (1,) * (x.ndim - 2)
            y = (x64 - mean.reshape(per_channel)) / np.sqrt(var.reshape(per_channel) + epsilon) \
                * scale.reshape(per_channel) + bias.reshape(per_channel)
            return tuple(v.astype(x.dtype) for v in ((y, *running) if training_mode else (y,)))

    class GatherElements(OpRun):
        op_domain = ""

        def _run(self, data, indices, axis=0):
            axis %= data.ndim
            idx = np.where(indices < 0, indices + data.shape[axis], indices)
            sub = data[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(idx.shape))]
            return (np.take_along_axis(sub, idx, axis),)
    return [GatherElements, BatchNormalization]


def _gather_nd(data: np.ndarray, indices: np.ndarray, batch_dims: int) -> np.ndarray:
    """ONNX GatherND of numpy arrays (indices non-negative)."""
    b, k = batch_dims, indices.shape[-1]
    batch = math.prod(data.shape[:b])
    d = data.reshape((batch,) + data.shape[b:])
    i = indices.reshape((batch, -1, k))
    out = np.stack([d[j][tuple(i[j, :, m] for m in range(k))] for j in range(batch)])
    return out.reshape(indices.shape[:-1] + data.shape[b + k:])


def _resize_coordinates(ctm, size, out, scale):
    """The source coordinate of each of `out` output indices on an axis of `size` resized by `scale` (ONNX
    Resize's coordinate_transformation_mode, as onnx's reference computes it, in float64), or None for a mode
    this does not know."""
    i, width = np.arange(out, dtype=np.float64), scale * size    # width: the output length before flooring
    if ctm == "half_pixel":
        x = (i + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        x = size / 2 * (1 - out / width) + (i + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        x = np.full(out, -0.5) if width == 1 else (i + 0.5) / scale - 0.5
    elif ctm == "align_corners":
        x = np.zeros(out) if width == 1 else i * (size - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = i / scale
    else:
        return None
    return x


def _nearest_sources(ctm, nearest_mode, size, out, scale):
    """The input index of each of `out` output indices on an axis of `size` resized by `scale` (ONNX Resize,
    mode nearest, as onnx's reference computes it, in float64), or None for a mode this does not know."""
    x = _resize_coordinates(ctm, size, out, scale)
    if x is None:
        return None
    tie = x - np.floor(x) == 0.5
    rounding = {"round_prefer_floor": np.where(tie, np.floor(x), np.round(x)),
                "round_prefer_ceil": np.where(tie, np.ceil(x), np.round(x)), "floor": np.floor(x), "ceil": np.ceil(x)}
    if nearest_mode not in rounding:
        return None
    return np.clip(rounding[nearest_mode], 0, size - 1).astype(np.int64)


def _input_shape(inp, input_shapes: dict) -> tuple:
    """The static shape of a graph input (input_shapes's, where it names the input), or an OpenPrimError
    saying why it has none: not a tensor of a type OpenPrim computes (float, integer, bool), float64, no
    shape, a dynamic or non-positive dimension."""
    tt = inp.type.tensor_type if inp.type.HasField("tensor_type") else None
    if tt is None:
        raise OpenPrimError(f"ONNX input '{inp.name}' is not a tensor")
    if _FLOAT_NAMES.get(tt.elem_type) == "float64":
        raise OpenPrimError(float64_message(f"ONNX input '{inp.name}'", _FLOAT64_FIX))
    if _elem_dtype(tt.elem_type, "f32") is None:
        raise OpenPrimError(f"ONNX input '{inp.name}' has element type {_type_name(tt.elem_type)}; "
                            f"{_TYPES_SUPPORTED}")
    if inp.name in input_shapes:
        shape = tuple(int(d) for d in input_shapes[inp.name])
    elif not tt.HasField("shape"):
        raise OpenPrimError(f"ONNX input '{inp.name}' has no shape; pass input_shapes={{'{inp.name}': (...)}}")
    else:
        dynamic = next((d for d in tt.shape.dim if not d.HasField("dim_value")), None)
        if dynamic is not None:
            fix = (f"dims={{'{dynamic.dim_param}': size}} (a range in one artifact: openprim compile "
                   f"--dynamic {dynamic.dim_param}=LOW:HIGH) or " if dynamic.dim_param else "")
            raise OpenPrimError(f"ONNX input '{inp.name}' has a dynamic dimension "
                                f"'{dynamic.dim_param or '?'}'; pass {fix}input_shapes={{'{inp.name}': (...)}}")
        shape = tuple(d.dim_value for d in tt.shape.dim)
    if any(s <= 0 for s in shape):
        raise OpenPrimError(f"ONNX input '{inp.name}' has a non-positive dimension {shape}")
    return shape


def _model_problems(model, input_shapes: dict | None = None) -> list[str]:
    """Why the importer refuses the model as a whole, one line each, in the order it checks (it raises the
    first): the opset, the domains, sparse initializers, input_shapes naming unknown inputs, and every input
    that is not a float tensor of a static, positive shape."""
    onnx = require("onnx", "the ONNX importer")
    gr, opset, input_shapes = model.graph, model_opset(model), input_shapes or {}
    problems = []
    if not MIN_OPSET <= opset <= max(MAX_OPSET, onnx.defs.onnx_opset_version()):
        problems.append(f"ONNX model uses opset {opset}; OpenPrim imports opsets {MIN_OPSET}-{MAX_OPSET}")
    problems += [f"ONNX model imports domain '{imp.domain}', which OpenPrim does not support"
                 for imp in model.opset_import if imp.domain not in ("", "ai.onnx")]
    problems += [f"ONNX sparse initializer '{init.values.name}' is not supported" for init in gr.sparse_initializer]
    unknown = set(input_shapes) - {i.name for i in gr.input}
    if unknown:
        problems.append(f"input_shapes names unknown input(s) {sorted(unknown)}")
    weights = {init.name for init in gr.initializer}
    for inp in gr.input:
        if inp.name not in weights:
            try:
                _input_shape(inp, input_shapes)
            except OpenPrimError as e:
                problems.append(str(e))
    return problems


def read_model(model_or_path):
    """An ONNX ModelProto from itself, the path of a .onnx file or its bytes, checked with onnx.checker;
    anything else is one OpenPrimError line."""
    onnx = require("onnx", "the ONNX importer")
    try:
        if isinstance(model_or_path, bytes):
            model = onnx.load_from_string(model_or_path)
        elif isinstance(model_or_path, str) or hasattr(model_or_path, "__fspath__"):
            model = onnx.load(model_or_path)
        else:
            model = model_or_path
    except Exception as e:  # noqa: BLE001 - any reader failure is one line
        raise OpenPrimError(f"cannot read ONNX model: {type(e).__name__}: {_first_line(e)}") from None
    if not isinstance(model, onnx.ModelProto):
        raise OpenPrimError(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001
        raise OpenPrimError(f"malformed ONNX model: {_first_line(e)}") from None
    return model


def import_model(model_or_path, input_shapes: dict | None = None, dims: dict | None = None) -> Graph:
    """An ONNX ModelProto (or the path of a .onnx file, or its bytes) as an OpenPrim Graph. dims: sizes of
    named dynamic dimensions ({"batch_size": 8}), for every input that has them (input_shapes wins)."""
    model = _upgrade(read_model(model_or_path))
    return _Importer(model, {**_named_dims(model, dims or {}), **(input_shapes or {})}).run()


def _named_dims(model, dims: dict) -> dict:
    """input_shapes for the inputs with a dimension that `dims` names ({dim_param: size}); a name that no
    input has is an error that lists those they have."""
    shapes, named = {}, set()
    for inp in model.graph.input:
        tt = inp.type.tensor_type if inp.type.HasField("tensor_type") else None
        if tt is None or not tt.HasField("shape"):
            continue
        params = [d.dim_param if not d.HasField("dim_value") else None for d in tt.shape.dim]
        named.update(p for p in params if p)
        if any(p in dims for p in params):
            shapes[inp.name] = tuple(dims.get(p, 0) if p is not None else d.dim_value
                                     for p, d in zip(params, tt.shape.dim))
    unknown = sorted(set(dims) - named)
    if unknown:
        raise OpenPrimError(f"dims names {unknown}, not a named dimension of any input "
                            f"(the model's: {sorted(named) or 'none'})")
    return shapes


def check_model(model_or_path) -> tuple[dict[str, list[str]], list[str]]:
    """What import_model refuses in a model, as much as can be told at once (`openprim onnx-check`):
    ({op type: [node names]} of the nodes no `op_` method maps (unsupported_nodes), [every other refusal,
    one line each]). Those are the import's own checks: of the model as a whole (opset, domains, inputs),
    and, where there is nothing else, the import's refusal of a node it maps (an attribute value: Resize's
    mode, Pad's widths, ...). Both empty: the model imports."""
    model = _upgrade(read_model(model_or_path))
    unmapped, problems = _unmapped(model), _model_problems(model)
    if not (unmapped or problems):
        try:
            _Importer(model, None).run()
        except OpenPrimError as e:
            problems.append(str(e))
    return unmapped, problems


def unsupported_nodes(model_or_path) -> dict[str, list[str]]:
    """The nodes import_model cannot map, as {op type: [node names]} in graph order: nodes of other
    domains, and nodes of an op without an `op_` method of the importer (or whose definition changed after
    MAX_OPSET), unless all their inputs are known at import time (import_model folds those). Read on the
    model as the importer sees it (below opset 13: converted). Attribute values are not checked here
    (check_model has the import report them)."""
    return _unmapped(_upgrade(read_model(model_or_path)))


def _unmapped(model) -> dict[str, list[str]]:
    """unsupported_nodes of a model read and converted."""
    opset = model_opset(model)
    known = {init.name for init in model.graph.initializer}
    found: dict[str, list[str]] = {}
    for node in model.graph.node:
        default_domain = node.domain in ("", "ai.onnx")
        ins = [i for i in node.input if i]
        folds = default_domain and bool(ins) and node.op_type not in _NO_FOLD and all(i in known for i in ins)
        method = getattr(_Importer, "op_" + node.op_type, None) if default_domain else None
        if not folds and (method is None or not _unchanged_since_max_opset(node.op_type, opset)):
            key = node.op_type if default_domain else f"{node.domain}.{node.op_type}"
            found.setdefault(key, []).append(node.name or node.output[0])
        if folds or getattr(method, "import_time", False):
            known.update(o for o in node.output if o)
    return found


# Ops that only exist below MIN_OPSET, which onnx.version_converter turns into a mapped op:
# op -> (the op it becomes, first opset, last opset).
_CONVERTED = {"Upsample": ("Resize", 7, 9)}
_CAST_NOTE = ("to float, float16, bfloat16 (the Graph's one float dtype: between them the identity), the integer "
              "types and bool (float -> integer truncates toward zero); not to float64, strings, float8")
# What the coverage table says about an op beyond its name: the cases it does not map.
_NOTES = {
    "Attention": "3-d and 4-d, GQA/MQA; is_causal, scale, attn_mask float or boolean (shorter than the keys: "
                 "padded; a computed boolean one: a query row without keys is 0); no KV cache (past_key/value, "
                 "nonpad_kv_seqlen), softcap, sliding window, qk_matmul_output",
    "AveragePool": "1-d, 2-d, 3-d with a size-1 window on depth or on height and width; no dilations",
    "BatchNormalization": "inference, and training_mode=1 (batch statistics, running statistics); of constants: "
                          "folded at import",
    "InstanceNormalization": "per channel; of a [N, G, rest] view of a 4-d map (torch.onnx's GroupNorm below opset 18): the "
                             "map's group norm",
    "Abs": "float and integer",
    "Cast": _CAST_NOTE,
    "CastLike": _CAST_NOTE,
    "ConstantOfShape": "of a constant shape (Shape of a static one): a constant",
    "CumSum": "axis a constant input; exclusive, reverse",
    "Div": "integers truncate toward zero (a floor division where both operands are known non-negative)",
    "Einsum": "one or two operands (transposes, sums and one batched matmul); no ellipses, no repeated letters "
              "within an operand (diagonals)",
    "GatherElements": "indices computed at run time (bounds-checked after each run) or constant",
    "GatherND": "constant indices, any batch_dims",
    "IsInf": "detect_positive, detect_negative",
    "Mod": "integers (fmod 0 and 1)",
    "Neg": "float and integer",
    "Range": "of constants: a constant",
    "Relu": "float and integer",
    "Clip": "bounds constant or computed; float and integer",
    "Constant": "tensor, float(s) and int(s) values",
    "Conv": "1-d and 2-d; auto_pad",
    "ConvTranspose": "1-d and 2-d; output_shape, output_padding, auto_pad",
    "Dropout": "inference: the identity; the mask output only while nothing reads it",
    "Gather": "indices computed at run time (an embedding lookup; bounds-checked after each run) or constant (slices "
              "of float data)",
    "If": "a constant condition: the branch taken, imported in place",
    "GlobalAveragePool": "rank >= 3",
    "GlobalMaxPool": "rank >= 3",
    "GroupNormalization": "opset 21 (scale and bias per channel)",
    "LayerNormalization": "stash_type float; the Y output only",
    "MaxPool": "as AveragePool; no Indices output, storage_order 0",
    "Pad": "constant pads; modes constant, reflect (pads smaller than the axis) and edge; negative pads crop",
    "Reshape": "constant shape",
    "RMSNormalization": "stash_type float; fused with a residual Add before it",
    "LSTM": "unrolled; default activations, no clip, no input_forget; whole sequences",
    "ScatterND": "constant indices; reduction none or add",
    "Resize": "modes nearest, linear and cubic (no antialias), any scales or sizes; every coordinate transformation "
              "mode but tf_crop_and_resize, every nearest_mode; keep_aspect_ratio_policy stretch",
    "Shape": "of static shapes: a constant",
    "Size": "of static shapes: a constant",
    "Slice": "constant starts, ends, axes, steps; steps >= 1",
    "Split": "the split input, num_outputs or equal parts",
    "Squeeze": "constant axes",
    "Unsqueeze": "constant axes",
    "Tile": "constant repeats",
    "Expand": "constant shape; float, integer and bool input",
    "Upsample": "converted to Resize (nearest)",
    **{op: "any number of inputs, broadcasting" for op in ("Max", "Mean", "Min", "Sum")},
    **{op: "axes an attribute or a constant input; keepdims, noop_with_empty_axes"
       for op in ("ReduceL1", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum", "ReduceSumSquare")},
}


def _defined(op, opset) -> bool:
    """Whether ONNX defines `op` (not deprecated) at `opset`."""
    from onnx import defs
    try:
        return not defs.get_schema(op, opset).deprecated
    except Exception:  # noqa: BLE001 - not defined at that opset
        return False


def supported_ops() -> dict[str, tuple[int, int]]:
    """{ONNX op type: (first, last opset)} of every op the importer maps, by name: each `op_` method of the
    importer from the op's first definition at MIN_OPSET or later (older models are converted to
    MIN_OPSET) to MAX_OPSET, the ops of _CONVERTED over their own opsets, and those of _NEWER_OPS over the
    definitions it reads."""
    ops = {}
    for name in dir(_Importer):
        if name.startswith("op_"):
            op = name[3:]
            ops[op] = (min(_NEWER_OPS[op]), max(_NEWER_OPS[op])) if op in _NEWER_OPS else \
                (next(v for v in range(MIN_OPSET, MAX_OPSET + 1) if _defined(op, v)), MAX_OPSET)
    ops.update({op: (lo, hi) for op, (_, lo, hi) in _CONVERTED.items()})
    return dict(sorted(ops.items(), key=lambda item: item[0].lower()))


def coverage_table() -> str:
    """supported_ops() with the notes, as the markdown table in docs/frontends.md."""
    rows = [f"| {op} | {lo}-{hi} | {_NOTES.get(op, '')} |" for op, (lo, hi) in supported_ops().items()]
    return "\n".join(["| ONNX op | opsets | notes |", "|---|---|---|", *rows])


def _is_float(dtype) -> bool:
    """Whether a numpy dtype holds floats (numpy's own, or ml_dtypes' bfloat16, which onnx uses)."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _graph_dtype(elem_type) -> str | None:
    """The Graph dtype of a TensorProto elem type: FLOAT, FLOAT16, BFLOAT16; None for any other."""
    return GRAPH_DTYPES.get(_FLOAT_NAMES.get(elem_type))


_TYPES_SUPPORTED = "OpenPrim supports float (float32, float16, bfloat16), integer and bool tensors"


def _elem_dtype(elem_type, float_dtype: str) -> str | None:
    """The Graph dtype a value of TensorProto elem type computes in: `float_dtype` (the Graph's) for FLOAT,
    FLOAT16 and BFLOAT16, _INT_DTYPES's for integers and BOOL; None for any other (DOUBLE, strings, ...)."""
    return float_dtype if _graph_dtype(elem_type) else _INT_DTYPES.get(elem_type)


def _array_dtype(v: np.ndarray, float_dtype: str) -> str | None:
    """The Graph dtype a constant computes in (as _elem_dtype: float64 too, refused where it is computed)."""
    if _is_float(v.dtype):
        return float_dtype
    if v.dtype.kind == "b":
        return "bool"
    if v.dtype.kind in "iu":
        return "i32" if v.dtype == np.int32 else "i64"
    return None


def _elem_types(model) -> dict[str, int]:
    """{value name: ONNX elem type} of the model's inputs, outputs and every value onnx's shape inference
    types, inferred on the nodes alone (the initializers as typed inputs: no copy of the weights); where
    inference fails, the value_info the model has."""
    from onnx import helper, shape_inference
    gr = model.graph
    declared = {i.name for i in gr.input}
    weights = [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in gr.initializer
               if i.name not in declared]
    bare = helper.make_model(helper.make_graph(list(gr.node), gr.name or "main", [*gr.input, *weights],
                                               list(gr.output), value_info=list(gr.value_info)),
                             opset_imports=list(model.opset_import), ir_version=model.ir_version)
    bare.functions.extend(model.functions)
    try:
        gr = shape_inference.infer_shapes(bare).graph
    except Exception:  # noqa: BLE001 - a model inference cannot type: what the model declares
        pass
    return {v.name: v.type.tensor_type.elem_type for v in [*gr.input, *gr.value_info, *gr.output]
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}


def _type_name(elem_type) -> str:
    """TensorProto's name of an elem type (INT32), or its number when it has none."""
    from onnx import TensorProto
    return dict((v, k) for k, v in TensorProto.DataType.items()).get(elem_type, str(elem_type))


def model_dtype(model) -> str:
    """The Graph dtype of an ONNX model (importers/common.py `dominant_dtype`): of its float initializers
    (float, float16, bfloat16), or, without any, of its first float input."""
    counts = {}
    for init in model.graph.initializer:
        dtype = _graph_dtype(init.data_type)
        if dtype:
            counts[dtype] = counts.get(dtype, 0) + math.prod(init.dims)
    inits = {i.name for i in model.graph.initializer}
    inputs = [_graph_dtype(inp.type.tensor_type.elem_type) for inp in model.graph.input
              if inp.name not in inits and inp.type.HasField("tensor_type")]
    return dominant_dtype(counts, next(filter(None, inputs), None))


def model_opset(model) -> int:
    """The default-domain opset a ModelProto imports."""
    return max([i.version for i in model.opset_import if i.domain in ("", "ai.onnx")], default=0)


def _upgrade(model):
    """A model below opset 13 converted to opset 13 (unchanged otherwise), or one clear error."""
    from onnx import version_converter
    opset = model_opset(model)
    if opset >= MIN_OPSET:
        return model
    try:
        model = version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # noqa: BLE001
        raise OpenPrimError(f"ONNX model uses opset {opset}; converting it to opset {MIN_OPSET} "
                            f"failed: {_first_line(e)}") from None
    # IR < 4 wants every initializer listed as a graph input; the converter adds unlisted ones
    model.ir_version = max(model.ir_version, 7)
    return model


def _first_line(e):
    s = str(e).strip()
    lines = [ln.strip() for ln in s.splitlines() if ln.strip()]
    return " ".join(lines[:2])[:300] if lines else type(e).__name__


def _einsum_terms(equation: str, operands: int, fail) -> tuple[list[str], str]:
    """(the operands' letters, the output's letters) of an Einsum equation; the output, where the equation
    has no '->', is its letters that appear once, in alphabetical order (numpy's rule)."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if "." in eq:
        fail(f"equation '{equation}': ellipses ('...') are not supported")
    if len(terms) != operands or not 1 <= operands <= 2:
        fail(f"equation '{equation}' has {len(terms)} operand(s), the node {operands} (takes one or two)")
    if not arrow:
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    for term in terms + [out]:
        if not term.isalpha() and term or len(set(term)) != len(term):
            fail(f"equation '{equation}': '{term}' repeats a letter (a diagonal) or is not letters")
    if set(out) - set(lhs):
        fail(f"equation '{equation}': the output has letters no operand has")
    return terms, out

"""Import an ONNX model (opsets 13-21) into an OpenPrim `Graph`.

`import_model(model_or_path, input_shapes=None) -> Graph` (a ModelProto, a path or serialized bytes;
`input_shapes` overrides or fixes dynamic input shapes by input name). The model is checked with
onnx.checker first. Initializers become `g.param`. Every tensor whose value is known at import time
(initializers, Constant, Shape/Size of a static tensor, and any node whose inputs are all known: the
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains of exporters) is kept as a numpy array, folded
with onnx's reference evaluator, and becomes a graph param only when a compute op consumes it.

Mapped ops: Conv (1-d and 2-d, auto_pad), BatchNormalization (inference), Relu, LeakyRelu, PRelu,
Clip (constant bounds), Sigmoid, Tanh, Gelu, Elu, HardSigmoid, HardSwish, Add/Sub/Mul/Div, Neg, Sum,
MaxPool and AveragePool (1-d and 2-d), GlobalAveragePool, Gemm, MatMul, Softmax, LogSoftmax,
LayerNormalization, GroupNormalization (opset 21), InstanceNormalization, Reshape, Flatten, Transpose,
Concat, Pad (constant), Squeeze/Unsqueeze, Identity, Dropout (inference), Cast to a float type.

A model older than opset 13 (the PyTorch-converted models of onnx's backend tests are opset 6-12) is
first converted to opset 13 with onnx.version_converter, which rewrites the attributes that later
became inputs (Pad's pads, Clip's bounds, Unsqueeze's axes) and the changed Softmax semantics.
A model whose opset is newer than 21 is accepted node by node: a node passes only if its op's
definition at that opset has the same inputs, outputs and attributes as at opset 21 (Conv-22 or
Reshape-25 only add element types). Unsupported ops and attributes, dynamic shapes and non-float
tensors are reported as one-line `OpenPrimError`s naming the node, its op type and the opset.
"""
from __future__ import annotations

import math

import numpy as np

from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.graph import Graph, Tensor

MIN_OPSET, MAX_OPSET = 13, 21
_FLOAT_TYPES = {1: "float", 10: "float16", 11: "double"}  # TensorProto elem types that run as f32
_F32_MAX = float(np.finfo(np.float32).max)
# Ops that are never folded at import time even when all inputs are known: random ones, and
# BatchNormalization, whose onnx reference implementation for opsets 9-13 mixes in batch statistics.
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
            "Bernoulli", "BatchNormalization"}


def _onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover
        raise OpenPrimError("the ONNX importer needs the 'onnx' package: pip install onnx") from None
    return onnx


class _Importer:
    def __init__(self, model, input_shapes):
        onnx = _onnx()
        self.onnx = onnx
        self.model = model
        self.input_shapes = dict(input_shapes or {})
        self.opset = 0
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
        self.g = Graph(name=(model.graph.name or "main").replace(" ", "_"), layout="NCHW", dtype="f32")
        self.tensors: dict[str, Tensor] = {}     # name -> graph value
        self.consts: dict[str, np.ndarray] = {}  # name -> value known at import time
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
        """Input i as a graph Tensor (a known constant becomes a param)."""
        name = self.node.input[i]
        if name in self.tensors:
            return self.tensors[name]
        if name in self.consts:
            v = self.consts[name]
            if v.dtype.kind not in "fiub":
                self.unsupported(f"constant '{name}' has dtype {v.dtype}")
            t = self.g.param(self._pname(name), v.astype(np.float32))
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

    # ------------------------------------------------------------------ entry
    def run(self):
        onnx = self.onnx
        gr = self.model.graph
        if not (MIN_OPSET <= self.opset <= max(MAX_OPSET, onnx.defs.onnx_opset_version())):
            raise OpenPrimError(f"ONNX model uses opset {self.opset}; OpenPrim imports opsets {MIN_OPSET}-{MAX_OPSET}")
        for imp in self.model.opset_import:
            if imp.domain not in ("", "ai.onnx"):
                raise OpenPrimError(f"ONNX model imports domain '{imp.domain}', which OpenPrim does not support")
        for init in gr.initializer:
            self.consts[init.name] = onnx.numpy_helper.to_array(init)
        for init in gr.sparse_initializer:
            raise OpenPrimError(f"ONNX sparse initializer '{init.values.name}' is not supported")
        unknown = set(self.input_shapes) - {i.name for i in gr.input}
        if unknown:
            raise OpenPrimError(f"input_shapes names unknown input(s) {sorted(unknown)}")
        for inp in gr.input:
            if inp.name in self.consts:
                continue  # an initializer listed as an input (IR < 4 style): a weight
            tt = inp.type.tensor_type if inp.type.HasField("tensor_type") else None
            if tt is None:
                raise OpenPrimError(f"ONNX input '{inp.name}' is not a tensor")
            if tt.elem_type not in _FLOAT_TYPES:
                raise OpenPrimError(f"ONNX input '{inp.name}' has element type "
                                    f"{onnx.TensorProto.DataType.Name(tt.elem_type)}; OpenPrim supports float tensors only")
            if inp.name in self.input_shapes:
                shape = tuple(int(d) for d in self.input_shapes[inp.name])
            else:
                if not tt.HasField("shape"):
                    raise OpenPrimError(f"ONNX input '{inp.name}' has no shape; pass input_shapes={{'{inp.name}': (...)}}")
                shape = []
                for d in tt.shape.dim:
                    if not d.HasField("dim_value"):
                        raise OpenPrimError(f"ONNX input '{inp.name}' has a dynamic dimension "
                                            f"'{d.dim_param or '?'}'; pass input_shapes={{'{inp.name}': (...)}}")
                    shape.append(d.dim_value)
                shape = tuple(shape)
            if any(s <= 0 for s in shape):
                raise OpenPrimError(f"ONNX input '{inp.name}' has a non-positive dimension {shape}")
            self.tensors[inp.name] = self.g.input(inp.name, shape)
        for node in gr.node:
            self.node = node
            if node.domain not in ("", "ai.onnx"):
                self.unsupported(f"domain '{node.domain}'")
            self.convert(node)
        self.node = None
        outs = []
        for o in gr.output:
            if o.name in self.tensors:
                outs.append(self.tensors[o.name])
            elif o.name in self.consts:
                v = self.consts[o.name]
                if v.dtype.kind != "f":
                    raise OpenPrimError(f"ONNX output '{o.name}' is a constant of dtype {v.dtype}; "
                                        "OpenPrim supports float outputs only")
                # A constant output: materialise it through a no-op so it is a computed value.
                p = self.param(v, o.name)
                outs.append(self.g.reshape(p, p.shape))
            else:
                raise OpenPrimError(f"ONNX output '{o.name}' is not produced by any node")
        self.g.output(*outs)
        return self.g

    # ------------------------------------------------------------------ nodes
    def set(self, i, value):
        name = self.node.output[i]
        if isinstance(value, Tensor):
            self.tensors[name] = value
        else:
            self.consts[name] = np.asarray(value)

    def fold(self, node):
        """Evaluate a node whose inputs are all known with onnx's reference implementation."""
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        ins = [i for i in node.input if i]
        vis = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(self.consts[i].dtype),
                                             self.consts[i].shape) for i in ins]
        outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        m = helper.make_model(helper.make_graph([node], "fold", vis, outs),
                              opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            res = ReferenceEvaluator(m).run(None, {i: self.consts[i] for i in ins})
        except Exception as e:  # noqa: BLE001
            self.fail(f"cannot fold constant node: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        for name, v in zip([o for o in node.output if o], res):
            self.consts[name] = np.asarray(v)

    def convert(self, node):
        op = node.op_type
        a = self.attrs(node)
        ins = [i for i in node.input if i]
        if op == "Constant":
            return self.set(0, self._constant(a))
        if op not in _NO_FOLD and all(i in self.consts for i in ins):
            return self.fold(node)
        if op == "Shape":
            shp = np.array(self.shape(0), np.int64)
            r = len(shp)
            start, end = a.get("start", 0), a.get("end", r)
            return self.set(0, shp[start:end])
        if op == "Size":
            return self.set(0, np.array(math.prod(self.shape(0)), np.int64))
        fn = getattr(self, "op_" + op, None)
        if fn is None:
            self.unsupported()
        if self.opset > MAX_OPSET:
            self._check_newer_opset(op)
        n_out = len([o for o in node.output if o])
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
        if n_out > len(res):
            self.unsupported(f"only the first {len(res)} output(s) are supported")
        for i, r in enumerate(res[:n_out]):
            if node.output[i]:
                self.set(i, r)

    def _check_newer_opset(self, op):
        """Opsets above 21 are accepted node by node: only where the op's definition at the model's
        opset differs from its opset-21 definition in type constraints alone (same inputs, outputs,
        attributes and defaults), as for Conv-22 or Reshape-25 (which only add new element types)."""
        from onnx import defs

        def sig(v):
            sc = defs.get_schema(op, v)
            return ([i.name for i in sc.inputs], [o.name for o in sc.outputs],
                    sorted((k, str(x.default_value)) for k, x in sc.attributes.items()))
        try:
            ok = sig(self.opset) == sig(MAX_OPSET)
        except Exception:  # noqa: BLE001 - no opset-21 definition
            ok = False
        if not ok:
            self.unsupported(f"its definition changed after opset {MAX_OPSET}")

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

    def _pool(self, a, kind):
        x = self.t(0)
        k = list(a["kernel_shape"])
        if a.get("storage_order", 0) != 0:
            self.unsupported("storage_order=1")
        strides, dil, pads, lifted = self._spatial(a, x.shape, k)
        if lifted:
            k = k + [1]
            x = self.g.reshape(x, tuple(x.shape) + (1,))
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
                return self.g.reshape(y, y.shape[:3]) if lifted else y
            pads = [0, 0, 0, 0]
        if kind == "max":
            y = self.g.max_pool2d(x, tuple(k), tuple(strides), tuple(pads), tuple(dil), ceil_mode=ceil)
        else:
            if any(d != 1 for d in dil):
                self.unsupported("AveragePool with dilations")
            y = self.g.avg_pool2d(x, tuple(k), tuple(strides), tuple(pads), ceil_mode=ceil,
                                  count_include_pad=bool(a.get("count_include_pad", 0)))
        if lifted:
            y = self.g.reshape(y, y.shape[:3])
        return y

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
        if a.get("training_mode", 0):
            self.unsupported("training_mode=1")
        x, shp = self._to4d(self.t(0))
        c = x.shape[1]
        vs = [self._vec(i, c, w) for i, w in enumerate(("scale", "B", "mean", "var"), start=1)]
        y = self.g.batch_norm(x, *vs, eps=float(a.get("epsilon", 1e-5)))
        return self._from4d(y, shp)

    def op_InstanceNormalization(self, a):
        x, shp = self._to4d(self.t(0))
        c = x.shape[1]
        y = self.g.group_norm(x, c, self._vec(1, c, "scale"), self._vec(2, c, "B"), eps=float(a.get("epsilon", 1e-5)))
        return self._from4d(y, shp)

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
        return self.g.layer_norm(x, vec(1), vec(2), eps=float(a.get("epsilon", 1e-5)), normalized_ndim=k)

    # --- activations
    def op_Relu(self, a): return self.g.relu(self.t(0))
    def op_Sigmoid(self, a): return self.g.sigmoid(self.t(0))
    def op_Tanh(self, a): return self.g.tanh(self.t(0))
    def op_LeakyRelu(self, a): return self.g.leaky_relu(self.t(0), float(a.get("alpha", 0.01)))
    def op_Elu(self, a): return self.g.elu(self.t(0), float(a.get("alpha", 1.0)))
    def op_Neg(self, a): return self.g.mul(self.t(0), -1.0)

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
        lo = float(self.const(1, "min").reshape(())) if self.has(1) else -_F32_MAX
        hi = float(self.const(2, "max").reshape(())) if self.has(2) else _F32_MAX
        lo, hi = max(lo, -_F32_MAX), min(hi, _F32_MAX)
        return self.g.clamp(self.t(0), lo, hi)

    def _hardsigmoid(self, x, alpha, beta):
        y = self.g.add(self.g.mul(x, alpha), beta)
        return self.g.clamp(y, 0.0, 1.0)

    def op_HardSigmoid(self, a):
        return self._hardsigmoid(self.t(0), float(a.get("alpha", 0.2)), float(a.get("beta", 0.5)))

    def op_HardSwish(self, a):
        x = self.t(0)
        return self.g.mul(x, self._hardsigmoid(x, 1.0 / 6.0, 0.5))

    # --- elementwise binary
    def _binary(self, fn):
        shapes = [self.shape(0), self.shape(1)]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            self.fail(f"shapes {shapes[0]} and {shapes[1]} do not broadcast")
        return fn(self.t(0), self.t(1))

    def op_Add(self, a): return self._binary(self.g.add)
    def op_Sub(self, a): return self._binary(self.g.sub)
    def op_Mul(self, a): return self._binary(self.g.mul)
    def op_Div(self, a): return self._binary(self.g.div)

    def op_Sum(self, a):
        y = self.t(0)
        for i in range(1, len(self.node.input)):
            y = self.g.add(y, self.t(i))
        return y

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

    # --- softmax
    def op_Softmax(self, a): return self.g.softmax(self.t(0), int(a.get("axis", -1)))
    def op_LogSoftmax(self, a): return self.g.log_softmax(self.t(0), int(a.get("axis", -1)))

    # --- shape ops (tensors)
    def op_Identity(self, a): return self.t(0)

    def op_Cast(self, a):
        from onnx import TensorProto
        if a.get("to") not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE):
            self.unsupported(f"Cast of a computed tensor to {TensorProto.DataType.Name(a.get('to', 0))}")
        return self.t(0)  # every computed tensor is a float tensor: a no-op

    def op_Dropout(self, a):
        if self.has(2):
            tm = self.const(2, "training_mode")
            if bool(np.asarray(tm).reshape(())):
                self.unsupported("training_mode=True")
        if len([o for o in self.node.output if o]) > 1:
            self.unsupported("the mask output")
        if self.is_const(self.node.input[0]):
            return self.consts[self.node.input[0]]
        return self.t(0)

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
        xs = [self.t(i) for i in range(len(self.node.input)) if self.has(i)]
        axis = int(a["axis"])
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
        mode = a.get("mode", "constant")
        if mode != "constant":
            self.unsupported(f"mode='{mode}'")
        x = self.t(0)
        r = x.ndim
        pads = [int(p) for p in self.const(1, "pads").reshape(-1)]
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
            self.unsupported(f"negative pads {pads}")
        if not any(pads):
            return x
        return self.g.pad(x, pads, value)


def import_model(model_or_path, input_shapes: dict | None = None) -> Graph:
    """An ONNX ModelProto (or the path of a .onnx file, or its bytes) as an OpenPrim Graph."""
    onnx = _onnx()
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
    return _Importer(_upgrade(model), input_shapes).run()


def _upgrade(model):
    """A model below opset 13 converted to opset 13 (unchanged otherwise), or one clear error."""
    from onnx import version_converter
    opset = max([i.version for i in model.opset_import if i.domain in ("", "ai.onnx")], default=0)
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

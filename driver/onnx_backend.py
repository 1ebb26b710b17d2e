"""An `onnx.backend.base.Backend` that compiles ONNX models with OpenPrim, like onnxruntime.backend.

    import openprim.onnx_backend as onnx_backend
    rep = onnx_backend.prepare(model)          # import + compile once ("CPU")
    rep = onnx_backend.prepare(model, "CUDA")  # for this machine's NVIDIA GPU ("CUDA:1": GPU 1)
    outputs = rep.run([x])                     # a tuple of numpy arrays, one per graph output

Numpy inputs of float inputs are cast to the model's float type (float16/float32/float64 arrays only);
integer and bool inputs (token ids, masks) are taken as integers and bools, checked against their range;
each output comes back in the element type the model declares for it (float32 when it declares none). On "CUDA", device arrays
(__cuda_array_interface__ / DLPack: CuPy, PyTorch) are taken too and give DeviceArrays back, never
through the host. `supports_device("CUDA")` is True when the CUDA driver finds a GPU.

It imports with `openprim.pyfrontend.onnx.importer` (ONNX -> Graph) and compiles through the compile
cache (`openprim.cache`: the compiler, hence MLIR, only on a miss), so it lives in the driver layer
(`openprim`): the frontends only build Graphs and import neither the compiler nor MLIR.
"""
from __future__ import annotations

import numpy as np

import openprim.cache
from openprim.base.dtypes import FLOATS
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.importers.common import require
from openprim.pyfrontend.onnx.importer import import_model
from openprim.runtime.arrays import is_device_array
from openprim.runtime.cuda import CudaDevice
from openprim.runtime.device import DeviceError

onnx = require("onnx", "the ONNX backend")
from onnx.backend.base import Backend, BackendRep  # noqa: E402 - after the check that onnx is installed

_NP_OF = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
          onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32,
          onnx.TensorProto.BOOL: np.bool_}


def _device(device) -> tuple[str, int]:
    """("CPU" | "CUDA", index) of an ONNX device string ("CPU", "CUDA", "CUDA:1")."""
    kind, _, index = str(device).upper().partition(":")
    if kind not in ("CPU", "CUDA") or (index and not index.isdigit()):
        raise OpenPrimError(f"OpenPrim's ONNX backend runs on 'CPU' or 'CUDA[:N]', got device '{device}'")
    return kind, int(index or 0)


def _target(device) -> tuple[str, int]:
    """(OpenPrim target, GPU index) for an ONNX device: the GPU's own sm_XY on CUDA."""
    kind, index = _device(device)
    if kind == "CPU":
        return "cpu", 0
    return f"nvvm:{CudaDevice(index).arch()}", index


def _check_device(device):
    _device(device)


class OpenPrimBackendRep(BackendRep):
    """A compiled model: `run(inputs)` with a list (in graph input order) or a dict by name."""

    def __init__(self, model, exe, graph):
        self.model = model
        self.exe = exe
        init = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in init]
        self.output_names = [o.name for o in model.graph.output]
        self.output_dtypes = []
        for o in model.graph.output:
            et = o.type.tensor_type.elem_type if o.type.HasField("tensor_type") else 0
            self.output_dtypes.append(_NP_OF.get(et, np.float32))
        self.input_shapes = [t.shape for t in graph.inputs]
        self.input_dtypes = [t.dtype for t in graph.inputs]

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise OpenPrimError(f"missing input(s) {missing}; inputs are {self.input_names}")
            inputs = [inputs[n] for n in self.input_names]
        elif isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(self.input_names):
            raise OpenPrimError(f"expected {len(self.input_names)} input(s) {self.input_names}, got {len(inputs)}")
        if any(is_device_array(v) for v in inputs):   # device arrays: bound as they are, outputs stay there
            return tuple(self.exe(*inputs)) if len(self.output_names) > 1 else (self.exe(*inputs),)
        args = []
        for name, dtype, v in zip(self.input_names, self.input_dtypes, inputs):
            v = np.asarray(v)
            if dtype in FLOATS and v.dtype.kind != "f":
                raise OpenPrimError(f"input '{name}' has dtype {v.dtype}; the model takes a float tensor there "
                                    f"({dtype})")
            args.append(np.array(v, np.float32) if dtype in FLOATS else v)  # np.array keeps 0-d arrays 0-d
        outs = self.exe(*args)
        if not isinstance(outs, tuple):
            outs = (outs,)
        return tuple(np.asarray(o).astype(dt, copy=False) for o, dt in zip(outs, self.output_dtypes))


class OpenPrimBackend(Backend):
    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device="CPU", input_shapes=None, **kwargs):
        target, index = _target(device)
        if isinstance(model, (str, bytes)):
            model = onnx.load(model) if isinstance(model, str) else onnx.load_from_string(model)
        graph = import_model(model, input_shapes=input_shapes)
        options = {k: kwargs[k] for k in ("precision", "layout", "solver") if k in kwargs}
        exe = openprim.cache.load_or_compile(graph, target, options, device=index)
        return OpenPrimBackendRep(model, exe, graph)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        """Run one NodeProto on `inputs` (a list in node input order, or a dict by input name)."""
        _check_device(device)
        from onnx import helper
        names = [i for i in node.input]
        if isinstance(inputs, dict):
            values = [inputs[n] for n in names if n]
        else:
            values = list(inputs)
        used = [n for n in names if n]
        if len(values) != len(used):
            raise OpenPrimError(f"node '{node.name}' has {len(used)} input(s), got {len(values)} values")
        vis = []
        for n, v in zip(used, values):
            v = np.asarray(v)
            vis.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
        if outputs_info:
            ovis = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shp)
                    for o, (dt, shp) in zip([o for o in node.output if o], outputs_info)]
        else:
            et = vis[0].type.tensor_type.elem_type if vis else onnx.TensorProto.FLOAT
            ovis = [helper.make_tensor_value_info(o, et, None) for o in node.output if o]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        opset = min(opset, 21)
        model = helper.make_model(helper.make_graph([node], "run_node", vis, ovis),
                                  opset_imports=[helper.make_opsetid("", opset)])
        if not outputs_info:  # output types from shape inference (the checker wants them)
            inferred = onnx.shape_inference.infer_shapes(model)
            for o, io in zip(model.graph.output, inferred.graph.output):
                if io.type.tensor_type.HasField("shape"):
                    o.CopyFrom(io)
        return cls.prepare(model, device).run(values)

    @classmethod
    def supports_device(cls, device):
        try:
            kind, index = _device(device)
            if kind == "CUDA":
                CudaDevice(index)      # cuInit and the device count: a GPU is there and usable
        except (OpenPrimError, DeviceError):
            return False
        return True


prepare = OpenPrimBackend.prepare
run_model = OpenPrimBackend.run_model
run_node = OpenPrimBackend.run_node
supports_device = OpenPrimBackend.supports_device
is_compatible = OpenPrimBackend.is_compatible

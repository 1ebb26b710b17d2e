"""The `prim` dialect: loaded from its IRDL definition into an MLIR context, plus the semantic verifier.

IRDL checks operand/attribute kinds when a module is parsed; shape rules (which IRDL cannot express)
are checked by `verify`, which reports the first violation as `file:line:col: error: 'prim.op' op ...`.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
from mlir import ir
from mlir._mlir_libs import _mlir
from mlir.dialects import irdl

from openprim.base.errors import OpenPrimError
from openprim.base.dtypes import STORAGE, to_storage

from openprim.base import ops as _ops
from openprim.base.ops import OPS, ShapeError

IRDL_PATH = Path(__file__).with_name("prim.irdl.mlir")
_mlir.globals.append_dialect_search_prefix(f"{__name__}.bindings")   # bindings/prim.py says why
_ATTR_BASE = {"i64": "#builtin.integer", "f64": "#builtin.float", "str": "#builtin.string",
              "i64s": "#builtin.dense_array", "f64s": "#builtin.dense_array"}
_FLOAT_TYPES = {"f32": ir.F32Type, "f16": ir.F16Type, "bf16": ir.BF16Type}
_INTEGER_WIDTH = {"i64": 64, "i32": 32, "bool": 8}    # a bool is an i8 holding 0 or 1 (base/dtypes.MLIR_TYPE)


def generate_irdl() -> str:
    """The IRDL text of the dialect, derived from `ops.OPS` (checked in as prim.irdl.mlir)."""
    lines = ["// The `prim` dialect. Generated from base/ops.py by `python -m openprim.dialect`; do not edit.",
             "// Load it with `mlir-opt --irdl-file=prim.irdl.mlir` or `mlir::irdl::loadDialects`.",
             "irdl.dialect @prim {"]
    for spec in OPS.values():
        lines.append(f"  // {spec.doc}" if spec.doc else "  //")
        lines.append(f"  irdl.operation @{spec.name} {{")
        operands = []
        for i, (name, kind) in enumerate(spec.operands):
            lines.append(f'    %t{i} = irdl.base "!builtin.tensor"')
            operands.append(f"{name}: {'' if kind == 'single' else kind + ' '}%t{i}")
        if operands:
            lines.append(f"    irdl.operands({', '.join(operands)})")
        attrs = []
        for i, (name, kind) in enumerate(spec.attributes.items()):
            if kind == "elements":  # dense or dense_resource: irdl.any_of of bases crashes IRDL 22; checked in verify
                lines.append(f"    %a{i} = irdl.any")
            else:
                lines.append(f'    %a{i} = irdl.base "{_ATTR_BASE[kind]}"')
            attrs.append(f'"{name}" = %a{i}')
        if attrs:
            lines.append(f"    irdl.attributes {{{', '.join(attrs)}}}")
        lines += ['    %res = irdl.base "!builtin.tensor"', "    irdl.results(result: %res)", "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def load(ctx: ir.Context) -> None:
    """Register `prim` in ctx (idempotent)."""
    if "prim" in getattr(ctx, "_openprim_loaded", ()):
        return
    with ctx:
        irdl.load_dialects(ir.Module.parse(IRDL_PATH.read_text()))
    ctx._openprim_loaded = ("prim",)


def new_context() -> ir.Context:
    ctx = ir.Context()
    load(ctx)
    return ctx


# ---------------------------------------------------------------------------- attributes <-> Python
def attr_value(attr: ir.Attribute, kind: str):
    if kind == "i64":
        return ir.IntegerAttr(attr).value
    if kind == "f64":
        return ir.FloatAttr(attr).value
    if kind == "str":
        return ir.StringAttr(attr).value
    if kind == "i64s":
        return list(ir.DenseI64ArrayAttr(attr))
    if kind == "f64s":
        return list(ir.DenseF64ArrayAttr(attr))
    return attr


def make_attr(value, kind: str) -> ir.Attribute:
    if kind == "i64":
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
    if kind == "f64":
        return ir.FloatAttr.get_f64(float(value))
    if kind == "str":
        return ir.StringAttr.get(value)
    if kind == "i64s":
        return ir.DenseI64ArrayAttr.get([int(v) for v in value])
    if kind == "f64s":
        return ir.DenseF64ArrayAttr.get([float(v) for v in value])
    return value


def op_attrs(op) -> dict:
    """The prim attributes of op as Python values (by the op's spec)."""
    spec = OPS[op.name[5:]]
    return {k: attr_value(op.attributes[k], kind) for k, kind in spec.attributes.items() if k in op.attributes}


def dtype_name(t: ir.Type) -> str:
    for name, cls in _FLOAT_TYPES.items():
        if isinstance(t, cls):
            return name
    if isinstance(t, ir.IntegerType) and ir.IntegerType(t).is_signless:
        width = ir.IntegerType(t).width
        for name, w in _INTEGER_WIDTH.items():
            if w == width:
                return name
    return str(t)


def element_type(dtype: str) -> ir.Type:
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype].get()
    return ir.IntegerType.get_signless(_INTEGER_WIDTH[dtype])


def tensor_type(shape, dtype: str) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), element_type(dtype))


def dense_attr(data: np.ndarray, t: ir.RankedTensorType) -> ir.DenseElementsAttr:
    """The dense elements attribute of type t holding data in its storage (base/dtypes.STORAGE): a bool
    array is written as the i8 bytes it is in memory."""
    data = np.asarray(data)
    if data.dtype == np.bool_:
        data = data.view(np.int8)
    return ir.DenseElementsAttr.get(np.ascontiguousarray(data), type=t.element_type, shape=list(t.shape))


def shape_of(value) -> tuple:
    return tuple(ir.RankedTensorType(value.type).shape)


def operand_groups(op) -> list:
    """Operands per spec entry: a Value, or None for an absent optional operand."""
    spec = OPS[op.name[5:]]
    operands = list(op.operands)
    if "operandSegmentSizes" not in op.attributes:
        return operands
    groups, i = [], 0
    for n in ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]):
        groups.append(operands[i] if n else None)
        i += n
    return groups[:len(spec.operands)]


# ---------------------------------------------------------------------------- diagnostics
def where(loc: ir.Location) -> str:
    """`file:line:col` of a location (the first file location inside fused/name/callsite ones)."""
    text = str(loc)
    m = re.search(r'"([^"]*)":(\d+):(\d+)', text)
    if m:
        name = m.group(1)
        if name == "-":  # parsed from a string: the name given to parse()
            name = getattr(loc.context, "_openprim_source", "-")
        return f"{name}:{m.group(2)}:{m.group(3)}"
    m = re.search(r'loc\("([^"]*)"', text)
    return m.group(1) if m else "<unknown>"


def op_error(op, msg: str) -> OpenPrimError:
    return OpenPrimError(f"{where(op.location)}: error: '{op.name}' op {msg}")


def _check_op(op) -> None:
    name = op.name[5:]
    spec = OPS[name]
    result = op.results[0]
    if not isinstance(result.type, ir.RankedTensorType):
        raise op_error(op, f"result must be a ranked tensor, got {result.type}")
    groups = operand_groups(op)
    values = [v for v in groups if v is not None]
    for v in values:
        if not isinstance(v.type, ir.RankedTensorType):
            raise op_error(op, f"operands must be ranked tensors, got {v.type}")
    dtypes = [None if v is None else dtype_name(ir.RankedTensorType(v.type).element_type) for v in groups]
    result_dtype = dtype_name(ir.RankedTensorType(result.type).element_type)
    unknown = sorted({d for d in dtypes + [result_dtype] if d is not None and d not in _ops.DTYPES})
    if unknown:
        raise op_error(op, f"element types must be out of {', '.join(_ops.DTYPES)} (a bool is i8), "
                           f"got {', '.join(unknown)}")
    missing = [k for k in spec.attributes if k not in op.attributes]
    if missing:
        raise op_error(op, f"requires attribute '{missing[0]}'")
    try:
        want_dtype = _ops.infer_dtype(name, dtypes, op_attrs(op))
    except ShapeError as e:
        raise op_error(op, str(e)) from None
    if want_dtype is not None and want_dtype != result_dtype:
        raise op_error(op, f"result element type {result_dtype} differs from the inferred {want_dtype}")
    want_shape = shape_of(result)
    if name == "constant":
        value = op.attributes["value"]
        if not (isinstance(value, ir.DenseElementsAttr) or str(value).startswith("dense_resource<")):
            raise op_error(op, f"value must be a dense or dense_resource elements attribute, got {value}")
        if value.type != result.type:
            raise op_error(op, f"value type {value.type} differs from result type {result.type}")
        return
    if name == "reshape":
        if _ops.numel(shape_of(values[0])) != _ops.numel(want_shape):
            raise op_error(op, f"cannot reshape {_ops.fmt_shape(shape_of(values[0]))} to {_ops.fmt_shape(want_shape)}: "
                               "element counts differ")
        return
    if name == "broadcast":
        given = shape_of(values[0])
        try:
            fits = _ops.broadcast(given, want_shape) == want_shape
        except ShapeError:
            fits = False
        if not fits:
            raise op_error(op, f"cannot broadcast {_ops.fmt_shape(given)} to {_ops.fmt_shape(want_shape)}")
        return
    shapes = [None if v is None else shape_of(v) for v in groups]
    try:
        inferred = _ops.infer(name, shapes, op_attrs(op))
    except ShapeError as e:
        raise op_error(op, str(e)) from None
    if tuple(inferred) != want_shape:
        raise op_error(op, f"result shape {_ops.fmt_shape(want_shape)} does not match the inferred "
                           f"{_ops.fmt_shape(inferred)}")


def verify(module: ir.Module | ir.Operation) -> None:
    """MLIR's verifier, then prim's shape rules; raises OpenPrimError naming the op and the reason."""
    root = module.operation
    try:
        root.verify()
    except ir.MLIRError as e:
        raise OpenPrimError(format_mlir_error(e)) from None

    prim_ops = []

    def visit(op):
        if op.name.startswith("prim."):
            prim_ops.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    for op in prim_ops:
        _check_op(op)


def read_text(path: str) -> str:
    """The MLIR text of a file ("-": standard input), refused in one line when it cannot be read or is not
    text (a binary file would otherwise reach MLIR's parser as garbage)."""
    name = "<stdin>" if path == "-" else str(path)
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as e:
        raise OpenPrimError(f"cannot read '{path}': {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise OpenPrimError(f"{name}: not MLIR text (byte {e.start} is not UTF-8); expected a .mlir file") from None
    if "\0" in text:
        raise OpenPrimError(f"{name}: not MLIR text (it contains NUL bytes); expected a .mlir file")
    return text


def parse(text: str, source: str, ctx: ir.Context) -> ir.Module:
    """Parse MLIR text; diagnostics name `source` (a file name) as file:line:col."""
    ctx._openprim_source = source
    with ctx:
        try:
            return ir.Module.parse(text)
        except ir.MLIRError as e:
            raise OpenPrimError(format_mlir_error(e)) from None


def format_mlir_error(e: ir.MLIRError) -> str:
    """The first diagnostic as one line, naming the op when MLIR put it only in a note."""
    if e.error_diagnostics:
        d = e.error_diagnostics[0]
        msg = d.message
        if not msg.startswith("'"):
            notes = " ".join(n.message for n in d.notes)
            op = re.search(r'"([a-z_]+\.[a-z_0-9.]+)"\(', notes) or re.search(r"= ([a-z_]+\.[a-z_0-9.]+)[ (]", notes)
            if op and op.group(1) not in msg:
                msg = f"'{op.group(1)}' op {msg}"
        return f"{where(d.location)}: error: {msg}"
    return str(e).splitlines()[0]


# One element of a printed bf16 constant: MLIR prints what decimal cannot round-trip (inf, nan) as its bits.
_BF16_ELEMENT = re.compile(r"0x[0-9A-Fa-f]+|[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?")


def to_numpy(attr: ir.Attribute) -> np.ndarray:
    """The data of a dense constant; bf16 comes back as its uint16 bit pattern."""
    if not isinstance(attr, ir.DenseElementsAttr):
        raise OpenPrimError(f"cannot read the data of {attr}: MLIR 22's Python bindings cannot read dense_resource "
                            f"blobs back; write the constant as dense<...>, or keep the {WEIGHTS_SUFFIX} file that "
                            "`openprim emit` wrote next to the .mlir file")
    dense = attr
    t = ir.RankedTensorType(dense.type)
    if isinstance(t.element_type, ir.BF16Type):  # no buffer protocol for bf16: read the printed form
        if dense.is_splat:
            return to_storage(np.full(t.shape, dense.get_splat_value().value, np.float32), "bf16")
        text = str(dense)
        hexdata = re.search(r'dense<"0x([0-9A-Fa-f]*)">', text)
        if hexdata:
            return np.frombuffer(bytes.fromhex(hexdata.group(1)), np.uint16).reshape(t.shape).copy()
        body = text[text.index("<") + 1:text.rindex(">")].split(":")[0]
        tokens = _BF16_ELEMENT.findall(body)
        hexa = np.array([v.startswith("0x") for v in tokens], bool)
        bits = np.array([int(v, 16) if h else 0 for v, h in zip(tokens, hexa)], np.uint16)
        decimal = to_storage(np.array([0.0 if h else float(v) for v, h in zip(tokens, hexa)], np.float32), "bf16")
        return np.where(hexa, bits, decimal).astype(np.uint16).reshape(t.shape)
    if dtype_name(t.element_type) == "bool":
        return np.array(dense).astype(np.bool_)
    return np.array(dense)


# ----------------------------------------------------------------------------- weights out of line
# `openprim emit` writes model.mlir with its weights as `dense_resource<NAME>` handles without data (no
# dialect_resources section: that would be hex text again) and the data in model.weights.npz, NAME -> array
# in storage order (bf16: uint16 bits). Whoever reads model.mlir gives the handles their data back.
WEIGHTS_SUFFIX = ".weights.npz"
_HANDLE = re.compile(r"dense_resource<([A-Za-z_][\w.$]*)> : ")


def weights_path(mlir_path) -> str:
    """Where the out-of-line weights of a .mlir file are: model.mlir -> model.weights.npz."""
    path = str(mlir_path)
    return (path[:-len(".mlir")] if path.endswith(".mlir") else path) + WEIGHTS_SUFFIX


def resource_handle(name: str, t: ir.RankedTensorType) -> ir.Attribute:
    """`dense_resource<name> : t`, a handle without data; name: an MLIR bare identifier."""
    return ir.Attribute.parse(f"dense_resource<{name}> : {t}")


def load_weights(module: ir.Module, mlir_path) -> None:
    """Replace every prim.constant's dense_resource handle with the array of its name in the .npz next to
    mlir_path (weights_path), when that file exists; one OpenPrimError for an array that does not fit."""
    path = weights_path(mlir_path)
    if not Path(path).is_file():
        return
    try:
        with np.load(path) as z:
            weights = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 - numpy's readers raise many types (BadZipFile, ValueError, ...)
        raise OpenPrimError(f"{path}: cannot read the weights ({type(e).__name__}: {e})") from None
    constants = []

    def visit(op):
        if op.name == "prim.constant":
            constants.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    with module.context:
        for op in constants:
            value = op.attributes["value"]
            handle = None if isinstance(value, ir.DenseElementsAttr) else _HANDLE.match(str(value))
            if handle is None or handle.group(1) not in weights:
                continue
            t = ir.RankedTensorType(op.result.type)
            data = weights[handle.group(1)]
            want = np.dtype(STORAGE[dtype_name(t.element_type)])
            if data.dtype != want or data.shape != tuple(t.shape):
                raise OpenPrimError(f"{path}: '{handle.group(1)}' is {data.dtype}{list(data.shape)}; the constant at "
                                    f"{where(op.location)} needs {want}{list(t.shape)} ({t})")
            op.attributes["value"] = dense_attr(data, t)


# ----------------------------------------------------------------------------- module structure
# A compiled module holds the graph functions (public definitions), private kernel declarations, and a
# nested `module @kernels` with the kernels themselves (created by outlining, tagged with its target).
KERNELS = "kernels"


def body(module: ir.Operation) -> ir.Block:
    """The block of a builtin.module operation (passes receive operations, not ir.Module)."""
    return module.regions[0].blocks[0]


def kernels_module(module: ir.Operation, target=None):
    """The nested `module @kernels`; created (for `target`) when missing and a target is given, else None."""
    for op in body(module).operations:
        if op.operation.name == "builtin.module" and "sym_name" in op.attributes:
            if ir.StringAttr(op.attributes["sym_name"]).value == KERNELS:
                return op
    if target is None:
        return None
    with module.context, ir.Location.unknown(), ir.InsertionPoint(body(module)):
        km = ir.Operation.create("builtin.module", regions=1,
                                 attributes={"sym_name": ir.StringAttr.get(KERNELS),
                                             "prim.target": ir.StringAttr.get(str(target))})
        km.regions[0].blocks.append()
    return km


def graph_functions(module):
    """Public function definitions: the graphs (fused helpers are private, kernels are declarations)."""
    return [op for op in body(module).operations
            if op.operation.name == "func.func" and "sym_visibility" not in op.attributes and len(op.regions[0].blocks)]

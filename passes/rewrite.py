"""Rewriting helpers shared by the passes: producers, constants (read and made in any dtype), copies
of ops with new operands, transposes folded at compile time."""
from __future__ import annotations

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.ops import OPS
from openprim.base.dtypes import from_storage, to_storage


def single_use(v: ir.Value) -> bool:
    return len(list(v.uses)) == 1


def producer(v: ir.Value, name: str | None = None):
    """The operation defining v (None for a block argument), if it is named `name` when given."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return None
    owner = getattr(owner, "operation", owner)
    return owner if name is None or owner.name == name else None


def constant(v: ir.Value):
    """The values of v (float64) if it is a prim.constant, else None."""
    owner = producer(v, "prim.constant")
    if owner is None:
        return None
    dtype = dialect.dtype_name(v.type.element_type)
    return from_storage(dialect.to_numpy(owner.attributes["value"]), dtype).astype(np.float64)


def new_constant(data: np.ndarray, like: ir.Value, loc) -> ir.Value:
    """A prim.constant holding `data` in the element type of `like` (rounded once, from float64)."""
    t = like.type
    shape = list(data.shape)
    raw = to_storage(data, dialect.dtype_name(t.element_type))
    rtype = ir.RankedTensorType.get(shape, t.element_type)
    attr = dialect.dense_attr(raw, rtype)
    op = ir.Operation.create("prim.constant", results=[rtype],
                             attributes={"value": attr}, loc=loc)
    return op.result


def rebuild(op: ir.Operation, operands: list, attrs: dict, loc, result_type=None) -> ir.Operation:
    """A copy of `op` with new operand groups (None for an absent optional one), updated attributes and,
    when given, another result type."""
    spec = OPS[op.name[5:]]
    new_attrs = {k: op.attributes[k] for k in op.attributes}
    for k, v in attrs.items():
        new_attrs[k] = dialect.make_attr(v, spec.attributes[k])
    if any(kind == "optional" for _, kind in spec.operands):
        new_attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([v is not None for v in operands])
    return ir.Operation.create(op.name, results=[result_type or op.result.type],
                               operands=[v for v in operands if v is not None], attributes=new_attrs, loc=loc)


def create(name: str, operands: list, shape, like: ir.Value, attrs: dict, loc) -> ir.Value:
    """prim.<name> on operands (None for an absent optional one) with a result of `shape` in the element
    type of `like`."""
    spec_attrs = {k: dialect.make_attr(v, kind) for k, v in attrs.items()
                  for kind in [OPS[name].attributes[k]]}
    result = ir.RankedTensorType.get(list(shape), like.type.element_type)
    if any(kind == "optional" for _, kind in OPS[name].operands):
        spec_attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([v is not None for v in operands])
    return ir.Operation.create(f"prim.{name}", results=[result], operands=[v for v in operands if v is not None],
                               attributes=spec_attrs, loc=loc).result


def pad_zeros(v: ir.Value, dim: int, extra: int, loc) -> ir.Value:
    """v with `extra` zeros appended along `dim`: a prim.pad, or a new constant when v is one."""
    t = v.type
    shape = list(t.shape)
    shape[dim] += extra
    data = constant(v)
    if data is not None:
        widths = [(0, 0)] * len(shape)
        widths[dim] = (0, extra)
        return new_constant(np.pad(data, widths), v, loc)
    pads = [0] * (2 * len(shape))
    pads[len(shape) + dim] = extra
    return ir.Operation.create("prim.pad", results=[ir.RankedTensorType.get(shape, t.element_type)], operands=[v],
                               attributes={"pads": dialect.make_attr(pads, "i64s"),
                                           "value": dialect.make_attr(0.0, "f64")}, loc=loc).result


def transpose(v: ir.Value, perm, loc) -> ir.Value:
    """prim.transpose of v, folded at compile time when v is a constant."""
    t = v.type
    shape = [t.shape[p] for p in perm]
    const = producer(v, "prim.constant")
    if const is not None:
        return _stored_constant(dialect.to_numpy(const.attributes["value"]).transpose(perm), t, loc)
    return ir.Operation.create("prim.transpose", results=[ir.RankedTensorType.get(shape, t.element_type)],
                               operands=[v], attributes={"perm": dialect.make_attr(perm, "i64s")}, loc=loc).result


def _stored_constant(data: np.ndarray, t, loc) -> ir.Value:
    """A prim.constant of `data` moved in storage order (bf16 bit patterns move like any other element)."""
    rtype = ir.RankedTensorType.get(list(data.shape), t.element_type)
    return ir.Operation.create("prim.constant", results=[rtype], attributes={"value": dialect.dense_attr(data, rtype)},
                               loc=loc).result


def transformed_constant(v: ir.Value, transform, loc) -> ir.Value | None:
    """A prim.constant of transform(values of v) (float64 in and out, rounded once to v's element type), or
    None when v is not a constant."""
    data = constant(v)
    return None if data is None else new_constant(np.ascontiguousarray(transform(data)), v, loc)


def index_constant(data, loc) -> ir.Value:
    """A prim.constant of i64 indices (a gather's)."""
    data = np.asarray(data, np.int64)
    rtype = ir.RankedTensorType.get(list(data.shape), ir.IntegerType.get_signless(64))
    return ir.Operation.create("prim.constant", results=[rtype], attributes={"value": dialect.dense_attr(data, rtype)},
                               loc=loc).result


def filter_perm(have: str, want: str) -> list[int]:
    """The transpose taking a filter from layout `have` to `want` (plain layouts: KCRS, KRSC, RSCK)."""
    return [have.index(d) for d in want]


def reshape(v: ir.Value, shape, loc) -> ir.Value:
    """prim.reshape of v to `shape` (same element count, row-major order)."""
    return ir.Operation.create("prim.reshape", results=[ir.RankedTensorType.get(list(shape), v.type.element_type)],
                               operands=[v], loc=loc).result


def swap(old: ir.Operation, new: ir.Operation) -> ir.Operation:
    old.result.replace_all_uses_with(new.result)
    old.erase()
    return new

"""Graph -> `prim` module: one func.func @main whose body is the graph's ops in order; `write` puts it in a
.mlir file (for openprim-opt) with the weights out of line, in a .npz next to it."""
from __future__ import annotations

import re

import numpy as np
from mlir import ir
from mlir.dialects import func

from openprim import dialect
from openprim.dialect import contract
from openprim.base.errors import OpenPrimError
from openprim.base.files import atomic_file
from openprim.base.ops import OPS

INLINE_ELEMENTS = 16   # write(): constants up to this size stay in the module's text


def _constant_attr(value, t: ir.RankedTensorType) -> ir.Attribute:
    return dialect.dense_attr(value, t)


def _handle_name(name: str, taken: dict) -> str:
    """name as an MLIR bare identifier (other characters become _) that `taken` does not hold yet."""
    base = re.sub(r"[^\w.$]", "_", name, flags=re.ASCII)
    base = base if re.match(r"[A-Za-z_]", base) else "w_" + base
    key, n = base, 0
    while key in taken:
        n += 1
        key = f"{base}_{n}"
    return key


def to_module(graph, ctx: ir.Context | None = None, weights: dict | None = None) -> ir.Module:
    """The graph's prim module. weights: a dict that takes the data of every constant of more than
    INLINE_ELEMENTS elements (name -> storage array), the module holding a dense_resource handle instead."""
    if not graph.outputs:
        raise OpenPrimError(f"graph '{graph.name}' has no outputs: call graph.output(...)")
    ctx = ctx or dialect.new_context()
    dialect.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        in_types = [dialect.tensor_type(t.shape, t.dtype) for t in graph.inputs]
        results = list(graph.outputs) + [t for t, _ in graph.checks]
        out_types = [dialect.tensor_type(t.shape, t.dtype) for t in results]
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp(graph.name, (in_types, out_types))
            contract.set_input_names(fn, [t.name for t in graph.inputs])
            if graph.checks:
                contract.set_checks(fn, [message for _, message in graph.checks])
            block = fn.add_entry_block()
        values = {id(t): block.arguments[i] for i, t in enumerate(graph.inputs)}
        with ir.InsertionPoint(block):
            for node in graph.nodes:
                spec = OPS[node.op]
                rtype = dialect.tensor_type(node.result.shape, node.result.dtype)
                loc = ir.Location.file(node.loc[0], node.loc[1], 1)
                attrs = {k: dialect.make_attr(node.attrs[k], kind) for k, kind in spec.attributes.items()
                         if k in node.attrs}
                if node.op == "constant" and weights is not None and node.value.size > INLINE_ELEMENTS:
                    name = _handle_name(node.result.name, weights)
                    weights[name] = node.value
                    attrs["value"] = dialect.resource_handle(name, rtype)
                elif node.op == "constant":
                    attrs["value"] = _constant_attr(node.value, rtype)
                operands = [values[id(t)] for t in node.operands if t is not None]
                if any(k == "optional" for _, k in spec.operands):
                    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([t is not None for t in node.operands])
                op = ir.Operation.create(f"prim.{node.op}", results=[rtype], operands=operands,
                                         attributes=attrs, loc=loc)
                values[id(node.result)] = op.result
            func.ReturnOp([values[id(t)] for t in results])
    dialect.verify(module)
    return module


def write(graph, path) -> tuple[str, int]:
    """Write the graph's prim module to `path` (.mlir text, what openprim-opt reads) with the data of its
    larger constants in dialect.weights_path(path) (.npz); returns (that path, the number of arrays in it)."""
    weights = {}
    text = str(to_module(graph, weights=weights))
    npz = dialect.weights_path(path)
    with atomic_file(npz, "wb", "-o") as f:
        np.savez(f, **weights)
    with atomic_file(path, "w", "-o") as f:
        f.write(text)
    return npz, len(weights)

"""Graph -> `prim` module: one func.func @main whose body is the graph's ops in order."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from openprim import dialect
from openprim.base.ops import OPS
from openprim.base.errors import OpenPrimError


def _constant_attr(value, t: ir.RankedTensorType) -> ir.Attribute:
    elem = t.element_type
    return ir.DenseElementsAttr.get(value, type=elem, shape=list(t.shape))


def to_module(graph, ctx: ir.Context | None = None) -> ir.Module:
    if not graph.outputs:
        raise OpenPrimError(f"graph '{graph.name}' has no outputs: call graph.output(...)")
    ctx = ctx or dialect.new_context()
    dialect.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        in_types = [dialect.tensor_type(t.shape, t.dtype) for t in graph.inputs]
        out_types = [dialect.tensor_type(t.shape, t.dtype) for t in graph.outputs]
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp(graph.name, (in_types, out_types))
            fn.attributes["prim.input_names"] = ir.ArrayAttr.get([ir.StringAttr.get(t.name) for t in graph.inputs])
            block = fn.add_entry_block()
        values = {id(t): block.arguments[i] for i, t in enumerate(graph.inputs)}
        with ir.InsertionPoint(block):
            for node in graph.nodes:
                spec = OPS[node.op]
                rtype = dialect.tensor_type(node.result.shape, node.result.dtype)
                loc = ir.Location.file(node.loc[0], node.loc[1], 1)
                attrs = {k: dialect.make_attr(node.attrs[k], kind) for k, kind in spec.attributes.items()
                         if k in node.attrs}
                if node.op == "constant":
                    attrs["value"] = _constant_attr(node.value, rtype)
                operands = [values[id(t)] for t in node.operands if t is not None]
                if any(k == "optional" for _, k in spec.operands):
                    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([t is not None for t in node.operands])
                op = ir.Operation.create(f"prim.{node.op}", results=[rtype], operands=operands,
                                         attributes=attrs, loc=loc)
                values[id(node.result)] = op.result
            func.ReturnOp([values[id(t)] for t in graph.outputs])
    dialect.verify(module)
    return module

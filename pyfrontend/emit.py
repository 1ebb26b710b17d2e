"""Graph -> `prim` module: one func.func @main whose body is the graph's ops in order; `write` puts it in a
.mlir file (for openprim-opt) with the weights out of line, in a .npz next to it.

Weights as values (`to_module(graph, params=True)`, `openprim.compile(graph, weights="values")`): the
graph's parameters (`value_params`) are not `prim.constant`s but the graph function's last arguments, after
the inputs, named by `prim.param_names`; the executable holds their data and `load_weights` replaces it.
A parameter is a `constant` node of the Graph that
  - has a float dtype (f32, f16, bf16): integer and bool tensors (indices, masks, positions) stay constants;
  - has a name given by the caller: not one the Graph makes for itself (`scalar<n>`, a number an op was
    given; `arange<n>`; `resize_ones<n>`; GRAPH_MADE), nor `%<n>`, the result of an op the Graph evaluated
    while it was built because its operands were all constants (graph.py: `_emit`);
  - is used: an operand of an op, an output. A param that only ops evaluated at build time read (a gather
    by constant ids, a cast: pyfrontend/constant_eval.py) is compiled into their constant results and
    stays out (a warning names it).
A name given to several of them stays the first one's; the others get "<name>#2", "<name>#3", ..."""
from __future__ import annotations

import re
import warnings

import numpy as np
from mlir import ir
from mlir.dialects import func

from openprim import dialect
from openprim.dialect import contract
from openprim.base.dtypes import FLOATS
from openprim.base.errors import OpenPrimError
from openprim.base.files import atomic_file
from openprim.base.ops import OPS

INLINE_ELEMENTS = 16   # write(): constants up to this size stay in the module's text
GRAPH_MADE = re.compile(r"(scalar|arange|resize_ones)\d+")   # the constants pyfrontend/graph.py names itself


class FrozenParamWarning(UserWarning):
    """weights="values": a named float param that no op of the graph reads (ops on it were evaluated when the
    graph was built): its value is compiled into constants, and load_weights cannot change it."""


def value_params(graph) -> list[tuple[str, object]]:
    """(name, constant node) of each parameter weights="values" makes, in graph order (the module docstring's
    rule). A name that several of them share is kept by the first; the k-th gets "<name>#<k>" (k = 2, 3, ...).
    Warns (FrozenParamWarning) of named float params that no op reads."""
    used = {id(t) for node in graph.nodes for t in node.operands if t is not None}
    used |= {id(t) for t in graph.outputs}
    named = [n for n in graph.nodes if n.op == "constant" and n.result.dtype in FLOATS
             and not n.result.name.startswith("%") and not GRAPH_MADE.fullmatch(n.result.name)]
    frozen = [n for n in named if id(n.result) not in used]
    if frozen:   # located at the first one's g.param line
        names = ", ".join(n.result.name for n in frozen[:8]) + (" ..." if len(frozen) > 8 else "")
        warnings.warn_explicit(f"weights='values': param(s) {names} are read only by ops the Graph evaluated when "
                               f"it was built (or by none): their values are compiled into constants, and "
                               f"load_weights cannot change them", FrozenParamWarning, *frozen[0].loc)
    params, taken = [], set()
    for n in named:
        if id(n.result) not in used:
            continue
        name, k = n.result.name, 1
        while name in taken:
            k += 1
            name = f"{n.result.name}#{k}"
        taken.add(name)
        params.append((name, n))
    return params


def param_values(graph) -> dict:
    """{name: stored value} of the parameters weights="values" makes (value_params), in their order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FrozenParamWarning)   # to_module warned already
        return {name: n.value for name, n in value_params(graph)}


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


def to_module(graph, ctx: ir.Context | None = None, weights: dict | None = None, params: bool = False) -> ir.Module:
    """The graph's prim module. weights: a dict that takes the data of every constant of more than
    INLINE_ELEMENTS elements (name -> storage array), the module holding a dense_resource handle instead.
    params: the graph's parameters (value_params) become the function's last arguments (prim.param_names)."""
    if not graph.outputs:
        raise OpenPrimError(f"graph '{graph.name}' has no outputs: call graph.output(...)")
    ctx = ctx or dialect.new_context()
    dialect.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        as_args = value_params(graph) if params else []
        in_types = [dialect.tensor_type(t.shape, t.dtype) for t in graph.inputs + [n.result for _, n in as_args]]
        results = list(graph.outputs) + [t for t, _ in graph.checks]
        out_types = [dialect.tensor_type(t.shape, t.dtype) for t in results]
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp(graph.name, (in_types, out_types))
            contract.set_input_names(fn, [t.name for t in graph.inputs])
            if as_args:
                contract.set_param_names(fn, [name for name, _ in as_args])
            if graph.checks:
                contract.set_checks(fn, [message for _, message in graph.checks])
            if graph.state:
                contract.set_state(fn, graph.state)
            block = fn.add_entry_block()
        values = {id(t): block.arguments[i] for i, t in enumerate(graph.inputs + [n.result for _, n in as_args])}
        with ir.InsertionPoint(block):
            for node in graph.nodes:
                if id(node.result) in values:   # a parameter: an argument
                    continue
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

"""Constant folding at import time in the torch.export importer.

Any subgraph computed only from constants (weights, buffers, lifted constants, shapes) is evaluated when the
model is imported and becomes a constant, so it costs nothing at run time: the relative-position tables and
shifted-window masks of Swin, the position ids `arange` of BERT/GPT-2, mask arithmetic on constant masks.

`foldable_nodes(graph, is_const)` is the set of fx nodes whose every input is a known constant (or
the result of another foldable node) and whose op is pure (no mutation, no randomness); `fold_node(node,
values)` evaluates one with torch itself (the node's target on the constant tensors, under no_grad), so an
op the importer has no mapping for (arange, full, where, fmod, index.Tensor, slice_scatter, eq, cumsum, ...)
is fine there. Integer and bool results that only feed other folded nodes never reach the Graph; one that a
real op reads is converted to the Graph's dtype where it is exact (importers/common.py: inexact_int).

The ONNX importer has its own: it folds any node whose inputs are all known with onnx's reference
evaluator (pyfrontend/onnx/importer.py: _Importer.fold), except the ops of its _NO_FOLD.
"""
from __future__ import annotations

import operator

# Op names (aten::<name>, overload dropped) never folded: random ones, whose value differs per run.
_RANDOM = ("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "bernoulli",
           "normal", "uniform", "multinomial", "exponential", "geometric", "cauchy", "log_normal", "poisson",
           "native_dropout", "dropout", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")
# Plain python callables that may appear as fx targets and are pure.
_PY_PURE = {operator.getitem, operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
            operator.mod, operator.neg, operator.pow}


def _pure(target) -> bool:
    """Whether calling `target` has no side effect and always gives the same result."""
    if target in _PY_PURE:
        return True
    schema = getattr(target, "_schema", None)
    name = getattr(target, "name", None)
    if schema is None or not callable(name):   # not an OpOverload (a higher-order op, a python function)
        return False
    ns, _, rest = name().partition("::")
    if ns not in ("aten", "prims"):
        return False
    if schema.is_mutable or rest.split(".")[0] in _RANDOM:
        return False
    return True


def foldable_nodes(graph, is_const) -> set:
    """The call_function nodes of the fx `graph` that can be evaluated at import time: a pure op whose
    fx-node inputs are all constants (`is_const(node)`, for placeholders and get_attrs) or foldable nodes
    themselves. A node with no tensor input at all (arange, full, zeros) is foldable."""
    import torch
    known, out = set(), set()
    for n in graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            if is_const(n):
                known.add(n)
        elif n.op == "call_function" and _pure(n.target):
            ins = n.all_input_nodes
            if all(i in known for i in ins):
                val = n.meta.get("val")
                # A value with a symbolic size is not a constant of the program.
                if isinstance(val, torch.Tensor) and any(not isinstance(s, int) for s in val.shape):
                    continue
                known.add(n)
                out.add(n)
    return out


def fold_node(node, values):
    """The value of the foldable fx `node`, evaluated with torch on `values` ({fx node: torch value})."""
    import torch
    args = torch.fx.node.map_arg(node.args, lambda a: values[a])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: values[a])
    with torch.no_grad():
        return node.target(*args, **kwargs)


def const_tensors(ep, constant_inputs=None) -> dict:
    """{fx node: torch tensor} of the placeholders and get_attrs of the ExportedProgram `ep` whose value is
    known: parameters, buffers, lifted constants, tensor attributes, and the user inputs that
    `constant_inputs` ({user input position: tensor}) fixes."""
    import torch
    sig = ep.graph_signature
    state = dict(ep.state_dict)
    consts = dict(getattr(ep, "constants", {}) or {})
    keys = {**dict(sig.inputs_to_parameters), **dict(sig.inputs_to_buffers),
            **dict(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})}
    user = list(sig.user_inputs)
    out = {}
    for n in ep.graph_module.graph.nodes:
        v = None
        if n.op == "placeholder":
            if n.target in keys:
                key = keys[n.target]
                v = state.get(key)
                if v is None:
                    v = consts.get(key)
            elif constant_inputs and n.target in user and user.index(n.target) in constant_inputs:
                v = constant_inputs[user.index(n.target)]
        elif n.op == "get_attr":
            v = ep.graph_module
            for part in n.target.split("."):
                v = getattr(v, part, None)
        if isinstance(v, torch.Tensor):
            out[n] = v.detach()
    return out

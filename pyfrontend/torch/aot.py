"""Import the forward and backward graphs of AOTAutograd (torch.compile with gradients) into Graphs.

    from openprim.pyfrontend.torch.aot import import_graph_module
    imported = import_graph_module(gm)          # gm: an fx GraphModule of aten ops, as AOTAutograd gives it
    imported.graph, imported.feeds, imported.outputs

An AOTAutograd graph has no parameters of its own: every placeholder (the model's parameters and buffers, its
inputs, the forward's saved tensors, the backward's incoming gradients) is a run-time input, with the static
shape and dtype its meta records. The ops are mapped by the torch importer's handlers (importer.py and, for the
training ops, backward.py); subgraphs of constants are folded as there. What differs from a torch.export
program is at the edges:

- a placeholder becomes a Graph input only where a handler reads its values: one that only the output returns
  (a forward saving its inputs for the backward), or that only arguments read for their shape or not at all
  take (backward.UNREAD_ARGS: max_pool2d's indices, total_weight), or that is empty, is none;
- each output is one of: a Graph output, a placeholder passed through (the caller returns its own tensor), a
  value known at import (a constant, nll_loss's total_weight), None, or a stand-in for what no one computes:
  max_pool2d_with_indices' indices, which the forward saves for max_pool2d_with_indices_backward (recomputed
  from the input: backward.h_max_pool2d_backward), and empty tensors (eval-mode batch norm's saved statistics).
  An output that nobody can compute otherwise is an OpenPrimError, as an unmapped op is.

This module builds Graphs only; driver/torch_backend.py compiles them and runs them on torch tensors.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from openprim.base.dtypes import FLOATS
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.graph import Graph, Tensor
from openprim.pyfrontend.torch import backward
from openprim.pyfrontend.torch.folding import const_tensors
from openprim.pyfrontend.torch.importer import _Const, _Importer, _op_key, torch


class _Unread:
    """The value of an fx node that no handler reads: a placeholder only passed through or read for its shape,
    an output that stands for what nobody computes."""
    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node


@dataclass
class AotGraph:
    """An imported AOTAutograd graph. graph: the Graph (None where no output is computed); feeds: the positions
    of gm's arguments that are its inputs, in order; outputs: per output of gm, ("graph", k) the Graph's k-th
    output, ("input", i) gm's argument i, ("value", tensor) a tensor known at import, or ("none",); meta: per
    output its recorded (shape, torch dtype) or None; stand_ins: the names of outputs given as stand-ins for
    max_pool2d_with_indices' indices."""
    graph: Graph | None
    feeds: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    meta: list = field(default_factory=list)
    stand_ins: list = field(default_factory=list)
    channels_last_outputs: set = field(default_factory=set)   # Graph outputs given in channels-last order
    channels_last_feeds: set = field(default_factory=set)     # gm's arguments taken in channels-last order


@dataclass
class AotState:
    """What one model's forward import tells its backward import: the eps of each layer norm by the name of its
    saved mean (native_layer_norm_backward does not carry it), and the names of the saved tensors that are
    stand-ins (max_pool2d_with_indices' indices: no backward handler may read them), which the caller adds once
    the forward runs compiled (AotGraph.stand_ins); and the names of the 4-d maps saved for the backward that
    the forward returns in channels-last order (NHWC, as computed: no transpose out and back in), which the
    backward takes so (AotGraph.channels_last)."""
    layer_norm_eps: dict = field(default_factory=dict)
    stand_ins: set = field(default_factory=set)
    channels_last: set = field(default_factory=set)


def _meta(node):
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if isinstance(val, torch.Tensor):
        return tuple(int(s) for s in val.shape), val.dtype
    return None


def _program(gm):
    """What _Importer reads of an ExportedProgram, for a GraphModule whose placeholders are all inputs."""
    names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    sig = SimpleNamespace(inputs_to_parameters={}, inputs_to_buffers={}, inputs_to_lifted_tensor_constants={},
                          user_inputs=names, user_outputs=[])
    return SimpleNamespace(graph_module=gm, graph_signature=sig, state_dict={}, constants={})


class _AotImporter(_Importer):
    def __init__(self, gm, state, visible):
        super().__init__(_program(gm))
        self.gm, self.state, self.visible = gm, state, visible
        self.channels_last_feeds = set()   # placeholders taken in channels-last order
        self.layer_norm_eps = state.layer_norm_eps     # backward.layer_norm_eps reads it

    def _reads(self, user, p) -> bool:
        """Whether the handler of fx node `user` reads the values of placeholder p."""
        if user.op != "call_function":
            return False            # the output node: passed through
        if user in self.foldable:
            return True
        unread = backward.unread_args(user, self)

        def holds(a):
            return a is p or isinstance(a, (list, tuple)) and any(x is p for x in a)
        return any(holds(a) for i, a in enumerate(user.args) if i not in unread) or \
            any(holds(a) for a in user.kwargs.values())

    def _placeholder(self, n):
        meta = _meta(n)
        if meta is None:
            raise OpenPrimError(f"torch import: input '{n.name}' is not a tensor (a symbolic size?); "
                                "OpenPrim needs static shapes")
        shape, dtype = meta
        readers = [u.name for u in n.users if self._reads(u, n)]
        if not readers or 0 in shape:
            return _Unread(n)
        if n.name in self.state.stand_ins:
            raise OpenPrimError(f"torch import: '{n.name}', max_pool2d_with_indices' indices, is read by "
                                f"{', '.join(readers)}: the forward did not compute them")
        t = self.input_of(n, n.name, dtype)
        if n.name in self.state.channels_last and len(shape) == 4:
            self.channels_last_feeds.add(n)
            return self.g.channels_last_input(len(self.g.inputs) - 1)
        return t

    def import_graph(self) -> AotGraph:
        graph = self.gm.graph
        for n in graph.nodes:    # a forward's, for its backward's layer_norm_backward
            if n.op == "call_function" and _op_key(n.target) == "native_layer_norm":
                for u in n.users:
                    if u.target is operator.getitem and u.args[1] == 1:
                        self.layer_norm_eps[u.name] = float(n.args[4])
        self._plan_folding(graph, const_tensors(self.ep))
        result = AotGraph(self.g)
        positions = {}
        for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder"):
            self.env[n] = v = self._placeholder(n)
            positions[n] = i
            if isinstance(v, Tensor):
                result.feeds.append(i)
                if n in self.channels_last_feeds:
                    result.channels_last_feeds.add(i)
        for n in graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "call_function" and n not in self.foldable and n.target is operator.getitem and \
                    self._unmade(n):
                self.env[n] = _Unread(n)
            elif n.op in ("get_attr", "call_function"):
                self.env[n] = self.value_of(n, self.gm)
            elif n.op == "output":
                self._outputs(n, positions, result)
            else:
                raise OpenPrimError(f"torch import: unsupported fx node kind '{n.op}' ({n.name})")
        if not self.g.outputs:
            result.graph = None
        return result

    def _unmade(self, n) -> bool:
        """A getitem of an output its op does not make (None), which only the graph's output returns."""
        base = self.env.get(n.args[0])
        return isinstance(base, tuple) and base[n.args[1]] is None and all(u.op == "output" for u in n.users)

    def _outputs(self, node, positions, result):
        outs = node.args[0]
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        made, seen = {}, {}    # Graph output index -> the names of the gm outputs giving it, if all are saved maps
        for k, o in enumerate(outs):
            meta = _meta(o)
            result.meta.append(meta)
            if o is None:
                result.outputs.append(("none",))
                continue
            if not isinstance(o, torch.fx.Node):
                raise OpenPrimError(f"torch import: graph output {o!r} is not a tensor")
            v = self.env[o]
            if o.op == "placeholder":
                result.outputs.append(("input", positions[o]))
            elif isinstance(v, _Unread):
                result.outputs.append(("value", self._stand_in(o, meta, result, k)))
            elif isinstance(v, _Const):
                value = torch.from_numpy(np.ascontiguousarray(v.value))
                result.outputs.append(("value", value.to(meta[1]).reshape(meta[0]) if meta else value))
            elif isinstance(v, Tensor) and v in self.g.inputs:
                i = next(positions[p] for p in positions if self.env[p] is v)
                result.outputs.append(("input", i))
            elif isinstance(v, Tensor) and self._is_param(v):
                const = next(c for c, t in self.params.values() if t is v)
                value = torch.from_numpy(np.ascontiguousarray(const.value))
                result.outputs.append(("value", value.to(meta[1]).reshape(meta[0]) if meta else value))
            elif isinstance(v, Tensor):
                if id(v) not in made:
                    made[id(v)] = len(self.g.outputs)
                    self.g.output(v)
                index = made[id(v)]
                saved = self.visible is not None and k >= self.visible and len(v.shape) == 4 and v.dtype in FLOATS
                names = seen.get(index, [])
                seen[index] = names + [o.name] if saved and names is not None else None
                result.outputs.append(("graph", index))
            else:
                raise OpenPrimError(f"torch import: output '{o.name}' ({type(v).__name__}) is not computed by "
                                    "the Graph")
        for index, names in seen.items():   # maps only the backward reads: returned as computed (NHWC)
            if names:
                self.g.channels_last_output(index)
                result.channels_last_outputs.add(index)
                self.state.channels_last.update(names)

    def _stand_in(self, o, meta, result, k):
        """A tensor for output k, which nobody computes: an empty one as it is; max_pool2d_with_indices' indices
        saved for the backward (not among the first `visible` outputs, which the caller sees) as zeros: only
        max_pool2d_with_indices_backward may read them, and it recomputes the maxima."""
        if meta is not None and 0 in meta[0]:
            return torch.empty(meta[0], dtype=meta[1])
        src = o.args[0] if o.target is operator.getitem else None
        if meta is not None and src is not None and _op_key(src.target) == "max_pool2d_with_indices" \
                and o.args[1] == 1:
            if self.visible is None or k < self.visible:
                raise OpenPrimError(f"torch import: the indices of max_pool2d_with_indices ('{o.name}') are an "
                                    "output of the model; OpenPrim does not compute them")
            result.stand_ins.append(o.name)
            return torch.zeros(meta[0], dtype=meta[1])
        raise OpenPrimError(f"torch import: output '{o.name}' of {getattr(src, 'target', o.target)} is not "
                            "computed by the importer")


def import_graph_module(gm, state: AotState | None = None, visible: int | None = None) -> AotGraph:
    """An AOTAutograd forward or backward graph (an fx GraphModule of aten ops) as an AotGraph.

    state: shared by one model's forward and backward imports (AotState), the forward imported first.
    visible: how many of the graph's first outputs its caller sees (a forward's mutated inputs and outputs,
    AOTAutograd's num_forward_returns; the rest are saved for the backward); None: all of them."""
    return _AotImporter(gm, state if state is not None else AotState(), visible).import_graph()

"""Lower a Graph in another precision, as autocast does: `with_precision(graph, "f16") -> Graph`.

A Graph has one dtype, and every prim kernel already computes the way autocast asks of a low-precision
network: it reads f16/bf16 operands, widens them to f32, and rounds once when it stores its result.
Convolution and matmul accumulate in f32 (kernels/semantics.py's mac_body, the GPU MMA paths);
softmax, log_softmax, the statistics of batch/layer/group norm, reductions and the pools reduce in f32
(kernels/semantics.py, kernels/gpu/rows.py, kernels/gpu/pool.py). So a change of precision is a change
of storage only: this module rebuilds the graph node by node in the new dtype, and

- weights (every `constant`) are cast here, at compile time, from the values they hold: rounded once to
  nearest even, finite values beyond the new dtype's range saturated to its largest finite value (an
  attention mask of -1e9 becomes -65504 in f16, not -inf, so a fully masked row stays finite);
- inputs and outputs become tensors of the new dtype. The caller keeps the model's own dtypes: the
  compiler records them in the plan as each input's and output's `host_dtype` (`io_dtypes` gives them),
  and the runtime converts at the edges (`openprim.base.dtypes.to_storage` / `from_storage`), so an fp32
  model compiled with precision="f16" still takes and returns float32 arrays.

What autocast also does and this does not: intermediate values between kernels are stored in the new
dtype, so an f32 model whose activations exceed 65504 overflows in f16 (bf16 has f32's range).
Batch-norm parameters are rounded before prim-fuse folds them into the convolution's weights, which adds
one rounding of the folded weights (within f16/bf16 tolerance for real networks).

Plain Python and numpy: no MLIR, no compiler (the frontend layer).
"""
from __future__ import annotations

import numpy as np

from openprim.base.dtypes import DTYPES, FINITE_MAX, FLOATS, from_storage, to_storage
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.graph import Graph, Node, Tensor


NOT_FLOATS = tuple(d for d in DTYPES if d not in FLOATS)


def check_precision(precision: str | None) -> None:
    """One OpenPrimError unless precision is None (the model's own) or a float dtype."""
    if precision is not None and precision not in FLOATS:
        raise OpenPrimError(f"precision must be one of {', '.join(FLOATS)} (or left out for the model's own), "
                            f"got '{precision}'")


def io_dtypes(graph: Graph) -> tuple[list[str], list[str]]:
    """The dtypes of the graph's inputs and of its outputs, in order."""
    return [t.dtype for t in graph.inputs], [t.dtype for t in graph.outputs]


def cast_weight(value: np.ndarray, dtype: str, to: str) -> np.ndarray:
    """A constant stored in `dtype`, in the storage of `to`: rounded once, finite values saturated."""
    values = from_storage(value, dtype).astype(np.float64)
    top = FINITE_MAX[to]
    finite = np.isfinite(values)
    return to_storage(np.where(finite, np.clip(values, -top, top), values), to)


def with_precision(graph: Graph, precision: str | None) -> Graph:
    """The graph computed in `precision` ("f32", "f16" or "bf16"; None or the graph's own dtype: the graph
    itself). Weights are cast at compile time; the result is a new Graph, `graph` is not changed."""
    check_precision(precision)
    if precision is None or (precision == graph.dtype and all(
            n.result.dtype in (precision, *NOT_FLOATS) for n in graph.nodes)
            and all(t.dtype in (precision, *NOT_FLOATS) for t in graph.inputs)):
        return graph
    out = Graph(name=graph.name, layout=graph.layout, dtype=precision)
    tensors: dict[int, Tensor] = {}

    def new(t: Tensor) -> Tensor:
        """t in the new graph: floats in `precision`, integers and booleans (token ids, masks, a run-time
        check's count) as they are."""
        return Tensor(out, t.shape, precision if t.dtype in FLOATS else t.dtype, t.name)

    for t in graph.inputs:
        tensors[id(t)] = new(t)
        out.inputs.append(tensors[id(t)])
    for node in graph.nodes:
        operands = [None if t is None else tensors[id(t)] for t in node.operands]
        result = tensors[id(node.result)] = new(node.result)
        value = node.value if node.value is None or result.dtype not in FLOATS else \
            cast_weight(node.value, node.result.dtype, precision)
        out.nodes.append(Node(node.op, operands, dict(node.attrs), result, node.loc, value))
    out.outputs = [tensors[id(t)] for t in graph.outputs]
    out.checks = [(tensors[id(t)], message) for t, message in graph.checks]
    out.state = list(graph.state)
    return out

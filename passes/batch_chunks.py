"""prim-batch-chunks: run a memory-bound network on the CPU a few samples at a time.

At batch 8, MobileNetV2's largest layers move about 48 MB of activations (the 96-channel depthwise
convolution at 112x112: 38.5 MB in, 9.6 MB out), more than the 32 MB L3 of the machine it was measured
on, so every layer streams from DRAM. Compiled for batch 2 and run four times, the same network keeps
each layer's working set in cache: 12-20% faster there (SqueezeNet in chunks of 4: 7%), while the
compute-bound ResNets lose 2-7% to the smaller GEMMs (bench/RESULTS.md, "batch chunks"). The pass does
this when nothing in the graph mixes samples:

    every graph input has the batch N as dim 0 (not the parameters, prim.param_names: weights); a value
    is batched when an op computes it from batched operands and keeps the batch as dim 0, sample by sample:
        no softmax, concat, reduce, slice, pad or layer norm over dim 0 (nor their gradients), no transpose that
        moves it, none of the training ops that reduce over the batch (BATCH_REDUCING),
        reshapes keep it leading ([N, 1280, 1, 1] -> [N, 1280]; not [N, S, D] -> [N S, D]),
        and the op's shape rule (base/ops.infer) gives the same result with dim 0 = 1 as with N;
    every graph output is batched.
    (driver/dynamic_batch.py asks with padding=True: a batch padded with copies of real samples, never split.
    There a value may hold several rows per sample, [N S, D] under a linear layer, a reshape keeps the
    samples apart whenever its dim 0 is a multiple of N, bounds checks are allowed, and so are constants of
    equal rows and gathers whose constant indices read each sample's own rows.)
    c = the largest divisor of N with c x (the largest activation bytes one op reads and writes per
        sample) <= budget, when the network is memory-bound: fewer than `max_intensity` multiply-adds
        (conv2d and matmul) per byte of the activations its ops read and write;
    every batched value's type gets dim 0 = c, the slices' ends with it, and the function records
    prim.batch_chunks = N / c; the plan then repeats its steps over the N / c chunks of the inputs.

The two thresholds are fitted on the model zoo (bench/zoo_cpu.py) at batch 8 on the 2-core machine (Zen 4,
32 MB L3). Only the CPU pipeline runs this pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlir import ir

from openprim import dialect
from openprim.base.dtypes import ITEMSIZE
from openprim.base.ops import ELEMENTWISE, ShapeError, filter_dims, infer, numel
from openprim.dialect import contract, graph_functions

NAME = "prim-batch-chunks"


# Ops that are not kernels of their own once compiled: elementwise ops and batch norms fuse into their
# producers (prim-fuse), reshapes are views.
UNCOUNTED = ELEMENTWISE | {"batch_norm", "reshape"}


def _axis(a: int, rank: int) -> int:
    return a % rank if rank else 0


# Training ops whose every result value reads the whole batch: the batch's statistics and what uses them, a
# filter's gradient (a sum over the samples), the mean loss and its gradient (divided by the batch).
BATCH_REDUCING = frozenset({"batch_norm_training", "batch_norm_statistics", "batch_norm_backward",
                            "batch_norm_backward_sums", "conv2d_backward_weights", "cross_entropy", "cross_entropy_backward"})


def _keeps_samples_apart(op: ir.Operation, attrs: dict, n: int) -> bool:
    """Whether op computes each sample from that sample alone, by its axis attributes (dim 0 untouched)."""
    name = op.name[5:]
    rank = len(op.operands[0].type.shape)
    if name in BATCH_REDUCING:
        return False
    if name in ("softmax", "log_softmax", "concat", "softmax_backward", "log_softmax_backward"):
        return _axis(attrs["axis"], rank) != 0
    if name == "transpose":
        return list(attrs["perm"])[0] == 0
    if name == "reduce":
        return all(_axis(a, rank) != 0 for a in attrs["axes"])
    if name == "slice":
        return (attrs["starts"][0], attrs["ends"][0], attrs["steps"][0]) == (0, op.operands[0].type.shape[0], 1)
    if name == "pad":
        return attrs["pads"][0] == 0 and attrs["pads"][rank] == 0
    if name in ("layer_norm", "rms_norm", "layer_norm_backward"):
        return attrs["normalized_ndim"] < rank
    return True


def _same_with(op: ir.Operation, attrs: dict, batched: dict, n: int, padding: bool = False) -> bool:
    """Whether op's shape rule gives its result for one sample once its batched operands are one sample's:
    dim 0 = 1. One sample is the strictest case: an operand that is not batched broadcasts along dim 0 only
    with size 1, which then fits every chunk.
    padding: a batched value may also hold `batched[v]` rows per sample, sample after sample ([N, S, D]
    reshaped to [N S, D] for a linear layer: S rows each); a reshape keeps that whenever its dim 0 is a
    multiple of N, and one sample's operands then have that many rows."""
    result = list(op.result.type.shape)
    if not result or (result[0] % n if padding else result[0] != n):
        return False
    rows = result[0] // n
    if op.name == "prim.reshape":
        return padding or list(op.operands[0].type.shape)[0] == n
    def one_sample(v):
        if v in batched:
            return [batched[v], *v.type.shape[1:]]
        if padding and (_same_rows(v, n) or _sample_local_indices(op, v, batched, n)):
            return [1, *v.type.shape[1:]]
        return v.type.shape
    shapes = [None if v is None else tuple(one_sample(v)) for v in dialect.operand_groups(op)]
    if op.name == "prim.slice":
        attrs = {**attrs, "ends": [rows, *attrs["ends"][1:]]}
    try:
        return list(infer(op.name[5:], shapes, attrs)) == [rows, *result[1:]]
    except ShapeError:
        return False


def _same_rows(v: ir.Value, n: int) -> bool:
    """A constant of n equal rows (an embedding of ids that are constants expanded to the batch, folded at
    import): the same for every real and padded sample (not for chunks: its type keeps the n rows)."""
    owner = v.owner if isinstance(v, ir.OpResult) else None
    if owner is None or owner.name != "prim.constant" or not v.type.shape or v.type.shape[0] != n:
        return False
    rows = dialect.to_numpy(owner.attributes["value"])
    return bool((rows == rows[:1]).all())


def _sample_local_indices(op: ir.Operation, v: ir.Value, batched: dict, n: int) -> bool:
    """Whether v is the constant indices of a gather along dim 0 of a batched input of p rows per sample
    that reads, for each sample i, that sample's rows: indices[i] = indices[0] + i p, indices[0] in [0, p)
    (the torch importer's `mask[:, None, None, :]` through index tensors: a gather of the flattened mask)."""
    data = op.operands[0]
    owner = v.owner if isinstance(v, ir.OpResult) else None
    if op.name != "prim.gather" or v is data or data not in batched or dialect.op_attrs(op)["axis"] != 0 or \
            owner is None or owner.name != "prim.constant" or not v.type.shape or v.type.shape[0] != n:
        return False
    p, idx = batched[data], dialect.to_numpy(owner.attributes["value"]).astype(np.int64)
    offsets = (np.arange(n) * p).reshape((n,) + (1,) * (idx.ndim - 1))
    return bool(((idx - offsets) == idx[:1]).all() and (idx[0] >= 0).all() and (idx[0] < p).all())


def _nbytes(v: ir.Value) -> int:
    t = ir.RankedTensorType(v.type)
    return numel(t.shape) * ITEMSIZE[dialect.dtype_name(t.element_type)]


def _macs(op: ir.Operation) -> int:
    """Multiply-adds of a conv2d (either direction) or matmul; 0 for other ops."""
    out = numel(op.result.type.shape)
    if op.name in ("prim.conv2d", "prim.conv2d_backward_data"):
        _, c, r, s = filter_dims(dialect.op_attrs(op)["filter_layout"], list(op.operands[1].type.shape))
        if op.name == "prim.conv2d_backward_data":   # the forward's, c r s per value of grad_output
            out = numel(op.operands[0].type.shape)
        return out * c * r * s
    if op.name == "prim.matmul":
        return out * op.operands[0].type.shape[-1]
    return 0


@dataclass
class Analysis:
    """What the pass found: the batch, the batched values, and the figures that choose the chunk (both
    over the ops that stay kernels, not UNCOUNTED)."""
    n: int
    batched: list                 # the batched values, in order
    per_sample_peak: int          # largest bytes of batched operands + result of one op, per sample
    intensity: float              # multiply-adds per byte of batched operands and results, over all ops
    slices: list                  # the batched prim.slice ops (their ends change with the batch)


def analyze(fn: ir.Operation, padding: bool = False) -> Analysis | str:
    """The batched values of a graph function (module docstring), or why the batch cannot be split.
    padding: for a batch padded with copies of real samples (driver/dynamic_batch.py) rather than split,
    where an index bounds check over the whole batch still sees every real index."""
    if contract.state(fn):
        return "it carries state between calls (a KV cache is the whole batch's)"
    block = fn.regions[0].blocks[0]
    args = list(block.arguments)
    args = args[:len(args) - len(contract.param_names(fn))]   # parameters (weights as values) carry no batch
    shapes = [list(a.type.shape) for a in args]
    if not args or any(not s for s in shapes) or len({s[0] for s in shapes}) != 1 or shapes[0][0] < 2:
        return "the inputs do not share a leading batch dimension of 2 or more"
    n = shapes[0][0]
    batched, peak, moved, macs, slices = dict.fromkeys(args, 1), 0, 0, 0, []   # value -> rows per sample
    order = list(args)
    for op in [o.operation for o in block.operations]:
        if op.name == "func.return":
            if any(v not in batched and not (padding and _is_check(v)) for v in op.operands):
                return "an output does not carry the batch"
            continue
        if padding and op.name == "prim.bounds_check":
            continue
        if not any(v in batched for v in op.operands):
            continue
        if not op.name.startswith("prim."):
            return f"'{op.name}' reads a batched value"
        attrs = dialect.op_attrs(op)
        if not _keeps_samples_apart(op, attrs, n) or not _same_with(op, attrs, batched, n, padding):
            return f"{dialect.where(op.location)}: '{op.name}' mixes samples or moves the batch dimension"
        batched[op.result] = op.result.type.shape[0] // n
        order.append(op.result)
        if op.name == "prim.slice":
            slices.append(op)
        if op.name[5:] not in UNCOUNTED:
            nbytes = sum(_nbytes(v) for v in op.operands if v in batched) + _nbytes(op.result)
            peak, moved, macs = max(peak, nbytes), moved + nbytes, macs + _macs(op)
    return Analysis(n, order, peak // n, macs / max(moved, 1), slices)


def _is_check(v: ir.Value) -> bool:
    owner = v.owner if isinstance(v, ir.OpResult) else None
    return owner is not None and owner.name == "prim.bounds_check"


def chunk_size(a: Analysis, budget: int, max_intensity: float) -> int:
    """The samples per chunk: the largest divisor of N whose working set fits the budget; N when the
    network is compute-bound or one sample already overflows it."""
    if a.intensity >= max_intensity:
        return a.n
    fits = [c for c in range(1, a.n + 1) if a.n % c == 0 and c * a.per_sample_peak <= budget]
    return max(fits) if fits else a.n


def split(fn: ir.Operation, a: Analysis, c: int) -> None:
    """Give every batched value dim 0 = c (and the slices' ends), and record prim.batch_chunks = N / c."""
    for v in a.batched:
        t = ir.RankedTensorType(v.type)
        v.set_type(ir.RankedTensorType.get([c, *t.shape[1:]], t.element_type))
    for op in a.slices:
        ends = dialect.op_attrs(op)["ends"]
        op.attributes["ends"] = dialect.make_attr([c, *ends[1:]], "i64s")
    block = fn.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [v.type for v in block.arguments], [v.type for v in ret.operands]))
    contract.set_batch_chunks(fn, a.n // c)


@dataclass
class Options:
    NAME = NAME
    budget: int = 20 << 20          # bytes of one op's activations per chunk (of the 32 MB L3 it was fitted on)
    max_intensity: float = 28.0     # multiply-adds per activation byte above which the batch stays whole

    def entries(self):
        return [(NAME, self.run)]

    def run(self, module_op):
        with module_op.context, ir.Location.unknown():
            for fn in graph_functions(module_op):
                found = None if contract.batch_chunks(fn) is not None else analyze(fn)
                if isinstance(found, Analysis):
                    c = chunk_size(found, self.budget, self.max_intensity)
                    if c < found.n:
                        split(fn, found, c)

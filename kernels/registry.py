"""Which hand-written kernel computes an op: one protocol for every kernel builder.

A builder takes a `KernelRequest` (the kernel function to write, with the signature outlining gave it,
and what it computes) and returns the function's MLIR text, or None where it does not apply; the op
then keeps its linalg form (a transform schedule on the CPU, prim-gpu-map's grid mapping on GPUs).
A conv2d/matmul's builder is its solver's `kernel(request)` (solvers/); the other ops' builders are
the table below, keyed by (op, target kind): on the CPU, vectorized row kernels (kernels/cpu/rows.py) for
softmax / log_softmax / layer_norm, whose reference lowering calls libm's scalar expf per value, and
pooling read in place (kernels/cpu/pool.py) instead of through a padded copy, index_copy writing only its
rows into a buffer it shares with its input (kernels/cpu/index_copy.py: a KV cache), gathers of whole rows
(kernels/cpu/gather.py), slices with a step along the innermost dim read in contiguous runs
(kernels/cpu/strided_slice.py), per-channel sums of
channels-last maps swept row by row (kernels/cpu/channel_sums.py: batch norm training and its backward),
max pooling's input gradient scattered per window (kernels/cpu/max_pool_backward.py), and transposes that
read and write in runs (kernels/cpu/transpose.py); on GPUs, batch norm's training statistics and backward
and sums over every dim but the last, with the rows split across blocks (kernels/gpu/channel_sums.py), and
reductions over the trailing dims with a block per row (kernels/gpu/rows.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from openprim.base.dtypes import FLOATS
from openprim.base.target import Target

from .cpu import channel_sums as cpu_channel_sums
from .cpu import gather as cpu_gather
from .cpu import index_copy as cpu_index_copy
from .cpu import max_pool_backward as cpu_max_pool_backward
from .cpu import pool as cpu_pool
from .cpu import transpose as cpu_transpose
from .cpu import rows as cpu_rows
from .cpu import strided_slice as cpu_strided_slice
from .gpu import channel_sums as gpu_channel_sums
from .gpu import index_copy as gpu_index_copy
from .gpu import pool, rows, transpose
from .gpu.gemm import _shape


@dataclass(frozen=True)
class KernelRequest:
    name: str                               # the kernel function's symbol
    signature: list[tuple[str, str]]        # (argument, memref type): the inputs, then the output
    op: str                                 # the prim op: "conv2d", "softmax", ...
    attrs: dict                             # its attributes
    shape: tuple                            # its result's shape
    dtype: str                              # its result's element type
    given: tuple[bool, ...]                 # per operand group of the op: present (optional ones may not be)
    target: Target
    problem: object = None                  # a solver's ConvProblem / GemmProblem
    params: dict = field(default_factory=dict)   # the solver's parameters


def reduced_dims(op: str, attrs: dict, rank: int) -> int:
    """How many trailing dimensions a softmax / log_softmax / layer_norm reduces (0: not a row op)."""
    if op in ("softmax", "log_softmax"):
        return 1 if attrs["axis"] % rank == rank - 1 and rank > 1 else 0
    if op in ("layer_norm", "rms_norm"):
        return attrs["normalized_ndim"] if attrs["normalized_ndim"] < rank else 0
    return 0


def _rows(r: KernelRequest) -> str | None:
    """A block per row (rows.py) for reductions over the last dimensions."""
    reduced = reduced_dims(r.op, r.attrs, len(r.shape))
    return rows.row_kernel(r.name, r.signature, r.op, reduced, r.dtype, r.attrs, r.given) if reduced else None


def _cpu_rows(r: KernelRequest) -> str | None:
    """Rows split between the threads, each swept in vector<16xf32> (cpu/rows.py), over the last dimensions."""
    reduced = reduced_dims(r.op, r.attrs, len(r.shape))
    return cpu_rows.row_kernel(r.name, r.signature, r.op, reduced, r.dtype, r.attrs, r.given) \
        if reduced else None


def _cpu_channel_sums(r: KernelRequest) -> str | None:
    """Rows of a channels-last map swept in order, chunks split between the threads (cpu/channel_sums.py)."""
    return cpu_channel_sums.channel_kernel(r.name, r.signature, r.op, r.attrs, r.dtype)


def _gpu_reduce(r: KernelRequest) -> str | None:
    """A block per row (rows.reduce_rows) for a max or min over the trailing dims, or a sum or mean of few
    long rows; the other sums and means as channel sums (gpu/channel_sums.py)."""
    dims = _shape(r.signature[0][1])
    axes = sorted(a % len(dims) for a in r.attrs["axes"])
    split = len(dims) - len(axes)
    rows_, length = math.prod(dims[:split]), math.prod(dims[split:])
    few_long = r.attrs["kind"] in ("sum", "mean") and rows_ < 256 <= length
    if axes and axes == list(range(split, len(dims))) and r.dtype in FLOATS and (
            r.attrs["kind"] in ("max", "min") or few_long):
        return rows.reduce_rows(r.name, r.signature, r.attrs["kind"], len(axes), r.dtype)
    return _gpu_channel_sums(r)


def _gpu_channel_sums(r: KernelRequest) -> str | None:
    """Rows split across blocks, channel vectors across lanes, partial sums then totals (gpu/channel_sums.py):
    NHWC batch norms, sums and means over every dim but the last."""
    if r.op == "reduce":
        return gpu_channel_sums.reduce_kernel(r.name, r.signature, r.attrs["kind"], r.attrs["axes"])
    if r.attrs.get("layout") != "NHWC":
        return None
    if r.op == "batch_norm_statistics":
        return gpu_channel_sums.statistics_kernel(r.name, r.signature, r.attrs["epsilon"])
    if r.op == "batch_norm_backward_sums":
        return gpu_channel_sums.backward_sums_kernel(r.name, r.signature)
    return gpu_channel_sums.backward_kernel(r.name, r.signature)


def _cpu_max_pool_backward(r: KernelRequest) -> str | None:
    """Each window scatters its dy to its first maximum, images split between the threads, NHWC f32."""
    return cpu_max_pool_backward.max_pool_backward_kernel(r.name, r.signature, r.attrs, r.dtype)


def _pool(r: KernelRequest) -> str | None:
    """One pass over the window per output (pool.py), NHWC only."""
    return pool.pool_kernel(r.name, r.signature, r.op[:3], r.attrs, r.shape, r.dtype) \
        if r.attrs["layout"] == "NHWC" else None


def _global_pool(r: KernelRequest) -> str | None:
    """Pixels split across blocks, channel vectors across lanes (pool.py), NHWC only."""
    return pool.global_pool_kernel(r.name, r.signature, r.dtype) if r.attrs["layout"] == "NHWC" else None


def _cpu_pool(r: KernelRequest) -> str | None:
    """Threads over the output rows, lanes along the channels, the input read in place (cpu/pool.py), NHWC only."""
    return cpu_pool.pool_kernel(r.name, r.signature, r.op, r.attrs, r.dtype)


def _cpu_gather(r: KernelRequest) -> str | None:
    """Whole rows copied per index (cpu/gather.py), where the rows fill a vector."""
    return cpu_gather.gather_kernel(r.name, r.signature, r.attrs["axis"])


def _cpu_strided_slice(r: KernelRequest) -> str | None:
    """A step along the innermost dim: contiguous reads, the lanes kept by a shuffle (cpu/strided_slice.py)."""
    return cpu_strided_slice.strided_slice_kernel(r.name, r.signature, r.attrs["starts"], r.attrs["steps"])


def _cpu_index_copy(r: KernelRequest) -> str:
    """Only the update rows written where the output has the input's buffer (cpu/index_copy.py)."""
    return cpu_index_copy.index_copy_kernel(r.name, r.signature, r.attrs["axis"])


def _gpu_index_copy(r: KernelRequest) -> str:
    """A copy launch that exits at once where the output has the input's buffer, then the rows (gpu/index_copy.py)."""
    return gpu_index_copy.index_copy_kernel(r.name, r.signature, r.attrs["axis"])


def _cpu_transpose(r: KernelRequest) -> str | None:
    """Runs on both sides: rows copied, or tiles transposed in registers (cpu/transpose.py)."""
    return cpu_transpose.transpose_kernel(r.name, r.signature, r.attrs["perm"])


def _transpose(r: KernelRequest) -> str | None:
    """A tiled transpose through shared memory (transpose.py) for permutations that swap two blocks."""
    return transpose.transpose_kernel(r.name, r.signature, r.attrs["perm"], r.dtype) \
        if transpose.split(r.attrs["perm"]) else None


GPU_KINDS = ("nvvm", "rocdl")
OP_KERNELS: dict[tuple[str, str], Callable[[KernelRequest], str | None]] = {
    **{(op, kind): _rows for op in ("softmax", "log_softmax", "layer_norm", "rms_norm") for kind in GPU_KINDS},
    **{(op, "cpu"): _cpu_rows for op in ("softmax", "log_softmax", "layer_norm", "rms_norm")},
    **{(op, kind): _pool for op in ("max_pool2d", "avg_pool2d") for kind in GPU_KINDS},
    **{("global_avg_pool", kind): _global_pool for kind in GPU_KINDS},
    **{(op, "cpu"): _cpu_pool for op in ("max_pool2d", "avg_pool2d", "global_avg_pool")},
    **{("transpose", kind): _transpose for kind in GPU_KINDS},
    ("transpose", "cpu"): _cpu_transpose,
    ("index_copy", "cpu"): _cpu_index_copy,
    ("gather", "cpu"): _cpu_gather,
    ("slice", "cpu"): _cpu_strided_slice,
    ("max_pool2d_backward", "cpu"): _cpu_max_pool_backward,
    **{(op, "cpu"): _cpu_channel_sums for op in ("batch_norm_statistics", "batch_norm_training", "batch_norm_backward",
                                                 "batch_norm_backward_sums", "group_norm", "reduce")},
    **{("index_copy", kind): _gpu_index_copy for kind in GPU_KINDS},
    **{(op, kind): _gpu_channel_sums for op in ("batch_norm_statistics", "batch_norm_backward",
                                                 "batch_norm_backward_sums")
       for kind in GPU_KINDS},
    **{("reduce", kind): _gpu_reduce for kind in GPU_KINDS},
}


def op_kernel(request: KernelRequest) -> str | None:
    """The op's own kernel on the request's target, or None (no builder, or it does not apply)."""
    build = OP_KERNELS.get((request.op, request.target.kind))
    return build(request) if build else None

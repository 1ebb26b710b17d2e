"""Problem descriptors: the ConvProblem / GemmProblem / AttentionProblem / DepthwisePointwiseProblem of a
prim.conv2d / matmul / attention / depthwise_pointwise operation (its shapes, layouts, dtype and fused
epilogue), which solvers are asked about, and problem_of, which reads them off the MLIR operation."""
from __future__ import annotations

import math
from dataclasses import dataclass

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.ops import RHS_PANELS, attention_dims, filter_dims


@dataclass(frozen=True)
class ConvProblem:
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    oh: int
    ow: int
    strides: tuple
    padding: tuple
    dilations: tuple
    groups: int
    layout: str
    filter_layout: str
    dtype: str
    epilogue: str

    @property
    def flops(self) -> float:
        return 2.0 * self.n * self.oh * self.ow * self.k * (self.c // self.groups) * self.r * self.s

    @property
    def depthwise(self) -> bool:
        return self.groups == self.c == self.k and self.groups > 1

    def descriptor(self) -> str:
        """A readable key of the whole problem, like MIOpen's problem descriptors."""
        pad = "x".join(map(str, self.padding))
        return (f"conv2d-{self.n}x{self.c}x{self.h}x{self.w}-k{self.k}-{self.r}x{self.s}"
                f"-s{self.strides[0]}x{self.strides[1]}-p{pad}-d{self.dilations[0]}x{self.dilations[1]}"
                f"-g{self.groups}-{self.layout}-{self.filter_layout}-{self.dtype}-{self.epilogue}")


@dataclass(frozen=True)
class DepthwisePointwiseProblem:
    """prim.depthwise_pointwise: an NHWC depthwise convolution (C channels, R x S) and the 1x1 convolution
    to K channels that reads its result."""
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    oh: int
    ow: int
    strides: tuple
    padding: tuple
    dilations: tuple
    dtype: str
    dw_epilogue: str
    epilogue: str

    @property
    def flops(self) -> float:
        return 2.0 * self.n * self.oh * self.ow * self.c * (self.r * self.s + self.k)

    def descriptor(self) -> str:
        pad = "x".join(map(str, self.padding))
        return (f"depthwise_pointwise-{self.n}x{self.c}x{self.h}x{self.w}-{self.r}x{self.s}"
                f"-s{self.strides[0]}x{self.strides[1]}-p{pad}-d{self.dilations[0]}x{self.dilations[1]}"
                f"-{self.dw_epilogue}-k{self.k}-{self.dtype}-{self.epilogue}")


@dataclass(frozen=True)
class GemmProblem:
    batch: int
    m: int
    n: int
    k: int
    transpose_rhs: bool
    batched_rhs: bool
    dtype: str
    epilogue: str
    panels: int = 0     # NT when the rhs is stored as [N/NT, K, NT] panels (prim-select packs constants)

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    def descriptor(self) -> str:
        return (f"gemm-b{self.batch}-m{self.m}-n{self.n}-k{self.k}-{'nt' if self.transpose_rhs else 'nn'}"
                f"{'-batched' if self.batched_rhs else ''}{f'-panels{self.panels}' if self.panels else ''}"
                f"-{self.dtype}-{self.epilogue}")


@dataclass(frozen=True)
class AttentionProblem:
    batch: int          # B * H
    sq: int
    sk: int
    d: int
    causal: bool
    mask: tuple | None  # the additive mask's shape, None without one
    dtype: str
    layout: str = "BHSD"  # of q, k, v and the output (base.ops.ATTENTION_LAYOUTS)

    @property
    def flops(self) -> float:
        """The two products (causal: about half of the scores are skipped)."""
        return 4.0 * self.batch * self.sq * self.sk * self.d * (0.5 if self.causal else 1.0)

    def descriptor(self) -> str:
        mask = "-mask" + "x".join(map(str, self.mask)) if self.mask else ""
        return (f"attention-b{self.batch}-q{self.sq}-k{self.sk}-d{self.d}{'-causal' if self.causal else ''}"
                f"{mask}{'' if self.layout == 'BHSD' else '-' + self.layout.lower()}-{self.dtype}")


def _epilogue_name(attrs, bias, residual) -> str:
    parts = (["bias"] if bias is not None else []) + (["residual"] if residual is not None else []) + \
        ([attrs["activation"]] if attrs["activation"] != "none" else [])
    return "+".join(parts) or "none"


def problem_of(op):
    """The problem descriptor of a prim.conv2d / matmul / attention / depthwise_pointwise operation; an empty operand or result
    (a zero-size dimension: nothing to compute, and no solver's cost or tiling is defined) is an error."""
    attrs = dialect.op_attrs(op)
    if op.name == "prim.attention":
        q, k, _, mask = dialect.operand_groups(op)
        b, h, sq, d = attention_dims(q.type.shape, attrs["layout"])
        sk = attention_dims(k.type.shape, attrs["layout"])[2]
        return AttentionProblem(b * h, sq, sk, d, bool(attrs["causal"]),
                                None if mask is None else tuple(mask.type.shape),
                                dialect.dtype_name(op.result.type.element_type), attrs["layout"])
    if op.name == "prim.depthwise_pointwise":
        x, dw, dw_bias, w, bias, residual = dialect.operand_groups(op)
        (n, h, wd, c), (r, s, _), out = x.type.shape, dw.type.shape, tuple(op.result.type.shape)
        dw_attrs = {"activation": attrs["dw_activation"]}
        return DepthwisePointwiseProblem(n, c, h, wd, out[3], r, s, out[1], out[2], tuple(attrs["strides"]),
                                         tuple(attrs["padding"]), tuple(attrs["dilations"]),
                                         dialect.dtype_name(op.result.type.element_type),
                                         _epilogue_name(dw_attrs, dw_bias, None), _epilogue_name(attrs, bias, residual))
    a, b, bias, residual = dialect.operand_groups(op)
    for v in (a, b, op.result):
        if 0 in tuple(v.type.shape):
            raise OpenPrimError(f"{dialect.where(op.location)}: error: {op.name}: zero-size tensor "
                                f"{v.type}; every dimension must be at least 1")
    dtype = dialect.dtype_name(op.result.type.element_type)
    epi = _epilogue_name(attrs, bias, residual)
    out = tuple(op.result.type.shape)
    if op.name == "prim.matmul":
        lhs, rhs = tuple(a.type.shape), tuple(b.type.shape)
        if attrs["transpose_rhs"] == RHS_PANELS:
            return GemmProblem(1, math.prod(lhs[:-1]), rhs[0] * rhs[2], rhs[1], False, False, dtype, epi, rhs[2])
        t = bool(attrs["transpose_rhs"])
        n = rhs[-2] if t else rhs[-1]
        if len(rhs) == 2:
            return GemmProblem(1, math.prod(lhs[:-1]), n, lhs[-1], t, False, dtype, epi)
        return GemmProblem(math.prod(lhs[:-2]), lhs[-2], n, lhs[-1], t, True, dtype, epi)
    x, w = tuple(a.type.shape), tuple(b.type.shape)
    nchw = attrs["layout"] == "NCHW"
    n, c, h, wd = (x[0], x[1], x[2], x[3]) if nchw else (x[0], x[3], x[1], x[2])
    oh, ow = (out[2], out[3]) if nchw else (out[1], out[2])
    fl = attrs["filter_layout"]
    k, _, r, s = filter_dims(fl, w)
    return ConvProblem(n, c, h, wd, k, r, s, oh, ow, tuple(attrs["strides"]), tuple(attrs["padding"]),
                       tuple(attrs["dilations"]), attrs["groups"], attrs["layout"], fl, dtype, epi)

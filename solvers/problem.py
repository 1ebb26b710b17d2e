"""Problem descriptors: the ConvProblem / GemmProblem / AttentionProblem / DepthwisePointwiseProblem of a
prim.conv2d / matmul / attention / depthwise_pointwise operation (its shapes, layouts, dtype and fused
epilogue), which solvers are asked about; problem_of, which reads them off the MLIR operation; and their
text both ways: descriptor() writes the key that the tuning database and the `prim.problem` attribute use,
from_descriptor() and parse_descriptor() read it back (parse(p.descriptor()) == p)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from openprim import dialect
from openprim.base.errors import OpenPrimError
from openprim.base.ops import (ACTIVATIONS, ATTENTION_LAYOUTS, DTYPES, FILTER_LAYOUTS, LAYOUTS, RHS_PANELS, ShapeError,
                               attention_dims, filter_block, filter_dims, window_out, winograd_filter)

# A convolution's directions, after MIOpen's: which tensor it computes from the other two.
DIRECTIONS = {"fwd": "forward", "bwd_data": "backward data", "bwd_weights": "backward weights"}

_INT = r"(\d+)"
_WINDOW = rf"-{_INT}x{_INT}-s{_INT}x{_INT}-p{_INT}x{_INT}x{_INT}x{_INT}-d{_INT}x{_INT}"  # RxS, strides, pads, dilations
_EPILOGUE = r"([a-z0-9_+]+)"


def _bad(kind, text: str, why: str):
    """The one-line error of a descriptor that does not parse: what, why, and a valid one."""
    return OpenPrimError(f"{text!r} is not a problem descriptor: {why} (e.g. {kind.EXAMPLE})")


def _match(kind, text: str) -> re.Match:
    m = kind.PATTERN.fullmatch(text)
    if not m:
        raise _bad(kind, text, f"it does not read {kind.FORM}")
    return m


def _checked(kind, text: str, problem):
    """The problem, once its dtype is known and the text is exactly what descriptor() writes of it (so that a
    record stored under the text is found by the compile that looks it up)."""
    if problem.dtype not in DTYPES:
        raise _bad(kind, text, f"unknown dtype '{problem.dtype}' (one of {', '.join(DTYPES)})")
    if problem.descriptor() != text:
        raise _bad(kind, text, f"OpenPrim writes this problem as {problem.descriptor()!r}")
    return problem


def _epilogue(kind, text: str, epilogue: str, parts=("bias", "residual")) -> str:
    """`epilogue` when it is "none", or those of `parts` it fuses, then at most one activation, in that order."""
    names = epilogue.split("+")
    fused = [p for p in parts if p in names]
    rest = names[len(fused):]
    if epilogue != "none" and (names[:len(fused)] != fused or len(rest) > 1 or rest and rest[0] in ("none", *parts)):
        unknown = [n for n in names if n not in (*parts, *ACTIVATIONS)]
        raise _bad(kind, text, f"epilogue '{epilogue}': " + (f"unknown activation '{unknown[0]}'" if unknown else
                               f"not 'none' nor {', '.join(parts)} and an activation (each optional) in that order"))
    if rest and rest[0] not in ACTIVATIONS:
        raise _bad(kind, text, f"epilogue '{epilogue}': unknown activation '{rest[0]}'")
    return epilogue


def _window(kind, text: str, size: int, k: int, stride: int, p0: int, p1: int, dilation: int) -> int:
    """Output length of a sliding window; an error when the (dilated) filter is larger than the padded input."""
    try:
        return window_out(size, k, stride, p0, p1, dilation)
    except ShapeError as e:
        raise _bad(kind, text, str(e)) from None


def _positive(kind, text: str, **sizes) -> None:
    zero = [name for name, v in sizes.items() if v < 1]
    if zero:
        raise _bad(kind, text, f"{', '.join(zero)} must be positive")


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
    direction: str = "fwd"      # a key of DIRECTIONS: the tensor computed (output, input gradient, filter gradient)

    op = "conv2d"
    FORM = ("conv2d[_bwd_data|_bwd_weights]-<N>x<C>x<H>x<W>-k<K>-<R>x<S>-s<stride h>x<w>-p<top>x<left>x<bottom>x"
            "<right>-d<dilation h>x<w>-g<groups>-<NCHW|NHWC>-<filter layout>-<dtype>-<epilogue>")
    EXAMPLE = "conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none"
    PATTERN = re.compile(rf"conv2d(?:_(bwd_data|bwd_weights))?-{_INT}x{_INT}x{_INT}x{_INT}-k{_INT}{_WINDOW}-g{_INT}"
                         rf"-(\w+?)-(\w+?)-(\w+?)-{_EPILOGUE}")

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise OpenPrimError(f"convolution direction '{self.direction}': expected one of {', '.join(DIRECTIONS)}")

    @property
    def flops(self) -> float:
        return 2.0 * self.n * self.oh * self.ow * self.k * (self.c // self.groups) * self.r * self.s

    @property
    def depthwise(self) -> bool:
        return self.groups == self.c == self.k and self.groups > 1

    def descriptor(self) -> str:
        """A readable key of the whole problem, like MIOpen's problem descriptors (the forward one has no
        direction in it: it is the key of every record made before there were directions)."""
        pad = "x".join(map(str, self.padding))
        kind = "conv2d" if self.direction == "fwd" else f"conv2d_{self.direction}"
        return (f"{kind}-{self.n}x{self.c}x{self.h}x{self.w}-k{self.k}-{self.r}x{self.s}"
                f"-s{self.strides[0]}x{self.strides[1]}-p{pad}-d{self.dilations[0]}x{self.dilations[1]}"
                f"-g{self.groups}-{self.layout}-{self.filter_layout}-{self.dtype}-{self.epilogue}")

    @classmethod
    def from_descriptor(cls, text: str) -> ConvProblem:
        m = _match(cls, text)
        n, c, h, w, k, r, s, sh, sw, pt, pl, pb, pr, dh, dw, g = map(int, m.groups()[1:17])
        layout, filter_layout, dtype, epilogue = m.groups()[17:]
        _positive(cls, text, N=n, C=c, H=h, W=w, K=k, R=r, S=s, strides=min(sh, sw), dilations=min(dh, dw), groups=g)
        if c % g or k % g:
            raise _bad(cls, text, f"groups {g} must divide the channels C={c} and K={k}")
        if layout not in LAYOUTS:
            raise _bad(cls, text, f"unknown layout '{layout}' (one of {', '.join(LAYOUTS)})")
        if filter_layout not in FILTER_LAYOUTS and not filter_block(filter_layout) and \
                not winograd_filter(filter_layout)[0]:
            raise _bad(cls, text, f"unknown filter layout '{filter_layout}' (one of {', '.join(FILTER_LAYOUTS)}, "
                                  f"KRSC<b>k, W<m>KC<b>k)")
        oh, ow = _window(cls, text, h, r, sh, pt, pb, dh), _window(cls, text, w, s, sw, pl, pr, dw)
        return _checked(cls, text, cls(n, c, h, w, k, r, s, oh, ow, (sh, sw), (pt, pl, pb, pr), (dh, dw), g, layout,
                                       filter_layout, dtype, _epilogue(cls, text, epilogue), m[1] or "fwd"))


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

    op = "depthwise_pointwise"
    FORM = ("depthwise_pointwise-<N>x<C>x<H>x<W>-<R>x<S>-s<stride h>x<w>-p<top>x<left>x<bottom>x<right>"
            "-d<dilation h>x<w>-<depthwise epilogue>-k<K>-<dtype>-<epilogue>")
    EXAMPLE = "depthwise_pointwise-32x144x56x56-3x3-s1x1-p1x1x1x1-d1x1-bias+clamp-k24-f16-bias"
    PATTERN = re.compile(rf"depthwise_pointwise-{_INT}x{_INT}x{_INT}x{_INT}{_WINDOW}-{_EPILOGUE}-k{_INT}-(\w+?)"
                         rf"-{_EPILOGUE}")

    @property
    def flops(self) -> float:
        return 2.0 * self.n * self.oh * self.ow * self.c * (self.r * self.s + self.k)

    def descriptor(self) -> str:
        pad = "x".join(map(str, self.padding))
        return (f"depthwise_pointwise-{self.n}x{self.c}x{self.h}x{self.w}-{self.r}x{self.s}"
                f"-s{self.strides[0]}x{self.strides[1]}-p{pad}-d{self.dilations[0]}x{self.dilations[1]}"
                f"-{self.dw_epilogue}-k{self.k}-{self.dtype}-{self.epilogue}")

    @classmethod
    def from_descriptor(cls, text: str) -> DepthwisePointwiseProblem:
        m = _match(cls, text)
        n, c, h, w, r, s, sh, sw, pt, pl, pb, pr, dh, dw = map(int, m.groups()[:14])
        dw_epilogue, k, dtype, epilogue = m[15], int(m[16]), m[17], m[18]
        _positive(cls, text, N=n, C=c, H=h, W=w, K=k, R=r, S=s, strides=min(sh, sw), dilations=min(dh, dw))
        oh, ow = _window(cls, text, h, r, sh, pt, pb, dh), _window(cls, text, w, s, sw, pl, pr, dw)
        return _checked(cls, text, cls(n, c, h, w, k, r, s, oh, ow, (sh, sw), (pt, pl, pb, pr), (dh, dw), dtype,
                                       _epilogue(cls, text, dw_epilogue, ("bias",)), _epilogue(cls, text, epilogue)))


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

    op = "matmul"
    FORM = "gemm-b<batch>-m<M>-n<N>-k<K>-<nn|nt>[-batched][-panels<NT>]-<dtype>-<epilogue>"
    EXAMPLE = "gemm-b1-m128-n256-k64-nn-f32-bias+relu"
    PATTERN = re.compile(rf"gemm-b{_INT}-m{_INT}-n{_INT}-k{_INT}-(nn|nt)(-batched)?(?:-panels{_INT})?-(\w+?)"
                         rf"-{_EPILOGUE}")

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    def descriptor(self) -> str:
        return (f"gemm-b{self.batch}-m{self.m}-n{self.n}-k{self.k}-{'nt' if self.transpose_rhs else 'nn'}"
                f"{'-batched' if self.batched_rhs else ''}{f'-panels{self.panels}' if self.panels else ''}"
                f"-{self.dtype}-{self.epilogue}")

    @classmethod
    def from_descriptor(cls, text: str) -> GemmProblem:
        m = _match(cls, text)
        batch, rows, cols, k = map(int, m.groups()[:4])
        transposed, batched, panels = m[5] == "nt", bool(m[6]), int(m[7] or 0)
        _positive(cls, text, batch=batch, M=rows, N=cols, K=k)
        if m[7] is not None and (panels < 1 or cols % panels or transposed or batched):
            raise _bad(cls, text, f"panels{m[7]}: a 2-d, non-transposed rhs stored in panels of a positive "
                                  f"width that divides N={cols}")
        return _checked(cls, text, cls(batch, rows, cols, k, transposed, batched, m[8],
                                       _epilogue(cls, text, m[9]), panels))


@dataclass(frozen=True)
class NormGemmProblem(GemmProblem):
    """prim.norm_matmul: a layer_norm or rms_norm over K feeding a [M, K] x [K, N] matmul (prim-select's fusion)."""
    norm: str = "layer_norm"

    op = "norm_matmul"
    FORM = "norm_gemm-<layer_norm|rms_norm>-b1-m<M>-n<N>-k<K>-nn[-panels<NT>]-<dtype>-<epilogue>"
    EXAMPLE = "norm_gemm-layer_norm-b1-m16-n2304-k768-nn-f16-bias"
    PATTERN = re.compile(rf"norm_gemm-(layer_norm|rms_norm)-b1-m{_INT}-n{_INT}-k{_INT}-nn(?:-panels{_INT})?-(\w+?)"
                         rf"-{_EPILOGUE}")

    def descriptor(self) -> str:
        return f"norm_gemm-{self.norm}-" + super().descriptor()[len("gemm-"):]

    @classmethod
    def from_descriptor(cls, text: str) -> NormGemmProblem:
        m = _match(cls, text)
        rows, cols, k = map(int, m.groups()[1:4])
        panels = int(m[5] or 0)
        _positive(cls, text, M=rows, N=cols, K=k)
        if m[5] is not None and (panels < 1 or cols % panels):
            raise _bad(cls, text, f"panels{m[5]}: panels of a positive width that divides N={cols}")
        return _checked(cls, text, cls(1, rows, cols, k, False, False, m[6], _epilogue(cls, text, m[7]), panels,
                                       m[1]))


@dataclass(frozen=True)
class AttentionProblem:
    batch: int          # B * H
    sq: int
    sk: int
    d: int
    causal: bool
    mask: tuple | None  # the additive mask's shape (() for a scalar one), None without one
    dtype: str
    layout: str = "BHSD"  # of q, k, v and the output (base.ops.ATTENTION_LAYOUTS)

    op = "attention"
    FORM = "attention-b<B*H>-q<Sq>-k<Sk>-d<D>[-causal][-mask<dims joined by x>][-bshd]-<dtype>"
    EXAMPLE = "attention-b12-q128-k128-d64-causal-mask1x1x128x128-f16"
    PATTERN = re.compile(rf"attention-b{_INT}-q{_INT}-k{_INT}-d{_INT}(-causal)?(-mask((?:\d+(?:x\d+)*)?))?"
                         rf"(?:-([a-z]+))?-(\w+?)")

    @property
    def flops(self) -> float:
        """The two products (causal: about half of the scores are skipped)."""
        return 4.0 * self.batch * self.sq * self.sk * self.d * (0.5 if self.causal else 1.0)

    def descriptor(self) -> str:
        mask = "" if self.mask is None else "-mask" + "x".join(map(str, self.mask))
        return (f"attention-b{self.batch}-q{self.sq}-k{self.sk}-d{self.d}{'-causal' if self.causal else ''}"
                f"{mask}{'' if self.layout == 'BHSD' else '-' + self.layout.lower()}-{self.dtype}")

    @classmethod
    def from_descriptor(cls, text: str) -> AttentionProblem:
        m = _match(cls, text)
        batch, sq, sk, d = map(int, m.groups()[:4])
        mask = None if m[6] is None else tuple(int(v) for v in m[7].split("x") if v)
        layout = (m[8] or "bhsd").upper()
        _positive(cls, text, batch=batch, Sq=sq, Sk=sk, D=d)
        if mask is not None and (len(mask) > 4 or any(v not in (1, s) for v, s in zip(reversed(mask), (sk, sq)))
                                 or 0 in mask):
            raise _bad(cls, text, f"mask {'x'.join(map(str, mask))} does not broadcast to the scores [.., {sq}, {sk}]")
        if layout not in ATTENTION_LAYOUTS:
            raise _bad(cls, text, f"unknown layout '{m[8]}' (bshd, or none for BHSD)")
        return _checked(cls, text, cls(batch, sq, sk, d, bool(m[5]), mask, m[9], layout))


# The descriptor's first word -> the problem kind that reads it.
KINDS = {"conv2d": ConvProblem, **{f"conv2d_{d}": ConvProblem for d in DIRECTIONS if d != "fwd"},
         "gemm": GemmProblem, "norm_gemm": NormGemmProblem, "depthwise_pointwise": DepthwisePointwiseProblem,
         "attention": AttentionProblem}


def parse_descriptor(text: str):
    """The problem a descriptor names (the inverse of descriptor()), or an OpenPrimError saying what is wrong."""
    kind = KINDS.get(text.split("-", 1)[0])
    if kind is None:
        raise OpenPrimError(f"{text!r} is not a problem descriptor: it starts with none of {', '.join(KINDS)} "
                            f"(e.g. {ConvProblem.EXAMPLE} or {GemmProblem.EXAMPLE}; `openprim explain MODEL` "
                            f"lists a model's)")
    return kind.from_descriptor(text)


def _epilogue_name(attrs, bias, residual) -> str:
    parts = (["bias"] if bias is not None else []) + (["residual"] if residual is not None else []) + \
        ([attrs["activation"]] if attrs["activation"] != "none" else [])
    return "+".join(parts) or "none"


# The backward convolutions' ops and the direction each computes; their solvers are conv2d solvers that
# declare the direction (solvers.applicable reads the op kind through SOLVER_OP).
BACKWARD_CONV_OPS = {"prim.conv2d_backward_data": "bwd_data", "prim.conv2d_backward_weights": "bwd_weights"}
SOLVER_OP = {"conv2d_backward_data": "conv2d", "conv2d_backward_weights": "conv2d"}


def _backward_conv_problem(op, attrs) -> ConvProblem:
    """The ConvProblem of a backward convolution: the forward convolution's sizes (x [N, C, H, W], filter
    [K, C/g, R, S], y [N, K, OH, OW]) and the direction; the dtype is the result's."""
    direction = BACKWARD_CONV_OPS[op.name]
    a, b = dialect.operand_groups(op)
    nchw = attrs["layout"] == "NCHW"
    nhwc = lambda t: (t[0], t[1], t[2], t[3]) if nchw else (t[0], t[3], t[1], t[2])  # noqa: E731
    fl = attrs["filter_layout"]
    if direction == "bwd_data":
        n, k, oh, ow = nhwc(tuple(a.type.shape))
        _, cg, r, s = filter_dims(fl, tuple(b.type.shape))
        c, (h, w) = cg * attrs["groups"], attrs["input_size"]
    else:
        (n, c, h, w), (_, k, oh, ow) = nhwc(tuple(a.type.shape)), nhwc(tuple(b.type.shape))
        r, s = attrs["filter_size"]
    for v in (a, b, op.result):
        if 0 in tuple(v.type.shape):
            raise OpenPrimError(f"{dialect.where(op.location)}: error: {op.name}: zero-size tensor "
                                f"{v.type}; every dimension must be at least 1")
    return ConvProblem(n, c, h, w, k, r, s, oh, ow, tuple(attrs["strides"]), tuple(attrs["padding"]),
                       tuple(attrs["dilations"]), attrs["groups"], attrs["layout"], fl,
                       dialect.dtype_name(op.result.type.element_type), "none", direction)


def problem_of(op):
    """The problem descriptor of a prim.conv2d (or its backward ops) / matmul / attention / depthwise_pointwise
    operation; an empty operand or result
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
    if op.name in BACKWARD_CONV_OPS:
        return _backward_conv_problem(op, attrs)
    if op.name == "prim.norm_matmul":
        x, _, _, w, bias, residual = dialect.operand_groups(op)
        lhs, rhs = tuple(x.type.shape), tuple(w.type.shape)
        panels = rhs[2] if len(rhs) == 3 else 0
        return NormGemmProblem(1, math.prod(lhs[:-1]), op.result.type.shape[-1], lhs[-1], False, False,
                               dialect.dtype_name(op.result.type.element_type), _epilogue_name(attrs, bias, residual),
                               panels, attrs["norm"])
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

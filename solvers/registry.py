"""The solver registry, in the spirit of MIOpen: every way we know to compute a convolution or a GEMM.

A solver answers four questions about a problem:
  is_applicable(problem, target) -> None, or the reason it does not apply
  cost(problem, target)          -> predicted seconds (a roofline estimate, used to rank solvers)
  tunables(problem)              -> {parameter: candidate values}; default_params(problem, target) picks one
  build(kt, operands, ...)       -> the kernel body (linalg on tensors), and schedule(params) -> the
                                    transform script that tiles and vectorizes it (transform dialect)

Fast CPU solvers work on NHWC activations and RSCK filters (prim-select re-lays out constant filters at
compile time and wraps NCHW convolutions in transposes that cancel between layers).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from openprim.base.target import Target

from openprim.kernels import schedules
from openprim.kernels.amd import mma as gpu_amd_mma
from openprim.kernels.cpu import implicit_gemm as cpu_implicit_gemm
from openprim.kernels.gpu import gemm as gpu_gemm
from openprim.kernels.nvidia import mma as gpu_mma
from openprim.kernels.nvidia import wgmma as gpu_wgmma
from openprim.kernels.nvidia import wgmma_im2col, wgmma_space_to_depth, wgmma_winograd
from openprim.kernels.semantics import KernelText, V, activation, amap, emit_conv2d, emit_matmul, epilogue, mac_body, ttype




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
class GemmProblem:
    batch: int
    m: int
    n: int
    k: int
    transpose_rhs: bool
    batched_rhs: bool
    dtype: str
    epilogue: str

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    def descriptor(self) -> str:
        return (f"gemm-b{self.batch}-m{self.m}-n{self.n}-k{self.k}-{'nt' if self.transpose_rhs else 'nn'}"
                f"{'-batched' if self.batched_rhs else ''}-{self.dtype}-{self.epilogue}")


def roofline(flops, nbytes, target, efficiency=1.0):
    """Compute time at the solver's efficiency plus memory time: additive, so that a more efficient
    solver wins even where both are memory-bound."""
    peak, bandwidth = target.rates
    return flops / (peak * 1e9 * efficiency) + nbytes / (bandwidth * 1e9)


class Solver:
    name = ""
    op = "conv2d"
    efficiency = 1.0        # fraction of peak its schedule reaches (measured on the ResNet layers)
    targets = ("cpu",)      # target kinds it has kernels for
    scheduled = True        # False: its CPU kernel is left as loop nests (LLVM vectorizes what it can)

    def is_applicable(self, p, target) -> str | None:
        return None

    def cost(self, p, target) -> float:
        nbytes = 4 * (p.n * p.h * p.w * p.c + p.k * p.c * p.r * p.s + p.n * p.oh * p.ow * p.k) \
            if self.op == "conv2d" else 4 * p.batch * (p.m * p.k + p.k * p.n + p.m * p.n)
        return roofline(p.flops, nbytes, target, self.efficiency)

    def tunables(self, p) -> dict:
        return {}

    def default_params(self, p, target) -> dict:
        return {}

    def filter_layout(self) -> str | None:
        """The filter layout build() expects (prim-select converts constant filters), or None for any."""
        return None

    def schedule(self, p, params) -> str | None:
        return None

    def kernel(self, request) -> str | None:
        """Its hand-written kernel for request.target (kernels/registry.py's KernelRequest), or None: its
        build() + schedule() (CPU) or prim-gpu-map's grid mapping (GPUs) make the kernel."""
        return None


THREADS = 2


def _thread_split(rows, cols, row_tile, col_tile):
    """scf.forall tile sizes (rows, cols) that give the threads equal whole register tiles: split the
    rows when they divide evenly, else the columns, else one row per iteration."""
    if rows % (THREADS * row_tile) == 0:
        return rows // THREADS, 0
    if cols % (THREADS * col_tile) == 0:
        return 0, cols // THREADS
    return row_tile, 0


def _largest_divisor(n, limit):
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _pad_nhwc(kt: KernelText, x: V, attrs) -> V:
    pt, pl, pb, pr = attrs["padding"]
    return kt.pad(x, [0, pt, pl, 0], [0, pb, pr, 0], 0.0)


def _named_conv(kt: KernelText, op: str, xp: V, w: V, attrs, shape) -> V:
    """linalg.<op> (a named NHWC convolution) of the padded input into a zeroed f32 accumulator."""
    acc = kt.filled(shape, "f32", 0.0, role="acc")
    n = kt.fresh("conv")
    s, d = attrs["strides"], attrs["dilations"]
    kt.emit(f"{n} = linalg.{op} {{dilations = dense<[{d[0]}, {d[1]}]> : tensor<2xi64>, "
            f"strides = dense<[{s[0]}, {s[1]}]> : tensor<2xi64>}} ins({xp.name}, {w.name} : {xp.type}, {w.type}) "
            f"outs({acc.name} : {acc.type}) -> {acc.type}")
    return V(n, shape, "f32")


def _nhwc_epilogue(kt, acc, operands, attrs, dtype):
    _, _, bias, residual = operands
    return epilogue(kt, acc, bias, residual, 3, attrs, dtype, always=True)


class DenseNhwcSolver(Solver):
    """Base of the solvers for ungrouped NHWC convolutions with RSCK filters."""

    def is_applicable(self, p, target):
        if p.layout != "NHWC":
            return "needs NHWC activations (prim-select wraps NCHW in transposes)"
        if p.groups != 1:
            return f"grouped convolution (groups={p.groups})"
        return None

    def filter_layout(self):
        return "RSCK"


class ConvDirect(DenseNhwcSolver):
    """Direct convolution, NHWC x RSCK: register tiles of (1 row, WT columns, FT filters), the filter
    window and input channels as reduction loops (kh, kw, CT), decomposed to 1-d convolutions and
    vectorized into FMAs; threads share output rows."""
    name = "conv_direct"
    efficiency = 0.9

    def tunables(self, p):
        return {"wt": [4, 7, 8, 14], "ft": [16, 32, 64], "ct": [1, 3, 8, 16]}

    def default_params(self, p, target):
        ft = 32 if p.k % 32 == 0 else (16 if p.k % 16 == 0 else p.k)
        wt = next((w for w in (8, 7, 14, 4) if p.ow % w == 0), _largest_divisor(p.ow, 8))
        ct = next((c for c in (8, 3, 16, 4, 2) if p.c % c == 0), 1)
        return {"wt": wt, "ft": ft, "ct": ct}

    def build(self, kt, operands, attrs, shape, dtype, params):
        acc = _named_conv(kt, "conv_2d_nhwc_hwcf", _pad_nhwc(kt, operands[0], attrs), operands[1], attrs, shape)
        return _nhwc_epilogue(kt, acc, operands, attrs, dtype)

    def schedule(self, p, params):
        return schedules.conv_direct(*_thread_split(p.oh, p.k, 1, params["ft"]), params["wt"], params["ft"],
                                     params["ct"])


class GemmBackedSolver(DenseNhwcSolver):
    """A convolution computed as one GEMM (self.gemm_problem): the GEMM solver's parameters and schedule."""

    def gemm_problem(self, p) -> "GemmProblem":
        raise NotImplementedError

    def tunables(self, p):
        return GEMM.tunables(self.gemm_problem(p))

    def default_params(self, p, target):
        return GEMM.default_params(self.gemm_problem(p), target)

    def schedule(self, p, params):
        return GEMM.schedule(self.gemm_problem(p), params)


class Conv1x1Gemm(GemmBackedSolver):
    """A 1x1, stride-1, unpadded convolution is a GEMM: [N*H*W, C] x [C, K]."""
    name = "conv_1x1_gemm"
    efficiency = 0.95

    def is_applicable(self, p, target):
        if (p.r, p.s) != (1, 1) or tuple(p.strides) != (1, 1) or any(p.padding):
            return "not a 1x1, stride-1, unpadded convolution"
        return super().is_applicable(p, target)

    def cost(self, p, target):
        """Its K loop is the input channels: with few of them the GEMM schedule is mostly overhead
        (MobileNetV2's 16- and 24-channel layers ran 3.4-7.7x faster on conv_direct; bench/RESULTS.md)."""
        return super().cost(p, target) * max(1.0, 64 / p.c)

    def gemm_problem(self, p):
        return GemmProblem(1, p.n * p.oh * p.ow, p.k, p.c, False, False, p.dtype, p.epilogue)

    def build(self, kt, operands, attrs, shape, dtype, params):
        x, w = operands[0], operands[1]
        N, H, W, C = x.shape
        acc = _matmul(kt, kt.reshape(x, (N * H * W, C)), kt.reshape(w, (C, shape[3])))
        return _gemm_epilogue_4d(kt, acc, operands, attrs, shape, dtype)


class ConvIm2colGemm(GemmBackedSolver):
    """im2col + GEMM: copy every filter window into a row of [N*OH*OW, R*S*C], then one GEMM with
    the [R*S*C, K] filter. Costs an extra buffer of R*S times the input; wins for small C (the stem)."""
    name = "conv_im2col_gemm"
    efficiency = 0.8

    def cost(self, p, target):
        col = 4 * p.n * p.oh * p.ow * p.r * p.s * p.c
        return super().cost(p, target) + 2 * col / (target.rates[1] * 1e9)

    def gemm_problem(self, p):
        return GemmProblem(1, p.n * p.oh * p.ow, p.k, p.r * p.s * p.c, False, False, p.dtype, p.epilogue)

    def build(self, kt, operands, attrs, shape, dtype, params):
        x, w = operands[0], operands[1]
        xp = _pad_nhwc(kt, x, attrs)
        N, OH, OW, K = shape
        R, S, C, _ = w.shape
        (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
        # col[n, oh, ow, r, s, c] = x[n, oh*sh + r*dh, ow*sw + s*dw, c]
        col = kt.generic([xp], [amap(6, ["d0", f"d1 * {sh} + d3 * {dh}", f"d2 * {sw} + d4 * {dw}", "d5"])],
                         kt.empty((N, OH, OW, R, S, C), x.dtype), amap(6, [f"d{i}" for i in range(6)]),
                         ["parallel"] * 6, lambda a, kt: a[0])
        acc = _matmul(kt, kt.reshape(col, (N * OH * OW, R * S * C)), kt.reshape(w, (R * S * C, K)))
        return _gemm_epilogue_4d(kt, acc, operands, attrs, shape, dtype)


# Winograd transforms (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks"):
# Y = A^T [(G g G^T) * (B^T d B)] A for an (m+2)x(m+2) input tile d and a 3x3 filter g.
WINOGRAD = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], float)),
}


def _contract(kt: KernelText, ins: list, maps: list, out_shape, out_dims: str, reductions: str, n: int) -> V:
    """out[out_dims] = sum over the `reductions` dims (d-indices, e.g. "5") of the product of ins (f32),
    into zeros. The channel dimension is kept innermost so the CPU schedule vectorizes along it."""
    acc = kt.filled(out_shape, "f32", 0.0)
    out_map = amap(n, [f"d{i}" for i in out_dims])
    iters = ["reduction" if str(i) in reductions else "parallel" for i in range(n)]

    def body(a, kt):
        prod = kt.to_f32(a[0], ins[0].dtype)
        for x, v in zip(a[1:len(ins)], ins[1:]):
            prod = kt.scalar("arith.mulf", prod, kt.to_f32(x, v.dtype))
        return kt.scalar("arith.addf", a[-1], prod)
    return kt.generic(ins, [amap(n, m) for m in maps], acc, out_map, iters, body)


class ConvWinograd(DenseNhwcSolver):
    """Winograd F(mxm, 3x3) for 3x3, stride-1, undilated convolutions: every (m+2)^2 input tile and the
    filter are transformed (separably, in f32), the channel reduction becomes (m+2)^2 independent
    GEMMs [tiles, C] x [C, K] (one linalg.batch_matmul), and the output transform gives m x m pixels:
    (m+2)^2 / m^2 multiplies per output instead of 9 (4 for F2, 2.25 for F4), for more rounding
    (F(2x2,3x3): about the error of direct convolution; F(4x4,3x3): some 10x more, see README)."""
    m = 2
    targets = ("cpu", "nvvm", "rocdl")
    efficiency = 0.6           # of the batched GEMM on the CPU, when it has 64 or more tiles (rows)
    filter_efficiency = 0.3    # the filter transform, computed on every call (2 (m+2)^2 9 C K flops)
    gpu_efficiency = 0.004     # GPUs: no tiled kernel yet (generic grid mapping), 25-490x slower on the H200

    def is_applicable(self, p, target):
        if (p.r, p.s) != (3, 3) or tuple(p.strides) != (1, 1) or tuple(p.dilations) != (1, 1):
            return "not a 3x3, stride-1, undilated convolution"
        return super().is_applicable(p, target)

    def filter_layout(self):
        return "RSCK"

    def cost(self, p, target):
        """The batched GEMM at an efficiency that falls with fewer than 64 tiles (small images: thin GEMMs),
        plus the filter transform and the transformed tiles' traffic. Calibrated on ResNet-18's 3x3 layers
        (batch 1, CPU): F(4x4) beats conv_direct about 2x at 56x56 and 28x28, loses at 14x14 and 7x7."""
        a = self.m + 2
        batch, tiles, _, _ = self.gemms(p)
        gemm = 2.0 * batch * tiles * p.c * p.k
        nbytes = 4 * (3 * tiles * batch * (p.c + p.k) + p.n * p.h * p.w * p.c + p.n * p.oh * p.ow * p.k)
        if target.is_gpu:
            return roofline(gemm, nbytes, target, self.gpu_efficiency)
        peak, _ = target.rates
        return (roofline(gemm, nbytes, target, self.efficiency * min(1.0, tiles / 64))
                + 2.0 * a * a * 9 * p.c * p.k / (peak * 1e9 * self.filter_efficiency))

    def gemms(self, p):
        """(batch, M, N, K) of the batched GEMM."""
        a = self.m + 2
        return a * a, p.n * -(-p.oh // self.m) * -(-p.ow // self.m), p.k, p.c

    def tunables(self, p):
        return {"mt": [4, 7, 8], "nt": [16, 32, 64], "kt": [4, 8]}

    def default_params(self, p, target):
        _, m, n, k = self.gemms(p)
        return {"mt": next((t for t in (8, 7, 4, 2) if m % t == 0), 1), "nt": _largest_divisor(n, 32),
                "kt": next((t for t in (8, 4, 2) if k % t == 0), 1)}

    def schedule(self, p, params):
        batch, _, _, _ = self.gemms(p)
        return schedules.winograd(batch // THREADS if batch % THREADS == 0 else 1, params["mt"], params["nt"],
                                  params["kt"], [1, 1, 1, _largest_divisor(p.k, 64)])

    def build(self, kt, operands, attrs, shape, dtype, params):
        x, w = operands[0], operands[1]
        m, a = self.m, self.m + 2
        BT, G, AT = (kt.constant_tensor(t) for t in WINOGRAD[m])
        N, OH, OW, K = shape
        _, H, W, C = x.shape
        th, tw = -(-OH // m), -(-OW // m)
        pt, pl, _, _ = attrs["padding"]
        xp = kt.pad(x, [0, pt, pl, 0], [0, th * m + 2 - H - pt, tw * m + 2 - W - pl, 0], 0.0)
        # Loop dims are listed with the channel (C, then K) innermost; "u"/"v"/"r"/"s" are the reductions.
        # input: T1[al,n,i,j,v,c] = sum_u BT[al,u] xp[n, i*m+u, j*m+v, c]   dims (al n i j v u c)
        t1 = _contract(kt, [BT, xp], [["d0", "d5"], ["d1", f"d2 * {m} + d5", f"d3 * {m} + d4", "d6"]],
                       (a, N, th, tw, a, C), "012346", "5", 7)
        # V[al,be,n,i,j,c] = sum_v T1[al,n,i,j,v,c] BT[be,v]                 dims (al be n i j v c)
        v = _contract(kt, [t1, BT], [["d0", "d2", "d3", "d4", "d5", "d6"], ["d1", "d5"]],
                      (a, a, N, th, tw, C), "012346", "5", 7)
        # filter: U[al,be,c,k] = sum_{r,s} G[al,r] w[r,s,c,k] G[be,s]          dims (al be r s c k)
        u = _contract(kt, [G, w, G], [["d0", "d2"], ["d2", "d3", "d4", "d5"], ["d1", "d3"]],
                      (a, a, C, K), "0145", "23", 6)
        mm = kt.filled((a * a, N * th * tw, K), "f32", 0.0, role="acc")
        prod = kt.fresh("bmm")
        vv, uu = kt.reshape(v, (a * a, N * th * tw, C)), kt.reshape(u, (a * a, C, K))
        kt.emit(f"{prod} = linalg.batch_matmul ins({vv.name}, {uu.name} : {vv.type}, {uu.type}) "
                f"outs({mm.name} : {mm.type}) -> {mm.type}")
        mv = kt.reshape(V(prod, mm.shape, "f32"), (a, a, N, th, tw, K))
        # output: T2[p,be,n,i,j,k] = sum_al AT[p,al] M[al,be,n,i,j,k]           dims (p be n i j al k)
        t2 = _contract(kt, [AT, mv], [["d0", "d5"], ["d5", "d1", "d2", "d3", "d4", "d6"]],
                       (m, a, N, th, tw, K), "012346", "5", 7)
        # Y[n,i,p,j,q,k] = sum_be T2[p,be,n,i,j,k] AT[q,be]                    dims (n i p j q be k)
        y = _contract(kt, [t2, AT], [["d2", "d5", "d0", "d1", "d3", "d6"], ["d4", "d5"]],
                      (N, th, m, tw, m, K), "012346", "5", 7)
        y = kt.reshape(y, (N, th * m, tw * m, K))
        if (th * m, tw * m) != (OH, OW):
            n = kt.fresh("crop")
            kt.emit(f"{n} = tensor.extract_slice {y.name}[0, 0, 0, 0] [{N}, {OH}, {OW}, {K}] [1, 1, 1, 1] : "
                    f"{y.type} to {ttype((N, OH, OW, K), 'f32')}")
            y = V(n, (N, OH, OW, K), "f32")
        return _nhwc_epilogue(kt, y, operands, attrs, dtype)


class ConvWinogradF2x3(ConvWinograd):
    name = "conv_winograd_f2x3"
    m = 2


class ConvWinogradF4x3(ConvWinograd):
    name = "conv_winograd_f4x3"
    m = 4


class ConvDepthwise(Solver):
    """Depthwise (groups = C = K) direct convolution, vectorized along channels (NHWC)."""
    name = "conv_depthwise"
    efficiency = 0.3

    def is_applicable(self, p, target):
        if not p.depthwise:
            return "not depthwise (needs groups = C = K)"
        if p.layout != "NHWC":
            return "needs NHWC activations"
        return None

    def filter_layout(self):
        return "RSCK"

    def tunables(self, p):
        return {"wt": [1, 2, 4, 7, 8], "ct": [8, 16, 32, 64]}

    def default_params(self, p, target):
        ct = next((c for c in (32, 16, 8) if p.c % c == 0), p.c)
        wt = next((w for w in (4, 7, 2) if p.ow % w == 0), 1)
        return {"wt": wt, "ct": ct}

    def build(self, kt, operands, attrs, shape, dtype, params):
        R, S, _, C = operands[1].shape
        w = kt.reshape(operands[1], (R, S, C))
        acc = _named_conv(kt, "depthwise_conv_2d_nhwc_hwc", _pad_nhwc(kt, operands[0], attrs), w, attrs, shape)
        return _nhwc_epilogue(kt, acc, operands, attrs, dtype)

    def schedule(self, p, params):
        return schedules.conv_depthwise(_thread_split(p.oh, p.c, 1, params["ct"]), params["wt"], params["ct"])


class ConvReference(Solver):
    """Any convolution (every layout, groups, dilation): the reference loop nest, tiled to rows and
    vectorized where the vectorizer can. The fallback when no fast solver applies."""
    name = "conv_reference"
    efficiency = 0.02
    targets = ("cpu", "nvvm", "rocdl")

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_conv2d(kt, "conv2d", operands, attrs, shape, dtype)


class Gemm(Solver):
    """GEMM [M,K] x [K,N] (+ batch): threads over M (or N when M is small), register tiles MT x NT
    with a K loop of KT, vectorized along N into outer-product FMAs."""
    name = "gemm"
    op = "matmul"
    efficiency = 0.9

    def is_applicable(self, p, target):
        if p.batched_rhs or p.transpose_rhs:
            return "needs a 2-d, non-transposed rhs (prim-select transposes constant weights)"
        return None

    def tunables(self, p):
        return {"mt": [1, 4, 7, 8, 14, 16], "nt": [16, 32, 64], "kt": [1, 8, 16]}

    def default_params(self, p, target):
        mt = next((m for m in (8, 7, 14, 4, 2) if p.m % m == 0), 1)
        widths = (32, 64, 16, 48, 40, 24, 8)
        # one row of work (a GEMV): a width that also splits the columns between the threads
        nt = next((v for v in widths if mt == 1 and p.n % (THREADS * v) == 0), None) or \
            next((v for v in widths if p.n % v == 0), _largest_divisor(p.n, 64))
        kt = next((k for k in (8, 16, 4, 3, 2) if p.k % k == 0), 1)
        return {"mt": mt, "nt": nt, "kt": kt}

    def build(self, kt, operands, attrs, shape, dtype, params):
        a, b, bias, residual = operands
        m = math.prod(a.shape[:-1])
        acc = _matmul(kt, kt.reshape(a, (m, a.shape[-1])), b)
        if residual is not None:
            residual = kt.reshape(residual, acc.shape)
        return kt.reshape(epilogue(kt, acc, bias, residual, 1, attrs, dtype, always=True), shape)

    def schedule(self, p, params):
        return schedules.gemm(_thread_split(p.m, p.n, params["mt"], params["nt"]), params["mt"], params["nt"],
                              params["kt"])


class GemmReference(Solver):
    """Any matmul (batched, transposed rhs): the reference loop nest, tiled and vectorized like aux ops."""
    name = "gemm_reference"
    op = "matmul"
    efficiency = 0.05
    targets = ("cpu", "nvvm", "rocdl")

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_matmul(kt, "matmul", operands, attrs, shape, dtype)


def _matmul(kt: KernelText, a: V, b: V) -> V:
    """linalg.matmul into a zeroed f32 accumulator (f16/bf16 inputs are widened by the op)."""
    acc = kt.filled((a.shape[0], b.shape[1]), "f32", 0.0, role="acc")
    n = kt.fresh("mm")
    kt.emit(f"{n} = linalg.matmul ins({a.name}, {b.name} : {a.type}, {b.type}) outs({acc.name} : {acc.type}) -> {acc.type}")
    return V(n, acc.shape, "f32")


def _gemm_epilogue_4d(kt, acc: V, operands, attrs, shape, dtype):
    """Epilogue on the [M, K] GEMM result (residual flattened alike), then back to NHWC."""
    _, _, bias, residual = operands
    if residual is not None:
        residual = kt.reshape(residual, acc.shape)
    out = epilogue(kt, acc, bias, residual, 1, attrs, dtype, always=True)
    return kt.reshape(out, shape)


class GpuGemmSolver(Solver):
    """Base of the GPU GEMM-like solvers: one tiled SIMT kernel (gpu_gemm.py) per problem; the tile
    is the tunable, the heuristic takes the largest tile that still gives every multiprocessor work."""
    targets = ("nvvm", "rocdl")
    efficiency = 0.4

    def tunables(self, p):
        return {"tile": list(range(len(gpu_gemm.TILES)))}

    def default_params(self, p, target):
        m, n = self.gemm_shape(p)
        tiles = list(gpu_gemm.TILES.values())
        blocks = [-(-m // t.bm) * -(-n // t.bn) for t in tiles]
        return {"tile": next((i for i, (t, b) in enumerate(zip(tiles, blocks))
                              if b >= target.chip.units and t.bn <= max(n, 32)), len(tiles) - 1)}

    def kernel(self, r):
        return gpu_gemm.gemm_kernel(r.name, r.signature, self.spec(r.problem, r.attrs),
                                    list(gpu_gemm.TILES.values())[r.params["tile"]])

    def kernel_spec(self, p):
        """The kernel's problem without an epilogue: what applicability and costs look at."""
        return self.spec(p, {"activation": "none", "activation_params": ()})

    @staticmethod
    def _epilogue(p, attrs) -> dict:
        return dict(bias="bias" in p.epilogue.split("+"), residual="residual" in p.epilogue.split("+"),
                    activation=attrs["activation"], activation_params=tuple(attrs["activation_params"]))


class ConvImplicitGemmGpu(GpuGemmSolver):
    """NHWC or NCHW convolution as an implicit GEMM (input pixels read in place, zero padding by
    predicates): M = N*OH*OW, N = K, K = R*S*C; strided, dilated and grouped (one GEMM per group:
    grid z). NCHW (prim-select's layout=keep) is read and written in place, without transposes."""
    name = "conv_implicit_gemm_gpu"

    def is_applicable(self, p, target):
        # NCHW is read by gpu_gemm's SIMT kernel only: a subclass with a kernel of its own (the
        # tensor-core solvers) reads NHWC.
        if p.layout != "NHWC" and (p.layout != "NCHW" or type(self).kernel is not GpuGemmSolver.kernel):
            return "needs NHWC activations (prim-select's default layout wraps NCHW in transposes)"
        if p.groups != 1 and p.k // p.groups < 8:
            return f"fewer than 8 output channels per group ({p.k // p.groups}; depthwise-like)"

    def filter_layout(self):
        return "RSCK"

    def gemm_shape(self, p):
        return p.n * p.oh * p.ow, p.k

    def spec(self, p, attrs):
        pt, pl, _, _ = p.padding
        g = p.groups
        conv = (p.n, p.h, p.w, p.c, p.oh, p.ow, p.r, p.s, *p.strides, pt, pl, *p.dilations)
        return gpu_gemm.GemmSpec(p.n * p.oh * p.ow, p.k // g, p.r * p.s * p.c // g, p.dtype, conv, groups=g,
                                 layout=p.layout, **self._epilogue(p, attrs))

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_conv2d(kt, "conv2d", operands, attrs, shape, dtype)


class GemmGpu(GpuGemmSolver):
    """matmul / linear with a 2-d [K, N] right-hand side (batch dims of the lhs folded into M)."""
    name = "gemm_gpu"
    op = "matmul"

    def is_applicable(self, p, target):
        if p.batched_rhs or p.transpose_rhs:
            return "needs a 2-d, non-transposed rhs (prim-select transposes constant weights)"

    def gemm_shape(self, p):
        return p.m, p.n

    def spec(self, p, attrs):
        return gpu_gemm.GemmSpec(p.m, p.n, p.k, p.dtype, **self._epilogue(p, attrs))

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_matmul(kt, "matmul", operands, attrs, shape, dtype)


class MmaSolver:
    """Mixin: the tensor-core kernel (gpu_mma.py) on NVIDIA for f16/bf16 (and f32 as TF32 when
    OPENPRIM_ALLOW_TF32=1, like PyTorch's allow_tf32), where its 16-byte row loads apply; efficiency is
    relative to the fp32 SIMT peak that the roofline uses (mma.sync: several times it). The "tile"
    parameter indexes gpu_mma.CONFIGS: (block tile, shared-memory stages)."""
    targets = ("nvvm",)
    efficiency = 3.0

    def is_applicable(self, p, target):
        if p.dtype == "f32" and os.environ.get("OPENPRIM_ALLOW_TF32", "") != "1":
            return "f32 on tensor cores needs OPENPRIM_ALLOW_TF32=1 (TF32: 10-bit mantissa)"
        return super().is_applicable(p, target) or gpu_mma.applicable(self.kernel_spec(p))

    def tunables(self, p):
        return {"tile": [i for i, (tile, stages) in enumerate(gpu_mma.CONFIGS)
                         if gpu_mma.shared_bytes(p.dtype, tile, stages) <= gpu_mma.STATIC_SHARED_LIMIT]}

    def default_params(self, p, target):
        """The 128x128 block only where it is filled (N >= 128) and still gives every multiprocessor a
        block; measured on the ResNet-50 layers (bench/RESULTS.md), N = 64 ran 1.4x faster on 64x64.
        Reductions of 1024 and more (32+ k tiles) go through the cp.async pipeline, with as many stages
        as fit (2 for 128x128, 4 for 64x64): on the H200 that made the fp16 ResNet-50 layers with
        K = R*S*C of 1024-4608 1.15-2x faster and the 8192^3 GEMM 1.07x; below that, register
        prefetch was as fast or faster (K = 64 and 576: up to 1.5x)."""
        m, n = self.gemm_shape(p)
        big = n >= 128 and -(-m // 128) * -(-n // 128) >= target.chip.units
        k = p.r * p.s * p.c if self.op == "conv2d" else p.k
        stages = (2 if big else 4) if k >= 1024 else 1
        return {"tile": gpu_mma.CONFIGS.index(("large" if big else "small", stages))}

    def kernel(self, r):
        return gpu_mma.mma_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), *gpu_mma.CONFIGS[r.params["tile"]])


class ConvImplicitGemmMma(MmaSolver, ConvImplicitGemmGpu):
    """Implicit-GEMM convolution on tensor cores (mma.sync m16n8k16, f32 accumulators)."""
    name = "conv_implicit_gemm_mma"


class GemmMma(MmaSolver, GemmGpu):
    """matmul / linear on tensor cores."""
    name = "gemm_mma"


class WgmmaSolver:
    """Mixin: the sm_90 warpgroup kernel (gpu_wgmma.py: TMA, mbarriers, wgmma) for f16/bf16 where TMA's
    boxes apply (stride 1, 16-byte strides); elsewhere mma.sync. The "tile" parameter indexes
    gpu_wgmma.CONFIGS: (BM, BN, warpgroups, stages)."""
    targets = ("nvvm",)
    efficiency = 6.0

    def is_applicable(self, p, target):
        if target.matrix_core != "wgmma":
            return f"wgmma and TMA need sm_90 ({target.arch} has {target.matrix_core} only)"
        return super().is_applicable(p, target) or self.kernel_applicable(self.kernel_spec(p))

    def kernel_applicable(self, spec) -> str | None:
        return gpu_wgmma.applicable(spec)

    def cost(self, p, target):
        """A k tile is 64 channels of one filter tap (or 64 of K): fewer channels are multiplied as zeros
        (the 8-channel padded stem: 8x the work, so it stays on mma.sync, whose k runs across taps)."""
        c = p.c if self.op == "conv2d" else p.k
        wasted = p.flops * (-(-c // gpu_wgmma.BK) * gpu_wgmma.BK / c - 1)
        return super().cost(p, target) + wasted / (target.rates[0] * 1e9 * self.efficiency)

    def tunables(self, p):
        return {"tile": list(range(len(gpu_wgmma.CONFIGS)))}

    def default_params(self, p, target):
        """Measured on the H200 (bench/RESULTS.md, same runs as cuDNN): 128x128 with one warpgroup and 4
        stages is the fastest on the ResNet-50 layers with N >= 128 and 16+ k tiles (1.2-1.7x cuDNN;
        128x64 and 64x64 ran 1.3-1.5x slower there); with 4 k tiles or fewer, 2 stages (3 blocks per
        multiprocessor instead of 1: the 1x1/2 downsampling layer 0.77x -> 0.92x cuDNN); 256x128 with two
        warpgroups on long reductions (the 8192^3 GEMM: 655-723 TFLOP/s); N <= 64 takes 64x64 with 4
        stages (64@56 3x3: 0.87x -> 1.12x cuDNN, against 128x64 with 6), or 128x64 with 3 when there are
        one or two k tiles (64@56 1x1: 1.32x against 1.15-1.26x on 64x64)."""
        m, n = self.gemm_shape(p)
        k = p.r * p.s * p.c if self.op == "conv2d" else p.k
        k_tiles = self.k_tiles(p)
        blocks = lambda bm, bn: -(-m // bm) * -(-n // bn)  # noqa: E731
        if n >= 256 and k >= 2048 and blocks(256, 128) >= 2 * target.chip.units:
            return {"tile": 2}
        if n > 64:
            return {"tile": 7 if k_tiles <= 4 else 0}
        return {"tile": 5 if k_tiles <= 2 else 6}

    def k_tiles(self, p) -> int:
        """64-wide k tiles per output tile: one per filter tap and 64 channels (a matmul: of K)."""
        return p.r * p.s * -(-p.c // gpu_wgmma.BK) if self.op == "conv2d" else -(-p.k // gpu_wgmma.BK)

    def kernel(self, r):
        return gpu_wgmma.wgmma_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), r.params["tile"])


class ConvImplicitGemmWgmma(WgmmaSolver, ConvImplicitGemmGpu):
    """Implicit-GEMM convolution on sm_90 warpgroup MMA, the input read in place by TMA boxes."""
    name = "conv_implicit_gemm_wgmma"


class ConvIm2colGemmWgmma(WgmmaSolver, ConvImplicitGemmGpu):
    """im2col + GEMM on sm_90 warpgroup MMA: the windows copied into a [N*OH*OW, R*S*C] scratch buffer,
    then the TMA/wgmma GEMM with the fused epilogue. The buffer's round trip makes it slower than the
    implicit GEMM, which reads the same rows in place: a find candidate."""
    name = "conv_im2col_gemm_wgmma"

    def is_applicable(self, p, target):
        return super().is_applicable(p, target) or (None if p.c % 8 == 0 else "needs channels in multiples of 8")

    def cost(self, p, target):
        col = 2 * p.n * p.oh * p.ow * p.r * p.s * p.c * 2       # the buffer, written and read (2 bytes)
        return WgmmaSolver.cost(self, p, target) + col / (target.rates[1] * 1e9)

    def kernel(self, r):
        return wgmma_im2col.im2col_gemm_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), r.params["tile"])


class ConvWinogradWgmma(WgmmaSolver, ConvImplicitGemmGpu):
    """Winograd F(m x m, 3x3) on sm_90 with its (m+2)^2 GEMMs on warpgroup MMA (wgmma_winograd.winograd_kernel):
    input and filter transforms into scratch, the GEMMs batched on grid z (f32 out), the output transform
    with the fused epilogue. Fewer multiplies than the implicit GEMM (4 or 2.25 per output instead of 9)
    for the transformed tiles' memory traffic, which the cost counts. Measured on the H200 (ResNet-50 3x3
    layers, fp16): 0.29-0.89x cuDNN against the implicit GEMM's 0.85-1.7x, so its GEMM efficiency is
    set to what those runs give (1.5, a quarter of the implicit GEMM's) and it stays a find candidate."""
    m = 2
    efficiency = 1.5

    def is_applicable(self, p, target):
        if (p.r, p.s) != (3, 3) or tuple(p.strides) != (1, 1) or tuple(p.dilations) != (1, 1):
            return "not a 3x3, stride-1, undilated convolution"
        return super().is_applicable(p, target) or (None if p.c % 8 == 0 else "needs channels in multiples of 8")

    def cost(self, p, target):
        a = self.m + 2
        tiles = p.n * -(-p.oh // self.m) * -(-p.ow // self.m)
        peak, bandwidth = target.rates
        gemm = 2.0 * a * a * tiles * p.c * p.k
        traffic = a * a * (2 * tiles * p.c * 2 + 2 * tiles * p.k * 4 + 2 * p.c * p.k * 2) + \
            2 * (p.n * p.h * p.w * p.c + p.n * p.oh * p.ow * p.k)
        return gemm / (peak * 1e9 * self.efficiency) + traffic / (bandwidth * 1e9)

    def default_params(self, p, target):
        return {"tile": 0}

    def kernel(self, r):
        return wgmma_winograd.winograd_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), self.m,
                                              WINOGRAD[self.m], r.params["tile"])


class ConvWinogradF2x3Wgmma(ConvWinogradWgmma):
    name = "conv_winograd_f2x3_wgmma"
    m = 2


class ConvWinogradF4x3Wgmma(ConvWinogradWgmma):
    name = "conv_winograd_f4x3_wgmma"
    m = 4


class ConvSpaceToDepthWgmma(WgmmaSolver, ConvImplicitGemmGpu):
    """Few input channels (an RGB stem) on sm_90 warpgroup MMA: the input repacked space-to-depth so that
    one filter row's taps x channels are 64 contiguous elements, read as k tiles through an overlapping
    TMA view (wgmma_space_to_depth.space_to_depth_kernel). The 7x7/2 stem on 3 channels multiplies 4 x 64 per
    output instead of the implicit GEMM's 49 x 64 (or mma.sync's 49 x 8 after padding to 8 channels)."""
    name = "conv_space_to_depth_wgmma"

    def kernel_applicable(self, spec):
        return wgmma_space_to_depth.space_to_depth_applicable(spec)

    def cost(self, p, target):
        """The GEMM at R2 k tiles per output (zeros included); the input read, the repacked image written
        and read, the output written (2-byte elements)."""
        g = wgmma_space_to_depth.space_to_depth_shape(self.kernel_spec(p).conv)
        flops = 2.0 * p.n * p.oh * p.ow * p.k * g["r2"] * gpu_wgmma.BK
        nbytes = 2 * (p.n * p.h * p.w * p.c + 2 * p.n * g["hb"] * g["wb"] * g["cq"] + p.n * p.oh * p.ow * p.k)
        return roofline(flops, nbytes, target, self.efficiency)

    def k_tiles(self, p):
        return -(-p.r // p.strides[0])                  # one per filter row of blocks

    def kernel(self, r):
        return wgmma_space_to_depth.space_to_depth_kernel(r.name, r.signature, self.spec(r.problem, r.attrs),
                                                          r.params["tile"])


class GemmWgmma(WgmmaSolver, GemmGpu):
    """matmul / linear on sm_90 warpgroup MMA with TMA loads."""
    name = "gemm_wgmma"


class ConvGroupedGemm(Solver):
    """Grouped convolution (1 < groups, not depthwise; NHWC x RSCK) as G GEMMs in one batched
    contraction: per group g, A_g[N*OH*OW, R*S*Cg] (its Cg channels of every filter tap) times the
    filter's B_g[R*S*Cg, Kg]. A is an im2col buffer [M, R*S, G, Cg] that copies all C channels of a tap
    at once (a 1x1, stride-1, unpadded convolution reads the input itself, viewed as [M, 1, G, Cg]); the
    filter is viewed as [R*S, Cg, G, Kg]. One linalg.generic over (g, m, n | t, c) with
    projected-permutation maps gives C[G, M, Kg], and the epilogue writes it as [M, G, Kg] = [M, K]
    (NHWC). The GEMM-like schedule (threads over M, register tiles of one group x MT x NT, reduction
    loops over the taps and KT channels) vectorizes it into FMAs along the group's output channels."""
    name = "conv_grouped_gemm"
    efficiency = 0.5

    def is_applicable(self, p, target):
        if p.groups == 1:
            return "not a grouped convolution (groups=1)"
        if p.depthwise:
            return "depthwise convolution (groups = C = K)"
        if p.layout != "NHWC":
            return "needs NHWC activations (prim-select wraps NCHW in transposes)"
        return None

    def filter_layout(self):
        return "RSCK"

    @staticmethod
    def _direct(p) -> bool:
        """A 1x1, stride-1, unpadded convolution reads its A straight from the input (no im2col)."""
        return (p.r, p.s) == (1, 1) and tuple(p.strides) == (1, 1) and not any(p.padding)

    def cost(self, p, target):
        """Its vectors are the group's Kg output channels: narrower than 8 lanes wastes the rest (and
        tiles that small are mostly loop overhead); the im2col buffer is written and read once."""
        col = 0 if self._direct(p) else 2 * 4 * p.n * p.oh * p.ow * p.r * p.s * p.c
        return super().cost(p, target) * max(1.0, 8 * p.groups / p.k) + col / (target.rates[1] * 1e9)

    def tunables(self, p):
        """Whole tiles only: MT divides M, NT the group's output channels, KT its input channels."""
        m, kg, cg = p.n * p.oh * p.ow, p.k // p.groups, p.c // p.groups
        return {"mt": [t for t in (1, 2, 4, 7, 8, 14) if m % t == 0],
                "nt": [t for t in (4, 8, 16, 32) if kg % t == 0] or [_largest_divisor(kg, 32)],
                "kt": [t for t in (1, 2, 4, 8, 16) if cg % t == 0]}

    def default_params(self, p, target):
        m, kg, cg = p.n * p.oh * p.ow, p.k // p.groups, p.c // p.groups
        mt = next((t for t in (8, 7, 14, 4, 2) if m % t == 0), 1)
        nt = next((t for t in (32, 16, 8, 4) if kg % t == 0), _largest_divisor(kg, 32))
        kt = next((t for t in (8, 16, 4, 3, 2) if cg % t == 0), 1)
        return {"mt": mt, "nt": nt, "kt": kt}

    def build(self, kt, operands, attrs, shape, dtype, params):
        x, w, bias, residual = operands
        N, OH, OW, K = shape
        R, S, Cg, _ = w.shape
        C, G = x.shape[3], attrs["groups"]
        M, Kg = N * OH * OW, K // G
        if (R, S) == (1, 1) and tuple(attrs["strides"]) == (1, 1) and not any(attrs["padding"]):
            a = kt.reshape(x, (M, 1, G, Cg))
        else:
            xp = _pad_nhwc(kt, x, attrs)
            (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
            # col[n, oh, ow, r, s, ch] = x[n, oh*sh + r*dh, ow*sw + s*dw, ch] (copied by the schedule's
            # im2col step, C channels at a time)
            col = kt.generic([xp], [amap(6, ["d0", f"d1 * {sh} + d3 * {dh}", f"d2 * {sw} + d4 * {dw}", "d5"])],
                             kt.empty((N, OH, OW, R, S, C), x.dtype), amap(6, [f"d{i}" for i in range(6)]),
                             ["parallel"] * 6, lambda args, kt: args[0], role="im2col")
            a = kt.reshape(col, (M, R * S, G, Cg))
        b = kt.reshape(w, (R * S, Cg, G, Kg))
        # C[g, m, n] = sum_{t, c} A[m, t, g, c] B[t, c, g, n]        loops (g, m, n | t, c)
        # (the group leads in C: a register tile's unit group dim is a leading one, which vectors drop)
        acc = kt.generic([a, b], [amap(5, ["d1", "d3", "d0", "d4"]), amap(5, ["d3", "d4", "d0", "d2"])],
                         kt.filled((G, M, Kg), "f32", 0.0, role="acc"), amap(5, ["d0", "d1", "d2"]),
                         ["parallel"] * 3 + ["reduction"] * 2, mac_body([a.dtype, b.dtype]), role="contraction")
        # the epilogue, loops (m, g, n), writes the output as [M, G, Kg] = NHWC (rows outermost: a
        # register tile's rows of A are read for every group while they are in cache)
        nhwc = amap(3, ["d0", "d1", "d2"])
        ins, maps = [acc], [amap(3, ["d1", "d0", "d2"])]
        if bias is not None:
            ins.append(kt.reshape(bias, (G, Kg)))
            maps.append(amap(3, ["d1", "d2"]))
        if residual is not None:
            ins.append(kt.reshape(residual, (M, G, Kg)))
            maps.append(nhwc)

        def body(args, kt):
            y = args[0]
            for arg, v in zip(args[1:len(ins)], ins[1:]):
                y = kt.scalar("arith.addf", y, kt.to_f32(arg, v.dtype))
            return kt.from_f32(activation(kt, attrs["activation"], attrs["activation_params"], y), dtype)
        # its destination is an empty NHWC tensor viewed as [M, G, Kg], so that the result is that tensor
        # again (viewed back): any copy into the kernel's output then runs along contiguous NHWC rows
        dest = kt.reshape(kt.empty(shape, dtype), (M, G, Kg))
        out = kt.generic(ins, maps, dest, nhwc, ["parallel"] * 3, body, role="epilogue")
        return kt.reshape(out, shape)

    def schedule(self, p, params):
        m, mt = p.n * p.oh * p.ow, params["mt"]
        par = [m // THREADS, 0, 0] if m % (THREADS * mt) == 0 else \
            ([0, p.groups // THREADS, 0] if p.groups % THREADS == 0 else [mt, 0, 0])
        return schedules.grouped_gemm(par, mt, params["nt"], params["kt"], None if self._direct(p) else p.c)


class ConvImplicitGemm(Solver):
    """Any convolution (NCHW or NHWC, strided, dilated, padded, grouped) as one implicit GEMM per group,
    a hand-structured vector kernel (cpu_implicit_gemm.py): register tiles of WT output columns x FT
    output channels, lanes along the layout's contiguous dimension, no im2col buffer, no transposes."""
    name = "conv_implicit_gemm"
    targets = ("cpu",)
    # Measured against conv_direct on the 2-core AVX2 CPU (batch 1, bias+relu, best of interleaved runs):
    # NHWC with 16+ channels per group ran 1.8-2.8x faster on ResNet-18's 3x3 layers (1.1-1.4x at 7x7),
    # 2.5-4.6x on 1x1 layers; NCHW (layout=keep) at 0.85-1x its NHWC speed (lanes along OW: 0.5-0.8x).
    efficiency = 1.35

    def cost(self, p, target):
        """Its vector lanes run along K/groups (NCHW with few channels per group: along OW): fewer than 16
        leave the register tile partly empty (depthwise NHWC: 1 of 16), so fuller solvers keep those."""
        if self.default_params(p, target).get("lanes", 1):
            fill = min(p.k // p.groups, 16) / 16 * (0.85 if p.layout == "NCHW" else 1.0)
        else:
            fill = min(p.ow, 16) / 16 * (0.8 if p.strides[1] == 1 else 0.3)
        return super().cost(p, target) / fill

    def filter_layout(self):
        return "RSCK"

    def tunables(self, p):
        tiles = {"wt": [2, 3, 4, 6, 7, 8, 12, 16], "ft": [1, 2, 4, 6, 8, 12, 16, 32]}
        return {**tiles, "lanes": [0, 1]} if p.layout == "NCHW" else tiles

    def default_params(self, p, target):
        """Lanes along K/groups (16 = two AVX2 registers) in 6 x 2 accumulator registers of 16 (7 columns,
        spilling 2, beat 6 + 1); NCHW with fewer than 16 channels per group: along OW."""
        kg = p.k // p.groups
        if p.layout == "NCHW" and kg < 16:
            wt = 16 if p.ow >= 48 else min(p.ow, 8)
            return {"wt": wt, "ft": min(kg, 6 if wt == 16 else 8), "lanes": 0}
        ft = 16 if kg >= 16 else 8 if kg >= 8 else kg
        wt = p.ow if p.ow <= 7 else 6 if ft == 16 else 12
        return {"wt": wt, "ft": ft, **({"lanes": 1} if p.layout == "NCHW" else {})}

    def kernel(self, r):
        return cpu_implicit_gemm.conv_kernel(r.name, r.signature, r.problem, r.params, r.attrs, THREADS)

    def build(self, kt, operands, attrs, shape, dtype, params):
        return emit_conv2d(kt, "conv2d", operands, attrs, shape, dtype)


class AmdMatrixSolver:
    """Mixin: the AMD matrix-core kernel (gpu_amd_mma.py) for f16/bf16 where its 16-byte row loads apply,
    on the chips of its instruction family (MFMA: CDNA gfx90a/gfx942/gfx950; WMMA: RDNA3 gfx1100/gfx1101);
    every other chip and dtype keeps the SIMT kernel. Efficiency is relative to the fp32 SIMT peak that
    the roofline uses (MFMA f16: 8-16x it on CDNA; WMMA: about 2x on RDNA3)."""
    targets = ("rocdl",)
    family = ""

    def is_applicable(self, p, target):
        return super().is_applicable(p, target) or gpu_amd_mma.arch_reason(target, self.family, self.name) \
            or gpu_amd_mma.applicable(self.kernel_spec(p))

    def tunables(self, p):
        return {"tile": list(range(len(gpu_amd_mma.TILES[self.family])))}

    def default_params(self, p, target):
        """The 128x128 block where it is filled (N >= 128) and still gives every compute unit a block,
        else 64x64 (32x32x8 MFMA tiles: the fewest instructions per k step)."""
        m, n = self.gemm_shape(p)
        big = n >= 128 and -(-m // 128) * -(-n // 128) >= target.chip.units
        return {"tile": 0 if big else 1}

    def kernel(self, r):
        tile = list(gpu_amd_mma.TILES[self.family].values())[r.params["tile"]]
        return gpu_amd_mma.mma_kernel(r.name, r.signature, self.spec(r.problem, r.attrs), tile)


class ConvImplicitGemmMfma(AmdMatrixSolver, ConvImplicitGemmGpu):
    """Implicit-GEMM convolution on CDNA matrix cores (v_mfma_f32_32x32x8 / 16x16x16, f32 accumulators)."""
    name = "conv_implicit_gemm_mfma"
    family = "mfma"
    efficiency = 4.0


class GemmMfma(AmdMatrixSolver, GemmGpu):
    """matmul / linear on CDNA matrix cores."""
    name = "gemm_mfma"
    family = "mfma"
    efficiency = 4.0


class ConvImplicitGemmWmma(AmdMatrixSolver, ConvImplicitGemmGpu):
    """Implicit-GEMM convolution on RDNA3 matrix cores (v_wmma_f32_16x16x16, wave32, f32 accumulators)."""
    name = "conv_implicit_gemm_wmma"
    family = "wmma"
    efficiency = 1.0


class GemmWmma(AmdMatrixSolver, GemmGpu):
    """matmul / linear on RDNA3 matrix cores."""
    name = "gemm_wmma"
    family = "wmma"
    efficiency = 1.0


GEMM = Gemm()
# One solver per line, in the order `openprim explain` lists them.
SOLVERS = {s.name: s for s in (
    ConvDirect(),
    Conv1x1Gemm(),
    ConvIm2colGemm(),
    ConvDepthwise(),
    ConvReference(),
    ConvImplicitGemm(),
    GEMM,
    GemmReference(),
    ConvWinogradF2x3(),
    ConvWinogradF4x3(),
    ConvImplicitGemmGpu(),
    ConvGroupedGemm(),
    GemmGpu(),
    ConvImplicitGemmMma(),
    GemmMma(),
    ConvImplicitGemmWgmma(),
    ConvIm2colGemmWgmma(),
    ConvWinogradF2x3Wgmma(),
    ConvWinogradF4x3Wgmma(),
    ConvSpaceToDepthWgmma(),
    GemmWgmma(),
    ConvImplicitGemmMfma(),
    GemmMfma(),
    ConvImplicitGemmWmma(),
    GemmWmma(),
)}


def applicable(problem, op: str, target: Target) -> list[tuple["Solver", str | None]]:
    """Every solver for `op` with None (applicable) or the reason it is not."""
    return [(s, s.is_applicable(problem, target) if target.kind in s.targets
             else f"no {target.kind} kernel (runs on: {', '.join(s.targets)})")
            for s in SOLVERS.values() if s.op == op]


def _epilogue_name(attrs, bias, residual) -> str:
    parts = (["bias"] if bias is not None else []) + (["residual"] if residual is not None else []) + \
        ([attrs["activation"]] if attrs["activation"] != "none" else [])
    return "+".join(parts) or "none"


def problem_of(op):
    """The ConvProblem / GemmProblem of a prim.conv2d / prim.matmul operation."""
    from openprim import dialect
    attrs = dialect.op_attrs(op)
    a, b, bias, residual = dialect.operand_groups(op)
    dtype = dialect.dtype_name(op.result.type.element_type)
    epi = _epilogue_name(attrs, bias, residual)
    out = tuple(op.result.type.shape)
    if op.name == "prim.matmul":
        lhs, rhs = tuple(a.type.shape), tuple(b.type.shape)
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
    k, r, s = {"KCRS": (w[0], w[2], w[3]), "KRSC": (w[0], w[1], w[2]), "RSCK": (w[3], w[0], w[1])}[fl]
    return ConvProblem(n, c, h, wd, k, r, s, oh, ow, tuple(attrs["strides"]), tuple(attrs["padding"]),
                       tuple(attrs["dilations"]), attrs["groups"], attrs["layout"], fl, dtype, epi)

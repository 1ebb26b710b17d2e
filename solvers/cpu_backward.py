"""The backward convolutions' solvers: the input gradient (bwd_data) and the filter gradient (bwd_weights) of a
convolution, as MIOpen has them beside its forward solvers, and the reference loop nests every target runs.

With the forward convolution x [N, H, W, C] * w [R, S, C, K] -> y [N, OH, OW, K] (NHWC, RSCK, one group):

  bwd_data, stride 1 (no solver here: prim-select's _backward_data_as_forward)
      dx = dy padded by (d(R-1) - top, d(S-1) - left, ...) correlated with the filter's taps reversed and its
      C and K swapped: wf[r, s, k, c] = w[R-1-r, S-1-s, c, k]. That is a forward convolution of K input and C
      output channels (`forward_problem`, `flip_pads`), which every forward solver computes.
  bwd_data, stride > 1 (no solver here either: passes/backward_data_phases.py)
      one stride-1 forward convolution per phase (ih mod sh, iw mod sw) with that phase's taps reversed,
      interleaved by concatenations, where the predicted time says so.
  bwd_data, any stride (conv_bwd_data_gemm)
      dcol [N OH OW, R S C] = dy [N OH OW, K] x w [K, R S C]   (one GEMM, the GEMM solver's schedule; the
      filter laid out KRSC by prim-select), then col2im: dx[n, ih, iw, c] = the sum over the taps (r, s) of
      dcol[n, oh, ow, r, s, c] where ih + top = oh sh + r dh and iw + left = ow sw + s dw (each pixel's
      channels one vector).
  bwd_weights (conv_bwd_weights_gemm)
      dw[r, s, c, k] = sum over (n, oh, ow) of x_padded[n, oh sh + r dh, ow sw + s dw, c] dy[n, oh, ow, k]: a GEMM
      per filter tap whose reduction is the batch and the map, the input read in place (no patch buffer):
      kernels/cpu/backward_weights.py; the result is the RSCK filter itself.

The fast solvers read NHWC: prim-layout wraps NCHW backward convolutions in transposes, as forward ones.
"""
from __future__ import annotations

from openprim.kernels.irtext import amap
from openprim.kernels.semantics import (EMITTERS, _extract, _loop_index, _select_typed, _strided_source, epilogue,
                                        mac_body)
from openprim.kernels.cpu import backward_weights as cpu_backward_weights
from openprim.solvers.base import THREADS, DenseNhwcSolver, Solver
from openprim.solvers.cpu import GemmBackedSolver, _matmul, _pad_nhwc
from openprim.solvers.problem import ConvProblem, GemmProblem

NO_EPILOGUE = {"activation": "none", "activation_params": []}
GATHER_NS = (1.5, 0.6)   # col2im's ns per input-gradient element: a base and per filter tap (ConvBwdDataGemm.cost)
REFERENCE_TARGETS = ("cpu", "nvvm", "rocdl")
GPU_STEP_S = 10e-9      # a step of a GPU thread's serial reduction (a load and an FMA, latency-bound)


def _filter_tile(k: int, most: int) -> int:
    """The filters of a register tile: the largest divisor of K up to `most` (a tile never straddles K's end)."""
    return max(d for d in range(1, min(k, most) + 1) if k % d == 0)


def _result(kt, acc, dtype):
    """The accumulator rounded to dtype: the schedule's anchor (role epilogue)."""
    return epilogue(kt, acc, None, None, len(acc.shape) - 1, NO_EPILOGUE, dtype, always=True)


class ConvBwdReference(Solver):
    """Any backward convolution of one direction (every layout, stride, dilation, groups): the reference loop
    nest of its op (kernels/semantics.py)."""
    efficiency = 0.02
    targets = REFERENCE_TARGETS

    def __init__(self, direction: str):
        self.name, self.directions = f"conv_{direction}_reference", (direction,)
        self.kind = {"bwd_data": "conv2d_backward_data", "bwd_weights": "conv2d_backward_weights"}[direction]

    def cost(self, p, target):
        """The roofline, and on GPUs at least the serial reduction each output element's thread makes (the
        batch and map for a filter gradient, the filters and taps for an input gradient) at
        GPU_STEP_S a step: the loop nest maps its outputs onto the grid, not its reduction."""
        base = super().cost(p, target)
        if not target.is_gpu:
            return base
        steps = p.n * p.oh * p.ow if self.directions == ("bwd_weights",) else p.k // p.groups * p.r * p.s
        return max(base, steps * GPU_STEP_S)

    def build(self, kt, operands, attrs, shape, dtype, params):
        return EMITTERS[self.kind](kt, self.kind, operands, attrs, shape, dtype)


def flip_pads(p: ConvProblem) -> tuple[int, int, int, int]:
    """The padding of dy that makes the stride-1 input gradient a forward convolution of it."""
    (dh, dw), (pt, pl, pb, pr) = p.dilations, p.padding
    return dh * (p.r - 1) - pt, dw * (p.s - 1) - pl, dh * (p.r - 1) - pb, dw * (p.s - 1) - pr


def forward_problem(p: ConvProblem) -> ConvProblem:
    """The forward convolution that computes stride-1 problem p's input gradient (module docstring), its
    filter RSCK as prim-select makes it."""
    return ConvProblem(p.n, p.k, p.oh, p.ow, p.c, p.r, p.s, p.h, p.w, (1, 1), flip_pads(p), p.dilations, p.groups,
                       p.layout, "RSCK", p.dtype, "none")


class ConvBwdDataGemm(GemmBackedSolver):
    """Backward data of any stride as one GEMM into the patches' gradient and a col2im gather (module
    docstring). Its buffer is R S times the input gradient; col2im reads it once."""
    name = "conv_bwd_data_gemm"
    directions = ("bwd_data",)
    efficiency = 0.7

    def cost(self, p, target):
        """The GEMM's, plus col2im: a scalar gather per input-gradient element and tap, measured at about
        GATHER_NS[0] + GATHER_NS[1] * taps ns per element on the 2-core Zen 4 (bench/cpu_backward_layers.json:
        4 ms for ResNet-18's 1x1 stride-2 layer at batch 8, 11 ms for its 3x3 one)."""
        elements = p.n * p.h * p.w * p.c
        return super().cost(p, target) + elements * (GATHER_NS[0] + GATHER_NS[1] * p.r * p.s) * 1e-9

    def filter_layout(self):
        return "KRSC"    # [K, R S C]: the GEMM's rhs as it is

    def gemm_problem(self, p):
        return GemmProblem(1, p.n * p.oh * p.ow, p.r * p.s * p.c, p.k, False, False, p.dtype, "none")

    def build(self, kt, operands, attrs, shape, dtype, params):
        dy, w = operands
        N, OH, OW, K = dy.shape
        _, R, S, C = w.shape
        wt = kt.reshape(w, (K, R * S * C))
        dcol = _result(kt, _matmul(kt, kt.reshape(dy, (N * OH * OW, K)), wt), "f32")
        dcol = kt.reshape(dcol, (N, OH, OW, R, S, C))
        (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
        pt, pl = attrs["padding"][:2]

        # each input pixel's channels (c innermost: one vector) summed over the taps unrolled
        def gather(args, kt):
            n, ih, iw, c = (_loop_index(kt, d) for d in range(4))
            total = kt.const(0.0, "f32")
            for r in range(R):
                vh, oh = _strided_source(kt, ih, pt - r * dh, sh, OH)
                for s in range(S):
                    vw, ow = _strided_source(kt, iw, pl - s * dw, sw, OW)
                    v = _extract(kt, dcol, [n, oh, ow, kt.const(r, "index"), kt.const(s, "index"), c])
                    take = _select_typed(kt, kt.scalar("arith.andi", vh, vw, ty="i1"), v, kt.const(0.0, "f32"))
                    total = kt.scalar("arith.addf", total, take)
            return kt.from_f32(total, dtype)
        return kt.generic([], [], kt.empty(shape, dtype), amap(4, ["d0", "d1", "d2", "d3"]), ["parallel"] * 4, gather)


class ConvBwdWeightsGemm(DenseNhwcSolver):
    """Backward weights as a GEMM per filter tap over the batch and the map (module docstring), the input read
    in place: kernels/cpu/backward_weights.py, register tiles of MT channels x NT filters over chunks of output
    rows that stay in L2; the RSCK gradient. build() is its loop nest (the semantics the kernel computes)."""
    name = "conv_bwd_weights_gemm"
    directions = ("bwd_weights",)
    efficiency = 0.6

    def tunables(self, p):
        return {"mt": [m for m in (1, 2, 4, 6, 8) if m <= p.c],
                "nt": [n for n in (8, 16, 24, 32, 48, 64) if p.k % n == 0] or [_filter_tile(p.k, 16)]}

    def default_params(self, p, target):
        """6 x 16 on AVX2 (12 of its 16 vector registers in accumulators), 8 x 32 on AVX-512 (16 of 32)."""
        lanes = target.vector_lanes
        return {"mt": min(p.c, 8 if lanes == 16 else 6), "nt": _filter_tile(p.k, 2 * lanes)}

    def kernel(self, r):
        return cpu_backward_weights.backward_weights_kernel(r.name, r.signature, r.problem, r.params, THREADS,
                                                            r.target.vector_lanes)

    def build(self, kt, operands, attrs, shape, dtype, params):
        x, dy = operands
        (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
        xp = _pad_nhwc(kt, x, attrs)
        # loops: d0=r d1=s d2=c d3=k | d4=n d5=oh d6=ow
        xmap = amap(7, ["d4", f"d5 * {sh} + d0 * {dh}", f"d6 * {sw} + d1 * {dw}", "d2"])
        acc = kt.generic([xp, dy], [xmap, amap(7, ["d4", "d5", "d6", "d3"])], kt.filled(shape, "f32", 0.0, role="acc"),
                         amap(7, ["d0", "d1", "d2", "d3"]), ["parallel"] * 4 + ["reduction"] * 3,
                         mac_body([xp.dtype, dy.dtype]), role="contraction")
        return _result(kt, acc, dtype)

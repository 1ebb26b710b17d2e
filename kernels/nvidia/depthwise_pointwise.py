"""MobileNet's depthwise -> pointwise pair in one tensor-core kernel (sm_80+): the depthwise result never
goes through memory.

    h[m, c] = dw_act(sum_{r,s} x[n, oh sh - pt + r dh, ow sw - pl + s dw, c] wd[r, s, c] + bd[c])
    y[m, k] = act(sum_c h[m, c] w[c, k] + bias[k] + residual[m, k])        m = (n, oh, ow)

is the pointwise GEMM of kernels/nvidia/mma.py (mma.sync, register prefetch: the next k tile is loaded
while this one is multiplied) whose A tile is computed instead of read: DepthwiseA gives the GEMM's
A loader, for each of a thread's tile rows (output pixels) and its 8 channels of the k tile,

    the R x S filter taps of those channels (16-byte loads, the same for every row of the thread)
    acc = sum over the taps of x[n, ih, iw, c .. c + 7] * tap     (zeros outside the image)
    h = round(dw_act(acc + bd))                                   (0 past the M rows and C channels)

and the GEMM stages h into shared memory as it would the loaded A. What it saves is the depthwise
output's write and the pointwise read of it (N OH OW C elements each way); what it costs is the taps'
reads, R S per element of h, which the neighbouring pixels of a block share in L1, and, where K spans
several block columns, the depthwise recomputed per column block. prim-select forms the pair only where
the grid has enough blocks to hide a block's serial depthwise tiles and the predicted time is below the
two kernels' (solvers/nvidia.py, ConvDepthwisePointwiseMma.pays).
"""
from __future__ import annotations

from openprim.kernels.gpu.gemm import Emitter, GemmSpec, OperandA, load_vec, vector_activation
from openprim.kernels.nvidia.mma import mma_kernel

TILES = ("large", "small")          # kernels/nvidia/mma.py's tiles, the solver's "tile" parameter indexes


class DepthwiseA(OperandA):
    """The pointwise GEMM's A[m, c], computed from the input (module docstring): OperandA's row() (the
    output pixel's image position, from the depthwise geometry in spec.conv) with loads() computing what
    OperandA would read, for kernels/nvidia/mma.py's register-prefetch path."""

    def __init__(self, e: Emitter, spec: GemmSpec, x: tuple[str, str], taps: tuple[str, str],
                 dw_bias: tuple[str, str] | None, act: str, act_params: tuple):
        super().__init__(e, spec, *x)
        self.taps, self.dw_bias = taps, dw_bias
        self.act, self.act_params = act, act_params

    def loads(self, rows: list[dict], k: str, width: int, widen: bool) -> list[str]:
        """h at channels k .. k + width - 1 of every row, in the input type."""
        assert not widen, "the GEMM stages A in its input type"
        e, dt = self.e, self.spec.dtype
        _, H, W, C, _, _, R, S, _, _, _, _, dh, dw = self.spec.conv
        ft, vt = f"vector<{width}xf32>", f"vector<{width}x{dt}>"
        ok_c = e.cmp("ult", k, e.c(C))
        taps = [[load_vec(e, ok_c, *self.taps, [e.c(r), e.c(s), k], width, dt) for s in range(S)] for r in range(R)]
        bias = load_vec(e, ok_c, *self.dw_bias, [k], width, dt) if self.dw_bias else None
        zero = e.fresh("z")
        e.emit(f"{zero} = arith.constant dense<0.0> : {vt}")
        out = []
        for info in rows:
            acc = None
            for r in range(R):
                ih = e.add(info["ih0"], e.c(r * dh))
                row_ok = e.both(e.both(info["ok"], ok_c), e.both(e.cmp("sge", ih, e.c(0)), e.cmp("slt", ih, e.c(H))))
                for s in range(S):
                    iw = e.add(info["iw0"], e.c(s * dw))
                    ok = e.both(row_ok, e.both(e.cmp("sge", iw, e.c(0)), e.cmp("slt", iw, e.c(W))))
                    xv = load_vec(e, ok, self.memref, self.mtype, [info["img"], ih, iw, k], width, dt)
                    n = e.fresh("h")
                    if acc is None:
                        e.emit(f"{n} = arith.mulf {xv}, {taps[r][s]} : {ft}")
                    else:
                        e.emit(f"{n} = math.fma {xv}, {taps[r][s]}, {acc} : {ft}")
                    acc = n
            if bias:
                n = e.fresh("h")
                e.emit(f"{n} = arith.addf {acc}, {bias} : {ft}")
                acc = n
            acc = vector_activation(e, self.act, self.act_params, acc, width)
            h, kept = e.fresh("h"), e.fresh("h")
            e.emit(f"{h} = arith.truncf {acc} : {ft} to {vt}")
            e.emit(f"{kept} = arith.select {e.both(info['ok'], ok_c)}, {h}, {zero} : {vt}")
            out.append(kept)
        return out


def depthwise_pointwise_kernel(name: str, signature: list[tuple[str, str]], given: tuple, attrs: dict,
                               problem, tile: str) -> str:
    """The kernel function: signature = [(ssa name, memref type)] of x, the depthwise filter [R, S, C], its
    bias when given, the pointwise filter [C, K], bias and residual when given, then the output."""
    p = problem
    params = list(signature[:-1])
    x, taps = params.pop(0), params.pop(0)
    dw_bias = params.pop(0) if given[2] else None
    w = params.pop(0)
    spec = GemmSpec(m=p.n * p.oh * p.ow, n=p.k, k=p.c, dtype=p.dtype, bias=given[4], residual=given[5],
                    activation=attrs["activation"], activation_params=tuple(attrs["activation_params"]))
    depthwise = GemmSpec(m=spec.m, n=p.c, k=p.c, dtype=p.dtype, conv=(p.n, p.h, p.w, p.c, p.oh, p.ow, p.r, p.s,
                                                                     *p.strides, *p.padding[:2], *p.dilations))

    def operand_a(e: Emitter) -> DepthwiseA:
        return DepthwiseA(e, depthwise, x, taps, dw_bias, attrs["dw_activation"], tuple(attrs["dw_activation_params"]))
    return mma_kernel(name, [x, w, *params, signature[-1]], spec, tile, 1, operand_a, signature)

"""The Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution solvers (linalg on tensors; they run on every
target), and the WINOGRAD transform matrices, which the sm_90 Winograd kernels share."""
from __future__ import annotations

import numpy as np

from openprim.kernels import schedules
from openprim.kernels.irtext import KernelText, V, amap, ttype
from openprim.solvers.base import THREADS, DenseNhwcSolver, _largest_divisor, _nhwc_epilogue, roofline


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

"""The Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution solvers (linalg on tensors; they run on every
target), and the WINOGRAD transform matrices, which the sm_90 Winograd kernels share."""
from __future__ import annotations

import numpy as np

from openprim.base.ops import winograd_filter
from openprim.kernels import schedules
from openprim.kernels.cpu import winograd as cpu_winograd
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
        mv = kt.reshape(self.products(kt, kt.reshape(v, (a * a, N * th * tw, C)), w, G, attrs["filter_layout"]),
                        (a, a, N, th, tw, K))
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


    def products(self, kt: KernelText, v: V, w: V, G: V, filter_layout: str) -> V:
        """M[pos, tile, k] = sum over c of V[pos, tile, c] U[pos, c, k]: U = G w G^T computed here (w RSCK)."""
        a, (_, _, C, K) = self.m + 2, w.shape
        # U[al,be,c,k] = sum_{r,s} G[al,r] w[r,s,c,k] G[be,s]          dims (al be r s c k)
        u = _contract(kt, [G, w, G], [["d0", "d2"], ["d2", "d3", "d4", "d5"], ["d1", "d3"]],
                      (a, a, C, K), "0145", "23", 6)
        mm = kt.filled((a * a, v.shape[1], K), "f32", 0.0, role="acc")
        prod = kt.fresh("bmm")
        uu = kt.reshape(u, (a * a, C, K))
        kt.emit(f"{prod} = linalg.batch_matmul ins({v.name}, {uu.name} : {v.type}, {uu.type}) "
                f"outs({mm.name} : {mm.type}) -> {mm.type}")
        return V(prod, mm.shape, "f32")


class ConvWinogradF2x3(ConvWinograd):
    name = "conv_winograd_f2x3"
    m = 2


class ConvWinogradF4x3(ConvWinograd):
    name = "conv_winograd_f4x3"
    m = 4


class ConvWinogradPacked(ConvWinograd):
    """CPU Winograd as one hand-structured vector kernel (kernels/cpu/winograd.py): the filter transformed
    at compile time (a constant filter; prim-select packs U as "W<m>KC16k"), the input transform in
    vector adds, the (m+2)^2 GEMMs on register tiles of MT tiles x 16 channels, the output transform
    fused with the epilogue. f32 only (U in f16 would round the transform's fractions), 8k input and 16k
    output channels."""
    targets = ("cpu",)
    scheduled = False
    efficiency = 1.0           # of its GEMMs, relative to the target's peak (fitted: see cost)

    def is_applicable(self, p, target):
        if p.dtype != "f32":
            return "f32 only (the transformed filter would be rounded to " + p.dtype + ")"
        if p.c % 8 or p.k % 16:
            return f"needs input channels a multiple of 8 and output channels of 16 (C={p.c}, K={p.k})"
        return super().is_applicable(p, target)

    def cost(self, p, target):
        """The GEMMs at `efficiency` (rows of the MT-tile register tile left empty below MT tiles, and fewer
        than 64 output channels: DenseNet's 128 -> 32 layers ran 8-25% slower than conv_implicit_gemm),
        the transforms at half the peak, the traffic of V, the input and the output, most of it from cache
        (x 0.3), and U's, read once per call from memory like any filter (in a network every layer's filter
        comes from memory: a 7 x 7 x 512 x 512 layer at batch 1, with U (16 or 36 taps per channel pair)
        charged at 0.3, took F(2x2) at 1.2-1.3 ms where conv_implicit_gemm, whose 9-tap filter is charged
        whole, ran in 0.94-1.05 ms; Zen 4, 2 cores, interleaved). Fitted to interleaved runs against conv_implicit_gemm (2-core AVX2): ResNet-18's
        3x3 layers at batch 1 and 8, F(4x4) 1.1-2.1x faster, F(2x2) ahead of it only on 7x7 images at batch 1
        (the F(4x4) U of a 512 x 512 layer is 38 MB, read once per call); SqueezeNet's expand layers (16-64
        -> 64-256 channels) at batch 1, F(4x4) 1.35-1.9x faster, which a quarter of the peak for the
        transforms had priced out."""
        a2 = (self.m + 2) ** 2
        _, tiles, _, _ = self.gemms(p)
        peak, bandwidth = target.rates
        gemm = 2.0 * a2 * tiles * p.c * p.k
        transforms = 4.0 * a2 * tiles * (p.c + p.k) * (self.m + 2)
        cached = 4 * (2 * a2 * tiles * p.c + p.n * p.h * p.w * p.c + p.n * p.oh * p.ow * p.k)
        fill = min(1.0, tiles / self.default_params(p, target)["mt"]) * min(1.0, p.k / 64)
        return (gemm / (peak * 1e9 * self.efficiency * fill) + (0.3 * cached + 4 * a2 * p.c * p.k) / (bandwidth * 1e9)
                + transforms / (peak * 1e9 * 0.5))

    def tunables(self, p):
        return {"mt": [4, 6]}

    def default_params(self, p, target):
        return {"mt": 6}

    def packed_filter(self, p, params):
        """U = G g G^T for every (c, k), as [(m+2)^2, K/16, C, 16]."""
        a, G = self.m + 2, WINOGRAD[self.m][1]

        def transform(w):  # w: RSCK [3, 3, C, K]
            u = np.einsum("ar,rsck,bs->abck", G, w, G, optimize=True).reshape(a * a, p.c, p.k // 16, 16)
            return u.transpose(0, 2, 1, 3)
        return f"W{self.m}KC16k", transform

    def products(self, kt, v, w, G, filter_layout):
        """U arrives transformed, [(m+2)^2, K/16, C, 16] (a filter that is not a constant stays RSCK and is
        transformed here, by the linalg path: kernel() then gives no kernel)."""
        if not winograd_filter(filter_layout)[0]:
            return super().products(kt, v, w, G, filter_layout)
        a2, kb, C, nb = w.shape
        return _contract(kt, [v, w], [["d0", "d1", "d3"], ["d0", f"d2 floordiv {nb}", "d3", f"d2 mod {nb}"]],
                         (a2, v.shape[1], kb * nb), "012", "3", 4)

    def kernel(self, r):
        if not winograd_filter(r.problem.filter_layout)[0]:
            return None
        return cpu_winograd.winograd_kernel(r.name, r.signature, r.problem, r.params, r.attrs, THREADS,
                                            WINOGRAD[self.m])


class ConvWinogradF2x3Packed(ConvWinogradPacked):
    name = "conv_winograd_f2x3_packed"
    m = 2


class ConvWinogradF4x3Packed(ConvWinogradPacked):
    name = "conv_winograd_f4x3_packed"
    m = 4

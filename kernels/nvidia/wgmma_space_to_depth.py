"""Space-to-depth convolution on sm_90 wgmma: few input channels (a network's RGB stem) on 64-wide k tiles.

The implicit GEMM of wgmma.py spends a k tile on one filter tap and 64 channels: with 3 channels (padded to 8)
7/8 of every multiply is zeros. But in NHWC the channels of horizontally adjacent pixels are adjacent
in memory, so one filter row's taps x channels is a contiguous run, and 64 of it make a full k tile.
A stride gets in the way (a window's columns are sw apart), hence space-to-depth: each sh x sw block
of input pixels becomes one pixel of sh*sw*Cp channels, and the convolution becomes a stride-1 one
with a ceil(R/sh) x ceil(S/sw) filter:
    S[n, A, B, (i*sw + j)*Cp + c] = x[n, A*sh - pt + i, B*sw - pl + j, c]      (zeros outside, c >= C)
    out[n, oh, ow, k] = sum_a  S[n, oh + a, ow .. ow + S2, :] . W2[a, :, k]     (64 contiguous elements)
    W2[a, b*Cq + (i*sw + j)*Cp + c, k] = w[a*sh + i, b*sw + j, c, k]            (zeros past the filter)
The k tiles are read through an overlapping view of S, [N, HB, OW, 64] with strides [HB*WB*Cq, WB*Cq,
Cq, 1] (pixel ow's 64 elements start Cq after pixel ow-1's), whose TMA boxes are the usual pixel
boxes: the wgmma kernel runs unchanged with R2 taps of one 64-channel block. Three launches: the
repack (a thread per 8 channels of a block pixel), the filter transform, the GEMM.
"""
from __future__ import annotations

import dataclasses
import math

from openprim.kernels.gpu.gemm import Emitter, GemmSpec, load_vec, operands

from .wgmma import BK, close_launch, emit_wgmma, host_function, in_image, vec_launch


def space_to_depth_shape(conv: tuple) -> dict:
    """The repacked problem of a convolution: Cp (input channels padded so that a block pixel's Cq =
    sh*sw*Cp channels are whole 16-byte groups), R2 x S2 (the filter in blocks), HB x WB (the repacked
    image: the rows the output reads, the columns its last 64-element window reaches)."""
    n, h, w, c, oh, ow, r, s, sh, sw, pt, pl, dh, dw = conv
    step = 8 // math.gcd(8, sh * sw)
    cp = -(-c // step) * step
    cq = sh * sw * cp
    r2, s2 = -(-r // sh), -(-s // sw)
    return dict(cp=cp, cq=cq, r2=r2, s2=s2, hb=oh + r2 - 1, wb=ow - 1 + -(-BK // cq))


def space_to_depth_applicable(spec: GemmSpec) -> str | None:
    if not spec.conv or spec.groups != 1 or spec.nchw:
        return "needs an ungrouped NHWC convolution"
    if spec.dtype not in ("f16", "bf16"):
        return "wgmma kernel takes f16/bf16 inputs"
    if spec.n % 8:
        return "needs output channels that are a multiple of 8 (16-byte stores)"
    if spec.conv[12:14] != (1, 1):
        return "dilated"
    g = space_to_depth_shape(spec.conv)
    if g["s2"] * g["cq"] > BK:
        return f"a filter row of blocks has {g['s2'] * g['cq']} channels (more than a 64-wide k tile)"
    if g["r2"] < 2:
        return "filter no taller than the stride (a 1-tap GEMM)"
    return None


def space_to_depth_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, config: int, *,
                          smem_limit: int) -> str:
    N, H, W, C, OH, OW, R, S, sh, sw, pt, pl, _, _ = spec.conv
    g = space_to_depth_shape(spec.conv)
    cp, cq, r2, hb, wb = g["cp"], g["cq"], g["r2"], g["hb"], g["wb"]
    K, dt = spec.n, spec.dtype
    types, _, (x, w, _, _, _) = operands(params_sig, spec)
    e = Emitter()
    s_t, w2_t = f"memref<{N}x{hb}x{wb}x{cq}x{dt}>", f"memref<{r2}x1x{BK}x{K}x{dt}>"
    e.emit(f"%s2d = memref.alloc() {{alignment = 64 : i64}} : {s_t}")
    e.emit(f"%w2 = memref.alloc() {{alignment = 64 : i64}} : {w2_t}")
    # repack: a thread per 8 channels q0 .. q0 + 7 of a block pixel (n, A, B), each loaded alone
    pix, q0 = vec_launch(e, N * hb * wb, cq)
    n, A, B = e.div(pix, e.c(hb * wb)), e.rem(e.div(pix, e.c(wb)), e.c(hb)), e.rem(pix, e.c(wb))
    vals = []
    for t in range(8):
        q = e.add(q0, e.c(t))
        ij, c = e.div(q, e.c(cp)), e.rem(q, e.c(cp))
        ih = e.op("arith.subi", e.add(e.mul(A, e.c(sh)), e.div(ij, e.c(sw))), e.c(pt))
        iw = e.op("arith.subi", e.add(e.mul(B, e.c(sw)), e.rem(ij, e.c(sw))), e.c(pl))
        ok = e.both(in_image(e, ih, iw, H, W), e.cmp("ult", c, e.c(C)))
        one, val = load_vec(e, ok, x, types[x], [n, ih, iw, c], 1, dt, widen=False), e.fresh("s")
        e.emit(f"{val} = vector.extract {one}[0] : {dt} from vector<1x{dt}>")
        vals.append(val)
    v = e.fresh("g")
    e.emit(f"{v} = vector.from_elements {', '.join(vals)} : vector<8x{dt}>")
    e.emit(f"vector.store {v}, %s2d[{n}, {A}, {B}, {q0}] {{alignment = 16}} : {s_t}, vector<8x{dt}>")
    close_launch(e)
    # filter transform: a thread per 8 output channels of a (block row a, k-tile element kk)
    row, k = vec_launch(e, r2 * BK, K)
    a, kk = e.div(row, e.c(BK)), e.rem(row, e.c(BK))
    b, rem = e.div(kk, e.c(cq)), e.rem(kk, e.c(cq))
    ij, c = e.div(rem, e.c(cp)), e.rem(rem, e.c(cp))
    r = e.add(e.mul(a, e.c(sh)), e.div(ij, e.c(sw)))
    s = e.add(e.mul(b, e.c(sw)), e.rem(ij, e.c(sw)))
    ok = e.both(e.both(e.cmp("ult", r, e.c(R)), e.cmp("ult", s, e.c(S))), e.cmp("ult", c, e.c(C)))
    v = load_vec(e, ok, w, types[w], [r, s, c, k], 8, dt, widen=False)
    e.emit(f"vector.store {v}, %w2[{a}, {e.c(0)}, {kk}, {k}] {{alignment = 16}} : {w2_t}, vector<8x{dt}>")
    close_launch(e)
    # the GEMM over the overlapping view
    view_t = f"memref<{N}x{hb}x{OW}x{BK}x{dt}, strided<[{hb * wb * cq}, {wb * cq}, {cq}, 1]>>"
    e.emit(f"%s2d_view = memref.reinterpret_cast %s2d to offset: [0], sizes: [{N}, {hb}, {OW}, {BK}], "
           f"strides: [{hb * wb * cq}, {wb * cq}, {cq}, 1] : {s_t} to {view_t}")
    gemm = dataclasses.replace(spec, k=r2 * BK, conv=(N, hb, OW, BK, OH, OW, r2, 1, 1, 1, 0, 0, 1, 1))
    emit_wgmma(e, [("%s2d_view", view_t), ("%w2", w2_t)] + params_sig[2:], gemm, config, smem_limit=smem_limit)
    return host_function(e, name, params_sig)

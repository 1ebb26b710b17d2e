"""im2col + GEMM on sm_90 wgmma: a convolution's filter windows copied into a scratch matrix, then the
flat TMA/wgmma GEMM of wgmma.py (a find candidate: the implicit GEMM reads the same rows in place)."""
from __future__ import annotations

import dataclasses

from openprim.kernels.gpu.gemm import Emitter, GemmSpec, load_vec

from .wgmma import close_launch, emit_wgmma, host_function, in_image, vec_launch


def im2col_gemm_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, config: int, *,
                       smem_limit: int) -> str:
    """A convolution as im2col + GEMM on wgmma: one launch copies every filter window into a row of a
    [M, R*S*C] scratch buffer (16 bytes per thread, zeros outside the image), then the flat wgmma
    GEMM multiplies it by the filter viewed as [R*S*C, K], epilogue fused. The implicit GEMM reads the
    same rows in place, so this costs an extra round trip of the buffer (a find candidate)."""
    e = Emitter()
    col_t = im2col_launch(e, params_sig[0], spec.conv, spec.dtype, "%col")
    gemm = dataclasses.replace(spec, conv=None)
    emit_wgmma(e, [("%col", col_t)] + params_sig[1:], gemm, config, smem_limit=smem_limit)
    return host_function(e, name, params_sig)


def im2col_launch(e: Emitter, x_sig: tuple[str, str], conv: tuple, dt: str, col: str) -> str:
    """Allocate `col` [N OH OW, R S C] and one launch filling it (a thread per 8 channels of one window tap,
    zeros outside the image) from NHWC x (C a multiple of 8); returns col's memref type."""
    N, H, W, C, OH, OW, R, S, sh, sw, pt, pl, dh, dw = conv
    x, x_t = x_sig
    col_t = f"memref<{N * OH * OW}x{R * S * C}x{dt}>"
    e.emit(f"{col} = memref.alloc() {{alignment = 64 : i64}} : {col_t}")
    rest, c = vec_launch(e, N * OH * OW * R * S, C)          # rest = (m, tap)
    tap, m = e.rem(rest, e.c(R * S)), e.div(rest, e.c(R * S))
    pix = e.rem(m, e.c(OH * OW))
    ih = e.op("arith.subi", e.add(e.mul(e.div(pix, e.c(OW)), e.c(sh)), e.mul(e.div(tap, e.c(S)), e.c(dh))), e.c(pt))
    iw = e.op("arith.subi", e.add(e.mul(e.rem(pix, e.c(OW)), e.c(sw)), e.mul(e.rem(tap, e.c(S)), e.c(dw))), e.c(pl))
    ok = in_image(e, ih, iw, H, W)
    v = load_vec(e, ok, x, x_t, [e.div(m, e.c(OH * OW)), ih, iw, c], 8, dt, widen=False)
    e.emit(f"vector.store {v}, {col}[{m}, {e.add(e.mul(tap, e.c(C)), c)}] {{alignment = 16}} : {col_t}, vector<8x{dt}>")
    close_launch(e)
    return col_t

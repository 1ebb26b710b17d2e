"""Winograd F(m x m, 3x3) on sm_90 wgmma: the input, filter and output transforms as launches around
the (m+2)^2 GEMMs, which run batched on the TMA/wgmma kernel of wgmma.py (winograd_kernel explains)."""
from __future__ import annotations

import dataclasses

from openprim.kernels.gpu.gemm import Emitter, GemmSpec, load_vec, operands

from .wgmma import close_launch, emit_wgmma, host_function, in_image, store_vector, vec_launch


def _transform(e: Emitter, mat, rows: list[str]) -> list[str]:
    """mat (a constant matrix) times the column `rows` of vector<8xf32> values: the zero coefficients
    skipped, the unit ones as adds and subtracts."""
    v8 = "vector<8xf32>"

    def scaled(c, r):
        if abs(c) == 1:
            return r
        k = e.fresh("k")
        e.emit(f"{k} = arith.constant dense<{abs(float(c))!r}> : {v8}")
        return e.op("arith.mulf", r, k, v8)
    out = []
    for coeffs in mat:
        acc = None
        for c, r in ((c, r) for c, r in zip(coeffs, rows) if c != 0):
            t = scaled(c, r)
            if acc is None and c > 0:
                acc = t
            elif acc is None:
                z = e.fresh("z")
                e.emit(f"{z} = arith.constant dense<0.0> : {v8}")
                acc = e.op("arith.subf", z, t, v8)
            else:
                acc = e.op("arith.subf" if c < 0 else "arith.addf", acc, t, v8)
        out.append(acc)
    return out


def winograd_kernel(name: str, params_sig: list[tuple[str, str]], spec: GemmSpec, m: int, winograd,
                    config: int, *, smem_limit: int) -> str:
    """Winograd F(m x m, 3x3) with its (m+2)^2 GEMMs on wgmma (NHWC x RSCK, stride 1, undilated), four
    launches over scratch buffers:
        input transform    V[t, p, c] = (B^T d B)[t] of every (m+2)^2 input tile d (p = n, tile row,
                           tile column; zeros outside the image), a thread per 8 channels of a tile
        filter transform   U[t, c, k] = (G g G^T)[t], a thread per 8 output channels of a channel
        batched GEMM       M[t] = V[t] x U[t]: the TMA/wgmma kernel on grid z = t, f32 out
        output transform   Y = A^T M A, then bias, residual, activation and the cast, a thread per 8
                           output channels of a tile (its m x m pixels, cropped at the edges)
    winograd = (B^T, G, A^T) as numpy matrices."""
    BT, G, AT = winograd
    a = m + 2
    T = a * a
    N, H, W, C, OH, OW, _, _, _, _, pt, pl, _, _ = spec.conv
    K, dt = spec.n, spec.dtype
    th, tw = -(-OH // m), -(-OW // m)
    P = N * th * tw
    types, _, (x, w, bias, residual, out) = operands(params_sig, spec)
    o8, v8 = f"vector<8x{dt}>", "vector<8xf32>"
    e = Emitter()
    v_t, u_t, m_t = f"memref<{T}x{P}x{C}x{dt}>", f"memref<{T}x{C}x{K}x{dt}>", f"memref<{T}x{P}x{K}xf32>"
    for buf, ty in (("%wv", v_t), ("%wu", u_t), ("%wm", m_t)):
        e.emit(f"{buf} = memref.alloc() {{alignment = 64 : i64}} : {ty}")

    def tile_of(p):
        return e.div(p, e.c(th * tw)), e.rem(e.div(p, e.c(tw)), e.c(th)), e.rem(p, e.c(tw))

    def extended(raw):
        f = e.fresh("f")
        e.emit(f"{f} = arith.extf {raw} : {o8} to {v8}")
        return f

    def narrowed(v):
        n_ = e.fresh("h")
        e.emit(f"{n_} = arith.truncf {v} : {v8} to {o8}")
        return n_

    def separable(mat_rows, mat_cols, d):
        """mat_rows . d . mat_cols^T for a 2-d list d of vector<8xf32>."""
        cols = [_transform(e, mat_rows, [d[u][j] for u in range(len(d))]) for j in range(len(d[0]))]
        rows = [[cols[j][i] for j in range(len(d[0]))] for i in range(len(mat_rows))]
        return [_transform(e, mat_cols, r) for r in rows]

    # input transform
    p, c = vec_launch(e, P, C)
    n, i, j = tile_of(p)
    d = []
    for u in range(a):
        ih = e.op("arith.subi", e.add(e.mul(i, e.c(m)), e.c(u)), e.c(pt))
        row = []
        for v in range(a):
            iw = e.op("arith.subi", e.add(e.mul(j, e.c(m)), e.c(v)), e.c(pl))
            ok = in_image(e, ih, iw, H, W)
            row.append(load_vec(e, ok, x, types[x], [n, ih, iw, c], 8, dt, widen=True))
        d.append(row)
    for t, val in enumerate(x_ for r in separable(BT, BT, d) for x_ in r):
        e.emit(f"vector.store {narrowed(val)}, %wv[{e.c(t)}, {p}, {c}] {{alignment = 16}} : {v_t}, {o8}")
    close_launch(e)
    # filter transform (RSCK)
    c, k = vec_launch(e, C, K)
    g = []
    for r in range(3):
        row = []
        for s_ in range(3):
            raw = e.fresh("g")
            e.emit(f"{raw} = vector.load {w}[{e.c(r)}, {e.c(s_)}, {c}, {k}] : {types[w]}, {o8}")
            row.append(extended(raw))
        g.append(row)
    for t, val in enumerate(x_ for r in separable(G, G, g) for x_ in r):
        e.emit(f"vector.store {narrowed(val)}, %wu[{e.c(t)}, {c}, {k}] {{alignment = 16}} : {u_t}, {o8}")
    close_launch(e)
    # the (m+2)^2 GEMMs
    gemm = dataclasses.replace(spec, m=P, k=C, conv=None, bias=False, residual=False, activation="none",
                               activation_params=())
    emit_wgmma(e, [("%wv", v_t), ("%wu", u_t), ("%wm", m_t)], gemm, config, batch=T, out_f32=True,
               smem_limit=smem_limit)
    # output transform and epilogue
    p, k = vec_launch(e, P, K)
    n, i, j = tile_of(p)
    mm = []
    for al in range(a):
        row = []
        for be in range(a):
            val = e.fresh("mv")
            e.emit(f"{val} = vector.load %wm[{e.c(al * a + be)}, {p}, {k}] : {m_t}, {v8}")
            row.append(val)
        mm.append(row)
    y = separable(AT, AT, mm)
    bias_f = None
    if bias:
        raw = e.fresh("b")
        e.emit(f"{raw} = vector.load {bias}[{k}] : {types[bias]}, {o8}")
        bias_f = extended(raw)
    for pp in range(m):
        oh = e.add(e.mul(i, e.c(m)), e.c(pp))
        for qq in range(m):
            ow = e.add(e.mul(j, e.c(m)), e.c(qq))
            e.open(f"scf.if {e.both(e.cmp('ult', oh, e.c(OH)), e.cmp('ult', ow, e.c(OW)))} {{")
            at = [n, oh, ow, k]
            store_vector(e, spec, y[pp][qq], bias_f, (out, at, types[out]),
                   residual=(residual, at, types[residual]) if residual else None)
            e.close()
    close_launch(e)
    return host_function(e, name, params_sig)

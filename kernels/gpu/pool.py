"""Pooling for GPUs: max_pool2d / avg_pool2d (NHWC) in one pass, padding by predicates.

The reference semantics pool over strided views of a padded copy of the input: on a GPU that is
three launches (fill, copy, window) and two extra passes over memory. Here one thread computes one
output element (channels fastest, so neighbouring threads read neighbouring addresses): the kh x kw
window is unrolled, each tap loaded only when it lies inside the image, and avg_pool's divisor is
computed from the clipped window (PyTorch's count_include_pad and ceil_mode rules).
"""
from __future__ import annotations

import math

from .gemm import Emitter

THREADS = 256


def pool_kernel(name: str, signature: list[tuple[str, str]], kind: str, attrs: dict, shape, dtype: str) -> str:
    (src, src_t), (dst, dst_t) = signature
    N, OH, OW, C = shape
    H, W = (int(d) for d in src_t[len("memref<"):].split("x")[1:3])
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["strides"]
    dh, dw = attrs.get("dilations", (1, 1))
    pt, pl, pb, pr = attrs["padding"]
    total = N * OH * OW * C
    e = Emitter()
    lin = e.open_elementwise_launch(total, THREADS)
    c = e.rem(lin, e.c(C))
    pix = e.div(lin, e.c(C))
    ow, rest = e.rem(pix, e.c(OW)), e.div(pix, e.c(OW))
    oh, n = e.rem(rest, e.c(OH)), e.div(rest, e.c(OH))
    hs = e.op("arith.subi", e.mul(oh, e.c(sh)), e.c(pt))
    ws = e.op("arith.subi", e.mul(ow, e.c(sw)), e.c(pl))
    acc = e.const(-math.inf if kind == "max" else 0.0)
    for r in range(kh):
        ih = e.add(hs, e.c(r * dh))
        hok = e.both(e.cmp("sge", ih, e.c(0)), e.cmp("slt", ih, e.c(H)))
        for s in range(kw):
            iw = e.add(ws, e.c(s * dw))
            ok = e.both(hok, e.both(e.cmp("sge", iw, e.c(0)), e.cmp("slt", iw, e.c(W))))
            v = e.fresh("t")
            e.emit(f"{v} = scf.if {ok} -> (f32) {{")
            raw = e.fresh("x")
            e.emit(f"  {raw} = memref.load {src}[{n}, {ih}, {iw}, {c}] : {src_t}")
            e.emit(f"  scf.yield {e.to_f32(raw, dtype)} : f32")
            e.emit("} else {")
            e.emit(f"  scf.yield {acc if kind == 'max' else e.const(0.0)} : f32")
            e.emit("}")
            acc = e.scalar("arith.maximumf" if kind == "max" else "arith.addf", acc, v)
    if kind == "avg":  # divisor: the window clipped to the padded extent (or to the image without the pads)
        def count(start, k, size, p1):
            end = e.op("arith.minsi", e.add(start, e.c(k)), e.c(size + p1))
            if not attrs["count_include_pad"]:
                start, end = e.op("arith.maxsi", start, e.c(0)), e.op("arith.minsi", end, e.c(size))
            return e.op("arith.subi", end, start)
        cnt = e.mul(count(hs, kh, H, pb), count(ws, kw, W, pr))
        as_int = e.fresh("ci")
        e.emit(f"{as_int} = arith.index_cast {cnt} : index to i32")
        f = e.fresh("cf")
        e.emit(f"{f} = arith.sitofp {as_int} : i32 to f32")
        acc = e.scalar("arith.divf", acc, f)
    e.emit(f"memref.store {e.from_f32(acc, dtype)}, {dst}[{n}, {oh}, {ow}, {c}] : {dst_t}")
    e.close()
    return e.function(name, signature)

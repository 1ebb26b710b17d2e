"""channel gather (CPU): output channels picked from several inputs' channels by a static map, pixel by pixel.

ShuffleNet v2 ends each unit with concat(x1, branch) -> reshape [.., 2, C/2] -> transpose -> reshape (the
channel shuffle), and the next unit slices the result in two halves. In NHWC every one of those is a copy
of the whole tensor (concat, transpose, two slices: 26% of ShuffleNet's CPU time at batch 8). They only
move channels within a pixel, so each output of the chain (passes/channel_shuffle.py) is one kernel:

    out[p, j] = input_{i(j)}[p, c(j)]      p over the N*H*W pixels, j over the output channels

with the map (i(j), c(j)) computed at compile time. Per pixel the map is emitted as straight code, in
pieces that each take one pass over 8 or 16 channels:

    interleave   out[j + 2t] = a[c0 + t], out[j + 2t + 1] = b[c1 + t] (t < 8): two vector<8> loads, one
                 vector.shuffle, one vector<16> store (the shuffle's pattern)
    run          out[j + t] = a[c0 + t] (t < 8): one vector<8> load and store
    element      anything else: a scalar load and store

The pixels are split between the threads (scf.forall), one thread below SERIAL_ELEMENTS outputs.
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.concat import SERIAL_ELEMENTS
from openprim.kernels.cpu.implicit_gemm import Body

LANES = 8


def pieces(mapping: list[tuple[int, int]]) -> list[tuple]:
    """The map cut into ("interleave", j, a, c0, b, c1), ("run", j, a, c0) and ("element", j, a, c) pieces."""
    out, j = [], 0

    def run(at, n):
        i, c = mapping[at]
        return at + n <= len(mapping) and all(mapping[at + t] == (i, c + t) for t in range(n))

    while j < len(mapping):
        if j + 2 * LANES <= len(mapping):
            (a, c0), (b, c1) = mapping[j], mapping[j + 1]
            if all(mapping[j + 2 * t] == (a, c0 + t) and mapping[j + 2 * t + 1] == (b, c1 + t) for t in range(LANES)):
                out.append(("interleave", j, a, c0, b, c1))
                j += 2 * LANES
                continue
        if run(j, LANES):
            out.append(("run", j, *mapping[j]))
            j += LANES
            continue
        out.append(("element", j, *mapping[j]))
        j += 1
    return out


def gather_kernel(name: str, signature: list[tuple[str, str]], inputs: list[tuple[str, str]],
                  mapping: list[tuple[int, int]], threads: int) -> str:
    """The kernel function text: signature = [(argument, memref type)] of the function, inputs = those of
    the gathered tensors in map order (each [.., C_i], the same pixels), the output last; mapping[j] =
    (input index, channel) of output channel j."""
    b = Body()
    out_name, out_t = signature[-1]
    *out_shape, elem = out_t[len("memref<"):-1].split("x")
    pixels, cout = math.prod(int(d) for d in out_shape[:-1]), int(out_shape[-1])
    srcs = [b.flat(a) for a in inputs]
    widths = [int(t[len("memref<"):-1].split("x")[-2]) for _, t in inputs]
    dst = b.flat((out_name, out_t))
    parts = threads if pixels * cout >= SERIAL_ELEMENTS else 1
    vt, wide = f"vector<{LANES}x{elem}>", f"vector<{2 * LANES}x{elem}>"
    p = b.open_thread_shares(pixels, parts)
    base = [b.mul(p, w) for w in widths]
    row = b.mul(p, cout)

    def load(i, c, ty):
        v = b.fresh("g")
        op = "vector.load" if ty else "memref.load"
        b.emit(f"{v} = {op} {srcs[i][0]}[{b.idx(b.add(base[i], c))}] : {srcs[i][1]}{', ' + ty if ty else ''}")
        return v

    def store(v, j, ty):
        op = "vector.store" if ty else "memref.store"
        b.emit(f"{op} {v}, {dst[0]}[{b.idx(b.add(row, j))}] : {dst[1]}{', ' + ty if ty else ''}")

    for kind, j, *src in pieces(mapping):
        if kind == "interleave":
            va, vb, v = load(src[0], src[1], vt), load(src[2], src[3], vt), b.fresh("g")
            order = ", ".join(f"{t}, {t + LANES}" for t in range(LANES))
            b.emit(f"{v} = vector.shuffle {va}, {vb} [{order}] : {vt}, {vt}")
            store(v, j, wide)
        elif kind == "run":
            store(load(src[0], src[1], vt), j, vt)
        else:
            store(load(src[0], src[1], None), j, None)
    b.close()
    b.close()
    return b.function(name, signature)

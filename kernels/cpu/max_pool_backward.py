"""max_pool2d's input gradient on the CPU, NHWC f32, in the vector dialect.

The reference lowering (kernels/semantics.py) first writes each window's winning tap as an i32 map, then
has every input position test the kh x kw windows that might hold it, reading taps and dy with scalar
tensor.extracts: ResNet-18's max pool (112x112x64 -> 56x56x64, 3x3 s2 p1) took 6 ms a backward per image.
Here each window scatters its dy to its winner, the vector lanes along the channels (contiguous in NHWC):

    scf.forall over the images                       windows of one image overlap, of two never: no races
      dx[n] = 0
      for each output pixel (oh, ow):                the taps' positions and "inside the image" computed
                                                     once per pixel (outside ones read a clamped address)
        for each channel vector (C % 16 tail: a vector of the exact smaller width):
          best, which = x[tap 0] (or -inf outside), 0
          for each later tap k: which = k where x[tap k] > best (strictly: the first maximum wins, as the
                                reference's row-major scan; padding is -inf and never wins)
          for each tap k inside the image: dx[tap k] += (which == k) ? dy : 0

The sum at an input position adds the windows in (oh, ow) order, all in f32, as the reference sums them.
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body

LANES = 16
SERIAL_ELEMENTS = 1 << 18        # input + output elements: below, one thread (kernels/cpu/pool.py's rule)


def _dims(mtype: str) -> list[int]:
    return [int(d) for d in mtype[len("memref<"):-1].split("x")[:-1]]


class _MaxPoolBackward:
    def __init__(self, signature, attrs: dict):
        self.b, self.signature, self.attrs = Body(), signature, attrs
        self.N, self.OH, self.OW, self.C = _dims(signature[0][1])
        _, self.H, self.W, _ = _dims(signature[1][1])
        self.dy, self.x, self.dx = (self.b.flat(a) for a in signature)

    def vt(self, width: int, elem: str = "f32") -> str:
        return f"vector<{width}x{elem}>"

    def v(self, op: str, *operands, ty: str) -> str:
        n = self.b.fresh("v")
        self.b.emit(f"{n} = {op} {', '.join(operands)} : {ty}")
        return n

    def load(self, buf, at, width: int) -> str:
        return self.b.load_f32(buf, at, width, "f32")

    def store(self, value: str, buf, at, width: int) -> None:
        self.b.emit(f"vector.store {value}, {buf[0]}[{self.b.idx(at)}] : {buf[1]}, {self.vt(width)}")

    def splat_i1(self, flag: str, width: int) -> str:
        n = self.b.fresh("m")
        self.b.emit(f"{n} = vector.broadcast {flag} : i1 to {self.vt(width, 'i1')}")
        return n

    def taps(self, n, oh, ow) -> list[tuple[str, str]]:
        """(inside the image: i1, the tap's pixel offset in x, clamped into the image) per tap, row-major."""
        b = self.b
        (kh, kw), (sh, sw) = self.attrs["kernel"], self.attrs["strides"]
        dh, dw = self.attrs.get("dilations", (1, 1))
        pt, pl = self.attrs["padding"][:2]
        out = []
        for r in range(kh):
            ih = b.add(b.mul(oh, sh), r * dh - pt)
            for s in range(kw):
                iw = b.add(b.mul(ow, sw), s * dw - pl)
                inside = b.op("arith.andi", self._between(ih, self.H), self._between(iw, self.W), "i1")
                ihc = b.op("arith.minsi", b.op("arith.maxsi", ih, 0), self.H - 1)
                iwc = b.op("arith.minsi", b.op("arith.maxsi", iw, 0), self.W - 1)
                pixel = b.add(b.mul(b.add(b.mul(n, self.H), ihc), self.W), iwc)
                out.append((inside, b.mul(pixel, self.C)))
        return out

    def _between(self, v, size: int) -> str:
        """0 <= v < size as an i1 (v an index)."""
        b = self.b
        lo, hi = b.fresh("ge"), b.fresh("lt")
        b.emit(f"{lo} = arith.cmpi sge, {b.idx(v)}, {b.const(0)} : index")
        b.emit(f"{hi} = arith.cmpi slt, {b.idx(v)}, {b.const(size)} : index")
        n = b.fresh("in")
        b.emit(f"{n} = arith.andi {lo}, {hi} : i1")
        return n

    def channels(self, taps, dy_at, c, width: int) -> None:
        """The window's scatter for the channels [c, c + width)."""
        b, ft, it = self.b, self.vt(width), self.vt(width, "i32")
        best = b.fresh("best")
        b.emit(f"{best} = arith.select {taps[0][0]}, {self.load(self.x, b.add(taps[0][1], c), width)}, "
               f"{b.const(-math.inf, ft)} : {ft}")
        which = b.const(0, it)
        for k, (inside, at) in enumerate(taps[1:], 1):
            value = b.fresh("x")
            b.emit(f"{value} = arith.select {inside}, {self.load(self.x, b.add(at, c), width)}, "
                   f"{b.const(-math.inf, ft)} : {ft}")
            above = b.fresh("gt")
            b.emit(f"{above} = arith.cmpf ogt, {value}, {best} : {ft}")
            best = self.v("arith.select", above, value, best, ty=f"{self.vt(width, 'i1')}, {ft}")
            which = self.v("arith.select", above, b.const(k, it), which, ty=f"{self.vt(width, 'i1')}, {it}")
        g = self.load(self.dy, b.add(dy_at, c), width)
        for k, (inside, at) in enumerate(taps):
            hit = b.fresh("hit")
            b.emit(f"{hit} = arith.cmpi eq, {which}, {b.const(k, it)} : {it}")
            hit = self.v("arith.andi", hit, self.splat_i1(inside, width), ty=self.vt(width, "i1"))
            add = self.v("arith.select", hit, g, b.const(0.0, ft), ty=f"{self.vt(width, 'i1')}, {ft}")
            where = b.add(at, c)
            self.store(self.v("arith.addf", self.load(self.dx, where, width), add, ty=ft), self.dx, where, width)

    def each_channel_vector(self, f) -> None:
        """f(channel offset, width) over the channels: a loop over the full vectors, then the C % 16 tail."""
        b = self.b
        full, rest = divmod(self.C, LANES)
        if full == 1:
            f(0, LANES)
        elif full > 1:
            f(b.mul(b.open_for(0, full), LANES), LANES)
            b.close()
        if rest:
            f(full * LANES, rest)

    def kernel(self, name: str) -> str:
        b = self.b
        moved = self.N * (self.H * self.W + 2 * self.OH * self.OW) * self.C
        if self.N > 1 and moved >= SERIAL_ELEMENTS:
            n = b.fresh("n")
            b.emit(f"scf.forall ({n}) in ({self.N}) {{")
            b.depth += 1
        else:
            n = b.open_for(0, self.N)
        image = b.mul(n, self.H * self.W * self.C)
        pixel = b.open_for(0, self.H * self.W)
        at = b.add(image, b.mul(pixel, self.C))
        self.each_channel_vector(lambda c, w: self.store(b.const(0.0, self.vt(w)), self.dx, b.add(at, c), w))
        b.close()
        oh = b.open_for(0, self.OH)
        ow = b.open_for(0, self.OW)
        taps = self.taps(n, oh, ow)
        dy_at = b.mul(b.add(b.mul(b.add(b.mul(n, self.OH), oh), self.OW), ow), self.C)
        self.each_channel_vector(lambda c, w: self.channels(taps, dy_at, c, w))
        b.close()
        b.close()
        b.close()
        return b.function(name, self.signature)


def max_pool_backward_kernel(name: str, signature: list[tuple[str, str]], attrs: dict, dtype: str) -> str | None:
    """The kernel function (outline's signature: dy, x, dx) of max_pool2d_backward; None where it does not
    apply (NCHW, not f32: a f16 sum of several windows would round once per window, not once)."""
    if dtype != "f32" or attrs["layout"] != "NHWC" or any(not t.endswith("xf32>") for _, t in signature):
        return None
    return _MaxPoolBackward(signature, attrs).kernel(name)

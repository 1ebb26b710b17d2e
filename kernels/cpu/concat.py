"""concat (CPU): a chain of binary concats along one axis as one copy kernel, each input written once.

prim.concat is binary (IRDL binds one type to a variadic operand group), so the frontends build an
n-input concat as a left-nested chain concat(concat(concat(x0, x1), x2), x3). Run op by op, the chain
copies the growing prefix again at every step: DenseNet's dense blocks (a concat of every earlier
feature map before each layer) moved O(layers^2) bytes that way. prim-tile groups such a chain into one
kernel (concat_chains.outline_concat_chains) and this builds it: with the axis splitting the output into
`outer` rows of `row` elements, input i fills columns [off_i, off_i + inner_i) of every row.

    scf.forall over the thread parts            rows split between the threads (or, with fewer rows
      for each row of the part:                 than threads, each input's columns split); outputs
                                                under SERIAL_ELEMENTS on one thread
        for each input: copy inner_i elements   vector<8> loads and stores, then a scalar tail

A batch_norm on the concat axis and a relu after the chain (DenseNet's pre-activation, grouped with it)
are applied on the way: each thread first computes s[c] = scale / sqrt(var + eps) and t[c] = shift -
mean * s into stack buffers, then stores relu(x * s[c] + t[c]) (in f32, rounded back to the element type).
Every memref is viewed 1-d; without a batch_norm or relu the elements are copied as they are.
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body

LANES = 8
# Smaller outputs are copied by one thread (a fork/join costs more than the copy: kernels/schedules.py).
SERIAL_ELEMENTS = 1 << 16


def _shape(mtype: str) -> tuple[list[int], str]:
    *dims, elem = mtype[len("memref<"):-1].split("x")
    return [int(d) for d in dims], elem


class _Concat:
    """The kernel of one chain: its inputs' columns in every row, the batch_norm + relu if grouped."""

    def __init__(self, signature, args, axis: int, threads: int, epsilon: float | None, relu: bool):
        self.b = Body()
        out_shape, self.elem = _shape(args[-1][1])
        self.epsilon, self.relu = epsilon, relu
        self.leaves = args[:-5] if epsilon is not None else args[:-1]
        self.args, self.signature = args, signature
        self.threads = threads if math.prod(out_shape) >= SERIAL_ELEMENTS else 1
        self.axis = axis % len(out_shape)
        self.channels = out_shape[self.axis]
        self.outer = math.prod(out_shape[:self.axis])
        self.row = math.prod(out_shape[self.axis:])
        self.inner = [math.prod(_shape(t)[0][self.axis:]) for _, t in self.leaves]
        # the columns of a row between channels: 1 when the axis is the last one (NHWC), else H*W (NCHW)
        self.spatial = self.row // self.channels

    def value(self, v: str, width: int, channel) -> str:
        """The stored value of input element v (width lanes, 0: a scalar) of `channel` (the first of the
        lanes): batch_norm's y = x * s[c] + t[c] and relu when the chain has them, in f32."""
        if self.epsilon is None and not self.relu:
            return v
        b = self.b
        ft, et = (f"vector<{width}xf32>", f"vector<{width}x{self.elem}>") if width else ("f32", self.elem)
        if self.elem != "f32":
            w = b.fresh("x")
            b.emit(f"{w} = arith.extf {v} : {et} to {ft}")
            v = w
        if self.epsilon is not None:
            s, t = (self.load(buf, channel, width) for buf in (self.scale, self.shift))
            y = b.fresh("y")
            b.emit(f"{y} = math.fma {v}, {s}, {t} : {ft}")
            v = y
        if self.relu:
            y = b.fresh("y")
            b.emit(f"{y} = arith.maximumf {v}, {b.const(0.0, ft) if width else b.const(0.0, 'f32')} : {ft}")
            v = y
        return b.narrow(v, width, self.elem)

    def load(self, buf, at, width: int) -> str:
        """buf[at] or the vector buf[at : at + width] (per-channel f32 buffers, where the lanes are
        channels; along the spatial columns of NCHW every lane has the same channel: a broadcast)."""
        b = self.b
        n = b.fresh("p")
        if width and self.spatial == 1:
            b.emit(f"{n} = vector.load {buf[0]}[{b.idx(at)}] : {buf[1]}, vector<{width}xf32>")
            return n
        b.emit(f"{n} = memref.load {buf[0]}[{b.idx(at)}] : {buf[1]}")
        if not width:
            return n
        v = b.fresh("bc")
        b.emit(f"{v} = vector.broadcast {n} : f32 to vector<{width}xf32>")
        return v

    def copy(self, src, src_at, dst, dst_at, count, column) -> None:
        """dst[dst_at + j] = value(src[src_at + j]) for j < count (count an int or an index value);
        `column` is the first element's column in the output row (its channel: column // spatial)."""
        b = self.b
        # with a batch_norm along NCHW's spatial columns a vector must not straddle two channels: whole
        # rows (each input's block starts a channel) of a plane a multiple of LANES, else scalars
        lanes = LANES if self.epsilon is None or self.spatial == 1 or \
            (self.spatial % LANES == 0 and self.by_rows) else 1
        vt = f"vector<{lanes}x{self.elem}>"
        vecs = count // lanes if isinstance(count, int) else b.op("arith.divui", count, lanes)
        if vecs != 0 and lanes > 1:
            j = b.mul(b.open_for(0, vecs), lanes)
            v = b.fresh("v")
            b.emit(f"{v} = vector.load {src[0]}[{b.idx(b.add(src_at, j))}] : {src[1]}, {vt}")
            v = self.value(v, lanes, self.channel(b.add(column, j)))
            b.emit(f"vector.store {v}, {dst[0]}[{b.idx(b.add(dst_at, j))}] : {dst[1]}, {vt}")
            b.close()
        if lanes > 1 and isinstance(count, int) and count % lanes == 0:
            return
        first = b.mul(vecs, lanes) if lanes > 1 else 0
        j = b.open_for(first, count)
        s = b.fresh("s")
        b.emit(f"{s} = memref.load {src[0]}[{b.idx(b.add(src_at, j))}] : {src[1]}")
        s = self.value(s, 0, self.channel(b.add(column, j)))
        b.emit(f"memref.store {s}, {dst[0]}[{b.idx(b.add(dst_at, j))}] : {dst[1]}")
        b.close()

    def channel(self, column):
        return column if self.spatial == 1 or self.epsilon is None else self.b.op("arith.divui", column, self.spatial)

    def affine(self) -> None:
        """s[c] = scale[c] / sqrt(var[c] + eps), t[c] = shift[c] - mean[c] s[c] into two stack buffers."""
        b, c = self.b, self.channels
        params = [self.views[a] for a in self.args[-5:-1]]
        self.scale, self.shift = [(b.fresh("bn"), f"memref<{c}xf32>") for _ in range(2)]
        for buf in (self.scale, self.shift):
            b.emit(f"{buf[0]} = memref.alloca() {{alignment = 64 : i64}} : {buf[1]}")
        i = b.open_for(0, c)
        scale, shift, mean, var = (self.widen_scalar(p, i) for p in params)
        r, s, t = b.fresh("r"), b.fresh("s"), b.fresh("t")
        b.emit(f"{r} = math.rsqrt {b.op('arith.addf', var, b.const(self.epsilon, 'f32'), 'f32')} : f32")
        b.emit(f"{s} = arith.mulf {scale}, {r} : f32")
        b.emit(f"{t} = arith.subf {shift}, {b.op('arith.mulf', mean, s, 'f32')} : f32")
        b.emit(f"memref.store {s}, {self.scale[0]}[{i}] : {self.scale[1]}")
        b.emit(f"memref.store {t}, {self.shift[0]}[{i}] : {self.shift[1]}")
        b.close()

    def widen_scalar(self, buf, i) -> str:
        n = self.b.fresh("p")
        self.b.emit(f"{n} = memref.load {buf[0]}[{i}] : {buf[1]}")
        if self.elem == "f32":
            return n
        w = self.b.fresh("x")
        self.b.emit(f"{w} = arith.extf {n} : {self.elem} to f32")
        return w

    def kernel(self, name: str) -> str:
        b = self.b
        views = self.views = {a: self.b.flat(a) for a in dict.fromkeys(self.args)}
        srcs = [views[a] for a in self.leaves]
        dst = views[self.args[-1]]
        by_rows = self.by_rows = self.outer >= self.threads
        it = b.fresh("it")
        b.emit(f"scf.forall ({it}) in ({self.threads if by_rows else self.outer * self.threads}) {{")
        b.depth += 1
        if self.epsilon is not None:  # every thread its own copy of the per-channel affine
            b.emit("memref.alloca_scope {")
            b.depth += 1
            self.affine()
        if by_rows:  # rows [it*outer/T, (it+1)*outer/T)
            lo = b.op("arith.divui", b.mul(it, self.outer), self.threads)
            hi = b.op("arith.divui", b.add(b.mul(it, self.outer), self.outer), self.threads)
            r = b.open_for(lo, hi)
            parts = [(0, n) for n in self.inner]
        else:        # row it / T, the (it % T)-th share of each input's columns
            r, part = b.op("arith.divui", it, self.threads), b.op("arith.remui", it, self.threads)
            parts = []
            for n in self.inner:
                first = b.op("arith.divui", b.mul(part, n), self.threads)
                end = b.op("arith.divui", b.add(b.mul(part, n), n), self.threads)
                parts.append((first, b.op("arith.subi", end, first)))
        off = 0
        for src, n, (first, count) in zip(srcs, self.inner, parts):
            self.copy(src, b.add(b.mul(r, n), first), dst, b.add(b.mul(r, self.row), b.add(off, first)), count,
                      b.add(off, first))
            off += n
        if by_rows:
            b.close()
        if self.epsilon is not None:
            b.close()
        b.depth -= 1
        b.emit("}")
        return b.function(name, self.signature)


def concat_kernel(name: str, signature: list[tuple[str, str]], args: list[tuple[str, str]], axis: int,
                  threads: int, epsilon: float | None = None, relu: bool = False) -> str:
    """The kernel function text: signature = [(argument, memref type)] of the function; args = those of
    the chain's inputs in order (an argument may repeat: concat([x, y, x])), [the batch_norm's scale,
    shift, mean, variance], then the output; axis the concat axis; epsilon the batch_norm's (None: no
    batch_norm); relu: a relu last."""
    return _Concat(signature, args, axis, threads, epsilon, relu).kernel(name)

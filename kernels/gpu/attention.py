"""What the flash-attention kernels of every vendor share (kernels/nvidia/flash_attention*.py,
kernels/amd/flash_attention.py): the f32 scalar helpers of the online softmax, the reductions of a row's
statistics over the lanes that hold the row, the rows of a head in the 2-d views of q, k, v and out
(layouts BHSD and BSHD), and the reads of the additive mask.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from openprim.base.ops import attention_dims
from openprim.kernels.gpu.gemm import Emitter, collapse
from openprim.kernels.irtext import flit

LOG2E = 1.4426950408889634
HEAD_DIMS = (64, 128)       # what the flash kernels take by default: f16/bf16 tiles of whole 16-byte rows
DTYPES = ("f16", "bf16")


def applicable(dtype: str, d: int, kernel: str, head_dims: tuple[int, ...] = HEAD_DIMS) -> str | None:
    """None, or why `kernel` (a flash kernel's name for the message) does not apply."""
    if dtype not in DTYPES:
        return f"{dtype}: the {kernel} flash kernel takes f16 or bf16"
    if d not in head_dims:
        return f"head dim {d}: the {kernel} flash kernel takes head dims {', '.join(map(str, head_dims))}"
    return None


def memref_shape(mtype: str) -> tuple[tuple[int, ...], str]:
    """(shape, element type) of a static `memref<AxBx...xT>` type."""
    *dims, dtype = mtype[len("memref<"):-1].split("x")
    return tuple(int(x) for x in dims), dtype


@dataclass(frozen=True)
class FlashSignature:
    """A flash kernel's parameters as outlining gives them (q, k, v, the mask when there is one, the
    output: (ssa name, memref type) each) and the problem they carry."""
    q: tuple[str, str]
    k: tuple[str, str]
    v: tuple[str, str]
    mask: tuple[str, str] | None
    out: tuple[str, str]
    dtype: str
    B: int
    H: int
    Sq: int
    Sk: int
    D: int

    @classmethod
    def of(cls, signature: list[tuple[str, str]], layout: str, applicable) -> "FlashSignature":
        """Read off `signature`; applicable(dtype, head dim) says why the kernel does not apply (ValueError)."""
        q, k, v, *mask, out = signature
        q_shape, dt = memref_shape(q[1])
        B, H, Sq, D = attention_dims(q_shape, layout)
        why = applicable(dt, D)
        if why:
            raise ValueError(why)
        return cls(q, k, v, mask[0] if mask else None, out, dt, B, H, Sq,
                   attention_dims(memref_shape(k[1])[0], layout)[2], D)

    def rows(self, e: Emitter) -> tuple[str, str, str, str]:
        """2-d [B H S, D] views of q, k, v and out (inside the launch)."""
        BH = self.B * self.H
        return tuple(collapse(e, name, ty, 4, BH * s, self.D, self.dtype)
                     for (name, ty), s in ((self.q, self.Sq), (self.k, self.Sk), (self.v, self.Sk), (self.out, self.Sq)))


class AttentionEmitter(Emitter):
    """Emitter with f32 scalar helpers; a row's statistics live on the lanes `row_lanes` apart (xor
    offsets within `width` lanes), which row_reduce combines."""

    def __init__(self, dtype: str, row_lanes: tuple[int, ...], width: int):
        super().__init__()
        self.dt = dtype
        self.row_lanes, self.width = row_lanes, width
        self.f32 = {}

    def f(self, v: float) -> str:
        """An f32 constant (defined once, at the top of the launch)."""
        if v not in self.f32:
            n = self.fresh("cf")
            self.emit(f"{n} = arith.constant {flit(v)} : f32")
            self.f32[v] = n
        return self.f32[v]

    def i32(self, v: int) -> str:
        key = ("i32", v)
        if key not in self.f32:
            n = self.fresh("ci")
            self.emit(f"{n} = arith.constant {v} : i32")
            self.f32[key] = n
        return self.f32[key]

    def fop(self, name: str, *args: str) -> str:
        n = self.fresh("f")
        self.emit(f"{n} = {name} {', '.join(args)} : f32")
        return n

    def select(self, cond: str, a: str, b: str, ty: str = "f32") -> str:
        n = self.fresh("s")
        self.emit(f"{n} = arith.select {cond}, {a}, {b} : {ty}")
        return n

    def shuffle_xor(self, v: str, offset: int) -> str:
        other, ok = self.fresh("sh"), self.fresh("ok")
        self.emit(f"{other}, {ok} = gpu.shuffle xor {v}, {self.i32(offset)}, {self.i32(self.width)} : f32")
        return other

    def row_reduce(self, op: str, v: str) -> str:
        """`op` (arith.maximumf / arith.addf) of v over the lanes that hold the same row."""
        for offset in self.row_lanes:
            v = self.fop(op, v, self.shuffle_xor(v, offset))
        return v

    def softmax_base(self, m: str) -> str:
        """What exp2 subtracts: the running maximum m, or 0 where m is still -inf (a row with no unmasked key
        so far), so that exp2(-inf - 0) = 0 and never NaN."""
        empty = self.fresh("p")
        self.emit(f"{empty} = arith.cmpf oeq, {m}, {self.f(-math.inf)} : f32")
        return self.select(empty, self.f(0.0), m)

    def inverse_row_sum(self, partial: str) -> str:
        """1 / (the row's sum of the lanes' partial sums), 0 for a row whose every key was masked (sum 0)."""
        total = self.row_reduce("arith.addf", partial)
        positive = self.fresh("p")
        self.emit(f"{positive} = arith.cmpf ogt, {total}, {self.f(0.0)} : f32")
        return self.select(positive, self.fop("arith.divf", self.f(1.0), total), self.f(0.0))


class HeadRows:
    """Rows of one head in the [B*H*S, D] views: in BHSD, row (b H + h) S + s; in BSHD (heads inner, the
    projections' own layout, no transposes around the kernel), row (b S + s) H + h."""

    def __init__(self, e: Emitter, layout: str, H: int, Sq: int, Sk: int, head: str):
        self.e = e
        if layout == "BHSD":
            self.q_base, self.k_base, self.step = e.mul(head, e.c(Sq)), e.mul(head, e.c(Sk)), 1
        else:
            image, h = e.div(head, e.c(H)), e.rem(head, e.c(H))
            self.q_base = e.add(e.mul(image, e.c(Sq * H)), h)
            self.k_base = e.add(e.mul(image, e.c(Sk * H)), h)
            self.step = H

    def row(self, base: str, pos: str) -> str:
        return self.e.add(base, pos if self.step == 1 else self.e.mul(pos, self.e.c(self.step)))

    def q(self, pos: str) -> str:
        return self.row(self.q_base, pos)

    def k(self, pos: str) -> str:
        return self.row(self.k_base, pos)


def mask_reader(e: AttentionEmitter, mask: tuple[str, str], H: int, Sq: int, Sk: int, head: str):
    """A function (query, key) -> the additive mask there, in the log2 domain (times log2 e) as f32. The
    mask is any numpy broadcast of [B, H, Sq, Sk] in the data's type, or tiles the batch ([P, ..] with P
    dividing B: batch b reads row b mod P): broadcast dimensions are read at 0, the query and key clamped
    into range (the scores they would be wrong for are masked or not stored)."""
    m_name, m_t = mask
    m_shape, m_dt = memref_shape(m_t)
    full = (1,) * (4 - len(m_shape)) + m_shape
    batch = e.div(head, e.c(H))
    bh_idx = [e.rem(batch, e.c(full[0])) if full[0] > 1 else batch, e.rem(head, e.c(H))]
    log2e = e.f(LOG2E)

    def value(query: str, key: str) -> str:
        idx = bh_idx + [e.op("arith.minui", query, e.c(Sq - 1)), e.op("arith.minui", key, e.c(Sk - 1))]
        idx = [e.c(0) if n == 1 else i for n, i in zip(full, idx)][4 - len(m_shape):]
        x = e.fresh("mk")
        e.emit(f"{x} = memref.load {m_name}[{', '.join(idx)}] : {m_t}")
        if m_dt != "f32":
            y = e.fresh("mk")
            e.emit(f"{y} = arith.extf {x} : {m_dt} to f32")
            x = y
        return e.fop("arith.mulf", x, log2e)
    return value

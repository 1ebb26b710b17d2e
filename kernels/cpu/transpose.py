"""Transposes on the CPU, in the vector dialect, tiled so that both sides are read and written in runs.

The reference lowering (a linalg.transpose under the generic schedule) vectorizes along the output's last
dimension and reads the input with a stride there: a training step's filter layouts (ResNet-18's RSCK
weight gradients back to torch's KCRS, [3, 3, 512, 512] -> [512, 512, 3, 3]) moved 0.5 GB/s, 20 ms for one
9 MB filter. Here the permutation is first made canonical: dims of size 1 dropped, input dims that stay
next to each other in the output merged ([3, 3, 512, 512] -> [512, 512, 3, 3] is [9, 262144] -> [262144, 9]).
Then, with A the input's last dim and B the output's last:

    A == B (a run stays a run)   every output row is a contiguous input row: copied in vector<16> pieces
    A != B                       tiles of TB rows of B by TA columns of A: TB vectors of TA read along A,
                                 transposed in registers (vector.transpose), TA vectors of TB written along B

    scf.forall over the tiles (or rows) of the whole output      OpenMP's static split: contiguous ranges
      indices of the other dims decoded from the tile number, the input and output offsets from them

TA = 16 (or A when shorter), TB = B up to 16. Where a tile hangs over the end of A or B, the loads and stores
are masked (vector.create_mask of what is left). Any element type of 16 bits or more; a small transpose runs
on one thread (kernels/schedules.SERIAL_POINTS: a fork/join costs more than the copy).
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body
from openprim.kernels.schedules import SERIAL_POINTS

LANES = 16
ELEMENTS = ("f32", "f16", "bf16", "i64", "i32")


def canonical(shape: list[int], perm: list[int]) -> tuple[list[int], list[int]]:
    """(sizes, perm) of the same transpose with dims of size 1 dropped and input dims that stay adjacent
    in the output merged (at least one dim)."""
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    if not keep:
        return [1], [0]
    rank = {d: i for i, d in enumerate(keep)}
    sizes, order = [shape[d] for d in keep], [rank[d] for d in perm if d in rank]
    groups = [[order[0]]]                           # runs of consecutive input dims, in output order
    for d in order[1:]:
        if d == groups[-1][-1] + 1:
            groups[-1].append(d)
        else:
            groups.append([d])
    by_input = sorted(groups, key=lambda g: g[0])
    merged = [math.prod(sizes[d] for d in g) for g in by_input]
    return merged, [by_input.index(g) for g in groups]


class _Transpose:
    def __init__(self, signature, sizes: list[int], perm: list[int], elem: str):
        self.b, self.signature = Body(), signature
        self.sizes, self.perm, self.elem = sizes, perm, elem
        self.rank = len(sizes)
        self.in_strides = [math.prod(sizes[d + 1:]) for d in range(self.rank)]
        out_sizes = [sizes[p] for p in perm]
        self.out_strides = {p: math.prod(out_sizes[j + 1:]) for j, p in enumerate(perm)}   # by input dim
        self.x, self.y = self.b.flat(signature[0]), self.b.flat(signature[-1])
        self.total = math.prod(sizes)

    def vt(self, n: int, lanes: int | None = None) -> str:
        return f"vector<{n}x{self.elem}>" if lanes is None else f"vector<{n}x{lanes}x{self.elem}>"

    def open_items(self, count: int) -> str:
        """The loop over `count` independent items: a forall when the transpose is big enough."""
        b = self.b
        if count > 1 and self.total >= SERIAL_POINTS:
            it = b.fresh("it")
            b.emit(f"scf.forall ({it}) in ({count}) {{")
            b.depth += 1
            return it
        return b.open_for(0, count)

    def decode(self, item, dims: list[int], counts: list[int]) -> list:
        """The index of each of `dims` (sizes `counts`, the last fastest) in flat item number `item`."""
        b, out, rest = self.b, [], item
        for i, n in reversed(list(enumerate(counts))):
            if i == 0:
                out.append(rest)
            else:
                out.append(b.op("arith.remui", rest, n))
                rest = b.op("arith.divui", rest, n)
        return out[::-1]

    def mask(self, left, width: int) -> str:
        """vector.create_mask of min(left, width) lanes (left an index value, possibly <= 0)."""
        b = self.b
        n, m = b.op("arith.maxsi", b.op("arith.minsi", left, width), 0), b.fresh("mask")
        b.emit(f"{m} = vector.create_mask {n} : vector<{width}xi1>")
        return m

    def load(self, at, width: int, mask: str | None) -> str:
        b, n = self.b, self.b.fresh("ld")
        if mask:
            b.emit(f"{n} = vector.maskedload {self.x[0]}[{b.idx(at)}], {mask}, {self.zero(width)} : {self.x[1]}, "
                   f"vector<{width}xi1>, {self.vt(width)} into {self.vt(width)}")
        else:
            b.emit(f"{n} = vector.load {self.x[0]}[{b.idx(at)}] : {self.x[1]}, {self.vt(width)}")
        return n

    def store(self, v: str, at, width: int, mask: str | None) -> None:
        b = self.b
        if mask:
            b.emit(f"vector.maskedstore {self.y[0]}[{b.idx(at)}], {mask}, {v} : {self.y[1]}, vector<{width}xi1>, "
                   f"{self.vt(width)}")
        else:
            b.emit(f"vector.store {v}, {self.y[0]}[{b.idx(at)}] : {self.y[1]}, {self.vt(width)}")

    def zero(self, width: int) -> str:
        return self.b.const(0.0 if self.elem[0] in "fb" else 0, self.vt(width))

    # ------------------------------------------------------------------ the two cases
    def rows(self) -> None:
        """The last dim stays last: each output row is an input row."""
        b, n = self.b, self.sizes[-1]
        outer = self.perm[:-1]
        counts = [self.sizes[d] for d in outer]
        item = self.open_items(math.prod(counts))
        index = self.decode(item, outer, counts)
        src = dst = 0
        for d, i in zip(outer, index):
            src, dst = b.add(src, b.mul(i, self.in_strides[d])), b.add(dst, b.mul(i, self.out_strides[d]))
        full, rest = divmod(n, LANES)
        if full:
            at = b.mul(b.open_for(0, full), LANES) if full > 1 else 0
            self.store(self.load(b.add(src, at), LANES, None), b.add(dst, at), LANES, None)
            if full > 1:
                b.close()
        if rest:
            at = full * LANES
            self.store(self.load(b.add(src, at), rest, None), b.add(dst, at), rest, None)
        b.close()

    def tiles(self) -> None:
        """A (the input's last dim) and B (the output's last) swap: tiles of TB x TA through registers."""
        b = self.b
        A, B = self.rank - 1, self.perm[-1]
        nA, nB = self.sizes[A], self.sizes[B]
        TA, TB = min(nA, LANES), min(nB, LANES)
        outer = [d for d in self.perm if d not in (A, B)]
        ta, tb = -(-nA // TA), -(-nB // TB)
        counts = [self.sizes[d] for d in outer] + [ta, tb]
        item = self.open_items(math.prod(counts))
        *index, ia, ib = self.decode(item, outer, counts)
        src = dst = 0
        for d, i in zip(outer, index):
            src, dst = b.add(src, b.mul(i, self.in_strides[d])), b.add(dst, b.mul(i, self.out_strides[d]))
        a0, b0 = b.mul(ia, TA), b.mul(ib, TB)
        ragged = nA % TA or nB % TB
        left_a, left_b = (b.op("arith.subi", nA, a0), b.op("arith.subi", nB, b0)) if ragged else (None, None)
        tile = self.zero_tile(TB, TA)
        for i in range(TB):
            mask = self.row_mask(left_a, left_b, i, TA) if ragged else None
            row = self.load(b.add(src, b.add(b.mul(b.add(b0, i), self.in_strides[B]), a0)), TA, mask)
            nxt = b.fresh("tile")
            b.emit(f"{nxt} = vector.insert {row}, {tile} [{i}] : {self.vt(TA)} into {self.vt(TB, TA)}")
            tile = nxt
        flipped = b.fresh("tr")
        b.emit(f"{flipped} = vector.transpose {tile}, [1, 0] : {self.vt(TB, TA)} to {self.vt(TA, TB)}")
        for j in range(TA):
            col = b.fresh("col")
            b.emit(f"{col} = vector.extract {flipped}[{j}] : {self.vt(TB)} from {self.vt(TA, TB)}")
            mask = self.row_mask(left_b, left_a, j, TB) if ragged else None
            self.store(col, b.add(dst, b.add(b.mul(b.add(a0, j), self.out_strides[A]), b0)), TB, mask)
        b.close()

    def zero_tile(self, rows: int, cols: int) -> str:
        return self.b.const(0.0 if self.elem[0] in "fb" else 0, self.vt(rows, cols))

    def row_mask(self, along, across, k: int, width: int) -> str:
        """The mask of row k of a tile: `along` lanes where k < `across`, else none."""
        b = self.b
        inside = b.fresh("in")
        b.emit(f"{inside} = arith.cmpi slt, {b.idx(k)}, {b.idx(across)} : index")
        left = b.fresh("left")
        b.emit(f"{left} = arith.select {inside}, {b.idx(along)}, {b.const(0)} : index")
        return self.mask(left, width)

    def kernel(self, name: str) -> str:
        if self.perm[-1] == self.rank - 1:
            self.rows()
        else:
            self.tiles()
        return self.b.function(name, self.signature)


def transpose_kernel(name: str, signature: list[tuple[str, str]], perm: list[int]) -> str | None:
    """The kernel function (outline's signature: x, out) of a transpose by `perm`; None for element types
    under 16 bits (i1, i8) and when nothing moves."""
    *shape, elem = signature[0][1][len("memref<"):-1].split("x")
    if elem not in ELEMENTS:
        return None
    sizes, order = canonical([int(d) for d in shape], list(perm))
    if order == sorted(order):
        return None   # a copy: the reference's single vectorized loop
    return _Transpose(signature, sizes, order, elem).kernel(name)

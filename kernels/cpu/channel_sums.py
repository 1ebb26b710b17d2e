"""Sums per channel over the rows of channels-last maps on the CPU: batch norm's statistics, its training
forward and backward, group norm, and reduces over every dim but the last.

Such a sum reads a map as [rows = N H W, C]. The reference lowering (kernels/semantics.py) loops over the
channels outside and the rows inside, so each vector it loads is a column of values C apart, and its final
op (a [C] or [2, C] pointwise) is too small to be threaded: ResNet-18's first batch norm at batch 8 took
12.5 ms for its statistics and 22.7 ms for its backward. Here the rows are swept in memory order:

    scf.forall over chunks of CHUNK rows              threads take contiguous chunks (OpenMP's static split)
      for each group of up to GROUP channel vectors   vector<16xf32> (the C % 16 tail masked)
        acc = neutral; for r in the chunk: acc = combine(acc, term(r, group))    registers; the chunk
        partial[chunk, group] = acc                   stays in L2 for the next group; an f32 scratch
    per channel vector: total = combine over the chunks of partial[k, c]           (serial: chunks x C)

A chunk sums at most CHUNK rows and the chunks' sums are then added, so an f32 sum is as accurate as a
two-level pairwise one (rows / CHUNK + CHUNK terms in a chain instead of rows).

    batch_norm_statistics  total(x) -> mean; total((x - mean)^2) -> rsqrt(var + eps); [2, C]
    batch_norm_training    the statistics, then y = (x - mean) inv_std scale + shift (a forall over chunks)
    batch_norm_backward    total(dy) and total(dy (x - mean)) in one sweep (two accumulators), or read from
                           its sums operand; then per element dx = k1 dy - k2 - k3 (x - mean), k1 = scale
                           inv_std, k2 = k1 total(dy) / M, k3 = k1 inv_std^2 total(dy (x - mean)) / M
    batch_norm_backward_sums  that sweep alone, its two totals as [2, C] (the shift's and scale's gradients)
    group_norm             per sample: chunks of one sample's rows, the channel totals added per group of C / G
                           channels in scalars; the mean, then the centered squares; y = x a + b with
                           a = inv_std scale, b = shift - mean a per (sample, channel)
    reduce                 sum, mean, max or min over all dims but the last

Arithmetic is f32 for f16/bf16 maps too (widened on load, rounded once at the store), as everywhere.
"""
from __future__ import annotations

import math

from openprim.kernels.cpu.implicit_gemm import Body

LANES = 16
GROUP = 4                 # channel vectors accumulated at once (8 AVX2 registers, 4 AVX-512 ones per sum)
CHUNK_BYTES = 1 << 16     # a chunk's rows, as f32: re-read from L2 by each channel group after the first
SERIAL_ELEMENTS = 1 << 15
DTYPES = ("f32", "f16", "bf16")
NEUTRAL = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf}
COMBINE = {"sum": "arith.addf", "mean": "arith.addf", "max": "arith.maximumf", "min": "arith.minimumf"}


def _dims(mtype: str) -> tuple[list[int], str]:
    *shape, elem = mtype[len("memref<"):-1].split("x")
    return [int(d) for d in shape], elem


class _Channels:
    """One kernel over maps viewed as [rows, C]; `self.v`, loads and stores on vector<16xf32>."""

    def __init__(self, signature, channels: int, dtype: str, samples: int = 1):
        self.b, self.signature, self.dtype = Body(), signature, dtype
        self.C, self.samples = channels, samples
        self.rows = math.prod(_dims(signature[0][1])[0]) // channels
        self.sample_rows = self.rows // samples
        self.chunk = max(8, CHUNK_BYTES // (4 * channels))
        self.sample_chunks = -(-self.sample_rows // self.chunk)   # a chunk holds rows of one sample only
        self.chunks = samples * self.sample_chunks
        self.sample_at = 0        # in a chunk loop: the first element of the chunk's sample's [C] vectors
        self.threaded = self.chunks > 1 and self.rows * channels >= SERIAL_ELEMENTS
        self.full, self.rest = divmod(channels, LANES)
        self.vt = f"vector<{LANES}xf32>"
        self.args = [self.b.flat(a) for a in signature]
        if self.rest:
            self.mask = self.b.fresh("mask")
            self.b.const_lines.append(f"  {self.mask} = vector.constant_mask [{self.rest}] : vector<{LANES}xi1>")

    # ------------------------------------------------------------------ values
    def v(self, op: str, *operands) -> str:
        n = self.b.fresh("v")
        self.b.emit(f"{n} = {op} {', '.join(operands)} : {self.vt}")
        return n

    def splat(self, value: float) -> str:
        return self.b.const(value, self.vt)

    def load(self, buf, at, masked: bool, neutral: float = 0.0) -> str:
        """buf[at : at + 16] as f32; masked: the C % 16 tail lanes, the others `neutral`."""
        b = self.b
        n = b.load_f32(buf, at, LANES, buf[1].rsplit("x", 1)[1][:-1], self.mask if masked else None)
        if masked and neutral != 0.0:
            w = b.fresh("x")
            b.emit(f"{w} = arith.select {self.mask}, {n}, {self.splat(neutral)} : vector<{LANES}xi1>, {self.vt}")
            n = w
        return n

    def store(self, y: str, buf, at, masked: bool) -> None:
        b = self.b
        elem = buf[1].rsplit("x", 1)[1][:-1]
        et = f"vector<{LANES}x{elem}>"
        y = b.narrow(y, LANES, elem)
        if masked:
            b.emit(f"vector.maskedstore {buf[0]}[{b.idx(at)}], {self.mask}, {y} : {buf[1]}, vector<{LANES}xi1>, {et}")
        else:
            b.emit(f"vector.store {y}, {buf[0]}[{b.idx(at)}] : {buf[1]}, {et}")

    def vectors(self) -> list[tuple[int, bool]]:
        """(first channel, masked) of each channel vector."""
        return [(j * LANES, False) for j in range(self.full)] + ([(self.full * LANES, True)] if self.rest else [])

    def scratch(self, size: int) -> tuple[str, str]:
        n, t = self.b.fresh("scratch"), f"memref<{size}xf32>"
        self.b.emit(f"{n} = memref.alloc() {{alignment = 64 : i64}} : {t}")
        return n, t

    # ------------------------------------------------------------------ loops
    def open_chunks(self) -> tuple[str, str]:
        """Open the loop over chunks (a forall when threaded) and the loop over a chunk's rows; returns
        (chunk, row). close() twice ends both."""
        b = self.b
        if self.threaded:
            k = b.fresh("k")
            b.emit(f"scf.forall ({k}) in ({self.chunks}) {{")
            b.depth += 1
        else:
            k = b.open_for(0, self.chunks)
        if self.samples == 1:
            lo = b.mul(k, self.chunk)
            hi = b.op("arith.minui", b.add(lo, self.chunk), self.rows)
            return k, (lo, hi)
        n = b.op("arith.divui", k, self.sample_chunks)
        first = b.mul(n, self.sample_rows)
        lo = b.add(first, b.mul(b.op("arith.remui", k, self.sample_chunks), self.chunk))
        hi = b.op("arith.minui", b.add(lo, self.chunk), b.add(first, self.sample_rows))
        self.sample_at = b.mul(n, self.C)
        return k, (lo, hi)

    def close_chunks(self) -> None:
        self.b.close()

    def chunk_sums(self, terms: list, partials: list, kinds: list[str]) -> None:
        """partials[i][chunk * C + c] = the `kinds[i]` combine over the chunk's rows of terms[i](row offset,
        channel, masked) per channel vector, for every channel (groups of GROUP vectors)."""
        b = self.b
        k, (lo, hi) = self.open_chunks()
        vectors = self.vectors()
        for g in range(0, len(vectors), GROUP):
            group = vectors[g:g + GROUP]
            inits = [self.splat(NEUTRAL[kind]) for kind in kinds for _ in group]
            r, accs, results = b.loop(lo, hi, inits, self.vt)
            at = b.mul(r, self.C)
            new = []
            for i, (term, kind) in enumerate(zip(terms, kinds)):
                for j, (c, masked) in enumerate(group):
                    new.append(self.v(COMBINE[kind], accs[i * len(group) + j], term(at, c, masked)))
            b.end_loop(new, self.vt)
            for i, partial in enumerate(partials):
                for j, (c, masked) in enumerate(group):
                    self.store(results[i * len(group) + j], partial, b.add(b.mul(k, self.C), c), masked)
        self.close_chunks()

    def each_vector(self, f) -> None:
        """f(channel, masked) for every channel vector: a loop over the full ones, then the C % 16 tail."""
        b = self.b
        if self.full:
            f(b.mul(b.open_for(0, self.full), LANES), False)
            b.close()
        if self.rest:
            f(self.full * LANES, True)

    def totals(self, partial, kind: str, each, sample=0) -> None:
        """each(total, channel, masked) for every channel vector: the combine of the partials of the chunks
        (of `sample`'s chunks where the map has several samples)."""
        b = self.b
        first = b.mul(sample, self.sample_chunks)

        def total(c, masked):
            k, (acc,), (result,) = b.loop(first, b.add(first, self.sample_chunks), [self.splat(NEUTRAL[kind])],
                                          self.vt)
            b.end_loop([self.v(COMBINE[kind], acc, self.load(partial, b.add(b.mul(k, self.C), c), masked,
                                                              NEUTRAL[kind]))], self.vt)
            each(result, c, masked)
        self.each_vector(total)

    def per_element(self, f, out) -> None:
        """out[r, c] = f(row offset, channel, masked) for every element, chunks split between the threads."""
        b = self.b
        _, (lo, hi) = self.open_chunks()
        at = b.mul(b.open_for(lo, hi), self.C)
        self.each_vector(lambda c, masked: self.store(f(at, c, masked), out, b.add(at, c), masked))
        b.close()
        self.close_chunks()

    def function(self, name: str) -> str:
        return self.b.function(name, self.signature)   # prim-lower's buffer deallocation frees the scratches

    # ------------------------------------------------------------------ the ops
    def mean_inv_std(self, epsilon: float) -> tuple:
        """Scratch [2 C]: the mean (first C) and 1 / sqrt(biased var + eps) of x (the first argument)."""
        x, n = self.args[0], 1.0 / self.rows
        partial, stats = self.scratch(self.chunks * self.C), self.scratch(2 * self.C)
        self.chunk_sums([lambda at, c, m: self.load(x, self.b.add(at, c), m)], [partial], ["sum"])
        self.totals(partial, "sum", lambda t, c, m: self.store(self.v("arith.mulf", t, self.splat(n)), stats, c, m))

        def square(at, c, m):
            d = self.v("arith.subf", self.load(x, self.b.add(at, c), m), self.load(stats, c, m))
            return self.v("arith.mulf", d, d)
        self.chunk_sums([square], [partial], ["sum"])

        def inv_std(t, c, m):
            var = self.v("arith.addf", self.v("arith.mulf", t, self.splat(n)), self.splat(float(epsilon)))
            self.store(self.v("math.rsqrt", var), stats, self.b.add(c, self.C), m)
        self.totals(partial, "sum", inv_std)
        return stats

    def statistics(self, name: str, epsilon: float) -> str:
        stats, out = self.mean_inv_std(epsilon), self.args[-1]
        for c, m in self.vectors():
            for half in (0, self.C):
                self.store(self.load(stats, half + c, m), out, half + c, m)
        return self.function(name)

    def training(self, name: str, epsilon: float) -> str:
        stats = self.mean_inv_std(epsilon)
        x, scale, shift, out = self.args

        def normalized(at, c, m):
            y = self.v("arith.mulf", self.v("arith.subf", self.load(x, self.b.add(at, c), m), self.load(stats, c, m)),
                       self.v("arith.mulf", self.load(stats, self.b.add(c, self.C), m), self.load(scale, c, m)))
            return self.v("arith.addf", y, self.load(shift, c, m))
        self.per_element(normalized, out)
        return self.function(name)

    def backward_partials(self, dy, x, mean) -> tuple:
        """The chunks' sums of dy and of dy (x - mean) (two scratches, one sweep), and centered(at, c, m)."""
        b = self.b
        partial, second = self.scratch(self.chunks * self.C), self.scratch(self.chunks * self.C)

        def centered(at, c, m):
            return self.v("arith.subf", self.load(x, b.add(at, c), m), self.load(mean, c, m))
        self.chunk_sums([lambda at, c, m: self.load(dy, b.add(at, c), m),
                         lambda at, c, m: self.v("arith.mulf", self.load(dy, b.add(at, c), m), centered(at, c, m))],
                        [partial, second], ["sum", "sum"])
        return partial, second, centered

    def backward_sums(self, name: str) -> str:
        dy, x, mean, out = self.args
        partial, second, _ = self.backward_partials(dy, x, mean)
        for row, sums in enumerate((partial, second)):
            self.totals(sums, "sum", lambda t, c, m, row=row: self.store(t, out, self.b.add(c, row * self.C), m))
        return self.function(name)

    def backward(self, name: str) -> str:
        """dx; the two sums swept from dy and x, or read from the sums operand [2, C] where it is given."""
        dy, x, scale, mean, inv, *given, out = self.args
        b, M = self.b, float(self.rows)
        if given:
            def centered(at, c, m):
                return self.v("arith.subf", self.load(x, b.add(at, c), m), self.load(mean, c, m))

            def sums(row):
                return lambda each: self.each_vector(
                    lambda c, m: each(self.load(given[0], b.add(c, row * self.C), m), c, m))
            first, second = sums(0), sums(1)
        else:
            partial, rest, centered = self.backward_partials(dy, x, mean)
            first, second = (lambda each, p=p: self.totals(p, "sum", each) for p in (partial, rest))
        coef = self.scratch(3 * self.C)

        def k1(c, m):
            return self.v("arith.mulf", self.load(scale, c, m), self.load(inv, c, m))
        first(lambda t, c, m: self.store(
            self.v("arith.mulf", k1(c, m), self.v("arith.mulf", t, self.splat(1 / M))), coef, b.add(c, self.C), m))

        def k3(t, c, m):
            iv = self.load(inv, c, m)
            k = self.v("arith.mulf", k1(c, m), self.v("arith.mulf", iv, iv))
            self.store(self.v("arith.mulf", k, self.v("arith.mulf", t, self.splat(1 / M))), coef,
                       b.add(c, 2 * self.C), m)
            self.store(k1(c, m), coef, c, m)
        second(k3)

        def dx(at, c, m):
            y = self.v("arith.mulf", self.load(coef, c, m), self.load(dy, b.add(at, c), m))
            y = self.v("arith.subf", y, self.load(coef, b.add(c, self.C), m))
            return self.v("arith.subf", y, self.v("arith.mulf", self.load(coef, b.add(c, 2 * self.C), m),
                                                  centered(at, c, m)))
        self.per_element(dx, out)
        return self.function(name)

    def group_totals(self, partial, sums, groups: int, out, at: int, f) -> None:
        """out[at + n C + c] = f(the sum of partial over sample n's chunks and channel c's group), an f32
        scalar function: the sample's channel totals into `sums`, then each group's added in scalars (N C
        of them against the map's N H W C)."""
        b, per = self.b, self.C // groups
        n = b.open_for(0, self.samples)
        self.totals(partial, "sum", lambda t, c, m: self.store(t, sums, b.add(b.mul(n, self.C), c), m), n)
        b.close()
        q = b.open_for(0, self.samples * groups)
        first = b.mul(q, per)
        i, (acc,), (total,) = b.loop(0, per, [b.const(0.0, "f32")], "f32")
        v = b.fresh("s")
        b.emit(f"{v} = memref.load {sums[0]}[{b.add(first, i)}] : {sums[1]}")
        b.end_loop([self.scalar("arith.addf", acc, v)], "f32")
        value = f(total)
        i = b.open_for(0, per)
        b.emit(f"memref.store {value}, {out[0]}[{b.add(b.add(first, i), at)}] : {out[1]}")
        b.close()
        b.close()

    def scalar(self, op: str, *operands) -> str:
        n = self.b.fresh("s")
        self.b.emit(f"{n} = {op} {', '.join(operands)} : f32")
        return n

    def group_norm(self, name: str, groups: int, epsilon: float) -> str:
        """Statistics per sample and group of C / groups channels, two passes as batch norm's (the mean,
        then the centered squares); then y = x a + b per element, a = inv_std scale, b = shift - mean a."""
        x, scale, shift, out = self.args
        b, NC = self.b, self.samples * self.C
        inv_count = b.const(1.0 / (self.sample_rows * (self.C // groups)), "f32")
        partial, sums, coef = self.scratch(self.chunks * self.C), self.scratch(NC), self.scratch(2 * NC)
        self.chunk_sums([lambda at, c, m: self.load(x, b.add(at, c), m)], [partial], ["sum"])
        self.group_totals(partial, sums, groups, coef, 0, lambda t: self.scalar("arith.mulf", t, inv_count))

        def square(at, c, m):
            d = self.v("arith.subf", self.load(x, b.add(at, c), m), self.load(coef, b.add(self.sample_at, c), m))
            return self.v("arith.mulf", d, d)
        self.chunk_sums([square], [partial], ["sum"])
        eps = b.const(float(epsilon), "f32")
        self.group_totals(partial, sums, groups, coef, NC, lambda t: self.scalar(
            "math.rsqrt", self.scalar("arith.addf", self.scalar("arith.mulf", t, inv_count), eps)))

        n = b.open_for(0, self.samples)

        def affine(c, m):   # coef: [mean | inv_std] per (sample, channel) -> [b | a]
            at = b.add(b.mul(n, self.C), c)
            a = self.v("arith.mulf", self.load(coef, b.add(at, NC), m), self.load(scale, c, m))
            shifted = self.v("arith.subf", self.load(shift, c, m), self.v("arith.mulf", self.load(coef, at, m), a))
            self.store(a, coef, b.add(at, NC), m)
            self.store(shifted, coef, at, m)
        self.each_vector(affine)
        b.close()
        self.per_element(lambda at, c, m: self.v(
            "math.fma", self.load(x, b.add(at, c), m), self.load(coef, b.add(b.add(self.sample_at, c), NC), m),
            self.load(coef, b.add(self.sample_at, c), m)), out)
        return self.function(name)

    def reduce(self, name: str, kind: str) -> str:
        x, out = self.args
        partial = self.scratch(self.chunks * self.C)
        self.chunk_sums([lambda at, c, m: self.load(x, self.b.add(at, c), m, NEUTRAL[kind])], [partial], [kind])
        scale = self.splat(1.0 / self.rows) if kind == "mean" else None
        self.totals(partial, kind, lambda t, c, m: self.store(self.v("arith.mulf", t, scale) if scale else t,
                                                              out, c, m))
        return self.function(name)


def _channels_last(signature, layout: str) -> int | None:
    dims, _ = _dims(signature[0][1])
    return dims[-1] if layout == "NHWC" and len(dims) == 4 else None


def channel_kernel(name: str, signature: list[tuple[str, str]], op: str, attrs: dict, dtype: str) -> str | None:
    """The kernel of a per-channel op of a channels-last map (batch_norm_statistics / _training / _backward and
    group_norm in NHWC; a reduce over every dim but the last), or None where it does not apply."""
    if dtype not in DTYPES or any(_dims(t)[1] not in DTYPES for _, t in signature):
        return None
    if op == "reduce":
        dims, _ = _dims(signature[0][1])
        if len(dims) < 2 or sorted(a % len(dims) for a in attrs["axes"]) != list(range(len(dims) - 1)):
            return None
        return _Channels(signature, dims[-1], dtype).reduce(name, attrs["kind"])
    channels = _channels_last(signature, attrs["layout"])
    if channels is None:
        return None
    if op == "group_norm":
        return _Channels(signature, channels, dtype, _dims(signature[0][1])[0][0]).group_norm(
            name, attrs["groups"], attrs["epsilon"])
    kernel = _Channels(signature, channels, dtype)
    if op == "batch_norm_statistics":
        return kernel.statistics(name, attrs["epsilon"])
    if op == "batch_norm_training":
        return kernel.training(name, attrs["epsilon"])
    if op == "batch_norm_backward_sums":
        return kernel.backward_sums(name)
    return kernel.backward(name)

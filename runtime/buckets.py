"""Buckets of a dynamic dimension: the sizes a range is compiled for, and how a call is cut into them.

Shared by the compiler's dynamic batch and sequence (driver/dynamic_batch.py, which explains the scheme)
and by the runtime's dynamic artifacts (runtime/dynamic.py), which run without the compiler.
"""
from __future__ import annotations

from dataclasses import dataclass

from openprim.base.errors import OpenPrimError

DEFAULT_RANGE = (1, 64)


@dataclass(frozen=True)
class BatchRange:
    """The batch sizes (or sequence lengths: what = "sequence length") a dynamic model accepts, and the
    buckets that serve them."""
    low: int
    high: int
    what: str = "batch"
    per_octave: int = 1   # buckets per doubling: 1 the powers of two; k > 1 also the k-1 steps between
    #                       (rounded up to multiples of 8), for less padding at more compiles

    def __post_init__(self):
        if not (isinstance(self.low, int) and isinstance(self.high, int) and 1 <= self.low <= self.high):
            raise OpenPrimError(f"dynamic {self.what} range ({self.low!r}, {self.high!r}): expected integers "
                                f"1 <= low <= high")
        if not (isinstance(self.per_octave, int) and 1 <= self.per_octave <= 16):
            raise OpenPrimError(f"dynamic {self.what}: {self.per_octave!r} buckets per doubling; expected 1 to 16")

    @classmethod
    def of(cls, spec, what: str = "batch") -> "BatchRange":
        """From True (DEFAULT_RANGE), an int (1..high), a (low, high) pair or (low, high, per_octave)."""
        if spec is True:
            return cls(*DEFAULT_RANGE, what)
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls(1, spec, what)
        if isinstance(spec, (tuple, list)) and len(spec) in (2, 3):
            return cls(spec[0], spec[1], what, *spec[2:])
        raise OpenPrimError(f"dynamic {what} {spec!r}: expected True, a maximum {what}, a (low, high) pair or "
                            f"(low, high, buckets per doubling)")

    @property
    def buckets(self) -> tuple[int, ...]:
        sizes = {self.low, self.high}
        for k in range(self.high.bit_length()):
            for step in range(self.per_octave):   # 2^k * 2^(step / per_octave), a multiple of 8 past 8
                size = round((1 << k) * 2 ** (step / self.per_octave))
                size = -(-size // 8) * 8 if step and size > 8 else size
                if self.low <= size <= self.high:
                    sizes.add(size)
        return tuple(sorted(sizes))

    def bucket(self, n: int) -> int:
        """The smallest bucket that holds a batch of n; a batch outside the range is an error."""
        if not self.low <= n <= self.high:
            raise OpenPrimError(f"{self.what} {n} is outside the compiled range [{self.low}, {self.high}]: "
                                f"compile with a wider dynamic {self.what} range")
        return next(b for b in self.buckets if b >= n)


def piece_sizes(batch_range: BatchRange, n: int, split: bool) -> list[tuple[int, int]]:
    """[(bucket, rows)] for a call of size n: one bucket padded (split=False: the smallest that holds n), or
    consecutive pieces, each the largest bucket that fits what is left (split=True; rows under the range's
    low end are padded into it). n outside the range is an error."""
    b = batch_range.bucket(n)
    if not split:
        return [(b, n)]
    sizes, left = [], n
    while left:
        fits = [c for c in batch_range.buckets if c <= left]
        c = max(fits) if fits else batch_range.low
        sizes.append((c, min(c, left)))
        left -= min(c, left)
    return sizes

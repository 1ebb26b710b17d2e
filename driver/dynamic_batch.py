"""Dynamic batch: one compiled model for every batch size in a declared range, through batch buckets.

An OpenPrim plan is specialized to its shapes (kernels, tiles and the memory plan are chosen for them).
A serving batch varies from call to call; recompiling per size (what torch.compile(dynamic=False) does)
costs seconds the first time each size comes. Like TensorRT's optimization profiles and the shape
buckets of dynamic-shape tuners, a range [low, high] is served by a few plans, one per bucket:

    buckets   the powers of two in [low, high], plus low and high themselves
    a call    of batch n runs as pieces, each a bucket's plan on its rows of the batch:
                pad    (GPUs) one piece, the smallest bucket b >= n: a GPU's time grows slowly with
                       the batch, so one launch of b rows beats several smaller ones
                split  (the CPU, whose time is about linear in the batch) the largest bucket that fits,
                       then the largest that fits the rest, ...: n = 6 runs 4 + 2, no wasted rows
              a piece of fewer rows than its bucket (pad; split where low > 1) has its inputs padded
              by repeating their first row (valid data: token ids stay in the vocabulary, masks stay
              meaningful) and its outputs cut back; the pieces' outputs are joined along dim 0
    compiled  on first use of each bucket (then through the compile cache, so once per machine):
              at most log2(high / low) + 2 compilations for the whole range, none per new size

At a bucket size the plan is the one compiled for exactly that batch. Between buckets a padded call does
up to twice the work of one specialized to n; a split one does no more work, in a few calls.

Padding and splitting are sound only when no output row depends on another row: the graph is checked
with the analysis of passes/batch_chunks.py (every input batched on dim 0, no op mixing samples: no
softmax, reduction, concat or slice over the batch, no batch statistics). A model that fails it is
compiled per exact batch size instead, with one warning that says which op mixes the samples.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from openprim import compiler
from openprim.base.errors import OpenPrimError
from openprim.dialect import graph_functions
from openprim.passes import batch_chunks

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


def mixing_reason(graph) -> str | None:
    """Why padding or splitting the batch of `graph` (a Graph at a batch of 2 or more) could change its real
    rows, or None when every output row depends on its own input row only (passes/batch_chunks.py's
    analysis, padding mode)."""
    module = compiler.load_module(graph)
    found = batch_chunks.analyze(graph_functions(module.operation)[0], padding=True)
    return found if isinstance(found, str) else None


@dataclass
class Buckets:
    """Compiled buckets of one model: compile(b) -> (run, Graph) compiles it for batch b; split: run a
    batch as a sum of buckets rather than padded into one (module docstring). The first bucket of 2 or
    more compiled is checked with mixing_reason once for the model; a model whose samples mix then
    compiles each batch size as it comes."""
    batch_range: BatchRange
    compile: object
    split: bool = False
    check: object = None          # check(graph) -> why padding would change the results, or None; default:
    #                               mixing_reason (samples of a batch); a dynamic sequence checks its own
    compiled: dict = field(default_factory=dict)
    exact: str | None = None      # why padding and splitting are off, once the check found a reason
    checked: bool = False

    def pieces(self, n: int) -> list[tuple[object, int, int]]:
        """[(run, b, rows)] for a call of batch n: a bucket's plan for each consecutive piece of `rows`
        rows (b >= rows), every plan compiled (now, where new) and the model checked before any runs."""
        b = self.batch_range.bucket(n)
        if self.exact is not None:
            sizes = [(n, n)]
        elif not self.split:
            sizes = [(b, n)]
        else:
            sizes, left = [], n
            while left:
                fits = [c for c in self.batch_range.buckets if c <= left]
                c = max(fits) if fits else self.batch_range.low      # rows under the range: padded
                sizes.append((c, min(c, left)))
                left -= min(c, left)
        runs = [self._compiled(c) for c, _ in sizes]
        if self.exact is not None and sizes != [(n, n)]:
            return self.pieces(n)
        return [(run, c, rows) for run, (c, rows) in zip(runs, sizes)]

    def _compiled(self, b: int):
        if b not in self.compiled:
            run, graph = self.compile(b)
            self.compiled[b] = run
            if b >= 2 and not self.checked:
                self.checked = True
                self.exact = (self.check or mixing_reason)(graph)
                if self.exact is not None:
                    what = self.batch_range.what
                    warnings.warn(f"dynamic {what}: padding or splitting the {what} would change the results "
                                  f"({self.exact}); compiling each {what} instead", RuntimeWarning, stacklevel=4)
        return self.compiled[b]

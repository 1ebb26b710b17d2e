"""Dynamic batch: one compiled model for every batch size in a declared range, through batch buckets.

An OpenPrim plan is specialized to its shapes (kernels, tiles and the memory plan are chosen for them).
A serving batch varies from call to call; recompiling per size (what torch.compile(dynamic=False) does)
costs seconds the first time each size comes. Like TensorRT's optimization profiles and the shape
buckets of dynamic-shape tuners, a range [low, high] is served by a few plans, one per bucket:

    buckets   the powers of two in [low, high], plus low and high themselves
    a call    of batch n runs the smallest bucket b >= n: every batched input is padded to b rows by
              repeating its first row (valid data: token ids stay in the vocabulary, masks stay
              meaningful), and every output is cut back to its first n rows
    compiled  on first use of each bucket (then through the compile cache, so once per machine):
              at most log2(high / low) + 2 compilations for the whole range, none per new size

At a bucket size the plan is the one compiled for exactly that batch; between buckets a call does at
most twice the work of one specialized to n (on average over n about 1.3x).

Padding is sound only when no output row depends on another row: the graph is checked with the
analysis of passes/batch_chunks.py (every input batched on dim 0, no op mixing samples: no softmax,
reduction, concat or slice over the batch, no batch statistics). A model that fails it is compiled per
exact batch size instead, with one warning that says which op mixes the samples.
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
    """The batch sizes a dynamic-batch model accepts, and the buckets that serve them."""
    low: int
    high: int

    def __post_init__(self):
        if not (isinstance(self.low, int) and isinstance(self.high, int) and 1 <= self.low <= self.high):
            raise OpenPrimError(f"dynamic batch range ({self.low!r}, {self.high!r}): expected integers "
                                f"1 <= low <= high")

    @classmethod
    def of(cls, spec) -> "BatchRange":
        """From True (DEFAULT_RANGE), an int (1..high) or a (low, high) pair."""
        if spec is True:
            return cls(*DEFAULT_RANGE)
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls(1, spec)
        if isinstance(spec, (tuple, list)) and len(spec) == 2:
            return cls(*spec)
        raise OpenPrimError(f"dynamic_batch={spec!r}: expected True, a maximum batch or a (low, high) pair")

    @property
    def buckets(self) -> tuple[int, ...]:
        powers = {1 << k for k in range(self.high.bit_length()) if self.low <= 1 << k <= self.high}
        return tuple(sorted(powers | {self.low, self.high}))

    def bucket(self, n: int) -> int:
        """The smallest bucket that holds a batch of n; a batch outside the range is an error."""
        if not self.low <= n <= self.high:
            raise OpenPrimError(f"batch {n} is outside the compiled range [{self.low}, {self.high}]: compile "
                                f"with a wider dynamic_batch range")
        return next(b for b in self.buckets if b >= n)


def mixing_reason(graph) -> str | None:
    """Why padding the batch of `graph` (a Graph at a batch of 2 or more) could change its real rows, or
    None when every output row depends on its own input row only (passes/batch_chunks.py's analysis)."""
    module = compiler.load_module(graph)
    found = batch_chunks.analyze(graph_functions(module.operation)[0], padding=True)
    return found if isinstance(found, str) else None


@dataclass
class Buckets:
    """Compiled buckets of one model: compile(b) -> (run, Graph) compiles it for batch b. The first bucket
    of 2 or more compiled (padded into or not) is checked with mixing_reason once for the model; a model
    whose samples mix then compiles each batch size as it comes."""
    batch_range: BatchRange
    compile: object
    compiled: dict = field(default_factory=dict)
    exact: str | None = None      # why padding is off, once the check found a reason
    checked: bool = False

    def runner(self, n: int):
        """(run, b) for a call of batch n: the compiled bucket b >= n (compiled now if new)."""
        b = self.batch_range.bucket(n)
        if self.exact is not None:
            b = n
        if b not in self.compiled:
            run, graph = self.compile(b)
            self.compiled[b] = run
            if b >= 2 and not self.checked:
                self.checked = True
                self.exact = mixing_reason(graph)
                if self.exact is not None:
                    warnings.warn(f"dynamic batch: padding the batch would change the results ({self.exact}); "
                                  f"compiling each batch size instead", RuntimeWarning, stacklevel=3)
                    return self.runner(n)
        return self.compiled[b], b

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

import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from openprim import cache, compiler
from openprim.base.errors import OpenPrimError
from openprim.dialect import graph_functions
from openprim.passes import batch_chunks
from openprim.runtime import artifact
from openprim.runtime.buckets import BatchRange, piece_sizes
from openprim.runtime.dynamic import DynamicExecutable
from openprim.runtime.executor import host_shape
from openprim.runtime.profile import random_inputs

__all__ = ["BatchRange", "Buckets", "mixing_reason", "save"]


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
        sizes = piece_sizes(self.batch_range, n, self.split)     # a size out of the range: an error
        if self.exact is not None:
            sizes = [(n, n)]
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


# ---------------------------------------------------------------------------- one artifact for the range
def compile_buckets(build, sizes, target, options: dict) -> tuple[dict, dict, int]:
    """({size: its Graph}, {size: (plan, kernels, weights, manifest meta)}, compile-cache hits): build(size)
    compiled for each size through the compile cache, as runtime/artifact.write_dynamic takes them."""
    graphs, parts, hits = {}, {}, 0
    with tempfile.TemporaryDirectory(prefix="openprim-dynamic-") as tmp:
        for b in sizes:
            graphs[b] = build(b)
            info = cache.save_cached(graphs[b], os.path.join(tmp, f"{b}.oprim"), target, options)
            hits += bool(info.get("cache_hit"))
            manifest, kernels, weights = artifact.read(os.path.join(tmp, f"{b}.oprim"))
            parts[b] = (manifest["plan"], kernels, weights, {k: v for k, v in manifest.items() if k not in (
                "format", "version", "kernel_files", "signatures", "members", "plan", "digest")})
    return graphs, parts, hits


def save(build, path: str, target, size_range: BatchRange, name: str, padding: dict | None = None,
         options: dict | None = None) -> dict:
    """One dynamic artifact (runtime/dynamic.py) at `path` for the dimension `name`: build(size) -> the
    Graph at that size, compiled for each bucket of `size_range` (through the compile cache, with
    `options`: openprim.compiler.save's keyword arguments). Which input and output dimension varies is read
    off the buckets' plans (the one that follows the size). padding None: the dimension is a batch (dim 0
    of every input), padded by repeating rows and, on the CPU, split into buckets; refused when an op mixes
    the samples. padding {input: value}: every varying input padded with its value (a sequence), checked
    once on the CPU: the first padded size must give the exact compile's results at its real positions.
    Returns {"plan": the largest bucket's, "buckets", "bytes", "pool_bytes", "bucket_bytes", "seconds",
    "cache_hits"}."""
    t0 = time.perf_counter()
    target, options = compiler.target_of(target), dict(options or {})
    sizes = size_range.buckets
    if len(sizes) < 2:
        raise OpenPrimError(f"dynamic {name}={size_range.low}:{size_range.high} has one size: compile it without "
                            f"a dynamic dimension")
    graphs, parts, hits = compile_buckets(build, sizes, target, options)
    plans = {b: p[0] for b, p in parts.items()}
    names = [i["name"] for i in plans[sizes[0]]["inputs"]]
    if padding is not None:   # an int key: the input at that position
        padding = {names[k] if isinstance(k, int) and 0 <= k < len(names) else k: v for k, v in padding.items()}
    spec = {"name": name, "what": size_range.what, "low": size_range.low, "high": size_range.high,
            "per_octave": size_range.per_octave, "inputs": _input_dims(plans, name), "outputs": _output_dims(plans, name),
            "padding": dict(padding) if padding else None}
    if padding is None:
        spec["split"] = not target.is_gpu
        _check_batch(spec, graphs[sizes[1]], name)
    else:
        spec["split"] = False
        _check_padding(spec, build, graphs[sizes[1]], sizes[1], name)
    pool = artifact.write_dynamic(path, spec, parts)
    return {"plan": plans[sizes[-1]], "buckets": list(sizes), "bytes": os.path.getsize(path), "pool_bytes": pool,
            "bucket_bytes": sum(len(p[2]) for p in parts.values()), "seconds": time.perf_counter() - t0,
            "cache_hits": hits, "spec": spec}


def _varying(shapes: dict[int, tuple], what: str, name: str) -> int | None:
    """The one dim of a value's shapes per bucket that equals the bucket in each, where the shapes differ;
    None where they do not."""
    lo, hi = min(shapes), max(shapes)
    differ = [d for d in range(len(shapes[lo])) if shapes[lo][d] != shapes[hi][d]]
    if not differ:
        return None
    if len(differ) > 1 or len({len(s) for s in shapes.values()}) != 1 or \
            any(s[differ[0]] != b for b, s in shapes.items()):
        raise OpenPrimError(f"dynamic {name}: {what} has shapes {sorted(shapes.items())} over the buckets; "
                            f"only one dimension may vary, as the size itself")
    return differ[0]


def _input_dims(plans: dict[int, dict], name: str) -> dict[str, int]:
    first = plans[min(plans)]
    dims = {}
    for k, spec in enumerate(first["inputs"]):
        d = _varying({b: host_shape(p, p["inputs"][k]["value"]) for b, p in plans.items()},
                     f"input '{spec['name']}'", name)
        if d is not None:
            dims[spec["name"]] = d
    if not dims:
        raise OpenPrimError(f"dynamic {name}: no input changes with it; is '{name}' a dimension of the model's inputs?")
    return dims


def _output_dims(plans: dict[int, dict], name: str) -> list[int | None]:
    first = plans[min(plans)]
    return [_varying({b: host_shape(p, p["outputs"][k]) for b, p in plans.items()}, f"output {k}", name)
            for k in range(len(first["outputs"]))]


def _check_batch(spec: dict, graph, name: str) -> None:
    """A dimension padded by repeating rows must be every varying input's and output's dim 0, and no op
    may mix the samples."""
    dims = {**spec["inputs"], **{f"output {k}": d for k, d in enumerate(spec["outputs"]) if d is not None}}
    other = {k: d for k, d in dims.items() if d != 0}
    if other:
        raise OpenPrimError(f"dynamic {name}: it is not dim 0 of {other}; a dimension other than the batch needs "
                            f"a padding value per input (padding=, --pad INPUT=VALUE)")
    reason = mixing_reason(graph)
    if reason is not None:
        raise OpenPrimError(f"dynamic {name}: padding or splitting the batch would change the results ({reason}); "
                            f"compile one artifact per batch size")


def _check_padding(spec: dict, build, graph, bucket: int, name: str) -> None:
    """The size one under `bucket` (whose Graph is `graph`) padded into it gives the exact compile's results at
    the real positions (within 1e-3 of the largest), both compiled for this CPU; inputs: normal floats, integer
    ones ones."""
    missing = sorted(set(spec["inputs"]) - set(spec["padding"]))
    unknown = sorted(set(spec["padding"]) - set(spec["inputs"]))
    if missing or unknown:
        raise OpenPrimError(f"dynamic {name}: padding values are needed for exactly the inputs that vary with it, "
                            f"{sorted(spec['inputs'])}" + (f"; missing {missing}" if missing else "")
                            + (f"; {unknown} do not vary" if unknown else ""))
    n = bucket - 1
    exact, whole = cache.load_or_compile(build(n), "cpu"), cache.load_or_compile(graph, "cpu")
    padded = DynamicExecutable(spec, {bucket: whole.plan}, lambda _: whole)
    inputs = random_inputs(exact.plan, integers=1)     # ones: a valid token id, an unmasked position
    want, got = exact(*inputs), padded.run_piece(inputs, bucket, 0, n)
    for k, (a, b) in enumerate(zip(want if isinstance(want, tuple) else (want,), got)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape or np.abs(a - b).max() > 1e-3 * max(np.abs(a).max(), 1e-6):
            raise OpenPrimError(f"dynamic {name}: output {k} at the real positions differs when {n} is padded to "
                                f"{bucket}: is every padded position masked?")

"""Dynamic artifacts: one `.oprim` file that serves every size of one dimension in a range.

A plan is compiled for static shapes. A dimension that varies at run time (the batch, a sequence length)
is compiled once per bucket of its range (runtime/buckets.py), and the artifact (format version 5,
runtime/artifact.py) holds every bucket's plan and kernels with one weights member shared by all:

    pool      each bucket's weights blob is cut into segments: every weight value (a constant, packed for
              the solver its bucket chose) and the bytes between and after them (a GPU plan's constant
              tables); a segment whose bytes are pooled already is stored once, at the same offset modulo
              POOL_ALIGN, and the bucket's plan is rewritten to point into the pool: the values' offsets,
              and a GPU plan's launch arguments and tensor maps in the weights. Buckets that chose the same
              solvers share all their weights; each bucket's manifest still records the pool's digest
              and is validated against it as a plain artifact's is.
    a call    takes its size n from the dynamic inputs (the dimension `inputs` names for each), cuts it
              into pieces (buckets.piece_sizes: on a GPU one bucket, padded; on the CPU a batch is split
              into buckets that fit), pads each piece up to its bucket (a batch: the piece's first row
              repeated, valid data; a sequence: each input's declared padding value), runs the bucket's
              executable and cuts every output that has the dimension back; pieces join along it.
    buckets   are made on first use (kernels loaded, arenas allocated), all on the one pooled weights:
              one host copy on the CPU, one device copy on a GPU.

Padding a batch is sound only where no output row depends on another (the compiler checks the graph
before it writes the artifact); padding a sequence only where the padded positions are masked (the
compiler checks the first padded bucket against an exact compile). `spec` is the manifest's "dynamic"
entry: {"name", "what", "low", "high", "per_octave", "split", "inputs": {input name: dim},
"outputs": [dim or None per output], "padding": {input name: value} or None (a batch: repeat rows)}, and
for a decoder's artifact "decoder": {"batch", "max_len"}: its buckets are the token counts of the one-token
step and the prefills, all working on one carried state (runtime/generation.py runs them).
"""
from __future__ import annotations

import bisect
import copy
import hashlib
import threading

import numpy as np

from openprim.base.dtypes import ITEMSIZE
from openprim.base.errors import OpenPrimError

from .arrays import is_device_array
from .buckets import BatchRange, piece_sizes
from .executor import aligned_bytes, host_shape, ordered_inputs

POOL_ALIGN = 64    # a pooled segment keeps its offset modulo this: the plan's alignment of every value


def bucket_range(spec: dict) -> BatchRange:
    return BatchRange(spec["low"], spec["high"], spec["what"], spec.get("per_octave", 1))


# ---------------------------------------------------------------------------- the pool
def _segments(plan: dict, size: int) -> list[tuple[int, int]]:
    """[start, end) byte ranges covering a weights blob of `size` bytes: each weight value (overlapping
    ones merged) and every gap between or after them."""
    spans = sorted((v["offset"], v["offset"] + int(np.prod(v["shape"], dtype=np.int64)) * ITEMSIZE[v["dtype"]])
                   for v in plan["values"] if v["storage"] == "weight" and "view_of" not in v)
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    out, at = [], 0
    for start, end in merged:
        if start > at:
            out.append((at, start))
        out.append((start, end))
        at = end
    if size > at:
        out.append((at, size))
    return out


def pool_weights(parts: list[tuple[dict, bytes]]) -> tuple[list[dict], bytes]:
    """(each plan rewritten to address the pool, the pool) for buckets' (plan, weights blob) pairs."""
    pool, placed = bytearray(), {}          # segment digest -> its offset in the pool
    plans = []
    for plan, weights in parts:
        starts, moves = [], []               # per segment of this blob: (start, end, pooled start)
        for start, end in _segments(plan, plan["weights_bytes"]):
            data = bytes(weights[start:end])
            key = (hashlib.sha256(data).digest(), start % POOL_ALIGN)
            if key not in placed:
                at = len(pool) + (start - len(pool)) % POOL_ALIGN
                pool.extend(bytes(at - len(pool)))
                placed[key] = at
                pool.extend(data)
            starts.append(start)
            moves.append((start, end, placed[key]))

        def moved(offset: int, what: str) -> int:
            k = bisect.bisect_right(starts, offset) - 1
            if k < 0 or not (moves[k][0] <= offset < moves[k][1] or offset == moves[k][1] == plan["weights_bytes"]):
                raise OpenPrimError(f"pooling the weights: {what} at offset {offset} lies outside every segment")
            return moves[k][2] + offset - moves[k][0]

        plans.append(_rewritten(plan, moved))
    pool.extend(bytes((-len(pool)) % 64))
    for plan in plans:
        plan["weights_bytes"] = len(pool)
    return plans, bytes(pool)


def _rewritten(plan: dict, moved) -> dict:
    """A copy of `plan` with every address in the weights passed through moved(offset, what)."""
    plan = copy.deepcopy(plan)
    for n, v in enumerate(plan["values"]):
        if v["storage"] == "weight":
            v["offset"] = moved(v["offset"], f"value {n}")
    for name, kernel in plan.get("kernels", {}).items():
        for launch in kernel["launches"]:
            for arg in launch["args"]:
                memory = arg[1]["memory"] if arg[0] == "tensormap" else arg
                if memory[0] == "weight":
                    memory[1] = moved(memory[1], f"a launch argument of kernel '{name}'")
    return plan


# ---------------------------------------------------------------------------- the executable
class DynamicExecutable:
    """Every bucket of a dynamic artifact behind one call (the module docstring): numpy arrays in, numpy
    arrays out, any size of the dynamic dimension in [low, high]. make(bucket) -> that bucket's executable,
    called once per bucket, on first use."""

    def __init__(self, spec: dict, plans: dict[int, dict], make):
        self.spec, self.plans, self._make = spec, plans, make
        self.range = bucket_range(spec)
        self.executables: dict[int, object] = {}
        self._making = threading.Lock()
        self.plan = plans[max(plans)]      # the largest bucket's: names, dtypes, shapes at the range's top

    @property
    def buckets(self) -> list[int]:
        return sorted(self.plans)

    @property
    def input_names(self) -> list[str]:
        return [i["name"] for i in self.plan["inputs"]]

    def executable(self, bucket: int):
        """The executable of one bucket (made now if this is its first use)."""
        if bucket not in self.plans:
            raise OpenPrimError(f"no bucket {bucket}: this artifact's {self.spec['what']} buckets are {self.buckets}")
        with self._making:
            if bucket not in self.executables:
                exe = self._make(bucket)
                if "decoder" in self.spec and self.executables:   # a decoder's buckets work on one state
                    exe.share_state(next(iter(self.executables.values())))
                self.executables[bucket] = exe
        return self.executables[bucket]

    def size_of(self, arrays) -> int:
        """The call's size of the dynamic dimension: the one every dynamic input has there."""
        dims = self.spec["inputs"]
        sizes = {name: a.shape[dims[name]] if a.ndim > dims[name] else None
                 for name, a in zip(self.input_names, arrays) if name in dims}
        if len(set(sizes.values())) != 1 or None in sizes.values():
            raise OpenPrimError(f"the inputs {sorted(sizes)} must share the dynamic {self.spec['what']} "
                                f"'{self.spec['name']}' (dims {dims}); got shapes "
                                f"{ {n: tuple(a.shape) for n, a in zip(self.input_names, arrays) if n in dims} }")
        return next(iter(sizes.values()))

    def __call__(self, *args, **kwargs):
        if "decoder" in self.spec:
            raise OpenPrimError("a decoder artifact is called through its generate() (runtime.load gives a "
                                "runtime.generation.Decoder)")
        given = ordered_inputs(self.plan, args, kwargs)
        if any(is_device_array(a) for a in given):
            raise OpenPrimError("a dynamic artifact's call takes numpy arrays; for device arrays call one bucket's "
                                "executable (exe.executable(bucket)) with inputs of its size")
        arrays = [np.asarray(a) for a in given]
        n = self.size_of(arrays)
        for spec, a in zip(self.plan["inputs"], arrays):
            want = list(host_shape(self.plan, spec["value"]))
            if spec["name"] in self.spec["inputs"]:
                want[self.spec["inputs"][spec["name"]]] = n
            if list(a.shape) != want:
                raise OpenPrimError(f"input '{spec['name']}' must have shape {tuple(want)} (at {self.spec['what']} {n}; "
                                    f"any in [{self.range.low}, {self.range.high}]), got {a.shape}")
        pieces, start = [], 0
        for bucket, rows in piece_sizes(self.range, n, self.spec["split"]):
            pieces.append(self.run_piece(arrays, bucket, start, rows))
            start += rows
        joined = [parts[0] if d is None or len(parts) == 1 else np.concatenate(parts, axis=d)
                  for d, parts in zip(self.spec["outputs"], zip(*pieces))]
        return joined[0] if len(joined) == 1 else tuple(joined)

    def run_piece(self, arrays: list[np.ndarray], bucket: int, start: int, rows: int) -> list[np.ndarray]:
        """The outputs of rows [start, start + rows) of the dynamic dimension, run in `bucket`'s plan
        (padded up to it) and cut back to those rows."""
        part = [self._fit(a, name, start, rows, bucket) for name, a in zip(self.input_names, arrays)]
        outs = self.executable(bucket)(*part)
        return [o if d is None else np.take(o, range(rows), axis=d)
                for o, d in zip(outs if isinstance(outs, tuple) else (outs,), self.spec["outputs"])]

    def _fit(self, a: np.ndarray, name: str, start: int, rows: int, bucket: int) -> np.ndarray:
        """An input's piece [start, start + rows) along the dynamic dimension, padded to `bucket`."""
        d = self.spec["inputs"].get(name)
        if d is None:
            return a
        piece = np.take(a, range(start, start + rows), axis=d)
        if rows == bucket:
            return piece
        shape = list(piece.shape)
        shape[d] = bucket - rows
        padding = self.spec.get("padding")
        fill = (np.full(shape, padding[name], a.dtype) if padding else
                np.broadcast_to(np.take(piece, [0], axis=d), shape))
        return np.concatenate([piece, fill], axis=d)


def shared_weights(pool: bytes) -> np.ndarray:
    """The pool as one aligned host buffer that every CPU bucket uses without a copy of its own."""
    out = aligned_bytes(len(pool))
    out[:] = np.frombuffer(pool, np.uint8)
    return out

"""Where a compiled network's time goes, kernel by kernel: the measurement of `openprim profile` (numpy only).

    from openprim.runtime import load
    from openprim.runtime.profile import profile
    report = profile(load("resnet18.oprim"), runs=20)   # a Profile: report.steps, report.total_us, ...

A profiling run calls every kernel of the plan in order, as a call does, and records when each one starts
and ends: on the CPU time.perf_counter() around each kernel call (CpuExecutable.timed_call: a whole call,
inputs copied in and outputs out); on a GPU a timing event before and after each launch on the executable's
stream, the launches one by one (GpuExecutable.launch_spans: no graph replay). Over `runs` runs:

  time       a step's median time per run (all its launches; on the CPU every chunk of the batch)
  share      its part of the steps' times (their medians, summed)
  gap        the median time between the end of the kernel before it and its start: on a GPU launch
             overhead the device waits through (an upper bound: recording the events is host work too),
             on the CPU Python's dispatch (and the next chunk's input copy)
  total      first start to last end of a run: all kernels + all gaps (medians over the runs of each)

A step's work comes from the plan: the FLOPs of its problem where prim-select chose a solver (conv2d,
matmul, attention, depthwise_pointwise: driver/plan.py records them at compile time), and its bytes: the
plan's `bytes` if recorded, else the sum of its arguments' buffers (inputs and weights read once, the output
written once: the least traffic it can have), both times the batch chunks. The FLOPs are the problem's as
its kernel computes it: on a GPU a grouped convolution merged into a dense one, or a stem padded to 8
channels, counts the zeros it multiplies. The rates it reaches are set
against the chip's figures in base/target.py's CHIPS: the memory bandwidth on GPUs, and the fp32 rate for
f32 steps on GPUs. Where the table has no figure for a step the fraction is None ("n/a"): the CPU row holds
the cost model's ranking constants, not this machine's peak; the table has no f16/bf16 matrix-core rates.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from openprim.base.dtypes import FLOATS, HOST
from openprim.base.errors import OpenPrimError
from openprim.base.target import host_cpu, parse_target

from .executor import host_shape, value_nbytes


@dataclass
class Step:
    """One plan step's profile (times in microseconds per run)."""
    index: int
    kernel: str
    op: str
    solver: str | None
    params: dict
    problem: str | None
    loc: str | None                    # the layer's source location, where the compile knew it
    dtype: str                         # its output's
    output: str                        # its output as dtype[shape] (one chunk of the batch)
    launches: int                      # kernel launches (GPU) or calls (CPU: once per batch chunk) per run
    time_us: float
    share: float
    gap_us: float
    flops: int | None
    bytes: int
    tflops: float | None               # achieved TFLOP/s
    gbps: float | None                 # achieved GB/s
    peak_fraction: float | None        # of the chip's fp32 rate (f32 steps on a GPU), else None: n/a
    bandwidth_fraction: float | None   # of the chip's memory bandwidth (GPU), else None: n/a


@dataclass
class Profile:
    """A network's profile: every step in plan order, and the run as a whole (microseconds per run)."""
    target: str
    device: str
    runs: int
    steps: list[Step]
    total_us: float                    # first kernel start to last kernel end
    kernel_us: float                   # all kernel calls' time
    gap_us: float                      # the time between kernels
    call_us: float | None = None       # CPU: a whole call, inputs copied in and outputs out
    graph_us: float | None = None      # GPU: a run replayed as a CUDA/HIP graph, as calls run it
    peak_gflops: float | None = None   # the chip table's fp32 rate (GPU), None where not known
    peak_gbps: float | None = None     # the chip table's memory bandwidth (GPU), None where not known
    notes: list[str] = field(default_factory=list)

    def slowest(self, k: int = 3) -> list[Step]:
        return sorted(self.steps, key=lambda s: -s.time_us)[:k]

    def to_dict(self) -> dict:
        return {**asdict(self), "slowest": [s.index for s in self.slowest()]}


def summarize(spans, step_of, steps: int) -> dict:
    """The arithmetic of a profile, on spans [runs, calls, 2]: each kernel call's start and end (any unit,
    any origin per run), step_of[c] the step of call c. Medians over the runs of: `time` [steps] (each
    step's calls summed), `gap` [steps] (before each step's calls: from the previous call's end, never
    negative), `total` (first start to last end), `kernels` (all calls) and `gaps` (all gaps): in each run
    total = kernels + gaps, so their medians nearly add up, where the steps' medians need not."""
    spans = np.asarray(spans, np.float64)
    runs, calls = spans.shape[:2]
    step_of = np.asarray(step_of, np.int64)
    if len(step_of) != calls:
        raise ValueError(f"{calls} calls timed, {len(step_of)} steps given for them")
    if runs == 0 or calls == 0:
        return {"time": np.zeros(steps), "gap": np.zeros(steps), "total": 0.0, "kernels": 0.0, "gaps": 0.0}
    duration = spans[..., 1] - spans[..., 0]
    gap = np.zeros_like(duration)
    gap[:, 1:] = np.maximum(spans[:, 1:, 0] - spans[:, :-1, 1], 0.0)
    per_step = np.stack([np.bincount(step_of, duration[r], steps) for r in range(runs)])
    gap_step = np.stack([np.bincount(step_of, gap[r], steps) for r in range(runs)])
    return {"time": np.median(per_step, axis=0), "gap": np.median(gap_step, axis=0),
            "total": float(np.median(spans[:, -1, 1] - spans[:, 0, 0])),
            "kernels": float(np.median(duration.sum(axis=1))), "gaps": float(np.median(gap.sum(axis=1)))}


def random_inputs(plan: dict, seed: int = 0, integers: int = 0) -> list[np.ndarray]:
    """Inputs for a profiling run: seeded standard normal data for float inputs (as `openprim run` makes
    them), `integers` for integer and bool ones (0: valid indices for a gather)."""
    rng = np.random.default_rng(seed)
    out = []
    for spec in plan["inputs"]:
        v, shape = plan["values"][spec["value"]], host_shape(plan, spec["value"])
        dtype = v.get("host_dtype", v["dtype"])
        out.append(rng.standard_normal(shape).astype(np.float32) if dtype in FLOATS else np.full(shape, integers, HOST[dtype]))
    return out


def profile(exe, inputs=None, runs: int = 20, warmup: int = 3) -> Profile:
    """Profile an executable (CpuExecutable or GpuExecutable: a loaded artifact, or openprim.compile's) on
    `inputs` (a list in plan order; None: random_inputs), `runs` profiled runs after `warmup` others."""
    if runs < 1 or warmup < 0:
        raise OpenPrimError(f"profile needs runs >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    plan = exe.plan
    inputs = random_inputs(plan) if inputs is None else list(inputs)
    nsteps, target = len(plan["steps"]), parse_target(plan["target"])
    extra = {}
    if hasattr(exe, "launch_spans"):                       # a GPU: timing events, microseconds from ms
        exe(*inputs)                                       # the inputs into the arena the launches read
        spans = exe.launch_spans(runs, warmup) * 1e3
        step_of = [launch[5] for launch in exe.launches]
        if exe.graphs:
            extra["graph_us"] = exe.time_ms(repeat=runs, warmup=1, captured=1) * 1e3
        device = f"{exe.device.name()} (GPU {exe.device.index})"
        extra["peak_gflops"], extra["peak_gbps"] = target.rates
    elif hasattr(exe, "timed_call"):                       # the CPU: time.perf_counter, microseconds
        for _ in range(warmup):
            exe(*inputs)
        spans, calls = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            spans.append(exe.timed_call(*inputs)[1])
            calls.append(time.perf_counter() - t0)
        spans = np.asarray(spans).reshape(runs, -1, 2) * 1e6
        step_of = np.tile(np.arange(nsteps), plan.get("batch_chunks", 1))
        extra["call_us"] = float(np.median(calls)) * 1e6
        device = f"CPU ({host_cpu()})"
    else:
        raise OpenPrimError(f"cannot profile a {type(exe).__name__}: expected an OpenPrim executable "
                            f"(openprim.runtime.load or openprim.compile)")
    sums = summarize(spans, step_of, nsteps)
    launches = np.bincount(np.asarray(step_of, np.int64), minlength=nsteps)
    steps = step_stats(plan, sums, launches, extra.get("peak_gflops"), extra.get("peak_gbps"))
    notes = []
    if not target.is_gpu:
        notes.append("% of peak: n/a on the CPU (the chip table's CPU row holds the cost model's ranking constants, "
                     "not this machine's peak rates)")
    elif any(s.dtype != "f32" for s in steps):
        notes.append(f"% of peak: of the chip table's fp32 rate ({extra['peak_gflops'] / 1e3:g} TFLOP/s), for f32 "
                     f"steps only; n/a for the others (the table has no f16/bf16 matrix-core rate)")
    medians = sum(s.time_us for s in steps)
    if abs(medians - sums["kernels"]) > 0.05 * sums["kernels"]:
        notes.append(f"the steps' medians add up to {medians:.1f} us, the runs' kernel times to "
                     f"{sums['kernels']:.1f} us: the runs varied (other work on the machine?); more --runs, "
                     f"or a quieter machine")
    return Profile(str(target), device, runs, steps, sums["total"], sums["kernels"], sums["gaps"], notes=notes,
                   **extra)


def step_stats(plan: dict, sums: dict, launches, peak_gflops, peak_gbps) -> list[Step]:
    values, chunks = plan["values"], plan.get("batch_chunks", 1)
    all_steps = float(np.sum(sums["time"]))   # the shares are of the steps' medians: they add up to 1
    out = []
    for i, step in enumerate(plan["steps"]):
        t = float(sums["time"][i])
        seconds = t * 1e-6
        flops = step.get("flops")
        flops = None if flops is None else int(flops) * chunks
        nbytes = int(step.get("bytes") or sum(value_nbytes(values[a]) for a in step["args"])) * chunks
        tflops = flops / seconds / 1e12 if flops is not None and seconds > 0 else None
        gbps = nbytes / seconds / 1e9 if seconds > 0 else None
        out_value = values[step["args"][-1]]
        dtype = out_value["dtype"]
        out.append(Step(
            index=i, kernel=step["kernel"], op=step.get("op") or step["kernel"].rsplit("_", 1)[0],
            solver=step.get("solver"), params=dict(step.get("params", {})), problem=step.get("problem"),
            loc=step.get("loc"), dtype=dtype, output=f"{dtype}[{','.join(map(str, out_value['shape']))}]",
            launches=int(launches[i]), time_us=t,
            share=t / all_steps if all_steps > 0 else 0.0, gap_us=float(sums["gap"][i]),
            flops=flops, bytes=nbytes, tflops=tflops, gbps=gbps,
            peak_fraction=tflops * 1e3 / peak_gflops if tflops is not None and peak_gflops and dtype == "f32" else None,
            bandwidth_fraction=gbps / peak_gbps if gbps is not None and peak_gbps else None))
    return out

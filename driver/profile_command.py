"""`openprim profile ARTIFACT_OR_MODEL`: where a network's time goes, kernel by kernel.

    openprim profile resnet18.oprim                   # an artifact: the runtime only, no MLIR
    openprim profile examples/resnet.py --top 5       # a model file: compiled first, as `openprim run` does
    openprim profile resnet18.oprim --json prof.json  # the same numbers, machine-readable

runtime/profile.py measures (every kernel call timed in profiling runs; see its docstring for what each
number means); this module loads or compiles the executable, prints one row per plan step (index, op,
solver and parameters, median time, share, the gap before it, FLOPs and achieved TFLOP/s, bytes and GB/s,
their fractions of the chip's rates, the layer's source line, its problem or output) and a summary line
(total, kernels, gaps, the three slowest steps), and writes the JSON atomically.
"""
from __future__ import annotations

import json
import os
import time

from openprim.base.errors import OpenPrimError
from openprim.base.files import atomic_file
from openprim.cli import _inputs, load_model, writable_output
from openprim.runtime import load
from openprim.runtime.dynamic import DynamicExecutable
from openprim.runtime.profile import Profile, Step, profile, random_inputs


def run(args) -> int:
    """The command: args.model (an .oprim or a model file), runs, warmup, top, json, input, seed, and for a
    model file the compile options of `openprim run`."""
    if args.json:
        writable_output(args.json, "--json")
    exe = executable(args)
    inputs = _inputs(exe, args.input, args.seed) if args.input else random_inputs(exe.plan, args.seed)
    report = profile(exe, inputs, args.runs, args.warmup)
    print(table(report, args.top))
    if args.json:
        with atomic_file(args.json, "w", "--json") as f:
            json.dump({"source": args.model, **report.to_dict()}, f, indent=1)
            f.write("\n")
    return 0


def executable(args):
    """The executable of args.model: an .oprim loaded by the runtime alone, else the model compiled through
    openprim.compile (the compile cache), as `openprim run` does; one line says which."""
    t0 = time.perf_counter()
    if args.model.endswith(".oprim"):
        exe = load(args.model)
        print(f"loaded {args.model} ({exe.manifest['compiler']}, target {exe.manifest['target']}) "
              f"in {time.perf_counter() - t0:.2f} s")
        if isinstance(exe, DynamicExecutable):   # one plan per bucket: profile one
            bucket = args.bucket or max(exe.buckets)
            print(f"dynamic {exe.spec['what']} '{exe.spec['name']}': profiling bucket {bucket} of {exe.buckets}")
            return exe.executable(bucket)
        return exe
    if args.bucket:
        raise OpenPrimError("--bucket applies to a dynamic .oprim artifact only")
    from openprim import api   # MLIR and the compiler: only for a model file
    graph = load_model(args.model, args.define, module_ok=True)
    exe = api.compile(graph, args.target, args.solver, layout=args.layout, cache=not args.no_cache,
                      precision=args.precision)
    print(f"{'loaded from the compile cache' if exe.cache_hit else 'compiled'} {args.model} for {args.target} "
          f"in {time.perf_counter() - t0:.2f} s")
    return exe


def _rate(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _si(value) -> str:
    """A count in three digits with an SI prefix: 885k, 1.18M, 4.11G."""
    if value is None:
        return "-"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{prefix}"
    return f"{value:.3g}"


def _fraction(value, known: bool) -> str:
    """A fraction of a peak as a percentage; "n/a" where the step has a rate but no peak is known."""
    return f"{100 * value:.1f}%" if value is not None else ("n/a" if known else "-")


def _where(loc: str | None) -> str:
    """A layer's location, the file by its name alone (the JSON keeps the path)."""
    if not loc:
        return ""
    path, sep, rest = loc.partition(":")
    return os.path.basename(path) + sep + rest


def _solver(step: Step) -> str:
    if step.solver is None:
        return "-"
    params = ",".join(f"{k}={v}" for k, v in step.params.items())
    return f"{step.solver} {params}" if params else step.solver


def rows(report: Profile, top: int | None = None) -> list[list[str]]:
    """The table's rows (a header first): every step in plan order, or the `top` slowest, slowest first; the
    last column is a selected layer's problem descriptor, or any other step's output dtype[shape]."""
    steps = report.slowest(top) if top else report.steps
    out = [["#", "op", "solver params", "time us", "share", "gap us", "FLOP", "TFLOP/s", "%peak", "bytes", "GB/s",
            "%bw", "layer", "problem or output"]]
    for s in steps:
        out.append([str(s.index), s.op, _solver(s), f"{s.time_us:.1f}", f"{100 * s.share:.1f}%", f"{s.gap_us:.1f}",
                    _si(s.flops), _rate(s.tflops, 3), _fraction(s.peak_fraction, s.tflops is not None),
                    _si(s.bytes), _rate(s.gbps, 1),
                    _fraction(s.bandwidth_fraction, s.gbps is not None), _where(s.loc), s.problem or s.output])
    return out


RIGHT = {"#", "time us", "share", "gap us", "FLOP", "TFLOP/s", "%peak", "bytes", "GB/s", "%bw"}


def table(report: Profile, top: int | None = None) -> str:
    """The report as text: a header line, the table, the summary line, and the notes."""
    grid = rows(report, top)
    widths = [max(len(r[c]) for r in grid) for c in range(len(grid[0]))]
    lines = [f"profile on {report.target}, {report.device}: median of {report.runs} runs, times per run"
             + (f" ({top} slowest of {len(report.steps)} steps)" if top else "")]
    for r in grid:
        cells = [v.rjust(w) if grid[0][c] in RIGHT else v.ljust(w) for c, (v, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    lines.append(summary(report))
    if report.call_us is not None:
        lines.append(f"a whole call (inputs copied in, outputs out): {report.call_us:.1f} us")
    if report.graph_us is not None:
        lines.append(f"replayed as a graph (as calls run it): {report.graph_us:.1f} us per run")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def summary(report: Profile) -> str:
    """total, kernels and gaps per run, and the three slowest steps."""
    def part(us):
        return f"{us:.1f} us ({100 * us / report.total_us:.1f}%)" if report.total_us > 0 else f"{us:.1f} us"
    slow = ", ".join(f"#{s.index} {s.op} {s.time_us:.1f} us ({100 * s.share:.1f}%)" for s in report.slowest(3))
    return (f"total {report.total_us:.1f} us: kernels {part(report.kernel_us)}, gaps {part(report.gap_us)} "
            f"over {len(report.steps)} steps; slowest: {slow or 'none'}")

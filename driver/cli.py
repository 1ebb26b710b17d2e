"""The `openprim` command: compile and run models.

    openprim compile examples/resnet.py -o resnet18.oprim     # ahead of time: one file
    openprim run resnet18.oprim --input x.npy                  # runtime only (no MLIR needed)
    openprim run examples/resnet.py                            # JIT: compile in-process, then run
    openprim inspect resnet18.oprim                            # what an artifact holds: plan, kernels
    openprim profile resnet18.oprim --top 10                   # every kernel timed: where the time goes
    openprim tune examples/resnet.py --budget 10               # find per layer, into the tuning database
    openprim tune a.py b.py --ray --workers 2                  # the same on a Ray cluster (tuning/fleet.py)
    openprim explain examples/resnet.py                        # every solver per layer, and the choice
    openprim conv -n 1 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -t 1   # one conv, MIOpenDriver's flags
    openprim db import results.json                            # GPU measurements (see tuning_commands.py)
    openprim db show                                           # the tuning database's records
    openprim db export fleet.json                              # a versioned file that ships (db import it)
    openprim onnx-check model.onnx                             # all the ONNX importer refuses in a model
    openprim torch-check model.pt2                             # every aten op the torch importer cannot map
    openprim emit examples/resnet.py -o resnet.mlir            # the prim module for openprim-opt (+ .weights.npz)
    openprim cache info                                        # the compile cache: directory, entries, size

A model is a file that an importer of openprim.pyfrontend.importers reads, by its suffix: Python that
defines `build(**kwargs)` returning an `openprim.pyfrontend.Graph` (`-D name=value` passes keyword
arguments, e.g. -D batch=8 -D layout=NHWC), an ONNX file, a torch.export program (.pt2) or a prim module
(.mlir; compile and run only).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter

import numpy as np

from openprim.base.errors import OpenPrimError, one_line
from openprim.base.files import atomic_file
from openprim.base.target import archs, parse_target
from openprim.runtime.executor import host_shape, param_shape
from openprim.runtime.profile import random_inputs


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def define_options(defines: list[str]) -> dict:
    """-D name=value options as keyword arguments (values as int or float where they parse so)."""
    kwargs = {}
    for d in defines:
        key, sep, val = d.partition("=")
        if not sep:
            raise OpenPrimError(f"-D expects name=value, got '{d}'")
        kwargs[key] = _value(val)
    return kwargs


def load_model(path: str, defines: list[str], module_ok: bool = False):
    """The model of a file, by its suffix (openprim.pyfrontend.importers: .py, .onnx, .pt2, .mlir), with
    -D name=value as the importer's options. A Graph, or a prim ir.Module (.mlir) where module_ok."""
    from openprim.pyfrontend import Graph, importers
    model = importers.load(path, **define_options(defines))
    if not (module_ok or isinstance(model, Graph)):
        raise OpenPrimError(f"{path}: a prim module; this command needs a model that imports as a Graph "
                            f"(`openprim compile` and `openprim run` take {path})")
    return model


def _inputs(exe, paths: list[str], seed: int):
    """Arrays for the executable's inputs: from .npy files, else seeded normal random data (zeros for integer
    and bool inputs: valid token ids)."""
    specs = [{**exe.plan["values"][i["value"]], "shape": host_shape(exe.plan, i["value"])} for i in exe.plan["inputs"]]
    if paths:
        if len(paths) != len(specs):
            raise OpenPrimError(f"the model takes {len(specs)} input(s) {exe.input_names}, got {len(paths)} --input")
        arrays = []
        for p in paths:
            try:
                arrays.append(np.load(p))
            except Exception as e:  # noqa: BLE001 - numpy's readers raise many types (EOFError, TokenError, ...)
                raise OpenPrimError(f"{p}: cannot read as .npy ({type(e).__name__}: {e})") from None
        return arrays
    return random_inputs(exe.plan, seed)


def writable_output(path: str, what: str) -> str:
    """`path` when a file can be written there (checked before any work is done), else an OpenPrimError."""
    if "\0" in path:
        raise OpenPrimError(f"{what} {path!r}: a file name cannot contain a NUL byte")
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OpenPrimError(f"{what} {path}: is a directory; give a file name")
    if not os.path.isdir(directory):
        raise OpenPrimError(f"{what} {path}: the directory {directory} does not exist; create it first")
    if not os.access(directory, os.W_OK):
        raise OpenPrimError(f"{what} {path}: the directory {directory} is not writable")
    return path


def save_npy(path: str, y: np.ndarray) -> None:
    """np.save, atomically (a temporary file in the same directory, then a rename)."""
    with atomic_file(path, "wb", "-o") as f:
        np.save(f, y)


def _summary(name: str, y: np.ndarray) -> str:
    y = np.asarray(y, np.float64)
    flat = y.reshape(y.shape[0], -1) if y.ndim > 1 else y.reshape(1, -1)
    top = np.argsort(-flat[0])[:5]
    return (f"{name}: shape {tuple(y.shape)}  mean {y.mean():+.6f}  std {y.std():.6f}  "
            f"min {y.min():+.4f}  max {y.max():+.4f}  top-5 of row 0: {top.tolist()}")


def _time(exe, args_, repeat: int, warmup: int = 3):
    for _ in range(warmup):
        exe(*args_)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        exe(*args_)
        ts.append(time.perf_counter() - t)
    return np.median(ts), np.min(ts)


def _dynamic_range(text: str, padded: bool):
    """--dynamic NAME=LOW:HIGH[:K] as (NAME, its BatchRange): a batch unless padding values are given."""
    from openprim.runtime.buckets import BatchRange
    name, sep, rest = text.partition("=")
    parts = rest.split(":")
    if not (sep and name and len(parts) in (2, 3) and all(p.strip().isdigit() for p in parts)):
        raise OpenPrimError(f"--dynamic {text!r}: expected NAME=LOW:HIGH or NAME=LOW:HIGH:BUCKETS_PER_DOUBLING "
                            f"(batch=1:64)")
    return name, BatchRange(int(parts[0]), int(parts[1]), name if padded else "batch", *map(int, parts[2:]))


def dynamic_builder(args):
    """(NAME, its BatchRange, the padding or None, build(size) -> the model's Graph at that size) of
    --dynamic NAME=LOW:HIGH[:K] (and --pad INPUT=VALUE where the command has it): NAME is a build() keyword
    of a .py model or a named dimension of an ONNX model's inputs."""
    from openprim.pyfrontend import importers
    padding = define_options(getattr(args, "pad", [])) or None
    name, size_range = _dynamic_range(args.dynamic, padding is not None)
    kind = os.path.splitext(args.model)[1]
    if kind not in (".py", ".onnx"):
        raise OpenPrimError(f"--dynamic takes a .py model (NAME a build() keyword) or an .onnx model (NAME a named "
                            f"input dimension), not {args.model}")

    def build(n):
        if kind == ".onnx":
            return importers.load(args.model, dims={name: n}, **define_options(args.define))
        return importers.load(args.model, **define_options(args.define + [f"{name}={n}"]))
    return name, size_range, padding, build


def compile_dynamic(args) -> int:
    """`openprim compile MODEL --dynamic NAME=LOW:HIGH [--pad INPUT=VALUE ...]`: one artifact with a plan per
    bucket of the range (driver/dynamic_batch.save)."""
    from openprim import dynamic_batch
    if args.weights != "constants":
        raise OpenPrimError("--dynamic with --weights values is not supported: a dynamic artifact holds constant "
                            "weights (compile one artifact per size)")
    name, size_range, padding, build = dynamic_builder(args)
    out = writable_output(args.output or os.path.splitext(os.path.basename(args.model))[0] + ".oprim", "-o")
    info = dynamic_batch.save(build, out, args.target, size_range, name, padding,
                              {"solver": args.solver, "layout": args.layout, "precision": args.precision})
    print(f"compiled {args.model} for {args.target} in {info['seconds']:.2f} s -> {out} ({info['bytes'] / 2**20:.1f} "
          f"MiB): dynamic {name} in [{size_range.low}, {size_range.high}], buckets {info['buckets']} "
          f"({info['cache_hits']} from the compile cache), weights pooled {info['pool_bytes'] / 2**20:.1f} MiB "
          f"(the buckets' own {info['bucket_bytes'] / 2**20:.1f} MiB)")
    return 0


def cmd_compile(args) -> int:
    if args.dynamic:
        return compile_dynamic(args)
    if args.pad:
        raise OpenPrimError("--pad applies only with --dynamic")
    from openprim import compiler
    from openprim.pyfrontend import Graph
    from openprim.timings import CompileTimings
    timings = CompileTimings()
    with timings.stage("import"):
        graph = load_model(args.model, args.define, module_ok=True)
    out = writable_output(args.output or os.path.splitext(os.path.basename(args.model))[0] + ".oprim", "-o")
    if args.no_cache or not isinstance(graph, Graph):   # the compile cache keys Graphs; a prim module compiles
        info = compiler.save(graph, out, args.target, args.solver, layout=args.layout, timings=timings,
                             precision=args.precision, weights=args.weights)
    else:
        from openprim import cache
        info = cache.save_cached(graph, out, args.target, {"solver": args.solver, "layout": args.layout,
                                                            "precision": args.precision, "weights": args.weights},
                                 timings)
    plan = info["plan"]
    how = "copied from the compile cache" if info.get("cache_hit") else "compiled"
    print(f"{how} {args.model} for {args.target} in {info['seconds']:.2f} s -> {out} "
          f"({info['bytes'] / 2**20:.1f} MiB): {len(plan['steps'])} kernel launches, "
          f"{len(set(s['kernel'] for s in plan['steps']))} kernels, "
          f"activations {plan['arena_bytes'] / 2**20:.2f} MiB (unshared {plan['naive_bytes'] / 2**20:.2f} MiB), "
          f"weights {plan['weights_bytes'] / 2**20:.1f} MiB"
          + (f", {len(plan['params'])} parameters {plan['params_bytes'] / 2**20:.1f} MiB" if "params" in plan else ""))
    if args.timings:
        print(timings.report())
    if not args.target.is_gpu:
        from openprim.runtime.manifest import host_sizes, memory_shortfall
        short = memory_shortfall(host_sizes(plan))
        if short:
            print(f"openprim: warning: {out} cannot run on this machine: it {short}", file=sys.stderr)
    return 0


def cmd_emit(args) -> int:
    """`openprim emit MODEL -o model.mlir`: the model's prim module, its weights in model.weights.npz."""
    from openprim.pyfrontend import emit
    out = writable_output(args.output or os.path.splitext(os.path.basename(args.model))[0] + ".mlir", "-o")
    npz, n = emit.write(load_model(args.model, args.define), out)
    print(f"emitted {args.model} -> {out} ({os.path.getsize(out) / 2**10:.1f} KiB), {n} weights in {npz} "
          f"({os.path.getsize(npz) / 2**20:.1f} MiB)")
    return 0


# `run`'s options that only apply to compiling a model, with their defaults: an artifact run refuses them.
COMPILE_ONLY = {"define": ("-D", []), "target": ("--target", "cpu"), "solver": ("--solver", ""),
                "layout": ("--layout", "NHWC"), "precision": ("--precision", None), "no_cache": ("--no-cache", False)}


def _compile_options(args) -> None:
    """`run` of an .oprim artifact given an option of COMPILE_ONLY: an error; else each one unset gets its
    default (the run parser's defaults are None, so that a given one is told from one left out)."""
    given = [flag for dest, (flag, _) in COMPILE_ONLY.items() if getattr(args, dest) is not None]
    if args.model.endswith(".oprim") and given:
        raise OpenPrimError(f"{args.model} is compiled already: {', '.join(given)} "
                            f"{'applies' if len(given) == 1 else 'apply'} only to compiling a model; recompile it "
                            f"with `openprim compile MODEL {given[0]} ...`")
    for dest, (_, default) in COMPILE_ONLY.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)


def cmd_run(args) -> int:
    if args.output:
        writable_output(args.output, "-o")
    if args.model.endswith(".oprim"):
        from openprim.runtime import load
        t0 = time.perf_counter()
        exe = load(args.model)
        print(f"loaded {args.model} ({exe.manifest['compiler']}, target {exe.manifest['target']}) "
              f"in {time.perf_counter() - t0:.2f} s"
              + (f", dynamic {exe.spec['what']} in [{exe.spec['low']}, {exe.spec['high']}]: {len(exe.buckets)} "
                 f"buckets" if hasattr(exe, "spec") else ""))
    else:
        from openprim import api
        graph = load_model(args.model, args.define, module_ok=True)
        t0 = time.perf_counter()
        exe = api.compile(graph, args.target, args.solver, layout=args.layout, cache=not args.no_cache,
                               precision=args.precision)
        how = "loaded from the compile cache" if exe.cache_hit else "compiled"
        print(f"{how} {args.model} for {args.target} in {time.perf_counter() - t0:.2f} s "
              f"(passes {exe.compile_seconds['passes']:.2f} s, LLVM {exe.compile_seconds['codegen']:.2f} s), "
              f"{len(exe.plan['steps'])} kernel launches")
    inputs = _inputs(exe, args.input, args.seed)
    outs = exe(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for i, y in enumerate(outs):
        print(_summary(f"output {i}", y))
        if args.output:
            save_npy(args.output if len(outs) == 1 else f"{args.output}.{i}.npy", y)
    if args.repeat:
        med, best = _time(exe, inputs, args.repeat)
        print(f"time: median {med * 1e3:.2f} ms, best {best * 1e3:.2f} ms over {args.repeat} runs")
    return 0


def _shape(spec: dict) -> str:
    return f"{spec['dtype']}[{', '.join(map(str, spec['shape']))}]"


def _resources(target, kernels: dict[str, bytes]) -> tuple[str, list[str]]:
    """(the code object read, one line per device function: registers, shared/LDS, local/scratch bytes)."""
    from openprim.runtime import codeobject
    from openprim.runtime.kernel_files import CUBIN, HSACO, PTX
    if target.kind == "rocdl":
        return HSACO, [
            f"{k['name']}: sgpr {k['sgpr_count']} vgpr {k['vgpr_count']} agpr {k.get('agpr_count', 0)} "
            f"lds {k['lds_bytes']} B scratch {k['scratch_bytes']} B wavefront {k['wavefront_size']}"
            for k in codeobject.amdgpu_kernels(kernels[HSACO])]
    if CUBIN in kernels:
        return CUBIN, [f"{k['name']}: registers {k['registers']} shared {k['shared_bytes']} B "
                       f"local {k['local_bytes']} B" for k in codeobject.cubin_kernels(kernels[CUBIN])]
    return f"{PTX}, registers unknown until the driver compiles it", [
        f"{k['name']}: shared {k['shared_bytes']} B" for k in codeobject.ptx_kernels(kernels[PTX].decode())]


def _inspect_dynamic(path: str, manifest: dict, buckets: dict, pool: bytes) -> int:
    """`openprim inspect` of a dynamic artifact: the dimension, and per bucket its shapes, steps and memory."""
    spec = manifest["dynamic"]
    how = (f"padded with {spec['padding']}" if spec["padding"] else
           "padded by repeating rows" + (", split into buckets" if spec["split"] else ""))
    print(f"{path}: {manifest['format']} version {manifest['version']}, {manifest.get('compiler')}, "
          f"target {manifest['target']}")
    if "decoder" in spec:
        state = buckets[min(buckets)][0]["plan"].get("state_bytes", 0)
        print(f"decoder: batch {spec['decoder']['batch']}, up to {spec['decoder']['max_len']} tokens; the one-token "
              f"step and prefill buckets up to {spec['high']} prompt tokens, on one carried state of {state} B "
              f"(runtime.load(path).generate)")
    else:
        print(f"dynamic {spec['what']} '{spec['name']}' in [{spec['low']}, {spec['high']}], {how}: inputs "
              + ", ".join(f"{n} dim {d}" for n, d in spec["inputs"].items()) + "; outputs "
              + ", ".join(f"{k} dim {d}" for k, d in enumerate(spec["outputs"]) if d is not None))
    print(f"weights: {len(pool)} B pooled for {len(buckets)} buckets")
    for b, (inner, kernels) in buckets.items():
        plan = inner["plan"]
        shapes = [_shape({**plan["values"][i["value"]], "shape": host_shape(plan, i["value"])}) for i in plan["inputs"]]
        outs = [_shape({**plan["values"][o], "shape": host_shape(plan, o)}) for o in plan["outputs"]]
        print(f"bucket {b}: {', '.join(shapes)} -> {', '.join(outs)}; {len(plan['steps'])} steps, arena "
              f"{plan['arena_bytes']} B, kernels {sum(map(len, kernels.values()))} B")
    return 0


def cmd_inspect(args) -> int:
    from openprim.runtime import artifact
    manifest, kernels, weights = artifact.read(args.artifact)
    if manifest["version"] == artifact.DYNAMIC_VERSION:
        return _inspect_dynamic(args.artifact, manifest, kernels, weights)
    plan, target = manifest["plan"], parse_target(manifest["target"])
    values = plan["values"]
    print(f"{args.artifact}: {manifest['format']} version {manifest['version']}, {manifest.get('compiler')}, "
          f"target {target}")
    for i in plan["inputs"]:
        print(f"input {i['name']}: {_shape({**values[i['value']], 'shape': host_shape(plan, i['value'])})}")
    for n, o in enumerate(plan["outputs"]):
        print(f"output {n}: {_shape({**values[o], 'shape': host_shape(plan, o)})}")
    if plan.get("batch_chunks", 1) > 1:
        print(f"batch: compiled for {values[plan['inputs'][0]['value']]['shape'][0]}, run in "
              f"{plan['batch_chunks']} chunks")
    print(f"memory: arena {plan['arena_bytes']} B (naive {plan['naive_bytes']} B), weights {plan['weights_bytes']} B"
          + (f", scratch {plan.get('scratch_bytes', 0)} B" if target.is_gpu else "")
          + (f", params {plan['params_bytes']} B" if "params" in plan else ""))
    if "params" in plan:   # weights as values: what load_weights takes, in the caller's shapes
        given = [f"{p['name']} {values[p['value']]['dtype']}{list(param_shape(values[p['value']], p.get('perm')))}"
                 for p in plan["params"]]
        print(f"parameters ({len(given)}, load_weights): {', '.join(given[:8])}"
              + (f", ... {len(given) - 8} more" if len(given) > 8 else ""))
    print(f"steps: {len(plan['steps'])}")
    if not target.is_gpu:
        print(f"kernels ({', '.join(manifest['kernel_files'])}):")
        for name, n in Counter(s["kernel"] for s in plan["steps"]).items():
            print(f"  {name} x{n}")
        return 0
    source, lines = _resources(target, kernels)
    print(f"device functions ({source}):")
    for line in lines:
        print(f"  {line}")
    print("launches:")
    for i, step in enumerate(plan["steps"]):
        for launch in plan["kernels"][step["kernel"]]["launches"]:
            grid, block = (",".join(map(str, launch[k])) for k in ("grid", "block"))
            extra = f" dynamic shared {launch['shared']} B" if launch.get("shared") else ""
            maps = [v for kind, v in launch["args"] if kind == "tensormap"]
            extra += "".join(f" tma[{'x'.join(map(str, m['box']))}" +
                             (f" every {'x'.join(map(str, m['element_strides']))}" if max(m.get("element_strides", [1])) > 1 else "")
                             + "]" for m in maps)
            print(f"  {i} {step['kernel']} -> {launch['function']} grid=({grid}) block=({block}){extra}")
    return 0


def cmd_profile(args) -> int:
    """`openprim profile ARTIFACT_OR_MODEL`: every kernel timed (profile_command.py)."""
    from openprim import profile_command
    return profile_command.run(args)


def cmd_cache(args) -> int:
    """`openprim cache info|clear`: the compile cache (openprim.cache)."""
    from openprim import cache
    if args.action == "clear":
        print(f"removed {cache.clear()} entries from {cache.cache_dir()}")
        return 0
    about = cache.info()
    print(f"compile cache {about['dir']}{'' if about['enabled'] else ' (off: OPENPRIM_CACHE=0)'}: "
          f"{about['entries']} entries, {about['bytes'] / 2**20:.1f} MiB of {about['limit_bytes'] / 2**20:.0f} MiB "
          f"(OPENPRIM_CACHE_MAX_MB)")
    return 0


def cmd_tune(args) -> int:
    from openprim.tuning import lock
    if args.ray is not None and os.path.isfile(args.ray):   # `--ray model.py`: a model, not an address
        args.model, args.ray = args.model + [args.ray], ""
    if args.ray is not None and args.dynamic:
        raise OpenPrimError("--dynamic and --ray: tune each bucket's model on the cluster (one .py per size)")
    if args.dynamic and (len(args.model) > 1 or args.measure_on):
        raise OpenPrimError("--dynamic tunes one model's buckets here (not with --measure-on or several models)")
    if args.ray is None and args.workers is not None:
        raise OpenPrimError("--workers applies to --ray (tuning on a Ray cluster)")
    if args.ray is not None:
        if args.measure_on:
            raise OpenPrimError("--measure-on and --ray: give one (a bundle to time elsewhere, or a Ray cluster)")
        from openprim import tuning_commands
        tuning_commands.tune_on_ray(args.model, define_options(args.define), args.target, args.ray, args.workers,
                                    args.db, args.budget)
        return 0
    if len(args.model) > 1 and args.measure_on:
        raise OpenPrimError("--measure-on takes one model")
    if args.measure_on:
        args.model = args.model[0]
        from openprim import tuning_commands
        writable_output(args.measure_on, "--measure-on")
        graph = load_model(args.model, args.define)
        t0 = time.perf_counter()
        n = tuning_commands.bundle(graph, args.target, args.measure_on, args.budget)
        print(f"{n} candidates compiled for {args.target} in {time.perf_counter() - t0:.1f} s -> {args.measure_on}; "
              f"run `python scripts/measure_tuning.py {args.measure_on} results.json` on the {args.target} machine, "
              f"then `openprim db import results.json`")
        return 0
    for model in args.model:
        with lock.working(args.target):   # all this process computes, under the measurement lock (tuning/lock.py)
            from openprim import tuning_commands
            t0 = time.perf_counter()
            if args.dynamic:          # every bucket's layers: a record per bucket's problems
                args.model = model
                name, size_range, _, build = dynamic_builder(args)
                layers = [layer for b in size_range.buckets
                          for layer in tuning_commands.tune(build(b), args.target, args.budget, args.db)]
            else:
                layers = tuning_commands.tune(load_model(model, args.define), args.target, args.budget, args.db)
        print(f"tuned {len(layers)} distinct layers of {model}"
              + (f" over the buckets {list(size_range.buckets)} of {name}" if args.dynamic else "")
              + f" in {time.perf_counter() - t0:.1f} s -> {args.db or tuning_commands.tuning_db.user_path()}")
    return 0


def cmd_explain(args) -> int:
    from openprim import tuning_commands
    if args.dynamic:
        name, size_range, _, build = dynamic_builder(args)
        tuning_commands.explain_buckets({b: build(b) for b in size_range.buckets}, args.target, name)
        return 0
    tuning_commands.explain(load_model(args.model, args.define), args.target)
    return 0


def cmd_conv(args) -> int:
    from openprim import tuning_commands
    tuning_commands.run_conv(args)
    return 0


def cmd_db(args) -> int:
    from openprim import tuning_commands
    if args.action not in ("import", "export") and (args.db or args.system):
        raise OpenPrimError(f"db {args.action}: --db and --system apply to db import and db export")
    if args.action == "export":
        if len(args.args) != 1 or args.system:
            raise OpenPrimError("db export expects one FILE (and --db PATH: the database to export)")
        from openprim.tuning import dbfile
        n, skipped = dbfile.export(writable_output(args.args[0], "db export"), args.db)
        print(f"exported {n} records of {args.db or tuning_commands.tuning_db.user_path()} -> {args.args[0]}"
              + (f" ({skipped} that a compile would ignore left out)" if skipped else ""))
        return 0
    if args.action == "add":
        if len(args.args) != 5:
            raise OpenPrimError("db add expects DESCRIPTOR ARCH SOLVER PARAMS_JSON SECONDS")
        tuning_commands.db_add(*args.args)
        return 0
    if args.action == "show":
        if len(args.args) > 1:
            raise OpenPrimError("db show expects at most one DESCRIPTOR")
        tuning_commands.db_show(*args.args)
        return 0
    if len(args.args) != 1:
        raise OpenPrimError("db import expects one file: a database export (openprim db export) or results "
                            "(scripts/measure_tuning.py)")
    if args.db and args.system:
        raise OpenPrimError("db import: --db and --system: give one")
    n, where = tuning_commands.db_import(args.args[0], args.db, args.system)
    print(f"imported {n} records into {where}")
    return 0


def cmd_onnx_check(args) -> int:
    """Everything that keeps the ONNX importer from importing a model, at once (importer.check_model): the
    nodes it cannot map, counts per op type and the first node of each, and its other refusals (opset,
    inputs, attribute values), on stdout; where there is any, one error line too, exit status 1."""
    from openprim.pyfrontend.onnx import importer
    if not os.path.isfile(args.model):
        raise OpenPrimError(f"{args.model}: {'is a directory' if os.path.isdir(args.model) else 'no such file'}")
    model = importer.read_model(args.model)
    missing, problems = importer.check_model(model)
    gr = model.graph
    weights = {i.name for i in gr.initializer}
    inputs = ", ".join(f"{i.name} {_onnx_type(i.type)}" for i in gr.input if i.name not in weights)
    about = f"opset {importer.model_opset(model)}, inputs: {inputs or 'none'}"
    if not (missing or problems):
        print(f"{args.model}: all {len(gr.node)} nodes supported ({about})")
        return 0
    print(f"{args.model}: {about}")
    for problem in problems:
        print(f"not importable: {problem}")
    if missing:
        print(f"{sum(map(len, missing.values()))} of {len(gr.node)} nodes are not supported ({len(missing)} op types):")
        width, count_width = max(map(len, missing)), max(len(str(len(n))) for n in missing.values())
        for op, names in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            print(f"  {op:<{width}}  x{len(names):<{count_width}}  first: '{names[0]}'")
    raise OpenPrimError(f"{args.model} cannot be imported: {len(problems) + len(missing)} reason(s), on stdout")


def cmd_torch_check(args) -> int:
    """Every aten op the torch importer cannot map in a .pt2 program (or in the programs a .py model file's
    build() imports), counts and the first node of each with its source line, on stdout
    (openprim.pyfrontend.torch.check); where every op maps, the import's own refusal if any. Where there is
    anything, one error line too, exit status 1."""
    from openprim.pyfrontend.torch import check
    reports = check.check_file(args.model, **define_options(args.define))
    for report in reports:
        print("\n".join(check.report_lines(report)))
    bad = [r for r in reports if not r.ok]
    if not bad:
        return 0
    ops, why = {op for r in bad for op in r.unmapped}, []
    if ops:
        why.append(f"{len(ops)} unmapped aten op{'s' if len(ops) != 1 else ''}")
    if any(r.refusal for r in bad):
        why.append("refused by the import")
    raise OpenPrimError(f"{args.model} cannot be imported by the torch importer: {', '.join(why)}, on stdout")


def _onnx_type(t) -> str:
    """An ONNX input's type as `float[1,3,224,224]` (`?` for a dynamic dimension)."""
    if not t.HasField("tensor_type"):
        return t.WhichOneof("value") or "?"
    from onnx import TensorProto
    tt = t.tensor_type
    dims = ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
    name = dict((v, k) for k, v in TensorProto.DataType.items()).get(tt.elem_type, f"type{tt.elem_type}")
    return f"{name.lower()}[{dims}]"


def _int_at_least(low: int):
    """An argparse type: an integer >= low (argparse turns the ValueError into a usage error, exit 2)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def _seconds(text: str) -> float:
    """An argparse type: a finite, non-negative number of seconds (0: only what a choice needs)."""
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a non-negative number of seconds, got {text}")
    return value


_seconds.__name__ = "seconds"


def _conv_parser(sub):
    """`openprim conv` with MIOpenDriver's convolution flags (-F: the directions)."""
    v = sub.add_parser("conv", help="compile, check and time one convolution (MIOpenDriver's flags)")
    for flag, dest, default, low, text in (
            ("-n", "n", 1, 1, "batch"), ("-c", "c", 3, 1, "input channels"), ("-H", "H", 32, 1, "input height"),
            ("-W", "W", 32, 1, "input width"), ("-k", "k", 32, 1, "output channels"), ("-y", "y", 3, 1, "filter height"),
            ("-x", "x", 3, 1, "filter width"), ("-p", "p", 0, 0, "zero padding height"),
            ("-q", "q", 0, 0, "zero padding width"), ("-u", "u", 1, 1, "stride height"), ("-v", "v", 1, 1, "stride width"),
            ("-l", "l", 1, 1, "dilation height"), ("-j", "j", 1, 1, "dilation width"), ("-g", "g", 1, 1, "groups"),
            ("-F", "F", 1, 0, "directions: 1 forward, 2 backward data, 4 backward weights, a sum, 0 all"), ("-t", "t", 0, 0, "1: time it"),
            ("-i", "i", 10, 1, "timed iterations")):
        v.add_argument(flag, dest=dest, type=_int_at_least(low), default=default, help=f"{text} (default {default})")
    v.add_argument("--dtype", default="f32", choices=("f32", "f16", "bf16"))
    v.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"))
    return v


SIGPIPE_STATUS = 141   # what a shell reports for `cat` killed by SIGPIPE (128 + 13) in `cat big | head -1`


def main(argv=None) -> int:
    """The exit status of the command `argv`. A reader that closes the pipe early (`openprim inspect X |
    head -1`) ends it quietly with status 141, as it ends `cat`: stdout is flushed here, and on a
    BrokenPipeError pointed at /dev/null so that Python's exit does not report it again (Python's docs,
    "Note on SIGPIPE")."""
    try:
        status = _command(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_STATUS


def _command(argv) -> int:
    ap = argparse.ArgumentParser(prog="openprim", description="OpenPrim: compile and run deep-learning models")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a model ahead of time into one .oprim file")
    c.add_argument("model", help="a model file: .py defining build(), .onnx, .pt2 (torch.export.save) or .mlir")
    c.add_argument("-o", "--output", help="the .oprim file to write (default: MODEL.oprim)")
    c.add_argument("--timings", action="store_true", help="print the time of each stage and the slowest kernels")
    c.add_argument("--dynamic", metavar="NAME=LOW:HIGH[:K]",
                   help="one artifact for every size of a dimension in [LOW, HIGH] (a plan per bucket: the powers of "
                        "two, K per doubling): NAME is a build() keyword of a .py model or a named input dimension of "
                        "an ONNX model; without --pad the dimension is the batch")
    c.add_argument("--pad", action="append", default=[], metavar="INPUT=VALUE",
                   help="with --dynamic: the dimension is padded with VALUE in INPUT (a sequence: input_ids=0, "
                        "attention_mask=0), one per input that has it")
    c.add_argument("--weights", choices=("constants", "values"), default="constants",
                   help="constants (default): the weights are compiled in (folded, packed); values: the artifact "
                        "holds them and exe.load_weights replaces them (docs/artifacts.md)")
    r = sub.add_parser("run", help="run a model (.py: JIT-compile first; .oprim: runtime only)")
    r.add_argument("model")
    r.add_argument("--input", action="append", default=[], help=".npy file per input (default: random)")
    r.add_argument("-o", "--output", help="save the output to this .npy file")
    r.add_argument("--repeat", type=_int_at_least(0), default=20, help="timed runs (0: none)")
    r.add_argument("--seed", type=_int_at_least(0), default=0)
    i = sub.add_parser("inspect", help="show what an .oprim artifact holds: plan, memory, kernels and their resources")
    i.add_argument("artifact")
    f = sub.add_parser("profile", help="time every kernel of an .oprim artifact or a model (compiled first): "
                                       "time, share, gaps, FLOP/s and bytes/s against the chip's rates")
    f.add_argument("model", help="an .oprim artifact (runtime only) or a model file (compiled as `run` does)")
    f.add_argument("--runs", type=_int_at_least(1), default=20, help="profiled runs, medians over them (default 20)")
    f.add_argument("--warmup", type=_int_at_least(0), default=3, help="runs before them, untimed (default 3)")
    f.add_argument("--top", type=_int_at_least(1), metavar="K", help="only the K slowest steps, slowest first")
    f.add_argument("--json", metavar="PATH", help="also write the profile to PATH as JSON")
    f.add_argument("--input", action="append", default=[], help=".npy file per input (default: random)")
    f.add_argument("--seed", type=_int_at_least(0), default=0)
    f.add_argument("--bucket", type=_int_at_least(1), help="a dynamic artifact: the bucket to profile (default: the "
                                                          "largest)")
    t = sub.add_parser("tune", help="find the fastest solver and parameters of every conv/matmul layer")
    t.add_argument("model", nargs="+", help="model files (their distinct layers are tuned once)")
    t.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="tune on a Ray cluster: the one at ADDRESS ('auto': the one this machine is in), else a "
                        "local one (docs/tuning.md#fleet-tuning-on-ray; give it after the models or as --ray=ADDRESS)")
    t.add_argument("--workers", type=_int_at_least(1), metavar="N",
                   help="--ray: the local cluster's CPUs, or the compile tasks in flight on a cluster (default: all)")
    t.add_argument("--db", metavar="PATH", help="store the records in PATH instead of the user database")
    t.add_argument("--budget", type=_seconds, default=10.0, help="seconds of search per layer, compiles included (default 10)")
    t.add_argument("--measure-on", metavar="BUNDLE",
                   help="compile the candidates into BUNDLE, to time on the target's machine")
    e = sub.add_parser("explain", help="every solver of every layer, and the choice and where it comes from")
    e.add_argument("model")
    v = _conv_parser(sub)
    m = sub.add_parser("emit", help="write a model's prim module (.mlir, for openprim-opt), its weights beside it")
    m.add_argument("model", help="a model file: .py defining build(), .onnx or .pt2")
    m.add_argument("-o", "--output", help="the .mlir file to write (default: MODEL.mlir); weights: MODEL.weights.npz")
    m.add_argument("-D", "--define", action="append", default=[], help="build() keyword argument name=value")
    o = sub.add_parser("onnx-check", help="list all that keeps the importer from importing an ONNX model: "
                                                    "nodes it cannot map, opset, inputs, attributes")
    o.add_argument("model")
    tc = sub.add_parser("torch-check", help="list every aten op the torch importer cannot map in a .pt2 program "
                                            "(or a .py model file's), with counts and the first node of each")
    tc.add_argument("model", help="a .pt2 program (torch.export.save) or a .py model file whose build() imports one")
    tc.add_argument("-D", "--define", action="append", default=[], help="build() keyword argument name=value")
    d = sub.add_parser("db", help="the tuning database: add a record, import measured results or an export, show "
                                  "the records, export them to a file that ships")
    d.add_argument("action", choices=("add", "import", "show", "export"))
    d.add_argument("args", nargs="*", help="add: DESCRIPTOR ARCH (cpu: this CPU, or e.g. nvvm:sm_90) SOLVER PARAMS_JSON SECONDS; "
                                           "import: EXPORT.json or RESULTS.json; show: [DESCRIPTOR]; export: FILE")
    d.add_argument("--db", metavar="PATH", help="export: the database to export; import: the database to import "
                                               "into (default: the user database)")
    d.add_argument("--system", action="store_true", help="import: into the package's system database "
                                                         "(tuning/data/tuning.sqlite), which ships with it")
    for p in (c, r, t, e, v, f):
        p.add_argument("--target", default="cpu", help=f"cpu (default), cpu:<mcpu>, nvvm:<{'|'.join(archs('nvvm'))}> "
                                                       f"or rocdl:<{'|'.join(archs('rocdl'))}>")
        p.add_argument("--solver", default="", help="force a convolution/GEMM solver")
        if p is not v:
            p.add_argument("-D", "--define", action="append", default=[], help="build() keyword argument name=value")
    for p in (t, e):
        p.add_argument("--dynamic", metavar="NAME=LOW:HIGH[:K]", help="every bucket of a dynamic dimension, as "
                                                                     "`compile --dynamic` compiles them")
    k = sub.add_parser("cache", help="the compile cache: where it is and how big (info), or empty it (clear)")
    k.add_argument("action", choices=("info", "clear"))
    for p in (c, r, f):
        p.add_argument("--no-cache", action="store_true", help="compile even when the compile cache has the model, "
                                                                "and do not store it there")
        p.add_argument("--layout", default="NHWC", help="NHWC (default): run NCHW convolutions and pools in NHWC; "
                                                         "keep: leave every op in its own layout")
        p.add_argument("--precision", choices=("f32", "f16", "bf16"),
                       help="compute in this dtype (weights cast at compile time, f32 accumulation), "
                            "inputs and outputs in the model's own (default: the model's dtype)")
    r.set_defaults(**dict.fromkeys(COMPILE_ONLY))
    f.set_defaults(**dict.fromkeys(COMPILE_ONLY))
    args = ap.parse_args(argv)
    try:
        if args.command in ("run", "profile"):
            _compile_options(args)
        if getattr(args, "target", None) is not None:
            args.target = parse_target(args.target)   # the one parse: every command gets the Target
        return {"compile": cmd_compile, "run": cmd_run, "inspect": cmd_inspect, "tune": cmd_tune, "explain": cmd_explain,
                "conv": cmd_conv, "db": cmd_db, "cache": cmd_cache, "onnx-check": cmd_onnx_check,
                "emit": cmd_emit, "torch-check": cmd_torch_check,
                "profile": cmd_profile}[args.command](args)
    except OpenPrimError as e:
        print(one_line(e, "openprim"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""Serving on a GPU: threads, each with its own CUDA stream, calling one GpuExecutable with CUDA tensors.

    python scripts/gpu_serving.py prepare DIR     # here (MLIR, no GPU): DIR/resnet18.oprim for nvvm:sm_90
    python scripts/gpu_serving.py run DIR         # on the GPU machine (PyTorch, cuda-bindings, no MLIR)

`prepare` exports examples/torch_models.py's ResNet-18 (seeded weights, `.half()`, batch 1), imports it as
compile_module does and compiles it for nvvm:sm_90 into DIR/resnet18.oprim (through the compile cache:
the same options as compile_module), and writes the sha256 of its state_dict (with --state-dicts the
state_dict itself).

`run` loads the artifact with the runtime alone and wraps it as compile_module's callable, which runs on
the calling thread's current PyTorch stream. --inputs seeded fp16 CUDA inputs; every variant first
computes its single-thread result for each. Then, per variant, one thread and then --threads threads,
each thread in `torch.cuda.stream` of its own stream under the variant's grad mode (inference_mode; the
compiled torch peers: no_grad, as they were compiled), make --warmup calls and then --calls calls, timed
from their common start until every stream is done. Every result is compared bitwise (torch.equal) with the
variant's single-thread result for its input. Variants: the shared executable (its lock orders the calls on
the device: one arena); one executable per thread (the artifact loaded --threads times: no shared arena);
and the PyTorch peers of bench/timing.torch_peers, built for batch 1: eager; inductor-freezing
(torch.compile with torch._inductor.config.freezing=True); inductor-freezing-cudagraphs (the same with
mode="reduce-overhead"), its calls under a lock (its CUDA graph trees abort when replayed from two threads at
once) and its outputs cloned before the next call overwrites them. Prints a table and writes
DIR/serving.json (rewritten after every variant; each row names its peer configuration, the versions are
under environment); exits 1 when an OpenPrim result differs, a check fails or a peer does not build.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from runtime_path import use_checkout  # scripts/: openprim from this checkout when not installed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from timing import CUDAGRAPHS, EAGER, FREEZING, peers_environment, torch_peers  # noqa: E402 - bench/: shared

TARGET = "nvvm:sm_90"
MODEL = "resnet18"


def prepare(directory: str, state_dicts: bool) -> None:
    import torch
    import openprim.cache
    from gpu_frameworks import _build, _weights_digest
    from openprim.pyfrontend.torch import import_exported
    model = _build(MODEL)
    if state_dicts:
        torch.save(model.state_dict(), os.path.join(directory, f"{MODEL}.pt"))
    with open(os.path.join(directory, f"{MODEL}.sha256"), "w") as f:
        f.write(_weights_digest(model) + "\n")
    g, _ = import_exported(torch.export.export(model.eval(), (torch.zeros(1, 3, 224, 224, dtype=torch.float16),)))
    path = os.path.join(directory, f"{MODEL}.oprim")
    info = openprim.cache.save_cached(g, path, TARGET, {})
    print(f"{path}: {TARGET}, {'from the compile cache' if info['cache_hit'] else 'compiled'} in "
          f"{info['seconds']:.1f} s, {os.path.getsize(path) / 2**20:.1f} MiB")


def serve(fns, inputs, want, calls: int, warmup: int, clone: bool, mode=None) -> dict:
    """len(fns) threads, thread k calling fns[k] on a stream of its own under mode() (default
    torch.inference_mode()), `warmup` and then `calls` times (call i takes input (k + i * threads) %
    len(inputs)): seconds from the common start of the timed calls until every stream is done, and how
    many results (warm-up ones too) differ bitwise from `want`."""
    import torch
    threads = len(fns)
    mode = mode or torch.inference_mode
    streams = [torch.cuda.Stream() for _ in range(threads)]
    ready = threading.Barrier(threads + 1)
    got, errors = [[] for _ in range(threads)], []

    def work(k):
        try:
            with torch.cuda.stream(streams[k]), mode():
                for i in range(warmup + calls):
                    if i == warmup:       # torch records its CUDA graphs per thread: in the warm-up
                        streams[k].synchronize()
                        ready.wait()
                    j = (k + i * threads) % len(inputs)
                    y = fns[k](inputs[j])
                    got[k].append((j, y.clone() if clone else y))   # a replayed graph's output is overwritten
            streams[k].synchronize()
        except BaseException as e:  # noqa: BLE001 - reported with the variant
            errors.append(f"thread {k}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            ready.abort()
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    for t in workers:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        return {"threads": threads, "error": errors[0]}
    wrong = sum(not torch.equal(y, want[j]) for mine in got for j, y in mine)
    return {"threads": threads, "calls": threads * calls, "checked": threads * (warmup + calls), "wrong": wrong,
            "seconds": seconds, "calls_per_s": threads * calls / seconds}


def run(directory: str, threads: int, calls: int, warmup: int, n_inputs: int) -> int:
    import torch
    from gpu_frameworks import _build, _error, _weights_digest
    from openprim.runtime import load
    from openprim.torch_backend import _Compiled, _output_dtypes
    failures = []
    model = _build(MODEL)
    saved = os.path.join(directory, f"{MODEL}.pt")
    if os.path.exists(saved):
        model.load_state_dict(torch.load(saved))
    if _weights_digest(model) != open(os.path.join(directory, f"{MODEL}.sha256")).read().strip():
        failures.append("the seeded weights differ from prepare's (another torch RNG?): prepare with --state-dicts")
    model = model.cuda().eval()
    generator = torch.Generator().manual_seed(1)
    inputs = [torch.randn(1, 3, 224, 224, generator=generator).half().cuda() for _ in range(n_inputs)]
    ep = torch.export.export(model, (inputs[0],))
    path = os.path.join(directory, f"{MODEL}.oprim")

    def compiled_module():
        """compile_module's callable on the artifact (compile_module itself would compile: no MLIR here)."""
        return _Compiled(load(path), ep.call_spec.out_spec, 1, [torch.float16], _output_dtypes(ep))
    shared = compiled_module()
    own = [shared] + [compiled_module() for _ in range(threads - 1)]
    torch.backends.cudnn.benchmark = True
    with torch.inference_mode():
        eager = [model(x) for x in inputs]
    peers = torch_peers(model, (inputs[0],), dtype=torch.float16)
    graph_lock, last_clone = threading.Lock(), [None]

    def cudagraphs_locked(x):
        """torch.compile's CUDA graph trees are not thread-safe (concurrent replays abort in
        cudagraph_trees._copy_inputs_and_remove_from_src, seen on the H200): a server must serialize its
        calls, and clone each output before the next replay overwrites it. The lock orders the calls on the
        host; on the device the next call's stream waits for the previous clone (each thread has a stream
        of its own: without the wait a replay may overwrite an output another stream has not copied yet)."""
        with graph_lock:
            stream = torch.cuda.current_stream()
            if last_clone[0] is not None:
                stream.wait_event(last_clone[0])
            torch.compiler.cudagraph_mark_step_begin()
            y = peers[CUDAGRAPHS].call(x).clone()
            last_clone[0] = stream.record_event()
            return y
    inference = torch.inference_mode
    variants = {  # name: (the callable of thread k, clone the outputs, grad mode, peer configuration)
        "openprim (one executable)": (lambda k: shared, False, inference, None),
        "openprim (executable per thread)": (lambda k: own[k], False, inference, None),
        "torch eager": (lambda k: peers[EAGER].call, False, peers[EAGER].mode, EAGER),
        "torch.compile freezing": (lambda k: peers[FREEZING].call, False, peers[FREEZING].mode, FREEZING),
        "torch.compile reduce-overhead + freezing, calls under a lock": (
            lambda k: cudagraphs_locked, False, peers[CUDAGRAPHS].mode, CUDAGRAPHS)}
    environment = peers_environment()
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {environment['triton']}; "
          f"{MODEL} fp16 batch 1; {threads} threads x {calls} calls, {n_inputs} inputs")
    rows = []
    for name, (fn, clone, mode, config) in variants.items():
        row = {"variant": name, "config": config or "openprim"}
        if config:
            row["torch_peer"] = peers[config].record()
            if peers[config].error:
                failures.append(f"{name}: the torch peer {config} did not build: {peers[config].error}")
                rows.append(row)
                continue
        print(f"{name} ...", flush=True)
        with mode():
            want = [fn(0)(x).clone() for x in inputs]      # the single-thread results
            torch.cuda.synchronize()
            error = max(_error(e, w) for e, w in zip(eager, want))
        one = serve([fn(0)], inputs, want, calls, warmup, clone, mode)
        many = serve([fn(k) for k in range(threads)], inputs, want, calls, warmup, clone, mode)
        row.update(max_rel_error_vs_eager=error, one_thread=one, threads=many)
        if "error" not in one and "error" not in many:
            row["speedup"] = many["calls_per_s"] / one["calls_per_s"]
        rows.append(row)
        if name.startswith("openprim"):
            failures += [f"{name}: {r['threads']} thread(s): {r['error']}" for r in (one, many) if "error" in r]
            failures += [f"{name}: {r['wrong']} of {r['checked']} results differ from the single-thread ones"
                         for r in (one, many) if r.get("wrong")]
            if not error < 2e-2:
                failures.append(f"{name}: max rel error vs eager {error:.3g}")
        with open(os.path.join(directory, "serving.json"), "w") as f:      # a crash keeps the rows so far
            json.dump({"environment": environment, "threads": threads, "calls": calls, "rows": rows,
                       "failures": failures}, f, indent=1)
    _report(rows, failures)
    with open(os.path.join(directory, "serving.json"), "w") as f:
        json.dump({"environment": environment, "threads": threads, "calls": calls, "rows": rows,
                   "failures": failures}, f, indent=1)
    return 1 if failures else 0


def _report(rows, failures) -> None:
    print(f"{'variant':34s} {'threads':>7s} {'calls':>6s} {'identical':>13s} {'calls/s':>8s} {'vs 1':>5s}")
    for row in rows:
        if "one_thread" not in row:
            print(f"{row['variant']:34s} did not build: {row['torch_peer'].get('error')}")
            continue
        for r in (row["one_thread"], row["threads"]):
            if "error" in r:
                print(f"{row['variant']:34s} {r['threads']:7d} {r['error']}")
                continue
            base = row["one_thread"].get("calls_per_s")
            identical = f"{r['checked'] - r['wrong']}/{r['checked']}"
            print(f"{row['variant']:34s} {r['threads']:7d} {r['calls']:6d} {identical:>13s} "
                  f"{r['calls_per_s']:8.0f} {r['calls_per_s'] / base if base else float('nan'):5.2f}")
    print("\nFAILURES:\n  " + "\n  ".join(failures) if failures else "\nall checks passed")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("prepare", "run"))
    parser.add_argument("dir")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--calls", type=int, default=200, help="calls per thread (and of the one-thread run)")
    parser.add_argument("--warmup", type=int, default=5, help="calls per thread before the timed ones")
    parser.add_argument("--inputs", type=int, default=16, help="distinct seeded inputs the calls cycle through")
    parser.add_argument("--state-dicts", action="store_true", help="prepare: save the fp16 state_dict too")
    args = parser.parse_args(argv)
    directory = os.path.abspath(args.dir)
    os.makedirs(directory, exist_ok=True)
    use_checkout()
    if args.mode == "prepare":
        prepare(directory, args.state_dicts)
        return 0
    return run(directory, args.threads, args.calls, args.warmup, args.inputs)


if __name__ == "__main__":
    sys.exit(main())

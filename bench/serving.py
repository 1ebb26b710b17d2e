"""Serving on the CPU: one compiled network called from many threads at once, as a web server calls it.

    python bench/serving.py [--threads 8] [--calls 200] [--model examples/resnet.py -D depth=18 -D batch=1]

The model compiles through the compile cache. Each call takes one of --inputs seeded random inputs, and
its result must be bitwise equal (np.array_equal) to the single-thread result for that input. One thread
makes --warmup calls and then --calls calls back to back (the baseline); then --threads threads make
--warmup calls each (the executable's arena pool grows to the calls in flight) and --calls each, timed.
Resident memory (VmRSS of /proc/self/status) is read after loading, after the warm-up and at the end: it
stays flat after the warm-up. Prints a table and writes bench/serving_cpu.json (--json elsewhere).
Each call's kernels run OpenMP teams of their own (libiomp5 gives every calling thread its own team).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import numpy as np

import openprim
from openprim.cli import load_model
from openprim.runtime.executor import host_shape

HERE = os.path.dirname(os.path.abspath(__file__))


def memory_mib(field: str = "VmRSS") -> float:
    """A memory figure of this process from /proc/self/status, in MiB (VmRSS: resident now; VmHWM: peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def same(a, b) -> bool:
    """Bitwise equal results (one array, or a tuple of them)."""
    if isinstance(a, tuple):
        return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    return np.array_equal(a, b)


def serve(exe, inputs, want, threads: int, calls: int, warmup: int) -> dict:
    """`threads` threads, each making `warmup` and then `calls` calls (call i of thread k takes input
    (k + i * threads) % len(inputs)); the timed calls start together once every thread is warm. Returns
    their wall seconds and latencies, the calls (warm-up ones too) whose result differs bitwise from
    `want`, and VmRSS between the warm-up and the timed calls."""
    warm, go = threading.Barrier(threads + 1), threading.Barrier(threads + 1)
    wrong, latencies, errors = [0] * threads, [[] for _ in range(threads)], []

    def work(k):
        try:
            for i in range(warmup + calls):
                if i == warmup:
                    warm.wait()
                    go.wait()
                j = (k + i * threads) % len(inputs)
                t0 = time.perf_counter()
                y = exe(*inputs[j])
                latencies[k].append(time.perf_counter() - t0)
                wrong[k] += not same(y, want[j])
        except BaseException as e:  # noqa: BLE001 - raised again by the main thread
            errors.append(e)
            warm.abort()
            go.abort()
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    try:
        warm.wait()
        rss = memory_mib()
        go.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    for t in workers:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    lat = np.concatenate([np.asarray(x[warmup:]) for x in latencies]) * 1e3
    return {"threads": threads, "calls": threads * calls, "checked": threads * (warmup + calls),
            "wrong": sum(wrong), "seconds": seconds, "calls_per_s": threads * calls / seconds,
            "latency_ms_p50": float(np.percentile(lat, 50)), "latency_ms_p99": float(np.percentile(lat, 99)),
            "rss_after_warmup_mib": rss}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--calls", type=int, default=200, help="calls per thread (and of the one-thread baseline)")
    p.add_argument("--warmup", type=int, default=5, help="calls per thread before the timed ones")
    p.add_argument("--inputs", type=int, default=16, help="distinct seeded inputs the calls cycle through")
    p.add_argument("--model", default=os.path.join(HERE, "..", "examples", "resnet.py"))
    p.add_argument("-D", "--define", action="append", help="build() keyword argument name=value "
                                                            "(default: depth=18 batch=1)")
    p.add_argument("--json", default=os.path.join(HERE, "serving_cpu.json"))
    args = p.parse_args(argv)
    defines = args.define if args.define is not None else ["depth=18", "batch=1"]

    t0 = time.perf_counter()
    exe = openprim.compile(load_model(args.model, defines))
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(29)
    specs = [host_shape(exe.plan, i["value"]) for i in exe.plan["inputs"]]
    inputs = [[rng.standard_normal(s).astype(np.float32) for s in specs] for _ in range(args.inputs)]
    want = [exe(*x) for x in inputs]                     # the single-thread results
    rss = {"loaded": memory_mib()}
    one = serve(exe, inputs, want, 1, args.calls, args.warmup)
    many = serve(exe, inputs, want, args.threads, args.calls, args.warmup)
    rss.update(after_warmup=many["rss_after_warmup_mib"], end=memory_mib(), peak=memory_mib("VmHWM"))
    result = {"model": os.path.relpath(args.model, os.path.join(HERE, "..")), "defines": defines,
              "cache_hit": exe.cache_hit, "load_s": load_s, "cpus": os.cpu_count(),
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "arena_mib": exe.plan["arena_bytes"] / 2**20,
              "arenas": exe.arenas, "rss_mib": rss, "one_thread": one, "threads": many,
              "speedup": many["calls_per_s"] / one["calls_per_s"]}
    identical = one["wrong"] == many["wrong"] == 0

    print(f"{result['model']} {' '.join(defines)}: {'loaded from the cache' if exe.cache_hit else 'compiled'} in "
          f"{load_s:.1f} s; {os.cpu_count()} CPUs; arena {result['arena_mib']:.1f} MiB, {exe.arenas} made")
    print(f"{'threads':>7s} {'calls':>6s} {'identical':>11s} {'calls/s':>8s} {'vs 1':>5s} {'p50 ms':>7s} "
          f"{'p99 ms':>7s}")
    for row in (one, many):
        identical_calls = f"{row['checked'] - row['wrong']}/{row['checked']}"
        print(f"{row['threads']:7d} {row['calls']:6d} {identical_calls:>11s} {row['calls_per_s']:8.1f} "
              f"{row['calls_per_s'] / one['calls_per_s']:5.2f} {row['latency_ms_p50']:7.2f} "
              f"{row['latency_ms_p99']:7.2f}")
    print("VmRSS MiB: loaded {loaded:.1f}, after warm-up {after_warmup:.1f}, end {end:.1f} "
          "(peak {peak:.1f})".format(**rss))
    print("every result bitwise equal to the single-thread one" if identical else
          f"RESULTS DIFFER: {one['wrong'] + many['wrong']} calls")
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())

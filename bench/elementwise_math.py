"""Benchmark: standalone activations on the CPU (tanh, GELU with erf, sigmoid, SiLU, ReLU) and the softmax over
the last axis, OpenPrim against PyTorch eager in the same run.

    python bench/elementwise_math.py [--shape 512,3072] [--ops gelu,softmax] [--repeat 50] [--out F.json]

A last axis with no divisor from 8 to 64 (--shape 1,128,199: HuBERT's GELU) exercises prim-tile's peeled
vector tiles; a softmax (kernels/cpu/rows.py) its rows of vectors with a masked tail.

Each activation is its own graph (one elementwise kernel, vectorized by prim-tile; tanh, erf and exp become
prim-cpu-vector-math's polynomials), compiled without the cache, fed seeded normal data times 4. Median of
--repeat calls after warm-up, OpenPrim's executable (a whole call: its input copied into the arena and its output
out, as every numpy call does) and its kernel alone (runtime.profile, median per run) against torch on every core
(torch_cpu_threads, inference_mode, which writes a new tensor and copies nothing in); the largest difference from
float64 relative to the largest output is checked (< 1e-5).
"""
from __future__ import annotations

import argparse
import json
import math
import platform

import numpy as np
from timing import median_time, torch_cpu_threads

def _softmax(v):
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


REFERENCE = {"tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "silu": lambda v: v / (1 + np.exp(-v)),
             "gelu": lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2))), "relu": lambda v: np.maximum(v, 0),
             "softmax": _softmax}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="512,3072")
    ap.add_argument("--ops", default=",".join(REFERENCE), help="comma-separated, of " + ", ".join(REFERENCE))
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    import openprim
    from openprim.runtime.profile import profile
    threads = torch_cpu_threads()
    shape = tuple(int(s) for s in args.shape.split(","))
    x = (np.random.default_rng(0).standard_normal(shape) * 4).astype(np.float32)
    xt = torch.from_numpy(x)
    rows = []
    print(f"{'op':8} {'call ms':>8} {'kernel ms':>9} {'torch ms':>9} {'torch/kernel':>12} {'max rel err':>11}")
    for name in args.ops.split(","):
        ref = REFERENCE[name]
        g = openprim.Graph()
        x_in = g.input("x", shape)
        g.output(g.softmax(x_in, -1) if name == "softmax" else getattr(g, name)(x_in))
        run = openprim.compile(g, "cpu", cache=False)
        err = float(np.abs(run(x) - ref(x.astype(np.float64))).max() / np.abs(ref(x.astype(np.float64))).max())
        fn = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu,
              "gelu": torch.nn.functional.gelu, "relu": torch.relu,
              "softmax": lambda v: torch.softmax(v, -1)}[name]
        with torch.inference_mode():
            ours, theirs = median_time(lambda: run(x), args.repeat), median_time(lambda: fn(xt), args.repeat)
        kernel = profile(run, [x], args.repeat, 3).kernel_us / 1e6
        rows.append({"op": name, "openprim_call_ms": ours * 1e3, "openprim_kernel_ms": kernel * 1e3,
                     "torch_ms": theirs * 1e3, "torch_over_kernel": theirs / kernel, "max_rel_err": err})
        print(f"{name:8} {ours * 1e3:8.2f} {kernel * 1e3:9.2f} {theirs * 1e3:9.2f} {theirs / kernel:12.2f} {err:11.1e}",
              flush=True)
        assert err < 1e-5, (name, err)
    print(f"cpu: PyTorch on {threads} threads; OpenPrim's call copies its input in and its output out")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": f"python bench/elementwise_math.py --shape {args.shape} --ops {args.ops} "
                                  f"--repeat {args.repeat}",
                       "machine": platform.processor() or platform.machine(), "threads": threads,
                       "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

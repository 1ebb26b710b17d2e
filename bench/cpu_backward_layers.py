"""Benchmark: ResNet-18's backward convolutions one by one on the CPU, every applicable solver of each direction
against PyTorch CPU (oneDNN) in the same run.

    python bench/cpu_backward_layers.py [--batch 8] [--size 224] [--repeat 10] [--out bench/cpu_backward_layers.json]

For each distinct convolution of ResNet-18 at `size` x `size` input (batch `batch`, fp32), the input gradient
(bwd_data: dy and the filter -> dx) and the filter gradient (bwd_weights: x and dy -> dw), as training computes
them: dy, x and the filter are run-time values (inputs), the activations NHWC and the filter in PyTorch's
KCRS (OpenPrim transposes it for its solver inside the compiled graph, as in a training step). The peer is
aten.convolution_backward with only that gradient asked for, channels_last tensors, on every core. Every output
is checked against PyTorch's (relative error printed). Prints time, GFLOP/s and PyTorch's time over ours
(>1: OpenPrim faster): first as compiled (prim-select's choice, "selected: <the solvers of its kernels>": a
stride-1 input gradient becomes a forward convolution), then each applicable backward solver forced. The JSON
holds every row and the geometric mean of the ratios of the compiled choices.
"""
from __future__ import annotations

import argparse
import json
import math
import platform

import numpy as np
from timing import median_time, torch_cpu_threads

import openprim
from openprim.base.target import parse_target
from openprim.pyfrontend import Graph
from openprim.solvers import applicable
from openprim.solvers.problem import ConvProblem

CPU = parse_target("cpu")
# (C, K, R, stride, input size as a fraction of the image): ResNet-18's distinct convolutions after its stem
LAYERS = [(64, 64, 3, 1, 4), (64, 128, 3, 2, 4), (64, 128, 1, 2, 4), (128, 128, 3, 1, 8), (128, 256, 3, 2, 8),
          (256, 256, 3, 1, 16), (256, 512, 3, 2, 16), (512, 512, 3, 1, 32)]
SKIPPED = ("conv_bwd_data_reference", "conv_bwd_weights_reference")   # minutes per layer at these sizes


def _graph(direction, x, w, dy, stride, pad):
    """The one-op NHWC graph of a direction: inputs (dy, w KCRS) or (x, dy)."""
    g = Graph(layout="NHWC")
    if direction == "bwd_data":
        gy, gw = g.input("dy", dy.shape), g.input("w", w.shape)
        g.output(g.conv2d_backward_data(gy, gw, x.shape[1:3], stride=stride, padding=pad, filter_layout="KCRS"))
        return g, (dy, w)
    gx, gy = g.input("x", x.shape), g.input("dy", dy.shape)
    g.output(g.conv2d_backward_weights(gx, gy, w.shape[2:], stride=stride, padding=pad, filter_layout="KCRS"))
    return g, (x, dy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    import torch
    threads = torch_cpu_threads()
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'layer':30s} {'direction':11s} {'solver':34s} {'ms':>8s} {'GFLOP/s':>8s} {'err':>8s}   "
          f"{'PyTorch ms':>10s} {'ratio':>6s}")
    for C, K, R, S, div in LAYERS:
        N, H, P = args.batch, args.size // div, R // 2
        OH = (H + 2 * P - R) // S + 1
        flops = 2.0 * N * OH * OH * K * C * R * R
        x = rng.standard_normal((N, H, H, C)).astype(np.float32)
        w = (rng.standard_normal((K, C, R, R)) / math.sqrt(C * R * R)).astype(np.float32)
        dy = rng.standard_normal((N, OH, OH, K)).astype(np.float32)
        xt, dyt = (torch.tensor(a).permute(0, 3, 1, 2) for a in (x, dy))
        wt = torch.tensor(w).contiguous(memory_format=torch.channels_last)
        for direction, mask in (("bwd_data", [True, False, False]), ("bwd_weights", [False, True, False])):
            def peer():
                return torch.ops.aten.convolution_backward(dyt, xt, wt, None, [S, S], [P, P], [1, 1], False,
                                                           [0, 0], 1, mask)
            with torch.no_grad():
                got = peer()
                want = (got[0].permute(0, 2, 3, 1) if direction == "bwd_data" else got[1]).numpy()
                t_torch = median_time(peer, args.repeat, warmup=2)
            problem = ConvProblem(N, C, H, H, K, R, R, OH, OH, (S, S), (P,) * 4, (1, 1), 1, "NHWC", "RSCK", "f32",
                                  "none", direction)
            ok = [s for s, why in applicable(problem, "conv2d", CPU) if why is None]
            name = f"{N}x{C}x{H}x{H} -> {K} {R}x{R}/s{S}"
            for solver in [None] + ok:
                if solver is not None and solver.name in SKIPPED:
                    continue
                g, feeds = _graph(direction, x, w, dy, S, P)
                exe = openprim.compile(g, solver=solver and solver.name)
                label = solver.name if solver else "selected: " + ",".join(
                    st["solver"] for st in exe.plan["steps"] if st.get("solver"))
                out = exe(*feeds)
                err = float(np.abs(out - want).max() / np.abs(want).max())
                t = median_time(exe.run_steps, args.repeat, warmup=2)
                print(f"{name:30s} {direction:11s} {label:34s} {t * 1e3:8.2f} {flops / t / 1e9:8.1f} "
                      f"{err:8.1e}   {t_torch * 1e3:10.2f} {t_torch / t:6.2f}", flush=True)
                rows.append({"layer": name, "direction": direction, "solver": label, "chosen": solver is None,
                             "ms": t * 1e3, "gflops": flops / t / 1e9, "rel_err": err, "torch_ms": t_torch * 1e3,
                             "torch_over_ours": t_torch / t})
    summary = {}
    for direction in ("bwd_data", "bwd_weights"):
        ratios = [r["torch_over_ours"] for r in rows if r["chosen"] and r["direction"] == direction]
        if ratios:
            summary[direction] = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"{direction}: geometric mean of PyTorch's time over the compiled choice: {summary[direction]:.2f}")
    print(f"ratio = PyTorch's time / OpenPrim's (>1: OpenPrim faster); "
          f"{threads} threads for PyTorch")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": f"python bench/cpu_backward_layers.py --batch {args.batch} --size {args.size} "
                                  f"--repeat {args.repeat}", "batch": args.batch, "size": args.size,
                       "threads": threads, "torch": torch.__version__, "machine": platform.processor() or
                       platform.machine(), "geomean_torch_over_ours": summary, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

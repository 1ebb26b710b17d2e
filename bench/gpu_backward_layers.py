"""Benchmark: ResNet-50's convolutions backward on the GPU, the input gradient (bwd_data) and the filter
gradient (bwd_weights) of each, against cuDNN in the same run.

    . scripts/device_env.sh && python bench/gpu_backward_layers.py [--batch 32] [--dtype f16] [--out DIR]
    python bench/gpu_backward_layers.py --compile-only [--target nvvm:sm_90]      # any machine: the solvers
    . scripts/device_env.sh && python bench/gpu_backward_layers.py --sweep        # and every filter-gradient
                                                                                   # kernel's neighbours

--sweep also times, per filter gradient on conv_bwd_weights_wgmma, each tile config with the runs its cost
model prefers for that tile and the neighbouring divisors (checked against cuDNN's result too): how far the
heuristic's choice is from the fastest, the data to calibrate it with.

The layers: bench/resnet50_layers.py's (the stem's input gradient is skipped: training never needs the
image's) and ResNet-50 v1.5's strided ones (the 3x3 stride 2 of each stage's first block, the 1x1 stride 2
of its projection shortcut), batch 32, NHWC, fp16 (or bf16/f32). Each direction is its own one-op graph as
training computes it: dy, the filter (PyTorch's KCRS, transposed inside the graph as in a training step)
and x are inputs, compiled for this GPU through prim-select's choice; timed with the runtime's time_ms
(20 runs captured in one graph, median of 20 replays); a direction that falls to a reference solver
(the GPU has no matrix-core filter-gradient solver yet) is listed, not timed. The peer is aten.convolution_backward asking for that
one gradient, channels_last tensors, cudnn.benchmark, timed by bench/timing.layer_ms (the calls captured back
to back in a CUDA graph, as ours). Each result is checked against cuDNN's (relative error printed). Prints
ms, TFLOP/s and cuDNN's time over ours (>1: OpenPrim faster) and the geometric mean per direction;
$OUT/gpu_backward_layers.json has every row.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time

import numpy as np
from resnet50_layers import LAYERS as FORWARD_LAYERS
from timing import layer_ms

import openprim
from openprim import compiler
from openprim.base.target import parse_target
from openprim.pyfrontend import Graph
from openprim.solvers import SOLVERS
from openprim.solvers.problem import ConvProblem

# (C, H = W, K, R = S, stride): the forward layers, then the strided ones of v1.5
LAYERS = FORWARD_LAYERS + [(128, 56, 128, 3, 2), (256, 28, 256, 3, 2), (256, 56, 512, 1, 2), (512, 28, 1024, 1, 2)]


def graph(direction: str, n: int, c: int, h: int, k: int, r: int, stride: int, dtype: str):
    """The one-op NHWC graph of a direction and its input shapes: (dy, w KCRS) or (x, dy)."""
    pad = r // 2
    oh = (h + 2 * pad - r) // stride + 1
    g = Graph(layout="NHWC", dtype=dtype)
    if direction == "bwd_data":
        gy, gw = g.input("dy", (n, oh, oh, k)), g.input("w", (k, c, r, r))
        g.output(g.conv2d_backward_data(gy, gw, (h, h), stride=stride, padding=pad, filter_layout="KCRS"))
        return g, [(n, oh, oh, k), (k, c, r, r)], oh
    gx, gy = g.input("x", (n, h, h, c)), g.input("dy", (n, oh, oh, k))
    g.output(g.conv2d_backward_weights(gx, gy, (r, r), stride=stride, padding=pad, filter_layout="KCRS"))
    return g, [(n, h, h, c), (n, oh, oh, k)], oh


def problems(batch: int):
    """The layers' directions; the stem's last (its one direction has 3 channels: the slowest to compile and run)."""
    for c, h, k, r, s in sorted(LAYERS, key=lambda layer: layer[0] == 3):
        for direction in ("bwd_data", "bwd_weights"):
            if direction == "bwd_data" and c == 3:
                continue
            yield f"{batch}x{c}x{h}x{h} -> {k} {r}x{r}/s{s}", direction, (batch, c, h, k, r, s)


SWEPT = "conv_bwd_weights_wgmma"


def sweep(g, layer, dtype, feeds, want, target, torch_ms) -> list[dict]:
    """Each tile config of the filter-gradient kernel with the runs its cost model prefers for that tile and
    the neighbouring divisors of the k tiles: ms, cuDNN's time over it and the relative error of each."""
    solver, chip = SOLVERS[SWEPT], parse_target(target)
    n, c, h, k, r, s = layer
    oh = (h + 2 * (r // 2) - r) // s + 1
    problem = ConvProblem(n, c, h, h, k, r, r, oh, oh, (s, s), (r // 2,) * 4, (1, 1), 1, "NHWC", "KRSC", dtype, "none",
                          "bwd_weights")
    default = solver.default_params
    splits = solver.tunables(problem)["splits"]
    out = []
    for tile in solver.tunables(problem)["tile"]:
        fits = [d for d in splits if solver.fits(problem, chip, tile, d)]
        if not fits:
            continue
        best = min(fits, key=lambda d: solver.predicted(problem, chip, tile, d))
        i = fits.index(best)
        for d in fits[max(0, i - 1):i + 2]:
            solver.default_params = lambda p, t, tile=tile, d=d: {"tile": tile, "splits": d}
            try:
                exe = openprim.compile(g, target=target)
            finally:
                solver.default_params = default
            got = np.asarray(exe(*feeds), np.float64)
            ms = exe.time_ms(repeat=20, captured=20)
            out.append({"tile": tile, "splits": d, "ms": ms, "cudnn_over_ours": torch_ms / ms,
                        "rel_err": float(np.abs(got - want).max() / np.abs(want).max())})
    fastest = min(out, key=lambda r: r["ms"])
    print(f"    sweep: {len(out)} choices, fastest tile {fastest['tile']} x {fastest['splits']} runs "
          f"{fastest['ms']:.4f} ms ({fastest['cudnn_over_ours']:.2f}x cuDNN), worst error "
          f"{max(r['rel_err'] for r in out):.1e}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="f16", choices=("f16", "bf16", "f32"))
    ap.add_argument("--out", default=".", help="directory for gpu_backward_layers.json")
    ap.add_argument("--compile-only", action="store_true", help="compile for --target and list the solvers")
    ap.add_argument("--target", help="default: this GPU's (nvvm:sm_XY); with --compile-only nvvm:sm_90")
    ap.add_argument("--sweep", action="store_true", help="time the filter-gradient kernel's tile and run choices")
    args = ap.parse_args()
    if args.compile_only:
        target = args.target or "nvvm:sm_90"
        with tempfile.TemporaryDirectory(prefix="gpu-backward-") as scratch:
            for name, direction, (n, c, h, k, r, s) in problems(args.batch):
                g, _, _ = graph(direction, n, c, h, k, r, s, args.dtype)
                t0 = time.perf_counter()
                plan = compiler.save(g, os.path.join(scratch, "layer.oprim"), target=target)["plan"]
                print(f"{name:30s} {direction:11s} {time.perf_counter() - t0:5.1f} s  "
                      f"{','.join(st['solver'] for st in plan['steps'] if st.get('solver'))}", flush=True)
        return

    import torch
    major, minor = torch.cuda.get_device_capability()
    target = args.target or f"nvvm:sm_{major}{minor}"
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'layer':30s} {'direction':11s} {'ms':>7s} {'TFLOP/s':>8s} {'cuDNN ms':>9s} {'ratio':>6s} {'err':>8s}  solvers")
    for name, direction, (n, c, h, k, r, s) in problems(args.batch):
        g, shapes, oh = graph(direction, n, c, h, k, r, s, args.dtype)
        flops = 2.0 * n * oh * oh * k * c * r * r
        t0 = time.perf_counter()
        exe = openprim.compile(g, target=target)
        compile_s = time.perf_counter() - t0
        solvers = ",".join(st["solver"] for st in exe.plan["steps"] if st.get("solver"))
        if "reference" in solvers:   # the reference loop nest takes seconds per layer: a finding, not a figure
            rows.append({"layer": name, "direction": direction, "solvers": solvers, "not_timed": "reference solver"})
            print(f"{name:30s} {direction:11s} not timed: {solvers}", flush=True)
            continue
        feeds = [(rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32) for shape in shapes]
        got = np.asarray(exe(*feeds), np.float64)
        ms = exe.time_ms(repeat=20, captured=20)
        # cuDNN on the same (rounded) values, NCHW views of channels_last tensors
        dev = [torch.from_numpy(f).to("cuda", tdt) for f in feeds]
        if direction == "bwd_data":
            dy, w = dev[0].permute(0, 3, 1, 2), dev[1].contiguous(memory_format=torch.channels_last)
            x = torch.empty(n, h, h, c, device="cuda", dtype=tdt).permute(0, 3, 1, 2)
            mask = [True, False, False]
        else:
            x, dy = dev[0].permute(0, 3, 1, 2), dev[1].permute(0, 3, 1, 2)
            w = torch.empty(k, c, r, r, device="cuda", dtype=tdt).contiguous(memory_format=torch.channels_last)
            mask = [False, True, False]

        def peer():
            return torch.ops.aten.convolution_backward(dy, x, w, None, [s, s], [r // 2] * 2, [1, 1], False, [0, 0], 1,
                                                       mask)
        with torch.no_grad():
            ref = peer()
            want = (ref[0].permute(0, 2, 3, 1) if direction == "bwd_data" else ref[1]).double().cpu().numpy()
            torch_ms = layer_ms(peer)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        rows.append({"layer": name, "direction": direction, "ms": ms, "tflops": flops / ms / 1e9, "cudnn_ms": torch_ms,
                     "cudnn_over_ours": torch_ms / ms, "rel_err": err, "solvers": solvers, "compile_s": compile_s,
                     "params": [st["params"] for st in exe.plan["steps"] if st.get("solver")]})
        print(f"{name:30s} {direction:11s} {ms:7.3f} {flops / ms / 1e9:8.1f} {torch_ms:9.3f} {torch_ms / ms:6.2f} "
              f"{err:8.1e}  {solvers} {rows[-1]['params']}", flush=True)
        if args.sweep and solvers == SWEPT:
            rows[-1]["sweep"] = sweep(g, (n, c, h, k, r, s), args.dtype, feeds, want, target, torch_ms)
    summary = {}
    for direction in ("bwd_data", "bwd_weights"):
        ratios = [r["cudnn_over_ours"] for r in rows if r["direction"] == direction and "ms" in r]
        if ratios:
            summary[direction] = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"{direction}: geometric mean of cuDNN's time over ours {summary[direction]:.2f} "
                  f"({len(ratios)} layers timed)")
    report = {"command": f"python bench/gpu_backward_layers.py --batch {args.batch} --dtype {args.dtype}",
              "device": torch.cuda.get_device_name(), "target": target, "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "geomean_cudnn_over_ours": summary, "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_backward_layers.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

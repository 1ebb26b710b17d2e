"""Benchmark: the ResNet-18 convolution layers one by one, every applicable solver vs PyTorch CPU.

    python bench/cpu_conv_layers.py [--repeat 50]

Batch 1, fp32, NHWC activations, conv + bias + ReLU (fused in OpenPrim; PyTorch runs conv2d with
bias then relu, channels_last). Prints GFLOP/s per solver and the heuristic's choice.
"""
from __future__ import annotations

import argparse

import numpy as np
from timing import median_time

import openprim
from openprim.base.target import parse_target
from openprim.pyfrontend import Graph
from openprim.solvers import applicable
from openprim.solvers.problem import ConvProblem

CPU = parse_target("cpu")

# (C, H, K, R, stride): ResNet-18's distinct convolutions at 224x224
LAYERS = [(3, 224, 64, 7, 2), (64, 56, 64, 3, 1), (64, 56, 128, 3, 2), (64, 56, 128, 1, 2), (128, 28, 128, 3, 1),
          (128, 28, 256, 3, 2), (256, 14, 256, 3, 1), (256, 14, 512, 3, 2), (512, 7, 512, 3, 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    import torch
    rng = np.random.default_rng(0)
    print(f"{'layer':28s} {'solver':18s} {'ms':>8s} {'GFLOP/s':>8s}   {'PyTorch ms':>10s} {'ratio':>6s}")
    for C, H, K, R, S in LAYERS:
        P = R // 2
        OH = (H + 2 * P - R) // S + 1
        flops = 2.0 * OH * OH * K * C * R * R
        x = rng.standard_normal((1, H, H, C)).astype(np.float32)
        w = (rng.standard_normal((K, R, R, C)) / np.sqrt(C * R * R)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32)
        xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        wt = torch.tensor(w).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        bt = torch.tensor(b)
        with torch.inference_mode():
            t_torch = median_time(lambda: torch.relu(torch.nn.functional.conv2d(xt, wt, bt, S, P)), args.repeat)
        name = f"{C}x{H}x{H} -> {K} {R}x{R}/s{S}"
        problem = ConvProblem(1, C, H, H, K, R, R, OH, OH, (S, S), (P,) * 4, (1, 1), 1, "NHWC", "RSCK", "f32",
                              "bias+relu")
        default = None
        for solver, reason in applicable(problem, "conv2d", CPU):
            if reason or solver.name == "conv_reference":
                continue
            g = Graph(layout="NHWC")
            xi = g.input("x", x.shape)
            g.output(g.conv2d(xi, g.param("w", w), g.param("b", b), stride=S, padding=P, activation="relu"))
            exe = openprim.compile(g, solver=solver.name)
            exe(x)
            t = median_time(exe.run_steps, args.repeat)
            if default is None:
                default = min((s for s, r in applicable(problem, "conv2d", CPU) if r is None),
                              key=lambda s: s.cost(problem, CPU)).name
            mark = "*" if solver.name == default else " "
            print(f"{name:28s} {solver.name + mark:18s} {t * 1e3:8.3f} {flops / t / 1e9:8.1f}   "
                  f"{t_torch * 1e3:10.3f} {t_torch / t:6.2f}")
    print("* = the heuristic's choice; ratio = PyTorch time / OpenPrim time (>1: OpenPrim faster)")


if __name__ == "__main__":
    main()

"""Benchmark: the ResNet-18 convolution layers one by one, every applicable solver vs ONNX Runtime and PyTorch CPU.

    python bench/cpu_conv_layers.py [--repeat 50]

Batch 1, fp32, NHWC activations, conv + bias + ReLU (fused in OpenPrim). The peers, on every core: ONNX
Runtime runs a Conv + Relu graph on the NCHW input (bench/timing.ort_layer: all graph optimizations, which
fuse the Relu into the Conv), PyTorch runs conv2d with bias then relu, channels_last, under inference_mode.
Prints GFLOP/s per solver, the heuristic's choice, and each peer's time over ours.
"""
from __future__ import annotations

import argparse

import numpy as np
from onnx import helper
from timing import median_time, ort_layer, torch_cpu_threads

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
    threads = torch_cpu_threads()
    rng = np.random.default_rng(0)
    print(f"{'layer':28s} {'solver':18s} {'ms':>8s} {'GFLOP/s':>8s}   {'ORT ms':>8s} {'ratio':>6s}   "
          f"{'PyTorch ms':>10s} {'ratio':>6s}")
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
        sess = ort_layer([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[P] * 4, strides=[S, S]),
                          helper.make_node("Relu", ["c"], ["y"])], (1, C, H, H),
                         {"w": w.transpose(0, 3, 1, 2), "b": b})
        feed = {"x": np.ascontiguousarray(x.transpose(0, 3, 1, 2))}
        t_ort = median_time(lambda: sess.run(None, feed), args.repeat)
        with torch.inference_mode():
            want = torch.relu(torch.nn.functional.conv2d(xt, wt, bt, S, P)).numpy()
            t_torch = median_time(lambda: torch.relu(torch.nn.functional.conv2d(xt, wt, bt, S, P)), args.repeat)
        ort_err = np.abs(sess.run(None, feed)[0] - want).max() / np.abs(want).max()
        assert ort_err < 1e-4, f"ONNX Runtime's output differs from PyTorch's: {ort_err:.1e}"
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
                  f"{t_ort * 1e3:8.3f} {t_ort / t:6.2f}   {t_torch * 1e3:10.3f} {t_torch / t:6.2f}")
    print(f"* = the heuristic's choice; ratio = the peer's time / OpenPrim's (>1: OpenPrim faster); "
          f"{threads} threads for ONNX Runtime and PyTorch")


if __name__ == "__main__":
    main()

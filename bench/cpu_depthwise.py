"""Benchmark: MobileNetV2's depthwise convolutions one by one on the CPU, the vector kernel of conv_depthwise
(kernels/cpu/depthwise.py) against its linalg schedule (params kernel=0, the solver's former default
tiles) and PyTorch channels_last.

    python bench/cpu_depthwise.py [--batches 1,8] [--rounds 3] [--dtype f32]

Each layer is a 3x3 depthwise convolution, padding 1, + bias + relu6 (BN folded, as in the network), fused
in OpenPrim; PyTorch runs conv2d with bias then an in-place relu6. The three are timed in interleaved
rounds (rotating order, each the median of its runs after a sleep and warm-up); the table gives the median
over rounds, in ms and in GB/s of the compulsory traffic (input + output + filter + bias, once each).
Every OpenPrim output is checked against PyTorch's first.
"""
from __future__ import annotations

import argparse

import numpy as np
from timing import median_time

import openprim
from openprim.pyfrontend import Graph
from openprim.solvers import SOLVERS

# (C, H, stride) of MobileNetV2's depthwise convolutions at 224x224 (torchvision's order; repeats once)
LAYERS = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2), (384, 14, 1),
          (576, 14, 1), (576, 14, 2), (960, 7, 1)]
ITEM = {"f32": 4, "f16": 2, "bf16": 2}


def old_params(p, target):
    """conv_depthwise's linalg schedule with the tiles it chose before the vector kernel."""
    ct = next((c for c in (32, 16, 8) if p.c % c == 0), p.c)
    wt = next((w for w in (4, 7, 2) if p.ow % w == 0), 1)
    return {"wt": wt, "ct": ct, "kernel": 0}


def compiled(x, w, b, stride, dtype, old: bool):
    """The depthwise conv + bias + relu6 on x (NHWC), by the vector kernel or (old) the linalg schedule."""
    solver = SOLVERS["conv_depthwise"]
    g = Graph(layout="NHWC", dtype=dtype)
    xi = g.input("x", x.shape)
    g.output(g.relu6(g.conv2d(xi, g.param("w", w), g.param("b", b), stride=stride, padding=1, groups=x.shape[3])))
    if old:
        solver.default_params = old_params
    try:
        exe = openprim.compile(g, solver="conv_depthwise", cache=False)
    finally:
        vars(solver).pop("default_params", None)
    assert len(exe.plan["steps"]) == 1, "the epilogue was not fused"
    return exe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="f32", choices=sorted(ITEM))
    args = ap.parse_args()
    import torch
    torch.set_num_threads(2)
    tdtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    rng = np.random.default_rng(0)
    rows = []
    for n in map(int, args.batches.split(",")):
        for C, H, stride in LAYERS:
            x = rng.standard_normal((n, H, H, C))
            w = rng.standard_normal((C, 3, 3, 1)) / 3
            b = rng.standard_normal(C)
            host = x.astype(np.float32)
            runners = {"old": compiled(x, w, b, stride, args.dtype, True),
                       "new": compiled(x, w, b, stride, args.dtype, False)}
            xt = torch.tensor(host).permute(0, 3, 1, 2).to(tdtype).contiguous(memory_format=torch.channels_last)
            wt = torch.tensor(w).permute(0, 3, 1, 2).to(tdtype).contiguous(memory_format=torch.channels_last)
            bt = torch.tensor(b).to(tdtype)

            def torch_run():
                with torch.inference_mode():
                    return torch.nn.functional.relu6(torch.nn.functional.conv2d(xt, wt, bt, stride, 1, 1, C),
                                                     inplace=True)
            want = torch_run().float().permute(0, 2, 3, 1).numpy()
            for name, exe in runners.items():
                got = np.asarray(exe(host), np.float64)
                err = np.abs(got - want).max() / np.abs(want).max()
                assert err < (1e-5 if args.dtype == "f32" else 2e-2), f"{name}: relative error {err:.2e}"
            OH = (H + 2 - 3) // stride + 1
            nbytes = ITEM[args.dtype] * (n * H * H * C + n * OH * OH * C + 9 * C + C)
            repeat = max(5, min(200, int(2e-1 / (nbytes / 5e9))))
            fns = {"old": runners["old"].run_steps, "new": runners["new"].run_steps, "torch": torch_run}
            times = {k: [] for k in fns}
            for r in range(args.rounds):
                order = list(fns)[r % 3:] + list(fns)[:r % 3]
                for k in order:
                    times[k].append(median_time(fns[k], repeat))
            t = {k: float(np.median(v)) for k, v in times.items()}
            rows.append((n, C, H, stride, t, nbytes))
            print(f"b{n} {C:4d}x{H:3d}x{H:<3d} s{stride}  " +
                  "  ".join(f"{k} {t[k] * 1e3:7.3f} ms {nbytes / t[k] / 1e9:5.1f} GB/s" for k in fns) +
                  f"  new/old {t['old'] / t['new']:4.2f}x  torch/new {t['torch'] / t['new']:4.2f}x", flush=True)
    print()
    print("| batch | layer (C x H x W, stride) | old ms | new ms | torch ms | old GB/s | new GB/s | torch GB/s "
          "| new vs old | new vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, C, H, stride, t, nbytes in rows:
        gbs = {k: nbytes / v / 1e9 for k, v in t.items()}
        print(f"| {n} | {C}x{H}x{H} s{stride} | {t['old'] * 1e3:.3f} | {t['new'] * 1e3:.3f} | {t['torch'] * 1e3:.3f} "
              f"| {gbs['old']:.1f} | {gbs['new']:.1f} | {gbs['torch']:.1f} | {t['old'] / t['new']:.2f}x "
              f"| {t['torch'] / t['new']:.2f}x |")
    for n in sorted({r[0] for r in rows}):
        sums = {k: sum(r[4][k] for r in rows if r[0] == n) for k in ("old", "new", "torch")}
        print(f"batch {n}: all layers old {sums['old'] * 1e3:.2f} ms, new {sums['new'] * 1e3:.2f} ms, "
              f"torch {sums['torch'] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

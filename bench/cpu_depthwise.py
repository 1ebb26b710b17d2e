"""Benchmark: MobileNetV2's depthwise convolutions one by one on the CPU, the vector kernel of conv_depthwise
(kernels/cpu/depthwise.py) against its linalg schedule (params kernel=0, the solver's former default
tiles), ONNX Runtime and PyTorch channels_last.

    python bench/cpu_depthwise.py [--batches 1,8] [--rounds 3] [--dtype f32]

Each layer is a 3x3 depthwise convolution, padding 1, + bias + relu6 (BN folded, as in the network), fused
in OpenPrim. The peers run on every core: ONNX Runtime a Conv (group = C) + Clip(0, 6) graph on the NCHW
input (bench/timing.ort_layer, all graph optimizations; f32 only: its CPU provider has no f16/bf16 depthwise
convolution), PyTorch conv2d with bias then an in-place relu6 (inference_mode). They are timed in
interleaved rounds (rotating order, each the median of its runs after a sleep and warm-up); the table gives
the median over rounds, in ms and in GB/s of the compulsory traffic (input + output + filter + bias, once
each). Every OpenPrim (and ONNX Runtime) output is checked against PyTorch's first.
"""
from __future__ import annotations

import argparse

import numpy as np
from onnx import helper
from timing import median_time, ort_layer, torch_cpu_threads

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
    threads = torch_cpu_threads()
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
            fns = {"old": runners["old"].run_steps, "new": runners["new"].run_steps}
            if args.dtype == "f32":
                sess = ort_layer([helper.make_node("Conv", ["x", "w", "b"], ["c"], group=C, pads=[1] * 4,
                                                   strides=[stride] * 2),
                                  helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], (n, C, H, H),
                                 {"w": w.transpose(0, 3, 1, 2), "b": b, "lo": np.float32(0), "hi": np.float32(6)})
                feed = {"x": np.ascontiguousarray(host.transpose(0, 3, 1, 2))}
                ort_want = sess.run(None, feed)[0].transpose(0, 2, 3, 1)
                err = np.abs(ort_want - want).max() / np.abs(want).max()
                assert err < 1e-5, f"ONNX Runtime: relative error {err:.2e}"
                fns["ort"] = lambda: sess.run(None, feed)
            fns["torch"] = torch_run
            times = {k: [] for k in fns}
            for r in range(args.rounds):
                order = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
                for k in order:
                    times[k].append(median_time(fns[k], repeat))
            t = {k: float(np.median(v)) for k, v in times.items()}
            rows.append((n, C, H, stride, t, nbytes))
            print(f"b{n} {C:4d}x{H:3d}x{H:<3d} s{stride}  " +
                  "  ".join(f"{k} {t[k] * 1e3:7.3f} ms {nbytes / t[k] / 1e9:5.1f} GB/s" for k in fns) +
                  f"  new/old {t['old'] / t['new']:4.2f}x" +
                  (f"  ort/new {t['ort'] / t['new']:4.2f}x" if "ort" in t else "") +
                  f"  torch/new {t['torch'] / t['new']:4.2f}x", flush=True)
    print()
    print(f"ONNX Runtime and PyTorch on {threads} threads")
    print("| batch | layer (C x H x W, stride) | old ms | new ms | ORT ms | torch ms | old GB/s | new GB/s | ORT GB/s "
          "| torch GB/s | new vs old | new vs ORT | new vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def cell(t, k, fmt, scale=1.0):
        return format(t[k] * scale, fmt) if k in t else "—"
    for n, C, H, stride, t, nbytes in rows:
        gbs = {k: nbytes / v / 1e9 for k, v in t.items()}
        vs = {k: t[k] / t["new"] for k in t}
        print(f"| {n} | {C}x{H}x{H} s{stride} | {t['old'] * 1e3:.3f} | {t['new'] * 1e3:.3f} | {cell(t, 'ort', '.3f', 1e3)} "
              f"| {t['torch'] * 1e3:.3f} | {gbs['old']:.1f} | {gbs['new']:.1f} | {cell(gbs, 'ort', '.1f')} "
              f"| {gbs['torch']:.1f} | {vs['old']:.2f}x | {cell(vs, 'ort', '.2f')}{'x' if 'ort' in vs else ''} | {vs['torch']:.2f}x |")
    for n in sorted({r[0] for r in rows}):
        sums = {k: sum(r[4][k] for r in rows if r[0] == n) for k in ("old", "new", "ort", "torch") if k in rows[0][4]}
        print(f"batch {n}: all layers " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in sums.items()))


if __name__ == "__main__":
    main()

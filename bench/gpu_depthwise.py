"""The depthwise layers of MobileNetV2 (batch 32, 224x224, NHWC, 3x3 + bias + ReLU6) on the GPU against
PyTorch (cuDNN, channels_last) and against the device-to-device copy, in the same run.

    python bench/gpu_depthwise.py build DIR [--target nvvm:sm_90] [--dtype f16 ...] [--variants 4x1x16 4x2x8 ...]
    python bench/gpu_depthwise.py run DIR               # GPU machine: runtime + torch

Achieved bandwidth counts the bytes the layer must move once: input, filter, bias and output. It is
given as a fraction of two copies timed in the same run: a 256 MiB device-to-device copy (the peak) and
a copy of the layer's own bytes (input + output sized, which pays the same launch and tail as the
layer). Each layer's output is checked against PyTorch in float64 on the same input before it is timed.
Every kernel is timed inside a CUDA graph (ours: 50 runs captured in one graph; PyTorch's, cuDNN through
eager F.conv2d with cudnn.benchmark: bench/timing.layer_ms, triton's do_bench_cudagraph), since the small
layers are shorter than a launch's host cost;
`launched_ms` keeps our time with one launch per run. A variant WTxHTxVBYTES forces conv_depthwise_gpu's
parameters (pixels per thread along W, output rows per thread, vector bytes); without --variants the
heuristic's choice is built.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_path import import_runtime  # noqa: E402
from timing import layer_ms, peers_environment  # noqa: E402

# (channels, input size, stride) of MobileNetV2's depthwise convolutions at 224x224
LAYERS = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2), (384, 14, 1),
          (576, 14, 1), (576, 14, 2), (960, 7, 1)]
BATCH = 32


def build(directory, target, dtypes, variants):
    """Compile the layers into DIR, once per dtype and variant ("" = the heuristic's parameters)."""
    from openprim import compiler
    from openprim.base.files import atomic_file
    from openprim.pyfrontend import Graph
    from openprim.solvers import SOLVERS
    solver = SOLVERS["conv_depthwise_gpu"]
    heuristic = solver.default_params
    os.makedirs(directory, exist_ok=True)
    cases = {}
    for dtype in dtypes:
        rng = np.random.default_rng(0)
        for c, h, s in LAYERS:
            w, b = rng.standard_normal((c, 3, 3, 1)) / 3, rng.standard_normal(c) * 0.1
            for variant in variants:
                name = f"dw{c}x{h}s{s}_{dtype}" + (f"_{variant}" if variant else "")
                if variant:
                    wt, ht, vb = map(int, variant.split("x"))
                    solver.default_params = lambda p, target: {"wt": wt, "ht": ht, "vbytes": vb}
                else:
                    solver.default_params = heuristic
                g = Graph(name="dw", layout="NHWC", dtype=dtype)
                y = g.conv2d(g.input("x", (BATCH, h, h, c)), g.param("w", w), g.param("b", b), stride=s, padding=1,
                             groups=c)
                g.output(g.relu6(y))
                t0 = time.perf_counter()
                compiler.save(g, os.path.join(directory, name + ".oprim"), target)
                np.save(os.path.join(directory, name + ".w.npy"), w)
                np.save(os.path.join(directory, name + ".b.npy"), b)
                cases[name] = dict(c=c, h=h, stride=s, dtype=dtype, variant=variant or "heuristic")
                print(f"{name}: compiled in {time.perf_counter() - t0:.2f} s")
    with atomic_file(os.path.join(directory, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def run(directory):
    import torch
    import triton.testing
    F = torch.nn.functional
    runtime = import_runtime()
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    big = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(big)
    copy_gbs = 2 * big.numel() / triton.testing.do_bench(lambda: dst.copy_(big), return_mode="median") / 1e6
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    rows, ours, theirs, layers = [], {}, {}, {}
    for name, m in json.load(open(os.path.join(directory, "cases.json"))).items():
        c, h, s, dt = m["c"], m["h"], m["stride"], m["dtype"]
        oh = (h - 1) // s + 1
        nbytes = (4 if dt == "f32" else 2) * (BATCH * h * h * c + BATCH * oh * oh * c + 10 * c)
        x = np.random.default_rng(1).standard_normal((BATCH, h, h, c)).astype(np.float32)
        if (c, h, s, dt) not in layers:  # PyTorch's output, its time and a same-size copy's, once per layer
            w = torch.from_numpy(np.load(os.path.join(directory, name + ".w.npy"))).permute(0, 3, 1, 2).contiguous()
            b = torch.from_numpy(np.load(os.path.join(directory, name + ".b.npy")))
            tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]

            def fn(xt, wt, bt):
                return F.relu6(F.conv2d(xt, wt, bt, stride=s, padding=1, groups=c))
            xt = torch.from_numpy(x).to(dev).permute(0, 3, 1, 2)
            ref = fn(xt.to(tdt).double(), w.to(tdt).double().to(dev), b.to(tdt).double().to(dev))
            xq = xt.to(tdt).contiguous(memory_format=torch.channels_last)
            wq, bq = w.to(dev).to(tdt).contiguous(memory_format=torch.channels_last), b.to(dev).to(tdt)
            same = torch.empty(nbytes // 2, dtype=torch.uint8, device=dev)
            same_out = torch.empty_like(same)
            layers[c, h, s, dt] = (
                ref.permute(0, 2, 3, 1).cpu().numpy(),
                layer_ms(lambda: fn(xq, wq, bq)),
                layer_ms(lambda: same_out.copy_(same)))
        ref, torch_ms, same_ms = layers[c, h, s, dt]
        net = runtime.load(os.path.join(directory, name + ".oprim"))
        err = float(np.abs(np.asarray(net(x), np.float64) - ref).max() / np.abs(ref).max())
        launched_ms = net.time_ms(repeat=100)
        ms = net.time_ms(repeat=20, captured=50)
        gbs, same_gbs = nbytes / ms / 1e6, nbytes / same_ms / 1e6
        row = dict(case=name, variant=m.get("variant", "heuristic"), ms=ms, launched_ms=launched_ms,
                   torch_ms=torch_ms, gbs=gbs, of_copy=gbs / copy_gbs, of_same_size_copy=gbs / same_gbs, rel_err=err)
        rows.append(row)
        key = (dt, row["variant"])
        ours[key], theirs[key] = ours.get(key, 0.0) + ms, theirs.get(key, 0.0) + torch_ms
        print(f"{name:26s} ours {ms:7.4f} ms  torch {torch_ms:7.4f} ms  {gbs:6.0f} GB/s = {gbs / copy_gbs:4.0%} of copy,"
              f" {gbs / same_gbs:4.0%} of a same-size copy  err {err:.1e}")
    for key in ours:
        print(f"all layers {key}: ours {ours[key]:.3f} ms, torch {theirs[key]:.3f} ms "
              f"({theirs[key] / ours[key]:.2f}x)")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_depthwise.json"), "w") as f:
            json.dump({"environment": peers_environment(), "peer": "cudnn (torch eager F.conv2d, channels_last)",
                       "copy_gbs": copy_gbs, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("dir")
    ap.add_argument("--target", default="nvvm:sm_90")
    ap.add_argument("--dtype", nargs="+", default=["f16"])
    ap.add_argument("--variants", nargs="+", default=[""], help="WTxHTxVBYTES each (default: the heuristic's)")
    a = ap.parse_args()
    build(a.dir, a.target, a.dtype, a.variants) if a.mode == "build" else run(a.dir)

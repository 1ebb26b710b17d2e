"""The depthwise layers of MobileNetV2 (batch 32, 224x224, NHWC, 3x3 + bias + ReLU6) on the GPU against
PyTorch (cuDNN, channels_last) and against the device-to-device copy, in the same run.

    python bench/gpu_depthwise.py build DIR [--target nvvm:sm_90] [--dtype f16] [--wt 4]   # here (needs MLIR)
    python bench/gpu_depthwise.py run DIR                                          # GPU machine: runtime + torch

Achieved bandwidth counts the bytes the layer must move once: input, filter, bias and output. Each
layer's output is checked against PyTorch in float64 on the same input before it is timed.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from runtime_path import import_runtime  # noqa: E402

# (channels, input size, stride) of MobileNetV2's depthwise convolutions at 224x224
LAYERS = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2), (384, 14, 1),
          (576, 14, 1), (576, 14, 2), (960, 7, 1)]
BATCH = 32


def build(directory, target, dtype, wt=0):
    """Compile the layers into DIR; wt > 0 forces conv_depthwise_gpu's output pixels per thread."""
    from openprim import compiler
    from openprim.base.files import atomic_file
    from openprim.pyfrontend import Graph
    from openprim.solvers import SOLVERS
    if wt:
        SOLVERS["conv_depthwise_gpu"].default_params = lambda p, target: {"wt": wt}
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)
    cases = {}
    for c, h, s in LAYERS:
        name = f"dw{c}x{h}s{s}_{dtype}"
        w, b = rng.standard_normal((c, 3, 3, 1)) / 3, rng.standard_normal(c) * 0.1
        g = Graph(name="dw", layout="NHWC", dtype=dtype)
        y = g.conv2d(g.input("x", (BATCH, h, h, c)), g.param("w", w), g.param("b", b), stride=s, padding=1, groups=c)
        g.output(g.relu6(y))
        t0 = time.perf_counter()
        compiler.save(g, os.path.join(directory, name + ".oprim"), target)
        np.save(os.path.join(directory, name + ".w.npy"), w)
        np.save(os.path.join(directory, name + ".b.npy"), b)
        cases[name] = dict(c=c, h=h, stride=s, dtype=dtype)
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
    rows, ours, theirs = [], 0.0, 0.0
    for name, m in json.load(open(os.path.join(directory, "cases.json"))).items():
        net = runtime.load(os.path.join(directory, name + ".oprim"))
        c, h, s = m["c"], m["h"], m["stride"]
        x = np.random.default_rng(1).standard_normal((BATCH, h, h, c)).astype(np.float32)
        y = np.asarray(net(x), np.float64)
        w = torch.from_numpy(np.load(os.path.join(directory, name + ".w.npy"))).permute(0, 3, 1, 2).contiguous()
        b = torch.from_numpy(np.load(os.path.join(directory, name + ".b.npy")))
        tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[m["dtype"]]

        def fn(xt, wt, bt):
            return F.relu6(F.conv2d(xt, wt, bt, stride=s, padding=1, groups=c))
        xt = torch.from_numpy(x).to(dev).permute(0, 3, 1, 2)
        ref = fn(xt.to(tdt).double(), w.to(tdt).double().to(dev), b.to(tdt).double().to(dev))
        ref = ref.permute(0, 2, 3, 1).cpu().numpy()
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        xq = xt.to(tdt).contiguous(memory_format=torch.channels_last)
        wq, bq = w.to(dev).to(tdt).contiguous(memory_format=torch.channels_last), b.to(dev).to(tdt)
        torch_ms = triton.testing.do_bench(lambda: fn(xq, wq, bq), return_mode="median")
        ms = net.time_ms(repeat=100)
        oh = (h - 1) // s + 1
        item = 4 if m["dtype"] == "f32" else 2
        gbs = item * (BATCH * h * h * c + BATCH * oh * oh * c + 10 * c) / ms / 1e6
        row = dict(case=name, ms=ms, torch_ms=torch_ms, gbs=gbs, of_copy=gbs / copy_gbs, rel_err=err)
        rows.append(row)
        ours, theirs = ours + ms, theirs + torch_ms
        print(f"{name:18s} ours {ms:7.4f} ms  torch {torch_ms:7.4f} ms  {gbs:6.0f} GB/s = {gbs / copy_gbs:4.0%} of copy"
              f"  err {err:.1e}")
    print(f"all layers: ours {ours:.3f} ms, torch {theirs:.3f} ms ({theirs / ours:.2f}x)")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_depthwise.json"), "w") as f:
            json.dump({"copy_gbs": copy_gbs, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("dir")
    ap.add_argument("--target", default="nvvm:sm_90")
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--wt", type=int, default=0, help="force the output pixels per thread (default: the heuristic's)")
    a = ap.parse_args()
    build(a.dir, a.target, a.dtype, a.wt) if a.mode == "build" else run(a.dir)

"""global_avg_pool (kernels/gpu/pool.py) on the squeeze-and-excitation shapes of EfficientNet-B0 and
MobileNetV3-Large (224x224, NHWC, batch 32) against PyTorch (x.mean over H, W and adaptive_avg_pool2d
on channels_last) and against the device-to-device copy, in the same run.

    python bench/gpu_pool.py build DIR [--target nvvm:sm_90] [--dtype f16] [--batch 32]   # here (needs MLIR)
    python bench/gpu_pool.py run DIR                                                   # GPU machine: runtime + torch

Achieved bandwidth counts the bytes the pool must move once (input and output); "at copy" is the time
those bytes take at the measured copy bandwidth. Each output is checked against PyTorch in float64 on
the same input before it is timed. PyTorch's two calls are timed with bench/timing.layer_ms (captured back to
back in a CUDA graph, median), ours likewise (time_ms with captured=50; launched_ms: one launch per run);
$OUT/gpu_pool.json holds the torch/triton versions under environment.
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

# (network, image size, channels) of the distinct SE pools (and the final pool) at 224x224
SHAPES = [("effnet_b0", 112, 32), ("effnet_b0", 56, 96), ("effnet_b0", 56, 144), ("effnet_b0", 28, 144),
          ("effnet_b0", 28, 240), ("effnet_b0", 14, 240), ("effnet_b0", 14, 480), ("effnet_b0", 14, 672),
          ("effnet_b0", 7, 672), ("effnet_b0", 7, 1152), ("effnet_b0", 7, 1280),
          ("mnv3_large", 28, 72), ("mnv3_large", 28, 120), ("mnv3_large", 14, 480), ("mnv3_large", 14, 672),
          ("mnv3_large", 7, 672), ("mnv3_large", 7, 960)]
ITEM = {"f32": 4, "f16": 2, "bf16": 2}


def build(directory, target, dtype, batch):
    from openprim import compiler
    from openprim.base.files import atomic_file
    from openprim.pyfrontend import Graph
    os.makedirs(directory, exist_ok=True)
    cases = {}
    for net, h, c in SHAPES:
        name = f"gap{h}x{c}_{dtype}"
        if name in cases:
            cases[name]["nets"].append(net)
            continue
        g = Graph(name="gap", layout="NHWC", dtype=dtype)
        g.output(g.global_avg_pool(g.input("x", (batch, h, h, c))))
        t0 = time.perf_counter()
        compiler.save(g, os.path.join(directory, name + ".oprim"), target)
        cases[name] = dict(n=batch, h=h, c=c, dtype=dtype, nets=[net])
        print(f"{name}: compiled in {time.perf_counter() - t0:.2f} s")
    with atomic_file(os.path.join(directory, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def run(directory):
    import torch
    import triton.testing
    runtime = import_runtime()
    dev = torch.device("cuda")
    big = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(big)
    copy_gbs = 2 * big.numel() / triton.testing.do_bench(lambda: dst.copy_(big), return_mode="median") / 1e6
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    rows = []
    for name, m in json.load(open(os.path.join(directory, "cases.json"))).items():
        net = runtime.load(os.path.join(directory, name + ".oprim"))
        n, h, c = m["n"], m["h"], m["c"]
        tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[m["dtype"]]
        x = np.random.default_rng(1).uniform(-1.0, 2.0, (n, h, h, c)).astype(np.float32)
        y = np.asarray(net(x), np.float64).reshape(n, c)
        xq = torch.from_numpy(x).to(dev).to(tdt)                      # NHWC = channels_last NCHW
        ref = xq.double().mean((1, 2)).cpu().numpy()
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        nchw = xq.permute(0, 3, 1, 2)                                  # a channels_last view, no copy
        mean_ms = layer_ms(lambda: xq.mean((1, 2)))
        adaptive_ms = layer_ms(lambda: torch.nn.functional.adaptive_avg_pool2d(nchw, 1))
        launched_ms = net.time_ms(repeat=200)          # one launch per run, as before
        ms = net.time_ms(repeat=20, captured=50)         # back to back in a graph, as layer_ms times PyTorch
        moved = ITEM[m["dtype"]] * (n * h * h * c + n * c)
        gbs = moved / ms / 1e6
        at_copy = moved / copy_gbs / 1e6
        row = dict(case=name, nets=m["nets"], ms=ms, launched_ms=launched_ms, torch_mean_ms=mean_ms,
                   torch_adaptive_ms=adaptive_ms,
                   gbs=gbs, of_copy=gbs / copy_gbs, copy_ms=at_copy, rel_err=err)
        rows.append(row)
        print(f"{name:16s} ours {ms * 1e3:7.1f} us  torch mean {mean_ms * 1e3:7.1f} us  adaptive "
              f"{adaptive_ms * 1e3:7.1f} us  {gbs:5.0f} GB/s = {gbs / copy_gbs:4.0%} of copy "
              f"(copy time {at_copy * 1e3:6.1f} us)  err {err:.1e}")
    ours, theirs = sum(r["ms"] for r in rows), sum(r["torch_mean_ms"] for r in rows)
    print(f"all shapes: ours {ours:.3f} ms, torch mean {theirs:.3f} ms ({theirs / ours:.2f}x)")
    out = os.environ.get("OUT")
    if out:
        tmp = os.path.join(out, "gpu_pool.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"environment": peers_environment(), "peer": "torch eager: x.mean((1, 2)), adaptive_avg_pool2d",
                       "copy_gbs": copy_gbs, "rows": rows}, f, indent=1)
        os.replace(tmp, os.path.join(out, "gpu_pool.json"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("dir")
    ap.add_argument("--target", default="nvvm:sm_90")
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    build(a.dir, a.target, a.dtype, a.batch) if a.mode == "build" else run(a.dir)

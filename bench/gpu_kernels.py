"""GPU kernels against PyTorch (cuDNN) on the same GPU, in the same run.

    python bench/gpu_kernels.py build DIR [--target nvvm:sm_90]   # here: compile the cases (needs MLIR)
    python bench/gpu_kernels.py run DIR                            # on the GPU machine: runtime + torch only

Cases: the ResNet-50 3x3 convolution N=32, C=K=128, 28x28 (fp32 and fp16, NCHW and NHWC) against
torch.nn.functional.conv2d with TF32 off and with PyTorch's default; and memory-bound kernels (relu,
batch norm, 3x3/s2 max pool, softmax over rows) as achieved bandwidth over a device-to-device copy.
Every case is also checked against torch in float64 on the same random input before it is timed.
"""
import argparse
import glob
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from runtime_path import import_runtime  # noqa: E402

CONV = dict(n=32, c=128, h=28, w=28, k=128, r=3, stride=1, pad=1)


def cases():
    """name -> (builder of the Graph, metadata the run side needs to build the torch reference)."""
    from openprim.frontend import Graph
    rng = np.random.default_rng(0)
    out = {}
    for dtype in ("f32", "f16"):
        for layout in ("NCHW", "NHWC"):
            p = CONV
            w = rng.standard_normal((p["k"], p["c"], p["r"], p["r"])) * np.sqrt(2 / (p["c"] * 9))

            def conv(dtype=dtype, layout=layout, w=w):
                g = Graph(name="conv", layout=layout, dtype=dtype)
                shape = (p["n"], p["c"], p["h"], p["w"]) if layout == "NCHW" else (p["n"], p["h"], p["w"], p["c"])
                x = g.input("x", shape)
                wt = g.param("w", w if layout == "NCHW" else w.transpose(0, 2, 3, 1))
                g.output(g.conv2d(x, wt, stride=p["stride"], padding=p["pad"]))
                return g
            out[f"conv3x3_{dtype}_{layout}"] = (conv, {"kind": "conv", "dtype": dtype, "layout": layout, "w": w})
    shape = (32, 56, 56, 128)
    for dtype in ("f32", "f16"):
        def relu(dtype=dtype):
            g = Graph(name="relu", layout="NHWC", dtype=dtype)
            g.output(g.relu(g.input("x", shape)))
            return g

        def bn(dtype=dtype):
            g = Graph(name="bn", layout="NHWC", dtype=dtype)
            c = shape[3]
            prm = [g.param(n, v) for n, v in (("s", rng.uniform(0.5, 1.5, c)), ("b", rng.standard_normal(c)),
                                            ("m", rng.standard_normal(c)), ("v", rng.uniform(0.5, 1.5, c)))]
            g.output(g.batch_norm(g.input("x", shape), *prm))
            return g

        def pool(dtype=dtype):
            g = Graph(name="pool", layout="NHWC", dtype=dtype)
            g.output(g.max_pool2d(g.input("x", shape), 3, stride=2, padding=1))
            return g

        def softmax(dtype=dtype):
            g = Graph(name="softmax", dtype=dtype)
            g.output(g.softmax(g.input("x", (8192, 1000))))
            return g
        for name, fn in (("relu", relu), ("batch_norm", bn), ("max_pool3x3s2", pool), ("softmax", softmax)):
            out[f"{name}_{dtype}"] = (fn, {"kind": name, "dtype": dtype})
    return out


def build(directory, target):
    from openprim import compiler
    os.makedirs(directory, exist_ok=True)
    summary = {}
    for name, (fn, meta) in cases().items():
        t0 = time.perf_counter()
        g = fn()
        info = compiler.save(g, os.path.join(directory, name + ".oprim"), target)
        meta = {k: v for k, v in meta.items() if k != "w"}
        if "w" in cases()[name][1]:
            np.save(os.path.join(directory, name + ".w.npy"), cases()[name][1]["w"])
        summary[name] = {**meta, "compile_s": time.perf_counter() - t0, "input": g.inputs[0].shape}
        print(f"{name}: compiled for {target} in {summary[name]['compile_s']:.2f} s")
    with open(os.path.join(directory, "cases.json"), "w") as f:
        json.dump(summary, f, indent=1)


def torch_reference(torch, meta, x, directory, name):
    """The same computation with PyTorch on the GPU, for the given input (numpy, the case's layout)."""
    F = torch.nn.functional
    kind = meta["kind"]
    if kind == "conv":
        w = torch.from_numpy(np.load(os.path.join(directory, name + ".w.npy")))
        nhwc = meta["layout"] == "NHWC"

        def fn(xt, wt):
            y = F.conv2d(xt.permute(0, 3, 1, 2) if nhwc else xt, wt, stride=CONV["stride"], padding=CONV["pad"])
            return y.permute(0, 2, 3, 1) if nhwc else y
        return fn, w
    if kind == "relu":
        return (lambda xt, _: F.relu(xt)), None
    if kind == "max_pool3x3s2":
        return (lambda xt, _: F.max_pool2d(xt.permute(0, 3, 1, 2), 3, 2, 1).permute(0, 2, 3, 1)), None
    if kind == "softmax":
        return (lambda xt, _: torch.softmax(xt, -1)), None
    return None, None


def run(directory):
    import torch
    import triton.testing
    runtime = import_runtime()
    summary = json.load(open(os.path.join(directory, "cases.json")))
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    rows = []
    # Device-to-device copy bandwidth (bytes read + written), the ceiling of the memory-bound kernels.
    big = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(big)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(big), return_mode="median")
    copy_gbs = 2 * big.numel() / copy_ms / 1e6
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    for name, meta in summary.items():
        net = runtime.load(os.path.join(directory, name + ".oprim"))
        shape = meta["input"]
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        y = np.asarray(net(x), np.float64)
        tdt = {"f32": torch.float32, "f16": torch.float16}[meta["dtype"]]
        fn, w = torch_reference(torch, meta, x, directory, name)
        xt = torch.from_numpy(x).to(dev)
        row = {"case": name}
        ms = net.time_ms(repeat=50)
        if fn is not None:
            ref = fn(xt.double(), None if w is None else w.to(dev).double()).cpu().numpy()
            row["rel_err"] = float(np.abs(y - ref).max() / np.abs(ref).max())
            xq, wq = xt.to(tdt), None if w is None else w.to(dev).to(tdt)
            if meta["kind"] == "conv":
                torch.backends.cudnn.allow_tf32 = False
                row["torch_ms_no_tf32"] = triton.testing.do_bench(lambda: fn(xq, wq), return_mode="median")
                torch.backends.cudnn.allow_tf32 = True
            row["torch_ms"] = triton.testing.do_bench(lambda: fn(xq, wq), return_mode="median")
        row["ms"] = ms
        if meta["kind"] == "conv":
            p = CONV
            flops = 2 * p["n"] * p["k"] * p["h"] * p["w"] * p["c"] * p["r"] * p["r"]
            row["tflops"] = flops / ms / 1e9
        else:
            item = 4 if meta["dtype"] == "f32" else 2
            out_elems = int(np.prod(net.plan["values"][net.plan["outputs"][0]]["shape"]))
            nbytes = (x.size + out_elems) * item
            row["gbs"] = nbytes / ms / 1e6
            row["of_copy"] = row["gbs"] / copy_gbs
        rows.append(row)
        print(json.dumps(row))
    print(f"\n{'case':28s} {'ours ms':>9s} {'torch ms':>9s} {'ratio':>6s}  extra")
    for r in rows:
        ratio = r["torch_ms"] / r["ms"] if "torch_ms" in r else float("nan")
        extra = (f"{r['tflops']:.1f} TFLOP/s, vs cuDNN no-TF32 {r['torch_ms_no_tf32'] / r['ms']:.2f}x"
                 if "tflops" in r else f"{r['gbs']:.0f} GB/s = {r['of_copy']:.0%} of copy")
        print(f"{r['case']:28s} {r['ms']:9.3f} {r.get('torch_ms', float('nan')):9.3f} {ratio:6.2f}  {extra}"
              f"  err {r.get('rel_err', float('nan')):.1e}")
    out = os.environ.get("OUT")
    if out:
        json.dump({"copy_gbs": copy_gbs, "rows": rows}, open(os.path.join(out, "gpu_kernels.json"), "w"), indent=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("dir")
    ap.add_argument("--target", default="nvvm:sm_90")
    a = ap.parse_args()
    build(a.dir, a.target) if a.mode == "build" else run(a.dir)

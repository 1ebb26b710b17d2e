"""Benchmark: whole networks on the CPU, OpenPrim vs ONNX Runtime and PyTorch eager, measured in the same run.

    pip install torch==2.13.0 onnxruntime      # the CPU build (oneDNN)
    python bench/cpu_networks.py [--repeat 30] [--nets resnet18,mobilenetv2] [--threads N]

All run the same random weights at batch 1, 3x224x224, fp32, NCHW. Reports the compile time and the
median latency of OpenPrim's three ways to run (in-process with the native backend, in-process with
MLIR's ExecutionEngine at O3, and a .oprim artifact loaded by the runtime), then the peers': ONNX Runtime
(the PyTorch replay exported to ONNX with the TorchScript exporter; bench/timing.ort_session: CPU provider,
--threads intra-op threads, all graph optimizations: batch norm folds into the convolutions) and PyTorch
eager (torch.nn.functional, --threads threads, inference_mode); the ratios, and the largest difference
between OpenPrim's (and ONNX Runtime's) and PyTorch's outputs relative to the output's scale. --threads
defaults to every core.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import mobilenetv2  # noqa: E402
import resnet  # noqa: E402
from timing import cpu_cores, median_time, ort_session, torch_cpu_threads  # noqa: E402

import openprim  # noqa: E402
from openprim import compiler  # noqa: E402
from openprim.runtime import load  # noqa: E402


def torch_resnet(W, x, F, t):
    def cbn(x, conv, bn, stride, relu=True):
        w = t(W[conv + ".weight"])
        y = F.conv2d(x, w, stride=stride, padding=w.shape[-1] // 2)
        y = F.batch_norm(y, t(W[bn + ".running_mean"]), t(W[bn + ".running_var"]), t(W[bn + ".weight"]),
                         t(W[bn + ".bias"]), False, 0.0, 1e-5)
        return F.relu(y) if relu else y

    y = cbn(x, "conv1", "bn1", 2)
    y = F.max_pool2d(y, 3, 2, 1)
    for i in range(4):
        for j in range(2):
            n = f"layer{i + 1}.{j}"
            s = 2 if (j == 0 and i > 0) else 1
            z = cbn(y, n + ".conv1", n + ".bn1", s)
            z = cbn(z, n + ".conv2", n + ".bn2", 1, relu=False)
            if n + ".downsample.0.weight" in W:
                y = cbn(y, n + ".downsample.0", n + ".downsample.1", s, relu=False)
            y = F.relu(z + y)
    y = F.adaptive_avg_pool2d(y, 1).flatten(1)
    return F.linear(y, t(W["fc.weight"]), t(W["fc.bias"]))


def torch_mobilenetv2(W, x, F, t):
    def cbn(x, name, stride=1, groups=1, act=True):
        w = t(W[name + ".0.weight"])
        y = F.conv2d(x, w, stride=stride, padding=w.shape[-1] // 2, groups=groups)
        b = name + ".1"
        y = F.batch_norm(y, t(W[b + ".running_mean"]), t(W[b + ".running_var"]), t(W[b + ".weight"]),
                         t(W[b + ".bias"]), False, 0.0, 1e-5)
        return F.relu6(y) if act else y

    y = cbn(x, "features.0", 2)
    idx = 1
    for tt, c, n, s in mobilenetv2.SETTINGS:
        for j in range(n):
            name, stride, cin = f"features.{idx}", s if j == 0 else 1, y.shape[1]
            z, i = y, 0
            if tt != 1:
                z = cbn(z, f"{name}.conv.{i}")
                i += 1
            z = cbn(z, f"{name}.conv.{i}", stride, groups=cin * tt)
            z = cbn(z, f"{name}.conv.{i + 1}", act=False)
            y = z + y if stride == 1 and cin == c else z
            idx += 1
    y = cbn(y, f"features.{idx}")
    y = F.adaptive_avg_pool2d(y, 1).flatten(1)
    return F.linear(y, t(W["classifier.1.weight"]), t(W["classifier.1.bias"]))


NETS = {"resnet18": (resnet.build, torch_resnet), "mobilenetv2": (mobilenetv2.build, torch_mobilenetv2)}


def onnx_replay(torch_fn, W, x) -> bytes:
    """torch_fn over the weights W as ONNX bytes: the replay as a module whose buffers are W, exported with
    the TorchScript exporter (dynamo=False: the dynamo exporter needs onnxscript), opset 17."""
    import io
    import warnings

    import torch
    import torch.nn.functional as F
    names = list(W)

    class Replay(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for i, k in enumerate(names):
                self.register_buffer(f"w{i}", W[k])

        def forward(self, x):
            return torch_fn({k: getattr(self, f"w{i}") for i, k in enumerate(names)}, x, F, lambda a: a)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Replay().eval(), (x,), f, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"])
    return f.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--nets", default="resnet18,mobilenetv2")
    ap.add_argument("--threads", type=int, default=cpu_cores(), help="the peers' threads (default: every core)")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    torch_cpu_threads(args.threads)
    rows = []
    for name in args.nets.split(","):
        build, torch_fn = NETS[name]
        g = build()
        x = np.random.default_rng(1).standard_normal(g.inputs[0].shape).astype(np.float32)
        t0 = time.perf_counter()
        jit = openprim.compile(g)
        jit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine = openprim.compile(g, backend="engine")
        engine(x)  # the ExecutionEngine compiles lazily, on the first lookup of each kernel
        engine_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as d:
            info = compiler.save(g, os.path.join(d, name + ".oprim"))
            aot = load(os.path.join(d, name + ".oprim"))
        W = {k: torch.tensor(v, dtype=torch.float32) for k, v in g.weights.items()}
        xt = torch.tensor(x)
        sess = ort_session(onnx_replay(torch_fn, W, xt), args.threads)
        feed = {sess.get_inputs()[0].name: x}
        ort_t = median_time(lambda: sess.run(None, feed), args.repeat)
        with torch.inference_mode():
            ref = torch_fn(W, xt, F, lambda a: a).numpy()
            torch_t = median_time(lambda: torch_fn(W, xt, F, lambda a: a), args.repeat)
        outs = [jit(x), engine(x), aot(x)]
        err = max(np.abs(y - ref).max() for y in outs) / np.abs(ref).max()
        ort_err = np.abs(sess.run(None, feed)[0] - ref).max() / np.abs(ref).max()
        times = [median_time(lambda f=f: f(x), args.repeat) for f in (jit, engine, aot)]
        rows.append((name, (jit_s, engine_s, info["seconds"]), times, ort_t, torch_t, err, ort_err))
    print(f"{'network':12s} {'compile: native / engine / AOT':>31s}   {'run: native / engine / AOT':>28s} "
          f"{'ORT':>9s} {'PyTorch':>9s} {'ORT/native':>10s} {'PyTorch/native':>14s} {'max rel diff (ORT)':>20s}")
    for name, cs, ts, ot, tt, err, oerr in rows:
        print(f"{name:12s} {cs[0]:8.1f} s {cs[1]:7.1f} s {cs[2]:7.1f} s   "
              f"{ts[0] * 1e3:7.2f} {ts[1] * 1e3:7.2f} {ts[2] * 1e3:7.2f} ms {ot * 1e3:6.2f} ms {tt * 1e3:6.2f} ms "
              f"{ot / ts[0]:9.2f}x {tt / ts[0]:13.2f}x {err:9.1e} ({oerr:.1e})")
    import onnxruntime
    print(f"(median of {args.repeat} runs, batch 1, 3x224x224, fp32, {args.threads} threads for ONNX Runtime "
          f"{onnxruntime.__version__} and PyTorch {torch.__version__})")


if __name__ == "__main__":
    main()

"""Benchmark: the pooling layers of model-zoo networks on the CPU, old vs new kernel vs ONNX Runtime and PyTorch.

    python bench/cpu_pool.py [--models resnet18,googlenet_nolrn] [--batches 1,8] [--rounds 3] [--repeat 30]

The pools are found by running each model of examples/zoo_models.py (ResNet-18/50, torchvision's GoogLeNet,
DenseNet-121, SqueezeNet 1.1) once with torch's functional pools recorded: max_pool2d, avg_pool2d and
adaptive_avg_pool2d to 1x1 (global_avg_pool); each distinct one is timed once, at batch 1 and 8, fp32, NHWC:

  old    the reference lowering (kernels/semantics.py: a padded copy, then a linalg.generic over the kh*kw
         strided views, scheduled by kernels/schedules.py), compiled with the CPU pool builders taken out of
         kernels/registry.OP_KERNELS;
  new    kernels/cpu/pool.py (the registry's builder);
  ort    ONNX Runtime: one MaxPool / AveragePool / GlobalAveragePool node on the NCHW input
         (bench/timing.ort_layer: CPU provider, every core, all graph optimizations);
  torch  torch.nn.functional on a channels_last tensor (inference_mode, every core).

Timed in interleaved rounds: each round times the four in turn (rotating who goes first; bench/timing's
median of `repeat` runs after a 0.3 s sleep and warm-up), the figure is the median over rounds. GB/s counts
the input read once and the output written once. Both compiled kernels and ONNX Runtime are checked against
torch (max |out - torch| / max |torch|). The last table sums each model's pools (times their count) per batch.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import zoo_models  # noqa: E402
from onnx import helper  # noqa: E402
from timing import median_time, ort_layer, torch_cpu_threads  # noqa: E402

from openprim import compiler  # noqa: E402
from openprim.kernels import registry  # noqa: E402
from openprim.pyfrontend import Graph  # noqa: E402

MODELS = ("resnet18", "resnet50", "googlenet_nolrn", "densenet121", "squeezenet1_1")
POOL_OPS = ("max_pool2d", "avg_pool2d", "global_avg_pool")


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def model_pools(name: str) -> Counter:
    """The pools of one forward of the model at batch 1: Counter of (op, (C, H, W), attrs as a tuple)."""
    found = Counter()
    real = {k: getattr(F, k) for k in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d")}

    def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        k = _pair(kernel_size)
        found[("max_pool2d", tuple(x.shape[1:]), (k, _pair(stride or k), _pair(padding), _pair(dilation),
                                                 bool(ceil_mode), True))] += 1
        return real["max_pool2d"](x, kernel_size, stride, padding, dilation, ceil_mode=ceil_mode)

    def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
        k = _pair(kernel_size)
        found[("avg_pool2d", tuple(x.shape[1:]), (k, _pair(stride or k), _pair(padding), (1, 1), bool(ceil_mode),
                                                 bool(count_include_pad)))] += 1
        return real["avg_pool2d"](x, kernel_size, stride, padding, ceil_mode, count_include_pad)

    def adaptive_avg_pool2d(x, output_size):
        assert _pair(output_size) == (1, 1), output_size
        found[("global_avg_pool", tuple(x.shape[1:]), ())] += 1
        return real["adaptive_avg_pool2d"](x, output_size)

    patched = {"max_pool2d": max_pool2d, "avg_pool2d": avg_pool2d, "adaptive_avg_pool2d": adaptive_avg_pool2d}
    try:
        for k, f in patched.items():
            setattr(F, k, f)
        with torch.inference_mode():
            zoo_models.get(name)(zoo_models.example_input(name))
    finally:
        for k, f in real.items():
            setattr(F, k, f)
    return found


def compiled(op, shape_nhwc, attrs, old: bool):
    """The jitted one-pool graph (NHWC, fp32); old: with the CPU pool builders taken out of the registry."""
    g = Graph(layout="NHWC")
    x = g.input("x", shape_nhwc)
    if op == "global_avg_pool":
        y = g.global_avg_pool(x)
    else:
        k, s, p, d, ceil, include = attrs
        kw = dict(dilation=d) if op == "max_pool2d" else dict(count_include_pad=include)
        y = getattr(g, op)(x, k, s, p, ceil_mode=ceil, **kw)
    g.output(y)
    saved = {key: registry.OP_KERNELS.pop(key) for key in [(o, "cpu") for o in POOL_OPS]} if old else {}
    try:
        return compiler.jit(compiler.lower(g))
    finally:
        registry.OP_KERNELS.update(saved)


def torch_pool(op, attrs):
    if op == "global_avg_pool":
        return lambda t: F.adaptive_avg_pool2d(t, 1)
    k, s, p, d, ceil, include = attrs
    if op == "max_pool2d":
        return lambda t: F.max_pool2d(t, k, s, p, d, ceil_mode=ceil)
    return lambda t: F.avg_pool2d(t, k, s, p, ceil, include)


def ort_pool(op, attrs, shape_nchw):
    """The pool as a one-node ONNX graph in ONNX Runtime."""
    if op == "global_avg_pool":
        node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    else:
        k, s, p, d, ceil, include = attrs
        kw = dict(kernel_shape=list(k), strides=list(s), pads=[p[0], p[1], p[0], p[1]], ceil_mode=int(ceil))
        if op == "max_pool2d":
            node = helper.make_node("MaxPool", ["x"], ["y"], dilations=list(d), **kw)
        else:
            node = helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=int(include), **kw)
    return ort_layer([node], shape_nchw, {})


def describe(op, chw, attrs):
    c, h, w = chw
    if op == "global_avg_pool":
        return f"global_avg {h}x{w}x{c}"
    k, s, p, d, ceil, include = attrs
    extra = (" ceil" if ceil else "") + (f" d{d[0]}" if d != (1, 1) else "") + \
        ("" if op == "max_pool2d" or include else " excl")
    return f"{op[:3]} {h}x{w}x{c} {k[0]}x{k[1]} s{s[0]} p{p[0]}{extra}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    models = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    per_model = {m: model_pools(m) for m in models}
    pools = list(dict.fromkeys(p for m in models for p in per_model[m]))
    rng = np.random.default_rng(0)
    times = {}
    import onnxruntime
    threads = torch_cpu_threads()
    print(f"torch {torch.__version__} and onnxruntime {onnxruntime.__version__}, {threads} threads; "
          f"rounds {args.rounds}, repeat {args.repeat}")
    print(f"{'pool':42s} {'batch':>5s} {'old ms':>8s} {'new ms':>8s} {'ort ms':>8s} {'torch ms':>8s} {'old/new':>7s} "
          f"{'ort/new':>7s} {'torch/new':>9s} {'new GB/s':>8s} {'err new':>8s} {'err old':>8s} {'err ort':>8s}")
    for b in batches:
        for op, chw, attrs in pools:
            c, h, w = chw
            x = rng.standard_normal((b, h, w, c)).astype(np.float32)
            xt = torch.from_numpy(x).permute(0, 3, 1, 2)            # channels_last: NHWC memory
            assert xt.is_contiguous(memory_format=torch.channels_last)
            fn = torch_pool(op, attrs)
            with torch.inference_mode():
                want = fn(xt).permute(0, 2, 3, 1).numpy()
            runs = {"old": compiled(op, x.shape, attrs, True), "new": compiled(op, x.shape, attrs, False)}
            errs = {k: float(np.abs(e(x) - want).max() / np.abs(want).max()) for k, e in runs.items()}
            sess, feed = ort_pool(op, attrs, (b, c, h, w)), {"x": np.ascontiguousarray(x.transpose(0, 3, 1, 2))}
            got = sess.run(None, feed)[0].transpose(0, 2, 3, 1)
            errs["ort"] = (float(np.abs(got - want).max() / np.abs(want).max()) if got.shape == want.shape
                           else float("inf"))                   # another output shape (ceil_mode's rules)
            calls = {"old": runs["old"].run_steps, "new": runs["new"].run_steps,
                     "ort": lambda: sess.run(None, feed), "torch": lambda: fn(xt)}
            per_round = {k: [] for k in calls}
            order = list(calls)
            with torch.inference_mode():
                for r in range(args.rounds):
                    for k in order[r % len(order):] + order[:r % len(order)]:
                        per_round[k].append(median_time(calls[k], args.repeat, warmup=3))
            t = {k: float(np.median(v)) for k, v in per_round.items()}
            times[(op, chw, attrs, b)] = t
            moved = (x.nbytes + want.nbytes) / t["new"] / 1e9
            print(f"{describe(op, chw, attrs):42s} {b:5d} {t['old'] * 1e3:8.3f} {t['new'] * 1e3:8.3f} "
                  f"{t['ort'] * 1e3:8.3f} {t['torch'] * 1e3:8.3f} {t['old'] / t['new']:7.2f} {t['ort'] / t['new']:7.2f} "
                  f"{t['torch'] / t['new']:9.2f} {moved:8.1f} {errs['new']:8.1e} {errs['old']:8.1e} {errs['ort']:8.1e}",
                  flush=True)
    print("\nPer model: the sum of its pools' times (each times its count), ms")
    print(f"{'model':18s} {'batch':>5s} {'pools':>5s} {'old':>8s} {'new':>8s} {'ort':>8s} {'torch':>8s} {'old/new':>7s} "
          f"{'ort/new':>7s} {'torch/new':>9s}")
    for m in models:
        for b in batches:
            s = {k: sum(n * times[(*p, b)][k] for p, n in per_model[m].items()) for k in ("old", "new", "ort", "torch")}
            print(f"{m:18s} {b:5d} {sum(per_model[m].values()):5d} {s['old'] * 1e3:8.3f} {s['new'] * 1e3:8.3f} "
                  f"{s['ort'] * 1e3:8.3f} {s['torch'] * 1e3:8.3f} {s['old'] / s['new']:7.2f} {s['ort'] / s['new']:7.2f} "
                  f"{s['torch'] / s['new']:9.2f}")


if __name__ == "__main__":
    main()

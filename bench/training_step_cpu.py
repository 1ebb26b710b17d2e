"""Benchmark: one training step of ResNet-18 (examples/torch_models.py: torchvision's structure) on the CPU, torch.compile(backend=openprim_backend)
against eager PyTorch (oneDNN) and torch.compile (Inductor), in the same run.

    python bench/training_step_cpu.py [--batch 8] [--size 224] [--steps 5] [--out bench/training_step_cpu.json]

The model (random weights, 1000 classes, train mode: batch statistics) and its cross-entropy loss are one module;
a step is forward, loss, backward and torch's SGD (momentum 0.9) update, timed end to end (median of `steps`
after two warm-up steps; the first OpenPrim and Inductor steps compile, timed apart). All three start from the
same weights and take the same batch: the first step's loss and every parameter's gradient are compared with
eager PyTorch's in float64 (max over the parameters of max |difference| / max |float64 gradient|; eager f32
is measured the same way: a ReLU input within ~1e-6 of zero may fall on either side in f32, which changes that
element's gradient entirely, so f32 runs differ from each other by more than rounding). Prints ms per step and
eager's time over each.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
import warnings

import torch
from timing import median_time, torch_cpu_threads

from openprim.torch_backend import openprim_backend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch_models  # noqa: E402
from train_resnet import WithLoss  # noqa: E402


def _steps(model, x, y, steps):
    """(the first step's seconds, the median of `steps` more after two warm-up steps, the first loss, the
    first gradients)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(keep=False):
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        grads = {k.removeprefix("_orig_mod."): p.grad.detach().clone() for k, p in model.named_parameters()} \
            if keep else None
        opt.step()
        return loss.item(), grads
    t0 = time.perf_counter()
    loss, grads = step(keep=True)
    first = time.perf_counter() - t0
    return first, median_time(step, steps, warmup=2), loss, grads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile's Inductor")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    threads = torch_cpu_threads()
    torch.manual_seed(0)
    base = WithLoss(torch_models.resnet18()).train()
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 1000, (args.batch,))
    runs = {"eager": lambda m: m, "openprim": lambda m: torch.compile(m, backend=openprim_backend)}
    if not args.no_inductor:
        runs["inductor"] = lambda m: torch.compile(m)
    result = {}
    for name, wrap in runs.items():
        torch._dynamo.reset()
        model = copy.deepcopy(base)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first, step, loss, grads = _steps(wrap(model), x, y, args.steps)
        result[name] = {"first_step_s": first, "step_ms": step * 1e3, "loss": loss, "grads": grads,
                        "warnings": sorted({str(w.message)[:200] for w in caught if "openprim" in str(w.message)})}
        print(f"{name:9s} first step {first:7.2f} s, step {step * 1e3:9.1f} ms, loss {loss:.6f}", flush=True)
    # The yardstick: eager in float64 (a ReLU input within ~1e-6 of zero can fall on either side in f32, which
    # changes that element's gradient entirely: f32 eager differs from it as much as any f32 run may)
    m64 = copy.deepcopy(base).double()
    loss64 = m64(x.double(), y)
    loss64.backward()
    g64 = {k: p.grad for k, p in m64.named_parameters()}
    grads = {name: r.pop("grads") for name, r in result.items()}
    eager = result["eager"]
    for name, r in result.items():
        r["max_grad_error"] = max(float((g.double() - g64[k]).abs().max() / g64[k].abs().max())
                                  for k, g in grads[name].items())
        r["loss_error"] = abs(r["loss"] - loss64.item())
        r["eager_over_this"] = eager["step_ms"] / r["step_ms"]
        print(f"{name:9s} eager / this {r['eager_over_this']:.2f}; against float64 eager: loss {r['loss_error']:.1e}, "
              f"max over the parameters of max |grad error| / max |grad| {r['max_grad_error']:.1e}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": f"python bench/training_step_cpu.py --batch {args.batch} --size {args.size} "
                                  f"--steps {args.steps}", "model": "examples/torch_models.resnet18 (torchvision's structure), train mode",
                       "batch": args.batch, "size": args.size, "threads": threads, "torch": torch.__version__,
                       "machine": platform.processor() or platform.machine(), "runs": result}, f, indent=1)


if __name__ == "__main__":
    main()

"""Benchmark: one optimizer step over ResNet-18's parameters (11.7 M, fp32) on the CPU, openprim.optim's fused
SGD (momentum) and AdamW against torch.optim's default (foreach) implementations, in the same run.

    python bench/optimizer_cpu.py [--repeat 20] [--out bench/optimizer_cpu.json]

The gradients are fixed random tensors; a step is opt.step() alone (median of `repeat`), the weights of the two
runs compared after the timed steps (max |difference| / max |weight|).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from timing import median_time, torch_cpu_threads

from openprim import optim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch_models  # noqa: E402

RUNS = {"SGD": dict(lr=0.01, momentum=0.9, weight_decay=1e-4), "AdamW": dict(lr=1e-3, weight_decay=0.01)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    threads = torch_cpu_threads()
    rows = {}
    for name, kw in RUNS.items():
        models = {who: torch_models.resnet18() for who in ("torch", "openprim")}
        grads = [torch.randn_like(p) * 1e-2 for p in models["torch"].parameters()]
        opts = {"torch": getattr(torch.optim, name)(models["torch"].parameters(), **kw),
                "openprim": getattr(optim, name)(models["openprim"].parameters(), **kw)}
        times = {}
        for who, opt in opts.items():
            for p, g in zip(models[who].parameters(), grads):
                p.grad.copy_(g) if p.grad is not None else setattr(p, "grad", g.clone())
            times[who] = median_time(opt.step, args.repeat, warmup=2)
        err = max(float((a - b).abs().max() / a.abs().max()) for a, b in
                  zip(models["torch"].parameters(), models["openprim"].parameters()))
        rows[name] = {"torch_ms": times["torch"] * 1e3, "openprim_ms": times["openprim"] * 1e3,
                      "torch_over_openprim": times["torch"] / times["openprim"], "max_rel_weight_diff": err}
        print(f"{name:6s} torch.optim {times['torch'] * 1e3:7.2f} ms  openprim.optim {times['openprim'] * 1e3:7.2f} ms  "
              f"ratio {times['torch'] / times['openprim']:.2f}  weights differ by {err:.1e}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": f"python bench/optimizer_cpu.py --repeat {args.repeat}", "threads": threads,
                       "torch": torch.__version__, "params": sum(p.numel() for p in torch_models.resnet18().parameters()),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

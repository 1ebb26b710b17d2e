"""Where a network's GPU time goes, step by step: each plan step's launches timed alone (ms), with its
kernel functions, grids and blocks, for one model of examples/torch_models.py in fp16 on the first GPU.

    . scripts/device_env.sh && python3 scripts/gpu_steps.py resnet18 --batch 1     # on the GPU machine

The model is compiled through `compile_module` with a CUDA input (so the target is the device's); the
table is sorted by time, with the sum of the steps and the graph-replayed call for comparison.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from runtime_path import use_checkout  # scripts/: openprim from this checkout when not installed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a builder of examples/torch_models.py (resnet18, resnet50, ...)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args(argv)
    use_checkout()
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    import torch_models
    from openprim.torch_backend import compile_module

    model = getattr(torch_models, args.model)().half().cuda().eval()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.half)
    ours = compile_module(model, (x,))
    exe = ours.exe
    with torch.no_grad():
        err = ((ours(x).float() - model(x).float()).abs().max() / model(x).float().abs().max()).item()
    times = exe.time_steps(args.repeat)
    for _ in range(10):
        ours(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        ours(x)
    torch.cuda.synchronize()
    call_ms = (time.perf_counter() - t0) / args.repeat * 1e3
    plan = exe.plan
    rows = []
    for i, (step, ms) in enumerate(zip(plan["steps"], times)):
        shapes = [plan["values"][a]["shape"] for a in step["args"]]
        launches = [(ln["function"], tuple(ln["grid"]), tuple(ln["block"])) for ln in plan["kernels"][step["kernel"]]["launches"]]
        rows.append((ms, i, step["kernel"], shapes, launches))
    print(f"{args.model} batch {args.batch} fp16 on {torch.cuda.get_device_name()}: max rel error {err:.1e}; "
          f"steps {sum(times):.3f} ms in sum, graph-replayed call {call_ms:.3f} ms")
    print(f"{'ms':>7} {'step':>4}  kernel        shapes (args, output last) | launches (function grid block)")
    for ms, i, name, shapes, launches in sorted(rows, reverse=True):
        print(f"{ms:7.4f} {i:4d}  {name:13s} {shapes} | " + "; ".join(f"{f} {g} {b}" for f, g, b in launches))
    return 0


if __name__ == "__main__":
    sys.exit(main())

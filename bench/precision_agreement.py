"""An fp32 network compiled with precision="f16" and "bf16": how often its top-1 class agrees with fp32 eager.

    python bench/precision_agreement.py [--model resnet50] [--inputs 256] [--batch 32] [--target cpu]

examples/torch_models.py's network (torchvision's structure, seeded He-initialized weights) in fp32 goes
through `compile_module(model, (x,), precision=P)`: weights cast at compile time, every kernel in P with
f32 accumulation, float32 in and out. `--inputs` random normal images (seeded) run through it and through
PyTorch eager in fp32; the table gives the top-1 agreement and the largest error relative to the largest
fp32 logit, per precision (fp32 itself as the control). Writes a Markdown table to stdout.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch_models  # noqa: E402

from openprim.torch_backend import compile_module  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", choices=("resnet18", "resnet50", "mobilenet_v2"))
    ap.add_argument("--inputs", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--target", default="cpu")
    args = ap.parse_args()
    if args.inputs % args.batch:
        ap.error("--inputs must be a multiple of --batch")
    model = torch_models.get(args.model)
    rng = np.random.default_rng(7)
    images = torch.from_numpy(rng.standard_normal((args.inputs, 3, 224, 224)).astype(np.float32))
    batches = images.split(args.batch)
    with torch.no_grad():
        ref = torch.cat([model(b) for b in batches]).double()
    print("| model | precision | inputs | top-1 agreement with fp32 eager | max error / max logit | compile s |")
    print("|---|---|---|---|---|---|")
    for precision in ("f32", "f16", "bf16"):
        t0 = time.perf_counter()
        run = compile_module(model, (batches[0],), target=args.target, precision=precision)
        seconds = time.perf_counter() - t0
        with torch.no_grad():
            got = torch.cat([run(b) for b in batches]).double()
        agree = (got.argmax(1) == ref.argmax(1)).double().mean().item()
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        print(f"| {args.model} | {precision} | {args.inputs} | {agree * 100:.1f}% "
              f"({int(round(agree * args.inputs))}/{args.inputs}) | {err:.2e} | {seconds:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

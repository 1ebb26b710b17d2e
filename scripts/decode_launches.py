"""What a GPT-2 small decode step launches on a GPU, compiled here (no GPU needed): plan steps, kernel launches,
and the launches the runtime leaves out (a copy onto its own buffer: "unless_aliased"), by op and solver.

    python scripts/decode_launches.py --batch 1 --target nvvm:sm_90 [--greedy]

Inside a replayed CUDA graph each launch costs a few microseconds whatever it does, and a decode step of a
small model is mostly launches (GPT-2's weights are 0.25 GB, 83 us at 3 TB/s; its step replays in ~650 us),
so the count is the first thing to read about a decode step.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile

from runtime_path import use_checkout  # scripts/: openprim from this checkout when not installed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--context", type=int, default=544, help="the cache's length (prompt + new tokens)")
    parser.add_argument("--target", default="nvvm:sm_90")
    parser.add_argument("--greedy", action="store_true", help="the step that returns the argmax token")
    args = parser.parse_args(argv)
    use_checkout()
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from decode import build
    from openprim import compiler
    from openprim.decoding import step_graph
    from openprim.runtime.gpu import left_out

    model = build("gpt2").half()
    with tempfile.TemporaryDirectory() as tmp:
        plan = compiler.save(step_graph(model, args.batch, 1, args.context, greedy=args.greedy), os.path.join(tmp, "step.oprim"),
                             target=args.target)["plan"]
    values = plan["values"]
    place = lambda v: (values[v]["storage"], values[v]["offset"])   # noqa: E731 - a buffer's identity
    total, skipped, kinds = 0, 0, collections.Counter()
    for step in plan["steps"]:
        for launch in plan["kernels"][step["kernel"]]["launches"]:
            total += 1
            if left_out(launch, [place(a) for a in step["args"]]):
                skipped += 1
            else:
                kinds[" ".join(filter(None, (step["op"], step.get("solver"))))] += 1
    step = "greedy decode step" if args.greedy else "decode step"
    print(f"GPT-2 {step}, batch {args.batch}, {args.target}: {len(plan['steps'])} steps, {total} launches, "
          f"{skipped} left out: {total - skipped} run")
    for kind, count in kinds.most_common():
        print(f"  {count:4d}  {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

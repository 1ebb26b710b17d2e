"""A/B of one prim-fuse rewrite on a zoo model (CPU): the default pipeline against one with prim-fuse options.

    python bench/zoo_ab.py squeezenet1_1 --batch 8 --fuse concat-split=0

The model (examples/zoo_models.py) is exported to ONNX and imported, compiled twice (B: `prim-fuse{OPTIONS}`,
every other stage as prim-pipeline runs it), checked against each other, then timed in interleaved rounds
(the median of `--rounds` rounds of 3 calls each). Prints both medians and B's change; a user tries a rewrite
on a model this way before turning it off in a pipeline.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import zoo_models  # noqa: E402

from openprim import compiler  # noqa: E402
from openprim.passes import prim_fuse, prim_pipeline  # noqa: E402
from openprim.pyfrontend.onnx import import_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=zoo_models.MODELS + zoo_models.EXTRA_MODELS)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--fuse", required=True, help="prim-fuse options of variant B, e.g. concat-split=0")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = zoo_models.to_onnx(args.model, args.batch, os.path.join(d, "model.onnx"))
        a = compiler.jit(compiler.lower(import_model(path)))
        stages = [f"{name}{{{args.fuse}}}" if name == prim_fuse.NAME else f"{name}{{target=cpu}}"
                  for name, _ in prim_pipeline.Options().stages()]
        b = compiler.jit(compiler.lower(import_model(path), pipeline=",".join(stages)))
    x = zoo_models.example_input(args.model, args.batch).numpy()
    ya, yb = a(x), b(x)
    print(f"max |A - B| / max |A| = {float(np.abs(ya - yb).max() / np.abs(ya).max()):.1e}")
    times = {"A": [], "B": []}
    for _ in range(args.rounds):
        for name, exe in (("A", a), ("B", b)):
            exe(x)
            t0 = time.perf_counter()
            for _ in range(3):
                exe(x)
            times[name].append((time.perf_counter() - t0) / 3 * 1e3)
    ms = {k: float(np.median(v)) for k, v in times.items()}
    print(f"{args.model} batch {args.batch}: A (default) {ms['A']:.2f} ms, B (prim-fuse{{{args.fuse}}}) "
          f"{ms['B']:.2f} ms, B/A {ms['B'] / ms['A']:.3f}")


if __name__ == "__main__":
    main()

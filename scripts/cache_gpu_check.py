"""Checks that a compile cache filled on a machine with MLIR hits on a GPU machine that has none.

    python scripts/cache_gpu_check.py fill out/gpu_cache nvvm:sm_90   # here: compile into the cache, no GPU needed
    python scripts/cache_gpu_check.py check out/gpu_cache nvvm:sm_90  # GPU machine: numpy + cuda-bindings only

`check` imports OpenPrim from this checkout without installing it (the GPU machine has no MLIR, so the
compiler could not run there), builds the same graphs, loads them with openprim.cache.load_or_compile, and
fails unless every one is a hit, MLIR was never imported, and the outputs match a float64 numpy reference.
The two machines must hold the same sources: the cache key includes their digest.
"""
import os
import sys

import numpy as np

from runtime_path import use_checkout  # scripts/: openprim from this checkout when not installed



def graphs():
    """(name, Graph, float64 reference function of x) of the checked models: odd shapes, seeded weights."""
    from openprim.pyfrontend import Graph
    out = []
    for dtype in ("f32", "f16"):
        r = np.random.default_rng(11)
        w, b = r.standard_normal((12, 5, 3, 3)), r.standard_normal(12)
        fw = r.standard_normal((7, 12 * 9 * 13)) * 0.05
        g = Graph(dtype=dtype)
        x = g.input("x", (3, 5, 9, 13))
        y = g.relu(g.conv2d(x, g.param("w", w), g.param("b", b), padding=1))
        g.output(g.linear(g.flatten(y), g.param("fw", fw)))

        def reference(x, w=w, b=b, fw=fw, dtype=dtype):
            from openprim.base.dtypes import from_storage, to_storage
            w, b, fw = (from_storage(to_storage(a, dtype), dtype).astype(np.float64) for a in (w, b, fw))
            n, c, hh, ww = x.shape
            xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
            cols = np.stack([xp[:, :, i:i + hh, j:j + ww] for i in range(3) for j in range(3)], axis=2)
            conv = np.einsum("nckhw,ock->nohw", cols, w.reshape(w.shape[0], c, 9)) + b[None, :, None, None]
            return np.maximum(conv, 0).reshape(n, -1) @ fw.T
        out.append((f"conv-relu-linear {dtype}", g, reference))
    return out


def main(argv):
    if len(argv) != 3 or argv[0] not in ("fill", "check"):
        sys.exit(__doc__)
    action, directory, target = argv
    os.environ["OPENPRIM_CACHE_DIR"] = os.path.abspath(directory)
    os.environ.pop("OPENPRIM_CACHE", None)
    use_checkout()
    from openprim import cache
    failed = False
    for name, g, reference in graphs():
        options = {"layout": "NHWC"}
        if action == "fill":
            print(f"{name}: {cache.store(g, target, options).name}")
            continue
        exe = cache.load_or_compile(g, target, options)
        spec = exe.plan["values"][exe.plan["inputs"][0]["value"]]
        x = np.random.default_rng(3).standard_normal(spec["shape"]).astype(np.float32)
        if g.dtype == "f16":
            x = x.astype(np.float16)
        got, want = np.asarray(exe(x), np.float64), reference(x)
        error = np.abs(got - want).max() / np.abs(want).max()
        ok = exe.cache_hit and error < (1e-5 if g.dtype == "f32" else 1e-2)
        failed |= not ok
        print(f"{name}: hit {exe.cache_hit}, load {exe.compile_seconds['load'] * 1e3:.1f} ms, "
              f"max error / max |ref| {error:.2e}: {'ok' if ok else 'FAILED'}")
    if action == "check":
        print(f"mlir imported: {'mlir' in sys.modules}, compiler imported: {'openprim.compiler' in sys.modules}")
        failed |= "mlir" in sys.modules or "openprim.compiler" in sys.modules
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

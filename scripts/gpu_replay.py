"""Run recorded test cases on this machine's GPU with the runtime alone (no MLIR needed here).

    python scripts/gpu_replay.py DIR OUT.npz

DIR holds pairs NAME.oprim + NAME.npz (inputs), written on any machine by the test suite with
OPENPRIM_TEST_TARGET=<gpu target> OPENPRIM_GPU_RECORD=DIR. OUT.npz gets NAME.out0, NAME.out1, ...
(or NAME.error with the one-line error); the test suite then checks them against float64 numpy with
OPENPRIM_GPU_REPLAY=OUT.npz.
"""
import glob
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_path import import_runtime  # noqa: E402


def main(cases: str, out: str) -> int:
    runtime = import_runtime()
    from openprim.base.errors import OpenPrimError
    results, failed = {}, 0
    paths = sorted(glob.glob(os.path.join(cases, "*.oprim")))
    t0 = time.perf_counter()
    for path in paths:
        key = os.path.basename(path)[:-len(".oprim")]
        try:
            net = runtime.load(path)
            with np.load(path[:-len(".oprim")] + ".npz") as z:
                feeds = [z[f"arr_{i}"] for i in range(len(z.files))]
            res = net(*feeds)
            for i, r in enumerate(res if isinstance(res, tuple) else (res,)):
                results[f"{key}.out{i}"] = r
        except OpenPrimError as e:
            failed += 1
            results[f"{key}.error"] = np.array(str(e))
            print(f"{key}: {e}")
            if "illegal" in str(e) or "unspecified launch failure" in str(e):
                # the context is lost: the remaining cases go on in a fresh process
                rest = paths[paths.index(path) + 1:]
                if rest:
                    np.savez(out, **results)
                    return _continue(rest, out, failed, t0)
    np.savez(out, **results)
    print(f"{len(paths)} cases, {failed} failed to run, {time.perf_counter() - t0:.1f} s -> {out}")
    return 0


def _continue(rest: list[str], out: str, failed: int, t0: float) -> int:
    """Replay `rest` in a new process (a kernel fault ends a CUDA context), merging into `out`."""
    import shutil
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for path in rest:
            for ext in (".oprim", ".npz"):
                os.symlink(os.path.abspath(path[:-len(".oprim")] + ext), os.path.join(d, os.path.basename(path)[:-6] + ext))
        part = os.path.join(d, "rest.npz")
        subprocess.run([sys.executable, os.path.abspath(__file__), d, part], check=False)
        with np.load(out) as a, np.load(part) as b:
            merged = {**{k: a[k] for k in a.files}, **{k: b[k] for k in b.files}}
        np.savez(out + ".tmp.npz", **merged)
        shutil.move(out + ".tmp.npz", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

"""Time the candidates of a tuning bundle on this machine with the runtime alone (no MLIR needed here).

    python scripts/measure_tuning.py BUNDLE results.json

BUNDLE comes from `openprim tune MODEL --target T --measure-on BUNDLE` (a zip: index.json + one .oprim per
candidate). Every candidate runs on the same seeded random inputs; its output must match the heuristic
candidate's of the same layer within the dtype's tolerance, or it gets an error instead of a time (a
wrong solver never wins). Times: device events on a GPU (GpuExecutable.time_ms), else the sum of the
steps' medians. `openprim db import results.json` then stores them as tuning database records.
"""
import json
import os
import sys
import tempfile
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_path import import_runtime  # noqa: E402


def measure(net):
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal(net.plan["values"][i["value"]]["shape"]).astype(np.float32) for i in net.plan["inputs"]]
    out = np.asarray(net(*feeds), np.float64)
    seconds = net.time_ms() / 1e3 if hasattr(net, "time_ms") else float(sum(net.time_steps(20)))
    return out, seconds


def _artifact(bundle: zipfile.ZipFile, candidate: dict, directory: str) -> str:
    """The candidate's .oprim, its weights put back in (bundles store each distinct weights.bin once)."""
    path = bundle.extract(candidate["file"], directory)
    if candidate.get("weights"):
        with zipfile.ZipFile(path, "a") as a:
            a.writestr("weights.bin", bundle.read(candidate["weights"]))
    return path


def main(bundle: str, out: str) -> int:
    runtime = import_runtime()
    from openprim.base.errors import OpenPrimError
    with zipfile.ZipFile(bundle) as z, tempfile.TemporaryDirectory() as tmp:
        index = json.loads(z.read("index.json"))
        outputs, results = {}, []
        # heuristic candidates first: they are the reference of their layer
        for n, c in enumerate(sorted(index["candidates"], key=lambda c: not c["heuristic"])):
            row = {k: c[k] for k in ("problem", "arch", "solver", "params")}
            try:
                net = runtime.load(_artifact(z, c, tmp))
                y, row["seconds"] = measure(net)
                ref = outputs.setdefault(c["problem"], y)
                err = float(np.max(np.abs(y - ref))) / max(1.0, float(np.max(np.abs(ref))))
                if err > c["tolerance"]:
                    row = {**row, "seconds": None, "error": f"wrong output (relative error {err:.2e})"}
            except OpenPrimError as e:
                row["error"] = str(e)
            results.append(row)
            print(f"\r{n + 1}/{len(index['candidates'])} candidates", end="", file=sys.stderr, flush=True)
    with open(out, "w") as f:
        json.dump({"format": "openprim-tuning-results", "compiler": index["compiler"], "results": results}, f, indent=1)
    timed = sum(r.get("seconds") is not None for r in results)
    print(f"\n{timed} of {len(results)} candidates timed -> {out}")
    if not timed:  # nothing measured (no GPU, no driver, every candidate wrong): a failure, not a result
        first = next((r["error"] for r in results if r.get("error")), "the bundle has no candidates")
        print(f"measure_tuning.py: error: no candidate could be timed on this machine; first error: {first}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/measure_tuning.py BUNDLE results.json")
    sys.exit(main(*sys.argv[1:3]))

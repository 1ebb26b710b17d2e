"""Run compiled artifacts back to back many times on the GPU, each in its own process, and count the
runs that fail: an intermittent fault (a race between a kernel's copies and its barriers, say) shows up
only in some runs, and a failed launch poisons the process's CUDA context.

    python3 scripts/gpu_stress.py ROUNDS FILE.oprim [FILE.oprim ...]     # on the GPU machine

Per file and round: its inputs random, 10 graph launches of 20 captured runs each (the way the
benchmarks time it), killed after TIMEOUT_S; prints per file the rounds that passed and how the others
failed.
"""
import os
import subprocess
import sys

TIMEOUT_S = 20                     # a round that takes longer has hung (a barrier never completed)
CHILD = """
import sys
import numpy as np
from runtime_path import import_runtime
net = import_runtime().load(sys.argv[1])
rng = np.random.default_rng(0)
feeds = [rng.standard_normal(net.plan["values"][i["value"]]["shape"]).astype(np.float32) for i in net.plan["inputs"]]
net(*feeds)
for _ in range(10):
    net.time_ms(repeat=5, captured=20)
"""


def main(rounds: int, files: list[str]) -> None:
    for path in files:
        passed = 0
        errors = set()
        for _ in range(rounds):
            try:
                run = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(path)], capture_output=True,
                                     text=True, cwd=sys.path[0], timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                errors.add(f"hung (killed after {TIMEOUT_S} s)")
                continue
            if run.returncode == 0:
                passed += 1
            else:
                errors.add(run.stderr.strip().splitlines()[-1][:160] if run.stderr.strip() else f"exit {run.returncode}")
        print(f"{path}: {passed}/{rounds} rounds passed" + (f"; {sorted(errors)}" if errors else ""))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])

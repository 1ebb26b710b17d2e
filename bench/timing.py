"""Timing shared by the benchmarks."""
import time

import numpy as np


def median_time(fn, repeat: int, warmup: int = 5) -> float:
    """Median seconds of fn() over `repeat` runs, after `warmup` runs."""
    time.sleep(0.3)  # let the other library's OpenMP threads stop spinning (KMP_BLOCKTIME is 200 ms)
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))

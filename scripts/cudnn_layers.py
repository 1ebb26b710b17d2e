"""cuDNN's time for every convolution problem of a tuning bundle, in the same run as its candidates.

    python scripts/cudnn_layers.py BUNDLE [BUNDLE...]       # on the GPU machine (torch + triton)

Reads the problem descriptors of the bundles' index.json (conv2d-NxCxHxW-kK-RxS-sAxB-pT..-dAxB-gG-LAYOUT-
FILTER-DTYPE-EPILOGUE), times torch.nn.functional.conv2d in that layout (channels_last for NHWC, input and
filter) with cudnn.benchmark, TF32 off and on, and prints one JSON line per problem: median microseconds of
bench/timing.layer_ms (the calls captured back to back in a CUDA graph; triton's do_bench_cudagraph), with
"peer": "cudnn". The first line is {"environment": ...}: the torch, triton and cuDNN versions and flags.
"""
import json
import os
import re
import sys
import zipfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from timing import layer_ms, peers_environment  # noqa: E402

DESCRIPTOR = re.compile(r"conv2d-(\d+)x(\d+)x(\d+)x(\d+)-k(\d+)-(\d+)x(\d+)-s(\d+)x(\d+)-p(\d+)x(\d+)x(\d+)x(\d+)"
                        r"-d(\d+)x(\d+)-g(\d+)-(\w+?)-\w+?-(\w+?)-")


def time_problem(descriptor: str) -> dict:
    m = DESCRIPTOR.match(descriptor)
    n, c, h, w, k, r, s, sh, sw, pt, pl, pb, pr, dh, dw, g = map(int, m.groups()[:16])
    layout, dtype = m.group(17), {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[m.group(18)]
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype).to(memory_format=fmt)
    wt = torch.randn(k, c // g, r, s, device="cuda", dtype=dtype).to(memory_format=fmt)
    if (pt, pl) != (pb, pr):
        x = torch.nn.functional.pad(x, (pl, pr, pt, pb)).to(memory_format=fmt)
        pt = pl = 0
    conv = lambda: torch.nn.functional.conv2d(x, wt, stride=(sh, sw), padding=(pt, pl), dilation=(dh, dw), groups=g)  # noqa: E731
    row = {"problem": descriptor, "peer": "cudnn"}
    for tf32 in (False, True):
        torch.backends.cudnn.allow_tf32 = tf32
        row["cudnn_us_tf32" if tf32 else "cudnn_us"] = 1e3 * layer_ms(conv)
    return row


def main(bundles) -> int:
    torch.backends.cudnn.benchmark = True
    print(json.dumps({"environment": peers_environment()}), flush=True)
    problems = []
    for path in bundles:
        with zipfile.ZipFile(path) as z:
            for cand in json.loads(z.read("index.json"))["candidates"]:
                if cand["problem"] not in problems:
                    problems.append(cand["problem"])
    for p in problems:
        print(json.dumps(time_problem(p)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

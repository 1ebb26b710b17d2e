"""Benchmark: the PyTorch models of examples/torch_models.py (and transformer_models.py's ViT-B/16 and Swin-T)
through both importers, on the CPU.

    python bench/models_cpu.py [--repeat 20] [--models resnet18,mobilenet_v2,swin_t] [--append]

For each model (batch 1; 3x224x224 images, or 64 tokens of width 256 for the transformer block):
the compile time through torch.export (export + import + openprim.compile) and through ONNX (export
to ONNX + import + openprim.compile), then the median latency of both executables and of the peers on
the same input, in the same process: ONNX Runtime on the same ONNX file (bench/timing.ort_session: CPU
provider, every core, all graph optimizations), then PyTorch eager (every core, inference_mode); and the
largest difference from eager relative to the output's scale (ours; ONNX Runtime's). `--append` adds the
table to bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import torch_models  # noqa: E402
import transformer_models  # noqa: E402
from timing import median_time, ort_config, ort_session, torch_cpu_threads  # noqa: E402

import openprim  # noqa: E402

HEADING = "## Models through the importers (CPU)"
# the image models of examples/: torch_models' convnets, transformer_models' ViT-B/16 and Swin-T
SOURCES = {**{name: torch_models for name in torch_models.MODELS}, "vit_b_16": transformer_models,
           "swin_t": transformer_models}


def bench(name, repeat):
    source = SOURCES[name]
    if source is torch_models:
        model, x = torch_models.get(name), torch_models.example_input(name)
    else:
        model = source.get(name)
        x, = source.example_input(model)
    row = {"model": name, "input": "x".join(map(str, x.shape))}
    exes = {}
    for via in ("torch", "onnx"):
        t0 = time.perf_counter()
        exes[via] = openprim.compile(source.build(name, via=via), target="cpu")
        row[via + "_s"] = time.perf_counter() - t0
    xn = x.numpy()
    sess = ort_session(source.to_onnx(model, x) if source is torch_models else source.to_onnx(model, (x,)))
    feed = {sess.get_inputs()[0].name: xn}
    with torch.inference_mode():
        want = model(x).numpy()
        row["ort_ms"] = 1e3 * median_time(lambda: sess.run(None, feed), repeat)
        row["eager_ms"] = 1e3 * median_time(lambda: model(x), repeat)
    for via, exe in exes.items():
        row[via + "_ms"] = 1e3 * median_time(lambda: exe(xn), repeat)
    scale = float(np.abs(want).max())
    row["diff"] = max(float(np.abs(np.asarray(exe(xn)) - want).max()) for exe in exes.values()) / scale
    row["ort_diff"] = float(np.abs(sess.run(None, feed)[0] - want).max()) / scale
    return row


def table(rows, repeat):
    lines = ["| model | input | compile: torch.export / ONNX | run: ours via torch / via ONNX | ONNX Runtime | "
             "PyTorch eager | ORT / ours | eager / ours | max rel diff (ours; ORT) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['input']} | {r['torch_s']:.1f} s / {r['onnx_s']:.1f} s | "
                     f"{r['torch_ms']:.2f} / {r['onnx_ms']:.2f} ms | {r['ort_ms']:.2f} ms | {r['eager_ms']:.2f} ms | "
                     f"{r['ort_ms'] / r['torch_ms']:.2f}x | {r['eager_ms'] / r['torch_ms']:.2f}x | "
                     f"{r['diff']:.1e}; {r['ort_diff']:.1e} |")
    ort = ort_config()
    return "\n".join(lines) + (f"\n\nMedians of {repeat} runs, fp32, batch 1; ONNX Runtime {ort['onnxruntime']} "
                               f"({ort['intra_op_num_threads']} intra-op threads, all optimizations), PyTorch "
                               f"{torch.__version__} ({torch.get_num_threads()} threads).\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--models", default=",".join(torch_models.MODELS), help=f"of: {', '.join(SOURCES)}")
    ap.add_argument("--append", action="store_true", help="append the table to bench/RESULTS.md")
    args = ap.parse_args()
    torch_cpu_threads()
    rows = []
    for name in args.models.split(","):
        rows.append(bench(name, args.repeat))
        print(f"{name}: done", file=sys.stderr)
    text = table(rows, args.repeat)
    print(text)
    if args.append:
        with open(os.path.join(HERE, "RESULTS.md"), "a") as f:
            f.write(f"\n{HEADING}\n\n`python bench/models_cpu.py --repeat {args.repeat}`: the models of\n"
                    "examples/torch_models.py (torchvision's layer structure, random weights). Compile time is\n"
                    "export + import + openprim.compile; ONNX Runtime runs the ONNX export, eager is PyTorch (oneDNN),\n"
                    "both in the same process on every core.\n\n"
                    + text)


if __name__ == "__main__":
    main()

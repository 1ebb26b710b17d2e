"""Hugging Face language models at their published sizes on the CPU: OpenPrim against ONNX Runtime and PyTorch.

    python bench/language_models_cpu.py --models bert,gpt2 --batch 1 --seq 128 [--layers 12] [--out bench/lm_cpu.json]

Each model comes from examples/language_models.py at size "base" (BERT-base: 12 layers, hidden 768, the
published vocabulary; --layers shortens it), with int64 token ids and an attention mask that pads the last
sequence. OpenPrim imports it through torch.export and compiles it for this CPU; ONNX Runtime runs
torch.onnx.export's file on every core with all graph optimizations; PyTorch runs eager on every core under
inference_mode (bench/timing.py's peers). The times are medians of --repeat calls (bench/timing.median_time),
one model at a time in one process; the output is checked against eager (max |err| / max |eager|).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)
import language_models as lm  # noqa: E402
from timing import median_time, ort_config, ort_session, torch_cpu_threads  # noqa: E402


def measure(name: str, batch: int, seq: int, layers: int | None, repeat: int) -> dict:
    import torch
    import openprim
    from openprim.pyfrontend.torch import import_exported
    model = lm.get(name, "base", layers=layers)
    inputs = lm.example_input(model, batch, seq)
    feeds = {k: v.numpy() for k, v in inputs.items()}
    t0 = time.perf_counter()
    graph = import_exported(torch.export.export(model, (), inputs))[0]
    exe = openprim.compile(graph)
    compile_s = time.perf_counter() - t0
    want = lm.reference(model, inputs)
    got = exe(**feeds)[0]
    row = {"model": name, "batch": batch, "seq": seq, "layers": model.config.num_hidden_layers
           if hasattr(model.config, "num_hidden_layers") else model.config.n_layer,
           "compile_s": round(compile_s, 1), "max_rel_error": float(np.abs(got - want).max() / np.abs(want).max())}
    row["openprim_ms"] = median_time(lambda: exe(**feeds), repeat) * 1e3
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (), buf, kwargs=inputs, input_names=list(inputs), output_names=["hidden"])
    session = ort_session(buf.getvalue())
    row["onnxruntime_ms"] = median_time(lambda: session.run(None, feeds), repeat) * 1e3
    torch_cpu_threads()
    with torch.inference_mode():
        row["pytorch_ms"] = median_time(lambda: model(**inputs), repeat) * 1e3
    row["vs_onnxruntime"] = row["onnxruntime_ms"] / row["openprim_ms"]
    row["vs_pytorch"] = row["pytorch_ms"] / row["openprim_ms"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert,gpt2")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the published model")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", default=None, help="a JSON file for the rows")
    args = ap.parse_args(argv)
    from openprim.base.files import atomic_file
    rows = []
    for name in args.models.split(","):
        row = measure(name, args.batch, args.seq, args.layers, args.repeat)
        rows.append(row)
        print(f"{name} b{row['batch']} s{row['seq']} L{row['layers']}: openprim {row['openprim_ms']:.1f} ms, "
              f"onnxruntime {row['onnxruntime_ms']:.1f} ms ({row['vs_onnxruntime']:.2f}x), pytorch "
              f"{row['pytorch_ms']:.1f} ms ({row['vs_pytorch']:.2f}x); error {row['max_rel_error']:.1e}, "
              f"compile {row['compile_s']} s", flush=True)
    if args.out:
        meta = {"command": "python bench/language_models_cpu.py " + " ".join(argv or sys.argv[1:]),
                "machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                "load_average": os.getloadavg(), "onnxruntime": ort_config()}
        with atomic_file(args.out, "w", "--out") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

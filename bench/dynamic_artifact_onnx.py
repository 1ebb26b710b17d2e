"""Benchmark: a user's ONNX model with dynamic axes compiled into one artifact for a sequence range, against ONNX
Runtime on the same file, in the same run.

    python bench/dynamic_artifact_onnx.py [--batch 8] [--range 8:128] [--lengths 13,77,128] [--repeat 5]
                                          [--out bench/dynamic_artifact_bert_cpu.json]

Hugging Face BERT-base from its config (random weights), exported with torch.onnx.export with `batch` and
`sequence` as named dynamic axes, as users export it. `openprim compile bert.onnx -D batch=B --dynamic
sequence=LOW:HIGH --pad input_ids=0 --pad attention_mask=0` writes one artifact (a plan per power-of-two bucket,
the weights pooled; timed, with a cold compile cache unless OPENPRIM_CACHE_DIR holds the buckets); then
`openprim.runtime.load` runs it at each length (padded into its bucket, the output cut back) against an ORT
InferenceSession on all cores: the largest difference relative to ORT's largest output, and the mean time of
--repeat calls after one warm-up each.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
from timing import ort_session

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import language_models  # noqa: E402 - examples/ on the path


def export(model, path: str, batch: int) -> None:
    import torch
    wrapped = language_models.LastHidden(model).eval()
    feeds = language_models.example_input(model, batch=batch, seq=16)
    axes = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapped, (feeds["input_ids"], feeds["attention_mask"]), path, dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask"], output_names=["hidden"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "hidden": axes})


def mean_time(fn, repeat: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--range", default="8:128")
    ap.add_argument("--lengths", default="13,77,128")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    import transformers as tf
    from openprim.runtime import load
    torch.manual_seed(0)
    model = tf.BertModel(tf.BertConfig()).eval()
    work = tempfile.mkdtemp(prefix="openprim-bench-")
    onnx_path, oprim = os.path.join(work, "bert.onnx"), os.path.join(work, "bert.oprim")
    export(model, onnx_path, args.batch)
    t0 = time.perf_counter()
    r = subprocess.run(["openprim", "compile", onnx_path, "-D", f"batch={args.batch}", "--dynamic",
                        f"sequence={args.range}", "--pad", "input_ids=0", "--pad", "attention_mask=0", "-o", oprim],
                       capture_output=True, text=True)
    compile_s = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(r.stderr)
    print(r.stdout.strip(), flush=True)
    exe, sess = load(oprim), ort_session(onnx_path)
    rows = []
    print(f"{'length':>6} {'bucket':>6} {'openprim ms':>11} {'ORT ms':>8} {'ORT/ours':>8} {'max rel diff':>12}")
    for seq in (int(s) for s in args.lengths.split(",")):
        f = language_models.example_input(model, batch=args.batch, seq=seq, seed=seq)
        ids, mask = f["input_ids"].numpy(), f["attention_mask"].numpy()
        got, want = exe(ids, mask), sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        diff = float(np.abs(got - want).max() / np.abs(want).max())
        ours = mean_time(lambda: exe(ids, mask), args.repeat)
        theirs = mean_time(lambda: sess.run(None, {"input_ids": ids, "attention_mask": mask}), args.repeat)
        bucket = exe.range.bucket(seq)
        rows.append({"length": seq, "bucket": bucket, "openprim_ms": ours * 1e3, "ort_ms": theirs * 1e3,
                     "ort_over_ours": theirs / ours, "max_rel_diff": diff})
        print(f"{seq:6d} {bucket:6d} {ours * 1e3:11.1f} {theirs * 1e3:8.1f} {theirs / ours:8.2f} {diff:12.1e}", flush=True)
        assert diff < 1e-4, (seq, diff)
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"command": f"python bench/dynamic_artifact_onnx.py --batch {args.batch} --range {args.range} "
                                  f"--lengths {args.lengths} --repeat {args.repeat}",
                       "compile": r.stdout.strip(), "compile_s": compile_s, "buckets": exe.buckets,
                       "machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()

"""Benchmark: one dynamic-batch model against models specialized to each batch, with PyTorch eager in the run.

    python bench/dynamic_batch.py [--model resnet|bert] [--batches 1,2,3,4,6,8] [--max 8] [--repeat 5]
                                  [--device cpu|cuda] [--out bench/dynamic_batch_cpu.json]
    python bench/dynamic_batch.py --model bert --sequences 32,100,128,300,512 [--max-seq 512] [--per-octave 4]
    python bench/dynamic_batch.py ... --artifact /tmp/range.oprim   # the range as one artifact, runtime only

With --sequences the batch is 1 and the sequence length varies: compile_module(..., dynamic_sequence=
(first, --max-seq), sequence_padding ids and mask 0), each length padded into its power-of-two bucket.

The model is built as a user brings it: Hugging Face transformers from its config with random weights
(resnet: ResNetConfig(), ResNet-50 at 224x224; bert: BertConfig() base size at 128 tokens). OpenPrim compiles
it once with compile_module(..., dynamic_batch=(1, --max)) (driver/dynamic_batch.py: buckets at the powers
of two, compiled on first use) and, for comparison, once per batch without it (specialized). For every batch:
the dynamic model's time (the buckets it runs as, dynamic_batch.Buckets.pieces: a sum of buckets on
the CPU, one padded bucket on a GPU), the specialized one's, their ratio, and PyTorch eager on every core
(torch_cpu_threads, inference_mode), all timed in the same process, the dynamic and the specialized model
in --repeat interleaved rounds after two warm-up calls (a call each, median_time, on the CPU; CUDA events
around 10 calls with --device cuda: the model and inputs in fp16 on the GPU, OpenPrim compiling for it),
the median over the rounds; the compile seconds of the buckets a batch needed first and of each
specialized model; the largest relative difference from eager. Outputs are checked against eager
(1e-3 of the largest output in f32 on the CPU, 2e-2 in fp16 on the GPU).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
from timing import cuda_ms, median_time, torch_cpu_threads

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def build(name: str):
    """(module, make_inputs(batch) -> tuple of tensors), seeded."""
    import torch
    import transformers as tf
    torch.manual_seed(0)
    if name == "resnet":
        model = tf.ResNetModel(tf.ResNetConfig()).eval()

        class Pooled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, pixel_values):
                return self.model(pixel_values=pixel_values).pooler_output

        def inputs(batch):
            return (torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch)),)
        return Pooled().eval(), inputs
    if name == "bert":
        import language_models
        model = tf.BertModel(tf.BertConfig()).eval()

        def inputs(batch, seq=128):
            feeds = language_models.example_input(model, batch=batch, seq=seq, seed=batch + seq)
            return feeds["input_ids"], feeds["attention_mask"]
        return language_models.LastHidden(model).eval(), inputs
    raise SystemExit(f"unknown model {name!r}: resnet or bert")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet")
    ap.add_argument("--batches", default="1,2,3,4,6,8")
    ap.add_argument("--max", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--sequences", default=None,
                    help="bert: vary the sequence length instead (batch 1), e.g. 32,100,128,300,512: "
                         "compile_module(dynamic_sequence=(first, --max-seq)), padded with ids and mask 0")
    ap.add_argument("--max-seq", type=int, default=512)
    ap.add_argument("--per-octave", type=int, default=1, help="sequence buckets per doubling (BatchRange)")
    ap.add_argument("--artifact", metavar="PATH", help="time the range written as one artifact (.save(PATH), format "
                                                      "version 5) through openprim.runtime.load, numpy in and out, "
                                                      "against the specialized executables called the same way")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    from openprim.torch_backend import compile_module
    threads = torch_cpu_threads()
    model, host_inputs = build(args.model)
    if args.device == "cuda":
        model = model.half().cuda()

    sequences = [int(s) for s in args.sequences.split(",")] if args.sequences else None

    def inputs(size):
        host = host_inputs(1, size) if sequences else host_inputs(size)
        return tuple(x.to(args.device, torch.float16 if x.is_floating_point() else x.dtype)
                     for x in host) if args.device == "cuda" else host

    def timed(*fns):
        """Median seconds of each fn, timed in interleaved rounds (a quiet moment favours none of them)."""
        times = [[] for _ in fns]
        for fn in fns:
            fn()
            fn()
        for _ in range(args.repeat):
            for fn, ts in zip(fns, times):
                ts.append(median_time(fn, 1, warmup=0) if args.device == "cpu" else cuda_ms(fn, 10) / 1e3)
        return [float(np.median(ts)) for ts in times]
    batches = sequences or [int(b) for b in args.batches.split(",")]
    if sequences:
        dynamic = compile_module(model, inputs(batches[0]), dynamic_sequence=(batches[0], args.max_seq, args.per_octave),
                                 sequence_padding={"input_ids": 0, "attention_mask": 0})
    else:
        dynamic = compile_module(model, inputs(2), dynamic_batch=(1, args.max))
    if args.artifact:
        from openprim.runtime import load
        from openprim.runtime.buckets import piece_sizes
        t0 = time.perf_counter()
        saved = dynamic.save(args.artifact)
        artifact = load(args.artifact)
        print(f"{args.artifact}: buckets {saved['buckets']} compiled and written in {time.perf_counter() - t0:.1f} s, "
              f"{saved['bytes'] / 2**20:.1f} MiB (weights pooled {saved['pool_bytes'] / 2**20:.1f} MiB of the buckets' "
              f"{saved['bucket_bytes'] / 2**20:.1f} MiB)")

        def as_numpy(xs):
            return [x.cpu().numpy() for x in xs]
    rows = []
    print(f"{'seq' if sequences else 'batch':>5} {'pieces':>8} {'dynamic ms':>10} {'specialized ms':>14} {'dyn/spec':>8} {'eager ms':>9} "
          f"{'compile s (bucket / specialized)':>32} {'max rel err':>11}")
    for b in batches:
        xs = inputs(b)
        known = set(dynamic.buckets.compiled)
        t0 = time.perf_counter()
        got = dynamic(*xs)
        new = sorted(set(dynamic.buckets.compiled) - known)
        bucket_s = time.perf_counter() - t0 if new else None
        pieces = "+".join(str(c) for _, c, _ in dynamic.buckets.pieces(b))   # a sequence: its one bucket
        t0 = time.perf_counter()
        special = compile_module(model, xs)
        special_s = time.perf_counter() - t0
        with torch.inference_mode():
            want = model(*xs)
            t_eager, = timed(lambda: model(*xs))
        if args.artifact:   # the artifact and the specialized executable, both numpy in and out
            arrays = as_numpy(xs)
            got = torch.from_numpy(artifact(*arrays)).to(want.device)
            pieces = "+".join(str(c) for c, _ in piece_sizes(artifact.range, b, artifact.spec["split"]))
            runs = (lambda: artifact(*arrays), lambda: special.exe(*arrays))
        else:
            runs = (lambda: dynamic(*xs), lambda: special(*xs))
        err = float((got.double() - want.double()).abs().max() / want.double().abs().max())
        t_dyn, t_spec = timed(*runs)
        row = {"sequence" if sequences else "batch": b, "pieces": pieces, "compiled_now": new, "dynamic_ms": t_dyn * 1e3, "specialized_ms": t_spec * 1e3,
               "dynamic_over_specialized": t_dyn / t_spec, "eager_ms": t_eager * 1e3,
               "bucket_compile_s": bucket_s, "specialized_compile_s": special_s,
               "specialized_cache_hit": special.exe.cache_hit, "max_rel_err": err}
        rows.append(row)
        compile_cell = f"{bucket_s:.1f}" if bucket_s is not None else "(compiled)"
        print(f"{b:5d} {pieces:>8} {t_dyn * 1e3:10.3f} {t_spec * 1e3:14.3f} {t_dyn / t_spec:8.3f} {t_eager * 1e3:9.3f} "
              f"{compile_cell + ' / ' + f'{special_s:.1f}' + (' (cached)' if special.exe.cache_hit else ''):>32} "
              f"{err:11.1e}", flush=True)
        assert err < (2e-2 if args.device == "cuda" else 1e-3), (b, err)   # fp16 on the GPU, f32 on the CPU
    print(f"{args.device}: PyTorch eager on {threads} threads; the buckets' compile is charged to the first batch that "
          f"needs them (with the compile cache: the specialized model of a bucket's size is that bucket's entry)")
    if args.out:
        with open(args.out, "w") as f:
            sizes = f"--sequences {args.sequences} --max-seq {args.max_seq} --per-octave {args.per_octave}" \
                if sequences else \
                f"--batches {args.batches} --max {args.max}"
            json.dump({"command": f"python bench/dynamic_batch.py --model {args.model} {sizes} "
                                  f"--repeat {args.repeat} --device {args.device}"
                                  + (" --artifact PATH" if args.artifact else ""),
                       "artifact": {k: saved[k] for k in ("buckets", "bytes", "pool_bytes", "bucket_bytes")}
                       if args.artifact else None,
                       "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                       "model": args.model, "threads": threads, "torch": torch.__version__,
                       "machine": platform.processor() or platform.machine(), "buckets": sorted(dynamic.buckets.compiled),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

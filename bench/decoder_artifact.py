"""Benchmark: a Hugging Face GPT-2 compiled ahead of time into one decoder artifact, run by the runtime alone.

    python bench/decoder_artifact.py [--prompt 40] [--max-prompt 64] [--new 24] [--out bench/decoder_artifact_cpu.json]

GPT2Config() (GPT-2 small, 124M, random weights) as a user brings it: openprim.decoding.Decoder(model, batch=1,
max_len=max_prompt + new).save(path, max_prompt) writes the one-token step and the prefill buckets up to
max_prompt tokens (the weights pooled). Then a fresh Python process that imports only openprim.runtime (no MLIR,
no torch: checked in sys.modules) loads the artifact and generates greedily and with sampling; its greedy
tokens must equal the in-process Decoder's. Reported: compile-and-save seconds (cold: its own compile cache),
the artifact's bytes against the buckets' own weights, load seconds, and ms per token (prefill + new tokens,
median of 3) for the runtime process and the in-process Decoder.
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

import numpy as np

RUNTIME_SIDE = r"""
import json, sys, time
import numpy as np
from openprim.runtime import load
t0 = time.perf_counter()
dec = load(sys.argv[1])
load_s = time.perf_counter() - t0
ids = np.load(sys.argv[2])
new = int(sys.argv[3])
times = []
for _ in range(3):
    t0 = time.perf_counter()
    greedy = dec.generate(ids, new)
    times.append(time.perf_counter() - t0)
sampled = dec.generate(ids, new, do_sample=True, top_k=40, top_p=0.95, temperature=0.8, seed=0)
bad = [m for m in ("mlir", "torch", "transformers") if m in sys.modules]
print(json.dumps({"load_s": load_s, "generate_s": sorted(times)[1], "greedy": greedy.tolist(),
                  "sampled": sampled.tolist(), "imported": bad}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=40)
    ap.add_argument("--max-prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=24)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    import transformers
    from openprim.decoding import Decoder

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, args.prompt))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OPENPRIM_CACHE_DIR"] = os.path.join(tmp, "cache")      # cold: nothing compiled before
        t0 = time.perf_counter()
        dec = Decoder(model, batch=1, max_len=args.max_prompt + args.new)
        path = os.path.join(tmp, "gpt2.oprim")
        info = dec.save(path, max_prompt=args.max_prompt)
        save_s = time.perf_counter() - t0
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            want = dec.generate(ids, args.new)
            times.append(time.perf_counter() - t0)
        np.save(os.path.join(tmp, "ids.npy"), ids)
        env = {k: v for k, v in os.environ.items() if k != "OPENPRIM_CACHE_DIR"}
        run = subprocess.run([sys.executable, "-c", RUNTIME_SIDE, path, os.path.join(tmp, "ids.npy"), str(args.new)],
                             capture_output=True, text=True, env=env, check=True)
        side = json.loads(run.stdout.strip().splitlines()[-1])
    tokens = args.prompt + args.new
    result = {
        "command": "python bench/decoder_artifact.py " + " ".join(sys.argv[1:]),
        "model": "GPT2Config() (124M, random weights)", "prompt": args.prompt, "new": args.new,
        "buckets": info["buckets"], "save_s": save_s, "artifact_mb": info["bytes"] / 1e6,
        "pool_mb": info["pool_bytes"] / 1e6, "runtime_load_s": side["load_s"],
        "runtime_ms_per_token": side["generate_s"] / args.new * 1e3,
        "in_process_ms_per_token": sorted(times)[1] / args.new * 1e3,
        "greedy_equal": side["greedy"] == want.tolist(), "runtime_imported": side["imported"],
        "sampled_tokens": side["sampled"][0][args.prompt:], "tokens": tokens,
        "machine": {"cpu": platform.machine(), "cores": os.cpu_count()},
    }
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

"""Greedy decoding on the GPU found here against eager PyTorch, token for token (a machine with MLIR: source
scripts/device_env.sh first).

    python scripts/gpu_decode_check.py [--new 12]

Small GPT-2 and Llama-style models from their configs (examples/language_models.small_decoder, as in
test_decoding.py), fp32, batch 2, prompts of 5 (padded into the prefill bucket of 8) and 8 tokens: openprim.decoding's
Decoder compiled for this GPU (caches carried as state in device memory, written in place) against full
forward passes of the eager model on the CPU. Prints one line per model and prompt; exits 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

from openprim.decoding import Decoder

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import language_models  # noqa: E402 - examples/ on the path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", type=int, default=12)
    args = ap.parse_args()
    major, minor = torch.cuda.get_device_capability()
    target = f"nvvm:sm_{major}{minor}"
    bad = 0
    for kind in ("gpt2", "llama"):
        model = language_models.small_decoder(kind)
        dec = Decoder(model, batch=2, max_len=24, target=target)
        copies = [e["name"] for e in dec.step.plan["state"] if e.get("copy")]
        for prompt in (5, 8):
            ids = np.random.default_rng(prompt).integers(0, 97, (2, prompt))
            got, want = dec.generate(ids, args.new), language_models.eager_greedy(model, ids, args.new)
            same = bool((got == want).all())
            bad += not same
            print(f"{kind} {target} prompt {prompt}: {'same tokens' if same else 'DIFFERENT'} "
                  f"(state copied: {copies or 'none, in place'})\n  ours  {got[:, prompt:].tolist()}\n"
                  f"  eager {want[:, prompt:].tolist()}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""A model that no test or example contains, written from its paper, through the path a user takes on the GPU.

DeiT-S (Touvron et al. 2021, "Training data-efficient image transformers", table 1: 384 wide, 12 blocks of
6 heads, MLP ratio 4, 16x16 patches, a class token, pre-norm with LayerNorm eps 1e-6), with the attention
written as timm writes it: one packed qkv Linear, reshape/permute to [3, B, H, N, D], torch's
scaled_dot_product_attention, transpose back. OpenPrim meets the packed projection's slices
(matmul_views), the head transposes around the attention (attention_layout), the patch convolution
(conv_patches) and the norms; none of its tests builds this module.

    . scripts/device_env.sh && python scripts/gpu_paper_model.py             # on the GPU machine
    python scripts/gpu_paper_model.py --compile-only                          # here: nvvm:sm_90, no GPU

On the GPU: compile_module on CUDA fp16 tensors (batch 32), the error against eager, then OpenPrim and the
PyTorch peers of bench/timing.torch_peers (eager, inductor-freezing: torch.compile with freezing,
inductor-freezing-cudagraphs: the same with mode="reduce-overhead") timed in interleaved rounds (CUDA events),
and our kernel time by kind. --json PATH (default $OUT/gpu_paper_model.json when OUT is set) writes the
figures with the peers' configurations and the torch/triton versions.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch
from torch import nn
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
from runtime_path import use_checkout  # noqa: E402

use_checkout()
from gpu_models import kinds_breakdown, max_rel_error  # noqa: E402
from timing import FREEZING, best_peer, medians, peers_environment, time_rounds, torch_peers  # noqa: E402


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=4):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DeiT(nn.Module):
    def __init__(self, image=224, patch=16, dim=384, depth=12, heads=6, classes=1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compile-only", action="store_true", help="compile for nvvm:sm_90 here (no GPU)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=os.path.join(os.environ["OUT"], "gpu_paper_model.json") if os.environ.get("OUT")
                    else None, help="write the results here (default: $OUT/gpu_paper_model.json when OUT is set)")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    model = DeiT().eval()
    x = torch.randn(a.batch, 3, 224, 224)
    if a.compile_only:
        from openprim import compiler
        from openprim.pyfrontend.torch import import_exported
        from openprim.timings import CompileTimings
        t0 = time.perf_counter()
        graph, _ = import_exported(torch.export.export(model.half(), (x.half(),)))
        timings = CompileTimings()
        with tempfile.TemporaryDirectory() as scratch:
            info = compiler.save(graph, os.path.join(scratch, "deit.oprim"), target="nvvm:sm_90", timings=timings)
        kinds = kinds_breakdown(info["plan"], None)
        print(f"DeiT-S b{a.batch} -> nvvm:sm_90: {time.perf_counter() - t0:.1f} s ("
              + ", ".join(f"{k} {v:.1f}" for k, v in timings.stages.items()) + "); steps by kind: "
              + ", ".join(f"{k} {v['steps']}" for k, v in kinds.items()))
        return 0
    from openprim.torch_backend import compile_module
    torch.backends.cudnn.benchmark = True
    model, x = model.half().cuda(), x.half().cuda()
    with torch.inference_mode():
        want = model(x)
        t0 = time.perf_counter()
        ours = compile_module(model, (x,))
        compile_s = time.perf_counter() - t0
        error = max_rel_error(want, ours(x))
    peers = torch_peers(model, (x,), dtype=torch.float16)
    peer_errors = {k: max_rel_error(want, p.output()) for k, p in peers.items() if not p.error}
    calls = {**{k: p.fn for k, p in peers.items() if not p.error}, "ours": lambda: ours(x)}
    modes = {**{k: p.mode for k, p in peers.items()}, "ours": torch.inference_mode}
    ms = medians(time_rounds(calls, a.rounds, a.iters, modes))
    with torch.inference_mode():
        torch.cuda.synchronize()
        kinds = kinds_breakdown(ours.exe.plan, ours.exe.time_steps(repeat=10))
    best = best_peer(ms)
    print(f"DeiT-S batch {a.batch} fp16 on {torch.cuda.get_device_name()}: compile {compile_s:.1f} s "
          f"(cache hit: {ours.exe.cache_hit}), error vs eager {error:.1e} ("
          + ", ".join(f"{k} {v:.1e}" for k, v in peer_errors.items()) + ")")
    print("ms: " + ", ".join(f"{k} {v:.3f}" for k, v in ms.items())
          + "".join(f"; {k} / ours {ms[k] / ms['ours']:.2f}x" for k in peers if k in ms)
          + (f"; best torch ({best}) / ours {ms[best] / ms['ours']:.2f}x" if best else ""))
    for k, p in peers.items():
        if p.error:
            print(f"torch peer {k} FAILED: {p.error}")
    print("ours by kind: " + ", ".join(f"{k} {v['ms']:.3f} ms ({v['steps']})" for k, v in kinds.items()))
    if a.json:
        records = {k: {**p.record(), **({"ms": ms[k], "max_rel_error": peer_errors[k]} if k in ms else {})}
                   for k, p in peers.items()}
        result = {"environment": peers_environment(), "model": "deit_s", "batch": a.batch, "dtype": "f16",
                  "compile_s": compile_s, "cache_hit": ours.exe.cache_hit, "max_rel_error": error, "ms": ms,
                  "torch_compile_ms": ms.get(FREEZING), "torch_peers": records, "best_torch": best,
                  "kinds": kinds}
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if error < 2e-2 and not any(p.error for p in peers.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Attention on the GPU against torch.nn.functional.scaled_dot_product_attention, in the same run.

    python bench/gpu_attention.py build DIR [--target nvvm:sm_90] [--dtype f16 bf16]   # here: compile (needs MLIR)
    python bench/gpu_attention.py run DIR                                         # GPU machine: runtime + torch

Cases (issue 15): batch 8, 16 heads, 512 and 2048 tokens, head dims 64 and 128, causal and not. Each case is
one `Graph.attention`: whatever the compiler makes of it on the target: in f16/bf16 with head dims 64 and 128
on NVIDIA, one flash-attention kernel (sm_90: attention_flash_wgmma, kernels/nvidia/flash_attention_wgmma.py;
sm_80 or with a mask: attention_flash_mma, kernels/nvidia/flash_attention.py); elsewhere
prim-decompose's matmul -> softmax -> matmul, with the S x S scores in memory. cases.json names the solvers.
Before timing, every case is checked against torch's SDPA in float32 on the GPU (same rounded inputs); then ours
(the artifact's own timer) and SDPA (PyTorch eager's scaled_dot_product_attention: its flash kernel; timed with
bench/timing.layer_ms, the calls captured back to back in a CUDA graph, median) are timed and printed with
TFLOP/s (4 B H S^2 D, halved when causal) and the ratio torch_ms / ours_ms (issue 15 asks for >= 0.8). Each row
of $OUT/gpu_attention.json names its peer and holds the torch/triton versions under environment.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_path import import_runtime  # noqa: E402
from timing import layer_ms, peers_environment  # noqa: E402

BATCH, HEADS = 8, 16


def cases(dtype):
    """name -> (b, h, s, d, causal)."""
    return {f"attn_s{s}_d{d}{'_causal' if causal else ''}_{dtype}": (BATCH, HEADS, s, d, causal)
            for s in (512, 2048) for d in (64, 128) for causal in (False, True)}


def flops(b, h, s, d, causal):
    return 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)


def kernel_solvers(module) -> list[str]:
    """The solver (or, without one, the op) of each kernel of a lowered module."""
    from openprim.dialect import body, kernels_module
    return sorted({str(op.attributes["prim.solver" if "prim.solver" in op.attributes else "prim.op"]).strip('"')
                   for op in body(kernels_module(module.operation)).operations
                   if op.operation.name in ("llvm.func", "func.func") and "prim.op" in op.attributes})


def build(directory, target, dtypes):
    from openprim import compiler
    from openprim.pyfrontend import Graph
    os.makedirs(directory, exist_ok=True)
    summary = {}
    for name, (b, h, s, d, causal, dtype) in {n: c + (dt,) for dt in dtypes for n, c in cases(dt).items()}.items():
        t0 = time.perf_counter()
        g = Graph(name="attention", dtype=dtype)
        q, k, v = (g.input(n, (b, h, s, d)) for n in "qkv")
        g.output(g.attention(q, k, v, causal=causal))
        module = compiler.lower(g, target)
        compiler.write_artifact(module, os.path.join(directory, name + ".oprim"), target)
        solvers = kernel_solvers(module)
        summary[name] = {"shape": [b, h, s, d], "causal": causal, "dtype": dtype, "kernels": solvers,
                         "compile_s": time.perf_counter() - t0}
        print(f"{name}: compiled for {target} in {summary[name]['compile_s']:.2f} s ({', '.join(solvers)})",
              flush=True)
    tmp = os.path.join(directory, "cases.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(tmp, os.path.join(directory, "cases.json"))


def run(directory):
    import torch
    F = torch.nn.functional
    runtime = import_runtime()
    environment = peers_environment()
    summary = json.load(open(os.path.join(directory, "cases.json")))
    rows = []
    for name, meta in summary.items():
        b, h, s, d = meta["shape"]
        tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[meta["dtype"]]
        net = runtime.load(os.path.join(directory, name + ".oprim"))
        rng = np.random.default_rng(1)
        qkv = [torch.from_numpy(rng.standard_normal((b, h, s, d)).astype(np.float32)).to(tdt) for _ in range(3)]
        y = np.asarray(net(*[t.float().numpy() for t in qkv]), np.float64)
        dev = [t.cuda() for t in qkv]
        ref = F.scaled_dot_product_attention(*[t.float() for t in dev], is_causal=meta["causal"]).double().cpu().numpy()
        row = {"case": name, "rel_err": float(np.abs(y - ref).max() / np.abs(ref).max()),
               "ms": net.time_ms(repeat=50), "peer": "torch sdpa",
               "torch_ms": layer_ms(lambda: F.scaled_dot_product_attention(*dev, is_causal=meta["causal"])),
               "environment": environment}
        f = flops(b, h, s, d, meta["causal"])
        row.update(tflops=f / row["ms"] / 1e9, torch_tflops=f / row["torch_ms"] / 1e9,
                   ratio=row["torch_ms"] / row["ms"])
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "environment"}), flush=True)
    print(f"\n{'case':28s} {'ours ms':>9s} {'TFLOP/s':>8s} {'sdpa ms':>9s} {'TFLOP/s':>8s} {'ratio':>6s}  err")
    for r in rows:
        print(f"{r['case']:28s} {r['ms']:9.3f} {r['tflops']:8.1f} {r['torch_ms']:9.3f} {r['torch_tflops']:8.1f} "
              f"{r['ratio']:6.2f}  {r['rel_err']:.1e}")
    out = os.environ.get("OUT")
    if out:
        tmp = os.path.join(out, "gpu_attention.json.tmp")
        with open(tmp, "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(tmp, os.path.join(out, "gpu_attention.json"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("dir")
    ap.add_argument("--target", default="nvvm:sm_90")
    ap.add_argument("--dtype", nargs="+", default=["f16"], choices=("f16", "bf16", "f32"))
    args = ap.parse_args()
    build(args.dir, args.target, args.dtype) if args.mode == "build" else run(args.dir)

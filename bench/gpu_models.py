"""Issue 15's per-model table on the GPU: PyTorch eager, torch.compile (freezing; freezing + CUDA graphs) and OpenPrim.

    . scripts/device_env.sh && python bench/gpu_models.py --out "$OUT"            # on the GPU machine
    python bench/gpu_models.py --compile-only --target nvvm:sm_90 --batch 2       # here: compile only, no GPU

Each model is a torch.nn module with its reference implementation's structure and seeded weights
(examples/torch_models.py, vision_models.py and, when it exists, transformer_models.py), run in fp16 at
batch 32 (BERT's encoder layer: batch 8, 512 tokens), convolutional networks in channels_last with
channels_last inputs. OpenPrim compiles it on the GPU machine itself, through the path a user takes:
`openprim.torch_backend.compile_module(model, inputs)` with CUDA inputs, so the target comes from the device
(scripts/device_env.sh installs MLIR there: the wheel and its libLLVM.so, carried in out/). Its output is checked against eager: max |ours - eager|
over max |eager|, which must stay under 2e-2 (fp16).

The timings are interleaved in rounds (bench/timing.time_rounds), each variant timed with CUDA events around
`iters` calls on PyTorch's stream, and the median over the rounds is reported:
  ours                          the compiled module called with CUDA tensors (read and written in place where
                                runtime/gpu.py can bind them, the plan replayed as one CUDA graph): what a user gets;
  ours_kernels                  the CUDA graph launched alone (the kernels, without the call's copies and Python);
  eager                         the module itself under inference_mode (cudnn.benchmark on);
  inductor-freezing             torch.compile(model, dynamic=False) with torch._inductor.config.freezing=True,
                                mode default (the key torch_compile keeps its figures, as before);
  inductor-freezing-cudagraphs  the same with mode="reduce-overhead" (CUDA graphs).
The three PyTorch peers come from bench/timing.torch_peers (compiled under no_grad for this batch, freezing set
only while they compile, 3 warm-up calls); best_torch names the fastest of them and vs_best_torch is its time
over ours.
Then the executable's time_steps (every step's launches timed alone) gives the kernel time by kind: the plan
names each step's kernel after its op (conv2d_7, matmul_33, ...), and the shapes of its operands tell the
kind of convolution apart (depthwise, grouped, 1x1, other); see `kernel_kind`.

The whole run must fit one device call (10 minutes): each model is compiled once by OpenPrim and twice by
inductor (the second compile reuses the first one's Triton kernels from inductor's cache), the
rounds are few, a model is skipped once --budget-s has passed, and DIR/gpu_models.json is rewritten after
every model, so a run cut short keeps what it measured. The markdown tables go to stdout. Compiling takes
most of the time (here, at batch 2 on two cores: 10-25 s per model for OpenPrim; torch.compile's inductor
was not measured here), so where all eight do not fit, split them over calls with --models.

--compile-only runs without a GPU: the same torch.export, import and compile as compile_module does
(openprim.compiler.save, which load_or_compile calls), for --target at --batch, without loading the result.
It reports each model's compile time by stage, its kernels and steps by kind, or the error that stopped it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
sys.path.insert(0, HERE)
from runtime_path import use_checkout  # noqa: E402 - scripts/: openprim from this checkout when not installed
from timing import (FREEZING, TORCH_PEERS, best_peer, medians, peers_environment, release_peers,  # noqa: E402
                    time_rounds, torch_peers)

# name -> (examples module, what the model takes, batch, channels_last)
MODELS = {
    "mobilenet_v2": ("torch_models", "image", 32, True),
    "resnet50": ("torch_models", "image", 32, True),
    "mobilenet_v3_large": ("vision_models", "image", 32, True),
    "efficientnet_b0": ("vision_models", "image", 32, True),
    "resnext50_32x4d": ("vision_models", "image", 32, True),
    "convnext_tiny": ("vision_models", "image", 32, True),
    "vit_b_16": ("transformer_models", "image", 32, False),
    "bert_encoder_layer": ("transformer_models", "tokens", 8, False),
    # Hugging Face models from their configs (examples/language_models.py, size "base"): token ids and an
    # attention mask with padding (int64), the last hidden state; --batch/--tokens set the shape.
    "bert": ("language_models", "ids", 8, False),
    "gpt2": ("language_models", "ids", 8, False),
    # torchvision's own models with seeded random weights, where torchvision is installed (the GPU machine)
    "densenet121": ("torchvision", "image", 32, True),
    "swin_t": ("torchvision", "image", 32, False),
}
# torchvision's models that examples/ writes out with its structure and state_dict names, for a machine
# without torchvision (--compile-only here): the same graph to compile
WRITTEN_OUT = {"swin_t": "transformer_models"}
IMAGE_SIZE, TOKENS = 224, 512
TOLERANCE = 2e-2                       # fp16: max |ours - eager| / max |eager|
VARIANTS = ("ours", "ours_kernels") + TORCH_PEERS
LEGACY = {"torch_compile": FREEZING}    # keys of earlier results files: the same figures under their old names


# ------------------------------------------------------------------------------------------- the models

def build_model(name: str):
    """The seeded module (fp32, CPU, eval mode), or None when its source (an examples file, torchvision)
    is not here."""
    import importlib
    import importlib.util
    source = MODELS[name][0]
    if source == "torchvision" and importlib.util.find_spec("torchvision") is None:
        source = WRITTEN_OUT.get(name)     # the examples' module of torchvision's structure, else not here
        if source is None:
            return None
    if source == "torchvision":
        import torch
        import torchvision
        torch.manual_seed(0)
        return getattr(torchvision.models, name)(weights=None).eval()
    if not os.path.exists(os.path.join(EXAMPLES, f"{source}.py")):
        return None
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    if MODELS[name][1] == "ids":
        module = importlib.import_module(source)
        return module.LastHidden(module.get(name, "base")).eval()
    return getattr(importlib.import_module(source), name)().eval()


def example_input(name: str, model, batch: int, tokens: int) -> tuple:
    """Seeded CPU inputs, a tuple: fp32 [batch, 3, 224, 224] images, [batch, tokens, hidden] for the BERT
    layer, or int64 token ids and an attention mask [batch, tokens] (the last sequence padded) for a
    language model."""
    import torch
    g = torch.Generator().manual_seed(1)
    if MODELS[name][1] == "ids":
        import language_models
        feeds = language_models.example_input(model.model, batch, tokens)
        return feeds["input_ids"], feeds["attention_mask"]
    if MODELS[name][1] == "tokens":
        hidden = model.attention.self.query.in_features      # Hugging Face BertLayer's names
        return (torch.randn(batch, tokens, hidden, generator=g),)
    return (torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g),)


def prepared(name: str, model, xs: tuple, device: str):
    """The fp16 module and its inputs on `device` (floats in fp16, ids and masks as they are); convolutional
    networks in channels_last memory."""
    import torch
    model = model.half().to(device).eval()
    xs = tuple(x.half().to(device) if x.is_floating_point() else x.to(device) for x in xs)
    if MODELS[name][3]:
        model, xs = model.to(memory_format=torch.channels_last), tuple(x.to(memory_format=torch.channels_last)
                                                                         for x in xs)
    return model, xs


# ------------------------------------------------------------------------------------------- kernel kinds

_BASES = (("depthwise_pointwise", "conv depthwise+1x1"), ("attention", "attention"), ("matmul", "matmul"), ("linear", "matmul"), ("gemm", "matmul"),
          ("softmax", "softmax"), ("norm", "norm"), ("pool", "pool"), ("transpose", "transpose"),
          ("pad", "copy"), ("concat", "copy"), ("slice", "copy"))


def op_name(step: dict) -> str:
    """The op a plan step's kernel was made from: its name without the number (conv2d_7 -> conv2d)."""
    return re.sub(r"_\d+$", "", step["kernel"])


def kernel_kind(plan: dict, step: dict) -> str:
    """The kind of a plan step's kernel, from its name (the op it was made from, plus a number) and, for
    convolutions, its operands: the first is the NHWC input, the first 4-d weight the RSCK filter (C per
    group). pad/concat/slice are copies; kernels of other ops (add, mul, gelu, fused_elementwise, ...) are
    elementwise."""
    base = op_name(step)
    if base.startswith("conv"):     # (prim.depthwise_pointwise's kernels are depthwise_pointwise_N: _BASES)
        values = [plan["values"][a] for a in step["args"]]
        filters = [v["shape"] for v in values if v["storage"] == "weight" and len(v["shape"]) == 4]
        if not filters or len(values[0]["shape"]) != 4:
            return "conv"
        (r, s, per_group, _), channels = filters[0], values[0]["shape"][3]
        if per_group == 1 and channels > 1:
            return "conv depthwise"
        if per_group < channels:
            return "conv grouped"
        return "conv 1x1" if r == s == 1 else "conv"
    return next((kind for word, kind in _BASES if word in base), "elementwise")


def kinds_breakdown(plan: dict, step_ms: list[float] | None) -> dict:
    """{kind: {"steps": n, "ms": total}} by descending time (or step count without times)."""
    kinds: dict[str, dict] = {}
    for i, step in enumerate(plan["steps"]):
        entry = kinds.setdefault(kernel_kind(plan, step), {"steps": 0, "ms": 0.0})
        entry["steps"] += 1
        entry["ms"] += step_ms[i] if step_ms else 0.0
    return dict(sorted(kinds.items(), key=lambda kv: (-kv[1]["ms"], -kv[1]["steps"])))


def slowest_steps(plan: dict, step_ms: list[float], count: int = 5) -> list[dict]:
    values = plan["values"]
    order = sorted(range(len(step_ms)), key=lambda i: -step_ms[i])[:count]
    return [{"kernel": plan["steps"][i]["kernel"], "kind": kernel_kind(plan, plan["steps"][i]), "ms": step_ms[i],
             "shapes": [values[a]["shape"] for a in plan["steps"][i]["args"]]} for i in order]


# ------------------------------------------------------------------------------------------- compile only

def compile_only(names, target: str, batch: int | None, tokens: int) -> list[dict]:
    """compile_module's export, import and compile (openprim.compiler.save) for `target`, nothing loaded."""
    import torch
    from openprim import compiler
    from openprim.pyfrontend.torch import import_exported
    from openprim.timings import CompileTimings
    rows = []
    for name in names:
        row = {"model": name, "batch": batch or MODELS[name][2]}
        rows.append(row)
        module = build_model(name)
        if module is None:
            row["skipped"] = f"{MODELS[name][0]} is not here"
            continue
        model, xs = prepared(name, module, example_input(name, module, row["batch"], tokens), "cpu")
        t0 = time.perf_counter()
        try:
            graph, _ = import_exported(torch.export.export(model, xs))
            row["import_s"] = time.perf_counter() - t0
            timings = CompileTimings()
            with tempfile.TemporaryDirectory(prefix="gpu-models-") as scratch:
                info = compiler.save(graph, os.path.join(scratch, f"{name}.oprim"), target=target, timings=timings)
        except Exception as e:  # noqa: BLE001 - a model that does not compile is a finding, the others go on
            row["error"] = f"{type(e).__name__}: {e}"
            row["traceback"] = traceback.format_exc(limit=-4)
            print(f"{name}: FAILED after {time.perf_counter() - t0:.1f} s: {row['error'][:2000]}", flush=True)
            continue
        row["compile_s"] = time.perf_counter() - t0
        row["stages_s"] = timings.stages
        row["steps"], row["kernels"] = len(info["plan"]["steps"]), len(info["plan"]["kernels"])
        row["mib"] = info["bytes"] / 2**20
        row["kinds"] = {k: v["steps"] for k, v in kinds_breakdown(info["plan"], None).items()}
        row["kernel_ops"] = {}                  # kind -> the ops its kernels were made from
        for step in info["plan"]["steps"]:
            ops = row["kernel_ops"].setdefault(kernel_kind(info["plan"], step), [])
            ops += [] if op_name(step) in ops else [op_name(step)]
        print(f"{name} b{row['batch']} -> {target}: {row['compile_s']:.1f} s (import {row['import_s']:.1f} s; "
              + ", ".join(f"{k} {v:.1f}" for k, v in timings.stages.items()) + f"), {row['steps']} steps, "
              f"{row['kernels']} kernels, {row['mib']:.1f} MiB; steps by kind: "
              + ", ".join(f"{k} {v}" for k, v in row["kinds"].items()), flush=True)
    return rows


# ------------------------------------------------------------------------------------------- on the GPU

def max_rel_error(want, got) -> float:
    """max |got - want| / max |want| over every output, in float64."""
    import torch
    wants, gots = torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)
    assert len(wants) == len(gots), (len(wants), len(gots))
    return max(float((g.double() - w.double()).abs().max() / w.double().abs().max()) for w, g in zip(wants, gots))


def measure(name: str, batch: int, tokens: int, iters: int, rounds: int, step_repeat: int,
            target: str | None = None) -> dict:
    """One model on the GPU: compile it (ours for `target`, default the GPU's) and its torch peers, check,
    time interleaved, break our kernel time down."""
    import torch
    from openprim.torch_backend import compile_module
    row = {"model": name, "batch": batch, **({"target": target} if target else {})}
    if MODELS[name][1] in ("tokens", "ids"):
        row["tokens"] = tokens
    module = build_model(name)
    if module is None:
        row["skipped"] = f"{MODELS[name][0]} is not here"
        return row
    model, xs = prepared(name, module, example_input(name, module, batch, tokens), "cuda")
    with torch.inference_mode():
        want = model(*xs)
        t0 = time.perf_counter()
        ours = compile_module(model, xs, target=target)
        row["compile_s"] = time.perf_counter() - t0
        exe = ours.exe
        row["cache_hit"], row["compile_stages_s"] = exe.cache_hit, exe.compile_seconds
        row["steps"], row["launches"] = len(exe.plan["steps"]), len(exe.launches)
        row["max_rel_error"] = max_rel_error(want, ours(*xs))

    peers = torch_peers(model, xs, dtype=torch.float16)
    row["torch_peers"] = {}
    for peer_name, peer in peers.items():
        record = row["torch_peers"][peer_name] = peer.record()
        if not peer.error:
            record["max_rel_error"] = max_rel_error(want, peer.output())
    row["torch_compile_s"] = peers[FREEZING].compile_s
    row["torch_compile_max_rel_error"] = row["torch_peers"][FREEZING].get("max_rel_error")

    stream = torch.cuda.current_stream().cuda_stream
    calls = {"ours": lambda: ours(*xs),
             "ours_kernels": lambda: exe.device.graph_launch(exe.graph[1], stream),   # captured by ours(*xs)
             **{k: p.fn for k, p in peers.items() if not p.error}}
    modes = {"ours": torch.inference_mode, "ours_kernels": torch.inference_mode,
             **{k: p.mode for k, p in peers.items()}}
    times = time_rounds(calls, rounds, iters, modes)
    row["ms"] = medians(times)
    row["ms_rounds"] = times
    for old, new in LEGACY.items():
        if new in row["ms"]:
            row["ms"][old] = row["ms"][new]
    for peer_name in row["ms"]:
        if peer_name in row["torch_peers"]:
            row["torch_peers"][peer_name]["ms"] = row["ms"][peer_name]
    with torch.inference_mode():
        torch.cuda.synchronize()
        step_ms = exe.time_steps(repeat=step_repeat)
    row["steps_ms_sum"] = sum(step_ms)
    row["kinds"] = kinds_breakdown(exe.plan, step_ms)
    row["slowest_steps"] = slowest_steps(exe.plan, step_ms)
    row["vs"] = {k: row["ms"][k] / row["ms"]["ours"] for k in TORCH_PEERS if k in row["ms"]}
    row["best_torch"] = best_peer(row["ms"])
    row["vs_best_torch"] = row["vs"].get(row["best_torch"])
    row["vs_torch_compile"] = row["vs"].get(FREEZING)
    row["vs_eager"] = row["vs"].get("eager")
    return row


def environment() -> dict:
    import platform
    import subprocess
    import torch
    import openprim
    from openprim.torch_backend import device_target
    try:
        commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {**peers_environment(), "gpu": torch.cuda.get_device_name(), "target": device_target("cuda"),
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "python": platform.python_version(), "openprim": openprim.__version__, "commit": commit}


def write_json(path: str, data: dict) -> None:
    from openprim.base.files import atomic_file
    with atomic_file(path, "w", "results") as f:
        json.dump(data, f, indent=1)


# ------------------------------------------------------------------------------------------- tables

def _size(row) -> str:
    return f"{row['batch']}x{row['tokens']}" if "tokens" in row else str(row["batch"])


def _ms_cell(row, key) -> str:
    if key in row["ms"]:
        return f"{row['ms'][key]:.3f}"
    return "failed" if row.get("torch_peers", {}).get(key, {}).get("error") else ""


def markdown(rows: list[dict], env: dict) -> str:
    lines = [f"{env['gpu']} ({env['target']}), torch {env['torch']}, triton {env.get('triton')}, CUDA {env['cuda']}, "
             f"cuDNN {env['cudnn']}, openprim {env['openprim']} {env['commit'] or ''}; fp16, ms per call (median of "
             "rounds); freezing: torch.compile with torch._inductor.config.freezing=True, + CUDA graphs: "
             'mode="reduce-overhead"', "",
             "| model | batch | eager | torch.compile freezing | + CUDA graphs | ours | ours kernels "
             "| best torch / ours | eager / ours | max rel err | compile s (ours / freezing / + CUDA graphs) "
             "| top kernel kinds (share of ours) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "ms" not in row:
            why = (row.get("skipped") or row.get("error") or "?").splitlines()[0][:150].replace("|", "/")
            lines.append(f"| {row['model']} | {_size(row)} | | | | | | | | | | {why} |")
            continue
        ms, total, peers = row["ms"], row["steps_ms_sum"], row.get("torch_peers", {})
        top = ", ".join(f"{k} {100 * v['ms'] / total:.0f}%" for k, v in list(row["kinds"].items())[:4])
        best = (f"{row['vs_best_torch']:.2f}x ({row['best_torch']})" if row.get("best_torch") else "")
        compile_s = " / ".join(f"{peers[k]['compile_s']:.0f}" if k in peers else "-" for k in TORCH_PEERS[1:])
        lines.append(f"| {row['model']} | {_size(row)} | " + " | ".join(_ms_cell(row, k) for k in TORCH_PEERS)
                     + f" | {ms['ours']:.3f} | {ms['ours_kernels']:.3f} | {best} | "
                     + (f"{row['vs_eager']:.2f}x" if row.get("vs_eager") else "")
                     + f" | {row['max_rel_error']:.1e} | {row['compile_s']:.0f}"
                     f"{' (cached)' if row['cache_hit'] else ''} / {compile_s} | {top} |")
    lines += ["", "Kernel time by kind (ours; every step's launches timed alone, ms and share of their sum):", "",
              "| model | steps | " + " | ".join(f"kind {i}" for i in range(1, 7)) + " |", "|---|---|" + "---|" * 6]
    for row in rows:
        if "kinds" in row:
            total = row["steps_ms_sum"]
            cells = [f"{k} {v['ms']:.3f} ({100 * v['ms'] / total:.0f}%, {v['steps']})"
                     for k, v in list(row["kinds"].items())[:6]]
            lines.append(f"| {row['model']} | {row['steps']} | " + " | ".join(cells + [""] * (6 - len(cells))) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    parser.add_argument("--out", default=".", help="directory for gpu_models.json (default: here)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: batch 2 (BERT: 128 tokens), 2 rounds of 3 calls")
    parser.add_argument("--batch", type=int, help="every model's batch (default: 32; BERT 8)")
    parser.add_argument("--tokens", type=int, help=f"sequence length of the token models (default {TOKENS})")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20, help="calls per timed round")
    parser.add_argument("--budget-s", type=float, default=450,
                        help="start no model after this many seconds (one device call is at most 600)")
    parser.add_argument("--no-cache", action="store_true", help="compile even when the compile cache has it")
    parser.add_argument("--compile-only", action="store_true", help="compile for --target only (no GPU needed)")
    parser.add_argument("--target", help="compile for this target (default: the GPU's; with --compile-only "
                                         "nvvm:sm_90); nvvm:sm_80 on an H200 runs the mma.sync kernels")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if args.no_cache:
        os.environ["OPENPRIM_CACHE"] = "0"
    tokens = args.tokens or (128 if args.quick else TOKENS)
    batch = 2 if args.quick and args.batch is None else args.batch
    rounds, iters, step_repeat = (2, 3, 2) if args.quick else (args.rounds, args.iters, 10)
    use_checkout()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpu_models.json")
    if args.compile_only:
        target = args.target or "nvvm:sm_90"
        rows = compile_only(names, target, batch, tokens)
        write_json(path, {"target": target, "compile_only": rows})
        return 1 if any("error" in r for r in rows) else 0

    import torch
    torch.backends.cudnn.benchmark = True
    env, rows, start = environment(), [], time.perf_counter()
    print(f"{env['gpu']} ({env['target']}), torch {env['torch']}; models: {', '.join(names)}", flush=True)
    for name in names:
        model_batch = batch or MODELS[name][2]
        if time.perf_counter() - start > args.budget_s:
            rows.append({"model": name, "batch": model_batch, "skipped": f"over --budget-s {args.budget_s:.0f}"})
            continue
        t0 = time.perf_counter()
        try:
            row = measure(name, model_batch, tokens, iters, rounds, step_repeat, args.target)
        except Exception as e:  # noqa: BLE001 - one model's failure is reported, the others still run
            row = {"model": name, "batch": model_batch, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc(limit=-6)}
        release_peers()        # the frozen copies of this model's weights, its CUDA graphs, and our executable go
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        if "ms" in row:
            print(f"{name}: ours {row['ms']['ours']:.3f} ms; "
                  + ", ".join(f"{k} {row['ms'][k]:.3f} ms" if k in row["ms"] else
                              f"{k} FAILED ({row['torch_peers'][k].get('error')})" for k in TORCH_PEERS)
                  + f"; error {row['max_rel_error']:.1e} ({row['wall_s']:.0f} s)", flush=True)
        else:
            print(f"{name}: {row.get('skipped') or row.get('error')}\n{row.get('traceback', '')}", flush=True)
        write_json(path, {"environment": env, "args": vars(args), "results": rows})
    print("\n" + markdown(rows, env))
    bad = [r["model"] for r in rows if "error" in r or r.get("max_rel_error", 0) >= TOLERANCE]
    if bad:
        print(f"\nFAILED (error, or max rel error >= {TOLERANCE}): {', '.join(bad)}")
    no_peer = [f"{r['model']} {k}: {v['error']}" for r in rows for k, v in r.get("torch_peers", {}).items()
               if "error" in v]
    if no_peer:     # a comparison without its peer is not one
        print("\nFAILED (a torch peer did not build):\n  " + "\n  ".join(no_peer))
    return 1 if bad or no_peer else 0


if __name__ == "__main__":
    sys.exit(main())

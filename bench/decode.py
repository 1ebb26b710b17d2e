"""Benchmark: greedy decoding with a KV cache (openprim.decoding) against PyTorch and ONNX Runtime.

    python bench/decode.py [--model gpt2|llama] [--batch 1] [--context 512] [--new 32] [--repeat 3]
                           [--device cpu|cuda] [--out bench/decode_cpu.json]

The model is built as a user brings it, from its Hugging Face config with random weights (gpt2: GPT2Config(),
GPT-2 small, 124M parameters; llama: a Llama-style decoder of GPT-2 small's size, 12 layers of hidden 768,
12 query heads over 4 key/value heads, SwiGLU 2048, vocabulary 32000). A prompt of --context tokens is
prefilled, then --new tokens are generated greedily; what is timed is the per-token decode (the median over
the tokens of the median over --repeat generations), the prefill once per repeat:

  openprim         Decoder(model, batch, max_len=context + new): the one-token greedy step (the argmax of the
                   logits computed in the step: decoding.greedy_tokens) and the prompt's prefill bucket
                   compiled through the compile cache (their compile seconds reported), caches carried as
                   state and written in place
  eager            PyTorch eager on every core (torch_cpu_threads, inference_mode) with transformers'
                   DynamicCache: model(ids, use_cache=True) once, then model(token, past_key_values=cache) per
                   token
  compiled-static  torch.compile as gpt-fast uses it, over the step openprim compiles: StaticCacheStep holds
                   every layer's key and value cache as buffers [B, kv heads, context + new, head dim] (static
                   addresses) and runs decoding.StepModule over them, writing its updated caches back in place;
                   its forward under torch.compile(fullgraph=True), inductor's freezing on, makes the
                   one-token step (mode="reduce-overhead", CUDA graphs, on the GPU; the default mode on the
                   CPU), the prompt goes through it eagerly; fed as openprim's Decoder (step_feeds: an
                   all-ones mask over the whole cache), the positions counted on the device. It runs in a
                   child process: a crash is recorded under "not_measured" with its signal, the other
                   figures kept. Its JSON entry has its torch.compile mode and, on the GPU, inductor's count
                   of graphs that skipped CUDA graphs with the reasons logged
  ort              ONNX Runtime (every core, all optimizations) on decoding.StepModule exported with
                   torch.onnx.export: the caches are inputs and outputs, fed back each token (ORT has no
                   state; the copy in and out is part of its time, as for a user of a plain InferenceSession)

With --device cuda the model is fp16 and OpenPrim compiles for the GPU found (nvvm:sm_XY); the peers are
eager PyTorch on the GPU (the same DynamicCache loop) and compiled-static. Every step of every peer ends with
the next token known on the host side of a synchronize (a generation loop checks for the end token). No ORT
on the GPU.

The tokens of every peer are checked against eager's. The JSON also has the decode step's GEMVs (matmuls
over constant weights) as bandwidth: weight bytes over their time, beside a copy of as many bytes measured in
the same run (threaded on the CPU, device to device on a GPU). The JSON has every figure and the machine.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import time

import numpy as np
import torch
import torch._inductor.config
from timing import cuda_ms, ort_session, torch_cpu_threads

from openprim.base.dtypes import ITEMSIZE
from openprim.runtime.generation import greedy


def build(name: str):
    import transformers as tf
    torch.manual_seed(0)
    if name == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config()).eval()
    config = tf.LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                            num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
    return tf.LlamaForCausalLM(config).eval()


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def eager_generate(model, ids, new: int) -> tuple[np.ndarray, float, list[float]]:
    """(tokens, prefill seconds, seconds per decode token) of eager PyTorch with a DynamicCache."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model(torch.as_tensor(ids, device=device), use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        _sync()
        prefill = time.perf_counter() - t0
        tokens, times = [token], []
        for _ in range(new - 1):
            t0 = time.perf_counter()
            out = model(token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            _sync()
            times.append(time.perf_counter() - t0)
            tokens.append(token)
    return np.concatenate([ids, torch.cat(tokens, 1).cpu().numpy()], 1), prefill, times


class StaticCacheStep(torch.nn.Module):
    """decoding.StepModule with every layer's key and value cache held as buffers and written in place, as
    gpt-fast holds its KV cache: static addresses, so that a CUDA graph of the step replays over them (a
    mutated buffer is an input cudagraph trees need not copy). forward(input_ids, position_ids,
    cache_position, attention_mask, last) -> the logits at `last` [B, V]. Compiled, the step's index_copy
    and the copy back become one in-place write of the new rows (inductor reinplaces them; seen in its
    output code on the CPU), so the whole cache is not copied per token."""

    def __init__(self, model, batch: int, max_len: int):
        super().__init__()
        from openprim.decoding import StepModule, cache_shape
        self.step, self.count = StepModule(model), 2 * model.config.num_hidden_layers
        like = next(model.parameters())
        for i in range(self.count):
            self.register_buffer(f"cache_{i}", torch.zeros(cache_shape(model.config, batch, max_len),
                                                           dtype=like.dtype, device=like.device))
            torch._dynamo.mark_static_address(getattr(self, f"cache_{i}"))   # as transformers' StaticCache

    def forward(self, input_ids, position_ids, cache_position, attention_mask, last):
        caches = [getattr(self, f"cache_{i}") for i in range(self.count)]
        logits, *new = self.step(input_ids, position_ids, cache_position, attention_mask, last, *caches)
        for cache, value in zip(caches, new):
            cache.copy_(value)
        return logits


def static_generate(step, decode, ids, new: int) -> tuple[np.ndarray, float, list[float]]:
    """As eager_generate, with a StaticCacheStep `step` fed as openprim_generate feeds its Decoder: the prompt
    through `step` itself (eager, unpadded), each new token through `decode` (its compiled forward, a new
    CUDA-graph step per call), the positions counted on the device. Cache rows past the position are masked:
    no reset between generations."""
    batch, prompt = ids.shape
    device, max_len = step.cache_0.device, step.cache_0.shape[2]
    with torch.no_grad():
        feeds = [torch.as_tensor(a, device=device) for a in step_feeds(ids, 0, max_len)]
        mask, last = feeds[3], torch.tensor([0], device=device)
        cache_position = torch.tensor([prompt], device=device)
        position_ids = cache_position.repeat(batch, 1)
        t0 = time.perf_counter()
        token = step(*feeds, torch.tensor([prompt - 1], device=device)).argmax(-1, keepdim=True)
        _sync()
        prefill = time.perf_counter() - t0
        tokens, times = [token], []
        for _ in range(new - 1):
            t0 = time.perf_counter()
            torch.compiler.cudagraph_mark_step_begin()
            token = decode(token, position_ids, cache_position, mask, last).argmax(-1, keepdim=True)
            cache_position += 1
            position_ids += 1
            _sync()
            times.append(time.perf_counter() - t0)
            tokens.append(token)
    return np.concatenate([ids, torch.cat(tokens, 1).cpu().numpy()], 1), prefill, times


def compiled_in_child(args):
    """The compiled-static peer, run by this script in a child process (--child-compiled FILE): torch.compile
    with CUDA graphs has crashed the whole process (SIGSEGV, torch 2.11 + transformers 5.17 on the H100,
    over transformers' static cache under generate) before any figure was written. Returns (run, notes):
    a run returns (tokens, prefill, times) as the other peers do, all of the child's --repeat generations
    measured in that one child; a crash or failure raises PeerFailed with what happened, and the peer is
    recorded as not measured. notes, filled by the child: its torch.compile mode and, on the GPU, inductor's
    count of graphs it ran without CUDA graphs with the reasons it logged (0 and []: every graph replayed)."""
    import subprocess
    import tempfile
    rounds: list = []
    notes: dict = {}

    def run():
        if not rounds:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "compiled.npz")
                argv = [sys.executable, os.path.abspath(__file__), "--device", args.device, "--model", args.model,
                        "--batch", str(args.batch), "--context", str(args.context), "--new", str(args.new),
                        "--repeat", str(args.repeat), "--child-compiled", path]
                child = subprocess.run(argv, capture_output=True, text=True)
                if child.returncode != 0 or not os.path.exists(path):
                    why = f"signal {-child.returncode}" if child.returncode < 0 else f"exit {child.returncode}"
                    raise PeerFailed(f"{why}; its last output: {child.stderr.strip().splitlines()[-3:]}")
                with np.load(path) as got:
                    rounds.extend((got["tokens"], float(p), list(t)) for p, t in zip(got["prefill"], got["times"]))
                    notes["torch_compile_mode"] = str(got["mode"])
                    if args.device == "cuda":
                        reasons = {line.strip()[:300] for line in child.stderr.splitlines()
                                   if "skipping cudagraphs" in line}
                        notes.update(cudagraph_skips=int(got["cudagraph_skips"]),
                                     cudagraph_skip_reasons=sorted(reasons))
        return rounds.pop(0)
    return run, notes


class PeerFailed(RuntimeError):
    """A peer that could not be measured (its reason is a result, not a crash of the benchmark)."""


def child_compiled(args, model, ids) -> None:
    """--child-compiled FILE: the compiled-static peer's --repeat generations, written to FILE (npz) with its
    torch.compile mode and inductor's count of CUDA-graph skips."""
    from torch._dynamo.utils import counters
    torch._inductor.config.freezing = True     # the weights folded in as constants, as the brief's peer has them
    mode = "reduce-overhead" if args.device == "cuda" else "default"   # CUDA graphs on the GPU only
    step = StaticCacheStep(model.to(args.device), args.batch, args.context + args.new)
    decode = torch.compile(step, mode=mode, fullgraph=True)
    static_generate(step, decode, ids, args.new)   # compiles, warms up and records its graph
    runs = [static_generate(step, decode, ids, args.new) for _ in range(args.repeat)]
    np.savez(args.child_compiled, tokens=runs[0][0], prefill=[r[1] for r in runs], times=[r[2] for r in runs],
             mode=mode, cudagraph_skips=counters["inductor"]["cudagraph_skips"])


def step_feeds(ids, start: int, max_len: int) -> tuple:
    """StepModule's (input_ids, position_ids, cache_position, attention_mask) for tokens `ids` [B, S] at
    cache positions start.. (no padding: the mask all ones)."""
    batch, tokens = ids.shape
    positions = np.arange(start, start + tokens)
    return ids, np.repeat(positions[None], batch, 0), positions, np.ones((batch, max_len), np.int64)


def openprim_generate(decoder, ids, new: int) -> tuple[np.ndarray, float, list[float]]:
    """As eager_generate, with the Decoder's executables (the same steps as Decoder.generate: the prompt's
    token chosen from the prefill's logits, every later one by the greedy step, which returns the argmax
    token of each row, computed where the step runs, as the peers' argmax is)."""
    batch, prompt = ids.shape
    size = decoder.bucket(prompt)
    padded = np.concatenate([ids, np.repeat(ids[:, -1:], size - prompt, axis=1)], axis=1)
    prefill_exe = decoder.prefill(prompt)
    decoder.greedy_step.reset_state()
    t0 = time.perf_counter()
    logits = prefill_exe(*step_feeds(padded, 0, decoder.max_len), np.array([prompt - 1]))
    tokens = [greedy(logits)[:, None]]
    prefill = time.perf_counter() - t0
    times = []
    for position in range(prompt, prompt + new - 1):
        t0 = time.perf_counter()
        tokens.append(decoder.greedy_step(*step_feeds(tokens[-1], position, decoder.max_len), np.array([0]))[:, None])
        times.append(time.perf_counter() - t0)
    return np.concatenate([ids] + tokens, 1), prefill, times


def ort_decoder(model, batch: int, max_len: int):
    """(session for one token, session for the prompt of `prompt` tokens) factory: ONNX Runtime sessions of
    decoding.StepModule exported per token count, or the reason it cannot be built."""
    from openprim.decoding import STEP_INPUTS, StepModule, cache_shape, step_example
    shape = cache_shape(model.config, batch, max_len)
    layers = model.config.num_hidden_layers

    def session(tokens: int):
        args = step_example(model.config, batch, tokens, max_len)
        names = list(STEP_INPUTS) + [f"cache_{i}" for i in range(2 * layers)]
        buf = io.BytesIO()
        with torch.no_grad():
            torch.onnx.export(StepModule(model).eval(), args, buf, input_names=names, dynamo=False, opset_version=17,
                              output_names=["logits"] + [f"next_{i}" for i in range(2 * layers)])
        return ort_session(buf.getvalue())
    return session, shape, layers


def ort_generate(make, ids, new: int, max_len: int) -> tuple[np.ndarray, float, list[float]]:
    session, shape, layers = make
    batch, prompt = ids.shape
    pre, step = session(prompt), session(1)
    caches = [np.zeros(shape, np.float32) for _ in range(2 * layers)]

    def run(sess, tokens, start, last):
        names = [i.name for i in sess.get_inputs()]    # the exporter drops inputs the graph does not read
        feeds = dict(zip(("input_ids", "position_ids", "cache_position", "attention_mask"),
                         step_feeds(tokens, start, max_len)), last=last,
                     **{f"cache_{i}": c for i, c in enumerate(caches)})
        out = sess.run(None, {k: v for k, v in feeds.items() if k in names})
        caches[:] = out[1:]
        return out[0]
    t0 = time.perf_counter()
    logits = run(pre, ids, 0, np.array([prompt - 1]))
    prefill = time.perf_counter() - t0
    tokens, times = [np.argmax(logits, -1)[:, None]], []
    for position in range(prompt, prompt + new - 1):
        t0 = time.perf_counter()
        logits = run(step, tokens[-1], position, np.array([0]))
        times.append(time.perf_counter() - t0)
        tokens.append(np.argmax(logits, -1)[:, None])
    return np.concatenate([ids] + tokens, 1), prefill, times


def gemv_bandwidth(exe, device: str) -> dict:
    """The decode step's matmuls over constant weights (its GEMVs): their weight bytes over their time
    (Executable.time_steps, the medians of 20 runs; on a GPU each step's launches back to back), against a
    copy of as many bytes measured now (read + write counted): on the CPU numpy copyto split between the
    cores' threads, on a GPU a device-to-device tensor copy timed with CUDA events."""
    times, values = exe.time_steps(20), exe.plan["values"]
    seconds_per_unit = 1e-3 if device == "cuda" else 1.0     # the GPU runtime's step times are milliseconds
    weight = [(t * seconds_per_unit, int(np.prod(w["shape"])) * ITEMSIZE[w["dtype"]])
              for s, t in zip(exe.plan["steps"], times)
              if s["op"] == "matmul" and (w := values[s["args"][1]])["storage"] == "weight"]
    seconds, nbytes = sum(t for t, _ in weight), sum(b for _, b in weight)
    copy_seconds = _gpu_copy_seconds(nbytes) if device == "cuda" else _cpu_copy_seconds(nbytes)
    copy_gbs = 2 * nbytes / copy_seconds / 1e9
    gemv_gbs = nbytes / seconds / 1e9
    return {"gemv_weight_mb": nbytes / 1e6, "gemv_ms": seconds * 1e3, "gemv_steps": len(weight),
            "gemv_gb_per_s": gemv_gbs, "copy_gb_per_s": copy_gbs, "gemv_over_copy": gemv_gbs / copy_gbs}


def _cpu_copy_seconds(nbytes: int) -> float:
    """The median of 5 copies of nbytes, split between the cores' threads (after one warm-up)."""
    import threading
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(len(src)), os.cpu_count() or 1)

    def copy():
        threads = [threading.Thread(target=np.copyto, args=(dst[p[0]:p[-1] + 1], src[p[0]:p[-1] + 1]))
                   for p in parts if len(p)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    copy()
    copies = []
    for _ in range(5):
        t0 = time.perf_counter()
        copy()
        copies.append(time.perf_counter() - t0)
    return float(np.median(copies))


def _gpu_copy_seconds(nbytes: int) -> float:
    """The median of 5 rounds of 20 device-to-device copies of nbytes, timed with CUDA events."""
    src = torch.ones(nbytes // 2, dtype=torch.float16, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    return float(np.median([cuda_ms(lambda: dst.copy_(src), 20) for _ in range(5)])) * 1e-3


def step_profile(exe) -> dict:
    """The decode step kernel by kernel (openprim.runtime.profile, launches one by one, token 0 at position
    0: the same kernels as any step), summed by op and solver: microseconds per step and launches,
    slowest first; with the whole step's kernel and gap time, and on a GPU the graph replay's."""
    from openprim.runtime.profile import profile
    rep = profile(exe, runs=20)
    groups = {}
    for s in rep.steps:
        g = groups.setdefault(f"{s.op} {s.solver or ''}".strip(), {"us": 0.0, "launches": 0, "steps": 0})
        g["us"] += s.time_us
        g["launches"] += s.launches
        g["steps"] += 1
    ranked = dict(sorted(groups.items(), key=lambda kv: -kv[1]["us"]))
    for name, g in ranked.items():
        print(f"  {name:40s} {g['us']:8.1f} us  {g['steps']:3d} steps {g['launches']:3d} launches", flush=True)
    return {"kernel_us": rep.kernel_us, "gap_us": rep.gap_us, "total_us": rep.total_us,
            "graph_us": rep.graph_us, "by_op": ranked}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2", choices=["gpt2", "llama"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime (its export takes minutes)")
    ap.add_argument("--no-compiled", action="store_true",
                    help="skip the compiled-static peer (its child process compiles for minutes)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", action="store_true",
                    help="also profile the decode step kernel by kernel (summed by op and solver) into the JSON")
    ap.add_argument("--child-compiled", metavar="FILE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from openprim.decoding import Decoder

    torch_cpu_threads()
    model = build(args.model)
    max_len = args.context + args.new
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (args.batch, args.context))
    target = "cpu"
    if args.device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        target, model = f"nvvm:sm_{major}{minor}", model.half()
    if args.child_compiled:
        return child_compiled(args, model, ids)
    t0 = time.perf_counter()
    decoder = Decoder(model, batch=args.batch, max_len=max_len, target=target)
    decoder.greedy_step     # the step the tokens are timed with (compiled on first use)
    step_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    decoder.prefill(args.context)
    prefill_compile = time.perf_counter() - t0
    peers = {"openprim": lambda: openprim_generate(decoder, ids, args.new)}
    if args.device == "cuda":
        import copy
        gpu_model = copy.deepcopy(model).cuda()
        peers["eager"] = lambda: eager_generate(gpu_model, ids, args.new)
    else:
        peers["eager"] = lambda: eager_generate(model, ids, args.new)
    static_notes = {}
    if not args.no_compiled:
        peers["compiled-static"], static_notes = compiled_in_child(args)
    if not args.no_ort and args.device == "cpu":
        try:
            make = ort_decoder(model, args.batch, max_len)
            make[0](1)
            peers["ort"] = lambda: ort_generate(make, ids, args.new, max_len)
        except Exception as e:  # noqa: BLE001 - an exporter or ORT failure is a result to record, not a crash
            print(f"ort: not measured ({type(e).__name__}: {str(e).splitlines()[0][:200]})", file=sys.stderr)
    results, tokens, failed = {}, {}, {}
    for _ in range(args.repeat):   # interleaved rounds
        for name, run in list(peers.items()):
            try:
                out, prefill, times = run()
            except PeerFailed as e:
                print(f"{name}: not measured ({e})", file=sys.stderr, flush=True)
                failed[name] = str(e)
                del peers[name]
                continue
            tokens[name] = out
            r = results.setdefault(name, {"prefill_s": [], "token_ms": []})
            r["prefill_s"].append(prefill)
            r["token_ms"].append(1e3 * float(np.median(times)))
            print(f"{name}: prefill {prefill:.3f} s, {r['token_ms'][-1]:.2f} ms per token", flush=True)
    summary = {}
    for name, r in results.items():
        differ = np.nonzero((tokens[name] != tokens["eager"]).any(0))[0]
        summary[name] = {"prefill_s": float(np.median(r["prefill_s"])), "ms_per_token": float(np.median(r["token_ms"])),
                         "tokens_match_eager": not len(differ),
                         **({"first_differing_token": int(differ[0]) - args.context} if len(differ) else {})}
    if "compiled-static" in summary:
        summary["compiled-static"].update(static_notes)
    for name in summary:
        summary[name]["eager_over_this"] = summary["eager"]["ms_per_token"] / summary[name]["ms_per_token"]
    summary["openprim"]["decode_step"] = gemv_bandwidth(decoder.greedy_step, args.device)
    if args.profile:
        summary["openprim"]["step_profile"] = step_profile(decoder.greedy_step)
    report = {"model": args.model, "batch": args.batch, "context": args.context, "new": args.new,
              "parameters": sum(p.numel() for p in model.parameters()),
              "compile_s": {"step": step_compile, "prefill": prefill_compile},
              "device": args.device, "target": target, "results": summary, "not_measured": failed,
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          **({"gpu": torch.cuda.get_device_name()} if args.device == "cuda" else {})}}
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

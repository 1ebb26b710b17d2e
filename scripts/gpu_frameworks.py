"""PyTorch on the GPU through OpenPrim: device tensors in and out, graph replay, the compile cache.

    python scripts/gpu_frameworks.py prepare DIR     # here (MLIR, no GPU): fill DIR/cache for nvvm:sm_90
    python scripts/gpu_frameworks.py run DIR         # on the GPU machine (PyTorch, cuda-bindings, no MLIR)

`prepare` builds examples/torch_models.py's ResNet-18 (torchvision's structure, seeded weights), `.half()`,
writes the sha256 of its state_dict (and with --state-dicts the fp16 state_dict itself) into DIR and calls `compile_module(model, (x,), target="nvvm:sm_90")` with a
CPU input of the right shape and dtype, and `torch.compile(model, backend=openprim_backend)` likewise, with
OPENPRIM_CACHE_DIR=DIR/cache: the compiles land in the cache under the key of the imported graph. This
machine has no GPU to load the result on, so the cache's load_or_compile is replaced by a store-only one
(openprim.cache.save_cached: the same key, no load). The
canonical text of each graph goes to DIR/<model>.graph.txt, so that a miss on the GPU machine can say
which line differs (a different PyTorch there may export another graph).

`run` builds the same module (loading the state_dict when DIR has one; the weights' sha256 must match) on cuda, calls compile_module with a CUDA tensor (the
target comes from the device; it must hit the cache: no MLIR there) and checks, against PyTorch eager:
outputs (fp16 tolerance) of contiguous and channels-last inputs, torch.compile(backend=openprim_backend),
the DeviceArray results of a plain call (torch.as_tensor through __cuda_array_interface__ and
torch.from_dlpack, both without copies), run_into on PyTorch's stream, and the errors for a CPU tensor
and a wrong dtype. Then it times, interleaved in one process (bench/timing.time_rounds): our call with CUDA
tensors (graph replay on, then off), the kernels alone (exe.time_ms), and at every batch the PyTorch peers of
bench/timing.torch_peers: eager, inductor-freezing (torch.compile with torch._inductor.config.freezing=True)
and inductor-freezing-cudagraphs (the same with mode="reduce-overhead"). It prints a table and writes
DIR/out.json (the peers' configurations and torch/triton versions in it; the keys torch_compile_freezing
and torch_compile_reduce_overhead of earlier files keep the two compiled peers' times).

ResNet-50 at batch 32 is not part of DIR: its fp16 state_dict and artifact alone are 100 MB, over what
travels to the GPU machine; `--models resnet50:32` adds it where the size does not matter.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

from runtime_path import use_checkout  # scripts/: openprim from this checkout when not installed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from timing import (CUDAGRAPHS, FREEZING, cuda_ms, medians, peers_environment,  # noqa: E402 - bench/: shared
                    release_peers, time_rounds, torch_peers)

TARGET = "nvvm:sm_90"
LEGACY = {"torch_compile_freezing": FREEZING, "torch_compile_reduce_overhead": CUDAGRAPHS}  # earlier files' keys


def _environment(directory: str) -> None:
    """The same cache key inputs on both machines: the cache in DIR, no user tuning database, no overrides."""
    os.environ["OPENPRIM_CACHE_DIR"] = os.path.join(directory, "cache")
    os.environ["OPENPRIM_USER_DB_PATH"] = os.path.join(directory, "no-user-tuning.sqlite")
    for name in ("OPENPRIM_SOLVER", "OPENPRIM_FIND_MODE", "OPENPRIM_FIND_ENFORCE", "OPENPRIM_ALLOW_TF32",
                 "OPENPRIM_CACHE", "OPENPRIM_GPU_GRAPHS"):
        os.environ.pop(name, None)


def _models(spec: str) -> list[tuple[str, int]]:
    return [(name, int(batch)) for name, batch in (item.split(":") for item in spec.split(","))]


def _build(name: str):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch_models
    return torch_models.get(name).half()


def _weights_digest(model) -> str:
    """sha256 of the state_dict's bytes in order: the same weights on both machines, or not."""
    import hashlib
    h = hashlib.sha256()
    for key, t in model.state_dict().items():
        h.update(key.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


def _graph_text(model, x) -> list[str]:
    """The canonical lines the cache key hashes, of the graph compile_module imports."""
    import torch
    import openprim.cache
    from openprim.pyfrontend.torch import import_exported
    g, _ = import_exported(torch.export.export(model.eval(), (x,)))
    return list(openprim.cache._graph_lines(g))


STORED_KEY = None   # the cache key of the last compile _store_only stored


class _Stored(Exception):
    """Raised by _store_only after storing a compile (prepare has no GPU to load it on)."""


def _store_only(graph, target="cpu", options=None, device=0):
    """openprim.cache.load_or_compile for a machine without the target's GPU: compile and store the entry
    under the same key (openprim.cache.save_cached), load nothing."""
    import openprim.cache
    global STORED_KEY
    path = os.path.join(os.environ["OPENPRIM_CACHE_DIR"], "last-stored.oprim")
    info = openprim.cache.save_cached(graph, path, target, options)
    os.unlink(path)
    STORED_KEY = openprim.cache.graph_key(graph, target, options)
    raise _Stored(f"{'already cached' if info['cache_hit'] else 'compiled'}, {info['bytes'] / 2**20:.1f} MiB")


def prepare(directory: str, models, state_dicts: bool) -> None:
    import torch
    import openprim.cache
    from openprim.torch_backend import compile_module, openprim_backend
    os.makedirs(os.environ["OPENPRIM_CACHE_DIR"], exist_ok=True)
    openprim.cache.load_or_compile = _store_only      # the torch backends compile through it
    for name, batch in models:
        model = _build(name)
        if state_dicts:
            torch.save(model.state_dict(), os.path.join(directory, f"{name}.pt"))
        with open(os.path.join(directory, f"{name}.sha256"), "w") as f:
            f.write(_weights_digest(model) + "\n")
        x = torch.zeros(batch, 3, 224, 224, dtype=torch.float16)
        t0 = time.perf_counter()
        try:
            compile_module(model, (x,), target=TARGET)
        except _Stored as e:
            print(f"{name} b{batch}: compile_module -> {TARGET}: {e} in {time.perf_counter() - t0:.1f} s")
        with open(os.path.join(directory, f"{name}.key"), "w") as f:
            f.write(STORED_KEY + "\n")
        with open(os.path.join(directory, f"{name}.graph.txt"), "w") as f:
            f.write("\n".join(_graph_text(model, x)) + "\n")
        if batch == 1:
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.compile(model, backend=openprim_backend, options={"target": TARGET})(x)
            for w in caught:    # the backend reports the _Stored "failure" and runs eagerly: expected here
                print(f"  torch.compile(backend=openprim): {str(w.message)[:200]}")
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(directory) for f in fs)
    print(f"{directory}: {total / 2**20:.1f} MiB")


# ------------------------------------------------------------------------------------------------ run

def _error(want, got) -> float:
    """max |got - want| / max |want| in float64."""
    want, got = want.double(), got.double()
    return float((got - want).abs().max() / want.abs().max())


def _expect_error(fn, words: str) -> str:
    from openprim.base.errors import OpenPrimError
    try:
        fn()
    except OpenPrimError as e:
        assert "\n" not in str(e) and words in str(e), str(e)
        return str(e)
    raise AssertionError(f"no OpenPrimError ({words})")


def _first_difference(directory: str, name: str, model, x) -> str:
    """Where the graph imported here differs from the one prepare compiled (why the cache missed)."""
    path = os.path.join(directory, f"{name}.graph.txt")
    if not os.path.exists(path):
        return "no graph text from prepare"
    theirs = open(path).read().splitlines()
    ours = _graph_text(model, x.cpu())
    for i, (a, b) in enumerate(zip(theirs, ours)):
        if a != b:
            return f"line {i}: prepared {a[:200]!r} / here {b[:200]!r}"
    return f"{len(theirs)} vs {len(ours)} lines" if len(theirs) != len(ours) else "same graph (target/options/env?)"


def _prepared(directory: str, name: str, model, x):
    """compile_module's result made from the entry prepare stored (after a miss: the sources or the exported
    graph differ here), so that the device checks and timings still run."""
    import torch
    from openprim.runtime import artifact
    from openprim.torch_backend import _Compiled, _output_dtypes
    key = open(os.path.join(directory, f"{name}.key")).read().strip()
    exe = artifact.load(os.path.join(os.environ["OPENPRIM_CACHE_DIR"], f"{key}.oprim"))
    exe.cache_hit = False
    ep = torch.export.export(model, (x,))
    return _Compiled(exe, ep.call_spec.out_spec, len(exe.plan["outputs"]), [x.dtype], _output_dtypes(ep))


def run(directory: str, models, iters: int, rounds: int) -> int:
    import torch
    from openprim.runtime.arrays import DeviceArray
    from openprim.torch_backend import compile_module, device_target, openprim_backend
    torch.backends.cudnn.benchmark = True
    results, failures = [], []
    print(f"GPU: {torch.cuda.get_device_name()} ({device_target('cuda')}), torch {torch.__version__}")
    for name, batch in models:
        row = {"model": name, "batch": batch}
        model = _build(name)
        saved = os.path.join(directory, f"{name}.pt")
        if os.path.exists(saved):
            model.load_state_dict(torch.load(saved))
        row["weights_match"] = _weights_digest(model) == open(os.path.join(directory, f"{name}.sha256")).read().strip()
        if not row["weights_match"]:
            failures.append(f"{name}: the seeded weights differ from prepare's (another torch RNG?): "
                            f"prepare with --state-dicts")
        model = model.cuda().eval()
        x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1)).half().cuda()
        with torch.inference_mode():
            want = model(x)
        t0 = time.perf_counter()
        try:
            ours = compile_module(model, (x,))
        except Exception as e:  # noqa: BLE001 - a miss needs MLIR, which this machine lacks
            row["error"] = f"compile_module: {type(e).__name__}: {str(e).splitlines()[0]}"
            row["graph_difference"] = _first_difference(directory, name, model, x)
            failures.append(f"{name}: {row['error']} ({row['graph_difference']})")
            ours = _prepared(directory, name, model, x)      # the rest of the checks on prepare's entry
        row["load_s"] = time.perf_counter() - t0
        exe = ours.exe
        row["cache_hit"] = exe.cache_hit
        if not exe.cache_hit:
            failures.append(f"{name}: compile_module did not hit the cache")
        checks = {}
        with torch.inference_mode():
            got = ours(x)
            checks["contiguous"] = _error(want, got)
            checks["channels_last"] = _error(want, ours(x.to(memory_format=torch.channels_last)))
            assert got.is_cuda and got.dtype == torch.float16 and got.shape == want.shape, (got.device, got.dtype)
            y = exe(x)                                 # the runtime directly: a DeviceArray back
            assert isinstance(y, DeviceArray)
            cai, dl = torch.as_tensor(y, device="cuda"), torch.from_dlpack(y)
            assert cai.data_ptr() == dl.data_ptr() == y.pointer, "DeviceArray was copied"
            checks["device_array_cai"] = _error(want, cai)
            checks["device_array_dlpack"] = _error(want, dl)
            out = torch.empty_like(want)
            exe.run_into([x], [out], stream=torch.cuda.current_stream().cuda_stream)
            checks["run_into"] = _error(want, out)
            row["errors"] = {
                "cpu_tensor": _expect_error(lambda: ours(x.cpu()), "compiled for GPU"),
                "wrong_dtype": _expect_error(lambda: ours(x.float()), "torch.float32"),
                "runtime_non_contiguous": _expect_error(
                    lambda: exe.run_into([x.to(memory_format=torch.channels_last)], [out]), "not C-contiguous")}
        if batch == 1:
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                backend = torch.compile(model, backend=openprim_backend)
                checks["torch_compile_openprim"] = _error(want, backend(x))
            fell_back = [str(w.message) for w in caught if "openprim_backend" in str(w.message)]
            row["torch_compile_openprim_eager_fallback"] = fell_back
            if fell_back:
                failures.append(f"{name}: torch.compile(backend=openprim) ran eagerly: {fell_back[0]}")
        row["max_rel_error"] = checks
        failures += [f"{name}: {k} error {v:.3g}" for k, v in checks.items() if not v < 2e-2]

        peers = torch_peers(model, (x,), dtype=torch.float16)
        row["torch_peers"] = {}
        for peer_name, peer in peers.items():
            record = row["torch_peers"][peer_name] = peer.record()
            if peer.error:
                failures.append(f"{name}: torch peer {peer_name} did not build: {peer.error}")
            else:
                record["max_rel_error"] = _error(want, peer.output())
        row["torch_compile_s"] = sum(p.compile_s for k, p in peers.items() if k != "eager")
        variants = {"openprim_graph": lambda: ours(x), "openprim_nograph": lambda: ours(x),
                    **{k: p.fn for k, p in peers.items() if not p.error}}
        modes = {"openprim_graph": torch.inference_mode, "openprim_nograph": torch.inference_mode,
                 **{k: p.mode for k, p in peers.items()}}

        def graphs(k):
            exe.graphs = k != "openprim_nograph"
        times = time_rounds(variants, rounds, iters, modes, before=graphs)
        exe.graphs = True
        row["ms"] = medians(times)
        for old, new in LEGACY.items():
            if new in row["ms"]:
                row["ms"][old] = row["ms"][new]
        for k in peers:
            if k in row["ms"]:
                row["torch_peers"][k]["ms"] = row["ms"][k]
        with torch.inference_mode():
            row["kernels_ms"] = exe.time_ms(repeat=iters)
            torch.cuda.synchronize()
            replay = cuda_ms(lambda: exe.device.graph_launch(exe.graph[1], torch.cuda.current_stream().cuda_stream),
                            iters)
            row["graph_launch_only_ms"] = replay
        del peers, variants, modes
        release_peers()
        # the graph launch alone is the kernels' time without Python (at batch 1 the one-by-one launches of
        # time_ms are bound by the launch rate, not by the kernels)
        row["overhead_us"] = 1000 * (row["ms"]["openprim_graph"] - row["graph_launch_only_ms"])
        results.append(row)
    _report(results, failures)
    with open(os.path.join(directory, "out.json"), "w") as f:
        json.dump({"environment": peers_environment(), "results": results, "failures": failures}, f, indent=1)
    return 1 if failures else 0


def _report(results, failures) -> None:
    for row in results:
        print(f"\n{row['model']} batch {row['batch']} fp16: cache hit {row.get('cache_hit')}, "
              f"loaded in {row.get('load_s', float('nan')):.2f} s")
        for k, v in row.get("max_rel_error", {}).items():
            print(f"  check {k:28s} max rel error {v:.2e}")
        for k, v in row.get("errors", {}).items():
            print(f"  error {k:28s} {v}")
        if "ms" in row:
            print(f"  {'variant':32s} {'ms':>8s}")
            for k, v in row["ms"].items():
                if k not in LEGACY:
                    print(f"  {k:32s} {v:8.3f}")
            print(f"  {'kernels alone (time_ms)':32s} {row['kernels_ms']:8.3f}")
            print(f"  {'graph launch alone':32s} {row['graph_launch_only_ms']:8.3f}")
            print(f"  call overhead over the graph launch alone: {row['overhead_us']:.1f} us")
    print("\nFAILURES:\n  " + "\n  ".join(failures) if failures else "\nall checks passed")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("prepare", "run"))
    parser.add_argument("dir")
    parser.add_argument("--models", default="resnet18:1", help="name:batch,... (default resnet18:1)")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--state-dicts", action="store_true",
                        help="prepare: save the fp16 state_dicts too (by default the GPU machine rebuilds the "
                             "seeded weights and checks their sha256; ResNet-18's state_dict is 23 MiB)")
    args = parser.parse_args(argv)
    directory = os.path.abspath(args.dir)
    _environment(directory)
    use_checkout()
    if args.mode == "prepare":
        prepare(directory, _models(args.models), args.state_dicts)
        return 0
    return run(directory, _models(args.models), args.iters, args.rounds)


if __name__ == "__main__":
    sys.exit(main())

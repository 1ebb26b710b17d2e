"""Timing shared by the benchmarks, and the peers every benchmark measures OpenPrim against.

The peers, as a demanding user would pick them:

  CPU   ONNX Runtime (`ort_session`: CPU provider, every core, all graph optimizations), then PyTorch eager
        (`torch_cpu_threads`: every core, inference_mode); timed with `median_time`.
  GPU   whole models: PyTorch as three configurations built in one place, `torch_peers`:
          eager                         the module itself under torch.inference_mode (cudnn.benchmark as the
                                        script sets it);
          inductor-freezing             torch.compile(model, dynamic=False) with
                                        torch._inductor.config.freezing = True, mode default;
          inductor-freezing-cudagraphs  the same with mode="reduce-overhead" (CUDA graphs);
        each compiled for the benchmark's shape under torch.no_grad() (freezing only applies without grad),
        the model in eval mode and in the benchmark dtype, at every batch size; timed with `time_rounds`
        (CUDA events around `iters` calls, interleaved rounds, the median over rounds).
        layers: cuDNN / cuBLAS / torch's kernel through eager PyTorch, timed with `layer_ms` (the calls
        captured back to back in a CUDA graph, as OpenPrim's `time_ms(captured=...)` times its own).

torch and triton are imported only by the functions that need them: the CPU benchmarks import this module
without a GPU.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import sys
import time
from typing import Callable

import numpy as np


def median_time(fn, repeat: int, warmup: int = 5) -> float:
    """Median seconds of fn() over `repeat` runs, after `warmup` runs."""
    time.sleep(0.3)  # let the other library's OpenMP threads stop spinning (KMP_BLOCKTIME is 200 ms)
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


# ------------------------------------------------------------------------------------------------ CPU peers

def cpu_cores() -> int:
    """The cores this process may run on (its affinity; os.cpu_count() where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def ort_session(model, threads: int | None = None):
    """ONNX Runtime as the CPU peer: an InferenceSession of `model` (a path, or the ONNX bytes) on the CPU
    provider, intra_op_num_threads = every core (cpu_cores()), all graph optimizations, the default
    (spinning) thread pool, which median_time's sleep and warm-up account for."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or cpu_cores()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ort_config(threads: int | None = None) -> dict:
    """What ort_session builds, for a results file."""
    import onnxruntime as ort
    return {"config": "onnxruntime-cpu", "onnxruntime": ort.__version__, "provider": "CPUExecutionProvider",
            "intra_op_num_threads": threads or cpu_cores(), "graph_optimization_level": "ORT_ENABLE_ALL"}


def ort_layer(nodes, x_shape, initializers: dict, threads: int | None = None):
    """ort_session of a one-layer ONNX graph: float32 input "x" of x_shape (NCHW, ONNX's layout), `nodes`
    (onnx.helper.make_node, the last one writing "y", of x's rank), `initializers` {name: array} as float32
    constants (opset 17)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"y{i}" for i in range(len(x_shape))])],
        [numpy_helper.from_array(np.ascontiguousarray(v, np.float32), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 8)      # what older ONNX Runtime builds read
    onnx.checker.check_model(model)
    return ort_session(model.SerializeToString(), threads)


def torch_cpu_threads(threads: int | None = None) -> int:
    """PyTorch as the CPU peer runs on every core: torch.set_num_threads(cpu_cores()); returns the count."""
    import torch
    threads = threads or cpu_cores()
    torch.set_num_threads(threads)
    return threads


# ------------------------------------------------------------------------------------------------ GPU timing

def cuda_ms(fn, iters: int) -> float:
    """Milliseconds per call of fn (CUDA events on the current stream around `iters` calls)."""
    import torch
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def time_rounds(calls: dict[str, Callable], rounds: int, iters: int, modes: dict[str, Callable] | None = None,
                before: Callable[[str], None] | None = None) -> dict[str, list[float]]:
    """Interleaved timing: each of `rounds` rounds times every call in turn, one untimed call and then
    cuda_ms over `iters` calls, inside modes[name]() when given (a context manager factory: a torch peer's
    `mode`, torch.inference_mode for OpenPrim's calls); before(name), when given, runs first (a switch of
    the variant's own). Returns {name: [ms per call in each round]}; take the median (medians())."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    modes = modes or {}
    for _ in range(rounds):
        for name, fn in calls.items():
            with (modes.get(name) or contextlib.nullcontext)():
                if before is not None:
                    before(name)
                fn()
                times[name].append(cuda_ms(fn, iters))
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(v) for name, v in times.items()}


def layer_ms(fn) -> float:
    """Milliseconds per call of one layer's PyTorch call (cuDNN, cuBLAS, a torch kernel): one call first
    (cudnn.benchmark picks its algorithm there, under the flags set now), then triton's
    do_bench_cudagraph: the calls captured back to back in a CUDA graph, no cache flush between them,
    the median over its replays (how OpenPrim's time_ms(captured=N) times ours)."""
    import torch
    import triton.testing
    torch.cuda.synchronize()                        # the inputs, made on the current stream, are ready
    with torch.cuda.stream(torch.cuda.Stream()):   # capture needs a stream other than the default one
        fn()
        torch.cuda.synchronize()
        ms = float(triton.testing.do_bench_cudagraph(fn, return_mode="median"))
    torch.cuda.synchronize()
    return ms


# ------------------------------------------------------------------------------------------------ torch peers

EAGER, FREEZING, CUDAGRAPHS = "eager", "inductor-freezing", "inductor-freezing-cudagraphs"
TORCH_PEERS = (EAGER, FREEZING, CUDAGRAPHS)
# name -> what it is: torch.compile's mode (None: not compiled), whether freezing is on while it compiles,
# and the grad mode it is compiled and timed under
PEER_CONFIGS = {
    EAGER: {"compile": None, "mode": None, "freezing": False, "dynamic": None, "grad_mode": "inference_mode"},
    FREEZING: {"compile": "torch.compile(model, dynamic=False)", "mode": "default", "freezing": True,
               "dynamic": False, "grad_mode": "no_grad"},
    CUDAGRAPHS: {"compile": 'torch.compile(model, mode="reduce-overhead", dynamic=False)', "mode": "reduce-overhead",
                 "freezing": True, "dynamic": False, "grad_mode": "no_grad"},
}
CUDAGRAPH_WARMUP = 3    # reduce-overhead: the first call runs the graph eagerly, the second records it


@contextlib.contextmanager
def inductor_freezing(on: bool = True):
    """torch._inductor.config.freezing set to `on` inside, restored after (it is a global read when inductor
    compiles: torch.compile compiles at the first call of each shape, so the calls belong inside)."""
    from torch._inductor import config
    before = config.freezing
    config.freezing = on
    try:
        yield
    finally:
        config.freezing = before


@contextlib.contextmanager
def compiled_mode():
    """The grad mode the compiled peers are compiled and timed under: torch.no_grad(), and out of any
    inference_mode around it (dynamo guards on it: a call under inference_mode would compile again)."""
    import torch
    with torch.inference_mode(False), torch.no_grad():
        yield


@dataclasses.dataclass
class TorchPeer:
    """One PyTorch configuration, compiled and warmed up for one set of inputs.

    call(*inputs)  the module (eager) or its torch.compile'd form, to call inside mode();
    fn()           call(*the example inputs): what a benchmark times, inside mode();
    output()       a checked call: inside mode(), a new CUDA graph step first, the result cloned (a replay
                   overwrites the outputs of the previous one);
    record()       its configuration and compile facts for a results file."""
    name: str
    call: Callable | None
    inputs: tuple
    mode: Callable
    compile_s: float = 0.0
    graphs: int = 0                  # graphs dynamo compiled for it (1 unless the model breaks the graph)
    cudagraph_skips: int = 0         # where inductor did not use CUDA graphs (reduce-overhead): 0 on the GPU
    error: str | None = None

    def fn(self):
        return self.call(*self.inputs)

    def output(self, *inputs):
        import torch
        with self.mode():
            if self.name == CUDAGRAPHS:
                torch.compiler.cudagraph_mark_step_begin()
            out = self.call(*(inputs or self.inputs))
            return torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, out)

    def record(self) -> dict:
        row = {"config": self.name, **PEER_CONFIGS[self.name], "compile_s": self.compile_s}
        if self.name != EAGER:
            row["graphs"] = self.graphs
        if self.name == CUDAGRAPHS:
            row["cudagraph_skips"] = self.cudagraph_skips
        if self.error:
            row["error"] = self.error
        return row


def _check_dtype(torch, model, inputs, dtype) -> None:
    if dtype is None:
        return
    floats = [t for t in list(model.parameters()) + list(model.buffers()) + list(inputs)
              if isinstance(t, torch.Tensor) and t.is_floating_point()]
    wrong = sorted({str(t.dtype) for t in floats if t.dtype != dtype})
    if wrong:
        raise ValueError(f"torch_peers: the benchmark dtype is {dtype}, the model or its inputs hold {', '.join(wrong)}")


def torch_peers(model, inputs, names=TORCH_PEERS, warmup: int = CUDAGRAPH_WARMUP, dtype=None) -> dict[str, TorchPeer]:
    """The PyTorch peers of `model` on `inputs` (a tuple of tensors, on the benchmark's device and dtype), in
    the order of `names` (of TORCH_PEERS), each built and warmed up here: `warmup` calls (at least
    CUDAGRAPH_WARMUP under reduce-overhead), so that timing starts on a compiled, recorded, tuned peer. Call
    it once per shape: a new shape compiles again (dynamic=False) and must do so with freezing on, which
    only holds inside this function. The model is put in eval mode; with `dtype`, its floating parameters,
    buffers and inputs must all be of it. A peer that fails to build has .error set and .call None."""
    import torch
    from torch._dynamo.utils import counters
    inputs = tuple(inputs)
    unknown = [n for n in names if n not in PEER_CONFIGS]
    if unknown:
        raise ValueError(f"torch_peers: unknown configuration(s) {', '.join(unknown)}; choose from {', '.join(TORCH_PEERS)}")
    model.eval()
    _check_dtype(torch, model, inputs, dtype)
    on_cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in inputs)
    peers = {}
    for name in names:
        if name == EAGER:
            peer = TorchPeer(name, model, inputs, torch.inference_mode)
            t0 = time.perf_counter()
            with peer.mode():
                for _ in range(warmup):
                    peer.fn()
            if on_cuda:
                torch.cuda.synchronize()
            peer.compile_s = time.perf_counter() - t0
            peers[name] = peer
            continue
        peer = TorchPeer(name, None, inputs, compiled_mode)
        graphs, skips = counters["stats"]["unique_graphs"], counters["inductor"]["cudagraph_skips"]
        t0 = time.perf_counter()
        try:
            with compiled_mode(), inductor_freezing(True):
                kwargs = {"mode": "reduce-overhead"} if name == CUDAGRAPHS else {}
                compiled = torch.compile(model, dynamic=False, **kwargs)
                for _ in range(max(warmup, CUDAGRAPH_WARMUP) if name == CUDAGRAPHS else max(warmup, 1)):
                    compiled(*inputs)
                if on_cuda:
                    torch.cuda.synchronize()
            peer.call = compiled
        except Exception as e:  # noqa: BLE001 - the benchmark reports a peer that does not build
            peer.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
        peer.compile_s = time.perf_counter() - t0
        peer.graphs = counters["stats"]["unique_graphs"] - graphs
        peer.cudagraph_skips = counters["inductor"]["cudagraph_skips"] - skips
        if on_cuda and name == CUDAGRAPHS and peer.cudagraph_skips:   # then it is not the configuration named
            print(f"torch_peers: {name}: inductor skipped CUDA graphs {peer.cudagraph_skips} time(s) (its log "
                  "says why: TORCH_LOGS=cudagraphs)", file=sys.stderr, flush=True)
        peers[name] = peer
    return peers


def peers_environment() -> dict:
    """The versions and global flags behind the peers' numbers, for a results file."""
    import platform
    import torch
    env = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.version.cuda,
           "torch_peers": {name: PEER_CONFIGS[name] for name in TORCH_PEERS}}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        env.update(gpu=torch.cuda.get_device_name(), cudnn=torch.backends.cudnn.version(),
                   cudnn_benchmark=torch.backends.cudnn.benchmark, cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
                   matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32)
    return env


def release_peers() -> None:
    """Drop every compiled peer (dynamo's caches, inductor's CUDA graph trees) and the memory they held."""
    import torch
    import torch._dynamo
    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def best_peer(ms: dict[str, float], names=TORCH_PEERS) -> str | None:
    """The fastest of the timed torch peers in ms ({name: ms}), or None."""
    timed = [n for n in names if n in ms]
    return min(timed, key=ms.__getitem__) if timed else None

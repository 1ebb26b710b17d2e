"""bench/timing.py, the one place that builds the peers the benchmarks measure OpenPrim against: the PyTorch
configurations of torch_peers (eager, inductor-freezing, inductor-freezing-cudagraphs), the global freezing
flag restored, the grad mode they are compiled and timed under, time_rounds' interleaving, and ONNX Runtime
on every core. The CPU-safe parts only: the GPU scripts that use them run on the H200."""
import contextlib
import importlib.util
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

PATH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "timing.py")
_spec = importlib.util.spec_from_file_location("bench_timing", PATH)
timing = sys.modules["bench_timing"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing)    # by path: bench/ on sys.path would shadow modules of the same names


def small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


class FakeCompile:
    """torch.compile's stand-in: records each call's arguments and, at every call of the compiled model, the
    freezing flag, the grad mode and inference mode (inductor reads the first two when it compiles)."""

    def __init__(self, fail_mode=None):
        self.compiles, self.calls, self.fail_mode = [], [], fail_mode

    def __call__(self, model, **kwargs):
        from torch._inductor import config
        self.compiles.append(kwargs)
        mode = kwargs.get("mode", "default")

        def compiled(*inputs):
            self.calls.append((mode, config.freezing, torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
            if mode == self.fail_mode:
                raise RuntimeError("inductor failed\nsecond line")
            return model(*inputs)
        return compiled


@pytest.fixture
def fake_compile(monkeypatch):
    fake = FakeCompile()
    monkeypatch.setattr(torch, "compile", fake)
    return fake


def test_the_three_configurations(fake_compile):
    x = torch.randn(2, 8)
    peers = timing.torch_peers(small_model(), (x,))
    assert timing.TORCH_PEERS == ("eager", "inductor-freezing", "inductor-freezing-cudagraphs")
    assert list(peers) == list(timing.TORCH_PEERS)
    assert fake_compile.compiles == [{"dynamic": False}, {"dynamic": False, "mode": "reduce-overhead"}]
    for name, peer in peers.items():
        record = peer.record()
        assert record["config"] == name and "error" not in record, record
        assert record["freezing"] == (name != "eager")
    assert peers["inductor-freezing-cudagraphs"].record()["mode"] == "reduce-overhead"


def test_freezing_on_while_compiling_and_restored(fake_compile):
    from torch._inductor import config
    before = config.freezing
    timing.torch_peers(small_model(), (torch.randn(2, 8),))
    assert config.freezing == before is False
    modes = [c[0] for c in fake_compile.calls]
    assert modes.count("default") >= 1 and modes.count("reduce-overhead") >= timing.CUDAGRAPH_WARMUP
    assert all(freezing for _, freezing, _, _ in fake_compile.calls)


def test_compiled_under_no_grad_out_of_inference_mode(fake_compile):
    """Compiled under no_grad (freezing needs it), and not under an inference_mode around the call (dynamo
    guards on it: timing under another mode would compile again)."""
    with torch.inference_mode():
        peers = timing.torch_peers(small_model(), (torch.randn(2, 8),))
    assert all(not grad and not inference for _, _, grad, inference in fake_compile.calls)
    n = len(fake_compile.calls)
    with torch.inference_mode(), peers["inductor-freezing"].mode():
        peers["inductor-freezing"].fn()
    assert fake_compile.calls[n][2:] == (False, False)


def test_failed_peer_is_reported_and_freezing_restored(monkeypatch):
    from torch._inductor import config
    fake = FakeCompile(fail_mode="reduce-overhead")
    monkeypatch.setattr(torch, "compile", fake)
    peers = timing.torch_peers(small_model(), (torch.randn(2, 8),))
    assert config.freezing is False
    bad = peers["inductor-freezing-cudagraphs"]
    assert bad.call is None and bad.error == "RuntimeError: inductor failed"
    assert bad.record()["error"] == bad.error
    assert peers["inductor-freezing"].error is None


def test_eager_on_the_cpu():
    model, x = small_model(), torch.randn(3, 8)
    model.train()
    peers = timing.torch_peers(model, (x,), names=("eager",), dtype=torch.float32)
    assert list(peers) == ["eager"] and not model.training
    eager = peers["eager"]
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(eager.output(), want, rtol=0, atol=0)
    with eager.mode():
        assert torch.is_inference_mode_enabled()
        torch.testing.assert_close(eager.fn(), want, rtol=0, atol=0)
    assert eager.record() == {"config": "eager", **timing.PEER_CONFIGS["eager"], "compile_s": eager.compile_s}


def test_dtype_and_names_are_checked():
    with pytest.raises(ValueError, match="torch.float32"):
        timing.torch_peers(small_model(), (torch.randn(2, 8),), names=("eager",), dtype=torch.float16)
    with pytest.raises(ValueError, match="unknown configuration"):
        timing.torch_peers(small_model(), (torch.randn(2, 8),), names=("max-autotune",))


def test_time_rounds_interleaves_in_each_mode(monkeypatch):
    seen = []
    monkeypatch.setattr(timing, "cuda_ms", lambda fn, iters: (fn(), seen.append(("timed", iters)), 1.5)[-1])

    @contextlib.contextmanager
    def mode(tag):
        seen.append(("enter", tag))
        yield

    calls = {"a": lambda: seen.append("a"), "b": lambda: seen.append("b")}
    times = timing.time_rounds(calls, rounds=2, iters=7, modes={"a": lambda: mode("A")},
                               before=lambda name: seen.append(("before", name)))
    assert times == {"a": [1.5, 1.5], "b": [1.5, 1.5]} and timing.medians(times) == {"a": 1.5, "b": 1.5}
    one_round = [("enter", "A"), ("before", "a"), "a", "a", ("timed", 7), ("before", "b"), "b", "b", ("timed", 7)]
    assert seen == one_round * 2
    assert timing.best_peer({"eager": 3.0, "inductor-freezing": 2.0, "ours": 1.0}) == "inductor-freezing"
    assert timing.best_peer({"ours": 1.0}) is None


def test_onnx_runtime_on_every_core():
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((4, 3, 3, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    sess = timing.ort_layer([onnx.helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
                             onnx.helper.make_node("Relu", ["c"], ["y"])], (1, 3, 5, 5), {"w": w, "b": b})
    assert sess.get_session_options().intra_op_num_threads == timing.cpu_cores()
    assert sess.get_providers() == ["CPUExecutionProvider"]
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                                 padding=1)).numpy()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    assert timing.ort_config()["intra_op_num_threads"] == timing.cpu_cores()


@pytest.mark.slow
def test_inductor_peers_on_the_cpu():
    """The real torch.compile (inductor on the CPU: no CUDA graphs there, so the third peer reports its
    skip): both compile once, with freezing, and timing them inside their mode compiles nothing more."""
    from torch._dynamo.utils import counters
    from torch._inductor import config
    timing.release_peers()
    model, x = small_model(), torch.randn(2, 8)
    peers = timing.torch_peers(model, (x,))
    assert config.freezing is False
    with torch.no_grad():
        want = model(x)
    for name in timing.TORCH_PEERS[1:]:
        peer = peers[name]
        assert peer.error is None and peer.graphs == 1, peer.record()
        torch.testing.assert_close(peer.output(), want)
        graphs = counters["stats"]["unique_graphs"]
        with torch.inference_mode(), peer.mode():     # as time_rounds calls it, under a caller's inference_mode
            for _ in range(3):
                peer.fn()
        assert counters["stats"]["unique_graphs"] == graphs, f"{name} compiled again when timed"
    assert peers["inductor-freezing-cudagraphs"].cudagraph_skips >= 1      # no CUDA graphs on the CPU
    timing.release_peers()


def test_gpu_networks_tape_module_is_the_replay():
    """bench/gpu_networks.py times PyTorch on TorchGraph.module() (the tape as an nn.Module, its weights
    buffers, so that freezing folds them): the same numbers as the tape replayed, the filters transposed
    once at record time rather than at every call."""
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
    spec = importlib.util.spec_from_file_location("bench_gpu_networks", os.path.join(bench, "gpu_networks.py"))
    gpu_networks = sys.modules["bench_gpu_networks"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_networks)
    import resnet    # examples/, which gpu_networks puts on sys.path
    tg = gpu_networks.TorchGraph(torch, "NHWC", "f32", device="cpu")
    resnet.build(depth=18, batch=2, size=32, layout="NHWC", dtype="f32", classes=10, graph=tg)
    module = tg.module()
    assert not module.training
    assert sum(1 for _ in module.buffers()) < len(tg.env)        # the KRSC filters are not kept twice
    x = torch.randn(2, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.testing.assert_close(module(x), tg.forward(x), rtol=0, atol=0)
    conv_filters = [v for v in module.buffers() if v.dim() == 4]
    assert conv_filters and all(v.is_contiguous(memory_format=torch.channels_last) for v in conv_filters)

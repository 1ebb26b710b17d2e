"""torch.compile with gradients (issue 31): openprim_backend goes through AOTAutograd, OpenPrim compiles its
forward and its backward graph for the tensors' device, the CPU or a GPU (pyfrontend/torch/aot.py,
backward.py; driver/torch_backend.py), and loss.backward() runs OpenPrim kernels. Against eager PyTorch: the loss, every parameter's gradient and the
batch-norm buffers after one step, then the loss curve of 20 steps of SGD with momentum; an op the backward
cannot map falls back to eager for that graph with one warning; a target equal to ignore_index is masked
out as torch does, one out of range fails the loss's bounds check. Small shapes (batch 4, 16x16 images). Skipped without torch; the CUDA cases without a CUDA device (on a GPU machine:
`. scripts/device_env.sh && python -m pytest -k cuda test/python/test_torch_autograd.py`).

    python -m pytest test/python/test_torch_autograd.py -q
    OPENPRIM_CACHE=0 python test/python/test_torch_autograd.py     # step times, OpenPrim vs eager
"""
from __future__ import annotations

import copy
import os
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from openprim import torch_backend  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from train_resnet import WithLoss  # noqa: E402 - the model and its CrossEntropyLoss in one compiled graph
from openprim.base.errors import OpenPrimError  # noqa: E402
from openprim.torch_backend import openprim_backend  # noqa: E402

RTOL = 1e-4          # gradients: relative to the largest |gradient| of each parameter
CURVE_RTOL = 1e-3    # the SGD loss curve


class SmallCNN(nn.Module):
    """conv (stride 2) + batch norm (training mode) + relu + max pool + conv + avg pool + linear. The first conv
    has no bias: the batch norm after it removes its gradient (eager's is rounding noise around 0)."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 12, 3, padding=1)
        self.fc = nn.Linear(12 * 2 * 2, classes)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        y = F.avg_pool2d(self.conv2(y), 2)
        return self.fc(torch.flatten(y, 1))


class MLP(nn.Module):
    def __init__(self, features=24, classes=7):
        super().__init__()
        self.fc1 = nn.Linear(features, 32)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, classes)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


MODELS = {"cnn": (SmallCNN, (4, 3, 16, 16), 10), "mlp": (MLP, (4, 24), 7)}


def fresh():
    torch._dynamo.reset()
    torch_backend._WARNED.clear()
    torch_backend.AOT_COUNTS.clear()


def openprim_warnings(caught):
    return [str(w.message) for w in caught if "openprim_backend" in str(w.message)]


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


def make(name, seed=0, device="cpu"):
    """(model with its loss, an eager copy, inputs, targets) of MODELS[name], on `device`."""
    cls, shape, classes = MODELS[name]
    torch.manual_seed(seed)
    model = WithLoss(cls()).train().to(device)
    x = torch.randn(shape).to(device)
    t = torch.randint(0, classes, (shape[0],)).to(device)
    return model, copy.deepcopy(model), x, t


def assert_grads_close(model, eager):
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert p.grad is not None, f"{name}: no gradient"
        err, scale = float((p.grad - q.grad).abs().max()), float(q.grad.abs().max())
        assert err <= RTOL * scale, f"grad of {name}: max |err| {err:.3g}, max |grad| {scale:.3g}"


def assert_buffers_close(model, eager):
    for (name, b), r in zip(model.named_buffers(), eager.buffers()):
        torch.testing.assert_close(b, r, rtol=RTOL, atol=1e-6, msg=lambda m: f"buffer {name}: {m}")


def backward_both(compiled, eager, x, t):
    """(compiled loss, eager loss, the warnings of the compiled call): each loss computed and backpropagated."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = compiled(x, t)
        loss.backward()
    want = eager(x, t)
    want.backward()
    return loss, want, caught


def sgd_curves(model, compiled, eager, x, t, first_step: bool, steps: int = 20) -> tuple[list, list]:
    """The losses of `steps` SGD steps (momentum 0.9) of the compiled model and its eager copy on the same
    batches (x's shape, seeded per step; targets t), each step's gradients from its own backward; with
    first_step the optimizers step first (on the gradients already there), else they step after each
    backward but the last (the last gradients are left to compare)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    curve, curve_eager = [], []
    for step in range(steps):
        if first_step:
            opt.step()
            opt_eager.step()
        opt.zero_grad()
        opt_eager.zero_grad()
        xs = torch.randn(x.shape, generator=torch.Generator().manual_seed(step)).to(x.device)
        loss, want = compiled(xs, t), eager(xs, t)
        loss.backward()
        want.backward()
        curve.append(loss.item())
        curve_eager.append(want.item())
        if not first_step and step < steps - 1:
            opt.step()
            opt_eager.step()
    return curve, curve_eager


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MODELS))
def test_training_matches_eager(name, device):
    """One forward and backward against eager (loss, gradients, running statistics), both graphs compiled by
    OpenPrim for the tensors' device and run; then 20 steps of SGD with momentum track eager's loss curve,
    without a recompile."""
    fresh()
    model, eager, x, t = make(name, device=device)
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False)
    loss, want, caught = backward_both(compiled, eager, x, t)
    assert not openprim_warnings(caught), openprim_warnings(caught)
    assert dict(torch_backend.AOT_COUNTS) == {"forward compiled": 1, "backward compiled": 1, "forward runs": 1,
                                              "backward runs": 1}
    torch.testing.assert_close(loss.detach(), want.detach(), rtol=RTOL, atol=0)
    assert_grads_close(model, eager)
    assert_buffers_close(model, eager)

    curve, curve_eager = sgd_curves(model, compiled, eager, x, t, first_step=True)
    torch.testing.assert_close(torch.tensor(curve), torch.tensor(curve_eager), rtol=CURVE_RTOL, atol=0)
    assert all(p.grad.device == x.device for p in model.parameters())
    assert curve[-1] < curve[0]
    assert_buffers_close(model, eager)
    counts = torch_backend.AOT_COUNTS
    assert counts["forward compiled"] == counts["backward compiled"] == 1
    assert counts["forward runs"] == counts["backward runs"] == 21 and not counts["forward eager"]


class PooledCNN(nn.Module):
    """conv + batch norm + relu, global average pool, flatten, linear: ResNet's head. On a channels-last map
    the flatten's backward views a flat buffer as [N, C] and [N, C, 1, 1] (as_strided, copy,
    as_strided_scatter in the backward graph)."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        y = F.adaptive_avg_pool2d(F.relu(self.bn(self.conv(x))), 1)
        return self.fc(torch.flatten(y, 1))


@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_training(device):
    """A channels-last model and input (what a GPU user trains): one step against eager, both graphs compiled."""
    fresh()
    torch.manual_seed(5)
    model = WithLoss(PooledCNN()).train().to(device).to(memory_format=torch.channels_last)
    eager = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8).to(device).to(memory_format=torch.channels_last)
    t = torch.randint(0, 5, (4,)).to(device)
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False)
    loss, want, caught = backward_both(compiled, eager, x, t)
    assert not openprim_warnings(caught), openprim_warnings(caught)
    assert torch_backend.AOT_COUNTS["forward runs"] == torch_backend.AOT_COUNTS["backward runs"] == 1
    torch.testing.assert_close(loss.detach(), want.detach(), rtol=RTOL, atol=0)
    assert_grads_close(model, eager)


AMP_RTOL = 2e-2     # f16 products (autocast): gradients relative to the largest |gradient| of each parameter


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_precision_training(device):
    """Under torch.autocast(float16) the graphs cast the fp32 weights (the master copy the optimizer updates)
    to f16 for the convolutions and matmuls: both graphs compile in f16 (precision="f16"), loss and gradients
    (fp32 at the edges, as eager's) within f16 tolerance of eager under the same autocast."""
    fresh()
    model, eager, x, t = make("cnn", seed=4, device=device)
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast(device, dtype=torch.float16):
            loss = compiled(x, t)
        loss.backward()
    with torch.autocast(device, dtype=torch.float16):
        want = eager(x, t)
    want.backward()
    assert not openprim_warnings(caught), openprim_warnings(caught)
    counts = torch_backend.AOT_COUNTS
    assert counts["forward runs"] == counts["backward runs"] == 1
    assert counts["forward compiled in f16"] == counts["backward compiled in f16"] == 1   # autocast's dtype
    torch.testing.assert_close(loss.detach().float(), want.detach().float(), rtol=AMP_RTOL, atol=0)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert p.grad.dtype == q.grad.dtype == torch.float32, name
        err, scale = float((p.grad - q.grad).abs().max()), float(q.grad.abs().max())
        assert err <= AMP_RTOL * scale, f"grad of {name}: max |err| {err:.3g}, max |grad| {scale:.3g}"


def test_loss_outside_the_graph():
    """The compiled model returns logits and the loss is eager: the backward graph's incoming gradient is a
    full tensor."""
    fresh()
    torch.manual_seed(1)
    model = MLP()
    eager = copy.deepcopy(model)
    x, t = torch.randn(4, 24), torch.randint(0, 7, (4,))
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False)
    F.cross_entropy(compiled(x), t).backward()
    F.cross_entropy(eager(x), t).backward()
    assert_grads_close(model, eager)
    assert torch_backend.AOT_COUNTS["backward runs"] == 1


class AbsHead(nn.Module):
    """A backward that OpenPrim cannot map (abs's gradient takes the sign) after a max pool, whose indices
    the compiled forward does not compute: the eager backward recomputes them."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6 * 4 * 4, 5)

    def forward(self, x):
        y = F.max_pool2d(torch.tanh(self.conv(x)), 2)
        return self.fc(torch.flatten(y, 1)).abs()


def test_unmapped_backward_op_runs_eagerly():
    fresh()
    torch.manual_seed(2)
    model = AbsHead()
    eager = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8)
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            model.zero_grad()
            out = compiled(x)
            out.square().sum().backward()
    eager(x).square().sum().backward()
    msgs = openprim_warnings(caught)
    assert len(msgs) == 1 and "backward graph" in msgs[0] and "aten.sign" in msgs[0], msgs
    torch.testing.assert_close(out.detach(), eager(x).detach(), rtol=RTOL, atol=1e-6)
    assert_grads_close(model, eager)
    counts = torch_backend.AOT_COUNTS
    assert counts["forward compiled"] == 1 and counts["forward runs"] == 2
    assert not counts["backward compiled"] and counts["backward eager"] == 2


@pytest.mark.parametrize("device", DEVICES)
def test_ignored_target_compiled(device):
    """A target equal to ignore_index (-100) is masked out of the compiled loss as torch does (the mean over the
    other rows; no gradient from its row), with no warning and no eager call."""
    fresh()
    model, eager, x, t = make("mlp", seed=3, device=device)
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False)
    ignored = t.clone()
    ignored[1] = -100
    loss, want, caught = backward_both(compiled, eager, x, ignored)
    assert not openprim_warnings(caught), openprim_warnings(caught)
    torch.testing.assert_close(loss.detach(), want.detach(), rtol=RTOL, atol=0)
    assert_grads_close(model, eager)
    counts = torch_backend.AOT_COUNTS
    assert counts["forward runs"] == counts["backward runs"] == 1 and not counts["forward eager"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [7, -3])
def test_target_out_of_range(device, bad):
    """A target outside the classes that is not ignore_index fails the loss's bounds check. On the CPU that
    call runs eagerly (one warning), so that torch reports it; on a GPU the check is read without waiting for
    the run (the kernel reads the nearest class meanwhile) and a later call raises it, as CUDA's device-side
    asserts surface (here the backward, enqueued after the forward has finished); the calls after that run
    compiled again."""
    fresh()
    model, eager, x, t = make("mlp", seed=3, device=device)
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False)
    wrong = t.clone()
    wrong[2] = bad
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device == "cpu":
            with pytest.raises(IndexError, match="out of bounds"):
                compiled(x, wrong)
            msgs = openprim_warnings(caught)
            assert len(msgs) == 1 and "eagerly" in msgs[0], msgs
        else:
            loss = compiled(x, wrong)
            torch.cuda.synchronize()     # the forward done: the next call, its backward, reads its checks
            with pytest.raises(OpenPrimError, match=r"an earlier call.*outside \[-7, 7\)"):
                loss.backward()
    model.zero_grad()
    compiled(x, t).backward()
    eager(x, t).backward()
    assert_grads_close(model, eager)


def test_failed_checks_raise_once_each():
    """The GPU's deferred run-time checks (torch_backend._Calls): a call raises what the executables' checks
    report failed (each message once, joined), and nothing when none failed."""
    class Checks:
        def __init__(self, *results):
            self.results = list(results)

        def failed(self):
            return self.results.pop(0)
    message = "prim.gather: an index is outside [-7, 7) (1 of them)"
    calls = torch_backend._Calls()
    calls.checks = [Checks([], [message]), Checks([message], [])]
    with pytest.raises(OpenPrimError, match=r"^a run-time check failed in an earlier call: prim.gather: an index "
                                            r"is outside \[-7, 7\) \(1 of them\)$"):
        calls.raise_failed_checks()
    with pytest.raises(OpenPrimError, match=r"\(1 of them\)$"):
        calls.raise_failed_checks()
    calls.checks = [Checks([])]
    calls.raise_failed_checks()


@pytest.mark.parametrize("device", DEVICES)
def test_reduce_overhead_training(device):
    """mode="reduce-overhead" (torch.compile's, as for Inductor): on a GPU both graphs are recorded by
    CUDA-graph trees with OpenPrim's kernels inside, so the steps after the first few replay the trees'
    graphs and never call our runners (their run counts stop growing); the loss curve of 20 SGD steps and
    the last gradients still match eager's. On the CPU the mode changes nothing."""
    fresh()
    model, eager, x, t = make("cnn", seed=6, device=device)
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False, mode="reduce-overhead")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        curve, curve_eager = sgd_curves(model, compiled, eager, x, t, first_step=False)
    assert not openprim_warnings(caught), openprim_warnings(caught)
    torch.testing.assert_close(torch.tensor(curve), torch.tensor(curve_eager), rtol=CURVE_RTOL, atol=0)
    assert_grads_close(model, eager)
    counts = torch_backend.AOT_COUNTS
    assert counts["forward compiled"] == counts["backward compiled"] == 1 and not counts["forward eager"]
    if device == "cpu":
        assert counts["forward runs"] == counts["backward runs"] == 20
    else:   # warmed up and recorded, then replayed
        assert 1 <= counts["forward runs"] <= 3 and 1 <= counts["backward runs"] <= 3, dict(counts)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
def test_reduce_overhead_reports_a_bad_target():
    """Under CUDA-graph trees the loss's bounds check is counted inside the replayed graph: a target out of
    range in a replayed step is raised by a later call, as without the mode."""
    fresh()
    model, eager, x, t = make("mlp", seed=3, device="cuda")
    compiled = torch.compile(model, backend=openprim_backend, dynamic=False, mode="reduce-overhead")
    for _ in range(4):       # warm-up, recording, replays
        compiled(x, t).backward()
    wrong = t.clone()
    wrong[2] = 7
    loss = compiled(x, wrong)
    torch.cuda.synchronize()
    with pytest.raises(OpenPrimError, match=r"an earlier call.*outside \[-7, 7\)"):
        loss.backward()
    compiled(x, t).backward()      # reported once: the next steps run again


def test_unknown_mode_is_refused():
    fresh()
    model, _, x, t = make("mlp")
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        torch.compile(model, backend=openprim_backend, mode="fastest")(x, t)


def test_inference_keeps_its_path():
    """Under no_grad the graph is the inference one (weights compiled in), not AOTAutograd's."""
    fresh()
    model = MLP().eval()
    x = torch.randn(4, 24)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)     # no eager fallback
        out = torch.compile(model, backend=openprim_backend, dynamic=False)(x)
        torch.testing.assert_close(out, model(x), rtol=RTOL, atol=1e-6)
    assert not torch_backend.AOT_COUNTS


def _bench(steps=100):
    """Median forward + backward step, compiled vs eager, per model and batch (the compile cache as configured)."""
    import statistics
    import time

    def median_ms(fn, params, x, t):
        times = []
        for _ in range(steps + 3):
            start = time.perf_counter()
            fn(x, t).backward()
            for p in params:
                p.grad = None
            times.append(time.perf_counter() - start)
        return statistics.median(times[3:]) * 1e3

    for name, (cls, shape, classes) in MODELS.items():
        for batch in (4, 32):
            fresh()
            torch.manual_seed(0)
            model = WithLoss(cls()).train()
            eager = copy.deepcopy(model)
            x, t = torch.randn((batch, *shape[1:])), torch.randint(0, classes, (batch,))
            compiled = torch.compile(model, backend=openprim_backend, dynamic=False)
            start = time.perf_counter()
            compiled(x, t).backward()
            first = time.perf_counter() - start
            ours = median_ms(compiled, list(model.parameters()), x, t)
            theirs = median_ms(eager, list(eager.parameters()), x, t)
            print(f"{name} batch {batch}: OpenPrim {ours:.2f} ms/step, eager {theirs:.2f} ms/step "
                  f"(first step, compiling: {first:.1f} s; {dict(torch_backend.AOT_COUNTS)})")


if __name__ == "__main__":     # python test/python/test_torch_autograd.py: step times, OpenPrim vs eager
    _bench()


def test_batched_conversions():
    """The training path's conversions at a graph's edges (torch_backend._converted): every tensor, strided
    ones too, to its dtype in one batched copy, each into a contiguous tensor of its own."""
    g = torch.Generator().manual_seed(0)
    srcs = [torch.randn(3, 5, generator=g), torch.randn(7, generator=g).to(torch.float16),
            torch.randn(2, 4, 6, 3, generator=g).permute(0, 3, 1, 2), torch.randn((), generator=g),
            torch.randn(0, 4, generator=g), torch.randn(33, generator=g)]
    dtypes = [torch.float16, torch.float32, torch.bfloat16, torch.float16, torch.float16, torch.float16]
    slots = torch_backend._OutputSlots(torch.device("cpu"))
    outs = torch_backend._converted(srcs, dtypes, slots)
    for src, dtype, out in zip(srcs, dtypes, outs):
        assert out.dtype == dtype and out.shape == src.shape and out.is_contiguous()
        torch.testing.assert_close(out, src.to(dtype), rtol=0, atol=0)
    assert len({o.data_ptr() for o in outs if o.numel()}) == len([o for o in outs if o.numel()])
    assert torch_backend._converted([], [], slots) == []


def test_output_slots_reuse_only_free_buffers():
    """torch_backend._OutputSlots: a call writes the buffer an earlier call returned only once nothing holds
    it (not the returned tensor, a view of it, or a tensor autograd saved); a different shape or dtype, or a
    buffer still held, gets a new one, which the slot then keeps."""
    slots = torch_backend._OutputSlots(torch.device("cpu"))
    specs = [((2, 3), torch.float32), ((4,), torch.float16), ((5,), torch.float32)]
    a, b, c = slots.take(specs)
    ptrs = [t.data_ptr() for t in (a, b, c)]
    view = b[1:]
    w = torch.ones(5, requires_grad=True)
    y = (w * c).sum()             # autograd saves c for the backward
    del a, b, c
    a, b, c = slots.take(specs)
    assert a.data_ptr() == ptrs[0]                              # dropped: written again
    assert b.data_ptr() != ptrs[1] and c.data_ptr() != ptrs[2]  # a view, and the saved tensor, hold theirs
    y.backward()
    del view, y, a, b, c
    a, b, c = slots.take(specs)
    assert c.data_ptr() != ptrs[2]              # the slot moved on to the buffer it took last time
    moved = c.data_ptr()
    del c
    assert slots.take(specs)[2].data_ptr() == moved
    assert slots.take([((3, 2), torch.float32)])[0].data_ptr() != a.data_ptr()   # a is held by this test
    del a
    assert slots.take([((3, 2), torch.float32)])[0].shape == (3, 2)

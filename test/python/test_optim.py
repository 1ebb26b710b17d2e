"""openprim.optim: the fused SGD and AdamW against torch.optim's on the same gradients, fp32 master weights for
f16/bf16 parameters, dynamic loss scaling, learning-rate schedules, and the refusals."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from openprim import optim  # noqa: E402
from openprim.base.errors import OpenPrimError  # noqa: E402

from helpers import TARGET  # noqa: E402

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="the fused optimizers update CPU parameters")


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.ReLU(), torch.nn.Linear(13, 5), torch.nn.ReLU(),
                               torch.nn.Linear(5, 3))


def _data(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(32, 7, generator=g), torch.randint(0, 3, (32,), generator=g)


def _train(model, opt, steps, x, y, scheduler=None):
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()


def _max_rel(a, b):
    return max(float((p - q).abs().max() / p.abs().max()) for p, q in zip(a.parameters(), b.parameters())
               for p, q in [(p.detach(), q.detach())])


@pytest.mark.parametrize("cls,kw", [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=1e-3)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2)),
    ("SGD", dict(lr=0.1, momentum=0.8, dampening=0.3)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
], ids=["sgd", "momentum", "nesterov", "dampening", "adamw", "adamw-betas"])
def test_matches_torch_optim(cls, kw):
    """20 steps on the same model and data: the weights as torch.optim's (f32 rounding apart)."""
    x, y = _data()
    ours, ref = _mlp(), _mlp()
    _train(ours, getattr(optim, cls)(ours.parameters(), **kw), 20, x, y)
    _train(ref, getattr(torch.optim, cls)(ref.parameters(), **kw), 20, x, y)
    assert _max_rel(ref, ours) < 2e-5


def test_learning_rate_schedule():
    """A torch LR scheduler changes the group's lr; the compiled update takes it as an input (no recompile)."""
    x, y = _data()
    ours, ref = _mlp(), _mlp()
    o, r = optim.SGD(ours.parameters(), lr=0.2, momentum=0.9), torch.optim.SGD(ref.parameters(), lr=0.2, momentum=0.9)
    _train(ours, o, 12, x, y, torch.optim.lr_scheduler.StepLR(o, 4, gamma=0.3))
    _train(ref, r, 12, x, y, torch.optim.lr_scheduler.StepLR(r, 4, gamma=0.3))
    assert o.param_groups[0]["lr"] == pytest.approx(0.2 * 0.3 ** 3)
    assert _max_rel(ref, ours) < 2e-5


def test_one_update_for_all_parameters():
    """The parameters live in one flat buffer (the model's tensors are views of it), and one executable of a
    few kernels updates them all, whatever their number."""
    model = _mlp()
    o = optim.AdamW(model.parameters())
    (flat, _, update, _, _), = o._groups
    assert all(flat.data.data_ptr() <= p.data_ptr() < flat.data.data_ptr() + flat.data.nbytes
               for p in model.parameters())
    assert len(update.plan["steps"]) <= 4
    # The parameters and gradients are the executable's state, updated in place: a step copies nothing.
    views = update.state_views()
    assert flat.data.data_ptr() == views["w"].ctypes.data and flat.grad.data_ptr() == views["g"].ctypes.data
    assert not any(e.get("copy") for e in update.plan["state"])
    assert [i["name"] for i in update.plan["inputs"]] == list(o.SCALARS) and update.plan["outputs"] == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_master_weights(dtype):
    """Half-precision parameters: the update runs on fp32 master copies (starting from the parameters), the
    parameters are the masters rounded; checked against torch's AdamW on fp32 copies fed the same gradients."""
    x, y = _data()
    half = _mlp().to(dtype)
    ref = copy.deepcopy(half).float()
    o, r = optim.AdamW(half.parameters(), lr=1e-2), torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for _ in range(6):
        o.zero_grad()
        torch.nn.functional.cross_entropy(half(x.to(dtype)).float(), y).backward()
        for p, q in zip(ref.parameters(), half.parameters()):
            p.grad = q.grad.float()
        o.step()
        r.step()
    master = o._groups[0][1][:sum(p.numel() for p in ref.parameters())]
    sizes = [p.numel() for p in ref.parameters()]
    for p, m, q in zip(ref.parameters(), torch.split(master, sizes), half.parameters()):
        assert float((p.detach() - m.view_as(p)).abs().max()) <= 1e-6 * float(p.detach().abs().max())
        assert torch.equal(q.detach(), m.view_as(q).to(dtype))


def test_dynamic_loss_scaling():
    """f16 with loss_scale='dynamic': a step whose gradients overflow is skipped (weights and state untouched)
    and halves the scale; `growth_interval` good steps double it; the gradients are unscaled in the update."""
    x, y = _data()
    half = _mlp().half()
    ref = copy.deepcopy(half).float()
    o = optim.SGD(half.parameters(), lr=0.1, momentum=0.9, loss_scale="dynamic", growth_interval=3)
    r = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    before = [p.detach().clone() for p in half.parameters()]
    scale = o.loss_scale
    o.zero_grad()
    next(half.parameters()).grad[0, 0] = float("inf")
    o.step()
    assert o.skipped == 1 and o.loss_scale == scale / 2
    assert all(torch.equal(a, b) for a, b in zip(before, half.parameters()))
    for _ in range(3):
        o.zero_grad()
        o.scale(torch.nn.functional.cross_entropy(half(x.half()).float(), y)).backward()
        for p, q in zip(ref.parameters(), half.parameters()):
            p.grad = q.grad.float() / o.loss_scale
        o.step()
        r.step()
    assert o.loss_scale == scale   # halved once, doubled after 3 good steps
    master = o._groups[0][1][:sum(p.numel() for p in ref.parameters())]
    sizes = [p.numel() for p in ref.parameters()]
    for p, m in zip(ref.parameters(), torch.split(master, sizes)):
        assert float((p.detach() - m.view_as(p)).abs().max()) <= 1e-6 * float(p.abs().max())


def test_gradients_made_anew_are_taken():
    """zero_grad(set_to_none) or a gradient assigned by hand replaces a view of the flat gradient: the step
    copies it in."""
    model, ref = _mlp(), _mlp()
    o, r = optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for p, q in zip(model.parameters(), ref.parameters()):
        p.grad = torch.full_like(p, 0.5)
        q.grad = torch.full_like(q, 0.5)
    o.step()
    r.step()
    assert _max_rel(ref, model) < 1e-6


def test_refusals():
    model = _mlp()
    with pytest.raises(OpenPrimError, match="share one float dtype"):
        optim.SGD([model[0].weight, model[2].weight.detach().half().requires_grad_()], lr=0.1)
    with pytest.raises(OpenPrimError, match="must be >= 0"):
        optim.SGD(model.parameters(), lr=-1)
    with pytest.raises(OpenPrimError, match="Nesterov momentum needs momentum > 0"):
        optim.SGD(model.parameters(), lr=0.1, nesterov=True)
    with pytest.raises(OpenPrimError, match="betas in"):
        optim.AdamW(model.parameters(), betas=(0.9, 1.0))
    with pytest.raises(OpenPrimError, match="loss_scale must be"):
        optim.AdamW(model.parameters(), loss_scale="auto")

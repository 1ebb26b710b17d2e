"""Fused optimizers: SGD (momentum, Nesterov, weight decay) and AdamW over all of a model's parameters in a few
OpenPrim kernels, with fp32 master weights for f16/bf16 parameters and dynamic loss scaling (issue 31).

    opt = openprim.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    opt = openprim.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    opt.zero_grad(); loss.backward(); opt.step()             # as torch.optim (LR schedulers work too)

    opt = openprim.optim.AdamW(half_model.parameters(), loss_scale="dynamic")   # or a fixed scale
    opt.scale(loss).backward(); opt.step()                   # f16: scaled loss, unscaled in the update

How. One Graph per group computes the update of the whole flat vector elementwise: prim-fuse makes it a
handful of kernels (the new state, the new weights), whatever the number of parameters, where torch.optim's
foreach path launches per tensor list and its loop per parameter. Everything it reads and writes is state
the executable carries between calls (Graph.carry), updated in place: the weights (the parameters, or for
f16/bf16 parameters their fp32 master copy), the gradients (read only) and the optimizer's buffers
(momentum, Adam's moments). At construction every parameter of a group moves into the weights' state (the
parameters become views of it; zeros pad it to whole rows of ROW) and its gradient into the gradients'
(`p.grad` views: backward accumulates into them in place, so zero_grad zeroes them and never sets them to
None); a step passes only the hyper-parameters (learning rate, bias corrections, the loss scale's inverse),
scalar inputs, so a schedule never recompiles and nothing is copied in or out.

Loss scaling (f16): `scale(loss)` multiplies the loss by the current scale; the update multiplies the
gradients by its inverse. With loss_scale="dynamic" a second executable on the same state first sums the
gradients times 0 (one reduction: nan where a gradient is inf or nan). Then the step is skipped and the scale
halved; after
`growth_interval` finite steps in a row it doubles (as torch.amp.GradScaler).

The update follows torch.optim's formulas (single tensor, not fused): SGD's momentum buffer is the first
gradient itself (dampening applies from the second step), AdamW decays the weights before the moments and
divides by sqrt(v) / sqrt(1 - b2^t) + eps.
"""
from __future__ import annotations

import math

import numpy as np

from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph

try:
    import torch
except ImportError as e:        # the optimizers work on torch parameters
    raise OpenPrimError(f"openprim.optim needs PyTorch ({e}): pip install torch") from None

from . import api

DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
ROW = 256   # the flat vectors are updated as [size / ROW, ROW] maps: rows for the threads, a row for the vectors


class _Flat:
    """One param group's parameters as views of one flat buffer, their gradients of another; both buffers are
    given by `bind` (the update's state, so the update reads and writes them where they are)."""

    def __init__(self, params: list):
        if not params:
            raise OpenPrimError("openprim.optim: a parameter group has no parameters")
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPES:
            raise OpenPrimError(f"openprim.optim: a group's parameters must share one float dtype (f32, f16, bf16), "
                                f"got {sorted(map(str, dtypes))}")
        if any(p.device.type != "cpu" for p in params):
            raise OpenPrimError("openprim.optim: CPU parameters only (the GPU update is not built yet)")
        self.params, self.dtype = params, next(iter(dtypes))
        self.size = -(-sum(p.numel() for p in params) // ROW) * ROW     # zeros after the last: they stay zero

    def bind(self, data, grad) -> None:
        """Move the parameters into `data` and their gradients into `grad` (flat, zeros), as views."""
        self.data, self.grad = data, grad
        offset = 0
        for p in self.params:
            n = p.numel()
            self.data[offset:offset + n].copy_(p.detach().reshape(-1))
            if p.grad is not None:
                self.grad[offset:offset + n].copy_(p.grad.reshape(-1))
            p.data = self.data[offset:offset + n].view_as(p)
            p.grad = self.grad[offset:offset + n].view_as(p)
            offset += n

    def gather_grads(self) -> bool:
        """Copy into the flat gradient any gradient that is not a view of it (set to None and made anew by
        backward, or assigned by hand); whether any parameter has a gradient at all."""
        base, end, offset, any_grad = self.grad.data_ptr(), self.grad.data_ptr() + self.grad.nbytes, 0, False
        for p in self.params:
            n = p.numel()
            if p.grad is not None:
                any_grad = True
                if not base <= p.grad.data_ptr() < end:
                    self.grad[offset:offset + n].copy_(p.grad.reshape(-1))
                    p.grad = self.grad[offset:offset + n].view_as(p)
            offset += n
        return any_grad


def _tensor(view: np.ndarray, dtype) -> "torch.Tensor":
    """A flat torch tensor on a state view of the update (bf16 is stored as uint16 bits)."""
    t = torch.from_numpy(view.reshape(-1))
    return t.view(dtype) if dtype == torch.bfloat16 else t


class _FusedOptimizer(torch.optim.Optimizer):
    """The flat buffers, the compiled update per group, loss scaling; subclasses give the update's Graph."""

    STATE = ()          # the names of the flat fp32 state buffers

    def __init__(self, params, defaults, loss_scale=None, growth_interval=2000):
        super().__init__(params, defaults)
        if loss_scale not in (None, "dynamic") and not (isinstance(loss_scale, (int, float)) and loss_scale > 0):
            raise OpenPrimError(f"openprim.optim: loss_scale must be None, 'dynamic' or a positive number, got "
                                f"{loss_scale!r}")
        self.dynamic = loss_scale == "dynamic"
        self.loss_scale = 2.0 ** 16 if self.dynamic else float(loss_scale or 1.0)
        self.growth_interval, self._good_steps, self.skipped = growth_interval, 0, 0
        self._groups = []
        for group in self.param_groups:
            flat = _Flat([p for p in group["params"] if p.requires_grad])
            dtype = DTYPES[flat.dtype]
            update = api.compile(self._graph(flat.size, dtype), target="cpu")
            check = None
            if self.dynamic:    # the same state, read only: whether a gradient overflowed, before any update
                check = api.compile(self._graph(flat.size, dtype, check=True), target="cpu")
                check.share_state(update)
            views = update.state_views()
            w = _tensor(views["w"], torch.float32)
            if flat.dtype == torch.float32:
                flat.bind(w, _tensor(views["g"], flat.dtype))
                master = None
            else:               # fp32 master weights in the state, the parameters rounded from them after a step
                flat.bind(torch.zeros(flat.size, dtype=flat.dtype), _tensor(views["g"], flat.dtype))
                w.copy_(flat.data)
                master = w
            self._groups.append((flat, master, update, check, {"step": 0}))

    def scale(self, loss):
        """The loss times the current loss scale (call backward on this)."""
        return loss * self.loss_scale

    def zero_grad(self, set_to_none: bool = False):
        """Zero the flat gradients in place (they stay the parameters' .grad: set_to_none is ignored)."""
        for flat, *_ in self._groups:
            flat.grad.zero_()

    def _graph(self, size, dtype, check=False) -> Graph:
        """The update of a flat group, all of it state carried between calls and updated in place: w (fp32:
        the parameters or their master copy), g (the parameters' dtype; read only) and the optimizer's buffers;
        inputs the scalars (`SCALARS`). check: the same state read only, and one output, a sum that is not
        finite where a gradient is not (dynamic loss scaling runs it before the update)."""
        g, shape = Graph(name="check" if check else "update"), (size // ROW, ROW)
        w = g.input("w", shape, "f32")
        grad = g.input("g", shape, dtype)
        state = [g.input(name, shape, "f32") for name in self.STATE]
        gf = g.cast(grad, "f32") if dtype != "f32" else grad
        if check:           # sum(g * 0): nan where any gradient is inf or nan, else 0 (one reduction)
            g.output(g.reduce(g.mul(gf, g.constant("zero", np.zeros((), np.float32))), "sum"))
            for x in (w, grad, *state):
                g.carry(x, x)
            return g
        scalars = {name: g.input(name, (), "f32") for name in self.SCALARS}
        new_w, new_state = self._update(g, w, g.mul(gf, scalars["inv_scale"]), state, scalars)
        g.carry(w, new_w)
        g.carry(grad, grad)
        for old, new in zip(state, new_state):
            g.carry(old, new)
        return g

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, (flat, master, update, check, count) in zip(self.param_groups, self._groups):
            if not flat.gather_grads():
                continue
            if check is not None and not np.isfinite(check()):    # a gradient overflowed: skip, halve the scale
                self.loss_scale /= 2
                self._good_steps, self.skipped = 0, self.skipped + 1
                return loss
            scalars = self._scalars(group, count["step"] + 1)
            scalars["inv_scale"] = 1.0 / self.loss_scale
            update(*[np.float32(scalars[n]) for n in self.SCALARS])
            count["step"] += 1
            if master is not None:     # the parameters: the master weights rounded to their dtype
                flat.data.copy_(master)
        if self.dynamic:
            self._good_steps += 1
            if self._good_steps >= self.growth_interval:
                self.loss_scale, self._good_steps = self.loss_scale * 2, 0
        return loss


class SGD(_FusedOptimizer):
    """torch.optim.SGD's update (momentum, dampening, Nesterov, weight decay), fused (module docstring)."""

    STATE = ("momentum_buffer",)
    SCALARS = ("lr", "momentum", "fresh", "weight_decay", "inv_scale")

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, **kw):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise OpenPrimError(f"openprim.optim.SGD: lr, momentum and weight_decay must be >= 0, got {lr}, "
                                f"{momentum}, {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise OpenPrimError("openprim.optim.SGD: Nesterov momentum needs momentum > 0 and dampening 0")
        self.nesterov = nesterov
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay), **kw)

    def _update(self, g, w, grad, state, s):
        d = g.add(grad, g.mul(s["weight_decay"], w))
        buf = g.add(g.mul(s["momentum"], state[0]), g.mul(s["fresh"], d))   # fresh: 1 on the first step
        step = g.add(d, g.mul(s["momentum"], buf)) if self.nesterov else buf
        return g.sub(w, g.mul(s["lr"], step)), [buf]

    def _scalars(self, group, t):
        """torch's first step takes the gradient itself as the buffer (dampening from the second on)."""
        return {"lr": group["lr"], "momentum": group["momentum"], "weight_decay": group["weight_decay"],
                "fresh": 1.0 if t == 1 else 1.0 - group["dampening"]}


class AdamW(_FusedOptimizer):
    """torch.optim.AdamW's update (decoupled weight decay, bias-corrected moments), fused (module docstring)."""

    STATE = ("exp_avg", "exp_avg_sq")
    SCALARS = ("decay", "beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "step_size", "inv_sqrt_bc2", "eps",
               "inv_scale")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, **kw):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise OpenPrimError(f"openprim.optim.AdamW: lr, eps, weight_decay >= 0 and betas in [0, 1), got "
                                f"lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay), **kw)

    def _update(self, g, w, grad, state, s):
        m = g.add(g.mul(s["beta1"], state[0]), g.mul(s["one_minus_beta1"], grad))
        v = g.add(g.mul(s["beta2"], state[1]), g.mul(s["one_minus_beta2"], g.mul(grad, grad)))
        denom = g.add(g.mul(g.sqrt(v), s["inv_sqrt_bc2"]), s["eps"])
        w = g.sub(g.mul(w, s["decay"]), g.mul(s["step_size"], g.div(m, denom)))
        return w, [m, v]

    def _scalars(self, group, t):
        (b1, b2), lr = group["betas"], group["lr"]
        return {"decay": 1.0 - lr * group["weight_decay"], "beta1": b1, "one_minus_beta1": 1.0 - b1, "beta2": b2,
                "one_minus_beta2": 1.0 - b2, "step_size": lr / (1.0 - b1 ** t),
                "inv_sqrt_bc2": 1.0 / math.sqrt(1.0 - b2 ** t), "eps": group["eps"]}

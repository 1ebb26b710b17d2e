"""PyTorch integration that compiles: `compile_module` and the torch.compile backend `openprim_backend`.

    from openprim.torch_backend import compile_module, openprim_backend
    run = compile_module(model, (x,))          # torch tensors in, torch tensors out
    fast = torch.compile(model, backend=openprim_backend)   # or backend="openprim" (entry point)

Both import with `openprim.pyfrontend.torch_import` (torch.export -> Graph) and compile with
`openprim.compiler`. They live in the driver layer (`openprim`), not in the frontend, because they
compile: the frontends only build Graphs and import neither the compiler nor MLIR.
"""
from __future__ import annotations

import warnings

import numpy as np

import openprim.compiler
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.torch_import import _decompose, import_exported, unsupported_ops

try:  # torch is optional for OpenPrim; this module needs it
    import torch
except ImportError:  # pragma: no cover
    torch = None


class _Compiled:
    """Runs an OpenPrim executable on torch tensors and returns torch tensors in the export's structure."""

    def __init__(self, exe, out_spec, n_out):
        self.exe, self.out_spec, self.n_out = exe, out_spec, n_out

    def run_flat(self, flat_inputs):
        arrays = [np.ascontiguousarray(t.detach().cpu().to(torch.float32).numpy()) for t in flat_inputs]
        outs = self.exe(*arrays)
        outs = [outs] if self.n_out == 1 else list(outs)
        return [torch.from_numpy(np.asarray(o, np.float32)) for o in outs]

    def __call__(self, *args, **kwargs):
        flat = torch.utils._pytree.tree_leaves((args, kwargs))
        outs = self.run_flat([t for t in flat if isinstance(t, torch.Tensor)])
        if self.out_spec is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return torch.utils._pytree.tree_unflatten(outs, self.out_spec)


def compile_module(model, example_inputs, **compile_kwargs):
    """torch.export the model (in eval mode), import it and compile it with openprim.compile.

    Returns a callable taking the same (tensor) arguments and returning torch tensors (float32),
    structured like the model's output."""
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    ep = torch.export.export(model.eval(), example_inputs)
    g, _ = import_exported(ep)
    exe = openprim.compiler.compile(g, **compile_kwargs)
    return _Compiled(exe, ep.call_spec.out_spec, len(g.outputs))


# ---------------------------------------------------------------------------- torch.compile backend
_WARNED = set()


def _warn_once(msg):
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _real(t):
    """A real tensor for a (possibly fake) example input: zeros of its shape and dtype."""
    from torch._subclasses.fake_tensor import FakeTensor
    if isinstance(t, FakeTensor):
        return torch.zeros(tuple(t.shape), dtype=t.dtype)
    return t


def _is_weight(t, node):
    """A parameter or a module buffer that Dynamo lifted to a graph input."""
    if isinstance(t, torch.nn.Parameter):
        return True
    src = getattr((node.meta.get("grapharg") if node is not None else None), "source", None)
    try:
        name = src.name() if callable(getattr(src, "name", None)) else str(getattr(src, "name", ""))
    except Exception:  # noqa: BLE001
        name = ""
    return "._buffers[" in name or "._parameters[" in name


_NO_AUTOGRAD = ("openprim_backend: OpenPrim has no autograd; with gradients enabled the graph runs eagerly "
                "(use torch.no_grad() or torch.inference_mode() to run it with OpenPrim)")


def _needs_grad(args):
    return torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def openprim_backend(gm, example_inputs):
    """A torch.compile backend: torch.compile(model, backend=openprim_backend).

    The FX graph is exported, imported and compiled; the returned callable runs it with OpenPrim and
    returns what gm returns (CPU float32 tensors). Tensors that Dynamo passes as graph inputs but that
    are module parameters or buffers are compiled in as constants; a call that passes different ones,
    or the same ones modified in place (their _version changed), runs eagerly. So does a call with
    gradients enabled and an input that requires grad: OpenPrim has no autograd. A graph with ops
    OpenPrim cannot map, symbolic (dynamic) sizes, or one that fails to import or compile, warns once
    and runs eagerly (gm.forward). Use torch.compile(..., dynamic=False) to get one OpenPrim
    compilation per input shape instead of an eager fallback for dynamic shapes."""
    inputs = list(example_inputs)
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        _warn_once("openprim_backend: non-tensor graph inputs (symbolic sizes); running eagerly")
        return gm.forward
    if _needs_grad(inputs):
        _warn_once(_NO_AUTOGRAD)
        return gm.forward
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    frozen = {i: t for i, t in enumerate(inputs) if _is_weight(t, placeholders[i] if i < len(placeholders) else None)}
    try:
        ep = torch.export.export(gm, tuple(_real(t) for t in inputs))
        ep = _decompose(ep)
        bad = unsupported_ops(ep)
        if bad:
            _warn_once("openprim_backend: unsupported op(s) " + ", ".join(bad) + "; running this graph eagerly")
            return gm.forward
        g, _ = import_exported(ep, constant_inputs=frozen, decompose=False)
        exe = openprim.compiler.compile(g)
    except OpenPrimError as e:
        _warn_once(f"openprim_backend: {e}; running this graph eagerly")
        return gm.forward
    except Exception as e:  # noqa: BLE001 - export of a dynamo graph can fail in many ways
        _warn_once(f"openprim_backend: failed ({type(e).__name__}: {e}); running this graph eagerly")
        return gm.forward
    runner = _Compiled(exe, ep.call_spec.out_spec, len(g.outputs))
    versions = {i: t._version for i, t in frozen.items()}
    live = [i for i in range(len(inputs)) if i not in frozen]

    def run(*args):
        args = list(args)
        if _needs_grad(args):
            _warn_once(_NO_AUTOGRAD)
            return gm.forward(*args)
        for i, t in frozen.items():
            if args[i] is not t or args[i]._version != versions[i]:
                _warn_once("openprim_backend: parameters changed since compilation; running eagerly")
                return gm.forward(*args)
        outs = runner(*[args[i] for i in live])
        return outs

    return run

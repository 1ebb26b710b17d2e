"""PyTorch integration that compiles: `compile_module` and the torch.compile backend `openprim_backend`.

    from openprim.torch_backend import compile_module, openprim_backend
    run = compile_module(model, (x,))          # torch tensors in, torch tensors out
    fast = torch.compile(model, backend=openprim_backend, options={"precision": "f16"})   # or "openprim"

Both import with `openprim.pyfrontend.torch` (torch.export -> Graph) and compile through the compile
cache (`openprim.cache.load_or_compile`), so a second process, or a GPU machine without MLIR whose cache
was filled elsewhere, loads the compiled artifact instead of compiling. They live in the driver layer
(`openprim`), not in the frontend, because they compile: the frontends only build Graphs.

With CUDA (or ROCm) tensors the target defaults to the tensors' GPU (`nvvm:sm_XY` from its compute
capability, `rocdl:<gfx>` on ROCm builds) and the tensors never leave it: the plan is replayed as a
CUDA/HIP graph on PyTorch's current stream, reading the input tensors in place and writing outputs
allocated with torch.empty (PyTorch's caching allocator), in the model's dtype (runtime/gpu.py says when
a buffer is copied instead). A 4-D example input in channels-last memory order compiles into a plan that
takes it so; other strides are made contiguous on the device. CPU tensors run the CPU artifact through numpy and come back in the model's dtype.

Training: with gradients, `openprim_backend` compiles AOTAutograd's forward and backward graphs for the
tensors' device, the CPU or a GPU (`_training_backend`), so that loss.backward() runs OpenPrim kernels too.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import inspect
import operator
import re
import threading
import warnings

import numpy as np

import openprim.cache
from openprim.base.errors import OpenPrimError
from openprim.base.target import parse_target
from openprim import dynamic_batch
from openprim.dynamic_batch import BatchRange, Buckets
from openprim.pyfrontend.importers.common import DTYPE_NAMES, require
from openprim.pyfrontend.torch import aot, backward
from openprim.pyfrontend.torch.importer import _decompose, _op_key, import_exported
from openprim.runtime.executor import host_shape
from openprim.runtime.gpu import GpuExecutable

torch = require("torch", "the torch backend")


def device_target(device) -> str:
    """The OpenPrim target of a torch GPU device: nvvm:sm_XY, or rocdl:gfxNNN on ROCm builds of PyTorch."""
    device = torch.device(device)
    if torch.version.hip:
        return "rocdl:" + torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
    major, minor = torch.cuda.get_device_capability(device)
    return f"nvvm:sm_{major}{minor}"


def _plan_tensors(exe) -> tuple[list, list]:
    """The torch dtype of each plan input, and the (shape, torch dtype) of each plan output."""
    values = exe.plan["values"]
    ins = [getattr(torch, DTYPE_NAMES[values[i["value"]]["dtype"]]) for i in exe.plan["inputs"]]
    outs = [(host_shape(exe.plan, o), getattr(torch, DTYPE_NAMES[values[o]["dtype"]])) for o in exe.plan["outputs"]]
    return ins, outs


def _run_on_stream(exe, ins, outs) -> None:
    """A GPU executable run on device tensors `ins` (the plan's dtypes, contiguous), enqueued on PyTorch's
    current stream of its device, writing the output tensors `outs`."""
    stream = torch.cuda.current_stream(exe.device.index).cuda_stream
    if stream:
        exe.device.check_stream(stream)
    exe.run_pointers([t.data_ptr() for t in ins], [o.data_ptr() for o in outs], stream)


class _OutputSlots:
    """The tensors one call site returns, reused from call to call when nothing else holds them any more, as
    CUDA-graph trees reuse their outputs: a training step's saved maps and gradients die before the next
    step's forward, so each step writes the same buffers. That spares an allocation per output (1,447 a
    ResNet-50 step: 8 ms of host time on an H100 host) and, the addresses unchanged, the updates of a
    replayed graph's nodes. A slot is free when its storage has no user but the slot (the returned tensor
    is a detached alias, so a caller's reference, a view or autograd's saved copy counts), it has the
    shape and dtype asked for, and it was last written on this stream (like the caching allocator, which
    hands a freed block only to its own stream); else a new tensor takes the slot. Threads share the slots
    under a lock. The slots keep their last outputs' memory until the compiled model is freed, as CUDA-graph
    trees keep their pool. reuse=False (a call recorded by CUDA-graph trees, whose pool owns what the call
    allocates), or a call inside any stream capture, takes new tensors every time."""

    def __init__(self, device, reuse: bool = True):
        self.device, self.reuse = device, reuse
        # per slot: (tensor, its storage's cdata, the stream it was written on, the storage's use count with no
        # other user: the slot's tensor, and the storage's Python object where torch keeps it once made)
        self.held: list = []
        self.lock = threading.Lock()

    def take(self, specs) -> list:
        """Tensors of each (shape, torch dtype) of `specs`, for this call to write."""
        on_gpu = self.device.type == "cuda"
        if not self.reuse or (on_gpu and torch.cuda.is_current_stream_capturing()):
            return [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in specs]
        stream = torch.cuda.current_stream(self.device).cuda_stream if on_gpu else None
        out = []
        with self.lock:
            self.held += [None] * (len(specs) - len(self.held))
            for k, (shape, dtype) in enumerate(specs):
                h = self.held[k]
                if (h is None or h[0].shape != tuple(shape) or h[0].dtype != dtype or h[2] != stream
                        or torch._C._storage_Use_Count(h[1]) > h[3]):
                    t = torch.empty(shape, dtype=dtype, device=self.device)
                    cdata = t.untyped_storage()._cdata
                    h = self.held[k] = (t, cdata, stream, torch._C._storage_Use_Count(cdata))
                out.append(h[0].detach())
        return out


def _converted(tensors, dtypes, slots: _OutputSlots) -> list:
    """`tensors` converted to `dtypes` (one each) into tensors of `slots` in one batched copy
    (torch._foreach_copy_: a few launches, not one `.to` each: autocast's graphs convert every parameter
    in and every gradient out)."""
    if not tensors:
        return []
    out = slots.take([(t.shape, d) for t, d in zip(tensors, dtypes)])
    torch._foreach_copy_(out, [t.detach() for t in tensors])
    return out


class _Compiled:
    """Runs an OpenPrim executable on torch tensors and returns torch tensors in the export's structure.

    in_dtypes/out_dtypes: the model's torch dtypes (the plan may compute in another one: the inputs are
    converted to the plan's dtypes and the outputs back, on the tensors' device). It keeps no state of a
    call, so threads may call it at once as they may call the executable (docs/artifacts.md, Threads);
    on a GPU each call runs on the calling thread's current PyTorch stream."""

    def __init__(self, exe, out_spec, n_out, in_dtypes=None, out_dtypes=None, channels_last=None):
        self.exe, self.out_spec, self.n_out = exe, out_spec, n_out
        self.channels_last = channels_last or [False] * len(exe.plan["inputs"])
        self.on_gpu = isinstance(exe, GpuExecutable)
        self.in_dtypes, self.out_dtypes = in_dtypes, out_dtypes
        self.plan_in, self.plan_out = _plan_tensors(exe)
        if self.on_gpu:
            self.slots = _OutputSlots(torch.device("cuda", exe.device.index))

    def _check(self, tensors):
        names = self.exe.input_names
        if len(tensors) != len(names):
            raise OpenPrimError(f"expected {len(names)} input tensor(s) {names}, got {len(tensors)}")
        for k, (name, t) in enumerate(zip(names, tensors)):
            if self.in_dtypes and t.dtype != self.in_dtypes[k]:
                raise OpenPrimError(f"input '{name}' is {t.dtype} but the model was compiled for {self.in_dtypes[k]}: "
                                    f"pass {self.in_dtypes[k]} tensors (or compile again with such example inputs)")
            if self.on_gpu and t.device.type != "cuda":
                raise OpenPrimError(f"input '{name}' is on {t.device} but the model was compiled for GPU "
                                    f"{self.exe.device.index}: move it there with .to('cuda:{self.exe.device.index}')")
            if self.on_gpu and t.device.index != self.exe.device.index:
                raise OpenPrimError(f"input '{name}' is on {t.device} but the model was compiled for GPU "
                                    f"{self.exe.device.index}: move it with .to('cuda:{self.exe.device.index}')")
            if not self.on_gpu and t.device.type != "cpu":
                raise OpenPrimError(f"input '{name}' is on {t.device} but the model was compiled for the CPU: "
                                    f"compile it with tensors on that device (or target=...), or pass CPU tensors")

    def run_flat(self, flat_inputs):
        self._check(flat_inputs)
        if self.on_gpu:
            outs = self._run_device(flat_inputs)
        else:
            arrays = [np.ascontiguousarray(t.detach().to(torch.float32).numpy()) for t in flat_inputs]
            outs = self.exe(*arrays)
            outs = [torch.from_numpy(np.asarray(o)) for o in ([outs] if self.n_out == 1 else outs)]
        if self.out_dtypes:
            outs = [o if o.dtype == d else o.to(d) for o, d in zip(outs, self.out_dtypes)]
        return outs

    def _run_device(self, tensors):
        """Device to device on PyTorch's current stream: nothing is copied through the host."""
        ins = []
        for t, want, (name, _, shape, _, _), last in zip(tensors, self.plan_in, self.exe.input_specs,
                                                         self.channels_last):
            if last:   # the plan takes it as (N, H, W, C): a channels-last tensor as it lies in memory
                shape = (shape[0], shape[3], shape[1], shape[2])
            if tuple(t.shape) != shape:
                raise OpenPrimError(f"input '{name}' must have shape {shape}, got {tuple(t.shape)}")
            t = t.detach() if t.dtype == want else t.detach().to(want)
            ins.append((t.permute(0, 2, 3, 1) if last else t).contiguous())
        outs = self.slots.take(self.plan_out)
        _run_on_stream(self.exe, ins, outs)
        return outs

    def __call__(self, *args, **kwargs):
        flat = torch.utils._pytree.tree_leaves((args, kwargs))
        outs = self.run_flat([t for t in flat if isinstance(t, torch.Tensor)])
        if self.out_spec is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return torch.utils._pytree.tree_unflatten(outs, self.out_spec)


def _output_dtypes(ep) -> list:
    """The torch dtypes of an exported program's outputs."""
    out = next(n for n in ep.graph_module.graph.nodes if n.op == "output")
    return [n.meta["val"].dtype for n in torch.utils._pytree.tree_leaves(out.args[0]) if hasattr(n, "meta")]


def _default_target(tensors) -> tuple[str, int]:
    """(target, device index): the GPU of the first GPU tensor, else the CPU."""
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            index = t.device.index if t.device.index is not None else torch.cuda.current_device()
            return device_target(t.device), index
    return "cpu", 0


def _channels_last_inputs(g, tensors, target) -> list[bool]:
    """Per graph input, whether it is compiled to take its tensor in channels-last memory order (4-D
    GPU inputs that are channels-last and not also contiguous): such a tensor is then read in place,
    where making it contiguous would cost a transposing copy on every call."""
    gpu = parse_target(target).is_gpu
    flags = [gpu and t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)
             for t in tensors]
    for i, last in enumerate(flags):
        if last:
            g.channels_last_input(i)
    return flags


class _Function(torch.nn.Module):
    """A plain function of tensors as a module, for torch.export."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class _CompiledModule(_Compiled):
    """_Compiled for compile_module: keyword arguments are bound to forward's parameters by name."""

    def __init__(self, signature, *args):
        super().__init__(*args)
        self.signature = signature

    def __call__(self, *args, **kwargs):
        args, kwargs = _bound(self.signature, args, kwargs)
        return super().__call__(*args, **kwargs)


def _bound(signature, args, kwargs) -> tuple[tuple, dict]:
    """(args, kwargs) with keyword arguments bound to forward's parameters by name (keyword-only ones stay)."""
    if not kwargs:
        return tuple(args), {}
    if signature is None:
        raise OpenPrimError("compile_module: this model's forward has no signature to bind keyword "
                            f"arguments {sorted(kwargs)} to; pass its inputs by position")
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise OpenPrimError(f"compile_module: {e}; forward takes "
                            f"({', '.join(map(str, signature.parameters.values()))})") from None
    return bound.args, bound.kwargs


def _signature(fn):
    """fn's inspect.Signature, or None (a builtin without one)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _check_example_inputs(example_inputs):
    """Torch tensors, or Python constants that the export bakes in: anything else is one error naming it."""
    for i, leaf in enumerate(torch.utils._pytree.tree_leaves(example_inputs)):
        if isinstance(leaf, np.ndarray):
            raise OpenPrimError(f"compile_module: example input {i} is a numpy.ndarray; pass torch tensors "
                                f"(torch.from_numpy(a))")
        if not isinstance(leaf, (torch.Tensor, bool, int, float, str, type(None))):
            raise OpenPrimError(f"compile_module: example input {i} is a {type(leaf).__name__}; expected torch "
                                f"tensors (or Python numbers)")


def compile_module(model, example_inputs, target=None, dynamic_batch=None, dynamic_sequence=None,
                   sequence_padding=None, **options):
    """torch.export the model (in eval mode; each submodule's mode is restored after) and compile it through
    the compile cache. model: a torch.nn.Module, or a plain function of tensors (wrapped in one).

    target: an OpenPrim target; None: the example inputs' GPU, else the CPU. options: keyword arguments of
    openprim.compiler.save (precision, layout, solver). Returns a callable taking the same (tensor)
    arguments, by position or by the names of forward's parameters, and returning torch tensors of the
    model's dtypes, on the inputs' device, structured like the model's output; `.exe.cache_hit` says
    whether the compile was loaded from the cache.

    dynamic_batch: True, a maximum batch or a (low, high) range: every tensor input has the batch as dim 0
    and the callable takes any batch in the range, through batch buckets compiled on first use
    (driver/dynamic_batch.py); `.buckets.compiled` holds them.

    dynamic_sequence: a (low, high) range of sequence lengths (dim 1) with sequence_padding, {name of each
    input that has the sequence as dim 1: the value its padding holds} (a BERT: {"input_ids": 0,
    "attention_mask": 0}): the callable takes any length in the range, padded into a length bucket
    (_DynamicSequenceModule); the padding must leave the real positions' results unchanged (keys masked),
    which is checked once against the example's own length."""
    if isinstance(model, torch.nn.Module):
        signature = _signature(model.forward)
    elif callable(model):
        signature, model = _signature(model), _Function(model)
    else:
        raise OpenPrimError(f"compile_module: expected a torch.nn.Module or a function of tensors, got "
                            f"{type(model).__name__}")
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    _check_example_inputs(example_inputs)
    if dynamic_sequence is not None and dynamic_batch is not None:
        raise OpenPrimError("compile_module: a dynamic batch and a dynamic sequence at once are not supported; "
                            "choose one")
    if dynamic_sequence is not None:
        return _DynamicSequenceModule(model, signature, example_inputs, target,
                                      BatchRange.of(dynamic_sequence, "sequence length"), sequence_padding, options)
    if dynamic_batch is not None and dynamic_batch is not False:
        return _DynamicBatchModule(model, signature, example_inputs, target, BatchRange.of(dynamic_batch), options)
    return _compile_module(model, signature, example_inputs, target, options)[0]


def _exported(model, example_inputs):
    """(the ExportedProgram, its Graph) of the model in eval mode at these inputs (its modes restored)."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        ep = torch.export.export(model.eval(), example_inputs)
    finally:
        for m, training in modes:
            m.training = training
    return ep, import_exported(ep)[0]


def _compile_module(model, signature, example_inputs, target, options):
    """(the _CompiledModule, its Graph) of compile_module."""
    default, index = _default_target(example_inputs)
    ep, g = _exported(model, example_inputs)
    flat = [t for t in torch.utils._pytree.tree_leaves(example_inputs) if isinstance(t, torch.Tensor)]
    channels_last = _channels_last_inputs(g, flat, target or default)
    exe = openprim.cache.load_or_compile(g, target or default, options, device=index)
    return _CompiledModule(signature, exe, ep.call_spec.out_spec, len(g.outputs), [t.dtype for t in flat],
                           _output_dtypes(ep), channels_last), g


def _pad_rows(t, b: int):
    """t with b rows: its own, then its first row repeated (dynamic_batch.py: valid data in the padding)."""
    n = t.shape[0]
    return t if n == b else torch.cat([t, t[:1].expand(b - n, *t.shape[1:])])


def _batch_of(tensors, what: str) -> int:
    """The batch (dim 0) that every tensor shares, or one error naming the one that differs."""
    sizes = [tuple(t.shape) for t in tensors]
    if not sizes or any(not s for s in sizes) or len({s[0] for s in sizes}) != 1:
        raise OpenPrimError(f"{what}: with a dynamic batch every tensor input has the batch as dim 0; got "
                            f"shapes {', '.join(map(str, sizes)) or 'none'}")
    return sizes[0][0]


def _cut_rows(outs, n: int, b: int):
    """The outputs of a bucket of b rows cut back to the call's n."""
    if n == b:
        return outs
    return torch.utils._pytree.tree_map(lambda o: o[:n] if isinstance(o, torch.Tensor) else o, outs)


def _run_pieces(pieces, values: list, batched: list, call):
    """A dynamic batch's call (dynamic_batch.Buckets.pieces): each piece's plan on its rows of the batched
    values (padded to its bucket), its outputs cut back to those rows, the pieces' outputs joined along
    dim 0. call(run, values) runs one plan."""
    outs, start = [], 0
    for run, b, rows in pieces:
        part = [_pad_rows(v[start:start + rows], b) if is_batched else v for v, is_batched in zip(values, batched)]
        outs.append(_cut_rows(call(run, part), rows, b))
        start += rows
    if len(outs) == 1:
        return outs[0]
    leaves, spec = torch.utils._pytree.tree_flatten(outs[0])
    rest = [torch.utils._pytree.tree_leaves(o) for o in outs[1:]]
    return torch.utils._pytree.tree_unflatten(
        [torch.cat([leaf, *(r[k] for r in rest)]) if isinstance(leaf, torch.Tensor) else leaf
         for k, leaf in enumerate(leaves)], spec)


class _DynamicBatchModule:
    """compile_module(..., dynamic_batch=...): one compiled bucket per batch range step (dynamic_batch.py)."""

    def __init__(self, model, signature, example_inputs, target, batch_range, options):
        tensors = [t for t in torch.utils._pytree.tree_leaves(example_inputs) if isinstance(t, torch.Tensor)]
        self.example_batch = _batch_of(tensors, "compile_module")
        self.model, self.example, self.options = model, example_inputs, options
        self.target = target or _default_target(example_inputs)[0]
        self.buckets = Buckets(batch_range, lambda b: _compile_module(model, signature, self._inputs_at(b), target,
                                                                      options), split=not parse_target(self.target).is_gpu)

    def _inputs_at(self, b: int):
        """The example inputs at batch b: rows repeated, or cut."""
        rows = (lambda t: _pad_rows(t, b)) if b >= self.example_batch else (lambda t: t[:b])
        return torch.utils._pytree.tree_map(lambda t: rows(t) if isinstance(t, torch.Tensor) else t, self.example)

    def save(self, path: str) -> dict:
        """One .oprim artifact for the whole range (openprim.dynamic_batch.save): its runtime executable takes
        the flat tensor inputs as numpy arrays, any batch in the range (openprim.runtime.load)."""
        return dynamic_batch.save(lambda b: _exported(self.model, self._inputs_at(b))[1], path, self.target,
                                  self.buckets.batch_range, "batch", None, self.options)

    def __call__(self, *args, **kwargs):
        leaves, spec = torch.utils._pytree.tree_flatten((args, kwargs))
        batched = [isinstance(t, torch.Tensor) for t in leaves]
        n = _batch_of([t for t, b in zip(leaves, batched) if b], "compile_module")

        def call(run, values):
            args, kwargs = torch.utils._pytree.tree_unflatten(values, spec)
            return run(*args, **kwargs)
        return _run_pieces(self.buckets.pieces(n), leaves, batched, call)


class _DynamicSequenceModule:
    """compile_module(..., dynamic_sequence=..., sequence_padding=...): one plan per sequence-length bucket
    (dynamic_batch.Buckets, padding only: a sequence cannot be split). A call pads each sequence input
    along dim 1 with its padding value up to the bucket, runs the bucket's plan, and cuts every output
    whose dim 1 is the bucket back to the call's length. The first bucket longer than the example is checked
    once: the example padded into it must give the example's own results (within 1e-3 of the largest)
    at the real positions, or each length compiles on its own, with one warning."""

    def __init__(self, model, signature, example_inputs, target, seq_range, padding, options):
        names = list(signature.parameters) if signature is not None else []
        if not isinstance(padding, dict) or not padding:
            raise OpenPrimError("compile_module: dynamic_sequence needs sequence_padding, {input name: padding "
                                "value} for each input with the sequence as dim 1 (a BERT: {'input_ids': 0, "
                                "'attention_mask': 0})")
        unknown = [n for n in padding if n not in names[:len(example_inputs)]]
        if unknown:
            raise OpenPrimError(f"compile_module: sequence_padding names {unknown}, not among the example inputs "
                                f"{names[:len(example_inputs)]}")
        self.signature, self.names = signature, names
        self.padding = [padding.get(n) for n in names[:len(example_inputs)]]
        self.length = _sequence_length(example_inputs, self.padding)
        self.example, self.model, self.target, self.options = example_inputs, model, target, options
        self.buckets = Buckets(seq_range, self._compile, check=self._check)

    def _compile(self, length: int):
        return _compile_module(self.model, self.signature, self._fit(self.example, length), self.target,
                               self.options)

    def save(self, path: str) -> dict:
        """One .oprim artifact for the whole range (openprim.dynamic_batch.save), padded with sequence_padding:
        its runtime executable takes the flat tensor inputs as numpy arrays, any length in the range."""
        tensors = [pad for t, pad in zip(self.example, self.padding) if isinstance(t, torch.Tensor)]
        padding = {k: pad for k, pad in enumerate(tensors) if pad is not None}    # by position: the plan's names
        return dynamic_batch.save(lambda n: _exported(self.model, self._fit(self.example, n))[1], path,
                                  self.target or _default_target(self.example)[0], self.buckets.batch_range,
                                  "sequence", padding, self.options)

    def _fit(self, inputs, length: int) -> tuple:
        """inputs with each sequence input padded (or, for compiling only, cut) to `length` along dim 1."""
        out = []
        for t, pad in zip(inputs, self.padding):
            if pad is not None and t.shape[1] < length:
                extra = torch.full((t.shape[0], length - t.shape[1], *t.shape[2:]), pad, dtype=t.dtype,
                                   device=t.device)
                t = torch.cat([t, extra], 1)
            elif pad is not None:
                t = t[:, :length]
            out.append(t)
        return tuple(out)

    def _check(self, graph) -> str | None:
        """Why padding the example into the first bucket compiled changes its real positions, or None."""
        bucket = max(self.buckets.compiled)
        if bucket <= self.length:   # nothing padded yet: check the first bucket that pads
            self.buckets.checked = False
            return None
        exact = _compile_module(self.model, self.signature, self.example, self.target, self.options)[0]
        want = torch.utils._pytree.tree_leaves(exact(*self.example))
        got = torch.utils._pytree.tree_leaves(_cut_sequence(self.buckets.compiled[bucket](
            *self._fit(self.example, bucket)), self.length, bucket))
        for k, (a, b) in enumerate(zip(want, got)):
            if isinstance(a, torch.Tensor) and (a.shape != b.shape or float((a.float() - b.float()).abs().max())
                                                > 1e-3 * max(float(a.float().abs().max()), 1e-6)):
                return (f"output {k} at the real positions differs when the example is padded from "
                        f"{self.length} to {bucket}: is every padded key masked?")
        return None

    def __call__(self, *args, **kwargs):
        args, rest = _bound(self.signature, args, kwargs)
        if rest:
            raise OpenPrimError(f"compile_module: keyword-only arguments {sorted(rest)} with a dynamic sequence "
                                f"are not supported; pass the inputs by position or by name")
        n = _sequence_length(args, self.padding)
        ((run, bucket, _),) = self.buckets.pieces(n)
        return _cut_sequence(run(*self._fit(args, bucket)), n, bucket)


def _sequence_length(inputs, padding) -> int:
    """The length (dim 1) shared by every input that has a padding value, or one error naming them."""
    sizes = {tuple(t.shape) for t, pad in zip(inputs, padding) if pad is not None}
    if not sizes or any(len(s) < 2 for s in sizes) or len({s[1] for s in sizes}) != 1:
        raise OpenPrimError(f"compile_module: the sequence inputs must share dim 1 (the sequence length); got "
                            f"shapes {sorted(sizes)}")
    return next(iter(sizes))[1]


def _cut_sequence(outs, n: int, bucket: int):
    """Outputs of a bucket's plan with dim 1 of length `bucket` cut back to the call's n."""
    if n == bucket:
        return outs
    return torch.utils._pytree.tree_map(
        lambda o: o[:, :n] if isinstance(o, torch.Tensor) and o.dim() >= 2 and o.shape[1] == bucket else o, outs)


# ---------------------------------------------------------------------------- torch.compile backend
_WARNED = set()


def _warn_once(msg):
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _real(t):
    """A real tensor for a (possibly fake) example input: zeros of its shape, dtype and device."""
    from torch._subclasses.fake_tensor import FakeTensor
    if isinstance(t, FakeTensor):
        return torch.zeros(tuple(t.shape), dtype=t.dtype, device=t.device)
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


_NO_AUTOGRAD = ("openprim_backend: this graph was compiled for inference (no gradients); with gradients enabled "
                "it runs eagerly")


def _needs_grad(args):
    return torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


# torch.compile's modes, and those that record the training graphs with CUDA-graph trees (as Inductor's do).
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def openprim_backend(gm, example_inputs, options=None, mode=None):
    """A torch.compile backend: torch.compile(model, backend=openprim_backend, options={...}).

    options: "target" (default: the inputs' GPU, else the CPU) and keyword arguments of
    openprim.compiler.save ("precision", "layout", "solver"). The FX graph is exported, imported and
    compiled through the compile cache; the returned callable runs it with OpenPrim and returns what gm
    returns, on the inputs' device and in gm's dtypes. Tensors that Dynamo passes as graph inputs but that
    are module parameters or buffers are compiled in as constants; a call that passes different ones,
    or the same ones modified in place (their _version changed), runs eagerly. A graph with ops
    OpenPrim cannot map, or one that fails to import or compile, warns once and runs eagerly (gm.forward).
    A dynamic graph (torch.compile(dynamic=True), or sizes Dynamo made symbolic) whose one symbolic size is
    the batch runs batch buckets (driver/dynamic_batch.py; options "dynamic_batch": the (low, high) range,
    default (1, 64)); other symbolic sizes run eagerly, warned once.

    With gradients (grad mode on and an input or parameter that requires grad) the graph goes through
    AOTAutograd instead (`_training_backend`, for the tensors' device): its forward and its backward graph are each imported
    (pyfrontend/torch/aot.py, the training ops in backward.py) and compiled, parameters and buffers as inputs
    (the optimizer updates them in place), and loss.backward() runs the backward executable. Each of the two
    that does not import or compile warns once, naming the unmapped ops, and runs eagerly.

    mode (torch.compile's): "reduce-overhead" (or "max-autotune") on a GPU also records the training
    graphs with PyTorch's CUDA-graph trees, as Inductor's mode does (_CudaGraphTrees): a step then costs
    the host a replay per graph, and each step's outputs are overwritten by the next replay's, as with
    Inductor. Inference plans replay their own CUDA graph in every mode."""
    if mode not in (None, *MODES):
        raise OpenPrimError(f"openprim_backend: unknown mode {mode!r}: torch.compile's modes are {', '.join(MODES)}")
    inputs = list(example_inputs)
    if _needs_grad(inputs):
        return _training_backend(gm, inputs, options, cuda_graphs=mode in CUDA_GRAPH_MODES)
    options = dict(options or {})
    batch_range = BatchRange.of(options.pop("dynamic_batch", True))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not all(isinstance(t, torch.Tensor) for t in inputs) or _symbolic(_traced(placeholders)):
        return _dynamic_backend(gm, inputs, batch_range, options)
    try:
        return _compile_static(gm, inputs, _weights(inputs, placeholders), options)[0]
    except OpenPrimError as e:
        _warn_once(f"openprim_backend: {e}; running this graph eagerly")
    except Exception as e:  # noqa: BLE001 - export of a dynamo graph can fail in many ways
        _warn_once(f"openprim_backend: failed ({type(e).__name__}: {e}); running this graph eagerly")
    return gm.forward


def _weights(inputs, placeholders) -> list[bool]:
    """Which graph inputs are parameters or buffers (read at backend time: Dynamo drops the placeholders'
    graph arguments once the backend returns)."""
    return [_is_weight(t, placeholders[i] if i < len(placeholders) else None) for i, t in enumerate(inputs)]


def _compile_static(fn, inputs, weights, options):
    """(run, Graph): fn (the FX graph, or _Bound around it) exported at these inputs and compiled, the inputs
    flagged in `weights` as constants. Raises what export or compile raise."""
    frozen = {i: t for i, t in enumerate(inputs) if weights[i]}
    ep = torch.export.export(fn, tuple(_real(t) for t in inputs))
    ep = _decompose(ep)
    g, _ = import_exported(ep, constant_inputs=frozen, decompose=False)
    target, index = _default_target([inputs[i] for i in range(len(inputs)) if i not in frozen])
    target = options.get("target") or target
    channels_last = _channels_last_inputs(g, [t for i, t in enumerate(inputs) if i not in frozen], target)
    exe = openprim.cache.load_or_compile(g, target, {k: v for k, v in options.items() if k != "target"},
                                         device=index)
    live_dtypes = [t.dtype for i, t in enumerate(inputs) if i not in frozen]
    runner = _Compiled(exe, ep.call_spec.out_spec, len(g.outputs), live_dtypes, _output_dtypes(ep), channels_last)
    versions = {i: t._version for i, t in frozen.items()}
    live = [i for i in range(len(inputs)) if i not in frozen]

    def run(*args):
        args = list(args)
        if _needs_grad(args):
            _warn_once(_NO_AUTOGRAD)
            return fn(*args)
        for i, t in frozen.items():
            if args[i] is not t or args[i]._version != versions[i]:
                _warn_once("openprim_backend: parameters changed since compilation; running eagerly")
                return fn(*args)
        return runner(*[args[i] for i in live])

    return run, g


# ---------------------------------------------------------------------------- torch.compile(dynamic=True)
def _symbolic(values) -> bool:
    return any(isinstance(t, torch.SymInt) or isinstance(t, torch.Tensor) and
               any(isinstance(d, torch.SymInt) for d in t.shape) for t in values)


def _traced(nodes) -> list:
    """What Dynamo traced each node as (a fake tensor of symbolic sizes, a SymInt, ...): the backend's
    example inputs are real values of this call's sizes."""
    return [n.meta.get("example_value", n.meta.get("val")) if hasattr(n, "meta") else None for n in nodes]


def _expr(d):
    return d.node.expr if isinstance(d, torch.SymInt) else None


@dataclasses.dataclass
class _Symbols:
    """How a dynamic FX graph's sizes vary: `batch`, the symbol of dim 0 of its batched inputs (`batched`);
    each other size symbol read from a (input, dim) where it stands alone (`where`); the size inputs."""
    batch: object
    batched: list
    where: dict
    sizes: dict                 # input index -> its sympy expression

    def values(self, args) -> dict:
        return {sym: args[i].shape[d] for sym, (i, d) in self.where.items()}

    def concrete(self, inputs, traced, indices, values: dict) -> tuple[list, dict]:
        """The tensor inputs at `indices` at these symbol values (zeros for the symbolic ones, the others as
        they are), and the value of every size input."""
        def size(d):
            return int(_expr(d).xreplace(values)) if isinstance(d, torch.SymInt) else d
        tensors = [torch.zeros(tuple(size(d) for d in traced[i].shape), dtype=inputs[i].dtype,
                               device=inputs[i].device) if _symbolic([traced[i]]) else inputs[i] for i in indices]
        return tensors, {i: int(e.xreplace(values)) for i, e in self.sizes.items()}


def _symbols(gm, traced):
    """The _Symbols of a dynamic FX graph whose batch (dim 0 of its inputs) is one symbol that appears
    nowhere else, every output carrying it as dim 0; or why the graph does not qualify. Other sizes may be
    symbolic too (torch.compile(dynamic=True) makes every size so): they are compiled as each call gives
    them."""
    heads = {_expr(t.shape[0]) for t in traced if isinstance(t, torch.Tensor) and t.dim()} - {None}
    if len(heads) != 1 or not next(iter(heads)).is_Symbol:
        return f"symbolic batch sizes {sorted(map(str, heads))} (one batch symbol at dim 0 is supported)"
    batch = next(iter(heads))
    batched, where, sizes = [], {}, {}
    for i, t in enumerate(traced):
        if isinstance(t, torch.SymInt):
            sizes[i] = _expr(t)
            continue
        if not isinstance(t, torch.Tensor):
            return f"a graph input of type {type(t).__name__}"
        for d, e in enumerate(t.shape):
            e = _expr(e)
            if e is None:
                continue
            if batch in e.free_symbols and (d != 0 or e != batch):
                return f"the batch in a size other than dim 0 (input of shape {tuple(t.shape)})"
            if e.is_Symbol:
                where.setdefault(e, (i, d))
        if t.dim() and _expr(t.shape[0]) == batch:
            batched.append(i)
    free = set().union(*(e.free_symbols for e in sizes.values())) if sizes else set()
    if not free <= set(where):
        return f"size inputs {sorted(map(str, free - set(where)))} that no input shape gives"
    out = next(n for n in gm.graph.nodes if n.op == "output")
    for val in _traced(torch.utils._pytree.tree_leaves(out.args[0])):
        if not isinstance(val, torch.Tensor) or not val.dim() or _expr(val.shape[0]) != batch or \
                any(batch in (_expr(d).free_symbols if _expr(d) is not None else ()) for d in val.shape[1:]):
            return "an output that does not carry the batch as dim 0"
    return _Symbols(batch, batched, where, sizes)


class _Bound(torch.nn.Module):
    """The FX graph with some inputs fixed (its sizes to one compile's values, lifted floats): a function
    of the other tensors only."""

    def __init__(self, gm, fixed: dict):
        super().__init__()
        self.gm, self.fixed = gm, fixed
        self.arity = len([n for n in gm.graph.nodes if n.op == "placeholder"])

    def forward(self, *tensors):
        it = iter(tensors)
        return self.gm(*[self.fixed[i] if i in self.fixed else next(it) for i in range(self.arity)])


def _dynamic_backend(gm, inputs, batch_range, options):
    """torch.compile(dynamic=True): batch buckets (driver/dynamic_batch.py) compiled on first use, one set per
    value of the other symbolic sizes; a graph whose symbolic sizes are not a batch runs eagerly, warned once."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    traced = _traced(placeholders)
    symbols = _symbols(gm, traced)
    if isinstance(symbols, str):
        _warn_once(f"openprim_backend: {symbols}; running this graph eagerly")
        return gm.forward
    # Python floats of the modules (a batch norm's eps and momentum) that Dynamo lifted to 0-d tensor inputs
    # under dynamic=True: constants of the compiled graph, as they are without it
    floats = {i: inputs[i] for i, n in enumerate(placeholders)
              if getattr(n.meta.get("grapharg"), "pass_arg_as_tensor", False)}
    tensors = [i for i in range(len(inputs)) if i not in symbols.sizes and i not in floats]
    weights = _weights(inputs, placeholders)
    gpu = parse_target(options.get("target") or _default_target([inputs[i] for i in tensors])[0]).is_gpu
    by_rest, failed = {}, []

    def buckets_for(values):
        rest = tuple(sorted((str(k), v) for k, v in values.items() if k != symbols.batch))
        if rest not in by_rest:
            def compile_bucket(b):
                concrete, sizes = symbols.concrete(inputs, traced, tensors, {**values, symbols.batch: b})
                return _compile_static(_Bound(gm, {**sizes, **floats}), concrete, [weights[i] for i in tensors],
                                       options)
            by_rest[rest] = Buckets(batch_range, compile_bucket, split=not gpu)
        return by_rest[rest]

    def run(*args):
        values = symbols.values(args)
        n = values[symbols.batch]
        if failed:
            return gm.forward(*args)
        if not batch_range.low <= n <= batch_range.high:
            _warn_once(f"openprim_backend: batch {n} is outside the dynamic batch range [{batch_range.low}, "
                       f"{batch_range.high}] (options={{'dynamic_batch': (low, high)}}); running it eagerly")
            return gm.forward(*args)
        try:
            pieces = buckets_for(values).pieces(n)
        except OpenPrimError as e:
            _warn_once(f"openprim_backend: {e}; running this graph eagerly")
            failed.append(e)
            return gm.forward(*args)
        except Exception as e:  # noqa: BLE001 - as the static path: any failure runs the graph eagerly
            _warn_once(f"openprim_backend: failed ({type(e).__name__}: {e}); running this graph eagerly")
            failed.append(e)
            return gm.forward(*args)
        return _run_pieces(pieces, [args[i] for i in tensors], [i in symbols.batched for i in tensors],
                           lambda run, values: run(*values))

    return run


# ---------------------------------------------------------------------------- torch.compile with gradients
# What the training path did, for tests and curious users: "forward compiled", "backward compiled" (graphs
# that OpenPrim compiled), "forward runs", "backward runs" (calls of their executables), "forward eager",
# "backward eager" (calls that ran the fx graph eagerly instead).
AOT_COUNTS = collections.Counter()
# The executable each kind of graph ("forward", "backward") was last compiled into, for profilers
# (bench/gpu_training_step.py --kernel-profile).
AOT_EXECUTABLES = {}

# Besides backward.TRAINING_KEPT, what the inference import keeps whole too (importer._decompose).
_KEPT_WHOLE = ("scaled_dot_product", "silu", "hardswish", "hardsigmoid")


@functools.lru_cache(maxsize=1)
def _training_decompositions() -> dict:
    """Core ATen's decomposition table without the ops that map whole (backward.TRAINING_KEPT: the backward
    ops, nll_loss, the functional batch norm; sdpa, silu, hardswish, hardsigmoid, rms_norm as for inference)."""
    from torch._decomp import core_aten_decompositions
    table = {}
    for op, fn in core_aten_decompositions().items():
        name = _op_key(op)
        if name in backward.TRAINING_KEPT or name == "rms_norm" or any(k in name for k in _KEPT_WHOLE):
            continue
        table[op] = fn
    return table


def _training_backend(gm, inputs, options, cuda_graphs: bool = False):
    """AOTAutograd with OpenPrim compiling its forward and its backward graph for the inputs' device (the
    CPU, or their GPU), recorded by CUDA-graph trees on a GPU where `cuda_graphs`: see openprim_backend."""
    options = dict(options or {})
    target, index = _default_target(inputs)
    wanted = options.pop("target", None)
    if wanted is not None and str(parse_target(wanted)) != str(parse_target(target)):
        _warn_once(f"openprim_backend: with gradients OpenPrim compiles for the tensors' device ({target}), "
                   f"not for target '{wanted}'; running this graph eagerly")
        return gm.forward
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import default_partition
    state = aot.AotState()
    calls = _Calls()
    trees = _CudaGraphTrees(len(inputs), calls) if cuda_graphs and target != "cpu" else None
    compile_graph = functools.partial(_compile_aot, state=state, calls=calls, options=options, target=target,
                                      device=index, trees=trees)
    backend = aot_autograd(fw_compiler=functools.partial(compile_graph, kind="forward"),
                           bw_compiler=functools.partial(compile_graph, kind="backward"),
                           decompositions=_training_decompositions(), partition_fn=default_partition)
    try:
        return backend(gm, inputs)
    except Exception as e:  # noqa: BLE001 - AOTAutograd's tracing can fail in many ways
        _warn_once(f"openprim_backend: AOTAutograd failed ({type(e).__name__}: {e}); running this graph eagerly")
        return gm.forward


def _visible_outputs():
    """How many of the forward graph's first outputs its caller sees (AOTAutograd's num_forward_returns: the
    mutated inputs and the outputs; the rest are saved for the backward), or None where it is not known."""
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    return getattr(meta, "num_forward_returns", None)


def _compile_aot(gm, example_inputs, kind, state, calls, options, target="cpu", device=0, trees=None):
    """fw_compiler / bw_compiler: the graph imported (pyfrontend/torch/aot.py) and compiled for `target` (GPU
    `device`) through the compile cache, as a boxed callable (AOTAutograd's convention: one list of arguments); a graph that
    does not import or compile warns once and runs eagerly. With `trees` (_CudaGraphTrees) either is
    recorded and replayed by CUDA-graph trees."""
    compiled = _compiled_aot(gm, kind, state, calls, options, target, device, graphed=trees is not None)
    return compiled if trees is None else trees.wrap(compiled, gm, example_inputs, kind)


def _compiled_aot(gm, kind, state, calls, options, target, device, graphed):
    """_compile_aot's callable before CUDA-graph trees: an _AotRunner, or the graph run eagerly."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    eager = _eager_aot(gm, kind, state)
    visible = _visible_outputs() if kind == "forward" else None
    options = {"precision": precision, **options} if (precision := _autocast_precision(gm)) else options
    try:
        with unset_fake_temporarily():     # AOTAutograd compiles in its fake mode: the import folds real tensors
            imported = aot.import_graph_module(gm, state, visible)
        exe = None if imported.graph is None else openprim.cache.load_or_compile(imported.graph, target, options,
                                                                                 device=device)
    except OpenPrimError as e:
        _warn_once(f"openprim_backend: {kind} graph: {e}; running this graph eagerly")
        return eager
    except Exception as e:  # noqa: BLE001 - as the inference path: any failure runs the graph eagerly
        _warn_once(f"openprim_backend: {kind} graph failed ({type(e).__name__}: {e}); running this graph eagerly")
        return eager
    state.stand_ins.update(imported.stand_ins)
    AOT_COUNTS[f"{kind} compiled"] += 1
    if exe is not None:
        AOT_EXECUTABLES[kind] = exe
    if precision:
        AOT_COUNTS[f"{kind} compiled in {precision}"] += 1
    with unset_fake_temporarily():         # it moves the values known at import to the GPU
        return _AotRunner(exe, imported, eager, kind, calls, graphed)


class _CudaGraphTrees:
    """mode="reduce-overhead" with gradients: AOTAutograd's forward and backward graphs, as OpenPrim runs
    them (or eagerly, where one fell back), recorded and replayed by PyTorch's CUDA-graph trees, as
    Inductor's mode="reduce-overhead" and Dynamo's "cudagraphs" backend record theirs. A step then costs
    the host AOTAutograd's wrapper and one replay per graph: the runner (its conversions, the executable's
    bindings) runs only to warm up and to record, and the executable's launches become nodes of the
    trees' graph (runtime/gpu.py launches them one by one inside a capture). The trees skip what they
    cannot record (a CPU tensor, an input mutated by the graph) as for Inductor, warned once; a forward not
    recorded leaves its backward unrecorded too. The run-time checks are counted inside the graphs and
    read around each replay (_DeviceChecks), since a capture may not query an event."""

    def __init__(self, dynamo_inputs: int, calls: _Calls):
        self.dynamo_inputs, self.calls = dynamo_inputs, calls
        self.device = None      # the forward's GPU once it is recorded

    def wrap(self, compiled, gm, inputs, kind):
        """compiled (a boxed callable of gm) under CUDA-graph trees, boxed."""
        from torch._dynamo.backends.cudagraphs import (check_for_skip, find_input_mutations, get_device_index,
                                                       get_stack_traces)
        from torch._inductor import cudagraph_trees
        from torch._inductor.cudagraph_utils import get_placeholder_info
        from torch._inductor.utils import count_tangents, num_fw_fixed_arguments
        if kind == "backward" and self.device is None:
            return compiled
        fixed = num_fw_fixed_arguments(self.dynamo_inputs, len(inputs)) if kind == "forward" else count_tangents(gm)
        skip = check_for_skip(gm, fixed)
        if skip:
            _warn_once(f"openprim_backend: mode='reduce-overhead': the {kind} graph runs without CUDA graphs ({skip})")
            if kind == "forward":
                return compiled
            manager = cudagraph_trees.get_manager(self.device, create_if_none_exists=False)

            def unrecorded(args):
                manager.set_to_running_backward()
                return compiled(args)
            unrecorded._boxed_call = True
            return unrecorded
        device = get_device_index(gm)
        if kind == "forward":
            self.device = device

        def cleared(args):         # the trees' convention: the callee empties the argument list it takes
            mine = list(args)
            args.clear()
            return compiled(mine)
        replay = cudagraph_trees.cudagraphify_impl(
            cleared, inputs, range(fixed), device_index=device, is_backward=kind == "backward", is_inference=False,
            stack_traces=get_stack_traces(gm), placeholders=get_placeholder_info(gm.graph),
            mutated_input_idxs=find_input_mutations(gm.graph))
        checks = getattr(compiled, "checks", None)

        def run(args):
            self.calls.raise_failed_checks()
            outs = replay(args)
            if checks is not None:
                checks.publish()
            return outs
        run._boxed_call = True
        return run


def _autocast_precision(gm) -> str | None:
    """"f16" or "bf16" where an AOTAutograd graph casts to it (traced under torch.autocast), else None. The
    Graph has one float dtype and imports casts between floats as the identity, so without this an autocast
    model computed everything in f32 (the SIMT kernels on a GPU); compiled in the autocast dtype, its
    convolutions and matmuls run on the matrix cores with f32 accumulation, as autocast's do, while the
    parameters and their gradients stay f32 at the graph's edges (the optimizer's master weights)."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and _op_key(n.target) == "_to_copy":
            dtype = n.kwargs.get("dtype")
            if dtype in (torch.float16, torch.bfloat16):
                return {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    return None


def _eager_aot(gm, kind, state):
    """A boxed callable that runs the fx graph eagerly. A backward whose forward gave stand-ins for
    max_pool2d_with_indices' indices (aot.py) gets them recomputed from the pool's input first."""
    fn = None

    def run(*args):
        nonlocal fn
        args = _unboxed(args)
        if fn is None:
            fn = _recompute_indices(gm) if kind == "backward" and state.stand_ins else gm
        AOT_COUNTS[f"{kind} eager"] += 1
        return fn(*args)
    run._boxed_call = True
    return run


def _recompute_indices(gm):
    """A copy of backward graph gm in which every max_pool2d_with_indices_backward reads indices recomputed
    by max_pool2d_with_indices of its input, not the placeholder the forward filled with a stand-in."""
    graph = copy.deepcopy(gm.graph)
    last_placeholder = [n for n in graph.nodes if n.op == "placeholder"][-1]
    for n in list(graph.nodes):
        if n.op != "call_function" or _op_key(n.target) != "max_pool2d_with_indices_backward":
            continue
        indices, x = n.args[7], n.args[1]
        if getattr(indices, "op", None) != "placeholder":
            continue
        with graph.inserting_after(last_placeholder if x.op == "placeholder" else x):
            pool = graph.call_function(torch.ops.aten.max_pool2d_with_indices.default, tuple(n.args[1:7]))
        with graph.inserting_after(pool):
            recomputed = graph.call_function(operator.getitem, (pool, 1))
        indices.replace_all_uses_with(recomputed)
    graph.lint()
    return torch.fx.GraphModule(gm, graph)


def _unboxed(args):
    """The arguments of a graph called boxed (one list: AOTAutograd's convention for a callable marked
    _boxed_call) or not (Dynamo's wrapper of the backward drops the mark)."""
    return args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)


def _array(t):
    """A CPU tensor's values as numpy, without a copy where it is contiguous (bfloat16, which numpy lacks, as
    float32: the runtime rounds it back)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return (t if t.is_contiguous() else t.contiguous()).numpy()


class _DeviceChecks:
    """The run-time checks (plan["checks"]: gather's index bounds) of one GPU executable's runs, read without
    waiting for the runs: each run adds its counts into totals on the device (`count`: a copy and an add,
    which a CUDA graph around the run may capture), and each call copies the totals into pinned host memory
    behind its work with an event (`publish`, never captured). A failed count stays in the totals until it
    is reported, so a run whose copy was overtaken by later ones is not lost."""

    def __init__(self, exe, where):
        checks = exe.plan["checks"]
        self.device = exe.device
        self.sources = [exe.pointers[c["value"]] for c in checks]
        self.messages = [c["message"] for c in checks]
        self.run = torch.zeros(len(checks), dtype=torch.int32, device=where)
        self.totals = torch.zeros_like(self.run)
        self.host = torch.zeros(len(checks), dtype=torch.int32, pin_memory=True)
        self.pending: collections.deque = collections.deque()    # the events of copies not known done

    def count(self) -> None:
        """Add the counts of the run just enqueued on the current stream to the totals."""
        stream = torch.cuda.current_stream(self.run.device).cuda_stream
        for k, source in enumerate(self.sources):
            self.device.copy_device_to_device(self.run.data_ptr() + 4 * k, source, 4, stream)
        self.totals.add_(self.run)

    def publish(self) -> None:
        """Copy the totals to the host behind the work enqueued so far."""
        self.host.copy_(self.totals, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        self.pending.append(done)

    def failed(self) -> list[str]:
        """The failed checks' messages as of the last copy known done ([] for none), each reported once."""
        done = False
        while self.pending and self.pending[0].query():
            self.pending.popleft()
            done = True
        counts = self.host.tolist() if done else ()
        failed = [f"{m} ({int(n)} of them)" for m, n in zip(self.messages, counts) if n]
        if failed:
            self.totals.zero_()
            self.host.zero_()
            self.pending.clear()
        return failed


class _Calls:
    """What the calls of one compiled model share: whether a failed run-time check was warned about (the CPU:
    that call runs eagerly), and its GPU executables' checks (_DeviceChecks). A GPU call does not wait for
    its run to read them; a later call raises what a finished earlier one failed, as CUDA's device-side
    asserts surface at a later call (meanwhile the kernels read within bounds: the nearest index)."""

    def __init__(self):
        self.check_failed = False
        self.checks: list[_DeviceChecks] = []

    def raise_failed_checks(self) -> None:
        failed = [m for c in self.checks for m in c.failed()]
        if failed:
            raise OpenPrimError("a run-time check failed in an earlier call: " + "; ".join(dict.fromkeys(failed)))


class _AotRunner:
    """An AOTAutograd graph compiled by OpenPrim, called boxed (one list of torch tensors); returns its outputs
    as torch tensors: the executable's (on the CPU numpy arrays the runtime made for this call, shared, not
    copied; on a GPU tensors allocated for this call, which the plan writes on PyTorch's current stream; the
    maps saved for the backward as the NHWC arrays they are, seen as NCHW), the arguments it passes through,
    and the values known at import (on the GPU moved there once). On the CPU a run whose run-time checks fail
    (a target outside the classes) warns once and runs this call eagerly; on a GPU its checks are read
    without waiting for the run, and a later call raises what failed (_Calls).

    graphed: the calls are recorded and replayed by CUDA-graph trees (_CudaGraphTrees): nothing of a call
    is kept for the next (no slots, the known values copied out), the checks are only counted (the trees'
    caller reads them), and no call queries an event (a capture forbids it)."""

    def __init__(self, exe, imported, eager, kind, calls, graphed: bool = False):
        self.exe, self.imported, self.eager, self.kind, self.calls = exe, imported, eager, kind, calls
        self.graphed = graphed
        self._boxed_call = True    # on the instance: Dynamo's wrapper of the backward copies its __dict__
        self.on_gpu = isinstance(exe, GpuExecutable)
        self.values, self.checks = {}, None
        self.result_slots = _OutputSlots(torch.device("cuda", exe.device.index) if self.on_gpu else torch.device("cpu"),
                                         reuse=not graphed)
        if self.on_gpu:
            self.plan_in, self.plan_out = _plan_tensors(exe)
            self.where = torch.device("cuda", exe.device.index)
            self.in_slots, self.out_slots = _OutputSlots(self.where, not graphed), _OutputSlots(self.where, not graphed)
            self.values = {k: v[0].to(self.where) for k, (kind, *v) in enumerate(imported.outputs) if kind == "value"}
            if exe.plan.get("checks"):
                self.checks = _DeviceChecks(exe, self.where)
                calls.checks.append(self.checks)

    def _run(self, args) -> tuple[list, dict]:
        """The executable's outputs for gm's arguments `args` (torch tensors; OpenPrimError where a
        run-time check failed), and {argument index: its conversion to the plan's dtype} of the arguments
        the call converted (a GPU plan compiled in autocast's dtype takes the f32 parameters in f16)."""
        imp = self.imported
        feeds = [args[i].permute(0, 2, 3, 1) if i in imp.channels_last_feeds else args[i] for i in imp.feeds]
        if not self.on_gpu:
            outs = self.exe(*[_array(t) for t in feeds])
            outs = (outs,) if len(self.exe.plan["outputs"]) == 1 else outs
            return [torch.from_numpy(np.asarray(o)) for o in outs], {}
        ins = [t if t.dtype == want and t.is_contiguous() else None for t, want in zip(feeds, self.plan_in)]
        todo = [k for k, t in enumerate(ins) if t is None]
        for k, t in zip(todo, _converted([feeds[k] for k in todo], [self.plan_in[k] for k in todo], self.in_slots)):
            ins[k] = t
        outs = self.out_slots.take(self.plan_out)
        _run_on_stream(self.exe, ins, outs)
        if self.checks is not None:
            self.checks.count()
            if not self.graphed:
                self.checks.publish()
        return outs, {imp.feeds[k]: ins[k] for k in todo if imp.feeds[k] not in imp.channels_last_feeds}

    def __call__(self, *args):
        args = _unboxed(args)
        if not self.graphed:
            self.calls.raise_failed_checks()
        imp = self.imported
        outs, converted = (), {}
        if self.exe is not None:
            try:
                outs, converted = self._run(args)
            except OpenPrimError as e:     # its forward's call fails too: one warning per model
                if not self.calls.check_failed:
                    self.calls.check_failed = True
                    where = re.sub(r"^\S+:\d+: ", "", str(e))     # the Graph's line of the import: not the user's
                    _warn_once(f"openprim_backend: a run-time check failed ({where}); running such calls eagerly")
                return self.eager(args)
        AOT_COUNTS[f"{self.kind} runs"] += 1
        result, todo = [], []
        for k, ((kind, *v), meta) in enumerate(zip(imp.outputs, imp.meta)):
            if kind in ("graph", "input"):
                # an argument passed through may stand for a cast of it (autocast's f16 copy of a weight,
                # which the backward's eager fallback must get in f16): the call's own conversion where it
                # made one, else converted below with the others
                t = outs[v[0]] if kind == "graph" else args[v[0]]
                if kind == "graph" and v[0] in imp.channels_last_outputs:   # a saved map as computed: NHWC
                    t = t.permute(0, 3, 1, 2)
                if meta is not None:
                    if t.dtype != meta[1]:
                        same = converted.get(v[0]) if kind == "input" else None
                        if same is not None and same.dtype == meta[1]:
                            t = same
                        else:
                            todo.append(k)
                    if tuple(t.shape) != meta[0]:
                        t = t.reshape(meta[0])
                result.append(t)
            elif kind == "value":
                value = self.values.get(k, v[0])
                result.append(value.clone() if self.graphed else value)
            else:
                result.append(None)
        if todo:
            for k, t in zip(todo, _converted([result[k] for k in todo], [imp.meta[k][1] for k in todo],
                                             self.result_slots)):
                result[k] = t
        return result

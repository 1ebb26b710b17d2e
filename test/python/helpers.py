"""Shared by the compiler tests: dtype rounding, the tolerance check, a graph builder that keeps the
float64 data of its inputs and weights (Net), and readers of the compiled IR (ops, solvers, launches).

Imported as a plain module (test/python is on sys.path under pytest, like reference.py).
"""
from __future__ import annotations

import math
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
from mlir import ir

import openprim
import openprim.compiler
import openprim.plan
import reference as ref
from openprim import dialect
from openprim.pyfrontend import Graph
from openprim.dialect import body, graph_functions, kernels_module
from openprim.base.dtypes import from_storage, to_storage
from openprim.base.target import parse_target

DTYPES = ("f32", "f16", "bf16")
# GPU targets: tests compile here and run on a GPU machine that has no MLIR, in two passes:
#   OPENPRIM_TEST_TARGET=nvvm:sm_90 OPENPRIM_GPU_RECORD=DIR pytest ...   (artifacts + inputs into DIR)
#   python scripts/gpu_replay.py DIR outputs.npz                          (on the GPU machine)
#   OPENPRIM_TEST_TARGET=nvvm:sm_90 OPENPRIM_GPU_REPLAY=outputs.npz pytest ...   (check the outputs)
TARGET = os.environ.get("OPENPRIM_TEST_TARGET", "cpu")
RTOL = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}


def xfail_bug(reason, raises):
    """A known compiler bug: strict (a fix turns it into a failure, so the marker gets removed) and
    only for the exception it raises today (any other failure still fails)."""
    return pytest.mark.xfail(reason=reason, raises=raises, strict=True)


# ----------------------------------------------------------------------------- data and comparison
def rounded(a, dtype):
    """float64 values of `a` rounded to dtype (bf16: round to nearest even, as the runtime does)."""
    a = np.asarray(a, np.float64)
    if dtype == "bf16":
        return from_storage(to_storage(a, "bf16"), "bf16").astype(np.float64)
    return a.astype({"f32": np.float32, "f16": np.float16}[dtype]).astype(np.float64)


def assert_close(out, want, dtype, reduction=1, what="output"):
    """|out - want| <= atol + rtol |want| everywhere, atol = rtol * max|want| * sqrt(reduction)
    (reduction: the length of the dot products, for conv/matmul). Also: same shape, all finite,
    not all zeros."""
    out, want = np.asarray(out, np.float64), np.asarray(want, np.float64)
    assert out.shape == want.shape, f"{what}: shape {out.shape}, expected {want.shape}"
    bad = ~np.isfinite(out)
    assert not bad.any(), f"{what} ({dtype}): {bad.sum()} of {out.size} values are NaN/inf"
    if np.any(want != 0):
        assert np.any(out != 0), f"{what} ({dtype}): all zeros"
    rtol = RTOL[dtype]
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    atol = rtol * (scale or 1.0) * math.sqrt(reduction)
    err = np.abs(out - want)
    excess = err - (atol + rtol * np.abs(want))
    if excess.size and excess.max() > 0:
        i = np.unravel_index(np.argmax(excess), excess.shape)
        n = int((excess > 0).sum())
        raise AssertionError(f"{what} ({dtype}): {n} of {out.size} values out of tolerance; max |err| "
                             f"{err.max():.4g}; worst at {tuple(map(int, i))}: got {out[i]:.6g}, expected "
                             f"{want[i]:.6g} (atol {atol:.3g}, rtol {rtol:g}, max|ref| {scale:.4g})")


class Net:
    """A Graph plus the rounded float64 data of its inputs and weights."""

    def __init__(self, rng, dtype, layout="NCHW"):
        self.g = Graph(layout=layout, dtype=dtype)
        self.rng, self.dtype = rng, dtype
        self.feeds = []
        self.n = 0
        self.module = self.exe = None

    def data(self, shape, scale=1.0, positive=False):
        a = self.rng.uniform(0.5, 2.0, shape) if positive else self.rng.standard_normal(shape) * scale
        return rounded(a, self.dtype)

    def _name(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def input(self, shape, **kw):
        v = self.data(shape, **kw)
        t = self.g.input(self._name("x"), shape)
        self.feeds.append(v.astype(np.float32))
        return t, v

    def weight(self, shape, **kw):
        """A param (a compile-time constant) with random data."""
        v = self.data(shape, **kw)
        return self.g.param(self._name("w"), v), v

    def run(self, pipeline, *outputs, solver=""):
        """Compile (pipeline None: the full pipeline, with `solver` forced if given) and run on the
        feeds; the lowered module and the executable stay in self.module / self.exe."""
        self.g.output(*outputs)
        if TARGET != "cpu":
            self.module, plan, res = run_on_gpu(self.g, self.feeds, pipeline, solver)
            self.exe = SimpleNamespace(plan=plan)
        else:
            self.module = openprim.compiler.lower(self.g, solver=solver, pipeline=pipeline)
            self.exe = openprim.compiler.jit(self.module)
            res = self.exe(*self.feeds)
        res = res if isinstance(res, tuple) else (res,)
        assert len(res) == len(outputs)
        return [np.asarray(r, np.float64) for r in res]

    def launches(self):
        """(kernel name, prim.op, prim.solver or '') of every launch of the compiled plan, in order."""
        info = kernel_info(self.module)
        return [(s["kernel"], *info[s["kernel"]]) for s in self.exe.plan["steps"]]


_cases: dict[str, int] = {}
_replayed: dict = {}


def _case_key() -> str:
    test = os.environ.get("PYTEST_CURRENT_TEST", "case").split(" ")[0].split("::")[-1]
    n = _cases[test] = _cases.get(test, -1) + 1
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{test}.{n}")


def run_on_gpu(graph, feeds, pipeline=None, solver=""):
    """(lowered module, plan, outputs) of `graph` on TARGET: recorded as an artifact for the GPU
    machine, or read back from what it computed (see TARGET above); skips when neither was asked for."""
    key = _case_key()
    if pipeline and pipeline.split("{")[0] in ("prim-lower", "prim-pipeline") and "target=" not in pipeline:
        name, _, options = pipeline.rstrip("}").partition("{")     # the whole compiler for TARGET
        pipeline = f"{name}{{{' '.join(filter(None, [options, f'target={TARGET}']))}}}"
    record, replay = os.environ.get("OPENPRIM_GPU_RECORD"), os.environ.get("OPENPRIM_GPU_REPLAY")
    if not record and not replay:
        pytest.skip(f"target {TARGET}: set OPENPRIM_GPU_RECORD or OPENPRIM_GPU_REPLAY (scripts/gpu_replay.py)")
    module = openprim.compiler.lower(graph, TARGET, solver, pipeline)
    if record:
        os.makedirs(record, exist_ok=True)
        openprim.compiler.write_artifact(module, os.path.join(record, key + ".oprim"), TARGET)
        np.savez(os.path.join(record, key + ".npz"), *feeds)
        pytest.skip(f"recorded {key} for the GPU machine")
    if not _replayed:
        with np.load(replay) as z:
            _replayed.update({k: z[k] for k in z.files})
    if f"{key}.error" in _replayed:
        raise AssertionError(f"on the GPU: {_replayed[f'{key}.error']}")
    outs = [_replayed[k] for k in sorted((k for k in _replayed if k.startswith(key + ".out")),
                                        key=lambda k: int(k.rsplit("out", 1)[1]))]
    if not outs:
        pytest.skip(f"no GPU result for {key} in {replay}")
    return module, openprim.plan.build_plan(module, parse_target(TARGET))[0], tuple(outs) if len(outs) > 1 else outs[0]


# ----------------------------------------------------------------------------- reading the IR
def _str(attr) -> str:
    return ir.StringAttr(attr).value


def graph_ops(module, skip=("prim.constant", "func.return")) -> list:
    """The operations of the (single) graph function, in order, minus `skip`."""
    fns = graph_functions(module.operation)
    assert len(fns) == 1, f"expected one graph function, found {len(fns)}"
    return [o.operation for o in fns[0].regions[0].blocks[0].operations if o.operation.name not in skip]


def op_names(module, **kw) -> list[str]:
    """Names of graph_ops; a call reads 'call @callee'."""
    return [f"call @{ir.FlatSymbolRefAttr(o.attributes['callee']).value}" if o.name == "func.call" else o.name
            for o in graph_ops(module, **kw)]


def fused_bodies(module) -> dict[str, list[str]]:
    """{name: op names of its body} of every prim-fuse'd elementwise function (attribute prim.fused)."""
    out = {}
    for op in body(module.operation).operations:
        if op.operation.name == "func.func" and "prim.fused" in op.attributes:
            blk = op.regions[0].blocks[0]
            out[_str(op.attributes["sym_name"])] = [o.operation.name for o in blk.operations
                                                    if o.operation.name != "func.return"]
    return out


def ops_named(module, name: str) -> list:
    return [o for o in graph_ops(module) if o.name == name]


def attrs(op) -> dict:
    """A prim op's attributes as Python values (by the op's spec), plus prim.solver when set."""
    out = dialect.op_attrs(op)
    if "prim.solver" in op.attributes:
        out["prim.solver"] = _str(op.attributes["prim.solver"])
    return out


def operands(op) -> dict:
    """{name: present?} of a conv2d/matmul's optional operands (bias, residual)."""
    _, _, bias, residual = dialect.operand_groups(op)
    return {"bias": bias is not None, "residual": residual is not None}


def kernel_info(module) -> dict[str, tuple[str, str]]:
    """{kernel name: (prim.op, prim.solver or "")} of the lowered kernels module (CPU: LLVM functions, GPU: host
    functions of launches)."""
    km = kernels_module(module.operation)
    assert km is not None, "no kernels module: the module was not lowered"
    out = {}
    for op in body(km).operations:
        if op.operation.name in ("llvm.func", "func.func") and "prim.op" in op.attributes:
            solver = _str(op.attributes["prim.solver"]) if "prim.solver" in op.attributes else ""
            out[_str(op.attributes["sym_name"])] = (_str(op.attributes["prim.op"]), solver)
    return out


def depthwise_case(net: "Net", cfg, activations):
    """cfg's depthwise convolution (NHWC, KRSC filter), its bias, residual and activation (activations: name ->
    (graph op, float64 reference)) on net.g; (output, float64 reference)."""
    g = net.g
    N, H, W, C = cfg["x"]
    x, xv = net.input((N, H, W, C))
    w, wv = net.weight((C, *cfg["kernel"], 1), scale=0.5)
    b, bv = net.weight((C,)) if cfg["bias"] else (None, None)
    kw = dict(stride=cfg["stride"], padding=cfg["padding"], dilation=cfg["dilation"], groups=C)
    y = g.conv2d(x, w, b, **kw)
    want = ref.conv2d(xv, wv, bv, layout="NHWC", **kw)
    if cfg["residual"]:
        r, rv = net.input(want.shape)
        y, want = g.add(y, r), want + rv
    op, act = activations[cfg["act"]]
    return op(g, y), act(want)


def seeded_cnn():
    """A seeded torch CNN of odd sizes: a strided grouped conv, batch norm (random statistics), ReLU, a
    dilated conv, pooling, linear; input [N, 4, H, W] (the dynamic batch tests)."""
    import torch    # only the torch tests call it: helpers itself must import without torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), torch.nn.BatchNorm2d(6),
                            torch.nn.ReLU(), torch.nn.Conv2d(6, 5, 3, padding=2, dilation=2),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(5, 3)).eval()
    with torch.no_grad():
        m[1].running_mean.normal_()
        m[1].running_var.uniform_(0.5, 2.0)
        m[1].weight.normal_()
    return m

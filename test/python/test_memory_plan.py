"""The memory plan (driver/plan.py): a residual convolution's output takes its residual's buffer.

A CPU kernel that reads each residual element just before writing the output element at the same index
says so (`prim.in_place`); the plan then gives the output the residual's buffer where the residual dies at
that step. Each case is a chain a = conv(x), b = conv(a), y = relu(conv(b) + a), z = conv(y) run with one
forced solver (every CPU kernel family with a residual epilogue) and checked against float64 numpy; y
shares a's buffer, except where a is read later or is the convolution's own input.
"""
from __future__ import annotations

import numpy as np
import pytest

import openprim

import reference as ref
from helpers import TARGET, Net, assert_close
from openprim.pyfrontend import Graph

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="the CPU kernels' in-place residual")

C = 16
SOLVERS = [("conv_implicit_gemm", 1, 3), ("conv_implicit_gemm", 1, 1), ("conv_winograd_f4x3_packed", 1, 3),
           ("conv_depthwise", C, 3)]


def _conv(net, x, xv, groups, kernel):
    w, wv = net.weight((C, kernel, kernel, C // groups), scale=0.3)
    b, bv = net.weight((C,))
    kw = dict(padding=kernel // 2, groups=groups)
    return net.g.conv2d(x, w, b, **kw), ref.conv2d(xv, wv, bv, layout="NHWC", **kw)


def _chain(rng, solver, groups, kernel, variant):
    """Runs the chain; returns (plan, the step of y's convolution, reference-checked)."""
    net = Net(rng, "f32", "NHWC")
    x, xv = net.input((2, 7, 9, C))
    a, av = _conv(net, x, xv, groups, kernel)
    b, bv = (a, av) if variant == "input_is_residual" else _conv(net, a, av, groups, kernel)
    c, cv = _conv(net, b, bv, groups, kernel)
    y, yv = net.g.relu(net.g.add(c, a)), ref.relu(cv + av)
    z, zv = _conv(net, y, yv, groups, kernel)
    if variant == "residual_read_later":
        z, zv = net.g.add(z, a), zv + av
    out, = net.run(None, z, solver=solver)
    assert_close(out, zv, "f32", reduction=9 * C, what=f"{solver} {variant}")
    plan = net.exe.plan
    residual_steps = [s for s in plan["steps"] if len(s["args"]) == 5]   # x, w, bias, residual, out
    return plan, residual_steps


@pytest.mark.parametrize("variant", ["dies", "residual_read_later", "input_is_residual"])
@pytest.mark.parametrize("solver,groups,kernel", SOLVERS, ids=[f"{s}_{k}x{k}" for s, _, k in SOLVERS])
def test_residual_output_in_place(solver, groups, kernel, variant, rng):
    plan, steps = _chain(rng, solver, groups, kernel, variant)
    values = plan["values"]
    step = steps[0]   # y's convolution (the final add of residual_read_later is not fused: z is an output)
    res, out = values[step["args"][3]], values[step["args"][4]]
    shared = res["offset"] == out["offset"]
    assert shared == (variant == "dies"), (variant, res, out)
    if shared:
        assert out["view_of"] == step["args"][3]


def test_inputs_read_in_place():
    """A C-contiguous, 16-byte aligned input of the storage dtype is read where it is (the steps' pointers
    bound to it for the call, then back home: its arena slot is never written), a strided one too once made
    contiguous; one only 4-byte aligned is copied in, and so is an input that an output reads back. Each call gets
    its own data, and outputs come back 64-byte aligned (another executable reads them in place)."""
    from openprim.runtime.executor import aligned_bytes
    g = Graph()
    x, z = g.input("x", (64, 33)), g.input("z", (64, 33))
    g.output(g.add(g.mul(x, x), z))
    g.output(z)                                    # read back from the arena: copied
    exe = openprim.compile(g)
    assert exe.bindable == {exe.plan["inputs"][0]["value"]}
    rng = np.random.default_rng(3)
    home = exe._free[0].views[exe.plan["inputs"][0]["value"]]
    buf = aligned_bytes(2 * 64 * 33 * 4 + 64)
    for how in ("aligned", "offset 4", "strided", "offset 16"):
        if how == "strided":
            a = buf[:2 * 64 * 33 * 4].view(np.float32).reshape(64, 66)[:, ::2]
        else:
            at = {"aligned": 0, "offset 4": 4, "offset 16": 16}[how]
            a = buf[at:at + 64 * 33 * 4].view(np.float32).reshape(64, 33)
        a[...] = rng.standard_normal((64, 33))
        b = rng.standard_normal((64, 33)).astype(np.float32)
        y, zz = exe(a, b)
        assert_close(y, a.astype(np.float64) ** 2 + b, "f32")
        np.testing.assert_array_equal(zz, b)
        assert y.ctypes.data % 64 == 0 and zz.ctypes.data % 64 == 0
        if how != "offset 4":
            assert not np.any(home), f"the {how} input was copied into the arena"
        else:
            np.testing.assert_array_equal(home, a)     # copied in
        home[...] = 0
    exe.time_steps(2)                             # the pointers are home again: timing reads the arena
    assert_close(exe(a.copy(), b)[0], a.astype(np.float64) ** 2 + b, "f32")

"""Sanity check of the numpy references (reference.py) against PyTorch, in float64. No compiler here:
this only guards the yardstick that test_ops.py measures the compiler with. Skipped without torch."""
import numpy as np
import pytest

import reference as ref

torch = pytest.importorskip("torch")
F = torch.nn.functional


def T(a):
    return torch.from_numpy(np.ascontiguousarray(a, np.float64))


def close(a, b):
    b = b.detach().numpy() if hasattr(b, "detach") else b
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, (0, 0, 0, 0), 1, 1), (2, (1, 0, 2, 1), 1, 1), (2, (2, 1, 0, 2), 2, 2), ((1, 2), (1, 1, 1, 1), (2, 1), 6)])
def test_conv2d(rng, stride, padding, dilation, groups):
    x = rng.standard_normal((2, 6, 9, 7))
    w = rng.standard_normal((6, 6 // groups, 3, 2))
    b = rng.standard_normal(6)
    pt, pl, pb, pr = padding
    want = F.conv2d(F.pad(T(x), (pl, pr, pt, pb)), T(w), T(b), stride, 0, dilation, groups)
    close(ref.conv2d(x, w, b, stride, padding, dilation, groups), want)
    # NHWC / KRSC and NHWC / KCRS give the same numbers transposed
    xh, wh = x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1)
    close(ref.conv2d(xh, wh, b, stride, padding, dilation, groups, "NHWC"), want.permute(0, 2, 3, 1))
    close(ref.conv2d(xh, w, b, stride, padding, dilation, groups, "NHWC", "KCRS"), want.permute(0, 2, 3, 1))
    close(ref.conv2d(x, wh, b, stride, padding, dilation, groups, "NCHW", "KRSC"), want)


@pytest.mark.parametrize("name,params,fn", [
    ("relu", (), F.relu), ("leaky_relu", (0.2,), lambda t: F.leaky_relu(t, 0.2)),
    ("clamp", (-0.5, 0.7), lambda t: t.clamp(-0.5, 0.7)), ("sigmoid", (), torch.sigmoid), ("tanh", (), torch.tanh),
    ("gelu", (), F.gelu), ("gelu_tanh", (), lambda t: F.gelu(t, approximate="tanh")), ("silu", (), F.silu),
    ("elu", (1.3,), lambda t: F.elu(t, 1.3))])
def test_activations(rng, name, params, fn):
    x = rng.standard_normal(200) * 4
    close(ref.activation(x, name, params), fn(T(x)))


def test_matmul(rng):
    a, b, bias = rng.standard_normal((2, 3, 5, 7)), rng.standard_normal((7, 4)), rng.standard_normal(4)
    close(ref.matmul(a, b, bias), T(a) @ T(b) + T(bias))
    wt = rng.standard_normal((4, 7))
    close(ref.linear(a, wt, bias), F.linear(T(a), T(wt), T(bias)))
    bb = rng.standard_normal((2, 3, 4, 7))
    close(ref.matmul(a, bb, transpose_rhs=True), T(a) @ T(bb).transpose(-1, -2))


def test_norms(rng):
    x = rng.standard_normal((2, 6, 5, 3))
    s, b, m, v = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal(6), rng.uniform(0.5, 2, 6)
    want = F.batch_norm(T(x), T(m), T(v), T(s), T(b), False, 0.0, 1e-3)
    close(ref.batch_norm(x, s, b, m, v, 1e-3), want)
    close(ref.batch_norm(x.transpose(0, 2, 3, 1), s, b, m, v, 1e-3, "NHWC"), want.permute(0, 2, 3, 1))
    want = F.group_norm(T(x), 3, T(s), T(b), 1e-4)
    close(ref.group_norm(x, 3, s, b, 1e-4), want)
    close(ref.group_norm(x.transpose(0, 2, 3, 1), 3, s, b, 1e-4, "NHWC"), want.permute(0, 2, 3, 1))
    ls, lb = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    close(ref.layer_norm(x, ls, lb, 1e-5, 2), F.layer_norm(T(x), (5, 3), T(ls), T(lb), 1e-5))
    close(ref.layer_norm(x, eps=1e-5), F.layer_norm(T(x), (3,), eps=1e-5))


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", [
    (3, 2, 1, 1, False), (3, 2, 1, 1, True), ((3, 2), (2, 1), (1, 0), (2, 1), True), (2, 2, 0, 1, True),
    (3, 3, 1, 2, True)])
def test_max_pool(rng, kernel, stride, padding, dilation, ceil):
    x = rng.standard_normal((2, 3, 9, 8))
    want = F.max_pool2d(T(x), kernel, stride, padding, dilation, ceil)
    close(ref.max_pool2d(x, kernel, stride, padding, dilation, ceil), want)
    close(ref.max_pool2d(x.transpose(0, 2, 3, 1), kernel, stride, padding, dilation, ceil, "NHWC"),
          want.permute(0, 2, 3, 1))


def test_max_pool_asymmetric(rng):
    x = rng.standard_normal((2, 3, 9, 8))
    want = F.max_pool2d(F.pad(T(x), (1, 0, 0, 1), value=-np.inf), 3, 2)
    close(ref.max_pool2d(x, 3, 2, (0, 1, 1, 0)), want)


@pytest.mark.parametrize("kernel,stride,padding,ceil,cip", [
    (3, 2, 1, False, True), (3, 2, 1, True, True), (3, 2, 1, True, False), ((3, 2), (2, 1), (1, 1), True, True),
    (2, 3, 1, True, True), (2, 3, 1, True, False), (5, 2, 2, True, True), (4, 3, (2, 1), False, False)])
def test_avg_pool(rng, kernel, stride, padding, ceil, cip):
    x = rng.standard_normal((2, 3, 9, 8))
    want = F.avg_pool2d(T(x), kernel, stride, padding, ceil, cip)
    close(ref.avg_pool2d(x, kernel, stride, padding, ceil, cip), want)
    close(ref.avg_pool2d(x.transpose(0, 2, 3, 1), kernel, stride, padding, ceil, cip, "NHWC"),
          want.permute(0, 2, 3, 1))


def test_misc(rng):
    x = rng.standard_normal((2, 3, 5, 4))
    for ax in range(-4, 4):
        close(ref.softmax(x, ax), F.softmax(T(x), ax))
        close(ref.log_softmax(x, ax), F.log_softmax(T(x), ax))
    close(ref.global_avg_pool(x), F.adaptive_avg_pool2d(T(x), 1))
    close(ref.pad(x, [0, 1, 2, 0, 1, 0, 1, 3], 0.5), F.pad(T(x), (0, 3, 2, 1, 1, 0, 0, 1), value=0.5))
    y, z = rng.standard_normal((2, 1, 5, 4)), rng.standard_normal((2, 2, 5, 4))
    close(ref.concat([x, y, z], 1), torch.cat([T(x), T(y), T(z)], 1))
    close(ref.transpose(x, (0, 2, 3, 1)), T(x).permute(0, 2, 3, 1))

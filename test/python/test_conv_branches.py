"""Parallel convolution branches of one input summed into one convolution (passes/conv_branches.py).

Re-parameterizable blocks as timm and the papers write them in eval mode (RepVGG: 3x3 + 1x1 + batch-norm
identity; MobileOne: several depthwise kxk branches + 1x1 + identity; FastViT's large-kernel conv: 7x7 +
3x3, strided), plus dilated and asymmetrically padded windows: compiled through the whole pipeline and
checked against float64, and after prim-fuse alone one prim.conv2d is left. Cases that must not merge keep
their branches and still compute the same sum.
"""
from __future__ import annotations

import pytest

import reference as ref
from helpers import Net, assert_close, op_names
from openprim import passes
from openprim.pyfrontend import to_module

N, C, H, W = 2, 6, 11, 9


def branch_conv(net, x, k, kernel, groups=1, bias=True, **kw):
    """(conv2d, float64 reference) of a constant filter (and bias) over x = (tensor, reference)."""
    layout = net.g.layout
    r, s = kernel
    shape = (k, C // groups, r, s) if layout == "NCHW" else (k, r, s, C // groups)
    w, wv = net.weight(shape, scale=0.3)
    b, bv = net.weight((k,)) if bias else (None, None)
    return (net.g.conv2d(x[0], w, b, groups=groups, **kw),
            ref.conv2d(x[1], wv, bv, groups=groups, layout=layout, **kw))


def branch_bn(net, x):
    (s, sv), (t, tv), (m, mv) = (net.weight((C,)) for _ in range(3))
    v, vv = net.weight((C,), positive=True)
    return net.g.batch_norm(x[0], s, t, m, v, eps=1e-3), ref.batch_norm(x[1], sv, tv, mv, vv, 1e-3, net.g.layout)


def repvgg(net, x):
    return [branch_conv(net, x, C, (3, 3), padding=1), branch_conv(net, x, C, (1, 1), bias=False), branch_bn(net, x)]


def repvgg_strided(net, x):
    return [branch_conv(net, x, 8, (3, 3), stride=2, padding=1), branch_conv(net, x, 8, (1, 1), stride=2)]


def mobileone_depthwise(net, x):
    return [branch_conv(net, x, C, (3, 3), groups=C, padding=1) for _ in range(3)] + \
        [branch_conv(net, x, C, (1, 1), groups=C), branch_bn(net, x)]


def large_kernel_strided(net, x):
    return [branch_conv(net, x, C, (7, 7), groups=C, stride=2, padding=3),
            branch_conv(net, x, C, (3, 3), groups=C, stride=2, padding=1)]


def dilated_norm(net, x):
    return [branch_bn(net, x), branch_conv(net, x, C, (3, 3), groups=2, dilation=2, padding=2)]


def asymmetric(net, x):
    return [branch_conv(net, x, 4, (2, 3), padding=(0, 1, 1, 1)), branch_conv(net, x, 4, (1, 1), bias=False)]


MERGED = [repvgg, repvgg_strided, mobileone_depthwise, large_kernel_strided, dilated_norm, asymmetric]


def off_grid(net, x):
    """Dilation 2 with padding (1, 3): the batch norm's pixel falls between two taps."""
    return [branch_conv(net, x, C, (3, 3), dilation=2, padding=(1, 1, 3, 3)), branch_bn(net, x)]


def plain_identity(net, x):
    """x itself is no branch: it stays the convolution's residual."""
    return [branch_conv(net, x, C, (3, 3), padding=1), x]


def activated(net, x):
    """A branch with its own relu is not linear in its filter."""
    y, yv = branch_conv(net, x, C, (1, 1))
    return [(net.g.relu(y), ref.relu(yv)), branch_conv(net, x, C, (1, 1))]


def summed(net, branches):
    y, yv = branches[0]
    for b, bv in branches[1:]:
        y, yv = net.g.add(y, b), yv + bv
    return net.g.relu(y), ref.relu(yv)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("block", MERGED + [off_grid, plain_identity, activated], ids=lambda b: b.__name__)
def test_conv_branches(block, layout, dtype, rng):
    net = Net(rng, dtype, layout)
    x = net.input((N, C, H, W) if layout == "NCHW" else (N, H, W, C))
    y, want = summed(net, block(net, x))
    out, = net.run(None, y)
    assert_close(out, want, dtype, reduction=C * 7 * 7 * 4, what=f"{block.__name__} ({layout})")
    fused = op_names(passes.run(to_module(net.g), "prim-fuse"))
    convs = fused.count("prim.conv2d")
    if block in MERGED:
        assert fused == ["prim.conv2d"], fused
    else:
        assert convs == 1 + (block is activated) and "prim.add" not in fused, fused
        assert ("prim.batch_norm" in fused) == (block is off_grid), fused

"""Chains of concats as one copy kernel (concat_chains.outline_concat_chains; kernels/cpu/concat.py and
kernels/gpu/concat.py under OPENPRIM_TEST_TARGET, helpers.py), against numpy: NCHW and NHWC graphs (prim-select moves its transposes through the single concats
first), inputs of odd widths (vector copies and scalar tails), fewer rows than threads (each input's
columns split), every dtype, a chain whose inner result is used elsewhere (the chain stops there), and
DenseNet's pattern (a growing concat of every earlier feature map before BN-ReLU-conv)."""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from helpers import DTYPES, Net, assert_close


def _kernels(net):
    return [(k, op) for k, op, _ in net.launches()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes,axis", [
    ([(2, 3, 5, 7), (2, 4, 5, 7), (2, 9, 5, 7), (2, 1, 5, 7)], 1),   # channels of NCHW
    ([(1, 5, 3), (1, 5, 17), (1, 5, 8)], 2),                           # small: one thread
    ([(5, 9000, 3), (5, 9000, 2)], 2),                                 # 45000 rows, 2 threads
    ([(1, 40013), (1, 3), (1, 30001)], 1),                             # 1 row: the columns split
    ([(3, 2, 4), (2, 2, 4), (1, 2, 4)], 0),                            # the leading axis
])
def test_concat_chain(shapes, axis, dtype, rng):
    net = Net(rng, dtype)
    ins = [net.input(s) for s in shapes]
    y = net.g.concat([t for t, _ in ins], axis)
    out, = net.run(None, y)
    want = np.concatenate([v for _, v in ins], axis)
    assert np.array_equal(out, want), f"{shapes} axis {axis} ({dtype})"
    assert _kernels(net) == [("concat_0", "concat")]


def test_concat_chain_inner_result_used_twice(rng):
    net = Net(rng, "f32")
    (a, av), (b, bv), (c, cv) = net.input((4, 3)), net.input((4, 5)), net.input((4, 2))
    ab = net.g.concat([a, b], 1)
    abc = net.g.concat([ab, c], 1)
    out_ab, out_abc = net.run(None, ab, net.g.relu(abc))
    assert np.array_equal(out_ab, np.concatenate([av, bv], 1))
    assert_close(out_abc, ref.relu(np.concatenate([av, bv, cv], 1)), "f32")
    assert [op for _, op in _kernels(net)].count("concat") == 2


def test_dense_block(rng):
    """DenseNet's dense block in NCHW: each layer's input is the concat of every earlier feature map;
    prim-select runs the convolutions in NHWC and the chains along the NHWC channels."""
    net = Net(rng, "f32")
    x, xv = net.input((1, 8, 7, 9))
    feats, fvals = [x], [xv]
    for _ in range(3):
        cat = net.g.concat(feats, 1) if len(feats) > 1 else feats[0]
        catv = np.concatenate(fvals, 1)
        w, wv = net.weight((4, catv.shape[1], 3, 3), scale=0.3)
        feats.append(net.g.conv2d(net.g.relu(cat), w, padding=1))
        fvals.append(ref.conv2d(ref.relu(catv), wv, padding=1))
    out, = net.run(None, net.g.concat(feats, 1))
    assert_close(out, np.concatenate(fvals, 1), "f32", reduction=9 * 20)
    kinds = [op for _, op in _kernels(net)]
    assert kinds.count("concat") == 3, kinds   # one per chain (2, 3 and 4 inputs)


def test_dense_block_batch_norm_relu(rng):
    """DenseNet's layers as torchvision writes them (channels last here, as on GPUs): each concatenates
    every earlier feature map (the same prefix as the layer before, plus one) then BN -> ReLU -> conv.
    Every layer's chain, batch norm and ReLU stay one kernel: common subexpressions must not merge the
    chains' shared prefixes."""
    net = Net(rng, "f32", "NHWC")
    x, xv = net.input((2, 5, 7, 6))
    feats, fvals = [x], [xv]
    for _ in range(3):
        cat, catv = net.g.concat(feats, 3), np.concatenate(fvals, 3)
        c = catv.shape[3]
        (sc, scv), (sh, shv), (mu, muv) = net.weight((c,)), net.weight((c,)), net.weight((c,))
        var, varv = net.weight((c,), positive=True)
        w, wv = net.weight((4, 3, 3, c), scale=0.3)            # KRSC
        y = net.g.relu(net.g.batch_norm(cat, sc, sh, mu, var, eps=1e-5))
        feats.append(net.g.conv2d(y, w, padding=1))
        normed = np.maximum((catv - muv) / np.sqrt(varv + 1e-5) * scv + shv, 0)
        fvals.append(ref.conv2d(normed, wv, padding=1, layout="NHWC"))
    out, = net.run("prim-pipeline{layout=keep}", feats[-1])
    assert_close(out, fvals[-1], "f32", reduction=9 * 14)
    kinds = [op for _, op in _kernels(net)]
    # the first layer's input is x alone (no concat): its BN and ReLU are the only ones left
    assert kinds.count("concat") == 2 and kinds.count("batch_norm") == 1 and kinds.count("relu") == 1, kinds


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout,shapes,relu", [
    ("NHWC", [(1, 5, 7, 13), (1, 5, 7, 8), (1, 5, 7, 3)], True),     # channels along the vectors
    ("NHWC", [(2, 3, 3, 16), (2, 3, 3, 16)], True),                  # one concat + BN
    ("NCHW", [(1, 3, 4, 4), (1, 5, 4, 4)], False),                   # planes of 16: vectors in a channel
    ("NCHW", [(2, 3, 5, 7), (2, 6, 5, 7)], True),                    # planes of 35: scalars
    ("NHWC", [(1, 64, 64, 9), (1, 64, 64, 11)], True),               # 81920 outputs: two threads
])
def test_concat_chain_batch_norm_relu(layout, shapes, relu, dtype, rng):
    """concat -> batch_norm -> relu (DenseNet's pre-activation) in one kernel, layouts kept as given."""
    net = Net(rng, dtype, layout)
    ins = [net.input(s) for s in shapes]
    axis = 3 if layout == "NHWC" else 1
    c = sum(s[axis] for s in shapes)
    (sc, scv), (sh, shv), (mu, muv) = net.weight((c,)), net.weight((c,)), net.weight((c,))
    var, varv = net.weight((c,), positive=True)
    y = net.g.batch_norm(net.g.concat([t for t, _ in ins], axis), sc, sh, mu, var, eps=1e-3)
    y = net.g.relu(y) if relu else y
    out, = net.run("prim-pipeline{layout=keep}", y)
    cat = np.concatenate([v for _, v in ins], axis)
    bshape = [1, 1, 1, c] if layout == "NHWC" else [1, c, 1, 1]
    want = (cat - muv.reshape(bshape)) / np.sqrt(varv.reshape(bshape) + 1e-3) * scv.reshape(bshape) + \
        shv.reshape(bshape)
    assert_close(out, ref.relu(want) if relu else want, dtype)
    kinds = [op for _, op in _kernels(net)]
    assert kinds == ["concat"], kinds


def test_concat_chain_repeated_input(rng):
    """concat([a, b, a]) (and ONNX's broadcast by repeated concatenation): `a` is one kernel argument
    read twice."""
    net = Net(rng, "f32")
    (a, av), (b, bv) = net.input((2, 3, 4)), net.input((2, 3, 1))
    out, = net.run(None, net.g.concat([a, b, a, a], 2))
    assert np.array_equal(out, np.concatenate([av, bv, av, av], 2))
    assert _kernels(net) == [("concat_0", "concat")]

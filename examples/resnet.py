"""ResNet-18/34/50/101 (torchvision's layout of layers: basic blocks, or bottlenecks with the stride on
the 3x3 as in v1.5) built with the OpenPrim frontend, random weights.

`openprim compile examples/resnet.py` and `openprim run examples/resnet.py` use `build()`; the
weights come from a seeded generator (He-initialized convolutions, batch-norm statistics near
identity), so runs are reproducible and nothing is downloaded.
"""
import numpy as np

BLOCKS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3]}
BOTTLENECK = 4  # depth >= 50: blocks 1x1 (width) -> 3x3 (width, stride) -> 1x1 (4 x width)


class Weights:
    """Seeded parameters named like torchvision's state_dict (kept for cross-checks)."""

    def __init__(self, graph, seed=0):
        self.g, self.rng, self.arrays = graph, np.random.default_rng(seed), {}

    def conv(self, name, k, c, r):
        w = self.rng.standard_normal((k, c, r, r)) * np.sqrt(2.0 / (c * r * r))
        return self._param(name + ".weight", w)

    def bn(self, name, c):
        return [self._param(f"{name}.{p}", v) for p, v in (
            ("weight", 1 + 0.1 * self.rng.standard_normal(c)), ("bias", 0.1 * self.rng.standard_normal(c)),
            ("running_mean", 0.1 * self.rng.standard_normal(c)), ("running_var", 1 + 0.1 * self.rng.random(c)))]

    def linear(self, name, n, k):
        return (self._param(name + ".weight", self.rng.standard_normal((n, k)) / np.sqrt(k)),
                self._param(name + ".bias", 0.01 * self.rng.standard_normal(n)))

    def _param(self, name, value):
        self.arrays[name] = value
        return self.g.param(name, value)


def conv_bn(g, p, x, name, bn_name, k, r, stride, relu=True):
    c = x.shape[1] if g.layout == "NCHW" else x.shape[3]
    w = p.conv(name, k, c, r)
    if g.layout == "NHWC":  # frontend filters are KRSC for NHWC graphs
        w = g.transpose(w, [0, 2, 3, 1])
    y = g.batch_norm(g.conv2d(x, w, stride=stride, padding=r // 2), *p.bn(bn_name, k))
    return g.relu(y) if relu else y


def basic_block(g, p, x, name, k, stride):
    c = x.shape[1] if g.layout == "NCHW" else x.shape[3]
    y = conv_bn(g, p, x, f"{name}.conv1", f"{name}.bn1", k, 3, stride)
    y = conv_bn(g, p, y, f"{name}.conv2", f"{name}.bn2", k, 3, 1, relu=False)
    if stride != 1 or c != k:
        x = conv_bn(g, p, x, f"{name}.downsample.0", f"{name}.downsample.1", k, 1, stride, relu=False)
    return g.relu(y + x)


def bottleneck(g, p, x, name, width, stride):
    c = x.shape[1] if g.layout == "NCHW" else x.shape[3]
    y = conv_bn(g, p, x, f"{name}.conv1", f"{name}.bn1", width, 1, 1)
    y = conv_bn(g, p, y, f"{name}.conv2", f"{name}.bn2", width, 3, stride)
    y = conv_bn(g, p, y, f"{name}.conv3", f"{name}.bn3", width * BOTTLENECK, 1, 1, relu=False)
    if stride != 1 or c != width * BOTTLENECK:
        x = conv_bn(g, p, x, f"{name}.downsample.0", f"{name}.downsample.1", width * BOTTLENECK, 1, stride, relu=False)
    return g.relu(y + x)


def build(depth=18, batch=1, size=224, layout="NCHW", dtype="f32", classes=1000, seed=0, graph=None):
    """The network in an OpenPrim Graph, or in `graph` (any object with the frontend's methods: the GPU
    network benchmark replays it in PyTorch with the same seeded weights)."""
    if graph is None:
        from openprim.pyfrontend import Graph
        graph = Graph(name=f"resnet{depth}", layout=layout, dtype=dtype)
    g = graph
    p = Weights(g, seed)
    shape = (batch, 3, size, size) if layout == "NCHW" else (batch, size, size, 3)
    x = g.input("x", shape)
    y = conv_bn(g, p, x, "conv1", "bn1", 64, 7, 2)
    y = g.max_pool2d(y, 3, stride=2, padding=1)
    block = bottleneck if depth >= 50 else basic_block
    for i, (k, n) in enumerate(zip((64, 128, 256, 512), BLOCKS[depth])):
        for j in range(n):
            y = block(g, p, y, f"layer{i + 1}.{j}", k, 2 if (j == 0 and i > 0) else 1)
    y = g.flatten(g.global_avg_pool(y))
    y = g.linear(y, *p.linear("fc", classes, 512 * (BOTTLENECK if depth >= 50 else 1)))
    g.output(y)
    g.weights = p.arrays
    return g


def example_input(graph, seed=1):
    return np.random.default_rng(seed).standard_normal(graph.inputs[0].shape).astype(np.float32)

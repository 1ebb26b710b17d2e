"""MobileNetV2 (torchvision's layer layout) built with the OpenPrim frontend, random weights.

Inverted residual blocks: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 project, residual add when
the shape is kept. Batch norms are folded into the convolutions by prim-fuse.
"""

from openprim.pyfrontend import Graph
from resnet import Weights  # noqa: E402  (examples/ is on sys.path for model files)

# (expansion t, output channels c, repeats n, first stride s)
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def _channels(g, x):
    return x.shape[1] if g.layout == "NCHW" else x.shape[3]


def conv_bn(g, p, x, name, k, r, stride=1, groups=1, act=True):
    c = _channels(g, x)
    w = p.conv(f"{name}.0", k, c // groups, r)
    if g.layout == "NHWC":
        w = g.transpose(w, [0, 2, 3, 1])
    y = g.batch_norm(g.conv2d(x, w, stride=stride, padding=r // 2, groups=groups), *p.bn(f"{name}.1", k))
    return g.relu6(y) if act else y


def inverted_residual(g, p, x, name, t, k, stride):
    c = _channels(g, x)
    y, i = x, 0
    if t != 1:
        y = conv_bn(g, p, y, f"{name}.conv.{i}", c * t, 1)
        i += 1
    y = conv_bn(g, p, y, f"{name}.conv.{i}", c * t, 3, stride, groups=c * t)
    y = conv_bn(g, p, y, f"{name}.conv.{i + 1}", k, 1, act=False)
    return y + x if stride == 1 and c == k else y


def build(batch=1, size=224, layout="NCHW", dtype="f32", classes=1000, seed=0, width=1.0):
    g = Graph(name="mobilenetv2", layout=layout, dtype=dtype)
    p = Weights(g, seed)
    ch = lambda c: max(8, int(c * width + 4) // 8 * 8)  # noqa: E731  torchvision's _make_divisible
    x = g.input("x", (batch, 3, size, size) if layout == "NCHW" else (batch, size, size, 3))
    y = conv_bn(g, p, x, "features.0", ch(32), 3, 2)
    idx = 1
    for t, c, n, s in SETTINGS:
        for j in range(n):
            y = inverted_residual(g, p, y, f"features.{idx}", t, ch(c), s if j == 0 else 1)
            idx += 1
    y = conv_bn(g, p, y, f"features.{idx}", ch(1280) if width > 1 else 1280, 1)
    y = g.flatten(g.global_avg_pool(y))
    y = g.linear(y, *p.linear("classifier.1", classes, y.shape[1]))
    g.output(y)
    g.weights = p.arrays
    return g

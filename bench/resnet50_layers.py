"""The ResNet-50 convolution layers of shared/notes/h200-baselines.md as one model (batch 32, NHWC), for
`openprim tune` / `openprim explain` on GPU targets:

    openprim tune bench/resnet50_layers.py -D dtype=f16 --target nvvm:sm_90 --measure-on r50.tune
    python scripts/measure_tuning.py r50.tune r50.json          # on the GPU machine
    openprim db import r50.json && openprim explain bench/resnet50_layers.py -D dtype=f16 --target nvvm:sm_90
"""
import numpy as np

from openprim.pyfrontend import Graph

LAYERS = [(3, 224, 64, 7, 2), (64, 56, 64, 1, 1), (64, 56, 64, 3, 1), (64, 56, 256, 1, 1), (128, 28, 128, 3, 1),
          (256, 14, 256, 3, 1), (512, 7, 512, 3, 1), (1024, 14, 256, 1, 1)]   # C, H=W, K, R=S, stride


def build(dtype="f16", batch=32, layers=""):
    """Each layer on its own input (independent problems); layers="0,4" picks some."""
    g = Graph(name="resnet50_layers", layout="NHWC", dtype=dtype)
    rng = np.random.default_rng(0)
    picked = [LAYERS[int(i)] for i in str(layers).split(",") if i != ""] if layers != "" else LAYERS
    for i, (c, h, k, r, s) in enumerate(picked):
        x = g.input(f"x{i}", (batch, h, h, c))
        w = g.param(f"w{i}", rng.standard_normal((k, r, r, c)) * np.sqrt(2 / (c * r * r)))
        g.output(g.conv2d(x, w, stride=s, padding=r // 2))
    return g

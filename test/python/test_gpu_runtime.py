"""On a machine with an NVIDIA GPU (and MLIR): compile for nvvm and run in-process, against float64 numpy.

Marked `gpu`; skipped in one line where no GPU or driver is found. Machines with a GPU but no MLIR
run the whole op suite through scripts/gpu_replay.py instead (see helpers.TARGET).
"""
import numpy as np
import pytest

import openprim
import reference as ref
from helpers import assert_close
from openprim.pyfrontend import Graph
from openprim.runtime.device import DeviceError


@pytest.fixture(scope="module")
def sm():
    from openprim.runtime.cuda import CudaDevice
    try:
        return CudaDevice().arch()
    except DeviceError as e:
        pytest.skip(f"no NVIDIA GPU here: {e}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_conv_pool_softmax_on_gpu(sm, dtype, rng):
    target = f"nvvm:{'sm_90' if sm >= 'sm_90' else 'sm_80'}"
    x = rng.standard_normal((2, 9, 11, 6))
    w = rng.standard_normal((10, 3, 3, 6)) / 6
    g = Graph(layout="NHWC", dtype=dtype)
    y = g.relu(g.conv2d(g.input("x", x.shape), g.param("w", w), stride=2, padding=1))
    y = g.softmax(g.flatten(g.max_pool2d(y, 2)))
    g.output(y)
    out = openprim.compile(g, target=target)(x.astype(np.float32))
    xr, wr = ref.f64(x.astype(np.float32)), w.transpose(0, 3, 1, 2)
    want = ref.conv2d(ref.to_nchw(xr, "NHWC"), wr, stride=2, padding=1)
    want = ref.softmax(ref.max_pool2d(ref.relu(want), 2).transpose(0, 2, 3, 1).reshape(2, -1))
    assert_close(out, want, dtype, reduction=54)

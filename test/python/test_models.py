"""End-to-end: the models of examples/torch_models.py (ResNet-18, ResNet-50, MobileNetV2, a pre-LN
transformer block) through both importers (torch.export and ONNX export + openprim.pyfrontend.onnx), compiled
for the CPU and compared with PyTorch eager in float32 on the same random input.

Tolerance: 1e-4 of the output's largest magnitude; the two sides differ only in fp32 accumulation
order. Small images (64x64) keep CI time down: compile time does not depend on the input size, and
every layer still runs. ResNet-50 at 224x224 is the `slow` case (it still runs in CI). The importers
build f32 graphs only, so there are no fp16 variants.
"""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import openprim  # noqa: E402
from openprim.base.errors import OpenPrimError  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import torch_models  # noqa: E402

RTOL = 1e-4
CASES = {  # model: (batch, size): images are size x size, the transformer's sequence is size long
    "resnet18": (2, 64), "resnet50": (1, 64), "mobilenet_v2": (2, 64), "transformer_block": (2, 32),
}


def check_model(name, via, batch, size):
    x = torch_models.example_input(name, batch, size)
    with torch.no_grad():
        want = torch_models.get(name)(x).numpy()
    exe = openprim.compile(torch_models.build(name, batch, size, via), target="cpu")
    got = np.asarray(exe(x.numpy()))
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max())
    assert err <= RTOL * scale, f"{name} via {via}: max |err| {err:.3g}, max |ref| {scale:.3g}"


@pytest.mark.parametrize("via", ["torch", "onnx"])
@pytest.mark.parametrize("name", CASES)
def test_model(name, via):
    check_model(name, via, *CASES[name])


@pytest.mark.slow
@pytest.mark.parametrize("via", ["torch", "onnx"])
def test_resnet50_full_size(via):
    check_model("resnet50", via, 1, 224)


def test_build_errors():
    with pytest.raises(OpenPrimError, match="unknown model 'vgg'"):
        torch_models.build("vgg")
    with pytest.raises(OpenPrimError, match="via must be 'torch' or 'onnx'"):
        torch_models.build("resnet18", via="tflite")

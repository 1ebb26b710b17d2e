"""PyTorch models with torchvision's layer structure and names, random weights, for the importers.

`resnet18()`, `resnet50()`, `mobilenet_v2()` and `transformer_block()` are written out by hand
(torchvision is not installed alongside this torch) with the same modules and state_dict names as
torchvision's, so a downloaded state_dict would load into them. Weights are seeded, nothing is
downloaded; batch-norm statistics are random rather than the identity, so BN folding is exercised.
Each returns a module in eval() mode; `example_input(name)` gives a matching seeded input.

It is also an OpenPrim model file: `build()` returns the Graph of one model through either importer,

    openprim run examples/torch_models.py -D model=resnet50 -D via=onnx -D size=128

via=torch uses torch.export (openprim.pyfrontend.torch); via=onnx exports with PyTorch's
TorchScript exporter at opset 20 (the dynamo exporter needs onnxscript; opset 20 keeps GELU one
Gelu node instead of an Erf expansion) and imports the file with openprim.pyfrontend.onnx.import_model.
"""
import io
import warnings

import torch
from torch import nn
import torch.nn.functional as F

from openprim.base.errors import OpenPrimError

ONNX_OPSET = 20
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "transformer_block")


def randomize(model, seed, mode="fan_out"):
    """He-initialized convolutions (as torchvision does; mode: their fan_in or fan_out), other
    parameters as PyTorch initializes them, and batch norms with random affine parameters and running
    statistics near the identity."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu")
            elif isinstance(m, (nn.Linear, nn.LayerNorm)):
                m.reset_parameters()
            elif isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(1 + 0.2 * torch.randn(c))
                m.bias.copy_(0.1 * torch.randn(c))
                m.running_mean.copy_(0.2 * torch.randn(c))
                m.running_var.copy_(0.5 + torch.rand(c))
    return model.eval()


# ----------------------------------------------------------------------------- ResNet
def _conv_bn(cin, cout, k=1, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = _conv_bn(cin, width, 1, stride) if stride != 1 or cin != width else None

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride=1):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)  # stride on the 3x3 (torchvision v1.5)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, block, layers, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for i, (width, n) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for j in range(n):
                blocks.append(block(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = width * block.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(seed=0):
    return randomize(ResNet(BasicBlock, [2, 2, 2, 2]), seed)


def resnet50(seed=0):
    return randomize(ResNet(Bottleneck, [3, 4, 6, 3]), seed)


# ----------------------------------------------------------------------------- MobileNetV2
class ConvBNReLU6(nn.Sequential):  # torchvision's Conv2dNormActivation with ReLU6: indices 0, 1, 2
    def __init__(self, cin, cout, k=3, stride=1, groups=1):
        super().__init__(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers = [ConvBNReLU6(cin, hidden, 1)] if expand != 1 else []
        layers += [ConvBNReLU6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]  # expansion t, channels c, repeats n, first stride s

    def __init__(self, classes=1000):
        super().__init__()
        layers, cin = [ConvBNReLU6(3, 32, 3, 2)], 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(ConvBNReLU6(cin, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(seed=0):
    return randomize(MobileNetV2(), seed)


# ----------------------------------------------------------------------------- transformer block
class TransformerBlock(nn.Module):
    """Pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(x)). Attention is written out as
    matmul-softmax-matmul (not scaled_dot_product_attention) so both importers see the same ops."""

    def __init__(self, d_model, heads, ff):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d_model)
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, d_model) for _ in range(3))
        self.out_proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, ff), nn.GELU(), nn.Linear(ff, d_model))

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln_1(x)

        def split(y):  # [b, t, d] -> [b, heads, t, d / heads]
            return y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q_proj(h)), split(self.k_proj(h)), split(self.v_proj(h))
        att = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.out_proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln_2(x))


def transformer_block(d_model=256, heads=4, ff=1024, seed=0):
    return randomize(TransformerBlock(d_model, heads, ff), seed)


# ----------------------------------------------------------------------------- inputs and build()
def example_input(name, batch=1, size=None, seed=1):
    """A seeded input: [batch, 3, size, size] images (size 224 by default), or for the transformer
    block [batch, size, 256] tokens (64 by default)."""
    g = torch.Generator().manual_seed(seed)
    if name == "transformer_block":
        return torch.randn(batch, size or 64, 256, generator=g)
    return torch.randn(batch, 3, size or 224, size or 224, generator=g)


def get(name):
    """The named model (one of MODELS), seeded, in eval mode."""
    if name not in MODELS:
        raise OpenPrimError(f"unknown model '{name}'; choose one of {', '.join(MODELS)}")
    return globals()[name]()


def to_onnx(module, x):
    """The module as ONNX bytes (TorchScript exporter; the dynamo exporter needs onnxscript)."""
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False, opset_version=ONNX_OPSET,
                          input_names=["x"], output_names=["y"])
    return f.getvalue()


def build(model="resnet18", batch=1, size=None, via="torch"):
    """The OpenPrim Graph of `model` for a [batch, ...] input, through torch.export or ONNX."""
    module, x = get(model), example_input(model, batch, size)
    if via == "torch":
        from openprim.pyfrontend.torch import import_exported
        return import_exported(torch.export.export(module, (x,)))[0]
    if via == "onnx":
        from openprim.pyfrontend.onnx import import_model
        return import_model(to_onnx(module, x))
    raise OpenPrimError(f"via must be 'torch' or 'onnx', got '{via}'")

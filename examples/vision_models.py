"""MobileNetV3-Large, EfficientNet-B0, ResNeXt-50 32x4d and ConvNeXt-T as torch.nn modules, written out with
torchvision's structure and state_dict names (torchvision is not installed beside this torch), random weights.

They bring what ResNet and MobileNetV2 do not: squeeze-and-excitation (global average pool -> 1x1 conv ->
ReLU/SiLU -> 1x1 conv -> hardsigmoid/sigmoid -> channel scale), hardswish, 5x5 depthwise convolutions,
grouped 3x3 convolutions with 4 channels per group (ResNeXt), and ConvNeXt's 7x7 depthwise convolutions
followed by a channels-last LayerNorm, GELU MLP and per-channel layer scale. A downloaded torchvision
state_dict loads into them (same module tree and parameter shapes). Weights are seeded (He-initialized
convolutions and random batch-norm statistics, examples/torch_models.py's randomize); ConvNeXt's layer
scale is random around 0.5 instead of 1e-6, so that every block's output is visible in the result.

It is also an OpenPrim model file: `build()` returns the Graph of one model through either importer,

    openprim run examples/vision_models.py -D model=mobilenet_v3_large -D via=onnx -D size=128
"""
import os
import sys
from functools import partial

import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

from openprim.base.errors import OpenPrimError  # noqa: E402

MODELS = ("mobilenet_v3_large", "efficientnet_b0", "resnext50_32x4d", "convnext_tiny")


def _make_divisible(v, divisor=8, min_value=None):
    """torchvision's channel rounding: to a multiple of divisor, never below 90% of v."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class Conv2dNormActivation(nn.Sequential):
    """torchvision.ops.Conv2dNormActivation: conv (index 0), norm (1), activation (2, when given)."""

    def __init__(self, cin, cout, kernel_size=3, stride=1, padding=None, groups=1, norm_layer=nn.BatchNorm2d,
                 activation_layer=nn.ReLU, dilation=1, bias=None):
        padding = (kernel_size - 1) // 2 * dilation if padding is None else padding
        bias = norm_layer is None if bias is None else bias
        layers = [nn.Conv2d(cin, cout, kernel_size, stride, padding, dilation=dilation, groups=groups, bias=bias)]
        if norm_layer is not None:
            layers.append(norm_layer(cout))
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True) if activation_layer is not nn.GELU else activation_layer())
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: x * scale_activation(fc2(activation(fc1(avgpool(x)))))."""

    def __init__(self, cin, squeeze, activation=nn.ReLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(cin, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, cin, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class StochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth: drops whole residual branches in training, the identity in eval."""

    def __init__(self, p, mode="row"):
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = torch.empty([x.shape[0]] + [1] * (x.ndim - 1) if self.mode == "row" else [1] * x.ndim,
                           dtype=x.dtype, device=x.device).bernoulli_(1 - self.p)
        return x * keep / (1 - self.p)


# ----------------------------------------------------------------------------- MobileNetV3-Large
class InvertedResidualV3(nn.Module):
    """torchvision.models.mobilenetv3.InvertedResidual: expand 1x1, depthwise kxk, SE, project 1x1."""

    def __init__(self, cin, kernel, expanded, cout, use_se, use_hs, stride, dilation, norm_layer):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        act = nn.Hardswish if use_hs else nn.ReLU
        layers = []
        if expanded != cin:
            layers.append(Conv2dNormActivation(cin, expanded, 1, norm_layer=norm_layer, activation_layer=act))
        stride = 1 if dilation > 1 else stride
        layers.append(Conv2dNormActivation(expanded, expanded, kernel, stride, groups=expanded, dilation=dilation,
                                           norm_layer=norm_layer, activation_layer=act))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4, 8),
                                            scale_activation=nn.Hardsigmoid))
        layers.append(Conv2dNormActivation(expanded, cout, 1, norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y


class MobileNetV3(nn.Module):
    # input, kernel, expanded, output, SE, hardswish, stride, dilation (torchvision's "large" table)
    LARGE = [(16, 3, 16, 16, False, False, 1, 1), (16, 3, 64, 24, False, False, 2, 1),
             (24, 3, 72, 24, False, False, 1, 1), (24, 5, 72, 40, True, False, 2, 1),
             (40, 5, 120, 40, True, False, 1, 1), (40, 5, 120, 40, True, False, 1, 1),
             (40, 3, 240, 80, False, True, 2, 1), (80, 3, 200, 80, False, True, 1, 1),
             (80, 3, 184, 80, False, True, 1, 1), (80, 3, 184, 80, False, True, 1, 1),
             (80, 3, 480, 112, True, True, 1, 1), (112, 3, 672, 112, True, True, 1, 1),
             (112, 5, 672, 160, True, True, 2, 1), (160, 5, 960, 160, True, True, 1, 1),
             (160, 5, 960, 160, True, True, 1, 1)]

    def __init__(self, settings=LARGE, last_channel=1280, classes=1000):
        super().__init__()
        norm = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        layers = [Conv2dNormActivation(3, settings[0][0], 3, 2, norm_layer=norm, activation_layer=nn.Hardswish)]
        layers += [InvertedResidualV3(*s, norm_layer=norm) for s in settings]
        last_in = settings[-1][3]
        layers.append(Conv2dNormActivation(last_in, 6 * last_in, 1, norm_layer=norm, activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last_in, last_channel), nn.Hardswish(inplace=True),
                                        nn.Dropout(0.2, inplace=True), nn.Linear(last_channel, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _seeded(make, seed):
    """make() under a seeded RNG (the biases of the SE convolutions keep their construction-time init)."""
    torch.manual_seed(seed)
    return make()


def mobilenet_v3_large(seed=0):
    return torch_models.randomize(_seeded(MobileNetV3, seed), seed)


# ----------------------------------------------------------------------------- EfficientNet-B0
class MBConv(nn.Module):
    """torchvision.models.efficientnet.MBConv: expand 1x1, depthwise kxk, SE (SiLU, sigmoid), project 1x1."""

    def __init__(self, expand_ratio, kernel, stride, cin, cout, sd_prob, norm_layer=nn.BatchNorm2d):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = _make_divisible(cin * expand_ratio, 8)
        layers = []
        if expanded != cin:
            layers.append(Conv2dNormActivation(cin, expanded, 1, norm_layer=norm_layer, activation_layer=nn.SiLU))
        layers.append(Conv2dNormActivation(expanded, expanded, kernel, stride, groups=expanded, norm_layer=norm_layer,
                                           activation_layer=nn.SiLU))
        layers.append(SqueezeExcitation(expanded, max(1, cin // 4), activation=partial(nn.SiLU, inplace=True)))
        layers.append(Conv2dNormActivation(expanded, cout, 1, norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(sd_prob, "row")

    def forward(self, x):
        y = self.block(x)
        return self.stochastic_depth(y) + x if self.use_res_connect else y


class EfficientNet(nn.Module):
    # expand ratio, kernel, stride, input, output, layers (B0: width and depth multipliers 1.0)
    B0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
          (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    def __init__(self, settings=B0, dropout=0.2, stochastic_depth_prob=0.2, classes=1000):
        super().__init__()
        layers = [Conv2dNormActivation(3, settings[0][3], 3, 2, activation_layer=nn.SiLU)]
        total, done = sum(s[5] for s in settings), 0
        for expand, kernel, stride, cin, cout, n in settings:
            stage = []
            for i in range(n):
                stage.append(MBConv(expand, kernel, stride if i == 0 else 1, cin if i == 0 else cout, cout,
                                    stochastic_depth_prob * done / total))
                done += 1
            layers.append(nn.Sequential(*stage))
        last_in = settings[-1][4]
        layers.append(Conv2dNormActivation(last_in, 4 * last_in, 1, activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(4 * last_in, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def efficientnet_b0(seed=0):
    return torch_models.randomize(_seeded(EfficientNet, seed), seed)


# ----------------------------------------------------------------------------- ResNeXt-50 32x4d
class GroupedBottleneck(nn.Module):
    """torchvision.models.resnet.Bottleneck with groups: width = planes * base_width / 64 * groups."""
    expansion = 4

    def __init__(self, cin, planes, stride=1, groups=32, base_width=4):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
            if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNeXt(torch_models.ResNet):
    """torchvision's ResNet (stem, layer1-4, avgpool, fc) with 32x4d grouped bottlenecks."""

    def __init__(self, layers=(3, 4, 6, 3), classes=1000):
        super().__init__(GroupedBottleneck, layers, classes)


def resnext50_32x4d(seed=0):
    return torch_models.randomize(_seeded(ResNeXt, seed), seed)


# ----------------------------------------------------------------------------- ConvNeXt-T
class LayerNorm2d(nn.LayerNorm):
    """torchvision.models.convnext.LayerNorm2d: LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    """torchvision.ops.Permute."""

    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    """torchvision.models.convnext.CNBlock: x + layer_scale * (7x7 depthwise -> LayerNorm -> MLP)."""

    def __init__(self, dim, layer_scale, sd_prob):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True), Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim, bias=True), nn.GELU(),
            nn.Linear(4 * dim, dim, bias=True), Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(sd_prob, "row")

    def forward(self, x):
        return self.stochastic_depth(self.layer_scale * self.block(x)) + x


class ConvNeXt(nn.Module):
    TINY = [(96, 192, 3), (192, 384, 3), (384, 768, 9), (768, None, 3)]  # input, output, blocks

    def __init__(self, settings=TINY, stochastic_depth_prob=0.1, layer_scale=1e-6, classes=1000):
        super().__init__()
        norm = partial(LayerNorm2d, eps=1e-6)
        layers = [Conv2dNormActivation(3, settings[0][0], kernel_size=4, stride=4, padding=0, norm_layer=norm,
                                       activation_layer=None, bias=True)]
        total, done = sum(s[2] for s in settings), 0
        for cin, cout, n in settings:
            stage = []
            for _ in range(n):
                stage.append(CNBlock(cin, layer_scale, stochastic_depth_prob * done / (total - 1.0)))
                done += 1
            layers.append(nn.Sequential(*stage))
            if cout is not None:
                layers.append(nn.Sequential(norm(cin), nn.Conv2d(cin, cout, kernel_size=2, stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last = settings[-1][1] or settings[-1][0]
        self.classifier = nn.Sequential(norm(last), nn.Flatten(1), nn.Linear(last, classes))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


def convnext_tiny(seed=0):
    """ConvNeXt-T with random LayerNorm affine parameters and layer scales (see the module docstring)."""
    model = torch_models.randomize(_seeded(ConvNeXt, seed), seed, mode="fan_in")
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape))
            elif isinstance(m, CNBlock):
                m.layer_scale.copy_(0.5 + 0.1 * torch.randn(m.layer_scale.shape))
    return model


# ----------------------------------------------------------------------------- inputs and build()
def get(name):
    """The named model (one of MODELS), seeded, in eval mode."""
    if name not in MODELS:
        raise OpenPrimError(f"unknown model '{name}'; choose one of {', '.join(MODELS)}")
    return globals()[name]()


def example_input(batch=1, size=224, seed=1):
    """Seeded [batch, 3, size, size] images."""
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def build(model="mobilenet_v3_large", batch=1, size=224, via="torch"):
    """The OpenPrim Graph of `model` for a [batch, 3, size, size] input, through torch.export or ONNX."""
    module, x = get(model), example_input(int(batch), int(size))
    if via == "torch":
        from openprim.pyfrontend.torch import import_exported
        return import_exported(torch.export.export(module, (x,)))[0]
    if via == "onnx":
        from openprim.pyfrontend.onnx import import_model
        return import_model(torch_models.to_onnx(module, x))
    raise OpenPrimError(f"via must be 'torch' or 'onnx', got '{via}'")

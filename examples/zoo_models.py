"""Model-zoo networks as PyTorch modules, exported to old-style ONNX files, for the ONNX importer.

`resnet18`, `resnet50` and `mobilenet_v2` are examples/torch_models.py's networks (torchvision's structure;
`get(name)` builds them). `squeezenet1_1()`, `shufflenet_v2_x1_0()`, `densenet121()`, `googlenet()` and
`bert_layer()` are written
from their papers with torchvision's module structure and state_dict names (torchvision itself is not
installed alongside this torch), so a downloaded torchvision state_dict would load into the vision
models (`strict=True`; GoogLeNet without its auxiliary classifiers, as torchvision builds it for
inference). `bert_layer()` is one BERT-base encoder layer (hidden 768, 12 heads, FFN 3072, erf GELU,
post-LayerNorm with eps 1e-12) with the names of HuggingFace's `BertLayer`; its input is
[batch, 128, 768] hidden states (no attention mask).

GoogLeNet: torchvision's GoogLeNet has batch norm after every convolution and no local response
normalization; the original paper (and the Caffe bvlc_googlenet of the ONNX model zoo) has LRN after
the first max pool and after conv3. `googlenet()` is torchvision's network with the paper's two LRNs
added back (`lrn1`, `lrn2`: size 5, alpha 1e-4, beta 0.75, k 1, as in Caffe; they have no parameters,
so the state_dict names are torchvision's). They export as single ONNX `LRN` nodes, like the zoo's
files (PyTorch's own LocalResponseNorm would export as a 3-d AveragePool expansion).
`googlenet_nolrn()` is torchvision's variant unchanged. Like torchvision, each Inception block's
"5x5" branch uses a 3x3 convolution (torchvision's known deviation, kept for its weights), and
transform_input is off.

Weights are seeded, nothing is downloaded: convolutions He-initialized (fan_in; ShuffleNetV2
fan_out), linear layers and layer norms as PyTorch initializes them, batch norms near the identity
(weight 1 + 0.2 N(0,1), bias 0.1 N(0,1), running mean 0.2 N(0,1), running var 0.5 + U(0,1), as in
examples/torch_models.py). Every model is returned in eval() mode; `example_input(name, batch)` gives a
matching seeded input.

ONNX export (`to_onnx`) uses PyTorch's TorchScript exporter (dynamo=False). The vision models are
exported at opset 11, like the model zoo's older files (the importer converts them to opset 13);
ShuffleNetV2's chunk then exports as two Slice nodes per unit (their bounds computed by a
Shape -> Gather -> Add/Div/Mul chain that the importer folds), its final mean as ReduceMean. BERT is exported at
opset 20: LayerNorm is one LayerNormalization node only from opset 17 and GELU one Gelu node only
from opset 20; below that they expand into ReduceMean/Sub/Pow/Sqrt/Div and Erf chains.

It is also an OpenPrim model file: `build()` returns the Graph through the ONNX importer,

    openprim compile examples/zoo_models.py -D model=densenet121 -D batch=8 --timings
"""
import io
import math
import os
import warnings
from collections import OrderedDict

import torch
from torch import nn
import torch.nn.functional as F

from openprim.base.errors import OpenPrimError
import torch_models  # examples/ is on sys.path for model files
from torch_models import randomize

# resnet18, resnet50 and mobilenet_v2 are examples/torch_models.py's (torchvision structure, seeded as there)
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "shufflenet_v2_x1_0", "densenet121", "googlenet",
          "bert_layer")
TORCH_MODELS = ("resnet18", "resnet50", "mobilenet_v2")
EXTRA_MODELS = ("googlenet_nolrn",)  # torchvision's GoogLeNet without the paper's LRN
VISION_OPSET = 11
OPSETS = {"bert_layer": 20}  # per model, else VISION_OPSET
BERT_SEQ, BERT_HIDDEN = 128, 768


def _randomize(model, seed, mode="fan_in"):
    """torch_models.randomize; fan_in (as torchvision's DenseNet and SqueezeNet) keeps activations near
    unit scale through DenseNet's 120 layers, where batch norms with fixed statistics do not
    renormalize; ShuffleNetV2 takes fan_out (its channel split passes half the channels on unchanged,
    and fan_in lets the output grow to ~1e3)."""
    return randomize(model, seed, mode)


# ----------------------------------------------------------------------------- SqueezeNet 1.1
class Fire(nn.Module):
    """Squeeze 1x1, then expand with 1x1 and 3x3 in parallel, concatenated on channels."""

    def __init__(self, cin, squeeze, expand1x1, expand3x3):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes=1000):  # version 1.1: 3x3 stem with 64 channels, pools earlier
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, stride=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512, classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


def squeezenet1_1(seed=0):
    return _randomize(SqueezeNet(), seed)


# ----------------------------------------------------------------------------- ShuffleNetV2
def channel_shuffle(x, groups):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


def _depthwise(c, stride):
    return nn.Conv2d(c, c, 3, stride, 1, groups=c, bias=False)


class ShuffleUnit(nn.Module):  # torchvision's shufflenetv2.InvertedResidual
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(_depthwise(cin, stride), nn.BatchNorm2d(cin),
                                         nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half),
                                         nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
            _depthwise(half, stride), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats=(4, 8, 4), channels=(24, 116, 232, 464, 1024), classes=1000):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = channels[0]
        for name, n, cout in zip(("stage2", "stage3", "stage4"), repeats, channels[1:]):
            setattr(self, name, nn.Sequential(ShuffleUnit(cin, cout, 2),
                                              *[ShuffleUnit(cout, cout, 1) for _ in range(n - 1)]))
            cin = cout
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[-1], 1, bias=False), nn.BatchNorm2d(channels[-1]),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(channels[-1], classes)

    def forward(self, x):
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))  # torchvision's global pool: ReduceMean in ONNX


def shufflenet_v2_x1_0(seed=0):
    return _randomize(ShuffleNetV2(), seed, "fan_out")


# ----------------------------------------------------------------------------- DenseNet-121
class _DenseLayer(nn.Module):
    """BN-ReLU-conv1x1 (4 * growth channels), BN-ReLU-conv3x3 (growth channels) on the concatenation
    of all earlier feature maps of the block."""

    def __init__(self, cin, growth, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features):
        x = torch.cat(features, 1)
        return self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, n, cin, growth, bn_size):
        super().__init__()
        for i in range(n):
            self.add_module(f"denselayer{i + 1}", _DenseLayer(cin + i * growth, growth, bn_size))

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm = nn.BatchNorm2d(cin)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)


class DenseNet(nn.Module):
    def __init__(self, growth=32, blocks=(6, 12, 24, 16), init_features=64, bn_size=4, classes=1000):
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, init_features, 7, 2, 3, bias=False)), ("norm0", nn.BatchNorm2d(init_features)),
            ("relu0", nn.ReLU(inplace=True)), ("pool0", nn.MaxPool2d(3, 2, 1))]))
        c = init_features
        for i, n in enumerate(blocks):
            self.features.add_module(f"denseblock{i + 1}", _DenseBlock(n, c, growth, bn_size))
            c += n * growth
            if i != len(blocks) - 1:
                self.features.add_module(f"transition{i + 1}", _Transition(c, c // 2))
                c //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(c))
        self.classifier = nn.Linear(c, classes)

    def forward(self, x):
        x = F.relu(self.features(x))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


def densenet121(seed=0):
    return _randomize(DenseNet(), seed)


# ----------------------------------------------------------------------------- GoogLeNet
class _LRNFunction(torch.autograd.Function):
    """PyTorch's local_response_norm, exported as one ONNX LRN node (same formula: the sum of squares
    over `size` channels centred on c, scaled by alpha / size)."""

    @staticmethod
    def forward(ctx, x, size, alpha, beta, k):
        return F.local_response_norm(x, size, alpha, beta, k)

    @staticmethod
    def symbolic(g, x, size, alpha, beta, k):
        return g.op("LRN", x, size_i=size, alpha_f=alpha, beta_f=beta, bias_f=k)


class LRN(nn.Module):
    def __init__(self, size=5, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x):
        return _LRNFunction.apply(x, self.size, self.alpha, self.beta, self.k)


class BasicConv2d(nn.Module):
    def __init__(self, cin, cout, **kwargs):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    def __init__(self, cin, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
        super().__init__()
        self.branch1 = BasicConv2d(cin, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(BasicConv2d(cin, ch3x3red, kernel_size=1),
                                     BasicConv2d(ch3x3red, ch3x3, kernel_size=3, padding=1))
        self.branch3 = nn.Sequential(BasicConv2d(cin, ch5x5red, kernel_size=1),  # 3x3, as torchvision has it
                                     BasicConv2d(ch5x5red, ch5x5, kernel_size=3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), BasicConv2d(cin, pool_proj, kernel_size=1))

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    def __init__(self, lrn=True, classes=1000):
        super().__init__()
        self.conv1 = BasicConv2d(3, 64, kernel_size=7, stride=2, padding=3)
        self.maxpool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.lrn1 = LRN() if lrn else nn.Identity()
        self.conv2 = BasicConv2d(64, 64, kernel_size=1)
        self.conv3 = BasicConv2d(64, 192, kernel_size=3, padding=1)
        self.lrn2 = LRN() if lrn else nn.Identity()
        self.maxpool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.inception3a = Inception(192, 64, 96, 128, 16, 32, 32)
        self.inception3b = Inception(256, 128, 128, 192, 32, 96, 64)
        self.maxpool3 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.inception4b = Inception(512, 160, 112, 224, 24, 64, 64)
        self.inception4c = Inception(512, 128, 128, 256, 24, 64, 64)
        self.inception4d = Inception(512, 112, 144, 288, 32, 64, 64)
        self.inception4e = Inception(528, 256, 160, 320, 32, 128, 128)
        self.maxpool4 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.inception5a = Inception(832, 256, 160, 320, 32, 128, 128)
        self.inception5b = Inception(832, 384, 192, 384, 48, 128, 128)
        self.aux1 = self.aux2 = None  # torchvision drops the auxiliary classifiers for inference
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(1024, classes)

    def forward(self, x):
        x = self.lrn1(self.maxpool1(self.conv1(x)))
        x = self.maxpool2(self.lrn2(self.conv3(self.conv2(x))))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        for name in ("4a", "4b", "4c", "4d", "4e"):
            x = getattr(self, "inception" + name)(x)
        x = self.inception5b(self.inception5a(self.maxpool4(x)))
        return self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))


def googlenet(seed=0):
    return _randomize(GoogLeNet(lrn=True), seed)


def googlenet_nolrn(seed=0):
    return _randomize(GoogLeNet(lrn=False), seed)


# ----------------------------------------------------------------------------- BERT-base encoder layer
class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.dropout = nn.Dropout(0.1)

    def _split(self, y):  # [b, t, hidden] -> [b, heads, t, head_dim]
        b, t, _ = y.shape
        return y.view(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        ctx = torch.matmul(self.dropout(torch.softmax(scores, dim=-1)), v)
        b, _, t, _ = ctx.shape
        return ctx.permute(0, 2, 1, 3).contiguous().view(b, t, self.heads * self.head_dim)


class BertSelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, h, x):
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertSelfOutput(hidden)

    def forward(self, x):
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden, ff):
        super().__init__()
        self.dense = nn.Linear(hidden, ff)
        self.intermediate_act_fn = nn.GELU()  # erf form

    def forward(self, x):
        return self.intermediate_act_fn(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, ff, hidden):
        super().__init__()
        self.dense = nn.Linear(ff, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, h, x):
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertLayer(nn.Module):
    """Post-LN encoder layer: x = LN(x + attn(x)); x = LN(x + FFN(x)). No attention mask."""

    def __init__(self, hidden=768, heads=12, ff=3072):
        super().__init__()
        self.attention = BertAttention(hidden, heads)
        self.intermediate = BertIntermediate(hidden, ff)
        self.output = BertOutput(ff, hidden)

    def forward(self, x):
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


def bert_layer(seed=0):
    return _randomize(BertLayer(BERT_HIDDEN, 12, 3072), seed)


# ----------------------------------------------------------------------------- inputs, export, build()
def get(name):
    """The named model (one of MODELS or EXTRA_MODELS), seeded, in eval mode."""
    if name not in MODELS + EXTRA_MODELS:
        raise OpenPrimError(f"unknown model '{name}'; choose one of {', '.join(MODELS + EXTRA_MODELS)}")
    return torch_models.get(name) if name in TORCH_MODELS else globals()[name]()


def example_input(name, batch=1, seed=1):
    """A seeded input: [batch, 3, 224, 224] images, or [batch, 128, 768] hidden states for bert_layer."""
    g = torch.Generator().manual_seed(seed)
    if name == "bert_layer":
        return torch.randn(batch, BERT_SEQ, BERT_HIDDEN, generator=g)
    return torch.randn(batch, 3, 224, 224, generator=g)


def opset_of(name):
    return OPSETS.get(name, VISION_OPSET)


def to_onnx(name, batch=1, path=None, opset=None, module=None):
    """Export the named model for a [batch, ...] input with the TorchScript exporter (dynamo=False) at
    `opset` (default: 11 for the vision models, 20 for bert_layer). Writes `path` and returns it, or
    returns the file's bytes when path is None. `module`: an already built get(name), to reuse."""
    module = module if module is not None else get(name)
    f = io.BytesIO() if path is None else path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example_input(name, batch),), f, dynamo=False,
                          opset_version=opset or opset_of(name), input_names=["x"], output_names=["y"])
    return f.getvalue() if path is None else os.fspath(path)


def build(model="densenet121", batch=1, opset=0):
    """The OpenPrim Graph of `model` at [batch, ...], exported to ONNX and imported by
    openprim.pyfrontend.onnx.import_model (opset 0: the model's default)."""
    from openprim.pyfrontend.onnx import import_model
    return import_model(to_onnx(model, int(batch), None, int(opset) or None))

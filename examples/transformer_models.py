"""ViT-B/16, Swin-T and a BERT-base encoder layer as torch.nn modules, written out with the structure and
state_dict names of their reference implementations (torchvision's VisionTransformer and SwinTransformer,
Hugging Face's BertLayer; neither library is installed beside this torch), random weights.

They bring what the convolutional models do not: attention. ViT's encoder blocks are pre-LayerNorm with an
`nn.MultiheadAttention` (batch_first, one packed `in_proj_weight`), which in eval with need_weights=False
calls `F.scaled_dot_product_attention`; its input is a 16x16 patch convolution, flattened to tokens, with a
class token concatenated in front and a learned position embedding added; the head reads the class token.
BERT's layer is post-LayerNorm (eps 1e-12) with separate query/key/value projections and the attention of
Hugging Face's "sdpa" implementation (`F.scaled_dot_product_attention` on [batch, heads, seq, head_dim]
views, an optional additive [batch, 1, 1, seq] mask as `BertModel.get_extended_attention_mask` builds
it), erf GELU. `attn_implementation="eager"` is HF's other form: matmul, scale, mask add, softmax, matmul,
the pattern ONNX exporters write for both (examples/zoo_models.py's `bert_layer` is that layer).
Swin-T (Liu et al., 2021) attends within 7x7 windows of a channels-last map, spelled out as torchvision
does: matmul, the relative-position bias gathered from a table, on every other block a cyclic shift
(torch.roll) and the shifted windows' mask added through a 5-d view of the scores, softmax, matmul; patch
merging concatenates the four 2x2 phases.

torch.export keeps `scaled_dot_product_attention` whole and the torch importer maps it to `prim.attention`;
PyTorch's TorchScript ONNX exporter spells it as MatMul/Softmax/MatMul, which the ONNX importer's pattern
matcher (pyfrontend/attention.py) folds back into `prim.attention`. A downloaded torchvision or HF state_dict
loads into these modules (same module tree and parameter shapes).

Weights are seeded: linear and convolution layers as PyTorch initializes them, attention biases N(0, 0.1^2)
(torchvision zeroes them), LayerNorm weight 1 + 0.2 N(0, 1) and bias 0.1 N(0, 1), ViT's class token
N(0, 0.5^2) (torchvision: zeros) and position embedding N(0, 0.1^2) (torchvision: 0.02), so that every
parameter moves the output. Smaller configurations (fewer layers, smaller images, narrower layers) keep the
same structure: `vit_b_16(image_size=32, num_layers=2)` has 5 tokens.

It is also an OpenPrim model file: `build()` returns the Graph of one model through either importer,

    openprim run examples/transformer_models.py -D model=vit_b_16 -D via=onnx -D image_size=64 -D num_layers=2
    openprim explain examples/transformer_models.py -D model=bert_encoder_layer -D seq=128
"""
import io
import math
import os
import sys
import warnings
from collections import OrderedDict
from functools import partial

import torch
from torch import nn
import torch.nn.functional as F

from openprim.base.errors import OpenPrimError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vision_models import Permute  # noqa: E402 - torchvision.ops.Permute, as ConvNeXt uses it

MODELS = ("vit_b_16", "swin_t", "bert_encoder_layer")
ONNX_OPSET = 20  # LayerNormalization and Gelu are single nodes from opsets 17 and 20 on
_TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


# ----------------------------------------------------------------------------- ViT-B/16 (torchvision)
class MLPBlock(nn.Sequential):
    """torchvision.models.vision_transformer.MLPBlock: Linear (0), GELU (1), Dropout, Linear (3), Dropout."""

    def __init__(self, in_dim, mlp_dim, dropout=0.0):
        super().__init__(nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, in_dim),
                         nn.Dropout(dropout))


class EncoderBlock(nn.Module):
    """Pre-LN: x + attention(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, num_heads, hidden_dim, mlp_dim, dropout=0.0, attention_dropout=0.0,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, input):
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x) + input
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    """Position embedding, the blocks (`layers.encoder_layer_{i}`), a final LayerNorm."""

    def __init__(self, seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout=0.0, attention_dropout=0.0,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout, norm_layer))
            for i in range(num_layers)))
        self.ln = norm_layer(hidden_dim)

    def forward(self, input):
        return self.ln(self.layers(self.dropout(input + self.pos_embedding)))


class VisionTransformer(nn.Module):
    """torchvision.models.vision_transformer.VisionTransformer (no representation layer, no conv stem)."""

    def __init__(self, image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim, num_classes=1000):
        super().__init__()
        if image_size % patch_size:
            raise OpenPrimError(f"ViT: image_size {image_size} is not a multiple of the patch size {patch_size}")
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim)
        self.seq_length = seq_length
        self.heads = nn.Sequential(OrderedDict([("head", nn.Linear(hidden_dim, num_classes))]))

    def _process_input(self, x):
        n, _, h, w = x.shape
        p = self.patch_size
        x = self.conv_proj(x)  # [n, hidden, h / p, w / p]
        return x.reshape(n, self.hidden_dim, (h // p) * (w // p)).permute(0, 2, 1)

    def forward(self, x):
        x = self._process_input(x)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


def _randomize(model, seed):
    """The seeded weights of the module docstring."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                m.reset_parameters()
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape))
            elif isinstance(m, nn.MultiheadAttention):
                m._reset_parameters()
                m.in_proj_bias.copy_(0.1 * torch.randn(m.in_proj_bias.shape))
                m.out_proj.bias.copy_(0.1 * torch.randn(m.out_proj.bias.shape))
            elif isinstance(m, VisionTransformer):
                m.class_token.copy_(0.5 * torch.randn(m.class_token.shape))
            elif isinstance(m, Encoder):
                m.pos_embedding.copy_(0.1 * torch.randn(m.pos_embedding.shape))
    return model.eval()


def vit_b_16(seed=0, image_size=224, num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072, num_classes=1000):
    """ViT-B/16 (86.6M parameters at the defaults), seeded, in eval mode."""
    return _randomize(VisionTransformer(image_size, 16, num_layers, num_heads, hidden_dim, mlp_dim, num_classes), seed)


# ----------------------------------------------------------------------------- Swin-T (torchvision)
class ShiftedWindowAttention(nn.Module):
    def __init__(self, dim, window, shift, heads):
        super().__init__()
        self.window, self.shift, self.num_heads = window, shift, heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(0.02 * torch.randn((2 * window - 1) ** 2, heads))
        pos = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (pos[:, :, None] - pos[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("relative_position_index", (rel[..., 0] * (2 * window - 1) + rel[..., 1]).flatten())

    def forward(self, x):
        B, H, W, C = x.shape
        w, n, heads = self.window, self.window ** 2, self.num_heads
        shift = self.shift if w < H else 0      # one window covers the map: nothing to shift
        if shift:
            x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
        windows = (H // w) * (W // w)
        x = x.view(B, H // w, w, W // w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(B * windows, n, C)
        qkv = self.qkv(x).reshape(B * windows, n, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * (C // heads) ** -0.5, qkv[1], qkv[2]
        bias = self.relative_position_bias_table[self.relative_position_index].view(n, n, -1)
        attn = q.matmul(k.transpose(-2, -1)) + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        if shift:   # label the 3x3 regions the roll brought together; keys of another region get -100
            region = x.new_zeros((H, W))
            bounds = ((0, -w), (-w, -shift), (-shift, None))
            for label, (hs, ws) in enumerate((hs, ws) for hs in bounds for ws in bounds):
                region[hs[0]:hs[1], ws[0]:ws[1]] = label
            region = region.view(H // w, w, W // w, w).permute(0, 2, 1, 3).reshape(windows, n)
            mask = region.unsqueeze(1) - region.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
            attn = attn.view(B, windows, heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, heads, n, n)
        x = F.softmax(attn, dim=-1).matmul(v).transpose(1, 2).reshape(B * windows, n, C)
        x = self.proj(x).view(B, H // w, W // w, w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
        return torch.roll(x, shifts=(shift, shift), dims=(1, 2)) if shift else x


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, heads, window, shift, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = ShiftedWindowAttention(dim, window, shift, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = MLPBlock(dim, int(dim * mlp_ratio), 0.0)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x):
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x))


class SwinTransformer(nn.Module):
    """torchvision's SwinTransformer (v1): a 4x4 patch embedding, stages of blocks alternating plain and
    shifted windows, patch merging between stages, the head on the average of the last map."""

    def __init__(self, image_size=224, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24), window=7,
                 num_classes=1000):
        super().__init__()
        self.image_size = image_size
        layers = [nn.Sequential(nn.Conv2d(3, embed_dim, 4, 4), Permute([0, 2, 3, 1]), nn.LayerNorm(embed_dim))]
        for i, (depth, heads) in enumerate(zip(depths, num_heads)):
            dim = embed_dim * 2 ** i
            layers.append(nn.Sequential(*[SwinTransformerBlock(dim, heads, window, 0 if j % 2 == 0 else window // 2)
                                          for j in range(depth)]))
            if i < len(depths) - 1:
                layers.append(PatchMerging(dim))
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(embed_dim * 2 ** (len(depths) - 1))
        self.permute = Permute([0, 3, 1, 2])
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.head = nn.Linear(embed_dim * 2 ** (len(depths) - 1), num_classes)

    def forward(self, x):
        return self.head(self.flatten(self.avgpool(self.permute(self.norm(self.features(x))))))


def swin_t(seed=0, image_size=224, **config):
    """Swin-T (28.3M parameters at the defaults), seeded, in eval mode; config: SwinTransformer's (a
    smaller embed_dim, depths or num_heads keep the structure)."""
    torch.manual_seed(seed)
    model = SwinTransformer(image_size, **config)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, ShiftedWindowAttention):
                m.relative_position_bias_table.normal_(0, 0.5)   # torchvision: 0.02, which hides it
    return _randomize(model, seed + 1)


# ----------------------------------------------------------------------------- BERT-base layer (Hugging Face)
class BertSelfAttention(nn.Module):
    """Hugging Face's BertSelfAttention: "sdpa" (F.scaled_dot_product_attention) or "eager" (written out)."""

    def __init__(self, hidden, heads, attn_implementation="sdpa"):
        super().__init__()
        if hidden % heads:
            raise OpenPrimError(f"BERT: hidden size {hidden} is not a multiple of the {heads} attention heads")
        if attn_implementation not in ("sdpa", "eager"):
            raise OpenPrimError(f"BERT: attn_implementation must be 'sdpa' or 'eager', got '{attn_implementation}'")
        self.num_attention_heads, self.attention_head_size = heads, hidden // heads
        self.all_head_size = hidden
        self.attn_implementation = attn_implementation
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):  # [b, s, hidden] -> [b, heads, s, head_size]
        return x.view(x.shape[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        q, k, v = (self.transpose_for_scores(lin(hidden_states)) for lin in (self.query, self.key, self.value))
        if self.attn_implementation == "sdpa":
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask,
                                                 dropout_p=self.dropout.p if self.training else 0.0)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
            if attention_mask is not None:
                scores = scores + attention_mask
            ctx = torch.matmul(self.dropout(torch.softmax(scores, dim=-1)), v)
        b, s = hidden_states.shape[:2]
        return ctx.transpose(1, 2).reshape(b, s, self.all_head_size)


class BertSelfOutput(nn.Module):
    def __init__(self, hidden, eps=1e-12):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, hidden, heads, attn_implementation="sdpa"):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads, attn_implementation)
        self.output = BertSelfOutput(hidden)

    def forward(self, hidden_states, attention_mask=None):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)
        self.intermediate_act_fn = nn.GELU()  # "gelu": the erf form

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(BertSelfOutput):
    def __init__(self, intermediate, hidden, eps=1e-12):
        super().__init__(hidden, eps)
        self.dense = nn.Linear(intermediate, hidden)


class BertLayer(nn.Module):
    """Post-LN: a = LN(x + attention(x)); LN(a + FFN(a))."""

    def __init__(self, hidden=768, heads=12, intermediate=3072, attn_implementation="sdpa"):
        super().__init__()
        self.attention = BertAttention(hidden, heads, attn_implementation)
        self.intermediate = BertIntermediate(hidden, intermediate)
        self.output = BertOutput(intermediate, hidden)

    def forward(self, hidden_states, attention_mask=None):
        a = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(a), a)


def bert_encoder_layer(seed=0, hidden=768, heads=12, intermediate=3072, attn_implementation="sdpa"):
    """One BERT-base encoder layer (7.1M parameters at the defaults), seeded, in eval mode."""
    return _randomize(BertLayer(hidden, heads, intermediate, attn_implementation), seed)


def extended_attention_mask(lengths, seq, dtype=torch.float32):
    """HF's additive mask for padded batches: [batch, 1, 1, seq], 0 on the first lengths[b] tokens of batch
    element b, the dtype's minimum on the padding (BertModel.get_extended_attention_mask)."""
    keep = torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]
    return torch.where(keep, 0.0, torch.finfo(dtype).min).to(dtype)[:, None, None, :]


# ----------------------------------------------------------------------------- inputs, export, build()
def get(name, **config):
    """The named model (one of MODELS), seeded, in eval mode; config: its constructor's keyword arguments."""
    if name not in MODELS:
        raise OpenPrimError(f"unknown model '{name}'; choose one of {', '.join(MODELS)}")
    return globals()[name](**config)


def example_input(model, batch=1, seq=128, seed=1, lengths=None, dtype=torch.float32):
    """Seeded inputs for `model` (a module of this file), as a tuple: ([batch, 3, size, size] images) for ViT,
    ([batch, seq, hidden] hidden states,) for BERT, plus the extended attention mask when `lengths` (the
    unpadded length of each batch element) is given; in `dtype`."""
    g = torch.Generator().manual_seed(seed)
    if isinstance(model, (VisionTransformer, SwinTransformer)):
        return (torch.randn(batch, 3, model.image_size, model.image_size, generator=g).to(dtype),)
    if not isinstance(model, BertLayer):
        raise OpenPrimError(f"example_input: expected a model of examples/transformer_models.py, got "
                            f"{type(model).__name__}")
    x = torch.randn(batch, seq, model.attention.self.all_head_size, generator=g).to(dtype)
    if lengths is None:
        return (x,)
    if len(lengths) != batch or not all(0 < n <= seq for n in lengths):
        raise OpenPrimError(f"example_input: lengths {list(lengths)} must be {batch} values in 1..{seq}")
    return x, extended_attention_mask(lengths, seq, dtype)


def to_onnx(module, inputs, opset=ONNX_OPSET):
    """The module as ONNX bytes (PyTorch's TorchScript exporter; its dynamo exporter needs onnxscript)."""
    f = io.BytesIO()
    names = ["x", "attention_mask"][:len(inputs)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(inputs), f, dynamo=False, opset_version=opset, input_names=names,
                          output_names=["y"])
    return f.getvalue()


def build(model="vit_b_16", batch=1, via="torch", image_size=224, num_layers=12, seq=128, masked=0, dtype="f32"):
    """The OpenPrim Graph of `model` through torch.export or ONNX: ViT at [batch, 3, image_size, image_size]
    with num_layers blocks, BERT's layer at [batch, seq, 768] (masked=1: with the extended attention mask
    input, the last batch element padded to half the sequence); dtype f16/bf16: the module and its inputs
    converted (.half(), .bfloat16()), which the importers import as an f16/bf16 Graph."""
    batch, seq = int(batch), int(seq)
    if dtype not in _TORCH_DTYPES:
        raise OpenPrimError(f"dtype must be one of {', '.join(_TORCH_DTYPES)}, got '{dtype}'")
    if model in ("vit_b_16", "swin_t"):
        module = get(model, image_size=int(image_size), **({"num_layers": int(num_layers)} if model == "vit_b_16" else {}))
        inputs = example_input(module, batch, dtype=_TORCH_DTYPES[dtype])
    else:
        module = get(model)
        lengths = [seq] * (batch - 1) + [max(1, seq // 2)] if int(masked) else None
        inputs = example_input(module, batch, seq, lengths=lengths, dtype=_TORCH_DTYPES[dtype])
    module = module.to(_TORCH_DTYPES[dtype])
    if via == "torch":
        from openprim.pyfrontend.torch import import_exported
        return import_exported(torch.export.export(module, inputs))[0]
    if via == "onnx":
        from openprim.pyfrontend.onnx import import_model
        return import_model(to_onnx(module, inputs))
    raise OpenPrimError(f"via must be 'torch' or 'onnx', got '{via}'")

"""Coverage: models as a user brings them (Hugging Face transformers, timm), through both importers, on the CPU.

    python bench/coverage.py [--models vit,bert] [--rounds 3] [--timeout 1200] [--output bench/coverage_cpu.md]
    python bench/coverage.py --suite timm          # timm's models: bench/coverage_timm_cpu.md
    python bench/coverage.py --list
    python bench/coverage.py --models swin,bert --update     # run these again, keep the other rows of the JSON

Suite `hf` (the default):
The models are transformers' own classes built from their Config classes with small but real configs
(hidden sizes 32-256, 1-2 layers per stage, images of 64-96 pixels) and seeded random weights: nothing
is downloaded (MODELS below: each model's class and config). Inputs: vision, one seeded image
[1, 3, S, S] (`pixel_values`); text, `input_ids` int64 [2, 32] and an `attention_mask` whose second row
ends in 8 padding tokens. The module compiled is the model's first output (logits, or the last hidden
state of a bare encoder), in eval mode.

Suite `timm`: timm.create_model(name, pretrained=False, num_classes=10) at the model's own default input
size (its pretrained_cfg), one seeded image, seeded random weights (TIMM below). timm needs torchvision,
whose PyPI build does not import beside the CPU build of torch that the test extras pin: run this suite in
a venv of its own (`pip install torch==2.14.1 torchvision==0.29.1 timm transformers onnx onnxruntime -e .`).

For each model and each import path,
  torch:  torch.export.export -> openprim.pyfrontend.torch.import_exported -> openprim.compile (CPU)
  onnx:   torch.onnx.export (the TorchScript exporter, dynamo=False: the dynamo one needs onnxscript; opset 20)
          -> openprim.pyfrontend.onnx.import_model -> openprim.compile (CPU)
it records whether the model imports (else the first error, one line, and what `openprim torch-check` /
`openprim onnx-check` list as unmapped), compiles, and matches eager PyTorch (max |y - y_eager| /
max(1, max |y_eager|) <= 1e-4); the compile seconds (import + openprim.compile without the compile cache;
the export is not included); and the CPU time, median ms, of OpenPrim (each path), ONNX Runtime (the
exported file, CPU provider, all cores) and PyTorch eager (inference_mode, all cores), measured in the
same process in interleaved rounds (bench/zoo_cpu.py's `interleaved`).

Each model runs in a subprocess of its own, so a crash, a hang (--timeout) or a failure is that model's
row and the run goes on. The report is rewritten after every model: bench/coverage_cpu.md (a markdown
table, the command, the machine) and bench/coverage_cpu.json (every field, every error).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPORTS = {"hf": os.path.join(HERE, "coverage_cpu.md"), "timm": os.path.join(HERE, "coverage_timm_cpu.md")}
TOLERANCE = 1e-4
CONDITIONING = 4          # a model whose float32 eager output is itself off float64's by e: tolerance 4 e
VACUOUS = 1e-6            # an eager output below this everywhere: no comparison
ONNX_OPSET = 20
TEXT_SHAPE = (2, 32)      # batch, tokens
PADDING = 8               # padding tokens at the end of the second row

# name -> (kind, transformers model class, config class, config keyword arguments,
#          image size (vision), samples (audio) or frames (speech))
_VIT = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, num_labels=10)
_STAGES = dict(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], num_labels=10)
_TEXT = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
             max_position_embeddings=128)
MODELS = {
    # ----- vision
    "vit": ("vision", "ViTForImageClassification", "ViTConfig", dict(image_size=64, patch_size=8, **_VIT), 64),
    "deit": ("vision", "DeiTForImageClassification", "DeiTConfig", dict(image_size=64, patch_size=8, **_VIT), 64),
    "beit": ("vision", "BeitForImageClassification", "BeitConfig",
             dict(image_size=64, patch_size=8, use_relative_position_bias=True, **_VIT), 64),
    "data2vec_vision": ("vision", "Data2VecVisionForImageClassification", "Data2VecVisionConfig",
                        dict(image_size=64, patch_size=8, use_relative_position_bias=True, **_VIT), 64),
    "dinov2": ("vision", "Dinov2ForImageClassification", "Dinov2Config",
               dict(image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    mlp_ratio=2, num_labels=10), 64),
    "swin": ("vision", "SwinForImageClassification", "SwinConfig",
             dict(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4,
                  num_labels=10), 64),
    "swinv2": ("vision", "Swinv2ForImageClassification", "Swinv2Config",
               dict(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4,
                    num_labels=10), 64),
    "convnext": ("vision", "ConvNextForImageClassification", "ConvNextConfig", dict(**_STAGES), 64),
    "convnextv2": ("vision", "ConvNextV2ForImageClassification", "ConvNextV2Config", dict(**_STAGES), 64),
    "resnet": ("vision", "ResNetForImageClassification", "ResNetConfig",
               dict(embedding_size=32, hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1], layer_type="bottleneck",
                    num_labels=10), 96),
    "regnet": ("vision", "RegNetForImageClassification", "RegNetConfig",
               dict(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], groups_width=16,
                    num_labels=10), 96),
    "bit": ("vision", "BitForImageClassification", "BitConfig",
            dict(embedding_size=32, hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1], num_groups=8,
                 num_labels=10), 96),
    "efficientnet": ("vision", "EfficientNetForImageClassification", "EfficientNetConfig",
                     dict(image_size=96, width_coefficient=0.5, depth_coefficient=0.5, hidden_dim=640,
                          num_labels=10), 96),
    "mobilenet_v1": ("vision", "MobileNetV1ForImageClassification", "MobileNetV1Config",
                     dict(image_size=96, depth_multiplier=0.5, num_labels=10), 96),
    "mobilenet_v2": ("vision", "MobileNetV2ForImageClassification", "MobileNetV2Config",
                     dict(image_size=96, depth_multiplier=0.5, num_labels=10), 96),
    "mobilevit": ("vision", "MobileViTForImageClassification", "MobileViTConfig",
                  dict(image_size=64, hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320],
                       num_labels=10), 64),
    "mobilevitv2": ("vision", "MobileViTV2ForImageClassification", "MobileViTV2Config",
                    dict(image_size=64, width_multiplier=0.5, num_labels=10), 64),
    "poolformer": ("vision", "PoolFormerForImageClassification", "PoolFormerConfig", dict(**_STAGES), 64),
    "levit": ("vision", "LevitForImageClassification", "LevitConfig",
              dict(image_size=64, hidden_sizes=[64, 128, 192], num_attention_heads=[2, 4, 6], depths=[1, 1, 1],
                   key_dim=[16, 16, 16], num_labels=10), 64),
    "segformer": ("vision", "SegformerForImageClassification", "SegformerConfig",
                  dict(image_size=64, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                       num_attention_heads=[1, 2, 2, 4], decoder_hidden_size=64, num_labels=10), 64),
    "cvt": ("vision", "CvtForImageClassification", "CvtConfig",
            dict(embed_dim=[32, 64, 128], depth=[1, 2, 3], num_heads=[1, 2, 4], num_labels=10), 64),   # depth[i] > i
    "focalnet": ("vision", "FocalNetForImageClassification", "FocalNetConfig",
                 dict(image_size=64, embed_dim=32, depths=[1, 1, 2, 1], num_labels=10), 64),
    "pvt": ("vision", "PvtForImageClassification", "PvtConfig",
            dict(image_size=64, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 4, 8],
                 num_labels=10), 64),
    "pvt_v2": ("vision", "PvtV2ForImageClassification", "PvtV2Config",
               dict(image_size=64, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                    num_attention_heads=[1, 2, 4, 8], num_labels=10), 64),
    "swiftformer": ("vision", "SwiftFormerForImageClassification", "SwiftFormerConfig",
                    dict(depths=[1, 1, 2, 1], embed_dims=[24, 48, 96, 128], num_labels=10), 64),
    # ----- text: input_ids int64 + attention_mask with padding
    "bert": ("text", "BertModel", "BertConfig", dict(_TEXT), None),
    "roberta": ("text", "RobertaModel", "RobertaConfig", dict(_TEXT), None),
    "xlm_roberta": ("text", "XLMRobertaModel", "XLMRobertaConfig", dict(_TEXT), None),
    "distilbert": ("text", "DistilBertModel", "DistilBertConfig",
                   dict(vocab_size=1000, dim=128, n_layers=2, n_heads=4, hidden_dim=256, max_position_embeddings=128),
                   None),
    "albert": ("text", "AlbertModel", "AlbertConfig", dict(_TEXT, embedding_size=64), None),
    "electra": ("text", "ElectraModel", "ElectraConfig", dict(_TEXT, embedding_size=64), None),
    "mobilebert": ("text", "MobileBertModel", "MobileBertConfig",
                   dict(_TEXT, embedding_size=64, intra_bottleneck_size=64, true_hidden_size=64,
                        num_feedforward_networks=2), None),
    "deberta": ("text", "DebertaModel", "DebertaConfig", dict(_TEXT), None),
    "deberta_v2": ("text", "DebertaV2Model", "DebertaV2Config", dict(_TEXT), None),
    "mpnet": ("text", "MPNetModel", "MPNetConfig", dict(_TEXT), None),
    "convbert": ("text", "ConvBertModel", "ConvBertConfig", dict(_TEXT, embedding_size=128), None),
    "squeezebert": ("text", "SqueezeBertModel", "SqueezeBertConfig", dict(_TEXT, embedding_size=128), None),
    "gpt2": ("text", "GPT2Model", "GPT2Config",
             dict(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=128, use_cache=False), None),
    "t5_encoder": ("text", "T5EncoderModel", "T5Config",
                   dict(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4, use_cache=False),
                   None),
    "llama": ("text", "LlamaModel", "LlamaConfig",
              dict(_TEXT, num_key_value_heads=2, use_cache=False), None),
    "qwen2": ("text", "Qwen2Model", "Qwen2Config", dict(_TEXT, num_key_value_heads=2, use_cache=False), None),
    "opt": ("text", "OPTModel", "OPTConfig",
            dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, ffn_dim=256,
                 max_position_embeddings=128, word_embed_proj_dim=128, use_cache=False), None),
    "mistral": ("text", "MistralModel", "MistralConfig",
                dict(_TEXT, num_key_value_heads=2, sliding_window=16, use_cache=False), None),
    "phi3": ("text", "Phi3Model", "Phi3Config", dict(_TEXT, num_key_value_heads=2, pad_token_id=0, use_cache=False),
             None),
    "gemma": ("text", "GemmaModel", "GemmaConfig", dict(_TEXT, num_key_value_heads=1, head_dim=32, use_cache=False),
              None),
    "gpt_neox": ("text", "GPTNeoXModel", "GPTNeoXConfig", dict(_TEXT, rotary_pct=0.25, use_cache=False), None),
    "bloom": ("text", "BloomModel", "BloomConfig", dict(vocab_size=1000, hidden_size=128, n_layer=2, n_head=4,
                                                        use_cache=False), None),
    "falcon": ("text", "FalconModel", "FalconConfig",
               dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    new_decoder_architecture=True, num_kv_heads=2, use_cache=False), None),
    "clip_text": ("text", "CLIPTextModel", "CLIPTextConfig",
                  dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=256, max_position_embeddings=64), None),
    "funnel": ("text", "FunnelModel", "FunnelConfig",
               dict(vocab_size=1000, d_model=128, n_head=4, d_head=32, d_inner=256, block_sizes=[1, 1],
                    num_decoder_layers=1), None),
    "xlnet": ("text", "XLNetModel", "XLNetConfig", dict(vocab_size=1000, d_model=128, n_layer=2, n_head=4,
                                                        d_inner=256, use_mems_eval=False), None),
    # ----- encoder-decoder (input_ids, attention_mask, decoder_input_ids; the decoder's last hidden state)
    "bart": ("seq2seq", "BartModel", "BartConfig",
             dict(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=128,
                  use_cache=False), None),
    "t5": ("seq2seq", "T5Model", "T5Config",
           dict(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4, use_cache=False), None),
    # ----- vision, more
    "clip_vision": ("vision", "CLIPVisionModel", "CLIPVisionConfig",
                    dict(image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=256), 64),
    "yolos": ("vision", "YolosForObjectDetection", "YolosConfig",
              dict(image_size=[64, 64], patch_size=8, num_detection_tokens=10, **_VIT), 64),
    "dpt": ("vision", "DPTForSemanticSegmentation", "DPTConfig",
            dict(image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                 intermediate_size=256, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[16, 32, 64, 128],
                 fusion_hidden_size=32, head_in_index=-1, use_auxiliary_head=False, num_labels=10), 64),
    # ----- audio: a waveform [1, 4000] (wav2vec2's convolutional feature encoder), or log-mel features
    "wav2vec2": ("audio", "Wav2Vec2Model", "Wav2Vec2Config",
                 dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                      conv_dim=(64, 64, 64), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4), 4000),
    "hubert": ("audio", "HubertModel", "HubertConfig",
               dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                    conv_dim=(64, 64, 64), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                    num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4), 4000),
    "whisper_encoder": ("speech", "WhisperForAudioClassification", "WhisperConfig",
                        dict(vocab_size=1000, d_model=128, encoder_layers=2, encoder_attention_heads=4,
                             decoder_layers=1, decoder_attention_heads=4, encoder_ffn_dim=256,
                             decoder_ffn_dim=256, num_mel_bins=80, max_source_positions=100, num_labels=10), 200),
}
HF_MODELS = list(MODELS)
# timm model name -> create_model keyword arguments: small variants of the families timm adds beyond
# transformers (NAS nets, re-parameterized and hybrid nets, DLA/DPN/HRNet/Inception, NFNets, MLP mixers).
TIMM = {
    "resnet50d": {}, "resnext26ts": {}, "seresnext26d_32x4d": {}, "regnety_004": {}, "cspresnet50": {},
    "res2net50_14w_8s": {}, "resnest14d": {}, "dla34": {}, "dpn68": {}, "hrnet_w18_small": {},
    "inception_v3": {}, "ese_vovnet19b_dw": {}, "selecsls42b": {}, "tresnet_m": {}, "nf_resnet26": {},
    "dm_nfnet_f0": {}, "repvgg_a0": {}, "mobileone_s0": {}, "efficientnet_b0": {}, "efficientnetv2_rw_t": {},
    "mixnet_s": {}, "mobilenetv3_large_100": {}, "mobilenetv4_conv_small": {}, "ghostnet_100": {},
    "rexnet_100": {}, "lcnet_050": {}, "mnasnet_100": {}, "hardcorenas_a": {}, "fastvit_t8": {},
    "efficientformer_l1": {}, "efficientformerv2_s0": {}, "levit_128s": {}, "edgenext_xx_small": {},
    "repvit_m1": {}, "tiny_vit_5m_224": {}, "efficientvit_b0": {}, "efficientvit_m0": {},
    "coat_lite_tiny": {}, "twins_svt_small": {}, "xcit_nano_12_p16_224": {}, "crossvit_tiny_240": {},
    "cait_xxs24_224": {}, "mvitv2_tiny": {}, "gcvit_xxtiny": {}, "maxvit_rmlp_pico_rw_256": {},
    "eva02_tiny_patch14_224": {}, "vit_relpos_small_patch16_224": {}, "resmlp_12_224": {}, "gmlp_ti16_224": {},
    "inception_next_tiny": {}, "hgnetv2_b0": {}, "starnet_s1": {}, "sequencer2d_s": {},
}
MODELS.update({name: ("timm", name, None, kwargs, None) for name, kwargs in TIMM.items()})
SUITES = {"hf": HF_MODELS, "timm": list(TIMM)}
PATHS = ("torch", "onnx")


# ----------------------------------------------------------------------------- one model (in a subprocess)
def build(name):
    """(module returning the model's first output, [(input name, tensor)]) for MODELS[name]."""
    import torch
    kind, model_cls, config_cls, kwargs, size = MODELS[name]
    torch.manual_seed(0)
    if kind == "timm":
        import timm
        model = timm.create_model(model_cls, pretrained=False, num_classes=10, **kwargs).eval()
        g = torch.Generator().manual_seed(4)
        with torch.no_grad():   # zero-initialized weights (ResMLP's and gMLP's heads) random: else y = 0
            for prm in model.parameters():
                if prm.dim() >= 2 and not prm.any():
                    prm.normal_(0.0, 0.02, generator=g)
        config, size = None, tuple(model.pretrained_cfg["input_size"][1:])
    else:
        import transformers
        config = getattr(transformers, config_cls)(**kwargs)
        model = getattr(transformers, model_cls)(config).eval()

    def example(seed, batch=1):
        g = torch.Generator().manual_seed(seed)
        if kind in ("vision", "timm"):
            hw = size if isinstance(size, tuple) else (size, size)
            return [("pixel_values", torch.randn(batch, 3, *hw, generator=g))]
        if kind == "audio":
            return [("input_values", torch.randn(batch, size, generator=g))]
        if kind == "speech":
            return [("input_features", torch.randn(batch, config.num_mel_bins, size, generator=g))]
        ids = torch.randint(3, 1000, TEXT_SHAPE, generator=g)
        mask = torch.ones(TEXT_SHAPE, dtype=torch.int64)
        mask[1, -PADDING:] = 0
        ids[1, -PADDING:] = getattr(config, "pad_token_id", None) or 0
        if kind == "seq2seq":
            return [("input_ids", ids), ("attention_mask", mask),
                    ("decoder_input_ids", torch.randint(3, 1000, (TEXT_SHAPE[0], TEXT_SHAPE[1] // 2), generator=g))]
        return [("input_ids", ids), ("attention_mask", mask)]
    inputs = example(1)
    # Batch norms as in a trained model: random affine parameters near (1, 0) (transformers initializes some
    # to ~0.02, EfficientNet's for one) and the statistics of other inputs. With a fresh model's, the
    # activations of a deep eval-mode network fade to ~1e-30 and any output would match.
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if norms:
        g = torch.Generator().manual_seed(3)
        for m in norms:
            m.reset_running_stats()
            m.momentum = None           # a cumulative average: after one batch, that batch's statistics
            if m.affine:
                with torch.no_grad():
                    m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
        model.train()
        with torch.no_grad():
            batch = example(2, batch=4)         # 4 images: a BatchNorm1d of [N, C] needs N > 1
            model(*(t for _, t in batch)) if kind == "timm" else model(**dict(batch))
        model.eval()

    class FirstOutput(torch.nn.Module):
        """The model's first output (logits, or the last hidden state), its inputs named as the model's."""

        def __init__(self):
            super().__init__()
            self.model = model

    class Vision(FirstOutput):
        def forward(self, pixel_values):
            return self.model(pixel_values=pixel_values)[0]

    class Timm(FirstOutput):
        def forward(self, pixel_values):
            return self.model(pixel_values)

    class Audio(FirstOutput):
        def forward(self, input_values):
            return self.model(input_values=input_values)[0]

    class Speech(FirstOutput):
        def forward(self, input_features):
            return self.model(input_features=input_features)[0]

    class Text(FirstOutput):
        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]

    class Seq2Seq(FirstOutput):
        def forward(self, input_ids, attention_mask, decoder_input_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              decoder_input_ids=decoder_input_ids)[0]
    wrapper = {"vision": Vision, "timm": Timm, "audio": Audio, "speech": Speech, "text": Text, "seq2seq": Seq2Seq}[kind]
    return wrapper().eval(), inputs


def _float64_output(module, args):
    """The model's output in float64 (a copy of it, float inputs widened), or None where it does not run
    in float64."""
    import copy
    import torch
    try:
        with torch.inference_mode():
            return copy.deepcopy(module).double()(*(a.double() if a.is_floating_point() else a
                                                    for a in args)).numpy()
    except Exception:  # noqa: BLE001
        return None


def _err(y, ref) -> float:
    """max |y - ref| / max(1, max |ref|)."""
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if y.shape != ref.shape:
        raise ValueError(f"output shape {y.shape}, eager's {ref.shape}")
    return float(np.abs(y - ref).max() / max(1.0, float(np.abs(ref).max())))


def _feeds(names, arrays: dict, what):
    """The arrays in the order of `names` (an executable's or a session's inputs)."""
    missing = [n for n in names if n not in arrays]
    if missing:
        raise ValueError(f"{what} takes inputs {names}; {missing} not among {list(arrays)}")
    return [arrays[n] for n in names]


def run_one(name, rounds, budget):
    """The row of one model: {field: value} (see the module's docstring)."""
    import torch
    import openprim
    from zoo_cpu import interleaved, one_line
    from openprim.pyfrontend.onnx import import_model
    from openprim.pyfrontend.onnx.importer import unsupported_nodes
    from openprim.pyfrontend.torch import check, import_exported

    torch.set_num_threads(os.cpu_count())
    kind, model_cls, config_cls, kwargs, size = MODELS[name]
    row = {"model": name, "kind": kind, "class": model_cls,
           "config": {k: v for k, v in kwargs.items()}, "inputs": None}
    module, inputs = build(name)
    args = tuple(t for _, t in inputs)
    arrays = {n: t.numpy() for n, t in inputs}
    row["inputs"] = ", ".join(f"{n} {str(t.dtype).removeprefix('torch.')}[{','.join(map(str, t.shape))}]"
                              for n, t in inputs)
    row["params"] = sum(p.numel() for p in module.parameters())
    with torch.inference_mode():
        ref = module(*args).numpy()
    row["output"] = list(ref.shape)
    row["ref_max"] = float(np.abs(ref).max())
    exact = _float64_output(module, args)
    if exact is not None:   # every float32 runner measured against the model in float64
        row["eager_err"], ref = _err(ref, exact), exact
    tolerance = row["tolerance"] = max(TOLERANCE, CONDITIONING * row.get("eager_err", 0.0))
    fns = {}

    def eager():
        with torch.inference_mode():
            return module(*args)
    fns["torch"] = eager

    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, f"{name}.onnx")
        for path in PATHS:
            r = row[path] = {"import": "no", "compile": "no", "match": "no"}
            try:   # 1. export
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if path == "torch":
                        ep = torch.export.export(module, args)
                    else:
                        torch.onnx.export(module, args, onnx_path, dynamo=False, opset_version=ONNX_OPSET,
                                          input_names=[n for n, _ in inputs], output_names=["y"])
                r["export_s"] = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001
                r["error"] = "export: " + one_line(e)
                continue
            try:   # 2. import
                t0 = time.perf_counter()
                g = import_exported(ep)[0] if path == "torch" else import_model(onnx_path)
                r["import_s"] = time.perf_counter() - t0
                r["import"] = "yes"
            except Exception as e:  # noqa: BLE001
                r["error"] = "import: " + one_line(e)
                try:   # what torch-check / onnx-check list
                    if path == "torch":
                        rep = check.check_program(ep, run_import=False)
                        r["unmapped"] = {op: len(nodes) for op, nodes in rep.unmapped.items()}
                    else:
                        r["unmapped"] = {op: len(nodes) for op, nodes in unsupported_nodes(onnx_path).items()}
                except Exception as e2:  # noqa: BLE001
                    r["unmapped_error"] = one_line(e2)
                continue
            try:   # 3. compile
                t0 = time.perf_counter()
                exe = openprim.compile(g, target="cpu", cache=False)
                r["compile_s"] = r["import_s"] + time.perf_counter() - t0
                r["compile"] = "yes"
                feeds = _feeds(exe.input_names, arrays, "the executable")
                r["err"] = _err(exe(*feeds), ref)
                r["match"] = "yes" if r["err"] <= tolerance else "no"
                if r["match"] == "no":
                    r["error"] = f"output differs: max |err| / max(1, |ref|) = {r['err']:.2e} > {tolerance:.1e}"
                elif row["ref_max"] < VACUOUS:
                    r["match"] = "vacuous"
                    r["error"] = f"eager's output is ~0 (max |y| {row['ref_max']:.1e}): the comparison says nothing"
                fns["ours_" + path] = (lambda exe=exe, feeds=feeds: exe(*feeds))
            except Exception as e:  # noqa: BLE001
                r["error"] = ("run: " if r["compile"] == "yes" else "compile: ") + one_line(e)
        if os.path.exists(onnx_path) and "export_s" in row["onnx"]:
            try:
                import onnxruntime as ort
                so = ort.SessionOptions()
                so.intra_op_num_threads = os.cpu_count()
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
                names = [i.name for i in sess.get_inputs()]
                feed = dict(zip(names, _feeds(names, arrays, "ONNX Runtime's session")))
                row["ort_err"] = _err(sess.run(None, feed)[0], ref)
                fns["ort"] = lambda: sess.run(None, feed)
            except Exception as e:  # noqa: BLE001
                row["ort_error"] = one_line(e)
        for k, times in interleaved(fns, rounds, budget).items():
            row[k + "_ms"] = 1e3 * float(np.median(times))
    return row


# ----------------------------------------------------------------------------- report
def _cell(r, path):
    p = r.get(path) or {}
    if not p:
        return "—", "—", "—", "—"
    imp = "yes" if p.get("import") == "yes" else "no: " + _short(p.get("error", "?"))
    comp = "—" if p.get("import") != "yes" else ("yes" if p.get("compile") == "yes" else "no: " + _short(p.get("error", "?")))
    # where the onnx path misses the tolerance, ONNX Runtime's own error on the same file beside it
    peer = f"; ONNX Runtime {r['ort_err']:.1e}" if path == "onnx" and p.get("match") == "no" and "ort_err" in r else ""
    match = "—" if p.get("compile") != "yes" else (
        f"{ {'yes': 'yes', 'no': '**no**'}.get(p.get('match'), p.get('match'))} ({p['err']:.1e}{peer})" if "err" in p
        else "no: " + _short(p.get("error", "?")))
    secs = f"{p['compile_s']:.1f}" if "compile_s" in p else "—"
    return imp, comp, match, secs


def _short(text, limit=110):
    text = text.replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _ms(v):
    return "—" if v is None else f"{v:.2f}"


_SUITE_TEXT = {
    "hf": ("Hugging Face models",
           "- models: transformers' classes built from their Config classes (small configs, seeded random weights, "
           "nothing downloaded; `MODELS` in bench/coverage.py and `config` in coverage_cpu.json give each). Vision: "
           "one image [1, 3, S, S]; audio: a waveform [1, 4000] (or log-mel features [1, 80, 200]); text: "
           "input_ids int64 [2, 32] and attention_mask, the second row padded (8 tokens); encoder-decoder: also "
           "decoder_input_ids [2, 16]. The output compared is the model's first (logits, or the last hidden state)."),
    "timm": ("timm models",
             "- models: `timm.create_model(name, pretrained=False, num_classes=10)` (seeded random weights, nothing "
             "downloaded; `TIMM` in bench/coverage.py), one seeded image at the model's default input size "
             "(pretrained_cfg), batch norms given trained-like statistics; the output compared is the logits."),
}


def report(rows, meta) -> str:
    title, models = _SUITE_TEXT[meta.get("suite", "hf")]
    L = [f"# Coverage: {title} through both importers, on the CPU", "",
         f"- date: {meta['date']}",
         f"- command: `{meta['command']}`" + "".join(f"; rows rerun {u}" for u in meta.get("updates", [])),
         f"- machine: {meta['cpu']}, {meta['cores']} cores; load average {meta['load0']} at the start, "
         f"{meta.get('load1', '?')} at the end",
         f"- versions: openprim {meta['openprim']} (git {meta['git']}), torch {meta['torch']}, transformers "
         f"{meta['transformers']}" + (f", timm {meta['timm']}" if meta.get("timm") else "") +
         f", onnxruntime {meta['ort']}, onnx {meta['onnx']}, numpy {np.__version__}, "
         f"Python {platform.python_version()}",
         models,
         "- paths: **torch** = torch.export.export -> import_exported -> openprim.compile; **onnx** = torch.onnx.export "
         f"(TorchScript exporter, opset {ONNX_OPSET}) -> import_model -> openprim.compile. *compile s* is import + "
         "openprim.compile (no compile cache), not the export.",
         f"- *matches*: max |y - y64| / max(1, max |y64|) <= max({TOLERANCE:g}, {CONDITIONING} e) (the value in "
         "brackets), y64 the model's output in float64 and e float32 eager PyTorch's own error so measured (a "
         "network whose float32 output is ill-conditioned, random weights with trained-like batch statistics, "
         "gets the tolerance its own float32 run needs).",
         f"- times: median ms of {meta['rounds']} interleaved rounds in one process per model (bench/zoo_cpu.py's "
         f"`interleaved`); OpenPrim (OpenMP, all cores), ONNX Runtime on the exported file (CPU provider, "
         f"intra_op_num_threads={meta['cores']}, all graph optimizations), PyTorch eager (inference_mode, "
         f"{meta['cores']} threads)."]
    loads = [float(meta[k].split()[0]) for k in ("load0", "load1") if meta.get(k)]
    if loads and max(loads) > meta["cores"]:
        L.append(f"- **the machine was shared**: a load average up to {max(loads):.1f} on {meta['cores']} cores (other "
                 "processes ran beside this one), so the times are indicative only: a runner whose threads wait on "
                 "each other (PyTorch eager most) slows down by several times when it loses a core. The coverage "
                 "columns (imports, compiles, matches) do not depend on it.")
    L.append("")
    n = len(rows)
    for path in PATHS:
        got = Counter()
        for r in rows:
            p = r.get(path) or {}
            got["import"] += p.get("import") == "yes"
            got["compile"] += p.get("compile") == "yes"
            got["match"] += p.get("match") == "yes"
        L.append(f"- **{path}**: {got['import']} of {n} models import, {got['compile']} compile, "
                 f"{got['match']} match eager.")
    L += ["", "## Results", "",
          "| model | kind | torch: imports | compiles | matches | compile s | onnx: imports | compiles | matches | "
          "compile s | OpenPrim ms (torch / onnx) | ORT ms | eager ms |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "failed" in r:
            L.append(f"| {r['model']} | {r.get('kind', '?')} | {_short(r['failed'])} |" + " — |" * 10)
            continue
        t, o = _cell(r, "torch"), _cell(r, "onnx")
        ours = f"{_ms(r.get('ours_torch_ms'))} / {_ms(r.get('ours_onnx_ms'))}"
        L.append(f"| {r['model']} | {r['kind']} | " + " | ".join(t) + " | " + " | ".join(o) +
                 f" | {ours} | {_ms(r.get('ort_ms'))} | {_ms(r.get('torch_ms'))} |")
    L += ["", "## Models", "", "Batch norms have random affine parameters near (1, 0) and hold the statistics of other seeded "
          "inputs, as a trained model's would (with a fresh model's, a deep network's output is ~1e-30 and any "
          f"output would match; an eager output below {VACUOUS:g} everywhere is marked *vacuous*, not a match).", "",
          "| model | class | params | inputs | output | max \\|y_eager\\| | float32 eager's own error e |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "failed" in r:
            L.append(f"| {r['model']} | {MODELS[r['model']][1]} | — | — | — | — | — |")
            continue
        e = f"{r['eager_err']:.1e}" if "eager_err" in r else "— (compared with float32 eager)"
        L.append(f"| {r['model']} | {r['class']} ({MODELS[r['model']][2] or 'timm'}) | {r['params'] / 1e6:.2f} M | "
                 f"{r['inputs']} | {r['output']} | {r.get('ref_max', float('nan')):.3g} | {e} |")
    L += ["", "## Unmapped ops (what `openprim torch-check` / `openprim onnx-check` list where the import failed)", "",
          "| model | torch: unmapped aten ops (nodes) | onnx: unmapped op types (nodes) |", "|---|---|---|"]
    need = {path: Counter() for path in PATHS}
    for r in rows:
        cells = []
        for path in PATHS:
            p = r.get(path) or {}
            if "unmapped" in p:
                need[path].update(p["unmapped"].keys())
                cells.append(", ".join(f"{op} ({k})" for op, k in sorted(p["unmapped"].items())) or
                             "none (the import refused something else)")
            elif "unmapped_error" in p:
                cells.append("? " + _short(p["unmapped_error"]))
            else:
                cells.append("—")
        if any(c != "—" for c in cells):
            L.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    for path in PATHS:
        if need[path]:
            L += ["", f"Models that need each unmapped op, {path} path: " +
                  ", ".join(f"{op} {k}" for op, k in need[path].most_common()) + "."]
    L += ["", "## Errors (first error of each path, one line)", ""]
    for r in rows:
        if "failed" in r:
            L.append(f"- {r['model']}: {r['failed']}")
            continue
        for path in PATHS:
            if (r.get(path) or {}).get("error"):
                L.append(f"- {r['model']} ({path}): `{r[path]['error']}`")
        if r.get("ort_error"):
            L.append(f"- {r['model']} (ONNX Runtime): `{r['ort_error']}`")
    L.append("")
    return "\n".join(L)


def _ordered(rows, kept):
    """The rows measured now and those kept from an earlier run, in the order of MODELS."""
    by_name = {**kept, **{r["model"]: r for r in rows}}
    return [by_name[name] for name in MODELS if name in by_name]


def _meta(args):
    import onnx
    import onnxruntime
    import torch
    import transformers
    import openprim
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    root = os.path.dirname(HERE)
    git = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "-uno"], capture_output=True,
                           text=True).stdout.splitlines()
    if dirty:   # others' uncommitted work is part of what ran
        git += f" + uncommitted changes to {len(dirty)} files"
    return {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "cpu": cpu,
            "cores": os.cpu_count(), "load0": " ".join(open("/proc/loadavg").read().split()[:3]),
            "openprim": openprim.__version__, "git": git, "torch": torch.__version__,
            "transformers": transformers.__version__, "ort": onnxruntime.__version__, "onnx": onnx.__version__,
            "rounds": args.rounds, "suite": args.suite,
            **({"timm": __import__("timm").__version__} if args.suite == "timm" else {}),
            "command": "python bench/coverage.py" + "".join(" " + a for a in sys.argv[1:])}


def write(rows, meta, output, measured=True):
    if measured:
        meta["load1"] = " ".join(open("/proc/loadavg").read().split()[:3])
    text = report(rows, meta)
    if output:
        with open(output, "w") as f:
            f.write(text)
        with open(os.path.splitext(output)[0] + ".json", "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=SUITES, default="hf", help="Hugging Face (hf) or timm models")
    ap.add_argument("--models", help="comma-separated names (--list; default: the suite's)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (median kept)")
    ap.add_argument("--budget", type=float, default=0.3, help="seconds per runner per round")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per model (its subprocess)")
    ap.add_argument("--output", help="the markdown report; the JSON beside it ('' : stdout only; default: the "
                                     "suite's, bench/coverage_cpu.md or coverage_timm_cpu.md)")
    ap.add_argument("--update", action="store_true",
                    help="keep the rows of the other models from the JSON beside --output (rerun only --models)")
    ap.add_argument("--rewrite", action="store_true", help="only rewrite the markdown from the JSON beside --output")
    ap.add_argument("--one", help=argparse.SUPPRESS)        # run one model here, its row as JSON to --row
    ap.add_argument("--row", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.output is None:
        args.output = REPORTS[args.suite]
    if args.list:
        for name, (kind, cls, config, kwargs, size) in MODELS.items():
            print(f"{name:16} {kind:6} {cls} {config}({', '.join(f'{k}={v}' for k, v in kwargs.items())})")
        return
    if args.one:
        row = run_one(args.one, args.rounds, args.budget)
        with open(args.row, "w") as f:
            json.dump(row, f, default=str)
        return
    if args.rewrite:
        with open(os.path.splitext(args.output)[0] + ".json") as f:
            old = json.load(f)
        print(write(old["rows"], old["meta"], args.output, measured=False))
        return
    names = args.models.split(",") if args.models else SUITES[args.suite]
    unknown = [n for n in names if n not in SUITES[args.suite]]
    if unknown:
        sys.exit(f"unknown model(s) {unknown} in suite {args.suite}; choose from {', '.join(SUITES[args.suite])}")
    meta, rows, t_start = _meta(args), [], time.perf_counter()
    kept = {}
    json_path = os.path.splitext(args.output)[0] + ".json" if args.output else ""
    if args.update and os.path.exists(json_path):
        with open(json_path) as f:
            old = json.load(f)
        kept = {r["model"]: r for r in old["rows"] if r["model"] not in names}
        meta, new_meta = old["meta"], meta
        meta.setdefault("updates", []).append(f"{new_meta['date']}: `{new_meta['command']}` (git {new_meta['git']})")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            t0 = time.perf_counter()
            out = os.path.join(tmp, name + ".json")
            cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--row", out, "--rounds",
                   str(args.rounds), "--budget", str(args.budget)]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                if p.returncode == 0 and os.path.exists(out):
                    with open(out) as f:
                        rows.append(json.load(f))
                else:
                    last = [ln for ln in p.stderr.splitlines() if ln.strip()][-1:] or [f"exit status {p.returncode}"]
                    rows.append({"model": name, "kind": MODELS[name][0],
                                 "failed": f"the model's process failed (exit {p.returncode}): {last[0].strip()}"})
            except subprocess.TimeoutExpired:
                rows.append({"model": name, "kind": MODELS[name][0], "failed": f"timed out after {args.timeout} s"})
            r = rows[-1]
            print(f"{name}: {time.perf_counter() - t0:.0f} s; torch {(r.get('torch') or {}).get('match', '-')}, "
                  f"onnx {(r.get('onnx') or {}).get('match', '-')}; {r.get('failed', '')}", file=sys.stderr,
                  flush=True)
            write(_ordered(rows, kept), meta, args.output)
    text = write(_ordered(rows, kept), meta, args.output)
    print(text + f"\nWhole run: {time.perf_counter() - t_start:.0f} s.")


if __name__ == "__main__":
    main()

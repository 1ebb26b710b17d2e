"""ViT-B/16, Swin-T and the BERT-base encoder layer of examples/transformer_models.py, ONNX's Attention op,
and `openprim explain` on attention.

1. The models have torchvision's and Hugging Face's parameter counts and state_dict names.
2. Both through torch.export (the torch importer) and through PyTorch's ONNX exporter (the ONNX importer), in
   small configurations (ViT: 64x64 images, 17 tokens, 2 blocks; Swin: 56x56, 4 blocks, shifted windows;
   BERT: 37 tokens, a padded batch element):
   every attention is one prim.attention in the imported graph (nn.MultiheadAttention's and HF's
   scaled_dot_product_attention, and its ONNX spelling with the scale split over Q and K^T), and the compiled
   model matches PyTorch eager in float32 on the CPU (1e-4 of the output's largest magnitude). BERT's eager
   attention at opset 17 (Erf-form GELU) too.
3. ONNX Attention (opsets 23-25): 4-d and 3-d forms, GQA and MQA, causal, scale, float and boolean masks, masks
   narrower than the keys, against onnx's reference implementation on random data with odd lengths; what it
   does not map is one OpenPrimError naming the node.
4. explain lists the attention with its solvers: decomposed on the CPU (and for f32 on sm_90), the flash
   kernel for f16 on sm_90.

    python -m pytest test/python/test_transformer_models.py -q
"""
from __future__ import annotations

import collections
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import TARGET

import openprim
from openprim.base.errors import OpenPrimError

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from openprim.pyfrontend.onnx import import_model, importer  # noqa: E402
from openprim.pyfrontend.torch import import_exported  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
CPU_ONLY = pytest.mark.skipif(TARGET != "cpu", reason="models against PyTorch eager on the CPU")
RTOL = 1e-4


@pytest.fixture(scope="module")
def tm():
    sys.path.insert(0, EXAMPLES)
    import transformer_models
    return transformer_models


def _ops(graph) -> collections.Counter:
    return collections.Counter(n.op for n in graph.nodes if n.op != "constant")


# ----------------------------------------------------------------------------- 1. names
def test_reference_names(tm):
    """Parameter counts of torchvision's vit_b_16 and HF's bert-base BertLayer, and their state_dict names."""
    vit, bert = tm.vit_b_16(), tm.bert_encoder_layer()
    assert sum(p.numel() for p in vit.parameters()) == 86567656
    assert sum(p.numel() for p in bert.parameters()) == 7087872
    vit_names = set(vit.state_dict())
    for name in ("conv_proj.weight", "class_token", "encoder.pos_embedding", "encoder.ln.bias", "heads.head.weight",
                 *(f"encoder.layers.encoder_layer_11.{p}" for p in (
                     "ln_1.weight", "self_attention.in_proj_weight", "self_attention.in_proj_bias",
                     "self_attention.out_proj.weight", "ln_2.bias", "mlp.0.weight", "mlp.3.bias"))):
        assert name in vit_names, name
    assert vit.encoder.pos_embedding.shape == (1, 197, 768)
    swin = tm.swin_t()
    assert sum(p.numel() for p in swin.parameters()) == 28288354
    for name in ("features.0.0.weight", "features.0.2.bias", "features.1.1.attn.relative_position_bias_table",
                 "features.1.1.attn.relative_position_index", "features.5.5.attn.qkv.weight", "features.6.reduction.weight",
                 "features.7.1.mlp.3.bias", "norm.weight", "head.bias"):
        assert name in swin.state_dict(), name
    assert set(bert.state_dict()) == {f"{m}.{p}" for m in (
        "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
        "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm") for p in ("weight", "bias")}


def test_build_errors(tm):
    with pytest.raises(OpenPrimError, match="unknown model 'gpt2'"):
        tm.build("gpt2")
    with pytest.raises(OpenPrimError, match="via must be 'torch' or 'onnx'"):
        tm.build("bert_encoder_layer", seq=5, via="tflite")
    with pytest.raises(OpenPrimError, match="not a multiple of the patch size"):
        tm.vit_b_16(image_size=40)


# ----------------------------------------------------------------------------- 2. the models through both importers
def _check(module, inputs, graph, attentions):
    """Every attention of the imported graph is one prim.attention; the compiled graph matches eager."""
    ops = _ops(graph)
    assert ops["attention"] == attentions and ops["softmax"] == 0, ops
    with torch.no_grad():
        want = module(*inputs).numpy()
    got = np.asarray(openprim.compile(graph)(*(x.numpy() for x in inputs)))
    assert got.shape == want.shape
    scale, err = float(np.abs(want).max()), float(np.abs(got - want).max())
    assert err <= RTOL * scale, f"max |err| {err:.3g}, max |ref| {scale:.3g}"


def _import(tm, module, inputs, via, opset=None):
    if via == "torch":
        return import_exported(torch.export.export(module, inputs))[0]
    return import_model(tm.to_onnx(module, inputs, **({"opset": opset} if opset else {})))


@CPU_ONLY
@pytest.mark.parametrize("via", ["torch", "onnx"])
def test_vit(tm, via):
    """ViT-B/16's structure (768 wide, 12 heads) at 64x64 (4x4 patches and the class token: 17 tokens), 2 blocks."""
    module = tm.vit_b_16(image_size=64, num_layers=2)
    inputs = tm.example_input(module, batch=2)
    graph = _import(tm, module, inputs, via)
    assert _ops(graph)["concat"] == 1  # the class token in front of the patches
    _check(module, inputs, graph, attentions=2)


@CPU_ONLY
@pytest.mark.parametrize("via", ["torch", "onnx"])
def test_bert_layer(tm, via):
    """BERT-base's layer on 37 tokens, the second batch element padded after 20 (HF's additive mask input)."""
    module = tm.bert_encoder_layer()
    inputs = tm.example_input(module, batch=2, seq=37, lengths=[37, 20])
    _check(module, inputs, _import(tm, module, inputs, via), attentions=1)


@CPU_ONLY
@pytest.mark.parametrize("via", ["torch", "onnx"])
def test_swin(tm, via):
    """Swin-T's structure at 56x56 (a 14x14 map: 4 windows of 7x7, then one), 64 wide, 2 + 2 blocks: every
    window attention is one prim.attention, the shifted one with the relative-position bias and the windows'
    mask summed into one constant [windows, heads, 49, 49] tiling the batch, and the model matches eager."""
    module = tm.swin_t(image_size=56, embed_dim=64, depths=(2, 2), num_heads=(2, 4), num_classes=10)
    inputs = tm.example_input(module, batch=2)
    graph = _import(tm, module, inputs, via)
    masks = sorted(tuple(n.operands[3].shape) for n in graph.nodes if n.op == "attention")
    assert masks == [(1, 2, 49, 49), (1, 4, 49, 49), (1, 4, 49, 49), (4, 2, 49, 49)]   # shifted: tiles 4 windows
    _check(module, inputs, graph, attentions=4)


class _WindowsMaskInput(torch.nn.Module):
    """The shifted windows' 5-d mask add with the mask an input (not a constant): no single 4-d mask exists."""

    def forward(self, q, k, v, mask):
        s = q.matmul(k.transpose(-2, -1)) * 0.25
        s = (s.view(2, 4, 3, 9, 9) + mask.unsqueeze(1).unsqueeze(0)).view(-1, 3, 9, 9)
        return torch.softmax(s, -1).matmul(v)


@CPU_ONLY
def test_windows_mask_input_stays_unmatched(rng):
    module = _WindowsMaskInput()
    inputs = tuple(torch.tensor(rng.standard_normal(s), dtype=torch.float32)
                   for s in ((8, 3, 9, 16), (8, 3, 9, 16), (8, 3, 9, 16), (4, 9, 9)))
    graph = import_exported(torch.export.export(module, inputs))[0]
    ops = _ops(graph)
    assert ops["attention"] == 0 and ops["softmax"] == 1 and ops["matmul"] == 2, ops
    assert all(n.result.ndim == 4 for n in graph.nodes if n.op == "matmul")   # view + bmm + view merged
    want = module(*inputs).numpy()
    got = np.asarray(openprim.compile(graph)(*(x.numpy() for x in inputs)))
    assert np.abs(got - want).max() <= RTOL * np.abs(want).max()


@CPU_ONLY
def test_bert_eager_attention_opset17(tm):
    """HF's eager attention (matmul, divide, mask add, softmax, matmul) at opset 17, where GELU is exported
    as its Erf expansion: still one attention, and the Erf form computes erf GELU."""
    module = tm.bert_encoder_layer(hidden=96, heads=3, intermediate=160, attn_implementation="eager")
    inputs = tm.example_input(module, batch=1, seq=19, lengths=[13])
    graph = _import(tm, module, inputs, "onnx", opset=17)
    assert _ops(graph)["erf"] == 1 and _ops(graph)["gelu"] == 0
    _check(module, inputs, graph, attentions=1)


# ----------------------------------------------------------------------------- 3. ONNX Attention
def _attention_model(shapes, opset=23, mask=None, outputs=1, extra_inputs=(), **attrs):
    """One Attention node over graph inputs Q, K, V (shapes: theirs), `mask` a constant (initializer) or a
    shape (a graph input named attn_mask)."""
    names = ["Q", "K", "V"]
    inits, ins = [], list(zip(names, shapes))
    if mask is not None:
        names.append("attn_mask")
        if isinstance(mask, np.ndarray):
            inits.append(onnx.numpy_helper.from_array(mask, "attn_mask"))
        else:
            ins.append(("attn_mask", mask))
    names += list(extra_inputs)
    ins += [(n, shapes[1]) for n in extra_inputs]
    outs = ["Y", "present_key", "present_value", "qk"][:outputs]
    node = helper.make_node("Attention", names, outs, name="attn", **attrs)
    graph = helper.make_graph([node], "attention", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                    for n, s in ins],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [f"{o}{i}" for i in range(len(shapes[0]))])
                               for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


ATTENTION_CASES = {  # shapes of Q, K, V; the mask (a constant, a shape: an input, or None); attributes
    "4d": (((2, 3, 13, 16), (2, 3, 21, 16), (2, 3, 21, 16)), None, {}),
    "4d_causal_float_mask": (((1, 2, 19, 24), (1, 2, 19, 24), (1, 2, 19, 24)), "float", {"is_causal": 1}),
    "4d_scale_mask_input": (((2, 2, 11, 8), (2, 2, 17, 8), (2, 2, 17, 8)), (2, 1, 11, 17), {"scale": 0.3}),
    "3d_gqa_bool_mask_narrow": (((2, 9, 64), (2, 23, 32), (2, 23, 32)), "bool20",
                                {"q_num_heads": 4, "kv_num_heads": 2}),
    "3d_mqa_causal_sq_gt_sk": (((1, 15, 48), (1, 7, 16), (1, 7, 16)), None,
                               {"q_num_heads": 3, "kv_num_heads": 1, "is_causal": 1}),
}


@CPU_ONLY
@pytest.mark.parametrize("case, opset", [(case, 23) for case in ATTENTION_CASES] +
                         [("4d_causal_float_mask", 24), ("3d_gqa_bool_mask_narrow", 25)])
def test_onnx_attention(case, opset, rng):
    """Against onnx's reference implementation in float64 (and its float32 result agrees)."""
    shapes, mask_kind, attrs = ATTENTION_CASES[case]
    sq, skv = shapes[0][-2 if len(shapes[0]) == 4 else 1], shapes[1][-2 if len(shapes[1]) == 4 else 1]
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip("QKV", shapes)}
    mask = None
    if mask_kind == "float":
        mask = rng.standard_normal((sq, skv)).astype(np.float32)
    elif mask_kind == "bool20":  # narrower than the 23 keys (the rest masked), each row keeps some key
        mask = rng.random((1, 1, sq, 20)) < 0.6
        mask[..., 0] = True
    elif mask_kind is not None:
        mask = mask_kind
        feeds["attn_mask"] = rng.standard_normal(mask_kind).astype(np.float32)
    model = _attention_model(shapes, opset, mask, **attrs)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    want64 = _float64_attention(model, feeds)
    graph = import_model(model)
    assert _ops(graph)["attention"] == 1 and _ops(graph)["softmax"] == 0
    got = np.asarray(openprim.compile(graph)(*feeds.values()))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want64, rtol=1e-5, atol=1e-5 * np.abs(want64).max())
    np.testing.assert_allclose(want, want64, rtol=1e-4, atol=1e-4 * np.abs(want64).max())  # the reference agrees


def _float64_attention(model, feeds):
    """The same model with float64 tensors through onnx's reference implementation."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for init in m.graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init).astype(np.float64), init.name))
    return ReferenceEvaluator(m).run(None, {k: v.astype(np.float64) for k, v in feeds.items()})[0]


UNSUPPORTED = [  # (what makes the node unsupported, the expected message)
    (dict(extra_inputs=("past_key", "past_value")), "past_key input"),
    (dict(softcap=30.0), "softcap=30.0"),
    (dict(qk_matmul_output_mode=1), "qk_matmul_output_mode=1"),
    (dict(outputs=4), "only the first 1 output"),
    (dict(mask=np.zeros((5, 7), bool)), "removes every key of a query row"),
    (dict(mask=np.zeros((5, 7), np.int32)), "must be boolean or float"),
    (dict(mask=np.zeros((6, 7), np.float32)), "does not broadcast to the 5 x 7 scores"),
]


@pytest.mark.parametrize("kw, why", UNSUPPORTED, ids=[w.split()[0] for _, w in UNSUPPORTED])
def test_onnx_attention_unsupported(kw, why):
    shapes = ((1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8))
    with pytest.raises(OpenPrimError, match=r"ONNX node 'attn' \(Attention, opset 23\).*" + why):
        import_model(_attention_model(shapes, **kw))


def test_onnx_attention_head_errors():
    with pytest.raises(OpenPrimError, match="need the q_num_heads and kv_num_heads"):
        import_model(_attention_model(((1, 5, 8), (1, 7, 8), (1, 7, 8))))
    with pytest.raises(OpenPrimError, match="5 query heads are not a multiple of 2 key/value heads"):
        import_model(_attention_model(((1, 5, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8))))


def test_onnx_attention_coverage():
    """Attention is in the coverage table at the opsets it reads; onnx-check finds nothing to report."""
    assert importer.supported_ops()["Attention"] == (23, 25)
    assert "| Attention | 23-25 |" in importer.coverage_table()
    assert importer.unsupported_nodes(_attention_model(((1, 2, 5, 8),) * 3, opset=24)) == {}


# ----------------------------------------------------------------------------- 4. explain
def _explain(graph, target, capsys):
    from openprim import tuning_commands
    tuning_commands.explain(graph, target)
    return capsys.readouterr().out


def test_explain_attention(tm, capsys):
    """BERT's layer through torch.export: on the CPU (and in f32 on sm_90) the attention is listed as decomposed
    with why the flash kernel does not apply, then its two batched GEMMs as matmul layers; in f16 on sm_90
    the wgmma flash kernel is the choice (mma.sync's is listed, slower)."""
    out = _explain(tm.build("bert_encoder_layer", seq=37), "cpu", capsys)
    assert re.search(r"attention-b12-q37-k37-d64-f32 x1\n  attention_flash_mma +not applicable: no cpu kernel", out), out
    assert "choice: decomposed by prim-decompose (no attention solver applies on cpu)" in out
    assert "gemm-b12-m37-n37-k64-nt-batched-f32" in out and "gemm-b12-m37-n64-k37-nn-batched-f32" in out
    # 100 tokens: past one 64-row query tile of mma.sync's kernel (at 64 or fewer both kernels compute a
    # whole tile, wgmma's of 128 rows at twice the rate: equal costs)
    out = _explain(tm.build("bert_encoder_layer", seq=100, dtype="f16"), "nvvm:sm_90", capsys)
    assert re.search(r"attention-b12-q100-k100-d64-bshd-f16 x1\n  attention_flash_mma +predicted", out), out  # in place
    assert re.search(r"attention_flash_wgmma +predicted", out)
    assert "choice: attention_flash_wgmma {} from heuristic" in out and "batched" not in out


@CPU_ONLY
def test_explain_command(tmp_path):
    """The command line on the model file: the f32 attention on sm_90 is decomposed (the flash kernel takes
    f16 or bf16)."""
    r = subprocess.run([sys.executable, "-m", "openprim.cli", "explain", os.path.join(EXAMPLES, "transformer_models.py"),
                        "-D", "model=vit_b_16", "-D", "image_size=32", "-D", "num_layers=1", "--target", "nvvm:sm_90"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert re.search(r"attention-b12-q5-k5-d64-f32 x1\n  attention_flash_mma +not applicable: f32", r.stdout), r.stdout
    assert "choice: decomposed by prim-decompose" in r.stdout

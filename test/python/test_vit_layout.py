"""The view ops around nn.MultiheadAttention (issue 15): prim-fuse's matmul_views rewrites.

torch.export writes a batch_first MHA as transposes, a packed in-projection, slices of q, k, v and head
split/merge transposes. passes/matmul_views.py splits the packed projection into one GEMM per operand on the
columns it reads and folds the row permutations into single transposes. Checked here:

1. nn.MultiheadAttention with odd sizes (7 tokens, 3 batch, 20 wide, 4 heads of 5) against the same module in
   float64, on the CPU; after prim-fuse no slice and no transpose is left.
2. A 2-block ViT at 32x32 and BERT's layer (separate q/k/v projections; nothing to split) against PyTorch eager.
3. The plans of a 2-block ViT and of BERT's layer in fp16 for nvvm:sm_90 (compile only: no GPU needed): their
   steps by op, pinned; no head transposes are left around the attention (passes/attention_layout.py).

    python -m pytest test/python/test_vit_layout.py -q
"""
from __future__ import annotations

import collections
import os
import sys

import numpy as np
import pytest
from helpers import TARGET

import openprim
from openprim import compiler, passes
from openprim.pyfrontend import to_module

torch = pytest.importorskip("torch")
from openprim.pyfrontend.torch import import_exported  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
CPU_ONLY = pytest.mark.skipif(TARGET != "cpu", reason="against PyTorch on the CPU")


@pytest.fixture(scope="module")
def tm():
    sys.path.insert(0, EXAMPLES)
    import transformer_models
    return transformer_models


class _SelfAttention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        with torch.no_grad():
            self.mha.in_proj_bias.normal_()
            self.mha.out_proj.bias.normal_()

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0] + x


def _graph(module, x):
    return import_exported(torch.export.export(module, (x,)))[0]


def _fused_ops(graph) -> collections.Counter:
    module = passes.run(to_module(graph), "prim-fuse")
    fn = next(iter(module.body.operations))
    return collections.Counter(op.operation.name for op in fn.regions[0].blocks[0].operations)


def _max_rel_error(want, got) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


@CPU_ONLY
def test_multihead_attention_odd_sizes():
    torch.manual_seed(0)
    module = _SelfAttention(20, 4).eval()
    x = torch.randn(3, 7, 20)
    graph = _graph(module, x)
    before = collections.Counter(n.op for n in graph.nodes)
    assert before["slice"] == 3 and before["transpose"] >= 5, before  # what the rewrites are for
    ops = _fused_ops(graph)
    # prim-fuse alone (no prim-decompose before it) keeps the attention whole: its head transposes become
    # layout BSHD (passes/attention_layout.py), so no copy is left around it
    assert ops["prim.slice"] == 0 and ops["prim.transpose"] == 0 and ops["prim.matmul"] == 4, ops
    with torch.no_grad():
        want = module.double()(x.double()).numpy()
    got = openprim.compile(graph, cache=False)(x.numpy())
    assert _max_rel_error(want, got) < 1e-5


@CPU_ONLY
@pytest.mark.parametrize("model", ["vit", "bert"])
def test_models_match_eager(tm, model):
    if model == "vit":
        module = tm.vit_b_16(image_size=32, num_layers=2)
        inputs = tm.example_input(module, batch=3)
    else:
        module = tm.bert_encoder_layer()
        inputs = tm.example_input(module, batch=2, seq=13, lengths=[13, 6])
    graph = import_exported(torch.export.export(module, inputs))[0]
    ops = _fused_ops(graph)
    if model == "vit":  # per block: q, k, v head splits and the merge; the class-token slice at the end
        # (+ 1: the patch embedding, a GEMM of the image's patches: passes/conv_patches.py)
        assert ops["prim.slice"] == 1 and ops["prim.matmul"] == 2 * 6 + 1 + 1, ops
    with torch.no_grad():
        want = module.double()(*(t.double() for t in inputs)).numpy()
    got = openprim.compile(graph, cache=False)(*(t.numpy() for t in inputs))
    assert _max_rel_error(want, got) < 1e-4


def _plan_kinds(graph, path) -> collections.Counter:
    plan = compiler.save(graph, str(path), target="nvvm:sm_90")["plan"]
    return collections.Counter(step["kernel"].rstrip("0123456789_") for step in plan["steps"])


def test_vit_plan_on_sm90(tm, tmp_path):
    """Two blocks: per block 3 GEMMs for q, k, v, the out-projection and 2 MLP GEMMs (+ the head), no head
    split/merge transposes (the flash kernel reads the heads in layout BSHD; there were 4 per block, and 7
    transposes and 3 slice copies before matmul_views); the patch embedding as one transpose of the image
    into its patches and a GEMM (passes/conv_patches.py; it was a transpose, a channel pad, a conv and 2
    transposes); the class token's slice."""
    module = tm.vit_b_16(image_size=64, num_layers=2).half().eval()
    kinds = _plan_kinds(_graph(module, tm.example_input(module, batch=4)[0].half()), tmp_path / "vit.oprim")
    assert kinds == {"matmul": 14, "transpose": 1, "layer_norm": 5, "attention": 2, "concat": 1, "add": 1,
                     "slice": 1}, kinds


def test_bert_plan_on_sm90(tm, tmp_path):
    """BERT's layer (separate q, k, v projections) in fp16 for sm_90: 6 GEMMs, one attention reading the
    projections' heads in place, 2 norms, and no transpose (there were 4)."""
    module = tm.bert_encoder_layer().half().eval()
    inputs = tm.example_input(module, batch=2, seq=64)
    kinds = _plan_kinds(import_exported(torch.export.export(module, (inputs[0].half(),)))[0], tmp_path / "b.oprim")
    assert kinds == {"matmul": 6, "attention": 1, "layer_norm": 2}, kinds

"""Hugging Face language models built from their configs (examples/language_models.py, random weights),
imported through torch.export, compiled and run against eager PyTorch: token ids and masks as integer
inputs, the masks' arithmetic, run-time position ids, and the bounds check of an id beyond the vocabulary.
The ONNX path of the same models is test_onnx_language_models.py."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import openprim
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.torch import import_exported

from helpers import TARGET

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import language_models as lm  # noqa: E402

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="GPU runs of these models: scripts/gpu_language_models.py")


def imported(name, batch=2, seq=16):
    model = lm.get(name)
    inputs = lm.example_input(model, batch, seq)
    g, names = import_exported(torch.export.export(model, (), inputs))
    return model, inputs, g, names


@pytest.mark.parametrize("name", lm.MODELS)
def test_matches_eager(name):
    model, inputs, g, names = imported(name)
    assert names == ["input_ids", "attention_mask"]
    assert [t.dtype for t in g.inputs] == ["i64", "i64"]
    out = openprim.compile(g)(**{k: v.numpy() for k, v in inputs.items()})
    got = out[0] if isinstance(out, tuple) else out
    want = lm.reference(model, inputs)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= 1e-5, f"{name}: max error {err:.3g}"
    ops = {n.op for n in g.nodes}
    assert "attention" in ops, f"{name}: the attention is not one prim.attention: {sorted(ops)}"
    masks = [n.operands[3] for n in g.nodes if n.op == "attention" and n.operands[3] is not None]
    for m in masks:     # one additive mask broadcast over the heads, never one per head (but T5's: its
        per_head = name == "t5_encoder"   # relative-position bias differs per head by design)
        assert m.dtype == "f32" and (m.shape[1] == 1 or per_head), (name, m.shape, m.dtype)


def test_padding_changes_only_what_it_should():
    """Masked positions must not move the unmasked outputs: change the padded ids, the first row and the
    unpadded part of the second stay."""
    model, inputs, g, _ = imported("bert")
    exe = openprim.compile(g)
    feeds = {k: v.numpy() for k, v in inputs.items()}
    base = exe(**feeds)[0]
    pad = feeds["attention_mask"][-1] == 0
    feeds["input_ids"] = feeds["input_ids"].copy()
    feeds["input_ids"][-1, pad] = (feeds["input_ids"][-1, pad] + 7) % 1000
    moved = exe(**feeds)[0]
    np.testing.assert_array_equal(moved[0], base[0])
    np.testing.assert_allclose(moved[-1, ~pad], base[-1, ~pad], rtol=1e-5, atol=1e-5)


def test_roberta_position_ids_are_computed_at_run_time():
    """RoBERTa's position ids (cumsum of ids != padding) depend on the ids: a padding id in the middle
    shifts the positions after it, as in eager."""
    model, inputs, g, _ = imported("roberta")
    assert {"cumsum", "compare"} <= {n.op for n in g.nodes}
    exe = openprim.compile(g)
    inputs["input_ids"][0, 5] = model.config.pad_token_id
    got = exe(**{k: v.numpy() for k, v in inputs.items()})[0]
    want = lm.reference(model, inputs)
    assert np.abs(got - want).max() / max(1.0, np.abs(want).max()) <= 1e-5


def test_an_id_beyond_the_vocabulary_is_an_error():
    model, inputs, g, _ = imported("distilbert")
    exe = openprim.compile(g)
    feeds = {k: v.numpy().copy() for k, v in inputs.items()}
    feeds["input_ids"][1, 3] = model.config.vocab_size
    with pytest.raises(OpenPrimError, match=r"prim.gather \(axis 0 of 1000x64\): an index is outside "
                                            r"\[-1000, 1000\) \(1 of them\)"):
        exe(**feeds)


def test_constants_fold_away():
    """T5's relative-position buckets and GPT-2's causal mask are computed from constants: no integer
    kernels are left for them, only the run-time mask's."""
    for name in ("t5_encoder", "gpt2"):
        _, _, g, _ = imported(name)
        integer_ops = [n.op for n in g.nodes if n.op not in ("constant", "bounds_check", "reshape")
                       and n.result.dtype in ("i64", "i32")]
        assert integer_ops == [], (name, integer_ops)


def test_torch_compile_runs_openprim_for_int_inputs():
    """torch.compile(model, backend=openprim_backend) on token ids: OpenPrim runs the graph (no fallback
    warning) and matches eager."""
    import warnings
    from openprim.torch_backend import _WARNED, openprim_backend
    model = lm.get("gpt2")
    inputs = lm.example_input(model)
    torch._dynamo.reset()
    _WARNED.clear()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        got = torch.compile(model, backend=openprim_backend)(**inputs)[0].numpy()
    assert not [w for w in caught if "openprim_backend" in str(w.message)]
    want = lm.reference(model, inputs)
    assert np.abs(got - want).max() / max(1.0, np.abs(want).max()) <= 1e-5


@pytest.mark.parametrize("name", ["bert", "t5_encoder"])
def test_half_precision(name):
    """The model in .half() imports as an f16 Graph (ids stay i64); T5's f16 clamp (isinf, any, a clamp by a
    value computed at run time) too; within f16 tolerance of the float32 eager model."""
    g = lm.build(name, dtype="f16")
    assert g.dtype == "f16" and [t.dtype for t in g.inputs] == ["i64", "i64"]
    model = lm.get(name)
    inputs = lm.example_input(model)
    out = openprim.compile(g)(**{k: v.numpy() for k, v in inputs.items()})
    got = (out[0] if isinstance(out, tuple) else out).astype(np.float32)
    want = lm.reference(model, inputs)
    assert np.abs(got - want).max() / max(1.0, np.abs(want).max()) <= 1e-2


def test_gpt2_gelu_is_the_matmul_epilogue():
    """GPT-2's gelu_new, written out as pow/mul/add/tanh, becomes the MLP matmul's gelu_tanh epilogue
    (passes/gelu_tanh_pattern.py): no elementwise kernel of its own."""
    _, _, g, _ = imported("gpt2")
    plan = openprim.compile(g).plan
    problems = [s.get("problem", "") for s in plan["steps"]]
    assert sum("gelu_tanh" in p for p in problems) == 2, problems        # one per layer


def test_llama_rms_norm_is_one_kernel():
    """Llama's RMSNorm (x * rsqrt(mean(x^2) + eps) * w: a global average pool of a view, 1 / sqrt and two
    multiplications once imported) runs as prim.rms_norm kernels (rms_norm_pattern), one per norm."""
    model, inputs, g, _ = imported("llama")
    kernels = [step["op"] for step in openprim.compile(g).plan["steps"]]
    norms = 2 * model.config.num_hidden_layers + 1
    assert kernels.count("rms_norm") == norms and "global_avg_pool" not in kernels, kernels

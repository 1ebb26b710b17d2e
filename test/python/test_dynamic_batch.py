"""Dynamic batch (driver/dynamic_batch.py): one compiled model for every batch in a range, through buckets.

compile_module(..., dynamic_batch=...) and torch.compile(dynamic=True) against PyTorch eager in float64 on
random data (odd sizes, stride 2, groups), at batches on and between the buckets; the buckets compiled; a
batch outside the range refused; a model whose samples mix (padding would change it) compiled per exact
size with one warning; a Hugging Face BERT (int64 token ids and an attention mask) at several batches."""
from __future__ import annotations

import copy
import os
import sys
import warnings

import numpy as np
import pytest

from openprim.base.errors import OpenPrimError
from openprim.dynamic_batch import BatchRange
from helpers import seeded_cnn

torch = pytest.importorskip("torch")
from openprim.torch_backend import compile_module  # noqa: E402 - needs torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def test_buckets():
    assert BatchRange(1, 64).buckets == (1, 2, 4, 8, 16, 32, 64)
    assert BatchRange(3, 20).buckets == (3, 4, 8, 16, 20)
    r = BatchRange(3, 20)
    assert [r.bucket(n) for n in (3, 4, 5, 9, 16, 17, 20)] == [3, 4, 8, 16, 16, 20, 20]
    assert BatchRange.of(True) == BatchRange(1, 64) and BatchRange.of(8) == BatchRange(1, 8)
    with pytest.raises(OpenPrimError, match=r"batch 21 is outside the compiled range \[3, 20\]"):
        r.bucket(21)
    for bad in ((0, 4), (5, 4), (1.5, 4)):
        with pytest.raises(OpenPrimError, match="expected integers"):
            BatchRange(*bad)
    with pytest.raises(OpenPrimError, match="expected True, a maximum batch"):
        BatchRange.of("8")
    # sequence lengths, 4 buckets per doubling (multiples of 8 between the powers of two): under 25% padding
    seq = BatchRange.of((32, 512, 4), "sequence length")
    assert seq.buckets == (32, 40, 48, 56, 64, 80, 96, 112, 128, 152, 184, 216, 256, 304, 368, 432, 512)
    assert max(seq.bucket(n) / n for n in range(32, 513)) < 1.25
    with pytest.raises(OpenPrimError, match="0 buckets per doubling"):
        BatchRange(1, 8, "batch", 0)


def _relu_graph(b):
    from openprim.pyfrontend import Graph
    g = Graph()
    g.output(g.relu(g.input("x", (b, 3))))
    return g


@pytest.mark.parametrize("split,n,want", [
    (False, 5, [(8, 5)]), (False, 8, [(8, 8)]),                   # GPUs: one bucket, padded
    (True, 5, [(4, 4), (3, 1)]), (True, 7, [(4, 4), (3, 3)]),      # the CPU: a sum of buckets, the rest padded
    (True, 8, [(8, 8)]), (True, 6, [(4, 4), (3, 2)]),
])
def test_pieces(split, n, want):
    """Buckets.pieces over the range [3, 8] (buckets 3, 4, 8): (bucket, rows) of each piece."""
    from openprim.dynamic_batch import Buckets
    buckets = Buckets(BatchRange(3, 8), lambda b: (f"plan {b}", _relu_graph(b)), split=split)
    pieces = buckets.pieces(n)
    assert [(b, rows) for _, b, rows in pieces] == want
    assert [run for run, _, _ in pieces] == [f"plan {b}" for b, _ in want]
    assert buckets.checked and buckets.exact is None


def _close(got, model, x):
    with torch.no_grad():
        want = copy.deepcopy(model).double()(x.double())
    assert got.shape == want.shape
    err = float((got.double() - want).abs().max() / want.abs().max())
    assert err < 1e-5, err


def test_compile_module_dynamic_batch():
    m = seeded_cnn()
    run = compile_module(m, (torch.randn(2, 4, 11, 9),), dynamic_batch=(1, 16))
    for n in (1, 3, 8, 13, 16, 5):
        x = torch.randn(n, 4, 11, 9)
        _close(run(x), m, x)
    # on the CPU a batch runs as a sum of buckets: 3 = 2 + 1, 13 = 8 + 4 + 1, 5 = 4 + 1
    assert sorted(run.buckets.compiled) == [1, 2, 4, 8, 16]
    with pytest.raises(OpenPrimError, match=r"batch 17 is outside the compiled range \[1, 16\]"):
        run(torch.randn(17, 4, 11, 9))
    run = compile_module(m, (torch.randn(2, 4, 11, 9),), dynamic_batch=(3, 8))
    x = torch.randn(5, 4, 11, 9)
    _close(run(x), m, x)                                   # 4 rows, then 1 row padded to the bucket of 3
    assert sorted(run.buckets.compiled) == [3, 4]
    with pytest.raises(OpenPrimError, match="every tensor input has the batch as dim 0"):
        compile_module(lambda a, b: a + b, (torch.randn(2, 3), torch.randn(3, 3)), dynamic_batch=4)


def test_samples_that_mix_compile_per_size():
    """x - x.mean(0) mixes the samples: padding would change the real rows, so each size compiles alone
    (checked on the first bucket compiled, also when that call needed no padding)."""
    def centered(x):
        return torch.relu(x - x.mean(0, keepdim=True))
    run = compile_module(centered, (torch.randn(2, 5),), dynamic_batch=8)
    x = torch.randn(4, 5)
    with pytest.warns(RuntimeWarning, match="padding or splitting the batch would change the results.*compiling each batch"):
        got = run(x)
    np.testing.assert_allclose(got.numpy(), centered(x).numpy(), rtol=1e-5, atol=1e-6)
    for n in (3, 5):
        x = torch.randn(n, 5)
        np.testing.assert_allclose(run(x).numpy(), centered(x).numpy(), rtol=1e-5, atol=1e-6)
    assert sorted(run.buckets.compiled) == [3, 4, 5]


def test_torch_compile_dynamic():
    """torch.compile(dynamic=True) makes every size symbolic: the batch runs buckets, the image size compiles
    as given; no call falls back to eager (an openprim warning would say so)."""
    m = seeded_cnn()
    torch._dynamo.reset()
    f = torch.compile(m, backend="openprim", dynamic=True, options={"dynamic_batch": (1, 8)})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("error", message="openprim")
        for n in (2, 5, 7, 8):
            x = torch.randn(n, 4, 11, 9)
            _close(f(x), m, x)
        x = torch.randn(3, 4, 13, 7)          # another image size: compiled for it, batch still bucketed
        _close(f(x), m, x)


def test_torch_compile_dynamic_outside_range_runs_eagerly():
    m = seeded_cnn()
    torch._dynamo.reset()
    f = torch.compile(m, backend="openprim", dynamic=True, options={"dynamic_batch": (1, 4)})
    with torch.no_grad():
        f(torch.randn(2, 4, 11, 9))
        x = torch.randn(6, 4, 11, 9)
        with pytest.warns(RuntimeWarning, match=r"batch 6 is outside the dynamic batch range \[1, 4\]"):
            got = f(x)
    _close(got, m, x)


@pytest.mark.parametrize("name", ["bert", "llama", "t5_encoder"])
def test_language_model_dynamic_batch(name):
    """Hugging Face BERT, Llama and T5 encoders: int64 ids and a padded attention mask. Their linear layers run
    on [batch x tokens, hidden] (rows per sample), BERT's mask is a gather of the flattened mask that reads
    each sample's own rows, and Llama's and T5's RMSNorm means are per token: the analysis follows all of
    them, so the batch pads into buckets (no per-size compile, no warning)."""
    pytest.importorskip("transformers")
    import language_models
    model = language_models.get(name, "small", layers=1)
    feeds = language_models.example_input(model, batch=2, seq=12)
    run = compile_module(language_models.LastHidden(model).eval(), (feeds["input_ids"], feeds["attention_mask"]),
                         dynamic_batch=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for n in (3, 1, 4):
            inputs = language_models.example_input(model, batch=n, seq=12, seed=n)
            got = run(inputs["input_ids"], inputs["attention_mask"])
            want = language_models.reference(model, inputs)
            assert got.shape == want.shape
            assert float(np.abs(got.numpy() - want).max() / np.abs(want).max()) < 1e-4
    assert sorted(run.buckets.compiled) == [1, 2, 4]    # 3 = 2 + 1


def test_language_model_dynamic_sequence():
    """A Hugging Face BERT over sequence lengths 4-32: each call padded (ids 0, mask 0) into the next length
    bucket and its outputs cut back, equal to eager at odd lengths between the buckets and on them; the
    padding is checked once against the example's own length; a length outside the range is one error."""
    pytest.importorskip("transformers")
    import language_models
    model = language_models.get("bert", "small", layers=1)
    feeds = language_models.example_input(model, batch=2, seq=12)
    run = compile_module(language_models.LastHidden(model).eval(), (feeds["input_ids"], feeds["attention_mask"]),
                         dynamic_sequence=(4, 32), sequence_padding={"input_ids": 0, "attention_mask": 0})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for seq in (5, 13, 16, 27, 4):
            inputs = language_models.example_input(model, batch=2, seq=seq, seed=seq)
            got = run(inputs["input_ids"], attention_mask=inputs["attention_mask"])
            want = language_models.reference(model, inputs)
            assert got.shape == want.shape
            assert float(np.abs(got.numpy() - want).max() / np.abs(want).max()) < 1e-4, seq
    assert sorted(run.buckets.compiled) == [4, 8, 16, 32]
    with pytest.raises(OpenPrimError, match=r"sequence length 33 is outside the compiled range \[4, 32\]"):
        run(torch.zeros(2, 33, dtype=torch.long), torch.ones(2, 33, dtype=torch.long))


def test_sequence_padding_that_changes_results_compiles_per_length():
    """A mean over the sequence is changed by padding: found by the check, each length compiles alone."""
    def pooled(x):
        return x - x.mean(1, keepdim=True)
    run = compile_module(pooled, (torch.randn(2, 5, 3),), dynamic_sequence=(2, 16), sequence_padding={"x": 0.0})
    x = torch.randn(2, 6, 3)
    with pytest.warns(RuntimeWarning, match="padding or splitting the sequence length would change the results"):
        got = run(x)
    np.testing.assert_allclose(got.numpy(), pooled(x).numpy(), rtol=1e-5, atol=1e-6)
    assert 6 in run.buckets.compiled
    with pytest.raises(OpenPrimError, match="sequence_padding names \\['y'\\]"):
        compile_module(pooled, (torch.randn(2, 5, 3),), dynamic_sequence=(2, 16), sequence_padding={"y": 0})

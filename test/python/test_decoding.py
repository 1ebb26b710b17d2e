"""Decoding: prim.index_copy and sin/cos against numpy, state carried between calls (Graph.carry: written in
place or copied, get/set/reset/share, artifacts, refusals), and greedy decoding of Hugging Face GPT-2 and
Llama (grouped-query attention, rotary embeddings, RMSNorm, SwiGLU) built from configs with random weights,
token for token against eager PyTorch.

The op tests run on every target (GPU ones through helpers.run_on_gpu); state and decoding run on the CPU
(record/replay carries no state from call to call)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import openprim
from openprim import compiler
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend import Graph
from openprim.runtime import artifact, load

from helpers import TARGET, assert_close, run_on_gpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

cpu_only = pytest.mark.skipif(TARGET != "cpu", reason="state is carried from call to call: a CPU run here")


def run(g: Graph, feeds: list):
    if TARGET != "cpu":
        res = run_on_gpu(g, feeds)[2]
    else:
        res = openprim.compile(g)(*feeds)
    return list(res) if isinstance(res, tuple) else [res]


def index_copy_reference(x, axis, idx, upd):
    out = x.astype(np.float64).copy()
    out[(slice(None),) * axis + (idx % x.shape[axis],)] = upd
    return out


@pytest.mark.parametrize("shape,axis,rows,dtype", [((2, 3, 17, 5), 2, 1, "f32"), ((2, 3, 17, 5), 2, 4, "f32"),
                                                   ((9, 33), 0, 3, "f32"), ((3, 5, 64, 24), 2, 7, "f32"),
                                                   ((1, 2, 11, 16), 2, 3, "f16"), ((4, 7, 3), -1, 2, "f32"),
                                                   ((2, 4, 300, 64), 2, 200, "f32")])   # a prefill: threads
def test_index_copy(shape, axis, rows, dtype):
    """Distinct random rows (one given from the end), the input used again afterwards (not in place) and
    not (in place); f16 rows are copied exactly; the last case writes enough rows to be split between
    threads."""
    rng = np.random.default_rng(sum(shape) + rows)
    ax = axis % len(shape)
    ushape = tuple(rows if d == ax else n for d, n in enumerate(shape))
    npt = np.float16 if dtype == "f16" else np.float32
    x, u = rng.standard_normal(shape).astype(npt), rng.standard_normal(ushape).astype(npt)
    idx = rng.choice(shape[ax], rows, replace=False).astype(np.int64)
    idx[0] -= shape[ax]
    for reuse in (False, True):
        g = Graph(dtype=dtype)
        xt, it, ut = g.input("x", shape), g.input("i", (rows,), "i64"), g.input("u", ushape)
        y = g.index_copy(xt, axis, it, ut)
        g.output(g.add(y, xt) if reuse else y)   # reuse: x read after the copy, so not in place
        want = index_copy_reference(x, ax, idx, u) + (x if reuse else 0)
        out = run(g, [x, idx, u])[0]
        assert_close(out, want, dtype)
        if not reuse:
            np.testing.assert_array_equal(out, want.astype(npt))


def test_index_copy_out_of_range_and_refusals():
    g = Graph()
    x, i, u = g.input("x", (2, 6, 4)), g.input("i", (2,), "i64"), g.input("u", (2, 2, 4))
    g.output(g.index_copy(x, 1, i, u))
    exe = openprim.compile(g)
    with pytest.raises(OpenPrimError, match=r"prim.index_copy \(axis 1 of 2x6x4\): an index is outside \[-6, 6\)"):
        exe(np.ones((2, 6, 4)), np.array([1, 6]), np.ones((2, 2, 4)))
    g = Graph()
    x, i = g.input("x", (2, 6, 4)), g.input("i", (2,), "i64")
    with pytest.raises(OpenPrimError, match=r"updates 2x3x4 must be 2x2x4"):
        g.index_copy(x, 1, i, g.input("u", (2, 3, 4)))
    with pytest.raises(OpenPrimError, match=r"test_decoding.py:\d+: error: .* the indices hold values in \[0, 7\]"):
        g.index_copy(x, 1, [0, 7], g.input("v", (2, 2, 4)))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_greedy_tokens(dtype):
    """decoding.greedy_tokens against numpy's argmax: ties (the first index wins), a row of one repeated
    value, negative rows, -inf entries, a vocabulary not a power of two."""
    decoding = pytest.importorskip("openprim.decoding")
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((6, 1003)) * 4).astype(np.float16 if dtype == "f16" else np.float32)
    x[0, [5, 700]] = x[0].max() + 1          # a tie: index 5
    x[1] = 0.5                               # all equal: index 0
    x[2] = -np.abs(x[2]) - 1                 # every entry negative
    x[3, ::2] = -np.inf
    x[4, -1] = x[4].max() + 2                # the last index
    g = Graph(dtype=dtype)
    g.output(decoding.greedy_tokens(g, g.input("logits", x.shape)))
    got, = run(g, [x])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.argmax(x.astype(np.float64), -1))


def test_sin_cos():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 37)) * 20).astype(np.float32)
    g = Graph()
    t = g.input("x", x.shape)
    g.output(g.sin(t), g.cos(t))
    s, c = run(g, [x])
    assert_close(s, np.sin(x.astype(np.float64)), "f32")
    assert_close(c, np.cos(x.astype(np.float64)), "f32")


def cache_graph(rows: int, read_old: bool = False, batch=2, heads=3, length=16, dim=8):
    """rows new rows into a carried cache [batch, heads, length, dim] at run-time positions; returns
    2 * the new cache (plus the old cache's sum of rows with read_old, which keeps the update from being
    done in place)."""
    g = Graph()
    k = g.input("k", (batch, heads, rows, dim))
    pos = g.input("pos", (rows,), "i64")
    cache = g.input("cache", (batch, heads, length, dim))
    new = g.index_copy(cache, 2, pos, k)
    g.carry(cache, new)
    out = g.add(new, new)
    g.output(g.add(out, g.reduce(cache, "sum", [2], True)) if read_old else out)
    return g


@cpu_only
@pytest.mark.parametrize("read_old", [False, True])
def test_state_carried(read_old):
    """A prefill of 4 rows and steps of one, sharing one state: the cache is what numpy says after every
    call; in place unless the old cache is read after the update (then copied in: plan 'copy')."""
    rng = np.random.default_rng(5)
    pre, step = openprim.compile(cache_graph(4, read_old)), openprim.compile(cache_graph(1, read_old))
    assert [e.get("copy", False) for e in step.plan["state"]] == [read_old]
    assert step.state_names == ["cache"] and step.input_names == ["k", "pos"]
    step.share_state(pre)
    ref = np.zeros((2, 3, 16, 8))
    for it in range(2):   # a second sequence after reset_state
        step.reset_state()
        ref[:] = 0
        k = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
        old = ref.copy()
        ref[:, :, :4] = k
        out = pre(k, np.arange(4))
        np.testing.assert_allclose(out, 2 * ref + (old.sum(2, keepdims=True) if read_old else 0), rtol=1e-5, atol=1e-5)
        for t in range(4, 9 + it):
            k = rng.standard_normal((2, 3, 1, 8)).astype(np.float32)
            old = ref.copy()
            ref[:, :, t] = k[:, :, 0]
            out = step(k, np.array([t]))
            np.testing.assert_allclose(out, 2 * ref + (old.sum(2, keepdims=True) if read_old else 0), rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(pre.get_state()["cache"], ref.astype(np.float32))


@cpu_only
def test_state_api_and_artifact(tmp_path):
    path = str(tmp_path / "step.oprim")
    compiler.save(cache_graph(1), path)
    exe = load(path)
    assert exe.manifest["version"] == 4 and exe.state_names == ["cache"]
    start = np.random.default_rng(0).standard_normal((2, 3, 16, 8)).astype(np.float32)
    exe.set_state({"cache": start})
    k = np.ones((2, 3, 1, 8), np.float32)
    exe(k, np.array([-1]))   # the last row
    want = start.copy()
    want[:, :, -1] = 1
    np.testing.assert_array_equal(exe.get_state()["cache"], want)
    with pytest.raises(OpenPrimError, match=r"set_state: unknown state 'kache'"):
        exe.set_state({"kache": start})
    with pytest.raises(OpenPrimError, match=r"set_state: 'cache' must have shape \(2, 3, 16, 8\)"):
        exe.set_state({"cache": start[:1]})
    other = openprim.compile(cache_graph(1, length=8))
    with pytest.raises(OpenPrimError, match="share_state: their state differs"):
        other.share_state(exe)
    with pytest.raises(OpenPrimError, match="expected 2 input"):   # the state is not an input to give
        exe(k, np.array([0]), start)


def test_carry_refusals():
    g = Graph()
    x = g.input("x", (2, 3))
    y = g.add(x, x)
    with pytest.raises(OpenPrimError, match="carry: the state must be an input of the graph"):
        g.carry(y, y)
    with pytest.raises(OpenPrimError, match=r"carry: input 'x' is f32\[2, 3\] but its next value is f32\[3\]"):
        g.carry(x, g.reduce(y, "sum", [0]))
    g.carry(x, y)
    with pytest.raises(OpenPrimError, match="carried twice"):
        g.carry(x, y)


# ------------------------------------------------------------------------------- Hugging Face decoders
@cpu_only
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_greedy_decoding(kind):
    """Prompts of 5 (padded into the prefill bucket of 8) and 8 tokens, batch 2, 14 new tokens: the same
    tokens as eager PyTorch; the decode step updates its caches in place (no copy in its plan)."""
    pytest.importorskip("transformers")
    decoding = pytest.importorskip("openprim.decoding")
    import language_models
    model = language_models.small_decoder(kind)
    dec = decoding.Decoder(model, batch=2, max_len=24)
    assert not any(e.get("copy") for e in dec.step.plan["state"] + dec.greedy_step.plan["state"])
    rng = np.random.default_rng(1)
    for prompt in (5, 8):
        ids = rng.integers(0, 97, (2, prompt))
        out = dec.generate(ids, 14)
        want = language_models.eager_greedy(model, ids, 14)
        assert len(set(want[:, prompt:].ravel())) > 4, "the reference repeats itself: a weak test"
        np.testing.assert_array_equal(out, want)
    assert sorted(dec.prefills) == [8]
    with pytest.raises(OpenPrimError, match="exceed max_len 24"):
        dec.generate(ids, 20)


@cpu_only
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_generate_like_transformers(kind):
    """Decoder.generate against transformers' generate on the same model: three prompts left-padded to 6
    tokens (lengths 6, 4, 2) greedy; sampling under one seed (defaults, top-k, top-p, all three with a
    temperature): the same tokens drawn; eos ids ending every row after one token (generation stops early, as
    generate's); two rows on a decoder of three."""
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    decoding = pytest.importorskip("openprim.decoding")
    import language_models
    model = language_models.small_decoder(kind)
    dec = decoding.Decoder(model, batch=3, max_len=24)
    rng = np.random.default_rng(3)
    ids = rng.integers(1, 97, (3, 6))
    mask = np.ones_like(ids)
    mask[1, :2] = mask[2, :4] = 0
    ids[mask == 0] = 0

    def hf(rows=3, **kw):
        with torch.no_grad():
            return model.generate(input_ids=torch.tensor(ids[:rows]), attention_mask=torch.tensor(mask[:rows]),
                                  pad_token_id=0, **kw).numpy()
    greedy = dec.generate(ids, 10, mask)
    np.testing.assert_array_equal(greedy, hf(max_new_tokens=10, do_sample=False))
    assert len(set(greedy[:, 6:].ravel())) > 6, "the reference repeats itself: a weak test"
    for kw in [{}, {"top_k": 5}, {"top_p": 0.8, "top_k": 0}, {"temperature": 0.7, "top_k": 20, "top_p": 0.9}]:
        torch.manual_seed(7)
        want = hf(max_new_tokens=10, do_sample=True, **kw)
        torch.manual_seed(7)
        np.testing.assert_array_equal(dec.generate(ids, 10, mask, do_sample=True, **kw), want)
    eos = sorted(set(greedy[:, 6]))
    out = dec.generate(ids, 10, mask, eos_token_id=eos, pad_token_id=0)
    np.testing.assert_array_equal(out, hf(max_new_tokens=10, do_sample=False, eos_token_id=eos))
    assert out.shape == (3, 7)
    np.testing.assert_array_equal(dec.generate(ids[:2], 8, mask[:2]), hf(rows=2, max_new_tokens=8))


@cpu_only
def test_generate_refusals():
    pytest.importorskip("transformers")
    decoding = pytest.importorskip("openprim.decoding")
    import language_models
    dec = decoding.Decoder(language_models.small_decoder("gpt2"), batch=2, max_len=16)
    ids = np.ones((2, 4), np.int64)
    for args, kw, match in [((np.ones((3, 4), np.int64), 2), {}, r"1 <= rows <= 2 \(the decoder's batch\)"),
                            ((ids.astype(np.float32), 2), {}, "must be integers"),
                            ((ids, 2, np.array([[1, 1, 0, 0], [1, 1, 1, 1]])), {}, "only left padding"),
                            ((ids, 2, np.ones((2, 3))), {}, "of the prompts' shape"),
                            ((ids, 2), {"do_sample": True, "top_p": 0.0}, "0 < top_p <= 1"),
                            ((ids, 2), {"do_sample": True, "temperature": 0}, "temperature > 0"),
                            ((ids, 13), {}, "exceed max_len 16")]:
        with pytest.raises(OpenPrimError, match=match):
            dec.generate(*args, **kw)


@cpu_only
def test_decoder_artifact(tmp_path):
    """Decoder.save: the step and the prefill buckets up to 8 tokens in one artifact (weights pooled, one state);
    runtime.load runs generate with numpy alone: greedy tokens equal to the Decoder's (left-padded prompts),
    seeded sampling repeatable, a prompt past the buckets refused; a plain dynamic artifact refuses state."""
    pytest.importorskip("transformers")
    decoding = pytest.importorskip("openprim.decoding")
    import language_models
    from openprim.runtime import generation
    dec = decoding.Decoder(language_models.small_decoder("llama"), batch=2, max_len=20)
    path = str(tmp_path / "llama.oprim")
    info = dec.save(path, max_prompt=8)
    assert info["buckets"] == [1, 2, 4, 8] and info["pool_bytes"] < info["bytes"]
    run = load(path)
    assert isinstance(run, generation.Decoder) and (run.batch, run.max_len) == (2, 20)
    rng = np.random.default_rng(4)
    ids = rng.integers(1, 97, (2, 7))
    mask = np.ones_like(ids)
    mask[1, :3] = 0
    np.testing.assert_array_equal(run.generate(ids, 9, mask), dec.generate(ids, 9, mask))
    np.testing.assert_array_equal(run.generate(ids[:1, 2:], 5), dec.generate(ids[:1, 2:], 5))
    drawn = [run.generate(ids, 9, mask, do_sample=True, top_k=20, seed=s) for s in (1, 1, 2)]
    np.testing.assert_array_equal(drawn[0], drawn[1])
    assert not np.array_equal(drawn[0], drawn[2]) and drawn[0].max() < 97
    with pytest.raises(OpenPrimError, match=r"outside the compiled range \[1, 8\]"):
        run.generate(rng.integers(1, 97, (2, 9)), 2)
    with pytest.raises(OpenPrimError, match="called through its generate"):
        run.buckets(ids)
    g = Graph()
    x = g.input("x", (2, 3))
    g.carry(x, g.add(x, x))
    g.output(g.reduce(x, "sum"))
    compiler.save(g, str(tmp_path / "state.oprim"))
    m, kernels, weights = artifact.read(str(tmp_path / "state.oprim"))
    parts = {b: (m["plan"], kernels, weights, {}) for b in (1, 2)}
    with pytest.raises(OpenPrimError, match="carried state only as a decoder's"):
        artifact.write_dynamic(str(tmp_path / "d.oprim"), {"name": "n"}, parts)


def test_greedy_f16_logits():
    """runtime.generation.greedy on float16 logits (compared as ordered int16, not in numpy's software f16)
    picks what np.argmax picks in float32: negative rows, both zeros (the first of a tie), infinities, ties,
    subnormals, GPT-2's vocabulary width."""
    from openprim.runtime.generation import greedy
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal((16, 50257)) * 4, -np.abs(rng.standard_normal((3, 1000))) - 1,
            np.array([[-0.0, 0.0, -1.0], [0.0, -0.0, -2.0], [-3.0, -0.0, -0.0], [1.0, np.inf, np.inf],
                      [-np.inf, -65504.0, -np.inf], [2.0, 5.0, 5.0], [6e-8, -6e-8, 0.0], [-6e-8, -1e-7, -6e-8]])]
    for logits in rows:
        x = logits.astype(np.float16)
        np.testing.assert_array_equal(greedy(x), np.argmax(x.astype(np.float32), -1))
        np.testing.assert_array_equal(greedy(logits.astype(np.float32)), np.argmax(logits.astype(np.float32), -1))


def test_numpy_sampler():
    """runtime.generation.sampler: top_k=1 and a tiny top_p are the argmax; with top_k=3 only the three best
    tokens are drawn, at their softmax frequencies (20,000 draws, within 0.02); temperature sharpens."""
    from openprim.runtime.generation import sampler
    logits = np.random.default_rng(0).standard_normal((4, 50)) * 2
    best = np.argmax(logits, -1)
    np.testing.assert_array_equal(sampler(True, top_k=1, seed=0)(logits), best)
    np.testing.assert_array_equal(sampler(True, top_k=0, top_p=1e-6, seed=0)(logits), best)
    draw = sampler(True, top_k=3, seed=1)
    rows = np.repeat(logits[:1], 20000, 0)
    got = draw(rows)
    top3 = np.argsort(logits[0])[-3:]
    assert set(got) <= set(top3)
    p = np.exp(logits[0, top3] - logits[0, top3].max())
    p /= p.sum()
    np.testing.assert_allclose([np.mean(got == t) for t in top3], p, atol=0.02)
    cold = sampler(True, top_k=0, temperature=0.05, seed=2)(rows[:2000])
    assert np.mean(cold == best[0]) > 0.9

"""Token generation with a decoder's executables: the loop of openprim.decoding.Decoder and of decoder
artifacts, with numpy alone (no MLIR, no torch).

A decoder is a set of executables over one carried state (its KV caches): the one-token step, and prefill
buckets for prompts of up to B tokens (B a power of two, bucket(P) the one a prompt of P fits). Each takes
(input_ids [batch, S], position_ids [batch, S], cache_position [S], attention_mask [batch, max_len],
last [1]) and returns the logits [batch, V] at `last` (docs/frontends.md, "Decoding").

    prefill   the prompts padded on the right into their bucket (the last token repeated; those rows are
              overwritten before the causal mask lets a query see them); a row's left padding (mask 0)
              has positions counted over its real tokens only (a pad's position is 1, as transformers')
    decode    one token per step at cache position P, P + 1, ...; fewer rows than the batch are filled
              with copies of the first and dropped
    choose    logits [rows, V] -> tokens [rows]: argmax, or a draw (`sampler`); a row that emitted an eos
              token continues with the pad token, and the loop ends once every row has

The artifact form (a dynamic artifact over the token count whose buckets share their state,
runtime/dynamic.py) is loaded as a `Decoder`: `load(path).generate(ids, n, ...)`.
"""
from __future__ import annotations

import numpy as np

from openprim.base.errors import OpenPrimError


def check_prompts(input_ids, attention_mask, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompts and their mask (ones when not given), checked: [rows <= batch, P] integers, a 0/1 mask of
    left padding only."""
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or not 1 <= ids.shape[0] <= batch or not ids.shape[1] or not np.issubdtype(ids.dtype, np.integer):
        raise OpenPrimError(f"input_ids must be integers [rows, P] with 1 <= rows <= {batch} (the decoder's batch) "
                            f"and P >= 1, got {ids.dtype}{list(ids.shape)}")
    if attention_mask is None:
        return ids.astype(np.int64), np.ones(ids.shape, np.int64)
    mask = np.asarray(attention_mask)
    if mask.shape != ids.shape or not np.isin(mask, (0, 1)).all():
        raise OpenPrimError(f"attention_mask must be 0/1 of the prompts' shape {list(ids.shape)}, got "
                            f"{mask.dtype}{list(mask.shape)}")
    if not (np.diff(mask.astype(np.int64), axis=1) >= 0).all() or not mask[:, -1].all():
        raise OpenPrimError("attention_mask: only left padding is supported (each row's zeros before its ones, "
                            "the last token real)")
    return ids.astype(np.int64), mask.astype(np.int64)


def check_sampling(temperature: float, top_k: int | None, top_p: float) -> None:
    if not temperature > 0 or not 0 < top_p <= 1 or (top_k is not None and top_k < 0):
        raise OpenPrimError(f"sampling needs temperature > 0, 0 < top_p <= 1 and top_k >= 0, got temperature="
                            f"{temperature}, top_p={top_p}, top_k={top_k}")


def greedy(logits) -> np.ndarray:
    """The argmax of each row of logits [rows, V]. numpy compares float16 in software (GPT-2's 16 x 50,257
    logits: 7 ms, against a 1 ms decode step on an H100), so f16 logits are compared as the int16 that
    orders like them: the bits, the magnitude bits flipped for negatives, -0 equal to +0 (NaN, which no
    finite run gives, is not ordered as np.argmax orders it)."""
    x = np.asarray(logits)
    if x.dtype != np.float16:
        return np.argmax(x, axis=-1)
    bits = x.view(np.int16)
    key = bits ^ ((bits >> 15) & np.int16(0x7FFF))
    return np.argmax(np.where(bits == np.int16(-0x8000), np.int16(0), key), axis=-1)


def sampler(do_sample: bool, temperature: float = 1.0, top_k: int | None = 50, top_p: float = 1.0, seed=None):
    """logits [rows, V] -> next tokens [rows]: argmax, or a draw from softmax(logits / temperature) cut to the
    top_k tokens and the top_p nucleus (transformers' warpers, in their order), with numpy's generator
    (`seed`: an int or a numpy Generator)."""
    if not do_sample:
        return greedy
    check_sampling(temperature, top_k, top_p)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def draw(logits):
        scores = np.asarray(logits, np.float64) / temperature
        if top_k:
            k = min(top_k, scores.shape[-1]) - 1                  # the k-th largest score of each row
            kth = -np.partition(-scores, k, axis=-1)[:, k]
            scores = np.where(scores < kth[:, None], -np.inf, scores)
        if top_p < 1:
            order = np.argsort(scores, axis=-1, kind="stable")
            ordered = np.take_along_axis(scores, order, -1)
            probs = np.exp(ordered - ordered[:, -1:])
            drop = np.cumsum(probs / probs.sum(-1, keepdims=True), axis=-1) <= 1 - top_p
            drop[:, -1] = False
            np.put_along_axis(scores, order, np.where(drop, -np.inf, ordered), -1)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        return np.array([rng.choice(len(p), p=p) for p in probs], np.int64)
    return draw


def generate(step, prefill, bucket, batch: int, max_len: int, input_ids, max_new_tokens: int, attention_mask=None,
             choose=None, eos_token_id=None, pad_token_id: int | None = None, step_chooses: bool = False) -> np.ndarray:
    """The prompts [rows, P] followed by up to max_new_tokens tokens each (the module docstring): step (the
    one-token executable), prefill(P) (the executable of P's bucket) and bucket(P) (its size) over one state.
    step_chooses: the step returns each row's next token itself (decoding.greedy_tokens), not its logits;
    choose then picks only the prompt's token, from the prefill's logits."""
    ids, mask = check_prompts(input_ids, attention_mask, batch)
    rows, prompt = ids.shape
    if prompt + max_new_tokens > max_len:
        raise OpenPrimError(f"{prompt} prompt tokens + {max_new_tokens} new ones exceed max_len {max_len}")
    choose = choose or sampler(False)
    eos = np.atleast_1d(np.asarray([] if eos_token_id is None else eos_token_id, np.int64))
    pad = int(eos[0]) if pad_token_id is None and len(eos) else pad_token_id
    if max_new_tokens <= 0:
        return ids
    full = np.concatenate([ids, np.repeat(ids[:1], batch - rows, 0)])
    full_mask = np.concatenate([mask, np.repeat(mask[:1], batch - rows, 0)])
    positions = np.where(full_mask == 1, np.cumsum(full_mask, 1) - 1, 1)
    cache_mask = np.ones((batch, max_len), np.int64)
    cache_mask[:, :prompt] = full_mask
    size = bucket(prompt)
    tail = np.arange(1, size - prompt + 1)
    step.reset_state()
    result = prefill(prompt)(np.concatenate([full, np.repeat(full[:, -1:], size - prompt, 1)], 1),
                             np.concatenate([positions, positions[:, -1:] + tail], 1), np.arange(size),
                             cache_mask, np.array([prompt - 1]))
    position = positions[:, -1:] + 1
    out, unfinished = [ids], np.ones(rows, bool)
    for k in range(max_new_tokens):
        token = result[:rows] if step_chooses and k else choose(result[:rows])
        if pad is not None:
            token = np.where(unfinished, token, pad)
        out.append(token[:, None])
        if len(eos):
            unfinished &= ~np.isin(token, eos)
        if k == max_new_tokens - 1 or not unfinished.any():
            break
        feed = np.concatenate([token, np.repeat(token[:1], batch - rows)])[:, None]
        result = step(feed, position, np.array([prompt + k]), cache_mask, np.array([0]))
        position = position + 1
    return np.concatenate(out, axis=1)


class Decoder:
    """A decoder artifact loaded: `generate(input_ids, max_new_tokens, attention_mask=None, *, do_sample=False,
    temperature=1.0, top_k=50, top_p=1.0, seed=None, eos_token_id=None, pad_token_id=None)` as
    openprim.decoding.Decoder's, sampling with numpy's generator (`seed`)."""

    def __init__(self, buckets):
        self.buckets = buckets                     # runtime.dynamic.DynamicExecutable over the token count
        spec = buckets.spec["decoder"]
        self.batch, self.max_len = spec["batch"], spec["max_len"]
        self.step = buckets.executable(1)
        self.manifest = getattr(buckets, "manifest", None)

    def bucket(self, tokens: int) -> int:
        return self.buckets.range.bucket(tokens)

    def prefill(self, tokens: int):
        return self.buckets.executable(self.bucket(tokens))

    def generate(self, input_ids, max_new_tokens: int, attention_mask=None, *, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = 50, top_p: float = 1.0, seed=None, eos_token_id=None,
                 pad_token_id: int | None = None) -> np.ndarray:
        return generate(self.step, self.prefill, self.bucket, self.batch, self.max_len, input_ids, max_new_tokens,
                        attention_mask, sampler(do_sample, temperature, top_k, top_p, seed), eos_token_id,
                        pad_token_id)

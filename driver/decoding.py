"""Generation with a Hugging Face causal LM, its KV cache carried in the executable.

A decoder step is one compiled graph: (token ids [B, S], their positions [B, S], the cache rows they go to
[S], the cache's padding mask [B, max_len], the row whose logits to return [1]) -> logits [B, V], with every
layer's key and value cache [B, kv heads, max_len, head dim]
carried as state (Graph.carry): the step writes its S rows into the caches in place (prim.index_copy,
kernels/cpu/index_copy.py) and attends over the whole cache under the causal mask the model builds from
the positions (rows past the current position are masked, so whatever they hold is never read).

    prefill  S = the prompt padded to a bucket (a power of two): rows past the prompt are written with
             the padding's keys and overwritten by the decode steps before any query can see them
    decode   S = 1, once per new token, at position P, P + 1, ...

Prompts of different lengths are left-padded (the mask's zeros; a row's positions count its real tokens),
a batch of fewer rows than compiled is filled with copies of the first, and the next token is the argmax or
a draw as transformers' generate makes it (temperature, top-k, top-p; eos and pad tokens).

Both are traced from the model as users bring it (`torch.export` of `StepModule`: the model runs with a
cache whose layers update functionally, `CarriedLayer`), imported, and compiled through the compile
cache; the decode step and every prefill bucket share one state region (`share_state`).
"""
from __future__ import annotations

import os
import time

import numpy as np
import torch
from transformers.cache_utils import Cache, StaticLayer

import openprim
from openprim import compiler
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.torch.importer import import_exported
from openprim.runtime import artifact, generation
from openprim.runtime.buckets import BatchRange

from . import dynamic_batch


class CarriedLayer(StaticLayer):
    """A static cache layer over given key/value tensors, updated out of place at `positions` (index_copy),
    so that an exported step returns the new caches instead of mutating buffers."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor):
        super().__init__(max_cache_len=keys.shape[2])
        self.keys, self.values, self.positions = keys, values, positions
        self.dtype, self.device = keys.dtype, keys.device
        self.batch_size, self.num_heads = keys.shape[:2]
        self.k_head_dim, self.v_head_dim = keys.shape[-1], values.shape[-1]
        self.is_initialized = True

    def get_seq_length(self):
        """The first position written this step: the mask's query offset (a tensor, as StaticLayer's)."""
        return self.positions[0]

    def update(self, key_states, value_states, *args, **kwargs):
        self.keys = self.keys.index_copy(2, self.positions, key_states)
        self.values = self.values.index_copy(2, self.positions, value_states)
        return self.keys, self.values


class StepModule(torch.nn.Module):
    """(input_ids [B, S], position_ids [B, S], cache_position [S], attention_mask [B, max_len], last [1], k0,
    v0, k1, v1, ...) -> (logits at `last` [B, V], k0', v0', ...): one step of `model` (a transformers causal LM)
    over caches given and returned. The mask holds 0 at the cache positions of a row's left padding."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, position_ids, cache_position, attention_mask, last, *caches):
        cache = Cache(layers=[CarriedLayer(k, v, cache_position) for k, v in zip(caches[::2], caches[1::2])])
        out = self.model(input_ids=input_ids, position_ids=position_ids, cache_position=cache_position,
                         attention_mask=attention_mask, past_key_values=cache, use_cache=True, logits_to_keep=last)
        return (out.logits[:, -1], *[t for layer in cache.layers for t in (layer.keys, layer.values)])


def step_example(config, batch: int, tokens: int, max_len: int, dtype=torch.float32) -> tuple:
    """Example arguments of StepModule for a step over `tokens` tokens (zero caches)."""
    shape = cache_shape(config, batch, max_len)
    return (torch.zeros((batch, tokens), dtype=torch.long), torch.zeros((batch, tokens), dtype=torch.long),
            torch.arange(tokens), torch.ones((batch, max_len), dtype=torch.long), torch.tensor([tokens - 1]),
            *[torch.zeros(shape, dtype=dtype) for _ in range(2 * config.num_hidden_layers)])


STEP_INPUTS = ("input_ids", "position_ids", "cache_position", "attention_mask", "last")


def cache_shape(config, batch: int, max_len: int) -> tuple[int, int, int, int]:
    """[B, key/value heads, max_len, head dim] of one layer's cache for a transformers config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return batch, kv_heads, max_len, head_dim


def step_graph(model, batch: int, tokens: int, max_len: int, greedy: bool = False):
    """The Graph of a step over `tokens` tokens, its caches carried as state; with greedy, it returns the
    argmax of the logits (greedy_tokens) instead of the logits."""
    example = step_example(model.config, batch, tokens, max_len, model.dtype)
    with torch.no_grad():
        ep = torch.export.export(StepModule(model).eval(), example, strict=False)
    graph, _ = import_exported(ep)
    caches = len(example) - len(STEP_INPUTS)
    if len(graph.outputs) != 1 + caches:
        raise OpenPrimError(f"the step of {type(model).__name__} returned {len(graph.outputs)} tensors, expected "
                            f"the logits and {caches} caches")
    for k in range(caches):
        graph.carry(graph.inputs[len(STEP_INPUTS) + k], graph.outputs[1 + k])
    if greedy:
        graph.outputs[0] = greedy_tokens(graph, graph.outputs[0])
    return graph


def greedy_tokens(g, logits):
    """The argmax of each row of logits [rows, V] as i64 [rows], computed where the logits are: a step on a
    GPU returns 8 bytes a row instead of its logits (GPT-2 at batch 16: 1.6 MB copied to the host and an
    argmax there, 1.4 ms a token on an H100 host, against a 0.9 ms step). The least index holding the row's
    maximum, as numpy's and torch's argmax: where(x == max, index, V), its minimum (indices in f32, exact
    below 2^24)."""
    vocab = logits.shape[-1]
    top = g.reduce(logits, "max", [-1], True)
    index = g.where(g.eq(logits, top), g.arange(vocab, dtype="f32"), float(vocab))
    return g.cast(g.reduce(index, "min", [-1]), "i64")


class Decoder:
    """Generation with `model` (a transformers causal LM, eval mode) compiled for `target`: at most `batch`
    prompts at once, prompt plus new tokens at most `max_len`."""

    def __init__(self, model, batch: int = 1, max_len: int = 128, target="cpu", **options):
        limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
        if limit is not None and max_len > limit:
            raise OpenPrimError(f"max_len {max_len} is past the model's {limit} positions")
        self.model, self.batch, self.max_len = model.eval(), batch, max_len
        self.target, self.options = target, options
        self.steps = {}      # greedy -> the one-token step (logits, or the argmax token), compiled on first use
        self.prefills = {}   # bucket -> executable; all of them share one state

    def _on_state(self, exe):
        """exe, on the state of the executables compiled before it (the first one holds it)."""
        first = next(iter([*self.steps.values(), *self.prefills.values()]), None)
        if first is not None:
            exe.share_state(first)
        return exe

    def _step(self, greedy: bool):
        if greedy not in self.steps:
            self.steps[greedy] = self._on_state(openprim.compile(
                step_graph(self.model, self.batch, 1, self.max_len, greedy=greedy), self.target, **self.options))
        return self.steps[greedy]

    @property
    def step(self):
        """The one-token step returning the logits [batch, V] (sampling runs it)."""
        return self._step(False)

    @property
    def greedy_step(self):
        """The one-token step returning each row's argmax token instead of its logits (greedy_tokens; greedy
        generate runs it), so a greedy user never compiles the logits step."""
        return self._step(True)

    def bucket(self, tokens: int) -> int:
        """The prefill length a prompt of `tokens` is padded to: the next power of two, at most max_len."""
        return min(1 << max(tokens - 1, 0).bit_length(), self.max_len)

    def prefill(self, tokens: int):
        """The executable of the prefill bucket for a prompt of `tokens` (compiled on first use)."""
        size = self.bucket(tokens)
        if size not in self.prefills:
            self.prefills[size] = self._on_state(openprim.compile(
                step_graph(self.model, self.batch, size, self.max_len), self.target, **self.options))
        return self.prefills[size]

    def generate(self, input_ids, max_new_tokens: int, attention_mask=None, *, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = 50, top_p: float = 1.0, generator=None,
                 eos_token_id=None, pad_token_id: int | None = None) -> np.ndarray:
        """The prompts [rows, P] (int; rows <= batch) followed by up to max_new_tokens new tokens each, as
        transformers' generate does: greedy, or with do_sample drawn from softmax(logits / temperature) cut
        to the top_k tokens and the top_p nucleus (torch.multinomial on `generator`, else torch's global
        generator: the same seed draws the same tokens as generate's). attention_mask [rows, P] marks left
        padding with 0 (prompts of different lengths). A row that emits an eos_token_id (an int or a list)
        continues with pad_token_id (default: the first eos); generation stops once every row has
        (runtime/generation.py runs the loop)."""
        return generation.generate(self.step if do_sample else self.greedy_step, self.prefill, self.bucket,
                                   self.batch, self.max_len, input_ids, max_new_tokens, attention_mask,
                                   _sampler(do_sample, temperature, top_k, top_p, generator), eos_token_id,
                                   pad_token_id, step_chooses=not do_sample)

    def save(self, path: str, max_prompt: int | None = None) -> dict:
        """One artifact at `path` with the decode step and a prefill bucket for every power of two up to
        max_prompt (default max_len) tokens, all on one state, the weights pooled: `openprim.runtime.load(path)`
        runs generate() with numpy alone (sampling from numpy's generator). Returns what
        dynamic_batch.compile_buckets and write_dynamic report: {"buckets", "bytes", "pool_bytes", "seconds"}."""
        t0 = time.perf_counter()
        sizes = BatchRange(1, max_prompt or self.max_len, "prompt length")
        if sizes.high > self.max_len:
            raise OpenPrimError(f"max_prompt {sizes.high} is past max_len {self.max_len}")
        _, parts, _ = dynamic_batch.compile_buckets(
            lambda tokens: step_graph(self.model, self.batch, tokens, self.max_len), sizes.buckets,
            compiler.target_of(self.target), self.options)
        spec = {"name": "tokens", "what": sizes.what, "low": 1, "high": sizes.high, "per_octave": 1, "split": False,
                "inputs": {"input_ids": 1, "position_ids": 1, "cache_position": 0}, "outputs": [None],
                "padding": None, "decoder": {"batch": self.batch, "max_len": self.max_len}}
        pool = artifact.write_dynamic(path, spec, parts)
        return {"buckets": list(sizes.buckets), "bytes": os.path.getsize(path), "pool_bytes": pool,
                "seconds": time.perf_counter() - t0}


def _sampler(do_sample: bool, temperature: float, top_k: int | None, top_p: float, generator):
    """logits [rows, V] -> the next token of each row [rows]: argmax, or a draw after transformers' warpers
    (temperature, top-k, top-p, in that order; filtered tokens at -inf)."""
    if not do_sample:
        return generation.sampler(False)
    generation.check_sampling(temperature, top_k, top_p)

    def draw(logits):
        scores = torch.from_numpy(np.asarray(logits, np.float32)) / temperature
        if top_k:
            kth = torch.topk(scores, min(top_k, scores.shape[-1]))[0][..., -1, None]
            scores = scores.masked_fill(scores < kth, -float("inf"))
        if top_p < 1:
            ordered, order = torch.sort(scores, descending=False)
            drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
            drop[..., -1:] = False
            scores = scores.masked_fill(drop.scatter(1, order, drop), -float("inf"))
        return torch.multinomial(scores.softmax(dim=-1), 1, generator=generator)[:, 0].numpy()
    return draw

"""Greedy decoding of a Hugging Face causal LM with its KV cache carried in the executable.

A decoder step is one compiled graph: (token ids [B, S], their positions [S], the position whose logits
to return [1]) -> logits [B, V], with every layer's key and value cache [B, kv heads, max_len, head dim]
carried as state (Graph.carry): the step writes its S rows into the caches in place (prim.index_copy,
kernels/cpu/index_copy.py) and attends over the whole cache under the causal mask the model builds from
the positions (rows past the current position are masked, so whatever they hold is never read).

    prefill  S = the prompt padded to a bucket (a power of two): rows past the prompt are written with
             the padding's keys and overwritten by the decode steps before any query can see them
    decode   S = 1, once per new token, at position P, P + 1, ...

Both are traced from the model as users bring it (`torch.export` of `StepModule`: the model runs with a
cache whose layers update functionally, `CarriedLayer`), imported, and compiled through the compile
cache; the decode step and every prefill bucket share one state region (`share_state`).
"""
from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import Cache, StaticLayer

import openprim
from openprim.base.errors import OpenPrimError
from openprim.pyfrontend.torch.importer import import_exported


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
    """(input_ids [B, S], cache_position [S], last [1], k0, v0, k1, v1, ...) -> (logits at `last` [B, V],
    k0', v0', ...): one step of `model` (a transformers causal LM) over caches given and returned."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, cache_position, last, *caches):
        cache = Cache(layers=[CarriedLayer(k, v, cache_position) for k, v in zip(caches[::2], caches[1::2])])
        positions = cache_position[None].expand(input_ids.shape[0], -1)   # not from the cache's length
        out = self.model(input_ids=input_ids, position_ids=positions, cache_position=cache_position,
                         past_key_values=cache, use_cache=True, logits_to_keep=last)
        return (out.logits[:, -1], *[t for layer in cache.layers for t in (layer.keys, layer.values)])


def cache_shape(config, batch: int, max_len: int) -> tuple[int, int, int, int]:
    """[B, key/value heads, max_len, head dim] of one layer's cache for a transformers config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return batch, kv_heads, max_len, head_dim


def step_graph(model, batch: int, tokens: int, max_len: int):
    """The Graph of a step over `tokens` tokens, its caches carried as state."""
    config = model.config
    shape = cache_shape(config, batch, max_len)
    caches = [torch.zeros(shape, dtype=model.dtype) for _ in range(2 * config.num_hidden_layers)]
    example = (torch.zeros((batch, tokens), dtype=torch.long), torch.arange(tokens), torch.tensor([tokens - 1]),
               *caches)
    with torch.no_grad():
        ep = torch.export.export(StepModule(model).eval(), example, strict=False)
    graph, _ = import_exported(ep)
    if len(graph.outputs) != 1 + len(caches):
        raise OpenPrimError(f"the step of {type(model).__name__} returned {len(graph.outputs)} tensors, expected "
                            f"the logits and {len(caches)} caches")
    for k in range(len(caches)):
        graph.carry(graph.inputs[3 + k], graph.outputs[1 + k])
    return graph


class Decoder:
    """Greedy generation with `model` (a transformers causal LM, eval mode) compiled for `target`: batch
    `batch`, prompt plus new tokens at most `max_len`."""

    def __init__(self, model, batch: int = 1, max_len: int = 128, target="cpu", **options):
        limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
        if limit is not None and max_len > limit:
            raise OpenPrimError(f"max_len {max_len} is past the model's {limit} positions")
        self.model, self.batch, self.max_len = model.eval(), batch, max_len
        self.target, self.options = target, options
        self.step = openprim.compile(step_graph(model, batch, 1, max_len), target, **options)
        self.prefills = {}   # bucket -> executable sharing the step's state

    def bucket(self, tokens: int) -> int:
        """The prefill length a prompt of `tokens` is padded to: the next power of two, at most max_len."""
        return min(1 << max(tokens - 1, 0).bit_length(), self.max_len)

    def prefill(self, tokens: int):
        """The executable of the prefill bucket for a prompt of `tokens` (compiled on first use)."""
        size = self.bucket(tokens)
        if size not in self.prefills:
            exe = openprim.compile(step_graph(self.model, self.batch, size, self.max_len), self.target,
                                   **self.options)
            exe.share_state(self.step)
            self.prefills[size] = exe
        return self.prefills[size]

    def generate(self, input_ids, max_new_tokens: int) -> np.ndarray:
        """The prompt [batch, P] (int) followed by max_new_tokens greedy tokens: [batch, P + max_new_tokens]."""
        ids = np.asarray(input_ids, np.int64)
        if ids.ndim != 2 or ids.shape[0] != self.batch or not ids.shape[1]:
            raise OpenPrimError(f"input_ids must be [{self.batch}, P] with P >= 1, got {list(ids.shape)}")
        prompt = ids.shape[1]
        if prompt + max_new_tokens > self.max_len:
            raise OpenPrimError(f"{prompt} prompt tokens + {max_new_tokens} new ones exceed max_len {self.max_len}")
        if max_new_tokens <= 0:
            return ids
        size = self.bucket(prompt)
        padded = np.concatenate([ids, np.repeat(ids[:, -1:], size - prompt, axis=1)], axis=1)
        self.step.reset_state()
        logits = self.prefill(prompt)(padded, np.arange(size), np.array([prompt - 1]))
        out = [ids, np.argmax(logits, axis=-1)[:, None]]
        for position in range(prompt, prompt + max_new_tokens - 1):
            logits = self.step(out[-1], np.array([position]), np.array([0]))
            out.append(np.argmax(logits, axis=-1)[:, None])
        return np.concatenate(out, axis=1)

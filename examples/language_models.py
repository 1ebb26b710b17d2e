"""Hugging Face language models as a user brings them: built from their configs (random weights, no hub
download), fed token ids (int64) and an attention mask with padding, imported through torch.export or ONNX.

    BERT, RoBERTa, DistilBERT, ALBERT, ELECTRA, MobileBERT   bidirectional encoders
    GPT-2 (use_cache=False)                                 a causal decoder's forward pass
    T5 encoder                                              relative-position buckets, RMS norm
    Llama (use_cache=False)                                 RMSNorm as x * rsqrt(mean(x^2) + eps), rotary
                                                            embeddings, SwiGLU, grouped-query attention

What they bring that vision models do not: integer inputs (the ids are looked up with `prim.gather`,
bounds-checked after each run), masks built from the attention mask with comparisons and `and`
(transformers 5's masking utilities index the mask with aranges; T5's position buckets and GPT-2's
causal mask come from constants only and are evaluated at import), RoBERTa's position ids computed at run
time (`ne`, `cumsum`, integer arithmetic), token-type rows of a constant id buffer (a constant). The
boolean mask becomes one additive float mask broadcast over the heads inside `prim.attention`.

`SIZES["base"]` are the published configurations (BERT-base: 12 layers, hidden 768, 12 heads, vocab 30522);
`SIZES["small"]` keeps every structural feature at hidden 64, 2 layers, 4 heads, vocab 1000 (tests).
`layers`/`vocab` override a size (the H200 runs carry artifacts of at most 64 MiB: BERT-base width with
fewer layers and a smaller vocabulary). It is also an OpenPrim model file:

    openprim run examples/language_models.py -D model=bert -D size=small -D seq=32
    openprim compile examples/language_models.py -D model=gpt2 -D via=onnx -o gpt2.oprim
"""
import io
import warnings

import numpy as np
import torch

from openprim.base.errors import OpenPrimError

MODELS = ("bert", "roberta", "distilbert", "albert", "electra", "mobilebert", "gpt2", "t5_encoder", "llama")
SIZES = {
    "small": dict(hidden=64, layers=2, heads=4, intermediate=128, vocab=1000),
    "base": dict(hidden=768, layers=12, heads=12, intermediate=3072, vocab=None),   # vocab: the model's own
}


def config(name, hidden, layers, heads, intermediate, vocab):
    """The transformers Config of model `name` at these sizes (vocab None: the published vocabulary)."""
    import transformers as tf
    v = {} if vocab is None else {"vocab_size": vocab}
    common = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=intermediate, **v)
    if name == "bert":
        return tf.BertConfig(**common)
    if name == "roberta":
        return tf.RobertaConfig(**common)
    if name == "electra":
        return tf.ElectraConfig(embedding_size=max(hidden // 2, 32), **common)
    if name == "albert":
        return tf.AlbertConfig(embedding_size=max(hidden // 2, 32), **common)
    if name == "distilbert":
        return tf.DistilBertConfig(dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=intermediate, **v)
    if name == "mobilebert":
        return tf.MobileBertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                   intermediate_size=hidden, intra_bottleneck_size=hidden // 2,
                                   true_hidden_size=hidden // 2, embedding_size=hidden // 2, **v)
    if name == "gpt2":
        return tf.GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads, n_inner=intermediate, use_cache=False, **v)
    if name == "t5_encoder":
        return tf.T5Config(d_model=hidden, d_kv=hidden // heads, d_ff=intermediate, num_layers=layers,
                           num_heads=heads, **v)
    if name == "llama":   # RMSNorm, rotary embeddings, SwiGLU, grouped-query attention (half as many kv heads)
        return tf.LlamaConfig(num_key_value_heads=max(1, heads // 2), use_cache=False, **common)
    raise OpenPrimError(f"unknown model '{name}'; choose one of {', '.join(MODELS)}")


def get(name, size="small", seed=0, **overrides):
    """The model, seeded, in eval mode (sdpa attention, as transformers picks by default)."""
    import transformers as tf
    if size not in SIZES:
        raise OpenPrimError(f"unknown size '{size}'; choose one of {', '.join(SIZES)}")
    cfg = config(name, **{**SIZES[size], **{k: int(v) for k, v in overrides.items() if v is not None}})
    cls = {"bert": tf.BertModel, "roberta": tf.RobertaModel, "distilbert": tf.DistilBertModel,
           "albert": tf.AlbertModel, "electra": tf.ElectraModel, "mobilebert": tf.MobileBertModel,
           "gpt2": tf.GPT2Model, "t5_encoder": tf.T5EncoderModel, "llama": tf.LlamaModel}[name]
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(cfg).eval()


class LastHidden(torch.nn.Module):
    """A Hugging Face model as a module of (input_ids, attention_mask) returning its last hidden state."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]


def small_decoder(kind: str):
    """A small causal LM for decoding tests (transformers' GPT-2, or Llama with grouped-query attention, rotary
    embeddings, RMSNorm and SwiGLU), its matrices drawn wider than the initializer's (std 0.5) so that greedy
    tokens vary from step to step instead of repeating one token."""
    import transformers
    torch.manual_seed(0)
    if kind == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=97,
                                                                     n_positions=64))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, vocab_size=97, max_position_embeddings=64))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5)
    return model.eval()


def eager_greedy(model, ids, new_tokens: int) -> np.ndarray:
    """ids [B, P] followed by new_tokens greedy tokens from full forward passes of eager PyTorch (no cache)."""
    seq = torch.as_tensor(ids)
    with torch.no_grad():
        for _ in range(new_tokens):
            seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], 1)
    return seq.numpy()


def example_input(model, batch=2, seq=16, seed=1):
    """{"input_ids": [batch, seq] int64 ids in the vocabulary, "attention_mask": [batch, seq] int64}, the last
    batch element padded to two thirds of the sequence (its mask 0 there)."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(1, vocab, (batch, seq), generator=g)   # 1..: RoBERTa's padding id is 1, kept real
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, max(1, 2 * seq // 3):] = 0
    return {"input_ids": ids, "attention_mask": mask}


def to_onnx(model, inputs) -> bytes:
    """The model as ONNX bytes (torch.onnx.export's default exporter)."""
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (), f, kwargs=inputs, input_names=list(inputs), output_names=["hidden"])
    return f.getvalue()


def reference(model, inputs) -> np.ndarray:
    """The model's last hidden state in eager PyTorch."""
    with torch.no_grad():
        return model(**inputs)[0].float().numpy()


def build(model="bert", size="small", via="torch", batch=2, seq=16, layers=None, vocab=None, dtype="f32"):
    """The OpenPrim Graph of `model` through torch.export (via="torch") or ONNX (via="onnx"), inputs
    input_ids and attention_mask of [batch, seq]; dtype f16/bf16: the module converted (.half(), .bfloat16()),
    which imports as an f16/bf16 Graph."""
    module = get(model, size, layers=layers, vocab=vocab)
    module = module.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype])
    inputs = example_input(module, int(batch), int(seq))
    if via == "torch":
        from openprim.pyfrontend.torch import import_exported
        return import_exported(torch.export.export(module, (), inputs))[0]
    if via == "onnx":
        from openprim.pyfrontend.onnx import import_model
        return import_model(to_onnx(module, inputs))
    raise OpenPrimError(f"via must be 'torch' or 'onnx', got '{via}'")

"""Constant folding at import time (pyfrontend/torch/folding.py): a subgraph computed only from
constants (Swin's relative-position index and shifted-window mask, BERT's position ids `arange`) is
evaluated when the model is imported, by torch for the torch importer and by onnx's reference evaluator for
the ONNX importer, and costs no op in the Graph. The checks: the import maps every op, the compiled model
(CPU) matches eager, and the Graph has exactly the ops of the same model whose constants are precomputed
buffers. Skipped without torch (and onnx for the ONNX half)."""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import openprim  # noqa: E402
from openprim.pyfrontend.torch import import_exported  # noqa: E402
from openprim.pyfrontend.torch.importer import unsupported_ops  # noqa: E402

WS, SHIFT, HW, HEADS, DIM = 4, 2, 8, 2, 8      # window size, shift, image side, heads, channels
N, NW = WS * WS, (HW // WS) ** 2               # tokens per window, windows


def rel_index():
    """Swin's relative-position index (torchvision's code, with its in-place updates), [N * N] int64."""
    coords = torch.stack(torch.meshgrid(torch.arange(WS), torch.arange(WS), indexing="ij"))
    flat = torch.flatten(coords, 1)
    rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += WS - 1
    rel[:, :, 1] += WS - 1
    rel[:, :, 0] *= 2 * WS - 1
    return rel.sum(-1).flatten()


def shift_mask():
    """Swin's shifted-window attention mask, [NW, N, N]: full, slice assignment, window partition, where."""
    img = torch.full((1, HW, HW), 0.0)
    cnt = 0
    for h in ((0, -WS), (-WS, -SHIFT), (-SHIFT, None)):
        for w in ((0, -WS), (-WS, -SHIFT), (-SHIFT, None)):
            img[:, h[0]:h[1], w[0]:w[1]] = cnt
            cnt += 1
    win = img.view(1, HW // WS, WS, HW // WS, WS).permute(0, 1, 3, 2, 4).reshape(NW, N)
    diff = win.unsqueeze(1) - win.unsqueeze(2)
    return torch.where(torch.eq(diff, 0), torch.zeros(()), torch.full((), -100.0))


def position_bias():
    """Integer arithmetic on arange: fmod and cumsum, a float [N] vector."""
    ids = torch.arange(N)
    return (torch.fmod(ids, 3).cumsum(0) % 5).to(torch.float32) * 0.1


class WindowAttention(nn.Module):
    """Attention over NW windows of N tokens with a relative-position bias gathered from a learned table,
    position embeddings of `arange` ids and the shifted-window mask, all computed in forward from constants.
    precomputed(): the same model with that bias and mask as buffers (the op count the import must reach)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn((2 * WS - 1) ** 2, HEADS))
        self.pos = nn.Embedding(N, N)
        self.qkv = nn.Linear(DIM, 3 * DIM)

    def bias_and_mask(self):
        bias = self.table[rel_index()].view(N, N, HEADS).permute(2, 0, 1)      # [HEADS, N, N]
        bias = bias + self.pos(torch.arange(N)) + position_bias()
        return bias, shift_mask()

    def attend(self, x, bias, mask):            # x: [NW, N, DIM]
        qkv = self.qkv(x).reshape(NW, N, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        s = q @ k.transpose(-2, -1) + bias.unsqueeze(0) + mask.unsqueeze(1)
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(NW, N, DIM)

    def forward(self, x):
        return self.attend(x, *self.bias_and_mask())

    def precomputed(self):
        return Precomputed(self)


class Precomputed(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        with torch.no_grad():
            bias, mask = m.bias_and_mask()
        self.register_buffer("bias", bias.clone())
        self.register_buffer("mask", mask.clone())

    def forward(self, x):
        return self.m.attend(x, self.bias, self.mask)


def _model():
    torch.manual_seed(0)
    m = WindowAttention().eval()
    x = torch.randn(NW, N, DIM)
    with torch.no_grad():
        want = m.double()(x.double()).numpy()
    return m.float(), x, want


def _ops(g):
    return sorted(n.op for n in g.nodes if n.op != "constant")


def test_torch_folds_swin_constants():
    m, x, want = _model()
    g, _ = import_exported(torch.export.export(m, (x,)))
    ref, _ = import_exported(torch.export.export(m.precomputed(), (x,)))
    assert _ops(g) == _ops(ref)                    # nothing of the folded part is left in the Graph
    out = openprim.compile(g, target="cpu")(x.numpy())
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_torch_unsupported_ops_skips_folded_nodes():
    m, x, _ = _model()
    ep = torch.export.export(m, (x,)).run_decompositions()
    assert unsupported_ops(ep) == []


def test_torch_folded_int_constant_read_as_data():
    """An integer constant computed at import time and read by a real op becomes a float param."""
    class M(nn.Module):
        def forward(self, x):
            return x * torch.arange(6).view(2, 3) + torch.full((3,), 2).cumsum(0)
    x = torch.randn(4, 2, 3)
    g, _ = import_exported(torch.export.export(M(), (x,)))
    assert _ops(g) == ["add", "mul"]
    out = openprim.compile(g, target="cpu")(x.numpy())
    np.testing.assert_allclose(out, M()(x).numpy(), rtol=1e-6)


def test_onnx_folds_swin_constants(tmp_path):
    onnx = pytest.importorskip("onnx")
    from openprim.pyfrontend.onnx import import_model, importer
    m, x, want = _model()
    graphs = []
    for i, net in enumerate((m, m.precomputed())):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, (x,), str(tmp_path / f"{i}.onnx"), dynamo=False, opset_version=17,
                              input_names=["x"])
        model = onnx.load(str(tmp_path / f"{i}.onnx"))
        assert importer.unsupported_nodes(model) == {}
        graphs.append(import_model(model))
    assert _ops(graphs[0]) == _ops(graphs[1])
    out = openprim.compile(graphs[0], target="cpu")(x.numpy())
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)

"""The PyTorch importer (openprim.pyfrontend.torch): torch.export -> Graph -> openprim.compile,
and compile_module / the torch.compile backend (openprim.torch_backend). Small hand-written nn.Modules
in eval mode with random weights; the reference is the same model run eagerly in float64. Skipped
without torch."""
import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from openprim.base.errors import OpenPrimError
from openprim import torch_backend
from openprim.pyfrontend.torch import SUPPORTED_OPS, import_exported
from openprim.torch_backend import compile_module, openprim_backend

RTOL = 1e-4


def randomize(model, seed=0):
    """Random weights, and BN statistics that are not the identity (so folding is exercised)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if p.ndim > 1 else 0.3) + (1.0 if name.endswith("norm.weight") else 0.0))
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return model.eval()


def reference(model, inputs):
    """The model run eagerly in float64 (on a copy), as a flat list of numpy arrays."""
    with torch.no_grad():
        out = copy.deepcopy(model).double()(*[t.double() for t in inputs])
    return [np.asarray(o) for o in torch.utils._pytree.tree_leaves(out)]


def check(out, want, what="output"):
    out = [o.detach().numpy() for o in torch.utils._pytree.tree_leaves(out)]
    assert len(out) == len(want), f"{len(out)} outputs, expected {len(want)}"
    for i, (o, w) in enumerate(zip(out, want)):
        assert o.shape == w.shape, f"{what} {i}: shape {o.shape}, expected {w.shape}"
        assert np.all(np.isfinite(o)), f"{what} {i}: non-finite values"
        scale = float(np.max(np.abs(w))) or 1.0
        err = np.abs(o.astype(np.float64) - w)
        tol = RTOL * scale + RTOL * np.abs(w)
        assert np.all(err <= tol), f"{what} {i}: max |err| {err.max():.3g} (max |ref| {scale:.3g})"


def run_and_check(model, *inputs):
    model = randomize(model)
    want = reference(model, inputs)
    run = compile_module(model, inputs)
    check(run(*inputs), want)
    return run


# ----------------------------------------------------------------------------- models
class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 6, (3, 1), padding=(2, 0), dilation=(2, 1), bias=False)

    def forward(self, x):
        return F.leaky_relu(self.conv2(F.relu(self.bn(self.conv(x)))), 0.1)


class Residual(nn.Module):
    def __init__(self, cin=8, cout=16):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, 2, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.down(x))


class Depthwise(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.pw = nn.Conv2d(c, 12, 1)
        self.grouped = nn.Conv2d(12, 12, 3, padding=1, groups=3)

    def forward(self, x):
        y = F.relu6(self.bn(self.dw(x)))
        y = F.hardtanh(self.pw(y), -1.0, 2.0)
        return torch.sigmoid(self.grouped(y))


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        y = F.max_pool2d(self.conv(x), 3, 2, 1)
        a = F.avg_pool2d(y, 3, 1, 1, count_include_pad=False)
        b = F.avg_pool2d(y, 2, ceil_mode=True)
        g = torch.cat([F.adaptive_avg_pool2d(a, 1), b.mean(dim=(-1, -2), keepdim=True)], 1)
        return F.log_softmax(self.fc(torch.flatten(g, 1)), dim=1)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(20, 32), nn.Linear(32, 32), nn.Linear(32, 10, bias=False)

    def forward(self, x):
        y = F.gelu(self.l1(x))
        y = F.elu(self.l2(y), 0.7) + torch.tanh(y) * 0.5
        return F.gelu(self.l3(y), approximate="tanh"), y - 1.0


class Attention(nn.Module):
    """A pre-norm transformer block: layer_norm, multi-head attention with matmul/transpose/reshape,
    softmax, an MLP with GELU, residuals, dropout (identity in eval)."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class GroupNormSilu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3)
        self.gn = nn.GroupNorm(4, 8)
        self.gn2 = nn.GroupNorm(2, 8, affine=False)

    def forward(self, x):
        y = F.silu(self.gn(self.conv(F.pad(x, (1, 1, 1, 1)))))
        y = F.pad(y, (2, 0, 1, 0), value=0.5)
        return self.gn2(y) * 2.0 - y.mean(1, keepdim=True)


class LrnPow(nn.Module):
    """AlexNet's local response normalization (torch decomposes it into avg_pool3d over a 5-d view and pow)
    and a tensor to a scalar power: found running AlexNet written from the paper, whose import stopped there."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 7, 3, stride=2)
        self.lrn = nn.LocalResponseNorm(5, 1e-2, 0.75, 2.0)

    def forward(self, x):
        y = self.lrn(F.relu(self.conv(x)))
        return y + F.relu(y).pow(1.5)


@pytest.mark.parametrize("make,shape", [
    (LrnPow, (2, 3, 13, 11)),
    (ConvBnRelu, (2, 3, 16, 16)), (Residual, (1, 8, 12, 12)), (Depthwise, (1, 8, 10, 10)),
    (Pools, (2, 4, 11, 11)), (MLP, (3, 20)), (Attention, (2, 5, 16)), (GroupNormSilu, (2, 4, 7, 9))],
    ids=lambda v: getattr(v, "__name__", None) or "x".join(map(str, v)))
def test_models(make, shape):
    torch.manual_seed(1)
    run_and_check(make(), torch.randn(shape))


def test_import_exported_graph():
    model = randomize(ConvBnRelu())
    x = torch.randn(1, 3, 8, 8)
    g, names = import_exported(torch.export.export(model, (x,)))
    assert names == ["x"]
    assert [t.shape for t in g.inputs] == [(1, 3, 8, 8)]
    assert [t.shape for t in g.outputs] == [tuple(model(x).shape)]
    ops = [n.op for n in g.nodes]
    assert "conv2d" in ops and "batch_norm" in ops and "input" not in ops


def test_two_inputs_and_bmm():
    class M(nn.Module):
        def forward(self, a, b):
            return torch.bmm(a, b).relu(), torch.matmul(a, b.transpose(1, 2).transpose(1, 2)) / 3
    a, b = torch.randn(2, 4, 6), torch.randn(2, 6, 5)
    run_and_check(M(), a, b)


class Misc(nn.Module):
    """Slices (first, middle and last dim, with a step), select, unsqueeze/squeeze, expand, neg, rsub,
    add with alpha, division by a tensor, a constant buffer, a dict output."""

    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.linspace(-1, 1, 6))

    def forward(self, x):                                   # x: [4, 5, 6]
        a = x[1:3] * 2                                      # [2, 5, 6]
        b = x[:, 1:4, :] + self.offset                      # [4, 3, 6]
        c = x[..., ::2]                                     # [4, 5, 3]
        d = x[:, 2]                                         # [4, 6]
        e = torch.add(d.unsqueeze(1).expand(4, 3, 6), b, alpha=0.5)
        f = 1.0 - (-c) / (torch.sigmoid(x[:, :, :3]) + 1.0)
        return {"a": a, "e": e.squeeze(0), "f": f, "g": d.unsqueeze(-1).squeeze(-1) + 1}


def test_misc_ops_and_dict_output():
    x = torch.randn(4, 5, 6)
    model = Misc().eval()
    run = run_and_check(model, x)
    out = run(x)
    assert isinstance(out, dict) and sorted(out) == ["a", "e", "f", "g"]


def test_transformer_encoder_layer_and_sdpa():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
            self.register_buffer("mask", torch.randn(5, 5))

        def forward(self, x):                           # x: [2, 5, 16]
            y = self.enc(x)
            q = y.reshape(2, 5, 2, 8).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, q * 0.5, q.relu(), is_causal=True)
            b = F.scaled_dot_product_attention(q, q, q, attn_mask=self.mask, scale=0.3)
            return (a + b).transpose(1, 2).reshape(2, 5, 16)
    run_and_check(M(), torch.randn(2, 5, 16))


def test_linear_on_permuted_input_keeps_its_weight():
    """A linear on a permuted 3-d input (nn.MultiheadAttention's in-projection) decomposes into bmm with the
    weight expanded over the sequence: it imports as a matmul on the weight itself, never an expanded copy
    (ViT-B/16's was 197 x 768 x 2304 per layer, 1.3 GB)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 24)

        def forward(self, x):                           # x: [2, 7, 16]
            return self.proj(x.transpose(0, 1)).relu()
    model, x = M().eval(), torch.randn(2, 7, 16)
    g, _ = import_exported(torch.export.export(model, (x,)))
    assert max(n.value.size for n in g.nodes if n.op == "constant") == 16 * 24
    run_and_check(model, x)


def test_unsupported_op_is_named():
    class M(nn.Module):
        def forward(self, x):
            return torch.sort(x, 1).values.relu()
    with pytest.raises(OpenPrimError, match="sort"):
        import_exported(torch.export.export(M(), (torch.randn(2, 3),)))


def test_supported_ops_listed():
    for op in ("convolution", "_native_batch_norm_legit_no_training", "addmm", "native_layer_norm",
               "native_group_norm", "max_pool2d_with_indices", "constant_pad_nd", "_softmax"):
        assert op in SUPPORTED_OPS


# ----------------------------------------------------------------------------- torch.compile backend
def test_torch_compile_backend(monkeypatch):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Residual(4, 8)
            self.fc = nn.Linear(8, 3)

        def forward(self, x):
            y = self.block(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1)), y

    torch._dynamo.reset()
    torch_backend._WARNED.clear()
    runs = count_openprim_runs(monkeypatch)
    model = randomize(M())
    x = torch.randn(2, 4, 8, 8)
    want = reference(model, (x,))
    compiled = torch.compile(model, backend=openprim_backend)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)     # no eager fallback
        out = compiled(x)
        assert isinstance(out, tuple) and len(out) == 2
        check(out, want)
        x2 = torch.randn(2, 4, 8, 8)
        check(compiled(x2), reference(model, (x2,)))
    assert runs == [1, 1]                                  # both calls ran the OpenPrim executable

    # the weights are compiled in: changing one in place makes later calls run eagerly (with a warning)
    with torch.no_grad():
        model.fc.weight.mul_(2.0)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(compiled(x), reference(model, (x,)))
    assert any("changed" in str(w.message) for w in caught)
    assert runs == [1, 1]

    # with gradients enabled (parameters require grad) AOTAutograd's forward and backward graphs compile with
    # OpenPrim (test_torch_autograd.py); here with eval-mode batch norm, against eager's gradients
    torch_backend.AOT_COUNTS.clear()
    eager = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)     # no eager fallback
        out = compiled(x)
        out[0].square().sum().backward()
    eager(x)[0].square().sum().backward()
    check(out, reference(model, (x,)))
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        check([p.grad], [q.grad.numpy().astype(np.float64)], f"grad of {name}")
    assert out[0].grad_fn is not None and runs == [1, 1]
    assert torch_backend.AOT_COUNTS["forward runs"] == torch_backend.AOT_COUNTS["backward runs"] == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_frameworks.py checks the "
                    "same on a GPU machine without MLIR, through the compile cache)")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_compile_backend_cuda(dtype):
    """torch.compile(backend="openprim") on a CUDA module: CUDA tensors of the model's dtype in and out, the
    same outputs as eager within the dtype's tolerance."""
    dt = getattr(torch, dtype)
    torch._dynamo.reset()
    model = randomize(Residual(4, 8)).cuda().to(dt)
    x = torch.randn(2, 4, 9, 7, device="cuda", dtype=dt)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)     # no eager fallback
        out = torch.compile(model, backend="openprim")(x)
        want = model.double()(x.double())
    assert out.is_cuda and out.dtype == dt
    np.testing.assert_allclose(out.double().cpu().numpy(), want.cpu().numpy(), rtol=2e-2, atol=2e-2)


def count_openprim_runs(monkeypatch):
    runs = []
    real = torch_backend._Compiled.run_flat

    def counted(self, flat):
        runs.append(1)
        return real(self, flat)
    monkeypatch.setattr(torch_backend._Compiled, "run_flat", counted)
    return runs


def test_torch_compile_fallback_warns():
    class M(nn.Module):
        def forward(self, x):
            return torch.sort(x, 1).values.relu() + 1

    torch._dynamo.reset()
    torch_backend._WARNED.clear()
    model = M()
    x = torch.randn(3, 4)
    compiled = torch.compile(model, backend=openprim_backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x)
        out2 = compiled(x)
    msgs = [str(w.message) for w in caught if "openprim_backend" in str(w.message)]
    assert len(msgs) == 1 and "sort" in msgs[0], msgs
    torch.testing.assert_close(out, model(x))
    torch.testing.assert_close(out2, model(x))


def test_channels_last_input(tmp_path):
    """Graph.channels_last_input: the input is taken as (N, H, W, C) and a transpose gives the model its
    (N, C, H, W). On the CPU the numerics match eager; for sm_90 (compile only) the NHWC layout's own
    transpose of the input cancels against it, so no kernel touches the input before the first conv."""
    import openprim.compiler
    model = randomize(Residual(3, 16))
    x = torch.randn(2, 3, 13, 11)
    g, _ = import_exported(torch.export.export(model, (x,)))
    g.channels_last_input(0)
    assert g.inputs[0].shape == (2, 13, 11, 3)
    out = openprim.compile(g, target="cpu")(np.ascontiguousarray(x.permute(0, 2, 3, 1).numpy()))
    check([torch.from_numpy(out)], reference(model, [x]))

    h = import_exported(torch.export.export(model.half(), (x.half(),)))[0]
    h.channels_last_input(0)
    plan = openprim.compiler.save(h, str(tmp_path / "cl.oprim"), target="nvvm:sm_90")["plan"]
    first = plan["steps"][0]
    assert not first["kernel"].startswith("transpose") and 0 in first["args"], plan["steps"][:2]


# ----------------------------------------------------------------------------- index_put, F.fold, cropping pads
class FoldPatches(nn.Module):
    """MobileViTv2's folding of patches back to a map (F.fold: col2im, an index_put with accumulate=True)."""
    def __init__(self, size, kernel, stride, padding):
        super().__init__()
        self.size, self.kernel, self.stride, self.padding = size, kernel, stride, padding

    def forward(self, x):
        return F.fold(x * 1.5, output_size=self.size, kernel_size=self.kernel, stride=self.stride,
                      padding=self.padding)


class PutTwoIndices(nn.Module):
    def forward(self, x, v):
        rows, cols = torch.arange(3) * 2, torch.tensor([1, 0, 3])
        return torch.index_put(x, (rows, cols), v) + torch.index_put(x, (rows, cols), v * 2, accumulate=True)


class PutRepeated(nn.Module):
    """Rows that repeat, added up (accumulate=True), beside single elements put (without accumulate torch
    leaves a repeated position's value undefined)."""
    def forward(self, x, v):
        rows = torch.tensor([0, 2, 0, 1, 2])
        return torch.index_put(x, (rows,), v, accumulate=True) * 3 + \
            torch.index_put(x, (torch.tensor([0, 2, 1]), torch.tensor([0, 2, 4])), v[:3, 0])


@pytest.mark.parametrize("model,shapes", [
    (FoldPatches((8, 8), 2, 2, 0), [(2, 16, 16)]),           # patches that do not overlap: one gather
    (FoldPatches((6, 7), 3, 1, 1), [(1, 45, 42)]),           # overlapping and padded: sums, then a crop
    (PutTwoIndices(), [(6, 4, 3), (3, 3)]),
    (PutRepeated(), [(3, 5), (5, 5)])], ids=["fold", "fold_overlap_padded", "two_indices", "repeated"])
def test_index_put_constant_indices(model, shapes):
    gen = torch.Generator().manual_seed(len(shapes))
    run_and_check(model, *[torch.randn(s, generator=gen) for s in shapes])

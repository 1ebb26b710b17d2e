"""Parity of the torch.export importer with the ONNX one on the ops that timm/torchvision models need
(issue 30): split_with_sizes / split (MixNet, CSPResNet, Res2Net, ShuffleNetV2), upsample_nearest2d.vec
(HRNet), sum.dim_IntList (ResNeSt), batch norm on [N, C] and [N, C, L] inputs (RepViT), expand
(EdgeNeXt), and ONNX Expand. Small modules with random weights and odd sizes, compiled for the CPU
through compile_module (torch.export) and compared with eager PyTorch in float32; ONNX Expand against
numpy. Skipped without torch (onnx for the ONNX test)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from openprim.pyfrontend.torch.importer import _decompose, _op_key  # noqa: E402
from openprim.torch_backend import compile_module  # noqa: E402

RTOL = 1e-5


def aten_ops(model, inputs):
    """The op keys (as the importer's table names them) of model's core-ATen program."""
    ep = _decompose(torch.export.export(model, inputs))
    return {str(n.target) for n in ep.graph_module.graph.nodes if n.op == "call_function"} | \
        {_op_key(n.target) for n in ep.graph_module.graph.nodes if n.op == "call_function"}


def close(got, want, what="output"):
    got = got.detach().numpy().astype(np.float64) if isinstance(got, torch.Tensor) else np.asarray(got, np.float64)
    want = want.detach().numpy().astype(np.float64) if isinstance(want, torch.Tensor) else np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    scale = float(np.max(np.abs(want))) if want.size else 1.0
    err = np.abs(got - want)
    assert np.all(err <= RTOL * (scale or 1.0) + RTOL * np.abs(want)), \
        f"{what}: max |err| {err.max():.3g} (max |ref| {scale:.3g})"


def compare(model, *inputs, ops=()):
    """compile_module(model) against eager model in float32; `ops`: op keys the program must contain."""
    model = model.eval()
    if ops:
        have = aten_ops(model, inputs)
        assert set(ops) <= have, f"expected {ops} in the exported program, got {sorted(have)}"
    with torch.no_grad():
        want = model(*inputs)
    got = compile_module(model, inputs)(*inputs)
    want = want if isinstance(want, (tuple, list)) else [want]
    got = got if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        close(g, w, f"output {i}")


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- split_with_sizes / split
class SplitSizes(nn.Module):
    """Uneven sizes on a negative dim, each part used (Res2Net / MixNet style: a conv per part)."""
    def __init__(self, sizes, dim):
        super().__init__()
        self.sizes, self.dim = sizes, dim

    def forward(self, x):
        parts = torch.split(x, self.sizes, dim=self.dim)
        return tuple(p * (i + 1.5) for i, p in enumerate(parts))


@pytest.mark.parametrize("sizes, dim", [([2, 3, 2], -3), ([1, 4], -1), ([3, 1, 1, 2], 1), ([5], -2)])
def test_split_with_sizes(sizes, dim):
    compare(SplitSizes(sizes, dim), rand(2, 7, 5, 5) if dim != -1 else rand(2, 3, 4, 5),
            ops=("split_with_sizes",) if len(sizes) > 1 else ())


class SplitConvCat(nn.Module):
    """CSPResNet / MixNet: split channels unevenly, a conv on each part (its own kernel), concatenate."""
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(5, 6, 5, padding=2)

    def forward(self, x):
        a, b = torch.split(x, [3, 5], dim=-3)
        return torch.cat([self.a(a), self.b(b)], 1).relu()


def test_split_conv_cat():
    torch.manual_seed(1)
    compare(SplitConvCat(), rand(1, 8, 9, 7), ops=("split_with_sizes",))


class SplitEqual(nn.Module):
    """torch.split with one size (the last part smaller) and chunk (ShuffleNetV2's channel split)."""
    def forward(self, x):
        a, b, c = torch.split(x, 3, dim=1)
        d, e = x.chunk(2, dim=-1)
        return a - c.sum(1, keepdim=True), b * 2, d, e + 1


def test_split_equal_parts_and_chunk():
    compare(SplitEqual(), rand(2, 7, 3, 6))


# ----------------------------------------------------------------------------- upsample_nearest2d.vec
class Upsample(nn.Module):
    def __init__(self, size=None, scale=None):
        super().__init__()
        self.size, self.scale = size, scale

    def forward(self, x):
        return F.interpolate(x * 1.5, size=self.size, scale_factor=self.scale, mode="nearest")


@pytest.mark.parametrize("size, scale", [((7, 9), None), ((3, 5), None), ((6, 10), None), ((2, 4), None),
                                         (None, 2.0), (None, (3.0, 2.0)), (None, 1.5), (None, (0.5, 1.7))])
def test_upsample_nearest2d_vec(size, scale):
    compare(Upsample(size, scale), rand(1, 2, 3, 5), ops=("aten.upsample_nearest2d.vec",))


class HRNetFuse(nn.Module):
    """HRNet's fuse layer: a low-resolution branch, 1x1 conv + BN, upsampled by 2 and added."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 4, 1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.copy_(rand(4, seed=3) * 0.2)
            self.bn.running_var.copy_(rand(4, seed=4).abs() + 0.5)

    def forward(self, hi, lo):
        return (hi + F.interpolate(self.bn(self.conv(lo)), scale_factor=2, mode="nearest")).relu()


def test_hrnet_fuse():
    torch.manual_seed(2)
    compare(HRNetFuse(), rand(1, 4, 10, 6), rand(1, 6, 5, 3, seed=1))


# ----------------------------------------------------------------------------- sum.dim_IntList
class Sum(nn.Module):
    def __init__(self, dims, keepdim):
        super().__init__()
        self.dims, self.keepdim = dims, keepdim

    def forward(self, x):
        return x.sum(dim=self.dims, keepdim=self.keepdim) * 0.5


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dims", [(1, 3), (-1, 2), (0,), (-3,), (2, 3), (0, 1, 2, 3)])
def test_sum_dims(dims, keepdim):
    compare(Sum(dims, keepdim), rand(2, 3, 5, 7), ops=("aten.sum.dim_IntList",))


class SplitAttention(nn.Module):
    """ResNeSt's split attention: the radix splits summed, pooled, a 1x1 conv, softmax over the radix,
    the weighted splits summed again (sum.dim_IntList over the radix axis)."""
    def __init__(self, c=5, radix=2):
        super().__init__()
        self.radix = radix
        self.fc = nn.Conv2d(c, c * radix, 1)

    def forward(self, x):
        b, rc, h, w = x.shape
        xs = x.reshape(b, self.radix, rc // self.radix, h, w)
        gap = xs.sum(dim=1).mean((2, 3), keepdim=True)
        attn = self.fc(gap).reshape(b, self.radix, rc // self.radix, 1, 1).softmax(1)
        return (xs * attn).sum(dim=1)


def test_resnest_split_attention():
    torch.manual_seed(3)
    compare(SplitAttention(), rand(2, 10, 7, 5), ops=("aten.sum.dim_IntList",))


# ----------------------------------------------------------------------------- batch norm on 2-d / 3-d
class BN1d(nn.Module):
    def __init__(self, c, affine=True, linear=False):
        super().__init__()
        self.bn = nn.BatchNorm1d(c, affine=affine, eps=1e-3)
        self.fc = nn.Linear(c, 3) if linear else None
        with torch.no_grad():
            self.bn.running_mean.copy_(rand(c, seed=5) * 0.3)
            self.bn.running_var.copy_(rand(c, seed=6).abs() + 0.4)
            if affine:
                self.bn.weight.copy_(rand(c, seed=7) * 0.5 + 1)
                self.bn.bias.copy_(rand(c, seed=8) * 0.3)

    def forward(self, x):
        y = self.bn(x)
        return self.fc(y) if self.fc is not None else y


@pytest.mark.parametrize("shape, affine, linear", [((3, 5), True, False), ((3, 5), True, True),
                                                    ((2, 5, 7), True, False), ((1, 5, 9), False, False)])
def test_batch_norm_2d_3d_input(shape, affine, linear):
    """RepViT's classifier head: BatchNorm1d on [N, C] before a Linear; BatchNorm1d on [N, C, L]."""
    torch.manual_seed(4)
    compare(BN1d(shape[1], affine, linear), rand(*shape))


# ----------------------------------------------------------------------------- expand
class Expand(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.size = size

    def forward(self, x):
        return x.expand(*self.size) * 1.5 + 0.25


@pytest.mark.parametrize("shape, size", [((2, 1, 4, 1), (2, 3, 4, 5)), ((1, 5), (3, 2, 5)), ((3, 1), (-1, 7)),
                                         ((1, 1, 3), (2, 4, -1))])
def test_expand(shape, size):
    compare(Expand(size), rand(*shape), ops=("expand",))


class EdgeNeXtPos(nn.Module):
    """EdgeNeXt's positional encoding / layer scale: a per-channel parameter expanded to the batch."""
    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(rand(1, 6, 1, 1, seed=9))

    def forward(self, x):
        return x + self.gamma.expand(x.shape[0], -1, x.shape[2], x.shape[3])


def test_edgenext_expand_parameter():
    compare(EdgeNeXtPos(), rand(2, 6, 3, 5))


# ----------------------------------------------------------------------------- ONNX Expand
@pytest.mark.parametrize("shape, target", [((2, 1, 4, 1), (2, 3, 4, 5)), ((3, 1, 5), (2, 1, 4, 1)),
                                           ((1, 5), (4, 1)), ((3, 4), (1, 1)), ((3, 4), (3, 4)),
                                           ((5,), (2, 3, 5)), ((1, 3, 1), (7, 1, 1, 2))])
def test_onnx_expand(shape, target):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    import openprim.onnx_backend as onnx_backend
    out = np.broadcast_shapes(shape, target)
    nodes = [helper.make_node("Expand", ["x", "shape"], ["e"]), helper.make_node("Mul", ["e", "k"], ["y"])]
    graph = helper.make_graph(
        nodes, "expand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(np.asarray(target, np.int64), "shape"),
         numpy_helper.from_array(np.asarray(1.5, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    rep = onnx_backend.prepare(model)
    got = rep.run([x])[0]
    close(got, np.broadcast_to(x.astype(np.float64), out) * 1.5)


def test_onnx_expand_bad_shape():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from openprim.base.errors import OpenPrimError
    from openprim.pyfrontend.onnx import import_model
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"])], "expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 4))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 4))],
        [numpy_helper.from_array(np.asarray([2, 4], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(OpenPrimError, match="does not broadcast"):
        import_model(model)


# ----------------------------------------------------------------------------- batch statistics
class BatchStatistics(nn.Module):
    """Batch norm with the batch's statistics (training=True on activations: _native_batch_norm_legit
    .no_stats), and InstanceNorm2d (the same through its [1, N*C, H, W] view), each with an affine."""
    def __init__(self, c=5):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=1)
        self.norm = nn.InstanceNorm2d(c, affine=True)
        self.w, self.b = nn.Parameter(rand(c, seed=1) + 1), nn.Parameter(rand(c, seed=2))

    def forward(self, x):
        y = F.batch_norm(self.conv(x), None, None, self.w, self.b, training=True, eps=1e-3)
        return self.norm(y.relu()) * 0.5 + y


@pytest.mark.parametrize("shape", [(3, 3, 9, 11), (1, 3, 7, 5)])
def test_batch_statistics(shape):
    compare(BatchStatistics(), rand(*shape) * 3 + 1, ops=("_native_batch_norm_legit",))


def test_batch_statistics_1d():
    """[N, C, L] and [N, C] inputs (BatchNorm1d in training mode)."""
    class M(nn.Module):
        def forward(self, x):
            return F.batch_norm(x, None, None, training=True) + F.batch_norm(x.mean(-1), None, None, training=True)[..., None]
    compare(M(), rand(4, 6, 7) * 2 - 1)


# ----------------------------------------------------------------------------- ops the HF coverage run missed
class Conv1d(nn.Module):
    """ConvBERT / SqueezeBERT: 1-d convolutions (viewed as [N, C, L, 1] around conv2d)."""
    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(6, 9, 3, stride=2, padding=2, dilation=2)
        self.b = nn.Conv1d(9, 9, 5, padding=2, groups=9)

    def forward(self, x):
        return self.b(self.a(x)).relu()


def test_conv1d():
    compare(Conv1d(), rand(2, 6, 17))


class Norms(nn.Module):
    """linalg.vector_norm (ConvNeXtV2's GRN, SwinV2's cosine attention, SwiftFormer), repeat, index_select,
    and the unary math ops as aten spells them."""
    def __init__(self):
        super().__init__()
        self.register_buffer("idx", torch.tensor([2, 0, 4, 4]))

    def forward(self, x, i):
        g = torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True)
        n1 = torch.linalg.vector_norm(x, ord=1, dim=-1)
        ninf = torch.linalg.vector_norm(x, ord=float("inf"), dim=1)
        rep = x.repeat(2, 1, 3)[:, :, :5]
        sel = torch.index_select(x, 2, self.idx).sum(-1, keepdim=True) + torch.index_select(x, 1, i)[:, :1]
        math_ops = torch.sqrt(x.abs() + 1) + torch.exp(-x.abs()) + torch.log(x.abs() + 2) + torch.erf(x) + \
            torch.reciprocal(x.abs() + 1)
        return x / g + n1[..., None] + ninf[:, None] + rep[:2] + sel + math_ops


def test_norms_repeat_index_select():
    compare(Norms(), rand(2, 3, 5), torch.tensor([1, 0, 2]))


class WindowBeyondInput(nn.Module):
    """HF EfficientNet's pooler: AvgPool2d(hidden_dim, ceil_mode=True) on a 3x3 map, a window larger than the
    input that PyTorch clips to it (a global pool); the same for max."""
    def forward(self, x):
        return nn.AvgPool2d(640, ceil_mode=True)(x) + nn.MaxPool2d((5, 4), ceil_mode=True)(x)


def test_pool_window_beyond_input():
    compare(WindowBeyondInput(), rand(2, 6, 3, 3))


# ----------------------------------------------------------------------------- ops the second coverage run missed
class Interpolate(nn.Module):
    """F.interpolate's linear modes (DPT's fusion stages, segmentation heads) and nearest on 1-d and 3-d."""
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, x):
        return F.interpolate(x * 1.5 - 0.25, **self.kw)


@pytest.mark.parametrize("shape, kw, op", [
    ((2, 3, 5, 7), dict(scale_factor=2, mode="bilinear"), "upsample_bilinear2d"),
    ((2, 3, 5, 7), dict(scale_factor=2, mode="bilinear", align_corners=True), "upsample_bilinear2d"),
    ((1, 3, 5, 7), dict(size=(9, 4), mode="bilinear"), "upsample_bilinear2d"),
    ((1, 2, 6, 5), dict(scale_factor=(1.7, 0.6), mode="bilinear"), "upsample_bilinear2d"),
    ((1, 2, 1, 5), dict(size=(3, 1), mode="bilinear", align_corners=True), "upsample_bilinear2d"),
    # these reach the importer decomposed (no upsample op left to check for)
    ((2, 3, 7), dict(scale_factor=3, mode="linear"), None),
    ((1, 2, 2, 3, 4), dict(size=(3, 5, 6), mode="trilinear", align_corners=True), None),
    ((2, 3, 7), dict(scale_factor=2, mode="nearest"), None),
    ((1, 2, 2, 3, 4), dict(size=(4, 5, 3), mode="nearest"), None),
    ((1, 3, 5, 7), dict(size=(8, 6), mode="bicubic"), None),
    ((1, 3, 5, 7), dict(scale_factor=2, mode="bicubic", align_corners=True), None),
])
def test_interpolate(shape, kw, op):
    model, x = Interpolate(**kw), rand(*shape)
    assert op is None or any(op in k for k in aten_ops(model, (x,))), f"expected {op} in the exported program"
    compare(model, x)


class ConvTranspose(nn.Module):
    """DPT's reassemble stage (ConvTranspose2d by 4 and 2), a U-Net decoder's, a 1-d one (audio decoders)."""
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return self.conv(x).relu() - 0.1


@pytest.mark.parametrize("conv, shape", [
    (nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1), (2, 6, 5, 7)),
    (nn.ConvTranspose2d(6, 4, 4, stride=4), (1, 6, 3, 3)),
    (nn.ConvTranspose2d(6, 8, 3, stride=2, padding=1, groups=2, dilation=2, bias=False), (1, 6, 5, 4)),
    (nn.ConvTranspose2d(4, 4, 3, stride=1, padding=1, groups=4), (1, 4, 6, 5)),
    (nn.ConvTranspose1d(5, 3, 4, stride=2, padding=1), (2, 5, 9)),
])
def test_conv_transpose(conv, shape):
    torch.manual_seed(3)
    conv.reset_parameters()
    compare(ConvTranspose(conv), rand(*shape))


class GroupNormAnyRank(nn.Module):
    """wav2vec2 / HuBERT's feature encoder: a group norm of a 1-d convolution's [N, C, L] output; and 3-d."""
    def __init__(self, channels, groups):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels)
        with torch.no_grad():
            self.gn.weight.copy_(1 + 0.3 * rand(channels, seed=5))
            self.gn.bias.copy_(0.2 * rand(channels, seed=6))

    def forward(self, x):
        return F.gelu(self.gn(x))


@pytest.mark.parametrize("shape, groups", [((2, 8, 13), 4), ((1, 6, 17), 6), ((1, 8, 3, 4, 5), 2)])
def test_group_norm_any_rank(shape, groups):
    compare(GroupNormAnyRank(shape[1], groups), rand(*shape) * 3 + 1)


class PartialRotary(nn.Module):
    """Phi-3's rotary embedding: q[..., :rotary_dim] rotated, q[..., rotary_dim:] (empty when the rotation
    covers the head) passed on and concatenated; an empty split part too."""
    def __init__(self, rotary_dim):
        super().__init__()
        self.rotary_dim = rotary_dim

    def forward(self, q):
        rot, rest = q[..., :self.rotary_dim], q[..., self.rotary_dim:]
        a, b = torch.split(q, [q.shape[1], 0], dim=1)
        return torch.cat([rot.flip(-1) * 2, rest], -1), torch.cat([b, a + 1], 1)


@pytest.mark.parametrize("rotary_dim", [8, 4])
def test_empty_slice_concatenated(rotary_dim):
    compare(PartialRotary(rotary_dim), rand(2, 3, 8))


class EmptyUsed(nn.Module):
    def forward(self, q):
        return q[..., 8:] * 2


def test_empty_tensor_elsewhere_is_an_error():
    from openprim.base.errors import OpenPrimError
    with pytest.raises(OpenPrimError, match=r"zero-size tensor \[2, 3, 0\].*only as operands of a concatenation"):
        compile_module(EmptyUsed().eval(), (rand(2, 3, 8),))

"""A decode step's kernels on GPUs: matmuls of a few rows (kernels/gpu/gemv.py, solver gemv_gpu) and attention
of one query row over a key cache (kernels/gpu/decode_attention.py, solver attention_decode_gpu).

1. Selection (compile-only, no GPU): GPT-2's decode projections (one row) take gemv_gpu on sm_90, sm_80
   and gfx942, in one launch of a block per column chunk; 16 rows take gemv_mma (kernels/nvidia/gemv_mma.py)
   on NVIDIA, one launch of a block per column slab; the default
   column lanes give every multiprocessor a block where the columns allow it. Its attention over a
   544-key cache takes attention_decode_gpu, 9 key splits of 12 heads and the combining launch; a
   prefill's (many query rows) stays on the flash kernels.
2. Numerics against float64 numpy on a GPU target (recorded and replayed through helpers.py). GEMV: one
   to eight rows, a 3-d left operand, K that is no multiple of 4 (a ragged last group), N that is no
   multiple of 8 (narrower vectors) or of a block's columns (a ragged last chunk), bias, residual and
   activations, f16, bf16 and f32, every column-lane count. The mma.sync GEMV: one to sixteen rows, K past
   the last whole k tile, more warps than k tiles, ragged column slabs, every configuration, constant
   weights in panels of a slab's columns and weights that are an input. Decode attention: head dims 64 and 128, one
   split and many (an empty last one included), fewer keys than a step, additive masks broadcast and per
   batch, BHSD and BSHD.

    python -m pytest test/python/test_gpu_decode.py -q
    OPENPRIM_TEST_TARGET=nvvm:sm_90 OPENPRIM_GPU_RECORD=out/gpu_cases_decode python -m pytest test/python/test_gpu_decode.py -q
"""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from helpers import TARGET, Net, assert_close, rounded
from test_attention import _attention
from test_decoding import cache_graph
from openprim import compiler
from openprim.base.target import parse_target
from openprim.kernels.gpu import decode_attention, gemv
from openprim.kernels.nvidia import gemv_mma
from openprim.plan import build_plan
from openprim.pyfrontend import Graph
from openprim.solvers import SOLVERS
from openprim.solvers.problem import AttentionProblem, GemmProblem


def linear_graph(rows: int, k: int, n: int, dtype="f16") -> Graph:
    rng = np.random.default_rng(0)
    g = Graph(dtype=dtype)
    x = g.input("x", (1, rows, k))
    g.output(g.matmul(x, g.param("w", rng.standard_normal((k, n)) * k ** -0.5), g.param("b", rng.standard_normal(n))))
    return g


@pytest.mark.parametrize("target", ["nvvm:sm_90", "nvvm:sm_80", "rocdl:gfx942"])
def test_decode_projection_is_one_gemv_launch(target, request):
    """GPT-2's 768 -> 768 projection of one token: gemv_gpu, one launch, a block per 2 x 8 columns (48
    blocks: fewer than the SMs, but chunks narrower than a 32-byte sector of a weight row waste reads)."""
    if target.startswith("rocdl"):
        request.getfixturevalue("toolchain")
    t = parse_target(target)
    plan, _ = build_plan(compiler.lower(linear_graph(1, 768, 768), target), t)
    step, = [s for s in plan["steps"] if s.get("op") == "matmul"]
    assert step["solver"] == "gemv_gpu", step
    kernel = plan["kernels"][step["kernel"]]
    launch, = kernel["launches"]
    lanes = step["params"]["lanes"]
    assert lanes == gemv.default_lanes(1, 768, "f16", t.chip.units)
    assert launch["grid"] == [768 // (8 * lanes), 1, 1] and launch["block"] == [lanes, 256 // lanes, 1], launch


@pytest.mark.parametrize("target", ["nvvm:sm_90", "nvvm:sm_80"])
def test_sixteen_rows_take_the_mma_gemv(target):
    """16 decode rows (a batch of 16 sequences): gemv_mma, one launch of a block per column slab with its
    warps splitting k (768 columns: 48 slabs of 16, 4 warps), not the tiled GEMM split over k (two launches)."""
    t = parse_target(target)
    plan, _ = build_plan(compiler.lower(linear_graph(16, 768, 768), target), t)
    step, = [s for s in plan["steps"] if s.get("op") == "matmul"]
    assert step["solver"] == "gemv_mma", step
    launch, = plan["kernels"][step["kernel"]]["launches"]
    bn, warps, stages = gemv_mma.CONFIGS[step["params"]["tile"]]
    assert launch["grid"] == [768 // bn, 1, 1] and launch["block"] == [32 * warps, 1, 1], launch
    assert launch["shared"] == warps * gemv_mma.ring_bytes((bn, warps, stages))
    assert "rows" in SOLVERS["gemv_gpu"].is_applicable(GemmProblem(1, 16, 768, 768, False, False, "f16", "bias"), t)
    assert "rows" in SOLVERS["gemv_mma"].is_applicable(GemmProblem(1, 17, 768, 768, False, False, "f16", "bias"), t)


@pytest.mark.parametrize("n,want", [(768, 16), (2304, 32), (3072, 32), (4104, 8), (1040, 16)])
def test_gemv_mma_default_columns(n, want):
    """Slabs that divide N (its panels): 32 columns while they leave every other SM of 132 a block, else 16,
    else 8 (4104 = 8 x 513)."""
    assert gemv_mma.CONFIGS[gemv_mma.default_config(n, 132)][0] == want
    assert gemv_mma.CONFIGS[gemv_mma.default_config(n, 132, panels=16)][0] == 16


@pytest.mark.parametrize("n,units,want", [
    (50264, 132, 32),    # GPT-2's head: 197 chunks of 256 columns
    (3072, 132, 2),      # the FFN's up projection: 192 chunks of 16
    (768, 132, 2),       # too few columns for every SM: the narrowest whole-sector chunks
])
def test_default_lanes(n, units, want):
    assert gemv.default_lanes(1, n, "f16", units) == want


def test_lanes_fit_shared_memory():
    for m in range(1, gemv.MAX_ROWS + 1):
        for dtype in ("f16", "f32"):
            for ct in gemv.lanes_options(m, 4096, dtype):
                assert 256 // 32 * m * ct * gemv.vector_width(4096, dtype) * 4 <= 32 * 1024


def _check_linear(net, a, av, n: int, epi: str, solver: str, what: str) -> None:
    """a @ w (+ bias, residual, activation as `epi` says) on the GPU with `solver` forced, against float64
    numpy of av (a's values); w a constant, or an input where epi says "rhs_input"."""
    k = av.shape[-1]
    w, wv = net.input((k, n), scale=k ** -0.5) if "rhs_input" in epi else net.weight((k, n), scale=k ** -0.5)
    b, bv = net.weight((n,)) if "bias" in epi else (None, None)
    y, want = net.g.matmul(a, w, b), ref.matmul(av, wv, bv)
    if "res" in epi:
        res, resv = net.input(want.shape)
        y, want = net.g.add(y, res), want + resv
    if "relu" in epi:
        y, want = net.g.relu(y), ref.relu(want)
    if "gelu" in epi:
        y, want = net.g.gelu(y), ref.gelu(want)
    out, = net.run(None, y, solver=solver)
    assert_close(out, want, net.dtype, reduction=k, what=what)
    assert any(s == solver for _, _, s in net.launches()), net.launches()


# (id, lhs shape, N, dtype, epilogue, column lanes or None for the default)
CASES = [
    ("decode_768", (1, 1, 768), 768, "f16", "bias", None),
    ("rows3_k70_gelu_res", (3, 70), 200, "f16", "bias+res+gelu", 4),
    ("rows8_bf16_relu", (2, 4, 96), 1000, "bf16", "bias+relu", 2),
    ("rows5_f32_k33_n52", (5, 33), 52, "f32", "none", 1),
    ("ragged_chunk_lanes32", (1, 256), 4104, "f16", "none", 32),
    ("n30_v2_lanes8", (4, 64), 30, "f16", "bias+res", 8),
    ("rows2_k3072_lanes16", (2, 3072), 768, "bf16", "bias", 16),
]


@pytest.mark.skipif(TARGET == "cpu", reason="the GPU kernel (numerics on the GPU: record/replay)")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gemv_numerics(case, rng, monkeypatch):
    what, shape, n, dtype, epi, lanes = case
    k = shape[-1]
    solver = SOLVERS["gemv_gpu"]
    if lanes is not None:
        monkeypatch.setattr(solver, "default_params", lambda p, target: {"lanes": lanes})
    net = Net(rng, dtype)
    a, av = net.input(shape)
    _check_linear(net, a, av, n, epi, "gemv_gpu", what)


# (id, lhs shape, N, dtype, epilogue, gemv_mma.CONFIGS index or None for the default)
MMA_CASES = [
    ("rows16_768", (1, 16, 768), 768, "f16", "bias", None),
    ("rows9_k72_n200_gelu_res", (9, 72), 200, "f16", "bias+res+gelu", 1),    # half a k tile, a ragged slab
    ("rows16_bf16_relu_3d", (2, 8, 96), 1000, "bf16", "bias+relu", 2),       # 1000 = 31 slabs of 32 + 8
    ("rows1_k3072", (1, 3072), 768, "f16", "bias", 3),                        # one row of sixteen
    ("rows12_k24_idle_warps", (12, 24), 64, "bf16", "none", 4),               # 2 k tiles for 8 warps
    ("rows16_k1000_n136_res", (16, 1000), 136, "f16", "res", 0),              # 63 k tiles: a ragged run
    ("rows16_rhs_input", (16, 256), 512, "bf16", "bias+rhs_input", 1),        # weights not packed in panels
]


@pytest.mark.skipif(TARGET == "cpu", reason="the GPU kernel (numerics on the GPU: record/replay)")
@pytest.mark.parametrize("case", MMA_CASES, ids=[c[0] for c in MMA_CASES])
def test_gemv_mma_numerics(case, rng, monkeypatch):
    what, shape, n, dtype, epi, config = case
    if not TARGET.startswith("nvvm"):
        pytest.skip("mma.sync: NVIDIA only")
    k = shape[-1]
    if config is not None:
        monkeypatch.setattr(SOLVERS["gemv_mma"], "default_params", lambda p, target: {"tile": config})
    net = Net(rng, dtype)
    a, av = net.input(shape)
    _check_linear(net, a, av, n, epi, "gemv_mma", what)


# (id, lhs shape, N, dtype, norm, its parameters, epilogue, the solver, its tile/lanes or None, an offset of x)
NORM_CASES = [
    ("ln_rows1_qkv", (1, 1, 768), 2304, "f16", "layer_norm", "scale+shift", "bias", "norm_gemv_gpu", None, 0.0),
    ("rms_rows3_bf16_relu", (3, 256), 200, "bf16", "rms_norm", "", "bias+relu", "norm_gemv_gpu", 4, 0.0),
    ("ln_rows5_offset", (5, 64), 48, "f16", "layer_norm", "shift", "res", "norm_gemv_gpu", 1, 20.0),
    ("ln_rows16_3d", (2, 8, 768), 768, "f16", "layer_norm", "scale+shift", "bias+res", "norm_gemv_mma", None, 0.0),
    ("ln_rows9_k72_gelu", (9, 72), 136, "bf16", "layer_norm", "scale", "gelu", "norm_gemv_mma", 1, 0.0),
    ("rms_rows16_k1024", (16, 1024), 40, "f16", "rms_norm", "scale", "res", "norm_gemv_mma", 4, 0.0),
    ("ln_rows12_offset", (12, 512), 264, "f16", "layer_norm", "scale+shift", "bias", "norm_gemv_mma", 2, 20.0),
]


def _norm(x, kind, scale, shift, eps=1e-5):
    if kind == "layer_norm":
        return ref.layer_norm(x, scale, shift, eps)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if scale is None else y * scale


@pytest.mark.skipif(TARGET == "cpu", reason="the GPU kernel (numerics on the GPU: record/replay)")
@pytest.mark.parametrize("case", NORM_CASES, ids=[c[0] for c in NORM_CASES])
def test_norm_matmul_numerics(case, rng, monkeypatch):
    """A norm feeding a GEMV as one norm_matmul launch: layer_norm and rms_norm, with and without their
    parameters, rows whose mean is far from 0 (the statistics' cancellation), k past the last whole tile."""
    what, shape, n, dtype, kind, params, epi, solver, tile, offset = case
    if not TARGET.startswith("nvvm"):
        pytest.skip("the norm_matmul solvers: NVIDIA only")
    if tile is not None:
        key = "tile" if solver == "norm_gemv_mma" else "lanes"
        monkeypatch.setattr(SOLVERS[solver], "default_params", lambda p, target: {key: tile})
    k = shape[-1]
    net = Net(rng, dtype)
    a, av = net.input(shape)
    if offset:
        av = rounded(av + offset, dtype)
        net.feeds[-1] = av.astype(np.float32)
    (s, sv), (t, tv) = (net.weight((k,)) if p in params else (None, None) for p in ("scale", "shift"))
    h = net.g.layer_norm(a, s, t) if kind == "layer_norm" else net.g.rms_norm(a, s)
    _check_linear(net, h, rounded(_norm(av, kind, sv, tv), dtype), n, epi, solver, what)
    assert [op for _, op, _ in net.launches()] == ["norm_matmul"], net.launches()


def norm_graph(rows: int, twice: bool = False) -> Graph:
    """GPT-2's ln_1 -> q/k/v projection of `rows` tokens (twice: the norm's output is also an output)."""
    rng = np.random.default_rng(1)
    g = Graph(dtype="f16")
    x = g.input("x", (1, rows, 768))
    h = g.layer_norm(x, g.param("s", rng.standard_normal(768)), g.param("t", rng.standard_normal(768)))
    y = g.matmul(h, g.param("w", rng.standard_normal((768, 2304))), g.param("b", rng.standard_normal(2304)))
    g.output(*((y, h) if twice else (y,)))
    return g


@pytest.mark.parametrize("rows,twice,target,want", [
    (1, False, "nvvm:sm_90", ["norm_gemv_gpu"]), (16, False, "nvvm:sm_90", ["norm_gemv_mma"]),
    (16, False, "nvvm:sm_80", ["norm_gemv_mma"]),
    (17, False, "nvvm:sm_90", ["layer_norm", "matmul"]),      # no GEMV: the norm keeps its launch
    (1, True, "nvvm:sm_90", ["layer_norm", "matmul"]),        # the norm's output is read twice
    (1, False, "cpu", ["layer_norm", "matmul"]),              # no norm_matmul solver on the CPU
])
def test_norm_fuses_into_the_decode_projection(rows, twice, target, want):
    plan, _ = build_plan(compiler.lower(norm_graph(rows, twice), target), parse_target(target))
    steps = [s for s in plan["steps"] if s.get("op") in ("norm_matmul", "layer_norm", "matmul")]
    assert [s["solver"] if s["op"] == "norm_matmul" else s["op"] for s in steps] == want, steps


@pytest.mark.parametrize("target", ["nvvm:sm_90", "rocdl:gfx942"])
@pytest.mark.parametrize("read_old", [False, True])
def test_cache_write_in_place_has_no_copy_launch(target, read_old, request):
    """A carried cache's index_copy: the copy launch is marked unless_aliased (input, output), and the plan
    gives the next cache the state's buffer (so the runtime leaves the launch out: test_device_arrays.py)
    unless the old cache is read after the update."""
    if target.startswith("rocdl"):
        request.getfixturevalue("toolchain")
    plan, _ = build_plan(compiler.lower(cache_graph(1, read_old), target), parse_target(target))
    step, = [s for s in plan["steps"] if s.get("op") == "index_copy"]
    copy, write = plan["kernels"][step["kernel"]]["launches"]
    assert copy["unless_aliased"] == [0, 3] and "unless_aliased" not in write
    cache, new = (plan["values"][step["args"][j]] for j in (0, 3))
    assert ((cache["storage"], cache["offset"]) == (new["storage"], new["offset"])) == (not read_old), (cache, new)


@pytest.mark.parametrize("target", ["nvvm:sm_90", "rocdl:gfx942"])
def test_decode_attention_selected(target, request):
    """GPT-2's decode attention (12 heads, a 544-key cache, a padding mask): flash-decoding, 9 key splits
    (one step of 64 keys each) for 12 heads, then the launch that combines them; 32 query rows (a
    prefill) stay on the flash kernels."""
    if target.startswith("rocdl"):
        request.getfixturevalue("toolchain")
    t = parse_target(target)
    g = Graph(dtype="f16")
    q, k, v = g.input("q", (1, 12, 1, 64)), g.input("k", (1, 12, 544, 64)), g.input("v", (1, 12, 544, 64))
    g.output(g.attention(q, k, v, g.input("mask", (1, 1, 1, 544))))
    plan, _ = build_plan(compiler.lower(g, target), t)
    step, = [s for s in plan["steps"] if s.get("op") == "attention"]
    assert step["solver"] == "attention_decode_gpu", step
    split, merge = plan["kernels"][step["kernel"]]["launches"]
    want = decode_attention.splits(12, 544, 64, t.chip.units)
    assert split["grid"] == [want, 12, 1] and merge["grid"] == [-(-12 * 64 // 128), 1, 1], (split, merge)
    prefill = AttentionProblem(12, 32, 544, 64, False, (1, 1, 32, 544), "f16")
    assert SOLVERS["attention_decode_gpu"].is_applicable(prefill, t)
    assert min((s for s in SOLVERS.values() if s.op == "attention" and target.split(":")[0] in s.targets
                and s.is_applicable(prefill, t) is None), key=lambda s: s.cost(prefill, t)).name != "attention_decode_gpu"


def test_decode_splits():
    assert decode_attention.splits(12, 544, 64, 132) == 9            # every split a whole step of 64 keys
    assert decode_attention.splits(192, 544, 64, 132) == 2           # batch 16: two blocks a multiprocessor
    assert decode_attention.splits(4, 8192, 128, 132) == 66          # long caches: 2 x 132 blocks
    assert decode_attention.splits(12, 5, 64, 132) == 1


DECODE_CASES = [  # b, h, sk, d, mask shape, layout
    (1, 12, 544, 64, (1, 1, 1, 544), "BHSD"),     # GPT-2's step: 9 splits
    (2, 3, 37, 128, None, "BHSD"),                # one split, D = 128 (16 lanes a key)
    (3, 2, 1000, 64, (3, 1, 1, 1000), "BSHD"),    # a mask per batch, heads inner
    (1, 1, 5, 64, (5,), "BHSD"),                  # fewer keys than one step
    (1, 2, 4099, 128, None, "BSHD"),              # 129 splits of 32 keys, the last of 3
]


@pytest.mark.skipif(TARGET == "cpu", reason="the GPU kernel (numerics on the GPU: record/replay)")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: "b{}h{}k{}d{}{}-{}".format(*c[:4], "m" if c[4] else "",
                                                                                     c[5].lower()))
def test_decode_attention_numerics(rng, dtype, case):
    b, h, sk, d, mask_shape, layout = case
    out, want, net = _attention(rng, dtype, b, h, 1, sk, d, mask_shape=mask_shape, layout=layout)
    assert_close(out, rounded(want, dtype), dtype, reduction=d)
    assert any(s == "attention_decode_gpu" for _, _, s in net.launches()), net.launches()

"""The solver registry (solvers/) and prim-select's choice among its solvers.

Every conv solver is forced (`solver=` of the full pipeline) on one graph holding every convolution
it applies to, in f32, f16 and bf16, in NCHW or NHWC (alternating; NCHW runs as NHWC through
transposes; OPENPRIM_TEST_ALL_COMBINATIONS=1 runs both layouts everywhere); each convolution has odd
sizes and one of the epilogues that prim-fuse folds into it from graph ops
(conv -> batch_norm -> add(residual) -> relu, a per-channel bias add, an activation). The outputs are
checked against float64 numpy (reference.py) and every conv kernel of the compiled plan must carry the
forced solver (the kernels' prim.solver attribute). The default (heuristic) choice is checked the same
way, then the GEMM solvers on matmul/linear, then the errors: a forced solver that does not apply, an
unknown solver name.

    python -m pytest test/python/test_solvers.py -q
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import openprim
import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close, attrs, ops_named, operands
from openprim import passes
from openprim.base.errors import OpenPrimError
from openprim.kernels.gpu import gemv
from openprim.base.target import Target, parse_target
from openprim.pyfrontend import to_module
from openprim.solvers import SOLVERS
from openprim.solvers.problem import ConvProblem, GemmProblem

# The solvers with kernels for the target under test (OPENPRIM_TEST_TARGET, see helpers.py).
CONV_SOLVERS = [n for n, s in SOLVERS.items() if s.op == "conv2d" and "fwd" in s.directions
                and parse_target(TARGET).kind in s.targets]   # the backward ones: test_backward_ops.py
GEMM_SOLVERS = [n for n, s in SOLVERS.items() if s.op == "matmul" and parse_target(TARGET).kind in s.targets]
LAYOUTS = ("NCHW", "NHWC")
CPU_ONLY = pytest.mark.skipif(TARGET != "cpu", reason="the CPU target's solver heuristics and errors")
ALL_COMBINATIONS = os.environ.get("OPENPRIM_TEST_ALL_COMBINATIONS", "") not in ("", "0")

# ----------------------------------------------------------------------------- convolution problems
# x: (N, C, H, W) whatever the layout; padding (top, left, bottom, right) or (ph, pw).
# epilogue, built from graph ops that prim-fuse folds into the conv:
#   none           conv(x, w[, b])
#   bn+res+relu    relu(batch_norm(conv(x, w[, b])) + r)     (constant BN params: folded into w, b)
#   bias+res+relu  relu(r + (conv(x, w) + c))                (c: a per-channel param -> the bias)
#   bias+leaky     leaky_relu(conv(x, w) + c, 0.1)
CONV = [
    dict(id="3x3_s2_asympad", x=(2, 3, 9, 7), K=5, kernel=(3, 3), stride=2, padding=(1, 0, 2, 1), dilation=1,
         groups=1, bias=True, epilogue="bn+res+relu"),
    dict(id="3x3_s1_asympad_odd", x=(2, 5, 11, 9), K=7, kernel=(3, 3), stride=1, padding=(1, 0, 2, 1), dilation=1,
         groups=1, bias=True, epilogue="bn+res+relu"),
    dict(id="3x3_c16_k24_pad", x=(2, 16, 9, 7), K=24, kernel=(3, 3), stride=1, padding=(1, 2, 0, 1), dilation=1,
         groups=1, bias=False, epilogue="bias+res+relu"),
    dict(id="3x2_dil2_s1x2", x=(1, 4, 9, 7), K=6, kernel=(3, 2), stride=(1, 2), padding=(2, 1), dilation=2,
         groups=1, bias=False, epilogue="bias+res+relu"),
    dict(id="2x3_dil2x1_plain", x=(1, 3, 7, 9), K=4, kernel=(2, 3), stride=1, padding=(0, 1, 1, 0),
         dilation=(2, 1), groups=1, bias=True, epilogue="none"),
    dict(id="1x1", x=(2, 6, 9, 7), K=8, kernel=(1, 1), stride=1, padding=0, dilation=1, groups=1, bias=False,
         epilogue="bn+res+relu"),
    dict(id="1x1_bias_plain", x=(1, 5, 7, 9), K=3, kernel=(1, 1), stride=1, padding=0, dilation=1, groups=1,
         bias=True, epilogue="none"),
    dict(id="1x1_s2", x=(1, 4, 9, 7), K=6, kernel=(1, 1), stride=2, padding=0, dilation=1, groups=1, bias=False,
         epilogue="bias+leaky"),
    dict(id="1x1_pad1", x=(1, 4, 5, 7), K=3, kernel=(1, 1), stride=1, padding=(1, 0, 0, 1), dilation=1, groups=1,
         bias=True, epilogue="none"),
    dict(id="dw_s2_asympad", x=(2, 6, 9, 7), K=6, kernel=(3, 3), stride=2, padding=(1, 1, 0, 2), dilation=1,
         groups=6, bias=True, epilogue="bn+res+relu"),
    dict(id="dw_dil2", x=(1, 8, 9, 7), K=8, kernel=(3, 3), stride=1, padding=2, dilation=2, groups=8,
         bias=False, epilogue="bias+leaky"),
    dict(id="grouped2", x=(1, 4, 9, 7), K=6, kernel=(3, 3), stride=(1, 2), padding=1, dilation=1, groups=2,
         bias=False, epilogue="bias+res+relu"),
    dict(id="grouped4_wide", x=(2, 8, 9, 7), K=32, kernel=(3, 3), stride=(2, 1), padding=(1, 0, 1, 2), dilation=1,
         groups=4, bias=False, epilogue="bias+res+relu"),
    dict(id="dw_multiplier2", x=(1, 3, 9, 7), K=6, kernel=(3, 3), stride=1, padding=1, dilation=1, groups=3,
         bias=True, epilogue="none"),
    dict(id="multiplier2_s2", x=(1, 8, 17, 15), K=16, kernel=(3, 3), stride=2, padding=1, dilation=1, groups=8,
         bias=True, epilogue="none"),
    dict(id="3x3_c8_k16_odd", x=(2, 8, 11, 9), K=16, kernel=(3, 3), stride=1, padding=1, dilation=1, groups=1,
         bias=False, epilogue="bias+res+relu"),
    dict(id="3x3_c16_k32_asympad", x=(1, 16, 7, 13), K=32, kernel=(3, 3), stride=1, padding=(1, 0, 2, 1), dilation=1,
         groups=1, bias=True, epilogue="none"),
]
CONV_BY_ID = {c["id"]: c for c in CONV}


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def applies(solver, cfg, dtype="f32"):
    """Where each conv solver applies, written down independently of solvers.is_applicable."""
    C, G, K = cfg["x"][1], cfg["groups"], cfg["K"]
    if solver == "conv_implicit_gemm_mma":  # 16-byte rows; f32 only as TF32, when allowed
        vec = 4 if dtype == "f32" else 8
        tf32 = os.environ.get("OPENPRIM_ALLOW_TF32", "") == "1"
        return (dtype != "f32" or tf32) and G == 1 and C % vec == 0 and K % vec == 0
    if solver.startswith("conv_winograd") and solver.endswith("_wgmma") and not (
            tuple(cfg["kernel"]) == (3, 3) and _pair(cfg["stride"]) == (1, 1) and _pair(cfg.get("dilation", 1)) == (1, 1)):
        return False
    if solver == "conv_space_to_depth_wgmma":  # a filter row of stride blocks (16-byte pixels) in 64 channels
        (sh, sw), (R, S) = _pair(cfg["stride"]), cfg["kernel"]
        step = 8 // np.gcd(8, sh * sw)
        block_channels = sh * sw * -(-C // step) * step
        return dtype in ("f16", "bf16") and G == 1 and K % 8 == 0 and _pair(cfg.get("dilation", 1)) == (1, 1) and \
            -(-S // sw) * block_channels <= 64 and R > sh and parse_target(TARGET).matrix_core == "wgmma"
    if solver.endswith("_wgmma"):  # TMA: 16-byte strides; sm_90, f16/bf16
        return dtype in ("f16", "bf16") and G == 1 and C % 8 == 0 and K % 8 == 0 and \
            parse_target(TARGET).matrix_core == "wgmma"
    if solver == "conv_implicit_gemm_gpu":
        return G == 1 or K // G >= 8
    if solver in ("conv_direct", "conv_im2col_gemm"):
        return G == 1
    if solver == "conv_implicit_gemm":
        return True
    if solver == "conv_grouped_gemm":
        return G > 1 and not G == C == K
    if solver == "conv_1x1_gemm":
        return G == 1 and tuple(cfg["kernel"]) == (1, 1) and _pair(cfg["stride"]) == (1, 1) and \
            not any(ref.pad4(cfg["padding"]))
    if solver == "conv_depthwise":
        return G == C == K > 1
    if solver == "conv_depthwise_gpu":
        return G == C == K > 1
    if solver.startswith("conv_winograd") and solver.endswith("_packed") and (dtype != "f32" or C % 8 or K % 16):
        return False  # the transformed filter is f32; 8-channel input vectors, 16-channel output blocks
    if solver.startswith("conv_winograd"):
        return G == 1 and tuple(cfg["kernel"]) == (3, 3) and _pair(cfg["stride"]) == (1, 1) and \
            _pair(cfg.get("dilation", 1)) == (1, 1)
    assert solver == "conv_reference", solver
    return True


# the heuristic's choice (the cheapest predicted time)
DEFAULT_CONV_SOLVER = {"3x3_s2_asympad": "conv_direct", "3x3_s1_asympad_odd": "conv_direct",
                       "3x3_c16_k24_pad": "conv_implicit_gemm", "3x2_dil2_s1x2": "conv_direct",
                       "2x3_dil2x1_plain": "conv_direct", "1x1": "conv_direct", "1x1_bias_plain": "conv_direct",
                       "1x1_s2": "conv_direct", "1x1_pad1": "conv_direct", "dw_s2_asympad": "conv_depthwise",
                       "dw_dil2": "conv_depthwise", "grouped2": "conv_implicit_gemm", "grouped4_wide": "conv_implicit_gemm",
                       "dw_multiplier2": "conv_implicit_gemm",
                       "multiplier2_s2": "conv_implicit_gemm", "3x3_c8_k16_odd": "conv_implicit_gemm",
                       "3x3_c16_k32_asympad": "conv_implicit_gemm"}


def conv_case(net: Net, cfg, layout):
    """Add cfg's convolution and its epilogue to net.g; returns (output, float64 reference, reduction)."""
    g = net.g
    N, C, H, W = cfg["x"]
    K, (R, S), G = cfg["K"], cfg["kernel"], cfg["groups"]
    x, xv = net.input((N, C, H, W) if layout == "NCHW" else (N, H, W, C))
    w, wv = net.weight((K, C // G, R, S) if layout == "NCHW" else (K, R, S, C // G))
    b, bv = net.weight((K,)) if cfg["bias"] else (None, None)
    kw = dict(stride=cfg["stride"], padding=cfg["padding"], dilation=cfg["dilation"], groups=G)
    y = g.conv2d(x, w, b, **kw)
    want = ref.conv2d(xv, wv, bv, layout=layout, **kw)
    epi = cfg["epilogue"]
    chan = (K, 1, 1) if layout == "NCHW" else (K,)  # a per-channel constant, broadcast like torch
    if epi == "bn+res+relu":
        (s, sv), (t, tv), (m, mv) = (net.weight((K,)) for _ in range(3))
        v, vv = net.weight((K,), positive=True)
        r, rv = net.input(want.shape)
        y = g.relu(g.add(g.batch_norm(y, s, t, m, v, eps=1e-3), r))
        want = ref.relu(ref.batch_norm(want, sv, tv, mv, vv, 1e-3, layout) + rv)
    elif epi == "bias+res+relu":
        c, cv = net.weight(chan)
        r, rv = net.input(want.shape)
        y = g.relu(g.add(r, g.add(y, c)))
        want = ref.relu(rv + (want + cv))
    elif epi == "bias+leaky":
        c, cv = net.weight(chan)
        y = g.leaky_relu(y + c, 0.1)
        want = ref.leaky_relu(want + cv, 0.1)
    else:
        assert epi == "none", epi
    return y, want, C // G * R * S


def expected_conv(cfg):
    """(bias, residual, activation) of the single prim.conv2d that prim-fuse makes of cfg's case."""
    epi = cfg["epilogue"]
    bias = cfg["bias"] or epi != "none"
    act = {"none": "none", "bias+leaky": "leaky_relu"}.get(epi, "relu")
    return {"bias": bias, "residual": "res" in epi}, act


def run_convs(rng, cases, layout, dtype, solver=""):
    """Compile one graph with every case (solver forced if given), check each output; returns the net."""
    net = Net(rng, dtype, layout)
    built = [conv_case(net, cfg, layout) for cfg in cases]
    outs = net.run(None, *[y for y, _, _ in built], solver=solver)
    for out, (_, want, red), cfg in zip(outs, built, cases):
        assert_close(out, want, dtype, reduction=red, what=f"{cfg['id']} ({solver or 'default'}, {layout})")
    return net


def conv_launch_solvers(net):
    return [solver for _, op, solver in net.launches() if op == "conv2d"]


def check_folded(net, cases, layout):
    """f32/f16: prim-fuse folded every epilogue into its conv; only transposes (NCHW) and the strided 1x1
    convolutions' input slices (prim-select's subsampling on the CPU) run beside them."""
    others = [op for _, op, _ in net.launches() if op != "conv2d"]
    assert set(others) <= ({"transpose", "slice"} if layout == "NCHW" else {"slice"}), others
    m = passes.run(to_module(net.g), "prim-fuse")
    convs = ops_named(m, "prim.conv2d")
    assert len(convs) == len(cases)
    for op, cfg in zip(convs, cases):
        want_operands, act = expected_conv(cfg)
        assert (operands(op), attrs(op)["activation"]) == (want_operands, act), cfg["id"]


def _solver_params():
    """Each conv solver in each dtype; the layout alternates (every solver sees both, every dtype both):
    the NCHW -> NHWC rewrite happens before the solver is chosen, so the solvers' kernels only ever see
    NHWC. OPENPRIM_TEST_ALL_COMBINATIONS=1 runs both layouts for everything (twice the time)."""
    out = []
    for i, solver in enumerate(CONV_SOLVERS):
        for j, dt in enumerate(DTYPES):
            for layout in LAYOUTS if ALL_COMBINATIONS else [LAYOUTS[(i + j) % 2]]:
                out.append(pytest.param(solver, layout, dt, id=f"{solver}-{layout}-{dt}"))
    return out


@pytest.mark.parametrize("solver,layout,dtype", _solver_params())
def test_conv_solver_forced(solver, layout, dtype, rng):
    cases = [c for c in CONV if applies(solver, c, dtype)]
    if not cases:
        pytest.skip(f"{solver} applies to none of the cases in {dtype}")
    net = run_convs(rng, cases, layout, dtype, solver)
    assert conv_launch_solvers(net) == [solver] * len(cases)
    if dtype != "bf16":  # prim-fuse does not fold bf16 constants (BN parameters, bias adds)
        check_folded(net, cases, layout)


# Output channels in whole blocks of 32, which conv_implicit_gemm tiles 32 wide on AVX-512: pointwise ones
# (the GEMM kernel over the pixels; M = 63 takes 7-row tiles, M = 32 8-row ones) and 3x3 ones narrower and
# wider than the 7-column tile (a tail of 3 columns).
WIDE = [
    dict(id="1x1_k64_m63", x=(1, 24, 9, 7), K=64, kernel=(1, 1), stride=1, padding=0, dilation=1, groups=1,
         bias=True, epilogue="bn+res+relu"),
    dict(id="1x1_k96_m32", x=(2, 40, 4, 4), K=96, kernel=(1, 1), stride=1, padding=0, dilation=1, groups=1,
         bias=False, epilogue="bias+leaky"),
    dict(id="3x3_s2_k64_ow6", x=(1, 16, 13, 11), K=64, kernel=(3, 3), stride=2, padding=1, dilation=1, groups=1,
         bias=True, epilogue="bias+res+relu"),
    dict(id="3x3_k32_ow17", x=(2, 8, 5, 17), K=32, kernel=(3, 3), stride=1, padding=(1, 0, 1, 2), dilation=1,
         groups=1, bias=False, epilogue="none"),
]


@CPU_ONLY
@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_conv_implicit_gemm_vector_lanes(dtype, lanes, rng, monkeypatch):
    """conv_implicit_gemm's register tiles for an AVX2 CPU (6 x 16 in 8-lane registers) and an AVX-512 one
    (7 or 8 x 32 in 16-lane registers; LLVM splits them where the CPU has no AVX-512)."""
    monkeypatch.setattr(Target, "vector_lanes", property(lambda self: lanes))
    net = run_convs(rng, WIDE, "NHWC", dtype, "conv_implicit_gemm")
    assert conv_launch_solvers(net) == ["conv_implicit_gemm"] * len(WIDE)


def test_cpu_vector_lanes_choose_tiles():
    """The tiles follow the target's vector registers: x86-64-v4 (AVX-512) gets 32-channel tiles, v3
    (AVX2) 16; a pointwise convolution's rows tile its pixels without a tail where 7 or 8 does."""
    solver = SOLVERS["conv_implicit_gemm"]
    v3, v4 = parse_target("cpu:x86-64-v3"), parse_target("cpu:x86-64-v4")
    assert (v3.vector_lanes, v4.vector_lanes) == (8, 16)

    def conv(c, hw, k, r, stride=1):
        oh = (hw + 2 * (r // 2) - r) // stride + 1
        return ConvProblem(1, c, hw, hw, k, r, r, oh, oh, (stride, stride), (r // 2,) * 4, (1, 1), 1, "NHWC",
                           "RSCK", "f32", "bias+relu")
    assert solver.default_params(conv(256, 14, 1024, 1), v4) == {"wt": 7, "ft": 32}     # M = 196
    assert solver.default_params(conv(64, 56, 256, 1), v4) == {"wt": 8, "ft": 32}      # M = 3136
    assert solver.default_params(conv(256, 14, 1024, 1), v3) == {"wt": 6, "ft": 16}
    assert solver.default_params(conv(256, 28, 256, 3, 2), v4) == {"wt": 7, "ft": 32}
    assert solver.default_params(conv(64, 56, 24, 1), v4) == {"wt": 6, "ft": 16}       # K = 24: no block of 32
    gemm = SOLVERS["gemm_packed"]
    assert gemm.default_params(GemmProblem(1, 128, 768, 768, False, False, "f32", "none"), v4)["nt"] == 32
    assert gemm.default_params(GemmProblem(1, 128, 768, 768, False, False, "f32", "none"), v3)["nt"] == 16


# NCHW cases of several blocks, ragged in M (N*OH*OW) and in N (K per group), for the GPU's NCHW path
NCHW_BLOCKS = [
    dict(id="nchw_3x3_k48", x=(2, 32, 19, 17), K=48, kernel=(3, 3), stride=1, padding=1, dilation=1, groups=1,
         bias=True, epilogue="bn+res+relu"),
    dict(id="nchw_grouped4_s2", x=(1, 64, 21, 15), K=72, kernel=(3, 3), stride=2, padding=(1, 0, 1, 2), dilation=1,
         groups=4, bias=False, epilogue="bias+res+relu"),
]


@pytest.mark.skipif(TARGET == "cpu", reason="the GPU SIMT implicit GEMM's NCHW addressing")
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_gpu_nchw_keep(dtype, rng):
    """layout=keep: every NCHW convolution reaches conv_implicit_gemm_gpu untransposed (NCHW input,
    residual and output read and written in place, KCRS filters re-laid out at compile time); no
    transpose kernel runs."""
    solver = "conv_implicit_gemm_gpu"
    cases = [c for c in CONV + NCHW_BLOCKS if applies(solver, c, dtype)]
    net = Net(rng, dtype, "NCHW")
    built = [conv_case(net, cfg, "NCHW") for cfg in cases]
    outs = net.run(f"prim-pipeline{{target={TARGET} solver={solver} layout=keep}}", *[y for y, _, _ in built])
    for out, (_, want, red), cfg in zip(outs, built, cases):
        assert_close(out, want, dtype, reduction=red, what=f"{cfg['id']} ({solver}, NCHW, layout=keep)")
    assert conv_launch_solvers(net) == [solver] * len(cases)
    assert "transpose" not in [op for _, op, _ in net.launches()]


DEFAULT_PARAMS = [(lo, dt) for lo in LAYOUTS for dt in DTYPES] if ALL_COMBINATIONS else \
    [("NCHW", "f32"), ("NHWC", "f16"), ("NCHW", "bf16")]


@CPU_ONLY
@pytest.mark.parametrize("layout,dtype", [pytest.param(lo, dt, id=f"{lo}-{dt}") for lo, dt in DEFAULT_PARAMS])
def test_conv_default_solver(layout, dtype, rng):
    net = run_convs(rng, CONV, layout, dtype)
    chosen = conv_launch_solvers(net)
    assert len(chosen) == len(CONV)
    assert {cfg["id"]: s for cfg, s in zip(CONV, chosen)} == DEFAULT_CONV_SOLVER
    if dtype != "bf16":
        check_folded(net, CONV, layout)


# ----------------------------------------------------------------------------- conv_implicit_gemm (CPU)
# The hand-written implicit-GEMM kernel (kernels/cpu/implicit_gemm.py) reads both layouts natively: every case in
# NCHW (layout=keep: no transposes in the plan) and NHWC, in every dtype; then register tiles whose
# widths leave tails (OW % WT columns, K/groups % FT channels), loops of several channel tiles, threads
# over the channel tiles (filter larger than the input: 3x3_c16_k24_pad with FT = 3), both NCHW orientations.
def _run_implicit_gemm(rng, layout, dtype, cases):
    net = Net(rng, dtype, layout)
    built = [conv_case(net, cfg, layout) for cfg in cases]
    keep = " layout=keep" if layout == "NCHW" else ""
    outs = net.run(f"prim-pipeline{{solver=conv_implicit_gemm{keep}}}", *[y for y, _, _ in built])
    for out, (_, want, red), cfg in zip(outs, built, cases):
        assert_close(out, want, dtype, reduction=red, what=f"{cfg['id']} (conv_implicit_gemm, {layout})")
    launches = net.launches()
    assert [s for _, op, s in launches if op == "conv2d"] == ["conv_implicit_gemm"] * len(cases)
    assert "transpose" not in [op for _, op, _ in launches], launches


@CPU_ONLY
@pytest.mark.parametrize("filter_layout", ["KCRS", "KRSC", "RSCK"])
@pytest.mark.parametrize("groups", [1, 2])
def test_runtime_filter_packed_in_blocks(filter_layout, groups, rng):
    """A filter that is a run-time value (a training graph's input) reaches the implicit GEMM in its blocked
    layout, KRSC<tile>k, by one transpose kernel per call, as a constant one does at compile time; a parameter
    under weights="values" keeps the plain layout that load_weights stores permuted (no kernel per call)."""
    C, K, R, S = 24, 32 * groups, 3, 2
    x = rng.standard_normal((2, 9, 7, C))
    kcrs = rng.standard_normal((K, C // groups, R, S)) * 0.3
    w = kcrs.transpose([{"K": 0, "C": 1, "R": 2, "S": 3}[d] for d in filter_layout])
    want = ref.conv2d(x, kcrs, stride=(1, 2), padding=(1, 0, 1, 1), groups=groups, layout="NHWC",
                      filter_layout="KCRS")
    for mode in ("input", "values"):
        g = openprim.Graph(layout="NHWC")
        gx = g.input("x", x.shape)
        gw = g.input("w", w.shape) if mode == "input" else g.param("w", w.astype(np.float32))
        g.output(g.conv2d(gx, gw, stride=(1, 2), padding=(1, 0, 1, 1), groups=groups, filter_layout=filter_layout))
        if mode == "input":
            exe = openprim.compile(g)
            selected = passes.run(to_module(g), "prim-layout,prim-select")
            layouts = [attrs(op)["filter_layout"] for op in ops_named(selected, "prim.conv2d")]
            # blocks of the solver's filter tile: 16 filters with AVX2, 32 with AVX-512
            block = re.fullmatch(r"KRSC(16|32)k", layouts[0]) if len(layouts) == 1 else None
            assert block, layouts
            # RSCK is already KRSC<K>k: a view, no kernel
            moved = not (filter_layout == "RSCK" and int(block[1]) == K)
            assert [s["kernel"].rsplit("_", 1)[0] for s in exe.plan["steps"]] == ["transpose"] * moved + ["conv2d"]
            out = exe(x.astype(np.float32), w.astype(np.float32))
        else:
            exe = openprim.compile(g, weights="values")
            assert [s["kernel"].rsplit("_", 1)[0] for s in exe.plan["steps"]] == ["conv2d"]
            out = exe(x.astype(np.float32))
        assert_close(out, want, "f32", reduction=C // groups * R * S, what=f"{mode}, {filter_layout}")


@CPU_ONLY
@pytest.mark.parametrize("layout,dtype", [pytest.param(lo, dt, id=f"{lo}-{dt}") for lo in LAYOUTS for dt in DTYPES])
def test_conv_implicit_gemm_native_layouts(layout, dtype, rng):
    _run_implicit_gemm(rng, layout, dtype, CONV)


@CPU_ONLY
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("wt,ft,lanes", [(5, 3, 0), (2, 16, 1), (16, 1, 0), (3, 5, 1)])
def test_conv_implicit_gemm_tiles(layout, wt, ft, lanes, rng, monkeypatch):
    """lanes (NCHW): 0 along the output columns, 1 along the channels (the tile transposed to store)."""
    params = {"wt": wt, "ft": ft, "lanes": lanes}
    monkeypatch.setattr(SOLVERS["conv_implicit_gemm"], "default_params", lambda p, target: params)
    _run_implicit_gemm(rng, layout, "f32", [CONV_BY_ID[i] for i in ("3x3_c16_k24_pad", "3x2_dil2_s1x2",
                                                                      "grouped4_wide", "dw_s2_asympad")])


# Pointwise (1x1, stride 1, unpadded, one group) NHWC convolutions run as the GEMM kernel over all pixels:
# a filter packed in FT-channel blocks (read as B's panels), one whose K % FT leaves a tail panel (packed
# at run time), row tiles across image rows with an M % WT tail on the last chunk, rows split between the
# threads, and a deep one (C = 1600) whose A outgrows L2 (K blocks) or not.
POINTWISE = [
    dict(id="pw_prepacked_tail_rows", x=(2, 24, 5, 13), K=32, kernel=(1, 1), stride=1, padding=0, dilation=1,
         groups=1, bias=True, epilogue="bn+res+relu"),
    dict(id="pw_k_tail_panel", x=(1, 40, 7, 7), K=40, kernel=(1, 1), stride=1, padding=0, dilation=1, groups=1,
         bias=False, epilogue="bias+leaky"),
    dict(id="pw_deep", x=(1, 1600, 3, 5), K=16, kernel=(1, 1), stride=1, padding=0, dilation=1, groups=1,
         bias=True, epilogue="none"),
    dict(id="pw_deep_k_blocks", x=(1, 1600, 9, 10), K=32, kernel=(1, 1), stride=1, padding=0, dilation=1,
         groups=1, bias=False, epilogue="bias+res+relu"),
]


@CPU_ONLY
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_implicit_gemm_pointwise(dtype, rng):
    _run_implicit_gemm(rng, "NHWC", dtype, POINTWISE)


@CPU_ONLY
@pytest.mark.parametrize("layout", LAYOUTS)
def test_conv_implicit_gemm_activations(layout, rng):
    """Every fused activation, emitted on the accumulator vectors (semantics.activation retyped)."""
    acts = [("relu", ()), ("leaky_relu", (0.1,)), ("clamp", (-0.5, 0.7)), ("sigmoid", ()), ("tanh", ()),
            ("gelu", ()), ("gelu_tanh", ()), ("silu", ()), ("elu", (0.7,))]
    net = Net(rng, "f32", layout)
    x, xv = net.input((1, 5, 9, 11) if layout == "NCHW" else (1, 9, 11, 5))
    w, wv = net.weight((20, 5, 3, 3) if layout == "NCHW" else (20, 3, 3, 5))
    ys = [net.g.conv2d(x, w, padding=1, activation=a, activation_params=p) for a, p in acts]
    keep = " layout=keep" if layout == "NCHW" else ""
    outs = net.run(f"prim-pipeline{{solver=conv_implicit_gemm{keep}}}", *ys)
    conv = ref.conv2d(xv, wv, None, padding=1, layout=layout)
    for out, (a, p) in zip(outs, acts):
        assert_close(out, ref.activation(conv, a, p), "f32", reduction=45, what=f"{a} ({layout})")


# ----------------------------------------------------------------------------- forcing: applicability and errors
def _select(g, solver=""):
    """prim-fuse then prim-select (solver forced if given): the module with the choice on each op."""
    pipe = f"prim-fuse,prim-select{{target={TARGET}" + (f" solver={solver}}}" if solver else "}")
    return passes.run(to_module(g), pipe)


def _conv_graph(cfg, layout="NHWC", dtype="f32"):
    net = Net(np.random.default_rng(0), dtype, layout)
    y, _, _ = conv_case(net, cfg, layout)
    net.g.output(y)
    return net.g


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("solver", CONV_SOLVERS)
def test_conv_solver_applicability(solver, layout):
    """Forcing a solver: it runs where it applies; elsewhere OpenPrimError names the solver, the problem
    and the reason, at the line of the model that made the convolution."""
    reasons = {"conv_direct": "grouped convolution", "conv_im2col_gemm": "grouped convolution",
               "conv_implicit_gemm_gpu": "fewer than 8 output channels per group",
               "conv_implicit_gemm_mma": "f32 on tensor cores needs OPENPRIM_ALLOW_TF32=1 \\(TF32: 10-bit mantissa\\)"
                                         "|fewer than 8 output channels per group|needs input and output channels",
               "conv_implicit_gemm_wgmma": "wgmma kernel takes f16/bf16 inputs|wgmma and TMA need sm_90"
                                           "|fewer than 8 output channels per group",
               "conv_im2col_gemm_wgmma": "wgmma kernel takes f16/bf16 inputs|wgmma and TMA need sm_90|grouped convolution"
                                         "|fewer than 8 output channels per group",
               "conv_winograd_f2x3_wgmma": "not a 3x3, stride-1, undilated convolution|wgmma kernel takes "
                                           "f16/bf16 inputs|wgmma and TMA need sm_90|fewer than 8 output channels"
                                           "|grouped convolution",
               "conv_winograd_f4x3_wgmma": "not a 3x3, stride-1, undilated convolution|wgmma kernel takes "
                                           "f16/bf16 inputs|wgmma and TMA need sm_90|fewer than 8 output channels"
                                           "|grouped convolution",
               "conv_space_to_depth_wgmma": "wgmma kernel takes f16/bf16 inputs|wgmma and TMA need sm_90"
                                            "|grouped convolution"
                                            "|fewer than 8 output channels per group|needs an ungrouped",
               "conv_winograd_f2x3": "not a 3x3, stride-1, undilated convolution|grouped convolution",
               "conv_winograd_f4x3": "not a 3x3, stride-1, undilated convolution|grouped convolution",
               "conv_winograd_f2x3_packed": "not a 3x3, stride-1, undilated convolution|grouped convolution"
                                            "|needs input channels a multiple of 8",
               "conv_winograd_f4x3_packed": "not a 3x3, stride-1, undilated convolution|grouped convolution"
                                            "|needs input channels a multiple of 8",
               "conv_1x1_gemm": "not a 1x1, stride-1, unpadded convolution|grouped convolution",
               "conv_depthwise": "not depthwise",
               "conv_depthwise_gpu": "not depthwise",
               "conv_grouped_gemm": "not a grouped convolution|depthwise convolution"}
    for cfg in CONV:
        g = _conv_graph(cfg, layout)
        if applies(solver, cfg):
            convs = ops_named(_select(g, solver), "prim.conv2d")
            assert [attrs(c)["prim.solver"] for c in convs] == [solver], cfg["id"]
            assert attrs(convs[0])["layout"] == "NHWC", cfg["id"]
            continue
        with pytest.raises(OpenPrimError) as e:
            _select(g, solver)
        msg = str(e.value)
        assert re.search(rf"error: solver '{solver}' is not applicable to conv2d-\S+: ({reasons[solver]})", msg), \
            (cfg["id"], msg)
        assert msg.startswith(__file__ + ":"), msg


@CPU_ONLY
def test_forced_solver_error_through_compile():
    """The documented examples, through openprim.compile: 1x1-GEMM on a 3x3 conv, depthwise on groups=1."""
    g = _conv_graph(CONV_BY_ID["3x3_s2_asympad"], "NCHW")
    with pytest.raises(OpenPrimError, match=r"solver 'conv_1x1_gemm' is not applicable to conv2d-2x3x9x7-k5-3x3"
                                            r"-s2x2-p1x0x2x1-d1x1-g1-NHWC-\w+-f32-bias\+residual\+relu: not a 1x1"):
        openprim.compile(g, solver="conv_1x1_gemm")
    with pytest.raises(OpenPrimError, match=r"solver 'conv_depthwise' is not applicable to .*-g1-.*: not depthwise"):
        openprim.compile(g, solver="conv_depthwise")


def test_unknown_solver(monkeypatch):
    g = _conv_graph(CONV_BY_ID["1x1"])
    with pytest.raises(OpenPrimError, match=r"unknown solver 'conv_winograd'; solvers: conv_direct, .*gemm_reference"):
        openprim.compile(g, solver="conv_winograd")
    with pytest.raises(OpenPrimError, match=r"unknown solver 'conv_winograd'"):
        _select(g, "conv_winograd")
    monkeypatch.setenv("OPENPRIM_SOLVER", "Conv_Direct")  # names are case-sensitive
    with pytest.raises(OpenPrimError, match=r"unknown solver 'Conv_Direct'"):
        openprim.compile(g)


@CPU_ONLY
def test_solver_from_environment(monkeypatch, rng):
    """$OPENPRIM_SOLVER forces the conv solver; solver= wins over it; a conv solver leaves matmuls to
    the heuristic (and a GEMM solver convolutions)."""
    cfg = CONV_BY_ID["1x1"]
    assert DEFAULT_CONV_SOLVER["1x1"] not in ("conv_1x1_gemm", "conv_im2col_gemm")
    monkeypatch.setenv("OPENPRIM_SOLVER", "conv_1x1_gemm")
    g = _conv_graph(cfg)
    assert attrs(ops_named(_select(g), "prim.conv2d")[0])["prim.solver"] == "conv_1x1_gemm"
    assert attrs(ops_named(_select(g, "conv_im2col_gemm"), "prim.conv2d")[0])["prim.solver"] == "conv_im2col_gemm"
    monkeypatch.setenv("OPENPRIM_SOLVER", "conv_depthwise")  # would not apply: the option overrides it
    assert attrs(ops_named(_select(g, "conv_reference"), "prim.conv2d")[0])["prim.solver"] == "conv_reference"

    # through compile, with a matmul after the conv: conv forced by the environment, matmul by heuristic
    monkeypatch.setenv("OPENPRIM_SOLVER", "conv_im2col_gemm")
    net = Net(rng, "f32", "NHWC")
    y, want, red = conv_case(net, cfg, "NHWC")
    w, wv = net.weight((8, 3))
    out, = net.run(None, net.g.matmul(y, w))
    assert_close(out, ref.matmul(want, wv), "f32", reduction=red * 8)
    assert [(op, s) for _, op, s in net.launches()] == [("conv2d", "conv_im2col_gemm"), ("matmul", "gemm_packed")]

    monkeypatch.setenv("OPENPRIM_SOLVER", "gemm_reference")
    m = _select(net.g)
    assert attrs(ops_named(m, "prim.conv2d")[0])["prim.solver"] == DEFAULT_CONV_SOLVER["1x1"]
    assert attrs(ops_named(m, "prim.matmul")[0])["prim.solver"] == "gemm_reference"


# ----------------------------------------------------------------------------- GEMM
# kind: "2d" rhs (the gemm solver applies), "2d_t" a 2-d rhs with transpose_rhs (gemm too: prim-select
# un-transposes it, at compile time for a constant), "batched" rhs (gemm_packed, gemm_reference); rows: M
# (gemv_gpu takes at most gemv.MAX_ROWS).
GEMM = [
    dict(id="batched_lhs_bias_res_gelu", kind="2d", rows=10),   # [2,5,7] x [7,9] + c[9] + r, then gelu (erf)
    dict(id="2d_bias_arg_silu", kind="2d", rows=5),            # matmul(a, b, c, activation=silu) [5,7] x [7,9]
    dict(id="4d_lhs_plain", kind="2d", rows=30),                # [2,3,5,7] x [7,4]
    dict(id="linear_bias", kind="2d_t", rows=10),               # linear(x [2,5,11], w [4,11], c [4])
    dict(id="transposed_input_rhs_res", kind="2d_t", rows=6),  # matmul(a [6,13], b [9,13] (an input), ^T) + r
    dict(id="batched_rhs", kind="batched", rows=15),            # [3,5,13] x [3,13,9] + c[9]
    dict(id="batched_rhs_transposed", kind="batched", rows=15),  # [3,5,13] x [3,9,13]^T, relu
]
GEMM_BY_ID = {c["id"]: c for c in GEMM}


def gemm_case(net: Net, cfg):
    g, i = net.g, cfg["id"]
    if i == "batched_lhs_bias_res_gelu":
        (a, av), (b, bv), (c, cv) = net.input((2, 5, 7)), net.weight((7, 9)), net.weight((9,))
        r, rv = net.input((2, 5, 9))
        return g.gelu((a @ b + c) + r), ref.gelu(ref.matmul(av, bv, cv) + rv), 7
    if i == "2d_bias_arg_silu":
        (a, av), (b, bv), (c, cv) = net.input((5, 7)), net.weight((7, 9)), net.weight((9,))
        return g.matmul(a, b, c, activation="silu"), ref.matmul(av, bv, cv, activation_name="silu"), 7
    if i == "4d_lhs_plain":
        (a, av), (b, bv) = net.input((2, 3, 5, 7)), net.weight((7, 4))
        return g.matmul(a, b), ref.matmul(av, bv), 7
    if i == "linear_bias":
        (x, xv), (w, wv), (c, cv) = net.input((2, 5, 11)), net.weight((4, 11)), net.weight((4,))
        return g.linear(x, w, c), ref.linear(xv, wv, cv), 11
    if i == "transposed_input_rhs_res":
        (a, av), (b, bv), (r, rv) = net.input((6, 13)), net.input((9, 13)), net.input((6, 9))
        return g.add(g.matmul(a, b, transpose_rhs=True), r), ref.matmul(av, bv, transpose_rhs=True) + rv, 13
    if i == "batched_rhs":
        (a, av), (b, bv), (c, cv) = net.input((3, 5, 13)), net.input((3, 13, 9)), net.weight((9,))
        return a @ b + c, ref.matmul(av, bv, cv), 13
    assert i == "batched_rhs_transposed", i
    (a, av), (b, bv) = net.input((3, 5, 13)), net.input((3, 9, 13))
    return g.relu(g.matmul(a, b, transpose_rhs=True)), ref.relu(ref.matmul(av, bv, transpose_rhs=True)), 13


def run_gemms(rng, cases, dtype, solver=""):
    net = Net(rng, dtype)
    built = [gemm_case(net, cfg) for cfg in cases]
    outs = net.run(None, *[y for y, _, _ in built], solver=solver)
    for out, (_, want, red), cfg in zip(outs, built, cases):
        assert_close(out, want, dtype, reduction=red, what=f"{cfg['id']} ({solver or 'default'})")
    launches = net.launches()
    if dtype != "bf16":  # bias, residual and activation folded into the matmuls (not bf16: see conv)
        assert {op for _, op, _ in launches} <= {"matmul", "transpose"}, launches
    return [s for _, op, s in launches if op == "matmul"]


@pytest.mark.parametrize("solver,dtype", [pytest.param(s, dt, id=f"{s}-{dt}") for s in GEMM_SOLVERS for dt in DTYPES])
def test_gemm_solver_forced(solver, dtype, rng):
    if solver in ("gemm_mma", "gemm_wgmma", "gemv_mma"):
        pytest.skip(f"the GEMM cases have K and N that are not multiples of 8 (bench/gpu_kernels.py and the "
                    f"tensor-core config tests (test_gpu_decode.py's for gemv_mma) check {solver})")
    cases = [c for c in GEMM if (solver in ("gemm_reference", "gemm_packed") or c["kind"] != "batched")
             and (solver != "gemv_gpu" or c["rows"] <= gemv.MAX_ROWS)]
    assert run_gemms(rng, cases, dtype, solver) == [solver] * len(cases)


@CPU_ONLY
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_default_solver(dtype, rng):
    chosen = run_gemms(rng, GEMM, dtype)
    want = {c["id"]: "gemm_packed" for c in GEMM}
    assert {c["id"]: s for c, s in zip(GEMM, chosen)} == want


def test_gemm_not_applicable():
    for cfg in GEMM:
        if cfg["kind"] != "batched":
            continue
        net = Net(np.random.default_rng(0), "f32")
        y, _, _ = gemm_case(net, cfg)
        net.g.output(y)
        with pytest.raises(OpenPrimError, match=r"error: solver 'gemm' is not applicable to gemm-b3-m5-n\d+-k13-\w+"
                                                r"-batched-f32-\S+: needs a 2-d"):
            openprim.compile(net.g, solver="gemm")


# ----------------------------------------------------------------------------- tensor cores (nvvm)
# The mma kernel (kernels/nvidia/mma.py) in every configuration of its tunable (block tile, shared-memory stages:
# 1 = register prefetch, 2-4 = cp.async) and input type (f32 as TF32, opted in), on convolutions whose
# channels it reads 16 bytes at a time: stride 2 with asymmetric padding, dilation, a last k tile past
# R*S*C (zero-filled), output channels that leave part of a block empty, several blocks along M.
MMA_CONV = [dict(id="mma_3x3_s2_asympad", x=(2, 24, 13, 11), K=40, kernel=(3, 3), stride=2, padding=(1, 0, 2, 1),
                 dilation=1, groups=1, bias=True, epilogue="bias+res+relu"),
            dict(id="mma_3x2_dil2", x=(3, 16, 15, 13), K=72, kernel=(3, 2), stride=1, padding=(2, 1), dilation=2,
                 groups=1, bias=False, epilogue="bias+leaky"),
            CONV_BY_ID["3x3_c16_k24_pad"]]
NVVM_ONLY = pytest.mark.skipif(parse_target(TARGET).kind != "nvvm", reason="NVIDIA tensor cores")
# TF32 keeps 10 mantissa bits of the f32 inputs: checked with the f16 tolerance.
MMA_TOLERANCE = {"f16": "f16", "bf16": "bf16", "f32": "f16"}


def _mma_configs():
    from openprim.kernels.nvidia.mma import CONFIGS
    return [pytest.param(dt, i, id=f"{dt}-{tile}-stages{stages}") for dt in ("f16", "bf16", "f32")
            for i, (tile, stages) in enumerate(CONFIGS)]


def _force_mma_config(dtype, config, monkeypatch):
    if dtype == "f32":
        monkeypatch.setenv("OPENPRIM_ALLOW_TF32", "1")
    for name in ("conv_implicit_gemm_mma", "gemm_mma"):
        monkeypatch.setattr(SOLVERS[name], "default_params", lambda p, target: {"tile": config})


@NVVM_ONLY
@pytest.mark.parametrize("dtype,config", _mma_configs())
def test_mma_conv_configs(dtype, config, rng, monkeypatch):
    _force_mma_config(dtype, config, monkeypatch)
    net = Net(rng, dtype, "NHWC")
    built = [conv_case(net, cfg, "NHWC") for cfg in MMA_CONV]
    outs = net.run(None, *[y for y, _, _ in built], solver="conv_implicit_gemm_mma")
    for out, (_, want, red), cfg in zip(outs, built, MMA_CONV):
        assert_close(out, want, MMA_TOLERANCE[dtype], reduction=red, what=f"{cfg['id']} ({dtype}, config {config})")
    assert conv_launch_solvers(net) == ["conv_implicit_gemm_mma"] * len(MMA_CONV)


@NVVM_ONLY
@pytest.mark.parametrize("dtype,config", _mma_configs())
def test_mma_gemm_configs(dtype, config, rng, monkeypatch):
    """matmul + bias + relu, [2, 35, 200] x [200, 72]: K = 200 ends inside a k tile."""
    _force_mma_config(dtype, config, monkeypatch)
    net = Net(rng, dtype)
    (a, av), (b, bv), (c, cv) = net.input((2, 35, 200)), net.weight((200, 72)), net.weight((72,))
    out, = net.run(None, net.g.matmul(a, b, c, activation="relu"), solver="gemm_mma")
    assert_close(out, ref.matmul(av, bv, cv, activation_name="relu"), MMA_TOLERANCE[dtype], reduction=200,
                 what=f"matmul ({dtype}, config {config})")
    assert [s for _, op, s in net.launches() if op == "matmul"] == ["gemm_mma"]


def test_tf32_is_opt_in(monkeypatch):
    """f32 reaches the tensor cores only with OPENPRIM_ALLOW_TF32=1 (PyTorch's allow_tf32); bf16 always."""
    cfg = CONV_BY_ID["3x3_c16_k24_pad"]
    monkeypatch.delenv("OPENPRIM_ALLOW_TF32", raising=False)
    with pytest.raises(OpenPrimError, match=r"f32 on tensor cores needs OPENPRIM_ALLOW_TF32=1 \(TF32: 10-bit mantissa\)"):
        passes.run(to_module(_conv_graph(cfg)), "prim-fuse,prim-select{target=nvvm:sm_90 solver=conv_implicit_gemm_mma}")
    for dtype, env in (("bf16", "0"), ("f32", "1")):
        monkeypatch.setenv("OPENPRIM_ALLOW_TF32", env)
        m = passes.run(to_module(_conv_graph(cfg, dtype=dtype)),
                       "prim-fuse,prim-select{target=nvvm:sm_90 solver=conv_implicit_gemm_mma}")
        assert [attrs(c)["prim.solver"] for c in ops_named(m, "prim.conv2d")] == ["conv_implicit_gemm_mma"], dtype


# ----------------------------------------------------------------------------- sm_90 warpgroup MMA (nvvm)
# The wgmma kernel (kernels/nvidia/wgmma.py: TMA boxes, mbarrier stages, wgmma) in every configuration (BM, BN,
# warpgroups, stages) on the convolutions its TMA boxes read: padding past every edge, dilation with
# asymmetric padding, channels that are not a multiple of the 64-channel k tile (TMA zero-fills
# both operands), output channels that leave part of a 64-wide B box empty, images smaller than the
# pixel box (several images per box), a 1x1 read as a flat [M, C] matrix with a ragged last M tile,
# strided convolutions (TMA element strides: 3x3 stride 2 with asymmetric padding, 1x1 stride 2, a 7x7
# stem with strides 2 x 3 and 8 channels).
WGMMA_CONV = [dict(id="wg_3x3_pad", x=(2, 40, 13, 11), K=72, kernel=(3, 3), stride=1, padding=1, dilation=1,
                   groups=1, bias=True, epilogue="bias+res+relu"),
              dict(id="wg_3x2_dil2", x=(3, 16, 9, 10), K=24, kernel=(3, 2), stride=1, padding=(2, 1, 0, 3),
                   dilation=2, groups=1, bias=False, epilogue="bias+leaky"),
              dict(id="wg_5x5_small", x=(5, 72, 5, 6), K=136, kernel=(5, 5), stride=1, padding=2, dilation=1,
                   groups=1, bias=True, epilogue="none"),
              dict(id="wg_1x1_flat", x=(3, 64, 7, 9), K=264, kernel=(1, 1), stride=1, padding=0, dilation=1,
                   groups=1, bias=False, epilogue="bias+res+relu"),
              dict(id="wg_3x3_s2_asympad", x=(2, 48, 15, 12), K=40, kernel=(3, 3), stride=2, padding=(1, 0, 2, 1),
                   dilation=1, groups=1, bias=True, epilogue="bias+res+relu"),
              dict(id="wg_1x1_s2", x=(2, 72, 9, 13), K=136, kernel=(1, 1), stride=2, padding=0, dilation=1,
                   groups=1, bias=False, epilogue="none"),
              dict(id="wg_7x7_s2_stem", x=(2, 8, 23, 21), K=64, kernel=(7, 7), stride=(2, 3), padding=3, dilation=1,
                   groups=1, bias=True, epilogue="bias+leaky")]


def _wgmma_configs():
    from openprim.kernels.nvidia.wgmma import CONFIGS
    return [pytest.param(dt, i, id=f"{dt}-{bm}x{bn}-wg{wgs}-stages{st}") for dt in ("f16", "bf16")
            for i, (bm, bn, wgs, st) in enumerate(CONFIGS)]


@NVVM_ONLY
@pytest.mark.parametrize("dtype,config", _wgmma_configs())
def test_wgmma_conv_configs(dtype, config, rng, monkeypatch):
    for name in ("conv_implicit_gemm_wgmma", "gemm_wgmma"):
        monkeypatch.setattr(SOLVERS[name], "default_params", lambda p, target: {"tile": config})
    net = Net(rng, dtype, "NHWC")
    built = [conv_case(net, cfg, "NHWC") for cfg in WGMMA_CONV]
    (a, av), (b, bv), (c, cv) = net.input((2, 35, 200)), net.weight((200, 72)), net.weight((72,))
    mm = net.g.matmul(a, b, c, activation="relu")
    outs = net.run(None, *[y for y, _, _ in built], mm, solver="conv_implicit_gemm_wgmma")
    for out, (_, want, red), cfg in zip(outs, built, WGMMA_CONV):
        assert_close(out, want, dtype, reduction=red, what=f"{cfg['id']} ({dtype}, config {config})")
    assert_close(outs[-1], ref.matmul(av, bv, cv, activation_name="relu"), dtype, reduction=200,
                 what=f"matmul ({dtype}, config {config})")
    assert conv_launch_solvers(net) == ["conv_implicit_gemm_wgmma"] * len(WGMMA_CONV)


@NVVM_ONLY
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_im2col_gemm_wgmma(dtype, rng):
    """im2col + GEMM on wgmma (a scratch [M, R*S*C] buffer, then the flat TMA/wgmma GEMM) on the wgmma
    convolution cases: padding, dilation, strides, channels that are not a multiple of 64."""
    net = run_convs(rng, WGMMA_CONV, "NHWC", dtype, "conv_im2col_gemm_wgmma")
    assert conv_launch_solvers(net) == ["conv_im2col_gemm_wgmma"] * len(WGMMA_CONV)


WINOGRAD_WGMMA = [WGMMA_CONV[0],
                  dict(id="wino_3x3_asympad", x=(3, 16, 10, 9), K=24, kernel=(3, 3), stride=1, padding=(0, 2, 1, 1),
                       dilation=1, groups=1, bias=True, epilogue="bias+leaky"),
                  dict(id="wino_3x3_c72_k136", x=(2, 72, 7, 8), K=136, kernel=(3, 3), stride=1, padding=1, dilation=1,
                       groups=1, bias=False, epilogue="none")]


@NVVM_ONLY
@pytest.mark.parametrize("solver", ["conv_winograd_f2x3_wgmma", "conv_winograd_f4x3_wgmma"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_winograd_wgmma(solver, dtype, rng):
    """Winograd F(2x2) / F(4x4) with the (m+2)^2 GEMMs on wgmma (batched on grid z): output tiles cropped
    at odd edges, asymmetric padding, channels past one 64-channel k tile, the fused epilogue."""
    net = run_convs(rng, WINOGRAD_WGMMA, "NHWC", dtype, solver)
    assert conv_launch_solvers(net) == [solver] * len(WINOGRAD_WGMMA)


# Few-channel convolutions repacked space-to-depth (gpu_wgmma.space_to_depth_kernel): the RGB stem at an
# odd size; strides 2 x 3 (6-pixel blocks, 2 channels padded to 4); stride 1 (no blocks, 5 channels
# padded to 8); a single channel; a filter that the stride divides (4x4/2) with asymmetric padding.
S2D_CONV = [dict(id="s2d_stem_7x7_s2", x=(2, 3, 23, 21), K=64, kernel=(7, 7), stride=2, padding=3, dilation=1,
                 groups=1, bias=True, epilogue="bias+res+relu"),
            dict(id="s2d_5x5_s2x3", x=(3, 2, 17, 19), K=24, kernel=(5, 5), stride=(2, 3), padding=(2, 1, 0, 2),
                 dilation=1, groups=1, bias=False, epilogue="bias+leaky"),
            dict(id="s2d_3x3_s1_c5", x=(2, 5, 9, 11), K=136, kernel=(3, 3), stride=1, padding=1, dilation=1,
                 groups=1, bias=True, epilogue="none"),
            dict(id="s2d_5x5_s2_c1", x=(2, 1, 12, 13), K=8, kernel=(5, 5), stride=2, padding=2, dilation=1,
                 groups=1, bias=True, epilogue="none"),
            dict(id="s2d_4x4_s2_asympad", x=(1, 4, 10, 11), K=72, kernel=(4, 4), stride=2, padding=(2, 1, 1, 2),
                 dilation=1, groups=1, bias=False, epilogue="bias+res+relu")]


@NVVM_ONLY
@pytest.mark.parametrize("config", [0, 3, 6, 7])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_space_to_depth_wgmma(dtype, config, rng, monkeypatch):
    """The repack, the filter transform and the GEMM over the overlapping TMA view, against float64."""
    monkeypatch.setattr(SOLVERS["conv_space_to_depth_wgmma"], "default_params", lambda p, target: {"tile": config})
    net = run_convs(rng, S2D_CONV, "NHWC", dtype, "conv_space_to_depth_wgmma")
    assert conv_launch_solvers(net) == ["conv_space_to_depth_wgmma"] * len(S2D_CONV)


@pytest.mark.parametrize("conv, shape", [
    ((32, 224, 224, 3, 112, 112, 7, 7, 2, 2, 3, 3, 1, 1), dict(cp=4, cq=16, r2=4, s2=4, hb=115, wb=115)),
    ((2, 17, 19, 2, 9, 6, 5, 5, 2, 3, 2, 1, 1, 1), dict(cp=4, cq=24, r2=3, s2=2, hb=11, wb=8)),
    ((2, 9, 11, 5, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1), dict(cp=8, cq=8, r2=3, s2=3, hb=11, wb=18)),
])
def test_space_to_depth_shape(conv, shape):
    """Channels padded to whole 16-byte block pixels; the repacked image holds every row the output
    reads and the last window's 64 elements."""
    from openprim.kernels.nvidia.wgmma_space_to_depth import space_to_depth_shape
    assert space_to_depth_shape(conv) == shape


def test_space_to_depth_picked_for_the_stem(capsys):
    """On sm_90 the 3-channel 7x7/2 stem goes to space-to-depth (no channel padding launch); with 16
    channels a filter row of blocks no longer fits a k tile and `explain` says so."""
    from openprim import compiler
    from openprim import tuning_commands
    from openprim.pyfrontend import Graph
    for c, picked in ((3, True), (16, False)):
        g = Graph(layout="NHWC", dtype="f16")
        w = g.param("w", np.random.default_rng(0).standard_normal((64, 7, 7, c)))
        g.output(g.relu(g.conv2d(g.input("x", (8, 64, 64, c)), w, stride=2, padding=3)))
        tuning_commands.explain(g, "nvvm:sm_90")
        out = capsys.readouterr().out
        assert ("choice: conv_space_to_depth_wgmma" in out) == picked, out
        if not picked:
            assert "conv_space_to_depth_wgmma not applicable: a filter row of blocks has 256 channels" in out, out
    g = Graph(layout="NHWC", dtype="f16")
    g.output(g.conv2d(g.input("x", (4, 32, 32, 3)), g.param("w", np.ones((64, 7, 7, 3))), stride=2, padding=3))
    selected = str(compiler.lower(g, pipeline="prim-select{target=nvvm:sm_90}"))
    assert "prim.pad" not in selected and 'prim.solver = "conv_space_to_depth_wgmma"' in selected, selected


@pytest.mark.parametrize("target, stride, dtype, why", [
    ("nvvm:sm_80", 1, "f16", "wgmma and TMA need sm_90 (sm_80 has mma.sync only)"),
    ("nvvm:sm_90", 9, "f16", "stride above 8 (TMA element strides)"),
    ("nvvm:sm_90", 1, "f32", "wgmma kernel takes f16/bf16 inputs"),
])
def test_wgmma_fallback_named_by_explain(target, stride, dtype, why, capsys):
    """Where the warpgroup kernel does not apply, mma.sync (or the SIMT kernel) is chosen and `explain`
    says why; a stride-1 f16 convolution on sm_90 takes it."""
    from openprim import tuning_commands
    from openprim.pyfrontend import Graph
    g = Graph(layout="NHWC", dtype=dtype)
    w = g.param("w", np.random.default_rng(0).standard_normal((64, 3, 3, 64)))
    g.output(g.conv2d(g.input("x", (2, 9, 9, 64)), w, stride=stride, padding=1))
    tuning_commands.explain(g, target)
    out = capsys.readouterr().out
    assert re.search(rf"conv_implicit_gemm_wgmma\s+not applicable: {re.escape(why)}", out), out
    assert "choice: conv_implicit_gemm_wgmma" not in out
    g2 = Graph(layout="NHWC", dtype="f16")
    g2.output(g2.conv2d(g2.input("x", (2, 9, 9, 64)), g2.param("w", np.ones((64, 3, 3, 64))), padding=1))
    tuning_commands.explain(g2, "nvvm:sm_90")
    assert "choice: conv_implicit_gemm_wgmma" in capsys.readouterr().out


@pytest.mark.parametrize("bm, n, oh, ow, box", [
    (128, 32, 56, 56, (1, 2, 64)),    # 2 rows x 64 columns: 8 of 64 columns wasted (as 8 x 16; wider wins)
    (128, 32, 7, 7, (2, 8, 8)),       # two 7x7 images per box (77% used) rather than one (38%)
    (128, 2, 13, 11, (1, 8, 16)),
    (64, 5, 5, 6, (1, 8, 8)),
    (128, 1, 1, 300, (1, 1, 128)),
])
def test_wgmma_pixel_box(bm, n, oh, ow, box):
    """The TMA box of output pixels per M tile: bm pixels, fewest computed in vain, whole images only
    when several share a box."""
    from openprim.kernels.nvidia.wgmma import pixel_box
    assert pixel_box(bm, n, oh, ow) == box


@pytest.mark.parametrize("groups, cin, cout", [(32, 64, 64), (4, 24, 40), (2, 16, 48)])
def test_gpu_grouped_conv_densified(groups, cin, cout, rng):
    """On a GPU a grouped convolution with a constant filter runs dense on the matrix cores, its filter made
    block-diagonal at compile time (prim-select's _densify_groups): the dense filter it builds, applied as an
    ungrouped convolution in float64, gives the grouped convolution of the original filter."""
    from openprim import dialect
    from openprim.base.dtypes import from_storage
    g = openprim.pyfrontend.Graph(layout="NHWC", dtype="f16")
    x = rng.standard_normal((2, 9, 7, cin))
    w = rng.standard_normal((cout, 3, 3, cin // groups))
    g.output(g.conv2d(g.input("x", x.shape), g.param("w", w), stride=1, padding=1, groups=groups))
    m = passes.run(to_module(g), "prim-select{target=nvvm:sm_90}")
    conv = ops_named(m, "prim.conv2d")[0]
    assert attrs(conv)["groups"] == 1 and attrs(conv)["prim.solver"].endswith(("_wgmma", "_mma"))
    const = conv.operands[1].owner
    dense = from_storage(dialect.to_numpy(const.attributes["value"]), "f16").astype(np.float64)
    dense_krsc = np.transpose(dense, (3, 0, 1, 2)) if attrs(conv)["filter_layout"] == "RSCK" else dense
    wq = w.astype(np.float16).astype(np.float64)   # the filter as stored (f16)
    got = ref.conv2d(x, dense_krsc, padding=1, layout="NHWC", filter_layout="KRSC")
    want = ref.conv2d(x, wq, padding=1, groups=groups, layout="NHWC", filter_layout="KRSC")
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- problem descriptors, directions
DESCRIPTORS = [
    "conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none",
    "conv2d-2x3x9x7-k5-3x3-s2x2-p1x0x2x1-d1x1-g1-NCHW-KCRS-bf16-bias+residual+relu",
    "conv2d-1x32x14x14-k32-3x3-s1x1-p2x2x2x2-d2x2-g32-NHWC-KRSC16k-f16-clamp",
    "conv2d-1x64x28x28-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-W4KC16k-f32-residual",
    "conv2d_bwd_data-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none",
    "conv2d_bwd_weights-8x16x9x9-k32-1x1-s2x2-p0x0x0x0-d1x1-g1-NCHW-KCRS-f16-none",
    "gemm-b1-m128-n256-k64-nn-f32-bias+relu",
    "gemm-b12-m37-n37-k64-nt-batched-f16-none",
    "gemm-b1-m49-n1024-k512-nn-panels32-f32-bias+residual",
    "depthwise_pointwise-32x144x56x56-3x3-s2x2-p0x0x1x1-d1x1-bias+clamp-k24-f16-bias+residual",
    "attention-b12-q128-k128-d64-causal-mask1x1x128x128-f16",
    "attention-b12-q37-k37-d64-bshd-bf16",
    "attention-b4-q16-k32-d128-mask32-f32",
    "attention-b4-q16-k32-d128-mask-bshd-f16",          # a scalar mask: shape ()
]


@pytest.mark.parametrize("text", DESCRIPTORS)
def test_descriptor_round_trip(text):
    """Every problem kind reads back what it writes: text -> problem -> the same text, and a problem built
    field by field (its kind's own dataclass) parses back equal."""
    from openprim.solvers.problem import parse_descriptor
    problem = parse_descriptor(text)
    assert problem.descriptor() == text
    assert parse_descriptor(problem.descriptor()) == problem == type(problem).from_descriptor(text)


def test_forward_conv_descriptor_unchanged():
    """The forward descriptor is the key of existing tuning records and the `prim.problem` attribute: it has
    no direction in it, and reads as it always has."""
    p = ConvProblem(2, 3, 9, 7, 5, 3, 3, 4, 4, (2, 2), (1, 0, 2, 1), (1, 1), 1, "NHWC", "RSCK", "f32", "bias+relu")
    assert p.direction == "fwd"
    assert p.descriptor() == "conv2d-2x3x9x7-k5-3x3-s2x2-p1x0x2x1-d1x1-g1-NHWC-RSCK-f32-bias+relu"


@pytest.mark.parametrize("text, why", [
    ("conv2d-garbage", "it does not read conv2d[_bwd_data|_bwd_weights]-<N>x<C>"),
    ("conv3d-1x1x1x1", "it starts with none of conv2d, conv2d_bwd_data"),
    ("conv2d_bwd_input-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none", "it starts with none of"),
    ("conv2d-01x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none", "OpenPrim writes this problem as "
     "'conv2d-1x64x56x56"),
    ("conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g3-NHWC-RSCK-f32-none", "groups 3 must divide"),
    ("conv2d-1x64x2x2-k64-5x5-s1x1-p0x0x0x0-d1x1-g1-NHWC-RSCK-f32-none", "larger than the padded input"),
    ("conv2d-1x64x56x56-k64-3x3-s0x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none", "strides must be positive"),
    ("conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NCWH-RSCK-f32-none", "unknown layout 'NCWH'"),
    ("conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-CKRS-f32-none", "unknown filter layout 'CKRS'"),
    ("conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f64-none", "unknown dtype 'f64'"),
    ("conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-relu6", "unknown activation 'relu6'"),
    ("conv2d-1x64x56x56-k64-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-relu+bias", "in that order"),
    ("gemm-b1-m0-n256-k64-nn-f32-none", "M must be positive"),
    ("gemm-b1-m128-n256-k64-nt-panels16-f32-none", "non-transposed rhs stored in panels"),
    ("gemm-b1-m128-n250-k64-nn-panels16-f32-none", "divides N=250"),
    ("depthwise_pointwise-1x8x8x8-3x3-s1x1-p1x1x1x1-d1x1-residual-k8-f16-none", "epilogue 'residual'"),
    ("attention-b12-q37-k37-d64-mask3x37-f16", "mask 3x37 does not broadcast to the scores"),
    ("attention-b12-q37-k37-d64-bhsd-f16", "OpenPrim writes this problem as 'attention-b12-q37-k37-d64-f16'"),
    ("attention-b12-q37-k37-d64-nhwc-f16", "unknown layout 'nhwc'"),
])
def test_descriptor_errors(text, why):
    """A descriptor that does not parse is one OpenPrimError line: which text, why, and a valid one."""
    from openprim.solvers.problem import parse_descriptor
    with pytest.raises(OpenPrimError) as e:
        parse_descriptor(text)
    message = str(e.value)
    assert why in message and "\n" not in message and message.startswith(f"{text!r} is not a problem descriptor")
    assert "(e.g. " in message


def test_conv_directions():
    """Every conv solver states the directions it serves; for the others applicable() says so, and every
    direction has an applicable solver on the CPU (the backward ones also through their op kinds)."""
    import dataclasses

    from openprim.solvers import applicable
    from openprim.solvers.problem import DIRECTIONS, parse_descriptor
    conv = [s for s in SOLVERS.values() if s.op == "conv2d"]
    assert all(s.directions and set(s.directions) <= set(DIRECTIONS) for s in conv)
    fwd = parse_descriptor("conv2d-1x16x9x9-k16-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none")
    kinds = {"fwd": "conv2d", "bwd_data": "conv2d_backward_data", "bwd_weights": "conv2d_backward_weights"}
    for direction in DIRECTIONS:
        p = dataclasses.replace(fwd, direction=direction)
        listed = applicable(p, kinds[direction], parse_target("cpu"))
        assert len(listed) == len(conv) and any(why is None for _, why in listed)
        for s, why in listed:
            if direction not in s.directions:
                assert why.startswith("serves ") and why.endswith(" only"), (s.name, why)
    with pytest.raises(OpenPrimError, match="convolution direction 'bwd'"):
        dataclasses.replace(fwd, direction="bwd")


def test_cost_needs_a_model_for_the_problem_kind():
    """The base cost is the roofline of a convolution or a GEMM; a solver of another kind without a cost()
    of its own says so instead of costing it as a GEMM."""
    from openprim.solvers.base import Solver
    from openprim.solvers.problem import parse_descriptor

    class Unpriced(Solver):
        name, op = "unpriced", "depthwise_pointwise"
    p = parse_descriptor("depthwise_pointwise-1x16x8x8-3x3-s1x1-p1x1x1x1-d1x1-none-k16-f16-none")
    with pytest.raises(NotImplementedError, match="solver unpriced has no cost model for a DepthwisePointwiseProblem"):
        Unpriced().cost(p, parse_target("cpu"))
    for text in ("conv2d-1x16x9x9-k16-3x3-s1x1-p1x1x1x1-d1x1-g1-NHWC-RSCK-f32-none", "gemm-b1-m16-n32-k8-nn-f32-none"):
        assert Unpriced().cost(parse_descriptor(text), parse_target("cpu")) > 0

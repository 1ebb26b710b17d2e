"""gemm_packed, the hand-written CPU GEMM (kernels/cpu/gemm.py), against float64 numpy.

Every matmul the frontends emit: a 2-d rhs under a 2-d or batched lhs (linear layers), a batched rhs
(attention's P V) and a batched, transposed rhs (Q K^T), with odd sizes that leave row tails (M % MT),
column tails (N % NT, N < 8), short K (below the k loop's unrolling) and a single row (a GEMV, whose
columns the threads split). The register tile's parameters (MT, NT, packed or not) are each run; the
two large cases go through two row chunks and through the column split; the deep ones (K >= 1536)
through K blocks with partial sums (the middle ones as a loop); f16/bf16 widen to f32 and round once.
"""
from __future__ import annotations

import pytest

import reference as ref
from helpers import DTYPES, TARGET, Net, assert_close
from openprim.base.target import Target, parse_target
from openprim.kernels.cpu import gemm as cpu_gemm
from openprim.solvers import SOLVERS
from openprim.solvers.problem import GemmProblem

pytestmark = pytest.mark.skipif(TARGET != "cpu", reason="a CPU kernel")

# (id, lhs shape, rhs shape, transpose_rhs, rhs constant?, bias?, residual?, activation)
CASES = [
    ("linear_odd_bias_relu", (13, 37), (37, 19), False, True, True, False, "relu"),
    ("batched_lhs_2d_rhs_res_gelu", (2, 7, 29), (29, 21), False, True, True, True, "gelu"),
    ("gemv_threads_split_columns", (1, 40), (40, 70), False, True, True, False, "none"),
    ("narrow_n_short_k", (11, 3), (3, 5), False, False, False, False, "none"),
    ("batched_rhs_b1", (1, 17, 23), (1, 23, 33), False, False, True, False, "none"),
    ("batched_rhs_b3", (3, 9, 13), (3, 13, 26), False, False, False, True, "silu"),
    ("batched_transposed_4d", (2, 3, 14, 10), (2, 3, 19, 10), True, False, False, False, "none"),
    ("transposed_2d_input_rhs", (6, 13), (9, 13), True, False, False, True, "none"),
    ("deep_k_blocks_res_gelu", (2, 23, 1601), (1601, 37), False, True, True, True, "gelu"),  # 3 K blocks
    ("deep_transposed_relu", (9, 2000), (50, 2000), True, True, True, False, "relu"),       # 3 K blocks
    # 6 K blocks (the middle four as one loop, the last one shorter), a panel of all K over the stack's
    # budget (packed per block only): a stem's filter gradient, K = N OH OW
    ("deep_k_block_loop_input_rhs", (70, 4601), (4601, 45), False, False, True, False, "relu"),
    ("two_chunks", (1501, 800), (800, 37), False, True, True, False, "none"),   # 250 tiles, 218 a chunk
    ("one_chunk_columns_split", (301, 700), (700, 83), False, True, True, False, "none"),
]


def _run(rng, case, dtype="f32", solver="gemm_packed"):
    _, ash, bsh, tr, const, bias, res, act = case
    net = Net(rng, dtype)
    g = net.g
    a, av = net.input(ash)
    b, bv = net.weight(bsh) if const else net.input(bsh)
    n = bsh[-2] if tr else bsh[-1]
    c, cv = net.weight((n,)) if bias else (None, None)
    y = g.matmul(a, b, c, transpose_rhs=tr, activation="none" if res else act)
    want = ref.matmul(av, bv, cv, transpose_rhs=tr)
    if res:
        r, rv = net.input(want.shape)
        y = getattr(g, act)(g.add(y, r)) if act != "none" else g.add(y, r)
        want = want + rv
        want = getattr(ref, act)(want) if act != "none" else want
    elif act != "none":
        want = getattr(ref, act)(want)
    out, = net.run(None, y, solver=solver)
    assert_close(out, want, dtype, reduction=ash[-1], what=f"{case[0]} ({dtype})")
    return [s for _, op, s in net.launches() if op == "matmul"]


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gemm_packed_default(case, lanes, rng, monkeypatch):
    """The heuristic picks gemm_packed for every matmul, with the epilogue folded in, and its tile for an
    AVX2 and an AVX-512 CPU."""
    monkeypatch.setattr(Target, "vector_lanes", property(lambda self: lanes))
    assert _run(rng, case, solver="") == ["gemm_packed"]


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("mt,nt,pack", [(6, 16, 0), (4, 8, 1), (2, 32, 0), (1, 8, 1), (8, 16, 1), (7, 32, 1),
                                        (8, 24, 0)])
def test_gemm_packed_tiles(mt, nt, pack, lanes, rng, monkeypatch):
    """Every register tile shape, packed or not (a transposed rhs is always packed), in accumulators of 8
    (AVX2) and 16 lanes (AVX-512; LLVM splits them in two where the CPU has no AVX-512)."""
    monkeypatch.setattr(SOLVERS["gemm_packed"], "default_params", lambda p, target: {"mt": mt, "nt": nt,
                                                                                      "pack": pack})
    monkeypatch.setattr(Target, "vector_lanes", property(lambda self: lanes))
    for case in CASES[:-2]:
        assert _run(rng, case) == ["gemm_packed"]


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "f32"])
def test_gemm_packed_low_precision(dtype, rng):
    for case in (CASES[1], CASES[5], CASES[6], CASES[8]):
        assert _run(rng, case, dtype) == ["gemm_packed"]


# Constant rhs packed at compile time into column panels [N/NT, K, NT] (prim-select, transpose_rhs = 2):
# 16-wide panels under a deep reduction whose A outgrows L2 (K blocks), 8-wide ones for a classifier's
# few rows (N % 16 = 8), and rows split between the threads (M > N) with the M % MT tail in the last chunk.
PANEL_CASES = [
    ("panels_deep_k_blocks", (2, 60, 1601), (1601, 32), False, True, True, True, "gelu"),
    ("panels_classifier", (3, 200), (200, 40), False, True, True, False, "relu"),
    ("panels_rows_split", (70, 48), (48, 32), False, True, False, True, "none"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", PANEL_CASES, ids=[c[0] for c in PANEL_CASES])
def test_gemm_packed_rhs_panels(case, dtype, rng, monkeypatch):
    packed = []
    solver = SOLVERS["gemm_packed"]
    monkeypatch.setattr(solver, "packed_rhs", lambda p, params, f=solver.packed_rhs: packed.append(f(p, params))
                        or packed[-1])
    assert _run(rng, case, dtype, solver="") == ["gemm_packed"]
    assert packed and all(t is not None for t in packed), "the rhs was not packed into panels"


def test_gemm_packed_work_split():
    """The row chunks and column parts the threads get: a batch's rows in chunks of at most CHUNK_BYTES
    of A (of one K block), as many as make the items share evenly; else the columns split."""
    def split(batch, m, n, k, tr=False):
        p = GemmProblem(batch, m, n, k, tr, batch > 1, "f32", "none")
        g = cpu_gemm._Gemm(p, {"mt": 6, "nt": 16, "pack": 1}, {}, [("%a", ""), ("%b", ""), ("%o", "")], 2, 8)
        return g.split()
    assert split(1, 128, 3072, 768) == (1, 2)     # BERT's FFN at batch 1: one chunk, the columns split
    assert split(3, 1024, 768, 768) == (1, 2)     # 3 batches of one chunk: the columns split
    assert split(1, 4096, 3072, 768) == (4, 1)    # 682 tiles of 18 KB, 227 a chunk: 4 chunks
    assert split(1, 4096, 768, 3072) == (4, 1)    # K in 4 blocks of 768: tiles of 18 KB a block, 4 chunks
    assert split(12, 128, 128, 64, True) == (1, 1)   # attention: 12 batches share evenly
    assert split(1, 1, 1000, 512) == (0, 2)       # a GEMV: the tail row only, columns split
    assert split(1, 3136, 64, 256) == (2, 1)      # a pointwise convolution's pixels (A outweighs B): rows split


def test_gemm_packed_deep_transposed_not_applicable():
    p = GemmProblem(1, 8, 8, 100_000, True, True, "f32", "none")
    assert "too deep" in SOLVERS["gemm_packed"].is_applicable(p, None)
    assert SOLVERS["gemm_packed"].is_applicable(GemmProblem(1, 8, 8, 100_000, False, False, "f32", "none"),
                                                None) is None
    # a panel of all K is over the stack's budget: packed per K block where A outgrows L2, else read in place
    params = lambda m: SOLVERS["gemm_packed"].default_params(  # noqa: E731
        GemmProblem(1, m, 8, 100_000, False, False, "f32", "none"), parse_target("cpu"))
    assert params(8)["pack"] == 1 and params(1)["pack"] == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [("lm_head_gemv", (1, 1, 512), (512, 2053), False, True, False, False, "none"),
                                  ("odd_rows_bias_gelu", (5, 300), (300, 3601), False, True, True, False, "gelu")],
                         ids=["lm_head_gemv", "odd_rows_bias_gelu"])
def test_gemm_packed_padded_columns(case, dtype, rng):
    """A wide constant rhs whose N is no multiple of the panel (a vocabulary) is padded with zero columns,
    packed at compile time and the result sliced back: the plan has the matmul then the slice (for one row, a
    contiguous run of the padded row: a view of the matmul's result, no kernel), and the weights hold the
    padded panels (not also the unpadded rhs)."""
    name, ash, bsh, *_ = case
    assert _run(rng, case, dtype, solver="") == ["gemm_packed"]
    plan = _last_plan(rng, case, dtype)
    net_ops = [s["op"] for s in plan["steps"]]
    if name == "lm_head_gemv":
        out = plan["values"][plan["outputs"][0]]
        assert net_ops[-1] == "matmul" and out["shape"][-1] == bsh[-1] and \
            plan["values"][out["view_of"]]["shape"][-1] > bsh[-1]
    else:
        assert net_ops[-1] == "slice" and "matmul" in net_ops


def _last_plan(rng, case, dtype):
    _, ash, bsh, _, _, bias, _, act = case
    net = Net(rng, dtype)
    a, _ = net.input(ash)
    b, _ = net.weight(bsh)
    c = net.weight((bsh[-1],))[0] if bias else None
    y = net.g.matmul(a, b, c, activation=act)
    net.run(None, y)
    k, n = bsh
    nt = 32 if Target("cpu").vector_lanes == 16 else 16
    padded = -(-n // nt) * nt
    itemsize = 4 if dtype == "f32" else 2
    assert net.exe.plan["weights_bytes"] < (k * padded + 2 * padded) * itemsize + 4096
    return net.exe.plan

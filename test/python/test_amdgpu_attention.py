"""Flash attention on AMD matrix cores (kernels/amd/flash_attention.py): a numpy model of the kernel built
from its own tables, and compiled code objects for gfx90a / gfx942 (MFMA) and gfx1100 (WMMA).

No AMD GPU runs the kernel, so its numerics are checked on a model, as test_amdgpu_mma.py does for the
GEMM: the functions the emitter evaluates on SSA values (staging, fragment and accumulator positions,
where each P^T operand element comes from, the lanes a query's statistics are reduced over, the store
runs) are evaluated here on integer lane arrays, the matrix instructions are modelled from IREE's
layouts (amd_lanes.py), and the online softmax follows the kernel tile by tile. The result must equal a
float64 attention. The compiled kernels are then checked for their instructions, LDS and scratch.
"""
import math
import re
import zipfile

import numpy as np
import pytest
from amd_lanes import CHIPS, disassembled_matrix_ops, matrix_instruction

from openprim import compiler, tuning_commands
from openprim.base.target import parse_target
from openprim.kernels.amd import flash_attention as fa
from openprim.kernels.gpu import attention
from openprim.pyfrontend import Graph
from openprim.runtime.codeobject import amdgpu_kernels
from openprim.solvers import SOLVERS
from openprim.solvers.problem import AttentionProblem
from openprim.tuning import find
from test_attention import reference

TILES = [(f, n) for f, tiles in fa.TILES.items() for n in tiles]


def model_attention(q, k, v, mask, causal, scale, tile):
    """One head's attention computed as the kernel computes it: q [Sq, D], k and v [Sk, D], mask [Sq, Sk]
    or None; every output element written exactly once."""
    ins = tile.instr
    (Sq, D), Sk = q.shape, k.shape[0]
    lanes, elems = np.arange(ins.wave), np.arange(ins.operand)
    blocks = -(-Sq // tile.bq)
    tiles = -(-Sk // fa.BK)
    qp = np.zeros((blocks * tile.bq, D))
    kp, vp = np.zeros((tiles * fa.BK + fa.BK, D)), np.zeros((tiles * fa.BK + fa.BK, D))
    qp[:Sq], kp[:Sk], vp[:Sk] = q, k, v
    out = np.full((Sq, D), np.nan)
    log2e = 1 / math.log(2)

    def fragment(memory, origin):
        row, col = (np.broadcast_to(x, lanes.shape)[:, None] for x in origin)
        return memory[row, col + elems]

    def column_reduce(op, x):
        for off in fa.column_lanes(ins):
            x = op(x, x[lanes ^ off])
        return x

    for bx in range(blocks):
        q0 = bx * tile.bq
        n_tiles = min(tiles, (q0 + tile.bq - 1) // fa.BK + 1) if causal else tiles
        for w in range(tile.waves):
            qf = [[fragment(qp, (q0 + query, col)) for query, col in
                   (fa.q_fragment(tile, lanes, w, j, ks) for ks in range(0, D, ins.k))] for j in range(tile.tq)]
            m = [np.full(ins.wave, -np.inf) for _ in range(tile.tq)]
            sums = [np.zeros(ins.wave) for _ in range(tile.tq)]
            o = [[np.zeros((ins.wave, ins.acc)) for _ in range(tile.tq)] for _ in range(D // ins.m)]
            for t in range(n_tiles):
                key0 = t * fa.BK
                ks_mem, vt_mem = np.full((fa.BK, D + fa.PAD), np.nan), np.full((D, fa.BK + fa.PAD), np.nan)
                for p in range(fa.BK * D // 8 // tile.threads):
                    for tid in range(tile.threads):
                        key, col = fa.staging(tile, tid, p, D)
                        ks_mem[key, col:col + 8] = kp[key0 + key, col:col + 8]
                        vt_mem[col:col + 8, key] = vp[key0 + key, col:col + 8]
                s = [[None] * tile.tq for _ in range(fa.BK // ins.m)]
                for i in range(fa.BK // ins.m):
                    for j in range(tile.tq):
                        acc = np.zeros((ins.wave, ins.acc))
                        for ks in range(0, D, ins.k):
                            acc = matrix_instruction(ins, fragment(ks_mem, fa.a_fragment(tile, lanes, i, ks)),
                                                     qf[j][ks // ins.k], acc)
                        for r in range(ins.acc):
                            key, query = fa.acc_position(tile, lanes, w, i, j, r)
                            key, query = key0 + key, q0 + query
                            x = acc[:, r] * scale * log2e
                            if mask is not None:
                                x = x + mask[np.minimum(query, Sq - 1), np.minimum(key, Sk - 1)] * log2e
                            cut = (key >= Sk) | ((key > query) if causal else False)
                            acc[:, r] = np.where(cut, -np.inf, x)
                        s[i][j] = acc
                for j in range(tile.tq):
                    mx = np.max([s[i][j].max(1) for i in range(fa.BK // ins.m)], 0)
                    mn = np.maximum(m[j], column_reduce(np.maximum, mx))
                    base = np.where(mn == -np.inf, 0, mn)
                    for i in range(fa.BK // ins.m):
                        s[i][j] = np.exp2(s[i][j] - base[:, None])
                    alpha = np.exp2(m[j] - base)
                    sums[j] = sums[j] * alpha + sum(s[i][j].sum(1) for i in range(fa.BK // ins.m))
                    m[j] = mn
                    for i in range(D // ins.m):
                        o[i][j] = o[i][j] * alpha[:, None]
                for kk in range(fa.BK // ins.k):
                    for j in range(tile.tq):
                        pf = np.empty((ins.wave, ins.operand))
                        for el in range(ins.operand):
                            i, r, x = fa.p_source(ins, kk, el)
                            own = s[i][j][:, r]
                            if x:
                                holds = ins.c(lanes, r)[0] + ins.m * i == ins.b(lanes, el)[0] + ins.k * kk
                                own = np.where(holds, own, own[lanes ^ x])
                            pf[:, el] = own
                        for i in range(D // ins.m):
                            a = fragment(vt_mem, fa.a_fragment(tile, lanes, i, ins.k * kk))
                            o[i][j] = matrix_instruction(ins, a, pf, o[i][j])
            run = fa.store_run(ins)
            for j in range(tile.tq):
                total = column_reduce(np.add, sums[j])
                inv = np.where(total > 0, 1 / np.where(total > 0, total, 1), 0)
                for i in range(D // ins.m):
                    for r0 in range(0, ins.acc, run):
                        col, query = fa.acc_position(tile, lanes, w, i, j, r0)
                        query = q0 + np.broadcast_to(query, lanes.shape)
                        ok = query < Sq
                        for r in range(r0, r0 + run):
                            dst = (query[ok], (np.broadcast_to(col, lanes.shape) + r - r0)[ok])
                            assert np.isnan(out[dst]).all(), "an output written twice"
                            out[dst] = o[i][j][ok, r] * inv[ok]
    return out


MODEL_CASES = [  # sq, sk, d, causal, masked
    (37, 37, 64, False, False),
    (19, 45, 64, True, False),        # causal with Sq < Sk
    (150, 70, 128, True, True),       # two query blocks, causal with Sq > Sk, a mask
    (130, 128, 64, False, True),      # whole key tiles
]


@pytest.mark.parametrize("family, name", TILES)
@pytest.mark.parametrize("case", MODEL_CASES, ids=lambda c: "q{}k{}d{}{}{}".format(
    *c[:3], "c" if c[3] else "", "m" if c[4] else ""))
def test_flash_model(rng, family, name, case):
    """The kernel's tiles, operand sources and reductions give float64 attention (odd lengths, causal
    both ways, masks, several blocks), and a query with every key masked gives 0."""
    sq, sk, d, causal, masked = case
    q, k, v = rng.standard_normal((sq, d)), rng.standard_normal((sk, d)), rng.standard_normal((sk, d))
    mask = rng.standard_normal((sq, sk)) if masked else None
    if masked:
        mask[3] = -np.inf
    scale = 1 / math.sqrt(d)
    got = model_attention(q, k, v, mask, causal, scale, fa.TILES[family][name])
    with np.errstate(invalid="ignore"):      # the fully masked row: NaN in the reference, 0 by definition
        want = reference(q[None, None], k[None, None], v[None, None], mask, causal, scale)[0, 0]
    if masked:
        want[3] = 0
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("family, name", TILES)
def test_tables(family, name):
    """Staging covers the K and V tiles once; the column lanes are exactly the lanes that share an
    accumulator column; a store run is consecutive head-dim columns of one query."""
    t = fa.TILES[family][name]
    ins = t.instr
    for d in attention.HEAD_DIMS:
        hits = np.zeros((fa.BK, d), int)
        for p in range(fa.BK * d // 8 // t.threads):
            for tid in range(t.threads):
                key, col = fa.staging(t, tid, p, d)
                hits[key, col:col + 8] += 1
        assert (hits == 1).all()
        assert fa.shared_bytes(d) <= 64 * 1024
    lanes = np.arange(ins.wave)
    cols = ins.c(lanes, 0)[1]
    for lane in range(ins.wave):
        same = set(np.flatnonzero(cols == cols[lane]))
        closure = {lane}
        for off in fa.column_lanes(ins):
            closure |= {x ^ off for x in closure}
        assert closure == same


@pytest.mark.parametrize("chip", ["gfx90a", "gfx942", "gfx1100"])
def test_solver_applies(chip):
    """f16/bf16 with head dims 64 and 128 take the chip's flash kernel; other dtypes, head dims and chips
    say why not."""
    family = CHIPS[chip][0]
    solver, t = SOLVERS[f"attention_flash_{family}"], parse_target(f"rocdl:{chip}")
    problem = lambda dtype, d: AttentionProblem(16, 512, 512, d, True, None, dtype)  # noqa: E731
    assert solver.is_applicable(problem("f16", 64), t) is None
    assert solver.is_applicable(problem("bf16", 128), t) is None
    assert "takes f16 or bf16" in solver.is_applicable(problem("f32", 64), t)
    assert "head dim 96" in solver.is_applicable(problem("f16", 96), t)
    other = SOLVERS[f"attention_flash_{'wmma' if family == 'mfma' else 'mfma'}"]
    assert other.is_applicable(problem("f16", 64), t)
    assert "no matrix cores" in solver.is_applicable(problem("f16", 64), parse_target("rocdl:gfx1030"))


def attention_graph(dtype, d, causal, masked, layout="BHSD"):
    g = Graph(dtype=dtype)
    shape = (2, 3, 100, d) if layout == "BHSD" else (2, 100, 3, d)
    q, k, v = (g.input(n, shape) for n in "qkv")
    g.output(g.attention(q, k, v, g.input("m", (100, 100)) if masked else None, causal=causal, layout=layout))
    return g


@pytest.mark.parametrize("chip", ["gfx90a", "gfx942", "gfx1100"])
@pytest.mark.parametrize("dtype, d, causal, masked, layout", [
    ("f16", 64, False, False, "BHSD"), ("bf16", 128, True, True, "BHSD"), ("f16", 128, True, False, "BSHD")])
def test_code_object(toolchain, assembly, tmp_path, chip, dtype, d, causal, masked, layout):
    """Compiled for the chip: the attention stays one kernel on the flash solver, both products are the
    chip's matrix instructions for the dtype, the LDS is Ks and Vt, and nothing spills to scratch."""
    family, wave = CHIPS[chip]
    g = attention_graph(dtype, d, causal, masked, layout)
    target = f"rocdl:{chip}"
    selected = str(compiler.lower(g, target, pipeline=f"prim-decompose{{target={target}}},prim-select{{target={target}}}"))
    assert re.findall(r'prim.solver = "(\w+)"', selected) == [f"attention_flash_{family}"]
    compiler.save(g, str(tmp_path / "a.oprim"), target)
    with zipfile.ZipFile(tmp_path / "a.oprim") as z:
        hsaco = z.read("kernels.hsaco")
    instrs = set(re.findall(r"\b(v_(?:mfma|wmma)_\w+)", "".join(assembly)))
    assert instrs and all(i.startswith(f"v_{family}_f32_") and dtype in i for i in instrs), instrs
    disassembled = disassembled_matrix_ops(hsaco, chip, tmp_path)
    if disassembled is not None:
        assert disassembled == instrs, (disassembled, instrs)
    (kernel,) = [k for k in amdgpu_kernels(hsaco) if "attention" in k["name"]]
    assert kernel["wavefront_size"] == wave
    assert kernel["lds_bytes"] == fa.shared_bytes(d)
    assert kernel["scratch_bytes"] == 0, kernel


@pytest.mark.parametrize("chip", ["gfx942", "gfx1100"])
def test_every_tile_compiles(toolchain, assembly, chip):
    """Each tunable tile of the chip's flash solver (what `openprim tune` would time) becomes a code object."""
    family = CHIPS[chip][0]
    module, todo = tuning_commands.layers(attention_graph("f16", 64, True, False), f"rocdl:{chip}")
    with module.context:
        (op, _, _), = todo
        tiles = [p for s, p in find.space(op, parse_target(f"rocdl:{chip}")) if s == f"attention_flash_{family}"]
        assert len(tiles) == len(fa.TILES[family])
        for params in tiles:
            compiler.lower(find.candidate_module(op, f"attention_flash_{family}", params), f"rocdl:{chip}")
    assert all(f"v_{family}_" in text for text in assembly) and len(assembly) == len(tiles)


def test_other_chips_decompose():
    """Without matrix cores (gfx1030) or in f32, the attention is decomposed into GEMMs and a softmax."""
    for target, dtype in (("rocdl:gfx1030", "f16"), ("rocdl:gfx942", "f32")):
        selected = str(compiler.lower(attention_graph(dtype, 64, False, False), target,
                                      pipeline=f"prim-decompose{{target={target}}},prim-select{{target={target}}}"))
        assert "prim.attention" not in selected and selected.count("prim.matmul") == 2

"""AMD matrix cores (kernels/amd/mma.py): the lane layouts, a numpy model of the tiled kernel built
from them, and compiled code objects for gfx90a / gfx942 (MFMA) and gfx1100 (WMMA).

No AMD GPU runs these kernels, so the numerics are checked on a model: the layout tables and fragment
addresses of gpu_amd_mma (the functions the emitter evaluates on SSA values) are evaluated here on
integer lane arrays, the matrix instruction itself is modelled from a second, independent description
of its layouts (IREE's MMA intrinsic layouts: outer x thread x element tiles), and a whole tiled GEMM
assembled that way must equal numpy's matmul. The compiled kernels are then checked for the
instructions (the assembly of the same LLVM module the code object is made from) and their resources.
"""
import re
import zipfile

import numpy as np
import pytest
from amd_lanes import CHIPS, IREE, disassembled_matrix_ops, iree_position, matrix_instruction

from openprim import compiler, tuning_commands
from openprim.base.target import parse_target
from openprim.pyfrontend import Graph
from openprim.tuning import find
from openprim.kernels.amd import mma as amm
from openprim.runtime.codeobject import amdgpu_kernels, amdgpu_target

INSTRS = list(IREE)


@pytest.mark.parametrize("ins", INSTRS, ids=lambda i: f"{i.op}_{i.m}x{i.n}x{i.k}")
def test_layout_tables_match_iree(ins):
    """Every (lane, element / register) of the tables gpu_amd_mma emits from equals IREE's layouts;
    each fragment covers its matrix exactly once (per replica), and operand elements are consecutive k
    (the kernel loads them as one vector)."""
    lanes = np.arange(ins.wave)
    for frag, table, regs, shape in (("a", ins.a, ins.operand, (ins.m, ins.k)),
                                     ("b", ins.b, ins.operand, (ins.k, ins.n)), ("c", ins.c, ins.acc, (ins.m, ins.n))):
        hits = np.zeros(shape, int)
        for r in range(regs):
            mine = np.stack(np.broadcast_arrays(*table(lanes, r)))
            theirs = np.stack(np.broadcast_arrays(*iree_position(IREE[ins][frag], lanes, r)))
            np.testing.assert_array_equal(mine, theirs, err_msg=f"{frag} register {r}")
            np.add.at(hits, tuple(mine), 1)
        replicas = ins.wave * regs // (shape[0] * shape[1])
        assert (hits == replicas).all(), f"{frag}: not a tiling of the {shape} fragment"
    for table, k_axis in ((ins.a, 1), (ins.b, 0)):
        base = np.stack(np.broadcast_arrays(*table(lanes, 0)))
        for e in range(ins.operand):
            base[k_axis] += e > 0
            assert np.array_equal(np.stack(np.broadcast_arrays(*table(lanes, e))), base), f"element {e} not at k + {e}"


def model_gemm(a, b, tile):
    """C = A B computed as the kernel does: block tiles staged (As, Bt transposed) per BK, per wave the
    fragments at the addresses gpu_amd_mma emits, the modelled instruction, the epilogue's scatter."""
    ins, (M, K), N = tile.instr, a.shape, b.shape[1]
    bm, bn, bk = tile.bm, tile.bn, amm.BK
    kp = -(-K // bk) * bk
    ap = np.zeros((-(-M // bm) * bm, kp))
    bp = np.zeros((kp, -(-N // bn) * bn))
    ap[:M, :K], bp[:K, :N] = a, b
    c = np.full((M, N), np.nan)
    lanes = np.arange(ins.wave)
    elems = np.arange(ins.operand)

    def fragment(tile_memory, origin):
        """Each lane's `operand` consecutive elements from its (row, column) origin: [lane, element]."""
        row, col = (np.broadcast_to(v, lanes.shape)[:, None] for v in origin)
        return tile_memory[row, col + elems]

    for m0 in range(0, M, bm):
        for n0 in range(0, N, bn):
            for w in range(tile.waves_m * tile.waves_n):
                wm, wn = w // tile.waves_n, w % tile.waves_n
                acc = np.zeros((tile.tm * tile.tn, ins.wave, ins.acc))
                for k0 in range(0, kp, bk):
                    As, Bt = ap[m0:m0 + bm, k0:k0 + bk], bp[k0:k0 + bk, n0:n0 + bn].T
                    for ks in range(0, bk, ins.k):
                        for i in range(tile.tm):
                            fa = fragment(As, amm.a_fragment(tile, lanes, wm, i, ks))
                            for j in range(tile.tn):
                                fb = fragment(Bt, amm.b_fragment(tile, lanes, wn, j, ks))
                                acc[i * tile.tn + j] = matrix_instruction(ins, fa, fb, acc[i * tile.tn + j])
                for i in range(tile.tm):
                    for j in range(tile.tn):
                        for reg in range(ins.acc):
                            row, col = amm.acc_element(tile, lanes, wm, wn, i, j, reg)
                            row, col = m0 + np.asarray(row), n0 + np.asarray(col)
                            ok = (row < M) & (col < N)
                            assert np.isnan(c[row[ok], col[ok]]).all(), "an output written twice"
                            c[row[ok], col[ok]] = acc[i * tile.tn + j][ok, reg]
    return c


TILES = [(f, n) for f, tiles in amm.TILES.items() for n in tiles]


@pytest.mark.parametrize("family, name", TILES)
def test_staging_covers_tiles(family, name):
    """The global-load passes of all threads write every element of the As and Bt tiles exactly once."""
    t = amm.TILES[family][name]
    tid, eight = np.arange(t.threads)[:, None], np.arange(8)
    for staging, shape, transposed in ((amm.a_staging, (t.bm, amm.BK), False), (amm.b_staging, (amm.BK, t.bn), True)):
        hits = np.zeros(shape, int)
        for p in range(shape[0] * shape[1] // (t.threads * 8)):
            row, col = staging(t, tid, p)
            np.add.at(hits, (np.broadcast_to(row, (t.threads, 8)), col + eight), 1)
        assert (hits == 1).all(), f"{'Bt' if transposed else 'As'} not covered exactly once"


@pytest.mark.parametrize("family, name", TILES)
def test_tiled_gemm_model(family, name):
    """Odd M and N, K not a multiple of BK: every output written once, equal to numpy's matmul."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((70, 72)), rng.standard_normal((72, 48))
    np.testing.assert_allclose(model_gemm(a, b, amm.TILES[family][name]), a @ b, rtol=1e-12, atol=1e-12)


# Compiled code objects -------------------------------------------------------------------------------

def conv_graph(dtype, n, c, hw, k, rng, stride=1, dilation=1, residual=False):
    """relu(conv3x3(x) + bias [+ x]), padding 1, NHWC (prim-fuse folds the residual into the epilogue)."""
    g = Graph(layout="NHWC", dtype=dtype)
    x = g.input("x", (n, hw, hw, c))
    w = g.param("w", rng.standard_normal((k, c, 3, 3)))
    bias = g.param("b", rng.standard_normal(k))
    y = g.conv2d(x, w, bias, stride=stride, padding=dilation, dilation=dilation, filter_layout="KCRS")
    g.output(g.relu(y + x if residual else y))
    return g


def matmul_graph(dtype, rng):
    g = Graph(dtype=dtype)
    a = g.input("a", (50, 72))
    g.output(g.matmul(a, g.param("b", rng.standard_normal((72, 40))), g.param("bias", rng.standard_normal(40))))
    return g


CASES = {
    "conv3x3_f16_residual": lambda rng: conv_graph("f16", 2, 64, 9, 64, rng, residual=True),
    "conv3x3_s2_d2_odd_bf16": lambda rng: conv_graph("bf16", 2, 24, 11, 40, rng, stride=2, dilation=2),
    "matmul_f16": lambda rng: matmul_graph("f16", rng),
}
EPILOGUES = {"conv3x3_f16_residual": "bias+residual+relu", "conv3x3_s2_d2_odd_bf16": "bias+relu", "matmul_f16": "bias"}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("chip", CHIPS)
def test_code_object(toolchain, assembly, tmp_path, chip, case):
    family, wave = CHIPS[chip]
    target = f"rocdl:{chip}"
    graph = CASES[case](np.random.default_rng(0))
    selected = str(compiler.lower(graph, target, pipeline=f"prim-fuse,prim-select{{target={target}}}"))
    solver = f"{'gemm' if 'matmul' in case else 'conv_implicit_gemm'}_{family}"
    assert re.findall(r'prim.solver = "(\w+)"', selected) == [solver]
    assert re.search(rf'prim.problem = "[^"]*-{re.escape(EPILOGUES[case])}"', selected), "epilogue not fused"
    compiler.save(graph, str(tmp_path / "k.oprim"), target)
    with zipfile.ZipFile(tmp_path / "k.oprim") as z:
        hsaco = z.read("kernels.hsaco")
    assert amdgpu_target(hsaco).endswith(chip)
    instrs = set(re.findall(r"\b(v_(?:mfma|wmma)_\w+)", "".join(assembly)))
    dtype = "bf16" if "bf16" in case else "f16"
    assert instrs and all(i.startswith(f"v_{family}_f32_") and dtype in i for i in instrs), instrs
    disassembled = disassembled_matrix_ops(hsaco, chip, tmp_path)
    if disassembled is not None:
        assert disassembled == instrs, (disassembled, instrs)       # the hsaco holds what LLVM listed
    (kernel,) = amdgpu_kernels(hsaco)
    tile = list(amm.TILES[family].values())[1]          # these problems take the 64x64 block
    assert kernel["wavefront_size"] == wave
    assert kernel["lds_bytes"] == (tile.bm + tile.bn) * (amm.BK + amm.PAD) * 2
    assert kernel["vgpr_count"] > 0 and kernel["sgpr_count"] > 0
    if family == "mfma":
        assert kernel["agpr_count"] is not None         # CDNA reports accumulation registers


@pytest.mark.parametrize("per_group", [4, 16])
@pytest.mark.parametrize("chip", ["gfx942", "gfx1100"])
def test_grouped_code_object(toolchain, assembly, tmp_path, chip, per_group):
    """A grouped convolution (ResNeXt's 4 channels per group, merged into groups of 64; and 16 per group)
    runs on the matrix cores, one GEMM per group on grid z (kernels/gpu/gemm.py's group_col and
    OperandA, which the mma.sync kernel shares and the H200 checks)."""
    family = CHIPS[chip][0]
    g = Graph(layout="NHWC", dtype="f16")
    w = np.random.default_rng(0).standard_normal((128, per_group, 3, 3))
    g.output(g.relu(g.conv2d(g.input("x", (2, 9, 9, 128)), g.param("w", w), padding=1, groups=128 // per_group,
                             filter_layout="KCRS")))
    selected = str(compiler.lower(g, f"rocdl:{chip}", pipeline=f"prim-fuse,prim-select{{target=rocdl:{chip}}}"))
    assert re.findall(r'prim.solver = "(\w+)"', selected) == [f"conv_implicit_gemm_{family}"], selected[-500:]
    groups = int(re.search(r"groups = (\d+) : i64", selected).group(1))
    assert 128 // groups % 8 == 0 and groups > 1
    compiler.save(g, str(tmp_path / "k.oprim"), f"rocdl:{chip}")
    instrs = set(re.findall(r"\b(v_(?:mfma|wmma)_\w+)", "".join(assembly)))
    assert instrs and all(i.startswith(f"v_{family}_f32_") for i in instrs), instrs


@pytest.mark.parametrize("chip", CHIPS)
def test_every_tile_compiles(toolchain, assembly, chip):
    """Each tunable tile of the chip's solver (what `openprim tune` would time) becomes a code object."""
    family = CHIPS[chip][0]
    module, todo = tuning_commands.layers(conv_graph("f16", 2, 128, 16, 128, np.random.default_rng(0)), f"rocdl:{chip}")
    with module.context:
        (op, _, _), = todo
        tiles = [p for s, p in find.space(op, parse_target(f"rocdl:{chip}")) if s == f"conv_implicit_gemm_{family}"]
        assert len(tiles) == len(amm.TILES[family])
        for params in tiles:
            compiler.lower(find.candidate_module(op, f"conv_implicit_gemm_{family}", params), f"rocdl:{chip}")
    assert all(f"v_{family}_" in text for text in assembly) and len(assembly) == len(tiles)


def test_inspect_reports_resources(toolchain, tmp_path, capsys):
    from openprim import cli
    compiler.save(CASES["conv3x3_f16_residual"](np.random.default_rng(0)), str(tmp_path / "k.oprim"), "rocdl:gfx942")
    capsys.readouterr()
    assert cli.main(["inspect", str(tmp_path / "k.oprim")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"conv2d_0_kernel.*vgpr.*agpr.*lds 10240", out, re.I | re.S), out


@pytest.mark.parametrize("chip, dtype, why", [
    ("gfx1030", "f16", "gfx1030 has no matrix cores: SIMT kernel"),
    ("gfx1200", "f16", "gfx1200's WMMA (gfx12 operand layout) is not implemented: SIMT kernel"),
    ("gfx942", "f32", "matrix cores here take f16/bf16 inputs (f32: SIMT kernel)"),
])
def test_fallback_named_by_explain(chip, dtype, why, capsys):
    """Where no matrix instruction applies, the SIMT kernel is chosen and `explain` says why."""
    tuning_commands.explain(conv_graph(dtype, 2, 64, 9, 64, np.random.default_rng(0)), f"rocdl:{chip}")
    out = capsys.readouterr().out
    assert re.search(rf"conv_implicit_gemm_mfma\s+not applicable: {re.escape(why)}", out), out
    assert "choice: conv_implicit_gemm_gpu" in out, out

"""AMD matrix cores in the tests: the lane layouts of the matrix instructions as IREE states them (a second,
independent description of kernels/amd/mma.py's tables), the instruction modelled from it, and the
disassembly of code objects (test_amdgpu_mma.py, test_amdgpu_attention.py; their toolchain and assembly
fixtures are in conftest.py).

Imported as a plain module (test/python is on sys.path under pytest, like helpers.py).
"""
import re
import shutil
import subprocess

import numpy as np

from openprim.kernels.amd import mma as amm

# IREE's description (IREEGPUAttrs.cpp, getSingleSubgroupLayout): per fragment (outer, thread, thread
# strides, element) along (dim0, dim1) = (row, k) for A, (k, column) for B, (row, column) for C.
# A thread stride of 0: lanes that differ only there hold the same data (gfx11 WMMA's replicated halves).
IREE = {
    amm.MFMA_32x32x8: {"a": ((1, 1), (32, 2), (1, 32), (1, 4)), "b": ((1, 1), (2, 32), (32, 1), (4, 1)),
                       "c": ((4, 1), (2, 32), (32, 1), (4, 1))},
    amm.MFMA_16x16x16: {"a": ((1, 1), (16, 4), (1, 16), (1, 4)), "b": ((1, 1), (4, 16), (16, 1), (4, 1)),
                        "c": ((1, 1), (4, 16), (16, 1), (4, 1))},
    amm.WMMA_16x16x16: {"a": ((1, 1), (16, 1), (1, 0), (1, 16)), "b": ((1, 1), (1, 16), (0, 1), (16, 1)),
                        "c": ((8, 1), (2, 16), (16, 1), (1, 1))},
}


def iree_position(layout, lane, reg):
    """(dim0, dim1) of register `reg` of `lane`: registers run over (outer0, outer1, element0, element1)."""
    outer, thread, strides, element = layout
    e1 = reg % element[1]
    e0 = reg // element[1] % element[0]
    o1 = reg // (element[0] * element[1]) % outer[1]
    o0 = reg // (element[0] * element[1] * outer[1])
    pos = []
    for d, (o, e) in enumerate(((o0, e0), (o1, e1))):
        t = lane // strides[d] % thread[d] if strides[d] else 0
        pos.append(o * thread[d] * element[d] + t * element[d] + e)
    return tuple(pos)


def matrix_instruction(ins, a_regs, b_regs, acc):
    """The hardware, modelled from IREE's layouts: a_regs/b_regs [lane, element], acc [lane, register]."""
    lanes = np.arange(ins.wave)
    a, b = np.full((ins.m, ins.k), np.nan), np.full((ins.k, ins.n), np.nan)
    for tile, regs, frag in ((a, a_regs, "a"), (b, b_regs, "b")):
        for e in range(ins.operand):
            pos = iree_position(IREE[ins][frag], lanes, e)
            prev = tile[pos]
            assert np.isnan(prev).all() or np.array_equal(prev, regs[:, e]), "replicated lanes disagree"
            tile[pos] = regs[:, e]
    d = a @ b
    return acc + np.stack([d[iree_position(IREE[ins]["c"], lanes, r)] for r in range(ins.acc)], axis=1)


CHIPS = {"gfx90a": ("mfma", 64), "gfx942": ("mfma", 64), "gfx950": ("mfma", 64), "gfx1100": ("wmma", 32)}


def amdgpu_objdump() -> str | None:
    """An llvm-objdump that disassembles AMDGPU code objects: ROCm's, or Debian's llvm-17+ (the MLIR
    wheels' own has no AMDGPU target); CI installs Debian's llvm-19."""
    for tool in ["/opt/rocm/llvm/bin/llvm-objdump", *(f"llvm-objdump-{v}" for v in range(22, 16, -1))]:
        path = shutil.which(tool)
        if path:
            return path
    return None


def disassembled_matrix_ops(hsaco: bytes, chip: str, tmp_path) -> set[str] | None:
    """The v_mfma/v_wmma instructions of the code object's disassembly (None: no AMDGPU objdump here, or
    one that does not know the chip)."""
    tool = amdgpu_objdump()
    if not tool:
        return None
    path = tmp_path / f"{chip}.hsaco"
    path.write_bytes(hsaco)
    run = subprocess.run([tool, "-d", f"--mcpu={chip}", str(path)], capture_output=True, text=True)
    if "not a recognized processor" in run.stderr:     # gfx950 needs LLVM 20+
        return None
    assert run.returncode == 0, run.stderr
    return set(re.findall(r"\b(v_(?:mfma|wmma)_\w+)", run.stdout))

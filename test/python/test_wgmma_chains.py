"""The nvvm backend's chain_wgmma (backends/nvvm/compiler.py): warpgroup MMAs chained on one accumulator, each
lowered from its own nvgpu.warpgroup.mma (fence, mma_async, commit, wait_group 1), are issued as one group:
the commit, wait and fence between them go. Where anything between them reads or writes memory, or the
second does not take the first's accumulator, nothing changes."""
from __future__ import annotations

import pytest
from mlir import ir, passmanager

import openprim  # noqa: F401  (registers the dialects the parser needs)
from openprim.backends.nvvm.compiler import chain_wgmma

HEAD = """
!tm = !nvgpu.tensormap.descriptor<tensor = memref<64x64xf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
!da = !nvgpu.warpgroup.descriptor<tensor = memref<64x16xf16, 3>>
!db = !nvgpu.warpgroup.descriptor<tensor = memref<16x64xf16, 3>>
!acc = !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
module {
  module @kernels {
    func.func @f(%a: memref<64x16xf16, 3>, %b: memref<16x64xf16, 3>, %a2: memref<64x16xf16, 3>,
                 %b2: memref<16x64xf16, 3>, %t: !tm, %c: !acc, %acc2: !acc, %m: memref<4xf32>) -> (!acc, f32) {
      %i = arith.constant 0 : index
      %da = nvgpu.warpgroup.generate.descriptor %a, %t : memref<64x16xf16, 3>, !tm -> !da
      %db = nvgpu.warpgroup.generate.descriptor %b, %t : memref<16x64xf16, 3>, !tm -> !db
      %r = nvgpu.warpgroup.mma %da, %db, %c {transposeA, transposeB} : !da, !db, !acc -> !acc
      %x = memref.load %m[%i] : memref<4xf32>
      %da2 = nvgpu.warpgroup.generate.descriptor %a2, %t : memref<64x16xf16, 3>, !tm -> !da
      %db2 = nvgpu.warpgroup.generate.descriptor %b2, %t : memref<16x64xf16, 3>, !tm -> !db
      %r2 = nvgpu.warpgroup.mma %da2, %db2, ACC {transposeA, transposeB} : !da, !db, !acc -> !acc
      return %r2, %x : !acc, f32
    }
  }
}
"""


def _lowered(text: str) -> ir.Module:
    module = ir.Module.parse(text)
    passmanager.PassManager.parse("builtin.module(builtin.module(convert-nvgpu-to-nvvm))").run(module.operation)
    return module


@pytest.mark.parametrize("load_between, accumulator, merged", [
    (False, "%r", True),        # chained: one fence, one commit, one wait
    (True, "%r", False),        # a memory read between them
    (False, "%acc2", False),    # the second starts from another accumulator
])
def test_chain_wgmma(load_between, accumulator, merged):
    text = HEAD.replace("ACC", accumulator)
    if not load_between:
        text = text.replace("      %x = memref.load %m[%i] : memref<4xf32>\n", "").replace(
            "return %r2, %x", "%x = arith.constant 0.0 : f32\n      return %r2, %x")
    with ir.Context():
        module = _lowered(text)
        before = str(module).count("nvvm.wgmma.commit.group.sync.aligned")
        assert chain_wgmma(module.operation) == int(merged)
        after = str(module)
    assert before == 2
    assert after.count("nvvm.wgmma.commit.group.sync.aligned") == 2 - merged
    assert after.count("nvvm.wgmma.fence.aligned") == 2 - merged
    assert after.count("nvvm.wgmma.wait.group.sync.aligned") == 2 - merged
    assert after.count("nvvm.wgmma.mma_async") == 2

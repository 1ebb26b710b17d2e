// Transposes on the CPU (kernels/cpu/transpose.py). A weight gradient's RSCK -> KCRS ([3, 3, 40, 24] ->
// [40, 24, 3, 3]) is the canonical [9, 960] -> [960, 9]: tiles of 9 rows by 16 columns read along the input's
// last dim, transposed in registers, written as 16 runs of 9; 960 is 60 whole tiles, nothing masked. A
// ragged [37, 19] -> [19, 37] masks the tiles past either end (vector.create_mask of what is left). An
// attention permute ([1, 12, 197, 64] -> [1, 197, 12, 64]) keeps its last dim: each output row is an input
// row, copied in vectors of 16.
// RUN: openprim-opt %s -p prim-select,prim-tile | filecheck %s

// CHECK-LABEL: func.func @transpose_0(%arg0: memref<3x3x40x24xf32>, %arg1: memref<40x24x3x3xf32>)
// CHECK:         scf.for %{{.*}} = %c0 to %c60
// CHECK-NOT:       create_mask
// CHECK:           vector.insert {{.*}} : vector<16xf32> into vector<9x16xf32>
// CHECK:           vector.transpose {{.*}}, [1, 0] : vector<9x16xf32> to vector<16x9xf32>
// CHECK:           vector.store {{.*}} : memref<8640xf32>, vector<9xf32>
// CHECK-LABEL: func.func @transpose_1(%arg0: memref<37x19xf32>, %arg1: memref<19x37xf32>)
// CHECK:           vector.create_mask {{.*}} : vector<16xi1>
// CHECK:           vector.maskedload
// CHECK:           vector.transpose {{.*}}, [1, 0] : vector<16x16xf32> to vector<16x16xf32>
// CHECK:           vector.maskedstore
// CHECK-LABEL: func.func @transpose_2(%arg0: memref<1x12x197x64xf32>, %arg1: memref<1x197x12x64xf32>)
// CHECK:         scf.forall (%{{.*}}) in (2364)
// CHECK-NOT:       vector.transpose
// CHECK:           vector.load {{.*}} : memref<151296xf32>, vector<16xf32>
func.func @main(%w: tensor<3x3x40x24xf32>, %r: tensor<37x19xf32>, %q: tensor<1x12x197x64xf32>) -> (tensor<40x24x3x3xf32>, tensor<19x37xf32>, tensor<1x197x12x64xf32>) {
  %0 = "prim.transpose"(%w) {perm = array<i64: 2, 3, 0, 1>} : (tensor<3x3x40x24xf32>) -> tensor<40x24x3x3xf32>
  %1 = "prim.transpose"(%r) {perm = array<i64: 1, 0>} : (tensor<37x19xf32>) -> tensor<19x37xf32>
  %2 = "prim.transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x12x197x64xf32>) -> tensor<1x197x12x64xf32>
  return %0, %1, %2 : tensor<40x24x3x3xf32>, tensor<19x37xf32>, tensor<1x197x12x64xf32>
}

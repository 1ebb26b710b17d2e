// CPU gathers: along the innermost axis (rows of one element, the reads of a linear resize) 16 indices at a
// time, wrapped (negative: from the end) and clamped as vectors, one vector.gather each, the J % 16 left of
// each block by one masked gather; along an outer axis whole rows copied per index (vector<8>, then scalars).
// RUN: openprim-opt %s -p prim-fuse,prim-select,prim-tile | filecheck %s

// 3 x 5 blocks of 37 elements, 35 indices: two vectors of 16 per block, then a masked gather of 3.
// CHECK-LABEL: func.func @gather_0(%arg0: memref<3x5x37xf32>, %arg1: memref<35xi64>, %arg2: memref<3x5x35xf32>)
// CHECK:         scf.for %[[P:.+]] = %c0 to %c30 step %c1 {
// CHECK:           %[[IX:.+]] = vector.load %arg1[{{.*}}] : memref<35xi64>, vector<16xi64>
// CHECK:           arith.cmpi slt, %[[IX]], %{{.*}} : vector<16xi64>
// CHECK:           arith.maxsi
// CHECK:           arith.minsi {{.*}} : vector<16xi64>
// CHECK:           vector.gather %{{.*}}[%{{.*}}] [%{{.*}}], %{{.*}}, %{{.*}} : memref<555xf32>, vector<16xi64>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK:           vector.store {{.*}} : memref<525xf32>, vector<16xf32>
// CHECK:         scf.for %{{.*}} = %c0 to %c15 step %c1 {
// CHECK:           %[[M:.+]] = vector.constant_mask [3] : vector<16xi1>
// CHECK:           vector.maskedload %arg1[%c32], %[[M]], %{{.*}} : memref<35xi64>, vector<16xi1>, vector<16xi64> into vector<16xi64>
// CHECK:           vector.gather %{{.*}}[%{{.*}}] [%{{.*}}], %[[M]], %{{.*}} : memref<555xf32>
// CHECK:           vector.maskedstore %{{.*}}[%{{.*}}], %[[M]], %{{.*}} : memref<525xf32>, vector<16xi1>, vector<16xf32>
// CHECK-NOT:     linalg.
// CHECK:         return

// Rows of 16 along axis 1: a row copy per (block, index) pair.
// CHECK-LABEL: func.func @gather_1(%arg0: memref<2x9x16xf32>, %arg1: memref<4xi64>, %arg2: memref<2x4x16xf32>)
// CHECK-NOT:     vector.gather
// CHECK:         vector.load {{.*}} : memref<288xf32>, vector<8xf32>
// CHECK:         return
func.func @main(%x: tensor<3x5x37xf32>, %y: tensor<2x9x16xf32>) -> (tensor<3x5x35xf32>, tensor<2x4x16xf32>) {
  %i = "prim.constant"() {value = dense<[0, 36, -1, 5, 7, 7, 1, 2, 3, 4, 30, 31, 32, 33, 34, 35, -37, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 10, 11, 12, 13, 14, 15, 16, 17]> : tensor<35xi64>} : () -> tensor<35xi64>
  %0 = "prim.gather"(%x, %i) {axis = 2 : i64} : (tensor<3x5x37xf32>, tensor<35xi64>) -> tensor<3x5x35xf32>
  %j = "prim.constant"() {value = dense<[8, 0, -2, 3]> : tensor<4xi64>} : () -> tensor<4xi64>
  %1 = "prim.gather"(%y, %j) {axis = 1 : i64} : (tensor<2x9x16xf32>, tensor<4xi64>) -> tensor<2x4x16xf32>
  return %0, %1 : tensor<3x5x35xf32>, tensor<2x4x16xf32>
}

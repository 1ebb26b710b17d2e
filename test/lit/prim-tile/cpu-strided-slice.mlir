// A slice with a step along the innermost dim on the CPU (kernels/cpu/strided_slice.py): EVA02's rotary
// embedding takes x[..., 1::2] of [1, 3, 256, 64]. Each of the 768 output rows of 32 is two groups of 16
// lanes, each one contiguous read of the 31 source elements that cover it and a shuffle keeping every
// second one; the source row is found from the output row (no temporary copy of a strided view). A
// step of 1 on the innermost dim keeps the generic copy.
// RUN: openprim-opt %s -p 'prim-select,prim-tile' | filecheck %s

// CHECK-LABEL: func.func @slice_0(%arg0: memref<1x3x256x64xf32>, %arg1: memref<1x3x256x32xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         scf.for %[[R:.+]] = %{{.*}} to %{{.*}} step
// CHECK:           vector.load %{{.*}}[%{{.*}}] : memref<49152xf32>, vector<31xf32>
// CHECK-NEXT:      vector.shuffle %{{.*}}, %{{.*}} [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30] : vector<31xf32>, vector<31xf32>
// CHECK:           vector.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<24576xf32>, vector<16xf32>
// CHECK:           vector.load {{.*}} vector<31xf32>
// CHECK:           vector.shuffle
// CHECK-LABEL: func.func @slice_1(
// CHECK-NOT:     vector.shuffle
// CHECK:         return
func.func @main(%x: tensor<1x3x256x64xf32>) -> (tensor<1x3x256x32xf32>, tensor<1x3x256x32xf32>) {
  %odd = "prim.slice"(%x) {starts = array<i64: 0, 0, 0, 1>, ends = array<i64: 1, 3, 256, 64>, steps = array<i64: 1, 1, 1, 2>} : (tensor<1x3x256x64xf32>) -> tensor<1x3x256x32xf32>
  %half = "prim.slice"(%x) {starts = array<i64: 0, 0, 0, 32>, ends = array<i64: 1, 3, 256, 64>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x3x256x64xf32>) -> tensor<1x3x256x32xf32>
  return %odd, %half : tensor<1x3x256x32xf32>, tensor<1x3x256x32xf32>
}

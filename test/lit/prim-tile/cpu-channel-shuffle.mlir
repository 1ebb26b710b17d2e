// A channel shuffle on the CPU (ShuffleNet v2 in NHWC: concat, reshape to [.., 2, C/2], transpose of the
// last two dims, reshape back, then the two halves sliced) becomes one gather kernel per slice
// (passes/channel_shuffle.py, kernels/cpu/channel_gather.py): each reads both concat inputs once, 8
// channels of each interleaved by one vector.shuffle into 16 outputs, the odd channels left element by
// element. No concat, transpose or slice kernel remains.
// RUN: openprim-opt %s -p 'prim-tile{target=cpu}' | filecheck %s

// CHECK-LABEL: func.func @unit
// CHECK:       %[[A:.+]] = call @concat_{{[0-9]+}}(%arg0, %arg1) : (tensor<1x4x4x20xf32>, tensor<1x4x4x20xf32>) -> tensor<1x4x4x20xf32>
// CHECK:       %[[B:.+]] = call @concat_{{[0-9]+}}(%arg0, %arg1) : (tensor<1x4x4x20xf32>, tensor<1x4x4x20xf32>) -> tensor<1x4x4x20xf32>
// CHECK-NOT:   call @transpose
// CHECK-NOT:   call @slice
// CHECK:       func.func @concat_{{[0-9]+}}(
// CHECK:       scf.forall
// CHECK:       vector.load {{.*}} : memref<320xf32>, vector<8xf32>
// CHECK:       vector.load {{.*}} : memref<320xf32>, vector<8xf32>
// CHECK:       vector.shuffle {{.*}} [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15] : vector<8xf32>, vector<8xf32>
// CHECK:       vector.store {{.*}} : memref<320xf32>, vector<16xf32>
// CHECK:       memref.load
// CHECK:       memref.store
func.func @unit(%a: tensor<1x4x4x20xf32>, %b: tensor<1x4x4x20xf32>) -> (tensor<1x4x4x20xf32>, tensor<1x4x4x20xf32>) {
  %c = "prim.concat"(%a, %b) {axis = 3} : (tensor<1x4x4x20xf32>, tensor<1x4x4x20xf32>) -> tensor<1x4x4x40xf32>
  %r = "prim.reshape"(%c) : (tensor<1x4x4x40xf32>) -> tensor<1x4x4x2x20xf32>
  %t = "prim.transpose"(%r) {perm = array<i64: 0, 1, 2, 4, 3>} : (tensor<1x4x4x2x20xf32>) -> tensor<1x4x4x20x2xf32>
  %s = "prim.reshape"(%t) : (tensor<1x4x4x20x2xf32>) -> tensor<1x4x4x40xf32>
  %x1 = "prim.slice"(%s) {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 4, 4, 20>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x4x4x40xf32>) -> tensor<1x4x4x20xf32>
  %x2 = "prim.slice"(%s) {starts = array<i64: 0, 0, 0, 20>, ends = array<i64: 1, 4, 4, 40>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x4x4x40xf32>) -> tensor<1x4x4x20xf32>
  return %x1, %x2 : tensor<1x4x4x20xf32>, tensor<1x4x4x20xf32>
}

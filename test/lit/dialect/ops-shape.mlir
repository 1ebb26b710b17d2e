// Data movement: reshape, transpose, concat (binary), pad.
// RUN: openprim-opt %s --verify-only | filecheck %s

// CHECK-LABEL: func.func @shapes
// CHECK:      %[[R:.+]] = "prim.reshape"(%arg0) : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK-NEXT: %[[T:.+]] = "prim.transpose"(%[[R]]) {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
// CHECK-NEXT: %[[C:.+]] = "prim.concat"(%[[T]], %arg1) {axis = 0 : i64} : (tensor<4x6xf32>, tensor<2x6xf32>) -> tensor<6x6xf32>
// CHECK-NEXT: %[[P:.+]] = "prim.pad"(%[[C]]) {pads = array<i64: 1, 0, 0, 2>, value = -1.000000e+00 : f64} : (tensor<6x6xf32>) -> tensor<7x8xf32>
// CHECK-NEXT: return %[[P]]
func.func @shapes(%x: tensor<2x3x4xf32>, %y: tensor<2x6xf32>) -> tensor<7x8xf32> {
  %0 = "prim.reshape"(%x) : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = "prim.transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %2 = "prim.concat"(%1, %y) {axis = 0} : (tensor<4x6xf32>, tensor<2x6xf32>) -> tensor<6x6xf32>
  %3 = "prim.pad"(%2) {pads = array<i64: 1, 0, 0, 2>, value = -1.0} : (tensor<6x6xf32>) -> tensor<7x8xf32>
  return %3 : tensor<7x8xf32>
}

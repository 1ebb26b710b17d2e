// batch_norm, layer_norm (with and without its optional scale/shift), group_norm.
// RUN: openprim-opt %s --verify-only | filecheck %s

// CHECK-LABEL: func.func @norms
// CHECK:      %[[BN:.+]] = "prim.batch_norm"(%arg0, %arg1, %arg2, %arg3, %arg4) {epsilon = 1.000000e-05 : f64, layout = "NCHW"}
// CHECK-SAME: -> tensor<2x4x3x3xf32>
// CHECK:      %[[LN:.+]] = "prim.layer_norm"(%[[BN]], %arg5, %arg6)
// CHECK-SAME: normalized_ndim = 2 : i64
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 0>
// CHECK:      %[[LN2:.+]] = "prim.layer_norm"(%[[LN]])
// CHECK-SAME: normalized_ndim = 1 : i64
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 0, 0, 0>
// CHECK:      %[[GN:.+]] = "prim.group_norm"(%[[LN2]], %arg1, %arg2)
// CHECK-SAME: groups = 2 : i64, layout = "NCHW"
// CHECK:      return %[[GN]]
func.func @norms(%x: tensor<2x4x3x3xf32>, %s: tensor<4xf32>, %t: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>,
                 %ls: tensor<3x3xf32>, %lt: tensor<3x3xf32>) -> tensor<2x4x3x3xf32> {
  %0 = "prim.batch_norm"(%x, %s, %t, %m, %v) {epsilon = 1.0e-5, layout = "NCHW"} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x3x3xf32>
  %1 = "prim.layer_norm"(%0, %ls, %lt) {epsilon = 1.0e-5, normalized_ndim = 2, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<2x4x3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<2x4x3x3xf32>
  %2 = "prim.layer_norm"(%1) {epsilon = 1.0e-5, normalized_ndim = 1, operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %3 = "prim.group_norm"(%2, %s, %t) {epsilon = 1.0e-5, groups = 2, layout = "NCHW"} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x3x3xf32>
  return %3 : tensor<2x4x3x3xf32>
}

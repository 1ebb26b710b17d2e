// matmul: plain 2-d, transposed rhs with bias and activation, batched with a residual.
// RUN: openprim-opt %s --verify-only | filecheck %s

// CHECK-LABEL: func.func @mm
// CHECK:      %[[R:.+]] = "prim.matmul"(%arg0, %arg1)
// CHECK-SAME: activation = "none", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 0, 0>, transpose_rhs = 0 : i64
// CHECK-SAME: (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: return %[[R]] : tensor<2x4xf32>
func.func @mm(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %y = "prim.matmul"(%a, %b) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// CHECK-LABEL: func.func @linear
// CHECK:      "prim.matmul"(%arg0, %arg1, %arg2)
// CHECK-SAME: activation = "leaky_relu", activation_params = array<f64: 1.000000e-01>
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 0>, transpose_rhs = 1 : i64
// CHECK-SAME: (tensor<2x3xf16>, tensor<5x3xf16>, tensor<5xf16>) -> tensor<2x5xf16>
func.func @linear(%a: tensor<2x3xf16>, %w: tensor<5x3xf16>, %b: tensor<5xf16>) -> tensor<2x5xf16> {
  %y = "prim.matmul"(%a, %w, %b) {activation = "leaky_relu", activation_params = array<f64: 0.1>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<2x3xf16>, tensor<5x3xf16>, tensor<5xf16>) -> tensor<2x5xf16>
  return %y : tensor<2x5xf16>
}

// CHECK-LABEL: func.func @batched
// CHECK:      "prim.matmul"(%arg0, %arg1, %arg2)
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 1>
// CHECK-SAME: (tensor<2x4x3xf32>, tensor<2x3x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
func.func @batched(%a: tensor<2x4x3xf32>, %b: tensor<2x3x4xf32>, %z: tensor<2x4x4xf32>) -> tensor<2x4x4xf32> {
  %y = "prim.matmul"(%a, %b, %z) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 1>} : (tensor<2x4x3xf32>, tensor<2x3x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return %y : tensor<2x4x4xf32>
}

// A transpose of a constant is folded at compile time (the permuted values checked), so the
// conv + batch_norm fold that follows still sees a constant filter.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// CHECK-LABEL: func.func @main(
// CHECK-NOT:   "prim.transpose"
// CHECK:       "prim.constant"() {value = dense<{{\[}}[1.000000e+00, 3.000000e+00], [2.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>}
// CHECK:       "prim.matmul"
// CHECK-NOT:   "prim.transpose"
func.func @main(%x: tensor<3x2xf32>) -> tensor<3x2xf32> {
  %w = "prim.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %wt = "prim.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = "prim.matmul"(%x, %wt) {activation = "none", activation_params = array<f64>, transpose_rhs = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  return %y : tensor<3x2xf32>
}

// CHECK-LABEL: func.func @bn_after_transposed_filter(
// CHECK:       "prim.conv2d"
// CHECK-SAME:  operandSegmentSizes = array<i32: 1, 1, 1, 0>
// CHECK-NOT:   "prim.batch_norm"
// CHECK-NOT:   "prim.transpose"
func.func @bn_after_transposed_filter(%x: tensor<1x2x2x1xf32>) -> tensor<1x2x2x2xf32> {
  %w = "prim.constant"() {value = dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>} : () -> tensor<2x1x1x1xf32>
  %wk = "prim.transpose"(%w) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x1x1x1xf32>) -> tensor<2x1x1x1xf32>
  %c = "prim.conv2d"(%x, %wk) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 1 : i64, layout = "NHWC", operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x2x1xf32>, tensor<2x1x1x1xf32>) -> tensor<1x2x2x2xf32>
  %s = "prim.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %b = "prim.constant"() {value = dense<[0.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %m = "prim.constant"() {value = dense<[0.0, 0.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %v = "prim.constant"() {value = dense<[1.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %y = "prim.batch_norm"(%c, %s, %b, %m, %v) {epsilon = 0.0 : f64, layout = "NHWC"} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  return %y : tensor<1x2x2x2xf32>
}

// Depthwise convolutions (groups = C = K) get conv_depthwise; an NCHW/KCRS one is first moved to
// NHWC/RSCK (filter values re-laid out: KCRS 2x1x1x2 [[1, 2]], [[3, 4]] -> RSCK 1x2x1x2).
// RUN: openprim-opt %s -p prim-select | filecheck %s

// CHECK-LABEL: func.func @depthwise_nhwc
// CHECK:       "prim.conv2d"(%arg0, %arg1)
// CHECK-SAME:  groups = 3 : i64
// CHECK-SAME:  prim.params = {ct = {{[0-9]+}} : i64, kernel = 1 : i64, order = {{[01]}} : i64, wt = {{[0-9]+}} : i64}
// CHECK-SAME:  prim.problem = "conv2d-1x3x4x4-k3-3x3-s1x1-p1x1x1x1-d1x1-g3-NHWC-RSCK-f32-none"
// CHECK-SAME:  prim.solver = "conv_depthwise"
func.func @depthwise_nhwc(%x: tensor<1x4x4x3xf32>, %w: tensor<3x3x1x3xf32>) -> tensor<1x4x4x3xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 3, layout = "NHWC", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x4x4x3xf32>, tensor<3x3x1x3xf32>) -> tensor<1x4x4x3xf32>
  return %y : tensor<1x4x4x3xf32>
}

// CHECK-LABEL: func.func @depthwise_nchw
// CHECK-NEXT:  %[[X:.+]] = "prim.transpose"(%arg0) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:  %[[W:.+]] = "prim.constant"() {value = dense<{{\[\[\[\[}}1.000000e+00, 3.000000e+00]], {{\[\[}}2.000000e+00, 4.000000e+00]]]]> : tensor<1x2x1x2xf32>}
// CHECK-NEXT:  %[[Y:.+]] = "prim.conv2d"(%[[X]], %[[W]])
// CHECK-SAME:  filter_layout = "RSCK", groups = 2 : i64, layout = "NHWC"
// CHECK-SAME:  prim.solver = "conv_depthwise"
// CHECK-NEXT:  "prim.transpose"(%[[Y]]) {perm = array<i64: 0, 3, 1, 2>}
func.func @depthwise_nchw(%x: tensor<1x2x3x3xf32>) -> tensor<1x2x3x2xf32> {
  %w = "prim.constant"() {value = dense<[[[[1.0, 2.0]]], [[[3.0, 4.0]]]]> : tensor<2x1x1x2xf32>} : () -> tensor<2x1x1x2xf32>
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 2, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x1x1x2xf32>) -> tensor<1x2x3x2xf32>
  return %y : tensor<1x2x3x2xf32>
}

// Grouped but not depthwise (groups = 2, C = 4): the implicit GEMM, its run-time filter put in blocks of
// the group's two output channels.
// CHECK-LABEL: func.func @grouped
// CHECK:       "prim.transpose"
// CHECK-NEXT:  "prim.conv2d"
// CHECK-SAME:  filter_layout = "KRSC2k"
// CHECK-SAME:  prim.solver = "conv_implicit_gemm"
func.func @grouped(%x: tensor<1x2x2x4xf32>, %w: tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 2, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %y : tensor<1x2x2x4xf32>
}

// conv2d: NCHW/KCRS with all four operands, NHWC/RSCK with bias only, NHWC/KRSC grouped and strided;

// Parsed, verified and printed, then the printed form parsed and printed again (stable round trip).
// RUN: openprim-opt %s --verify-only | openprim-opt - --verify-only | filecheck %s

// CHECK-LABEL: func.func @conv_nchw_full
// CHECK:      "prim.conv2d"(%arg0, %arg1, %arg2, %arg3)
// CHECK-SAME: activation = "relu"
// CHECK-SAME: filter_layout = "KCRS", groups = 1 : i64, layout = "NCHW"
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 1>
// CHECK-SAME: -> tensor<1x3x4x4xf32>
func.func @conv_nchw_full(%x: tensor<1x2x4x4xf32>, %w: tensor<3x2x3x3xf32>, %b: tensor<3xf32>, %z: tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32> {
  %y = "prim.conv2d"(%x, %w, %b, %z) {activation = "relu", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>, tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  return %y : tensor<1x3x4x4xf32>
}

// CHECK-LABEL: func.func @conv_nhwc_bias
// CHECK:      "prim.conv2d"(%arg0, %arg1, %arg2)
// CHECK-SAME: activation = "clamp", activation_params = array<f64: 0.000000e+00, 6.000000e+00>
// CHECK-SAME: dilations = array<i64: 2, 2>, filter_layout = "RSCK"
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 0>
// CHECK-SAME: (tensor<1x5x5x2xf16>, tensor<3x3x2x4xf16>, tensor<4xf16>) -> tensor<1x1x1x4xf16>
func.func @conv_nhwc_bias(%x: tensor<1x5x5x2xf16>, %w: tensor<3x3x2x4xf16>, %b: tensor<4xf16>) -> tensor<1x1x1x4xf16> {
  %y = "prim.conv2d"(%x, %w, %b) {activation = "clamp", activation_params = array<f64: 0.0, 6.0>, dilations = array<i64: 2, 2>, filter_layout = "RSCK", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<1x5x5x2xf16>, tensor<3x3x2x4xf16>, tensor<4xf16>) -> tensor<1x1x1x4xf16>
  return %y : tensor<1x1x1x4xf16>
}

// CHECK-LABEL: func.func @conv_grouped_strided
// CHECK:      "prim.conv2d"(%arg0, %arg1)
// CHECK-SAME: filter_layout = "KRSC", groups = 2 : i64, layout = "NHWC"
// CHECK-SAME: padding = array<i64: 1, 0, 1, 0>, strides = array<i64: 2, 1>
// CHECK-SAME: -> tensor<2x3x4x6xbf16>
func.func @conv_grouped_strided(%x: tensor<2x6x4x4xbf16>, %w: tensor<6x3x1x2xbf16>) -> tensor<2x3x4x6xbf16> {
  %y = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KRSC", groups = 2, layout = "NHWC", padding = array<i64: 1, 0, 1, 0>, strides = array<i64: 2, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x6x4x4xbf16>, tensor<6x3x1x2xbf16>) -> tensor<2x3x4x6xbf16>
  return %y : tensor<2x3x4x6xbf16>
}

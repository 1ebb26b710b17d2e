// Epilogues (cuDNN's ConvBiasActivation): add of a per-channel constant -> bias operand,
// elementwise activation -> activation attribute; conv2d (both layouts) and matmul.
// RUN: openprim-opt %s -p prim-fuse | filecheck %s

// conv2d NCHW + add(2x1x1 constant) + relu -> one conv2d, activation = "relu", bias [0.5, -0.5].
// CHECK-LABEL: func.func @conv_bias_relu
// CHECK:      %[[B:.+]] = "prim.constant"() {value = dense<[5.000000e-01, -5.000000e-01]> : tensor<2xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.conv2d"(%arg0, %{{.+}}, %[[B]])
// CHECK-SAME: activation = "relu", activation_params = array<f64>
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 0>
// CHECK-SAME: (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
// CHECK-NEXT: return %[[Y]]
// CHECK-NOT:  prim.add
// CHECK-NOT:  prim.relu
// CHECK-LABEL: func.func @nhwc_bias_clamp
func.func @conv_bias_relu(%x: tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = "prim.constant"() {value = dense<[[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]]> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
  %b = "prim.constant"() {value = dense<[[[0.5]], [[-0.5]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "KCRS", groups = 1, layout = "NCHW", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %a = "prim.add"(%c, %b) : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %r = "prim.relu"(%a) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %r : tensor<1x2x3x3xf32>
}

// NHWC, a 1x1x1xK constant on the left of the add, clamp(0, 6) -> activation "clamp" with its parameters.
// CHECK:      %[[B:.+]] = "prim.constant"() {value = dense<[2.500000e-01, 7.500000e-01]> : tensor<2xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.conv2d"(%arg0, %{{.+}}, %[[B]])
// CHECK-SAME: activation = "clamp", activation_params = array<f64: 0.000000e+00, 6.000000e+00>
// CHECK-SAME: layout = "NHWC", operandSegmentSizes = array<i32: 1, 1, 1, 0>
// CHECK-NEXT: return %[[Y]]
func.func @nhwc_bias_clamp(%x: tensor<1x3x3x2xf32>) -> tensor<1x3x3x2xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<1x1x2x2xf32>} : () -> tensor<1x1x2x2xf32>
  %b = "prim.constant"() {value = dense<[[[[0.25, 0.75]]]]> : tensor<1x1x1x2xf32>} : () -> tensor<1x1x1x2xf32>
  %c = "prim.conv2d"(%x, %w) {activation = "none", activation_params = array<f64>, dilations = array<i64: 1, 1>, filter_layout = "RSCK", groups = 1, layout = "NHWC", padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x3x3x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x3x3x2xf32>
  %a = "prim.add"(%b, %c) : (tensor<1x1x1x2xf32>, tensor<1x3x3x2xf32>) -> tensor<1x3x3x2xf32>
  %r = "prim.clamp"(%a) {min = 0.0, max = 6.0} : (tensor<1x3x3x2xf32>) -> tensor<1x3x3x2xf32>
  return %r : tensor<1x3x3x2xf32>
}

// matmul (linear layer, rhs transposed) + bias + gelu. The bias constant is 2-d (1x4) in the input.
// CHECK-LABEL: func.func @linear_bias_gelu
// CHECK:      %[[B:.+]] = "prim.constant"() {value = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>}
// CHECK-NEXT: %[[Y:.+]] = "prim.matmul"(%arg0, %{{.+}}, %[[B]])
// CHECK-SAME: activation = "gelu", activation_params = array<f64>, operandSegmentSizes = array<i32: 1, 1, 1, 0>, transpose_rhs = 1 : i64
// CHECK-NEXT: return %[[Y]]
func.func @linear_bias_gelu(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  %w = "prim.constant"() {value = dense<1.0> : tensor<4x3xf32>} : () -> tensor<4x3xf32>
  %b = "prim.constant"() {value = dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>} : () -> tensor<1x4xf32>
  %m = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 1, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %a = "prim.add"(%m, %b) : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32>
  %r = "prim.gelu"(%a) {approximate = "none"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %r : tensor<2x4xf32>
}

// An activation with a parameter: leaky_relu(alpha = 0.125) -> activation_params = [0.125].
// CHECK-LABEL: func.func @matmul_leaky_relu
// CHECK:      %[[Y:.+]] = "prim.matmul"(%arg0, %arg1) {activation = "leaky_relu", activation_params = array<f64: 1.250000e-01>
// CHECK-NEXT: return %[[Y]]
func.func @matmul_leaky_relu(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %m = "prim.matmul"(%x, %w) {activation = "none", activation_params = array<f64>, transpose_rhs = 0, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %r = "prim.leaky_relu"(%m) {alpha = 0.125} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %r : tensor<2x4xf32>
}
